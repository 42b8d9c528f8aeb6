"""One rlclock process per GPU: the lock (where it lives, who holds it, a holder that has ended, a reused process id,
a hostile lock file), what a holder that ended left behind, and ``reset-clocks`` beside a running owner."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlclock.cli import main
from rlclock.errors import ClockError, ClockRestoreError, GpuBusyError
from rlclock.gpu import ownership
from rlclock.gpu.clocks import ClockControl, reset_clocks, reset_gpus
from rlclock.gpu.ownership import GpuLock, describe_holder, holder_alive, lock_dir, process_alive, process_start

CORE_RESET = "nvmlDeviceResetGpuLockedClocks"


def live(**kw) -> ClockControl:
    return ClockControl(0, control_clocks=True, watchdog=False, handle_signals=False, **kw)


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(ownership, "RESTORE_BACKOFF_S", 0.001)


def uuid(fake_nvml) -> str:
    return fake_nvml.device()["uuid"]


# -- where the lock lives, and who holds it -------------------------------------------------------------------------


def test_the_lock_directory_is_the_same_for_every_user(tmp_path, monkeypatch):
    monkeypatch.delenv(ownership.LOCK_DIR_ENV, raising=False)
    private, shared, other = (tmp_path / n for n in ("private", "shared", "other"))
    for d, mode in ((private, 0o700), (shared, 0o1777), (other, 0o1777)):
        d.mkdir()
        os.chmod(d, mode)
    # chosen by the directory's mode (world-writable, sticky), never by whether this user may write there
    monkeypatch.setattr(ownership, "LOCK_DIRS", (str(tmp_path / "missing"), str(private), str(shared), str(other)))
    assert lock_dir() == shared
    monkeypatch.setenv(ownership.LOCK_DIR_ENV, str(tmp_path / "set" / "here"))
    assert lock_dir() == tmp_path / "set" / "here" and lock_dir().is_dir()


def test_a_second_holder_is_refused_naming_the_first_and_a_released_lock_is_gone(fake_nvml):
    first = GpuLock.acquire(0, "GPU-x", "NVIDIA H200")
    first.claim(os.getpid(), process_start(os.getpid()), "NVIDIA H200", "GPU-x")
    assert stat.S_IMODE(os.stat(first.path).st_mode) == 0o644  # written by its holder only, read by anyone
    with pytest.raises(GpuBusyError) as exc:
        GpuLock.acquire(0, "GPU-x", "NVIDIA H200", wait_s=0)
    msg = str(exc.value)
    assert msg.startswith("GPU 0 (NVIDIA H200) is controlled by another rlclock process: pid ")
    assert f"pid {os.getpid()} (" in msg and "pytest" in msg and "\n" not in msg and "Fix: wait until it ends" in msg
    first.release()
    assert not first.path.exists()
    again = GpuLock.acquire(0, "GPU-x", "NVIDIA H200", wait_s=0)
    assert again.previous is None
    again.release()


def test_a_lock_left_by_a_process_that_ended_is_taken_at_once(fake_nvml):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record = {"pid": int(dead.stdout), "start": 1, "state": "held", "command": "python train.py", "armed": []}
    path = lock_dir() / ownership.lock_name("GPU-x")
    path.write_text(json.dumps(record))
    lock = GpuLock.acquire(0, "GPU-x", "NVIDIA H200", wait_s=0)  # nobody holds the flock: taken, no pid judged
    assert lock.previous == record
    lock.release()


def test_a_reused_process_id_is_not_taken_for_the_holder():
    me = os.getpid()
    assert process_alive(me) and process_alive(me, process_start(me))
    assert not process_alive(me, (process_start(me) or 0) + 1)  # same id, another start: another process
    record = {
        "pid": me,
        "start": (process_start(me) or 0) + 1,
        "command": "python train.py",
        "user": "alice",
        "since": "12:00",
        "watchdog": {"pid": 4242},
    }
    assert not holder_alive(record)
    assert "which has ended: its clock watchdog (pid 4242) is still giving the clocks back" in describe_holder(record)


def test_a_holder_that_ended_is_waited_for_while_its_watchdog_finishes(fake_nvml):
    first = GpuLock.acquire(0, "GPU-x", "NVIDIA H200")
    first.claim(os.getpid(), (process_start(os.getpid()) or 0) + 1, "NVIDIA H200", "GPU-x")  # "ended"
    with pytest.raises(GpuBusyError, match="which has ended"):
        GpuLock.acquire(0, "GPU-x", "NVIDIA H200", wait_s=0.1)
    threading.Timer(0.3, first.release).start()
    t0 = time.monotonic()
    second = GpuLock.acquire(0, "GPU-x", "NVIDIA H200", wait_s=10)
    assert time.monotonic() - t0 >= 0.25 and second.previous is None  # a clean release leaves no record
    second.release()


def test_a_hostile_lock_file_is_refused_and_left_untouched(fake_nvml, tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    path = lock_dir() / ownership.lock_name("GPU-x")
    path.symlink_to(target)
    with pytest.raises(ClockError, match="symbolic link"):
        GpuLock.acquire(0, "GPU-x", "NVIDIA H200")
    path.unlink()
    os.link(target, path)  # a hard link to another file
    with pytest.raises(ClockError, match="not a plain file of its own"):
        GpuLock.acquire(0, "GPU-x", "NVIDIA H200")
    assert target.read_text() == "keep me"


# -- ClockControl and the lock ---------------------------------------------------------------------------------------


def test_only_live_controls_take_the_gpu(fake_nvml):
    with ClockControl(0) as dry, ClockControl(0) as dry2:  # observe mode sets nothing: no lock
        assert dry.lock_path is None and dry2.lock_path is None
        with live() as clocks:
            assert clocks.lock_path is not None and json.loads(Path(clocks.lock_path).read_text())["state"] == "held"
            with pytest.raises(GpuBusyError, match=f"pid {os.getpid()}"):
                live()  # a second live control, even in the same process
            clocks.apply("1200")
            record = json.loads(Path(clocks.lock_path).read_text())
            assert record["armed"] == ["core"] and record["uuid"] == uuid(fake_nvml)
            path = clocks.lock_path
    assert not os.path.exists(path)


def test_what_a_holder_that_ended_left_is_given_back_before_taking_control(fake_nvml, capsys):
    fake_nvml.set_device(locked_core=[900, 900], power_limit_w=450.0)
    record = {
        "pid": 999999,
        "start": 1,
        "state": "held",
        "command": "python train.py",
        "armed": ["core"],
        "power_found_w": 600.0,
    }
    (lock_dir() / ownership.lock_name(uuid(fake_nvml))).write_text(json.dumps(record))
    with live() as clocks:
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "left with locked clocks or a changed power limit by process 999999" in err
        assert "reset the locked core clock, set the power limit back to 600 W before taking control" in err
        assert fake_nvml.device()["locked_core"] is None and fake_nvml.device()["power_limit_w"] == 600
        assert clocks.power_limit_found_w is None  # nothing of its own changed yet
    assert [c["fn"] for c in fake_nvml.calls()] == [CORE_RESET, "nvmlDeviceSetPowerManagementLimit"]


def test_a_clean_up_that_fails_refuses_control_and_keeps_the_record(fake_nvml, fast):
    fake_nvml.set_device(locked_core=[900, 900])
    record = {"pid": 999999, "start": 1, "state": "left", "command": "python train.py", "armed": ["core"]}
    path = lock_dir() / ownership.lock_name(uuid(fake_nvml))
    path.write_text(json.dumps(record))
    fake_nvml.inject(CORE_RESET, times=None)
    with pytest.raises(ClockRestoreError, match=r"left changed by process 999999 .*core clock is left locked"):
        live()
    assert json.loads(path.read_text()) == record
    fake_nvml.clear_faults()
    with live():
        assert fake_nvml.device()["locked_core"] is None


# -- reset-clocks beside an owner ------------------------------------------------------------------------------------


def test_reset_clocks_leaves_a_running_owners_gpu_alone_unless_forced(fake_nvml, capsys):
    with live() as clocks:
        clocks.apply("1200")
        [result] = reset_gpus([0], wait_s=0)
        assert not result.ok and "left alone" in result.line and f"pid {os.getpid()}" in result.line
        assert fake_nvml.device()["locked_core"] == [1200, 1200]
        with pytest.raises(GpuBusyError):
            reset_clocks([0], wait_s=0)
        assert main(["reset-clocks", "--dry-run"]) == 0
        assert "controlled now by another rlclock process" in capsys.readouterr().out
        assert main(["reset-clocks"]) == 1
        assert "left alone" in capsys.readouterr().out and fake_nvml.device()["locked_core"] == [1200, 1200]
        assert main(["reset-clocks", "--force"]) == 0
        assert "(forced: another rlclock process controls it)" in capsys.readouterr().out
        assert fake_nvml.device()["locked_core"] is None


def test_reset_clocks_retries_and_says_what_is_left(fake_nvml, fast, capsys):
    fake_nvml.set_device(locked_core=[900, 900])
    fake_nvml.inject(CORE_RESET, times=1)
    assert "reset the locked core (after 2 tries) clock(s)" in reset_clocks([0])[0]
    assert fake_nvml.device()["locked_core"] is None
    fake_nvml.set_device(locked_core=[900, 900])
    fake_nvml.inject(CORE_RESET, times=None)
    with pytest.raises(ClockRestoreError, match="could not reset the locked core clock after 5 tries"):
        reset_clocks([0])
    assert main(["reset-clocks"]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "Fix: run rlclock reset-clocks --device 0 again" in out
    record = json.loads((lock_dir() / ownership.lock_name(uuid(fake_nvml))).read_text())
    assert record["state"] == "left" and "core clock" in record["left"]
    fake_nvml.clear_faults()
    assert main(["reset-clocks"]) == 0 and fake_nvml.device()["locked_core"] is None
