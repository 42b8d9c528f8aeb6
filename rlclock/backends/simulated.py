"""SimulatedGpu: the calibrated DVFS model as a backend (the embedded default)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from rlclock.backends.base import GpuBackend
from rlclock.dvfs import model
from rlclock.dvfs.spec import GpuSpec
from rlclock.dvfs.timed import work_from_time
from rlclock.schedule import ClockConfig
from rlclock.workload.trace import Kernel, KernelTrace


class SimulatedGpu(GpuBackend):
    """A GPU simulated by the DVFS model of ``docs/simulator.md``.

    Args:
        spec: The GPU (its preset holds the model parameters).
        trace: The step to run.
        configs: Configuration set (default: every supported pair plus auto entries).
        latency_s: Switching latency (default: the spec's).
        anchor: Anchor every kernel that carries a measured auto-clock point for this GPU on it, so the model
            only predicts how that point moves with the clocks. ``False`` predicts everything from shapes.
        noise_std: Relative standard deviation of multiplicative (log-normal) measurement noise on every
            (kernel, configuration) time and energy; 0 for none.
        seed: Seed of the noise.
        power_limit_w: Override the spec's power limit.
    """

    def __init__(
        self,
        spec: GpuSpec,
        trace: KernelTrace,
        configs: Sequence[ClockConfig] | None = None,
        latency_s: float | None = None,
        anchor: bool = True,
        noise_std: float = 0.0,
        seed: int | None = None,
        power_limit_w: float | None = None,
    ) -> None:
        super().__init__(spec, trace, configs, latency_s)
        self.anchor = anchor
        self.noise_std = float(noise_std)
        self.seed = seed
        self.power_limit_w = spec.power_limit_w if power_limit_w is None else float(power_limit_w)

    def at_power_limit(self, power_limit_w: float) -> SimulatedGpu:
        """This simulated GPU and step under another power limit (measured points stay anchored at the
        preset's limit, where they were taken)."""
        return self._derived(self.configs, power_limit_w)

    def with_configs(self, configs: Sequence[ClockConfig]) -> SimulatedGpu:
        """This simulated GPU and step over another configuration set."""
        return self._derived(configs, self.power_limit_w)

    def _derived(self, configs: Sequence[ClockConfig], power_limit_w: float) -> SimulatedGpu:
        """The same step over ``configs`` under ``power_limit_w``, sharing the model's inputs (and their anchoring,
        which neither changes) once computed."""
        other = SimulatedGpu(
            self.spec, self.trace, configs, self.latency_s, self.anchor, self.noise_std, self.seed, power_limit_w
        )
        if "distinct_inputs" in self.__dict__:
            other.__dict__["distinct_inputs"] = self.distinct_inputs
        return other

    def anchored_kernels(self) -> list[int]:
        """Indices of the distinct kernels that carry a measured point for this GPU."""
        first, _ = self.trace.unique_index
        return [j for j, i in enumerate(first) if _measured_point(self.trace[i], self.spec) is not None]

    @cached_property
    def distinct_inputs(self) -> model.KernelArrays:
        """The model's inputs for every distinct kernel of the trace, anchored on its measured auto points when
        ``anchor`` (at the preset's limit, whatever this backend's)."""
        first, _ = self.trace.unique_index
        kernels = work_from_time([self.trace[i] for i in first], self.spec)
        ka = model.kernel_arrays(kernels, self.spec)
        if self.anchor:
            points = [_measured_point(k, self.spec) for k in kernels]
            if any(p is not None for p in points):
                t = np.array([np.nan if p is None else p[0] for p in points])
                e = np.array([np.nan if p is None or p[1] is None else p[1] for p in points])
                ka = model.anchor(ka, self.spec, t, e)
        return ka

    def predict_distinct(self, configs: Sequence[ClockConfig] | None = None) -> model.Prediction:
        """The model's prediction for every distinct kernel of the trace (rows) at ``configs`` (columns)."""
        return model.predict(
            self.distinct_inputs, self.spec, self.configs if configs is None else configs, self.power_limit_w
        )

    def _compute_tables(self) -> tuple[np.ndarray, np.ndarray]:
        pred = self.predict_distinct()
        _, inverse = self.trace.unique_index
        t = pred.time_s[inverse]
        e = pred.energy_j[inverse]
        if self.noise_std > 0:
            rng = np.random.default_rng(self.seed)
            t = t * rng.lognormal(0.0, self.noise_std, t.shape)
            e = e * rng.lognormal(0.0, self.noise_std, e.shape)
        return np.ascontiguousarray(t), np.ascontiguousarray(e)


def _measured_point(k: Kernel, spec: GpuSpec) -> tuple[float, float | None] | None:
    """The kernel's auto-clock measurement on this GPU, if it has one."""
    for m in k.measured:
        if m.is_auto and m.gpu in (spec.key, spec.name):
            return m.time_s, m.energy_j
    return None
