"""Owner processes for the fault tests: each holds a live ClockControl on the fake GPU and obeys the test.

Starting a Python process that imports rlclock takes about half a second, too long for a property test that starts
an owner per example. So one *host* process (``python owners.py``) imports rlclock once and forks a fresh owner on
each request; the test talks to every owner over its own socket pair (one end passed to the host with the request).
The host reaps its children at once, so a killed owner is gone, not a zombie. Every owner is a real process with its
own watchdog: kills, signals and pipe ends behave as they do for a user's training run.

An owner's stderr (and so its watchdog's) goes to a file the test reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REPLY_TIMEOUT_S = 30.0


class OwnerError(AssertionError):
    """An owner did not answer as the protocol says."""


class Owner:
    """The test's handle on one owner process."""

    def __init__(self, conn: Connection, pid: int, stderr: Path) -> None:
        self.conn = conn
        self.pid = pid
        self.stderr_path = stderr
        self.started: dict[str, Any] = {}
        self.error: tuple[str, str] | None = None  # (error class, message) when the ClockControl was refused

    def ask(self, *request: Any, timeout_s: float = REPLY_TIMEOUT_S) -> Any:
        """Send a request, return the owner's answer: ``("ok", value)`` or ``("error", class name, message)``."""
        self.conn.send(request)
        if not self.conn.poll(timeout_s):
            raise OwnerError(f"owner {self.pid} did not answer {request!r} in {timeout_s} s: {self.stderr()}")
        return self.conn.recv()

    def ok(self, *request: Any) -> Any:
        """Send a request that must succeed; return its value."""
        answer = self.ask(*request)
        if answer[0] != "ok":
            raise OwnerError(f"owner {self.pid}: {request!r} failed: {answer!r}")
        return answer[1]

    @property
    def watchdog_pid(self) -> int | None:
        return self.ok("watchdog")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (nothing if the owner has ended already: one refused ends at once)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def close_conn(self) -> None:
        self.conn.close()


class OwnerHost:
    """A process that forks owner processes on request (see the module docstring)."""

    def __init__(self) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"  # a single-threaded host forks safely
        for name in ("FAKE_NVML_STATE", "RLCLOCK_NVML_MODULE", "RLCLOCK_LOCK_DIR"):
            env.pop(name, None)  # each owner gets the test's own, with its request
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__)), str(child.fileno())],
            pass_fds=(child.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
        )
        child.close()
        self.sock = parent
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self.count = 0

    def spawn(self, env: dict[str, str], stderr: Path, **options: Any) -> Owner:
        """Fork an owner with the fake NVML and lock directory of ``env``; it builds a live ClockControl on GPU 0
        (``options``: ``watchdog``, ``handle_signals``, ``tries``, ``backoff_s``, ``poll_s``)."""
        mine, theirs = socket.socketpair()
        self.count += 1
        request = {"env": env, "stderr": str(stderr), "options": options}
        socket.send_fds(self.sock, [json.dumps(request).encode() + b"\n"], [theirs.fileno()])
        theirs.close()
        line = b""
        while not line.endswith(b"\n"):
            chunk = self.sock.recv(64)
            if not chunk:
                raise OwnerError("the owner host ended")
            line += chunk
        conn = Connection(mine.detach())
        owner = Owner(conn, int(line), stderr)
        if not conn.poll(REPLY_TIMEOUT_S):
            raise OwnerError(f"owner {owner.pid} did not start: {owner.stderr()}")
        answer = conn.recv()
        if answer[0] == "ready":
            owner.started = answer[1]
        else:
            owner.error = (answer[1], answer[2])
        return owner

    def close(self) -> None:
        self.sock.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def wait_gone(pid: int | None, timeout_s: float = 20.0) -> bool:
    """True once process ``pid`` no longer runs (gone, or a zombie nobody reaped)."""
    if pid is None:
        return True
    end = time.monotonic() + timeout_s
    while _runs(pid):
        if time.monotonic() >= end:
            return False
        time.sleep(0.01)
    return True


