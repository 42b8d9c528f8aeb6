"""The shipped H200 policy's planner on a real training step (anchored on its measured kernel times): the
rollout's fast path against decision-by-decision, and the budget planner's stages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlclock.policy import ClockPolicy, PlanningStep
from rlclock.workload.op_costs import refresh_costs
from rlclock.workload.trace import KernelTrace

ROOT = Path(__file__).resolve().parent.parent
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
    joules (to the last bit) and the states visited (in order, with the same second choices) of the loop
    that computes every decision on its own — with and without actions overridden."""
    pol, step = real_step
    prepared = pol.prepare(step)
    for price in _prices(step.n):
        seen: dict = {}
        fast = pol.rollout(step, price, prepared=prepared, choices=seen)
        each_seen: dict = {}
        each = pol.rollout(step, price, prepared=prepared, timings=[], choices=each_seen)
        assert np.array_equal(fast.requests, each.requests) and len(np.unique(fast.requests)) > 1
        assert (fast.time_s, fast.energy_j) == (each.time_s, each.energy_j)
        assert list(seen) == list(each_seen) and len(seen) > 100
        assert [v[1] for v in seen.values()] == [v[1] for v in each_seen.values()]
        np.testing.assert_allclose([v[0] for v in seen.values()], [v[0] for v in each_seen.values()],
                                   rtol=1e-9, atol=1e-12)
        levels = np.unique(np.broadcast_to(price, (step.n,)))
        replaced = {float(p): {s: second for i, (s, (_, second)) in enumerate(seen.items()) if i % 5 == 0}
                    for p in levels}
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
        again.time_s, again.energy_j)
