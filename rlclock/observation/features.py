"""Kernel features: what a policy sees of each kernel, normalised by fixed bounds.

The shape features use only what is known before any clock is changed: the kernel's shapes (FLOPs, bytes,
category, phase) and its auto-clock time and power (from a profile on a real GPU, or from the simulator).
The clock response (:func:`clock_response`) comes from the planning model's tables at other clocks (the
simulator, anchored on the measured auto points on a real GPU).
Bounds are fixed, not fitted to a data set, so a policy sees a new workload on the same scale.
``FEATURE_SCHEMA_VERSION`` changes whenever the list, its normalisation or the policy's state entries
(:func:`price_feature`, :func:`remaining_feature`) change; checkpoints record it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from rlclock.dvfs.spec import GpuSpec
from rlclock.errors import SpecError, TraceError
from rlclock.observation.lookahead import distinct
from rlclock.workload.trace import CATEGORIES, DTYPES, PHASES, KernelTrace

FEATURE_SCHEMA_VERSION = 4

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


def kernel_features(
    trace: KernelTrace,
    spec: GpuSpec,
    auto_time_s: np.ndarray,
    auto_energy_j: np.ndarray,
    latency_s: float,
    rows: np.ndarray | None = None,
) -> np.ndarray:
    """Feature matrix ``(len(trace), N_FEATURES)`` (float32).

    Args:
        trace: The step.
        spec: The GPU (peak rates for the roofline position, power limit).
        auto_time_s: Each invocation's auto-clock duration.
        auto_energy_j: Each invocation's auto-clock energy.
        latency_s: Switching latency the policy plans around.
        rows: Only these invocations (``(len(rows), N_FEATURES)``; the step's total time still counts all).

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
            "finite values (time > 0).",
            "re-measure or re-simulate the trace.",
        )
    c = trace.columns
    total_s = t.sum()
    if rows is not None:
        c = {name: col[rows] for name, col in c.items()}
        t, e, n = t[rows], e[rows], len(rows)
    flops, rd, wr = c["flops"], c["read_bytes"], c["write_bytes"]
    tensor = c["tensor"].astype(float)
    nbytes = rd + wr
    intensity = (flops + 1.0) / (nbytes + 1.0)
    peak_bw = spec.bandwidth_bytes_per_s(spec.max_mem_mhz)
    f_hz = spec.abs_max_core_mhz * 1e6
    rate_by_dtype = np.array([spec.tensor_flops_per_cycle_per_sm.get(d, 1.0) for d in DTYPES])
    peak_flops = np.where(
        tensor > 0,
        rate_by_dtype[c["dtype"]] * spec.sm_count * f_hz,
        spec.simt_flops_per_cycle_per_sm * spec.sm_count * f_hz,
    )
    ridge = peak_flops / peak_bw
    lat = max(latency_s, 1e-9)
    cols = [
        np.log10(flops + 1.0) / 14.0,
        np.log10(nbytes + 1.0) / 11.0,
        np.clip((np.log10(intensity) + 2.0) / 6.0, 0.0, 1.0),
        np.clip(np.log10(intensity / ridge) / 3.0, -1.0, 1.0),
        np.clip((np.log10(t) + 6.0) / 6.0, 0.0, 1.0),
        np.ones(n) if latency_s <= 0 else np.clip(np.log10(t / lat) / 3.0, -1.0, 1.0),
        np.sqrt(t / total_s),
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


PRICE_REL_MIN, PRICE_REL_MAX = 0.25, 4.0
"""The prices of time (over the step's mean auto power) a policy can tell apart: :func:`price_feature` is
-1 at the lowest and +1 at the highest."""


def price_feature(price_rel: float | np.ndarray) -> np.ndarray:
    """The price of time a policy plans with, as seen by the policy: ``log2(price_rel) / 2`` in [-1, 1].

    ``price_rel`` is the price in J/s over the step's mean auto-clock power (W), so it means the same on any
    workload: 1 values a second of slowdown at what the GPU spends in a second. Exact optima of simulated
    RTX 3080 Ti workloads at a 1 % budget price time at 1.0-1.5 of the mean power. Element-wise on arrays;
    prices of 0 or below read as -1.
    """
    # two ufuncs rather than np.clip: the env calls this on one-row arrays, where np.clip's overhead dominates
    p = np.minimum(np.maximum(np.asarray(price_rel, dtype=float), PRICE_REL_MIN), PRICE_REL_MAX)
    return 0.5 * np.log2(p)


def remaining_feature(remaining_s: float | np.ndarray, latency_s: float) -> np.ndarray:
    """Auto-clock time left in the step over eight switching latencies, in [0, 1] (1 without latency):
    near the end of a step a switch has no time to pay for itself. Element-wise on arrays."""
    rem = np.asarray(remaining_s, dtype=float)
    if latency_s <= 0.0:
        return np.ones_like(rem)
    return np.minimum(np.maximum(rem / (8.0 * latency_s), 0.0), 1.0)


def latency_feature(latency_s: float) -> float:
    """The switching latency as the policy sees it: log10(latency / 1 ms) / 3, clipped to [-1, 1]."""
    return float(min(1.0, max(-1.0, np.log10(max(latency_s, 1e-6) / 1e-3) / 3.0)))


REFERENCE_CORE_FRACTIONS = (1.0, 0.7, 0.45)
"""Locked core clocks (fractions of the highest locked core clock at that memory clock in the action set) at
which a kernel's clock response is shown to the policy, at the highest and the lowest memory clock."""
N_RESPONSE = 4 * len(REFERENCE_CORE_FRACTIONS)
"""Clock-response features per kernel: time and energy ratios at the reference configurations."""
N_KERNEL_INPUTS = N_FEATURES + N_RESPONSE + 1
"""Entries per kernel in a policy's window: shape features, clock response, a valid flag."""


def reference_configs(configs) -> list[int]:
    """Indices into ``configs`` (``ClockConfig``s) of the reference configurations: for the highest and the
    lowest locked memory clock, the locked core clocks nearest :data:`REFERENCE_CORE_FRACTIONS` of the
    highest locked core clock there."""
    return list(_reference_configs(tuple(configs)))


@lru_cache(maxsize=64)
def _reference_configs(configs: tuple) -> tuple[int, ...]:
    """Cached :func:`reference_configs` of a tuple of configurations."""
    locked = [(i, c) for i, c in enumerate(configs) if c.core_mhz is not None and c.mem_mhz is not None]
    if not locked:
        raise SpecError(
            "the kernels' clock response needs at least one locked core@memory pair in the action set.",
            "add locked pairs to the env spec's actions.",
        )
    mems = sorted({c.mem_mhz for _, c in locked})
    out = []
    for mem in (mems[-1], mems[0]):
        at = [(i, c.core_mhz) for i, c in locked if c.mem_mhz == mem]
        top = max(core for _, core in at)
        for f in REFERENCE_CORE_FRACTIONS:
            out.append(min(at, key=lambda ic: abs(ic[1] - f * top))[0])
    return tuple(out)


def clock_response(
    t_tab: np.ndarray, e_tab: np.ndarray, configs, auto_time_s: np.ndarray, auto_energy_j: np.ndarray
) -> np.ndarray:
    """``(n, N_RESPONSE)``: how each kernel answers to clocks on the planning model — at every reference
    configuration, log2 of time over auto time (clipped to [-1, 2], halved) and log2 of energy over auto
    energy (clipped to [-1, 1]). Memory-bound kernels show flat time and falling energy at a lower core
    clock, compute-bound ones the opposite; the network need not learn the GPU's DVFS physics from shapes."""
    idx = reference_configs(configs)
    t_ref = np.asarray(t_tab, float)[:, idx] / np.maximum(np.asarray(auto_time_s, float)[:, None], 1e-12)
    e_ref = np.asarray(e_tab, float)[:, idx] / np.maximum(np.asarray(auto_energy_j, float)[:, None], 1e-12)
    dt = 0.5 * np.clip(np.log2(np.maximum(t_ref, 1e-6)), -1.0, 2.0)
    de = np.clip(np.log2(np.maximum(e_ref, 1e-6)), -1.0, 1.0)
    return np.concatenate([dt, de], axis=1).astype(np.float32)


def distinct_kernels(trace: KernelTrace, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, first)``: per kernel a number shared by the kernels whose inputs (:func:`kernel_window`'s rows)
    are equal by construction — the same distinct kernel (``trace.unique_index``), phase and planning-model row
    (``row_ids``, :func:`~rlclock.observation.lookahead.table_rows`) —, and the first kernel of each."""
    kernel = trace.unique_index[1] * len(PHASES) + trace.columns["phase"]
    return distinct(kernel * (int(row_ids.max()) + 1) + row_ids)


def kernel_window(
    trace: KernelTrace,
    spec: GpuSpec,
    auto_time_s: np.ndarray,
    auto_energy_j: np.ndarray,
    latency_s: float,
    t_tab: np.ndarray,
    e_tab: np.ndarray,
    configs,
    lookahead: int,
    kernels: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """``(n + lookahead, N_KERNEL_INPUTS)``: per kernel its shape features, its clock response and a valid
    flag, zero-padded past the end of the step; rows ``k .. k + lookahead`` are what a policy sees at ``k``.
    ``kernels``: :func:`distinct_kernels` of the step, to compute each distinct kernel's row once."""
    n = len(trace)
    ids, rows = kernels if kernels is not None else (np.arange(n), np.arange(n))
    at, ae = np.asarray(auto_time_s, float), np.asarray(auto_energy_j, float)
    distinct_rows = np.empty((len(rows), N_KERNEL_INPUTS), dtype=np.float32)
    distinct_rows[:, :N_FEATURES] = kernel_features(trace, spec, at, ae, latency_s, rows)
    distinct_rows[:, N_FEATURES : N_FEATURES + N_RESPONSE] = clock_response(
        np.asarray(t_tab, float)[rows], np.asarray(e_tab, float)[rows], configs, at[rows], ae[rows]
    )
    distinct_rows[:, -1] = 1.0
    window = np.zeros((n + lookahead, N_KERNEL_INPUTS), dtype=np.float32)
    window[:n] = distinct_rows[ids]
    return window
