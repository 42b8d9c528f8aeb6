"""Long steps: simulate, plan and evaluate traces of 10^3 to 10^6 kernels — time and peak memory.

A step of llm.c's GPT-3 XL shape on the simulated RTX 3080 Ti with as many layers as it takes to reach each
size (37 kernels a layer). Each size runs in a process of its own (its peak resident memory is its own):
building the trace, the backend's tables and its auto run (``simulate``), the shipped policy's plan to the
1 % budget (``plan``), the plan's run beside auto (``evaluate``), and the env's cost per step over 20 000
steps (it must not grow with the step). Targets for 10^6 kernels: within 60 s and 2 GB.

    python benchmarks/scale.py                 # 10^3, 10^4, 10^5, 10^6 kernels
    python benchmarks/scale.py --kernels 100000
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

KERNELS_PER_LAYER = 37


def measure(kernels: int) -> dict[str, Any]:
    """The figures of one size, in this process."""
    from rlclock.config import load_env_spec
    from rlclock.env import KernelClockEnv
    from rlclock.policy import ClockPolicy
    from rlclock.schedule import ClockSchedule
    from rlclock.solve.evaluation import evaluate

    layers = max(1, round(kernels / KERNELS_PER_LAYER))
    spec = load_env_spec("gpt3xl-rtx3080ti").with_overrides(
        workload={"generator": "llmc", "batch": 40, "seq": 1024, "hidden": 2048, "heads": 16, "layers": layers}
    )
    policy = ClockPolicy.load("gpt3xl-rtx3080ti")
    out: dict[str, Any] = {"layers": layers}
    start = time.perf_counter()
    trace = spec.build_trace()
    backend = policy.backend_for(trace)
    evaluate(ClockSchedule.constant("1680@5001", len(trace)), backend)
    out["simulate_s"] = time.perf_counter() - start
    out["kernels"] = len(trace)
    start = time.perf_counter()
    schedule = policy.schedule(trace, backend=backend, search=False)
    out["plan_s"] = time.perf_counter() - start
    start = time.perf_counter()
    ev = evaluate(schedule, backend)
    out["evaluate_s"] = time.perf_counter() - start
    out["saving_pct"], out["slowdown_pct"] = 100 * ev.saving, 100 * ev.slowdown
    out["total_s"] = out["simulate_s"] + out["plan_s"] + out["evaluate_s"]
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    del schedule, ev
    env = KernelClockEnv(spec.with_overrides(reward={"time_price": 1000.0}))  # no optimum: the env alone
    env.reset(seed=0)
    steps = min(20_000, len(trace) - 1)
    start = time.perf_counter()
    for _ in range(steps):
        env.step(env.keep_action)
    out["env_us_per_step"] = 1e6 * (time.perf_counter() - start) / max(steps, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, nargs="*", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # one size, in a child process
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.one)))
        return 0
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; simulated "
        "RTX 3080 Ti, llm.c GPT-3 XL layers, the shipped gpt3xl-rtx3080ti policy, each size in its own process"
    )
    print(
        f"{'kernels':>9s} {'simulate s':>10s} {'plan s':>7s} {'evaluate s':>10s} {'total s':>8s} {'peak MB':>8s} "
        f"{'env us/step':>11s} {'saving %':>8s} {'slowdown %':>10s}"
    )
    ok = True
    for n in args.kernels:
        res = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True)
        if res.returncode != 0:
            print(f"{n:9d} FAILED: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}")
            ok = False
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        print(
            f"{r['kernels']:9d} {r['simulate_s']:10.2f} {r['plan_s']:7.2f} {r['evaluate_s']:10.2f} "
            f"{r['total_s']:8.2f} {r['peak_mb']:8.0f} {r['env_us_per_step']:11.1f} {r['saving_pct']:8.2f} "
            f"{r['slowdown_pct']:10.2f}",
            flush=True,
        )
        if r["kernels"] >= 1_000_000:
            ok &= r["total_s"] <= 60 and r["peak_mb"] <= 2048
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
