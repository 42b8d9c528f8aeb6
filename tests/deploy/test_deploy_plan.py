"""Timeline and switch plan: segments, lead, one switch at a time, the worth-issuing rule, steady state."""

from __future__ import annotations

import numpy as np
import pytest

from rlclock.deploy.plan import LEAD_MARGIN_S, SwitchPlan, plan_switches, segments_of
from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError, ScheduleError
from rlclock.schedule import ClockConfig, ClockSchedule
from rlclock.workload.trace import Kernel, KernelTrace, Measurement

A, B = ClockConfig(1980, 3201), ClockConfig(1410, 3201)


def sched(labels: str) -> ClockSchedule:
    return ClockSchedule([A, B], ["AB".index(c) for c in labels])


def test_timeline_from_durations_and_round_trip(tmp_path):
    tl = StepTimeline.from_durations([1e-3, 2e-3, 3e-3], gap_s=1e-4, period_s=0.01, names=["a", "b", "c"])
    assert np.allclose(tl.start_s, [0.0, 1.1e-3, 3.2e-3])
    assert tl.span_s == pytest.approx(6.2e-3) and tl.period_s == 0.01 and tl.busy_s == pytest.approx(6e-3)
    back = StepTimeline.load(tl.save(tmp_path / "t.json"))
    assert np.array_equal(back.start_s, tl.start_s) and back.period_s == tl.period_s and back.names == tl.names
    assert StepTimeline.from_durations([1e-3, 1e-3], period_s=1e-4).period_s == pytest.approx(2e-3)  # >= span


@pytest.mark.parametrize(
    "start,dur,msg",
    [
        ([0.0, -1.0], [1.0, 1.0], "negative"),
        ([0.0], [1.0, 2.0], "one start"),
        ([0.5, 0.1], [1.0, 1.0], "starts before"),
    ],
)
def test_timeline_refuses_bad_input(start, dur, msg):
    with pytest.raises(DeployError, match=msg):
        StepTimeline(np.array(start), np.array(dur), 10.0)


def test_timeline_from_trace_uses_in_sequence_auto_times():
    m = [
        Measurement("X", 2e-3, source="isolated"),
        Measurement("X", 1e-3, source="in-sequence"),
        Measurement("X", 9e-3, core_mhz=900),
    ]
    k = Kernel("k", "op", "gemm", "forward", 1e9, 1e6, 1e6, measured=tuple(m))
    tl = StepTimeline.from_trace(KernelTrace("t", [k, k]))
    assert np.allclose(tl.duration_s, [1e-3, 1e-3]) and np.allclose(tl.start_s, [0, 1e-3])
    bare = Kernel("k", "op", "gemm", "forward", 1e9, 1e6, 1e6)
    with pytest.raises(DeployError, match="no auto-clock measurement"):
        StepTimeline.from_trace(KernelTrace("t", [bare]))


def test_segments_collapse_equal_neighbours():
    tl = StepTimeline.from_durations([1.0] * 6)
    segs = segments_of(sched("AABBBA"), tl)
    assert [(s.first_kernel, s.stop_kernel, s.config) for s in segs] == [(0, 2, A), (2, 5, B), (5, 6, A)]
    assert [(s.start_s, s.end_s) for s in segs] == [(0.0, 2.0), (2.0, 5.0), (5.0, 6.0)]
    with pytest.raises(ScheduleError, match="timeline has 6"):
        segments_of(sched("AB"), tl)


def test_switches_are_issued_one_lookahead_ahead_and_land_in_time(alternating):
    schedule, timeline = alternating
    plan = plan_switches(schedule, timeline, latency_s=0.006, lead_s=0.006)
    assert plan.n_switches == 4 and not plan.skipped
    # the first segment's switch comes during the previous step; the others 6 ms before their segment
    assert [round(e.issue_s, 9) for e in plan.events] == [-0.006, 0.004, 0.014, 0.024]
    assert all(e.land_s == pytest.approx(e.start_s) for e in plan.events)
    assert plan.initial == A  # the switch into A, issued in the previous step, lands as the step starts
    assert plan.on_plan_fraction == pytest.approx(1.0)
    assert plan_switches(schedule, timeline, 0.006).lead_s == pytest.approx(0.006 + LEAD_MARGIN_S)


def test_a_segment_whose_switch_cannot_land_before_it_ends_is_skipped():
    # 1 ms kernels: A x5, B, A, B x5; latency = lead = 3 ms. The switch into the lone B is issued at 2 ms
    # and lands at 5 ms; the one into the lone A could only be issued at 5 ms (one switch at a time) and would
    # land at 8 ms, after that A (6-7 ms) is over: skipped, and the B after it needs no switch.
    tl = StepTimeline.from_durations([1e-3] * 12)
    plan = plan_switches(sched("AAAAABABBBBB"), tl, latency_s=0.003, lead_s=0.003)
    assert plan.skipped == (2,) and plan.initial == A
    assert [(e.config, round(e.issue_s, 9), round(e.land_s, 9)) for e in plan.events] == [
        (A, -0.003, 0.0),
        (B, 0.002, 0.005),
    ]
    # with a 1 ms latency every segment is served
    plan = plan_switches(sched("AAAAABABBBBB"), tl, latency_s=0.001, lead_s=0.001)
    assert plan.skipped == () and plan.n_switches == 4 and plan.on_plan_fraction == pytest.approx(1.0)


