"""Calibration of the simulator: per-kernel errors against the paper (RTX 3080 Ti), from shapes alone.

Prints, for each of the paper's 46 kernel types, the simulator's auto-clock time and energy next to the
paper's readings and the relative error; then the step totals and the physics checks of
docs/simulator.md. With ``--gpu h200-sxm`` it compares with the trace measured on an H200 under data/.

    python benchmarks/calibration.py                 # RTX 3080 Ti vs Spaan et al.
    python benchmarks/calibration.py --gpu h200-sxm  # H200 vs data/ (measured in a dry run)
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from rlclock import paper
from rlclock.calibration.paper import paper_kernel_types, paper_metrics
from rlclock.dvfs.spec import get_spec
from rlclock.workload.llmc import paper_table


def rtx3080ti() -> int:
    spec = get_spec("rtx3080ti")
    m = paper_metrics(spec)
    _, mult = paper_kernel_types()
    table = paper_table()
    print("Simulated RTX 3080 Ti (rtx3080ti preset), predicted from shapes alone, vs Spaan et al. (auto clocks)")
    print(
        f"{'#':>2}  {'kernel':34s} {'t sim ms':>9} {'t paper':>9} {'err':>7}   {'E sim J':>8} {'E paper':>8} "
        f"{'err':>7}  {'P W':>4} {'MHz':>5}"
    )
    worst_t = worst_e = 0.0
    for i, r in enumerate(table):
        et = m.time_s[i] / r.t_auto_s - 1
        ee = m.energy_j[i] / r.e_auto_j - 1
        flag = "" if r.t_auto_s >= 1e-4 else "  (< 0.1 ms)"
        if r.t_auto_s >= 1e-4:
            worst_t, worst_e = max(worst_t, abs(et)), max(worst_e, abs(ee))
        print(
            f"{i:2d}  {r.call[:34]:34s} {m.time_s[i] * 1e3:9.3f} {r.t_auto_s * 1e3:9.3f} {100 * et:+6.1f}%   "
            f"{m.energy_j[i]:8.3f} {r.e_auto_j:8.3f} {100 * ee:+6.1f}%  {m.energy_j[i] / m.time_s[i]:4.0f} "
            f"{m.core_mhz[i]:5.0f}{flag}"
        )
    t_ref = float((mult * np.array([r.t_auto_s for r in table])).sum())
    e_ref = float((mult * np.array([r.e_auto_j for r in table])).sum())
    print()
    dt, de = 100 * (m.step_time_s / t_ref - 1), 100 * (m.step_energy_j / e_ref - 1)
    print(f"step time   {m.step_time_s:7.3f} s  vs paper {t_ref:7.3f} s  ({dt:+.2f} %, target within 5 %)")
    print(f"step energy {m.step_energy_j:7.1f} J  vs paper {e_ref:7.1f} J  ({de:+.2f} %, target within 5 %)")
    print(
        f"largest per-kernel error (kernels >= 0.1 ms): time {100 * worst_t:.1f} %, energy {100 * worst_e:.1f} % "
        "(target within 20 %)"
    )
    print()
    print("physics (paper grid: core 210-2100 step 210 x memory 405/810/5001/9251/9501; LP relaxation for the optima)")
    sp, sv = m.gemm_mem5001
    print(
        f"  large GEMMs, best point at memory 5001 MHz: {sp:+.1f} % time, {-sv:+.1f} % energy   "
        f"(paper: {-paper.GEMM_MEM5001_SPEEDUP_PCT[1]:+.0f}..{-paper.GEMM_MEM5001_SPEEDUP_PCT[0]:+.0f} % time, "
        f"-{paper.GEMM_MEM5001_SAVING_PCT[0]:.0f}..-{paper.GEMM_MEM5001_SAVING_PCT[1]:.0f} % energy)"
    )
    at, ae = m.gemm_auto5001
    print(f"  large GEMMs, memory 5001 MHz, core auto:   {at:+.1f} % time, {-ae:+.1f} % energy")
    mb = m.membound_saving_pct
    lo, hi = paper.MEMBOUND_SAVING_PCT
    print(
        f"  memory-bound kernels, best saving within +{paper.MEMBOUND_MAX_SLOWDOWN_PCT} %: "
        f"{mb.min():.1f}-{mb.max():.1f} % (paper: {lo:.0f}-{hi:.0f} %)"
    )
    f_lo, f_hi = paper.MEMBOUND_CORE_MHZ
    knee = m.membound_knee_mhz
    print(
        f"  memory-bound kernels, lowest core clock within +{paper.MEMBOUND_MAX_SLOWDOWN_PCT} % (memory 9501 MHz): "
        f"{knee.min()}-{knee.max()} MHz (paper: roughly {f_lo}-{f_hi} MHz)"
    )
    s_lo = m.membound_slowdown_pct[f_lo]
    print(f"  memory-bound kernels' slowdown at core {f_lo} MHz: {s_lo.min():.1f}-{s_lo.max():.1f} %")
    print(f"  large GEMMs' auto core clock: {m.gemm_auto_core_mhz:.0f} MHz (power-capped)")
    rows = [
        ("kernel-level global, 0 % budget", (0.0, m.kernel_global_pct), paper.TABLE2["kernel-global"]),
        ("kernel-level local", m.kernel_local_pct, paper.TABLE2["kernel-local"]),
        ("pass-level local", m.pass_local_pct, paper.TABLE2["pass-local"]),
        ("lowest energy at any slowdown", m.min_energy_pct, paper.TABLE2["kernel-min-energy"]),
    ]
    rows += [
        (f"kernel-level global, +{100 * b:.0f} % budget", (100 * b, v), (100 * b, paper.RELAXED[b]))
        for b, v in m.relaxed_pct.items()
    ]
    print(f"  {'':34s} {'sim time':>9} {'sim energy':>11}   {'paper time':>10} {'paper energy':>12}")
    for name, (st, se), (pt, pe) in rows:
        print(f"  {name:34s} {st:+8.2f}% {se:+10.2f}%   {pt:+9.2f}% {pe:+11.2f}%")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="rtx3080ti", help="rtx3080ti (paper) or h200-sxm (measured data)")
    args = parser.parse_args(argv)
    if get_spec(args.gpu).key == "rtx3080ti":
        return rtx3080ti()
    from rlclock.calibration.measured import report

    print("\n".join(report(get_spec(args.gpu))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
