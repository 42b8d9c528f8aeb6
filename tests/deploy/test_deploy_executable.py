"""One rule for what the controller can execute, used by the planner and the controller alike: the policy's requests
made executable, priced by their landings; the planner's plan is exactly what the controller's plan issues; plans
settled for the measured jitter; the landing costs' running sums against a direct pricing."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from rlclock.backends.executable import (
    Execution,
    RuleError,
    SwitchRule,
    cyclic_landings,
    executable,
    execute,
    executed_cost,
    landed_cost,
    requested_in_effect,
)
from rlclock.backends.switching import fly
from rlclock.deploy.plan import plan_switches
from rlclock.deploy.timeline import StepTimeline
from rlclock.policy.jitter import LandingCosts, descend, placements, runs_of
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule

ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(10)


def random_step(seed: int, n: int = 60, configs: int = 3):
    rng = np.random.default_rng(seed)
    dur = rng.integers(1, 9, size=n) / 4000.0  # 0.25-2 ms
    gaps = np.where(rng.random(n) < 0.3, rng.integers(1, 5, size=n) / 4000.0, 0.0)
    start = np.concatenate([[0.0], np.cumsum(dur + gaps)[:-1]])
    t = dur[:, None] * (1.0 + rng.random((n, configs)) * np.arange(configs) / 4)
    e = t * (300.0 - 40.0 * np.arange(configs))[None, :]
    return start, dur, float(start[-1] + dur[-1] + 1e-3), t, e


def jitter_of(seed: int, start: np.ndarray, steps: int = 3, scale: float = 1.0) -> np.ndarray:
    """Steps whose kernels run stretched and shifted as a whole (their order kept), as a host-bound loop's do."""
    rng = np.random.default_rng(500 + seed)
    return scale * (rng.normal(0.0, 0.03, size=(steps, 1)) * start[None, :] + rng.normal(0.0, 5e-4, size=(steps, 1)))


def blocks(seed: int, n: int, configs: int = 3) -> np.ndarray:
    rng = np.random.default_rng(1000 + seed)
    lengths = rng.integers(3, 12, size=n)
    return np.repeat(rng.integers(0, configs, size=n), lengths)[:n]


@pytest.mark.parametrize("seed", SEEDS)
def test_executable_schedules_execute_without_skips_or_late_switches(seed):
    start, dur, period, t, _ = random_step(seed)
    rule = SwitchRule.of(0.003, 0.0035)
    want = requested_in_effect(blocks(seed, len(start)), t, rule.latency_s)
    runs, ex = executable(want, start, dur, period, rule)
    again = execute(runs, start, dur, period, rule)
    assert np.array_equal(again.land_s, ex.land_s) and np.array_equal(again.config, ex.config)  # the pair agrees
    if not ex.skipped and not np.any(ex.late_s > 1e-12):  # settled (nearly every draw)
        assert again.skipped == () and np.all(again.late_s <= 1e-12)
    assert np.all(np.diff(np.sort(ex.issue_s)) >= rule.latency_s - 1e-12)  # one switch at a time


def test_settling_moves_no_landing():
    # A x5, B x2, A x5 (1 ms kernels), latency = lead = 3 ms: the switch back into A waits and lands late;
    # settled, the kernels before it ask for B, and the landings are those that ran before
    start = np.arange(12) * 1e-3
    dur = np.full(12, 1e-3)
    rule = SwitchRule.of(0.003, 0.003)
    want = np.array([0] * 5 + [1] * 2 + [0] * 5)
    first = execute(want, start, dur, 0.012, rule)
    assert np.any(first.late_s > 0)
    runs, ex = executable(want, start, dur, 0.012, rule)
    assert runs.tolist() == [0] * 5 + [1] * 3 + [0] * 4 and np.all(ex.late_s <= 1e-12)
    assert sorted(ex.land_s.tolist()) == pytest.approx(sorted(first.land_s.tolist()))
    skip = np.array([0] * 5 + [1] + [0] + [1] * 5)  # the lone A is skipped: it asks for B once settled
    runs, ex = executable(skip, start, dur, 0.012, rule)
    assert ex.skipped == () and runs.tolist() == [0] * 5 + [1] * 7


