"""The backend an env spec names (simulated by default; recorded and live NVML where available)."""

from __future__ import annotations

from collections.abc import Sequence

from rlclock.backends.base import GpuBackend
from rlclock.backends.settings import NvmlSettings, RecordedSettings, SimulatedSettings
from rlclock.dvfs.spec import GpuSpec
from rlclock.schedule import ClockConfig
from rlclock.workload.trace import KernelTrace


def make_backend(
    gpu: GpuSpec,
    trace: KernelTrace,
    configs: Sequence[ClockConfig],
    latency_s: float | None,
    settings: SimulatedSettings | RecordedSettings | NvmlSettings,
    seed: int | None = None,
    where: str = "<spec>",
) -> GpuBackend:
    """The backend ``settings`` describe over ``trace``, with the action set ``configs`` and the switching
    latency ``latency_s`` (``None``: the GPU's). ``seed`` seeds a simulator's noise unless the settings do."""
    if isinstance(settings, SimulatedSettings):
        from rlclock.backends.simulated import SimulatedGpu

        return SimulatedGpu(
            gpu,
            trace,
            configs,
            latency_s,
            anchor=settings.anchor,
            noise_std=settings.noise_std,
            seed=settings.seed if settings.seed is not None else seed,
            power_limit_w=settings.power_limit_w,
        )
    if isinstance(settings, RecordedSettings):
        from rlclock.backends.recorded import RecordedGpu

        return RecordedGpu.from_file(settings.table, gpu, trace, configs, latency_s, missing=settings.missing)
    from rlclock.backends.nvml_gpu import NvmlGpu

    return NvmlGpu.from_settings(gpu, trace, configs, latency_s, settings, where)
