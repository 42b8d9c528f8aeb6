"""Clock control under faults: a killed or terminated watchdog, NVML errors while restoring (in the owner and in the
watchdog), and two rlclock processes on one GPU. Each test runs real owner processes (tests/fakes/owners.py) on the
file-backed fake GPU, faults injected into the fake's NVML at chosen calls in chosen processes.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from owners import wait_gone

from rlclock.gpu.clocks import reset_clocks

pytestmark = pytest.mark.usefixtures("runtime_memory_locks")  # the owners lock memory too

CORE_RESET, MEM_RESET = "nvmlDeviceResetGpuLockedClocks", "nvmlDeviceResetMemoryLockedClocks"
POWER_SET = "nvmlDeviceSetPowerManagementLimit"
FAST = {"tries": 3, "backoff_s": 0.01}  # retries that keep the tests short


def locked(fake_nvml) -> tuple:
    d = fake_nvml.device()
    return d["locked_core"], d["locked_mem"]


def wait_for(pred, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def calls_by(fake_nvml, pid: int | None, *fns: str) -> list[str]:
    """The GPU-changing calls of process ``pid`` (of the functions ``fns``), each with ``!`` when it failed."""
    return [
        c["fn"] + ("!" if "error" in c else "")
        for c in fake_nvml.calls()
        if c["pid"] == pid and (not fns or c["fn"] in fns)
    ]


def new_watchdog(owner, old: int | None, timeout_s: float = 20.0) -> int | None:
    """The owner's watchdog once it is another than ``old`` (``None`` if it never changes)."""
    found: list[int | None] = [None]

    def changed() -> bool:
        found[0] = owner.watchdog_pid
        return found[0] is not None and found[0] != old

    return found[0] if wait_for(changed, timeout_s) else None


def lock_records(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "locks").glob("*.lock")) if p.read_text()]


# -- the guard dies ----------------------------------------------------------------------------------------------


def test_a_killed_watchdog_is_replaced_before_the_next_set(owners, fake_nvml):
    owner = owners.start(**FAST)
    owner.ok("apply", "1200@2201")
    first = owner.watchdog_pid
    os.kill(first, signal.SIGKILL)
    assert wait_gone(first)
    owner.ok("apply", "1410@2201")  # noticed before this set at the latest
    second = owner.watchdog_pid
    assert second not in (None, first) and not wait_gone(second, 0.2)
    lines = [x for x in owner.stderr().splitlines() if "watchdog" in x]
    assert len(lines) == 1 and f"pid {first}" in lines[0] and f"pid {second}" in lines[0], owner.stderr()
    owner.kill()
    assert wait_gone(second) and locked(fake_nvml) == (None, None)
    assert calls_by(fake_nvml, second) == [CORE_RESET, MEM_RESET]


def test_a_killed_watchdog_then_a_killed_owner_leave_nothing_locked(owners, fake_nvml):
    owner = owners.start(**FAST)
    owner.ok("apply", "1200@2201")
    first = owner.watchdog_pid
    os.kill(first, signal.SIGKILL)
    second = new_watchdog(owner, first)  # no set in between: the owner replaces it on its own
    assert second is not None, owner.stderr()
    owner.kill()
    assert wait_gone(second) and locked(fake_nvml) == (None, None)
    assert calls_by(fake_nvml, second) == [CORE_RESET, MEM_RESET]


def test_close_after_the_watchdog_died_is_clean(owners, fake_nvml):
    owner = owners.start(**FAST, handle_signals=False)
    owner.ok("apply", "1200@2201")
    first = owner.watchdog_pid
    os.kill(first, signal.SIGKILL)
    assert wait_gone(first)
    assert owner.ask("close") == ("ok", None)
    assert locked(fake_nvml) == (None, None)
    assert "Traceback" not in owner.stderr() and "BrokenPipe" not in owner.stderr()


def test_sigterm_to_the_watchdog_leaves_the_owners_clocks_alone(owners, fake_nvml):
    owner = owners.start(**FAST)
    owner.ok("apply", "1200@2201")
    watchdog = owner.watchdog_pid
    os.kill(watchdog, signal.SIGTERM)
    assert wait_for(lambda: "SIGTERM" in owner.stderr() or wait_gone(watchdog, 0)), "the watchdog said nothing"
    assert locked(fake_nvml) == ([1200, 1200], [2201, 2201]) and calls_by(fake_nvml, watchdog) == []
    assert owner.watchdog_pid == watchdog and not wait_gone(watchdog, 0.1)  # still on guard
    owner.kill()
    assert wait_gone(watchdog) and locked(fake_nvml) == (None, None)
    assert calls_by(fake_nvml, watchdog) == [CORE_RESET, MEM_RESET]


