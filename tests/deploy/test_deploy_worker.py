"""The switch worker's bookkeeping, on a fake clock: due times, the next step's early switches, late anchors,
missed and stale switches, one switch at a time, resync, read-back; and its clock control."""

from __future__ import annotations

import numpy as np
import pytest

from rlclock.deploy.plan import plan_switches
from rlclock.deploy.timeline import StepTimeline
from rlclock.deploy.worker import PACE_MIN_STEPS, PACE_RANGE, PlanOnlyControl, SwitchWorker, build_control
from rlclock.errors import ClockError, DeployError
from rlclock.schedule import ClockConfig, ClockSchedule
from tests.deploy.fakes import Clock, Recording

A, B = ClockConfig(1980, 3201), ClockConfig(1410, 3201)


def make(alternating, read_back=False, follow_pace=False):
    schedule, timeline = alternating
    plan = plan_switches(schedule, timeline, latency_s=0.006, lead_s=0.006)
    clock = Clock()
    control = Recording(clock)
    return plan, clock, control, SwitchWorker(plan, control, read_back=read_back, clock=clock, follow_pace=follow_pace)


def run_until(worker: SwitchWorker, clock: Clock, t: float) -> None:
    while (due := worker.next_due()) is not None and due <= t:
        clock.t = max(clock.t, due)
        worker.run_due()
    clock.t = t


def test_switches_go_out_at_anchor_plus_offset_and_the_next_steps_early_one_too(alternating):
    _plan, clock, control, worker = make(alternating)
    worker.on_anchor(0, 100.0)
    run_until(worker, clock, 100.04)
    # step 0: the early switch into A (due at -6 ms) is caught up at once; B, due at 4 ms, waits one latency
    # after it; then A and B on time; then the next step's early switch into A at 100.04 - 0.006
    times = [round(t - 100.0, 6) for t, _ in control.log]
    assert times == [0.0, 0.006, 0.014, 0.024, 0.034]
    assert [c for _, c in control.log] == [A, B, A, B, A]
    assert [r[0] for r in worker.records] == ["resync", "switch", "switch", "switch", "switch"]
    issued = [r for r in worker.records if r[0] == "switch"]
    assert [round(r[4] - r[3], 6) for r in issued] == [0.002, 0.0, 0.0, 0.0]  # late only when it had to wait


def test_a_late_anchor_retimes_the_early_switch_and_drops_what_is_over(alternating):
    _plan, clock, control, worker = make(alternating)
    worker.on_anchor(0, 100.0)
    run_until(worker, clock, 100.030)  # the early switch for step 1 is due at 100.034 (estimated)
    # step 1 really starts at 100.045 and the training process learns it only at 100.047
    clock.t = 100.047
    worker.on_anchor(1, 100.045)
    run_until(worker, clock, 100.047)
    # the last switch of step 0 (due 100.024) went out; step 1's early switch (now due 100.039) went out late
    # but lands in segment 0 of step 1 (ends 100.055): issued at 100.047
    last = control.log[-1]
    assert last[1] == A and last[0] == pytest.approx(100.047)
    run_until(worker, clock, 100.1)
    statuses = [r[0] for r in worker.records]
    assert "missed" not in statuses and "stale" not in statuses
    # one switch at a time: nothing issued within 6 ms of the previous one
    t = np.array([t for t, _ in control.log])
    assert np.all(np.diff(t) >= 0.006 - 1e-9)


def test_switches_that_can_no_longer_land_are_missed_and_old_ones_stale(alternating):
    _plan, clock, _control, worker = make(alternating)
    worker.on_anchor(0, 100.0)
    clock.t = 100.0
    worker.run_due()
    # the worker was held up for 30 ms: the switch into B (segment 10-20 ms) can no longer land in it
    clock.t = 100.030
    worker.run_due()
    # ... and neither can the one into A (20-30 ms); the one into B (30-40 ms) still can
    assert [(r[0], r[2]) for r in worker.records[1:]] == [("missed", 1), ("missed", 2), ("switch", 3)]
    # another run: step 1 starts 3 ms after step 0 (a much shorter step): step 0's switches are stale
    _plan, clock, _control, worker = make(alternating)
    worker.on_anchor(0, 100.0)
    worker.run_due()
    worker.on_anchor(1, 100.003)
    assert sorted((r[0], r[1], r[2]) for r in worker.records[1:]) == [("stale", 0, 1), ("stale", 0, 2), ("stale", 0, 3)]