def test_switches_wait_for_the_previous_one():
    # A x5, B x2, A x5 (1 ms kernels), latency = lead = 3 ms: the switch into B goes at 2 ms; the one back
    # into A would go at 4 ms but must wait until 5 ms, one latency after it, and lands 1 ms into A
    tl = StepTimeline.from_durations([1e-3] * 12)
    plan = plan_switches(sched("AAAAABBAAAAA"), tl, latency_s=0.003, lead_s=0.003)
    assert plan.initial == A
    assert [(e.config, round(e.issue_s, 9), round(e.late_s, 9)) for e in plan.events] == [
        (B, 0.002, 0.0),
        (A, 0.005, 0.001),
    ]


def test_min_dwell_skips_switches_that_would_serve_too_little():
    tl = StepTimeline.from_durations([1e-3] * 12)
    labels = "A" * 6 + "B" * 6  # each switch lands as its segment starts, 6 ms before it ends
    assert plan_switches(sched(labels), tl, 0.004, 0.004, min_dwell_s=0.0059).n_switches == 2
    plan = plan_switches(sched(labels), tl, 0.004, 0.004, min_dwell_s=0.0061)
    assert plan.n_switches == 0 and len(plan.skipped) == 1


def test_the_first_switch_waits_for_the_last_one_of_the_previous_step():
    # A x9, B x3; latency = lead = 4 ms, step 12 ms: the switch into B goes at 5 ms, so the switch into
    # the next step's A cannot go at -4 ms (8 ms after B's, counted in this step) but at -3 ms, 1 ms late
    tl = StepTimeline.from_durations([1e-3] * 12)
    plan = plan_switches(sched("A" * 9 + "B" * 3), tl, 0.004, 0.004)
    assert [(e.config, round(e.issue_s, 9), round(e.late_s, 9)) for e in plan.events] == [
        (A, -0.003, 0.001),
        (B, 0.005, 0.0),
    ]
    assert plan.initial == B and plan.on_plan_fraction == pytest.approx(11 / 12)
    # A x10, B x2: the late switch into A would cost as much as leaving B's request unmet: no switch at all
    plan = plan_switches(sched("A" * 10 + "B" * 2), tl, 0.004, 0.004)
    assert plan.n_switches == 0 and plan.initial == A and plan.on_plan_fraction == pytest.approx(10 / 12)


def test_per_kernel_requests_in_a_step_shorter_than_the_latency_are_held_not_chased():
    # alternating 0.1 ms kernels, a 4 ms step, 5 ms latency: no two switches fit in a step
    tl = StepTimeline.from_durations([1e-4] * 40)
    plan = plan_switches(sched("AB" * 20), tl, 0.005, 0.005)
    assert plan.n_switches == 0 and plan.on_plan_fraction == pytest.approx(0.5) and len(plan.skipped) == 20


def test_constant_schedule_has_no_switches_and_its_config_as_initial():
    tl = StepTimeline.from_durations([1e-3] * 5)
    plan = plan_switches(ClockSchedule.constant(B, 5), tl, 0.006)
    assert plan.n_switches == 0 and plan.initial == B and plan.on_plan_fraction == 1.0


def test_zero_latency_switches_at_every_change():
    tl = StepTimeline.from_durations([1e-3] * 6)
    plan = plan_switches(sched("ABABAB"), tl, 0.0, 0.0)
    assert plan.n_switches == 6 and plan.on_plan_fraction == pytest.approx(1.0)


def test_a_step_shorter_than_the_latency_holds_one_configuration():
    # GEMM-heavy 3.5 ms then memory-bound 1.5 ms, 6 ms latency: no pair of switches fits in a 5 ms step, so
    # the plan holds the configuration most of the time asks for
    tl = StepTimeline.from_durations([3.5e-3, 1.5e-3])
    plan = plan_switches(sched("AB"), tl, 0.006, 0.006)
    assert plan.n_switches == 0 and plan.initial == A and plan.skipped == (1,)
    assert plan.on_plan_fraction == pytest.approx(0.7)


def test_lead_shorter_than_latency_and_bad_latency_are_refused(alternating):
    schedule, timeline = alternating
    with pytest.raises(DeployError, match="shorter than the switching latency"):
        plan_switches(schedule, timeline, 0.006, 0.005)
    with pytest.raises(DeployError, match="latency"):
        plan_switches(schedule, timeline, -1.0)


def test_plan_round_trips_through_its_dict(alternating):
    plan = plan_switches(*alternating, 0.006)
    back = SwitchPlan.from_dict(plan.to_dict())
    assert back == plan
    assert "4 switches per step" in plan.describe()


