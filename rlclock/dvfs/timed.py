"""Kernels known only by their measured time: their work, as the GPU model would need it to take that time.

A profiled kernel that no cost rule knew (a library kernel inside a replayed CUDA graph whose call could not be
found, a generated kernel whose source could not be read) carries no FLOPs or bytes
(:attr:`~rlclock.workload.trace.Kernel.cost_from` ``"time"``). With no work, the model would run it in a launch's
overhead at any clock. :func:`work_from_time` gives it the work of its class — tensor-core FLOPs for a product or
attention kernel (by its name), streamed bytes for anything else — in the amount that makes the model predict its
measured in-sequence time at the driver's clocks. How it then moves with the clocks is its class's, not its own:
the profile's summary says how many kernels and how much of the step are planned this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from rlclock.dvfs.model import kernel_arrays, predict
from rlclock.dvfs.spec import GpuSpec
from rlclock.schedule import ClockConfig
from rlclock.workload.kernel_names import activity_kind, classify
from rlclock.workload.trace import Kernel

NOMINAL_FLOPS = 1e9
"""Tensor FLOPs a product- or attention-class kernel starts from before it is scaled to its time."""
NOMINAL_BYTES = 1e6
"""Bytes read (and as many written) a streaming kernel starts from before it is scaled to its time."""
FIT_ROUNDS = 40
"""Rounds of scaling the work by measured over predicted time (the model is not linear in the work)."""


def _measured_time_s(k: Kernel, spec: GpuSpec) -> float | None:
    """The kernel's measured auto-clock time: on this GPU if it has one there, else on any."""
    points = [m for m in k.measured if m.is_auto and m.time_s > 0]
    for m in points:
        if m.gpu in (spec.key, spec.name):
            return m.time_s
    return points[0].time_s if points else None


def _nominal(k: Kernel) -> Kernel:
    category = classify(k.name, k.launch_op.name if k.launch_op else None)
    if category in ("gemm", "attention"):
        return replace(
            k,
            category=category,
            flops=NOMINAL_FLOPS,
            dram_read_bytes=0.0,
            dram_write_bytes=0.0,
            dtype="bf16" if k.dtype == "fp32" else k.dtype,
            access="stream",
            gemm_bmnk=None,
        )
    return replace(
        k,
        category=category if category not in ("gemm", "attention", "other") else "elementwise",
        flops=0.0,
        dram_read_bytes=NOMINAL_BYTES,
        dram_write_bytes=NOMINAL_BYTES,
        access="stream",
        gemm_bmnk=None,
    )


def work_from_time(kernels: Sequence[Kernel], spec: GpuSpec) -> list[Kernel]:
    """``kernels`` with every one marked ``cost_from="time"`` given the work of its class that takes its measured
    time on ``spec`` at the driver's clocks (module docstring). Memsets, memcopies and kernels without a measured
    time are left as they are."""
    picked: list[int] = []
    times: list[float] = []
    for i, k in enumerate(kernels):
        if k.cost_from != "time" or activity_kind(k.name) != "kernel":
            continue
        t = _measured_time_s(k, spec)
        if t is not None:
            picked.append(i)
            times.append(t)
    out = list(kernels)
    if not picked:
        return out
    nominal = [_nominal(kernels[i]) for i in picked]
    want = np.array(times)
    scale = np.ones(len(picked))
    for _ in range(FIT_ROUNDS):  # the model is not linear in the work (L2 residency, the power cap): iterate
        got = predict(
            kernel_arrays([_scaled(k, w) for k, w in zip(nominal, scale, strict=True)], spec), spec, [ClockConfig()]
        ).time_s[:, 0]
        ratio = want / np.maximum(got, 1e-12)
        scale = scale * ratio
        if np.all(np.abs(ratio - 1.0) < 1e-3):
            break
    for i, k, w in zip(picked, nominal, scale, strict=True):
        out[i] = _scaled(k, float(w))
    return out


def _scaled(k: Kernel, w: float) -> Kernel:
    return replace(k, flops=k.flops * w, dram_read_bytes=k.dram_read_bytes * w, dram_write_bytes=k.dram_write_bytes * w)
