"""PlanningStep: one training step as the planner sees it — the planning model's tables and the auto run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlclock.backends.base import GpuBackend
from rlclock.workload.trace import KernelTrace


@dataclass(frozen=True)
class PlanningStep:
    """The inputs every rollout of one step reads.

    Attributes:
        trace: The step's kernels.
        time_s: ``(n, C)`` the planning model's seconds per kernel and configuration of the action set.
        energy_j: ``(n, C)`` its joules.
        auto_time_s: ``(n,)`` each kernel's seconds at auto clocks.
        auto_energy_j: ``(n,)`` its joules at auto clocks.
        latency_s: The switching latency planned for, seconds.
    """

    trace: KernelTrace
    time_s: np.ndarray
    energy_j: np.ndarray
    auto_time_s: np.ndarray
    auto_energy_j: np.ndarray
    latency_s: float

    @classmethod
    def of(cls, backend: GpuBackend) -> PlanningStep:
        """The step of a backend (its tables and its auto run)."""
        t, e = backend.tables
        auto = backend.auto_run()
        return cls(backend.trace, t, e, auto.kernel_time_s, auto.kernel_energy_j, backend.latency_s)

    @property
    def n(self) -> int:
        return int(self.time_s.shape[0])

    @property
    def auto_total_s(self) -> float:
        """The auto step's seconds (kernels in order)."""
        return float(self.auto_time_s.sum())

    @property
    def mean_power_w(self) -> float:
        """The auto step's mean power, watts."""
        return float(self.auto_energy_j.sum() / max(self.auto_time_s.sum(), 1e-12))
