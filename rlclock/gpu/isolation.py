"""Validate kernel isolation: each kernel replayed alone against its duration inside the step.

For every trace entry of a captured step, the isolated replay's time per launch is compared with the
in-sequence duration the profiler saw in graph replays. A ratio near 1 says the isolated kernel does the
same work; the sum over all kernels says how much of the step the isolated kernels account for. Outliers
get an explanation: the usual causes are listed in :func:`explain`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from rlclock.workload.kernel_names import short_name
from rlclock.workload.trace import Kernel, KernelTrace

OUTLIER = 0.15
"""Relative deviation of the ratio from 1 above which a kernel is explained."""


@dataclass(frozen=True)
class IsolationCheck:
    """One kernel isolated.

    Attributes:
        index: Trace entry.
        name: Kernel name (short).
        category: Kernel category.
        in_sequence_s: Median duration inside the step (profiler), seconds.
        isolated_s: Time per copy replayed alone (CUDA events, kept memsets included), seconds.
        ratio: ``isolated_s / in_sequence_s``.
        memsets: Memset nodes kept with it.
        copies: Copies per launch.
        kernels_back: Preceding kernels the memset search walked past (see ``isolated_runner``).
        note: Why the ratio is off, for outliers.
    """

    index: int
    name: str
    category: str
    in_sequence_s: float
    isolated_s: float
    ratio: float
    memsets: int
    copies: int
    kernels_back: int = 0
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def explain(
    kernel: Kernel, in_sequence_s: float, isolated_s: float, memsets: int, l2_bytes: float, kernels_back: int = 0
) -> str:
    """A one-line reason for an isolated/in-sequence ratio away from 1 (empty when it is close)."""
    ratio = isolated_s / in_sequence_s
    prefix = (
        f"needed the memset(s) of the {kernels_back} kernel(s) before it (a library call's counter "
        "reset ahead of its helper kernel); "
        if kernels_back
        else ""
    )
    if abs(ratio - 1.0) <= OUTLIER:
        return prefix.rstrip("; ")
    reasons = []
    if ratio < 0.3:
        reasons.append(
            "far too fast: the kernel exits early, it depends on state (a counter or flag) that "
            "no memset within reach resets; it cannot be replayed alone"
        )
        return prefix + "; ".join(reasons)
    if in_sequence_s < 10e-6:
        reasons.append(
            f"short kernel ({in_sequence_s * 1e6:.1f} µs): graph node overhead (~1 µs)"
            + (f" and {memsets} kept memset(s)" if memsets else "")
            + " weigh in"
        )
    read = kernel.dram_read_bytes
    if ratio < 1 and 0 < read <= l2_bytes:
        reasons.append(
            f"its inputs ({read / 1e6:.0f} MB) stay in the {l2_bytes / 1e6:.0f} MB L2 between "
            "back-to-back replays; in the step they come from DRAM"
        )
    if ratio < 1 and kernel.uses_tensor_cores:
        reasons.append(
            "alone it runs in its own power/clock steady state (the step shares the power cap with its neighbours)"
        )
    if ratio > 1 and kernel.uses_tensor_cores:
        reasons.append(
            "back to back it holds the board at its power cap and runs at a lower SM clock than in "
            "the step, where lighter neighbours leave it power headroom"
        )
    if ratio > 1 and 0 < read <= l2_bytes:
        reasons.append("in the step its inputs were still in L2 from the kernel before")
    if not reasons:
        reasons.append("unexplained: inspect with a per-kernel profiler")
    return prefix + "; ".join(reasons)


def check_isolation(
    captured,
    trace: KernelTrace,
    indices: Sequence[int] | None = None,
    target_batch_s: float = 0.002,
    l2_bytes: float = 60e6,
) -> list[IsolationCheck]:
    """Replay each selected entry alone and compare with its in-sequence duration.

    Args:
        captured: The :class:`~rlclock.gpu.profile.CapturedStep` the trace was profiled from.
        trace: The trace (its ``"in-sequence"`` measurements are the reference).
        indices: Entries to check (default: all).
        target_batch_s: GPU time per launch of the isolated replay, seconds.
        l2_bytes: L2 size for the explanations, bytes.
    """
    from rlclock.gpu.runners import isolated_runner

    out = []
    for i in range(len(trace)) if indices is None else indices:
        k = trace[i]
        ref = next((m.time_s for m in k.measured if m.source == "in-sequence"), None)
        runner, info = isolated_runner(captured.view, captured.entries[i], target_batch_s, reference_s=ref)
        try:
            t = runner.time_per_unit_s()
        finally:
            runner.close()
        ratio = t / ref if ref else float("nan")
        note = explain(k, ref, t, info.memsets, l2_bytes, info.kernels_back) if ref else "no in-sequence reference"
        out.append(
            IsolationCheck(
                i,
                short_name(k.name),
                k.category,
                ref or float("nan"),
                t,
                ratio,
                info.memsets,
                info.copies,
                info.kernels_back,
                note,
            )
        )
    return out


def summarize(checks: Sequence[IsolationCheck]) -> dict[str, float]:
    """Totals: in-sequence and isolated sums, their ratio, the median ratio and the number of outliers."""
    import statistics

    seq = sum(c.in_sequence_s for c in checks)
    iso = sum(c.isolated_s for c in checks)
    return {
        "kernels": len(checks),
        "in_sequence_sum_s": seq,
        "isolated_sum_s": iso,
        "ratio_of_sums": iso / seq if seq else float("nan"),
        "median_ratio": statistics.median(c.ratio for c in checks) if checks else float("nan"),
        "min_ratio": min((c.ratio for c in checks), default=float("nan")),
        "max_ratio": max((c.ratio for c in checks), default=float("nan")),
        "outliers": sum(1 for c in checks if abs(c.ratio - 1) > OUTLIER),
        "widened_memset_search": sum(1 for c in checks if c.kernels_back),
    }
