#!/usr/bin/env python3
"""Benchmark ``zeus-run serve``: throughput and latency of ask and report, and the server's memory.

Starts the server on loopback (a temporary root, a free port) and drives it
with N concurrent clients (N = 1, 8, 32; each a process with the stdlib client
`zeus_run.remote`, one kept-alive connection). Each client runs trials of a
trivial job: ask, two epoch reports (the second reaches the target, so the
server says stop; ``--epochs E``: E reports), finish. Prints, per N, requests per second, reports per
second and p50/p99 latency of ask and of report as the client sees them.
Then it runs 10,000 trials in all (8 clients) and prints the server's memory
(PSS: a forked worker's shared pages count once) every 1,000 trials: it should stay flat, apart from what one job's fold
needs.

Goals on the project's 2-core machine: report p99 under 20 ms at 8 clients; at
least 500 reports per second; memory flat. ``--workers N`` runs the server
with N processes (memory then counts them all).

Run:  python scripts/bench_server.py                  (about two minutes)
      python scripts/bench_server.py --levels 1,8 --trials-per-level 200 --memory-trials 2000

``--versus-zeus`` runs the same workload against Zeus 0.16's own server
(`scripts/bench_zeus.py`: its venv, made as ``.venv-zeus-bso`` if missing,
its SQLite tables, the shared client loop), alternating which server goes
first, for each of ``--levels`` and ``--epochs-list``, ``--runs`` times; it
prints each run, the median and spread per level, and disk per trial:

      python scripts/bench_server.py --versus-zeus --runs 5
      python scripts/bench_server.py --versus-zeus --runs 5 --workers 2
      python scripts/bench_server.py --versus-zeus --runs 3 --hogs 2   (beside two CPU hogs)

The goal (issue 42): in every run, at every level, zeus-run serves at least 2x Zeus's requests per second and
no percentile (ask and report, p50 and p99) is slower than Zeus's; the last lines say, run by run, where it
holds and where not. zeus-run's clients use a job's own token (as a team would), not the operator's.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts.bench_zeus import DEFAULT_VENV, ZEUS_PACKAGES, Driver, disk_bytes, make_venv, start_zeus  # noqa: E402
from zeus_run.remote import ServerClient  # noqa: E402

SPEC = """
name: {name}
command: ["true"]
batch_sizes: [8, 16, 32]
default_batch_size: 16
target_metric: 0.9
max_epochs: {max_epochs}
recurrences: null
seed: 1
energy: {{source: estimate, watts: 100, basis: wall-time}}
"""


def start_server(root: Path, workers: int = 1) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "zeus_run", "serve", "--root", str(root), "--port", "0", "--workers", str(workers)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
            return proc, m.group(1)
    raise SystemExit(f"the server did not start (exit {proc.wait()})")


def rss_mib(pid: int) -> float:
    """Memory of the server: the proportional set size (PSS) of its process and its worker processes
    (``--workers``), so pages a forked worker shares with the server count once; RSS where there is no PSS."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(x) for x in f.read().split()]
    except OSError:
        children = []
    total = 0.0
    for p in [pid, *children]:
        total += _kib(f"/proc/{p}/smaps_rollup", "Pss:") or _kib(f"/proc/{p}/status", "VmRSS:") or 0.0
    return total / 1024


def _kib(path: str, key: str) -> float | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def client_loop(url: str, token: str, job: str, trials: int, out: mp.Queue, epochs: int = 2) -> None:
    """One client: ``trials`` trials of ``job``, each reaching the target at epoch ``epochs``; puts (ask latencies,
    report latencies, requests) on ``out``."""
    client = ServerClient(url, token)
    asks: list[float] = []
    reports: list[float] = []
    requests = 0
    for _ in range(trials):
        t = time.perf_counter()
        decision = client.ask(job)
        asks.append(time.perf_counter() - t)
        tok = decision["token"]
        requests += 2  # the ask and the finish
        for epoch in range(1, epochs + 1):
            metric = 0.95 if epoch == epochs else 0.5
            t = time.perf_counter()
            answer = client.report(job, tok, epoch, metric, 0.01 * epoch, None)
            reports.append(time.perf_counter() - t)
            requests += 1
            if answer["stop"]:
                break
        client.finish(job, tok, time_s=0.02)
    out.put((asks, reports, requests))


