"""What a live controller can execute, and what a step executed so costs: one rule for the planner and the controller.

A deployed schedule says, per kernel invocation, the configuration it should *run at*. A controller reaches it by
issuing switches ahead of the kernels on the step's own clock — a :class:`SwitchRule` (latency, lead, minimum
dwell) over the kernels' start and end times from the step's anchor (a timeline, or one step as it ran).
:func:`execute` applies the rule, in order:

1. **Segments.** Consecutive kernels that ask for the same configuration form one segment; it lasts from its first
   kernel's start to its last kernel's end.
2. **Issue ahead.** The switch into a segment is issued ``lead_s`` before the segment starts
   (:meth:`SwitchRule.issue_s`; ``lead_s >= latency_s``, default ``latency_s`` + :data:`LEAD_MARGIN_S`),
   so that it lands as the segment begins.
3. **One switch at a time.** A switch occupies the controller for ``latency_s``, so a switch is never issued less
   than ``latency_s`` after the previous one (:meth:`SwitchRule.earliest_s`); one that must wait goes out as soon
   as the previous one has landed.
4. **Worth issuing.** A switch is issued only if it lands more than ``min_dwell_s`` before its segment ends
   (:meth:`SwitchRule.worth_issuing`). Otherwise the segment is *skipped*: the clocks stay where they are, and the
   next segment is judged against them.
5. **No-op.** A segment whose configuration is already in effect needs no switch.
6. **Repeat.** Steps repeat, so the plan is cyclic: it is laid out from one segment on (the *cut*, whose switch is
   issued one lead ahead of it) through the rest of the step and the start of the next one, back to the cut.
   Rule 3 holds across the step boundary: the cut's switch waits for the previous step's last switch when it must
   (and if it then could not land in time, switches that would crowd it are not issued instead); the cut's switch
   is dropped when the clocks are already there. A switch for a segment early in the step may so be issued during
   the previous step (a negative issue time). The longest segments are tried as cuts, and holding one
   configuration without any switch as well; the plan that keeps the most kernel time at its requested clocks
   wins (fewer switches on a tie).

The controller (:mod:`rlclock.deploy.plan`, :mod:`rlclock.deploy.worker`) issues exactly these switches, and the
planner (:mod:`rlclock.policy.planner`) judges a schedule by them: :func:`executable` turns the policy's requests —
a switch issued where a request changes, landing one latency later (:func:`rlclock.backends.switching.fly`) — into
the configuration each kernel runs at, and repeats until :func:`execute` skips no segment and lands every switch
as its segment starts; :func:`landed_cost` then prices the landings on the planning model's tables. The same
function prices a step as it ran (the switches where they landed, the kernels where they ran): planned and
delivered figures differ only in their inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlclock.backends.switching import fly

LEAD_MARGIN_S = 5e-4
"""Default lead beyond the switching latency, seconds: the controller's timer and the step anchors are
off by up to a few tenths of a millisecond, and a switch that lands a little early costs less than one that
lands late."""
MAX_CUTS = 16
"""Segments tried as the cut of the cyclic plan (the longest ones)."""
MAX_PASSES = 8
"""Passes around the cycle to settle how late the cut's own switch must be."""
JITTER_MODES = ("blind", "margin", "expected", "settled")
"""How a planner meets the jitter of the measured steps (:attr:`Execution.mode`)."""
SETTLE_ROUNDS = 6
"""Rounds of :func:`executable` before it takes what the rule executes as it stands."""
_EPS = 1e-12


class RuleError(ValueError):
    """A switch rule with a bad latency, lead or dwell (the deploy layer words it for the user)."""


