"""Generate the documentation's reference pages from the code, so that they cannot drift.

* ``docs/spec-reference.md``: every job-spec field from the loader's schema (``zeus_run.spec``:
  the top-level keys and section keys the loader accepts, the frozen dataclasses' types and
  docstrings), each field's default as the loader resolves it (a minimal spec loaded), and an
  example that the loader accepts (checked here: an example it refuses stops the script).
* ``docs/server-api.md``: every path of the batch-size server, from its FastAPI app's ``openapi()``.

    python scripts/gen_docs.py           # write both pages
    python scripts/gen_docs.py --check   # exit 1 if either page is not what the code gives

``tests/docs/test_generated_docs.py`` runs the check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SPEC_PAGE = REPO / "docs" / "spec-reference.md"
API_PAGE = REPO / "docs" / "server-api.md"

#: The smallest spec the loader accepts; every default is read from it.
MINIMAL = {
    "name": "job",
    "command": ["{python}", "train.py", "--batch-size", "{batch_size}"],
    "batch_sizes": [32, 64, 128],
    "default_batch_size": 64,
    "target_metric": 0.9,
}

#: One example per field (dotted names). The loader must accept each one on top of `MINIMAL`.
EXAMPLES: dict[str, Any] = {
    "name": "nightly-resnet",
    "command": ["{python}", "train.py", "--batch-size", "{batch_size}", "--lr", "{learning_rate}"],
    "shell": True,
    "workdir": ".",
    "env": {"OMP_NUM_THREADS": 4},
    "batch_sizes": {"min": 32, "max": 512},
    "default_batch_size": 128,
    "learning_rate": 0.1,
    "lr_scaling": "sqrt",
    "target_metric": 0.75,
    "higher_is_better": False,
    "max_epochs": 50,
    "eta": 0.8,
    "objective": {"kind": "max-slowdown", "factor": 1.1},
    "objective.kind": "energy",
    "objective.eta": 0.3,
    "objective.factor": 1.2,
    "beta": None,
    "recurrences": None,
    "lifetime": 365,
    "max_tries": 5,
    "oom_retry_after": 10,
    "seed": 7,
    "timeout": 3600,
    "max_early_stops": 2,
    "concurrency": 2,
    "lease": 900,
    "run_dir": "/shared/runs/nightly",
    "optimizer.policy": "zeus",
    "optimizer.pruning_rounds": 1,
    "optimizer.window_size": 10,
    "optimizer.prior_mean": -100.0,
    "optimizer.prior_precision": 0.01,
    "optimizer.num_explorations": 2,
    "optimizer.revision": 1,
    "optimizer.warm_from": "runs/nightly-resnet-v100",
    "metric.source": "regex",
    "metric.regex": "val_acc=([0-9.]+)",
    "metric.name": "eval_accuracy",
    "metric.key": "val_acc",
    "stdout": "pty",
    "metric.path": "metrics.jsonl",
    "energy.source": "estimate",
    "energy.watts": 65,
    "energy.gpus": [0, 1],
    "energy.basis": "wall-time",
    "energy.include": ["gpu", "cpu", "dram"],
    "power_limit.enabled": False,
    "power_limit.step_watts": 50,
    "power_limit.warmup_iters": 5,
    "power_limit.measure_iters": 20,
    "power_limit.observer_mode": True,
    "power_limit.on_no_permission": "stop",
    "power_limit.min_window_s": 10,
    "power_limit.settle_s": 2,
    "power_limit.min_counter_updates": 40,
    "power_limit.via": "zeusd",
    "power_limit.socket": "/run/zeusd/zeusd.sock",
    "stop.grace": 600,
    "stop.term_grace": 5,
    "stop.kill_grace": 30,
    "stop.on_target": "wait",
    "executor.kind": "slurm",
    "executor.partition": "gpu",
    "executor.gpus": 2,
    "executor.time": "02:00:00",
    "executor.account": "ml-team",
    "executor.qos": "high",
    "executor.extra_args": ["--constraint=a100", "--mem=64G"],
    "executor.heartbeat_timeout": 300,
    "executor.infra_retries": 5,
    "accounting.carbon_g_per_kwh": 350,
    "accounting.price_per_kwh": 0.12,
    "accounting.currency": "EUR",
    "saving.control": {"max_share": 0.1},
    "export.mlflow": {"tracking_uri": "http://mlflow:5000", "experiment": "nightly"},
    "export.prometheus": {"push": "http://pushgateway:9091"},
    "start.by": "07:00",
    "start.within": "8h",
    "start.forecast": "persistence",
    "start.min_saving": 0.05,
}
#: Fields whose example needs another setting to be accepted.
_CONTEXT: dict[str, dict[str, Any]] = {
    "shell": {"command": "python train.py --batch-size {batch_size}"},
    "command": {"learning_rate": 0.1},
    "lr_scaling": {"learning_rate": 0.1},
    "eta": {},
    "objective.eta": {"objective": {"kind": "cost"}},
    "objective.factor": {"objective": {"kind": "max-slowdown"}},
    "metric.source": {"metric": {"regex": "val_acc=([0-9.]+)"}},
    "metric.regex": {"metric": {"source": "regex"}},
    "metric.key": {"metric": {"source": "jsonl"}},
    "metric.path": {"metric": {"source": "jsonl", "key": "val_acc"}},
    "default_batch_size": {"batch_sizes": [64, 128, 256]},
    **{f"start.{k}": {"start": {"by": "07:00"}} for k in ("forecast", "min_saving")},
    "optimizer.pruning_rounds": {"optimizer": {"policy": "zeus"}},
    "optimizer.num_explorations": {"optimizer": {"policy": "zeus"}},
    "energy.include": {"energy": {"source": "estimate"}},
    **{f"executor.{k}": {"executor": {"kind": "slurm"}} for k in ("partition", "gpus", "time", "account", "qos")},
    **{f"executor.{k}": {"executor": {"kind": "slurm"}} for k in ("extra_args", "heartbeat_timeout", "infra_retries")},
}


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _nested(dotted: str, value: Any) -> dict:
    head, _, rest = dotted.partition(".")
    return {head: _nested(rest, value) if rest else value}


def _load(doc: dict) -> Any:
    import yaml

    from zeus_run.spec import parse_spec

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return parse_spec(path.read_text(), source=path)


def _attributes(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style docstring, one entry per field."""
    doc = (cls.__doc__ or "").split("Attributes:", 1)
    if len(doc) < 2:
        return {}
    out: dict[str, str] = {}
    name = None
    for line in doc[1].splitlines():
        m = re.match(r"^ {8}(\w+): (.*)$", line)
        if m:
            name = m.group(1)
            out[name] = m.group(2).strip()
        elif name and line.startswith(" " * 12):
            out[name] += " " + line.strip()
        elif line.strip() and not line.startswith(" " * 8):
            break
    # "time: Unit: s. energy: ..." style lines are not used in these classes.
    return out