def test_a_plan_without_switches_brings_the_clocks_there_once():
    timeline = StepTimeline.from_durations([1e-3] * 4)
    plan = plan_switches(ClockSchedule.constant(B, 4), timeline, 0.006)
    clock = Clock()
    control = Recording(clock)
    worker = SwitchWorker(plan, control, clock=clock)
    for k in range(3):
        worker.on_anchor(k, 100.0 + 0.01 * k)
        run_until(worker, clock, 100.0 + 0.01 * k + 0.005)
    assert [c for _, c in control.log] == [B] and [r[0] for r in worker.records] == ["resync"]


def test_period_estimate_follows_the_anchors(alternating):
    plan, clock, _control, worker = make(alternating)
    assert worker.period_s == pytest.approx(plan.period_s)
    for k in range(5):
        clock.t = 100.0 + 0.05 * k
        worker.on_anchor(k, 100.0 + 0.05 * k)
        run_until(worker, clock, clock.t + 0.049)
    assert worker.period_s == pytest.approx(0.05)
    worker.on_anchor(3, 200.0)  # an old or repeated step is ignored
    assert worker.last_step == 4


def test_read_back_one_latency_after_the_switch(fake_gpu, alternating):
    from rlclock.gpu.clocks import ClockControl

    schedule, timeline = alternating
    plan = plan_switches(schedule, timeline, 0.006, 0.006)
    clock = Clock()
    with ClockControl(0) as control:  # dry run: nothing set, clocks read
        worker = SwitchWorker(plan, control, read_back=True, clock=clock)
        worker.on_anchor(0, 100.0)
        run_until(worker, clock, 100.03)
    assert len(worker.reads) >= 3
    _step, _event, _t, sm, mem, _reasons, requested = worker.reads[1]
    assert sm == 1980 and mem == 3201 and requested == "1410@3201"  # a dry run leaves the GPU at its clocks
    assert not [c for c in fake_gpu()["calls"] if "Set" in c["fn"] or "Reset" in c["fn"]]


def test_build_control_validates_the_plan_against_the_gpu(fake_gpu):
    timeline = StepTimeline.from_durations([1e-3] * 20)
    bad = ClockSchedule(["1980@3201", "1417@3201"], [0] * 10 + [1] * 10)  # 1417 MHz is not in the table
    plan = plan_switches(bad, timeline, 0.001)
    settings = {"plan": plan.to_dict(), "device": 0, "control_clocks": False, "nvml": True}
    with pytest.raises(ClockError, match="1417"):
        build_control(settings, handle_signals=False)
    with pytest.raises(DeployError, match="no NVML"):
        build_control({**settings, "nvml": False, "control_clocks": True}, handle_signals=False)


def make_sparse(alternating, anchor_every):
    schedule, timeline = alternating
    plan = plan_switches(schedule, timeline, latency_s=0.006, lead_s=0.006)
    clock = Clock()
    control = Recording(clock)
    return plan, clock, control, SwitchWorker(plan, control, read_back=False, clock=clock, anchor_every=anchor_every)


def pending(worker: SwitchWorker) -> list[tuple[int, int, float, bool]]:
    return sorted((t.step, t.event, t.due_s, t.estimated) for t in worker._tasks if t.kind != "read")


