"""Energy and time of repeated GPU work: NVML's energy counter over tick-aligned windows, CUDA-event time.

NVML's total-energy counter advances in steps (every 100 ms on an H200), so one kernel's energy is read by
running it back to back for a window of several steps:

1. Warm up for ``warmup_s`` with the work running (clocks, power and temperature settle).
2. Keep the GPU busy and let a sampler thread poll the counter; a *tick* is a change of its value, timed
   at the midpoint of the two polls around it. Windows start and end on ticks and last ``>= window_s``;
   ``repeats`` windows follow each other.
3. Per window: power = ΔE / Δt between its ticks; time per unit of work = CUDA-event time between the
   launches at the window's ends divided by the units launched in between; energy per unit = power × time.

Repeatability is the coefficient of variation over the windows. The sampler also records the SM and
memory clocks and the clock-event reasons every ``clock_period_s``.

The work is anything with the :class:`Runner` shape, so the procedure is tested with a fake GPU.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlclock.errors import MeasurementError
from rlclock.gpu.nvml import NvmlDevice, reasons_from_mask


class Runner(Protocol):
    """Work that can be launched repeatedly and timed on the GPU's own clock."""

    units_per_launch: int
    """Units of work (e.g. kernel executions) one :meth:`launch` enqueues."""

    def launch(self) -> None:
        """Enqueue one batch (asynchronously)."""

    def mark(self) -> Any:
        """Record a timing mark after everything enqueued so far; returns it."""

    def wait(self, mark: Any) -> None:
        """Block until the GPU has reached ``mark``."""

    def elapsed_s(self, start: Any, end: Any) -> float:
        """GPU time between two reached marks, seconds."""


@dataclass(frozen=True)
class MeasureSettings:
    """How windows are taken.

    Attributes:
        window_s: Minimum window length, seconds (>= 0.5 s recommended; NVML's counter steps every 0.1 s).
        warmup_s: Work run before the first window, seconds.
        repeats: Windows per measurement (their spread is the repeatability).
        queue_depth: Batches kept in flight ahead of the GPU.
        timeout_s: Give up when the windows are not complete after this long, seconds.
        poll_s: Energy-counter poll period of the sampler, seconds.
        clock_period_s: Clock and reason sampling period, seconds.
    """

    window_s: float = 0.5
    warmup_s: float = 0.3
    repeats: int = 3
    queue_depth: int = 3
    timeout_s: float = 60.0
    poll_s: float = 0.0005
    clock_period_s: float = 0.01

    def __post_init__(self) -> None:
        if not (self.window_s > 0 and self.warmup_s >= 0 and self.repeats >= 1 and self.queue_depth >= 1):
            raise MeasurementError(
                f"measurement settings window_s={self.window_s}, warmup_s={self.warmup_s}, repeats={self.repeats}, "
                f"queue_depth={self.queue_depth} are invalid.",
                "use window_s > 0, warmup_s >= 0, repeats >= 1, queue_depth >= 1.",
            )


@dataclass(frozen=True)
class Tick:
    """A step of the energy counter: when (``time.perf_counter`` seconds) and its new value (joules)."""

    time_s: float
    energy_j: float


@dataclass(frozen=True)
class ClockReading:
    """Clocks and reason mask sampled at ``time_s`` (``time.perf_counter`` seconds)."""

    time_s: float
    sm_clock_mhz: int
    mem_clock_mhz: int
    reason_mask: int


class EnergySampler:
    """A thread polling one GPU's energy counter (ticks) and clocks.

    Args:
        device: The GPU.
        poll_s: Counter poll period, seconds.
        clock_period_s: Clock sampling period, seconds.
    """

    def __init__(self, device: NvmlDevice, poll_s: float = 0.0005, clock_period_s: float = 0.01) -> None:
        self.device = device
        self.poll_s = poll_s
        self.clock_period_s = clock_period_s
        self.ticks: list[Tick] = []
        self.clocks: list[ClockReading] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlclock-energy-sampler", daemon=True)

    def start(self) -> EnergySampler:
        """Start polling; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and wait for the thread."""
        self._stop.set()
        self._thread.join(5.0)

    def __enter__(self) -> EnergySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def last_tick(self) -> Tick | None:
        """The latest tick, if any."""
        return self.ticks[-1] if self.ticks else None

    def check(self) -> None:
        """Re-raise an error the thread hit."""
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            prev_t = time.perf_counter()
            prev_e = self.device.total_energy_j()
            next_clock = prev_t
            while not self._stop.is_set():
                t_before = time.perf_counter()
                e = self.device.total_energy_j()
                t_after = time.perf_counter()
                if e != prev_e:
                    self.ticks.append(Tick(0.5 * (prev_t + t_after), e))
                    prev_e = e
                prev_t = t_before
                if t_after >= next_clock:
                    s = self.device.clocks()
                    now = time.perf_counter()
                    self.clocks.append(ClockReading(now, s.sm_clock_mhz, s.mem_clock_mhz, s.reason_mask))
                    next_clock = t_after + self.clock_period_s
                time.sleep(self.poll_s)
        except BaseException as exc:  # surfaced by check()
            self.error = exc