@dataclass(frozen=True)
class SwitchRule:
    """How a controller issues switches (module docstring, rules 2-4).

    Attributes:
        latency_s: Time from issuing a switch to the new clocks being in effect, seconds.
        lead_s: How long before its segment starts a switch is issued, seconds (>= ``latency_s``).
        min_dwell_s: A switch must land at least this long before its segment ends, seconds.
    """

    latency_s: float
    lead_s: float
    min_dwell_s: float = 0.0

    @classmethod
    def of(cls, latency_s: float, lead_s: float | None = None, min_dwell_s: float = 0.0) -> SwitchRule:
        """The rule for a latency, with the default lead (``latency_s`` + :data:`LEAD_MARGIN_S`).

        Raises:
            RuleError: A negative or non-finite latency or dwell, or a lead shorter than the latency.
        """
        if not math.isfinite(latency_s) or latency_s < 0:
            raise RuleError(f"the switching latency must be a finite number >= 0 s, found {latency_s!r}.")
        lead = latency_s + LEAD_MARGIN_S if lead_s is None else float(lead_s)
        if not math.isfinite(lead) or lead < latency_s:
            raise RuleError(
                f"the issue lead ({lead!r} s) is shorter than the switching latency ({latency_s:g} "
                "s), so every switch would land after its kernels start."
            )
        if not math.isfinite(min_dwell_s) or min_dwell_s < 0:
            raise RuleError(f"min_dwell_s must be a finite number >= 0 s, found {min_dwell_s!r}.")
        return cls(float(latency_s), lead, float(min_dwell_s))

    def issue_s(self, start_s: float) -> float:
        """Rule 2: when the switch into a segment starting at ``start_s`` is issued."""
        return start_s - self.lead_s

    def earliest_s(self, previous_issue_s: float) -> float:
        """Rule 3: the earliest issue after a switch issued at ``previous_issue_s`` (once it has landed)."""
        return previous_issue_s + self.latency_s

    def worth_issuing(self, issue_s: float, end_s: float) -> bool:
        """Rule 4: whether a switch issued at ``issue_s`` lands more than the dwell before ``end_s``."""
        return issue_s + self.latency_s < end_s - self.min_dwell_s


@dataclass(frozen=True)
class Segments:
    """A schedule's runs of equal configurations on a step's clock (rule 1), arrays over the runs.

    Attributes:
        first: First kernel of each run.
        stop: One past its last kernel.
        config: The configuration (index) it asks for.
        start_s: Start of its first kernel, seconds after the anchor.
        end_s: Latest end of its kernels.
    """

    first: np.ndarray
    stop: np.ndarray
    config: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray

    @classmethod
    def of(cls, index: np.ndarray, start_s: np.ndarray, end_s: np.ndarray) -> Segments:
        """The runs of ``index`` (configuration per kernel), placed by the kernels' ``start_s`` and ``end_s``."""
        idx = np.asarray(index, dtype=np.int64)
        cuts = np.flatnonzero(np.diff(idx)) + 1
        first = np.concatenate([[0], cuts]).astype(np.int64)
        stop = np.concatenate([cuts, [idx.size]]).astype(np.int64)
        end = np.maximum.reduceat(np.asarray(end_s, dtype=float), first)
        return cls(first, stop, idx[first], np.asarray(start_s, dtype=float)[first], end)

    def __len__(self) -> int:
        return int(self.first.size)

    @property
    def duration_s(self) -> np.ndarray:
        """From each run's start to its end, seconds."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Executed:
    """The switches that execute a schedule step after step (:func:`execute`).

    Attributes:
        segments: The schedule's segments.
        segment: The segment each switch serves, in issue order.
        config: The configuration each switch asks for.
        issue_s: When each is issued, seconds after the step's anchor (negative: during the previous step).
        land_s: When each lands (``issue_s + latency_s``).
        skipped: Segments whose switch could not land before they end.
        initial: The configuration in effect when a step starts.
        on_plan_fraction: Share of the kernel time expected at the requested configuration.
        period_s: The step period the cycle repeats with, seconds.
    """

    segments: Segments
    segment: np.ndarray
    config: np.ndarray
    issue_s: np.ndarray
    land_s: np.ndarray
    skipped: tuple[int, ...]
    initial: int
    on_plan_fraction: float
    period_s: float

    @property
    def late_s(self) -> np.ndarray:
        """How long after its segment's start each switch lands (0 when in time), seconds."""
        return np.maximum(0.0, self.land_s - self.segments.start_s[self.segment])

    def in_effect(self, times_s: np.ndarray) -> np.ndarray:
        """The configuration in effect at each time (seconds after the anchor) under the cycle."""
        return in_effect_at(self.land_s, self.config, self.initial, np.asarray(times_s, dtype=float), self.period_s)


