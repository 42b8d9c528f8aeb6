"""The budget planner: the policy's plans at many prices of time, mixed and searched, until one fits the budget.

:func:`plan` reads top to bottom as its stages:

1. **Price grid**: the step is planned at ``prices`` prices, log-spaced over the range the policy knows
   (0.25-4 × the mean auto power) — one Lagrangian plan each.
2. **Time-sharing**: the best of those within the budget can leave much of it unused (the trade-off curve of
   a discrete schedule has gaps). For the ``pairs`` most promising pairs of a fitting and a missing plan (by
   the saving their straight-line mix would reach at the budget), the policy runs the first ``K`` kernels at
   one price and the rest at the other, both ways round, with ``K`` bisected (``mix_tries`` rollouts each).
3. **Search** (optional): at the prices of those pairs and of the best plan that fits on its own, wherever the
   policy's second choice lowers the plan's ``energy + price·time`` on the planning model it replaces the
   first (:func:`rlclock.policy.search.refine`); then the time-sharing again.

The cheapest plan within the budget wins; if none fits or saves energy, every kernel is left to the driver
(auto). Every request comes from the policy (its first or, with the search, its second choice). Plans are
weighed on the planning model — on a real GPU they are worth what the planning model is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlclock.observation.features import PRICE_REL_MAX, PRICE_REL_MIN
from rlclock.policy.inputs import FirstLayerEvaluator, PreparedStep
from rlclock.policy.rollout import Overrides, Plan, rollout
from rlclock.policy.search import refine
from rlclock.policy.step import PlanningStep


@dataclass
class _Budget:
    """The plans tried against a time limit: the cheapest that fits so far, and each one-price plan's cost."""

    evaluator: FirstLayerEvaluator
    step: PlanningStep
    prepared: PreparedStep
    limit_s: float
    best: Plan
    overrides: Overrides = field(default_factory=dict)
    points: dict[float, tuple[float, float]] = field(default_factory=dict)  # price → (seconds, joules)

    def attempt(self, price: float | np.ndarray) -> Plan:
        """Plan at ``price`` (one, or one per kernel); keep the plan if it fits and is the cheapest so far."""
        got = rollout(self.evaluator, self.step, price, prepared=self.prepared, overrides=self.overrides)
        if got.time_s <= self.limit_s and got.energy_j < self.best.energy_j:
            self.best = got
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


def time_share(budget: _Budget, pairs: int, mix_tries: int) -> None:
    """Stage 2: for the most promising pairs of a fitting and a missing price, the first ``K`` kernels at one and
    the rest at the other, both ways round, ``K`` bisected towards the budget."""
    n = budget.step.n
    for estimate, p_fit, p_miss in budget.mixes()[:pairs]:
        if estimate >= budget.best.energy_j:
            break
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


def search_second_choices(budget: _Budget, pairs: int) -> None:
    """Stage 3: the search over the policy's second choices at the prices that matter — those of the most
    promising pairs and of the cheapest plan that fits on its own."""
    chosen = {p for _, pf, pm in budget.mixes()[:pairs] for p in (pf, pm)}
    fitting = [p for p, (tp, _) in budget.points.items() if tp <= budget.limit_s]
    if fitting:
        chosen.add(min(fitting, key=lambda p: budget.points[p][1]))
    for p in sorted(chosen):
        budget.overrides[p] = refine(budget.evaluator, budget.step, budget.prepared, p)
        budget.price_point(p)


def plan(evaluator: FirstLayerEvaluator, step: PlanningStep, budget: float, prices: int = 24, pairs: int = 2,
         mix_tries: int = 8, search: bool = False) -> Plan:
    """The cheapest plan within ``budget`` (a slowdown fraction against auto) on the planning model (module
    docstring)."""
    n = step.n
    auto_time_s, auto_energy_j = float(step.auto_time_s.sum()), float(step.auto_energy_j.sum())
    limit = auto_time_s * (1.0 + budget) * (1 + 1e-12)
    auto = Plan(np.zeros(n, dtype=np.int64), auto_time_s, auto_energy_j, 0)  # auto fits any budget
    state = _Budget(evaluator, step, evaluator.prepare(step), limit, auto)
    price_grid(state, prices)
    time_share(state, pairs, mix_tries)
    if search:
        search_second_choices(state, pairs)
        time_share(state, pairs, mix_tries)
    return state.best


def plan_at(evaluator: FirstLayerEvaluator, step: PlanningStep, price_rel: float, search: bool = False) -> Plan:
    """The policy's plan at one price of time (no budget), with the search over its second choices if asked."""
    if not search:
        return rollout(evaluator, step, price_rel)
    prepared = evaluator.prepare(step)
    chosen = refine(evaluator, step, prepared, price_rel)
    return rollout(evaluator, step, price_rel, prepared=prepared, overrides={price_rel: chosen})
