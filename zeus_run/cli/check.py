"""``zeus-run check``: validate a spec and print every resolved setting."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from zeus_run.cli._common import CheckFormat, handle_errors, out_console, setup_logging


@handle_errors
def check_command(
    spec_path: Path = typer.Argument(..., metavar="JOB.yaml", help="The job spec (YAML)."),
    fmt: CheckFormat = typer.Option(
        CheckFormat.table,
        "--format",
        "-f",
        case_sensitive=False,
        help="table: the resolved settings and the GPUs, for people; json or yaml: the resolved spec alone, "
        "for machines, on stdout.",
    ),
) -> None:
    """Validate a job spec and print the resolved settings, the learning rate per batch size, and the energy source detected.

    Exit code 2 lists every problem in the spec. An energy source the spec asks
    for but this machine lacks (`energy: {source: nvml}` without a GPU) is an
    error here too, exit code 2, as it would be for `zeus-run run`.

    Example:

        zeus-run check configs/demo.yaml

        zeus-run check job.yaml --format json | jq .batch_sizes
    """
    import yaml

    from zeus_run.energy import open_energy_source
    from zeus_run.executors import learning_rate_for
    from zeus_run.spec import load_spec

    setup_logging(quiet=True)
    spec = load_spec(spec_path)
    resolved = spec.to_dict()
    # An EnergyError (nvml asked for, none here) propagates before anything is
    # printed: exit 2 with the same message as `zeus-run run`.
    with open_energy_source(spec.energy) as source:
        if fmt is CheckFormat.json:
            print(json.dumps(resolved, indent=1))
            return
        if fmt is CheckFormat.yaml:
            print(yaml.safe_dump(resolved, sort_keys=False).rstrip())
            return
        out = out_console()
        out.print(f"[green]✓[/] {spec_path} is valid. Resolved settings:")
        out.print(yaml.safe_dump(resolved, sort_keys=False).rstrip(), markup=False)
        if spec.learning_rate is not None:
            lrs = ", ".join(f"{b}: {learning_rate_for(spec, b):.4g}" for b in spec.batch_sizes)
            out.print(f"Learning rate per batch size ({spec.lr_scaling} scaling): {lrs}", markup=False)
        # What was detected is part of the answer (stdout); warnings and errors stay on stderr.
        out.print(f"Energy source: {source.describe()}", markup=False)
        for line in gpu_report(source, spec.power_limit.enabled, spec.power_limit):
            out.print(line, markup=False)


def gpu_report(source, power_limit_enabled: bool, settings=None) -> list[str]:
    """Lines describing the detected GPUs: names, count, energy method, power-limit range and permission."""
    from zeus_run.energy import gpu_source, rapl_status
    from zeus_run.power import make_controller
    from zeus_run.spec import PowerLimitSettings

    rapl = rapl_status()
    gpus = gpu_source(source)
    if gpus is None:
        what = "an estimate" if source.estimated else f"measured by {source.name}"
        return [f"GPUs: none measured (energy is {what}; power-limit optimization is off)", rapl]
    source = gpus
    lines = [f"GPUs: {len(source.gpus)}"]
    for g in source.gpus:
        method = (
            "total energy counter" if g.has_counter else f"power sampling every {source._poll_interval * 1000:.0f} ms"
        )
        lines.append(
            f"  GPU {g.index}: {g.name}; energy: {method}; power limit range {g.min_limit_w:g}-{g.max_limit_w:g} W"
        )
    lines.append(f"Max power for the cost: {source.max_power:g} W (sum of the GPUs' maximum power limits)")
    lines.append(rapl)
    if not power_limit_enabled:
        lines.append("Power-limit optimization: disabled in the spec")
        return lines
    ctl, how = make_controller(settings or PowerLimitSettings(), source)
    via = " through zeusd" if ctl.writer == "zeusd" else ""
    if ctl.check_permission():
        lines.append(f"Power-limit optimization: limits can be set{via} ({ctl.min_limit:g}-{ctl.max_limit:g} W)")
    else:
        lines.append(f"Power-limit optimization: limits cannot be set{via}: {ctl.reason}. {how}")
    return lines
