"""Safe control of one GPU's locked core and memory clocks.

:class:`ClockControl` is the only object in rlclock that changes clocks. It is opt-in, reads back what
the GPU applied, and gives the clocks back to the driver on every way out:

* ``restore()`` / ``close()`` / leaving its ``with`` block (also through an exception);
* SIGINT and SIGTERM (handlers chained to the ones installed before; main thread only);
* normal interpreter exit (``atexit``);
* SIGKILL or a crash of the owner: a watchdog *process* (:mod:`rlclock.gpu.watchdog`), started before the
  first clock is locked, resets the clocks when the owner's end of a pipe closes.

Without ``allow_clock_control=True`` it runs in observe (dry-run) mode: every request is validated,
planned and recorded — which NVML calls would be made — and the clocks are read back, but no set or
reset function is called and no watchdog is started. ``rlclock reset-clocks`` (:func:`reset_clocks`)
undoes locks left behind by anything.

Example::

    with ClockControl(0, allow_clock_control=True) as clocks:
        record = clocks.apply("1410@3201")     # lock core 1410 MHz, memory 3201 MHz
        print(record.sm_clock_mhz, record.reasons)
    # driver defaults again here
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from rlclock.dvfs.spec import MEMORY_LOCKS, memory_locks_of
from rlclock.errors import ClockControlDisabledError, ClockError, NvmlNotSupportedError, RlclockError
from rlclock.gpu import nvml
from rlclock.schedule import AUTO, ClockConfig

if TYPE_CHECKING:
    from rlclock.gpu.watchdog import Watchdog


@dataclass(frozen=True)
class ClockReadback:
    """What one :meth:`ClockControl.apply` (or restore) asked for, did, and read back.

    Attributes:
        requested: The configuration asked for (``AUTO`` for a restore).
        calls: NVML calls issued — or, in dry-run, that would have been issued — e.g.
            ``("set_locked_core_clocks(1410, 1410)", "reset_locked_mem_clocks()")``; empty when the
            configuration was already in effect.
        applied: True when the calls were made (False in dry-run).
        dry_run: Observe mode: nothing was set.
        sm_clock_mhz: SM clock read back right after, MHz (``None`` when not read back).
        mem_clock_mhz: Memory clock read back right after, MHz (``None`` when not read back).
        reasons: Clock-event reasons read back right after (empty when not read back).
        set_latency_s: Wall time spent in the NVML set/reset calls, seconds (0 in dry-run).
        time_s: ``time.monotonic()`` when the record was made, seconds.
    """

    requested: ClockConfig
    calls: tuple[str, ...]
    applied: bool
    dry_run: bool
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    reasons: tuple[str, ...]
    set_latency_s: float
    time_s: float

    @property
    def core_matches(self) -> bool | None:
        """Whether the SM clock read back equals the requested core clock (``None`` when core is auto).

        A lock is a request: under a power or thermal limit the GPU may still run below it (see ``reasons``).
        """
        if self.requested.core_mhz is None or self.sm_clock_mhz is None:
            return None
        return self.sm_clock_mhz == self.requested.core_mhz

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"requested": str(self.requested), "calls": list(self.calls), "applied": self.applied,
                "dry_run": self.dry_run, "sm_clock_mhz": self.sm_clock_mhz, "mem_clock_mhz": self.mem_clock_mhz,
                "reasons": list(self.reasons), "set_latency_s": self.set_latency_s, "time_s": self.time_s}


def plan_calls(current: ClockConfig, target: ClockConfig) -> list[tuple[str, tuple[int, ...]]]:
    """The NVML calls that take the locks from ``current`` to ``target``.

    Args:
        current: The locks in effect (``None`` domains are unlocked).
        target: The locks wanted.

    Returns:
        ``(method, args)`` pairs of :class:`~rlclock.gpu.nvml.NvmlDevice` methods, core first.
    """
    calls: list[tuple[str, tuple[int, ...]]] = []
    if target.core_mhz != current.core_mhz:
        if target.core_mhz is None:
            calls.append(("reset_locked_core_clocks", ()))
        else:
            calls.append(("set_locked_core_clocks", (target.core_mhz, target.core_mhz)))
    if target.mem_mhz != current.mem_mhz:
        if target.mem_mhz is None:
            calls.append(("reset_locked_mem_clocks", ()))
        else:
            calls.append(("set_locked_mem_clocks", (target.mem_mhz, target.mem_mhz)))
    return calls


def _fmt(call: tuple[str, tuple[int, ...]]) -> str:
    return f"{call[0]}({', '.join(map(str, call[1]))})"


class ClockControl:
    """Locks one GPU's core and memory clocks on request and always gives them back.

    Args:
        device: NVML index of the GPU.
        allow_clock_control: Opt in to setting clocks (``--control-clocks`` on the command line). Without
            it the object runs in dry-run (observe) mode.
        dry_run: Record what would be set without calling any set/reset function. Default: ``True``
            unless ``allow_clock_control``. ``dry_run=False`` without ``allow_clock_control`` is an error.
        watchdog: Start the watchdog process before the first lock (ignored in dry-run). Leave on.
        handle_signals: Restore on SIGINT/SIGTERM (installed only when created in the main thread).
        supported: Clock table to validate requests against, ``{mem_mhz: core_mhz values}``; default: read
            from NVML (no validation if the GPU does not report one).
        memory_locks: How this GPU's memory clock can be locked (``"runtime"``, ``"deferred"``, ``"none"``;
            :data:`rlclock.dvfs.spec.MEMORY_LOCKS`); default: from the architecture NVML reports and the number
            of memory clocks (:func:`rlclock.dvfs.spec.memory_locks_of`). Where it is not ``runtime``, a
            configuration may name only the memory clock in effect (read at creation), which is then left
            alone: only the core clock is locked.

    Raises:
        ClockControlDisabledError: ``dry_run=False`` without ``allow_clock_control=True``.
        GpuUnavailableError: NVML or the GPU is missing.

    All public methods are thread-safe. ``apply`` and ``restore`` return a :class:`ClockReadback`;
    ``history`` keeps every record (what a dry run "would have set").
    """

    def __init__(self, device: int = 0, *, allow_clock_control: bool = False, dry_run: bool | None = None,
                 watchdog: bool = True, handle_signals: bool = True,
                 supported: Mapping[int, Sequence[int]] | None = None, memory_locks: str | None = None) -> None:
        if dry_run is None:
            dry_run = not allow_clock_control
        if not dry_run and not allow_clock_control:
            raise ClockControlDisabledError(
                "setting clocks was requested (dry_run=False) but clock control is not enabled.",
                "pass allow_clock_control=True (--control-clocks), or keep the default observe mode.",
            )
        self._lock = threading.RLock()
        self._dry_run = bool(dry_run)
        self.device = nvml.NvmlDevice(device)
        self.device_index = self.device.index
        self._use_watchdog = watchdog
        self._watchdog: Watchdog | None = None
        self._current = AUTO
        self._dirty = False  # some lock may be in effect
        self._mem_locked = False  # this object has locked the memory clock (and must give it back)
        self._closed = False
        self._history: list[ClockReadback] = []
        self._prev_handlers: dict[int, Any] = {}
        if supported is None:
            try:
                supported = self.device.supported_clocks()
            except NvmlNotSupportedError:
                supported = None
        self.supported: dict[int, tuple[int, ...]] | None = (
            None if supported is None else {int(m): tuple(int(c) for c in v) for m, v in supported.items()})
        if memory_locks is None:
            memory_locks = memory_locks_of(self.device.architecture(),
                                           None if self.supported is None else tuple(self.supported))
        if memory_locks not in MEMORY_LOCKS:
            raise ClockError(f"memory_locks {memory_locks!r} is not one of {list(MEMORY_LOCKS)}.")
        self.memory_locks: str = memory_locks
        in_effect = None if memory_locks == "runtime" else nvml.try_read(self.device.mem_clock_mhz)
        self.memory_in_effect_mhz: int | None = in_effect if isinstance(in_effect, int) else None
        if not self._dry_run:
            atexit.register(self._at_exit)
            if handle_signals and threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    self._prev_handlers[sig] = signal.getsignal(sig)
                    signal.signal(sig, self._on_signal)

    # -- properties -------------------------------------------------------------------------------
    @property
    def dry_run(self) -> bool:
        """True in observe mode: nothing is ever set."""
        return self._dry_run

    @property
    def current(self) -> ClockConfig:
        """The configuration requested last (what is locked now, or would be in dry-run)."""
        return self._current

    @property
    def history(self) -> list[ClockReadback]:
        """Every record made so far, oldest first (a copy)."""
        with self._lock:
            return list(self._history)

    @property
    def watchdog_pid(self) -> int | None:
        """Process id of the watchdog, once started."""
        return None if self._watchdog is None else self._watchdog.pid

    def start_watchdog(self) -> int | None:
        """Start the watchdog process now rather than at the first lock (which would wait for it to open NVML).

        Returns:
            The watchdog's process id, or ``None`` in dry-run mode or without a watchdog.
        """
        with self._lock:
            self._check_open()
            if self._dry_run or not self._use_watchdog:
                return None
            if self._watchdog is None:
                from rlclock.gpu.watchdog import Watchdog

                self._watchdog = Watchdog([self.device_index])
            return self._watchdog.pid

    # -- validation -------------------------------------------------------------------------------
    def validate(self, config: ClockConfig | str) -> ClockConfig:
        """The parsed configuration, or :class:`ClockError` if this GPU does not support it."""
        c = ClockConfig.parse(config)
        if c.mem_mhz is not None and self.memory_locks != "runtime" and c.mem_mhz != self.memory_in_effect_mhz:
            held = (f"the memory clock in effect ({self.memory_in_effect_mhz} MHz)" if self.memory_in_effect_mhz
                    else "core clocks only")
            raise ClockError(
                f"GPU {self.device_index} ({self.device.name}) cannot lock its memory clock while running "
                f"({self.memory_locks} memory locks): memory {c.mem_mhz} MHz was asked for.",
                f"plan {held}; a different memory clock is a whole-job choice (on Hopper: nvidia-smi "
                "--lock-memory-clocks-deferred, applied when the GPU is next initialised).")
        if self.supported is None or c.is_auto:
            return c
        mems = sorted(self.supported, reverse=True)
        if c.mem_mhz is not None and c.mem_mhz not in self.supported:
            raise ClockError(f"memory clock {c.mem_mhz} MHz is not supported by GPU {self.device_index} "
                             f"({self.device.name}).", f"use one of {mems} MHz.")
        if c.core_mhz is not None:
            cores = self.supported[c.mem_mhz if c.mem_mhz is not None else mems[0]]
            if c.core_mhz not in cores:
                raise ClockError(
                    f"core clock {c.core_mhz} MHz is not supported at memory "
                    f"{c.mem_mhz if c.mem_mhz is not None else mems[0]} MHz by GPU {self.device_index} "
                    f"({self.device.name}).", f"use one of {min(cores)}–{max(cores)} MHz from the supported table.")
        return c

    # -- control ----------------------------------------------------------------------------------
    def apply(self, config: ClockConfig | str, read_back: bool = True) -> ClockReadback:
        """Lock the clocks of ``config`` (``auto`` domains unlocked) and read back what the GPU runs at.

        Args:
            config: A :class:`ClockConfig` or its text form (``"1410@3201"``, ``"auto@2201"``, ``"auto"``).
            read_back: Read clocks and reasons after the change (three NVML reads; skip in hot loops).

        Returns:
            The record: calls made (or planned in dry-run), clocks and reasons read back.

        Raises:
            ClockError: The configuration is not supported, or the object is closed.
            ClockPermissionError: Not allowed to set clocks (needs root).
            NvmlNotSupportedError: This GPU cannot lock that clock domain.
        """
        c = self.validate(config)
        with self._lock:
            self._check_open()
            return self._change(c, read_back)

    def restore(self) -> ClockReadback:
        """Give the clocks back to the driver (when not in dry-run, always resets the core lock, and the memory lock
        where memory locks are runtime).

        Returns:
            The record of the restore (``requested`` is ``auto``).
        """
        with self._lock:
            return self._restore()

    def read(self) -> ClockReadback:
        """Read the clocks and reasons now, changing nothing."""
        with self._lock:
            return self._record(self._current, (), False, 0.0)

    def close(self) -> None:
        """Restore the clocks, stop the watchdog and remove the signal handlers. Idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                self._restore()
            finally:
                self._closed = True
                if self._watchdog is not None:
                    self._watchdog.stop()
                    self._watchdog = None
                self._unhook()

    def __enter__(self) -> ClockControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "dry-run" if self._dry_run else "live"
        return f"ClockControl(GPU {self.device_index} {self.device.name!r}, {mode}, current {self._current})"

    # -- internals --------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ClockError(f"the clock control of GPU {self.device_index} is closed.",
                             "create a new ClockControl.")

    def _locks(self, config: ClockConfig) -> ClockConfig:
        """The locks a configuration takes on this GPU: its memory part only where memory locks are runtime."""
        return config if self.memory_locks == "runtime" else ClockConfig(config.core_mhz, None)

    def _change(self, target: ClockConfig, read_back: bool = True) -> ClockReadback:
        calls = plan_calls(self._locks(self._current), self._locks(target))
        latency = 0.0
        if calls and not self._dry_run:
            if any(name.startswith("set_") for name, _ in calls):
                self._arm()
            self._dirty = True
            t0 = time.perf_counter()
            core, mem = self._current.core_mhz, self._current.mem_mhz
            for name, args in calls:  # on an error, _current keeps what was applied before it
                try:
                    getattr(self.device, name)(*args)
                    if name == "set_locked_mem_clocks":
                        self._mem_locked = True
                except NvmlNotSupportedError as exc:
                    if name != "set_locked_mem_clocks":
                        raise
                    self.memory_locks = "deferred"  # refuse the next ones before any call; keep the one in effect
                    in_effect = nvml.try_read(self.device.mem_clock_mhz)
                    self.memory_in_effect_mhz = in_effect if isinstance(in_effect, int) else None
                    raise ClockError(
                        f"GPU {self.device_index} ({self.device.name}) refused a runtime memory lock ({exc}).",
                        "plan core clocks only (the memory clock in effect); on Hopper a memory clock is locked "
                        "deferred for a whole job (nvidia-smi --lock-memory-clocks-deferred).") from None
                if "core" in name:
                    core = args[0] if args else None
                else:
                    mem = args[0] if args else None
                self._current = ClockConfig(core, mem)
            latency = time.perf_counter() - t0
        self._current = target
        if target.is_auto and not self._dry_run:
            self._dirty = False
            if self._watchdog is not None:
                self._watchdog.disarm()
        return self._record(target, tuple(_fmt(c) for c in calls), bool(calls) and not self._dry_run, latency,
                            read_back)

    def _restore(self) -> ClockReadback:
        if self._dry_run:
            rec = self._record(AUTO, tuple(_fmt(c) for c in plan_calls(self._locks(self._current), AUTO)), False, 0.0)
            self._current = AUTO
            return rec
        calls: list[tuple[str, tuple[int, ...]]] = []
        latency = 0.0
        if self._dirty or not self._current.is_auto:
            calls = [("reset_locked_core_clocks", ())]
            if self.memory_locks == "runtime" or self._mem_locked:  # never touch a memory lock this object
                calls.append(("reset_locked_mem_clocks", ()))    # cannot have taken
            t0 = time.perf_counter()
            errors: list[RlclockError] = []
            for name, args in calls:
                try:
                    getattr(self.device, name)(*args)
                except NvmlNotSupportedError:
                    pass  # that domain cannot be locked, so it is not locked
                except RlclockError as exc:
                    errors.append(exc)
            latency = time.perf_counter() - t0
            if errors:
                raise errors[0]
            self._dirty = False
            self._mem_locked = False
            if self._watchdog is not None:
                self._watchdog.disarm()
        self._current = AUTO
        return self._record(AUTO, tuple(_fmt(c) for c in calls), bool(calls), latency)

    def _record(self, requested: ClockConfig, calls: tuple[str, ...], applied: bool, latency: float,
                read_back: bool = True) -> ClockReadback:
        if read_back:
            s = self.device.clocks()
            sm, mem, reasons = s.sm_clock_mhz, s.mem_clock_mhz, s.reasons
        else:
            sm, mem, reasons = None, None, ()
        rec = ClockReadback(requested, calls, applied, self._dry_run, sm, mem, reasons, latency, time.monotonic())
        self._history.append(rec)
        return rec

    def _arm(self) -> None:
        if not self._use_watchdog:
            return
        if self._watchdog is None:
            from rlclock.gpu.watchdog import Watchdog

            self._watchdog = Watchdog([self.device_index])
        self._watchdog.arm()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        try:
            self.close()
        except Exception as exc:  # the signal must still be delivered
            print(f"rlclock: could not restore the clocks of GPU {self.device_index}: {exc}", flush=True)
        prev = self._prev_handlers.get(signum, signal.SIG_DFL)
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_DFL:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _unhook(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig, prev in self._prev_handlers.items():
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(sig, prev)
        self._prev_handlers.clear()
        atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        try:
            self.close()
        except RlclockError as exc:
            print(f"rlclock: could not restore the clocks of GPU {self.device_index}: {exc}")


def reset_clocks(devices: Sequence[int] | None = None, dry_run: bool = False) -> list[str]:
    """Reset the locked core and memory clocks of ``devices`` (default: all GPUs) to the driver defaults.

    Args:
        devices: NVML indices; ``None`` for every GPU.
        dry_run: Only say what would be reset.

    Returns:
        One line per GPU saying what was done.

    Raises:
        ClockPermissionError: Not allowed to reset clocks (needs root).
        GpuUnavailableError: NVML or the GPU is missing.
    """
    indices = list(range(nvml.device_count())) if devices is None else list(devices)
    lines: list[str] = []
    for index in indices:
        dev = nvml.NvmlDevice(index)
        if dry_run:
            lines.append(f"GPU {index} ({dev.name}): would reset the locked core and memory clocks.")
            continue
        done = []
        for label, fn in (("core", dev.reset_locked_core_clocks), ("memory", dev.reset_locked_mem_clocks)):
            try:
                fn()
                done.append(label)
            except NvmlNotSupportedError:
                pass
        s = dev.clocks()
        lines.append(f"GPU {index} ({dev.name}): reset the locked {' and '.join(done) or 'no'} clock(s); now SM "
                     f"{s.sm_clock_mhz} MHz, memory {s.mem_clock_mhz} MHz.")
    return lines
