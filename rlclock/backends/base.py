"""GpuBackend: the one accounting of time, energy, switches and switching latency over a trace.

A backend knows, for its trace and its configuration set, the time and energy of every kernel invocation
at every configuration (``tables``) — from a model (:class:`~rlclock.backends.simulated.SimulatedGpu`), a
recorded table (:class:`~rlclock.backends.recorded.RecordedGpu`) or live measurement
(:class:`~rlclock.backends.nvml_gpu.NvmlGpu`). How a sequence of requests turns into time and energy is the
switching rule of :mod:`rlclock.backends.switching`; :meth:`GpuBackend.run` applies it to a whole schedule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from rlclock.backends.switching import FlightLog, fly
from rlclock.dvfs.spec import GpuSpec
from rlclock.errors import ScheduleError
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
from rlclock.workload.trace import KernelTrace


@dataclass
class RunResult:
    """A schedule's run on a backend.

    Attributes:
        time_s: Step time, seconds.
        energy_j: Step energy, joules.
        switches: Clock switches issued.
        off_plan_time_s: Time run at a configuration other than the requested one.
        kernel_time_s: Per-invocation duration.
        kernel_energy_j: Per-invocation energy.
        start_s: Per-invocation start time.
        config_index: Configuration in effect when each invocation started (index into ``configs``).
        requested_index: Configuration requested for each invocation.
        switch_issue_s: When each switch was issued.
        switch_land_s: When each switch landed (``inf`` if the step ended first).
        switch_to: Target configuration index of each switch.
        configs: The configuration set the indices refer to.
    """

    time_s: float
    energy_j: float
    switches: int
    off_plan_time_s: float
    kernel_time_s: np.ndarray
    kernel_energy_j: np.ndarray
    start_s: np.ndarray
    config_index: np.ndarray
    requested_index: np.ndarray
    switch_issue_s: np.ndarray
    switch_land_s: np.ndarray
    switch_to: np.ndarray
    configs: tuple[ClockConfig, ...]

    @property
    def mean_power_w(self) -> float:
        return self.energy_j / self.time_s


class GpuBackend(ABC):
    """A GPU executing a trace, as seen by rlclock: configurations in, time and energy out.

    Subclasses provide :meth:`_compute_tables`; everything else — schedule runs, the auto run, validation
    — is shared so every judge uses the same accounting.

    Args:
        spec: The GPU.
        trace: The kernel sequence of one step.
        configs: The configuration set (``AUTO`` is put first if missing); validated against the spec.
        latency_s: Switching latency; default the spec's.

    Attributes:
        power_limit_w: The board power limit the step runs under, watts (the spec's unless a subclass says
            otherwise); a schedule naming another one runs on :meth:`at_power_limit`.
    """

    deterministic: bool = True

    def __init__(
        self,
        spec: GpuSpec,
        trace: KernelTrace,
        configs: Sequence[ClockConfig] | None = None,
        latency_s: float | None = None,
    ) -> None:
        self.spec = spec
        self.trace = trace
        cfgs = [spec.validate(c) for c in (configs if configs is not None else spec.config_grid())]
        if AUTO in cfgs:
            cfgs.remove(AUTO)
        self.configs: tuple[ClockConfig, ...] = (AUTO, *dict.fromkeys(cfgs))
        self.latency_s = float(spec.switch_latency_s if latency_s is None else latency_s)
        if not np.isfinite(self.latency_s) or self.latency_s < 0:
            raise ScheduleError(f"switching latency must be a finite number >= 0 s, found {latency_s!r}.")
        self._index = {c: i for i, c in enumerate(self.configs)}
        self.power_limit_w = float(spec.power_limit_w)
        self._under_limit: dict[tuple[float, tuple[ClockConfig, ...]], GpuBackend] = {}

    @property
    def n_kernels(self) -> int:
        return len(self.trace)

    @property
    def n_configs(self) -> int:
        return len(self.configs)

    def config_index(self, config: ClockConfig | str) -> int:
        """Position of a configuration in :attr:`configs`."""
        c = ClockConfig.parse(config)
        if c not in self._index:
            raise ScheduleError(f"configuration {c} is not in this backend's configuration set.")
        return self._index[c]

    @abstractmethod
    def _compute_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(time_s, energy_j)`` arrays of shape ``(n_kernels, n_configs)``."""

    @cached_property
    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-invocation ``(time_s, energy_j)`` at every configuration, shape ``(n_kernels, n_configs)``."""
        t, e = self._compute_tables()
        if t.shape != (self.n_kernels, self.n_configs) or e.shape != t.shape:
            raise RuntimeError(f"backend produced tables of shape {t.shape}/{e.shape}")
        if not (np.all(np.isfinite(t)) and np.all(t > 0) and np.all(np.isfinite(e)) and np.all(e >= 0)):
            raise ScheduleError(
                "the backend produced non-finite or non-positive kernel times, or non-finite or negative energies."
            )
        t.setflags(write=False)
        e.setflags(write=False)
        return t, e

    def switch_latency_s(self, current: int, target: int) -> float:
        """Seconds from a request for configuration ``target`` (an index) to its landing, with ``current`` in
        effect: :attr:`latency_s` on every backend the planners model (a backend standing for a real GPU may
        differ by direction, :class:`rlclock.backends.true_gpu.TrueGpu`)."""
        return self.latency_s

    def schedule_indices(self, schedule: ClockSchedule) -> np.ndarray:
        """The schedule's per-kernel indices into :attr:`configs` (validated)."""
        schedule.check_length(self.n_kernels)
        for c in schedule.configs:
            self.spec.validate(c)
        return schedule.reindexed(self.configs)

    def run(self, schedule: ClockSchedule, initial: ClockConfig = AUTO) -> RunResult:
        """Run a schedule from ``initial`` clocks with nothing in flight (:mod:`rlclock.backends.switching`), under
        the schedule's power limit where it names one other than :attr:`power_limit_w`.

        Raises:
            ScheduleError: The schedule does not fit this backend, or names a power limit this backend cannot
                run under (:meth:`at_power_limit`).
        """
        req = self.schedule_indices(schedule)
        start = self.config_index(initial)
        limit = schedule.power_limit_w
        if limit is None or limit == self.power_limit_w:
            return self.run_indices(req, initial=start)
        # the same accounting on this step under the other limit, predicting only the configurations in use
        used = tuple(self.configs[i] for i in np.unique(np.append(req, start)))
        key = (limit, used)
        if key not in self._under_limit:
            self._under_limit[key] = self.at_power_limit(limit).with_configs(used)
        other = self._under_limit[key]
        there = np.array([other._index.get(c, -1) for c in self.configs])
        back = np.array([self._index[c] for c in other.configs])
        run = other.run_indices(there[req], initial=int(there[start]))
        return replace(
            run,
            config_index=back[run.config_index],
            requested_index=req.copy(),
            switch_to=back[run.switch_to],
            configs=self.configs,
        )

    def run_indices(self, requested: np.ndarray, initial: int = 0) -> RunResult:
        """:meth:`run` for per-kernel configuration indices."""
        t_tab, e_tab = self.tables
        n = self.n_kernels
        requested = np.asarray(requested, dtype=np.int64)
        if requested.shape != (n,):
            raise ScheduleError(f"expected {n} configuration indices, found shape {requested.shape}.")
        if (n and (requested.min() < 0 or requested.max() >= self.n_configs)) or not 0 <= initial < self.n_configs:
            raise ScheduleError(
                f"configuration indices must lie in 0..{self.n_configs - 1}, found "
                f"{int(requested.min())}..{int(requested.max())} (initial {initial})."
            )
        if self.latency_s == 0.0 or not np.any(requested != initial):  # no switch in flight, ever
            rows = np.arange(n)
            kt, ke = t_tab[rows, requested], e_tab[rows, requested]
            changes = np.flatnonzero(np.diff(np.concatenate([[initial], requested])))
            start = np.concatenate([[0.0], np.cumsum(kt)[:-1]])
            return RunResult(
                time_s=float(kt.sum()),
                energy_j=float(ke.sum()),
                switches=int(changes.size),
                off_plan_time_s=0.0,
                kernel_time_s=kt,
                kernel_energy_j=ke,
                start_s=start,
                config_index=requested.copy(),
                requested_index=requested.copy(),
                switch_issue_s=start[changes],
                switch_land_s=start[changes],
                switch_to=requested[changes],
                configs=self.configs,
            )
        log = FlightLog(requested, np.empty(n), np.empty(n), np.zeros(n))
        cfg = np.empty(n, dtype=np.int64)
        t_at, e_at = t_tab.item, e_tab.item
        issue_s: list[float] = []
        land_s: list[float] = []
        to: list[int] = []
        off, clock, cur, i = 0.0, 0.0, int(initial), 0
        while i < n:
            r = int(requested[i])
            if r == cur:  # nothing to issue: the kernel runs at what is in effect
                log.time_s[i], log.energy_j[i] = t_at(i, cur), e_at(i, cur)
                cfg[i] = cur
                clock += log.time_s[i]
                i += 1
                continue
            issue_s.append(clock)
            to.append(r)
            stop, after_s, _, _ = fly(t_at, e_at, n, i, cur, r, self.switch_latency_s(cur, r), log)
            cfg[i:stop] = cur
            for j in range(i, stop):
                off += log.off_plan_s[j]
                if j == stop - 1:
                    land_s.append(clock + after_s)
                clock += log.time_s[j]
            if np.isfinite(after_s):
                cur = r
            i = stop
        kt, ke = log.time_s, log.energy_j
        start = np.concatenate([[0.0], np.cumsum(kt)[:-1]])
        return RunResult(
            time_s=float(kt.sum()),
            energy_j=float(ke.sum()),
            switches=len(issue_s),
            off_plan_time_s=off,
            kernel_time_s=kt,
            kernel_energy_j=ke,
            start_s=start,
            config_index=cfg,
            requested_index=requested.copy(),
            switch_issue_s=np.array(issue_s),
            switch_land_s=np.array(land_s),
            switch_to=np.array(to, dtype=np.int64),
            configs=self.configs,
        )

    @cached_property
    def _auto_run(self) -> RunResult:
        return self.run_indices(np.zeros(self.n_kernels, dtype=np.int64))

    def auto_run(self) -> RunResult:
        """The step at the driver's own clocks (cached)."""
        return self._auto_run

    def at_power_limit(self, power_limit_w: float) -> GpuBackend:
        """The same GPU and step under another board power limit (the driver's clocks then stay under it).

        Raises:
            ScheduleError: This backend cannot change its power limit (only a simulated GPU can; a real GPU's
                limit is a setting rlclock does not change).
        """
        raise ScheduleError(
            f"{type(self).__name__} cannot run under another power limit.",
            "compare power limits on a simulated GPU (SimulatedGpu).",
        )

    def with_configs(self, configs: Sequence[ClockConfig]) -> GpuBackend:
        """The same GPU and step over another configuration set (e.g. one memory clock for a whole job).

        Raises:
            ScheduleError: This backend cannot (only a simulated GPU predicts configurations it was not given).
        """
        raise ScheduleError(
            f"{type(self).__name__} cannot run configurations it was not built with.",
            "compare whole-job memory clocks on a simulated GPU (SimulatedGpu).",
        )

    def describe(self) -> str:
        """One line: backend, GPU, trace, configurations, latency."""
        return (
            f"{type(self).__name__}({self.spec.key}, trace {self.trace.name!r} of {self.n_kernels} kernels, "
            f"{self.n_configs} configurations, switching latency {self.latency_s * 1e3:g} ms)"
        )