# -- NVML errors while restoring ---------------------------------------------------------------------------------


def test_an_nvml_error_in_the_watchdogs_restore_is_retried(owners, fake_nvml):
    owner = owners.start(**FAST)
    owner.ok("apply", "1200@2201")
    watchdog = owner.watchdog_pid
    fake_nvml.inject(CORE_RESET, pid=watchdog, times=1)
    owner.kill()
    assert wait_gone(watchdog) and locked(fake_nvml) == (None, None)
    assert calls_by(fake_nvml, watchdog) == [CORE_RESET + "!", CORE_RESET, MEM_RESET]
    err = owner.stderr()
    assert "reset" in err and "2 tries" in err and "left" not in err, err


def test_an_nvml_error_that_persists_in_the_watchdog_is_reported_truthfully(owners, fake_nvml, tmp_path):
    owner = owners.start(**FAST)
    owner.ok("apply", "1200@2201")
    watchdog = owner.watchdog_pid
    fake_nvml.inject(CORE_RESET, pid=watchdog, times=None)
    owner.kill()
    assert wait_gone(watchdog)
    assert locked(fake_nvml) == ([1200, 1200], None)  # memory given back; core not
    assert calls_by(fake_nvml, watchdog) == [CORE_RESET + "!"] * 3 + [MEM_RESET]
    err = [x for x in owner.stderr().splitlines() if "watchdog" in x]
    assert len(err) == 1 and "core clock" in err[0] and "left locked" in err[0], err
    assert "reset its locked memory clock to the driver's default, but its core clock is left locked" in err[0]
    assert "rlclock reset-clocks --device 0" in err[0]
    records = lock_records(tmp_path)
    assert records and records[0]["state"] == "left" and "core clock" in records[0]["left"]
    fake_nvml.clear_faults()
    reset_clocks([0])  # the fix the message names works
    assert locked(fake_nvml) == (None, None)


def test_an_nvml_error_in_close_is_retried(owners, fake_nvml):
    owner = owners.start(**FAST, handle_signals=False)
    owner.ok("apply", "1200@2201")
    watchdog = owner.watchdog_pid
    fake_nvml.inject(CORE_RESET, pid=owner.pid, times=1)
    assert owner.ask("close") == ("ok", None)
    assert locked(fake_nvml) == (None, None) and wait_gone(watchdog)
    assert calls_by(fake_nvml, owner.pid, CORE_RESET, MEM_RESET) == [CORE_RESET + "!", CORE_RESET, MEM_RESET]
    assert calls_by(fake_nvml, watchdog) == []


def test_a_failed_close_keeps_the_watchdog_on_guard(owners, fake_nvml):
    owner = owners.start(**FAST, handle_signals=False)
    owner.ok("apply", "1200@2201")
    watchdog = owner.watchdog_pid
    fake_nvml.inject(CORE_RESET, pid=owner.pid, times=None)
    answer = owner.ask("close")
    assert answer[0] == "error" and answer[1] == "ClockRestoreError", answer
    message = answer[2]
    assert "core clock" in message and "left locked" in message and "1200 MHz" in message
    assert f"watchdog (pid {watchdog})" in message and "rlclock reset-clocks --device 0" in message
    assert "\n" not in message
    assert not wait_gone(watchdog, 0.2) and locked(fake_nvml)[0] == [1200, 1200]
    owner.kill()  # the process ends: its watchdog, whose NVML works, gives the clocks back
    assert wait_gone(watchdog) and locked(fake_nvml) == (None, None)
    assert calls_by(fake_nvml, watchdog) == [CORE_RESET, MEM_RESET]


# -- one process per GPU -----------------------------------------------------------------------------------------


