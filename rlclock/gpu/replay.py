"""Run a clock schedule on a real GPU: the captured step replayed in segments, clocks changed in between.

A :class:`~rlclock.schedule.ClockSchedule` requests one configuration per trace entry. The step's graph is
cut where the request changes (:func:`rlclock.gpu.graph_pruning.segment_bounds`; memsets go with the kernel
they prepare); each segment becomes its own executable graph. One step is then: for every segment, ask the
:class:`~rlclock.gpu.clocks.ClockControl` for its configuration, launch it, and wait for it to finish —
so the change lands between segments, as a host-driven controller would do it. In observe (dry-run)
mode the segments run and every change is recorded but not applied, which measures the cost of the
segmentation itself (host round trips between segments) against the unsegmented step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlclock.errors import ScheduleError
from rlclock.gpu import graph_pruning
from rlclock.gpu.clocks import ClockControl
from rlclock.gpu.meter import EnergySampler, MeasureSettings, WindowStats, measure
from rlclock.gpu.nvml import NvmlDevice
from rlclock.gpu.runners import StreamTiming
from rlclock.schedule import ClockSchedule


class SegmentedStep(StreamTiming):
    """The captured step cut into per-configuration segments.

    Args:
        captured: The :class:`~rlclock.gpu.profile.CapturedStep`.
        schedule: One requested configuration per trace entry.
        control: Applies each segment's configuration (dry-run records only).
        read_back: Read the clocks back after every change (three NVML reads per change, on the host path
            between two segments).
    """

    def __init__(self, captured: Any, schedule: ClockSchedule, control: ClockControl, read_back: bool = False) -> None:
        import torch

        from rlclock.gpu.cuda_graph import GraphExec

        schedule.check_length(len(captured.entries))
        view = captured.view
        self.control = control
        self.read_back = read_back
        self.bounds = graph_pruning.segment_bounds(captured.entries, schedule.index.tolist(), len(view))
        self.configs = [schedule.configs[label] for _, _, label in self.bounds]
        order = list(range(len(view)))
        self.execs: list[GraphExec] = []
        try:
            for start, stop, _ in self.bounds:
                keep = graph_pruning.segment_set(order, start, stop, view.types, view.preds)
                self.execs.append(GraphExec(view.subgraph(keep), owns_graph=True))
        except Exception:
            self.close()
            raise
        self.stream = torch.cuda.Stream()
        self.units_per_launch = 1
        self._torch = torch
        self.steps = 0

    @property
    def switches_per_step(self) -> int:
        """Configuration changes between consecutive segments of one step."""
        return sum(1 for a, b in zip(self.configs, self.configs[1:], strict=False) if a != b)

    # -- Runner protocol ------------------------------------------------------------------------------
    def launch(self) -> None:
        """One step: every segment at its configuration, the host waiting for each before the next change."""
        for config, ex in zip(self.configs, self.execs, strict=True):
            if config != self.control.current:
                self.control.apply(config, read_back=self.read_back)
            ex.launch(self.stream.cuda_stream)
            self.stream.synchronize()
        self.steps += 1

    def close(self) -> None:
        """Free the segment graphs."""
        for ex in self.execs:
            ex.close()
        self.execs = []


@dataclass
class ScheduleReplay:
    """A schedule run on the GPU.

    Attributes:
        name: The schedule's name.
        segments: Segments per step.
        switches_per_step: Configuration changes per step.
        stats: Time and energy per step (windows over back-to-back steps).
        dry_run: Changes were recorded, not applied.
        records: The first step's change records (``ClockReadback.as_dict``).
    """

    name: str
    segments: int
    switches_per_step: int
    stats: WindowStats
    dry_run: bool
    records: list[dict[str, Any]] = field(default_factory=list)


def replay_schedule(
    captured: Any,
    schedule: ClockSchedule,
    control: ClockControl,
    device: NvmlDevice,
    settings: MeasureSettings = MeasureSettings(),
    read_back: bool = False,
) -> ScheduleReplay:
    """Run ``schedule`` segment by segment, back to back, and measure time and energy per step (under the board
    power limit it names, set through ``control`` first and given back with the clocks).

    The first step reads the clocks back after every change (its records are returned); the measured
    steps do so only with ``read_back``.

    Raises:
        ScheduleError: The schedule does not fit the captured step.
        ClockError: Its power limit is outside the GPU's range.
    """
    if len(schedule) != len(captured.entries):
        raise ScheduleError(
            f"schedule {schedule.name!r} has {len(schedule)} entries, the captured step {len(captured.entries)}.",
            "build the schedule for this trace.",
        )
    seg = SegmentedStep(captured, schedule, control, read_back=True)
    try:
        if schedule.power_limit_w is not None:
            control.set_power_limit(schedule.power_limit_w)
        before = len(control.history)
        seg.launch()  # one step to record the changes, read back
        records = [r.as_dict() for r in control.history[before:]]
        seg.read_back = read_back
        with EnergySampler(device, settings.poll_s, settings.clock_period_s) as sampler:
            stats = measure(seg, sampler, settings)
    finally:
        seg.close()
        control.restore()
    return ScheduleReplay(schedule.name, len(seg.bounds), seg.switches_per_step, stats, control.dry_run, records)