@pytest.mark.parametrize("seed", SEEDS)
def test_requests_run_where_the_switching_rule_lands_them(seed):
    _, _, _, t, _ = random_step(seed, n=40)
    req = np.random.default_rng(seed).integers(0, 3, size=40)
    latency = 0.002
    got = requested_in_effect(req, t, latency)
    cur, k = 0, 0
    while k < 40:  # the rule, kernel by kernel
        if req[k] == cur:
            assert got[k] == cur
            k += 1
            continue
        stop, after, _, _ = fly(t.item, t.item, 40, k, cur, int(req[k]), latency)
        assert np.all(got[k : stop - 1] == cur)
        if np.isfinite(after):
            assert got[stop - 1] == (req[k] if after < 0.5 * t[stop - 1, cur] else cur)
        cur, k = int(req[k]), stop
    assert np.array_equal(requested_in_effect(req, t, 0.0), req)  # no latency: every kernel runs as requested


@pytest.mark.parametrize("seed", SEEDS)
def test_landed_cost_prices_each_kernel_at_what_runs_while_it_runs(seed):
    start, dur, _, t, e = random_step(seed, n=30)
    rng = np.random.default_rng(seed)
    lands = np.sort(rng.uniform(-0.005, start[-1] + 0.005, size=5))
    cfg = rng.integers(0, 3, size=5)
    got_t, got_e = landed_cost(t, e, start, dur, lands, cfg, 2)
    for k in range(30):  # by hand: the share of the kernel's duration under each configuration
        edges = [start[k]] + [x for x in lands if start[k] < x < start[k] + dur[k]] + [start[k] + dur[k]]
        want_t = want_e = 0.0
        for a, b in itertools.pairwise(edges):
            before = [c for x, c in zip(lands, cfg, strict=True) if x <= a]
            c = before[-1] if before else 2
            want_t += (b - a) / dur[k] * t[k, c]
            want_e += (b - a) / dur[k] * e[k, c]
        assert got_t[k] == pytest.approx(want_t, rel=1e-12) and got_e[k] == pytest.approx(want_e, rel=1e-12)


def test_a_cycle_is_seen_from_each_step_with_its_neighbours_landings():
    lands, cfg, before = cyclic_landings(np.array([-0.001, 0.004]), np.array([1, 2]), 0.01)
    assert lands.tolist() == pytest.approx([-0.011, -0.006, -0.001, 0.004, 0.009, 0.014]) and before == 2
    assert cfg.tolist() == [1, 2, 1, 2, 1, 2]
    none = cyclic_landings(np.zeros(0), np.zeros(0, dtype=np.int64), 0.01)
    assert none[0].size == 0 and none[2] == -1
    three = cyclic_landings(np.array([0.001, 0.004, 0.007]), np.array([0, 1, 2]), 0.01)
    assert three[2] == 2 and three[1].tolist() == [0, 1, 2] * 3  # before the first: the cycle's last landing


@pytest.mark.parametrize(
    "case",
    [
        dict(latency_s=-1.0),
        dict(latency_s=float("nan")),
        dict(latency_s=0.006, lead_s=0.005),
        dict(latency_s=0.006, min_dwell_s=-1.0),
    ],
)
def test_bad_rules_are_refused(case):
    with pytest.raises(RuleError):
        SwitchRule.of(**case)


def test_executions_refuse_unknown_modes_and_jitter_of_another_step():
    start, dur = np.arange(4) * 1e-3, np.full(4, 1e-3)
    rule = SwitchRule.of(0.001)
    with pytest.raises(RuleError, match="jitter mode"):
        Execution(start, dur, 0.004, rule, mode="lucky")
    with pytest.raises(RuleError, match="shape"):
        Execution(start, dur, 0.004, rule, np.zeros((2, 3)))
    assert not Execution(start, dur, 0.004, rule, np.zeros((2, 4)), "margin").jittered
    assert Execution(start, dur, 0.004, rule, np.zeros((2, 4))).jittered
    plain = Execution(start, dur, 0.004, rule)
    assert not plain.jittered and plain.blind().mode == "blind"


