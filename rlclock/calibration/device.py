"""A clock sweep of the calibration suite on the user's own GPU, measured through NVML and CUDA events.

:func:`device_sweep` runs every kernel of :func:`~rlclock.calibration.sweep.suite` (realised as CUDA work by
:func:`rlclock.gpu.microbench.realise`, or by any ``realiser`` with its signature) at the sweep's clock pairs and
reads an idle window at each memory clock. Each reading is a tick-aligned energy window
(:func:`rlclock.gpu.meter.measure`): time per kernel from CUDA events, energy from the board's energy counter.

Clocks are locked only through the :class:`~rlclock.gpu.clocks.ClockControl` it is given, so the sweep has the
same safety as every other command: without clock control (dry run) it measures the suite at the clocks
in effect only — a check of a preset, not a fit — and rows are placed at the supported clock nearest the SM
clock read during the windows; with clock control it locks each pair in turn and the caller's ``with
ClockControl`` gives the GPU back as it was found, whatever happens.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rlclock.calibration.sweep import IDLE, SweepRow, rows_from, suite, sweep_configs
from rlclock.dvfs.spec import GpuSpec
from rlclock.errors import ClockError, MeasurementError, RlclockError
from rlclock.gpu.clocks import ClockControl
from rlclock.gpu.meter import EnergySampler, MeasureSettings, WindowStats, measure
from rlclock.schedule import AUTO, ClockConfig
from rlclock.workload.trace import Kernel

Realiser = Callable[[Kernel], tuple[Any, Kernel]]
"""Builds the runner of one suite kernel: ``kernel -> (runner, the kernel as it runs)``; the runner has
:class:`rlclock.gpu.meter.Runner`'s methods and ``close()``."""

SWEEP_SETTINGS = MeasureSettings(window_s=0.1, warmup_s=0.2, repeats=3)
"""Energy windows of one sweep reading: three windows of at least 0.1 s after 0.2 s of warm-up. Windows start and
end on the energy counter's steps, so each spans one step or more whatever the counter's period (0.1 s on an
H200); there the suite read at 0.1 s windows agrees with 1.0 s windows within 0.7 % in energy and 0.3 % in time on
every kernel not under the power cap (``data/h200-suite-windows``) — about 0.8 s per kernel and clock pair."""

RESTING = "auto, at rest"
"""The ``requested`` label of the observe-mode idle reading taken after :data:`REST_S` without work."""

REST_S = 2.0
"""A dry run: seconds without work before the resting idle reading. The idle reading right after the suite's
kernels finds the clocks up; where the firmware lowers them at rest, the two readings are the power floor at two
core clocks, what separates constant power from power that follows the clock in a fit. (An H200 with persistence mode
on and application clocks at 1980 MHz kept 1980 MHz after 2 s with the sweep's CUDA context open, reading 118 W;
with no process on it NVML read 345 MHz and 78 W.)"""

READING_OVERHEAD_S = 0.3
"""Per reading beyond its warm-up and windows (graph launches, synchronisation, the table written), seconds:
an upper bound from the suite timed on an H200 at four window lengths (``data/h200-suite-windows``)."""


@dataclass(frozen=True)
class Reading:
    """One measurement of a device sweep, with what NVML said during it.

    Attributes:
        row: The sweep row it gives (kernel, FLOPs, bytes, clock pair, time, energy).
        requested: The clock configuration asked for (``auto`` in a dry run).
        stats: The energy windows' statistics (power, SM and memory clock read, reasons, spread).
    """

    row: SweepRow
    requested: str
    stats: WindowStats


@dataclass
class DeviceSweep:
    """What :func:`device_sweep` measured.

    Attributes:
        readings: Every reading, in the order taken.
        skipped: Suite kernels that could not run here, with why.
        observe: True when no clock was locked (the suite at the clocks in effect only).
        seconds: Wall time of the sweep, seconds.
    """

    readings: list[Reading] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    observe: bool = True
    seconds: float = 0.0

    @property
    def rows(self) -> list[SweepRow]:
        """The sweep table (what :func:`~rlclock.calibration.sweep.fit_sweep` fits)."""
        return [r.row for r in self.readings]


def nearest_pair(spec: GpuSpec, sm_clock_mhz: float, mem_clock_mhz: float) -> tuple[int, int]:
    """The supported clock pair of ``spec`` nearest to clocks read through NVML (mean SM and memory clock)."""
    mem = min(spec.mem_clocks_mhz, key=lambda m: abs(m - mem_clock_mhz))
    core = min(spec.core_clocks_mhz(mem), key=lambda f: abs(f - sm_clock_mhz))
    return int(core), int(mem)


def planned_configs(spec: GpuSpec, control: ClockControl, per_memory: int = 10) -> list[ClockConfig]:
    """The clock pairs a sweep locks: :func:`~rlclock.calibration.sweep.sweep_configs` at the memory clocks this GPU
    locks at runtime (the one in effect, where memory locks are not runtime), each checked by ``control``; only
    ``auto`` in a dry run."""
    if control.dry_run:
        return [AUTO]
    mems = None if control.memory_locks == "runtime" else (control.memory_in_effect_mhz or spec.default_mem_mhz,)
    if mems is not None and mems[0] not in spec.clocks:
        raise ClockError(
            f"the memory clock in effect ({mems[0]} MHz) is not one of the {spec.key} preset's "
            f"({sorted(spec.clocks)} MHz).",
            "give the preset of this GPU (--gpu), or a spec file with its clock table.",
        )
    return [control.validate(c) for c in sweep_configs(spec, per_memory, mems)]


