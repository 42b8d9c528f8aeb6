"""The exact latency-aware solver on large steps: time, peak memory, and how close it gets when it stops.

For full-depth decoder steps of 7-14 B-parameter models (and the 24-layer GPT-3 XL step on the H200) at
switching latencies of 0.1-6 ms and slowdown budgets of 1-10 %, each case is solved in a process of its own
(so its peak resident memory is its own) with a time limit; the table shows the solve time (the limit must
hold within 10 %), the peak memory (target: within 4 GB), whether the optimum was proven, and otherwise the
proven gap of the best plan found to the lower bound.

    python benchmarks/solver_scale.py                    # every case, 300 s limit (about an hour here)
    python benchmarks/solver_scale.py --time-limit 60    # the same cases, a shorter limit
    python benchmarks/solver_scale.py --only mistral     # cases whose name contains "mistral"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import Any

MODELS: dict[str, dict[str, Any]] = {
    "mistral-7b": {
        "gpu": "a100-sxm4-40gb",
        "workload": {
            "generator": "transformer",
            "style": "llama",
            "hidden": 4096,
            "heads": 32,
            "kv_heads": 8,
            "ffn": 14336,
            "seq": 4096,
            "batch": 1,
            "layers": 32,
            "vocab": 32000,
        },
    },
    "llama2-13b": {
        "gpu": "a100-sxm4-40gb",
        "workload": {
            "generator": "transformer",
            "style": "llama",
            "hidden": 5120,
            "heads": 40,
            "kv_heads": 40,
            "ffn": 13824,
            "seq": 4096,
            "batch": 1,
            "layers": 40,
            "vocab": 32000,
        },
    },
    "qwen-14b": {
        "gpu": "h100-sxm",
        "workload": {
            "generator": "transformer",
            "style": "llama",
            "hidden": 5120,
            "heads": 40,
            "kv_heads": 8,
            "ffn": 13824,
            "seq": 4096,
            "batch": 1,
            "layers": 48,
            "vocab": 152064,
        },
    },
    "gpt3xl-h200": {"spec": "gpt3xl-h200"},
}
"""Model → the env spec fields of its step (or a shipped spec)."""
LATENCIES_S = (0.0001, 0.001, 0.006)
BUDGETS = (0.01, 0.03, 0.10)


def solve_one(case: dict[str, Any]) -> dict[str, Any]:
    """Solve one case in this process; its figures and this process's peak resident memory."""
    from rlclock.config import load_env_spec, parse_env_spec
    from rlclock.solve.optimum import latency_aware_optimum

    model = MODELS[case["model"]]
    if "spec" in model:
        spec = load_env_spec(model["spec"]).with_overrides(switch_latency_s=case["latency_s"])
    else:
        spec = parse_env_spec(
            {"name": case["model"], **model, "switch_latency_s": case["latency_s"], "actions": {"core_step_mhz": 105}}
        )
    backend = spec.build_backend()
    t, e = backend.tables
    auto = backend.auto_run()
    start = time.perf_counter()
    opt = latency_aware_optimum(
        t, e, backend.latency_s, auto.time_s * (1 + case["budget"]), time_limit_s=case["time_limit_s"]
    )
    wall = time.perf_counter() - start
    return {
        **case,
        "kernels": backend.n_kernels,
        "configs": backend.n_configs,
        "solve_s": wall,
        "exact": opt.exact,
        "stopped": opt.stopped,
        "gap_pct": 100 * opt.gap_j / opt.energy_j,
        "saving_pct": 100 * (1 - opt.energy_j / auto.energy_j),
        "describe": opt.describe(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=300.0, metavar="SECONDS", help="per solve (default 300)")
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)  # one case, in a child process
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(solve_one(json.loads(args.case))))
        return 0
    cases = [
        {"model": m, "latency_s": lat, "budget": b, "time_limit_s": args.time_limit}
        for m in MODELS
        for lat in LATENCIES_S
        for b in BUDGETS
    ]
    cases = [c for c in cases if args.only in f"{c['model']}-{c['latency_s']}-{c['budget']}"]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"time limit {args.time_limit:g} s per solve; every case in its own process"
    )
    print(
        f"{'model':12s} {'latency':>8s} {'budget':>6s} {'kernels':>7s} {'C':>3s} {'solve s':>8s} {'peak MB':>8s} "
        f"{'saving %':>8s}  result"
    )
    worst_ratio, worst_mb, failed = 0.0, 0.0, 0
    for case in cases:
        out = subprocess.run([sys.executable, __file__, "--case", json.dumps(case)], capture_output=True, text=True)
        if out.returncode != 0:
            failed += 1
            print(
                f"{case['model']:12s} {1e3 * case['latency_s']:6.1f}ms {100 * case['budget']:5.0f}%  FAILED: "
                f"{out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}"
            )
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        worst_ratio = max(worst_ratio, r["solve_s"] / args.time_limit)
        worst_mb = max(worst_mb, r["peak_rss_mb"])
        print(
            f"{r['model']:12s} {1e3 * r['latency_s']:6.1f}ms {100 * r['budget']:5.0f}% {r['kernels']:7d} "
            f"{r['configs']:3d} {r['solve_s']:8.1f} {r['peak_rss_mb']:8.0f} {r['saving_pct']:8.3f}  {r['describe']}",
            flush=True,
        )
    print()
    print(
        f"longest solve: {100 * worst_ratio:.0f} % of the time limit (target <= 110 %); largest peak memory "
        f"{worst_mb / 1024:.2f} GB (target <= 4 GB); failed cases: {failed}"
    )
    return 0 if worst_ratio <= 1.1 and worst_mb <= 4096 and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