def test_class_windows_rule_alternates_windows_of_two_latencies():
    from rlclock.deploy.rules import class_windows

    tensor = Kernel("gemm", "op", "gemm", "forward", 1e9, 1e6, 1e6, measured=(Measurement("X", 1e-3),))
    other = Kernel("ew", "op", "elementwise", "forward", 1e6, 1e6, 1e6, measured=(Measurement("X", 1e-3),))
    # 30 kernels of 1 ms: windows of >= 4 ms (latency 2 ms); GEMM-heavy first half, memory-bound second half
    trace = KernelTrace("t", [tensor] * 12 + [other] * 4 + [tensor, other] * 7)
    t = np.full(len(trace), 1e-3)
    s = class_windows(trace, t, 0.002, A, B)
    assert len(s) == 30 and s[0] == A and s[13] == B
    assert all(s[i] == s[i - i % 4] for i in range(28))  # constant over each 4 ms window
    plan = plan_switches(s, StepTimeline.from_durations(t), 0.002)
    assert plan.n_switches >= 2 and plan.on_plan_fraction > 0.9
    with pytest.raises(DeployError, match="durations"):
        class_windows(trace, t[:3], 0.002, A, B)


def test_a_per_kernel_schedule_on_the_measured_h200_layer_is_held_at_6_ms():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "data" / "gpt3xl-h200-layer.trace.json"
    trace = KernelTrace.load(path)
    timeline = StepTimeline.from_trace(trace)
    schedule = ClockSchedule.from_configs(
        [ClockConfig(None, 2201) if k.uses_tensor_cores else ClockConfig(1380, None) for k in trace]
    )
    for latency in (0.006, 0.0005):
        plan = plan_switches(schedule, timeline, latency)
        assert len(plan.segments) == 17 and plan.n_switches == 0 and plan.initial == ClockConfig(None, 2201)


def test_a_timeline_fitted_to_a_shorter_step_keeps_durations_and_overlaps_and_scales_idle_time():
    from rlclock.deploy.timeline import StepTimeline

    tl = StepTimeline(np.array([1.0, 3.0, 3.5, 8.0]), np.array([1.0, 1.0, 2.0, 1.0]), 12.0)  # 3.5 overlaps 3
    same = tl.fitted(12.0)
    assert same.start_s.tolist() == pytest.approx(tl.start_s.tolist())
    short = tl.fitted(9.0)
    assert short.period_s == pytest.approx(9.0) and short.duration_s.tolist() == tl.duration_s.tolist()
    assert np.diff(short.start_s)[1] == pytest.approx(0.5)  # the overlap is kept
    idle = np.diff(short.start_s, prepend=0.0) - np.minimum(
        np.diff(short.start_s, prepend=0.0), np.concatenate([[0.0], short.duration_s[:-1]])
    )
    assert idle.tolist() == pytest.approx((np.array([1.0, 1.0, 0.0, 2.5]) * idle[0]).tolist())  # one factor
    longer = tl.fitted(15.0)
    assert longer.period_s == pytest.approx(15.0) and np.all(longer.start_s >= tl.start_s)
    squeezed = tl.fitted(2.25)  # below the kernels packed without gaps (4.5, the overlap kept): all halved
    assert squeezed.duration_s.tolist() == pytest.approx((tl.duration_s / 2).tolist())
    assert squeezed.period_s == pytest.approx(2.25)
    with pytest.raises(DeployError, match="step period"):
        tl.fitted(float("nan"))


def test_segments_events_and_the_rule_say_what_they_hold(alternating):
    from rlclock.deploy.plan import SwitchEvent, rule_of

    schedule, timeline = alternating
    plan = plan_switches(schedule, timeline, 0.006, 0.006)
    seg = plan.segments[1]
    assert (seg.n_kernels, seg.duration_s) == (10, pytest.approx(0.010))
    assert [e.pre_issued for e in plan.events] == [True, False, False, False]
    on_anchor = SwitchEvent(0, A, 0.0, 0.006, 0.006, 0.01)
    assert not on_anchor.pre_issued and on_anchor.late_s == 0.0  # issued at the anchor is in this step
    assert plan.in_effect(np.array([0.0005, 0.0105, 0.0395])) == [
        ClockConfig(1980, 3201),
        ClockConfig(1410, 3201),
        ClockConfig(1410, 3201),
    ]
    assert rule_of(0.006).min_dwell_s == 0.0 and rule_of(0.006).lead_s == pytest.approx(0.0065)
    with pytest.raises(DeployError) as short:
        rule_of(0.006, 0.005)
    assert "issue lead (--lead) of at least 0.006 s" in str(short.value)
    with pytest.raises(DeployError) as negative:
        rule_of(-0.001)
    assert negative.value.fix is None and "latency" in str(negative.value)


def test_equal_configurations_under_two_indices_are_one_segment():
    schedule = ClockSchedule([A, B, A], [0, 0, 2, 2, 1, 1])
    plan = plan_switches(schedule, StepTimeline.from_durations([1e-3] * 6), 0.001, 0.001)
    assert [(s.first_kernel, s.stop_kernel, s.config) for s in plan.segments] == [(0, 4, A), (4, 6, B)]
