"""RecordedGpu: a measurement table written on a real GPU, replayed on any machine.

Every invocation of the trace is looked up in the table by ``(op, kernel name, configuration)``, so a
table measured on one profiled layer serves any trace made of that layer's kernels (e.g. the layer
repeated 24 times). What the table lacks — or holds only as a row flagged ``valid: false`` (a kernel that
could not be replayed alone) — is an error by default; ``missing="simulated"`` fills it from the simulator
anchored on the table's auto-clock rows (and the trace's own measurements) instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from rlclock.backends.base import GpuBackend
from rlclock.dvfs.spec import GpuSpec
from rlclock.errors import ScheduleError, SpecError
from rlclock.gpu.table import MeasurementTable
from rlclock.schedule import AUTO, ClockConfig
from rlclock.workload.trace import KernelTrace, Measurement


class RecordedGpu(GpuBackend):
    """A backend whose times and energies come from a :class:`MeasurementTable`.

    Args:
        spec: The GPU the table was measured on.
        trace: The step to run.
        table: The measurements.
        configs: Configuration set (default: the configurations the table has).
        latency_s: Switching latency (default: the spec's).
        missing: ``"error"``: every (kernel, configuration) must be in the table; ``"simulated"``: fill the
            rest from the simulator, anchored on the table's auto-clock rows.

    Raises:
        SpecError: The table was measured on another GPU.
        ScheduleError: Entries are missing (with ``missing="error"``).
    """

    def __init__(
        self,
        spec: GpuSpec,
        trace: KernelTrace,
        table: MeasurementTable,
        configs: Sequence[ClockConfig] | None = None,
        latency_s: float | None = None,
        missing: str = "error",
    ) -> None:
        if configs is None:
            configs = [ClockConfig.parse(c) for c in table.configs()]
        super().__init__(spec, trace, configs, latency_s)
        gpu = table.meta.get("gpu")
        if gpu is not None and gpu not in (spec.name, spec.key):
            raise SpecError(
                f"the measurement table was taken on {gpu!r}, but the backend's GPU is {spec.name!r}.",
                "use the matching GPU preset in the env spec.",
            )
        table.check_clocks(spec)
        if missing not in ("error", "simulated"):
            raise SpecError(f"RecordedGpu: missing={missing!r} is unknown.", "use 'error' or 'simulated'.")
        self.table = table
        self.missing = missing

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        spec: GpuSpec,
        trace: KernelTrace,
        configs: Sequence[ClockConfig] | None = None,
        latency_s: float | None = None,
        missing: str = "error",
    ) -> RecordedGpu:
        """Load the table written by ``rlclock measure`` at ``path``."""
        return cls(spec, trace, MeasurementTable.load(path), configs, latency_s, missing)

    def _compute_tables(self) -> tuple[np.ndarray, np.ndarray]:
        rows = self.table.by_key()
        n, c = self.n_kernels, self.n_configs
        t = np.full((n, c), np.nan)
        e = np.full((n, c), np.nan)
        for i, k in enumerate(self.trace):
            for j, cfg in enumerate(self.configs):
                r = rows.get((k.op, k.name, str(cfg)))
                if r is not None and r.extra.get("valid", True):
                    t[i, j], e[i, j] = r.time_s, r.energy_j
        hole = np.isnan(t) | np.isnan(e)
        if hole.any():
            if self.missing == "error":
                i, j = map(int, np.argwhere(hole)[0])
                raise ScheduleError(
                    f"the measurement table lacks {int(hole.sum())} of {n * c} (kernel, clock) pairs, e.g. "
                    f"{self.trace[i].op!r} at {self.configs[j]}.",
                    "measure them (rlclock measure --clocks ...), restrict the env's actions to the measured "
                    f"configurations {self.table.configs()}, or use missing='simulated'.",
                )
            ts, es = self._simulated()
            t[hole], e[hole] = ts[hole], es[hole]
        return t, e

    def _simulated(self) -> tuple[np.ndarray, np.ndarray]:
        from rlclock.backends.simulated import SimulatedGpu

        rows = self.table.by_key()
        kernels = []
        for k in self.trace:
            r = rows.get((k.op, k.name, str(AUTO)))
            point: tuple[Measurement, ...] = ()
            if r is not None and r.extra.get("valid", True):
                point = (
                    Measurement(
                        gpu=self.spec.key,
                        time_s=r.time_s,
                        energy_j=r.energy_j,
                        sm_clock_mhz=r.sm_clock_mhz,
                        source="recorded",
                    ),
                )
            kernels.append(replace(k, measured=point + tuple(k.measured)))
        sim = SimulatedGpu(self.spec, self.trace.with_kernels(kernels), self.configs, self.latency_s, anchor=True)
        t, e = sim.tables
        return np.array(t), np.array(e)
