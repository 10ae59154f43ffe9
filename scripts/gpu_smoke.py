#!/usr/bin/env python3
"""GPU smoke test for zeus-run's NVML code: run it on a machine with an NVIDIA GPU.

It measures a few seconds of matrix multiplications on GPU 0 (with PyTorch if
installed, else CuPy) through `zeus_run.energy.NvmlEnergy`, then, if power
limits can be set (root / CAP_SYS_ADMIN), profiles the power limits with the
same `JitProfiler` zeus-run uses (one "iteration" = one batch of matmuls) and
prints the profile and the limit the policy picks. Original limits are
restored at the end, also on Ctrl-C.

It also counts how often the GPU's energy counter changed while it measured (a
profiling window needs `MIN_COUNTER_UPDATES` changes). With ``--read-only`` it sets
nothing: it measures ``--windows`` profiling windows at the current, unchanged limit,
as the profiler measures each limit, and prints how much they differ: limits whose
costs differ by less than that cannot be told apart on this GPU.

Without a GPU, NVML, or a GPU framework it says why and exits 0.

    python scripts/gpu_smoke.py [--seconds 5] [--eta 0.5] [--step 25] [--read-only [--windows 3]]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _workload():
    """A function running one batch of matmuls on GPU 0 and waiting for it, or None and why not."""
    try:
        import torch

        if torch.cuda.is_available():
            a = torch.randn(4096, 4096, device="cuda")
            b = torch.randn(4096, 4096, device="cuda")

            def run_torch() -> None:
                for _ in range(8):
                    a @ b
                torch.cuda.synchronize()

            return run_torch, "PyTorch"
    except ImportError:
        pass
    try:
        import cupy

        a = cupy.random.rand(4096, 4096, dtype=cupy.float32)
        b = cupy.random.rand(4096, 4096, dtype=cupy.float32)

        def run_cupy() -> None:
            for _ in range(8):
                a @ b
            cupy.cuda.Device(0).synchronize()

        return run_cupy, "CuPy"
    except Exception:  # ImportError or no CUDA device
        pass
    return None, "neither PyTorch with CUDA nor CuPy is available"


def _cadence(changes: int, reads: int, seconds: float) -> str:
    """How often the energy counter changed, from ``changes`` among ``reads`` reads over ``seconds``."""
    from zeus_run.power._profiler import MIN_COUNTER_UPDATES

    if changes == 0:
        return f"energy counter: no change in {reads} reads over {seconds:.2f} s: profiling could not measure a limit"
    every = f"about every {seconds / changes * 1000:.3g} ms"
    if changes >= reads:
        every = f"at every read (every {seconds / reads * 1000:.3g} ms or faster)"
    return (
        f"energy counter: {changes} changes in {reads} reads over {seconds:.2f} s, {every}; "
        f"a profiling window needs {MIN_COUNTER_UPDATES} of them"
    )


def _drive(prof, work, src) -> None:
    """Run ``work`` (one iteration) until the profiler is done, feeding it each iteration's reading."""
    prof.start()
    t0, steps = time.monotonic(), 0
    while not prof.done:
        work()
        steps += 1
        now = time.monotonic() - t0
        prof.observe(steps, now, now, src.read())