def _around(
    seg: Segments, cut: int, issue0: float, period_s: float, rule: SwitchRule, strict: bool
) -> tuple[list[tuple[int, int, float, float]], list[int], float, bool]:
    """One pass around the cycle from segment ``cut`` with its switch at ``issue0``; ``strict``: no switch may
    crowd the cut's next one. Returns the events ``(segment, config, issue_s, land_s)``, the skipped segments, the
    last issue, and whether the cut's switch was dropped."""
    n = len(seg)
    cfg, start, end = seg.config.tolist(), seg.start_s.tolist(), seg.end_s.tolist()
    latency = rule.latency_s
    limit = issue0 + period_s - latency if strict else math.inf
    events = [(cut, cfg[cut], issue0, issue0 + latency)]
    skipped: list[int] = []
    current, prev = cfg[cut], issue0
    for i in range(1, n):
        j = (cut + i) % n
        shift = period_s if cut + i >= n else 0.0  # segments before the cut come in the next step
        if cfg[j] == current:  # rule 5
            continue
        issue = max(rule.issue_s(start[j] + shift), rule.earliest_s(prev))  # rules 2 and 3
        if not rule.worth_issuing(issue, end[j] + shift) or issue > limit:  # rule 4 (and rule 3 across the boundary)
            skipped.append(j)
            continue
        events.append((j, cfg[j], issue - shift, issue + latency - shift))
        current, prev = cfg[j], issue
    back = current == cfg[cut]
    if back:  # the cycle ends where the cut starts: its switch is not needed
        events.pop(0)
    return events, skipped, prev, back


def _cyclic(
    seg: Segments, cut: int, period_s: float, rule: SwitchRule
) -> tuple[list[tuple[int, int, float, float]], list[int]]:
    """Rules 2-5 around the cycle from segment ``cut`` (rule 6): its switch waits for the previous step's last one
    while it can still land in time; when it cannot, it stays on time and nothing that would crowd it is issued."""
    first_start, first_end = float(seg.start_s[cut]), float(seg.end_s[cut])
    issue0 = rule.issue_s(first_start)
    latency = rule.latency_s
    for _ in range(MAX_PASSES):
        events, skipped, last, back = _around(seg, cut, issue0, period_s, rule, strict=False)
        if back or last + latency <= issue0 + period_s + _EPS:
            return sorted(events, key=lambda e: e[2]), skipped
        issue0 = last + latency - period_s  # the cut's switch waits for the last one of the previous step
        if not rule.worth_issuing(issue0, first_end):
            break
    events, skipped, _, _ = _around(seg, cut, rule.issue_s(first_start), period_s, rule, strict=True)
    return sorted(events, key=lambda e: e[2]), skipped


def in_effect_at(land_s: np.ndarray, config: np.ndarray, hold: int, times_s: np.ndarray, period_s: float) -> np.ndarray:
    """The configuration in effect at each time under a cyclic plan whose switches land at ``land_s``."""
    if land_s.size == 0:
        return np.full(times_s.shape, hold, dtype=np.int64)
    lands = np.mod(land_s, period_s)
    order = np.argsort(lands, kind="stable")
    which = np.searchsorted(lands[order], np.mod(times_s, period_s), side="right") - 1
    return np.asarray(config, dtype=np.int64)[order][which]  # -1: the previous step's last landing still holds


