"""A separate process that gives the clocks and power limits back when their owner dies, even by SIGKILL.

:class:`~rlclock.gpu.clocks.ClockControl` starts one :class:`Watchdog` before it locks any clock or changes the power
limit. The owner keeps the write end of a pipe; the watchdog reads the other end, and it shares the owner's GPU lock
(:class:`~rlclock.gpu.ownership.GpuLock`: the descriptor is handed over), so nobody else takes the GPU before the
watchdog is done. What it guarantees:

* **It restores only what its owner set, and only once its owner is gone.** The owner says, before each change,
  which clock domains it is about to lock (``arm core``, ``arm mem``) and which power limit to set back
  (``power``); the watchdog resets those domains and sets that limit, nothing else. It acts when the owner's
  process has ended — seen as end-of-file on the pipe (the kernel closes the owner's end however it ends) and
  confirmed by the owner's process id *and start time*, so a reused process id is not taken for the owner. If the
  pipe closes while the owner still runs, it keeps watching the process.
* **A restore that fails is retried and reported truthfully**: each call is tried up to ``--tries`` times
  (:func:`~rlclock.gpu.ownership.retry`); the one line it prints says what was given back and what is left, with the
  fix (``rlclock reset-clocks``); the lock's record keeps what is left for the next owner and ``reset-clocks``; the
  exit status is 3 when something is left.
* **SIGTERM does not reset anything under a running owner**: the watchdog says so and keeps guarding. (SIGKILL ends
  it; the owner notices and starts a new one.) It runs in its own session and ignores SIGINT, so a Ctrl-C meant for
  the owner does not take it down first.

It starts with a bare ``rlclock`` package (its ``__init__`` registers environments, importing gymnasium): only the NVML
door, the errors and the lock are loaded, so it starts in a few tens of milliseconds and stays small.

Protocol, one line each, owner to watchdog:

* ``arm <domain>...``: these clock domains (``core``, ``mem``) are about to be locked;
* ``disarm``: the clocks are back at the driver defaults;
* ``power <index> <watts>``: the power limit of GPU ``<index>`` is about to change; if the owner dies, set it
  back to ``<watts>`` (a decimal number; the last entry for a GPU counts);
* ``power-restored <index>``: the power limit of GPU ``<index>`` is back; nothing to restore for it;
* ``exit``: restore what is still armed or pending, and exit (the owner disarms and releases first).

``arm`` without a domain arms both. Unknown or malformed lines are ignored. The watchdog prints ``ready`` once NVML
is open, or ``error: <message>`` and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rlclock.errors import NvmlError, NvmlNotSupportedError, RlclockError
from rlclock.gpu.ownership import GpuLock, ProcessId, process_alive, process_command, retry, tries_note

if TYPE_CHECKING:
    from rlclock.gpu.nvml import NvmlDevice

__all__ = ["LEFT_STATUS", "READY_TIMEOUT_S", "Watchdog", "main", "process_alive"]

READY_TIMEOUT_S = 60.0
"""How long the owner waits for the watchdog to open NVML."""
LEFT_STATUS = 3
"""Exit status of a watchdog that could not give everything back."""
DOMAINS = {"core": ("core", "reset_locked_core_clocks"), "mem": ("memory", "reset_locked_mem_clocks")}
"""Clock domain → (its name in messages, the NvmlDevice method that gives it back)."""

_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = (
    "import sys; sys.path[:] = [e for e in sys.path if e]; import types; p = types.ModuleType('rlclock'); "
    f"p.__path__ = [{str(Path(_ROOT) / 'rlclock')!r}]; sys.modules['rlclock'] = p; "
    "from rlclock.gpu.watchdog import main; raise SystemExit(main(sys.argv[1:]))"
)
"""The watchdog's ``python -c`` program: the package without its ``__init__`` (see the module docstring); the
current directory is taken off the path, so no file there shadows a module it imports."""


class Watchdog:
    """The owner's handle on a watchdog process.

    Args:
        devices: NVML indices of the GPUs whose clocks to restore (power limits name their GPU in each entry).
        poll_s: How often the watchdog checks that the owner process still exists, seconds.
        lock: The owner's GPU lock, shared with the watchdog (it holds the GPU until it is done).
        tries: How many times the watchdog tries each restore call.
        backoff_s: Its pause after a first failed try, seconds (doubling).
        on_exit: Called (from a thread of the owner) when the watchdog process ends without being stopped.

    Raises:
        NvmlError: The watchdog could not start or could not open NVML.
    """

    def __init__(
        self,
        devices: Sequence[int],
        poll_s: float = 0.5,
        *,
        lock: GpuLock | None = None,
        tries: int | None = None,
        backoff_s: float | None = None,
        on_exit: Callable[[Watchdog], None] | None = None,
    ) -> None:
        from rlclock.gpu import ownership

        self.devices = tuple(int(d) for d in devices)
        self.armed: set[str] = set()
        self.power_limits_w: dict[int, float] = {}  # GPU index -> limit to restore, watts
        self.stopping = False
        owner = ProcessId.current()
        read_fd, self._write_fd = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = _ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [
            sys.executable,
            "-c",
            _BOOT,
            "--fd",
            str(read_fd),
            "--owner",
            str(owner.pid),
            "--owner-start",
            str(owner.start if owner.start is not None else -1),
            "--devices",
            ",".join(map(str, self.devices)),
            "--poll",
            str(poll_s),
            "--tries",
            str(ownership.RESTORE_TRIES if tries is None else tries),
            "--backoff",
            str(ownership.RESTORE_BACKOFF_S if backoff_s is None else backoff_s),
        ]
        pass_fds = [read_fd]
        if lock is not None and lock.held:
            cmd += ["--lock-fd", str(lock.fd), "--lock-path", str(lock.path)]
            pass_fds.append(lock.fd)
        try:
            self.process = subprocess.Popen(
                cmd,
                pass_fds=pass_fds,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
        finally:
            os.close(read_fd)
        line = self._read_line(READY_TIMEOUT_S)
        if line != "ready":
            self._close_pipe()
            self.process.kill()
            self.process.wait()
            raise NvmlError(
                f"the clock watchdog process could not start ({line or 'no answer'}).",
                "check that NVML works (rlclock doctor).",
            )
        self._on_exit = on_exit
        self._thread: threading.Thread | None = None
        if on_exit is not None:
            self._thread = threading.Thread(target=self._wait, name=f"rlclock-watchdog-{self.pid}", daemon=True)
            self._thread.start()

    @property
    def pid(self) -> int:
        """Process id of the watchdog."""
        return self.process.pid

    @property
    def alive(self) -> bool:
        """Whether the watchdog process still runs (this reaps it once it has ended)."""
        return self.process.poll() is None and self._write_fd >= 0

    @property
    def returncode(self) -> int | None:
        """Its exit status once ended (negative: the signal that killed it)."""
        return self.process.poll()

    def _read_line(self, timeout_s: float) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not ready:
            return "timeout"
        return self.process.stdout.readline().decode(errors="replace").strip()

    def _wait(self) -> None:
        """Thread: wait for the watchdog to end (its stdout closes), then tell the owner unless it was stopped."""
        stdout = self.process.stdout
        assert stdout is not None
        with contextlib.suppress(OSError, ValueError):
            while stdout.read(4096):
                pass
        with contextlib.suppress(Exception):
            self.process.wait()
        with contextlib.suppress(OSError):
            stdout.close()
        if not self.stopping and self._on_exit is not None:
            self._on_exit(self)

    def _send(self, message: str) -> bool:
        """Send one line; ``False`` when the watchdog can no longer hear it (it has ended)."""
        if self._write_fd < 0:
            return False
        try:
            os.write(self._write_fd, (message + "\n").encode())
        except OSError:  # BrokenPipeError: the watchdog has ended
            self._close_pipe()
            return False
        return True

    def arm(self, domains: Iterable[str] = ("core", "mem")) -> None:
        """These clock domains (``"core"``, ``"mem"``) are about to be locked: reset them if the owner dies."""
        new = sorted(set(domains) - self.armed)
        if new:
            self._send("arm " + " ".join(new))
            self.armed.update(new)

    def disarm(self) -> None:
        """Clocks are back at the driver defaults: nothing to restore."""
        if self.armed:
            self._send("disarm")
            self.armed.clear()

    def guard_power_limit(self, index: int, power_limit_w: float) -> None:
        """GPU ``index``'s power limit is about to change: set it back to ``power_limit_w`` (watts) if the owner
        dies from now on."""
        index, power_limit_w = int(index), float(power_limit_w)
        if self.power_limits_w.get(index) != power_limit_w:
            self._send(f"power {index} {power_limit_w!r}")
            self.power_limits_w[index] = power_limit_w

    def release_power_limit(self, index: int) -> None:
        """GPU ``index``'s power limit is back: nothing to restore for it."""
        if self.power_limits_w.pop(int(index), None) is not None:
            self._send(f"power-restored {int(index)}")

    def stop(self, timeout_s: float = 5.0) -> None:
        """Disarm, release every power limit, tell the watchdog to exit, and reap it (the owner has given everything
        back). Quiet when the watchdog has already ended."""
        self.stopping = True
        if self._write_fd >= 0:
            self.disarm()
            for index in list(self.power_limits_w):
                self.release_power_limit(index)
            self._send("exit")
            self._close_pipe()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self._thread is None and self.process.stdout is not None:
            self.process.stdout.close()  # else the thread closes it; it is not joined (it may wait for the owner's
            #                              lock, held by the caller, before it sees that this watchdog was stopped)

    def forget(self) -> None:
        """In a child forked from the owner: drop this process's end of the pipe, so the watchdog still sees the
        owner end; the child never talks to it."""
        self.stopping = True
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self._write_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
            self._write_fd = -1


