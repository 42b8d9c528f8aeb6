"""The budget planner: the policy's plans at many prices of time, mixed and searched, until one fits the budget.

:func:`plan` reads top to bottom as its stages:

1. **Price grid**: the step is planned at ``prices`` prices, log-spaced over the range the policy knows
   (0.25-4 × the mean auto power) — one Lagrangian plan each.
2. **Time-sharing**: the best of those within the budget can leave much of it unused (the trade-off curve of
   a discrete schedule has gaps). For the ``pairs`` most promising pairs of a fitting and a missing plan (by
   the saving their straight-line mix would reach at the budget), the policy runs the first ``K`` kernels at
   one price and the rest at the other, both ways round, with ``K`` bisected (``mix_tries`` rollouts each).
3. **Starting later**: a plan that misses the budget can fit when the policy starts deciding later — the first
   ``K`` kernels left to the driver, ``K`` bisected — which time-shares a plan of few switches (a short step
   against a long switching latency) where stage 2 cannot: with one decision at the step's start, which price
   makes it decides the whole plan. Where no plan of the grid fits (a policy too bold for this step at every
   price it knows), the driver's plan is the fitting side: the missing plan whose straight-line mix with auto
   would save most at the budget starts later.

With the search (``search=True``), three more:

4. **Search**: at ``searches`` prices, the plan of least ``energy + price·time`` among those taking one of the
   policy's ``ranks`` best choices at every decision (exact: :func:`rlclock.policy.search.ranked_choices`) —
   at the two prices of the most promising pair, then at prices that bracket the budget between searched
   plans.
5. **Time-sharing again**, over ``2 · pairs`` pairs of distinct plans (searched ones among them).
6. **Switching earlier**: the budget the best plan leaves unused goes into issuing its switches earlier, where
   the policy's first or second choice at the kernel's price or a grid price ``notches`` steps below
   requests the same configuration (:func:`switch_earlier`).

The cheapest plan within the budget wins; if none fits or saves energy, every kernel is left to the driver
(auto). With the search it is never worse than without (stages 1 to 3 are the same). Every request comes from
the policy: its first choice at the price of the kernel's decision (one price, or one per kernel) or, with the
search, another of its ``ranks`` best. Plans are weighed on the planning model — on a real GPU they are worth
what the planning model is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rlclock.backends.executable import Execution
from rlclock.observation.features import PRICE_REL_MAX, PRICE_REL_MIN
from rlclock.policy.inputs import FirstLayerEvaluator, PreparedStep
from rlclock.policy.jitter import SETTLE_PRICES, LandingCosts, descend, runs_of
from rlclock.policy.rollout import Overrides, Plan, rollout
from rlclock.policy.search import SEARCH_RANKS, ranked_choices
from rlclock.policy.step import PlanningStep


@dataclass
class _Budget:
    """The plans tried against a time limit: the cheapest that fits so far (with the prices and overrides that
    made it), and each one-price plan's cost."""

    evaluator: FirstLayerEvaluator
    step: PlanningStep
    prepared: PreparedStep
    limit_s: float
    best: Plan
    overrides: Overrides = field(default_factory=dict)
    points: dict[float, tuple[float, float]] = field(default_factory=dict)  # price → (seconds, joules)
    best_prices: np.ndarray | None = None  # per kernel the price the best plan decided at (None: auto)
    best_overrides: Overrides = field(default_factory=dict)
    best_start: int = 0  # the first kernel the best plan decided at
    execution: Execution | None = None  # judge plans as the controller executes them (None: by their requests)
    planned_best: Plan | None = None  # over measured steps: the cheapest plan within the budget as planned

    def judged(self, got: Plan) -> Plan:
        """``got`` with its seconds and joules as the controller would execute it (:func:`judged`)."""
        return judged(got, self.step, self.execution)

    def _keep_planned(self, got: Plan) -> None:
        """Over measured steps, also keep the cheapest plan within the budget as planned: :func:`settle` starts
        from it too (a plan the jitter pushes over the budget may settle into one that fits)."""
        ex = self.execution
        if ex is None or not ex.jittered or got.runs is None:
            return
        j = ex.judge(got.requests, self.step.time_s, self.step.energy_j, self.step.latency_s)
        best = self.planned_best
        if j.planned_time_s <= self.limit_s and (best is None or j.planned_energy_j < best.energy_j):
            self.planned_best = replace(got, time_s=j.planned_time_s, energy_j=j.planned_energy_j)

    def attempt(self, price: float | np.ndarray, overrides: Overrides | None = None, start: int = 0) -> Plan:
        """Plan at ``price`` (one, or one per kernel) with ``overrides`` (default: the searched prices'), the policy
        deciding from kernel ``start`` on; keep the plan if it fits and is the cheapest so far."""
        replaced = self.overrides if overrides is None else overrides
        got = self.judged(
            rollout(self.evaluator, self.step, price, prepared=self.prepared, overrides=replaced, start=start)
        )
        self._keep_planned(got)
        if got.time_s <= self.limit_s and got.energy_j < self.best.energy_j:
            self.best = got
            self.best_prices = np.broadcast_to(np.asarray(price, dtype=float), (self.step.n,)).copy()
            self.best_overrides = dict(replaced)
            self.best_start = start
        return got

    def price_point(self, price: float) -> None:
        """Plan at one price and remember where it lands."""
        got = self.attempt(price)
        self.points[price] = (got.time_s, got.energy_j)

    def mixes(self) -> list[tuple[float, float, float]]:
        """(estimated energy at the budget, fitting price, missing price) of every straddling pair, best first."""
        out = []
        for pf, (tf, ef) in self.points.items():
            for pm, (tm, em) in self.points.items():
                if tf <= self.limit_s < tm:
                    w = (self.limit_s - tf) / (tm - tf)
                    out.append(((1.0 - w) * ef + w * em, pf, pm))
        return sorted(out)


