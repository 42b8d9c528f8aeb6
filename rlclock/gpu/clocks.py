"""Safe control of one GPU's locked core and memory clocks and of its board power limit.

:class:`ClockControl` is the only object in rlclock that changes the GPU's settings: locked clocks and the
board power limit (a whole-job setting). It is opt-in, reads back what the GPU applied, and gives the clocks
back to the driver — and the power limit back to the one in effect before it first changed it — on every
way out:

* ``restore()`` / ``close()`` / leaving its ``with`` block (also through an exception);
* SIGINT and SIGTERM (handlers chained to the ones installed before; main thread only);
* normal interpreter exit (``atexit``);
* SIGKILL or a crash of the owner: a watchdog *process* (:mod:`rlclock.gpu.watchdog`), started before the
  first clock is locked or the power limit is changed, resets what its owner locked and sets the power limit back
  once the owner's process has ended.

Under faults (docs/safety.md says what is guaranteed, how, and what is not):

* **One process per GPU.** A live control takes the GPU's lock first (:class:`~rlclock.gpu.ownership.GpuLock`, keyed
  by the GPU's UUID, seen by every user): a second rlclock process is refused in one line naming the first
  (:class:`~rlclock.errors.GpuBusyError`); what a process that has ended left changed is given back by the next one.
* **A dead guard is noticed.** A thread waits on the watchdog; if it ends, a new one is started at once (one line on
  stderr), and every change checks first that the watchdog runs. After :data:`MAX_WATCHDOG_RESTARTS` replacements,
  or when none starts, the control gives everything back and refuses further changes.
* **A failed restore is retried and reported truthfully.** Each restore call is tried up to
  :data:`~rlclock.gpu.ownership.RESTORE_TRIES` times; if something is still left, :class:`~rlclock.errors.
  ClockRestoreError` says what (``the core clock is left locked at 1200 MHz``) and the fix (``rlclock
  reset-clocks``); the watchdog stays on guard and the GPU stays locked, so the restore is tried again when the
  process ends.
* **A child forked without exec** (a data loader's worker) cannot change its parent's clocks, does not restore them
  when it ends, and does not hold the lock or the watchdog's pipe.

Without ``control_clocks=True`` it runs as a dry run: every request is validated,
planned and recorded — which NVML calls would be made — and the clocks and power limit are read back, but
no set or reset function is called, no lock is taken and no watchdog is started. ``rlclock reset-clocks``
(:func:`reset_clocks`) undoes locks left behind by anything and sets changed power limits back to the
driver's default.

Example::

    with ClockControl(0, control_clocks=True) as clocks:
        clocks.set_power_limit(550)            # whole-job board power limit, watts
        record = clocks.apply("1410@3201")     # lock core 1410 MHz, memory 3201 MHz
        print(record.sm_clock_mhz, record.reasons)
    # driver default clocks and the power limit found before, again here
"""

from __future__ import annotations

import atexit
import contextlib
import math
import numbers
import os
import signal
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from rlclock.deprecation import renamed_keyword
from rlclock.dvfs.spec import MEMORY_LOCKS, memory_locks_of
from rlclock.errors import (
    ClockControlDisabledError,
    ClockError,
    ClockPermissionError,
    ClockRestoreError,
    GpuBusyError,
    NvmlNotSupportedError,
    RlclockError,
)
from rlclock.gpu import nvml, ownership
from rlclock.gpu.ownership import GpuLock, ProcessId, describe_exit, gpu_key, retry, tries_note
from rlclock.log import get_logger
from rlclock.schedule import AUTO, ClockConfig

if TYPE_CHECKING:
    from rlclock.gpu.watchdog import Watchdog

_log = get_logger(__name__)
MAX_WATCHDOG_RESTARTS = 5
"""How many times a control replaces a watchdog that ended before it gives everything back and refuses changes."""

_RESET = {"core": "reset_locked_core_clocks", "mem": "reset_locked_mem_clocks"}
_DOMAIN_NAME = {"core": "core", "mem": "memory"}
_LIVE: weakref.WeakSet[ClockControl] = weakref.WeakSet()  # live controls of this process (for fork)


@dataclass(frozen=True)
class _Left:
    """Something a restore could not give back: the domain (``core``, ``mem``, ``power``), what is left (for the
    message), the tries made and the last error."""

    domain: str
    what: str
    tries: int
    error: RlclockError


def _say(line: str) -> None:
    """One line (what the control did on its own): a warning on the library's logger."""
    _log.warning("%s", " ".join(line.split()))


