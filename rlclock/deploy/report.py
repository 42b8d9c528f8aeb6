"""What a :class:`~rlclock.deploy.controller.ClockController` did, and how well its switches were timed.

Two errors are reported for every switch the worker issued:

* **issue error** = issued − planned: how late the worker called the driver against its own plan
  (``anchor + issue_s``) — its timer, the anchor arriving late, or waiting for the previous switch.
* **switch-time error** = issued − ideal, where ideal = (when the segment's first kernel actually started)
  − lead. The actual start is placed from GPU timestamps at the step boundaries: the step's anchor plus
  the planned offset, stretched by the step's measured GPU duration over the planned one (to the end mark
  when the loop gives one, else to the next mark, per step). A switch is *late* when it would land
  (issued + latency) after its kernels started.

When not every step is marked on the GPU (``anchor_every`` > 1 without ``time_all_steps``), the start of a
step between two marks is not measured: it is placed between them at an even pace, and the switches judged
so are counted in ``interpolated``. With ``time_all_steps`` every step's start is measured.

Steps that follow a pause (a per-step interval between marks over :data:`PAUSE_FACTOR` times the median,
e.g. evaluation or a checkpoint between steps) are left out of the error statistics, as are the unmarked
steps of an interval that holds a pause (they cannot be placed) and switches for a step after the last mark
(a step that never came, or one that cannot be placed): they were timed against a step period that did not
hold, or cannot be judged. They are counted in ``excluded``.

With several plans (:meth:`~rlclock.deploy.controller.ClockController.set_pattern`) each switch is judged against
its own plan's segment, and :attr:`ControllerReport.per_plan` gives the steps each plan ran and these figures for
the switches of each plan. A boundary switch (into a step whose plan differs from the previous step's) is judged
against the start of its step's first segment. Switches issued for a step under a plan that a later pattern took
the step away from (``superseded``) are counted but not judged: their step ran another plan.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rlclock.deploy.anchor import AnchorLog
from rlclock.deploy.pattern import PlanPattern
from rlclock.deploy.plan import SwitchPlan

PAUSE_FACTOR = 3.0
"""An anchor interval longer than this many median intervals is a pause."""


class _RecordFields(NamedTuple):
    status: str
    step: int
    event: int
    planned_s: float
    issued_s: float
    call_s: float
    estimated: bool


class SwitchRecord(_RecordFields):
    """What the worker did with one switch task: ``(status, step, event, planned_s, issued_s, call_s, estimated)``,
    and :attr:`plan`, the plan whose switch it was.

    The plan is an attribute rather than an eighth field so that code reading a record as the seven fields it had
    before there were several plans keeps working; it survives pickling (the worker process sends its records so).
    """

    plan: int

    def __new__(
        cls,
        status: str,
        step: int,
        event: int,
        planned_s: float,
        issued_s: float,
        call_s: float,
        estimated: bool,
        plan: int = 0,
    ) -> SwitchRecord:
        self = super().__new__(cls, status, step, event, planned_s, issued_s, call_s, estimated)
        self.plan = int(plan)
        return self

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (*self, self.plan)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, plan={self.plan})"


def record_plan(record: Sequence[Any]) -> int:
    """The plan of a worker record: :attr:`SwitchRecord.plan`, an eighth field, or plan 0 for a record of seven."""
    plan = getattr(record, "plan", None)
    if plan is None:
        plan = record[7] if len(record) > 7 else 0
    return int(plan)


@dataclass(frozen=True)
class Stats:
    """Summary of a set of times, seconds.

    Attributes:
        n: How many.
        median_s: Median.
        mean_s: Mean.
        p95_abs_s: 95th percentile of the absolute values.
        max_abs_s: Largest absolute value.
    """

    n: int = 0
    median_s: float = math.nan
    mean_s: float = math.nan
    p95_abs_s: float = math.nan
    max_abs_s: float = math.nan

    @classmethod
    def of(cls, values: np.ndarray | list[float]) -> Stats:
        """Statistics of the finite values."""
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return cls()
        a = np.abs(v)
        return cls(int(v.size), float(np.median(v)), float(v.mean()), float(np.percentile(a, 95)), float(a.max()))

    def ms(self) -> str:
        """``median / p95 |x| / max |x|`` in milliseconds."""
        if self.n == 0:
            return "n/a"
        return f"{self.median_s * 1e3:+.3f} / {self.p95_abs_s * 1e3:.3f} / {self.max_abs_s * 1e3:.3f} ms"


@dataclass
class PlanFigures:
    """What one plan of several did.

    Attributes:
        plan: Its index (0: the schedule, 1..: the alternatives).
        steps: Steps of the loop that ran it.
        issued: Its switches issued for its own steps, boundary switches into them included.
        boundary: Of those, the boundary switches.
        late: Judged switches that would land after their kernels started.
        issue_error: Issued − planned, of its judged switches.
        switch_error: Issued − ideal, of its judged switches.
    """

    plan: int
    steps: int = 0
    issued: int = 0
    boundary: int = 0
    late: int = 0
    issue_error: Stats = field(default_factory=Stats)
    switch_error: Stats = field(default_factory=Stats)


@dataclass
class ControllerReport:
    """The controller's run.

    Attributes:
        mode: ``"live"`` (clocks set), ``"dry-run"`` (NVML present, nothing set) or ``"plan-only"`` (no NVML).
        gpu_name: The GPU's NVML name (``None`` without NVML).
        device: NVML index of the GPU.
        worker: ``"process"`` or ``"thread"``.
        anchor_source: ``"cuda"`` (GPU events) or ``"host"``.
        plan: The switch plan applied.
        steps: Steps of the loop while the controller ran (``step()`` calls).
        anchor_every: Steps between anchors (the controller's setting).
        anchored: Steps whose anchor went to the worker.
        timed: Steps whose start was measured on the GPU (the anchored ones, or all with ``time_all_steps``).
        step_time_s: Median GPU time from one step's start to the next one's, seconds.
        busy_time_s: Median GPU time from a step's start mark to its end mark, seconds (NaN without end marks).
        issued: Switches issued (or, in a dry run, that would have been).
        missed: Switches dropped because they could no longer land before their segment ended.
        stale: Switches dropped because their step was over before they were due.
        noop: Switches not needed (the configuration was already requested).
        resync: Switches that brought the clocks to the plan's configuration outside the plan's events.
        excluded: Issued switches left out of the error statistics (after a pause, or for a step that cannot be
            placed).
        interpolated: Of the judged switches, those whose step's start was placed between two measured ones.
        late: Issued switches that would land after their kernels started.
        issue_error: Issued − planned (module docstring).
        switch_error: Issued − ideal (module docstring).
        anchor_delay: How long after a step's start the controller learned of it.
        call_time: Duration of the driver calls (0 in a dry run).
        readbacks: Clock read-backs taken one latency after a switch.
        readback_matched: Of those, how many showed the requested core and memory clocks (live mode only).
        energy_j: GPU energy over the controlled steps, joules (``None`` if not measured).
        energy_time_s: Wall time the energy was measured over, seconds.
        pace: The running step period over the plan's that the worker followed at the end (1: the timeline as
            profiled; :mod:`rlclock.deploy.worker`).
        points: Points inside a step (``clk.point()``, ``clk.watch``) from which the worker re-timed switches.
        boundary: Of the issued switches, those into a step whose plan differs from the previous step's.
        superseded: Of the issued switches, those for a step that a later pattern gave another plan (not judged).
        replaced: Switches scheduled under a plan that a later pattern took their step away from (not issued).
        overtaken: Switches of a step not issued because the next step's (other) plan had already set the clocks.
        per_plan: Steps and switch figures of each plan (one entry per plan, also when there is only one).
        power_limit: The board power limit the schedule named, as the worker's control recorded it when it set
            it (or, in a dry run, would have): :meth:`~rlclock.gpu.clocks.PowerLimitReadback.as_dict`; ``None``
            when the schedule named none.
        delivered: The planned and delivered saving and slowdown on the planning model, per step and over the
            run, with the per-switch record they come from (:class:`~rlclock.deploy.delivered.Delivered`); ``None``
            when the controller had no planning model to price the steps with.
        compared: The measured energy and time of blocks of planned and driver-default steps
            (:class:`~rlclock.deploy.compare.Comparison`), when blocks were interleaved; ``None`` otherwise.
        notes: Anything the user should know (errors of the anchor thread, the worker's end, a restore failure).
    """

    mode: str
    gpu_name: str | None
    device: int | None
    worker: str
    anchor_source: str
    plan: SwitchPlan
    steps: int = 0
    anchor_every: int = 1
    anchored: int = 0
    timed: int = 0
    step_time_s: float = math.nan
    busy_time_s: float = math.nan
    issued: int = 0
    missed: int = 0
    stale: int = 0
    noop: int = 0
    resync: int = 0
    excluded: int = 0
    interpolated: int = 0
    late: int = 0
    issue_error: Stats = field(default_factory=Stats)
    switch_error: Stats = field(default_factory=Stats)
    anchor_delay: Stats = field(default_factory=Stats)
    call_time: Stats = field(default_factory=Stats)
    readbacks: int = 0
    readback_matched: int | None = None
    energy_j: float | None = None
    energy_time_s: float | None = None
    pace: float = 1.0
    points: int = 0
    boundary: int = 0
    superseded: int = 0
    replaced: int = 0
    overtaken: int = 0
    per_plan: list[PlanFigures] = field(default_factory=list)
    power_limit: dict[str, Any] | None = None
    delivered: Any = None
    compared: Any = None
    notes: list[str] = field(default_factory=list)

    @property
    def late_fraction(self) -> float:
        """Share of the judged switches that would land after their kernels started."""
        n = self.switch_error.n
        return self.late / n if n else math.nan

    def text(self) -> str:
        """A few lines for the console."""
        lines = [
            f"rlclock controller: {self.mode} on GPU {self.device if self.device is not None else '-'} "
            f"({self.gpu_name or 'no NVML'}), worker {self.worker}, anchors from {self.anchor_source}",
            f"  plan: {self.plan.describe()}",
            f"  steps {self.steps} (anchored every {self.anchor_every}: {self.anchored}; timed on the GPU "
            f"{self.timed}), step {self.step_time_s * 1e3:.3f} ms (GPU, median); switches issued "
            f"{self.issued}, missed {self.missed}, stale {self.stale}, resync {self.resync}, "
            f"excluded from timing {self.excluded}; timeline stretched to the running pace x{self.pace:.3f}; "
            f"re-timed from {self.points} points inside steps",
            f"  issue error (issued - planned), median / p95 |e| / max |e|: {self.issue_error.ms()}",
            f"  switch-time error (issued - ideal from the kernels' GPU times): {self.switch_error.ms()}; "
            f"late {self.late} of {self.switch_error.n}"
            + (f" ({self.interpolated} placed between measured step starts)" if self.interpolated else ""),
            f"  anchor delay: {self.anchor_delay.ms()}; driver call: {self.call_time.ms()}",
        ]
        if len(self.per_plan) > 1:
            lines.append(
                f"  plans: boundary switches {self.boundary}, superseded {self.superseded}, replaced "
                f"{self.replaced}, overtaken {self.overtaken}"
            )
            lines += [
                f"  plan {f.plan}: {f.steps} steps, issued {f.issued} (boundary {f.boundary}), switch-time "
                f"error {f.switch_error.ms()}, late {f.late} of {f.switch_error.n}"
                for f in self.per_plan
            ]
        if self.power_limit is not None:
            lines.append(f"  power limit: {power_limit_text(self.power_limit)}")
        if self.readbacks:
            matched = "" if self.readback_matched is None else f", at the requested clocks {self.readback_matched}"
            lines.append(f"  read-backs {self.readbacks}{matched}")
        if self.energy_j is not None and self.energy_time_s:
            lines.append(
                f"  energy {self.energy_j:.1f} J over {self.energy_time_s:.2f} s "
                f"({self.energy_j / self.energy_time_s:.1f} W)"
            )
        if self.delivered is not None:
            lines.append(f"  {self.delivered.line()}")
        if self.compared is not None:
            lines += [f"  {line}" for line in self.compared.lines()]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        d = asdict(self)
        d["plan"] = self.plan.to_dict()
        d["delivered"] = None if self.delivered is None else self.delivered.as_dict()
        d["compared"] = None if self.compared is None else self.compared.as_dict()
        d["late_fraction"] = self.late_fraction
        return d

    def save(self, path: str | Path) -> Path:
        """Write :meth:`as_dict` as JSON."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=1, default=_json_default))
        return path


def power_limit_text(record: Mapping[str, Any]) -> str:
    """One line on a power limit record (:meth:`~rlclock.gpu.clocks.PowerLimitReadback.as_dict`)."""
    want, found, back = record.get("requested_w"), record.get("found_w"), record.get("power_limit_w")
    was = "" if found is None else f" (was {found:g} W)"
    if not record.get("calls"):
        return f"{want:g} W, already in effect"
    if not record.get("applied"):
        return f"{want:g} W for the whole job (dry run: not set{was})"
    read = "" if back is None else f", read back {back:g} W"
    return f"set to {want:g} W{was}{read}; given back at the end"


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return str(x)


def build_report(
    plan: SwitchPlan,
    log: AnchorLog,
    worker_result: dict[str, Any],
    info: dict[str, Any],
    worker: str,
    steps: int | None = None,
    anchor_every: int = 1,
    plans: Sequence[SwitchPlan] | None = None,
    plan_of: Callable[[int], int] | None = None,
) -> ControllerReport:
    """Put the anchors and the worker's records together (module docstring).

    Args:
        plan: The plan the worker applied (plan 0).
        log: The marks the anchors saw (anchored steps, or every step with ``time_all_steps``).
        worker_result: :meth:`SwitchWorker.result` plus ``ended`` and ``restore_error``.
        info: The worker's description of its control (``mode``, ``gpu_name``, ``device``).
        worker: ``"process"`` or ``"thread"``.
        steps: Steps of the loop while the controller ran (default: the marks in ``log``).
        anchor_every: Steps between anchors.
        plans: Every plan a step could run (default: ``plan`` alone); ``plans[0]`` is ``plan``.
        plan_of: The plan (index into ``plans``) step ``n`` ran, or would have run (default: plan 0 for every step;
            :meth:`~rlclock.deploy.pattern.PlanPattern.plan_of`).
    """
    plans = (plan,) if plans is None else tuple(plans)
    if plan_of is None:
        plan_of = PlanPattern(len(plans)).plan_of  # no pattern: plan 0 throughout

    rep = ControllerReport(
        mode=str(info.get("mode", "?")),
        gpu_name=info.get("gpu_name"),
        device=info.get("device"),
        worker=worker,
        anchor_source=log.source,
        plan=plan,
        power_limit=info.get("power_limit"),
    )
    marked = np.asarray(log.step, dtype=np.int64)
    rep.steps = int(marked.size) if steps is None else int(steps)
    rep.anchor_every = int(anchor_every)
    rep.timed = int(marked.size)
    rep.anchored = int(sum(log.sent)) if len(log.sent) == marked.size else int(marked.size)
    anchors = log.final_anchors_s()
    periods = log.periods_s()
    busy = np.asarray(log.busy_s, dtype=float)
    if np.isfinite(periods).any():
        rep.step_time_s = float(np.nanmedian(periods))
    if np.isfinite(busy).any():
        rep.busy_time_s = float(np.nanmedian(busy))
    rep.anchor_delay = Stats.of(np.asarray(log.seen_s, dtype=float) - anchors)
    med = rep.step_time_s

    def pause(i: int) -> bool:  # the interval from mark i to the next holds a pause
        return (
            0 <= i < periods.size
            and math.isfinite(med)
            and math.isfinite(periods[i])
            and periods[i] > PAUSE_FACTOR * med
        )

    rep.pace = float(worker_result.get("pace", 1.0))
    rep.points = int(worker_result.get("points", 0))
    records = worker_result.get("records", [])
    figures = [PlanFigures(i) for i in range(len(plans))]
    for k in range(rep.steps):
        figures[plan_of(k)].steps += 1
    issue_err, switch_err, calls = [], [], []
    by_plan: list[tuple[list[float], list[float]]] = [([], []) for _ in plans]
    for record in records:
        status, step, event, planned, issued, call_s, _estimated = record[:7]
        which = record_plan(record)
        if status in ("missed", "stale", "noop", "replaced", "overtaken"):
            setattr(rep, status, getattr(rep, status) + 1)
            continue
        if status == "resync":
            rep.resync += 1
            continue
        rep.issued += 1
        calls.append(call_s)
        if which != plan_of(int(step)):
            rep.superseded += 1
            continue
        fig = figures[which]
        fig.issued += 1
        if status == "boundary":
            rep.boundary += 1
            fig.boundary += 1
        i = int(np.searchsorted(marked, int(step), side="right")) - 1  # the last mark at or before the step
        measured = i >= 0 and marked[i] == step
        if i < 0 or pause(i - 1 if measured else i) or (not measured and i + 1 >= marked.size):
            rep.excluded += 1
            continue
        issue_err.append(issued - planned)
        by_plan[which][0].append(issued - planned)
        own = plans[which]
        segment_start_s = own.events[int(event)].start_s if int(event) >= 0 else own.segments[0].start_s
        if measured:
            start = anchors[i]
            if math.isfinite(busy[i]) and plan.span_s > 0:
                stretch = busy[i] / plan.span_s
            elif math.isfinite(periods[i]) and not pause(i):
                stretch = periods[i] / plan.period_s
            else:
                stretch = 1.0
        else:  # between two measured starts, at an even pace
            per_step = (anchors[i + 1] - anchors[i]) / (marked[i + 1] - marked[i])
            start = anchors[i] + (int(step) - marked[i]) * per_step
            stretch = periods[i] / plan.period_s if math.isfinite(periods[i]) else 1.0
            rep.interpolated += 1
        kernel_start = start + segment_start_s * stretch
        switch_err.append(issued - (kernel_start - plan.lead_s))
        by_plan[which][1].append(switch_err[-1])
        if issued + plan.latency_s > kernel_start:
            rep.late += 1
            fig.late += 1
    rep.issue_error = Stats.of(issue_err)
    rep.switch_error = Stats.of(switch_err)
    for fig, (issue, switch) in zip(figures, by_plan):
        fig.issue_error, fig.switch_error = Stats.of(issue), Stats.of(switch)
    rep.per_plan = figures
    rep.call_time = Stats.of(calls)
    reads = worker_result.get("reads", [])
    rep.readbacks = len(reads)
    if rep.mode == "live" and reads:
        rep.readback_matched = sum(1 for r in reads if _matches(r[3], r[4], r[6]))
    rep.notes += [f"anchor thread: {e}" for e in log.errors]
    ended = worker_result.get("ended")
    if not worker_result:
        rep.notes.append(
            "the switch worker did not report back (it may have died); in live mode its watchdog restores the clocks"
        )
    elif ended not in (None, "stopped"):
        rep.notes.append(f"the switch worker ended early: {ended}")
    if worker_result.get("restore_error"):
        rep.notes.append(f"restoring the clocks failed: {worker_result['restore_error']} (run rlclock reset-clocks)")
    return rep


def _matches(sm_mhz: int | None, mem_mhz: int | None, requested: str) -> bool:
    from rlclock.schedule import ClockConfig

    c = ClockConfig.parse(requested)
    return (c.core_mhz is None or sm_mhz == c.core_mhz) and (c.mem_mhz is None or mem_mhz == c.mem_mhz)
