"""Build the backend an env spec names (simulated by default; recorded and live NVML where available)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlclock.errors import SpecError
from rlclock.gpu.backend import GpuBackend
from rlclock.workload.trace import KernelTrace

if TYPE_CHECKING:  # pragma: no cover
    from rlclock.config import EnvSpec

_SIMULATED_KEYS = {"kind", "anchor", "noise_std", "seed", "power_limit_w"}


def make_backend(spec: EnvSpec, trace: KernelTrace, seed: int | None = None) -> GpuBackend:
    """The backend of ``spec.backend`` over ``trace`` with the spec's action set and latency."""
    b = dict(spec.backend)
    kind = b.get("kind", "simulated")
    configs = spec.configs()
    if kind == "simulated":
        from rlclock.gpu.simulated import SimulatedGpu

        bad = set(b) - _SIMULATED_KEYS
        if bad:
            raise SpecError(f"{spec.source}: simulated backend takes {sorted(_SIMULATED_KEYS)}, found {sorted(bad)}.")
        return SimulatedGpu(spec.gpu, trace, configs, spec.switch_latency_s, anchor=bool(b.get("anchor", True)),
                            noise_std=float(b.get("noise_std", 0.0)),
                            seed=b.get("seed", seed), power_limit_w=b.get("power_limit_w"))
    if kind == "recorded":
        from rlclock.gpu.recorded import RecordedGpu

        if "table" not in b:
            raise SpecError(f"{spec.source}: a recorded backend needs 'table: FILE' (written by rlclock measure).")
        return RecordedGpu.from_file(b["table"], spec.gpu, trace, configs, spec.switch_latency_s)
    if kind == "nvml":
        from rlclock.gpu.nvml_backend import NvmlGpu

        return NvmlGpu.from_spec(spec, trace)
    raise SpecError(f"{spec.source}: backend kind {kind!r} is unknown.")
