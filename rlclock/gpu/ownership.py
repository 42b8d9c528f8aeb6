"""Who controls a GPU's clocks: one rlclock process per GPU at a time, through a lock every user's process sees.

A live :class:`~rlclock.gpu.clocks.ClockControl` takes its GPU's lock before it changes anything, and keeps it until
everything it changed is given back:

* The lock is an exclusive ``flock(2)`` on ``rlclock-<GPU UUID>.lock`` in the lock directory (:func:`lock_dir`):
  ``$RLCLOCK_LOCK_DIR`` if set, else the first of ``/run/lock``, ``/dev/shm``, ``/tmp`` that is world-writable with
  the sticky bit — the same directory for every user of the machine, so a process of another user sees the lock. It
  is keyed by the UUID, not the index, so two programs that number the GPUs differently
  (``CUDA_VISIBLE_DEVICES``) still meet.
* The kernel drops a flock when the last descriptor of it closes, however the holder ends: a lock is never *stale*
  in the sense of a pid file, and no process id is trusted to decide that it is. The owner's watchdog shares the
  same open file (it is handed the descriptor), so after the owner is killed the GPU stays locked until the watchdog
  has given the clocks back; a process that asks meanwhile waits for it (:data:`LOCK_WAIT_S`).
* The file holds a JSON *record* of the holder — process id and start time (to tell a reused process id from the
  holder), user, command, what it has changed (locked clock domains, the power limit it found) — for the one-line
  refusal of a second process, for ``rlclock reset-clocks``, and for the next holder: a record that says clocks were
  left changed by a process that has ended (its watchdog died with it, or could not restore) is cleaned up by the
  next owner before it takes control. The record is written by its holder only (mode 0644), read by anyone.
* A descriptor survives ``fork()`` without ``exec`` (a data loader's workers): :mod:`rlclock.gpu.clocks` closes the
  child's copies at once, so a child neither holds the lock nor keeps the owner's watchdog from seeing it end.

:func:`retry` is the one retry rule of every restore (owner, watchdog, ``reset-clocks``): bounded, with a doubling
pause, never for an answer that cannot change (not supported, no permission).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import re
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlclock.errors import ClockError, ClockPermissionError, GpuBusyError, NvmlNotSupportedError, RlclockError

LOCK_DIR_ENV = "RLCLOCK_LOCK_DIR"
"""Environment variable naming the lock directory (e.g. a directory shared by containers on one host)."""
LOCK_DIRS = ("/run/lock", "/dev/shm", "/tmp")
"""Candidates for the lock directory, in order: the first that is world-writable with the sticky bit is used."""
LOCK_WAIT_S = 10.0
"""How long to wait for a GPU whose recorded holder has ended (its watchdog is still giving the clocks back), s."""
RESTORE_TRIES = 5
"""How many times a restore call is tried before what it restores is reported as left behind."""
RESTORE_BACKOFF_S = 0.05
"""Pause after the first failed try, seconds; it doubles after each (0.75 s over five tries)."""
RECORD_VERSION = 1


# -- processes -------------------------------------------------------------------------------------------------------


def process_start(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat``), ``None`` when unknown."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, start: int | None = None) -> bool:
    """True while process ``pid`` exists, is not a zombie, and (when ``start`` is given) started at ``start`` — not
    another process that was given the same id later."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True  # no /proc: the signal check is all there is
    if fields[0] in ("Z", "X"):
        return False
    return start is None or not fields[19].isdigit() or int(fields[19]) == start


def process_command(pid: int, limit: int = 120) -> str:
    """The command line of process ``pid`` (shortened to ``limit`` characters), or ``"?"``."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or "?"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_exit(returncode: int | None) -> str:
    """How a child process ended, for a message: ``"was killed by signal 9 (SIGKILL)"``, ``"exited with status 1"``."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        import signal

        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "?"
        return f"was killed by signal {-returncode} ({name})"
    return "exited" if returncode == 0 else f"exited with status {returncode}"


@dataclass(frozen=True)
class ProcessId:
    """A process as it can be told apart from a later one with the same id.

    Attributes:
        pid: Process id.
        start: Start time, clock ticks since boot (``None`` where ``/proc`` does not say).
    """

    pid: int
    start: int | None

    @classmethod
    def current(cls) -> ProcessId:
        """This process."""
        return cls(os.getpid(), process_start(os.getpid()))

    def alive(self) -> bool:
        """Whether this very process still runs."""
        return process_alive(self.pid, self.start)


# -- retries ---------------------------------------------------------------------------------------------------------


