"""Learning on a GPU the model does not describe exactly: true GPUs, measured jobs, the safety layer and the
learners (benchmarks/online.py judges them at scale)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rlclock.agents.online import (
    BudgetFeedback,
    Estimates,
    MeasuredJob,
    NominalPlan,
    SafeBandit,
    SafetyLayer,
    ppo_learner,
    run_learner,
)
from rlclock.backends.simulated import SimulatedGpu
from rlclock.backends.true_gpu import CAP_MARGIN, LATENCY_SCALE, RAISE_FACTOR, TrueGpu, TrueGpuDraw, draw_true_gpu
from rlclock.dvfs.spec import get_spec
from rlclock.schedule import ClockConfig
from rlclock.solve.optimum import latency_aware_optimum
from rlclock.workload.transformer import TransformerConfig, transformer_step

H200 = get_spec("h200-sxm")
CONFIGS = H200.config_grid(core_step_mhz=105, core_min_mhz=345)


@pytest.fixture(scope="module")
def trace():
    return transformer_step(TransformerConfig(hidden=1024, heads=16, seq=1024, batch=8, layers=8, style="gpt"))


@pytest.fixture(scope="module")
def plans(trace):
    """Auto and the planning model's exact optima at planning budgets 0.5-4 %."""
    nominal = SimulatedGpu(H200, trace, CONFIGS)
    t, e = nominal.tables
    auto = nominal.auto_run().time_s
    out = [np.zeros(len(trace), dtype=np.int64)]
    out += [latency_aware_optimum(t, e, nominal.latency_s, auto * (1 + b)).requests
            for b in (0.005, 0.01, 0.02, 0.04)]
    saving = [1 - nominal.run_indices(p).energy_j / nominal.auto_run().energy_j for p in out]
    slowdown = [nominal.run_indices(p).time_s / auto - 1 for p in out]
    return out, saving, slowdown


def test_true_gpus_are_drawn_within_their_ranges_and_reproducibly():
    draws = [draw_true_gpu(H200, s) for s in range(30)]
    assert draw_true_gpu(H200, 3) == draws[3]
    for d in draws:
        assert LATENCY_SCALE[0] <= d.latency_scale <= LATENCY_SCALE[1]
        assert RAISE_FACTOR[0] <= d.raise_factor <= RAISE_FACTOR[1] and CAP_MARGIN[0] <= d.cap_margin <= CAP_MARGIN[1]
        assert d.spec.key == H200.key and d.spec.model != H200.model
    assert len({round(d.latency_scale, 6) for d in draws}) == 30


def test_a_true_gpu_without_differences_is_the_planning_model(trace):
    same = TrueGpuDraw(H200, 1.0, 1.0, 0.0, 0.01, 0)
    truth, nominal = TrueGpu(same, trace, CONFIGS), SimulatedGpu(H200, trace, CONFIGS)
    np.testing.assert_array_equal(truth.tables[0], nominal.tables[0])
    np.testing.assert_array_equal(truth.tables[1], nominal.tables[1])


def test_raising_the_clock_takes_longer_than_lowering_it(trace):
    draw = TrueGpuDraw(H200, 1.0, 1.5, 0.0, 0.01, 0)
    truth = TrueGpu(draw, trace, CONFIGS)
    low, high = CONFIGS.index(ClockConfig(975, 3201)), CONFIGS.index(ClockConfig(1920, 3201))
    assert truth.switch_latency_s(high, low) == pytest.approx(H200.switch_latency_s)
    assert truth.switch_latency_s(low, high) == pytest.approx(1.5 * H200.switch_latency_s)
    n = len(trace)
    start = truth.auto_run().start_s
    req = np.full(n, high)
    req[(start > 0.001) & (start < 0.004)] = low  # down early, back up with time to land before the step ends
    run = truth.run_indices(req, initial=high)
    lands = run.switch_land_s - run.switch_issue_s
    assert lands[0] == pytest.approx(H200.switch_latency_s) and lands[1] == pytest.approx(1.5 * H200.switch_latency_s)


def test_a_firmware_power_reserve_lands_clocks_below_the_request(trace):
    reserve = TrueGpu(TrueGpuDraw(H200, 1.0, 1.0, 0.05, 0.01, 0), trace, CONFIGS)
    nominal = SimulatedGpu(H200, trace, CONFIGS)
    assert reserve.power_limit_w == pytest.approx(0.95 * H200.power_limit_w)
    assert reserve.auto_run().time_s > nominal.auto_run().time_s  # capped kernels run slower at auto


