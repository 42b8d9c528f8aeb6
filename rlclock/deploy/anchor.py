"""Step anchors: when each training step started on the GPU, on the host's monotonic clock.

The training loop marks each step (``step()``); the GPU reaches that mark only once it has finished the
work queued before it, which may be well after the host passed it. :class:`CudaAnchors` records a CUDA
event at each mark and a helper thread waits for it (the wait releases the interpreter lock, so the
training loop does not wait). The host time at which the thread sees an event complete is late by its
wake-up delay, and later still when the thread must wait for the interpreter lock; the GPU's own event
timer is exact. So each anchor is placed as

    anchor_k = offset + gpu_k,    offset = min over recent marks j of (seen_j − gpu_j),

where ``gpu_k`` is the event's time after the first mark's event (CUDA's elapsed time) and the minimum over
a sliding window of marks picks the observation with the least delay (and follows any drift between the
GPU's timer and the host clock). Each marked step's GPU duration comes from the same events: to its end mark
(``with clk.step():``) when given, else to the next mark (divided by the steps between them). End marks are
never waited for: they are read when the next start has been seen (:data:`DEFER_S` says why the thread also
holds back then).

The controller need not mark every step (``anchor_every``): a mark's ``send`` flag says whether its anchor
goes to the switch worker; a step without a mark costs the loop nothing here. The events are taken from a
pool created when the anchors start (:data:`POOL_EVENTS`), so a mark records an event but creates none; the
helper thread puts each event back once it has read it, and the pool grows when the host runs far ahead.

:class:`HostAnchors` is the same for runs without CUDA: the anchor is the host time of the mark.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

OFFSET_WINDOW = 64
"""Marks over which the least-delayed observation sets the host/GPU clock offset."""
DEFER_S = 5e-4
"""After seeing a step start, the helper thread waits this long (seconds) before its bookkeeping and the message
to the worker: a loop that synchronises every step is launching the step's first kernels just then, with the GPU
idle, and every microsecond it waits for the interpreter lock would be GPU time lost; half a millisecond later
the GPU has work queued. The anchor's value does not change (it comes from GPU timestamps), only when the worker
learns it."""
POOL_EVENTS = 8
"""CUDA events created (and recorded once, which is when CUDA creates them) when the anchors start, so that a
mark only records one: creating an event at every mark cost the training thread tens of microseconds."""


@dataclass
class AnchorLog:
    """Per marked step, what the anchors saw.

    Attributes:
        source: ``"cuda"`` (GPU events) or ``"host"``.
        step: Step index.
        gpu_s: GPU time of the step's start mark after the first mark, seconds (host time for ``"host"``).
        seen_s: Host ``time.monotonic()`` at which the start was seen, seconds.
        anchor_s: The anchor as placed when it was seen (sent to the worker when ``sent``), seconds
            (``time.monotonic()``).
        busy_s: GPU time from the step's start mark to its end mark, seconds (NaN without an end mark).
        sent: Whether the anchor went to the switch worker (``False`` for steps timed for the report only).
        points: The points inside steps that went to the worker.
        errors: Problems the anchor thread met (it keeps going where it can).
    """

    source: str
    step: list[int] = field(default_factory=list)
    gpu_s: list[float] = field(default_factory=list)
    seen_s: list[float] = field(default_factory=list)
    anchor_s: list[float] = field(default_factory=list)
    busy_s: list[float] = field(default_factory=list)
    sent: list[bool] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    points: list[tuple[int, int, float]] = field(default_factory=list)
    """``(step, point, time_s)`` of every point inside a step that went to the worker (``time.monotonic()``)."""

    def final_anchors_s(self, window: int = OFFSET_WINDOW) -> np.ndarray:
        """Anchors recomputed with all observations: the offset of each mark is the minimum of ``seen − gpu``
        over a window centred on it (later observations can only improve earlier anchors)."""
        gpu = np.asarray(self.gpu_s, dtype=float)
        seen = np.asarray(self.seen_s, dtype=float)
        if gpu.size == 0:
            return gpu
        if self.source != "cuda":
            return seen.copy()
        obs = seen - gpu
        half = max(1, window // 2)
        out = np.empty_like(gpu)
        for k in range(gpu.size):
            out[k] = obs[max(0, k - half) : k + half + 1].min() + gpu[k]
        return out

    def periods_s(self) -> np.ndarray:
        """GPU time per step from each mark to the next one (their distance over the steps between them; NaN
        for the last), seconds."""
        gpu = np.asarray(self.gpu_s, dtype=float)
        out = np.full(gpu.size, np.nan)
        step = np.asarray(self.step, dtype=float)
        if gpu.size > 1:
            steps = np.diff(step)
            with np.errstate(divide="ignore", invalid="ignore"):
                out[:-1] = np.where(steps >= 1, np.diff(gpu) / steps, np.nan)
        return out

    def _append(self, step: int, gpu_s: float, seen_s: float, anchor_s: float, sent: bool) -> int:
        self.step.append(step)
        self.gpu_s.append(gpu_s)
        self.seen_s.append(seen_s)
        self.anchor_s.append(anchor_s)
        self.busy_s.append(float("nan"))
        self.sent.append(sent)
        return len(self.step) - 1


class HostAnchors:
    """Anchors from the host clock (no GPU): a step starts when the loop marks it.

    Args:
        on_anchor: Called with ``(step, anchor_s)`` for every mark sent.
        on_point: Called with ``(step, point, time_s)`` for every point inside a step.
    """

    source = "host"

    def __init__(
        self, on_anchor: Callable[[int, float], Any], on_point: Callable[[int, int, float], Any] | None = None
    ) -> None:
        self.on_anchor = on_anchor
        self.on_point = on_point
        self.log = AnchorLog("host")
        self._open: tuple[int, float] | None = None

    def mark_point(self, step: int, point: int) -> None:
        """The loop passes point ``point`` of step ``step`` now."""
        now = time.monotonic()
        self.log.points.append((step, point, now))
        if self.on_point is not None:
            self.on_point(step, point, now)

    def mark_start(self, step: int, send: bool = True) -> None:
        """The loop starts step ``step`` now; ``send``: tell the worker."""
        now = time.monotonic()
        self._open = (self.log._append(step, now, now, now, send), now)
        if send:
            self.on_anchor(step, now)

    def mark_end(self, step: int) -> None:
        """The loop ends step ``step`` now."""
        if self._open is not None:
            i, t0 = self._open
            self.log.busy_s[i] = time.monotonic() - t0
            self._open = None

    def close(self) -> AnchorLog:
        """The log."""
        return self.log


class CudaAnchors:
    """Anchors from CUDA events on the current stream, waited on by a helper thread (module docstring).

    Args:
        on_anchor: Called from the helper thread with ``(step, anchor_s)`` for every mark sent.
        on_point: Called from the helper thread with ``(step, point, time_s)`` for every point inside a step
            (:meth:`mark_point`), placed as anchors are.
        window: Marks of the sliding minimum that sets the clock offset.
        defer_s: Pause between seeing a step start and the rest of the thread's work, seconds.
        pool: Events created up front.
        new_event: Makes one timing event (default: a blocking CUDA event with timing); replaceable in tests.
    """

    source = "cuda"

    def __init__(
        self,
        on_anchor: Callable[[int, float], Any],
        window: int = OFFSET_WINDOW,
        defer_s: float = DEFER_S,
        pool: int = POOL_EVENTS,
        new_event: Callable[[], Any] | None = None,
        on_point: Callable[[int, int, float], Any] | None = None,
    ) -> None:
        if new_event is None:
            import torch

            def new_event() -> Any:
                return torch.cuda.Event(enable_timing=True, blocking=True)

        self.defer_s = float(defer_s)
        self.on_anchor = on_anchor
        self.on_point = on_point
        self.log = AnchorLog("cuda")
        self.created = 0
        """Events created so far (the pool's, and any made when the pool ran dry)."""
        self._new_event = new_event
        self._free: deque[Any] = deque()
        for _ in range(max(0, int(pool))):
            ev = self._create()
            ev.record()  # CUDA creates the event at its first record: do it now, not at a mark
            self._free.append(ev)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._obs: deque[float] = deque(maxlen=window)
        self._ref: Any = None
        self._thread = threading.Thread(target=self._run, name="rlclock-step-anchors", daemon=True)
        self._thread.start()

    def _create(self) -> Any:
        self.created += 1
        return self._new_event()

    def _record(self) -> Any:
        try:
            ev = self._free.pop()
        except IndexError:  # the host is further ahead of the GPU than the pool is deep
            ev = self._create()
        ev.record()
        return ev

    def _release(self, ev: Any) -> None:
        if ev is not None and ev is not self._ref:
            self._free.append(ev)

    def mark_start(self, step: int, send: bool = True) -> None:
        """Record the start of step ``step`` on the current stream; ``send``: tell the worker when it is seen."""
        self._queue.put((0, step, self._record(), send))

    def mark_end(self, step: int) -> None:
        """Record the end of step ``step`` on the current stream."""
        self._queue.put((1, step, self._record(), False))

    def mark_point(self, step: int, point: int) -> None:
        """Record point ``point`` inside step ``step`` on the current stream; the worker hears of it as soon as
        the GPU passes it (no deferral: the point times the rest of the step)."""
        self._queue.put((2, step, self._record(), point))

    def close(self, timeout_s: float = 30.0) -> AnchorLog:
        """Wait for the marks recorded so far and stop the helper thread; returns the log."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.log.errors.append(f"the anchor thread did not finish within {timeout_s:g} s")
        return self.log

    def _run(self) -> None:
        start_ev: Any = None
        end: tuple[int, Any] | None = None  # the last end mark, read once the next start is seen
        index = -1
        while True:
            item = self._queue.get()
            if item is None:
                self._finish_end(start_ev, end, index, wait=True)
                return
            kind, step, ev, send = item
            try:
                if kind == 2:
                    self._point(step, int(send), ev)
                    continue
                if kind == 1:  # an end mark: no wait now, it is complete by the time the next start is
                    if end is not None:
                        self._release(end[1])
                    end = (step, ev)
                    continue
                ev.synchronize()  # releases the interpreter lock while it waits
                seen = time.monotonic()
                if self.defer_s > 0:  # let the loop launch the step's first kernels before taking the lock
                    time.sleep(self.defer_s)
                self._finish_end(start_ev, end, index, wait=False)
                if end is not None:
                    self._release(end[1])
                    end = None
                if self._ref is None:
                    self._ref = ev
                gpu, anchor = self._place(ev, seen)
                self._release(start_ev)
                start_ev = ev
                index = self.log._append(step, gpu, seen, anchor, bool(send))
                if send:
                    self.on_anchor(step, anchor)
            except Exception as exc:  # keep anchoring later steps; the report shows the error
                if len(self.log.errors) < 10:
                    self.log.errors.append(f"step {step}: {type(exc).__name__}: {exc}")

    def _place(self, ev: Any, seen: float) -> tuple[float, float]:
        """An event seen complete at host time ``seen``: its GPU time after the first mark, and its place on the
        host clock (the least-delayed offset over the window, module docstring)."""
        gpu = self._ref.elapsed_time(ev) / 1e3 if ev is not self._ref else 0.0
        self._obs.append(seen - gpu)
        return gpu, min(self._obs) + gpu

    def _point(self, step: int, point: int, ev: Any) -> None:
        """Place a point as an anchor is placed, and tell the worker."""
        try:
            ev.synchronize()
            seen = time.monotonic()
            if self._ref is None:
                return
            _, at = self._place(ev, seen)
            self.log.points.append((step, point, at))
            if self.on_point is not None:
                self.on_point(step, point, at)
        finally:
            self._release(ev)

    def _finish_end(self, start_ev: Any, end: tuple[int, Any] | None, index: int, wait: bool) -> None:
        """Record the GPU time from the last start mark to its end mark."""
        if end is None or start_ev is None or index < 0 or self.log.step[index] != end[0]:
            return
        try:
            if wait:
                end[1].synchronize()
            elif not end[1].query():
                return
            self.log.busy_s[index] = start_ev.elapsed_time(end[1]) / 1e3
        except Exception as exc:
            if len(self.log.errors) < 10:
                self.log.errors.append(f"step {end[0]} end: {type(exc).__name__}: {exc}")