def test_sparse_anchors_time_the_steps_between_from_the_last_anchor_and_retime_them(alternating):
    plan, clock, control, worker = make_sparse(alternating, 4)
    issue = [e.issue_s for e in plan.events]
    assert issue == pytest.approx([-0.006, 0.004, 0.014, 0.024])
    worker.on_anchor(0, 100.0)
    # from one anchor: every switch due before the step after the next expected anchor (step 5, at 100.2)
    assert {s for s, *_ in pending(worker)} == {0, 1, 2, 3, 4, 5}
    assert all(t[2] < 100.2 for t in pending(worker))
    run_until(worker, clock, 100.16)
    # steps 1-3 have no anchor: their switches go out at anchor + n * period + issue_s (the plan's 40 ms period)
    for status, step, event, _planned, issued, _call, estimated in worker.records:
        if status == "switch" and step >= 1:
            assert issued == pytest.approx(100.0 + step * 0.04 + issue[event]) and estimated
    assert {r[1] for r in worker.records if r[0] == "switch"} == {0, 1, 2, 3, 4}
    assert len([r for r in worker.records if r[0] == "switch"]) == 3 + 3 * 4 + 1
    # step 4 really starts at 100.17 (each step 42.5 ms): its switches and the next steps' are re-timed from it
    clock.t = 100.1705
    worker.on_anchor(4, 100.17)
    assert worker.period_s == pytest.approx(0.0425)  # per step: the anchor interval over the 4 steps it spans
    for step, event, due, estimated in pending(worker):
        assert due == pytest.approx(100.17 + (step - 4) * 0.0425 + issue[event])
        assert estimated == (step > 4)
    assert {s for s, *_ in pending(worker)} == {4, 5, 6, 7, 8, 9}
    # step 4's early switch went out on the estimate (100.154) and is not issued again; its other switches are
    assert [r[1:3] for r in worker.records if r[1] == 4] == [(4, 0)]
    run_until(worker, clock, 100.3)
    statuses = [r[0] for r in worker.records]
    assert "missed" not in statuses and "stale" not in statuses and worker.resyncs == 0
    t = np.array([t for t, _ in control.log])
    assert np.all(np.diff(t) >= 0.006 - 1e-9)


def test_dense_anchors_schedule_the_next_step_too(alternating):
    _plan, _clock, _control, worker = make_sparse(alternating, 1)
    worker.on_anchor(0, 100.0)
    assert {s for s, *_ in pending(worker)} == {0, 1, 2}  # step 2: only its early switch, due during step 1
    assert [(s, e) for s, e, *_ in pending(worker) if s == 2] == [(2, 0)]


def test_a_loop_that_stops_leaves_the_clocks_alone_and_a_pause_is_resynced(alternating):
    _plan, clock, control, worker = make_sparse(alternating, 4)
    worker.on_anchor(0, 100.0)
    run_until(worker, clock, 100.5)  # the loop paused after step 1: the worker stops after the anchor's horizon
    assert worker.next_due() is None
    last = control.log[-1][0]
    assert last < 100.2
    # the first step after the pause is anchored (the controller forces it): step 2 starts at 100.6
    clock.t = 100.6005
    done = len(worker.records)
    worker.on_anchor(2, 100.6)
    assert worker.resyncs == 1 and worker.period_s == pytest.approx(0.04)  # the pause is not the step's pace
    run_until(worker, clock, 100.64)
    # step 2's early switch, issued on the estimate during the pause, is caught up at once (the clocks are still
    # where it put them: nothing to do); its other switches and step 3's early one go out on time
    assert [r[:3] for r in worker.records[done:]] == [
        ("noop", 2, 0),
        ("switch", 2, 1),
        ("switch", 2, 2),
        ("switch", 2, 3),
        ("switch", 3, 0),
    ]
    assert [r[4] - 100.6 for r in worker.records[done + 1 :]] == pytest.approx([0.004, 0.014, 0.024, 0.034])


def test_worker_rejects_a_bad_anchor_spacing(alternating):
    schedule, timeline = alternating
    plan = plan_switches(schedule, timeline, latency_s=0.006)
    with pytest.raises(DeployError, match="anchor_every"):
        SwitchWorker(plan, PlanOnlyControl(), anchor_every=0)


def run_steps(worker: SwitchWorker, clock: Clock, period_s: float, steps: int) -> None:
    for k in range(steps):
        clock.t = 100.0 + period_s * k
        worker.on_anchor(k, clock.t)
        run_until(worker, clock, clock.t + period_s - 1e-6)


def issued_in_step(worker: SwitchWorker, step: int) -> list[tuple[int, float]]:
    return [(r[2], r[4]) for r in worker.records if r[0] == "switch" and r[1] == step]