def _yaml_value(value: Any) -> str:
    return (
        json.dumps(value)
        if not isinstance(value, str)
        else (value if re.fullmatch(r"[\w./:-]+", value) else json.dumps(value))
    )


def _code(value: Any) -> str:
    text = "null" if value is None else _yaml_value(value)
    return f"`{text}`"


def spec_rows() -> list[tuple[str, str, str, str, str]]:
    """(field, type, default, example, description) of every field the loader accepts."""
    from zeus_run.objective import Objective
    from zeus_run.spec import JobSpec
    from zeus_run.spec._load import _TOP_KEYS
    from zeus_run.spec._sections import _SECTION_KEYS, _SECTIONS

    resolved = _load(MINIMAL).to_dict()
    resolved["name"] = "(the spec file's name without .yaml)"
    resolved["run_dir"] = "runs/<name>, next to the spec"
    resolved["workdir"] = "the spec file's folder"
    top_types = {f.name: str(f.type) for f in dataclasses.fields(JobSpec)}
    top_docs = _attributes(JobSpec)
    rows = []
    missing = [k for k in _TOP_KEYS if k not in EXAMPLES and k not in _SECTIONS] + [
        f"{s}.{k}" for s, keys in _SECTION_KEYS.items() for k in keys if f"{s}.{k}" not in EXAMPLES
    ]
    missing += [f"objective.{k}" for k in ("kind", "eta", "factor") if f"objective.{k}" not in EXAMPLES]
    if missing:
        raise SystemExit(f"gen_docs: no example for {', '.join(missing)}: add them to EXAMPLES")
    for key in _TOP_KEYS:
        if key in _SECTIONS:
            cls = _SECTIONS[key]
            types = {f.name: str(f.type) for f in dataclasses.fields(cls)}
            docs = _attributes(cls)
            defaults = resolved.get(key) or {}
            rows.append((f"**{key}**", "section", "", "", (cls.__doc__ or "").strip().splitlines()[0]))
            for sub in _SECTION_KEYS[key]:
                dotted = f"{key}.{sub}"
                rows.append(
                    (
                        f"`{dotted}`",
                        f"`{types.get(sub, '?')}`",
                        _code(defaults.get(sub)) if sub in defaults else "none",
                        _code(EXAMPLES[dotted]),
                        docs.get(sub, ""),
                    )
                )
            continue
        required = key in MINIMAL and key != "name"
        default = "required" if required else resolved.get(key)
        rows.append(
            (
                f"`{key}`",
                f"`{top_types.get(key, '?')}`",
                default if isinstance(default, str) and " " in default else _code(default),
                _code(EXAMPLES[key]),
                top_docs.get(key, ""),
            )
        )
        if key == "objective":
            odocs = _attributes(Objective)
            for sub in ("kind", "eta", "factor"):
                ex = EXAMPLES[f"objective.{sub}"]
                dflt = {"kind": "cost", "eta": "the top-level eta (0.5)", "factor": "required for max-slowdown"}[sub]
                rows.append(
                    (f"`objective.{sub}`", "", dflt if " " in dflt else _code(dflt), _code(ex), odocs.get(sub, ""))
                )
    return rows


