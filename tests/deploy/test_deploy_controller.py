"""ClockController end to end on the CPU: worker process and thread, plan-only and fake-NVML dry runs, live
switching on the fake GPU with the clocks restored afterwards — also when the training process is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rlclock.deploy.anchor import AnchorLog
from rlclock.deploy.controller import ClockController
from rlclock.deploy.plan import plan_switches
from rlclock.deploy.report import Stats, build_report
from rlclock.errors import ClockControlDisabledError, DeployError, GpuUnavailableError

SETS = ("nvmlDeviceSetGpuLockedClocks", "nvmlDeviceSetMemoryLockedClocks")
# Real-time tests: they run in their own serial pass (README), as the xdist workers' load would delay the worker.
# Even then a shared machine may wake the worker after a switch's deadline now and then; such a switch is dropped
# (missed, or stale if its whole step is over), as it must be, never issued late. Up to this fraction of the switches
# may be dropped.
MAX_MISSED_FRACTION = 0.1
pytestmark = pytest.mark.realtime


def few_missed(rep) -> bool:
    """Whether the worker dropped (missed or stale) at most MAX_MISSED_FRACTION of the switches it handled."""
    return rep.missed + rep.stale <= MAX_MISSED_FRACTION * handled(rep)


def handled(rep) -> int:
    """Every switch the worker took a decision on: issued, resynced, dropped, or not needed (a resync had already
    requested its configuration)."""
    return rep.issued + rep.resync + rep.missed + rep.stale + rep.noop


def run_steps(ctl: ClockController, n: int, step_s: float = 0.04) -> None:
    for _ in range(n):
        t0 = time.monotonic()
        with ctl.step():
            while time.monotonic() - t0 < step_s:  # the "GPU work" of a step: 40 ms, like the timeline
                time.sleep(0.002)


@pytest.mark.parametrize("worker", ["process", "thread"])
def test_plan_only_dry_run_issues_every_switch_on_time(no_nvml, alternating, worker):
    schedule, timeline = alternating
    with ClockController(schedule, timeline, latency_s=0.006, worker=worker) as ctl:
        assert ctl.dry_run and ctl.anchor_source == "host" and not ctl.use_nvml
        run_steps(ctl, 12)
    rep = ctl.report
    assert rep.mode == "plan-only" and rep.worker == worker and rep.steps == 12
    # 4 switches per step; the first step catches up on its early switch; the last step's early switch, for a
    # step that never came, is excluded from the timing — and so, on a loaded machine, are the switches of a step
    # that ran so late it reads as a pause (at most the dropped fraction's worth), whose anchor also makes the
    # worker issue what that step still needs again (its ``resyncs``: at most 4 switches each)
    again = ctl.worker_result["resyncs"]
    n = handled(rep)
    assert 12 * 4 <= n <= 12 * 4 + 1 + 4 * again and few_missed(rep) and 1 <= rep.resync <= 1 + 4 * again
    assert rep.issued + rep.resync - 12 * 4 - 4 * again <= rep.excluded <= n - 12 * 4 + MAX_MISSED_FRACTION * n
    assert rep.issue_error.n >= 40 and rep.issue_error.median_s < 2e-3
    assert abs(rep.switch_error.median_s) < 3e-3
    assert rep.step_time_s == pytest.approx(0.04, rel=0.25)
    assert "switches issued" in rep.text()
    # the report's raw data stay on the controller: every mark the anchors saw, every switch the worker handled
    assert ctl.anchor_log is not None and ctl.anchor_log.step == list(range(12))
    assert sum(r[0] == "switch" for r in ctl.worker_result["records"]) == rep.issued


def test_fake_gpu_dry_run_sets_nothing(fake_gpu, alternating):
    schedule, timeline = alternating
    with ClockController(schedule, timeline, worker="process") as ctl:  # latency from the H200 preset
        assert ctl.plan.latency_s == pytest.approx(0.006)
        run_steps(ctl, 6)
    rep = ctl.report
    assert rep.mode == "dry-run" and rep.gpu_name == "NVIDIA H200" and rep.issued > 10
    assert rep.readbacks > 0 and rep.readback_matched is None
    assert fake_gpu()["calls"] == []


def test_live_switching_on_the_fake_gpu_and_restore(fake_gpu, alternating):
    schedule, timeline = alternating
    with ClockController(schedule, timeline, control_clocks=True, worker="process") as ctl:
        run_steps(ctl, 6)
        pid = ctl._handle.pid
        locked = fake_gpu()["devices"][0]["locked_core"]
        assert locked is not None and locked[0] in (1980, 1410)
    rep = ctl.report
    assert rep.mode == "live" and rep.issued >= 20 and few_missed(rep)
    calls = fake_gpu()["calls"]
    assert {c["pid"] for c in calls if c["fn"] in SETS} == {pid}  # only the worker touched the clocks
    d = fake_gpu()["devices"][0]
    assert d["locked_core"] is None and d["locked_mem"] is None  # restored
    assert rep.readback_matched is not None and rep.readback_matched > 0


def test_live_needs_nvml_and_the_dry_run_never_sets(no_nvml, alternating):
    with pytest.raises(GpuUnavailableError, match="NVML"):
        ClockController(*alternating, control_clocks=True, latency_s=0.006)
    with pytest.raises(DeployError, match="latency"):
        ClockController(*alternating)  # no GPU to take the latency from


def test_unsupported_clock_fails_at_start_with_the_gpus_message(fake_gpu):
    from rlclock.deploy.timeline import StepTimeline
    from rlclock.schedule import ClockSchedule

    timeline = StepTimeline.from_durations([1e-3] * 20)
    schedule = ClockSchedule(["1980@3201", "1417@3201"], [0] * 10 + [1] * 10)
    with pytest.raises(Exception, match="1417"):
        ClockController(schedule, timeline, worker="process").start()


KILLED = r"""
import sys, time, numpy as np
from rlclock.deploy.controller import ClockController
from rlclock.deploy.timeline import StepTimeline
from rlclock.schedule import ClockSchedule
tl = StepTimeline.from_durations(np.full(40, 1e-3))
s = ClockSchedule(["1980@3201", "1410@3201"], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10)
ctl = ClockController(s, tl, control_clocks=True).start()
for _ in range(5):
    ctl.step(); time.sleep(0.04)
