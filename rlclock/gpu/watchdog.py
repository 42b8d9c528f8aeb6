"""A separate process that gives the clocks and power limits back when their owner dies, even by SIGKILL.

:class:`~rlclock.gpu.clocks.ClockControl` starts one :class:`Watchdog` before it locks any clock or changes
the power limit. The owner keeps the write end of a pipe; the watchdog (``python -m rlclock.gpu.watchdog``)
reads the other end. The kernel closes the owner's end however the owner ends, so the watchdog sees
end-of-file; then, if the owner had *armed* it (clocks are locked) and not disarmed it (clocks restored), the
watchdog resets the locked core and memory clocks of its GPUs to the driver defaults, and it sets every GPU
with a pending power limit entry back to that entry's limit; then it exits. It also checks every ``poll_s``
whether the owner's process still exists, for the case where a forked child kept the pipe open. It runs in
its own session and ignores SIGINT, so a Ctrl-C meant for the owner does not take it down first; on SIGTERM
it restores (what is armed or pending) and exits.

Protocol, one line each, owner to watchdog:

* ``arm`` / ``disarm``: clocks are about to be locked / are back at the driver defaults;
* ``power <index> <watts>``: the power limit of GPU ``<index>`` is about to change; if the owner dies, set it
  back to ``<watts>`` (a decimal number; the last entry for a GPU counts);
* ``power-restored <index>``: the power limit of GPU ``<index>`` is back; nothing to restore for it;
* ``exit``: restore what is still armed or pending, and exit (the owner disarms and releases first).

Unknown or malformed lines are ignored. The watchdog prints ``ready`` once NVML is open, or
``error: <message>`` and exits.
"""

from __future__ import annotations

import argparse
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rlclock.errors import NvmlError

READY_TIMEOUT_S = 60.0
"""How long the owner waits for the watchdog to open NVML."""