@dataclass(frozen=True)
class ClockReadback:
    """What one :meth:`ClockControl.apply` (or restore) asked for, did, and read back.

    Attributes:
        requested: The configuration asked for (``AUTO`` for a restore).
        calls: NVML calls issued — or, in dry-run, that would have been issued — e.g.
            ``("set_locked_core_clocks(1410, 1410)", "reset_locked_mem_clocks()")``; empty when the
            configuration was already in effect.
        applied: True when the calls were made (False in dry-run).
        dry_run: A dry run: nothing was set.
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
        return {
            "requested": str(self.requested),
            "calls": list(self.calls),
            "applied": self.applied,
            "dry_run": self.dry_run,
            "sm_clock_mhz": self.sm_clock_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "reasons": list(self.reasons),
            "set_latency_s": self.set_latency_s,
            "time_s": self.time_s,
        }


@dataclass(frozen=True)
class PowerLimitReadback:
    """What one :meth:`ClockControl.set_power_limit` (or the restore of the power limit) asked for, did, and read
    back.

    Attributes:
        requested_w: The power limit asked for, watts; ``None`` for the one found (a restore).
        found_w: The power limit in effect before the control first changed it, watts (``None`` until a limit was
            asked for).
        calls: NVML calls issued — or, in dry-run, that would have been issued — e.g. ``("set_power_limit_w(650)",)``;
            empty when the limit was already in effect.
        applied: True when the calls were made (False in dry-run).
        dry_run: A dry run: nothing was set.
        power_limit_w: Power limit read back right after, watts (``None`` when not read back or not readable).
        set_latency_s: Wall time spent in the NVML set call, seconds (0 in dry-run).
        time_s: ``time.monotonic()`` when the record was made, seconds.
    """

    requested_w: float | None
    found_w: float | None
    calls: tuple[str, ...]
    applied: bool
    dry_run: bool
    power_limit_w: float | None
    set_latency_s: float
    time_s: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "requested_w": self.requested_w,
            "found_w": self.found_w,
            "calls": list(self.calls),
            "applied": self.applied,
            "dry_run": self.dry_run,
            "power_limit_w": self.power_limit_w,
            "set_latency_s": self.set_latency_s,
            "time_s": self.time_s,
        }


def _watts(power_w: float) -> str:
    """A power in watts as NVML can set it (to the milliwatt), without trailing zeros: ``650``, ``612.5``."""
    return f"{power_w:.3f}".rstrip("0").rstrip(".")


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
    """Locks one GPU's core and memory clocks and sets its board power limit on request, and always gives them
    back (the clocks to the driver, the power limit to the one found before the first change).

    Args:
        device: NVML index of the GPU.
        control_clocks: Opt in to setting clocks (``--control-clocks`` on the command line). Without it the
            object runs as a dry run: it records what would be set and calls no set/reset function.
        allow_clock_control: Deprecated name of ``control_clocks``.
        dry_run: Deprecated: ``dry_run=True`` is ``control_clocks=False``; ``dry_run=False`` without
            ``control_clocks`` is an error.
        watchdog: Start the watchdog process before the first lock or power limit change (ignored in dry-run).
            Leave on.
        handle_signals: Restore on SIGINT/SIGTERM (installed only when created in the main thread).
        supported: Clock table to validate requests against, ``{mem_mhz: core_mhz values}``; default: read
            from NVML (no validation if the GPU does not report one).
        memory_locks: How this GPU's memory clock can be locked (``"runtime"``, ``"deferred"``, ``"none"``;
            :data:`rlclock.dvfs.spec.MEMORY_LOCKS`); default: from the architecture NVML reports and the number
            of memory clocks (:func:`rlclock.dvfs.spec.memory_locks_of`). Where it is not ``runtime``, a
            configuration may name only the memory clock in effect (read at creation), which is then left
            alone: only the core clock is locked.

    Raises:
        ClockControlDisabledError: ``dry_run=False`` without ``control_clocks=True``.
        GpuBusyError: Live, and another rlclock process controls this GPU.
        ClockRestoreError: Live, and what a process that has ended left changed on this GPU could not be given back.
        GpuUnavailableError: NVML or the GPU is missing.

    All public methods are thread-safe. ``apply`` and ``restore`` return a :class:`ClockReadback`;
    ``history`` keeps every record (what a dry run "would have set"). ``set_power_limit`` returns a
    :class:`PowerLimitReadback`, kept in ``power_limit_history`` with the records of its restores.
    """

    def __init__(
        self,
        device: int = 0,
        *,
        control_clocks: bool = False,
        watchdog: bool = True,
        handle_signals: bool = True,
        supported: Mapping[int, Sequence[int]] | None = None,
        memory_locks: str | None = None,
        allow_clock_control: bool | None = None,
        dry_run: bool | None = None,
    ) -> None:
        if allow_clock_control is not None:
            renamed_keyword("ClockControl", "allow_clock_control", "control_clocks", "0.2.0")
            control_clocks = control_clocks or allow_clock_control
        if dry_run is not None:
            renamed_keyword("ClockControl", "dry_run", "control_clocks", "0.2.0")
            if not dry_run and not control_clocks:
                raise ClockControlDisabledError(
                    "setting clocks was requested (dry_run=False) but clock control is not enabled.",
                    "pass control_clocks=True (--control-clocks), or keep the default dry run.",
                )
        dry_run = not control_clocks if dry_run is None else dry_run
        self._lock = threading.RLock()
        self._dry_run = bool(dry_run)
        self.device = nvml.NvmlDevice(device)
        self.device_index = self.device.index
        self._owner = ProcessId.current()
        self._foreign = False  # a child forked from the owner: this object is not its own
        self._use_watchdog = watchdog
        self._watchdog: Watchdog | None = None
        self._watchdog_restarts = 0
        self._refusal: str | None = None  # why changes are refused (the watchdog could not be kept running)
        self._gpu_lock: GpuLock | None = None
        self._current = AUTO
        self._dirty = False  # some lock may be in effect
        self._armed: set[str] = set()  # clock domains that may be locked by this object ("core", "mem")
        self._mem_locked = False  # this object has locked the memory clock (and must give it back)
        self._closed = False  # no more changes
        self._released = False  # everything given back, watchdog stopped, lock released
        self._history: list[ClockReadback] = []
        self._power_found_w: float | None = None  # the limit in effect before the first request
        self._power_limit_w: float | None = None  # the limit requested last (in effect, or would be in dry-run)
        self._power_changed = False  # live: the limit in effect may differ from the one found
        self._power_range_w: tuple[float, float] | None = None
        self._power_history: list[PowerLimitReadback] = []
        self._prev_handlers: dict[int, Any] = {}
        if supported is None:
            try:
                supported = self.device.supported_clocks()
            except NvmlNotSupportedError:
                supported = None
        self.supported: dict[int, tuple[int, ...]] | None = (
            None if supported is None else {int(m): tuple(int(c) for c in v) for m, v in supported.items()}
        )
        if memory_locks is None:
            memory_locks = memory_locks_of(
                self.device.architecture(), None if self.supported is None else tuple(self.supported)
            )
        if memory_locks not in MEMORY_LOCKS:
            raise ClockError(f"memory_locks {memory_locks!r} is not one of {list(MEMORY_LOCKS)}.")
        self.memory_locks: str = memory_locks
        in_effect = None if memory_locks == "runtime" else nvml.try_read(self.device.mem_clock_mhz)
        self.memory_in_effect_mhz: int | None = in_effect if isinstance(in_effect, int) else None
        if not self._dry_run:
            self._take_gpu()
            _LIVE.add(self)
            atexit.register(self._at_exit)
            if handle_signals and threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    self._prev_handlers[sig] = signal.getsignal(sig)
                    signal.signal(sig, self._on_signal)

    # -- properties -------------------------------------------------------------------------------
    @property
    def dry_run(self) -> bool:
        """True in a dry run: nothing is ever set."""
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
    def power_limit_history(self) -> list[PowerLimitReadback]:
        """Every power limit record made so far (requests and restores), oldest first (a copy)."""
        with self._lock:
            return list(self._power_history)

    @property
    def power_limit_found_w(self) -> float | None:
        """The power limit in effect before this object first changed it, watts (``None`` until one was asked for)."""
        return self._power_found_w

    @property
    def power_limit_w(self) -> float | None:
        """The power limit requested last, watts (in effect now, or would be in dry-run; ``None`` before any)."""
        return self._power_limit_w

    @property
    def watchdog_pid(self) -> int | None:
        """Process id of the watchdog while it runs (``None`` before it starts, after it stops, or while it is
        being replaced)."""
        wd = self._watchdog
        return wd.pid if wd is not None and wd.alive else None

    @property
    def watchdog_restarts(self) -> int:
        """How many times a watchdog that ended was replaced."""
        return self._watchdog_restarts

    @property
    def lock_path(self) -> str | None:
        """The GPU's lock file while this control holds it (live mode)."""
        return None if self._gpu_lock is None else str(self._gpu_lock.path)

    def start_watchdog(self) -> int | None:
        """Start the watchdog process now rather than at the first lock (which would wait for it to open NVML).

        Returns:
            The watchdog's process id, or ``None`` in dry-run mode or without a watchdog.
        """
        self._check_owner()
        with self._lock:
            self._check_open()
            if self._dry_run or not self._use_watchdog:
                return None
            wd = self._live_watchdog()
            return None if wd is None else wd.pid

    # -- validation -------------------------------------------------------------------------------
    def validate(self, config: ClockConfig | str) -> ClockConfig:
        """The parsed configuration, or :class:`ClockError` if this GPU does not support it."""
        c = ClockConfig.parse(config)
        if c.mem_mhz is not None and self.memory_locks != "runtime" and c.mem_mhz != self.memory_in_effect_mhz:
            held = (
                f"the memory clock in effect ({self.memory_in_effect_mhz} MHz)"
                if self.memory_in_effect_mhz
                else "core clocks only"
            )
            raise ClockError(
                f"GPU {self.device_index} ({self.device.name}) cannot lock its memory clock while running "
                f"({self.memory_locks} memory locks): memory {c.mem_mhz} MHz was asked for.",
                f"plan {held}; a different memory clock is a whole-job choice (on Hopper: nvidia-smi "
                "--lock-memory-clocks-deferred, applied when the GPU is next initialised).",
            )
        if self.supported is None or c.is_auto:
            return c
        mems = sorted(self.supported, reverse=True)
        if c.mem_mhz is not None and c.mem_mhz not in self.supported:
            raise ClockError(
                f"memory clock {c.mem_mhz} MHz is not supported by GPU {self.device_index} ({self.device.name}).",
                f"use one of {mems} MHz.",
            )
        if c.core_mhz is not None:
            cores = self.supported[c.mem_mhz if c.mem_mhz is not None else mems[0]]
            if c.core_mhz not in cores:
                raise ClockError(
                    f"core clock {c.core_mhz} MHz is not supported at memory "
                    f"{c.mem_mhz if c.mem_mhz is not None else mems[0]} MHz by GPU {self.device_index} "
                    f"({self.device.name}).",
                    f"use one of {min(cores)}–{max(cores)} MHz from the supported table.",
                )
        return c

    def validate_power_limit(self, power_limit_w: float | None) -> float | None:
        """The power limit rounded to the milliwatt NVML sets, watts (``None`` stays ``None``: the limit found).

        Raises:
            ClockError: Not a finite number, or outside the range of limits this GPU accepts.
            NvmlNotSupportedError: This GPU does not report a settable range: its power limit cannot be changed.
        """
        if power_limit_w is None:
            return None
        gpu = f"GPU {self.device_index} ({self.device.name})"
        if (
            isinstance(power_limit_w, bool)
            or not isinstance(power_limit_w, numbers.Real)
            or not math.isfinite(power_limit_w)
        ):
            raise ClockError(
                f"power limit {power_limit_w!r} for {gpu} is not a finite number of watts.",
                "pass watts as a number, e.g. 550, or None for the limit in effect before.",
            )
        with self._lock:
            if self._power_range_w is None:
                try:
                    self._power_range_w = self.device.power_limit_range_w()
                except NvmlNotSupportedError:
                    raise NvmlNotSupportedError(
                        f"the power limit of {gpu} cannot be changed through NVML: the GPU or its driver reports no "
                        "settable range.",
                        "leave the power limit unset (None) on this GPU; rlclock doctor shows what it supports.",
                    ) from None
            lo, hi = self._power_range_w
        w = round(float(power_limit_w), 3)
        if not lo <= w <= hi:
            raise ClockError(
                f"power limit {_watts(w)} W is outside the range of {gpu}: {_watts(lo)}–{_watts(hi)} W.",
                f"ask for a limit within {_watts(lo)}–{_watts(hi)} W (rlclock doctor shows the range).",
            )
        return w

    # -- control ----------------------------------------------------------------------------------
    def apply(self, config: ClockConfig | str, read_back: bool = True) -> ClockReadback:
        """Lock the clocks of ``config`` (``auto`` domains unlocked) and read back what the GPU runs at.

        Args:
            config: A :class:`ClockConfig` or its text form (``"1410@3201"``, ``"auto@2201"``, ``"auto"``).
            read_back: Read clocks and reasons after the change (three NVML reads; skip in hot loops).

        Returns:
            The record: calls made (or planned in dry-run), clocks and reasons read back.

        Raises:
            ClockError: The configuration is not supported, the object is closed, it belongs to the process this
                one was forked from, or its watchdog could not be kept running.
            ClockPermissionError: Not allowed to set clocks (needs root).
            NvmlNotSupportedError: This GPU cannot lock that clock domain.
        """
        c = self.validate(config)
        self._check_owner()
        with self._lock:
            self._check_open()
            return self._change(c, read_back)

    def set_power_limit(self, power_limit_w: float | None, read_back: bool = True) -> PowerLimitReadback:
        """Set the board power limit for the job and read back the limit in effect.

        The limit in effect before the first change is read and remembered (:attr:`power_limit_found_w`); every
        way out of this object sets it back.

        Args:
            power_limit_w: The limit, watts, within the GPU's range (rounded to the milliwatt); ``None`` for the
                one found before this object first changed it (nothing to do if it never did).
            read_back: Read the limit in effect after the change (one NVML read).

        Returns:
            The record: the call made (or planned in dry-run; none when the limit is already in effect) and the
            limit read back.

        Raises:
            ClockError: The limit is not a finite number or outside the GPU's range, the object is closed, it belongs
                to the process this one was forked from, or its watchdog could not be kept running.
            ClockPermissionError: Not allowed to set the power limit (needs root).
            NvmlNotSupportedError: This GPU's power limit cannot be changed through NVML.
        """
        self._check_owner()
        with self._lock:
            self._check_open()
            requested = self.validate_power_limit(power_limit_w)
            if requested is not None and self._power_found_w is None:
                self._power_found_w = round(self.device.power_limit_w(), 3)
            target = requested if requested is not None else self._power_found_w  # None: never changed
            return self._change_power_limit(requested, target, read_back)

    def restore(self) -> ClockReadback:
        """Give the clocks back to the driver (when not in dry-run, always resets the core lock, and the memory lock
        where memory locks are runtime), and set the power limit back to the one found if this object changed it.

        Returns:
            The record of the clocks' restore (``requested`` is ``auto``); the power limit's goes to
            ``power_limit_history``.

        Raises:
            ClockRestoreError: Something could not be given back after the retries; it says what is left, and the
                fix. Everything that could be restored was.
            ClockPermissionError: Not allowed to reset clocks or set the power limit (needs root).
        """
        self._check_owner()
        with self._lock:
            return self._restore_all()

    def read(self) -> ClockReadback:
        """Read the clocks and reasons now, changing nothing."""
        with self._lock:
            return self._record(self._current, (), False, 0.0)

    def close(self) -> None:
        """Restore the clocks and power limit, stop the watchdog, release the GPU and remove the signal handlers.

        Idempotent once everything is given back. If something could not be given back, the control stays closed to
        changes but keeps the GPU, its watchdog (which tries again when this process ends) and its exit hooks, and
        raises; calling ``close()`` again tries again. In a child forked from the owner it does nothing.

        Raises:
            ClockRestoreError: Something is left changed (the message says what, and the fix).
        """
        if self._foreign or os.getpid() != self._owner.pid:
            return
        with self._lock:
            if self._released:
                return
            self._closed = True
            self._restore_all()
            self._release()

    def __enter__(self) -> ClockControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "dry-run" if self._dry_run else "live"
        return f"ClockControl(GPU {self.device_index} {self.device.name!r}, {mode}, current {self._current})"

    # -- internals: ownership -----------------------------------------------------------------------
    def _check_owner(self) -> None:
        """Refuse in a child forked from the owner (checked before taking the lock, which a fork may have left
        held)."""
        if not self._dry_run and (self._foreign or os.getpid() != self._owner.pid):
            raise ClockError(
                f"this clock control of GPU {self.device_index} belongs to process {self._owner.pid}; process "
                f"{os.getpid()} was forked from it and cannot change its clocks.",
                "create a ClockControl in the process that changes the clocks (one per GPU), not in a forked child.",
            )

    def _check_open(self) -> None:
        if self._closed:
            raise ClockError(f"the clock control of GPU {self.device_index} is closed.", "create a new ClockControl.")
        if self._refusal is not None:
            raise ClockError(
                self._refusal,
                "find what ends the watchdog process (the OOM killer, a kill command), then create a new ClockControl.",
            )

    def _take_gpu(self) -> None:
        """Take the GPU's lock, give back what a holder that has ended left changed, and write this holder's
        record."""
        key = gpu_key(self.device)
        lock = GpuLock.acquire(self.device_index, key, self.device.name)
        try:
            self._clean_up_after(lock)
        except BaseException:
            lock.detach()  # the record of the holder before stays, for the next try and reset-clocks
            raise
        lock.claim(self._owner.pid, self._owner.start, self.device.name, key)
        self._gpu_lock = lock

    def _clean_up_after(self, lock: GpuLock) -> None:
        """Give back what the lock's previous holder, which has ended, recorded as changed and not given back."""
        prev = lock.previous
        if not prev or prev.get("state") not in ("held", "left"):
            return
        armed = [d for d in prev.get("armed") or () if d in _RESET]
        found = prev.get("power_found_w")
        found_w = float(found) if isinstance(found, (int, float)) and lock.trusted and math.isfinite(found) else None
        if found_w is not None:
            try:
                found_w = self.validate_power_limit(found_w)
            except RlclockError:
                found_w = None
        if not armed and found_w is None:
            return
        who = f"process {prev.get('pid', '?')} ({prev.get('command', '?')})"
        done, left, errors = [], [], []
        for domain in armed:
            tries, error = retry(getattr(self.device, _RESET[domain]))
            if error is None or isinstance(error, NvmlNotSupportedError):
                done.append(f"reset the locked {_DOMAIN_NAME[domain]} clock{tries_note(tries)}")
            else:
                left.append(f"the {_DOMAIN_NAME[domain]} clock is left locked")
                errors.append(error)
        if found_w is not None:
            tries, error = retry(lambda: self.device.set_power_limit_w(found_w))
            if error is None:
                done.append(f"set the power limit back to {_watts(found_w)} W{tries_note(tries)}")
            else:
                left.append(f"the power limit is not back at {_watts(found_w)} W")
                errors.append(error)
        if left:
            raise ClockRestoreError(
                f"GPU {self.device_index} ({self.device.name}) was left changed by {who}, which has ended; "
                f"{', '.join(done) + ', but ' if done else ''}{', and '.join(left)} ({errors[0].message}).",
                f"run rlclock reset-clocks --device {self.device_index} (as root), then try again.",
            )
        _say(
            f"rlclock: GPU {self.device_index} ({self.device.name}) was left with locked clocks or a changed power "
            f"limit by {who}, which ended without giving them back; {', '.join(done)} before taking control."
        )

    def _forget(self) -> None:
        """In a child forked from the owner: let go of the owner's lock and watchdog pipe; never restore."""
        self._foreign = True
        if self._gpu_lock is not None:
            self._gpu_lock.detach()
        if self._watchdog is not None:
            self._watchdog.forget()
        self._watchdog = None

    def _ledger(self) -> None:
        """Write what this control has changed into its lock's record (for the next holder and reset-clocks)."""
        if self._gpu_lock is not None:
            wd = self._watchdog
            self._gpu_lock.update(
                armed=sorted(self._armed),
                power_found_w=self._power_found_w if self._power_changed else None,
                power_w=self._power_limit_w if self._power_changed else None,
                watchdog=None if wd is None else {"pid": wd.pid},
            )

    def _release(self) -> None:
        """Everything is given back: stop the watchdog, release the GPU, remove the hooks."""
        wd, self._watchdog = self._watchdog, None
        if wd is not None:
            wd.stop()
        if self._gpu_lock is not None:
            self._gpu_lock.release()
            self._gpu_lock = None
        self._released = True
        _LIVE.discard(self)
        self._unhook()

    # -- internals: the watchdog --------------------------------------------------------------------
    def _live_watchdog(self) -> Watchdog | None:
        """The running watchdog, started now if there is none, replaced if it has ended (``None`` without one)."""
        if self._dry_run or not self._use_watchdog:
            return None
        wd = self._watchdog
        if wd is not None and wd.alive:
            return wd
        if wd is None:
            self._watchdog = self._new_watchdog()
            self._ledger()
            return self._watchdog
        return self._replace_watchdog(wd)

    def _new_watchdog(self) -> Watchdog:
        """Start a watchdog and tell it everything this control has changed so far."""
        from rlclock.gpu.watchdog import Watchdog

        wd = Watchdog([self.device_index], lock=self._gpu_lock, on_exit=self._watchdog_ended)
        if self._armed:
            wd.arm(self._armed)
        if self._power_changed and self._power_found_w is not None:
            wd.guard_power_limit(self.device_index, self._power_found_w)
        return wd

    def _replace_watchdog(self, dead: Watchdog) -> Watchdog:
        """A watchdog ended under a running owner: start another and say so, or give everything back and refuse."""
        self._watchdog = None
        how = describe_exit(dead.returncode)
        gpu = f"GPU {self.device_index} ({self.device.name})"
        why = None
        if self._watchdog_restarts >= MAX_WATCHDOG_RESTARTS:
            why = f"it has been replaced {self._watchdog_restarts} times already"
        else:
            try:
                wd = self._new_watchdog()
            except RlclockError as exc:
                why = f"a new one did not start ({exc.message})"
        if why is not None:
            self._refusal = (
                f"the clock watchdog of {gpu} (pid {dead.pid}) {how} and {why}: without a watchdog "
                "the clocks would stay changed if this process were killed, so no more changes are "
                "made."
            )
            try:
                self._restore_all()
                given = "gave the clocks and power limit back"
            except RlclockError as exc:
                given = f"could not give everything back ({exc.message})"
            _say(f"rlclock: {self._refusal[:-1]}; {given}.")
            raise ClockError(
                self._refusal,
                "find what ends the watchdog process (the OOM killer, a kill command), then create a new ClockControl.",
            )
        self._watchdog = wd
        self._watchdog_restarts += 1
        self._ledger()
        _say(
            f"rlclock: the clock watchdog of {gpu} (pid {dead.pid}) {how}; started a new one (pid {wd.pid}), "
            "which guards what this process has changed."
        )
        return wd

    def _watchdog_ended(self, wd: Watchdog) -> None:
        """Called from the watchdog's thread when it ended without being stopped: replace it now, not only at the
        next change, so a kill of the owner soon after still finds a guard."""
        if wd.stopping or self._foreign:
            return
        with self._lock:
            if self._watchdog is not wd or self._released or self._foreign:
                return
            with contextlib.suppress(RlclockError):  # said on stderr; the next change raises
                self._replace_watchdog(wd)

    def _guard_clocks(self, domains: set[str]) -> None:
        """Before locking ``domains``: a running watchdog that knows they may be locked."""
        if self._refusal is not None:
            raise ClockError(self._refusal, "create a new ClockControl.")
        wd = self._live_watchdog()
        new = domains - self._armed
        if new:
            self._armed |= new
            if wd is not None:
                wd.arm(new)
            self._ledger()

    def _guard_power_limit(self) -> None:
        """Before changing the power limit: a running watchdog that will set the one found back."""
        if self._refusal is not None:
            raise ClockError(self._refusal, "create a new ClockControl.")
        wd = self._live_watchdog()
        changed = not self._power_changed
        self._power_changed = True
        if wd is not None and self._power_found_w is not None:
            wd.guard_power_limit(self.device_index, self._power_found_w)
        if changed:
            self._ledger()

    # -- internals: changes -------------------------------------------------------------------------
    def _locks(self, config: ClockConfig) -> ClockConfig:
        """The locks a configuration takes on this GPU: its memory part only where memory locks are runtime."""
        return config if self.memory_locks == "runtime" else ClockConfig(config.core_mhz, None)

    def _change(self, target: ClockConfig, read_back: bool = True) -> ClockReadback:
        calls = plan_calls(self._locks(self._current), self._locks(target))
        latency = 0.0
        if calls and not self._dry_run:
            sets = {"core" if "core" in name else "mem" for name, _ in calls if name.startswith("set_")}
            if sets:
                self._guard_clocks(sets)
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
                        "deferred for a whole job (nvidia-smi --lock-memory-clocks-deferred).",
                    ) from None
                if "core" in name:
                    core = args[0] if args else None
                else:
                    mem = args[0] if args else None
                self._current = ClockConfig(core, mem)
            latency = time.perf_counter() - t0
        self._current = target
        if target.is_auto and not self._dry_run:
            self._clocks_back()
        return self._record(
            target, tuple(_fmt(c) for c in calls), bool(calls) and not self._dry_run, latency, read_back
        )

    def _clocks_back(self) -> None:
        """The clocks are at the driver defaults: nothing for any way out to reset."""
        self._dirty = False
        self._mem_locked = False
        if self._armed:
            self._armed.clear()
            if self._watchdog is not None:
                self._watchdog.disarm()
            self._ledger()

    def _restore(self) -> tuple[ClockReadback | None, list[_Left]]:
        """Reset the clock locks, each call retried; returns the record, or what is left."""
        if self._dry_run:
            rec = self._record(AUTO, tuple(_fmt(c) for c in plan_calls(self._locks(self._current), AUTO)), False, 0.0)
            self._current = AUTO
            return rec, []
        calls: list[tuple[str, tuple[int, ...]]] = []
        latency = 0.0
        if self._dirty or not self._current.is_auto:
            domains = ["core"]
            if self.memory_locks == "runtime" or self._mem_locked:  # never touch a memory lock this object
                domains.append("mem")  # cannot have taken
            calls = [(_RESET[d], ()) for d in domains]
            t0 = time.perf_counter()
            left: list[_Left] = []
            for domain in domains:
                tries, error = retry(getattr(self.device, _RESET[domain]))
                if error is not None and not isinstance(error, NvmlNotSupportedError):  # not supported: not locked
                    mhz = self._current.core_mhz if domain == "core" else self._current.mem_mhz
                    what = f"the {_DOMAIN_NAME[domain]} clock is left locked" + (f" at {mhz} MHz" if mhz else "")
                    left.append(_Left(domain, what, tries, error))
            latency = time.perf_counter() - t0
            if left:
                domains_left = {x.domain for x in left}
                self._current = ClockConfig(
                    self._current.core_mhz if "core" in domains_left else None,
                    self._current.mem_mhz if "mem" in domains_left else None,
                )
                return None, left
            self._clocks_back()
        self._current = AUTO
        return self._record(AUTO, tuple(_fmt(c) for c in calls), bool(calls), latency, quiet=True), []

    def _restore_error(self, left: list[_Left]) -> RlclockError:
        """One line: what is left, why, and the fix (a permission error stays itself: retrying cannot help)."""
        if all(isinstance(x.error, ClockPermissionError) for x in left):
            return left[0].error
        first = next(x for x in left if not isinstance(x.error, ClockPermissionError))
        wd = self._watchdog
        guard = (
            f"; its watchdog (pid {wd.pid}) tries again when this process ends" if wd is not None and wd.alive else ""
        )
        return ClockRestoreError(
            f"could not give GPU {self.device_index} ({self.device.name}) back: {', and '.join(x.what for x in left)} "
            f"({first.error.message.rstrip('.')}; {first.tries} tries){guard}.",
            f"run rlclock reset-clocks --device {self.device_index} (as root).",
        )

    def _restore_all(self) -> ClockReadback:
        """Restore the clocks and the power limit; both are tried, and one error says everything that is left."""
        rec, left = self._restore()
        left += self._restore_power_limit()
        if left:
            raise self._restore_error(left)
        assert rec is not None
        return rec

    def _change_power_limit(
        self, requested_w: float | None, target_w: float | None, read_back: bool = True
    ) -> PowerLimitReadback:
        current = self._power_limit_w if self._power_limit_w is not None else self._power_found_w
        calls: tuple[str, ...] = ()
        latency = 0.0
        if target_w is not None and target_w != current:
            calls = (f"set_power_limit_w({_watts(target_w)})",)
            if not self._dry_run:
                latency = self._set_power_limit(target_w)
            self._power_limit_w = target_w
        if not self._dry_run and self._power_changed and target_w == self._power_found_w:
            self._power_back()
        return self._record_power(requested_w, calls, bool(calls) and not self._dry_run, latency, read_back)

    def _set_power_limit(self, power_limit_w: float) -> float:
        """Set the limit with the watchdog guarding the one found; returns the time the set call took, seconds."""
        self._guard_power_limit()
        t0 = time.perf_counter()
        try:
            self.device.set_power_limit_w(power_limit_w)
        except RlclockError:
            in_effect = nvml.try_read(self.device.power_limit_w)
            if isinstance(in_effect, float) and round(in_effect, 3) == self._power_found_w:  # refused: unchanged
                self._power_back()
            raise
        return time.perf_counter() - t0

    def _power_back(self) -> None:
        """The limit in effect is the one found again: nothing for any way out to restore."""
        self._power_changed = False
        if self._watchdog is not None:
            self._watchdog.release_power_limit(self.device_index)
        self._ledger()

    def _restore_power_limit(self) -> list[_Left]:
        """Set the limit found back (retried); returns what is left (nothing, or the power limit)."""
        found = self._power_found_w
        if found is None:
            return []
        if self._dry_run:
            if self._power_limit_w is not None and self._power_limit_w != found:
                self._change_power_limit(None, found)
            return []
        if not self._power_changed:
            return []
        t0 = time.perf_counter()  # always set: a failed set may have left anything in effect
        tries, error = retry(lambda: self.device.set_power_limit_w(found))
        latency = time.perf_counter() - t0
        if error is not None:
            in_effect = nvml.try_read(self.device.power_limit_w)
            if not (isinstance(in_effect, float) and round(in_effect, 3) == found):  # not back, truly
                now = _watts(in_effect) if isinstance(in_effect, float) else _watts(self._power_limit_w or found)
                return [_Left("power", f"the power limit is left at {now} W (found {_watts(found)} W)", tries, error)]
        self._power_limit_w = found
        self._power_back()
        self._record_power(None, (f"set_power_limit_w({_watts(found)})",), True, latency, quiet=True)
        return []

    def _record_power(
        self,
        requested_w: float | None,
        calls: tuple[str, ...],
        applied: bool,
        latency: float,
        read_back: bool = True,
        quiet: bool = False,
    ) -> PowerLimitReadback:
        power: float | None = None
        if read_back:
            try:
                power = self.device.power_limit_w()
            except NvmlNotSupportedError:
                power = None
            except RlclockError:
                if not quiet:
                    raise
        rec = PowerLimitReadback(
            None if requested_w is None else float(requested_w),
            self._power_found_w,
            calls,
            applied,
            self._dry_run,
            power,
            latency,
            time.monotonic(),
        )
        self._power_history.append(rec)
        return rec

    def _record(
        self,
        requested: ClockConfig,
        calls: tuple[str, ...],
        applied: bool,
        latency: float,
        read_back: bool = True,
        quiet: bool = False,
    ) -> ClockReadback:
        sm: int | None = None
        mem: int | None = None
        reasons: tuple[str, ...] = ()
        if read_back:
            try:
                s = self.device.clocks()
                sm, mem, reasons = s.sm_clock_mhz, s.mem_clock_mhz, s.reasons
            except RlclockError:
                if not quiet:  # a restore's read-back must not hide that the restore worked
                    raise
        rec = ClockReadback(requested, calls, applied, self._dry_run, sm, mem, reasons, latency, time.monotonic())
        self._history.append(rec)
        return rec

    # -- internals: ways out ----------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self._foreign and os.getpid() == self._owner.pid:
            try:
                self.close()
            except Exception as exc:  # the signal must still be delivered
                _say(f"rlclock: {exc}")
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
        if self._foreign or os.getpid() != self._owner.pid:
            return
        try:
            self.close()
        except RlclockError as exc:
            _say(f"rlclock: {exc}")