def driver_loop(kind: str, url: str, token: str, job: str, trials: int, out: mp.Queue, epochs: int = 2) -> None:
    """`client_loop` with `bench_zeus.Driver` (the same client code for zeus-run's API and Zeus's)."""
    client = Driver(kind, url, token)
    asks: list[float] = []
    reports: list[float] = []
    requests = 0
    for _ in range(trials):
        t = time.perf_counter()
        trial = client.ask(job)
        asks.append(time.perf_counter() - t)
        requests += 2  # the ask and the end
        for epoch in range(1, epochs + 1):
            t = time.perf_counter()
            stop = client.report(trial, epoch, 0.95 if epoch == epochs else 0.5)
            reports.append(time.perf_counter() - t)
            requests += 1
            if stop:
                break
        client.end(trial, epochs)
    out.put((asks, reports, requests))


def run_level(
    url: str,
    token: str | dict[str, str],
    jobs: list[str],
    clients: int,
    trials_each: int,
    epochs: int = 2,
    kind: str | None = None,
) -> dict[str, float]:
    """``clients`` processes, each running ``trials_each`` trials of its job (``kind``: with `bench_zeus.Driver`);
    ``token``: one for every job, or each job's own."""
    out: mp.Queue = mp.Queue()
    procs = [
        mp.Process(
            target=client_loop if kind is None else driver_loop,
            args=(
                *(() if kind is None else (kind,)),
                url,
                token if isinstance(token, str) else token[jobs[i % len(jobs)]],
                jobs[i % len(jobs)],
                trials_each,
                out,
                epochs,
            ),
        )
        for i in range(clients)
    ]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results = []
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=1.0))
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed:  # e.g. Zeus's SQLite server answering 500 "database is locked" on a loaded machine
                for p in procs:
                    p.terminate()
                raise SystemExit(
                    f"{len(failed)} client(s) failed (exit {failed[0]}; the traceback above says why)"
                ) from None
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    asks = sorted(x for r in results for x in r[0])
    reports = sorted(x for r in results for x in r[1])
    requests = sum(r[2] for r in results)
    return {
        "clients": clients,
        "trials": len(asks),
        "req_s": requests / wall,
        "reports_s": len(reports) / wall,
        "ask_p50": _q(asks, 0.5),
        "ask_p99": _q(asks, 0.99),
        "report_p50": _q(reports, 0.5),
        "report_p99": _q(reports, 0.99),
    }