def _on_plan(
    index: np.ndarray,
    mid_s: np.ndarray,
    duration_s: np.ndarray,
    land_s: np.ndarray,
    config: np.ndarray,
    hold: int,
    period_s: float,
) -> float:
    """Share of kernel time whose midpoint runs at the requested configuration under the plan."""
    ok = in_effect_at(land_s, config, hold, mid_s, period_s) == index
    total = float(duration_s.sum())
    return float(duration_s[ok].sum() / total) if total > 0 else float(ok.mean())


def execute(
    index: np.ndarray, start_s: np.ndarray, duration_s: np.ndarray, period_s: float, rule: SwitchRule
) -> Executed:
    """The switches that run ``index`` (a configuration per kernel) on a step's clock, step after step (the module's
    rules).

    Args:
        index: The configuration (an index into some action set) each kernel should run at.
        start_s: When each kernel starts, seconds after the step's anchor (non-decreasing).
        duration_s: How long each runs, seconds.
        period_s: Anchor-to-anchor time of back-to-back steps, seconds (at least the last kernel's end).
        rule: Latency, lead and dwell.
    """
    idx = np.asarray(index, dtype=np.int64)
    start = np.asarray(start_s, dtype=float)
    dur = np.asarray(duration_s, dtype=float)
    seg = Segments.of(idx, start, start + dur)
    n = len(seg)
    share = np.bincount(seg.config, weights=seg.duration_s)
    seen = seg.config[np.sort(np.unique(seg.config, return_index=True)[1])]  # in order of first appearance
    hold = int(seen[int(np.argmax(share[seen]))])
    mid = start + 0.5 * dur
    empty = np.zeros(0)
    held: tuple[list[tuple[int, int, float, float]], list[int]] = ([], [j for j in range(n) if seg.config[j] != hold])
    candidates = [held]
    cuts = np.argsort(-seg.duration_s, kind="stable")[:MAX_CUTS].tolist()
    candidates += [_cyclic(seg, j, period_s, rule) for j in cuts]
    best, best_key, best_arrays = held, (-math.inf, 0), (empty, empty.astype(np.int64))
    for cand in candidates:
        events = cand[0]
        lands = np.array([e[3] for e in events], dtype=float)
        cfgs = np.array([e[1] for e in events], dtype=np.int64)
        key = (_on_plan(idx, mid, dur, lands, cfgs, hold, period_s), -len(events))
        if key > best_key:
            best, best_key, best_arrays = cand, key, (lands, cfgs)
    events, skipped = best
    lands, cfgs = best_arrays
    initial = int(in_effect_at(lands, cfgs, hold, np.zeros(1), period_s)[0])
    return Executed(
        seg,
        np.array([e[0] for e in events], dtype=np.int64),
        cfgs,
        np.array([e[2] for e in events], dtype=float),
        lands,
        tuple(sorted(skipped)),
        initial,
        float(best_key[0]),
        float(period_s),
    )


# -- from the policy's requests to what runs ------------------------------------------------------------------


def requested_in_effect(requests: np.ndarray, time_s: np.ndarray, latency_s: float, initial: int = 0) -> np.ndarray:
    """The configuration each kernel runs at under the switching rule (:func:`~rlclock.backends.switching.fly`:
    a switch issued where the request differs from what is in effect, landing one latency of the kernels' own
    time later): ``(n,)`` indices. A kernel inside which a switch lands counts as the configuration it spends more
    of its time at.

    Args:
        requests: The requested configuration per kernel.
        time_s: ``(n, C)`` each kernel's seconds per configuration (the planning model's table).
        latency_s: The switching latency, seconds.
        initial: The configuration in effect when the step starts.
    """
    req = np.asarray(requests, dtype=np.int64)
    n = req.size
    out = np.empty(n, dtype=np.int64)
    t_at = time_s.item
    cur, k = int(initial), 0
    while k < n:
        want = int(req[k])
        if want == cur:
            stop = k + 1 + int(np.argmax(np.append(req[k + 1 :] != cur, True)))  # the run that keeps ``cur``
            out[k:stop] = cur
            k = stop
            continue
        if latency_s <= 0.0:
            out[k] = cur = want
            k += 1
            continue
        stop, after, _, _ = fly(t_at, t_at, n, k, cur, want, latency_s)
        out[k:stop] = cur
        if math.isfinite(after):
            last = stop - 1
            if after < 0.5 * t_at(last, cur):
                out[last] = want
        cur, k = want, stop
    return out


