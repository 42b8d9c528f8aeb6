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
    # step that never came, is excluded from the timing
    assert rep.issued + rep.resync in (12 * 4, 12 * 4 + 1) and rep.missed == 0 and rep.resync == 1
    assert rep.excluded == rep.issued + rep.resync - 12 * 4
    assert rep.issue_error.n >= 40 and rep.issue_error.median_s < 2e-3
    assert abs(rep.switch_error.median_s) < 3e-3
    assert rep.step_time_s == pytest.approx(0.04, rel=0.25)
    assert "switches issued" in rep.text()


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
    with ClockController(schedule, timeline, allow_clock_control=True, worker="process") as ctl:
        run_steps(ctl, 6)
        pid = ctl._handle.pid
        locked = fake_gpu()["devices"][0]["locked_core"]
        assert locked is not None and locked[0] in (1980, 1410)
    rep = ctl.report
    assert rep.mode == "live" and rep.issued >= 20 and rep.missed == 0
    calls = fake_gpu()["calls"]
    assert {c["pid"] for c in calls if c["fn"] in SETS} == {pid}  # only the worker touched the clocks
    d = fake_gpu()["devices"][0]
    assert d["locked_core"] is None and d["locked_mem"] is None  # restored
    assert rep.readback_matched is not None and rep.readback_matched > 0


def test_live_needs_nvml_and_the_dry_run_never_sets(no_nvml, alternating):
    with pytest.raises(GpuUnavailableError, match="NVML"):
        ClockController(*alternating, allow_clock_control=True, latency_s=0.006)
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
ctl = ClockController(s, tl, allow_clock_control=True).start()
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
    records = [("switch", 1, 2, planned, planned, 1e-4, False), ("missed", 1, 3, 0.0, float("nan"), 0.0, False),
               ("switch", 5, 1, 0.0, 1.0, 1e-4, True)]
    rep = build_report(plan, log, {"records": records, "reads": [], "ended": "stopped"},
                       {"mode": "dry-run", "gpu_name": "X", "device": 0}, "process")
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

    with pytest.raises(ClockControlDisabledError):
        ClockControl(0, dry_run=False)
