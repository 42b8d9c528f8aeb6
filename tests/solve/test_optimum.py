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

    spec = parse_env_spec({"name": "m", "gpu": "a100-sxm4-40gb", "switch_latency_s": 0.001,
                           "workload": {"generator": "transformer", "style": "llama", "hidden": 4096, "heads": 32,
                                        "kv_heads": 8, "ffn": 14336, "seq": 4096, "batch": 1, "layers": 8,
                                        "vocab": 32000}})
    backend = spec.build_backend()
    t, e = backend.tables
    return t, e, backend.latency_s, backend.auto_run().time_s * 1.03


@pytest.mark.parametrize("limits, why", [({"time_limit_s": 2.0}, "time limit"),
                                         ({"max_memory_bytes": 2e6}, "memory limit")])
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
