"""Clocks come back to the driver defaults however the owner ends: SIGKILL (watchdog), SIGTERM, SIGINT, exit.

Each test runs an owner program in a child process that locks clocks on the fake GPU (whose state is a
file, so the watchdog process sees the same GPU), ends it one way or another, and reads the fake's state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.usefixtures("runtime_memory_locks")  # the owner locks memory too

OWNER = r"""
import sys, time
from rlclock.gpu.clocks import ClockControl
mode = sys.argv[1]
clocks = ClockControl(0, control_clocks=True)
rec = clocks.apply("1200@2201")
print("applied", clocks.watchdog_pid, rec.sm_clock_mhz, flush=True)
if mode == "exit":
    sys.exit(0)              # no close(): atexit restores
if mode == "raise":
    with clocks:
        raise RuntimeError("crash inside the block")
if mode == "close-then-wait":
    clocks.close()
    print("closed", flush=True)
time.sleep(120)
"""


def start_owner(fake_nvml, mode: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, mode],
        env=fake_nvml.child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().split()
    if not line or line[0] != "applied":
        proc.kill()
        raise AssertionError(f"owner did not start: {line} {proc.stderr.read()}")
    assert line[2] == "1200"
    return proc, int(line[1])


def locked(fake_nvml) -> tuple:
    d = fake_nvml.device()
    return d["locked_core"], d["locked_mem"]


def wait_until_unlocked(fake_nvml, timeout_s: float = 20.0) -> bool:
    end = time.time() + timeout_s
    while time.time() < end:
        if locked(fake_nvml) == (None, None):
            return True
        time.sleep(0.05)
    return False


def resets_by(fake_nvml, pid: int) -> list[str]:
    return [c["fn"] for c in fake_nvml.calls() if c["pid"] == pid and "Reset" in c["fn"]]


def process_gone(pid: int, timeout_s: float = 10.0) -> bool:
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_sigkill_of_the_owner_is_undone_by_the_watchdog(fake_nvml):
    proc, watchdog = start_owner(fake_nvml, "sleep")
    assert watchdog != proc.pid
    assert locked(fake_nvml) == ([1200, 1200], [2201, 2201])
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert wait_until_unlocked(fake_nvml), "the watchdog did not restore the clocks"
    assert resets_by(fake_nvml, watchdog) == ["nvmlDeviceResetGpuLockedClocks", "nvmlDeviceResetMemoryLockedClocks"]
    assert resets_by(fake_nvml, proc.pid) == []
    assert process_gone(watchdog)
    err = proc.stderr.read()
    assert f"process {proc.pid}" in err and "ended without giving GPU 0 back" in err
    assert "reset its locked core and memory clocks to the driver's default." in err


def test_sigterm_restores_in_the_owner_and_still_terminates(fake_nvml):
    proc, watchdog = start_owner(fake_nvml, "sleep")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM
    assert locked(fake_nvml) == (None, None)
    assert len(resets_by(fake_nvml, proc.pid)) == 2
    assert process_gone(watchdog)
    assert resets_by(fake_nvml, watchdog) == []  # disarmed: nothing left to do


def test_sigint_restores_and_raises_keyboard_interrupt(fake_nvml):
    proc, watchdog = start_owner(fake_nvml, "sleep")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) != 0
    assert "KeyboardInterrupt" in proc.stderr.read()
    assert locked(fake_nvml) == (None, None)
    assert len(resets_by(fake_nvml, proc.pid)) == 2
    assert process_gone(watchdog)


@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_normal_exit_and_exceptions_restore(fake_nvml, mode):
    proc, watchdog = start_owner(fake_nvml, mode)
    proc.wait(20)
    assert locked(fake_nvml) == (None, None)
    assert len(resets_by(fake_nvml, proc.pid)) == 2
    assert process_gone(watchdog)
    assert resets_by(fake_nvml, watchdog) == []


def test_watchdog_stays_quiet_after_a_clean_close(fake_nvml):
    proc, watchdog = start_owner(fake_nvml, "close-then-wait")
    assert proc.stdout.readline().strip() == "closed"
    assert process_gone(watchdog)
    n_calls = len(fake_nvml.calls())
    fake_nvml.set_device(locked_core=[900, 900])  # someone else locks the clocks later
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    time.sleep(0.5)
    assert len(fake_nvml.calls()) == n_calls and locked(fake_nvml)[0] == [900, 900]


POWER_OWNER = r"""
import sys, time
from rlclock.gpu.clocks import ClockControl
mode = sys.argv[1]
clocks = ClockControl(0, control_clocks=True)
rec = clocks.set_power_limit(450)
if mode == "with-clocks":
    clocks.apply("1200@2201")
print("applied", clocks.watchdog_pid, rec.power_limit_w, flush=True)
time.sleep(120)
"""


def start_power_owner(fake_nvml, mode: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", POWER_OWNER, mode],
        env=fake_nvml.child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline().split()
    if not line or line[0] != "applied":
        proc.kill()
        raise AssertionError(f"owner did not start: {line} {proc.stderr.read()}")
    assert float(line[2]) == 450
    return proc, int(line[1])


def power_limit_w(fake_nvml) -> float:
    return fake_nvml.device()["power_limit_w"]


def wait_until_power_limit(fake_nvml, power_w: float, timeout_s: float = 20.0) -> bool:
    end = time.time() + timeout_s
    while time.time() < end:
        if power_limit_w(fake_nvml) == power_w:
            return True
        time.sleep(0.05)
    return False


def power_sets_by(fake_nvml, pid: int) -> list[int]:
    return [c["value"] for c in fake_nvml.calls() if c["pid"] == pid and c["fn"] == "nvmlDeviceSetPowerManagementLimit"]


@pytest.mark.parametrize("mode", ["power", "with-clocks"])
def test_sigkill_of_the_owner_has_the_power_limit_set_back_by_the_watchdog(fake_nvml, mode):
    fake_nvml.set_device(power_limit_w=600.0)  # not the default (700 W): the watchdog must give back this one
    proc, watchdog = start_power_owner(fake_nvml, mode)
    assert watchdog != proc.pid
    assert power_limit_w(fake_nvml) == 450
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert wait_until_power_limit(fake_nvml, 600.0), "the watchdog did not set the power limit back"
    assert power_sets_by(fake_nvml, watchdog) == [600_000]
    assert power_sets_by(fake_nvml, proc.pid) == [450_000]
    assert process_gone(watchdog)
    err = proc.stderr.read()
    assert "set its power limit back to 600 W" in err
    if mode == "with-clocks":
        assert wait_until_unlocked(fake_nvml)
        assert resets_by(fake_nvml, watchdog) == ["nvmlDeviceResetGpuLockedClocks", "nvmlDeviceResetMemoryLockedClocks"]
        assert "reset its locked core and memory clocks to the driver's default" in err
    else:
        assert resets_by(fake_nvml, watchdog) == []  # never armed: the clocks are not touched


def test_sigterm_sets_the_power_limit_back_in_the_owner(fake_nvml):
    fake_nvml.set_device(power_limit_w=600.0)
    proc, watchdog = start_power_owner(fake_nvml, "with-clocks")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM
    assert power_limit_w(fake_nvml) == 600 and locked(fake_nvml) == (None, None)
    assert power_sets_by(fake_nvml, proc.pid) == [450_000, 600_000]
    assert process_gone(watchdog)
    assert power_sets_by(fake_nvml, watchdog) == [] and resets_by(fake_nvml, watchdog) == []  # released: nothing left
