"""Our baselines beside the paper's Table 2, then what switching latency does to them, then solver speed.

    python benchmarks/paper_table.py [--quick]

1. Simulated RTX 3080 Ti, the paper's grid and accounting (latency 0, strict budget), next to Table 2 of
   Spaan et al. "searched on noisy measurements" repeats the paper's protocol: the knapsack runs on tables
   with 3 % log-normal measurement noise, and the schedule it picks is validated on the noise-free model.
2. With realistic switching latency (RTX 3080 Ti 30 ms, H200 6 ms): the latency-blind optimum as planned,
   the same schedule run with latency, and the exact latency-aware optimum.
3. Solver wall time on the full GPT-3 XL step on this machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

from rlclock import paper
from rlclock.backends.simulated import SimulatedGpu
from rlclock.config import load_env_spec
from rlclock.solve.baselines import kernel_edp, run_baselines
from rlclock.solve.optimum import knapsack_optimum, latency_aware_optimum


def pct(x: float) -> str:
    return f"{x:+7.2f} %"


def table2(noise_runs: int) -> None:
    spec = load_env_spec("gpt3xl-rtx3080ti-paper")
    backend = spec.build_backend()
    auto = backend.auto_run()
    print(
        f"1. Table 2 — simulated RTX 3080 Ti (rtx3080ti preset, predicted from shapes alone), the paper's "
        f"grid ({backend.n_configs} configurations), latency 0, strict budget"
    )
    print(f"   auto: {auto.time_s:.3f} s, {auto.energy_j:.0f} J per step ({backend.n_kernels} kernel invocations)")
    res = {r.name: r.evaluation for r in run_baselines(backend, 0.0)}
    t, e = backend.tables
    rows = np.arange(backend.n_kernels)
    jmin = np.argmin(e, axis=1)
    min_t, min_e = t[rows, jmin].sum() / auto.time_s - 1, e[rows, jmin].sum() / auto.energy_j - 1
    edp = kernel_edp(backend).evaluation
    noisy_t, noisy_e = [], []
    for seed in range(noise_runs):
        noisy = SimulatedGpu(backend.spec, backend.trace, backend.configs, 0.0, noise_std=0.03, seed=seed)
        nt, ne = noisy.tables
        pick = knapsack_optimum(nt, ne, float(nt[:, 0].sum())).requests
        run = backend.run_indices(pick)
        noisy_t.append(run.time_s / auto.time_s - 1)
        noisy_e.append(run.energy_j / auto.energy_j - 1)
    lines = [
        ("pass-level, local", res["pass-local"].slowdown, -res["pass-local"].saving, "pass-local"),
        ("pass-level, global", res["pass-global"].slowdown, -res["pass-global"].saving, "pass-global"),
        ("kernel-level, local", res["kernel-local"].slowdown, -res["kernel-local"].saving, "kernel-local"),
        ("kernel-level, global (exact)", res["kernel-global"].slowdown, -res["kernel-global"].saving, "kernel-global"),
        (
            f"kernel-level, global, searched on noisy tables, validated (mean of {noise_runs})",
            float(np.mean(noisy_t)),
            float(np.mean(noisy_e)),
            "kernel-global-validated",
        ),
        ("kernel-level, energy-delay product optimum", edp.slowdown, -edp.saving, "kernel-edp"),
        ("kernel-level, lowest energy at any slowdown", min_t, min_e, "kernel-min-energy"),
    ]
    print(f"   {'':72s} {'rlclock (sim)':>21s}   {'paper':>21s}")
    print(f"   {'':72s} {'time':>10s} {'energy':>10s}   {'time':>10s} {'energy':>10s}")
    for name, tt, ee, key in lines:
        pt, pe = paper.TABLE2[key]
        print(f"   {name:72s} {pct(100 * tt)} {pct(100 * ee)}   {pct(pt)} {pct(pe)}")
    if noise_runs > 1:
        print(
            f"   (noisy search spread: energy {100 * np.min(noisy_e):+.2f} .. {100 * np.max(noisy_e):+.2f} %, "
            f"time {100 * np.min(noisy_t):+.2f} .. {100 * np.max(noisy_t):+.2f} %)"
        )
    for b, pe in paper.RELAXED.items():
        o = knapsack_optimum(t, e, auto.time_s * (1 + b))
        print(
            f"   {f'kernel-level, global, relaxed budget +{100 * b:.0f} %':72s} "
            f"{pct(100 * (o.time_s / auto.time_s - 1))} {pct(100 * (o.energy_j / auto.energy_j - 1))}   "
            f"{pct(100 * b)} {pct(pe)}"
        )
    kg = -100 * res["kernel-global"].saving
    pl = -100 * res["pass-local"].saving
    kg_ok = abs(kg - paper.TABLE2["kernel-global"][1]) <= 2 and res["kernel-global"].slowdown <= 0.006
    print(
        f"   targets: kernel-global within 2 pp of {paper.TABLE2['kernel-global'][1]} % at <= +0.6 % time: "
        f"{'met' if kg_ok else 'MISSED'}; "
        f"pass-level within 1.5 pp of -2 %: {'met' if abs(pl + 2.0) <= 1.5 else 'MISSED'}; local below global: "
        f"{'met' if res['kernel-local'].saving < res['kernel-global'].saving else 'MISSED'}"
    )


def latency(budgets: list[float]) -> None:
    print()
    print(
        "2. With switching latency: the latency-blind optimum (the paper's method) as planned, the same schedule "
        "run with latency, and the exact latency-aware optimum"
    )
    print(
        f"   {'env':22s} {'latency':>8s} {'budget':>7s}   {'blind, planned':>19s}   {'blind, with latency':>27s}   "
        f"{'latency-aware (exact)':>27s}"
    )
    for env in ("gpt3xl-rtx3080ti", "gpt3xl-h200"):
        backend = load_env_spec(env).build_backend()
        t, e = backend.tables
        auto = backend.auto_run()
        for b in budgets:
            limit = auto.time_s * (1 + b)
            k = knapsack_optimum(t, e, limit)
            run = backend.run_indices(k.requests)
            la = latency_aware_optimum(t, e, backend.latency_s, limit)
            la_run = backend.run_indices(la.requests)
            planned = 1 - k.energy_j / auto.energy_j
            survive = (1 - run.energy_j / auto.energy_j) / planned if planned > 1e-4 else None
            print(
                f"   {env:22s} {1e3 * backend.latency_s:6.0f}ms {100 * b:6.1f}%   "
                f"{pct(100 * (k.time_s / auto.time_s - 1))} {pct(100 * (k.energy_j / auto.energy_j - 1))}   "
                f"{pct(100 * (run.time_s / auto.time_s - 1))} {pct(100 * (run.energy_j / auto.energy_j - 1))} "
                f"{run.switches:4d} sw   "
                f"{pct(100 * (la_run.time_s / auto.time_s - 1))} {pct(100 * (la_run.energy_j / auto.energy_j - 1))} "
                f"{la_run.switches:4d} sw"
            )
            kept = (
                "has no planned saving to keep"
                if survive is None
                else f"keeps {100 * survive:.0f} % of its planned saving"
            )
            print(
                f"   {'':40s} the blind plan {kept} but runs "
                f"{100 * (run.time_s / auto.time_s - 1):+.1f} % over auto (budget {100 * b:+.1f} %); "
                f"latency-aware: {100 * (1 - la.energy_j / auto.energy_j):.2f} % within budget"
                f"{'' if la.exact else ' (not proven optimal)'}"
            )


def speed() -> None:
    print()
    print(
        f"3. Solver speed on this machine ({platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()})"
    )
    for env in ("gpt3xl-rtx3080ti", "gpt3xl-h200"):
        backend = load_env_spec(env).build_backend()
        t, e = backend.tables
        limit = backend.auto_run().time_s * 1.01
        s = time.perf_counter()
        knapsack_optimum(t, e, limit)
        kt = time.perf_counter() - s
        s = time.perf_counter()
        la = latency_aware_optimum(t, e, backend.latency_s, limit)
        lt = time.perf_counter() - s
        print(
            f"   {env:22s} {backend.n_kernels} kernels x {backend.n_configs} configurations: latency-blind "
            f"{kt:.2f} s (target < 1 s), latency-aware {lt:.1f} s (target < 60 s), exact={la.exact}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one noisy search instead of ten, one budget")
    args = p.parse_args(argv)
    table2(1 if args.quick else 10)
    latency([0.01] if args.quick else [0.0, 0.01, 0.05])
    speed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