def price_grid(budget: _Budget, prices: int) -> None:
    """Stage 1: one plan per price, log-spaced over the prices the policy knows."""
    for p in np.geomspace(PRICE_REL_MIN, PRICE_REL_MAX, max(2, prices)):
        budget.price_point(float(p))


def time_share(budget: _Budget, pairs: int, mix_tries: int, distinct: bool = False) -> None:
    """Stage 2: for the most promising pairs of a fitting and a missing price, the first ``K`` kernels at one and
    the rest at the other, both ways round, ``K`` bisected towards the budget. ``distinct``: pairs whose plans
    land where a pair's tried before did count once (prices of one plateau of the trade-off curve)."""
    n = budget.step.n
    tried: list[tuple[tuple[float, float], tuple[float, float]]] = []
    for estimate, p_fit, p_miss in budget.mixes():
        if len(tried) >= pairs or estimate >= budget.best.energy_j:
            break
        landing = (budget.points[p_fit], budget.points[p_miss])
        if distinct and landing in tried:
            continue
        tried.append(landing)
        for first, second in ((p_miss, p_fit), (p_fit, p_miss)):
            lo, hi = 0, n
            split = np.empty(n)
            for _ in range(mix_tries):
                k = (lo + hi) // 2
                if k in (lo, hi):
                    break
                split[:k], split[k:] = first, second
                fits = budget.attempt(split).time_s <= budget.limit_s
                # more kernels at the missing price take longer: move K towards the fitting side
                if fits == (first == p_miss):
                    lo = k
                else:
                    hi = k


def start_later(budget: _Budget, tries: int) -> None:
    """Stage 3: the missing plan of the most promising pair (:meth:`_Budget.mixes`) with the first ``K`` kernels
    left to the driver and the policy deciding from kernel ``K`` on, ``K`` bisected towards the budget (``tries``
    rollouts); where no plan fits, the missing plan whose mix with auto promises most. The kernels before ``K``
    request nothing; every request after comes from the policy at the plan's price."""
    mixes = budget.mixes()
    price = mixes[0][2] if mixes else _beside_auto(budget)
    if price is None:
        return
    lo, hi = 0, budget.step.n  # starting at lo misses the budget; at hi (all auto) it fits
    for _ in range(tries):
        k = (lo + hi) // 2
        if k in (lo, hi):
            break
        if budget.attempt(price, start=k).time_s <= budget.limit_s:
            hi = k
        else:
            lo = k


def _beside_auto(budget: _Budget) -> float | None:
    """Where no plan tried fits the budget: the price of the missing plan whose straight-line mix with the
    driver's plan (auto, which fits any budget) would cost least at the budget (``None``: no missing plan's mix
    would save energy)."""
    auto_s, auto_j = float(budget.step.auto_time_s.sum()), float(budget.step.auto_energy_j.sum())

    def at_budget(point: tuple[float, float]) -> float:
        w = (budget.limit_s - auto_s) / (point[0] - auto_s)
        return (1.0 - w) * auto_j + w * point[1]

    mixed = {p: at_budget(point) for p, point in budget.points.items() if point[0] > budget.limit_s}
    saving = [p for p, energy_j in mixed.items() if energy_j < auto_j]
    return min(saving, key=mixed.__getitem__) if saving else None