print("worker", ctl._handle.pid, flush=True)
while True:
    ctl.step(); time.sleep(0.04)
"""


def test_killing_the_training_process_restores_the_clocks(fake_gpu):
    proc = subprocess.Popen([sys.executable, "-c", KILLED], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        line = proc.stdout.readline().split()
        assert line and line[0] == "worker", line
        worker = int(line[1])
        assert fake_gpu()["devices"][0]["locked_core"] is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        end = time.time() + 20
        while time.time() < end:
            d = fake_gpu()["devices"][0]
            if d["locked_core"] is None and d["locked_mem"] is None:
                break
            time.sleep(0.05)
        d = fake_gpu()["devices"][0]
        assert d["locked_core"] is None and d["locked_mem"] is None
        resets = {c["pid"] for c in fake_gpu()["calls"] if "Reset" in c["fn"]}
        assert worker in resets  # the worker saw the training process go and restored the clocks
    finally:
        if proc.poll() is None:
            proc.kill()


def test_report_places_the_kernels_from_gpu_step_times(alternating):
    schedule, timeline = alternating
    plan = plan_switches(schedule, timeline, 0.006, 0.006)
    log = AnchorLog("cuda")
    # three steps of 44 ms on the GPU (10 % longer than planned); seen 50 us after they start
    for k in range(3):
        log.step.append(k)
        log.gpu_s.append(0.044 * k)
        log.seen_s.append(10.0 + 0.044 * k + 5e-5)
        log.anchor_s.append(10.0 + 0.044 * k + 5e-5)
        log.busy_s.append(0.044)
    anchors = log.final_anchors_s()
    assert np.allclose(anchors, 10.0 + 5e-5 + 0.044 * np.arange(3))
    # the switch into segment 2 (planned start 20 ms) of step 1, issued exactly as planned
    planned = anchors[1] + plan.events[2].issue_s
    records = [
        ("switch", 1, 2, planned, planned, 1e-4, False),
        ("missed", 1, 3, 0.0, float("nan"), 0.0, False),
        ("switch", 5, 1, 0.0, 1.0, 1e-4, True),
    ]
    rep = build_report(
        plan,
        log,
        {"records": records, "reads": [], "ended": "stopped"},
        {"mode": "dry-run", "gpu_name": "X", "device": 0},
        "process",
    )
    # the segment really started at 20 ms x 1.1 = 22 ms: the switch went out 2 ms earlier than ideal
    assert rep.switch_error.median_s == pytest.approx(-0.002)
    assert rep.issue_error.median_s == pytest.approx(0.0)
    assert rep.issued == 2 and rep.missed == 1 and rep.excluded == 1 and rep.late == 0
    assert rep.step_time_s == pytest.approx(0.044) and rep.busy_time_s == pytest.approx(0.044)
    assert Stats.of([1.0, -3.0, float("nan")]).max_abs_s == 3.0


def test_anchor_offset_is_the_least_delayed_observation():
    log = AnchorLog("cuda")
    delays = [3e-3, 1e-4, 2e-3, 5e-3]
    for k, d in enumerate(delays):
        log.step.append(k)
        log.gpu_s.append(0.01 * k)
        log.seen_s.append(50.0 + 0.01 * k + d)
        log.anchor_s.append(0.0)
        log.busy_s.append(float("nan"))
    assert np.allclose(log.final_anchors_s(), 50.0 + 1e-4 + 0.01 * np.arange(4))
    assert np.allclose(log.periods_s()[:3], 0.01) and np.isnan(log.periods_s()[3])


def test_clock_control_opt_in_is_still_needed_underneath(fake_gpu):
    from rlclock.gpu.clocks import ClockControl

    with pytest.raises(ClockControlDisabledError), pytest.warns(DeprecationWarning):
        ClockControl(0, dry_run=False)


def test_only_every_kth_step_is_anchored_and_the_others_cost_no_mark(no_nvml, alternating):
    schedule, timeline = alternating
    with ClockController(schedule, timeline, latency_s=0.006, worker="thread", anchor_every=4) as ctl:
        assert ctl.anchor_source == "host" and ctl.anchor_every == 4
        calls = []
        anchors = ctl._anchors
        real_start, real_end = anchors.mark_start, anchors.mark_end
        anchors.mark_start = lambda step, send=True: (calls.append(("start", step, send)), real_start(step, send))
        anchors.mark_end = lambda step: (calls.append(("end", step)), real_end(step))
        marks = []
        for _ in range(10):
            with ctl.step() as m:
                marks.append(m.step)
                time.sleep(0.01)
        time.sleep(0.2)  # a pause (over 3 planned periods): the next step is anchored whatever its number
        with ctl.step():
            pass
    assert marks == list(range(10))
    assert calls == [
        ("start", 0, True),
        ("end", 0),
        ("start", 4, True),
        ("end", 4),
        ("start", 8, True),
        ("end", 8),
        ("start", 10, True),
        ("end", 10),
    ]
    rep = ctl.report
    assert rep.steps == 11 and rep.anchored == 4 and rep.timed == 4 and rep.anchor_every == 4


def test_by_default_a_plan_with_switches_is_anchored_every_step_and_one_without_sparsely(no_nvml, alternating):
    from rlclock.deploy.controller import ANCHOR_INTERVAL_S, auto_anchor_every
    from rlclock.deploy.timeline import StepTimeline
    from rlclock.schedule import ClockSchedule

    assert auto_anchor_every(0.04) == 1 and auto_anchor_every(0.5) == 1 and auto_anchor_every(float("nan")) == 1
    assert auto_anchor_every(0.0051) == int(ANCHOR_INTERVAL_S / 0.0051) > 1
    short = StepTimeline.from_durations(np.full(10, 5e-4))  # a 5 ms step
    held = ClockController(ClockSchedule.constant("1410@3201", 10), short, latency_s=0.006)
    assert held.plan.n_switches == 0 and held.anchor_every == auto_anchor_every(0.005) > 1
    two = ClockSchedule(["1980@3201", "1410@3201"], [0] * 5 + [1] * 5)
    switching = ClockController(two, short, latency_s=0.0005)
    assert switching.plan.n_switches > 0 and switching.anchor_every == 1
    assert ClockController(*alternating, latency_s=0.006).anchor_every == 1
    assert ClockController(two, short, latency_s=0.0005, anchor_every=3).anchor_every == 3
    for bad in (0, -2, 1.5, True):
        with pytest.raises(DeployError, match="anchor_every"):
            ClockController(*alternating, latency_s=0.006, anchor_every=bad)


@pytest.mark.parametrize("worker", ["process", "thread"])
def test_sparse_anchors_keep_the_switches_on_time(no_nvml, alternating, worker):
    schedule, timeline = alternating
    with ClockController(schedule, timeline, latency_s=0.006, worker=worker, anchor_every=4) as ctl:
        run_steps(ctl, 16)
    rep = ctl.report
    assert rep.steps == 16 and rep.anchored == 4 and few_missed(rep)
    # every step's 4 switches go out, the steps between anchors too (the last ones, after the last anchor, are not
    # placed and so not judged)
    assert rep.issued + rep.resync + rep.missed >= 16 * 4 and rep.interpolated > 20
    assert abs(rep.switch_error.median_s) < 3e-3 and rep.issue_error.median_s < 2e-3
    assert rep.step_time_s == pytest.approx(0.04, rel=0.25)


def test_time_all_steps_measures_every_step_but_sends_only_the_anchors(no_nvml, alternating):
    schedule, timeline = alternating
    with ClockController(
        schedule, timeline, latency_s=0.006, worker="thread", anchor_every=4, time_all_steps=True
    ) as ctl:
        run_steps(ctl, 12)
        log = ctl._anchors.log
    assert log.step == list(range(12)) and log.sent == [k % 4 == 0 for k in range(12)]
    rep = ctl.report
    assert rep.steps == 12 and rep.timed == 12 and rep.anchored == 3 and rep.interpolated == 0
    assert rep.switch_error.n >= 40 and abs(rep.switch_error.median_s) < 3e-3


class FakeEvent:
    """A CUDA event stand-in: its time is the host clock at record()."""

    made = 0

    def __init__(self) -> None:
        FakeEvent.made += 1
        self.t = None
        self.records = 0

    def record(self) -> None:
        self.t = time.monotonic()
        self.records += 1

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: FakeEvent) -> float:
        return (other.t - self.t) * 1e3


def test_cuda_anchors_take_events_from_a_pool_and_send_only_anchored_marks():
    from rlclock.deploy.anchor import CudaAnchors

    sent = []
    FakeEvent.made = 0
    anchors = CudaAnchors(lambda step, t: sent.append(step), defer_s=0.0, pool=4, new_event=FakeEvent)
    assert anchors.created == FakeEvent.made == 4
    for k in range(40):
        anchors.mark_start(k, send=k % 5 == 0)
        time.sleep(0.002)
        anchors.mark_end(k)
        time.sleep(0.002)
    log = anchors.close()
    assert sent == list(range(0, 40, 5)) and log.step == list(range(40)) and not log.errors
    assert anchors.created <= 6  # the events come back to the pool once read: none made per mark
    # 2 ms busy in 4 ms steps, timed by host sleeps: a loaded machine stretches both, never shortens them
    busy, period = float(np.nanmedian(log.busy_s)), float(np.nanmedian(log.periods_s()))
    assert np.all(np.isfinite(log.busy_s[:-1])) and 0.0015 <= busy <= 0.012 and 0.003 <= period <= 0.025
    assert busy < period


def test_report_places_steps_between_anchors_at_an_even_pace(alternating):
    schedule, timeline = alternating
    plan = plan_switches(schedule, timeline, 0.006, 0.006)
    log = AnchorLog("cuda")
    # anchors every 4 steps of 44 ms; then a pause of 1 s before step 12
    for k, gpu in ((0, 0.0), (4, 0.176), (8, 0.352), (12, 1.352)):
        log._append(k, gpu, 10.0 + gpu, 10.0 + gpu, True)
    assert np.allclose(log.periods_s()[:2], 0.044)
    ideal = [10.0 + 0.044 * k + plan.events[2].start_s * 1.1 - plan.lead_s for k in range(12)]
    records = [
        ("switch", 2, 2, ideal[2], ideal[2], 0.0, True),  # between anchors: placed, on time
        ("switch", 5, 2, ideal[5], ideal[5] + 0.001, 0.0, True),  # 1 ms late
        ("switch", 9, 2, ideal[9], ideal[9], 0.0, True),  # in the interval with the pause: not placed
        ("switch", 12, 2, 0.0, 0.0, 0.0, False),  # the step after the pause
        ("switch", 13, 2, 0.0, 0.0, 0.0, True),
    ]  # after the last anchor
    rep = build_report(
        plan,
        log,
        {"records": records, "reads": [], "ended": "stopped"},
        {"mode": "dry-run", "gpu_name": "X", "device": 0},
        "process",
        steps=14,
        anchor_every=4,
    )
    assert rep.steps == 14 and rep.anchored == 4 and rep.issued == 5 and rep.excluded == 3
    assert rep.interpolated == 2 and rep.switch_error.n == 2
    assert rep.switch_error.max_abs_s == pytest.approx(0.001) and rep.switch_error.median_s == pytest.approx(5e-4)
    assert "placed between measured step starts" in rep.text()


def test_a_schedule_under_a_power_limit_sets_it_once_and_gives_it_back(fake_gpu, alternating):
    """The schedule's whole-job power limit is set by the worker's clock control before the first switch, said in
    the report, and given back with the clocks; a dry run records it and sets nothing; an alternative under another
    limit is refused in one line."""
    from rlclock.schedule import ClockSchedule

    schedule, timeline = alternating
    capped = ClockSchedule(schedule.configs, schedule.index, "capped", power_limit_w=650.0)
    with ClockController(capped, timeline, worker="process") as ctl:
        run_steps(ctl, 3)
    assert ctl.report.power_limit["requested_w"] == 650.0 and not ctl.report.power_limit["applied"]
    assert "650 W for the whole job (dry run: not set" in ctl.report.text()
    assert fake_gpu()["calls"] == [] and fake_gpu()["devices"][0]["power_limit_w"] == 700.0
    with ClockController(capped, timeline, control_clocks=True, worker="process") as ctl:
        run_steps(ctl, 3)
        assert fake_gpu()["devices"][0]["power_limit_w"] == 650.0
    rep = ctl.report
    assert rep.power_limit["applied"] and rep.power_limit["found_w"] == 700.0
    assert "set to 650 W (was 700 W)" in rep.text()
    assert fake_gpu()["devices"][0]["power_limit_w"] == 700.0  # given back
    with ClockController(schedule, timeline, worker="process") as ctl:
        run_steps(ctl, 2)
    assert ctl.report.power_limit is None and "power limit" not in ctl.report.text()
    with ClockController(capped, timeline, latency_s=0.006, nvml=False, worker="thread") as ctl:  # plan-only
        run_steps(ctl, 2)
    assert ctl.report.mode == "plan-only" and ctl.report.power_limit["calls"] == ["set_power_limit_w(650)"]
    with pytest.raises(DeployError, match="power limit is set once for the job"):
        ClockController(capped, timeline, latency_s=0.006, nvml=False, alternatives=[schedule])


def test_a_power_limit_outside_the_gpus_range_fails_at_start_and_sets_nothing(fake_gpu, alternating):
    from rlclock.errors import ClockError
    from rlclock.schedule import ClockSchedule

    schedule, timeline = alternating
    low = ClockSchedule(schedule.configs, schedule.index, "low", power_limit_w=150.0)
    with pytest.raises(ClockError, match="150"):
        ClockController(low, timeline, control_clocks=True, worker="process").start()
    state = fake_gpu()
    assert state["devices"][0]["power_limit_w"] == 700.0
    assert not [c for c in state["calls"] if "Set" in c["fn"]]


def test_after_a_worker_failure_the_controller_gives_back_only_what_the_worker_changed(fake_gpu):
    """The controller's own fallback (a worker that did not report a clean end) resets the locked clocks, and sets
    the power limit back to the one the worker found only where the worker changed it: a limit set by someone else
    (here 600 W, not the driver's 700 W default) is left alone."""
    import fake_pynvml

    from rlclock.deploy.controller import _reset_after_failure

    with fake_pynvml.state() as s:
        s["devices"][0].update(locked_core=[1410, 1410], power_limit_w=600.0)
    _reset_after_failure(0, None)  # the schedule named no power limit
    d = fake_gpu()["devices"][0]
    assert d["locked_core"] is None and d["power_limit_w"] == 600.0
    with fake_pynvml.state() as s:
        s["devices"][0].update(locked_core=[1410, 1410], power_limit_w=650.0)
    _reset_after_failure(0, {"requested_w": 650.0, "found_w": 600.0, "applied": True})
    d = fake_gpu()["devices"][0]
    assert d["locked_core"] is None and d["power_limit_w"] == 600.0
