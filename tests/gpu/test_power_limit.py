"""The board power limit through ClockControl against the fake NVML: opt-in, dry-run, validation, read-back,
restore to the limit found, errors, threads, reset-clocks and the watchdog's power entries."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import fake_pynvml
import pytest
from concurrency import hammer

from rlclock.errors import ClockError, ClockPermissionError, ClockRestoreError, NvmlNotSupportedError
from rlclock.gpu import ownership, watchdog
from rlclock.gpu.clocks import ClockControl, reset_clocks
from rlclock.gpu.watchdog import Watchdog

SET = "nvmlDeviceSetPowerManagementLimit"


def live(**kw) -> ClockControl:
    return ClockControl(0, control_clocks=True, watchdog=False, handle_signals=False, **kw)


def power_sets(fake_nvml, pid: int | None = None) -> list[int]:
    """Milliwatts of every power limit set call (by ``pid``), in order."""
    return [c["value"] for c in fake_nvml.calls() if c["fn"] == SET and (pid is None or c["pid"] == pid)]


@pytest.fixture
def found_600(fake_nvml, monkeypatch):
    """The fake H200 with a limit in effect of 600 W, not its default (700 W): a restore must give back 600.

    A watchdog started from this process sees the same fake GPU."""
    fake_nvml.set_device(0, power_limit_w=600.0)
    monkeypatch.setenv("PYTHONPATH", fake_nvml.child_env()["PYTHONPATH"])
    return fake_nvml


def test_dry_run_records_what_it_would_set_and_calls_nothing(found_600):
    with ClockControl(0) as clocks:
        rec = clocks.set_power_limit(650)
        assert rec.dry_run and not rec.applied and rec.calls == ("set_power_limit_w(650)",)
        assert rec.found_w == 600 and rec.power_limit_w == 600  # read back: nothing was set
        assert clocks.power_limit_found_w == 600 and clocks.power_limit_w == 650
        assert clocks.set_power_limit(650).calls == ()  # already (planned to be) in effect
        assert clocks.set_power_limit(None).calls == ("set_power_limit_w(600)",)
        assert clocks.set_power_limit(312.5).calls == ("set_power_limit_w(312.5)",)
        assert clocks.watchdog_pid is None
    hist = clocks.power_limit_history  # the close plans the way back
    assert hist[-1].requested_w is None and hist[-1].calls == ("set_power_limit_w(600)",) and not hist[-1].applied
    assert found_600.calls() == [] and found_600.device()["power_limit_w"] == 600


def test_live_sets_reads_back_and_close_restores_the_limit_found(found_600):
    with live() as clocks:
        rec = clocks.set_power_limit(650)
        assert rec.applied and not rec.dry_run and rec.calls == ("set_power_limit_w(650)",)
        assert rec.power_limit_w == 650 and rec.found_w == 600 and rec.requested_w == 650 and rec.set_latency_s >= 0
        assert found_600.device()["power_limit_w"] == 650
        assert clocks.set_power_limit(650.0).calls == ()  # in effect: no NVML call
        assert power_sets(found_600) == [650_000]
        assert clocks.watchdog_pid is None  # watchdog=False: nothing is sent anywhere
    assert found_600.device()["power_limit_w"] == 600  # the limit found, not the default (700 W)
    assert power_sets(found_600, os.getpid()) == [650_000, 600_000]
    back = clocks.power_limit_history[-1]
    assert back.requested_w is None and back.applied and back.power_limit_w == 600
    json.dumps([r.as_dict() for r in clocks.power_limit_history])
    with pytest.raises(ClockError, match="closed"):
        clocks.set_power_limit(650)


def test_asking_for_the_limit_in_effect_makes_no_call(found_600):
    with live() as clocks:
        rec = clocks.set_power_limit(None)  # nothing changed yet: nothing to give back
        assert rec.calls == () and rec.found_w is None and rec.power_limit_w == 600
        assert clocks.set_power_limit(600).calls == ()
        assert clocks.set_power_limit(600.0004).calls == ()  # NVML sets whole milliwatts
    assert found_600.calls() == []
    assert [r.calls for r in clocks.power_limit_history] == [(), (), ()]  # the close had nothing to restore


def test_restore_and_a_request_for_the_limit_found_give_it_back(found_600):
    with live() as clocks:
        clocks.set_power_limit(500)
        assert clocks.set_power_limit(None).calls == ("set_power_limit_w(600)",)
        assert found_600.device()["power_limit_w"] == 600
        clocks.set_power_limit(450)
        clocks.apply("1410@3201")
        assert clocks.restore().requested.is_auto
        assert found_600.device()["power_limit_w"] == 600 and found_600.device()["locked_core"] is None
    assert power_sets(found_600) == [500_000, 600_000, 450_000, 600_000]  # the close had nothing left to do


def test_exception_inside_the_block_restores(found_600):
    with pytest.raises(RuntimeError), live() as clocks:
        clocks.set_power_limit(450)
        assert found_600.device()["power_limit_w"] == 450
        raise RuntimeError("training crashed")
    assert found_600.device()["power_limit_w"] == 600


@pytest.mark.parametrize(
    "value, match",
    [
        (900, r"power limit 900 W is outside the range of GPU 0 \(NVIDIA H200\): 200–700 W"),
        (199.9, r"power limit 199\.9 W is outside the range of GPU 0 \(NVIDIA H200\): 200–700 W"),
        (math.nan, r"power limit nan for GPU 0 \(NVIDIA H200\) is not a finite number"),
        (math.inf, r"power limit inf for GPU 0 \(NVIDIA H200\) is not a finite number"),
        ("650", r"power limit '650' for GPU 0 \(NVIDIA H200\) is not a finite number"),
        (True, r"power limit True for GPU 0 \(NVIDIA H200\) is not a finite number"),
    ],
)
def test_bad_limits_are_refused_in_one_line_before_any_nvml_call(found_600, value, match):
    for clocks in (live(), ClockControl(0)):
        with clocks, pytest.raises(ClockError, match=match) as exc:
            clocks.set_power_limit(value)
        assert "\n" not in str(exc.value) and "Fix:" in str(exc.value)
        assert clocks.power_limit_found_w is None and clocks.power_limit_history == []
    assert found_600.calls() == [] and found_600.device()["power_limit_w"] == 600


def test_permission_error_is_one_line_and_leaves_nothing_to_restore(found_600):
    found_600.update(root=False)
    clocks = live()
    with pytest.raises(ClockPermissionError) as exc:
        clocks.set_power_limit(650)
    msg = str(exc.value)
    assert "power limit" in msg and "root" in msg and "\n" not in msg and "Fix:" in msg
    assert found_600.device()["power_limit_w"] == 600
    clocks.close()  # the limit in effect is still the one found: no set, so no second permission error
    assert power_sets(found_600) == [650_000]


def test_a_gpu_whose_power_limit_cannot_be_set_is_refused_in_one_line(fake_nvml):
    fake_nvml.set_device(0, power_limit_supported=False)
    with live() as clocks:
        with pytest.raises(
            NvmlNotSupportedError,
            match=r"power limit of GPU 0 \(NVIDIA H200\) cannot be changed "
            "through NVML",
        ) as exc:
            clocks.set_power_limit(650)
        assert "\n" not in str(exc.value)
        rec = clocks.set_power_limit(None)  # nothing asked: fine on any GPU
        assert rec.calls == () and rec.power_limit_w is None
    assert fake_nvml.calls() == []


def test_restore_errors_restore_everything_then_raise_what_is_left(found_600, monkeypatch):
    monkeypatch.setattr(ownership, "RESTORE_BACKOFF_S", 0.001)
    clocks = live()
    clocks.apply("1410@3201")
    clocks.set_power_limit(450)

    def refuse() -> None:
        raise ClockError("core reset refused.")

    monkeypatch.setattr(clocks.device, "reset_locked_core_clocks", refuse)
    with pytest.raises(ClockRestoreError, match=r"core clock is left locked at 1410 MHz \(core reset refused; 5 tri"):
        clocks.close()
    assert found_600.device()["power_limit_w"] == 600  # still set back
    assert found_600.device()["locked_core"] == [1410, 1410]
    with pytest.raises(ClockError, match="closed"):
        clocks.apply("1200@3201")  # closed to changes, but it still holds the GPU: closing again tries again
    monkeypatch.delattr(clocks.device, "reset_locked_core_clocks")  # NVML answers again
    clocks.close()
    assert found_600.device()["locked_core"] is None

    clocks = live()
    clocks.apply("1410@3201")
    clocks.set_power_limit(450)

    def refuse_power(power_limit_w: float) -> None:
        raise ClockError("power limit refused.")

    monkeypatch.setattr(clocks.device, "set_power_limit_w", refuse_power)
    with pytest.raises(ClockRestoreError, match=r"power limit is left at 450 W \(found 600 W\)"):
        clocks.close()
    assert found_600.device()["locked_core"] is None  # the clocks were still reset
    monkeypatch.delattr(clocks.device, "set_power_limit_w")
    clocks.close()
    assert found_600.device()["power_limit_w"] == 600


def test_concurrent_requests_are_serialised(found_600):
    limits = [650, 450, None, 700, 450]
    with live() as clocks:
        hammer(lambda w: clocks.set_power_limit(w, read_back=False), limits)
        hist = clocks.power_limit_history
        assert len(hist) == 20
        in_effect = 600.0  # replaying the records in order reproduces the GPU's limit
        for rec in hist:
            want = 600.0 if rec.requested_w is None else rec.requested_w
            assert rec.calls == (() if want == in_effect else (f"set_power_limit_w({want:g})",))
            in_effect = want
        assert found_600.device()["power_limit_w"] == in_effect
    assert found_600.device()["power_limit_w"] == 600


def test_reset_clocks_sets_a_changed_power_limit_back_to_the_default(fake_nvml):
    state = fake_pynvml.default_state(2)
    state["devices"][0]["power_limit_w"] = 650.0
    state["devices"][1]["power_limit_supported"] = False
    fake_pynvml.write_state(fake_nvml.path, state)
    dry = reset_clocks(dry_run=True)
    assert "would set the power limit 650 W -> 700 W (default)" in dry[0]
    assert "power limit not supported" in dry[1]
    assert fake_nvml.calls() == [] and fake_nvml.device(0)["power_limit_w"] == 650
    lines = reset_clocks()
    assert lines[0].endswith("; power limit 650 W -> 700 W (default).") and "now SM 1980 MHz" in lines[0]
    assert "power limit not supported" in lines[1] and "now SM 1980 MHz" in lines[1]  # reported, not raised
    assert fake_nvml.device(0)["power_limit_w"] == 700 and power_sets(fake_nvml) == [700_000]
    assert reset_clocks([0])[0].endswith("; power limit 700 W (default).")
    assert power_sets(fake_nvml) == [700_000]  # already the default: not set again


def wait_for(pred, timeout_s: float = 20.0) -> bool:
    end = time.time() + timeout_s
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def stand_in_owner() -> subprocess.Popen:
    """A process to be the watchdog's owner (the test plays its part on the pipe)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def watchdog_of(owner: subprocess.Popen) -> tuple[subprocess.Popen, int]:
    """A watchdog process guarding for ``owner``; returns it and the write end of its pipe."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            watchdog._BOOT,
            "--fd",
            str(read_fd),
            "--owner",
            str(owner.pid),
            "--owner-start",
            str(ownership.process_start(owner.pid)),
            "--devices",
            "0",
            "--poll",
            "0.05",
        ],
        pass_fds=(read_fd,),
        stdout=subprocess.PIPE,
    )
    os.close(read_fd)
    assert proc.stdout.readline().strip() == b"ready"
    return proc, write_fd


def test_the_watchdog_sets_a_pending_power_limit_back_once_its_owner_ends(found_600):
    owner = stand_in_owner()
    wd, pipe = watchdog_of(owner)
    for line in ("power zero 1", "power 0 nan", "power 0 600.0", "nonsense"):  # malformed lines are ignored
        os.write(pipe, line.encode() + b"\n")
    found_600.set_device(0, power_limit_w=450.0)
    os.close(pipe)  # the pipe closes, but its owner still runs: nothing is set under it
    time.sleep(0.3)
    assert wd.poll() is None and found_600.calls() == []
    owner.kill()
    owner.wait()
    assert wd.wait(20) == 0
    assert found_600.device()["power_limit_w"] == 600 and power_sets(found_600, wd.pid) == [600_000]


def test_a_released_power_limit_is_left_alone_by_the_watchdog(found_600):
    owner = stand_in_owner()
    wd, pipe = watchdog_of(owner)
    os.write(pipe, b"power 0 600.0\npower-restored 0\n")
    found_600.set_device(0, power_limit_w=450.0)
    owner.kill()
    owner.wait()
    assert wd.wait(20) == 0
    assert found_600.device()["power_limit_w"] == 450 and found_600.calls() == []
    os.close(pipe)
    wd = Watchdog([0])
    wd.guard_power_limit(0, 600.0)
    wd.stop()  # the owner's way out: it releases what is pending, then asks the watchdog to exit
    assert wd.process.returncode == 0 and wd.power_limits_w == {} and found_600.calls() == []


def test_clock_control_guards_the_limit_found_with_its_watchdog(found_600):
    with ClockControl(0, control_clocks=True, handle_signals=False) as clocks:
        clocks.set_power_limit(450)
        assert clocks._watchdog is not None and clocks._watchdog.power_limits_w == {0: 600.0}
        clocks.set_power_limit(None)
        assert clocks._watchdog.power_limits_w == {}
        clocks.set_power_limit(500)
        watchdog = clocks._watchdog
    assert watchdog.process.poll() is not None and watchdog.power_limits_w == {}
    assert power_sets(found_600, watchdog.pid) == []  # released before it exited: nothing for it to do
    assert found_600.device()["power_limit_w"] == 600