class Watchdog:
    """The owner's handle on a watchdog process.

    Args:
        devices: NVML indices of the GPUs whose clocks to restore (power limits name their GPU in each entry).
        poll_s: How often the watchdog checks that the owner process still exists, seconds.

    Raises:
        NvmlError: The watchdog could not start or could not open NVML.
    """

    def __init__(self, devices: Sequence[int], poll_s: float = 0.5) -> None:
        self.devices = tuple(int(d) for d in devices)
        read_fd, self._write_fd = os.pipe()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-m", "rlclock.gpu.watchdog", "--fd", str(read_fd), "--owner", str(os.getpid()),
               "--devices", ",".join(map(str, self.devices)), "--poll", str(poll_s)]
        try:
            self.process = subprocess.Popen(cmd, pass_fds=(read_fd,), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, env=env, start_new_session=True)
        finally:
            os.close(read_fd)
        line = self._read_line(READY_TIMEOUT_S)
        if line != "ready":
            self._close_pipe()
            self.process.kill()
            self.process.wait()
            raise NvmlError(f"the clock watchdog process could not start ({line or 'no answer'}).",
                            "check that NVML works (rlclock doctor).")
        self.armed = False
        self.power_limits_w: dict[int, float] = {}  # GPU index -> limit to restore, watts

    @property
    def pid(self) -> int:
        """Process id of the watchdog."""
        return self.process.pid

    def _read_line(self, timeout_s: float) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not ready:
            return "timeout"
        return self.process.stdout.readline().decode(errors="replace").strip()

    def _send(self, message: str) -> None:
        os.write(self._write_fd, (message + "\n").encode())

    def arm(self) -> None:
        """Clocks are about to be locked: restore them if the owner dies from now on."""
        if not self.armed:
            self._send("arm")
            self.armed = True

    def disarm(self) -> None:
        """Clocks are back at the driver defaults: nothing to restore."""
        if self.armed:
            self._send("disarm")
            self.armed = False

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
        """Disarm, release every power limit, tell the watchdog to exit, and reap it."""
        if self._write_fd < 0:
            return
        try:
            self.disarm()
            for index in list(self.power_limits_w):
                self.release_power_limit(index)
            self._send("exit")
        except OSError:
            pass
        self._close_pipe()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def _close_pipe(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1


# -- the watchdog process ------------------------------------------------------------------------------

def process_alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


def _restore(devices: Sequence[int], owner: int) -> None:
    from rlclock.dvfs.spec import memory_locks_of
    from rlclock.gpu import nvml

    for index in devices:
        resets = [("core", "reset_locked_core_clocks")]
        try:  # a GPU whose memory locks are not runtime had none taken: leave a deferred lock for the job alone
            dev = nvml.NvmlDevice(index)
            mems = nvml.try_read(dev.supported_mem_clocks_mhz)
            runtime = memory_locks_of(dev.architecture(), None if isinstance(mems, str) else mems) == "runtime"
        except Exception:  # unsure: reset both, as before
            runtime = True
        if runtime:
            resets.append(("memory", "reset_locked_mem_clocks"))
        for what, fn in resets:
            try:
                getattr(nvml.NvmlDevice(index), fn)()
            except Exception as exc:  # report every failure, restore what can be restored
                print(f"rlclock watchdog: could not reset the {what} clock of GPU {index}: {exc}", file=sys.stderr)
    print(f"rlclock watchdog: process {owner} ended with locked clocks; GPU(s) "
          f"{', '.join(map(str, devices))} reset to the driver's default clocks.", file=sys.stderr)


def _restore_power_limits(power_limits_w: dict[int, float], owner: int) -> None:
    from rlclock.gpu import nvml

    done = []
    for index, power_limit_w in sorted(power_limits_w.items()):
        try:
            nvml.NvmlDevice(index).set_power_limit_w(power_limit_w)
            done.append(f"GPU {index} back to {power_limit_w:g} W")
        except Exception as exc:  # report every failure, restore what can be restored
            print(f"rlclock watchdog: could not set the power limit of GPU {index} back to {power_limit_w:g} W: "
                  f"{exc}", file=sys.stderr)
    if done:
        print(f"rlclock watchdog: process {owner} ended with a changed power limit; power limit of "
              f"{', '.join(done)}.", file=sys.stderr)


def _restore_all(armed: bool, devices: Sequence[int], power_limits_w: dict[int, float], owner: int) -> None:
    """Reset the locked clocks if armed, and set back every pending power limit."""
    if armed:
        _restore(devices, owner)
    if power_limits_w:
        _restore_power_limits(power_limits_w, owner)


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
    p = argparse.ArgumentParser(prog="python -m rlclock.gpu.watchdog")
    p.add_argument("--fd", type=int, required=True, help="read end of the owner's pipe")
    p.add_argument("--owner", type=int, required=True, help="owner process id")
    p.add_argument("--devices", required=True, help="comma-separated NVML device indices")
    p.add_argument("--poll", type=float, default=0.5, help="owner liveness check period, seconds")
    args = p.parse_args(argv)
    devices = [int(x) for x in args.devices.split(",") if x]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    terminated = []
    signal.signal(signal.SIGTERM, lambda *_: terminated.append(True))
    try:
        from rlclock.gpu import nvml

        for index in devices:
            nvml.NvmlDevice(index)
    except Exception as exc:
        print(f"error: {exc}", flush=True)
        return 1
    print("ready", flush=True)
    armed = False
    power_limits_w: dict[int, float] = {}  # GPU index -> limit to set back, watts
    buf = b""
    while True:
        if terminated:
            _restore_all(armed, devices, power_limits_w, args.owner)
            return 0
        try:
            ready, _, _ = select.select([args.fd], [], [], args.poll)
        except InterruptedError:  # pragma: no cover - PEP 475 retries select
            continue
        if not ready:
            if not process_alive(args.owner):
                _restore_all(armed, devices, power_limits_w, args.owner)
                return 0
            continue
        chunk = os.read(args.fd, 4096)
        if not chunk:  # the owner's end is closed: it exited or was killed
            _restore_all(armed, devices, power_limits_w, args.owner)
            return 0
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = line.decode(errors="replace").strip()
            if msg == "arm":
                armed = True
            elif msg == "disarm":
                armed = False
            elif msg == "exit":
                _restore_all(armed, devices, power_limits_w, args.owner)
                return 0
            elif msg.startswith("power"):
                _power_message(msg, power_limits_w)
        time.sleep(0)


if __name__ == "__main__":
    raise SystemExit(main())