@pytest.mark.parametrize("seed", SEEDS)
def test_judging_a_deployed_schedule_is_pricing_what_the_controller_issues(seed):
    start, dur, period, t, e = random_step(seed)
    rule = SwitchRule.of(0.003)
    jitter = jitter_of(seed, start)
    ex = Execution(start, dur, period, rule, jitter)
    got = ex.judge(blocks(seed, len(start)), t, e, rule.latency_s)
    again = ex.judge(got.runs, t, e, rule.latency_s, runs=True)
    assert (again.planned_time_s, again.planned_energy_j) == (got.planned_time_s, got.planned_energy_j)
    schedule = ClockSchedule([AUTO, ClockConfig(1500, 3201), ClockConfig(1000, 3201)], got.runs)
    timeline = StepTimeline(start, dur, period)
    plan = plan_switches(schedule, timeline, rule.latency_s, rule.lead_s)
    assert [e.land_s for e in plan.events] == got.executed.land_s.tolist()  # the controller's own switches
    each = [executed_cost(t, e, got.executed, p, dur) for p in ex.placements()]
    assert np.array_equal(ex.placements()[1:], start + jitter)  # in order already
    assert got.time_s == pytest.approx(np.mean([c[0] for c in each]), rel=1e-12)  # the mean over the steps
    assert got.energy_j == pytest.approx(np.mean([c[1] for c in each]), rel=1e-12)
    assert got.worst_time_s == max(c[0] for c in each)


