"""A simple, latency-aware schedule rule: GEMM-heavy and memory-bound windows of a step (not a tuned policy).

For demonstrations and benchmarks of the controller when no trained policy is at hand. The step's kernels
are cut, in order, into windows of at least ``min_latencies`` switching latencies of kernel time (the last,
shorter remainder joins the window before it). A window whose share of tensor-core time (GEMM, attention)
is above the median window's is GEMM-heavy and gets ``tensor_config``; the others get ``other_config``
(one window alone: GEMM-heavy when more than half its time is on tensor cores). Requests then change no
faster than the latency allows, which a per-kernel rule at a 6 ms latency would not (its plan would hold one
configuration).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

from rlclock.errors import DeployError
from rlclock.schedule import ClockConfig, ClockSchedule
from rlclock.workload.trace import KernelTrace


def class_windows(
    trace: KernelTrace,
    auto_time_s: np.ndarray,
    latency_s: float,
    tensor_config: ClockConfig,
    other_config: ClockConfig,
    min_latencies: float = 2.0,
) -> ClockSchedule:
    """The schedule of the module's rule.

    Args:
        trace: The step's kernels (their categories say which use tensor cores).
        auto_time_s: Each kernel's duration at auto clocks, seconds.
        latency_s: The switching latency, seconds.
        tensor_config: Configuration of GEMM-heavy windows.
        other_config: Configuration of memory-bound windows.
        min_latencies: Shortest window, in switching latencies.

    Raises:
        DeployError: ``auto_time_s`` does not match the trace.
    """
    t = np.asarray(auto_time_s, dtype=float)
    n = len(trace)
    if t.shape != (n,):
        raise DeployError(f"expected {n} kernel durations, found shape {t.shape}.")
    bounds: list[tuple[int, int]] = []
    start, acc = 0, 0.0
    for i in range(n):
        acc += float(t[i])
        if acc >= min_latencies * latency_s:
            bounds.append((start, i + 1))
            start, acc = i + 1, 0.0
    if start < n:
        bounds = [*bounds[:-1], (bounds[-1][0], n)] if bounds else [(0, n)]
    tensor = np.array([k.uses_tensor_cores for k in trace])
    share = [float(t[a:b][tensor[a:b]].sum() / max(t[a:b].sum(), 1e-30)) for a, b in bounds]
    cut = statistics.median(share) if len(share) > 1 else 0.5
    per_kernel: list[ClockConfig] = []
    for (a, b), sh in zip(bounds, share):
        per_kernel += [tensor_config if sh > cut else other_config] * (b - a)
    return ClockSchedule.from_configs(per_kernel, "gemm-heavy/memory-bound windows")


def class_windows_builder(
    tensor_config: ClockConfig, other_config: ClockConfig, min_latencies: float = 2.0
) -> Callable[[KernelTrace, np.ndarray, float], ClockSchedule]:
    """:func:`class_windows` as a schedule builder for :func:`rlclock.deploy.clocked`."""

    def build(trace: KernelTrace, auto_time_s: np.ndarray, latency_s: float) -> ClockSchedule:
        return class_windows(trace, auto_time_s, latency_s, tensor_config, other_config, min_latencies)

    return build