def check_examples() -> None:
    """Every example loads on top of the minimal spec (with the settings it needs)."""
    from zeus_run.errors import SpecError

    bad = []
    for dotted, value in EXAMPLES.items():
        doc = _merge(MINIMAL, _CONTEXT.get(dotted, {}))
        doc = _merge(doc, _nested(dotted, value))
        if dotted == "default_batch_size":
            doc["batch_sizes"] = [64, 128, 256]
        try:
            _load(doc)
        except SpecError as exc:
            bad.append(f"{dotted}: {exc}")
    if bad:
        raise SystemExit("gen_docs: examples the loader refuses:\n" + "\n".join(bad))


def spec_page() -> str:
    check_examples()
    lines = [
        "# Job spec reference",
        "",
        "<!-- Generated by scripts/gen_docs.py from zeus_run/spec (the loader's schema); do not edit. -->",
        "",
        "Every field the loader accepts, with its type, its default (what a spec that leaves it out",
        "resolves to: `zeus-run check JOB.yaml` prints them all) and an example the loader accepts.",
        "Required: `command`, `batch_sizes`, `default_batch_size`, `target_metric`. See",
        "[The job spec](spec.md) for how the YAML is read, placeholders and `shell:`.",
        "",
        "| field | type | default | example | meaning |",
        "|---|---|---|---|---|",
    ]
    for row in spec_rows():
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in row) + " |")
    return "\n".join(lines) + "\n"


def api_page() -> str:
    import tempfile

    from zeus_run.server._app import create_app
    from zeus_run.server._jobs import JobService
    from zeus_run.server._root import ServerRoot

    with tempfile.TemporaryDirectory() as tmp:
        schema = create_app(JobService(ServerRoot(Path(tmp) / "root")), "x" * 32).app.openapi()
    lines = [
        "# Server API reference",
        "",
        "<!-- Generated by scripts/gen_docs.py from the FastAPI app's openapi(); do not edit. -->",
        "",
        f"{schema['info']['title']}: {schema['info'].get('description', '')}",
        "The server also publishes this schema at `GET /v1/openapi.json`. See [The batch-size server](server.md).",
        "",
    ]
    comps = schema.get("components", {}).get("schemas", {})

    def ref_name(s: dict) -> str:
        if "$ref" in s:
            return s["$ref"].rsplit("/", 1)[-1]
        if "anyOf" in s:
            return " or ".join(ref_name(x) for x in s["anyOf"])
        return s.get("type", "object")

    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            lines += [
                f"## `{method.upper()} {path}`",
                "",
                (op.get("description") or op.get("summary") or "").strip(),
                "",
            ]
            params = op.get("parameters", [])
            if params:
                lines += ["Parameters: " + ", ".join(f"`{p['name']}` ({p['in']})" for p in params), ""]
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                name = ref_name(body)
                lines += [f"Request body: `{name}`", ""]
                props = comps.get(name, {}).get("properties", {})
                required = set(comps.get(name, {}).get("required", []))
                if props:
                    lines += ["| field | type | required | meaning |", "|---|---|---|---|"]
                    for pname, p in props.items():
                        lines.append(
                            f"| `{pname}` | {ref_name(p)} | {'yes' if pname in required else 'no'} | "
                            f"{(p.get('description') or '').replace('|', '/')} |"
                        )
                    lines.append("")
            codes = ", ".join(
                f"{code} ({(r.get('description') or '').rstrip('.')})" for code, r in op.get("responses", {}).items()
            )
            lines += [f"Responses: {codes}", ""]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is not current; write nothing")
    args = parser.parse_args()
    stale = []
    for page, text in ((SPEC_PAGE, spec_page()), (API_PAGE, api_page())):
        if args.check:
            if not page.is_file() or page.read_text() != text:
                stale.append(str(page.relative_to(REPO)))
        else:
            page.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run: python scripts/gen_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