@dataclass(frozen=True)
class WindowStats:
    """Result of :func:`measure`.

    Attributes:
        time_s: Median time per unit of work over the windows, seconds.
        energy_j: Median energy per unit, joules.
        power_w: Median board power during the windows, watts.
        sm_clock_mhz: Mean SM clock during the windows, MHz.
        mem_clock_mhz: Mean memory clock, MHz.
        reasons: Clock-event reasons active in at least half of the samples.
        reason_fractions: For every reason seen, the fraction of samples it was active in.
        time_cv: Coefficient of variation of the per-window times (0 with one window).
        energy_cv: Coefficient of variation of the per-window energies.
        windows: Number of windows.
        units: Units of work run inside the windows.
        window_s: Mean window length, seconds.
        busy_fraction: GPU-event time over wall time of the windows (about 1 when the GPU never idled).
        per_window: ``(time_s, energy_j, power_w, counter_steps)`` of each window.
    """

    time_s: float
    energy_j: float
    power_w: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    reasons: tuple[str, ...]
    reason_fractions: dict[str, float]
    time_cv: float
    energy_cv: float
    windows: int
    units: int
    window_s: float
    busy_fraction: float
    per_window: tuple[tuple[float, float, float, int], ...] = field(default_factory=tuple)


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (population standard deviation over mean); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    m = statistics.fmean(values)
    return statistics.pstdev(values) / m if m else 0.0


def measure(runner: Runner, sampler: EnergySampler, settings: MeasureSettings = MeasureSettings()) -> WindowStats:
    """Run ``runner`` back to back and measure time and energy per unit over tick-aligned windows.

    Args:
        runner: The work.
        sampler: A *started* sampler of the GPU the work runs on.
        settings: Window, warm-up, repeats.

    Raises:
        MeasurementError: The counter did not tick, or the windows did not complete in time.
    """
    marks: list[Any] = []
    windows: list[tuple[Tick, int, int]] = []
    t0 = time.perf_counter()
    warm_end = t0 + settings.warmup_s
    seen_tick: Tick | None = None
    while len(windows) < settings.repeats + 1:
        runner.launch()
        marks.append(runner.mark())
        if len(marks) > settings.queue_depth:
            runner.wait(marks[-1 - settings.queue_depth])
        now = time.perf_counter()
        sampler.check()
        if now - t0 > settings.timeout_s:
            raise MeasurementError(
                f"the energy windows did not complete within {settings.timeout_s:g} s "
                f"({len(sampler.ticks)} counter ticks seen).",
                "check that the GPU's energy counter advances (rlclock doctor) or raise the timeout.",
            )
        tick = sampler.last_tick()
        if tick is None or tick is seen_tick or tick.time_s < warm_end:
            continue
        seen_tick = tick
        if not windows or tick.time_s - windows[-1][0].time_s >= settings.window_s:
            windows.append((tick, len(marks) - 1, len(sampler.ticks) - 1))
    runner.wait(marks[-1])
    per: list[tuple[float, float, float, int]] = []
    busy: list[float] = []
    units = 0
    for (ta, ia, ka), (tb, ib, kb) in itertools.pairwise(windows):
        n = (ib - ia) * runner.units_per_launch
        if n <= 0:
            raise MeasurementError("no work ran inside an energy window.", "use longer windows (window_s).")
        gpu_s = runner.elapsed_s(marks[ia], marks[ib])
        wall_s = tb.time_s - ta.time_s
        power = (tb.energy_j - ta.energy_j) / wall_s
        t_unit = gpu_s / n
        per.append((t_unit, power * t_unit, power, kb - ka))
        busy.append(gpu_s / wall_s)
        units += n
    t_lo, t_hi = windows[0][0].time_s, windows[-1][0].time_s
    samples = [c for c in sampler.clocks if t_lo <= c.time_s <= t_hi] or sampler.clocks[-1:]
    fractions: dict[str, float] = {}
    for c in samples:
        for r in reasons_from_mask(c.reason_mask):
            fractions[r] = fractions.get(r, 0.0) + 1.0 / len(samples)
    return WindowStats(
        time_s=statistics.median(p[0] for p in per),
        energy_j=statistics.median(p[1] for p in per),
        power_w=statistics.median(p[2] for p in per),
        sm_clock_mhz=statistics.fmean(c.sm_clock_mhz for c in samples) if samples else float("nan"),
        mem_clock_mhz=statistics.fmean(c.mem_clock_mhz for c in samples) if samples else float("nan"),
        reasons=tuple(sorted(r for r, f in fractions.items() if f >= 0.5)),
        reason_fractions={r: round(f, 3) for r, f in sorted(fractions.items())},
        time_cv=cv([p[0] for p in per]),
        energy_cv=cv([p[1] for p in per]),
        windows=len(per),
        units=units,
        window_s=statistics.fmean(b[0].time_s - a[0].time_s for a, b in itertools.pairwise(windows)),
        busy_fraction=statistics.fmean(busy),
        per_window=tuple(per),
    )


def counter_period_s(device: NvmlDevice, duration_s: float = 1.0, poll_s: float = 0.0005) -> float | None:
    """Median time between energy-counter steps, seconds (``None`` if it did not step twice).

    Args:
        device: The GPU.
        duration_s: How long to watch, seconds.
        poll_s: Poll period, seconds.
    """
    with EnergySampler(device, poll_s=poll_s, clock_period_s=1e9) as s:
        time.sleep(duration_s)
    s.check()
    if len(s.ticks) < 3:
        return None
    gaps = [b.time_s - a.time_s for a, b in zip(s.ticks, s.ticks[1:], strict=False)]
    return statistics.median(gaps)