@pytest.mark.parametrize("seed", SEEDS)
def test_landing_costs_are_the_direct_price_over_every_placement(seed):
    start, dur, period, t, e = random_step(seed)
    rule = SwitchRule.of(0.003)
    jitter = jitter_of(seed, start, scale=2.0)
    ex = Execution(start, dur, period, rule, jitter)
    _, executed = executable(blocks(seed, len(start)), start, dur, period, rule)
    if not executed.land_s.size:
        pytest.skip("this draw holds one configuration")
    price = 250.0
    costs = LandingCosts.of(t, e, price, ex)
    order = np.argsort(executed.land_s)
    lands, cfg = executed.land_s[order], executed.config[order]
    direct = [
        sum(executed_cost(t, e, executed, p, dur)[i] * w for i, w in ((1, 1.0), (0, price))) for p in placements(ex)
    ]
    assert costs.total(lands, cfg) == pytest.approx(direct, rel=1e-9)
    i = len(lands) // 2
    times = np.linspace(lands[i] - 1e-3, lands[i] + 1e-3, 5)
    moved = costs.moved(lands, cfg, i, times)
    for q, delta in zip(times, moved, strict=True):
        shifted = lands.copy()
        shifted[i] = q
        assert delta == pytest.approx(costs.total(shifted, cfg).mean() - costs.total(lands, cfg).mean(), abs=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_descending_never_costs_more_and_the_controller_lands_what_it_chose(seed):
    start, dur, period, t, e = random_step(seed)
    rule = SwitchRule.of(0.003)
    jitter = jitter_of(seed, start, steps=4, scale=2.0)
    ex = Execution(start, dur, period, rule, jitter)
    _, executed = executable(blocks(seed, len(start)), start, dur, period, rule)
    if not executed.land_s.size:
        pytest.skip("this draw holds one configuration")
    costs = LandingCosts.of(t, e, 300.0, ex)
    grid = start - (rule.lead_s - rule.latency_s)
    order = np.argsort(executed.land_s)
    before = costs.total(executed.land_s[order], executed.config[order]).mean()
    lands, cfg, hold = descend(costs, executed.land_s, executed.config, grid, rule.latency_s, executed.initial)
    assert costs.total(lands, cfg, hold).mean() <= before + 1e-9
    if lands.size:
        gaps = np.diff(np.concatenate([lands, [lands[0] + period]]))
        assert np.all(gaps >= rule.latency_s - 1e-12) and np.all(cfg != np.roll(cfg, 1))
    settled = execute(runs_of(lands, cfg, ex, hold), start, dur, period, rule)
    assert sorted(settled.land_s % period) == pytest.approx(sorted(lands % period), abs=1e-12)


def test_the_policys_plan_is_the_plan_the_controller_issues():
    """The shipped policy planning a real step with its timeline: the schedule it returns is executed by the
    controller's rule without a skipped segment or a late switch, and the figure it judged is the price of exactly
    the switches the controller issues."""
    from rlclock.deploy.delivered import PlanningCosts
    from rlclock.policy import ClockPolicy
    from rlclock.workload.trace import KernelTrace

    folder = ROOT / "data" / "corpus-h200" / "bert-base"
    trace = KernelTrace.load(folder / "step.trace.json.gz")
    timeline = StepTimeline.load(folder / "step.timeline.json.gz")
    policy = ClockPolicy.load("corpus-h200")
    auto = np.array([k.measured[0].time_s for k in trace])
    backend = policy.backend_for(trace, auto, None, 0.006)
    rule = SwitchRule.of(0.006)
    ex = Execution(timeline.start_s, timeline.duration_s, timeline.period_s, rule)
    got = policy.plan(backend, 0.01, search=False, whole_job=False, execution=ex)
    schedule = ClockSchedule(policy.configs, got.runs)
    plan = plan_switches(schedule, timeline, 0.006)
    assert plan.skipped == () and all(e.late_s == 0.0 for e in plan.events) and plan.n_switches > 0
    t, e = backend.tables
    costs = PlanningCosts(t, e, policy.configs)
    assert costs.planned(plan, timeline.start_s, timeline.duration_s) == pytest.approx(
        (got.time_s, got.energy_j), rel=1e-12
    )
    assert got.time_s <= float(np.sum(t[:, 0])) * 1.01 * (1 + 1e-12)  # within the budget as executed


def random_segments(seed: int):
    """A step of segments of 1-12 ms (in 1/8 ms units: exact in binary), some with gaps, three configurations."""
    rng = np.random.default_rng(2000 + seed)
    n_seg = int(rng.integers(2, 15))
    lengths = rng.integers(1, 13, size=n_seg)  # kernels of 1 ms per segment
    configs = rng.integers(0, 3, size=n_seg)
    index = np.repeat(configs, lengths)
    n = index.size
    dur = np.full(n, 1e-3)
    gaps = np.where(rng.random(n) < 0.2, rng.integers(1, 4, size=n) / 8000.0, 0.0)
    start = np.concatenate([[0.0], np.cumsum(dur + gaps)[:-1]])
    period = float(start[-1] + dur[-1] + rng.integers(0, 5) / 1000.0)
    latency = float(rng.integers(1, 5) / 1000.0)
    rule = SwitchRule.of(latency, latency + float(rng.integers(0, 3) / 2000.0), float(rng.integers(0, 2) / 2000.0))
    return index, start, dur, period, rule


@pytest.mark.parametrize("seed", range(80))
def test_every_plan_keeps_the_rule(seed):
    index, start, dur, period, rule = random_segments(seed)
    ex = execute(index, start, dur, period, rule)
    seg = ex.segments
    assert np.all(np.diff(ex.issue_s) >= 0) and np.allclose(ex.land_s, ex.issue_s + rule.latency_s, rtol=0, atol=1e-12)
    if ex.issue_s.size > 1:  # one switch at a time, also across the step boundary
        gaps = np.diff(np.concatenate([ex.issue_s, [ex.issue_s[0] + period]]))
        assert np.all(gaps >= rule.latency_s - 1e-12)
    for j, c, issue, land in zip(ex.segment, ex.config, ex.issue_s, ex.land_s, strict=True):
        assert c == seg.config[j] and land < seg.end_s[j] - rule.min_dwell_s  # worth issuing
        assert issue >= seg.start_s[j] - rule.lead_s - 1e-12  # never earlier than one lead ahead
    assert not set(ex.skipped) & set(ex.segment.tolist())
    if ex.config.size > 1:  # no switch to what is already in effect
        assert np.all(ex.config != np.roll(ex.config, 1))
    mid = start + 0.5 * dur
    ran = ex.in_effect(mid)
    assert ex.on_plan_fraction == pytest.approx(float(dur[ran == index].sum() / dur.sum()), abs=1e-12)
    assert ex.initial == ex.in_effect(np.zeros(1))[0]
    share = np.bincount(index, weights=dur)
    hold_fraction = share.max() / dur.sum()
    assert ex.on_plan_fraction >= hold_fraction - 1e-12  # never worse than holding one configuration
    for j in ex.skipped:  # a skipped segment asks for a switch the clocks are not at
        assert seg.config[j] != ex.in_effect(np.array([seg.start_s[j]]))[0] or ex.land_s.size


def test_the_longest_sixteen_segments_are_tried_as_cuts(monkeypatch):
    import rlclock.backends.executable as executable_module

    lengths = np.arange(1, 21)  # 20 segments of 1-20 kernels, alternating two configurations
    index = np.repeat(np.arange(20) % 2, lengths)
    start = np.arange(index.size) * 1e-3
    tried = []
    real = executable_module._cyclic

    def spy(seg, cut, period_s, rule):
        tried.append(cut)
        return real(seg, cut, period_s, rule)

    monkeypatch.setattr(executable_module, "_cyclic", spy)
    execute(index, start, np.full(index.size, 1e-3), index.size * 1e-3, SwitchRule.of(0.001))
    assert tried == list(range(19, 3, -1))  # the 16 longest, longest first


def test_settling_takes_at_most_six_rounds(monkeypatch):
    """A schedule whose settling never ends (each round's execution skips its first segment, and what runs there
    changes every round) is executed seven times: once as asked, then once per round."""
    from dataclasses import replace

    import rlclock.backends.executable as executable_module

    rounds = []
    real = executable_module.execute

    def never_settles(index, start_s, duration_s, period_s, rule):
        rounds.append(1)
        return replace(real(index, start_s, duration_s, period_s, rule), skipped=(0,))

    monkeypatch.setattr(executable_module, "execute", never_settles)
    monkeypatch.setattr(executable_module, "executed_in_effect", lambda ex, s, d: np.full(len(s), len(rounds) % 2))
    index = np.array([0] * 5 + [1] * 7)
    executable(index, np.arange(12) * 1e-3, np.full(12, 1e-3), 0.012, SwitchRule.of(0.003, 0.003))
    assert len(rounds) == 7


def test_a_rule_with_no_dwell_issues_until_the_last_moment():
    rule = SwitchRule(0.25, 0.25)
    assert rule.min_dwell_s == 0.0
    assert rule.worth_issuing(0.5, 0.875) and not rule.worth_issuing(0.625, 0.875)  # lands at the end: too late
    dwell = SwitchRule(0.25, 0.25, 0.125)
    assert dwell.worth_issuing(0.375, 0.875) and not dwell.worth_issuing(0.5, 0.875)


def test_a_cut_that_cannot_wait_stays_on_time_and_nothing_crowds_it():
    # A A A C C C (1 ms kernels), a 6 ms step, 5 ms latency, 6 ms lead: two switches cannot both repeat every
    # 6 ms, so the plan holds one configuration and leaves the other segment's request unmet
    rule = SwitchRule.of(0.005, 0.006, 0.0005)
    ex = execute(np.array([0, 0, 0, 2, 2, 2]), np.arange(6) * 1e-3, np.full(6, 1e-3), 0.006, rule)
    assert ex.land_s.size == 0 and ex.skipped == (1,) and ex.initial == 0 and ex.on_plan_fraction == 0.5


def test_the_cut_waits_at_most_eight_passes(monkeypatch):
    import rlclock.backends.executable as executable_module

    calls = []

    def never_fits(seg, cut, issue0, period_s, rule, strict):
        calls.append(strict)
        return [(cut, int(seg.config[cut]), issue0, issue0 + rule.latency_s)], [], issue0 + period_s, False

    monkeypatch.setattr(executable_module, "_around", never_fits)  # its last switch always crowds the cut's next
    seg = executable_module.Segments.of(np.array([0, 0, 1, 1]), np.arange(4.0), np.array([1e3, 1e3, 1e3, 1e3]))
    executable_module._cyclic(seg, 0, 100.0, SwitchRule.of(1.0))
    assert calls == [False] * 8 + [True]  # eight passes, then the cut on time with nothing crowding it


@pytest.mark.parametrize("kind", ["first kernel", "after a landing at a start"])
def test_landings_inside_the_first_kernel_and_after_one_on_a_start_split_their_kernels(kind):
    t = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    e = np.array([[4.0, 2.0], [4.0, 2.0], [4.0, 2.0]])
    start, dur = np.array([0.0, 1.0, 2.0]), np.ones(3)
    if kind == "first kernel":
        got_t, got_e = landed_cost(t, e, start, dur, np.array([0.25]), np.array([1]), 0)
        assert got_t.tolist() == [0.25 + 0.75 * 2.0, 2.0, 2.0] and got_e.tolist() == [1.0 + 1.5, 2.0, 2.0]
    else:  # at kernel 1's start (no split), then back a quarter into kernel 2
        got_t, got_e = landed_cost(t, e, start, dur, np.array([1.0, 2.25]), np.array([1, 0]), 0)
        assert got_t.tolist() == [1.0, 2.0, 0.25 * 2.0 + 0.75] and got_e.tolist() == [4.0, 2.0, 0.5 + 3.0]


def test_a_plan_without_switches_is_priced_at_what_it_holds():
    t = np.array([[1.0, 2.0, 3.0]] * 4)
    e = np.array([[3.0, 2.0, 1.0]] * 4)
    ex = execute(np.array([1, 1, 1, 1]), np.arange(4.0), np.ones(4), 4.0, SwitchRule.of(0.5))
    assert ex.land_s.size == 0 and executed_cost(t, e, ex, np.arange(4.0), np.ones(4)) == (8.0, 8.0)


def test_runs_take_the_configuration_at_each_kernels_midpoint():
    from rlclock.backends.executable import executed_in_effect

    rule = SwitchRule.of(0.0, 0.0)
    ex = execute(np.array([0, 1]), np.array([0.0, 1.0]), np.ones(2), 2.0, rule)
    early = Executed_at(ex, 0.4)  # lands 0.4 into kernel 0: most of it runs at the new configuration
    late = Executed_at(ex, 0.6)
    start, dur = np.array([0.0, 1.0]), np.ones(2)
    assert executed_in_effect(early, start, dur).tolist() == [1, 1]
    assert executed_in_effect(late, start, dur).tolist() == [0, 1]


def Executed_at(ex, land_s):
    """``ex`` with its switch into configuration 1 landing at ``land_s`` and the one back at the step's end."""
    from dataclasses import replace

    return replace(
        ex,
        segment=np.array([1, 0]),
        config=np.array([1, 0]),
        issue_s=np.array([land_s, 2.0]),
        land_s=np.array([land_s, 2.0]),
    )


def test_placements_are_the_timeline_alone_without_measured_steps():
    start, dur = np.arange(3) * 1e-3, np.full(3, 1e-3)
    rule = SwitchRule.of(0.001)
    assert Execution(start, dur, 0.003, rule).placements().tolist() == [start.tolist()]
    one = Execution(start, dur, 0.003, rule, np.full((1, 3), 2e-4))
    assert one.jittered and one.placements().shape == (2, 3)  # one measured step is enough to judge over
    assert not Execution(start, dur, 0.003, rule, np.zeros((0, 3))).jittered
