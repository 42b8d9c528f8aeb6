"""Learning on a GPU the model does not describe exactly: true GPUs, measured jobs, the safety layer and the
learners (benchmarks/online.py judges them at scale)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rlclock.agents.measured import Estimates, MeasuredJob, Mix, PairedSlowdown, StepSafety
from rlclock.agents.online import (
    BudgetFeedback,
    GuardedRun,
    PairedTracker,
    SafeBandit,
    best_mix,
    candidate_plans,
    ppo_learner,
    run_learner,
    run_nominal,
    run_tracker,
)
from rlclock.backends.simulated import SimulatedGpu
from rlclock.backends.true_gpu import (
    CAP_MARGIN,
    LATENCY_SCALE,
    RAISE_FACTOR,
    REPLAY_BLOCK_STEPS,
    StepNoise,
    TrueGpu,
    TrueGpuDraw,
    draw_true_gpu,
    measured_noise,
)
from rlclock.dvfs.spec import get_spec
from rlclock.errors import RlclockError
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
    out += [latency_aware_optimum(t, e, nominal.latency_s, auto * (1 + b)).requests for b in (0.005, 0.01, 0.02, 0.04)]
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
    job = MeasuredJob(truth, plans[0], noise="ar1", window_s=0.5, seed=0)
    assert job.window_steps == max(8, int(np.ceil(0.5 / job.time_s[0])))
    t, e = zip(*(job.window(2) for _ in range(400)))
    duration = job.window_steps * job.time_s[2]
    # the counter's two readings are each up to a tick stale: uniform errors, spread tick / (D sqrt 6) together,
    # on top of the step noise the window's energy carries with its time
    tick_spread = 0.1 / (duration * np.sqrt(6))
    s, r, w = truth.draw.time_noise, truth.draw.time_correlation, job.window_steps
    time_spread = s * np.sqrt((1 + r) / (1 - r) / w)  # an AR(1) series' window mean, w long against 1 / (1 - r)
    assert np.std(t) / job.time_s[2] == pytest.approx(time_spread, rel=0.3)
    assert np.std(e) / job.energy_j[2] == pytest.approx(np.hypot(tick_spread, time_spread), rel=0.3)
    assert 0.02 <= s <= 0.09 and 0.7 <= r <= 0.8
    assert job.steps == 400 * job.window_steps
    readings = []
    for _ in range(200):
        job.run([2 if len(readings) % 3 else 0])
        readings.append(job.read_energy_j())
    moved = np.diff(readings)
    assert np.all(moved >= 0) and 0 < np.mean(moved > 0) < 1  # never back; still between some steps (100 ms ticks)


def test_replayed_noise_is_the_measured_series_in_blocks(trace):
    draw = draw_true_gpu(H200, 2)
    base = measured_noise()[draw.noise_series]
    x = StepNoise("replay", draw).series(1000, np.random.default_rng(0))
    assert x.shape == (1000,)
    block = min(REPLAY_BLOCK_STEPS, base.size // 2)
    starts = [int(np.flatnonzero(np.isclose(base, x[i]))[0]) for i in range(0, 1000, block)]
    for i, s0 in zip(range(0, 1000, block), starts, strict=True):
        n = min(block, 1000 - i)
        np.testing.assert_allclose(x[i : i + n], base[s0 : s0 + n])
    assert {d.noise_series for d in (draw_true_gpu(H200, s) for s in range(20))} == set(measured_noise())
    with pytest.raises(RlclockError, match="step noise 'white' is not known"):
        StepNoise("white", draw)


def test_a_malformed_noise_measurement_is_one_clear_error(tmp_path, monkeypatch):
    import rlclock.resources

    bad = tmp_path / "h200-step-noise.json"
    bad.write_text('{"models": {"m": {"gpu_time_s": [0.01, -1]}}}')
    monkeypatch.setattr(rlclock.resources, "measurement", lambda name: bad)
    measured_noise.cache_clear()
    try:
        with pytest.raises(RlclockError, match="cannot be read: model 'm'"):
            measured_noise()
    finally:
        measured_noise.cache_clear()


def _alternate(paired: PairedSlowdown, arm: int, slowdown: float, noise: np.ndarray) -> None:
    for i, dev in enumerate(noise):
        a = arm if i % 2 else 0
        paired.add(a, 0.05 * (1 + (slowdown if a else 0.0)) * (1 + dev))


def test_paired_readings_cancel_slow_drift_that_windows_carry():
    steps = 4000
    i = np.arange(steps)
    drift = 0.10 * (np.sin(2 * np.pi * i / 900) > 0) + np.random.default_rng(0).normal(0, 0.01, steps)
    paired = PairedSlowdown([0.0, 0.01])
    _alternate(paired, 1, 0.01, drift)
    mean, var, seen = paired.reading_means()
    assert seen[1] and abs(mean[1] - np.log1p(0.01)) <= 3 * np.sqrt(var[1]) and np.sqrt(var[1]) < 0.001
    # a window of each in turn (450 steps) carries the drift: its estimate is off by far more
    est = Estimates(2)
    for w in range(0, steps, 450):
        arm = (w // 450) % 2
        t = 0.05 * (1 + 0.01 * arm) * (1 + drift[w : w + 450])
        est.add(arm, float(t.mean()), 1.0)
    assert abs(est.slowdown()[0][1] - 0.01) > 0.02


@pytest.mark.parametrize("series", sorted(measured_noise()))
def test_paired_readings_of_the_measured_noise_are_unbiased(series):
    """A plan exactly as fast as auto reads as such, within its own standard error, on every measured series."""
    sn = StepNoise("replay", replace(draw_true_gpu(H200, 0), noise_series=series))
    rng = np.random.default_rng(3)
    z = []
    for _ in range(40):
        paired = PairedSlowdown([0.0, 0.01])
        _alternate(paired, 1, 0.0, sn.series(2000, rng))
        mean, var, _ = paired.reading_means()
        z.append(mean[1] / np.sqrt(var[1]))
    z = np.array(z)
    assert abs(z.mean()) < 3 / np.sqrt(z.size) + 0.2 and np.mean(np.abs(z) <= 2) >= 0.8


def test_the_posterior_pools_arms_through_the_planning_model():
    paired = PairedSlowdown([0.0, 0.005, 0.01, 0.02], scale_sd=0.6, shape_sd=0.3, floor=0.001)
    np.testing.assert_allclose(paired.slowdown(), [0.0, 0.005, 0.01, 0.02], rtol=1e-9)  # no readings: the model
    _alternate(paired, 2, 0.02, np.random.default_rng(1).normal(0, 0.005, 2000))  # arm 2 runs twice as slow
    est, up = paired.slowdown(), paired.slowdown(2.5)
    assert est[2] == pytest.approx(0.02, abs=0.001)
    assert est[3] > 0.03 and est[1] > 0.0075  # the other arms: slower too, through the common factor
    assert up[3] - est[3] > up[2] - est[2]  # known less well than the measured arm
    assert est[0] == up[0] == 0.0
    with pytest.raises(ValueError, match="auto"):
        PairedSlowdown([0.01, 0.02])
    with pytest.raises(ValueError, match="parts"):
        PairedSlowdown([0.0, 0.01], parts=np.ones((3, 2)))


def test_the_safety_layer_charges_every_step_with_its_arms_bound():
    layer = StepSafety(0.01, margin=0.005, span_steps=10)
    upper = np.array([0.0, 0.01, 0.04])
    for _ in range(5):
        layer.record(1)
    assert layer.allows(1, upper)  # 6 steps at 1 %: 6 % of 15 % for the span
    assert layer.allows(2, upper)  # 5 + 4 = 9 <= 15
    layer.record(2)
    layer.record(2)
    assert not layer.allows(2, upper)  # 5 + 8 + 4 = 17 > 15
    assert layer.fallback(2, upper) == 1 and layer.allows(0, upper)
    for _ in range(9):
        layer.record(0)
    assert layer.allows(2, upper)  # the span moved on: only auto in it


def test_best_mix_time_shares_two_arms_to_the_budget():
    paired = PairedSlowdown([0.0, 0.005, 0.02], floor=0.001)
    rng = np.random.default_rng(0)
    for arm, slow in ((1, 0.005), (2, 0.02)):
        _alternate(paired, arm, slow, rng.normal(0, 0.001, 4000))
    mix = best_mix(paired, [0.0, 0.01, 0.03], budget=0.01, tolerance=0.002)
    assert (mix.lo, mix.hi) == (1, 2) and mix.share_hi == pytest.approx(1 / 3, abs=0.03)
    small = best_mix(paired, [0.0, 0.01, 0.03], budget=0.001)  # auto with a little of the least slow arm
    assert (small.lo, small.hi) == (0, 1) and 0 < small.share_hi <= 0.2
    assert best_mix(paired, [0.0, 0.01, 0.03], budget=0.0) == Mix.of(0)  # nothing fits: auto
    w = mix.weights(3)
    assert w.sum() == pytest.approx(1.0) and w[1] == pytest.approx(1 - mix.share_hi)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_paired_tracker_keeps_the_budget_and_its_safety_line(trace, plans, seed):
    """On true GPUs with the measured step noise: every 100 steps within budget + 0.5 pp while it learns, the plan it
    commits to within budget + 0.2 pp, and saving energy once it has measured."""
    arms, saving, slowdown = plans
    truth = TrueGpu(draw_true_gpu(H200, seed), trace, CONFIGS)
    job = MeasuredJob(truth, arms, seed=seed)
    traj = run_tracker(PairedTracker(0.01, slowdown, saving), job, 4000)
    assert len(traj.ran) == job.steps >= 4000
    assert np.max(traj.running_slowdowns(job)) <= 0.015
    mix = traj.committed_at(4000)
    assert job.true_slowdown(mix) <= 0.012 and job.true_saving(mix) > 0


def test_the_window_learners_and_ppo_run_behind_the_guard(trace, plans):
    arms, saving, slowdown = plans
    truth = TrueGpu(replace(draw_true_gpu(H200, 4), latency_scale=1.0), trace, CONFIGS)
    for learner in (SafeBandit(0.01, 2), BudgetFeedback(0.01, saving)):
        job = MeasuredJob(truth, arms, seed=1)
        traj = run_learner(GuardedRun(job, 0.01, slowdown), learner, 1500)
        assert len(traj.ran) == job.steps >= 1500 and np.max(traj.running_slowdowns(job)) <= 0.015
    traj = run_nominal(MeasuredJob(truth, arms), 2, 300)
    assert traj.ran == [2] * 300 and traj.committed_at(0) == Mix.of(2)
    pytest.importorskip("stable_baselines3")
    job = MeasuredJob(truth, arms, seed=2)
    traj = ppo_learner(GuardedRun(job, 0.01, slowdown), 600, start=2, seed=0)
    assert job.steps >= 600 and all(0 <= a < job.n_arms for a in traj.ran)
    assert all(0 <= m.lo < job.n_arms for m in traj.committed)


def test_candidate_plans_span_budgets_and_latencies(trace):
    model = SimulatedGpu(H200, trace, CONFIGS)
    cand = candidate_plans(
        model, budgets=(0.0, 0.01, 0.01), latency_scales=(3.0,), latency_budgets=(0.01,), time_limit_s=5.0
    )
    assert cand.labels[:3] == ["auto", "0 %", "1 %"] and cand.labels[3:] in ([], ["1 % at latency x3"])
    assert not any(np.array_equal(a, b) for i, a in enumerate(cand.plans) for b in cand.plans[:i])  # each once
    assert np.all(cand.plans[0] == 0) and cand.slowdown[0] == 0.0
    assert cand.slowdown[2] <= 0.01 + 1e-9 and cand.saving[2] >= cand.saving[1] - 1e-12
    np.testing.assert_allclose(cand.parts.sum(axis=1), cand.slowdown, atol=1e-12)


def test_candidate_plans_take_extra_plans_once():
    from rlclock.config import load_env_spec

    env = load_env_spec("gpt3xl-h200")
    trace = env.build_trace()
    model = SimulatedGpu(env.gpu, trace, env.configs(), env.latency_s)
    first = candidate_plans(model, budgets=(0.0, 0.01), latency_scales=(), time_limit_s=5.0)
    own = np.full(len(trace), 1, dtype=np.int64)
    got = candidate_plans(
        model,
        budgets=(0.0, 0.01),
        latency_scales=(),
        time_limit_s=5.0,
        extra=[("mine", own), ("again", first.plans[-1])],
    )
    assert got.labels == [*first.labels, "mine"] and np.array_equal(got.plans[-1], own)
    assert len(got.slowdown) == len(got.saving) == len(got.parts) == len(first.plans) + 1
    with pytest.raises(ValueError, match="entries"):
        candidate_plans(model, budgets=(0.0,), latency_scales=(), extra=[("short", own[:3])])