def search_ranked_choices(budget: _Budget, searches: int, ranks: int = SEARCH_RANKS) -> None:
    """Stage 4: the search over the policy's ``ranks`` best choices (:func:`rlclock.policy.search.ranked_choices`,
    exact at one price) at ``searches`` prices: the two of the most promising pair, then prices that bracket
    the budget between searched plans — the geometric middle of the cheapest searched plan that fits and the
    nearest searched one that misses; while all of them fit (or all miss), a step along the grid below (above)
    the searched prices, or further, to where the line through the two searched plans nearest the budget (their
    time against the log of the price) reaches it: a policy whose searched plans run faster than its first
    choices at the same price (most, on steps unlike those it was trained on) finds the budget's price in a few
    searches."""
    mixes = budget.mixes()
    if mixes:
        queue = [mixes[0][1], mixes[0][2]]
    else:  # everything fits: search where the grid's plan is cheapest; nothing does: the plan stage 3 started later
        beside = _beside_auto(budget)
        queue = [min(budget.points, key=lambda p: budget.points[p][1]) if beside is None else beside]
    grid = sorted(budget.points)
    for _ in range(searches):
        price = queue.pop(0) if queue else _bracket(budget, grid)
        if price is None or price in budget.overrides:
            break
        budget.overrides[price] = ranked_choices(budget.evaluator, budget.step, budget.prepared, price, ranks).overrides
        budget.price_point(price)


def _bracket(budget: _Budget, grid: list[float]) -> float | None:
    """The next price to search at (:func:`search_ranked_choices`), ``None`` when the grid ends."""
    searched = list(budget.overrides)
    fits = [p for p in searched if budget.points[p][0] <= budget.limit_s]
    misses = [p for p in searched if budget.points[p][0] > budget.limit_s]
    if fits and misses:
        cheapest = min(fits, key=lambda p: budget.points[p][1])
        nearest = min(misses, key=lambda p: abs(np.log(p / cheapest)))
        return float(np.sqrt(cheapest * nearest))
    # all fit (a lower price of time next) or all miss (a higher one): one grid step past the searched prices, or
    # further where the line through the two searched plans nearest the budget (time against log price) meets it
    lower = not misses
    edge = min(searched) if lower else max(searched)
    beyond = [p for p in grid if (p < edge if lower else p > edge)]
    if not beyond:
        return None
    step = beyond[-1] if lower else beyond[0]
    near = sorted(searched, key=lambda p: abs(budget.points[p][0] - budget.limit_s))[:2]
    if len(near) < 2:
        return step
    (x1, y1), (x2, y2) = ((np.log(p), budget.points[p][0]) for p in near)
    if y1 == y2:
        return step
    # clamped to the grid's span in log price before exp (the result is clamped to the grid below anyway)
    log_aim = x1 + (budget.limit_s - y1) * (x2 - x1) / (y2 - y1)
    aim = float(np.exp(np.clip(log_aim, np.log(grid[0]) - 1.0, np.log(grid[-1]) + 1.0)))
    if lower:
        return max(aim, grid[0]) if aim < step else step
    return min(aim, grid[-1]) if aim > step else step


