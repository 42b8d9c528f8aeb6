"""From a per-kernel clock schedule to the clock switches a live controller issues, and when.

A :class:`~rlclock.schedule.ClockSchedule` asks for one configuration per kernel invocation; a
:class:`~rlclock.deploy.timeline.StepTimeline` says when each invocation starts. :func:`plan_switches`
turns the two into :class:`SwitchEvent` s, offsets from the step's anchor at which the controller calls the
driver. The rule, in order:

1. **Segments.** Consecutive invocations that request the same configuration form one segment; a segment
   lasts from its first kernel's start to its last kernel's end.
2. **Issue ahead.** The switch into a segment is issued ``lookahead_s`` before the segment starts
   (``lookahead_s >= latency_s``; default ``latency_s`` + :data:`LOOKAHEAD_MARGIN_S`, a margin for the
   controller's own timing error), so that it lands as the segment begins.
3. **One switch at a time.** A switch occupies the controller for ``latency_s`` (the driver call and the
   clock change), so a switch is never issued less than ``latency_s`` after the previous one; a switch
   that must wait is issued as soon as the previous one has landed.
4. **Worth issuing.** A switch is issued only if it lands (issue + ``latency_s``) more than ``min_dwell_s``
   before its segment ends (default 0: it must land before the segment's last kernel ends). Otherwise the
   segment is *skipped*: the clocks stay where they are, and the next segment is judged against them.
5. **No-op.** A segment whose configuration is already in effect needs no switch.
6. **Repeat.** Steps repeat, so the plan is cyclic: it is laid out from one segment on (the *cut*, whose
   switch is issued one lookahead ahead of it) through the rest of the step and the start of the next one,
   back to the cut. Rule 3 holds across the step boundary: the cut's switch waits for the previous step's
   last switch when it must (and if it then could not land in time, switches that would crowd it are not
   issued instead); the cut's switch is dropped when the clocks are already there. A switch for a segment
   early in the step may so be issued during the previous step (a negative issue offset; more than one
   step back when the lookahead exceeds the step). The longest segments are tried as cuts, and holding one
   configuration without any switch as well; the plan that keeps the most kernel time at its requested
   clocks wins (fewer switches on a tie). When a step is shorter than the latency, no plan with switches
   can repeat, and the plan holds the configuration most of the kernel time asks for.

These are the rules of :class:`~rlclock.backends.base.SwitchEngine` (one switch in flight, a latency before it
lands), with the request moved ahead by the lookahead and hopeless switches left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError
from rlclock.schedule import ClockConfig, ClockSchedule

LOOKAHEAD_MARGIN_S = 5e-4
"""Default lookahead beyond the switching latency, seconds: the controller's timer and the step anchors are
off by up to a few tenths of a millisecond, and a switch that lands a little early costs less than one that
lands late."""
MAX_CUTS = 16
"""Segments tried as the cut of the cyclic plan (the longest ones)."""
MAX_PASSES = 8
"""Passes around the cycle to settle how late the cut's own switch must be."""


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
        lookahead_s: How far ahead of a segment its switch is issued, seconds.
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
    lookahead_s: float
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

    def describe(self) -> str:
        """One line: segments, switches, skipped segments, latency."""
        return (f"{len(self.segments)} segments, {self.n_switches} switches per step "
                f"({sum(e.pre_issued for e in self.events)} issued during the previous step), "
                f"{len(self.skipped)} segments too short to switch for, latency {self.latency_s * 1e3:g} ms, "
                f"lookahead {self.lookahead_s * 1e3:g} ms, step period {self.period_s * 1e3:.3f} ms, "
                f"{100 * self.on_plan_fraction:.1f} % of kernel time at the requested clocks")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (for reports and for the worker process)."""
        return {
            "segments": [[s.first_kernel, s.stop_kernel, str(s.config), s.start_s, s.end_s] for s in self.segments],
            "events": [[e.segment, str(e.config), e.issue_s, e.land_s, e.start_s, e.end_s] for e in self.events],
            "skipped": list(self.skipped), "initial": str(self.initial), "latency_s": self.latency_s,
            "lookahead_s": self.lookahead_s, "min_dwell_s": self.min_dwell_s, "period_s": self.period_s,
            "span_s": self.span_s, "on_plan_fraction": self.on_plan_fraction, "points_s": list(self.points_s),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SwitchPlan:
        """Parse :meth:`to_dict` output."""
        try:
            segs = tuple(Segment(i, int(a), int(b), ClockConfig.parse(c), float(s), float(e))
                         for i, (a, b, c, s, e) in enumerate(data["segments"]))
            events = tuple(SwitchEvent(int(j), ClockConfig.parse(c), float(i), float(land), float(s), float(e))
                           for j, c, i, land, s, e in data["events"])
            return cls(segs, events, tuple(int(x) for x in data["skipped"]), ClockConfig.parse(data["initial"]),
                       float(data["latency_s"]), float(data["lookahead_s"]), float(data["min_dwell_s"]),
                       float(data["period_s"]), float(data["span_s"]), float(data["on_plan_fraction"]),
                       tuple(float(x) for x in data.get("points_s", ())))
        except (KeyError, TypeError, ValueError) as exc:
            raise DeployError(f"malformed switch plan: {exc}.") from None


def segments_of(schedule: ClockSchedule, timeline: StepTimeline) -> tuple[Segment, ...]:
    """The schedule's runs of equal requests, placed on the timeline (rule 1)."""
    timeline.check_length(len(schedule))
    idx = schedule.index
    cuts = np.flatnonzero(np.diff(idx)) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [idx.size]])
    end = timeline.end_s
    return tuple(Segment(j, int(a), int(b), schedule.configs[int(idx[a])], float(timeline.start_s[a]),
                         float(end[a:b].max())) for j, (a, b) in enumerate(zip(starts, stops)))