@pytest.mark.parametrize("period_s", [0.032, 0.05])
def test_the_worker_follows_the_running_steps_pace(alternating, period_s):
    plan, clock, _control, worker = make(alternating, follow_pace=True)
    starts = [e.start_s for e in plan.events]
    assert starts == pytest.approx([0.0, 0.01, 0.02, 0.03]) and plan.period_s == pytest.approx(0.04)
    run_steps(worker, clock, period_s, 6)
    pace = period_s / 0.04
    assert worker.pace == pytest.approx(pace) and worker.result()["pace"] == pytest.approx(pace)
    # step 4: every segment's start stretched by the pace, each switch its 6 ms lead before it
    anchor = 100.0 + 4 * period_s
    got = dict(issued_in_step(worker, 4))
    assert sorted(got) == [0, 1, 2, 3]
    # (the first segment starts at the anchor: its switch went out one lead before, during step 3)
    assert [got[e] for e in range(4)] == pytest.approx([anchor + pace * s - 0.006 for s in starts])
    assert "missed" not in [r[0] for r in worker.records]


def test_the_pace_waits_for_enough_steps_is_bounded_and_is_off_by_default(alternating):
    plan, clock, _control, worker = make(alternating, follow_pace=True)
    worker.on_anchor(0, 100.0)  # no interval yet: the plan's own timing
    assert worker.pace == 1.0 and PACE_MIN_STEPS == 1
    worker.on_anchor(1, 100.032)
    assert worker.pace == pytest.approx(0.8)
    _plan, clock, _control, fixed = make(alternating)  # the default: the timeline as profiled
    run_steps(fixed, clock, 0.032, 6)
    assert fixed.pace == 1.0
    anchor = 100.0 + 4 * 0.032
    got = [t for _, t in issued_in_step(fixed, 4)]
    assert got[1:] == pytest.approx([anchor + e.issue_s for e in plan.events[1:]])
    # at the profiled timing the early switch crowds step 3's last one (24 ms into a 32 ms step) and waits for it
    assert got[0] == pytest.approx(anchor - 0.032 + 0.024 + 0.006)
    _plan, clock, _control, slow = make(alternating, follow_pace=True)
    run_steps(slow, clock, 0.1, 5)  # 2.5 times the plan: the plan is stretched no further than PACE_RANGE
    assert slow.pace == pytest.approx(PACE_RANGE[1])


def make_with_points(points=(10, 20, 30)):
    timeline = StepTimeline(np.arange(40) * 1e-3, np.full(40, 1e-3), 0.04, points=points)
    schedule = ClockSchedule([A, B], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10)
    plan = plan_switches(schedule, timeline, latency_s=0.006, lead_s=0.006)
    clock = Clock()
    control = Recording(clock)
    return plan, clock, control, SwitchWorker(plan, control, read_back=False, clock=clock)


def test_a_point_inside_the_step_retimes_the_rest_of_it():
    plan, clock, _control, worker = make_with_points()
    assert plan.points_s == pytest.approx((0.01, 0.02, 0.03))
    worker.on_anchor(0, 100.0)
    run_until(worker, clock, 100.0125)
    # the step runs 3 ms late: its first point, planned at 10 ms, passes at 13 ms
    worker.on_point(0, 0, 100.013)
    got = {(s, e): due for s, e, due, _ in pending(worker)}
    assert got[(0, 2)] == pytest.approx(100.003 + 0.014) and got[(0, 3)] == pytest.approx(100.003 + 0.024)
    assert got[(1, 0)] == pytest.approx(100.003 + 0.04 - 0.006)  # the next step's early switch too
    assert worker.points == 1
    run_until(worker, clock, 100.05)
    issued = {(r[1], r[2]): r[4] for r in worker.records if r[0] == "switch"}
    # issued before the point, as planned from the anchor (one latency after the first step's catch-up switch)
    assert issued[(0, 1)] == pytest.approx(100.006)
    assert issued[(0, 2)] == pytest.approx(100.017) and issued[(0, 3)] == pytest.approx(100.027)


def test_points_of_another_step_or_unknown_ones_change_nothing():
    _plan, _clock, _control, worker = make_with_points()
    worker.on_anchor(0, 100.0)
    before = pending(worker)
    worker.on_point(1, 0, 100.02)  # not the anchored step
    worker.on_point(0, 5, 100.02)  # the plan has three points
    assert pending(worker) == before and worker.points == 0
    _plan, _clock, _control, plain = make(_alternating())
    plain.on_anchor(0, 100.0)
    before = pending(plain)
    plain.on_point(0, 0, 100.02)  # a plan without points
    assert pending(plain) == before


def _alternating():
    timeline = StepTimeline.from_durations(np.full(40, 1e-3))
    return ClockSchedule([A, B], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10), timeline
