"""The RTX 3080 Ti fit: the paper's per-kernel readings and published physics, predicted from shapes alone.

The fit matches the paper's per-kernel auto-clock time and energy of the llm.c GPT-3 XL step, predicted
**from shapes alone**, and the physics it reports: power-capped GEMMs speed up and save at a lower memory
clock (the core left to the driver, whose boost then stops at its ceiling ``boost_max_mhz``), memory-bound
kernels save 25–33 % at a lower core clock within 2.6 % at core clocks of 630–1680 MHz (so their knees lie
there), the global / pass-level / local optima of its
Table 2, the lowest-energy point, the relaxed-budget curve. During fitting the knapsack optima use the
linear-programming relaxation (fast, and within a few hundredths of a percent for hundreds of kernels);
``benchmarks/paper_table.py`` reports the exact optima. Refit with ``python -m rlclock.calibration rtx3080ti
--write``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlclock import paper
from rlclock.calibration.fit import BOUNDS, FIT_NAMES, fit
from rlclock.dvfs import model
from rlclock.dvfs.spec import GpuSpec
from rlclock.schedule import ClockConfig
from rlclock.solve.lagrangian import best_within, lp_energy_at, lp_frontier
from rlclock.workload import llmc
from rlclock.workload.trace import Kernel

_BIG_GEMMS = (2, 10, 12, 14, 16, 17, 22, 24, 26, 27, 41, 42)  # paper-table rows of the large GEMMs
_MEM_HIGH, _MEM_LOW = 9501, 5001  # the paper's default memory clock and the lower one its GEMMs gain at


@dataclass(frozen=True)
class PaperMetrics:
    """The paper's figures as the model reproduces them (percent changes against auto)."""

    time_s: np.ndarray  # per paper kernel type, auto clocks
    energy_j: np.ndarray
    core_mhz: np.ndarray  # effective auto core clock per kernel type
    step_time_s: float
    step_energy_j: float
    kernel_global_pct: float  # energy at 0 % slowdown (LP relaxation)
    relaxed_pct: dict[float, float]
    kernel_local_pct: tuple[float, float]  # (time %, energy %)
    pass_local_pct: tuple[float, float]
    min_energy_pct: tuple[float, float]
    gemm_mem5001: tuple[float, float]  # mean (time %, energy saved %) of the large GEMMs' best point at 5001 MHz
    gemm_auto5001: tuple[float, float]  # the same at memory 5001 MHz with the core on auto
    membound_saving_pct: np.ndarray  # per memory-bound kernel type ≥ 0.1 ms: best saving within 2.6 %
    membound_slowdown_pct: dict[int, np.ndarray]  # per core clock (MHz, memory 9501): their slowdown there, %
    membound_knee_mhz: np.ndarray  # per memory-bound kernel type: lowest paper-grid core clock within 2.6 %
    gemm_auto_core_mhz: float


def paper_grid(spec: GpuSpec) -> tuple[ClockConfig, ...]:
    """The configurations the paper swept: core 210–2100 step 210 (and auto) × its five memory clocks."""
    return spec.config_grid(core_step_mhz=210, core_min_mhz=210, mem_mhz=paper.PAPER_MEM_GRID_MHZ)


def paper_kernel_types() -> tuple[list[Kernel], np.ndarray]:
    """The 46 kernel types of the paper's step (one invocation each) and how often each runs per step."""
    cfg = llmc.LlmcConfig()
    types = llmc.kernel_types(cfg)
    mult = np.ones(len(types))
    mult[2:14] = cfg.layers
    mult[19:44] = cfg.layers
    return types, mult