def test_a_measured_job_is_as_noisy_as_its_readings(trace, plans):
    truth = TrueGpu(draw_true_gpu(H200, 1), trace, CONFIGS)
    with pytest.raises(ValueError, match="arm 0 must be the all-auto plan"):
        MeasuredJob(truth, plans[0][1:])
    job = MeasuredJob(truth, plans[0], window_s=0.5, seed=0)
    assert job.window_steps == max(8, int(np.ceil(0.5 / job.time_s[0])))
    t, e = zip(*(job.window(2) for _ in range(400)))
    duration = job.window_steps * job.time_s[2]
    assert np.std(e) / job.energy_j[2] == pytest.approx(0.1 / (duration * np.sqrt(6)), rel=0.2)
    # an AR(1) series of spread s and correlation r: a window mean of w steps spreads by about
    # s * sqrt((1 + r) / (1 - r) / w) when w is long against 1 / (1 - r)
    s, r, w = truth.draw.time_noise, truth.draw.time_correlation, job.window_steps
    assert np.std(t) / job.time_s[2] == pytest.approx(s * np.sqrt((1 + r) / (1 - r) / w), rel=0.3)
    assert 0.02 <= s <= 0.09 and 0.7 <= r <= 0.8
    assert job.steps == 400 * job.window_steps


def test_the_safety_layer_runs_auto_where_an_arm_could_cross_the_line():
    est = Estimates(3)
    for _ in range(4):
        est.add(0, 1.000, 10.0)
        est.add(1, 1.006, 9.9)
    layer = SafetyLayer(0.01, margin=0.005, span_steps=100, prior_slowdown=np.array([0.0, 0.005, 0.03]))
    assert layer.worst(1, est) == pytest.approx(est.slowdown()[0][1] + 2 * est.slowdown()[1][1])
    assert layer.worst(2, est) == pytest.approx(0.03 + 0.02)  # not measured: the model's plus an ordinary error
    layer.record(50, 0.004)
    layer.record(50, 0.012)
    assert layer.running == pytest.approx(0.008)
    assert layer.guard(1, est, 20) == (1, 20)  # (0.008 * 80 + ~0.007 * 20) / 100 fits
    arm, steps = layer.guard(2, est, 20)  # (0.008 * 80 + 0.05 * 20) / 100 = 1.64 % would not: a short probe that
    assert arm == 2 and steps == int(100 * (0.01 - 0.008) / (0.05 - 0.008)) == 4  # keeps the projection in budget
    assert (0.008 * (100 - steps) + 0.05 * steps) / 100 <= 0.01
    layer.record(100, 0.03)
    assert layer.running == pytest.approx(0.03) and layer.guard(1, est, 20) == (0, 20)  # over already: auto


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_budget_feedback_commits_within_the_budget(trace, plans, seed):
    """With the H200's measured step noise it commits only within the budget and keeps the running slowdown near
    the line; with quiet steps (1 %, uncorrelated) it also finds the best arm that clearly fits."""
    arms, saving, slowdown = plans
    draw = draw_true_gpu(H200, seed)
    for quiet in (False, True):
        d = replace(draw, time_noise=0.01, time_correlation=0.0) if quiet else draw
        truth = TrueGpu(d, trace, CONFIGS)
        job = MeasuredJob(truth, arms, window_s=0.2, seed=seed)
        traj = run_learner(job, BudgetFeedback(0.01, saving), 0.01, 4000, prior_slowdown=slowdown)
        arm = traj.committed_at(4000)
        assert job.true_slowdown(arm) <= 0.01 + 0.002
        # the running true slowdown: the line, plus what the measured one may miss (its spread over 100 steps)
        spread = d.time_noise * np.sqrt((1 + d.time_correlation) / (1 - d.time_correlation) / 100)
        assert np.max(traj.running_slowdowns(job)) <= 0.01 + 0.005 + 3 * spread
        if quiet:
            clearly = [a for a in range(job.n_arms) if job.true_slowdown(a) <= 0.01 - 0.002]
            assert job.true_saving(arm) >= 0.9 * max(job.true_saving(a) for a in clearly)


def test_nominal_and_bandit_and_ppo_run_behind_the_safety_layer(trace, plans):
    arms, _, _ = plans
    truth = TrueGpu(replace(draw_true_gpu(H200, 4), latency_scale=1.0), trace, CONFIGS)
    for learner in (NominalPlan(2), SafeBandit(0.01, 2)):
        traj = run_learner(MeasuredJob(truth, arms, seed=1), learner, 0.01, 1500)
        assert len(traj.ran) == len(traj.committed) == len(traj.steps) and traj.steps[-1] >= 1500
    pytest.importorskip("stable_baselines3")
    job = MeasuredJob(truth, arms, seed=2)
    traj = ppo_learner(job, 0.01, 600, start=2, seed=0)
    assert traj.steps[-1] >= 600 and all(0 <= a < job.n_arms for a in traj.ran + traj.committed)
