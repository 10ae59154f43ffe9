"""Load a YAML job spec into a validated `JobSpec`, reporting every problem at once.

The YAML is read by `zeus_run.spec._yaml` (size, depth and alias limits,
duplicate keys, YAML 1.2 numbers) before anything is built from it.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zeus_run.contract import STDOUT_MODES
from zeus_run.errors import SpecError, SpecProblem, UsageError
from zeus_run.spec._check import _REQUIRED, _whole, field_at_line
from zeus_run.spec._model import (
    DEFAULT_LEASE,
    DEFAULT_LIFETIME,
    DEFAULT_OOM_RETRY_AFTER,
    LR_SCALING_RULES,
    MAX_CONCURRENCY,
    MIN_LEASE,
    PLACEHOLDERS,
    JobSpec,
)
from zeus_run.spec._sections import _SECTIONS, Sections
from zeus_run.spec._template import _PLACEHOLDER_RE, placeholder_names
from zeus_run.spec._yaml import MAX_BYTES, YamlLimitError, load_yaml

logger = logging.getLogger(__name__)

#: Largest batch size.
MAX_BATCH_SIZE = 2**31 - 1
#: Most batch sizes in a spec (a list, or a range once expanded).
MAX_BATCH_SIZES = 1024

_TOP_KEYS = (
    "name",
    "command",
    "shell",
    "stdout",
    "workdir",
    "env",
    "batch_sizes",
    "default_batch_size",
    "learning_rate",
    "lr_scaling",
    "target_metric",
    "higher_is_better",
    "max_epochs",
    "eta",
    "objective",
    "beta",
    "recurrences",
    "lifetime",
    "max_tries",
    "oom_retry_after",
    "seed",
    "timeout",
    "max_early_stops",
    "concurrency",
    "lease",
    "run_dir",
    *_SECTIONS,
)


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a job spec file.

    Args:
        path: YAML file. Relative paths inside it (``workdir``, ``run_dir``)
            resolve against the file's directory.

    Raises:
        UsageError: The file does not exist or cannot be read.
        SpecError: The YAML is malformed or a field is invalid (all problems listed).
    """
    p = Path(path)
    if not p.is_file():
        raise UsageError(
            f"Job spec {str(p)!r} does not exist or is not a file. "
            "Pass the path of a YAML job spec, e.g. `zeus-run configs/demo.yaml`."
        )
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read job spec {str(p)!r}: {exc}. Check its permissions and encoding.") from exc
    if len(raw) > MAX_BYTES:
        raise SpecError(
            str(p),
            [
                SpecProblem(
                    "(file)",
                    None,
                    f"is larger than {MAX_BYTES:,} bytes; a job spec is a page of settings",
                    "Pass the job spec, not a data file",
                )
            ],
        )
    return parse_spec(text, source=p)


def parse_spec(text: str, source: Path | None = None) -> JobSpec:
    """Validate spec YAML text. See `load_spec`."""
    label = str(source) if source else "<spec>"
    try:
        doc = load_yaml(text)
    except YamlLimitError as exc:
        # A syntax error's line may be past the real mistake; a refused value's line is its own.
        syntax = exc.why.startswith("not valid YAML")
        field, value = ("(yaml)", None) if syntax else field_at_line(text, exc.line)
        if exc.field is not None and (field in ("(yaml)", "(top level)") or not field.startswith(exc.field)):
            field = exc.field  # the top-level field whose value breaks the limit
        raise SpecError(label, [SpecProblem(field, value, exc.why, "Fix the file at that line", exc.line)]) from None
    if not isinstance(doc.data, dict):
        raise SpecError(
            label,
            [
                SpecProblem(
                    "(top level)",
                    None,
                    "the spec must be a YAML mapping of settings",
                    "Start from configs/demo.yaml",
                    1,
                )
            ],
        )
    base = source.parent.resolve() if source else Path.cwd()
    return _Validator(doc, base, label, source).build()