def paper_metrics(spec: GpuSpec) -> PaperMetrics:
    """Evaluate the model on the paper's kernels and grid, from shapes alone."""
    types, mult = paper_kernel_types()
    grid = paper_grid(spec)
    pred = model.predict(model.kernel_arrays(types, spec), spec, grid)
    t, e = pred.time_s, pred.energy_j
    ta, ea = t[:, 0], e[:, 0]
    t0, e0 = float((mult * ta).sum()), float((mult * ea).sum())
    rows = np.arange(len(types))
    front = lp_frontier(t, e, mult)

    def pct(tt: np.ndarray, ee: np.ndarray) -> tuple[float, float]:
        return 100 * (float((mult * tt).sum()) / t0 - 1), 100 * (float((mult * ee).sum()) / e0 - 1)

    j_loc = best_within(t, e, ta)
    j_min = np.argmin(e, axis=1)
    phases = np.array([k.phase for k in types])
    pass_t = pass_e = 0.0
    for ph in ("forward", "backward"):
        m = phases == ph
        tp, ep = (mult[m, None] * t[m]).sum(0), (mult[m, None] * e[m]).sum(0)
        j = int(np.argmin(np.where(tp <= tp[0] * (1 + 1e-12), ep, np.inf)))
        pass_t += tp[j]
        pass_e += ep[j]
    mem = np.array([spec.effective_mem_mhz(c) for c in grid])
    g_t, g_e = [], []
    for i in _BIG_GEMMS:
        ok = (mem == 5001) & (t[i] <= ta[i])
        j = int(np.flatnonzero(ok)[np.argmin(e[i][ok])]) if ok.any() else 0
        g_t.append(100 * (t[i, j] / ta[i] - 1))
        g_e.append(100 * (1 - e[i, j] / ea[i]))
    membound = [i for i, k in enumerate(types) if not k.uses_tensor_cores and ta[i] >= 1e-4]
    j_mb = best_within(t[membound], e[membound], ta[membound] * (1 + paper.MEMBOUND_MAX_SLOWDOWN_PCT / 100))
    mb = 100 * (1 - e[membound, j_mb] / ea[membound])
    names = [str(c) for c in grid]
    ja = names.index(f"auto@{_MEM_LOW}")
    big = list(_BIG_GEMMS)
    cores = [c.core_mhz for c in grid if c.core_mhz is not None and c.mem_mhz == _MEM_HIGH]
    slow = {f: 100 * (t[membound, names.index(f"{f}@{_MEM_HIGH}")] / ta[membound] - 1) for f in cores}
    within = np.array([slow[f] <= paper.MEMBOUND_MAX_SLOWDOWN_PCT for f in cores])  # (cores, kernels)
    knee = np.array([min(f for f, ok in zip(cores, within[:, k]) if ok) for k in range(len(membound))])
    return PaperMetrics(
        time_s=ta,
        energy_j=ea,
        core_mhz=pred.core_mhz[:, 0],
        step_time_s=t0,
        step_energy_j=e0,
        kernel_global_pct=100 * (lp_energy_at(front, t0) / e0 - 1),
        relaxed_pct={b: 100 * (lp_energy_at(front, t0 * (1 + b)) / e0 - 1) for b in paper.RELAXED},
        kernel_local_pct=pct(t[rows, j_loc], e[rows, j_loc]),
        pass_local_pct=(100 * (pass_t / t0 - 1), 100 * (pass_e / e0 - 1)),
        min_energy_pct=pct(t[rows, j_min], e[rows, j_min]),
        gemm_mem5001=(float(np.mean(g_t)), float(np.mean(g_e))),
        gemm_auto5001=(float(100 * (t[big, ja] / ta[big] - 1).mean()), float(100 * (1 - e[big, ja] / ea[big]).mean())),
        membound_saving_pct=mb,
        membound_slowdown_pct=slow,
        membound_knee_mhz=knee,
        gemm_auto_core_mhz=float(pred.core_mhz[list(_BIG_GEMMS), 0].mean()),
    )