def test_a_second_process_is_refused_in_one_line_naming_the_first(owners, fake_nvml):
    first = owners.start(**FAST)
    first.ok("apply", "1200@2201")
    second = owners.start(**FAST)
    assert second.error is not None, "a second process took control of the same GPU"
    kind, message = second.error
    assert kind == "GpuBusyError" and "\n" not in message
    assert f"pid {first.pid}" in message and "owners.py" in message and "Fix:" in message
    assert calls_by(fake_nvml, second.pid) == []
    second.kill()
    assert wait_gone(second.pid)
    assert locked(fake_nvml) == ([1200, 1200], [2201, 2201])  # the refused one reset nothing
    watchdog = first.watchdog_pid
    first.kill()
    assert wait_gone(watchdog) and locked(fake_nvml) == (None, None)
    third = owners.start(**FAST)  # the lock of a process that ended is taken over
    assert third.error is None and third.ok("apply", "1410@3201") == "1410@3201"


def test_a_guard_and_owner_killed_together_are_cleaned_up_by_the_next_owner(owners, fake_nvml, tmp_path):
    first = owners.start(**FAST)
    first.ok("apply", "1200@2201")
    first.ok("power", 450)
    watchdog = first.watchdog_pid
    first.kill(signal.SIGSTOP)  # it cannot replace its watchdog: both are gone before anyone restores
    os.kill(watchdog, signal.SIGKILL)
    first.kill()
    assert wait_gone(first.pid) and wait_gone(watchdog)
    assert locked(fake_nvml) == ([1200, 1200], [2201, 2201]) and fake_nvml.device()["power_limit_w"] == 450
    second = owners.start(**FAST)
    assert second.error is None
    assert locked(fake_nvml) == (None, None) and fake_nvml.device()["power_limit_w"] == 700
    lines = [x for x in second.stderr().splitlines() if str(first.pid) in x]
    assert len(lines) == 1 and "core" in lines[0] and "power limit" in lines[0], second.stderr()


def test_a_forked_child_neither_uses_nor_restores_its_parents_clocks(owners, fake_nvml):
    owner = owners.start(**FAST)
    owner.ok("apply", "1200@2201")
    message = owner.ok("fork")
    assert "forked" in message and f"process {owner.pid}" in message
    assert locked(fake_nvml) == ([1200, 1200], [2201, 2201])
    assert [c for c in fake_nvml.calls() if c["pid"] not in (owner.pid,)] == []
    owner.ok("close")
    assert locked(fake_nvml) == (None, None)


# -- the power limit ---------------------------------------------------------------------------------------------


@pytest.fixture
def found_600(fake_nvml):
    fake_nvml.set_device(0, power_limit_w=600.0)  # not the default (700 W): restores must give back this one
    return fake_nvml


def power_w(fake_nvml) -> float:
    return fake_nvml.device()["power_limit_w"]


def test_a_killed_watchdog_is_replaced_for_the_power_limit_too(owners, found_600):
    owner = owners.start(**FAST)
    owner.ok("power", 450)
    first = owner.watchdog_pid
    os.kill(first, signal.SIGKILL)
    second = new_watchdog(owner, first)
    assert second is not None, owner.stderr()
    owner.kill()
    assert wait_gone(second) and power_w(found_600) == 600
    assert calls_by(found_600, second) == [POWER_SET]


def test_sigterm_to_the_watchdog_leaves_the_power_limit_alone(owners, found_600):
    owner = owners.start(**FAST)
    owner.ok("power", 450)
    watchdog = owner.watchdog_pid
    os.kill(watchdog, signal.SIGTERM)
    assert wait_for(lambda: "SIGTERM" in owner.stderr() or wait_gone(watchdog, 0))
    assert power_w(found_600) == 450 and calls_by(found_600, watchdog) == []
    owner.kill()
    assert wait_gone(watchdog) and power_w(found_600) == 600


def test_power_limit_restore_errors_are_retried_and_reported(owners, found_600):
    owner = owners.start(**FAST, handle_signals=False)
    owner.ok("power", 450)
    watchdog = owner.watchdog_pid
    found_600.inject(POWER_SET, pid=owner.pid, times=None)
    answer = owner.ask("close")
    assert answer[0] == "error" and "power limit" in answer[2] and "450 W" in answer[2] and "600 W" in answer[2]
    assert calls_by(found_600, owner.pid) == [POWER_SET] + [POWER_SET + "!"] * 3
    found_600.inject(POWER_SET, pid=watchdog, times=1)
    owner.kill()
    assert wait_gone(watchdog) and power_w(found_600) == 600
    assert calls_by(found_600, watchdog) == [POWER_SET + "!", POWER_SET]
    assert "2 tries" in owner.stderr()
