"""Published figures of Spaan, Chen, Varbanescu, arXiv 2601.08539 (RTX 3080 Ti, llm.c GPT-3 XL, batch 40).

One place for the numbers rlclock compares itself with (REFERENCE §1). Percentages are relative changes
against the driver's own clocks ("auto"): negative time = faster, negative energy = saving.
"""

from __future__ import annotations

TABLE2: dict[str, tuple[float, float]] = {
    # granularity / aggregation: (time %, energy %)
    "pass-local": (-0.20, -1.98),
    "pass-global": (-0.10, -2.07),
    "kernel-local": (-1.78, -11.54),
    "kernel-global": (0.00, -15.64),
    "kernel-global-validated": (0.60, -14.6),
    "kernel-edp": (10.28, -27.52),
    "kernel-min-energy": (84.0, -36.9),
}
"""Table 2 of the paper (kernel-level global found by exhaustive search; validated over 10 × 10 runs)."""

RELAXED: dict[float, float] = {0.05: -21.0, 0.10: -27.0, 0.30: -35.0}
"""Relaxed budget (global, kernel-level): time budget → energy %, read off the paper's figure."""

GEMM_MEM5001_SPEEDUP_PCT = (2.0, 3.0)
"""Large GEMMs at memory 5001 MHz (the core clock left to the driver) run this much faster (%) than at auto …"""

GEMM_MEM5001_SAVING_PCT = (13.0, 16.0)
"""… and save this much energy (%)."""

MEMBOUND_SAVING_PCT = (25.0, 33.0)
"""Memory-bound kernels save this much energy (%) at a lower core clock …"""

MEMBOUND_MAX_SLOWDOWN_PCT = 2.6
"""… for at most this slowdown (%) …"""

MEMBOUND_CORE_MHZ = (630, 1680)
"""… at core clocks of roughly this range: the lowest core clock within that slowdown of each memory-bound
kernel type lies in it, the lightest kernels' near its lower end."""

STEP_TIME_S = 5.3
STEP_ENERGY_J = 1800.0
"""Iteration at auto clocks, approximately (24 layers)."""

PAPER_CORE_GRID_MHZ = tuple(range(210, 2101, 210))
PAPER_MEM_GRID_MHZ = (405, 810, 5001, 9251, 9501)
"""The clocks the paper swept (plus 'auto' in each domain)."""
