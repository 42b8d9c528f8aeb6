"""``rlclock measure``: each kernel of a captured step, replayed alone, measured at clock configurations.

:class:`KernelMeasurer` measures one trace entry at one configuration: it asks the
:class:`~rlclock.gpu.clocks.ClockControl` for the clocks (refused in a dry run unless the configuration
is ``auto``), replays the isolated kernel back to back and takes tick-aligned energy windows
(:func:`rlclock.gpu.meter.measure`). :func:`measure_trace` runs it over a trace into a
:class:`~rlclock.gpu.table.MeasurementTable`, skipping what the table already holds; :func:`measure_step`
measures the whole captured step the same way; :func:`attach_measurements` puts the results into the
trace as :class:`~rlclock.workload.trace.Measurement` entries.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from rlclock.errors import ClockControlDisabledError
from rlclock.gpu.clocks import ClockControl
from rlclock.gpu.meter import EnergySampler, MeasureSettings, WindowStats, measure
from rlclock.gpu.nvml import NvmlDevice
from rlclock.gpu.table import MeasurementRow, MeasurementTable
from rlclock.schedule import AUTO, ClockConfig
from rlclock.workload.trace import KernelTrace, Measurement


def row_from_stats(
    index: int, op: str, name: str, config: ClockConfig, stats: WindowStats, source: str = "isolated", **extra: Any
) -> MeasurementRow:
    """A table row from a window measurement."""
    return MeasurementRow(
        kernel=index,
        op=op,
        name=name,
        config=str(config),
        time_s=stats.time_s,
        energy_j=stats.energy_j,
        power_w=stats.power_w,
        sm_clock_mhz=stats.sm_clock_mhz,
        mem_clock_mhz=stats.mem_clock_mhz,
        reasons=stats.reasons,
        time_cv=stats.time_cv,
        energy_cv=stats.energy_cv,
        windows=stats.windows,
        units=stats.units,
        window_s=stats.window_s,
        source=source,
        extra={
            "reason_fractions": stats.reason_fractions,
            "busy_fraction": round(stats.busy_fraction, 4),
            "per_window": [list(p) for p in stats.per_window],
            **extra,
        },
    )


def require_clock_control(control: ClockControl | None, config: ClockConfig) -> None:
    """Raise :class:`ClockControlDisabledError` unless ``config`` is auto or ``control`` may set clocks."""
    if config.is_auto:
        return
    if control is None or control.dry_run:
        raise ClockControlDisabledError(
            f"measuring at {config} needs the clocks set, but clock control is off (dry run).",
            "enable it (--control-clocks / control_clocks: true, as root) or measure only 'auto'.",
        )


class KernelMeasurer:
    """Measures trace entries of a captured step at clock configurations (isolated replay, NVML energy).

    Args:
        captured: The :class:`~rlclock.gpu.profile.CapturedStep`.
        trace: Its trace.
        device: The GPU (NVML).
        control: Clock control (needed for any configuration but ``auto``).
        settings: Energy-window settings.
        target_batch_s: GPU time per launch of an isolated replay, seconds.
    """

    def __init__(
        self,
        captured: Any,
        trace: KernelTrace,
        device: NvmlDevice,
        control: ClockControl | None = None,
        settings: MeasureSettings = MeasureSettings(),
        target_batch_s: float = 0.002,
    ) -> None:
        self.captured = captured
        self.trace = trace
        self.device = device
        self.control = control
        self.settings = settings
        self.target_batch_s = target_batch_s
        self.sampler = EnergySampler(device, settings.poll_s, settings.clock_period_s).start()

    def __call__(self, index: int, config: ClockConfig) -> MeasurementRow:
        """Measure entry ``index`` at ``config``."""
        from rlclock.gpu.runners import isolated_runner

        require_clock_control(self.control, config)
        if self.control is not None and not self.control.dry_run:
            self.control.apply(config)
        k = self.trace[index]
        ref = next((m.time_s for m in k.measured if m.source == "in-sequence"), None)
        runner, info = isolated_runner(
            self.captured.view, self.captured.entries[index], self.target_batch_s, reference_s=ref
        )
        try:
            stats = measure(runner, self.sampler, self.settings)
        finally:
            runner.close()
        return row_from_stats(
            index,
            k.op,
            k.name,
            config,
            stats,
            memsets=info.memsets,
            copies=info.copies,
            kernels_back=info.kernels_back,
            valid=not info.early_exit,
            in_sequence_time_s=ref,
        )

    def close(self) -> None:
        """Stop the energy sampler."""
        self.sampler.stop()


def measure_trace(
    measurer: Callable[[int, ClockConfig], MeasurementRow],
    trace: KernelTrace,
    configs: Sequence[ClockConfig] = (AUTO,),
    indices: Sequence[int] | None = None,
    table: MeasurementTable | None = None,
    progress: Callable[[MeasurementRow], None] | None = None,
    save: Callable[[MeasurementTable], Any] | None = None,
) -> MeasurementTable:
    """Measure every selected (entry, configuration) pair the table lacks, each once.

    Args:
        measurer: Measures one entry at one configuration (e.g. a :class:`KernelMeasurer`).
        trace: The trace.
        configs: Configurations to measure.
        indices: Entries (default: the distinct kernels, each measured at its first invocation).
        table: Table to complete (default: a new one).
        progress: Called with every new row.
        save: Called with the table after every new row (to make long runs resumable).
    """
    table = table if table is not None else MeasurementTable()
    table.meta.setdefault("trace", trace.name)
    if indices is None:
        indices = trace.unique_index[0]
    for config in configs:
        for i in indices:
            if table.get(i, config) is not None:
                continue
            row = measurer(i, config)
            table.add(row)
            if progress is not None:
                progress(row)
            if save is not None:
                save(table)
    return table


def measure_step(captured: Any, device: NvmlDevice, settings: MeasureSettings = MeasureSettings()) -> WindowStats:
    """Time and energy of the whole captured step replayed back to back (auto clocks)."""
    from rlclock.gpu.cuda_graph import GraphExec
    from rlclock.gpu.runners import GraphRunner

    runner = GraphRunner(GraphExec(captured.raw_graph))
    try:
        with EnergySampler(device, settings.poll_s, settings.clock_period_s) as sampler:
            return measure(runner, sampler, settings)
    finally:
        runner.close()


def table_meta(device: NvmlDevice, trace: KernelTrace, settings: MeasureSettings, mode: str) -> dict[str, Any]:
    """Metadata of a table measured on ``device``: GPU, driver, trace, date, settings, mode."""
    from rlclock.gpu import nvml

    return {
        "gpu": device.name,
        "uuid": nvml.try_read(lambda: device.uuid),
        "driver": nvml.try_read(nvml.driver_version),
        "trace": trace.name,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "settings": {"window_s": settings.window_s, "warmup_s": settings.warmup_s, "repeats": settings.repeats},
        "clock_mode": mode,
        "method": "each kernel replayed alone from the captured CUDA graph (its dependency memsets kept), "
        "copies chained in one graph; time from CUDA events; energy from NVML's total-energy counter "
        "over tick-aligned windows after warm-up; energy per launch = window power x time per launch",
    }


def attach_measurements(trace: KernelTrace, table: MeasurementTable, gpu: str | None = None) -> KernelTrace:
    """A copy of ``trace`` whose entries carry the table's rows as :class:`Measurement` s (first in the list).

    Rows flagged ``valid: false`` (a kernel that exits early when replayed alone) are left out.

    Args:
        trace: The trace the table was measured on (rows are matched by entry index and name).
        table: The measurements.
        gpu: GPU name for the measurements (default: the table's).
    """
    gpu = gpu or str(table.meta.get("gpu", "unknown"))
    kernels = []
    for i, k in enumerate(trace):
        new = []
        for r in table:
            if r.kernel == i and r.name == k.name and r.extra.get("valid", True):
                c = r.clock
                new.append(
                    Measurement(
                        gpu=gpu,
                        time_s=r.time_s,
                        energy_j=r.energy_j,
                        core_mhz=c.core_mhz,
                        mem_mhz=c.mem_mhz,
                        sm_clock_mhz=r.sm_clock_mhz,
                        source=r.source,
                    )
                )
        keep = tuple(m for m in k.measured if m not in new and not (m.source == "isolated" and m.gpu == gpu))
        kernels.append(replace(k, measured=tuple(new) + keep))
    return trace.with_kernels(kernels)