def retry(
    call: Callable[[], object], tries: int | None = None, backoff_s: float | None = None
) -> tuple[int, RlclockError | None]:
    """Call ``call`` until it succeeds, at most ``tries`` times, pausing ``backoff_s`` (doubling) between tries.

    An error that another try cannot change — the function is not supported (nothing to restore), or permission is
    missing — ends the tries at once.

    Args:
        call: The NVML call (a restore).
        tries: Most tries (default :data:`RESTORE_TRIES`).
        backoff_s: Pause after the first failure, seconds (default :data:`RESTORE_BACKOFF_S`).

    Returns:
        ``(tries made, None)`` on success, else ``(tries made, the last error)``.
    """
    tries = RESTORE_TRIES if tries is None else max(1, int(tries))
    pause_s = RESTORE_BACKOFF_S if backoff_s is None else max(0.0, float(backoff_s))
    error: RlclockError | None = None
    for attempt in range(1, tries + 1):
        try:
            call()
            return attempt, None
        except (NvmlNotSupportedError, ClockPermissionError) as exc:
            return attempt, exc
        except RlclockError as exc:
            error = exc
        if attempt < tries:
            time.sleep(pause_s)
            pause_s *= 2
    return tries, error


def tries_note(tries: int) -> str:
    """``" (after 3 tries)"`` when more than one try was needed, else ``""``."""
    return f" (after {tries} tries)" if tries > 1 else ""


# -- the lock --------------------------------------------------------------------------------------------------------


def lock_dir() -> Path:
    """The directory of the GPU locks (see the module docstring)."""
    env = os.environ.get(LOCK_DIR_ENV)
    if env:
        path = Path(env)
        path.mkdir(parents=True, exist_ok=True)
        return path
    for candidate in LOCK_DIRS:
        try:
            mode = os.stat(candidate).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode) and mode & 0o1777 == 0o1777:
            return Path(candidate)
    import tempfile

    return Path(tempfile.gettempdir())


def lock_name(key: str) -> str:
    """The lock file's name for the GPU with UUID (or other key) ``key``."""
    return "rlclock-" + re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".lock"


def gpu_key(device: Any) -> str:
    """The key a GPU is locked by: its UUID, or ``index-<n>`` where NVML cannot read one."""
    try:
        uuid = str(device.uuid)
    except RlclockError:
        uuid = ""
    return uuid or f"index-{device.index}"


def _open(path: Path) -> tuple[int, bool]:
    """Open (or create, mode 0644) the lock file, never through a link; returns the descriptor and whether it can be
    written (a file of another user is opened for reading: enough to see whether it is held, and by whom)."""
    flags = os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        writable = True
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                os.fchmod(fd, 0o644)
            except FileExistsError:
                continue
        except PermissionError:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                raise ClockError(
                    f"the GPU's lock file {path} cannot be opened by this user.",
                    f"remove it (as root: rm {path}) when no rlclock process runs on this GPU.",
                ) from None
            writable = False
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ClockError(
                    f"the GPU's lock file {path} is a symbolic link; rlclock does not follow it.",
                    f"remove it (as root: rm {path}).",
                ) from None
            raise ClockError(
                f"cannot open the GPU's lock file {path}: {exc.strerror}.",
                f"set {LOCK_DIR_ENV} to a directory every user can write to.",
            ) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise ClockError(
                f"the GPU's lock file {path} is not a plain file of its own.", f"remove it (as root: rm {path})."
            )
        return fd, writable
    raise ClockError(f"the GPU's lock file {path} keeps appearing and disappearing.", "try again.")


def _read(fd: int) -> dict[str, Any] | None:
    """The record in an open lock file (``None`` when empty or not a record)."""
    for _ in range(3):  # a holder may be rewriting it
        try:
            data = os.pread(fd, 1 << 16, 0)
        except OSError:
            return None
        if data:
            try:
                record = json.loads(data)
            except ValueError:
                time.sleep(0.01)
                continue
            return record if isinstance(record, dict) else None
        time.sleep(0.01)
    return None


