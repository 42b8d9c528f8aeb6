"""Several plans for one step, chosen per step by a pattern: the pattern's semantics, the worker following it on a
fake clock (rescheduling when it changes, boundary switches between plans), the errors, the report per plan, and
the controller and ``clocked()`` passing it through to a thread and a process worker."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from rlclock.deploy.anchor import AnchorLog
from rlclock.deploy.api import clocked
from rlclock.deploy.controller import ClockController
from rlclock.deploy.pattern import PlanPattern, check_pattern
from rlclock.deploy.plan import plan_switches
from rlclock.deploy.report import SwitchRecord, build_report
from rlclock.deploy.timeline import StepTimeline
from rlclock.deploy.worker import PlanOnlyControl, SwitchWorker, build_control, worker_from_settings
from rlclock.errors import ClockError, DeployError, ScheduleError
from rlclock.schedule import ClockConfig, ClockSchedule
from tests.deploy.fakes import Clock, Recording

A, B, C = ClockConfig(1980, 3201), ClockConfig(1410, 3201), ClockConfig(1200, 3201)
TIMELINE = StepTimeline.from_durations(np.full(40, 1e-3))  # a 40 ms step of 40 kernels of 1 ms
ALTERNATING = ClockSchedule([A, B], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10, "alternating")
HOLD_C = ClockSchedule.constant(C, 40)
A_B_A = ClockSchedule([A, B], [0] * 10 + [1] * 20 + [0] * 10, "aba")


def plans(*schedules, lead_s=0.006):
    return [plan_switches(s, TIMELINE, latency_s=0.006, lead_s=lead_s) for s in schedules]


def make(*schedules, anchor_every=1):
    p = plans(*schedules)
    clock = Clock()
    control = Recording(clock, origin_s=100.0)
    worker = SwitchWorker(p[0], control, read_back=False, clock=clock, anchor_every=anchor_every, alternatives=p[1:])
    return clock, control, worker


def run_until(worker: SwitchWorker, clock: Clock, t: float) -> None:
    while (due := worker.next_due()) is not None and due <= t:
        clock.t = max(clock.t, due)
        worker.run_due()
    clock.t = t


def run_steps(worker: SwitchWorker, clock: Clock, steps: range, period_s: float = 0.04) -> None:
    for k in steps:
        clock.t = 100.0 + period_s * k
        worker.on_anchor(k, clock.t)
        run_until(worker, clock, clock.t + period_s - 1e-6)


def issued(worker: SwitchWorker) -> list[tuple[str, int, int, int, float]]:
    """(status, step, event, plan, ms after 100 s) of every issued switch."""
    return [
        (r.status, r.step, r.event, r.plan, round((r.issued_s - 100.0) * 1e3, 3))
        for r in worker.records
        if r.status in ("switch", "boundary", "resync")
    ]


# -- the pattern --------------------------------------------------------------------------------------------------


def test_a_pattern_applies_from_its_step_and_a_later_one_takes_over():
    pattern = PlanPattern(3)
    assert pattern.plans_of(4) == [0, 0, 0, 0]  # until a pattern is set every step runs plan 0
    assert pattern.set([1, 0, 2], 2) == (1, 0, 2)
    assert pattern.plans_of(9) == [0, 0, 1, 0, 2, 1, 0, 2, 1]
    pattern.set([2], 6)
    assert pattern.plans_of(9) == [0, 0, 1, 0, 2, 1, 2, 2, 2]
    pattern.set([0, 1], 4)  # drops the one from step 6: it starts after this one
    assert pattern.plans_of(9) == [0, 0, 1, 0, 0, 1, 0, 1, 0]
    assert PlanPattern.from_list(pattern.to_list(), 3).plans_of(9) == pattern.plans_of(9)
    pattern.forget_before(5)
    assert [pattern.plan_of(k) for k in range(5, 9)] == [1, 0, 1, 0]


@pytest.mark.parametrize(
    ("pattern", "match"),
    [
        ([], "empty"),
        ([0, 3], "does not name a plan"),
        ([-1], "does not name a plan"),
        ([True], "does not name"),
        ([0.5], "does not name"),
        ("01", "sequence of plan indices"),
        (1, "sequence of plan indices"),
    ],
)
def test_a_bad_pattern_is_refused_in_one_line(pattern, match):
    with pytest.raises(DeployError, match=match) as info:
        check_pattern(pattern, 3)
    assert "\n" not in str(info.value) and "Fix:" in str(info.value)


def test_a_bad_from_step_is_refused():
    with pytest.raises(DeployError, match="from_step"):
        PlanPattern(2).set([1], -1)
    with pytest.raises(DeployError, match="malformed"):
        PlanPattern.from_list([[0]], 2)


# -- the worker on a fake clock -----------------------------------------------------------------------------------


def test_plans_know_whether_their_start_is_left_by_the_previous_step():
    alternating, hold, aba = plans(ALTERNATING, HOLD_C, A_B_A)
    assert not alternating.inherits_initial  # its switch into A lands at the anchor: it sets its own start
    assert hold.inherits_initial and aba.inherits_initial  # no switch, or the last one of the step before


def test_the_worker_runs_each_steps_plan_and_switches_at_the_boundaries():
    clock, control, worker = make(ALTERNATING, HOLD_C, A_B_A)
    worker.set_pattern([0, 1, 0, 2], 1)
    assert [worker.plan_of(k) for k in range(9)] == [0, 0, 1, 0, 2, 0, 1, 0, 2]
    run_steps(worker, clock, range(6))
    got = issued(worker)
    assert got[:8] == [
        ("resync", 0, 0, 0, 0.0),
        ("switch", 0, 1, 0, 6.0),
        ("switch", 0, 2, 0, 14.0),
        ("switch", 0, 3, 0, 24.0),
        ("switch", 1, 0, 0, 34.0),
        ("switch", 1, 1, 0, 44.0),
        ("switch", 1, 2, 0, 54.0),
        ("switch", 1, 3, 0, 64.0),
    ]
    # step 2 holds C: one boundary switch, one lead before the step starts; nothing of plan 0 for it
    assert got[8] == ("boundary", 2, -1, 1, 74.0)
    # step 3 runs plan 0 again, which sets its own start: its switch into A, issued during step 2, is all it needs
    assert got[9:13] == [
        ("switch", 3, 0, 0, 114.0),
        ("switch", 3, 1, 0, 124.0),
        ("switch", 3, 2, 0, 134.0),
        ("switch", 3, 3, 0, 144.0),
    ]
    # step 4's plan starts in A, which the step before it (plan 0 ends in B) did not leave: a boundary switch to A
    assert got[13:16] == [("boundary", 4, -1, 2, 154.0), ("switch", 4, 0, 2, 164.0), ("switch", 4, 1, 2, 184.0)]
    # step 5 (plan 0): its switch into A is not needed, plan 2 left the clocks there
    assert next((r.status, r.step, r.event, r.plan) for r in worker.records if r.step == 5) == ("noop", 5, 0, 0)
    # every record carries the plan of its step, and the clocks were only ever where a running plan put them
    assert all(r.plan == worker.plan_of(r.step) for r in worker.records)
    t = np.array([t for t, _ in control.log])
    assert np.all(np.diff(t) >= 6.0e-3 - 1e-9)


def test_the_same_plan_twice_in_a_row_needs_no_boundary_switch():
    clock, _control, worker = make(ALTERNATING, A_B_A)
    worker.set_pattern([1, 1, 0], 0)
    run_steps(worker, clock, range(4))
    boundaries = [(r.step, r.plan) for r in worker.records if r.event == -1]
    # step 0 follows "step -1" (plan 0 before any pattern): caught up at once; step 1 is plan 1 again: nothing;
    # step 2 (plan 0) sets its own start; step 3 (plan 1 after plan 0): one
    assert boundaries == [(0, 1), (3, 1)]
    assert [r.status for r in worker.records if r.event == -1] == ["resync", "boundary"]


def test_a_pattern_change_drops_the_other_plans_switches_and_schedules_the_steps_own():
    clock, control, worker = make(ALTERNATING, HOLD_C)
    worker.on_anchor(0, 100.0)
    run_until(worker, clock, 100.035)  # step 1's early switch into A went out at 34 ms, under plan 0
    assert control.log[-1] == (0.034, A)
    worker.set_pattern([1], 1)  # from step 1 on: hold C
    # step 1's other switches and step 2's early one were plan 0's: dropped, never issued
    replaced = [(r.step, r.event, r.plan) for r in worker.records if r.status == "replaced"]
    assert sorted(replaced) == [(1, 1, 0), (1, 2, 0), (1, 3, 0), (2, 0, 0)]
    assert worker.superseded == 1  # the one already issued stays issued, and is counted
    assert all(t.plan == 1 for t in worker._tasks)
    run_until(worker, clock, 100.2)
    # the boundary switch into C was due at 34 ms: it goes out as soon as the switch before it has landed
    assert control.log[4:] == [(0.034, A), (0.04, C)]
    assert worker.result()["superseded"] == 1


def test_a_pattern_changed_back_schedules_the_first_plans_switches_again():
    clock, control, worker = make(ALTERNATING, HOLD_C)
    worker.on_anchor(0, 100.0)
    run_until(worker, clock, 100.01)
    worker.set_pattern([1], 1)
    worker.set_pattern([0], 1)  # back before step 1 began: plan 0's switches for it come back
    run_steps(worker, clock, range(1, 3))
    assert worker.superseded == 0
    assert [s for s, _ in [(r.step, r.event) for r in worker.records if r.status == "switch"]].count(1) == 4
    assert C not in [c for _, c in control.log]


def test_a_pattern_for_later_steps_leaves_the_steps_before_them_alone():
    clock, control, worker = make(ALTERNATING, HOLD_C, anchor_every=4)
    worker.on_anchor(0, 100.0)  # schedules steps 0-4 and step 5's early switch
    before = sorted((t.step, t.event) for t in worker._tasks)
    worker.set_pattern([1], 3)
    after = sorted((t.step, t.event, t.plan) for t in worker._tasks)
    assert [(s, e) for s, e, _ in after if s < 3] == [k for k in before if k[0] < 3]
    assert [(s, e, p) for s, e, p in after if s >= 3] == [(3, -1, 1)]  # the boundary into step 3, nothing else
    replaced = sorted((r.step, r.event) for r in worker.records if r.status == "replaced")
    assert replaced == [(3, 0), (3, 1), (3, 2), (3, 3), (4, 0), (4, 1), (4, 2), (4, 3), (5, 0)]
    assert worker.superseded == 0
    run_until(worker, clock, 100.16)
    assert [r.step for r in worker.records if r.status == "switch"] == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert control.log[-1] == (0.114, C) and [r.status for r in worker.records][-1] == "boundary"


def test_a_step_whose_clocks_a_superseded_switch_moved_gets_a_boundary_switch():
    clock, control, worker = make(ALTERNATING, HOLD_C)
    worker.set_pattern([1, 0], 0)  # step 0 holds C, step 1 runs plan 0
    worker.on_anchor(0, 100.0)
    run_until(worker, clock, 100.035)
    assert control.log == [(0.0, C), (0.034, A)]  # step 1's early switch, under plan 0
    worker.set_pattern([1], 1)  # step 1 holds C too, like step 0: but the clocks are now at A
    assert worker.superseded == 1 and worker.needs_boundary(1) and not worker.needs_boundary(2)
    run_until(worker, clock, 100.2)
    assert control.log[2:] == [(0.04, C)]


def test_a_switch_of_the_previous_plan_after_the_next_plan_took_over_is_not_issued():
    alternating, hold = plans(ALTERNATING, HOLD_C, lead_s=0.008)
    # a plan whose last switch goes out late in its step, after the next step's plan has issued its first
    last = alternating.events[-1]
    late = dataclasses.replace(
        alternating, events=(*alternating.events[:-1], dataclasses.replace(last, issue_s=0.0335, land_s=0.0395))
    )
    clock = Clock()
    control = Recording(clock, origin_s=100.0)
    worker = SwitchWorker(late, control, read_back=False, clock=clock, alternatives=[hold])
    worker.set_pattern([0, 1], 0)
    run_steps(worker, clock, range(2))
    assert [(r.status, r.step, r.event, r.plan) for r in worker.records if r.step <= 1][-2:] == [
        ("boundary", 1, -1, 1),
        ("overtaken", 0, 3, 0),
    ]
    assert control.log[2:] == [(0.012, A), (0.032, C), (0.072, A)]  # step 2 (plan 0) sets its own start


def test_after_a_pause_the_running_steps_plan_takes_the_clocks_back():
    clock, control, worker = make(ALTERNATING, HOLD_C)
    worker.set_pattern([0, 1], 0)
    worker.on_anchor(0, 100.0)
    run_until(worker, clock, 100.5)  # the loop paused after step 0; step 2's early switch went out on the estimate
    assert control.log[-2:] == [(0.034, C), (0.074, A)]
    clock.t = 100.6005
    worker.on_anchor(1, 100.6)  # step 1 (plan 1) after the pause: its boundary switch is caught up at once
    run_until(worker, clock, 100.62)
    assert worker.resyncs == 1 and control.log[-1] == (0.6005, C)
    assert "overtaken" not in [r.status for r in worker.records]


def test_alternatives_must_share_the_latency_and_the_step():
    (plan,) = plans(ALTERNATING)
    other = plan_switches(HOLD_C, TIMELINE, latency_s=0.003)
    with pytest.raises(DeployError, match="same timeline"):
        SwitchWorker(plan, PlanOnlyControl(), alternatives=[other])


def test_the_settings_carry_every_plan_and_the_pattern(fake_gpu):
    alternating, hold = plans(ALTERNATING, HOLD_C)
    pattern = PlanPattern(2)
    pattern.set([0, 1], 2)
    settings = {
        "plan": alternating.to_dict(),
        "alternatives": [hold.to_dict()],
        "patterns": pattern.to_list(),
        "device": 0,
        "control_clocks": False,
        "nvml": False,
    }
    worker = worker_from_settings(settings, PlanOnlyControl())
    assert len(worker.plans) == 2 and worker.plans[1].initial == C
    assert [worker.plan_of(k) for k in range(5)] == [0, 0, 0, 1, 0]
    # every plan's configurations are checked against the GPU's clock table, the alternatives' too
    bad = plan_switches(ClockSchedule.constant("1417@3201", 40), TIMELINE, 0.006)
    with pytest.raises(ClockError, match="1417"):
        build_control({**settings, "alternatives": [bad.to_dict()], "nvml": True}, handle_signals=False)


# -- the report ---------------------------------------------------------------------------------------------------


def test_the_report_counts_each_plans_steps_and_judges_its_switches_by_its_own_plan():
    alternating, aba = plans(ALTERNATING, A_B_A)
    log = AnchorLog("cuda")
    for k in range(4):  # four steps of 40 ms, as planned
        log._append(k, 0.04 * k, 10.0 + 0.04 * k, 10.0 + 0.04 * k, True)
    anchors = log.final_anchors_s()

    def on_time(step, event, plan, late_s=0.0):
        p = (alternating, aba)[plan]
        start = p.events[event].start_s if event >= 0 else p.segments[0].start_s
        t = anchors[step] + start - p.lead_s
        return SwitchRecord("boundary" if event < 0 else "switch", step, event, t, t + late_s, 1e-4, False, plan)

    records = [
        on_time(0, 1, 0),
        on_time(0, 2, 0, 0.001),
        on_time(1, -1, 1),
        on_time(1, 0, 1, 0.002),  # plan 1: a boundary, one 2 ms late
        on_time(2, 1, 0),
        SwitchRecord("replaced", 3, 1, 0.0, float("nan"), 0.0, True, 0),
        on_time(3, 0, 0),  # superseded: step 3 ran plan 1
        ("noop", 2, 3, 0.0, float("nan"), 0.0, False),
    ]  # a record of seven: plan 0
    rep = build_report(
        alternating,
        log,
        {"records": records, "reads": [], "ended": "stopped"},
        {"mode": "dry-run", "gpu_name": "X", "device": 0},
        "process",
        steps=4,
        plans=[alternating, aba],
        plan_of=lambda k: k % 2,
    )
    assert rep.issued == 6 and rep.boundary == 1 and rep.superseded == 1 and rep.replaced == 1 and rep.noop == 1
    assert rep.switch_error.n == 5 and rep.late == 2  # (at a lead of one latency, any delay is late)
    zero, one = rep.per_plan
    assert (zero.plan, zero.steps, zero.issued, zero.boundary, zero.late) == (0, 2, 3, 0, 1)
    assert (one.plan, one.steps, one.issued, one.boundary, one.late) == (1, 2, 2, 1, 1)
    assert zero.switch_error.max_abs_s == pytest.approx(0.001) and one.switch_error.max_abs_s == pytest.approx(0.002)
    assert one.switch_error.median_s == pytest.approx(0.001)
    text = rep.text()
    assert "plan 1: 2 steps, issued 2 (boundary 1)" in text and "superseded 1" in text
    assert rep.as_dict()["per_plan"][1]["steps"] == 2
    # without plans the report is what it was, and still says how many steps plan 0 ran
    plain = build_report(
        alternating,
        log,
        {"records": records[:2], "reads": [], "ended": "stopped"},
        {"mode": "dry-run", "gpu_name": "X", "device": 0},
        "process",
        steps=4,
    )
    assert plain.issued == 2 and len(plain.per_plan) == 1 and plain.per_plan[0].steps == 4
    assert "plan 0:" not in plain.text()


def test_a_record_keeps_its_plan_through_pickling_and_reads_as_seven_fields():
    import pickle

    record = pickle.loads(pickle.dumps(SwitchRecord("switch", 3, 1, 1.0, 1.5, 1e-4, True, 2)))
    status, step, event, _planned, _issued, _call, estimated = record
    assert (status, step, event, estimated, record.plan) == ("switch", 3, 1, True, 2) and "plan=2" in repr(record)


# -- the controller and clocked() ---------------------------------------------------------------------------------


def test_the_controller_checks_alternatives_and_patterns(no_nvml):
    with pytest.raises(ScheduleError, match="alternative 1"):
        ClockController(ALTERNATING, TIMELINE, latency_s=0.006, alternatives=[ClockSchedule.constant(C, 39)])
    with pytest.raises(DeployError, match="not a ClockSchedule"):
        ClockController(ALTERNATING, TIMELINE, latency_s=0.006, alternatives=["1200@3201"])
    ctl = ClockController(ALTERNATING, TIMELINE, latency_s=0.006, worker="thread", anchor="host", alternatives=[HOLD_C])
    assert len(ctl.plans) == 2 and ctl.plans[1].latency_s == ctl.plan.latency_s and "2 plans" in repr(ctl)
    for bad, match in (([], "empty"), ([0, 2], "does not name a plan"), ([1], "from_step")):
        with pytest.raises(DeployError, match=match) as info:
            ctl.set_pattern(bad, from_step=-3 if match == "from_step" else None)
        assert "\n" not in str(info.value)
    ctl.set_pattern([1, 0])  # before the start: it goes to the worker with its settings
    assert [ctl.plan_of(k) for k in range(4)] == [1, 0, 1, 0]
    with ctl:
        for _ in range(3):
            ctl.step()
        with pytest.raises(DeployError, match="already started"):
            ctl.set_pattern([0], from_step=2)
        ctl.set_pattern([0])  # from the first step not started: step 3
        ctl.step()
    assert [ctl.plan_of(k) for k in range(5)] == [1, 0, 1, 0, 0]
    assert [f.steps for f in ctl.report.per_plan] == [2, 2]
    with pytest.raises(DeployError, match="closed"):
        ctl.set_pattern([0])


def test_a_plan_without_alternatives_is_as_before(no_nvml):
    ctl = ClockController(ALTERNATING, TIMELINE, latency_s=0.006, worker="thread", anchor="host")
    assert ctl.plans == (ctl.plan,) and ctl.anchor_every == 1
    held = ClockController(
        ClockSchedule.constant(C, 10), StepTimeline.from_durations(np.full(10, 5e-4)), latency_s=0.006
    )
    assert held.anchor_every > 1
    # two plans that hold different configurations switch at every change of plan: each step is anchored
    held_two = ClockController(HOLD_C, TIMELINE, latency_s=0.006, alternatives=[ClockSchedule.constant(B, 40)])
    assert held_two.anchor_every == 1


def records_follow_the_pattern(ctl: ClockController) -> None:
    records = ctl.worker_result["records"]
    assert {r.plan for r in records} == {0, 1}
    superseded = [r for r in records if r.status in ("switch", "boundary") and r.plan != ctl.plan_of(r.step)]
    assert len(superseded) == ctl.report.superseded == ctl.worker_result["superseded"]
    late_changes = {r.step for r in superseded} | {r.step for r in records if r.status == "replaced"}
    assert all(r.plan == ctl.plan_of(r.step) for r in records if r.step not in late_changes)


@pytest.mark.parametrize("worker", ["process", "thread"])
def test_the_worker_follows_a_pattern_set_before_and_during_the_run(no_nvml, worker):
    with ClockController(
        ALTERNATING, TIMELINE, latency_s=0.006, worker=worker, anchor="host", alternatives=[HOLD_C]
    ) as ctl:
        ctl.set_pattern([0, 1])
        for k in range(8):
            if k == 4:
                ctl.set_pattern([1, 1, 0])  # steps 4, 5: plan 1; step 6: plan 0; step 7: plan 1
            with ctl.step():
                time.sleep(0.04)
    rep = ctl.report
    assert [ctl.plan_of(k) for k in range(8)] == [0, 1, 0, 1, 1, 1, 0, 1]
    assert [(f.plan, f.steps) for f in rep.per_plan] == [(0, 3), (1, 5)]
    records_follow_the_pattern(ctl)
    # plan 1 (hold C) follows plan 0 at steps 1, 3 and 7: a boundary switch into each of them was scheduled (and
    # one into step 4 when plan 0's early switch for it had gone out before the pattern changed); the one scheduled
    # into step 5 before the change was dropped
    into_c = {r.step for r in ctl.worker_result["records"] if r.plan == 1 and r.event == -1 and r.status != "replaced"}
    assert {1, 3, 7} <= into_c and 5 not in into_c
    assert "plan 1: 5 steps" in rep.text()


def test_clocked_passes_the_pattern_through_once_control_has_begun(no_nvml):
    clk = clocked(
        ALTERNATING, timeline=TIMELINE, alternatives=[HOLD_C], latency_s=0.006, worker="thread", verbose=False
    )
    with pytest.raises(DeployError, match="needs the schedule to be applied") as info:
        clk.set_pattern([0, 1])
    assert "\n" not in str(info.value)
    with clk:
        assert clk.state == "control" and len(clk.controller.plans) == 2
        clk.set_pattern([1, 0])
        for _ in range(2):
            with clk.step():
                time.sleep(0.005)
    assert [f.steps for f in clk.report.per_plan] == [1, 1]
    with pytest.raises(DeployError, match="alternatives= takes ClockSchedules"):
        clocked(ALTERNATING, timeline=TIMELINE, alternatives=[{"not": "a schedule"}])
