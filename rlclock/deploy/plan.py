"""From a per-kernel clock schedule to the clock switches a live controller issues, and when.

A :class:`~rlclock.schedule.ClockSchedule` asks for one configuration per kernel invocation — the clocks each
kernel should *run at*; a :class:`~rlclock.deploy.timeline.StepTimeline` says when each invocation starts.
:func:`plan_switches` turns the two into :class:`SwitchEvent` s, offsets from the step's anchor at which the
controller calls the driver. The rule — segments, issue ahead, one switch at a time, worth issuing, no-op, repeat —
is :mod:`rlclock.backends.executable`'s, written once there: the planner judges a schedule by the same switches
(:func:`rlclock.backends.executable.executable`), so a plan it makes skips no segment here, and the worker drops a
switch at run time by the same test (:meth:`~rlclock.backends.executable.SwitchRule.worth_issuing`).

These are the rules of :class:`~rlclock.backends.base.SwitchEngine` (one switch in flight, a latency before it
lands), with the request moved ahead by the lead and hopeless switches left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rlclock.backends.executable import (
    LEAD_MARGIN_S,
    Executed,
    RuleError,
    Segments,
    SwitchRule,
    execute,
    in_effect_at,
)
from rlclock.deploy.timeline import StepTimeline
from rlclock.deprecation import renamed
from rlclock.errors import DeployError
from rlclock.schedule import ClockConfig, ClockSchedule

__all__ = ["LEAD_MARGIN_S", "Segment", "SwitchEvent", "SwitchPlan", "plan_switches", "rule_of", "segments_of"]


@dataclass(frozen=True)
class Segment:
    """Consecutive kernel invocations that request the same configuration.

    Attributes:
        index: Position among the step's segments.
        first_kernel: First invocation of the segment.
        stop_kernel: One past its last invocation.
        config: The configuration they request.
        start_s: Start of its first kernel, seconds after the anchor.
        end_s: End of its last kernel, seconds after the anchor.
    """

    index: int
    first_kernel: int
    stop_kernel: int
    config: ClockConfig
    start_s: float
    end_s: float

    @property
    def n_kernels(self) -> int:
        """Invocations in the segment."""
        return self.stop_kernel - self.first_kernel

    @property
    def duration_s(self) -> float:
        """From its start to its end, seconds."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class SwitchEvent:
    """One clock switch of the plan.

    Attributes:
        segment: The segment it serves (index into :attr:`SwitchPlan.segments`).
        config: The configuration it asks for.
        issue_s: When the controller calls the driver, seconds after the step's anchor (negative: during the
            previous step).
        land_s: When the new clocks are expected to be in effect (``issue_s + latency_s``).
        start_s: Planned start of the segment's first kernel, seconds after the anchor.
        end_s: Planned end of the segment's last kernel.
    """

    segment: int
    config: ClockConfig
    issue_s: float
    land_s: float
    start_s: float
    end_s: float

    @property
    def pre_issued(self) -> bool:
        """True when it is issued during the previous step."""
        return self.issue_s < 0.0

    @property
    def late_s(self) -> float:
        """How long after its segment's start it lands (0 when in time), seconds."""
        return max(0.0, self.land_s - self.start_s)