class _Validator(Sections):
    """The job schema: builds a `JobSpec` from the raw mapping, collecting problems instead of raising."""

    def build(self) -> JobSpec:
        d = self.data
        # A run directory's spec.yaml names the file it was resolved from (`JobSpec.source`): read as it is written.
        stored = d.get("source") is None or str(d["source"]).endswith((".yaml", ".yml"))
        self.unknown_keys(d, (*_TOP_KEYS, "source") if stored else _TOP_KEYS, "")
        g = self.get
        default_name = self.source.stem if self.source else "job"
        name = g(d, "name", "", default_name, self.str_())
        if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(name)):
            self.problem(
                "name",
                name,
                "must be letters, digits, '.', '_' or '-' (it names a directory)",
                "Rename the job, e.g. 'cifar-nightly'",
            )
            name = None
        shell = g(d, "shell", "", False, self.bool_())
        command = self.command(d.get("command"), bool(shell))
        stdout = g(
            d,
            "stdout",
            "",
            "pipe",
            self.choice(
                STDOUT_MODES,
                fix="pty runs the command on a pseudo-terminal, for a program that holds its output in a buffer "
                "when it is not on a terminal; pipe (the default) otherwise",
            ),
        )
        batch_sizes = self.batch_sizes(d.get("batch_sizes"))
        default_bs = g(
            d,
            "default_batch_size",
            "",
            _REQUIRED,
            self.int_(1, MAX_BATCH_SIZE, fix="Set it to the batch size the job normally uses"),
        )
        if batch_sizes and default_bs is not None and default_bs not in batch_sizes:
            self.problem(
                "default_batch_size",
                default_bs,
                f"is not in batch_sizes {list(batch_sizes)}",
                "Add it to batch_sizes or pick one of them",
            )
        learning_rate = g(d, "learning_rate", "", None, self.float_(0.0, strict_lo=True))
        lr_scaling = g(d, "lr_scaling", "", "none", self.choice(LR_SCALING_RULES))
        if lr_scaling not in (None, "none") and learning_rate is None and "lr_scaling" in d:
            self.problem(
                "lr_scaling", lr_scaling, "needs learning_rate (the rate at default_batch_size)", "Set learning_rate"
            )
        target = g(
            d, "target_metric", "", _REQUIRED, self.float_(fix="Set the validation metric that counts as converged")
        )
        higher = g(d, "higher_is_better", "", True, self.bool_())
        max_epochs = g(d, "max_epochs", "", 100, self.int_(1))
        eta = g(d, "eta", "", 0.5, self.float_(0.0, 1.0, fix="eta weighs energy against time; pick a value in [0, 1]"))
        objective = self.objective(d, eta)
        if objective is not None:
            eta = objective.cost_eta
        beta = self.beta(d)
        # null: open-ended (a scheduler triggers each recurrence with `run --next`).
        recurrences = (
            None if "recurrences" in d and d["recurrences"] is None else g(d, "recurrences", "", 20, self.int_(1))
        )
        lifetime = g(
            d,
            "lifetime",
            "",
            DEFAULT_LIFETIME,
            self.int_(1, fix="The recurrences an open-ended job is expected to run, e.g. 100"),
        )
        max_tries = g(d, "max_tries", "", 20, self.int_(1))
        seed = g(d, "seed", "", 123456, self.int_(0))
        timeout = g(
            d, "timeout", "", None, self.float_(0.0, strict_lo=True, fix="Seconds per trial, or null for no limit")
        )
        workdir = self.path(d, "workdir", Path("."))
        run_dir = self.path(d, "run_dir", Path("runs") / str(name or default_name))
        env = self.env(d.get("env"))

        opt = self.section("optimizer", self.optimizer)
        metric = self.section("metric", self.metric)
        energy = self.section("energy", self.energy)
        power = self.section("power_limit", self.power_limit)
        stop = self.section("stop", self.stop)
        executor = self.section("executor", self.executor)
        accounting = self.section("accounting", self.accounting)
        saving = self.section("saving", self.saving)
        export = self.section("export", self.export)
        start = self.section("start", self.start)
        concurrency = g(
            d,
            "concurrency",
            "",
            1,
            self.int_(1, MAX_CONCURRENCY, fix="Recurrences in flight at once; 1 runs them one after another"),
        )
        lease = g(
            d,
            "lease",
            "",
            DEFAULT_LEASE,
            self.float_(
                MIN_LEASE,
                fix=f"Seconds an ask lives without a heartbeat or a tell (at least {MIN_LEASE:g}; default {DEFAULT_LEASE:g})",
            ),
        )
        max_early_stops = (
            None
            if "max_early_stops" in d and d["max_early_stops"] is None
            else g(
                d, "max_early_stops", "", 3, self.int_(1, fix="Early stops before the fallback try, or null for never")
            )
        )
        oom_retry_after = (
            None
            if "oom_retry_after" in d and d["oom_retry_after"] is None
            else g(
                d,
                "oom_retry_after",
                "",
                DEFAULT_OOM_RETRY_AFTER,
                self.int_(
                    1,
                    fix="Recurrences to reach the target before a batch size that ran out of memory is tried again, "
                    f"or null for never (default {DEFAULT_OOM_RETRY_AFTER})",
                ),
            )
        )

        self.placeholders(command, env, learning_rate, metric.path)
        if workdir is not None and "workdir" in d and not workdir.is_dir():
            self.problem(
                "workdir",
                d["workdir"],
                f"directory {str(workdir)!r} does not exist",
                "Create it or fix the path (relative paths start at the spec file's folder)",
            )

        if self.problems or workdir is None or run_dir is None:
            raise SpecError(self.label, self.problems)
        return JobSpec(
            name=name,
            command=command,
            shell=shell,
            stdout=stdout,
            workdir=workdir,
            env=env,
            batch_sizes=batch_sizes,
            default_batch_size=default_bs,
            learning_rate=learning_rate,
            lr_scaling=lr_scaling,
            target_metric=target,
            higher_is_better=higher,
            max_epochs=max_epochs,
            eta=eta,
            objective=objective,
            beta=beta,
            recurrences=recurrences,
            lifetime=lifetime,
            max_tries=max_tries,
            oom_retry_after=oom_retry_after,
            seed=seed,
            timeout=timeout,
            run_dir=run_dir,
            optimizer=opt,
            metric=metric,
            energy=energy,
            power_limit=power,
            stop=stop,
            concurrency=concurrency,
            lease=lease,
            executor=executor,
            accounting=accounting,
            saving=saving,
            export=export,
            start=start,
            max_early_stops=max_early_stops,
            source=self.source.resolve() if self.source else None,
        )

    def command(self, raw: Any, shell: bool) -> tuple[str, ...]:
        fix = 'Write it as a list, e.g. ["python", "train.py", "--batch-size", "{batch_size}"]'
        if raw is None:
            self.problem("command", None, "is required: the training command to launch", fix)
            return ()
        if isinstance(raw, str):
            if shell:
                return (raw,) if raw.strip() else self._empty_command(raw, fix)
            try:
                argv = tuple(shlex.split(raw))
            except ValueError as exc:
                self.problem("command", raw, f"cannot be split into arguments ({exc})", fix)
                return ()
            return argv or self._empty_command(raw, fix)
        if (
            isinstance(raw, list)
            and raw
            and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in raw)
        ):
            if shell and len(raw) != 1:
                self.problem("command", raw, "with shell: true must be a single string", "Join it into one string")
                return ()
            return tuple(str(a) for a in raw)
        self.problem("command", raw, "must be a non-empty list of strings or one string", fix)
        return ()

    def _empty_command(self, raw: Any, fix: str) -> tuple[str, ...]:
        self.problem("command", raw, "is empty", fix)
        return ()

    def batch_sizes(self, raw: Any) -> tuple[int, ...]:
        fix = "Write a list such as [16, 32, 64] or a range {min: 16, max: 1024} (powers of two) or {min, max, step}"
        if raw is None:
            self.problem("batch_sizes", None, "is required", fix)
            return ()
        if isinstance(raw, dict):
            return self.batch_size_range(raw, fix)
        if isinstance(raw, list):
            if not raw:
                self.problem("batch_sizes", raw, "is empty: the optimizer needs at least one batch size", fix)
                return ()
            if len(raw) > MAX_BATCH_SIZES:
                self.problem("batch_sizes", raw, f"lists {len(raw)} batch sizes; at most {MAX_BATCH_SIZES}", fix)
                return ()
            bad = [v for v in raw if not _whole(v, 1, MAX_BATCH_SIZE)]
            if bad:
                self.problem(
                    "batch_sizes", raw, f"has entries that are not whole numbers in [1, {MAX_BATCH_SIZE}]: {bad}", fix
                )
                return ()
            if len(set(raw)) != len(raw):
                dups = sorted({v for v in raw if raw.count(v) > 1})
                self.problem("batch_sizes", raw, f"lists {dups} more than once", "Remove the duplicates")
                return ()
            return tuple(sorted(raw))
        self.problem("batch_sizes", raw, "must be a list or a {min, max} range", fix)
        return ()

    def batch_size_range(self, raw: dict, fix: str) -> tuple[int, ...]:
        """``{min, max}`` (powers of two) or ``{min, max, step}``, checked before anything is built."""
        self.unknown_keys(raw, ("min", "max", "step"), "batch_sizes.")
        lo, hi, step = raw.get("min"), raw.get("max"), raw.get("step")
        ok = True
        for key, v in (("min", lo), ("max", hi)):
            if not _whole(v, 1, MAX_BATCH_SIZE):
                self.problem(f"batch_sizes.{key}", v, f"must be a whole number in [1, {MAX_BATCH_SIZE}]", fix)
                ok = False
        if step is not None and not _whole(step, 1, MAX_BATCH_SIZE):
            self.problem("batch_sizes.step", step, "must be a positive whole number", "Omit it for powers of two")
            ok = False
        if not ok or not isinstance(lo, int) or not isinstance(hi, int):
            return ()
        if lo > hi:
            self.problem("batch_sizes", raw, "min is larger than max", "Swap them")
            return ()
        if isinstance(step, int):
            count = (hi - lo) // step + 1
            if count > MAX_BATCH_SIZES:
                self.problem(
                    "batch_sizes",
                    raw,
                    f"the range holds {count:,} batch sizes; at most {MAX_BATCH_SIZES}",
                    "Use a larger step or a narrower range",
                )
                return ()
            return tuple(range(lo, hi + 1, step))
        values = tuple(1 << k for k in range(hi.bit_length()) if lo <= (1 << k) <= hi)
        if not values:
            self.problem("batch_sizes", raw, "the range holds no batch size (no power of two between min and max)", fix)
        elif (values[0], values[-1]) != (lo, hi):
            logger.warning(
                "batch_sizes {min: %d, max: %d} is a range of powers of two, so it holds %s (%d and %d are not both "
                "powers of two); write min and max as powers of two, add a step, or list the batch sizes",
                lo,
                hi,
                ", ".join(map(str, values)),
                lo,
                hi,
            )
        return values

    def beta(self, d: Mapping) -> float | None:
        if "beta" not in d or d["beta"] is None:
            return None if "beta" in d else 2.0
        v = d["beta"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            self.problem(
                "beta", v, "must be a number greater than 0", "Use e.g. 2.0, or null to disable early stopping"
            )
            return None
        return float(v)

    def path(self, d: Mapping, key: str, default: Path) -> Path | None:
        raw = d.get(key)
        if raw is None:
            return (self.base / default).resolve()
        if not isinstance(raw, str) or not raw.strip():
            self.problem(key, raw, "must be a path string")
            return None
        try:
            p = Path(raw).expanduser()
            return (p if p.is_absolute() else self.base / p).resolve()
        except (ValueError, OSError, RuntimeError) as exc:  # a NUL byte, a symlink loop, an unknown ~user
            self.problem(key, raw, f"is not a usable path ({exc})")
            return None

    def env(self, raw: Any) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.problem("env", raw, "must be a mapping of NAME: value", "e.g. env: {OMP_NUM_THREADS: 1}")
            return {}
        out = {}
        for k, v in raw.items():
            if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                self.problem(f"env.{k}", v, "is not a valid environment variable name", "Use letters, digits and '_'")
            elif isinstance(v, (dict, list)) or v is None:
                self.problem(f"env.{k}", v, "must be a string or number")
            else:
                # The text the user wrote: `N: 010` is "010", not 8 or 10; `X: 1e-3` stays "1e-3".
                out[k] = self.text.get(f"env.{k}", str(v).lower() if isinstance(v, bool) else str(v))
        return out

    def placeholders(
        self, command: tuple[str, ...], env: Mapping[str, str], learning_rate: float | None, metric_path: str | None
    ) -> None:
        places = [("command", a) for a in command] + [(f"env.{k}", v) for k, v in env.items()]
        if metric_path is not None:
            places.append(("metric.path", metric_path))
        for field, text in places:
            if "{" in _PLACEHOLDER_RE.sub("", text) or "}" in _PLACEHOLDER_RE.sub("", text):
                self.problem(
                    field,
                    text,
                    "has an unmatched { or }",
                    "Close the placeholder, e.g. {batch_size}, or write {{ and }} for literal braces",
                )
                continue
            for name in placeholder_names(text):
                if name not in PLACEHOLDERS:
                    close = difflib.get_close_matches(name, PLACEHOLDERS, n=1)
                    hint = f"Did you mean {{{close[0]}}}? " if close else ""
                    self.problem(
                        field,
                        text,
                        f"uses unknown placeholder {{{name}}}",
                        f"{hint}Known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}; write {{{{ and }}}} for literal braces",
                    )
                elif name == "learning_rate" and learning_rate is None:
                    self.problem(
                        field,
                        text,
                        "uses {learning_rate} but learning_rate is not set",
                        "Set learning_rate to the rate of default_batch_size",
                    )
