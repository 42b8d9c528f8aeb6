"""NvmlGpu: the NVML backend — kernels of a captured step measured on this machine's GPU, on demand.

Each distinct kernel of the trace is replayed alone at each configuration of the action set and measured
through NVML (:mod:`rlclock.gpu.measure`); results are cached in a
:class:`~rlclock.gpu.table.MeasurementTable` (optionally a file, so a long sweep resumes where it stopped
and later runs replay it with :class:`~rlclock.backends.recorded.RecordedGpu`). Every (kernel, configuration)
pair is measured once. Real measurements vary, so the backend is registered nondeterministic.

Env spec (``backend:``)::

    backend: {kind: nvml, device: 0, control_clocks: false, cache: runs/nvml/gpt3xl-h200.json,
              window_s: 0.5, warmup_s: 0.3, repeats: 3}

Without ``control_clocks`` (a dry run) only ``auto`` can be measured; other configurations raise
:class:`~rlclock.errors.ClockControlDisabledError` when their tables are first needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from rlclock.backends.base import GpuBackend
from rlclock.backends.settings import NvmlSettings
from rlclock.dvfs.spec import GpuSpec
from rlclock.errors import SpecError
from rlclock.gpu.table import MeasurementRow, MeasurementTable
from rlclock.schedule import ClockConfig
from rlclock.workload.trace import KernelTrace


class NvmlGpu(GpuBackend):
    """A backend measuring its tables live.

    Args:
        spec: The GPU's preset.
        trace: The step (a trace written by ``rlclock profile``).
        configs: Configuration set.
        latency_s: Switching latency (default: the spec's).
        measurer: Measures one trace entry at one configuration (a :class:`~rlclock.gpu.measure.KernelMeasurer`
            live; anything with that call shape in tests).
        table: Measurements to start from (cache).
        cache_path: File the cache is saved to after every new measurement.
        on_close: Called by :meth:`close` (releases the GPU resources of the live measurer).
    """

    deterministic = False

    def __init__(
        self,
        spec: GpuSpec,
        trace: KernelTrace,
        configs: Sequence[ClockConfig] | None = None,
        latency_s: float | None = None,
        *,
        measurer: Callable[[int, ClockConfig], MeasurementRow],
        table: MeasurementTable | None = None,
        cache_path: str | Path | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(spec, trace, configs, latency_s)
        self.measurer = measurer
        self.cache_path = None if cache_path is None else Path(cache_path)
        if table is None and self.cache_path is not None and self.cache_path.is_file():
            table = MeasurementTable.load(self.cache_path)
        self.table = table if table is not None else MeasurementTable({"gpu": spec.name, "trace": trace.name})
        self._on_close = on_close
        self.measured_now = 0

    def measure(self, index: int, config: ClockConfig | str) -> MeasurementRow:
        """The row of trace entry ``index`` at ``config``; measured only if no identical kernel has one yet."""
        c = ClockConfig.parse(config)
        first, inverse = self.trace.unique_index
        j = first[int(inverse[index])]
        row = self.table.get(j, c)
        if row is None:
            row = self.measurer(j, c)
            self.table.add(row)
            self.measured_now += 1
            if self.cache_path is not None:
                self.table.save(self.cache_path)
        return row

    def _compute_tables(self) -> tuple[np.ndarray, np.ndarray]:
        first, inverse = self.trace.unique_index
        t = np.empty((len(first), self.n_configs))
        e = np.empty_like(t)
        for c_i, c in enumerate(self.configs):  # one configuration at a time: fewest clock changes
            for d, i in enumerate(first):
                r = self.measure(i, c)
                t[d, c_i], e[d, c_i] = r.time_s, r.energy_j
        return t[inverse], e[inverse]

    def close(self) -> None:
        """Release the live measurer (restores clocks if it controlled them)."""
        if self._on_close is not None:
            self._on_close()
            self._on_close = None

    @classmethod
    def from_settings(
        cls,
        gpu: GpuSpec,
        trace: KernelTrace,
        configs: Sequence[ClockConfig],
        latency_s: float | None,
        settings: NvmlSettings,
        where: str = "<spec>",
    ) -> NvmlGpu:
        """The NVML backend of an env spec's ``backend: {kind: nvml, ...}`` (captures the trace's step on this
        machine's GPU).

        Raises:
            SpecError: GPU ``settings.device`` is not ``gpu``.
            GpuUnavailableError: No GPU / CUDA / NVML here.
            CudaGraphError: This machine launches other kernels than the trace lists.
        """
        from rlclock.gpu.clocks import ClockControl
        from rlclock.gpu.measure import KernelMeasurer, table_meta
        from rlclock.gpu.meter import MeasureSettings
        from rlclock.gpu.nvml import NvmlDevice
        from rlclock.gpu.profile import capture_for_trace

        index = settings.device
        device = NvmlDevice(index)
        if device.name != gpu.name:
            raise SpecError(
                f"{where}: the spec's GPU is {gpu.name!r} but GPU {index} is {device.name!r}.",
                "use the preset of this GPU (rlclock doctor names it).",
            )
        measure = MeasureSettings(window_s=settings.window_s, warmup_s=settings.warmup_s, repeats=settings.repeats)
        captured = capture_for_trace(trace)
        control = ClockControl(index, control_clocks=settings.control_clocks)
        measurer = KernelMeasurer(captured, trace, device, control, measure, settings.target_batch_s)

        def release() -> None:
            measurer.close()
            control.close()

        backend = cls(gpu, trace, configs, latency_s, measurer=measurer, cache_path=settings.cache, on_close=release)
        mode = "live" if settings.control_clocks else "observe"
        backend.table.meta.update(
            {k: v for k, v in table_meta(device, trace, measure, mode).items() if k not in backend.table.meta}
        )
        return backend