def switch_earlier(budget: _Budget, grid: list[float], notches: int, tries: int) -> None:
    """Stage 6 (with the search): the budget the best plan leaves unused, spent on issuing its switches earlier.
    For each switch in turn (from ``c`` to ``r`` at kernel ``k``), the kernels before it since the switch before
    where the policy's first or second choice with ``c`` in effect — at the kernel's own price, or up to
    ``notches`` steps lower on the ``grid`` — requests ``r``; of those, the earliest whose plan still fits
    (bisected, ``tries`` rollouts). A switch issued earlier at another price is that one kernel decided there."""
    done = 0
    while budget.best_prices is not None and budget.limit_s - budget.best.time_s > _SLACK * budget.limit_s:
        requests = budget.best.requests
        switches = (np.flatnonzero(np.diff(requests)) + 1).tolist()
        if done >= len(switches):
            break
        k = switches[done]
        start = switches[done - 1] + 1 if done else 1
        done += 1
        kernels, prices, actions = _earlier_requests(
            budget, grid, notches, np.arange(start, k), int(requests[k - 1]), int(requests[k])
        )
        lo, hi = 0, len(kernels)
        base_prices, base_overrides, base_start = budget.best_prices, budget.best_overrides, budget.best_start
        for _ in range(tries):
            if lo >= hi:
                break
            i = (lo + hi) // 2
            trial_prices = base_prices.copy()
            trial_prices[kernels[i]] = prices[i]
            trial = dict(base_overrides)
            if actions[i] >= 0:
                over = trial.get(prices[i])
                over = np.full(budget.step.time_s.shape, -1, dtype=np.int64) if over is None else over.copy()
                over[kernels[i], requests[k - 1]] = actions[i]
                trial[prices[i]] = over
            # a switch moved before the best plan's first decision moves that first decision there
            if budget.attempt(trial_prices, trial, min(base_start, int(kernels[i]))).time_s <= budget.limit_s:
                hi = i  # fits: try earlier
            else:
                lo = i + 1


_SLACK = 1e-5
"""Unused share of the time limit below which :func:`switch_earlier` stops."""


def _earlier_requests(
    budget: _Budget, grid: list[float], notches: int, kernels: np.ndarray, current: int, target: int
) -> tuple[np.ndarray, list[float], list[int]]:
    """The kernels among ``kernels`` (in order) where the policy requests ``target`` with ``current`` in effect, at
    the best plan's price there or up to ``notches`` grid steps lower, by its first choice or else its second:
    those kernels, the price at each and the second choice to take there (-1 where the first requests it)."""
    evaluator, prepared = budget.evaluator, budget.prepared
    assert budget.best_prices is not None
    own = budget.best_prices[kernels]
    steps = np.asarray(grid)
    below = np.searchsorted(steps, own)  # grid index of the first price at or above each kernel's
    price = np.full(len(kernels), np.nan)
    action = np.full(len(kernels), -1, dtype=np.int64)
    keep = prepared.look.n_slots
    for notch in range(notches + 1):
        at = own if notch == 0 else steps[np.maximum(below - notch, 0)]
        for p in np.unique(at[np.isnan(price)]).tolist():
            which = np.flatnonzero(np.isnan(price) & (at == p))
            tab = evaluator.price_tables(prepared, p)
            situations = prepared.situation[kernels[which]]
            decided, _ = evaluator.decide(prepared, tab, current, situations)
            for first, choice in ((True, decided.action[situations]), (False, decided.second[situations])):
                slot = tab.candidates[prepared.look.context[kernels[which]], np.minimum(choice, keep - 1)]
                hit = (choice < keep) & (slot == target) & np.isnan(price[which])
                price[which[hit]], action[which[hit]] = p, -1 if first else choice[hit]
    found = np.flatnonzero(~np.isnan(price))
    return kernels[found], price[found].tolist(), action[found].tolist()


def judged(got: Plan, step: PlanningStep, execution: Execution | None) -> Plan:
    """``got`` judged as a controller executes it: the configuration each kernel runs at (``runs``) and the step's
    seconds and joules on the planning model (:meth:`~rlclock.backends.executable.Execution.judge`; expected over
    the measured landings when the execution has them); ``got`` itself without an execution."""
    if execution is None:
        return got
    j = execution.judge(got.requests, step.time_s, step.energy_j, step.latency_s)
    if execution.jittered:
        return replace(got, time_s=j.time_s, energy_j=j.energy_j, runs=j.runs)
    return replace(got, time_s=j.planned_time_s, energy_j=j.planned_energy_j, runs=j.runs)


