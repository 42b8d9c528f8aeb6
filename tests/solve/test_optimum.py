"""The optima are exact: brute force on small instances, both solvers, with and without latency."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlclock.errors import ScheduleError
from rlclock.schedule import AUTO, ClockConfig
from rlclock.solve.optimum import knapsack_optimum, latency_aware_optimum
from tests.backends.test_backend import TableGpu


def _instance(rng, n, C, latency):
    t = rng.uniform(0.5, 2.0, (n, C))
    e = rng.uniform(1.0, 10.0, (n, C))
    configs = [AUTO] + [ClockConfig(1500 - 15 * k, 3201) for k in range(C - 1)]
    return TableGpu(t, e, latency, configs), t, e


def _brute_force(gpu, C, n, budget):
    best = (np.inf, None)
    for req in itertools.product(range(C), repeat=n):
        r = gpu.run_indices(np.array(req))
        if r.time_s <= budget * (1 + 1e-12) and r.energy_j < best[0]:
            best = (r.energy_j, req)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_latency_aware_optimum_is_exact(seed):
    rng = np.random.default_rng(seed)
    checked = 0
    for _ in range(25):
        n, C = int(rng.integers(2, 6)), int(rng.integers(2, 4))
        latency = float(rng.choice([0.0, 0.3, 0.9, 1.7, 3.0]))
        gpu, t, e = _instance(rng, n, C, latency)
        budget = t[:, 0].sum() * rng.uniform(0.85, 1.3)
        best_e, best_req = _brute_force(gpu, C, n, budget)
        if best_req is None:
            with pytest.raises(ScheduleError, match="infeasible"):
                latency_aware_optimum(t, e, latency, budget)
            continue
        opt = latency_aware_optimum(t, e, latency, budget)
        run = gpu.run_indices(opt.requests)  # the solver's answer, judged by the one accounting
        assert opt.exact
        assert run.time_s <= budget * (1 + 1e-9)
        assert run.energy_j == pytest.approx(best_e, rel=1e-9)
        assert opt.energy_j == pytest.approx(run.energy_j, rel=1e-9)
        checked += 1
    assert checked > 10


@pytest.mark.parametrize("seed", range(4))
def test_knapsack_optimum_is_exact(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(20):
        n, C = int(rng.integers(2, 7)), int(rng.integers(2, 4))
        gpu, t, e = _instance(rng, n, C, 0.0)
        budget = t[:, 0].sum() * rng.uniform(0.9, 1.3)
        best_e, best_req = _brute_force(gpu, C, n, budget)
        if best_req is None:
            continue
        opt = knapsack_optimum(t, e, budget)
        assert opt.exact and opt.time_s <= budget * (1 + 1e-9)
        assert opt.energy_j == pytest.approx(best_e, rel=1e-9)


def test_repeated_kernels_are_grouped_but_still_exact():
    rng = np.random.default_rng(7)
    base_t = rng.uniform(0.5, 2.0, (3, 3))
    base_e = rng.uniform(1.0, 10.0, (3, 3))
    t, e = np.tile(base_t, (3, 1)), np.tile(base_e, (3, 1))  # 9 invocations of 3 kernel types
    gpu = TableGpu(t, e, 0.0, [AUTO, ClockConfig(1500, 3201), ClockConfig(1200, 3201)])
    budget = t[:, 0].sum() * 1.05
    best_e, _ = _brute_force(gpu, 3, 9, budget)
    assert knapsack_optimum(t, e, budget).energy_j == pytest.approx(best_e, rel=1e-9)


def test_a_tiny_latency_agrees_with_the_latency_blind_optimum():
    rng = np.random.default_rng(3)
    t = rng.uniform(0.5, 2.0, (40, 4))
    e = rng.uniform(1.0, 10.0, (40, 4))
    budget = t[:, 0].sum()
    blind = knapsack_optimum(t, e, budget)
    aware = latency_aware_optimum(t, e, 1e-12, budget)
    assert aware.exact
    assert aware.energy_j == pytest.approx(blind.energy_j, rel=1e-9)


def test_infeasible_budget_is_a_clear_error():
    t = np.array([[1.0, 2.0], [1.0, 2.0]])
    e = np.ones((2, 2))
    with pytest.raises(ScheduleError, match="infeasible: the fastest schedule takes"):
        knapsack_optimum(t, e, 1.5)
    with pytest.raises(ScheduleError, match="infeasible"):
        latency_aware_optimum(t, e, 0.5, 1.5)


def _hard_step():
    """A step whose exact latency-aware search takes far longer than the limits below."""
    from rlclock.config import parse_env_spec

    spec = parse_env_spec(
        {
            "name": "m",
            "gpu": "a100-sxm4-40gb",
            "switch_latency_s": 0.001,
            "workload": {
                "generator": "transformer",
                "style": "llama",
                "hidden": 4096,
                "heads": 32,
                "kv_heads": 8,
                "ffn": 14336,
                "seq": 4096,
                "batch": 1,
                "layers": 8,
                "vocab": 32000,
            },
        }
    )
    backend = spec.build_backend()
    t, e = backend.tables
    return t, e, backend.latency_s, backend.auto_run().time_s * 1.03


@pytest.mark.parametrize(
    "limits, why", [({"time_limit_s": 2.0}, "time limit"), ({"max_memory_bytes": 2e6}, "memory limit")]
)
def test_past_its_limits_the_solver_returns_the_best_plan_with_its_proven_gap(limits, why):
    import time

    t, e, latency, budget = _hard_step()
    start = time.perf_counter()
    opt = latency_aware_optimum(t, e, latency, budget, **limits)
    if why == "time limit":
        assert time.perf_counter() - start <= 2.0 * 1.1 + 1.0  # the limit, and the setup before the search
    assert not opt.exact and opt.stopped == why and opt.time_s <= budget
    assert opt.lower_bound_j <= opt.energy_j and 0 < opt.gap_j <= 1e-3 * opt.energy_j
    line = opt.describe()
    assert line.startswith(f"stopped at the {why}") and "% more energy than the optimum" in line and "\n" not in line


class _CountedClock:
    """A clock whose deadline passes at its ``k``-th check: stops a solver at every stage in turn."""

    def __init__(self, k: int) -> None:
        self.k, self.calls = k, 0

    def install(self, monkeypatch) -> None:
        import rlclock.solve.optimum as opt

        clock = self

        def check(_self) -> None:
            clock.calls += 1
            if clock.calls > clock.k:
                raise opt._Stopped("time limit")

        monkeypatch.setattr(opt._Clock, "check", check)
        monkeypatch.setattr(opt._Clock, "passed", lambda _self: clock.calls > clock.k)
        monkeypatch.setattr(opt._Clock, "left_s", lambda _self: 0.0 if clock.calls > clock.k else 60.0)


def _checks(monkeypatch, solve) -> int:
    """How often a full solve checks the clock."""
    clock = _CountedClock(10**9)
    clock.install(monkeypatch)
    solve()
    return clock.calls


@pytest.mark.parametrize("latency", [0.0, 0.7])
def test_stopped_at_any_check_the_solver_answers_with_a_plan_and_a_valid_bound(monkeypatch, latency):
    rng = np.random.default_rng(11)
    gpu, t, e = _instance(rng, 9, 3, latency)
    budget = t[:, 0].sum() * 1.08
    exact = latency_aware_optimum(t, e, latency, budget) if latency else knapsack_optimum(t, e, budget)
    solve = (
        (lambda: latency_aware_optimum(t, e, latency, budget)) if latency else (lambda: knapsack_optimum(t, e, budget))
    )
    total = _checks(monkeypatch, solve)
    assert total > 5
    for k in range(total + 1):
        _CountedClock(k).install(monkeypatch)
        opt = solve()
        run = gpu.run_indices(opt.requests)
        assert run.time_s <= budget * (1 + 1e-9), k
        assert opt.energy_j == pytest.approx(run.energy_j, rel=1e-9), k
        assert opt.lower_bound_j <= exact.energy_j * (1 + 1e-9) and opt.energy_j >= exact.energy_j * (1 - 1e-9), k
        assert opt.exact or opt.stopped == "time limit", k


@pytest.mark.parametrize("seed", range(3))
def test_short_of_memory_the_passes_keep_only_the_rows_they_look_at(seed):
    from rlclock.solve.optimum import SwitchDag

    rng = np.random.default_rng(40 + seed)
    n, C, latency = 60, 4, 2.5
    gpu, t, e = _instance(rng, n, C, latency)
    budget = t[:, 0].sum() * 1.03
    whole = latency_aware_optimum(t, e, latency, budget)
    v, ch = 8 * (n + 1) * C, 2 * n * C
    ring = latency_aware_optimum(t, e, latency, budget, max_memory_bytes=SwitchDag.nbytes(n, C) + 3 * ch + 4.5 * v)
    assert whole.exact and (ring.exact or ring.stopped == "memory limit")
    assert ring.lower_bound_j <= whole.energy_j * (1 + 1e-12) and ring.energy_j >= whole.energy_j * (1 - 1e-12)
    assert gpu.run_indices(ring.requests).time_s <= budget * (1 + 1e-9)
    dag = SwitchDag(t, e, latency)
    assert dag.reach + 2 < n + 1
    for lam in (0.0, 1.3):
        V, c1 = dag.backward(lam, want_path=True)
        R, c2 = dag.backward(lam, want_path=True, keep=False)
        assert R.shape[0] == dag.reach + 2 and np.allclose(R[0], V[0], rtol=1e-12) and np.array_equal(c1, c2)


@pytest.mark.realtime
def test_a_million_kernels_answer_within_the_limit():
    import time

    rng = np.random.default_rng(5)
    n, C = 1_000_000, 6
    t = rng.uniform(1e-6, 2e-6, (n, C))
    e = t * rng.uniform(100.0, 300.0, (n, C))
    budget = t[:, 0].sum() * 1.02
    for solve in (
        lambda: latency_aware_optimum(t, e, 5e-5, budget, time_limit_s=1.0),
        lambda: knapsack_optimum(t, e, budget, time_limit_s=1.0),
    ):
        start = time.perf_counter()
        opt = solve()
        assert time.perf_counter() - start <= 1.0 * 1.1 + 0.4  # the limit + 10 %, and a loaded machine's jitter
        assert opt.time_s <= budget * (1 + 1e-9) and opt.lower_bound_j <= opt.energy_j


@pytest.mark.parametrize("limit", [0.0, -1.0, float("nan"), "5"])
def test_a_time_limit_that_is_no_duration_is_refused(limit):
    t = np.ones((3, 2))
    with pytest.raises(ScheduleError, match="time limit must be a number of seconds above 0"):
        latency_aware_optimum(t, t, 0.1, 4.0, time_limit_s=limit)
