"""The switch worker: issues a :class:`~rlclock.deploy.plan.SwitchPlan`'s switches at their times.

It runs apart from the training loop — by default in its own process (``python -m rlclock.deploy.worker``),
so neither the driver calls nor the interpreter lock of the training process delay it, and the training
loop never waits on NVML. The training process sends it one message per step: the step's *anchor*, the
``time.monotonic()`` moment at which that step started on the GPU (a system-wide clock, so both processes
read the same time). For every step the worker then

* issues the step's switches at ``anchor + issue_s``;
* with ``follow_pace``, follows the running step's pace: the profiled timeline says where each segment
  starts in a step of the plan's period, but a running loop's steps often take longer or shorter than the
  steps that were profiled (the host's share of a step changes from one phase of a run to the next). Once
  :data:`PACE_MIN_STEPS` anchor intervals are known, the segments' starts and ends are stretched by the pace,
  the estimated period over the plan's (within :data:`PACE_RANGE`), and each switch still goes out its own
  lead before its segment's stretched start: ``anchor + pace * start_s - (start_s - issue_s)``;
* issues the switches of the steps after it at ``anchor + n * period + issue_s`` for the step ``n`` ahead
  that they serve (those planned during an earlier step have a negative ``issue_s``), with the per-step
  period estimated from recent anchors, and re-times them whenever a newer anchor arrives. Not every step
  is anchored (``anchor_every``): from one anchor the worker schedules every switch due before the step after
  the next expected anchor, so a late anchor leaves no gap, and a loop that stops leaves the clocks alone
  after that;
* re-times the rest of a step's switches from each *point* of the step it hears of (a mark the loop makes
  inside the step, e.g. at every layer; :attr:`~rlclock.deploy.timeline.StepTimeline.points`): the step's
  anchor as that point places it is ``point_s - pace * planned point``, and every switch still pending for a
  segment that starts after the point, and the next steps' early ones, are timed from it — so a step whose
  kernels run late or early by some milliseconds is followed within it;
* issues a step's switches again when its anchor shows that they were timed for a step that was not there
  (a pause: the anchor is more than :data:`RESYNC_FRACTION` of a period off the estimate);
* never issues a switch less than the latency after the previous one, and drops a switch that could no
  longer land before its segment ends (``missed``), or whose step is already over (``stale``);
* catches up at once on the first step's early switches (they were due before the first anchor arrived), and
  brings the clocks to the plan's configuration when the plan has no switch at all (both ``resync``);
* reads the clocks back one latency after each switch (``read_back``), to see whether it landed.

**Several plans.** The worker may hold several plans for the same step (``alternatives``: plans 1.., made on the
same timeline with the same latency and lead as plan 0) and a :class:`~rlclock.deploy.pattern.PlanPattern`
that says which plan each step runs (plan 0 until one is set). When it schedules the switches of a step it takes
that step's plan's events. A new pattern (:meth:`SwitchWorker.set_pattern`) drops the switches already scheduled
for the steps it covers under another plan (``replaced``), schedules those of the steps' own plans from the last
anchor (one whose time has passed goes out at once, if it can still land), and leaves the ones already issued
issued (``superseded``). Where two steps of different plans meet:

* each plan's own switches are applied as they are: they name configurations, not changes, so the first switch of
  the next step's plan takes the clocks from wherever the previous step's plan left them, and one that finds the
  clocks already there is not issued (``noop``);
* a plan whose initial configuration is what its previous step's last switch leaves
  (:attr:`~rlclock.deploy.plan.SwitchPlan.inherits_initial`: none of its switches lands before the step starts;
  e.g. a plan that holds one configuration) would start in whatever the other plan left. Such a step gets a
  *boundary switch* to its plan's initial configuration, issued one lead before its first segment (so it
  lands as the step begins) and worth issuing until the plan's own first switch takes over; a plan that sets its
  own start needs none. A step for which another plan's switch was issued before a pattern took it away gets one
  too (the clocks may have moved);
* the later step's plan wins the overlap: a switch of the earlier step that comes due after the next step's plan
  has issued a switch is not issued (``overtaken``), so the earlier plan cannot put its configuration into the
  later plan's step.

So the clocks are always at a configuration the plan of the running step (or, one lead ahead of a step, of
the coming one) asks for, but for the time it takes to undo a switch issued before a pattern change. Every record
carries the plan whose switch it was (:class:`~rlclock.deploy.report.SwitchRecord`).

The clocks are changed through :class:`~rlclock.gpu.clocks.ClockControl` (opt-in, validation, restore,
watchdog) or, on a machine without NVML, only recorded (a dry run without NVML). The worker restores the
clocks when told to stop, when the training process's end of the connection closes (however it ended),
when that process no longer exists, and on SIGTERM; SIGINT is left to the training process, which then
stops the worker. A killed worker's locks are undone by ClockControl's watchdog.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import math
import os
import signal
import statistics
import struct
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from rlclock.deploy.pattern import PlanPattern
from rlclock.deploy.plan import SwitchPlan
from rlclock.deploy.report import PAUSE_FACTOR, SwitchRecord
from rlclock.errors import DeployError, RlclockError
from rlclock.gpu.watchdog import process_alive
from rlclock.schedule import AUTO, ClockConfig

STEP_MESSAGE = struct.Struct("<cqd")
"""Training process to worker: ``(b"S", step index, anchor time_s)``."""
POINT_MESSAGE = struct.Struct("<cqid")
"""Training process to worker: ``(b"P", step index, point index, time_s)``, a point inside the step passed."""
PATTERN_MESSAGE = struct.Struct("<cqi")
"""Training process to worker: ``(b"A", from_step, n)`` followed by ``n`` plan indices (:data:`PATTERN_INDEX`): from
step ``from_step`` on the steps run the plans of this pattern in turn (:meth:`SwitchWorker.set_pattern`)."""
PATTERN_INDEX = struct.Struct("<i")
STOP_MESSAGE = b"Q"
POLL_MAX_S = 0.5
"""Longest wait without a look at whether the training process still exists, seconds."""
FINE_WAIT_S = 0.002
"""The last part of a wait is done in short sleeps (the coarse wait's timer rounds to milliseconds), seconds."""
SPIN_S = 2e-4
"""The last part of a wait before a switch, seconds: busy-waited in the worker process, whose sleeps overshoot by
tens of microseconds."""
PERIOD_HISTORY = 16
"""Anchor intervals (each divided by the steps it spans) the step-period estimate is the median of."""
MAX_PAUSES = 2
"""An anchor interval over :data:`~rlclock.deploy.report.PAUSE_FACTOR` times the estimated period per step is a
pause and stays out of the estimate, unless this many came in a row (then the step itself got longer)."""
PACE_MIN_STEPS = 1
"""Anchor intervals the worker needs before it follows the running step's pace (fewer: the plan's own timing). One
is enough to start: the timeline is fitted to steps timed just before the control starts, and those can differ
from the running steps by a quarter (docs/deploy.md); a pause is kept out of the estimate all the same."""
PACE_RANGE = (0.5, 2.0)
"""Bounds of the pace (running period over the plan's): a step outside them is not the step that was planned,
and stretching its plan would place switches nowhere in particular."""
RESYNC_FRACTION = 0.5
"""An anchor further than this fraction of the step period from the estimate the worker had timed its step by
means those switches served no step (the loop paused): the step's switches are issued again."""


@dataclass(order=True)
class _Task:
    due_s: float
    seq: int
    kind: str = field(compare=False)  # "switch", "boundary", "resync" (outside the plan's timing) or "read"
    step: int = field(compare=False)
    event: int = field(compare=False)  # index into the plan's events; -1: to the plan's initial configuration
    anchor_s: float = field(compare=False)  # anchor of the step the switch serves (estimated when pre-issued)
    estimated: bool = field(compare=False)
    planned_s: float = field(compare=False)
    plan: int = field(default=0, compare=False)  # the plan whose switch it is (index into SwitchWorker.plans)

    @property
    def key(self) -> tuple[int, int, int]:
        return self.step, self.plan, self.event


class PlanOnlyControl:
    """Stands in for :class:`~rlclock.gpu.clocks.ClockControl` where there is no NVML: records requests only.

    Used for dry runs on machines without an NVIDIA GPU (tests, CPU runs): the timing of every switch is
    still planned, issued and reported, but no clock exists to change or read.
    """

    dry_run = True

    def __init__(self) -> None:
        self.current: ClockConfig = AUTO
        self.calls = 0
        self.power_limit_history: list[Any] = []

    def validate(self, config: ClockConfig | str) -> ClockConfig:
        """The parsed configuration (no clock table to check against)."""
        return ClockConfig.parse(config)

    def apply(self, config: ClockConfig | str, read_back: bool = False) -> None:
        """Record the request."""
        self.current = ClockConfig.parse(config)
        self.calls += 1

    def read(self) -> None:
        """Nothing to read."""
        return None

    def set_power_limit(self, power_limit_w: float | None, read_back: bool = True) -> Any:
        """Record the request (a board power limit in watts; ``None``: the GPU's own)."""
        from rlclock.gpu.clocks import PowerLimitReadback

        calls = () if power_limit_w is None else (f"set_power_limit_w({power_limit_w:g})",)
        rec = PowerLimitReadback(power_limit_w, None, calls, False, True, None, 0.0, time.monotonic())
        self.power_limit_history.append(rec)
        return rec

    def close(self) -> None:
        """Back to auto."""
        self.current = AUTO


class SwitchWorker:
    """The worker's bookkeeping: which switch is due when, what was issued, missed or read back.

    Args:
        plan: The switch plan of every step (plan 0).
        control: A :class:`~rlclock.gpu.clocks.ClockControl` or :class:`PlanOnlyControl`.
        read_back: Read the clocks one latency after each switch.
        clock: The time source, seconds (``time.monotonic``; replaceable in tests).
        anchor_every: Steps between anchors the training process sends (the worker schedules that far ahead).
        follow_pace: Stretch the plan's timing to the running step period (module docstring); default: the
            profiled timeline as it is.
        alternatives: Plans 1.. for the same step, made on the same timeline with the same latency and lead;
            which plan a step runs is set by :meth:`set_pattern` (until then every step runs plan 0).

    Raises:
        DeployError: A bad anchor spacing, or alternatives made for another step or latency.
    """

    def __init__(
        self,
        plan: SwitchPlan,
        control: Any,
        read_back: bool = True,
        clock: Callable[[], float] = time.monotonic,
        anchor_every: int = 1,
        follow_pace: bool = False,
        alternatives: Sequence[SwitchPlan] = (),
    ) -> None:
        if anchor_every < 1:
            raise DeployError(f"anchor_every must be >= 1 step, found {anchor_every!r}.")
        for i, alt in enumerate(alternatives, 1):
            if (alt.latency_s, alt.lead_s, alt.period_s) != (plan.latency_s, plan.lead_s, plan.period_s):
                raise DeployError(
                    f"alternative plan {i} was made with latency {alt.latency_s:g} s, lead {alt.lead_s:g} s "
                    f"and step period {alt.period_s:g} s, plan 0 with {plan.latency_s:g}, {plan.lead_s:g} and "
                    f"{plan.period_s:g} s.",
                    "plan every alternative on the same timeline with the same latency.",
                )
        self.plan = plan
        self.plans: tuple[SwitchPlan, ...] = (plan, *alternatives)
        """Every plan a step can run: 0 is ``plan``, 1.. the alternatives."""
        self.pattern = PlanPattern(len(self.plans))
        """Which plan each step runs (:meth:`set_pattern`)."""
        self.control = control
        self.read_back = read_back
        self.clock = clock
        self.latency_s = plan.latency_s
        self.anchor_every = int(anchor_every)
        self.follow_pace = bool(follow_pace)
        self._tasks: list[_Task] = []
        self._seq = 0
        self._scheduled: set[tuple[int, int, int]] = set()  # (step, plan, event) of pending switches
        self._handled: set[tuple[int, int, int]] = set()  # ... of those carried out (issued, missed or no-op)
        self._issued: set[tuple[int, int, int]] = set()  # ... of those issued, for the recent steps
        self._newest: tuple[int, int] = (-1, 0)  # (step, plan) of the latest step a switch was issued for
        self._unsettled: set[int] = set()  # steps a superseded switch was issued for: their start needs a boundary
        self._timing: tuple[int, float] | None = None  # the last anchored step and its anchor (as a point places it)
        self._last_anchor: tuple[int, float] | None = None
        self._targets: dict[int, float] = {}  # step -> the anchor estimated for it when its switches were timed
        self._intervals: deque[float] = deque(maxlen=PERIOD_HISTORY)
        self._paused = 0
        self.points = 0
        """Points that re-timed switches."""
        self.resyncs = 0
        """Anchors that showed the switches timed for their step were off by a pause (issued again)."""
        self.superseded = 0
        """Switches issued for a step under a plan that a later pattern took the step away from (they stay
        issued; the step's own plan's switches follow them)."""
        self._last_issue_s = -float("inf")
        self.last_step = -1
        self.records: list[SwitchRecord] = []
        """``(status, step, event, planned_s, issued_s, call_s, pre_issued_estimate)`` per switch task, and its
        ``plan`` (:class:`SwitchRecord`; the step's plan when the switch was scheduled): status ``switch``,
        ``boundary``, ``missed``, ``stale``, ``noop``, ``resync``, ``replaced`` or ``overtaken`` (module docstring);
        ``issued_s`` is NaN unless issued; ``event`` -1 for a switch to the plan's initial configuration."""
        self.reads: list[tuple[int, int, float, int | None, int | None, str, str]] = []
        """``(step, event, time_s, sm_clock_mhz, mem_clock_mhz, reasons, requested)`` per read-back."""

    # -- scheduling --------------------------------------------------------------------------------------
    @property
    def period_s(self) -> float:
        """Estimated step period: median of recent anchor intervals per step, else the plan's period (never less
        than a tenth of the plan's: a shorter step would not be the step the plan was made for)."""
        if not self._intervals:
            return self.plan.period_s
        return max(statistics.median(self._intervals), 0.1 * self.plan.period_s)

    @property
    def pace(self) -> float:
        """How much longer the running steps take than the planned one (estimated period over the plan's, within
        :data:`PACE_RANGE`); 1 until :data:`PACE_MIN_STEPS` intervals are known, or without ``follow_pace``."""
        if not self.follow_pace or len(self._intervals) < PACE_MIN_STEPS or self.plan.period_s <= 0:
            return 1.0
        lo, hi = PACE_RANGE
        return min(max(self.period_s / self.plan.period_s, lo), hi)

    def issue_offset_s(self, event: int, pace: float | None = None, plan: int = 0) -> float:
        """When event ``event`` of plan ``plan`` is issued, seconds after the anchor of the step it serves, at
        ``pace`` (default :attr:`pace`): its segment's start stretched, less the lead the plan gave it. Event
        -1, a boundary switch to the plan's initial configuration, is issued one lead before the step's first
        segment."""
        p = self.plans[plan]
        pace = self.pace if pace is None else pace
        if event < 0:
            return pace * p.segments[0].start_s - p.lead_s
        ev = p.events[event]
        return pace * ev.start_s - (ev.start_s - ev.issue_s)

    def plan_of(self, step: int) -> int:
        """The plan step ``step`` runs (:attr:`pattern`)."""
        return self.pattern.plan_of(step)

    def needs_boundary(self, step: int) -> bool:
        """Whether step ``step`` needs a boundary switch: its plan's initial configuration is left by the previous
        step's last switch (:attr:`SwitchPlan.inherits_initial`), and that switch was not the plan's — the step
        before runs another plan, or a switch of another plan was issued for this step before a pattern took it
        away (module docstring)."""
        plan = self.plan_of(step)
        return self.plans[plan].inherits_initial and (plan != self.plan_of(step - 1) or step in self._unsettled)

    def next_due(self) -> float | None:
        """When the next task is due (``None`` if none is pending)."""
        return self._tasks[0].due_s if self._tasks else None

    def _push(
        self,
        due_s: float,
        kind: str,
        step: int,
        event: int,
        anchor_s: float,
        estimated: bool,
        planned_s: float | None = None,
        plan: int = 0,
    ) -> None:
        self._seq += 1
        planned = due_s if planned_s is None else planned_s
        task = _Task(due_s, self._seq, kind, step, event, anchor_s, estimated, planned, plan)
        heapq.heappush(self._tasks, task)
        if kind != "read":
            self._scheduled.add(task.key)

    def _record(self, status: str, t: _Task, issued_s: float = float("nan"), call_s: float = 0.0) -> None:
        self.records.append(SwitchRecord(status, t.step, t.event, t.planned_s, issued_s, call_s, t.estimated, t.plan))

    def on_anchor(self, step: int, anchor_s: float) -> None:
        """Step ``step`` started on the GPU at ``anchor_s``: (re-)time the switches of this and the next steps.

        Every switch due before the step after the next expected anchor (``step + anchor_every + 1``) is
        scheduled, from this anchor and the estimated period, from the plan of the step it serves; switches
        already scheduled from an earlier anchor are re-timed. A switch whose time passed before this anchor
        arrived and that was never scheduled (the first step, or after a pause) is caught up at once
        (``resync``).
        """
        if step <= self.last_step:
            return
        if self._last_anchor is not None:
            prev_step, prev_s = self._last_anchor
            per_step = (anchor_s - prev_s) / (step - prev_step)
            if per_step > PAUSE_FACTOR * self.period_s and self._paused < MAX_PAUSES:
                self._paused += 1  # a pause in the loop, not its pace (unless it keeps happening)
            elif per_step > 0:
                self._intervals.append(per_step)
                self._paused = 0
        self._last_anchor = (step, anchor_s)
        self._timing = (step, anchor_s)
        self.last_step = step
        self.pattern.forget_before(step - 1)
        period, pace = self.period_s, self.pace
        estimate = self._targets.get(step)
        self._targets = {s: t for s, t in self._targets.items() if s > step}
        self._handled = {h for h in self._handled if h[0] >= step - 1}
        self._issued = {h for h in self._issued if h[0] >= step - 1}
        self._unsettled = {s for s in self._unsettled if s >= step - 1}
        if estimate is not None and abs(anchor_s - estimate) > RESYNC_FRACTION * period:
            # its switches were issued for a step that was not running then: what is still needed goes out again
            self._handled = {h for h in self._handled if h[0] < step}
            self._newest = (-1, 0)  # and what later steps' plans issued then took nothing over
            self.resyncs += 1
        keep: list[_Task] = []
        for t in self._tasks:
            if t.kind != "read" and t.step < step:
                self._done(t)
                self._record("stale", t)
            elif t.kind in ("switch", "boundary") and t.estimated:  # for this or a later step: re-time it
                keep.append(self._retimed(t, step, anchor_s, period, pace, t.step > step))
            else:
                keep.append(t)
        self._tasks = keep
        heapq.heapify(self._tasks)
        self._schedule_ahead(step, anchor_s, period, pace)
        for s in range(step + 1, step + self.anchor_every + 2):
            self._targets[s] = anchor_s + (s - step) * period
        plan = self.plan_of(step)
        p = self.plans[plan]
        if not p.events and self.control.current != p.initial and (step, plan, -1) not in self._scheduled:
            self._push(anchor_s, "resync", step, -1, anchor_s, False, plan=plan)

    def _schedule_ahead(self, step: int, anchor_s: float, period_s: float, pace: float) -> None:
        """Schedule every switch due before the step after the next expected anchor, from step ``step``'s anchor
        ``anchor_s``: those of each step's own plan, and the boundary switches where the plan changes."""
        horizon = anchor_s + (self.anchor_every + 1) * period_s
        for plan, p in enumerate(self.plans):
            for i in range(len(p.events)):
                ahead = max(0, math.ceil(-self.issue_offset_s(i, pace, plan) / period_s - 1e-9))  # steps ahead
                for n in range(self.anchor_every + ahead + 1):
                    if self.plan_of(step + n) == plan:
                        self._schedule(step, n, i, anchor_s, period_s, horizon, pace, plan)
        if len(self.plans) > 1:
            ahead = max(
                0, math.ceil(-min(self.issue_offset_s(-1, pace, q) for q in range(len(self.plans))) / period_s - 1e-9)
            )
            for n in range(self.anchor_every + ahead + 1):
                if self.needs_boundary(step + n):
                    self._schedule(step, n, -1, anchor_s, period_s, horizon, pace, self.plan_of(step + n))

    def set_pattern(self, pattern: Sequence[int], from_step: int) -> None:
        """From step ``from_step`` on, step ``n`` runs plan ``pattern[(n - from_step) % len(pattern)]``.

        Switches already scheduled for those steps under another plan are dropped (``replaced``) and the steps'
        own plans' switches scheduled instead, from the last anchor; switches already issued for them stay issued
        (counted in :attr:`superseded`).

        Raises:
            DeployError: A bad pattern (:func:`~rlclock.deploy.pattern.check_pattern`).
        """
        self.pattern.set(pattern, from_step)
        keep: list[_Task] = []
        for t in self._tasks:
            if t.kind != "read" and t.step >= from_step and not self._wanted(t):
                self._scheduled.discard(t.key)
                self._record("replaced", t)
            else:
                keep.append(t)
        self._tasks = keep
        heapq.heapify(self._tasks)
        gone = {h for h in self._issued if h[0] >= from_step and h[1] != self.plan_of(h[0])}
        self.superseded += len(gone)
        self._issued -= gone
        self._unsettled |= {h[0] for h in gone}
        if self._timing is not None:
            step, anchor_s = self._timing
            self._schedule_ahead(step, anchor_s, self.period_s, self.pace)

    def _wanted(self, t: _Task) -> bool:
        """Whether task ``t`` belongs to its step under the current pattern."""
        if t.plan != self.plan_of(t.step):
            return False
        return t.kind != "boundary" or self.needs_boundary(t.step)

    def on_point(self, step: int, point: int, point_s: float) -> None:
        """Point ``point`` of step ``step`` passed on the GPU at ``point_s``: re-time the switches still pending for
        segments after it in this step, and those of the next steps, from the anchor it implies (module
        docstring). A point of another step than the last anchored one, or one the plan does not know, is
        ignored."""
        planned = self.plan.points_s
        if step != self.last_step or not 0 <= point < len(planned):
            return
        period, pace = self.period_s, self.pace
        anchor_s = point_s - pace * planned[point]
        self._timing = (step, anchor_s)
        keep: list[_Task] = []
        moved = False
        for t in self._tasks:
            if t.kind in ("switch", "boundary") and (
                t.step > step
                or (t.step == step and t.event >= 0 and self.plans[t.plan].events[t.event].start_s >= planned[point])
            ):
                keep.append(self._retimed(t, step, anchor_s, period, pace, t.estimated))
                moved = True
            else:
                keep.append(t)
        self._tasks = keep
        heapq.heapify(self._tasks)
        for s in self._targets:
            self._targets[s] = anchor_s + (s - step) * period
        self.points += moved

    def _retimed(self, t: _Task, step: int, anchor_s: float, period_s: float, pace: float, estimated: bool) -> _Task:
        """Task ``t`` timed from step ``step``'s anchor ``anchor_s`` (its own step's anchor ``period_s`` per step
        after it)."""
        target = anchor_s + (t.step - step) * period_s
        due = target + self.issue_offset_s(t.event, pace, t.plan)
        return _Task(due, t.seq, t.kind, t.step, t.event, target, estimated, due, t.plan)

    def _schedule(
        self,
        step: int,
        n: int,
        event: int,
        anchor_s: float,
        period_s: float,
        horizon_s: float,
        pace: float,
        plan: int = 0,
    ) -> None:
        """Schedule event ``event`` of plan ``plan`` for step ``step + n`` unless it is scheduled or done, or due
        after the horizon (event -1: the step's boundary switch)."""
        key = (step + n, plan, event)
        if key in self._scheduled or key in self._handled:
            return
        target = anchor_s + n * period_s
        due = target + self.issue_offset_s(event, pace, plan)
        if due >= horizon_s:
            return
        if due < anchor_s:
            kind = "resync"  # its time passed before this anchor came: catch up
        else:
            kind = "boundary" if event < 0 else "switch"
        self._push(due, kind, step + n, event, target, n > 0 and kind != "resync", plan=plan)

    def _done(self, t: _Task) -> None:
        self._scheduled.discard(t.key)
        self._handled.add(t.key)

    # -- execution ---------------------------------------------------------------------------------------
    def run_due(self, now: float | None = None) -> int:
        """Carry out every task due by ``now``; returns the switches issued."""
        now = self.clock() if now is None else now
        issued = 0
        while self._tasks and self._tasks[0].due_s <= now:
            t = heapq.heappop(self._tasks)
            if t.kind == "read":
                self._read(t)
                continue
            earliest = self._last_issue_s + self.latency_s
            if now < earliest:  # rule 3: one switch at a time
                self._seq += 1
                heapq.heappush(
                    self._tasks,
                    _Task(earliest, self._seq, t.kind, t.step, t.event, t.anchor_s, t.estimated, t.planned_s, t.plan),
                )
                continue
            self._done(t)
            newest_step, newest_plan = self._newest
            if t.step < newest_step and t.plan != newest_plan:  # the next step's plan has taken the clocks over
                self._record("overtaken", t)
                continue
            plan = self.plans[t.plan]
            if t.event >= 0:
                ev = plan.events[t.event]
                config, end = ev.config, t.anchor_s + self.pace * ev.end_s
            elif t.kind == "boundary" and plan.events:  # of use until the plan's first switch lands
                config, end = plan.initial, t.anchor_s + self.pace * plan.events[0].start_s
            else:
                config, end = plan.initial, t.anchor_s + plan.span_s + plan.period_s
            if now + self.latency_s >= end - plan.min_dwell_s:
                self._record("missed", t)
                continue
            if config == self.control.current:
                self._record("noop", t)
                continue
            t0 = self.clock()
            self.control.apply(config, read_back=False)
            t1 = self.clock()
            self._last_issue_s = t0
            issued += 1
            self._issued.add(t.key)
            if t.step >= newest_step:
                self._newest = (t.step, t.plan)
            self._record(t.kind, t, t0, t1 - t0)
            if self.read_back:
                self._push(t0 + self.latency_s, "read", t.step, t.event, t.anchor_s, False, plan=t.plan)
            now = max(now, t1)
        return issued

    def _read(self, t: _Task) -> None:
        rec = self.control.read()
        if rec is None:
            return
        plan = self.plans[t.plan]
        requested = plan.events[t.event].config if t.event >= 0 else plan.initial
        self.reads.append(
            (t.step, t.event, self.clock(), rec.sm_clock_mhz, rec.mem_clock_mhz, "/".join(rec.reasons), str(requested))
        )

    def result(self) -> dict[str, Any]:
        """What the worker did, as plain data for the training process."""
        return {
            "records": list(self.records),
            "reads": list(self.reads),
            "period_s": self.period_s,
            "pace": self.pace,
            "resyncs": self.resyncs,
            "points": self.points,
            "superseded": self.superseded,
        }


# -- the loop ----------------------------------------------------------------------------------------------


def pattern_message(pattern: Sequence[int], from_step: int) -> bytes:
    """The message that sets a plan pattern from step ``from_step`` on (:data:`PATTERN_MESSAGE`)."""
    return PATTERN_MESSAGE.pack(b"A", int(from_step), len(pattern)) + b"".join(
        PATTERN_INDEX.pack(int(p)) for p in pattern
    )


def _handle(worker: SwitchWorker, data: bytes) -> bool:
    """Apply one message; False when told to stop."""
    if data == STOP_MESSAGE:
        return False
    if len(data) == STEP_MESSAGE.size and data[:1] == b"S":
        _, step, anchor_s = STEP_MESSAGE.unpack(data)
        worker.on_anchor(int(step), float(anchor_s))
    elif len(data) == POINT_MESSAGE.size and data[:1] == b"P":
        _, step, point, point_s = POINT_MESSAGE.unpack(data)
        worker.on_point(int(step), int(point), float(point_s))
    elif data[:1] == b"A" and len(data) >= PATTERN_MESSAGE.size:
        _, from_step, n = PATTERN_MESSAGE.unpack_from(data)
        if len(data) == PATTERN_MESSAGE.size + n * PATTERN_INDEX.size:
            pattern = [
                PATTERN_INDEX.unpack_from(data, PATTERN_MESSAGE.size + i * PATTERN_INDEX.size)[0] for i in range(n)
            ]
            with contextlib.suppress(DeployError):  # the controller checked it; a bad one changes nothing
                worker.set_pattern(pattern, int(from_step))
    return True


def serve(conn: Connection, worker: SwitchWorker, parent_pid: int | None = None, spin: bool = True) -> str:
    """Run the worker until it is told to stop or the training process is gone.

    Args:
        conn: The worker's end of the connection to the training process.
        worker: The bookkeeping.
        parent_pid: Process id of the training process (checked every :data:`POLL_MAX_S`); ``None``: not checked.
        spin: Busy-wait the last :data:`SPIN_S` before a switch (its own process); else yield (a thread).

    Returns:
        Why it ended: ``"stopped"``, ``"disconnected"`` or ``"parent gone"``.
    """
    clock = worker.clock
    while True:
        due = worker.next_due()
        wait = POLL_MAX_S if due is None else min(POLL_MAX_S, due - clock())
        try:
            if wait > FINE_WAIT_S:
                if conn.poll(wait - FINE_WAIT_S):
                    if not _handle(worker, conn.recv_bytes()):
                        return "stopped"
                    continue
                if due is None or due - clock() > FINE_WAIT_S:
                    if parent_pid is not None and not process_alive(parent_pid):
                        return "parent gone"
                    continue
            while due is not None and (left := due - clock()) > 0:
                if conn.poll(0):
                    break
                if left > SPIN_S:
                    time.sleep(left - SPIN_S)
                elif not spin:
                    time.sleep(0)
            if conn.poll(0) and not _handle(worker, conn.recv_bytes()):
                return "stopped"
        except (EOFError, OSError):
            return "disconnected"
        worker.run_due()


def build_control(settings: dict[str, Any], handle_signals: bool) -> Any:
    """The clock control the worker uses: ClockControl (NVML) or PlanOnlyControl (``nvml`` false), with the
    board power limit the schedule names (``power_limit_w``) set on it — or, in a dry run, recorded.

    Raises:
        RlclockError: NVML is missing, clock control was not allowed, a planned configuration is not supported
            by the GPU, or the power limit is outside the GPU's range or cannot be set.
    """
    plans = plans_from_settings(settings)
    if settings.get("nvml", True):
        from rlclock.gpu.clocks import ClockControl

        control: ClockControl | PlanOnlyControl = ClockControl(
            int(settings["device"]), control_clocks=bool(settings["control_clocks"]), handle_signals=handle_signals
        )
    else:
        if settings["control_clocks"]:
            raise DeployError(
                "clock control was asked for, but this machine has no NVML to set clocks with.",
                "run on a machine with an NVIDIA GPU and driver, or use the dry-run mode.",
            )
        control = PlanOnlyControl()
    try:
        for c in dict.fromkeys(c for plan in plans for c in plan.configs):
            control.validate(c)
        if hasattr(control, "start_watchdog"):
            control.start_watchdog()  # now, not at the first switch: starting it takes a moment
        if settings.get("power_limit_w") is not None:
            control.set_power_limit(float(settings["power_limit_w"]))
    except RlclockError:
        control.close()
        raise
    return control


def plans_from_settings(settings: dict[str, Any]) -> tuple[SwitchPlan, ...]:
    """Plan 0 (``plan``) and the ``alternatives`` of the controller's settings (:meth:`SwitchPlan.to_dict` each)."""
    return tuple(SwitchPlan.from_dict(d) for d in [settings["plan"], *settings.get("alternatives", ())])


def worker_from_settings(settings: dict[str, Any], control: Any) -> SwitchWorker:
    """The worker the controller's settings describe (``plan``, ``alternatives``, ``patterns``
    (:meth:`PlanPattern.to_list`), ``read_back``, ``anchor_every``, ``follow_pace``), on ``control``."""
    plan, *alternatives = plans_from_settings(settings)
    worker = SwitchWorker(
        plan,
        control,
        read_back=bool(settings.get("read_back", True)),
        anchor_every=int(settings.get("anchor_every", 1)),
        follow_pace=bool(settings.get("follow_pace", False)),
        alternatives=alternatives,
    )
    worker.pattern = PlanPattern.from_list(settings.get("patterns", ()), len(worker.plans))  # nothing scheduled yet
    return worker


def describe_control(control: Any) -> dict[str, Any]:
    """Mode, GPU and process of a worker's control, and the power limit it set (or would have), for the report."""
    device = getattr(control, "device", None)
    limits = getattr(control, "power_limit_history", [])
    return {
        "mode": ("dry-run" if control.dry_run else "live") if device is not None else "plan-only",
        "gpu_name": getattr(device, "name", None),
        "device": getattr(control, "device_index", None),
        "pid": os.getpid(),
        "power_limit": limits[0].as_dict() if limits else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the worker process (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m rlclock.deploy.worker")
    p.add_argument("--fd", type=int, required=True, help="the worker's end of the connection (a socket)")
    p.add_argument("--parent", type=int, required=True, help="process id of the training process")
    args = p.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle

    def _terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _terminate)
    conn = Connection(args.fd)
    control = None
    why = "error"
    worker = None
    try:
        settings = conn.recv()
        try:
            control = build_control(settings, handle_signals=False)
        except RlclockError as exc:
            conn.send(("error", exc))
            return 1
        worker = worker_from_settings(settings, control)
        conn.send(("ready", describe_control(control)))
        why = serve(conn, worker, args.parent)
    except (EOFError, OSError):
        why = "disconnected"
    finally:
        error = None
        if control is not None:
            try:
                control.close()
            except RlclockError as exc:
                error = str(exc)
                print(f"rlclock worker: could not restore the clocks: {exc}", file=sys.stderr, flush=True)
        if worker is not None:
            with contextlib.suppress(OSError, ValueError):
                conn.send(("done", {**worker.result(), "ended": why, "restore_error": error}))
        conn.close()
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a process
    raise SystemExit(main())