def plan(
    evaluator: FirstLayerEvaluator,
    step: PlanningStep,
    budget: float,
    prices: int = 24,
    pairs: int = 2,
    mix_tries: int = 8,
    search: bool = False,
    searches: int = 3,
    notches: int = 2,
    ranks: int = SEARCH_RANKS,
    execution: Execution | None = None,
) -> Plan:
    """The cheapest plan within ``budget`` (a slowdown fraction against auto) on the planning model (module
    docstring); with an ``execution``, every plan is judged as the controller executes it (:func:`judged`)."""
    n = step.n
    auto_time_s, auto_energy_j = float(step.auto_time_s.sum()), float(step.auto_energy_j.sum())
    if (
        execution is not None
        and execution.mode == "margin"
        and execution.jitter_s is not None
        and len(execution.jitter_s)
    ):
        blind = execution.blind()
        first = plan(evaluator, step, budget, prices, pairs, mix_tries, search, searches, notches, ranks, blind)
        assert first.runs is not None
        got = execution.judge(first.runs, step.time_s, step.energy_j, step.latency_s, runs=True)
        margin = (got.time_s - got.planned_time_s) / auto_time_s
        if margin <= 0.0:
            return first
        return plan(
            evaluator,
            step,
            max(0.0, budget - margin),
            prices,
            pairs,
            mix_tries,
            search,
            searches,
            notches,
            ranks,
            blind,
        )
    limit = auto_time_s * (1.0 + budget) * (1 + 1e-12)
    auto = Plan(np.zeros(n, dtype=np.int64), auto_time_s, auto_energy_j, 0)  # auto fits any budget
    if execution is not None:
        auto = replace(auto, runs=auto.requests)
    state = _Budget(evaluator, step, evaluator.prepare(step), limit, auto, execution=execution)
    price_grid(state, prices)
    time_share(state, pairs, mix_tries)
    start_later(state, mix_tries)
    if search:
        search_ranked_choices(state, searches, ranks)
        time_share(state, 2 * pairs, mix_tries, distinct=True)  # stage 5
        switch_earlier(state, sorted(state.points), notches, mix_tries)
    settle(state)
    return state.best


def settle(budget: _Budget, prices: int = SETTLE_PRICES) -> None:
    """Stage 7 (with an execution in the ``"settled"`` mode): the switch landings of the best plan — and, over
    measured steps, of the best plan as planned — moved to where they cost least, a late or early landing included,
    over the median step and the measured ones (:func:`rlclock.policy.jitter.descend`), at ``prices`` prices of time
    bisected towards the budget; the cheapest result within it on average over those steps replaces the plan. The
    plan's requests stay the policy's; what runs is the settled plan."""
    ex = budget.execution
    if ex is None or ex.mode != "settled":
        return
    starts = [p for p in (budget.best, budget.planned_best) if p is not None and p.runs is not None]
    for start in starts:
        _settle_from(budget, start, prices)


def _settle_from(budget: _Budget, start: Plan, prices: int) -> None:
    """:func:`settle` from the landings of ``start``."""
    ex = budget.execution
    assert ex is not None and start.runs is not None
    step = budget.step
    t, e = step.time_s, step.energy_j
    executed = ex.judge(start.runs, t, e, step.latency_s, runs=True).executed
    if not executed.land_s.size:
        return
    grid = np.asarray(ex.start_s, dtype=float) - (ex.rule.lead_s - ex.rule.latency_s)
    lo, hi = np.log(step.mean_power_w / 64.0), np.log(step.mean_power_w * 64.0)
    price = np.log(step.mean_power_w)
    for _ in range(prices):
        costs = LandingCosts.of(t, e, float(np.exp(price)), ex)
        lands, configs, hold = descend(
            costs, executed.land_s, executed.config, grid, ex.rule.latency_s, executed.initial
        )
        runs = runs_of(lands, configs, ex, hold)
        got = ex.judge(runs, t, e, step.latency_s, runs=True)
        fit_t, fit_e = (got.time_s, got.energy_j) if ex.jittered else (got.planned_time_s, got.planned_energy_j)
        if fit_t <= budget.limit_s:
            if fit_e < budget.best.energy_j:
                budget.best = replace(start, time_s=fit_t, energy_j=fit_e, runs=runs)
            hi = price
        else:
            lo = price
        price = 0.5 * (lo + hi)


def plan_at(
    evaluator: FirstLayerEvaluator,
    step: PlanningStep,
    price_rel: float,
    search: bool = False,
    ranks: int = SEARCH_RANKS,
    execution: Execution | None = None,
) -> Plan:
    """The policy's plan at one price of time (no budget), with the search over its ``ranks`` best choices if
    asked, judged as the controller executes it with an ``execution``."""
    if not search:
        return judged(rollout(evaluator, step, price_rel), step, execution)
    prepared = evaluator.prepare(step)
    chosen = ranked_choices(evaluator, step, prepared, price_rel, ranks).overrides
    return judged(
        rollout(evaluator, step, price_rel, prepared=prepared, overrides={price_rel: chosen}), step, execution
    )
