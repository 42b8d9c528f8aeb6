"""The training process's handle on the switch worker (:mod:`rlclock.deploy.worker`).

``mode="process"`` (the default) starts ``python -m rlclock.deploy.worker`` in its own session with one
end of a socket pair: no code of the training script is re-imported (as a ``spawn`` start would do), the
worker does not receive the terminal's Ctrl-C, and it sees end-of-file however the training process ends.
``mode="thread"`` runs the same loop in a thread of the training process (its clock control is then created
in the calling thread, so ClockControl's own signal handlers are installed when that is the main thread).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rlclock.deploy.worker import (
    POINT_MESSAGE,
    STEP_MESSAGE,
    STOP_MESSAGE,
    build_control,
    describe_control,
    pattern_message,
    serve,
    worker_from_settings,
)
from rlclock.errors import DeployError, RlclockError

READY_TIMEOUT_S = 120.0
"""How long to wait for the worker process to import rlclock and open NVML, seconds."""
STOP_TIMEOUT_S = 30.0
"""How long to wait for the worker to restore the clocks and report, seconds."""
WORKER_MODES = ("process", "thread")


class WorkerHandle:
    """Starts a switch worker and talks to it.

    Args:
        settings: ``plan`` (:meth:`SwitchPlan.to_dict`), ``device`` (NVML index), ``control_clocks``,
            ``nvml`` (False: a dry run without NVML), ``read_back``, ``anchor_every`` (steps between anchors),
            ``follow_pace``; optionally ``alternatives`` (plans 1.., as ``plan``) and ``patterns``
            (:meth:`~rlclock.deploy.pattern.PlanPattern.to_list`).
        mode: ``"process"`` or ``"thread"``.

    Raises:
        DeployError: The worker could not start.
        RlclockError: The worker's clock control could not be created (the worker's own error, re-raised).
    """

    def __init__(self, settings: dict[str, Any], mode: str = "process") -> None:
        if mode not in WORKER_MODES:
            raise DeployError(f"worker mode {mode!r} is not known.", f"use one of {list(WORKER_MODES)}.")
        self.mode = mode
        self.settings = settings
        self.info: dict[str, Any] = {}
        self.result: dict[str, Any] | None = None
        self.send_errors = 0
        self._process: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        parent, child = socket.socketpair()
        self._conn = Connection(parent.detach())
        try:
            if mode == "process":
                self._start_process(child)
            else:
                self._start_thread(child)
        except BaseException:
            self._conn.close()
            raise

    # -- start -------------------------------------------------------------------------------------------
    def _start_process(self, child: socket.socket) -> None:
        fd = child.detach()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-m", "rlclock.deploy.worker", "--fd", str(fd), "--parent", str(os.getpid())]
        try:
            self._process = subprocess.Popen(
                cmd, pass_fds=(fd,), stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        finally:
            os.close(fd)
        self._conn.send(self.settings)
        if not self._conn.poll(READY_TIMEOUT_S):
            self._kill()
            raise DeployError(
                f"the clock switch worker did not start within {READY_TIMEOUT_S:g} s.",
                "check that 'python -m rlclock.deploy.worker' runs in this environment.",
            )
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError):
            self._kill()
            raise DeployError(
                "the clock switch worker process ended while starting.",
                "run 'python -m rlclock.deploy.worker --help' to see why it cannot start.",
            ) from None
        if kind == "error":
            self._process.wait(10)
            raise payload if isinstance(payload, RlclockError) else DeployError(str(payload))
        self.info = dict(payload)

    def _start_thread(self, child: socket.socket) -> None:
        conn = Connection(child.detach())
        control = build_control(self.settings, handle_signals=True)
        worker = worker_from_settings(self.settings, control)
        self.info = describe_control(control)

        def run() -> None:
            why = "error"
            error = None
            try:
                why = serve(conn, worker, None, spin=False)
            finally:
                try:
                    control.close()
                except RlclockError as exc:
                    error = str(exc)
                with contextlib.suppress(OSError, ValueError):
                    conn.send(("done", {**worker.result(), "ended": why, "restore_error": error}))
                conn.close()

        self._thread = threading.Thread(target=run, name="rlclock-switch-worker", daemon=True)
        self._thread.start()

    # -- use ---------------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        """True while the worker runs."""
        if self._process is not None:
            return self._process.poll() is None
        return self._thread is not None and self._thread.is_alive()

    @property
    def pid(self) -> int | None:
        """Process id of the worker (``None`` in thread mode)."""
        return None if self._process is None else self._process.pid

    def send_anchor(self, step: int, anchor_s: float) -> bool:
        """Tell the worker that step ``step`` started on the GPU at ``anchor_s`` (``time.monotonic()``).

        Returns:
            False if the worker can no longer be reached (counted in :attr:`send_errors`).
        """
        return self._send(STEP_MESSAGE.pack(b"S", int(step), float(anchor_s)))

    def send_point(self, step: int, point: int, point_s: float) -> bool:
        """Tell the worker that point ``point`` of step ``step`` passed on the GPU at ``point_s`` (as
        :meth:`send_anchor`)."""
        return self._send(POINT_MESSAGE.pack(b"P", int(step), int(point), float(point_s)))

    def send_pattern(self, pattern: tuple[int, ...], from_step: int) -> bool:
        """Tell the worker that from step ``from_step`` on the steps run the plans of ``pattern`` in turn (as
        :meth:`send_anchor`)."""
        return self._send(pattern_message(pattern, from_step))

    def _send(self, message: bytes) -> bool:
        try:
            with self._lock:
                self._conn.send_bytes(message)
            return True
        except (OSError, ValueError):
            self.send_errors += 1
            return False

    def stop(self) -> dict[str, Any]:
        """Tell the worker to restore the clocks and stop; returns what it did (``{}`` if it could not say)."""
        if self.result is not None:
            return self.result
        result: dict[str, Any] = {}
        try:
            with self._lock:
                self._conn.send_bytes(STOP_MESSAGE)
            while self._conn.poll(STOP_TIMEOUT_S):
                kind, payload = self._conn.recv()
                if kind == "done":
                    result = dict(payload)
                    break
        except (EOFError, OSError, ValueError):
            pass
        finally:
            self._conn.close()
            if self._process is not None:
                try:
                    self._process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self._kill()
            if self._thread is not None:
                self._thread.join(STOP_TIMEOUT_S)
        self.result = result
        return result

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()  # the worker restores on SIGTERM
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
