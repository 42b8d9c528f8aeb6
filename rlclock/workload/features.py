"""Kernel features: what a policy sees of each kernel, normalised by fixed bounds.

The features use only what is known before any clock is changed: the kernel's shapes (FLOPs, bytes,
category, phase) and its auto-clock time and power (from a profile on a real GPU, or from the simulator).
Bounds are fixed, not fitted to a data set, so a policy sees a new workload on the same scale.
``FEATURE_SCHEMA_VERSION`` changes whenever the list or its normalisation changes; checkpoints record it.
"""

from __future__ import annotations

import numpy as np

from rlclock.errors import TraceError
from rlclock.gpu.spec import GpuSpec
from rlclock.workload.trace import CATEGORIES, DTYPES, PHASES, KernelTrace

FEATURE_SCHEMA_VERSION = 1

_SCALAR = (
    "log_flops",  # log10(FLOPs + 1) / 14
    "log_bytes",  # log10(DRAM bytes + 1) / 11
    "intensity",  # (log10(FLOPs/byte) + 2) / 6, clipped to [0, 1]
    "roofline",  # log10(intensity / GPU ridge intensity) / 3, clipped to [-1, 1]
    "log_time",  # (log10(auto time s) + 6) / 6, clipped to [0, 1]
    "time_vs_latency",  # log10(auto time / switching latency) / 3, clipped to [-1, 1]; 1 when latency is 0
    "time_share",  # sqrt(auto time / step auto time)
    "write_fraction",  # written / (read + written) bytes
    "power",  # auto power / power limit, clipped to [0, 1.5]
    "tensor",  # 1 for tensor-core kernels
)

FEATURE_NAMES: tuple[str, ...] = (
    *_SCALAR,
    *(f"category_{c}" for c in CATEGORIES),
    *(f"phase_{p}" for p in PHASES),
)
N_FEATURES = len(FEATURE_NAMES)


def kernel_features(trace: KernelTrace, spec: GpuSpec, auto_time_s: np.ndarray, auto_energy_j: np.ndarray,
                    latency_s: float) -> np.ndarray:
    """Feature matrix ``(len(trace), N_FEATURES)`` (float32).

    Args:
        trace: The step.
        spec: The GPU (peak rates for the roofline position, power limit).
        auto_time_s: Each invocation's auto-clock duration.
        auto_energy_j: Each invocation's auto-clock energy.
        latency_s: Switching latency the policy plans around.

    Raises:
        TraceError: If any input is NaN or infinite (named, with the kernel).
    """
    n = len(trace)
    t = np.asarray(auto_time_s, float)
    e = np.asarray(auto_energy_j, float)
    if t.shape != (n,) or e.shape != (n,):
        raise TraceError(f"features need {n} auto times and energies, found {t.shape} and {e.shape}.")
    bad = ~(np.isfinite(t) & (t > 0) & np.isfinite(e) & (e >= 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(
            f"kernel #{i} ({trace[i].name!r}) has auto time {t[i]!r} s and energy {e[i]!r} J; features need "
            "finite values (time > 0).", "re-measure or re-simulate the trace.")
    c = trace.columns
    flops, rd, wr = c["flops"], c["read_bytes"], c["write_bytes"]
    tensor = c["tensor"].astype(float)
    nbytes = rd + wr
    intensity = (flops + 1.0) / (nbytes + 1.0)
    peak_bw = spec.bandwidth_bytes_per_s(spec.max_mem_mhz)
    f_hz = spec.abs_max_core_mhz * 1e6
    rate_by_dtype = np.array([spec.tensor_flops_per_cycle_per_sm.get(d, 1.0) for d in DTYPES])
    peak_flops = np.where(tensor > 0, rate_by_dtype[c["dtype"]] * spec.sm_count * f_hz,
                          spec.simt_flops_per_cycle_per_sm * spec.sm_count * f_hz)
    ridge = peak_flops / peak_bw
    lat = max(latency_s, 1e-9)
    cols = [
        np.log10(flops + 1.0) / 14.0,
        np.log10(nbytes + 1.0) / 11.0,
        np.clip((np.log10(intensity) + 2.0) / 6.0, 0.0, 1.0),
        np.clip(np.log10(intensity / ridge) / 3.0, -1.0, 1.0),
        np.clip((np.log10(t) + 6.0) / 6.0, 0.0, 1.0),
        np.ones(n) if latency_s <= 0 else np.clip(np.log10(t / lat) / 3.0, -1.0, 1.0),
        np.sqrt(t / t.sum()),
        wr / np.maximum(nbytes, 1.0),
        np.clip(e / t / spec.power_limit_w, 0.0, 1.5),
        tensor,
    ]
    onehot_c = np.eye(len(CATEGORIES))[c["category"]]
    onehot_p = np.eye(len(PHASES))[c["phase"]]
    out = np.column_stack([*cols, onehot_c, onehot_p]).astype(np.float32)
    if not np.all(np.isfinite(out)):  # pragma: no cover - guarded by the input checks above
        raise TraceError("kernel features contain NaN or infinity.")
    return out