def executed_in_effect(executed: Executed, start_s: np.ndarray, duration_s: np.ndarray) -> np.ndarray:
    """The configuration each kernel runs at under ``executed`` (the one at its midpoint)."""
    return executed.in_effect(np.asarray(start_s, dtype=float) + 0.5 * np.asarray(duration_s, dtype=float))


def executable(
    index: np.ndarray, start_s: np.ndarray, duration_s: np.ndarray, period_s: float, rule: SwitchRule
) -> tuple[np.ndarray, Executed]:
    """``index`` made executable: the configuration each kernel runs at under :func:`execute`, asked for. Each round,
    a skipped segment's kernels ask for what runs while they do, and the kernels of a segment that start before its
    late switch lands ask for what runs then, until :func:`execute` skips no segment and lands every switch by its
    segment's start (at most :data:`SETTLE_ROUNDS` rounds). A round moves no landing: what runs stays what ran.

    Returns:
        The configuration each kernel asks for, and :func:`execute` of it (always that of the configuration
        returned).
    """
    cur = np.asarray(index, dtype=np.int64)
    start = np.asarray(start_s, dtype=float)
    dur = np.asarray(duration_s, dtype=float)
    ex = execute(cur, start, dur, period_s, rule)
    for _ in range(SETTLE_ROUNDS):
        late = np.flatnonzero(ex.late_s > _EPS)
        if not ex.skipped and not late.size:
            break
        seg = ex.segments
        nxt = cur.copy()
        for j in ex.skipped:
            a, b = int(seg.first[j]), int(seg.stop[j])
            nxt[a:b] = executed_in_effect(ex, start[a:b], dur[a:b])
        for i in late.tolist():
            j = int(ex.segment[i])
            a, b = int(seg.first[j]), int(seg.stop[j])
            early = a + np.flatnonzero(start[a:b] < ex.land_s[i])
            nxt[early] = ex.in_effect(start[early])
        if np.array_equal(nxt, cur):
            break
        cur = nxt
        ex = execute(cur, start, dur, period_s, rule)
    return cur, ex


# -- what landings cost -------------------------------------------------------------------------------------------


