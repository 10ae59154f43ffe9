#!/usr/bin/env python3
"""GPU smoke test for zeus-run's NVML code: run it on a machine with an NVIDIA GPU.

It measures a few seconds of matrix multiplications on GPU 0 (with PyTorch if
installed, else CuPy) through `zeus_run.energy.NvmlEnergy`, then, if power
limits can be set (root / CAP_SYS_ADMIN), profiles the power limits with the
same `JitProfiler` zeus-run uses (one "iteration" = one batch of matmuls) and
prints the profile and the limit the policy picks. Original limits are
restored at the end, also on Ctrl-C.

Without a GPU, NVML, or a GPU framework it says why and exits 0.

    python scripts/gpu_smoke.py [--seconds 5] [--eta 0.5] [--step 25] [--read-only]
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
        while time.monotonic() - t0 < args.seconds:
            work()
            n += 1
        dt, de = time.monotonic() - t0, src.read() - e0
        print(
            f"at the current limit: {n} iterations in {dt:.2f} s, energy {de:.1f} J, "
            f"average power {de / dt:.1f} W, {n / dt:.2f} iterations/s"
        )
        if src.invalid_windows:
            print(f"warning: {src.invalid_windows} invalid window(s) (energy counter went backwards)")

        ctl = PowerLimitController([g.gpu for g in src.gpus])
        print(f"power limits {ctl.min_limit:g}-{ctl.max_limit:g} W; to profile: {ctl.candidate_limits(args.step)}")
        if args.read_only:
            print("--read-only: no power limit or persistence mode set; the profile is skipped")
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
            )
            prof.start()
            t0, steps = time.monotonic(), 0
            while not prof.done:
                work()
                steps += 1
                now = time.monotonic() - t0
                prof.observe(steps, now, now, src.read())
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