def _q(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,8,32", help="client counts (default 1,8,32)")
    ap.add_argument("--trials-per-level", type=int, default=640, help="trials per level, split among the clients")
    ap.add_argument("--shared-job", action="store_true", help="all clients run one job (default: a job each)")
    ap.add_argument("--memory-trials", type=int, default=10_000, help="trials of the memory run (8 clients)")
    ap.add_argument("--workers", type=int, default=1, help="the server's --workers (default 1)")
    ap.add_argument(
        "--epochs",
        type=int,
        default=2,
        help="epoch reports per trial (default 2: the target is reached at the second; a trial that trains "
        "longer reports more often per ask and tell)",
    )
    ap.add_argument(
        "--versus-zeus",
        action="store_true",
        help="side by side with Zeus 0.16's own batch-size server, alternating, for each of --levels and "
        "--epochs-list (no memory run)",
    )
    ap.add_argument("--epochs-list", default="2,10", help="--versus-zeus: epochs per trial to run (default 2,10)")
    ap.add_argument("--runs", type=int, default=1, help="--versus-zeus: rounds; the order alternates (default 1)")
    ap.add_argument(
        "--hogs", type=int, default=0, help="busy-loop processes beside the benchmark, for a loaded machine (default 0)"
    )
    ap.add_argument(
        "--zeus-python",
        type=Path,
        default=None,
        help=f"--versus-zeus: python of a venv with {' '.join(ZEUS_PACKAGES)} (default: {DEFAULT_VENV.name}/bin/python, "
        "made if missing)",
    )
    args = ap.parse_args()
    mp.set_start_method("fork")
    hogs = [mp.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    try:
        if args.versus_zeus:
            versus(args)
            return
        alone(args)
    finally:
        for h in hogs:
            h.terminate()
            h.join()


def _hog() -> None:
    """A CPU hog: spins until terminated."""
    while True:
        pass


def alone(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="zeus-bench-server-") as tmp:
        root = Path(tmp) / "root"
        proc, url = start_server(root, args.workers)
        try:
            token = (root / ".serve.token").read_text().strip()
            client = ServerClient(url, token)
            levels = [int(x) for x in args.levels.split(",")]
            print(
                f"zeus-run serve --workers {args.workers} on {url}; {os.cpu_count()} CPUs; "
                f"each trial: ask, {args.epochs} reports, finish"
            )
            print("clients  trials   req/s  reports/s  ask p50  ask p99  report p50  report p99   (ms)")
            for n in levels:
                jobs = [f"bench-n{n}"] if args.shared_job else [f"bench-n{n}-c{i}" for i in range(n)]
                for job in jobs:
                    client.register(job, SPEC.format(name=job, max_epochs=args.epochs + 1))
                r = run_level(url, token, jobs, n, max(1, args.trials_per_level // n), args.epochs)
                print(
                    f"{r['clients']:7d} {r['trials']:7d} {r['req_s']:7.0f} {r['reports_s']:10.0f} "
                    f"{r['ask_p50']:8.1f} {r['ask_p99']:8.1f} {r['report_p50']:11.1f} {r['report_p99']:11.1f}"
                )
            print(f"server memory over {args.memory_trials:,} trials (8 clients, a job each):")
            jobs = [f"bench-mem-c{i}" for i in range(8)]
            for job in jobs:
                client.register(job, SPEC.format(name=job, max_epochs=args.epochs + 1))
            step = max(8, args.memory_trials // 10)
            done = 0
            rss = [rss_mib(proc.pid)]
            print(f"  after {done:6,d} trials: PSS {rss[-1]:6.1f} MiB")
            while done < args.memory_trials:
                run_level(url, token, jobs, 8, step // 8, args.epochs)
                done += 8 * (step // 8)
                rss.append(rss_mib(proc.pid))
                print(f"  after {done:6,d} trials: PSS {rss[-1]:6.1f} MiB")
            half = rss[len(rss) // 2 :]
            print(
                f"PSS growth over the second half: {half[-1] - half[0]:+.1f} MiB (median {statistics.median(rss):.1f})"
            )
        finally:
            proc.terminate()
            proc.wait(30)


ROW = "{:<9} {:>6} {:>7} {:>7} {:>7} {:>9} {:>8} {:>8} {:>10} {:>10}"


def versus(args: argparse.Namespace) -> None:
    """zeus-run and Zeus 0.16's server side by side: the same jobs and clients, alternating which goes first."""
    levels = [int(x) for x in args.levels.split(",")]
    epochs_list = [int(x) for x in args.epochs_list.split(",")]
    python = args.zeus_python or make_venv()
    results: dict[tuple[str, int, int], list[dict[str, float]]] = {}
    trials = {"zeus-run": 0, "zeus": 0}
    with tempfile.TemporaryDirectory(prefix="zeus-bench-versus-") as tmp:
        root, db = Path(tmp) / "root", Path(tmp) / "zeus" / "bso.db"
        db.parent.mkdir()
        zr_proc, zr_url = start_server(root, args.workers)
        zeus_proc, zeus_url = start_zeus(python, db)
        try:
            operator = (root / ".serve.token").read_text().strip()
            servers = {"zeus-run": ("v1", zr_url, operator), "zeus": ("zeus", zeus_url, "")}
            wheres = {"zeus-run": root, "zeus": db}
            registered = {"zeus-run": 0, "zeus": 0}  # bytes the jobs take before their first trial
            print(
                f"zeus-run serve --workers {args.workers} on {zr_url}; Zeus 0.16 (SQLite, 1 process) on {zeus_url}; "
                f"{os.cpu_count()} CPUs; {args.runs} run(s), alternating; each trial: ask, E reports, end"
            )
            print(
                ROW.format(
                    "server",
                    "epochs",
                    "clients",
                    "trials",
                    "req/s",
                    "reports/s",
                    "ask p50",
                    "ask p99",
                    "report p50",
                    "report p99",
                )
                + "   (ms)"
            )
            turn = 0
            for run in range(args.runs):
                for epochs in epochs_list:
                    for n in levels:
                        order = ["zeus-run", "zeus"] if turn % 2 == 0 else ["zeus", "zeus-run"]
                        turn += 1
                        for name in order:
                            kind, url, tok = servers[name]
                            jobs = [f"bench-r{run}e{epochs}n{n}c{i}" for i in range(n)]
                            before = disk_bytes(wheres[name])[0]
                            tokens: dict[str, str] = {}  # zeus-run: each job's own token, as its team would hold it
                            for job in jobs:
                                answer = Driver(kind, url, tok).register(job, epochs)
                                tokens[job] = answer["job_token"] if kind == "v1" else tok
                            registered[name] += disk_bytes(wheres[name])[0] - before
                            r = run_level(url, tokens, jobs, n, max(1, args.trials_per_level // n), epochs, kind=kind)
                            trials[name] += int(r["trials"])
                            results.setdefault((name, epochs, n), []).append(r)
                            print(_row(name, epochs, r), flush=True)
            _summary(results, epochs_list, levels)
            _verdicts(results, epochs_list, levels, args.runs)
            for name, where in wheres.items():
                size, entries = disk_bytes(where)
                print(
                    f"disk, {name}: {(size - registered[name]) / max(trials[name], 1):,.0f} bytes per trial "
                    f"({size / 1e6:.1f} MB in {entries} files and directories for {trials[name]:,} trials, of which "
                    f"{registered[name] / 1e6:.2f} MB the registered jobs took before their first trial)"
                )
            history = sum(os.stat(p).st_size for p in root.glob("*/history.jsonl"))
            print(f"  zeus-run's history alone: {history / max(trials['zeus-run'], 1):,.0f} bytes per trial")
        finally:
            for proc in (zr_proc, zeus_proc):
                proc.terminate()
                proc.wait(30)


def _row(name: str, epochs: int, r: dict[str, float]) -> str:
    return ROW.format(
        name,
        epochs,
        int(r["clients"]),
        int(r["trials"]),
        f"{r['req_s']:.0f}",
        f"{r['reports_s']:.0f}",
        f"{r['ask_p50']:.1f}",
        f"{r['ask_p99']:.1f}",
        f"{r['report_p50']:.1f}",
        f"{r['report_p99']:.1f}",
    )


def _summary(
    results: dict[tuple[str, int, int], list[dict[str, float]]], epochs_list: list[int], levels: list[int]
) -> None:
    """Per level: each figure's median over the runs [min-max], and zeus-run against Zeus."""
    keys = ("req_s", "ask_p50", "ask_p99", "report_p50", "report_p99")
    print("\nmedian over runs [min-max]; ratio: zeus-run / Zeus (req/s: higher is better; latency: lower)")
    for epochs in epochs_list:
        for n in levels:
            zr, ze = results.get(("zeus-run", epochs, n)), results.get(("zeus", epochs, n))
            if not zr or not ze:
                continue
            print(f"  {epochs:2d} epochs, {n:2d} clients:")
            for key in keys:
                a = [r[key] for r in zr]
                b = [r[key] for r in ze]
                print(
                    f"    {key:<10}  zeus-run {statistics.median(a):8.1f} [{min(a):.1f}-{max(a):.1f}]"
                    f"   Zeus {statistics.median(b):8.1f} [{min(b):.1f}-{max(b):.1f}]"
                    f"   ratio {statistics.median(a) / max(statistics.median(b), 1e-9):5.2f}"
                )


def _verdicts(
    results: dict[tuple[str, int, int], list[dict[str, float]]], epochs_list: list[int], levels: list[int], runs: int
) -> None:
    """Run by run, whether zeus-run met the goal at each level: 2x Zeus's req/s, no percentile slower."""
    keys = ("ask_p50", "ask_p99", "report_p50", "report_p99")
    print("\ngoal per run: req/s >= 2x Zeus's and every percentile no slower than Zeus's")
    met_all = True
    for run in range(runs):
        cells = []
        for epochs in epochs_list:
            for n in levels:
                zr, ze = results[("zeus-run", epochs, n)][run], results[("zeus", epochs, n)][run]
                ratio = zr["req_s"] / max(ze["req_s"], 1e-9)
                slower = [k for k in keys if zr[k] > ze[k]]
                ok = ratio >= 2 and not slower
                met_all &= ok
                cells.append(
                    f"{epochs}e/{n}c {ratio:.2f}x{'' if ok else ' MISSED' + (' ' + ','.join(slower) if slower else '')}"
                )
        print(f"  run {run + 1}: " + "; ".join(cells))
    print(f"  {'met in every run at every level' if met_all else 'NOT met everywhere (see MISSED)'}")


if __name__ == "__main__":
    main()
