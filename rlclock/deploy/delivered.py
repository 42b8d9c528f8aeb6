"""What a controlled run delivered: each step as executed, priced on the planning model beside the plan.

The controller records, per switch, when the worker issued it (or, in a dry run, would have: ``issued_s``), and per
timed step when it started on the GPU (its anchor), when it ended (the end mark of ``with clk.step():``) and when it
passed each point inside it (``clk.watch``). From those, every timed step is rebuilt as it ran:

* **Where the kernels ran.** The timeline's kernels, placed between the step's own measured marks: from the anchor
  to the end mark (or, without one, to the next step's anchor), stretched to fit, and piecewise between points
  where the loop marks any. The marks are CUDA events (``anchor="cuda"``): the GPU's own times.
* **Where each switch landed.** ``issued_s`` plus the switching latency, for every switch issued during the step
  or before it (a switch of the previous step that lands in this one counts here). The configuration in effect
  when the step starts is the one the last earlier landing set.
* **What that costs.** :func:`rlclock.backends.executable.landed_cost` on the planning model's tables — the same
  function that prices the plan, with the planned landings and the timeline's kernel places. Planned and
  delivered differ only in where the switches landed and where the kernels ran.

Steps after a pause (see :mod:`rlclock.deploy.report`), the first controlled step (its early switches were caught
up, not timed) and steps without a measured start are not judged. In a dry run nothing is set, so the kernels ran at
the clocks in effect: what was delivered is what *would* have been, had each switch landed where it would have.
Kernels that run at other clocks take another time; the placement here is that of the run as it was.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rlclock.backends.executable import Execution, cyclic_landings, landed_cost
from rlclock.deploy.anchor import AnchorLog
from rlclock.deploy.plan import SwitchPlan
from rlclock.deploy.report import PAUSE_FACTOR, record_plan
from rlclock.errors import DeployError
from rlclock.schedule import ClockConfig

ISSUED = ("switch", "boundary", "resync")
"""Worker record statuses of switches that were issued (or, in a dry run, would have been)."""


@dataclass(frozen=True, eq=False)
class PlanningCosts:
    """The planning model's price of every kernel of the step at every configuration a plan may ask for.

    Attributes:
        time_s: ``(n, C)`` seconds per kernel and configuration.
        energy_j: ``(n, C)`` joules.
        configs: The configuration of each column; the first is the driver's own (auto), the reference of the
            savings and slowdowns.
        source: What the tables come from (e.g. ``"policy corpus-h200 on the profiled step"``).
    """

    time_s: np.ndarray
    energy_j: np.ndarray
    configs: tuple[ClockConfig, ...]
    source: str = ""

    def __post_init__(self) -> None:
        t, e = np.asarray(self.time_s, dtype=float), np.asarray(self.energy_j, dtype=float)
        if t.ndim != 2 or t.shape != e.shape or t.shape[1] != len(self.configs):
            raise DeployError(
                f"planning costs need (kernels, configurations) tables for {len(self.configs)} "
                f"configurations; found {t.shape} and {e.shape}."
            )
        object.__setattr__(self, "time_s", t)
        object.__setattr__(self, "energy_j", e)

    @property
    def n(self) -> int:
        return int(self.time_s.shape[0])

    @property
    def auto_time_s(self) -> float:
        """The step's seconds at the driver's clocks."""
        return float(np.cumsum(self.time_s[:, 0])[-1])

    @property
    def auto_energy_j(self) -> float:
        """Its joules."""
        return float(np.cumsum(self.energy_j[:, 0])[-1])

    def column(self, config: ClockConfig) -> int:
        """The column of ``config``.

        Raises:
            DeployError: The tables have no column for it.
        """
        try:
            return self.configs.index(config)
        except ValueError:
            raise DeployError(
                f"the planning model has no costs for configuration {config}.",
                "price plans of the configurations the planning model was built for.",
            ) from None

    def cost(
        self,
        start_s: np.ndarray,
        duration_s: np.ndarray,
        land_s: np.ndarray,
        configs: Sequence[ClockConfig],
        before: ClockConfig,
    ) -> tuple[float, float]:
        """``(seconds, joules)`` of the step with kernels at ``start_s`` and switches landing at ``land_s`` into
        ``configs`` (:func:`~rlclock.backends.executable.landed_cost`)."""
        cols = np.array([self.column(c) for c in configs], dtype=np.int64)
        t, e = landed_cost(
            self.time_s, self.energy_j, start_s, duration_s, np.asarray(land_s, dtype=float), cols, self.column(before)
        )
        return float(np.cumsum(t)[-1]), float(np.cumsum(e)[-1])

    def planned(self, plan: SwitchPlan, start_s: np.ndarray, duration_s: np.ndarray) -> tuple[float, float]:
        """``(seconds, joules)`` of a step of ``plan`` whose switches land as planned, step after step."""
        if not plan.events:
            return self.cost(start_s, duration_s, np.zeros(0), (), plan.initial)
        lands = np.array([e.land_s for e in plan.events])
        cols = np.array([self.column(e.config) for e in plan.events], dtype=np.int64)
        all_lands, all_cols, before = cyclic_landings(lands, cols, plan.period_s)
        t, e = landed_cost(self.time_s, self.energy_j, start_s, duration_s, all_lands, all_cols, before)
        return float(np.cumsum(t)[-1]), float(np.cumsum(e)[-1])


@dataclass
class Delivered:
    """Planned and delivered figures of a controlled run, on the planning model (module docstring).

    Attributes:
        source: Where the planning model's costs come from.
        placed: How the kernels of each judged step were placed (``"anchor and end mark"``, ``"anchors"``, with
            ``" and points"``).
        dry_run: True when nothing was set (the figures are what would have been delivered).
        steps: Steps judged.
        auto_time_s: The step's seconds at the driver's clocks on the planning model.
        auto_energy_j: Its joules.
        planned_saving: The plan's energy saving against auto, a fraction (switches landing as planned).
        planned_slowdown: Its slowdown.
        saving: The judged steps' energy saving against as many auto steps.
        slowdown: Their slowdown.
        worst_slowdown: The slowest judged step's slowdown.
        per_step: ``[step, plan, seconds, joules]`` of each judged step on the planning model.
        per_plan: ``[plan, steps, saving, slowdown]`` of each plan that ran judged steps (the figures above are plan
            0's: the schedule's).
        switches: ``[step, plan, event, config, issued_s, land_s]`` of every switch issued, times after the anchor of
            the step it served (``NaN`` where that step's start was not measured): the record the figures come from.
        anchors: ``[step, anchor_s, end_s]`` of every timed step (``time.monotonic()``; end NaN without an end mark).
        notes: What could not be judged and why.
    """

    source: str
    placed: str
    dry_run: bool
    steps: int = 0
    auto_time_s: float = math.nan
    auto_energy_j: float = math.nan
    planned_saving: float = math.nan
    planned_slowdown: float = math.nan
    saving: float = math.nan
    slowdown: float = math.nan
    worst_slowdown: float = math.nan
    per_step: list[list[float]] = field(default_factory=list)
    per_plan: list[list[float]] = field(default_factory=list)
    switches: list[list[Any]] = field(default_factory=list)
    anchors: list[list[float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def verb(self) -> str:
        """``"would deliver"`` in a dry run, else ``"delivered"``."""
        return "would deliver" if self.dry_run else "delivered"

    def line(self) -> str:
        """One line: planned and delivered saving and slowdown."""
        if not self.steps:
            return f"delivered: not judged ({'; '.join(self.notes) or 'no timed step'})"
        return (
            f"planned {100 * self.planned_saving:.2f} % energy at {100 * self.planned_slowdown:+.2f} % time; "
            f"{self.verb} {100 * self.saving:.2f} % at {100 * self.slowdown:+.2f} % over {self.steps} steps "
            f"(slowest step {100 * self.worst_slowdown:+.2f} %; planning model, kernels placed from the "
            f"{self.placed})"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _place(timeline_s: np.ndarray, span_s: float, marks: list[tuple[float, float]]) -> np.ndarray:
    """Times on the timeline (seconds after the anchor) as the step ran: piecewise linear through ``marks``, pairs of
    (planned, measured) times after the anchor, (0, 0) first; past the last mark at its stretch."""
    planned = np.array([0.0] + [p for p, _ in marks])
    measured = np.array([0.0] + [m for _, m in marks])
    order = np.argsort(planned, kind="stable")
    planned, measured = planned[order], measured[order]
    out = np.interp(timeline_s, planned, measured)
    if planned[-1] > 0:
        stretch = measured[-1] / planned[-1]
        past = timeline_s > planned[-1]
        out[past] = measured[-1] + (timeline_s[past] - planned[-1]) * stretch
    elif span_s > 0:
        out = timeline_s.copy()
    return out


def deliver(
    plans: Sequence[SwitchPlan],
    costs: PlanningCosts,
    timeline_start_s: np.ndarray,
    timeline_duration_s: np.ndarray,
    log: AnchorLog,
    records: Sequence[Sequence[Any]],
    dry_run: bool,
    plan_of: Callable[[int], int] | None = None,
) -> Delivered:
    """The run's planned and delivered figures (module docstring).

    Args:
        plans: Every plan a step could run (0: the schedule's).
        costs: The planning model's tables for the plans' configurations.
        timeline_start_s: The timeline's kernel starts, seconds after the anchor.
        timeline_duration_s: Their durations.
        log: What the anchors saw (start, end and points of every timed step).
        records: The worker's switch records (:class:`~rlclock.deploy.report.SwitchRecord`).
        dry_run: Nothing was set.
        plan_of: The plan each step ran (default: plan 0).
    """
    plan = plans[0]
    plan_of = plan_of or (lambda _step: 0)
    if costs.n != len(timeline_start_s):
        raise DeployError(
            f"the planning model has {costs.n} kernels, the timeline {len(timeline_start_s)}.",
            "price the step the timeline was made for.",
        )
    start, dur = np.asarray(timeline_start_s, dtype=float), np.asarray(timeline_duration_s, dtype=float)
    auto_t, auto_e = costs.auto_time_s, costs.auto_energy_j
    planned = [costs.planned(p, start, dur) for p in plans]
    out = Delivered(
        costs.source,
        "",
        dry_run,
        auto_time_s=auto_t,
        auto_energy_j=auto_e,
        planned_saving=1.0 - planned[0][1] / auto_e,
        planned_slowdown=planned[0][0] / auto_t - 1.0,
    )
    anchors = log.final_anchors_s()
    steps = np.asarray(log.step, dtype=np.int64)
    busy = np.asarray(log.busy_s, dtype=float)
    periods = log.periods_s()
    out.anchors = [[int(s), float(a), float(a + b)] for s, a, b in zip(steps, anchors, busy, strict=True)]
    lands: list[tuple[float, ClockConfig]] = []
    where = {int(s): i for i, s in enumerate(steps.tolist())}
    for r in records:
        status, step, event, _planned, issued = r[0], int(r[1]), int(r[2]), r[3], float(r[4])
        if status not in ISSUED or not math.isfinite(issued):
            continue
        which = record_plan(r)
        p = plans[which]
        config = p.events[event].config if event >= 0 else p.initial
        land = issued + plan.latency_s
        lands.append((land, config))
        i = where.get(step)
        rel = (issued - anchors[i], land - anchors[i]) if i is not None else (math.nan, math.nan)
        out.switches.append([step, which, event, str(config), *rel])
    lands.sort(key=lambda x: x[0])
    land_abs = np.array([x[0] for x in lands])
    points: dict[int, list[tuple[float, float]]] = {}
    for step, point, time_s in log.points:
        if 0 <= point < len(plan.points_s):
            points.setdefault(int(step), []).append((plan.points_s[point], time_s))
    med = float(np.nanmedian(periods)) if np.isfinite(periods).any() else math.nan
    kinds = set()
    first = int(steps[0]) if steps.size else 0
    for i, step in enumerate(steps.tolist()):
        paused = i > 0 and math.isfinite(med) and math.isfinite(periods[i - 1]) and periods[i - 1] > PAUSE_FACTOR * med
        if step == first or paused:
            continue
        a = anchors[i]
        if math.isfinite(busy[i]):
            marks, kind = [(plan.span_s, float(busy[i]))], "anchor and end mark"
        elif math.isfinite(periods[i]):
            marks, kind = [(plan.period_s, float(periods[i]))], "anchors"
        else:
            continue
        marks += [(pp, t - a) for pp, t in points.get(step, [])]
        if step in points:
            kind += " and points"
        kinds.add(kind)
        placed = _place(start, plan.span_s, marks)
        k = int(np.searchsorted(land_abs, a, side="right"))
        before = lands[k - 1][1] if k > 0 else plans[plan_of(step)].initial
        end = a + placed[-1] + dur[-1]
        hi = int(np.searchsorted(land_abs, end, side="right"))
        t, e = costs.cost(placed, dur, land_abs[k:hi] - a, [c for _, c in lands[k:hi]], before)
        out.per_step.append([step, plan_of(step), t, e])
    rows = np.array(out.per_step, dtype=float).reshape(-1, 4)
    for which in sorted({int(x) for x in rows[:, 1]}):
        arr = rows[rows[:, 1] == which, 2:]
        n = arr.shape[0]
        out.per_plan.append(
            [which, n, 1.0 - float(arr[:, 1].sum()) / (n * auto_e), float(arr[:, 0].sum()) / (n * auto_t) - 1.0]
        )
        if which == 0:
            out.steps = n
            out.saving, out.slowdown = out.per_plan[-1][2], out.per_plan[-1][3]
            out.worst_slowdown = float(arr[:, 0].max()) / auto_t - 1.0
    out.placed = " / ".join(sorted(kinds))
    if not out.steps:
        out.notes.append("no step of the plan after the first had a measured start and end")
    return out


def execution_for(
    timeline: Any, latency_s: float, lead_s: float | None = None, min_dwell_s: float = 0.0, mode: str = "settled"
) -> Execution:
    """The clock a plan for ``timeline`` (a :class:`~rlclock.deploy.timeline.StepTimeline`) will run on: its kernels,
    the controller's rule, and the located steps' jitter (the planner judges plans by it)."""
    from rlclock.deploy.plan import rule_of

    return Execution(
        timeline.start_s,
        timeline.duration_s,
        timeline.period_s,
        rule_of(latency_s, lead_s, min_dwell_s),
        timeline.jitter_s,
        mode,
    )


def costs_of(backend: Any, source: str) -> PlanningCosts:
    """The planning costs of a planning model (a :class:`~rlclock.backends.base.GpuBackend` whose first configuration
    is the driver's own)."""
    t, e = backend.tables
    return PlanningCosts(t, e, tuple(backend.configs), source)


def simulated_costs(
    gpu: str, trace: Any, auto_time_s: np.ndarray, configs: Sequence[ClockConfig], latency_s: float
) -> PlanningCosts:
    """Planning costs from the GPU's preset (:class:`~rlclock.backends.simulated.SimulatedGpu`) over a profiled
    step, anchored on its measured kernel times, for ``configs`` (the driver's own first): a schedule given without
    a policy is priced so.

    Raises:
        RlclockError: No preset for ``gpu``, or a configuration its clock table does not hold.
    """
    from dataclasses import replace

    from rlclock.backends.simulated import SimulatedGpu
    from rlclock.dvfs.spec import get_spec
    from rlclock.schedule import AUTO
    from rlclock.workload.trace import Measurement

    spec = get_spec(gpu)
    t = np.asarray(auto_time_s, dtype=float)
    kernels = [
        replace(k, measured=(Measurement(gpu=spec.key, time_s=float(t[i]), source="profile"),))
        for i, k in enumerate(trace)
    ]
    cols = tuple(dict.fromkeys([AUTO, *configs]))
    backend = SimulatedGpu(spec, trace.with_kernels(kernels), cols, latency_s, anchor=True)
    return costs_of(backend, f"{spec.key} preset on the profiled step")