def _cyclic(segments: tuple[Segment, ...], cut: int, period_s: float, latency_s: float, lookahead_s: float,
            min_dwell_s: float) -> tuple[list[SwitchEvent], list[int]]:
    """Rules 2-5 around the cycle from segment ``cut`` (rule 6)."""
    first = segments[cut]
    issue0 = first.start_s - lookahead_s
    for _ in range(MAX_PASSES):
        events, skipped, last, back = _around(segments, cut, issue0, period_s, latency_s, lookahead_s, min_dwell_s,
                                              strict=False)
        if back or last + latency_s <= issue0 + period_s + 1e-12:
            break
        issue0 = last + latency_s - period_s  # the cut's switch waits for the last one of the previous step
        if issue0 + latency_s >= first.end_s - min_dwell_s:
            break
    else:
        back = False
    if not back and last + latency_s > issue0 + period_s + 1e-12:  # no room: keep the cut's switch on time
        events, skipped, last, back = _around(segments, cut, first.start_s - lookahead_s, period_s, latency_s,
                                              lookahead_s, min_dwell_s, strict=True)
    return sorted(events, key=lambda e: e.issue_s), skipped


def _around(segments: tuple[Segment, ...], cut: int, issue0: float, period_s: float, latency_s: float,
            lookahead_s: float, min_dwell_s: float, strict: bool) -> tuple[list[SwitchEvent], list[int], float, bool]:
    """One pass around the cycle with the cut's switch at ``issue0``; ``strict``: no switch may crowd the cut's
    next one. Returns the events, skipped segments, the last issue, and whether the cut's switch was dropped."""
    n = len(segments)
    first = segments[cut]
    limit = issue0 + period_s - latency_s if strict else math.inf
    events = [SwitchEvent(first.index, first.config, issue0, issue0 + latency_s, first.start_s, first.end_s)]
    skipped: list[int] = []
    current, prev = first.config, issue0
    for i in range(1, n):
        seg = segments[(cut + i) % n]
        shift = period_s if cut + i >= n else 0.0  # segments before the cut come in the next step
        if seg.config == current:  # rule 5
            continue
        issue = max(seg.start_s + shift - lookahead_s, prev + latency_s)  # rules 2 and 3
        land = issue + latency_s
        if land >= seg.end_s + shift - min_dwell_s or issue > limit:  # rule 4 (and rule 3 across the boundary)
            skipped.append(seg.index)
            continue
        events.append(SwitchEvent(seg.index, seg.config, issue - shift, land - shift, seg.start_s, seg.end_s))
        current, prev = seg.config, issue
    back = current == first.config
    if back:  # the cycle ends where the cut starts: its switch is not needed
        events.pop(0)
    return events, skipped, prev, back


def _in_effect(events: list[SwitchEvent], hold: ClockConfig, times_s: np.ndarray, period_s: float) -> list[ClockConfig]:
    """The configuration in effect at each time (seconds after the anchor) under a cyclic plan."""
    if not events:
        return [hold] * len(times_s)
    lands = np.array([e.land_s % period_s for e in events])
    order = np.argsort(lands, kind="stable")
    lands = lands[order]
    cfgs = [events[i].config for i in order]
    which = np.searchsorted(lands, np.asarray(times_s, dtype=float) % period_s, side="right") - 1
    return [cfgs[w] for w in which]  # -1: the last landing of the previous step is still in effect