# -- the watchdog process ------------------------------------------------------------------------------------------


def _say(line: str) -> None:
    """One line on stderr — the owner's, inherited; quiet if nobody reads it any more (the lock's record keeps what
    is left)."""
    with contextlib.suppress(OSError, ValueError):
        print(" ".join(line.split()), file=sys.stderr, flush=True)


class _Guard:
    """What the watchdog process guards, and how it gives it back."""

    def __init__(
        self, devices: Sequence[int], owner: ProcessId, tries: int, backoff_s: float, lock: GpuLock | None
    ) -> None:
        self.devices = list(devices)
        self.owner = owner
        self.command = process_command(owner.pid)
        self.tries = tries
        self.backoff_s = backoff_s
        self.lock = lock
        self.armed: set[str] = set()
        self.power_limits_w: dict[int, float] = {}

    def message(self, msg: str) -> bool:
        """Apply one line of the protocol; True for ``exit``."""
        parts = msg.split()
        if not parts:
            return False
        if parts[0] == "arm":
            self.armed.update([p for p in parts[1:] if p in DOMAINS] if len(parts) > 1 else DOMAINS)
        elif parts[0] == "disarm":
            self.armed.clear()
        elif parts[0] == "exit":
            return True
        elif parts[0].startswith("power"):
            _power_message(msg, self.power_limits_w)
        return False

    def _attempt(self, dev: NvmlDevice | None, errors: list[str], method: str, *args: float) -> int:
        """Call ``dev.<method>(*args)`` with retries; returns the tries it took, or 0 when it failed for good (the
        error is noted in ``errors``). Not supported counts as done: nothing of that kind was changed."""
        if dev is None:
            return 0
        tries, error = retry(lambda: getattr(dev, method)(*args), self.tries, self.backoff_s)
        if error is None or isinstance(error, NvmlNotSupportedError):
            return tries
        errors.append(f"{error.message.rstrip('.')}; {tries} tries")
        return 0

    def give_back(self, owner_gone: bool) -> int:
        """Restore what is armed and pending; say what was done and what is left; returns the exit status."""
        from rlclock.gpu import nvml

        if not self.armed and not self.power_limits_w:
            if owner_gone and self.lock is not None:
                self.lock.release()
            return 0
        by_gpu: dict[int, tuple[list[str], list[str], list[str]]] = {}  # done, left, errors
        left_domains: set[str] = set()
        power_left: dict[int, float] = {}
        for index in sorted(set(self.devices) | set(self.power_limits_w)):
            done, left, errors = by_gpu.setdefault(index, ([], [], []))
            try:
                dev: NvmlDevice | None = nvml.NvmlDevice(index)
            except RlclockError as exc:
                dev = None
                errors.append(exc.message)

            reset: list[str] = []
            for domain in sorted(self.armed) if index in self.devices else ():
                what, method = DOMAINS[domain]
                tries = self._attempt(dev, errors, method)
                if tries:
                    reset.append(what + tries_note(tries))
                else:
                    left.append(f"its {what} clock is left locked")
                    left_domains.add(domain)
            if reset:
                done.append(
                    f"reset its locked {' and '.join(reset)} clock{'s' if len(reset) > 1 else ''} to the "
                    "driver's default"
                )
            if index in self.power_limits_w:
                found_w = self.power_limits_w[index]
                tries = self._attempt(dev, errors, "set_power_limit_w", found_w)
                if tries:
                    done.append(f"set its power limit back to {found_w:g} W{tries_note(tries)}")
                else:
                    left.append(f"its power limit is left changed (it was {found_w:g} W)")
                    power_left[index] = found_w
        who = f"process {self.owner.pid} ({self.command})" if owner_gone else f"process {self.owner.pid}"
        status = 0
        for index, (done, left, errors) in by_gpu.items():
            if not done and not left:
                continue
            head = (
                f"rlclock watchdog: {who} ended without giving GPU {index} back; "
                if owner_gone
                else f"rlclock watchdog: as asked by {who}, for GPU {index}: "
            )
            if left:
                status = LEFT_STATUS
                text = head + ("; ".join(done) + ", but " if done else "") + ", and ".join(left)
                text += f" (NVML: {'; '.join(errors)}). Fix: run rlclock reset-clocks --device {index} (as root)."
            else:
                text = head + "; ".join(done) + "."
            _say(text)
        if owner_gone and self.lock is not None:
            lefts = [f"GPU {i}: " + ", and ".join(left) for i, (_, left, _) in by_gpu.items() if left]
            self.lock.update(armed=sorted(left_domains), power_found_w=power_left.get(self.lock.index))
            self.lock.release(left="; ".join(lefts))
        return status