def device_sweep(
    spec: GpuSpec,
    control: ClockControl,
    sampler: EnergySampler,
    realiser: Realiser,
    per_memory: int = 10,
    settings: MeasureSettings = SWEEP_SETTINGS,
    kernels: Sequence[Kernel] | None = None,
    progress: Callable[[Reading, int, int], None] | None = None,
    save: Callable[[DeviceSweep], Any] | None = None,
    idle_runner: Any | None = None,
    rest_s: float = REST_S,
) -> DeviceSweep:
    """Sweep the suite on the GPU ``control`` holds.

    Args:
        spec: The GPU's preset (its clock table and the suite's sizes).
        control: Clock control of that GPU; in dry-run (observe) mode nothing is locked and only ``auto`` is
            measured. The caller owns it (``with ClockControl(...)``), so the clocks are given back on any exit.
        sampler: A started energy sampler of that GPU.
        realiser: Builds each kernel's runner (:func:`rlclock.gpu.microbench.realise` on a real GPU).
        per_memory: Core clocks per memory clock.
        settings: Energy windows of each reading.
        kernels: The kernels to sweep (default: the suite for ``spec``).
        progress: Called after each reading with it, the readings done and the readings planned.
        save: Called after each clock pair with the sweep so far (write it, so an interrupted sweep keeps its rows).
        idle_runner: The idle window's runner (default: :class:`rlclock.gpu.microbench.IdleRunner`).
        rest_s: A dry run: after the idle reading with the clocks still up, leave the GPU without work this long
            and read it idle again, at the clocks its firmware rests at (:data:`REST_S`; 0: no resting reading).

    Raises:
        ClockError: A clock pair of the sweep is not one this GPU supports (the preset is another GPU's).
        MeasurementError: No suite kernel could run here, or a reading failed.
    """
    t0 = time.perf_counter()
    out = DeviceSweep(observe=control.dry_run)
    configs = planned_configs(spec, control, per_memory)
    runners: list[tuple[Any, Kernel]] = []
    try:
        for k in suite(spec) if kernels is None else kernels:
            try:
                runners.append(realiser(k))
            except MeasurementError as exc:
                out.skipped[k.name] = str(exc).splitlines()[0]
        if not runners:
            raise MeasurementError(
                f"no kernel of the calibration suite could run on this GPU ({out.skipped}).",
                "see the reasons given for each kernel.",
            )
        mems = sorted({c.mem_mhz for c in configs if c.mem_mhz is not None})
        resting = control.dry_run and rest_s > 0
        planned = len(configs) * len(runners) + max(1, len(mems)) + int(resting)
        idle_runner = _idle_runner() if idle_runner is None else idle_runner
        for i, config in enumerate(configs):
            if not control.dry_run:
                control.apply(config)
            for runner, kernel in runners:
                stats = measure(runner, sampler, settings)
                out.readings.append(_reading(spec, kernel, config, stats))
                if progress is not None:
                    progress(out.readings[-1], len(out.readings), planned)
            last_at_memory = i + 1 == len(configs) or configs[i + 1].mem_mhz != config.mem_mhz
            if last_at_memory:  # the idle power at this memory clock, core at its lowest
                idle_config = (
                    config
                    if control.dry_run
                    else ClockConfig(min(spec.core_clocks_mhz(config.mem_mhz)), config.mem_mhz)
                )
                if not control.dry_run:
                    control.apply(control.validate(idle_config))
                stats = measure(idle_runner, sampler, settings)
                out.readings.append(_reading(spec, None, idle_config, stats))
                if progress is not None:
                    progress(out.readings[-1], len(out.readings), planned)
                if resting:  # the same idle after the firmware has had time to lower its clocks
                    time.sleep(rest_s)
                    stats = measure(idle_runner, sampler, settings)
                    out.readings.append(replace(_reading(spec, None, idle_config, stats), requested=RESTING))
                    if progress is not None:
                        progress(out.readings[-1], len(out.readings), planned)
            if save is not None:
                out.seconds = time.perf_counter() - t0
                save(out)
    finally:
        for runner, _ in runners:
            _close(runner)
    out.seconds = time.perf_counter() - t0
    return out


def _idle_runner() -> Any:
    from rlclock.gpu.microbench import IdleRunner

    return IdleRunner()


def _close(runner: Any) -> None:
    close = getattr(runner, "close", None)
    if close is not None:
        with contextlib.suppress(RlclockError):
            close()


def _reading(spec: GpuSpec, kernel: Kernel | None, config: ClockConfig, stats: WindowStats) -> Reading:
    """A reading placed at its clock pair: the locked one, or (dry run) the supported pair nearest to the
    clocks read during its windows."""
    if config.is_auto or config.core_mhz is None or config.mem_mhz is None:
        core, mem = nearest_pair(spec, stats.sm_clock_mhz, stats.mem_clock_mhz)
    else:
        core, mem = int(config.core_mhz), int(config.mem_mhz)
    if kernel is None:
        row = SweepRow(IDLE, 0.0, 0.0, 0.0, "other", "fp32", core, mem, stats.time_s, stats.energy_j)
    else:
        row = rows_from([kernel], [ClockConfig(core, mem)], np.array([[stats.time_s]]), np.array([[stats.energy_j]]))[0]
    return Reading(row, str(config), stats)