@dataclass(frozen=True)
class SwitchPlan:
    """The switches every step needs.

    Attributes:
        segments: The step's segments in order.
        events: Switches in issue order.
        skipped: Indices of segments whose switch could not land before they end (their requests are not met).
        initial: Configuration in effect when a step starts (and ends): the one the plan's last landing before
            the anchor set, or the one held when the plan has no switch.
        latency_s: Switching latency planned with, seconds.
        lead_s: How far ahead of a segment its switch is issued, seconds.
        min_dwell_s: A switch must land at least this long before its segment ends, seconds.
        period_s: Anchor-to-anchor time of back-to-back steps, seconds.
        span_s: From the anchor to the end of the last kernel, seconds.
        on_plan_fraction: Share of the step's kernel time expected to run at the requested configuration.
        points_s: When each point of the step (:attr:`StepTimeline.points`) is expected, seconds after the
            anchor.
    """

    segments: tuple[Segment, ...]
    events: tuple[SwitchEvent, ...]
    skipped: tuple[int, ...]
    initial: ClockConfig
    latency_s: float
    lead_s: float
    min_dwell_s: float
    period_s: float
    span_s: float
    on_plan_fraction: float
    points_s: tuple[float, ...] = ()

    @property
    def n_switches(self) -> int:
        """Switches issued per step."""
        return len(self.events)

    @property
    def inherits_initial(self) -> bool:
        """True when :attr:`initial` is what the previous step's last switch left (no switch of the plan lands at
        or before the step's anchor), False when the plan's own switches for a step set it before the step starts.
        A step that follows a step of another plan needs a switch to :attr:`initial` only in the first case."""
        return all(e.land_s > 0.0 for e in self.events)

    @property
    def configs(self) -> tuple[ClockConfig, ...]:
        """Configurations the plan switches to (and the initial one), without repeats."""
        return tuple(dict.fromkeys([self.initial, *(e.config for e in self.events)]))

    def in_effect(self, times_s: np.ndarray) -> list[ClockConfig]:
        """The configuration in effect at each time (seconds after the anchor), step after step."""
        configs = list(self.configs)
        lands = np.array([e.land_s for e in self.events], dtype=float)
        index = np.array([configs.index(e.config) for e in self.events], dtype=np.int64)
        which = in_effect_at(lands, index, configs.index(self.initial), np.asarray(times_s, dtype=float), self.period_s)
        return [configs[int(i)] for i in which]

    def describe(self) -> str:
        """One line: segments, switches, skipped segments, latency."""
        return (
            f"{len(self.segments)} segments, {self.n_switches} switches per step "
            f"({sum(e.pre_issued for e in self.events)} issued during the previous step), "
            f"{len(self.skipped)} segments too short to switch for, latency {self.latency_s * 1e3:g} ms, "
            f"lead {self.lead_s * 1e3:g} ms, step period {self.period_s * 1e3:.3f} ms, "
            f"{100 * self.on_plan_fraction:.1f} % of kernel time at the requested clocks"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form (for reports and for the worker process)."""
        return {
            "segments": [[s.first_kernel, s.stop_kernel, str(s.config), s.start_s, s.end_s] for s in self.segments],
            "events": [[e.segment, str(e.config), e.issue_s, e.land_s, e.start_s, e.end_s] for e in self.events],
            "skipped": list(self.skipped),
            "initial": str(self.initial),
            "latency_s": self.latency_s,
            "lead_s": self.lead_s,
            "min_dwell_s": self.min_dwell_s,
            "period_s": self.period_s,
            "span_s": self.span_s,
            "on_plan_fraction": self.on_plan_fraction,
            "points_s": list(self.points_s),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SwitchPlan:
        """Parse :meth:`to_dict` output."""
        try:
            segs = tuple(
                Segment(i, int(a), int(b), ClockConfig.parse(c), float(s), float(e))
                for i, (a, b, c, s, e) in enumerate(data["segments"])
            )
            events = tuple(
                SwitchEvent(int(j), ClockConfig.parse(c), float(i), float(land), float(s), float(e))
                for j, c, i, land, s, e in data["events"]
            )
            lead = data["lead_s"] if "lead_s" in data else data["lookahead_s"]  # the key before 0.2.0
            return cls(
                segs,
                events,
                tuple(int(x) for x in data["skipped"]),
                ClockConfig.parse(data["initial"]),
                float(data["latency_s"]),
                float(lead),
                float(data["min_dwell_s"]),
                float(data["period_s"]),
                float(data["span_s"]),
                float(data["on_plan_fraction"]),
                tuple(float(x) for x in data.get("points_s", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DeployError(f"malformed switch plan: {exc}.") from None


def rule_of(latency_s: float, lead_s: float | None = None, min_dwell_s: float = 0.0) -> SwitchRule:
    """The switch rule of a controller (:class:`~rlclock.backends.executable.SwitchRule`), its errors worded for a
    deployment.

    Raises:
        DeployError: Negative or non-finite latency or dwell, lead shorter than the latency.
    """
    try:
        return SwitchRule.of(float(latency_s), lead_s, float(min_dwell_s))
    except RuleError as exc:
        fix = (
            (
                f"use an issue lead (--lead) of at least {latency_s:g} s, or leave it out for the default "
                f"({latency_s + LEAD_MARGIN_S:g} s)."
            )
            if "lead" in str(exc)
            else None
        )
        raise DeployError(str(exc), fix) from None


def _indices(schedule: ClockSchedule) -> np.ndarray:
    """The schedule's configuration per kernel as indices, equal configurations sharing one."""
    first: dict[Any, int] = {}
    lut = np.array([first.setdefault(c, i) for i, c in enumerate(schedule.configs)], dtype=np.int64)
    return lut[np.asarray(schedule.index, dtype=np.int64)]


def _segments(schedule: ClockSchedule, seg: Segments) -> tuple[Segment, ...]:
    configs = schedule.configs
    return tuple(
        Segment(j, int(a), int(b), configs[int(c)], float(s), float(e))
        for j, (a, b, c, s, e) in enumerate(zip(seg.first, seg.stop, seg.config, seg.start_s, seg.end_s, strict=True))
    )


def segments_of(schedule: ClockSchedule, timeline: StepTimeline) -> tuple[Segment, ...]:
    """The schedule's runs of equal requests, placed on the timeline (rule 1)."""
    timeline.check_length(len(schedule))
    return _segments(schedule, Segments.of(_indices(schedule), timeline.start_s, timeline.end_s))


def plan_from(schedule: ClockSchedule, timeline: StepTimeline, rule: SwitchRule, executed: Executed) -> SwitchPlan:
    """The :class:`SwitchPlan` of switches :func:`~rlclock.backends.executable.execute` found for ``schedule``."""
    segs = _segments(schedule, executed.segments)
    configs = schedule.configs
    events = tuple(
        SwitchEvent(int(j), configs[int(c)], float(i), float(land), segs[int(j)].start_s, segs[int(j)].end_s)
        for j, c, i, land in zip(executed.segment, executed.config, executed.issue_s, executed.land_s, strict=True)
    )
    return SwitchPlan(
        segs,
        events,
        executed.skipped,
        configs[executed.initial],
        rule.latency_s,
        rule.lead_s,
        rule.min_dwell_s,
        timeline.period_s,
        timeline.span_s,
        executed.on_plan_fraction,
        tuple(float(x) for x in timeline.points_s),
    )


def check_lead(latency_s: float, lead_s: float | None = None) -> float:
    """The lead a plan uses, seconds: ``lead_s``, or the latency + :data:`LEAD_MARGIN_S` when it is
    ``None`` — :func:`rule_of`'s, which :func:`plan_switches` applies and ``rlclock apply`` checks before the command
    starts.

    Raises:
        DeployError: Negative or non-finite latency, lead shorter than the latency.
    """
    return rule_of(latency_s, lead_s).lead_s


def plan_switches(
    schedule: ClockSchedule,
    timeline: StepTimeline,
    latency_s: float,
    lead_s: float | None = None,
    min_dwell_s: float = 0.0,
) -> SwitchPlan:
    """The switches that apply ``schedule`` on ``timeline``, step after step (the rule of
    :mod:`rlclock.backends.executable`).

    Args:
        schedule: One configuration per kernel invocation of the step, the one it should run at.
        timeline: When each invocation starts and how long it runs, seconds from the step's anchor.
        latency_s: Time from issuing a switch to the new clocks being in effect, seconds (the GPU's
            switching latency, e.g. 6 ms for an H200).
        lead_s: How far ahead of its segment a switch is issued, seconds (>= ``latency_s``; default
            ``latency_s + LEAD_MARGIN_S``).
        min_dwell_s: A switch must land at least this long before its segment ends, seconds.

    Returns:
        The plan.

    Raises:
        DeployError: Negative or non-finite latency, lead shorter than the latency.
        ScheduleError: Schedule and timeline have different lengths.
    """
    rule = rule_of(latency_s, lead_s, min_dwell_s)
    timeline.check_length(len(schedule))
    executed = execute(_indices(schedule), timeline.start_s, timeline.duration_s, timeline.period_s, rule)
    return plan_from(schedule, timeline, rule, executed)


__getattr__ = renamed(__name__, {"LOOKAHEAD_MARGIN_S": "LEAD_MARGIN_S", "check_lookahead": "check_lead"}, since="0.2.0")