def read_record(path: str | Path) -> dict[str, Any] | None:
    """The record in the lock file at ``path`` (``None`` when there is none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        return _read(fd)
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def holder_alive(record: dict[str, Any] | None) -> bool:
    """Whether the process a record names still runs (an unreadable record counts as running)."""
    if not record or not isinstance(record.get("pid"), int):
        return True
    start = record.get("start")
    return process_alive(record["pid"], start if isinstance(start, int) else None)


def describe_holder(record: dict[str, Any] | None) -> str:
    """The holder of a lock as a message names it: ``"pid 123 (python train.py, user alice, since 12:00:03)"``."""
    if not record or not isinstance(record.get("pid"), int):
        return "a process that has not said who it is"
    text = (
        f"pid {record['pid']} ({record.get('command', '?')}, user {record.get('user', '?')}, "
        f"since {record.get('since', '?')})"
    )
    if not holder_alive(record):
        wd = record.get("watchdog") or {}
        who = f"its clock watchdog (pid {wd['pid']})" if isinstance(wd, dict) and wd.get("pid") else "its watchdog"
        text += f", which has ended: {who} is still giving the clocks back, or a child it forked holds the lock"
    return text


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.geteuid())


class GpuLock:
    """The exclusive lock on one GPU's clocks and power limit, and the record of its holder in the lock file.

    Use :meth:`acquire`; the watchdog, which shares the owner's lock, uses :meth:`adopt`.

    Attributes:
        path: The lock file.
        index: NVML index of the GPU (for messages).
        previous: The record found when the lock was taken (what the last holder said), or ``None``.
        record: The record as this holder last wrote it.
    """

    def __init__(self, fd: int, path: Path, index: int, previous: dict[str, Any] | None) -> None:
        self._fd = fd
        self.path = path
        self.index = index
        self.previous = previous
        self.record: dict[str, Any] = dict(previous or {})

    @property
    def fd(self) -> int:
        """The descriptor of the lock (handed to the watchdog, which then holds the lock too)."""
        return self._fd

    @property
    def held(self) -> bool:
        return self._fd >= 0

    @property
    def trusted(self) -> bool:
        """Whether the lock file belongs to root or to this user (only then is its record acted on)."""
        try:
            return os.fstat(self._fd).st_uid in (0, os.geteuid())
        except OSError:
            return False

    @classmethod
    def acquire(cls, index: int, key: str, name: str = "?", wait_s: float | None = None) -> GpuLock:
        """Take the lock of the GPU with key ``key`` (:func:`gpu_key`), or refuse.

        Args:
            index: NVML index (for messages).
            key: The GPU's UUID (or ``index-<n>``).
            name: The GPU's name (for messages).
            wait_s: How long to wait while the recorded holder has ended (its watchdog is finishing), seconds
                (default :data:`LOCK_WAIT_S`). A holder that still runs is refused at once.

        Raises:
            GpuBusyError: Another process holds the lock.
            ClockError: The lock file cannot be used.
        """
        path = lock_dir() / lock_name(key)
        deadline = time.monotonic() + (LOCK_WAIT_S if wait_s is None else wait_s)
        while True:
            fd, writable = _open(path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                record = _read(fd)
                os.close(fd)
                if holder_alive(record) or time.monotonic() >= deadline:
                    raise GpuBusyError(
                        f"GPU {index} ({name}) is controlled by another rlclock process: {describe_holder(record)}.",
                        "wait until it ends (it gives the clocks back), or stop it; one rlclock process controls a "
                        f"GPU at a time (lock {path}).",
                    ) from None
                time.sleep(0.05)
                continue
            if not _same_file(fd, path):  # the holder before removed the file after we opened it: try the new one
                os.close(fd)
                continue
            if not writable:  # free, but this user could not say who holds it: refuse rather than hold it unnamed
                os.close(fd)
                raise ClockError(
                    f"the lock file of GPU {index} ({name}), {path}, belongs to another user; no process "
                    "holds it now, but this user cannot write its name into it.",
                    f"remove it (as root: rm {path}), then try again.",
                )
            return cls(fd, path, index, _read(fd))

    @classmethod
    def adopt(cls, fd: int, path: str | Path, index: int) -> GpuLock:
        """The handle of a process that was handed the descriptor of a lock already taken (the watchdog)."""
        return cls(fd, Path(path), index, None)

    def claim(self, pid: int, start: int | None, gpu_name: str, key: str) -> None:
        """Write this holder's record (after any clean-up of what the previous holder left)."""
        self.record = {
            "version": RECORD_VERSION,
            "pid": pid,
            "start": start,
            "uid": os.geteuid(),
            "user": _user(),
            "command": process_command(pid),
            "host": socket.gethostname(),
            "gpu": self.index,
            "name": gpu_name,
            "uuid": key,
            "since": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "state": "held",
            "watchdog": None,
            "armed": [],
            "power_found_w": None,
            "power_w": None,
            "left": "",
        }
        self._write()

    def update(self, **fields: Any) -> None:
        """Change fields of the record and write it."""
        self.record.update(fields)
        self._write()

    def _write(self) -> None:
        if self._fd < 0:
            return
        data = json.dumps(self.record).encode()
        with contextlib.suppress(OSError):  # the record informs; the flock is the lock
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def release(self, left: str = "") -> None:
        """Give the lock up: the record says released and the file is removed (``left`` empty), or the record says
        what is left behind and stays for the next holder and ``rlclock reset-clocks``."""
        if self._fd < 0:
            return
        try:
            self.update(state="left" if left else "released", left=left, watchdog=None)
            if not left and _same_file(self._fd, self.path):
                with contextlib.suppress(OSError):  # another user's file in a sticky directory: leave it
                    os.unlink(self.path)
        finally:
            self.detach()

    def detach(self) -> None:
        """Close this process's descriptor without touching the record (a forked child; a failed start)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def probe(key: str) -> dict[str, Any] | None:
    """The record of the process that holds the GPU's lock now, or ``None`` when nobody holds it (no waiting)."""
    path = lock_dir() / lock_name(key)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd) or {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