def _on_plan_fraction(schedule: ClockSchedule, timeline: StepTimeline, events: list[SwitchEvent],
                      hold: ClockConfig) -> float:
    """Share of kernel time whose midpoint runs at the requested configuration under the plan."""
    mid = timeline.start_s + 0.5 * timeline.duration_s
    ok = np.array([c == schedule[i] for i, c in enumerate(_in_effect(events, hold, mid, timeline.period_s))])
    total = float(timeline.duration_s.sum())
    return float(timeline.duration_s[ok].sum() / total) if total > 0 else float(ok.mean())


def check_lookahead(latency_s: float, lookahead_s: float | None = None) -> float:
    """The lookahead a plan uses, seconds: ``lookahead_s``, or the latency + :data:`LOOKAHEAD_MARGIN_S` when it is
    ``None`` (the rule :func:`plan_switches` applies, and ``rlclock apply`` checks before the command starts).

    Args:
        latency_s: The GPU's switching latency, seconds.
        lookahead_s: How far ahead of its segment a switch is issued, seconds, or ``None``.

    Raises:
        DeployError: Negative or non-finite latency, lookahead shorter than the latency.
    """
    if not math.isfinite(latency_s) or latency_s < 0:
        raise DeployError(f"the switching latency must be a finite number >= 0 s, found {latency_s!r}.")
    lookahead = latency_s + LOOKAHEAD_MARGIN_S if lookahead_s is None else float(lookahead_s)
    if not math.isfinite(lookahead) or lookahead < latency_s:
        raise DeployError(
            f"the lookahead ({lookahead!r} s) is shorter than the switching latency ({latency_s:g} s), so every "
            "switch would land after its kernels start.",
            f"give a lookahead of at least {latency_s:g} s, or leave it out for the default "
            f"({latency_s + LOOKAHEAD_MARGIN_S:g} s).")
    return lookahead


def plan_switches(schedule: ClockSchedule, timeline: StepTimeline, latency_s: float,
                  lookahead_s: float | None = None, min_dwell_s: float = 0.0) -> SwitchPlan:
    """The switches that apply ``schedule`` on ``timeline``, step after step (the module's rules).

    Args:
        schedule: One requested configuration per kernel invocation of the step.
        timeline: When each invocation starts and how long it runs, seconds from the step's anchor.
        latency_s: Time from issuing a switch to the new clocks being in effect, seconds (the GPU's
            switching latency, e.g. 6 ms for an H200).
        lookahead_s: How far ahead of its segment a switch is issued, seconds (>= ``latency_s``; default
            ``latency_s + LOOKAHEAD_MARGIN_S``).
        min_dwell_s: A switch must land at least this long before its segment ends, seconds.

    Returns:
        The plan.

    Raises:
        DeployError: Negative or non-finite latency, lookahead shorter than the latency.
        ScheduleError: Schedule and timeline have different lengths.
    """
    lookahead = check_lookahead(latency_s, lookahead_s)
    if not math.isfinite(min_dwell_s) or min_dwell_s < 0:
        raise DeployError(f"min_dwell_s must be a finite number >= 0 s, found {min_dwell_s!r}.")
    segments = segments_of(schedule, timeline)
    period = timeline.period_s
    share: dict[ClockConfig, float] = {}
    for seg in segments:
        share[seg.config] = share.get(seg.config, 0.0) + seg.duration_s
    hold = max(share, key=lambda c: share[c])
    held: list[SwitchEvent] = []
    candidates = [(held, [seg.index for seg in segments if seg.config != hold])]
    cuts = sorted(range(len(segments)), key=lambda j: -segments[j].duration_s)[:MAX_CUTS]
    candidates += [_cyclic(segments, j, period, float(latency_s), lookahead, float(min_dwell_s)) for j in cuts]
    best = max(candidates, key=lambda c: (_on_plan_fraction(schedule, timeline, c[0], hold), -len(c[0])))
    events, skipped = best
    initial = _in_effect(events, hold, np.array([0.0]), period)[0]
    return SwitchPlan(segments, tuple(events), tuple(sorted(skipped)), initial, float(latency_s), lookahead,
                      float(min_dwell_s), period, timeline.span_s, _on_plan_fraction(schedule, timeline, events, hold),
                      tuple(float(x) for x in timeline.points_s))