def _dry_windows(src, work, ctl, count: int, window: float | None, settle: float | None) -> None:
    """Measure ``count`` profiling windows at the GPU's current limit, setting nothing, and print their spread."""
    from zeus_run.power import JitProfiler
    from zeus_run.power._profiler import DEFAULT_MIN_WINDOW_S, DEFAULT_SETTLE_S, MIN_COUNTER_UPDATES

    limit = ctl.gpus[0].original_mw / 1000.0
    window = DEFAULT_MIN_WINDOW_S if window is None else window
    settle = DEFAULT_SETTLE_S if settle is None else settle
    print(
        f"{count} profiling window(s) at the current limit, {limit:g} W, unchanged: each as the profiler measures "
        f"a limit ({settle:g} s to settle, then at least {window:g} s and {MIN_COUNTER_UPDATES} counter changes)"
    )
    print(f"{'window':>8} {'avg W':>8} {'iter/s':>8} {'window s':>9} {'updates':>8}")
    rows = []
    for i in range(count):
        prof = JitProfiler(
            [limit],
            lambda p: limit,
            lambda w: True,
            warmup_iters=2,
            measure_iters=5,
            min_window_s=window,
            settle_s=settle,
        )
        _drive(prof, work, src)
        if not prof.profile:
            print(f"{i + 1:8d} no measurement (the counter did not advance)")
            continue
        m = prof.profile[0]
        rows.append(m)
        print(f"{i + 1:8d} {m.avg_power:8.1f} {m.throughput:8.3f} {m.window_s or 0:9.2f} {m.samples or 0:8d}")
    if len(rows) >= 2:

        def spread(xs: list[float]) -> float:
            return (max(xs) - min(xs)) / (sum(xs) / len(xs))

        print(
            f"windows at one limit differ by {spread([m.avg_power for m in rows]):.1%} in power and "
            f"{spread([m.throughput for m in rows]):.1%} in throughput: limits whose costs differ by less "
            "than that are not told apart on this GPU"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="measurement time (unit: s)")
    ap.add_argument("--eta", type=float, default=0.5)
    ap.add_argument("--step", type=float, default=25.0, help="power-limit step (unit: W)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up iterations per limit")
    ap.add_argument("--measure", type=int, default=20, help="measured iterations per limit")
    ap.add_argument(
        "--read-only",
        action="store_true",
        help="measure and read the power-limit range only: set no power limit and no persistence mode "
        "(for a machine whose GPU settings must stay as they are)",
    )
    ap.add_argument(
        "--windows",
        type=int,
        default=3,
        help="with --read-only: profiling windows to measure at the current, unchanged limit (0: none)",
    )
    ap.add_argument(
        "--window", type=float, default=None, help="shortest window per limit (unit: s; default: the profiler's)"
    )
    ap.add_argument(
        "--settle", type=float, default=None, help="wait after setting a limit (unit: s; default: the profiler's)"
    )
    args = ap.parse_args()

    from zeus_run.energy import NvmlEnergy
    from zeus_run.errors import EnergyError
    from zeus_run.optimizer.power_limit import best_power_limit
    from zeus_run.power import HOW_TO_ENABLE, JitProfiler, PowerLimitController

    try:
        src = NvmlEnergy(["0"])
    except EnergyError as exc:
        print(f"SKIP: {exc}")
        return 0
    with src:
        print(src.describe())
        work, framework = _workload()
        if work is None:
            print(f"SKIP: {framework}; install torch (CUDA) or cupy to run the workload")
            return 0
        print(f"workload: 8 x (4096x4096 @ 4096x4096) fp32 per iteration with {framework}")
        work()  # compile/warm up
        e0, t0, n = src.read(), time.monotonic(), 0
        last, changes = e0, 0
        while time.monotonic() - t0 < args.seconds:
            work()
            n += 1
            e = src.read()
            changes, last = changes + (e != last), e
        dt, de = time.monotonic() - t0, src.read() - e0
        print(
            f"at the current limit: {n} iterations in {dt:.2f} s, energy {de:.1f} J, "
            f"average power {de / dt:.1f} W, {n / dt:.2f} iterations/s"
        )
        print(_cadence(changes, n, dt))
        if src.invalid_windows:
            print(f"warning: {src.invalid_windows} invalid window(s) (energy counter went backwards)")

        ctl = PowerLimitController([g.gpu for g in src.gpus])
        print(f"power limits {ctl.min_limit:g}-{ctl.max_limit:g} W; to profile: {ctl.candidate_limits(args.step)}")
        if args.read_only:
            print("--read-only: no power limit or persistence mode set; the profile is skipped")
            if args.windows > 0:
                _dry_windows(src, work, ctl, args.windows, args.window, args.settle)
            return 0
        if not ctl.check_permission():
            print(f"power limits cannot be set: {ctl.reason}. {HOW_TO_ENABLE}")
            return 0
        try:
            prof = JitProfiler(
                ctl.candidate_limits(args.step),
                lambda p: best_power_limit(p, args.eta, src.max_power),
                ctl.set,
                args.warmup,
                args.measure,
                **({} if args.window is None else {"min_window_s": args.window}),
                **({} if args.settle is None else {"settle_s": args.settle}),
            )
            _drive(prof, work, src)
            print(f"{'limit W':>8} {'avg W':>8} {'iter/s':>8} {'window s':>9} {'updates':>8}")
            for m in prof.profile:
                print(
                    f"{m.power_limit:8g} {m.avg_power:8.1f} {m.throughput:8.3f} {m.window_s or 0:9.2f} {m.samples or 0:8d}"
                )
            print(f"picked {prof.chosen} W for eta={args.eta} (max power {src.max_power:g} W)")
        finally:
            ctl.restore()
            print("original power limit and persistence mode restored")
    return 0


if __name__ == "__main__":
    sys.exit(main())
