"""GPUs that differ from a preset the way real ones do: parameters drawn within documented ranges.

A preset's parameters are what rlclock believes about a GPU; a real one differs. :func:`hidden_gpu` draws such a
GPU (the "true" GPU of the calibration proof and of online learning), whose parameters are hidden from whatever
is judged on it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rlclock.dvfs.spec import GpuSpec

HIDDEN_RANGES: dict[str, float] = {
    "v_min_v": 0.05,
    "v_max_v": 0.05,
    "f_ridge_mhz": 0.15,
    "p_const_w": 0.30,
    "k_leak_w_per_v": 0.30,
    "c_clock_w": 0.20,
    "c_tensor_w": 0.20,
    "c_simt_w": 0.20,
    "e_xbar_j_per_byte": 0.30,
    "p_mem_bg_w": 0.30,
    "e_dram_j_per_byte": 0.30,
    "eta_gemm": 0.08,
    "eta_stream": 0.15,
    "eta_reduce": 0.15,
    "simt_ops_per_byte": 0.30,
    "lat_core_cycles": 0.30,
    "lat_mem_cycles": 0.30,
    "smem_bytes_per_cycle": 0.30,
    "e_smem_j_per_byte": 0.30,
}
"""Relative half-widths of the uniform draws of a hidden GPU's parameters around a preset's: voltage end points
±5 %, the knee (ridge) ±15 %, power floor and leakage ±30 %, clock, tensor and SIMT power ±20 %, memory power
±30 %, achieved GEMM fraction ±8 %, bandwidth (stream efficiency) and reductions ±15 %, SIMT work per byte and
DRAM latency ±30 %, shared-memory bandwidth and energy per byte ±30 % (docs/simulator.md, "Calibrating a GPU")."""


def hidden_gpu(base: GpuSpec, seed: int) -> GpuSpec:
    """A GPU like ``base`` whose parameters are drawn within :data:`HIDDEN_RANGES` (efficiencies kept <= 1)."""
    rng = np.random.default_rng(seed)
    p = base.model.as_dict()
    changes = {}
    for name, half in HIDDEN_RANGES.items():
        v = p[name] * (1.0 + rng.uniform(-half, half))
        if name.startswith("eta_"):
            v = min(v, 0.98)
        changes[name] = v
    if changes["v_max_v"] <= changes["v_min_v"] + 0.05:
        changes["v_max_v"] = changes["v_min_v"] + 0.05
    return replace(base.with_model(**changes), key=f"{base.key}-hidden-{seed}")