def _power_message(msg: str, power_limits_w: dict[int, float]) -> None:
    """Apply a ``power`` or ``power-restored`` line to the pending entries (malformed lines are ignored)."""
    parts = msg.split()
    try:
        if parts[0] == "power" and len(parts) == 3 and math.isfinite(float(parts[2])):
            power_limits_w[int(parts[1])] = float(parts[2])
        elif parts[0] == "power-restored" and len(parts) == 2:
            power_limits_w.pop(int(parts[1]), None)
    except ValueError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the watchdog (see the module docstring)."""
    p = argparse.ArgumentParser(prog="rlclock-watchdog")
    p.add_argument("--fd", type=int, required=True, help="read end of the owner's pipe")
    p.add_argument("--owner", type=int, required=True, help="owner process id")
    p.add_argument("--owner-start", type=int, default=-1, help="owner start time, clock ticks since boot (-1: unknown)")
    p.add_argument("--devices", required=True, help="comma-separated NVML device indices")
    p.add_argument("--poll", type=float, default=0.5, help="owner liveness check period, seconds")
    p.add_argument("--tries", type=int, default=5, help="tries of each restore call")
    p.add_argument("--backoff", type=float, default=0.05, help="pause after a first failed try, seconds (doubling)")
    p.add_argument("--lock-fd", type=int, default=-1, help="descriptor of the owner's GPU lock (shared)")
    p.add_argument("--lock-path", default="", help="path of that lock file")
    args = p.parse_args(argv)
    devices = [int(x) for x in args.devices.split(",") if x]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminated: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: terminated.append(True))
    owner = ProcessId(args.owner, None if args.owner_start < 0 else args.owner_start)
    lock = GpuLock.adopt(args.lock_fd, args.lock_path, devices[0] if devices else 0) if args.lock_fd >= 0 else None
    if lock is not None:
        from rlclock.gpu.ownership import read_record

        lock.record = read_record(lock.path) or {}
    try:
        from rlclock.gpu import nvml

        for index in devices:
            nvml.NvmlDevice(index)
    except Exception as exc:
        print(f"error: {exc}", flush=True)
        return 1
    guard = _Guard(devices, owner, args.tries, args.backoff, lock)
    print("ready", flush=True)
    pipe_open = True
    buf = b""
    checks_since_eof = 0
    while True:
        if terminated:
            terminated.clear()
            if owner.alive():
                _say(
                    f"rlclock watchdog: SIGTERM ignored: process {owner.pid} still controls GPU(s) "
                    f"{', '.join(map(str, devices))} and gives them back itself; this watchdog guards them until it "
                    "ends."
                )
            else:
                return guard.give_back(owner_gone=True)
        if not pipe_open:  # the owner closed its end but may still run: watch the process (often, at first)
            time.sleep(0.01 if checks_since_eof < 100 else args.poll)
            checks_since_eof += 1
            if not owner.alive():
                return guard.give_back(owner_gone=True)
            continue
        try:
            ready, _, _ = select.select([args.fd], [], [], args.poll)
        except InterruptedError:  # pragma: no cover - PEP 475 retries select
            continue
        if not ready:
            if not owner.alive():
                return guard.give_back(owner_gone=True)
            continue
        chunk = os.read(args.fd, 4096)
        if not chunk:  # every write end is closed: the owner ended (or closed it); see the process
            pipe_open = False
            if not owner.alive():
                return guard.give_back(owner_gone=True)
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if guard.message(line.decode(errors="replace").strip()):
                return guard.give_back(owner_gone=not owner.alive())


if __name__ == "__main__":
    raise SystemExit(main())
