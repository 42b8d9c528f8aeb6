"""The shipped H200 policy's planner on a real training step (anchored on its measured kernel times): the
rollout's fast path against decision-by-decision, the exact search over the policy's best choices, and the
budget planner's stages."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import rlclock.policy.planner as planner
from rlclock.policy import ClockPolicy, PlanningStep
from rlclock.policy.rollout import Plan
from rlclock.policy.search import SEARCH_RANKS, ranked_choices
from rlclock.workload.op_costs import refresh_costs
from rlclock.workload.trace import KernelTrace

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "data" / "corpus-h200" / "train-small-gpt" / "step.trace.json.gz"


@pytest.fixture(scope="module")
def real_step() -> tuple[ClockPolicy, PlanningStep]:
    """The shipped H200 policy and a real step's planning model (every kernel anchored on its own time)."""
    pol = ClockPolicy.load("gpt3xl-h200")
    trace = refresh_costs(KernelTrace.load(STEP))
    auto_s = np.array([k.measured[0].time_s for k in trace])
    return pol, pol.step_of(pol.backend_for(trace, auto_s, None, pol.gpu.switch_latency_s))


def _prices(n: int) -> list[float | np.ndarray]:
    return [0.35, 0.6, 1.0, np.where(np.arange(n) < n // 3, 0.45, 0.8)]


def test_the_fast_path_plans_and_accounts_as_decision_by_decision(real_step):
    """Runs of kept configurations found from decisions computed in blocks give the plan, the seconds and the
    joules (to the last bit) of the loop that computes every decision on its own — with and without actions
    overridden."""
    pol, step = real_step
    prepared = pol.prepare(step)
    for price in _prices(step.n):
        fast = pol.rollout(step, price, prepared=prepared)
        each = pol.rollout(step, price, prepared=prepared, timings=[])
        assert np.array_equal(fast.requests, each.requests) and len(np.unique(fast.requests)) > 1
        assert (fast.time_s, fast.energy_j) == (each.time_s, each.energy_j)
        levels = np.unique(np.broadcast_to(price, (step.n,))).tolist()
        replaced = {p: ranked_choices(pol.evaluator, step, prepared, p).overrides for p in levels}
        fast = pol.rollout(step, price, prepared=prepared, overrides=replaced)
        each = pol.rollout(step, price, prepared=prepared, timings=[], overrides=replaced)
        assert np.array_equal(fast.requests, each.requests)
        assert (fast.time_s, fast.energy_j) == (each.time_s, each.energy_j)


def test_decisions_do_not_depend_on_which_rollout_asked_first(real_step):
    """A step's decisions are computed in fixed blocks of situations: rolling out at one price after others,
    or on a fresh preparation, gives the same plan."""
    pol, step = real_step
    first = pol.rollout(step, 0.6, prepared=pol.prepare(step))
    prepared = pol.prepare(step)
    for price in (1.0, np.where(np.arange(step.n) < step.n // 2, 0.6, 0.3)):
        pol.rollout(step, price, prepared=prepared)
    again = pol.rollout(step, 0.6, prepared=prepared)
    assert np.array_equal(first.requests, again.requests) and (first.time_s, first.energy_j) == (
        again.time_s,
        again.energy_j,
    )


@pytest.mark.parametrize("latency_s", [None, 0.0, 0.0005, 0.03])
def test_the_search_counts_its_plan_as_the_rollout_does(real_step, latency_s):
    """The search's least ``energy + price·time`` is that of the plan the rollout makes with its overrides (its
    model of the switching rule is the rule), no more than the first choices', no more with more of the policy's
    choices weighed, and no more than any plan that takes one other second choice on the way; overrides hold
    the policy's choices of the ranks searched only, below the first."""
    pol, step = real_step
    if latency_s is not None:
        step = dataclasses.replace(step, latency_s=latency_s)
    prepared = pol.prepare(step)
    rng = np.random.default_rng(0)
    for price in (0.4, 0.7, 1.5):
        weight = price * step.mean_power_w
        fewer = [ranked_choices(pol.evaluator, step, prepared, price, ranks).objective_j for ranks in (2, 4)]
        found = ranked_choices(pol.evaluator, step, prepared, price)
        assert found.objective_j <= fewer[1] * (1 + 1e-12) and fewer[1] <= fewer[0] * (1 + 1e-12)
        searched = pol.rollout(step, price, prepared=prepared, overrides={price: found.overrides})
        assert searched.objective(weight) == pytest.approx(found.objective_j, rel=1e-12)
        assert found.objective_j <= pol.rollout(step, price, prepared=prepared).objective(weight) * (1 + 1e-12)
        tab = pol.evaluator.price_tables(prepared, price)
        k, c = np.nonzero(found.overrides >= 0)
        assert k.size and all(
            _is_ranked(tab, prepared, i, j, found.overrides[i, j]) for i, j in zip(k.tolist(), c.tolist(), strict=True)
        )
        # one decision on the searched plan's path taken the other way: never better
        path = np.flatnonzero(np.diff(np.concatenate([[0], searched.requests])) != 0)
        for i in rng.choice(path, size=min(4, len(path)), replace=False).tolist():
            cur = int(searched.requests[i - 1]) if i else 0
            flipped = found.overrides.copy()
            flipped[i, cur] = -1 if flipped[i, cur] >= 0 else tab.decided[cur].second[prepared.situation[i]]
            other = pol.rollout(step, price, prepared=prepared, overrides={price: flipped})
            assert other.objective(weight) >= found.objective_j * (1 - 1e-12)


def _is_ranked(tab, prepared, kernel: int, config: int, action: int, ranks: int = SEARCH_RANKS) -> bool:
    """Whether ``action`` is one of the policy's ``ranks`` best choices but its first at ``kernel`` with
    ``config`` in effect, at the tables' price."""
    return action in tab.decided[config].ranked[prepared.situation[kernel], 1:ranks].tolist()


def _first_stages(pol: ClockPolicy, step: PlanningStep, budget: float, later: bool = True) -> planner._Budget:
    """The budget planner's state after its price grid, time-sharing and (``later``) later start (the plan from
    first choices)."""
    auto_s, auto_j = step.auto_total_s, float(step.auto_energy_j.sum())
    state = planner._Budget(
        pol.evaluator,
        step,
        pol.prepare(step),
        auto_s * (1 + budget) * (1 + 1e-12),
        Plan(np.zeros(step.n, dtype=np.int64), auto_s, auto_j, 0),
    )
    planner.price_grid(state, 24)
    planner.time_share(state, 2, 8)
    if later:
        planner.start_later(state, 8)
    return state


def _stages(pol: ClockPolicy, step: PlanningStep, budget: float) -> planner._Budget:
    """The budget planner's state after all its stages, with the search."""
    state = _first_stages(pol, step, budget)
    first = state.best
    planner.search_ranked_choices(state, 3)
    planner.time_share(state, 4, 8, distinct=True)
    planner.switch_earlier(state, sorted(state.points), 2, 8)
    assert state.best.energy_j <= first.energy_j
    return state


@pytest.mark.parametrize("budget", [0.005, 0.01, 0.02])
def test_the_plan_with_the_search_fits_saves_and_asks_only_for_the_policys_choices(real_step, budget):
    """With the search the plan fits the budget and uses no more energy than the plan from first choices alone;
    it is the rollout at the prices and overrides it was found with, whose overrides are the policy's choices
    at their price: every request is one of its best choices at the price its kernel decided at (the kernels
    before its first decision request nothing)."""
    pol, step = real_step
    plain = pol.plan(step, budget)
    state = _stages(pol, step, budget)
    best = state.best
    assert best.time_s <= step.auto_total_s * (1 + budget) * (1 + 1e-9) and best.energy_j <= plain.energy_j
    assert best.energy_j < float(step.auto_energy_j.sum())
    assert state.best_prices is not None
    replay = pol.rollout(
        step, state.best_prices, prepared=state.prepared, overrides=state.best_overrides, start=state.best_start
    )
    assert np.array_equal(replay.requests, best.requests) and replay.energy_j == best.energy_j
    for price, over in state.best_overrides.items():
        tab = pol.evaluator.price_tables(state.prepared, price)
        k, c = np.nonzero(over >= 0)
        assert all(
            _is_ranked(tab, state.prepared, i, j, over[i, j]) for i, j in zip(k.tolist(), c.tolist(), strict=True)
        )
    assert np.array_equal(pol.plan(step, budget, search=True).requests, best.requests)


def test_issuing_switches_earlier_spends_the_budget_left(real_step):
    """Moving a switch of the best plan earlier (where the policy requests the same configuration there) uses
    budget the plan left, saves energy and stays within the budget."""
    pol, step = real_step
    state = _first_stages(pol, step, 0.012, later=False)  # a budget where this step's first choices leave some
    before = state.best
    assert before.time_s < state.limit_s * (1 - 5e-4)  # budget unused
    planner.switch_earlier(state, sorted(state.points), 2, 8)
    after = state.best
    assert before.time_s < after.time_s <= state.limit_s and after.energy_j < before.energy_j
    switched = np.flatnonzero(np.diff(after.requests))[0]
    assert switched < np.flatnonzero(np.diff(before.requests))[0]


def _shapes_only(checkpoint: str, path: Path) -> tuple[ClockPolicy, PlanningStep]:
    """A shipped policy and the planning model of a real step on its GPU from shapes alone, at its latency."""
    pol = ClockPolicy.load(checkpoint)
    trace = refresh_costs(KernelTrace.load(path))
    return pol, pol.step_of(pol.backend_for(trace, None, None, pol.gpu.switch_latency_s))


def test_starting_later_time_shares_a_plan_of_one_switch():
    """On a step as short as two switching latencies (the example's GPT on the simulated RTX 3080 Ti, 30 ms), the
    policy's plan at any price is one switch at the step's start, either far inside the budget or over it, and
    time-sharing by price cannot mix them; leaving the first kernels to the driver and letting the policy decide
    from there fits the budget with more saving. The kernels before it request nothing."""
    pol, step = _shapes_only("corpus-rtx3080ti", STEP)
    state = _first_stages(pol, step, 0.01, later=False)
    auto_s = step.auto_total_s
    before = state.best
    assert before.time_s < auto_s * 1.002  # most of the 1 % budget unused
    planner.start_later(state, 8)
    after = state.best
    assert after.time_s <= state.limit_s and after.energy_j < before.energy_j * (1 - 0.005)
    start = int(np.flatnonzero(after.requests)[0])
    assert 0 < state.best_start <= start and not after.requests[:start].any()
    replay = pol.rollout(step, state.best_prices, prepared=state.prepared, start=state.best_start)
    assert np.array_equal(replay.requests, after.requests) and replay.energy_j == after.energy_j
    assert np.array_equal(pol.plan(step, 0.01).requests, after.requests)


def test_where_no_plan_of_the_grid_fits_the_driver_is_the_fitting_side():
    """The shipped RTX 3080 Ti GPT-3 XL policy on T5's real step (30 ms switches, shapes only) misses a 1 % budget
    at every price it knows, so no two of its plans straddle the budget; its plan then starts later beside auto
    (which fits any budget): the cheapest missing mix's plan with the first kernels left to the driver fits and
    saves energy; with the search, the search runs at that plan's price first, finds a plan there that fits, and
    time-sharing takes it further."""
    pol, step = _shapes_only("gpt3xl-rtx3080ti", ROOT / "data" / "corpus-h200" / "t5-base" / "step.trace.json.gz")
    state = _first_stages(pol, step, 0.01, later=False)
    auto_j = float(step.auto_energy_j.sum())
    assert not state.mixes() and all(t > state.limit_s for t, _ in state.points.values())
    assert state.best.energy_j == auto_j  # nothing fits: auto
    planner.start_later(state, 8)
    later = state.best
    assert later.time_s <= state.limit_s and later.energy_j < auto_j * (1 - 0.02)
    start = int(np.flatnonzero(later.requests)[0])
    assert 0 < state.best_start <= start and not later.requests[:start].any()
    searched = pol.plan(step, 0.01, search=True)
    assert searched.time_s <= state.limit_s and searched.energy_j < later.energy_j * (1 - 0.02)
    staged = _stages(pol, step, 0.01)  # the stages one by one: the search at that plan's price makes one that fits
    assert next(iter(staged.best_overrides)) == planner._beside_auto(_first_stages(pol, step, 0.01))  # searched first
    assert np.array_equal(staged.best.requests, searched.requests)


def test_the_search_brackets_the_budget_along_its_plans_line():
    """With every searched plan on one side of the budget, the next price to search is one grid step past them, or
    further where the line through the two searched plans nearest the budget (time against log price) meets it
    (at most the grid's end); with plans on both sides, the middle of the cheapest fitting and nearest missing."""
    grid = [float(p) for p in np.geomspace(0.25, 4.0, 9)]  # steps of x1.41

    def state(points: dict[float, tuple[float, float]]) -> planner._Budget:
        got = planner._Budget(None, None, None, 1.0, Plan(np.zeros(1, dtype=np.int64), 1.0, 1.0, 0))  # type: ignore[arg-type]
        got.points, got.overrides = dict(points), {p: np.zeros(0) for p in points}
        return got

    g = grid.__getitem__  # the searched prices are grid prices: 0.25, 0.35, 0.5, 0.71, 1, 1.41, 2, 2.83, 4
    # both fit, time falls 0.01 per doubling of the price: the budget lies at half the lower price
    assert planner._bracket(state({g(6): (0.99, 5.0), g(8): (0.98, 4.0)}), grid) == pytest.approx(1.0)
    # ... or nearer than one grid step: one step
    assert planner._bracket(state({g(6): (0.9, 5.0), g(8): (0.5, 4.0)}), grid) == g(5)
    assert planner._bracket(state({g(2): (0.999, 5.0), g(8): (0.998, 4.0)}), grid) == pytest.approx(0.25)  # the end
    # both miss: a higher price, the same way
    assert planner._bracket(state({g(2): (1.02, 5.0), g(0): (1.04, 6.0)}), grid) == pytest.approx(1.0)
    assert planner._bracket(state({g(8): (1.1, 1.0)}), grid) is None  # nothing above the grid's end
    assert planner._bracket(state({g(4): (0.99, 2.0), g(0): (1.2, 1.0), g(6): (0.9, 3.0)}), grid) == pytest.approx(0.5)


def test_the_plan_is_never_below_the_best_static_pair_or_whole_job_power_limit():
    """The planner's last stage weighs the best static configuration and the driver's clocks under the best
    whole-job power limit beside the policy's plan, on the same planning model: the plan it returns fits the
    budget and costs no more than any of the three; it names a power limit only where that is strictly cheapest,
    and never without ``power_limits``. On a step of many short kernels (Swin's windows, 6 ms switches) the
    power limit wins."""
    from rlclock.schedule import ClockSchedule
    from rlclock.solve.baselines import power_limit, static
    from rlclock.solve.evaluation import evaluate

    pol = ClockPolicy.load("corpus-h200")
    for folder in (STEP.parent, ROOT / "data" / "corpus-h200-heldout" / "swin-tiny"):
        trace = refresh_costs(KernelTrace.load(folder / "step.trace.json.gz"))
        auto_s = np.array([k.measured[0].time_s for k in trace])
        backend = pol.backend_for(trace, auto_s, None, pol.gpu.switch_latency_s)
        limit_s = backend.auto_run().time_s * 1.01 * (1 + 1e-12)
        clocks_only = pol.plan(backend, 0.01, power_limits=False)
        bare = pol.plan(pol.step_of(backend), 0.01)  # planning inputs without a backend: the policy's plan alone
        assert np.array_equal(bare.requests, clocks_only.requests) and bare.power_limit_w is None
        got = pol.plan(backend, 0.01)
        fixed, capped = static(backend, 0.01).evaluation, power_limit(backend, 0.01).evaluation
        assert got.time_s <= limit_s
        assert got.energy_j <= min(clocks_only.energy_j, fixed.energy_j, capped.energy_j) + 1e-9
        assert clocks_only.power_limit_w is None
        sched = pol.schedule(trace, backend=backend, budget=0.01)
        ev = evaluate(sched, backend)
        assert (ev.time_s, ev.energy_j) == pytest.approx((got.time_s, got.energy_j), rel=1e-12)
        assert sched.power_limit_w == got.power_limit_w
        if got.power_limit_w is not None:
            assert capped.energy_j < min(clocks_only.energy_j, fixed.energy_j)
            assert sched.n_changes == 0 and sched.name == f"power-limit {got.power_limit_w:.0f} W"
        assert isinstance(sched, ClockSchedule)
    assert got.power_limit_w is not None and got.power_limit_w < backend.spec.power_limit_w  # Swin, the last step