def landed_cost(
    time_s: np.ndarray,
    energy_j: np.ndarray,
    start_s: np.ndarray,
    duration_s: np.ndarray,
    land_s: np.ndarray,
    config: np.ndarray,
    before: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each kernel's seconds and joules when switches land at ``land_s`` (seconds after the step's anchor, any
    order) into ``config``, the kernels running where ``start_s`` and ``duration_s`` place them.

    A kernel runs at the configuration in effect when it starts — ``before`` until the first landing — and one
    inside which a switch lands is split as :func:`~rlclock.backends.switching.split` splits it: the share of its
    duration before the landing at the old configuration, the rest at the new one. Landings outside the kernels
    (in gaps, before the first or after the last) change what the next kernel starts at.

    Args:
        time_s: ``(n, C)`` the planning model's seconds per kernel and configuration.
        energy_j: ``(n, C)`` its joules.
        start_s: ``(n,)`` where each kernel starts, seconds after the anchor.
        duration_s: ``(n,)`` how long it runs on that clock (the share before a landing is measured on it).
        land_s: When each switch lands.
        config: The configuration each switch lands into.
        before: The configuration in effect before the first landing.

    Returns:
        ``(seconds, joules)`` per kernel.
    """
    start = np.asarray(start_s, dtype=float)
    dur = np.asarray(duration_s, dtype=float)
    lands = np.asarray(land_s, dtype=float)
    order = np.argsort(lands, kind="stable")
    lands = lands[order]
    cfgs = np.asarray(config, dtype=np.int64)[order]
    chain = np.concatenate([[before], cfgs])  # chain[i]: in effect after landing i - 1
    rows = np.arange(start.size)
    at_start = chain[np.searchsorted(lands, start, side="right")]
    t = time_s[rows, at_start].astype(float)
    e = energy_j[rows, at_start].astype(float)
    k = np.searchsorted(start, lands, side="right") - 1  # the kernel each landing could fall inside
    inside = (k >= 0) & (lands < start[np.maximum(k, 0)] + dur[np.maximum(k, 0)])
    for i in np.flatnonzero(inside).tolist():
        j = int(k[i])
        if lands[i] <= start[j]:
            continue
        rest = 1.0 - (lands[i] - start[j]) / dur[j] if dur[j] > 0 else 0.0
        old, new = int(chain[i]), int(chain[i + 1])
        t[j] += rest * (time_s[j, new] - time_s[j, old])
        e[j] += rest * (energy_j[j, new] - energy_j[j, old])
    return t, e


def cyclic_landings(land_s: np.ndarray, config: np.ndarray, period_s: float) -> tuple[np.ndarray, np.ndarray, int]:
    """A cycle's landings as one step sees them: each landing of the previous, this and the next step, seconds after
    this step's anchor, with its configuration, and the configuration in effect before the first of them."""
    lands = np.asarray(land_s, dtype=float)
    cfgs = np.asarray(config, dtype=np.int64)
    if lands.size == 0:
        return lands, cfgs, -1
    all_lands = np.concatenate([lands - period_s, lands, lands + period_s])
    all_cfgs = np.concatenate([cfgs, cfgs, cfgs])
    order = np.argsort(all_lands, kind="stable")
    return all_lands[order], all_cfgs[order], int(all_cfgs[order][-1])


def executed_cost(
    time_s: np.ndarray, energy_j: np.ndarray, executed: Executed, start_s: np.ndarray, duration_s: np.ndarray
) -> tuple[float, float]:
    """``(seconds, joules)`` of one step whose kernels run where ``start_s`` and ``duration_s`` place them, the
    switches of ``executed`` landing as planned (step after step: the previous step's late ones too)."""
    lands, cfgs, before = cyclic_landings(executed.land_s, executed.config, executed.period_s)
    if lands.size == 0:
        before = executed.initial
    t, e = landed_cost(time_s, energy_j, start_s, duration_s, lands, cfgs, before)
    return float(np.cumsum(t)[-1]), float(np.cumsum(e)[-1])