def _after_fork_in_child() -> None:
    for control in list(_LIVE):
        control._forget()


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class GpuReset:
    """What :func:`reset_gpus` did to one GPU.

    Attributes:
        index: NVML index.
        line: One line saying what was done, what is left and the fix.
        ok: Everything asked for is back at the defaults (or, in a dry run, nothing stands in the way).
    """

    index: int
    line: str
    ok: bool


def reset_gpus(
    devices: Sequence[int] | None = None,
    dry_run: bool = False,
    power_limit: bool = True,
    power_limit_w: float | None = None,
    force: bool = False,
    wait_s: float | None = None,
) -> list[GpuReset]:
    """Reset the locked core and memory clocks of ``devices`` (default: all GPUs) to the driver defaults, and a
    power limit that differs from the driver's default limit to that default — each call retried, each GPU's result
    said in one line.

    A GPU that another rlclock process controls is left alone (its clocks are that process's, and it gives them
    back itself), unless ``force``. While it is held by a process that has ended (its watchdog is still giving the
    clocks back), this waits up to ``wait_s`` for it.

    Args:
        devices: NVML indices; ``None`` for every GPU.
        dry_run: Only say what would be reset (nothing is set).
        power_limit: Set the power limit back too (``False``: the clocks only, the limit left as it is).
        power_limit_w: The limit to set back, watts, instead of the driver's default (one a caller found before
            it changed it).
        force: Reset a GPU even while another rlclock process controls it.
        wait_s: How long to wait for a GPU whose holder has ended, seconds (default
            :data:`~rlclock.gpu.ownership.LOCK_WAIT_S`).

    Returns:
        One result per GPU; a GPU whose power limit NVML cannot read or set says so in its line.

    Raises:
        ClockPermissionError: Not allowed to reset clocks or set the power limit (needs root).
        GpuUnavailableError: NVML or the GPU is missing.
    """
    indices = list(range(nvml.device_count())) if devices is None else list(devices)
    return [_reset_gpu(index, dry_run, power_limit, power_limit_w, force, wait_s) for index in indices]