def _paper_residuals(spec: GpuSpec) -> np.ndarray:
    """Weighted residuals of the paper fit (log errors for times and energies, points for percentages)."""
    table = llmc.paper_table()
    _types, mult = paper_kernel_types()
    t_ref = np.array([r.t_auto_s for r in table])
    e_ref = np.array([r.e_auto_j for r in table])
    m = paper_metrics(spec)
    big = t_ref >= 1e-4
    lo, hi = paper.GEMM_MEM5001_SPEEDUP_PCT
    slo, shi = paper.GEMM_MEM5001_SAVING_PCT
    mlo, mhi = paper.MEMBOUND_SAVING_PCT
    r: list[float] = []
    r += list(2 * np.log(m.time_s[big] / t_ref[big]))
    r += list(3 * np.log(m.energy_j[big] / e_ref[big]))
    r += [10 * np.log(m.step_time_s / (mult * t_ref).sum()), 10 * np.log(m.step_energy_j / (mult * e_ref).sum())]
    r += [0.4 * (m.kernel_global_pct - paper.TABLE2["kernel-global"][1])]
    r += [0.15 * (m.relaxed_pct[b] - v) for b, v in paper.RELAXED.items()]
    r += [
        0.25 * (m.min_energy_pct[1] - paper.TABLE2["kernel-min-energy"][1]),
        5 * (np.log1p(m.min_energy_pct[0] / 100) - np.log1p(paper.TABLE2["kernel-min-energy"][0] / 100)),
    ]
    # Weights as tuned with the boost ceiling and the knee range in the fit (local energy and pass-level pulled
    # √2 harder than before, the knees' lower hinge at √0.58): each calibration target holds at this optimum.
    r += [
        0.2 * np.sqrt(2) * (m.kernel_local_pct[1] - paper.TABLE2["kernel-local"][1]),
        0.2 * (m.kernel_local_pct[0] - paper.TABLE2["kernel-local"][0]),
    ]
    r += [0.6 * np.sqrt(2) * (m.pass_local_pct[1] - paper.TABLE2["pass-local"][1])]
    r += [0.2 * (m.gemm_auto5001[1] - (slo + shi) / 2), 0.3 * (m.gemm_auto5001[0] + (lo + hi) / 2)]
    r += list(0.05 * (m.membound_saving_pct - (mlo + mhi) / 2))
    # Memory-bound kernels' knees within the paper's 630–1680 MHz: every one within 2.6 % at the top, none
    # still within it one grid step below the bottom, the lightest within it at the bottom.
    f_lo, f_hi = paper.MEMBOUND_CORE_MHZ
    s_max = paper.MEMBOUND_MAX_SLOWDOWN_PCT
    r += [
        max(0.0, float(m.membound_slowdown_pct[f_hi].max()) - s_max),
        max(0.0, float(m.membound_slowdown_pct[f_lo].min()) - s_max),
    ]
    r += list(np.sqrt(0.58) * np.maximum(0.0, s_max - m.membound_slowdown_pct[f_lo - 210]))
    # The grid's 1890 MHz point must be 2–3 % faster than auto: large GEMMs run near 1840 MHz at auto.
    r += [(m.gemm_auto_core_mhz - 1890 / (1 + (lo + hi) / 200)) / 30]
    p = spec.model
    r += [min(0.0, p.p_const_w + p.k_leak_w_per_v * p.v_min_v - spec.idle_power_w) / 2]
    r += [(p.f_ridge_mhz - 1300) / 300, (p.p_mem_bg_w - 80) / 40]  # weak priors (GA102 V-f curve; GDDR6X)
    r += [(p.simt_ops_per_byte - 4) / 8]  # weak prior: the H200 fit's ~3-4 operations per streamed byte
    return np.array(r, dtype=float)


PAPER_FIT_NAMES: tuple[str, ...] = (*FIT_NAMES, "boost_max_mhz")
"""The paper fit adjusts the boost ceiling too: its GEMMs at memory 5001 MHz place it."""

_BOOST_BOUNDS_MHZ = (1700.0, 2100.0)  # GA102 boards boost to ~1.8-2.0 GHz; NVML lists up to 2100 MHz


def fit_paper(spec: GpuSpec, max_nfev: int = 400) -> tuple[GpuSpec, float]:
    """Fit the RTX 3080 Ti preset to the paper (module docstring)."""
    if not spec.model.boost_max_mhz:
        spec = spec.with_model(boost_max_mhz=1890.0)
    return fit(
        spec,
        _paper_residuals,
        names=PAPER_FIT_NAMES,
        max_nfev=max_nfev,
        bounds={**BOUNDS, "boost_max_mhz": _BOOST_BOUNDS_MHZ},
    )