# -- a plan judged as the controller will run it ---------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """A plan judged by what the controller executes (:meth:`Execution.judge`).

    Attributes:
        runs: The configuration each kernel runs at (the schedule to deploy).
        executed: Its switches.
        time_s: The step's seconds on the planning model: the mean over the median step and the measured ones when
            the execution has any (:attr:`Execution.jitter_s`), else as planned.
        energy_j: Its joules, likewise.
        planned_time_s: The step's seconds with every switch landing as planned.
        planned_energy_j: Its joules.
        worst_time_s: The longest of those steps (``planned_time_s`` without measured ones).
    """

    runs: np.ndarray
    executed: Executed
    time_s: float
    energy_j: float
    planned_time_s: float
    planned_energy_j: float
    worst_time_s: float


@dataclass(frozen=True, eq=False)
class Execution:
    """The clock a deployed plan runs on: where the step's kernels run, the controller's switch rule, and how the
    kernels moved in the steps timed before planning.

    Attributes:
        start_s: ``(n,)`` each kernel's start, seconds after the step's anchor (the timeline).
        duration_s: ``(n,)`` its duration, seconds.
        period_s: Anchor-to-anchor time of back-to-back steps, seconds.
        rule: The controller's switch rule.
        jitter_s: ``(m, n)`` per measured step, how much later than ``start_s`` each kernel started (the switches,
            timed from the step's anchor, land where they do among the kernels of that step); ``None``: plans are
            judged as planned only.
        mode: How the planner meets the jitter (:data:`JITTER_MODES`): ``"blind"`` judges plans as planned;
            ``"margin"`` too, within the budget less the slowdown the jitter added to the blind plan; ``"expected"``
            by their mean over the median and the measured steps; ``"settled"`` (the default) likewise, and then
            moves the best plan's landings to where a late or early landing costs little
            (:func:`rlclock.policy.jitter.descend`). Without ``jitter_s`` every mode judges as planned.
    """

    start_s: np.ndarray
    duration_s: np.ndarray
    period_s: float
    rule: SwitchRule
    jitter_s: np.ndarray | None = None
    mode: str = "settled"

    def __post_init__(self) -> None:
        if self.mode not in JITTER_MODES:
            raise RuleError(f"jitter mode {self.mode!r} is not known: use one of {list(JITTER_MODES)}.")
        start = np.asarray(self.start_s, dtype=float)
        if self.jitter_s is not None and np.asarray(self.jitter_s).shape[1:] != start.shape:
            raise RuleError(
                f"the measured steps' jitter has shape {np.asarray(self.jitter_s).shape}, the timeline "
                f"{start.size} kernels."
            )
        object.__setattr__(self, "_cache", {})

    @property
    def jittered(self) -> bool:
        """True when plans are judged over measured steps (a mode other than blind or margin, and steps to judge
        over)."""
        return self.mode in ("expected", "settled") and self.jitter_s is not None and len(self.jitter_s) > 0

    def placements(self) -> np.ndarray:
        """``(1 + m, n)`` where the kernels start in the median step (the timeline) and in each measured step (kept
        in order: a kernel never starts before the one launched before it)."""
        start = np.asarray(self.start_s, dtype=float)
        if self.jitter_s is None or not len(self.jitter_s):
            return start[None, :]
        return np.maximum.accumulate(np.vstack([start[None, :], start[None, :] + np.asarray(self.jitter_s)]), axis=1)

    def blind(self) -> Execution:
        """The same execution judging plans as planned."""
        return Execution(self.start_s, self.duration_s, self.period_s, self.rule, self.jitter_s, "blind")

    @property
    def n(self) -> int:
        return int(np.asarray(self.start_s).size)

    def judge(
        self, requests: np.ndarray, time_s: np.ndarray, energy_j: np.ndarray, latency_s: float, runs: bool = False
    ) -> Judged:
        """The plan ``requests`` asks for (a switch where a request changes, :func:`requested_in_effect` on the
        planning model's ``time_s`` with its ``latency_s``) made executable (:func:`executable`) and priced on the
        planning model's tables. With ``runs``, ``requests`` is a deployed schedule (what each kernel should run at),
        judged by the switches :func:`execute` gives it, as the controller issues them."""
        req = np.asarray(requests, dtype=np.int64)
        key = (req.tobytes(), bool(runs))
        cache: dict[tuple[bytes, bool], Judged] = self._cache  # type: ignore[attr-defined]
        if key in cache:
            return cache[key]
        if runs:  # a deployed schedule: what the controller does with it
            settled, ex = req, execute(req, self.start_s, self.duration_s, self.period_s, self.rule)
        else:
            want = requested_in_effect(req, time_s, latency_s)
            settled, ex = executable(want, self.start_s, self.duration_s, self.period_s, self.rule)
        t0, e0 = executed_cost(time_s, energy_j, ex, self.start_s, self.duration_s)
        t, e, worst = t0, e0, t0
        if self.jitter_s is not None and len(self.jitter_s):
            costs = np.array(
                [(t0, e0)] + [executed_cost(time_s, energy_j, ex, p, self.duration_s) for p in self.placements()[1:]]
            )
            t, e, worst = float(costs[:, 0].mean()), float(costs[:, 1].mean()), float(costs[:, 0].max())
        got = Judged(settled, ex, t, e, t0, e0, worst)
        cache[key] = got
        return got
