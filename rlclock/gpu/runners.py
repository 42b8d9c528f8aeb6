"""Runners: launchable, event-timed CUDA graph work for :func:`rlclock.gpu.meter.measure`.

:class:`GraphRunner` launches an instantiated graph on its own stream and times it with CUDA events.
:func:`isolated_runner` builds one for a single kernel of a captured step: the pruned clone (the kernel
and the memsets it depends on) repeated ``copies`` times inside one graph, so a launch keeps the GPU busy
for about ``target_batch_s`` with no host round trip between the copies — as in the step itself.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from rlclock.gpu.cuda_graph import GraphExec, GraphView, batch_graph, destroy_graph


class StreamTiming:
    """CUDA-event timing on ``self.stream`` (set by the subclass, with ``self._torch``)."""

    stream: Any
    _torch: Any

    def mark(self) -> Any:
        """A timing event recorded after the work enqueued so far."""
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record(self.stream)
        return ev

    def wait(self, mark: Any) -> None:
        """Block until the GPU reached ``mark``."""
        mark.synchronize()

    def elapsed_s(self, start: Any, end: Any) -> float:
        """GPU time between two reached marks, seconds."""
        return start.elapsed_time(end) / 1e3


class GraphRunner(StreamTiming):
    """An instantiated graph launched on a dedicated stream and timed with CUDA events.

    Args:
        exec_: The executable graph (closed by :meth:`close`).
        units_per_launch: Units of work one launch runs (copies of an isolated kernel; 1 for a step).
    """

    def __init__(self, exec_: GraphExec, units_per_launch: int = 1) -> None:
        import torch

        self._torch = torch
        self.exec = exec_
        self.units_per_launch = int(units_per_launch)
        self.stream = torch.cuda.Stream()

    def launch(self) -> None:
        """Enqueue one run of the graph."""
        self.exec.launch(self.stream.cuda_stream)

    def time_per_unit_s(self, min_s: float = 0.02, repeats: int = 3) -> float:
        """Median time of one unit over ``repeats`` timings of back-to-back launches lasting ``>= min_s``."""
        for _ in range(2):
            self.launch()
        self.stream.synchronize()
        a = self.mark()
        self.launch()
        b = self.mark()
        b.synchronize()
        one = max(self.elapsed_s(a, b), 1e-7)
        n = max(1, math.ceil(min_s / one))
        out = []
        for _ in range(repeats):
            a = self.mark()
            for _ in range(n):
                self.launch()
            b = self.mark()
            b.synchronize()
            out.append(self.elapsed_s(a, b) / (n * self.units_per_launch))
        return statistics.median(out)

    def close(self) -> None:
        """Free the executable graph."""
        self.stream.synchronize()
        self.exec.close()


EARLY_EXIT_RATIO = 0.3
"""An isolated kernel faster than this fraction of its in-sequence time is taken to exit early."""


@dataclass(frozen=True)
class IsolationInfo:
    """How an isolated kernel is replayed.

    Attributes:
        position: Its node position in the captured graph.
        kept: Node positions kept (the kernel and its dependency memsets).
        memsets: Number of memset nodes kept.
        copies: Copies per launch.
        single_launch_s: Time of one launch of a single copy (including the graph launch), seconds.
        kernels_back: How many preceding kernels the memset search walked past (0: the exact rule).
        early_exit: Even the widest memset search left it far faster than in sequence: not isolable.
    """

    position: int
    kept: tuple[int, ...]
    memsets: int
    copies: int
    single_launch_s: float
    kernels_back: int = 0
    early_exit: bool = False


def _single_time_s(view: GraphView, kept: list[int]) -> tuple[int, float]:
    sub = view.subgraph(kept)
    try:
        single = GraphRunner(GraphExec(sub))
        try:
            return sub, single.time_per_unit_s(min_s=0.002, repeats=1)
        finally:
            single.close()
    except Exception:
        destroy_graph(sub)
        raise


def isolated_runner(
    view: GraphView,
    position: int,
    target_batch_s: float = 0.002,
    max_copies: int = 2000,
    reference_s: float | None = None,
    max_kernels_back: int = 3,
) -> tuple[GraphRunner, IsolationInfo]:
    """A runner replaying the node at ``position`` alone, with its real arguments and its memsets.

    Args:
        view: The captured step's graph.
        position: The node to isolate.
        target_batch_s: GPU time one launch should take, seconds.
        max_copies: Upper bound on the copies per launch.
        reference_s: Its in-sequence duration. When given and the isolated kernel runs faster than
            :data:`EARLY_EXIT_RATIO` of it (it exits early: a counter it needs is not reset), the memset
            search walks past up to ``max_kernels_back`` preceding kernels until it does its work.
        max_kernels_back: Widest memset search.
    """
    back = 0
    kept = view.isolation_set(position)
    sub, t1 = _single_time_s(view, kept)
    early = reference_s is not None and t1 < EARLY_EXIT_RATIO * reference_s
    while early and back < max_kernels_back:
        back += 1
        wider = view.isolation_set(position, back)
        if wider == kept:
            continue
        destroy_graph(sub)
        kept = wider
        sub, t1 = _single_time_s(view, kept)
        early = reference_s is not None and t1 < EARLY_EXIT_RATIO * reference_s
    if early:
        back = 0  # nothing helped: replay with the exact rule and say so
        destroy_graph(sub)
        kept = view.isolation_set(position)
        sub, t1 = _single_time_s(view, kept)
    try:
        copies = int(min(max_copies, max(1, math.ceil(target_batch_s / t1))))
        batch = batch_graph(sub, copies)
    finally:
        destroy_graph(sub)
    runner = GraphRunner(GraphExec(batch, owns_graph=True), copies)
    memsets = sum(1 for p in kept if view.types[p] == "memset")
    return runner, IsolationInfo(position, tuple(kept), memsets, copies, t1, back, early)
