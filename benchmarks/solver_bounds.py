"""Bounded at a million kernels: the solvers' time and peak memory under a time limit, and a trace's load.

Each case runs in a process of its own, so its peak resident memory (``ru_maxrss``) is its own; for the solvers
the table also shows the memory the process held before the solve (the step's trace, tables and backend), so
the solve's own share is the difference. Targets (issue 41): an answer within the time limit + 10 %, at most
4 GB at 10^6 kernels; a 10^6-kernel JSON trace loaded within 2 GB.

    python benchmarks/solver_bounds.py                 # every case (about 15 minutes on 2 cores)
    python benchmarks/solver_bounds.py --only load     # the cases whose name contains "load"

Steps: llm.c GPT-3 XL steps of 2 700 and 27 000 layers (99 909 and 999 009 kernels) on the simulated
RTX 3080 Ti (49 configurations, 30 ms switches) and H200 (18, 6 ms); traces: that 10^6 step as JSON, and a real
profiled step (corpus-h200 bert-base, with its launch ops and measurements) repeated to 10^6 kernels, each
copy with calls of its own (as a long real step has), as JSON and gzip.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LAYERS = {"1e5": 2_700, "1e6": 27_000}
SPECS = {"rtx3080ti": "gpt3xl-rtx3080ti", "h200": "gpt3xl-h200"}
SOLVES = [  # (name, spec, size, solver, time limit s)
    ("latency-aware rtx3080ti 1e5 5s", "rtx3080ti", "1e5", "latency-aware", 5.0),
    ("latency-aware rtx3080ti 1e5 60s", "rtx3080ti", "1e5", "latency-aware", 60.0),
    ("latency-aware rtx3080ti 1e6 5s", "rtx3080ti", "1e6", "latency-aware", 5.0),
    ("latency-aware rtx3080ti 1e6 60s", "rtx3080ti", "1e6", "latency-aware", 60.0),
    ("latency-aware h200 1e6 5s", "h200", "1e6", "latency-aware", 5.0),
    ("latency-aware h200 1e6 120s", "h200", "1e6", "latency-aware", 120.0),
    ("knapsack rtx3080ti 1e5 5s", "rtx3080ti", "1e5", "knapsack", 5.0),
    ("knapsack rtx3080ti 1e6 5s", "rtx3080ti", "1e6", "knapsack", 5.0),
]
LOADS = ["load llmc 1e6 json", "load real-step 1e6 json", "load real-step 1e6 gz"]
BUDGET = 0.01
KB = 1024


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / KB


def solve_case(name: str) -> dict[str, Any]:
    """One solve in this process: the wall time, whether it kept the limit, memory before and at peak, the answer."""
    from rlclock.config import load_env_spec
    from rlclock.solve.optimum import knapsack_optimum, latency_aware_optimum

    _, gpu, size, solver, limit = next(c for c in SOLVES if c[0] == name)
    spec = load_env_spec(SPECS[gpu]).with_overrides(workload={"layers": LAYERS[size]})
    backend = spec.build_backend()
    t, e = backend.tables
    auto = backend.auto_run()
    before = rss_mb()
    start = time.perf_counter()
    if solver == "knapsack":
        opt = knapsack_optimum(t, e, auto.time_s * (1 + BUDGET), time_limit_s=limit)
    else:
        opt = latency_aware_optimum(t, e, backend.latency_s, auto.time_s * (1 + BUDGET), time_limit_s=limit)
    wall = time.perf_counter() - start
    return {
        "name": name,
        "kernels": backend.n_kernels,
        "configs": backend.n_configs,
        "limit_s": limit,
        "solve_s": wall,
        "before_mb": before,
        "peak_mb": rss_mb(),
        "describe": opt.describe(),
        "saving_pct": 100 * (1 - opt.energy_j / auto.energy_j),
    }


def trace_file(name: str, folder: Path) -> Path:
    """The trace a load case reads (written once, in a process of its own)."""
    if "llmc" in name:
        path = folder / "llmc-1e6.trace.json"
        if not path.is_file():
            from rlclock.workload.llmc import LlmcConfig, gpt3xl_step

            gpt3xl_step(LlmcConfig(layers=LAYERS["1e6"])).save(path)
        return path
    path = folder / ("real-1e6.trace.json" + (".gz" if name.endswith("gz") else ""))
    if not path.is_file():
        from rlclock.resources import data_dir

        with gzip.open(data_dir() / "measurements/corpus-h200/bert-base/step.trace.json.gz", "rt") as f:
            data = json.load(f)
        step = data.pop("kernels")
        calls = 1 + max((k.get("launch_op") or {}).get("call", 0) for k in step)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "wt") as f:  # type: ignore[operator]
            f.write(json.dumps(data)[:-1] + ',"kernels":[')
            for i in range(1_000_000):
                copy, k = divmod(i, len(step))
                kernel = dict(step[k])
                if kernel.get("launch_op"):
                    kernel["launch_op"] = {
                        **kernel["launch_op"],
                        "call": kernel["launch_op"].get("call", 0) + copy * calls,
                    }
                f.write(("," if i else "") + json.dumps(kernel))
            f.write("]}")
    return path


def load_case(name: str, folder: Path) -> dict[str, Any]:
    from rlclock.workload.trace import KernelTrace

    path = trace_file(name, folder)
    before = rss_mb()
    start = time.perf_counter()
    trace = KernelTrace.load(path)
    return {
        "name": name,
        "kernels": len(trace),
        "file_mb": path.stat().st_size / KB / KB,
        "load_s": time.perf_counter() - start,
        "before_mb": before,
        "peak_mb": rss_mb(),
    }


def child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if out.returncode != 0:
        return {"failed": (out.stderr.strip().splitlines() or [str(out.returncode)])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--solve", default=None, help=argparse.SUPPRESS)  # one case, in a child process
    parser.add_argument("--load", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--folder",
        default=str(Path(tempfile.gettempdir()) / "rlclock-solver-bounds"),
        help="where the big traces are written (kept between runs)",
    )
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    if args.solve:
        print(json.dumps(solve_case(args.solve)))
        return 0
    if args.load:
        if args.load.startswith("write:"):
            trace_file(args.load[6:], folder)
            print(json.dumps({}))
        else:
            print(json.dumps(load_case(args.load, folder)))
        return 0
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"every case in its own process; budget {100 * BUDGET:g} %; simulated GPUs (no GPU used)"
    )
    print(
        f"{'solve':34s} {'kernels':>8s} {'C':>3s} {'limit s':>7s} {'solve s':>8s} {'% limit':>7s} "
        f"{'before MB':>9s} {'peak MB':>8s} {'saving %':>8s}  answer"
    )
    worst, peak, failed = 0.0, 0.0, 0
    for name, *_ in SOLVES:
        if args.only not in name:
            continue
        r = child(["--solve", name])
        if "failed" in r:
            failed += 1
            print(f"{name:34s} FAILED: {r['failed']}")
            continue
        worst = max(worst, r["solve_s"] / r["limit_s"])
        if r["kernels"] > 500_000:
            peak = max(peak, r["peak_mb"])
        print(
            f"{name:34s} {r['kernels']:8d} {r['configs']:3d} {r['limit_s']:7.0f} {r['solve_s']:8.2f} "
            f"{100 * r['solve_s'] / r['limit_s']:6.0f}% {r['before_mb']:9.0f} {r['peak_mb']:8.0f} "
            f"{r['saving_pct']:8.3f}  {r['describe']}",
            flush=True,
        )
    if args.only in "rlclock baselines command":
        from rlclock.config import load_env_spec
        from rlclock.yamlio import dump_yaml

        spec = folder / "gpt3xl-1e6.yaml"
        big = load_env_spec("gpt3xl-rtx3080ti").with_overrides(name="gpt3xl-1e6", workload={"layers": LAYERS["1e6"]})
        spec.write_text(dump_yaml(dict(big.raw)))
        start = time.perf_counter()
        argv = ["baselines", str(spec), "--time-limit", "5", "--frontier", "", "--out", str(folder / "baselines")]
        code = (
            "import json, resource, sys\nfrom rlclock.cli import main\nrc = main(sys.argv[1:])\n"
            "print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss), file=sys.stderr)\n"
            "raise SystemExit(rc)"
        )
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
        wall = time.perf_counter() - start
        own_peak = float(out.stderr.strip().splitlines()[-1]) / KB if out.stderr.strip() else float("nan")
        solves = [ln for ln in out.stdout.splitlines() if ln.startswith(("kernel-global", "latency-aware"))]
        print(
            f"{'rlclock baselines 1e6 --time-limit 5':34s} exit {out.returncode}, {wall:.0f} s in all (building the "
            f"step, every baseline, the plot), peak {own_peak:.0f} MB"
        )
        for line in solves:
            print(f"    {' '.join(line.split())}")
        failed += out.returncode != 0
    print()
    print(f"{'trace load':34s} {'kernels':>8s} {'file MB':>8s} {'load s':>7s} {'peak MB':>8s}")
    load_peak = 0.0
    for name in LOADS:
        if args.only not in name:
            continue
        child(["--load", f"write:{name}", "--folder", str(folder)])
        r = child(["--load", name, "--folder", str(folder)])
        if "failed" in r:
            failed += 1
            print(f"{name:34s} FAILED: {r['failed']}")
            continue
        load_peak = max(load_peak, r["peak_mb"])
        print(f"{name:34s} {r['kernels']:8d} {r['file_mb']:8.0f} {r['load_s']:7.1f} {r['peak_mb']:8.0f}", flush=True)
    print()
    print(
        f"longest solve: {100 * worst:.0f} % of its time limit (target <= 110 %); largest peak of a solve at 10^6 "
        f"kernels: {peak / KB:.2f} GB (target <= 4 GB); largest peak of a trace load: {load_peak / KB:.2f} GB "
        f"(target <= 2 GB); failed cases: {failed}"
    )
    return 0 if worst <= 1.1 and peak <= 4 * KB and load_peak <= 2 * KB and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
