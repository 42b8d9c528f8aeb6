"""The one switching rule, held together: the scalar flight (the backend's run and the policy's rollout), the
batched engine (the env), the optimum's landing table (the DAG) and the live controller's switch plan give the
same landings, times, energies and configurations in effect.

Kernel times and the latency are multiples of 1/8 s, so running times are exact in binary floating point and
switches land exactly on kernel boundaries as often as inside kernels: landings and fractions compare exactly;
a split kernel's share of joules may round differently where the forms add in another order (1e-12)."""

from __future__ import annotations

import numpy as np
import pytest

from rlclock.backends.switching import EngineState, SwitchEngine, fly, landing_table
from rlclock.deploy.plan import plan_switches
from rlclock.deploy.timeline import StepTimeline
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
from rlclock.solve.optimum import SwitchDag, _path_cost
from tests.backends.test_accounting_exact import TableGpu

CONFIGS = [AUTO, ClockConfig(1500, 3201), ClockConfig(1200, 3201), ClockConfig(900, 3201)]
SEEDS = range(12)


def tables(seed: int, n: int = 14) -> tuple[np.ndarray, np.ndarray, float]:
    rng = np.random.default_rng(seed)
    t = rng.integers(1, 9, size=(n, len(CONFIGS))) / 8.0
    e = rng.integers(1, 33, size=(n, len(CONFIGS))) / 8.0
    return t, e, float(rng.integers(1, 17) / 8.0)


def engine_run(t: np.ndarray, e: np.ndarray, requests: np.ndarray, latency_s: float) -> dict[str, np.ndarray]:
    """The env's engine stepped kernel by kernel over one run."""
    state = EngineState.start(1)
    out = {"time_s": [], "energy_j": [], "started": [], "off": [], "issued": []}
    for i in range(len(requests)):
        step = SwitchEngine.step(t[i : i + 1], e[i : i + 1], requests[i : i + 1], state, latency_s)
        for key, value in (
            ("time_s", step.time_s),
            ("energy_j", step.energy_j),
            ("started", step.started_at),
            ("off", step.off_plan_s),
            ("issued", step.issued),
        ):
            out[key].append(value[0])
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("seed", SEEDS)
def test_the_backends_run_is_the_engines(seed):
    t, e, latency = tables(seed)
    gpu = TableGpu(t, e, latency, CONFIGS)
    requests = np.random.default_rng(100 + seed).integers(0, len(CONFIGS), size=len(t))
    run = gpu.run_indices(requests)
    ref = engine_run(t, e, requests, latency)
    assert np.array_equal(run.kernel_time_s, ref["time_s"]) and np.array_equal(run.kernel_energy_j, ref["energy_j"])
    assert np.array_equal(run.config_index, ref["started"])
    assert run.off_plan_time_s == ref["off"].sum() and run.switches == int(ref["issued"].sum())


@pytest.mark.parametrize("seed", SEEDS)
def test_the_dags_landings_are_the_flights(seed):
    t, e, latency = tables(seed)
    n = len(t)
    prefix = np.vstack([np.zeros((1, t.shape[1])), np.cumsum(t, axis=0)])
    land, frac = landing_table(prefix, t, latency)
    t_at, e_at = t.item, e.item
    for i in range(n):
        for c in range(len(CONFIGS)):
            b = (c + 1) % len(CONFIGS)
            stop, after_s, time_s, energy_j = fly(t_at, e_at, n, i, c, b, latency)
            if not np.isfinite(after_s):
                assert land[i, c] >= n  # the switch does not land within the step
                continue
            j = stop - 1
            assert land[i, c] == j and frac[i, c] * t[j, c] == after_s
            dag = SwitchDag(t, e, latency)
            _, dt, de, valid = dag.switch_costs(i)
            assert valid[c] and dt[c, b] == pytest.approx(time_s, rel=1e-12)
            assert de[c, b] == pytest.approx(energy_j, rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_dags_path_cost_is_the_backends_run(seed):
    t, e, latency = tables(seed)
    gpu = TableGpu(t, e, latency, CONFIGS)
    requests = np.random.default_rng(200 + seed).integers(0, len(CONFIGS), size=len(t))
    run = gpu.run_indices(requests)
    assert _path_cost(SwitchDag(t, e, latency), requests, 0) == pytest.approx((run.time_s, run.energy_j), rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_live_switch_plan_keeps_in_effect_what_the_backend_would(seed):
    """Kernels of 1 s at every clock and a latency of whole kernels: the plan issues each switch at a kernel
    boundary one latency ahead. Issued as requests from those kernels on, the backend has the same
    configuration in effect at every kernel as the plan expects."""
    rng = np.random.default_rng(300 + seed)
    lengths = rng.integers(3, 7, size=7)
    configs = rng.integers(1, len(CONFIGS), size=len(lengths))
    configs[::2] = 0  # auto between locked segments, first and last: the cycle starts and ends at auto
    per_kernel = np.repeat(configs, lengths)
    n = len(per_kernel)
    latency = float(rng.integers(1, 3))
    schedule = ClockSchedule(CONFIGS, per_kernel)
    timeline = StepTimeline(np.arange(n, dtype=float), np.ones(n), float(n))
    plan = plan_switches(schedule, timeline, latency, lead_s=latency)
    if plan.initial != AUTO or any(ev.pre_issued for ev in plan.events):
        pytest.skip("this draw's plan starts from the previous step")
    requests = np.zeros(n, dtype=np.int64)
    for ev in plan.events:
        requests[int(ev.issue_s) :] = CONFIGS.index(ev.config)
    gpu = TableGpu(np.ones((n, len(CONFIGS))), np.ones((n, len(CONFIGS))), latency, CONFIGS)
    run = gpu.run_indices(requests)
    expected = plan.in_effect(timeline.start_s + 0.5)
    assert [CONFIGS[c] for c in run.config_index] == expected
    assert run.switches == plan.n_switches