def reset_clocks(
    devices: Sequence[int] | None = None,
    dry_run: bool = False,
    power_limit: bool = True,
    power_limit_w: float | None = None,
    force: bool = False,
    wait_s: float | None = None,
) -> list[str]:
    """:func:`reset_gpus`, as its lines; raises if any GPU could not be given back or was left alone.

    Raises:
        ClockRestoreError: Something is left (the first such GPU's line says what, and the fix).
        GpuBusyError: A GPU is controlled by another rlclock process (and not ``force``).
        ClockPermissionError: Not allowed to reset clocks or set the power limit (needs root).
        GpuUnavailableError: NVML or the GPU is missing.
    """
    results = reset_gpus(devices, dry_run, power_limit, power_limit_w, force, wait_s)
    bad = next((r for r in results if not r.ok), None)
    if bad is not None and not dry_run:
        cls = GpuBusyError if "controlled by another rlclock process" in bad.line else ClockRestoreError
        raise cls(bad.line)
    return [r.line for r in results]


def _reset_gpu(
    index: int, dry_run: bool, power_limit: bool, power_limit_w: float | None, force: bool, wait_s: float | None
) -> GpuReset:
    dev = nvml.NvmlDevice(index)
    gpu = f"GPU {index} ({dev.name})"
    key = gpu_key(dev)
    if dry_run:
        power = _reset_power_limit(dev, True, power_limit_w) if power_limit else ""
        holder = ownership.probe(key)
        busy = (
            ""
            if holder is None
            else f"; it is controlled now by another rlclock process: {ownership.describe_holder(holder)} "
            "(left alone unless --force)"
        )
        return GpuReset(index, f"{gpu}: would reset the locked core and memory clocks{power}{busy}.", holder is None)
    lock: GpuLock | None = None
    forced = ""
    try:
        lock = GpuLock.acquire(index, key, dev.name, wait_s)
    except GpuBusyError as exc:
        if not force:
            return GpuReset(index, f"{gpu}: left alone: {exc.message[len(gpu) + 1 :].strip()} Fix: {exc.fix}", False)
        forced = " (forced: another rlclock process controls it)"
    left: list[str] = []
    try:
        done = []
        for domain in ("core", "mem"):
            tries, error = retry(getattr(dev, _RESET[domain]))
            if error is None:
                done.append(_DOMAIN_NAME[domain] + tries_note(tries))
            elif isinstance(error, ClockPermissionError):
                raise error
            elif not isinstance(error, NvmlNotSupportedError):  # not supported: that domain cannot be locked
                left.append(
                    f"could not reset the locked {_DOMAIN_NAME[domain]} clock after {tries} tries "
                    f"({error.message.rstrip('.')})"
                )
        power = ""
        if power_limit:
            power = _reset_power_limit(dev, False, power_limit_w)
            if power.startswith("; could not"):
                left.append(power[2:])
                power = ""
        s = nvml.try_read(dev.clocks)
        now = (
            f"now SM {s.sm_clock_mhz} MHz, memory {s.mem_clock_mhz} MHz"
            if isinstance(s, nvml.ClockSample)
            else "clocks unreadable now"
        )
        line = (
            f"{gpu}: reset the locked {' and '.join(done) or 'no'} clock(s){forced}; {now}{power}"
            + (
                "; but " + "; ".join(left) + f". Fix: run rlclock reset-clocks --device {index} again (as root); "
                "if it keeps failing, rlclock doctor shows the GPU's state"
                if left
                else ""
            )
            + "."
        )
        return GpuReset(index, line, not left)
    finally:
        if lock is not None:
            lock.release(left="; ".join(left))