def _runs(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


# -- the host process ------------------------------------------------------------------------------------------------


def _serve_owner(conn: Connection, options: dict[str, Any]) -> None:
    """Run in a forked owner: build the ClockControl, then obey requests until told to end."""
    from rlclock.errors import RlclockError
    from rlclock.gpu import clocks as clocks_module
    from rlclock.gpu import nvml, ownership

    nvml.use_module(None)
    for name, attr in (("tries", "RESTORE_TRIES"), ("backoff_s", "RESTORE_BACKOFF_S")):
        if name in options:
            setattr(ownership, attr, options[name])
    try:
        clocks = clocks_module.ClockControl(
            0,
            control_clocks=True,
            watchdog=options.get("watchdog", True),
            handle_signals=options.get("handle_signals", True),
        )
        if options.get("start_watchdog", True) and options.get("watchdog", True):
            clocks.start_watchdog()
    except RlclockError as exc:
        conn.send(("error", type(exc).__name__, str(exc)))
        return
    conn.send(("ready", {"pid": os.getpid(), "watchdog": clocks.watchdog_pid}))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            os._exit(0)  # the test went away: end without a word (as a crash would)
        op, *args = request
        try:
            if op == "apply":
                value: Any = str(clocks.apply(args[0], read_back=False).requested)
            elif op == "power":
                value = clocks.set_power_limit(args[0], read_back=False).requested_w
            elif op == "restore":
                value = str(clocks.restore().requested)
            elif op == "close":
                clocks.close()
                value = None
            elif op == "watchdog":
                value = clocks.watchdog_pid
            elif op == "restarts":
                value = clocks.watchdog_restarts
            elif op == "fork":  # a child forked without exec (as a data loader's worker) tries the clocks, then ends
                value = _forked_child_tries(clocks)
            elif op == "exit":  # a normal end without close(): what atexit does
                import atexit

                conn.send(("ok", None))
                atexit._run_exitfuncs()
                os._exit(0)
            else:
                raise ValueError(f"unknown request {op!r}")
            conn.send(("ok", value))
        except RlclockError as exc:
            conn.send(("error", type(exc).__name__, str(exc)))


def _forked_child_tries(clocks: Any) -> str:
    """Fork; the child locks a clock through its parent's ClockControl, then ends normally (atexit runs). Returns what
    the child met (the error's text, or ``"applied"``)."""
    import atexit

    from rlclock.errors import RlclockError

    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            clocks.apply("1410@2201", read_back=False)
            text = "applied"
        except RlclockError as exc:
            text = str(exc)
        atexit._run_exitfuncs()
        os.write(w, text.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        text = f.read().decode()
    os.waitpid(child, 0)
    return text


def _child(request: dict[str, Any], fd: int) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the owner waits for its own watchdog
    os.environ.update(request["env"])
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(err, 2)
    os.close(err)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    conn = Connection(fd)
    try:
        _serve_owner(conn, request["options"])
    except BaseException as exc:  # report anything to the test, then end
        print(f"owner failed: {exc!r}", file=sys.stderr)
        os._exit(1)
    os._exit(0)


def host_main(fd: int) -> int:
    """The host: import once, fork an owner per request."""
    import rlclock.gpu.clocks  # noqa: F401 - imported once, before any fork

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel: a killed owner is gone
    sock = socket.socket(fileno=fd)
    buf = b""
    fds: list[int] = []
    while True:
        msg, got, _, _ = socket.recv_fds(sock, 65536, 1)
        if not msg:
            return 0
        buf += msg
        fds += got
        if not buf.endswith(b"\n"):
            continue
        request, buf = json.loads(buf), b""
        fd = fds.pop(0)
        pid = os.fork()
        if pid == 0:
            sock.close()
            _child(request, fd)
        os.close(fd)
        sock.sendall(f"{pid}\n".encode())


if __name__ == "__main__":
    raise SystemExit(host_main(int(sys.argv[1])))