def _reset_power_limit(dev: nvml.NvmlDevice, dry_run: bool, to_w: float | None = None) -> str:
    """Set ``dev``'s power limit back to ``to_w`` watts (default: the driver's default) where it differs (retried);
    returns the clause saying so (``"; could not ..."`` when it failed)."""
    try:
        in_effect = round(dev.power_limit_w(), 3)
        target, what = (
            (round(dev.default_power_limit_w(), 3), "default") if to_w is None else (round(float(to_w), 3), "as found")
        )
    except NvmlNotSupportedError:
        return "; power limit not supported by this GPU or its driver (left alone)"
    if in_effect == target:
        return f"; power limit {_watts(in_effect)} W ({what})"
    change = f"power limit {_watts(in_effect)} W -> {_watts(target)} W ({what})"
    if dry_run:
        return f"; would set the {change}"
    tries, error = retry(lambda: dev.set_power_limit_w(target))
    if isinstance(error, ClockPermissionError):
        raise error
    if isinstance(error, NvmlNotSupportedError):
        return "; power limit not supported by this GPU or its driver (left alone)"
    if error is not None:
        return (
            f"; could not set the power limit back from {_watts(in_effect)} W to {_watts(target)} W after "
            f"{tries} tries ({error.message.rstrip('.')})"
        )
    return f"; {change}{tries_note(tries)}"
