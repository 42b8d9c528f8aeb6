"""GpuBackend: the one accounting of time, energy, switches and switching latency.

A backend knows, for its trace and its configuration set, the time and energy of every kernel invocation
at every configuration (``tables``) — from a model (:class:`~rlclock.gpu.simulated.SimulatedGpu`), a
recorded table (:class:`~rlclock.gpu.recorded.RecordedGpu`) or live measurement (``NvmlGpu``). How a
sequence of requests turns into time and energy is defined once, in :class:`SwitchEngine`:

* A request is issued at the start of a kernel. If it differs from the configuration in effect and no
  switch is in flight, a switch starts; it lands ``latency_s`` later (immediately when the latency is 0).
* Kernels keep running at the old clocks until the switch lands. A switch that lands inside a kernel
  splits it: the part of its work done before runs at the old clocks, the rest at the new ones.
* While a switch is in flight, further requests are not issued (the driver call is still busy); the
  request of the first kernel that starts after the landing is looked at afresh.
* Time a kernel spends at a configuration other than the one requested for it is "off-plan" time.

The environment steps this engine one kernel at a time (batched over environments); ``run`` steps it over
a whole schedule; the exact latency-aware optimum is verified against it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from rlclock.errors import ScheduleError
from rlclock.gpu.spec import GpuSpec
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


@dataclass
class EngineState:
    """Switching state of a batch of ``N`` independent runs (all arrays of shape ``(N,)``)."""

    current: np.ndarray  # configuration in effect
    pending: np.ndarray  # configuration a switch in flight goes to, -1 if none
    land_in_s: np.ndarray  # time until the switch in flight lands

    @classmethod
    def start(cls, n: int, initial: int | np.ndarray = 0) -> EngineState:
        cur = np.broadcast_to(np.asarray(initial, dtype=np.int64), (n,)).copy()
        return cls(cur, np.full(n, -1, dtype=np.int64), np.zeros(n))

    def reset(self, mask: np.ndarray, initial: int = 0) -> None:
        """Restart the runs selected by ``mask`` from ``initial`` with nothing in flight."""
        self.current[mask] = initial
        self.pending[mask] = -1
        self.land_in_s[mask] = 0.0


@dataclass
class StepOutcome:
    """What one kernel of every run cost (arrays of shape ``(N,)``)."""

    time_s: np.ndarray
    energy_j: np.ndarray
    issued: np.ndarray  # a switch was issued at this kernel's start
    off_plan_s: np.ndarray
    started_at: np.ndarray  # configuration in effect when the kernel started
    landed_after_s: np.ndarray  # time into the kernel at which a switch landed (nan if none)


class SwitchEngine:
    """Steps batches of runs through kernels under the switching-latency rules (module docstring)."""

    @staticmethod
    def step(time_row: np.ndarray, energy_row: np.ndarray, request: np.ndarray, state: EngineState,
             latency_s: np.ndarray | float) -> StepOutcome:
        """Run one kernel in each of ``N`` runs.

        Args:
            time_row: ``(N, C)`` duration of the kernel each run is at, per configuration.
            energy_row: ``(N, C)`` its energy per configuration.
            request: ``(N,)`` requested configuration index.
            state: Switching state, updated in place.
            latency_s: Switching latency (scalar or ``(N,)``).

        Returns:
            The kernel's time, energy, whether a switch was issued, and its off-plan time.
        """
        n = request.shape[0]
        rows = np.arange(n)
        lat = np.broadcast_to(np.asarray(latency_s, dtype=float), (n,))
        issue = (state.pending < 0) & (request != state.current)
        state.pending = np.where(issue, request, state.pending)
        state.land_in_s = np.where(issue, lat, state.land_in_s)
        now = (state.pending >= 0) & (state.land_in_s <= 0.0)
        state.current = np.where(now, state.pending, state.current)
        state.pending = np.where(now, -1, state.pending)
        started = state.current.copy()
        t_cur = time_row[rows, state.current]
        e_cur = energy_row[rows, state.current]
        inflight = state.pending >= 0
        pend = np.maximum(state.pending, 0)
        t_new = time_row[rows, pend]
        e_new = energy_row[rows, pend]
        split = inflight & (state.land_in_s < t_cur)
        frac = np.where(split, state.land_in_s / t_cur, 1.0)
        dt = np.where(split, state.land_in_s + (1.0 - frac) * t_new, t_cur)
        de = np.where(split, frac * e_cur + (1.0 - frac) * e_new, e_cur)
        off_cur = np.where(state.current != request, np.where(split, state.land_in_s, t_cur), 0.0)
        off_new = np.where(split & (state.pending != request), (1.0 - frac) * t_new, 0.0)
        landed_after = np.where(split, state.land_in_s, np.nan)
        # advance the switch in flight
        remaining = np.where(inflight & ~split, state.land_in_s - t_cur, 0.0)
        lands = inflight & (split | (remaining <= 0.0))
        state.current = np.where(lands, state.pending, state.current)
        state.pending = np.where(lands, -1, state.pending)
        state.land_in_s = np.where(lands, 0.0, remaining)
        landed_after = np.where(lands & ~split, t_cur, landed_after)
        return StepOutcome(dt, de, issue, off_cur + off_new, started, landed_after)


class GpuBackend(ABC):
    """A GPU executing a trace, as seen by rlclock: configurations in, time and energy out.

    Subclasses provide :meth:`_compute_tables`; everything else — schedule runs, the auto run, validation
    — is shared so every judge uses the same accounting.

    Args:
        spec: The GPU.
        trace: The kernel sequence of one step.
        configs: The configuration set (``AUTO`` is put first if missing); validated against the spec.
        latency_s: Switching latency; default the spec's.
    """

    deterministic: bool = True

    def __init__(self, spec: GpuSpec, trace: KernelTrace, configs: Sequence[ClockConfig] | None = None,
                 latency_s: float | None = None) -> None:
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
            raise ScheduleError("the backend produced non-finite or non-positive kernel times or energies.")
        t.setflags(write=False)
        e.setflags(write=False)
        return t, e

    def schedule_indices(self, schedule: ClockSchedule) -> np.ndarray:
        """The schedule's per-kernel indices into :attr:`configs` (validated)."""
        schedule.check_length(self.n_kernels)
        for c in schedule.configs:
            self.spec.validate(c)
        return schedule.reindexed(self.configs)

    def run(self, schedule: ClockSchedule, initial: ClockConfig = AUTO) -> RunResult:
        """Run a schedule from ``initial`` clocks with nothing in flight; see :class:`SwitchEngine`."""
        req = self.schedule_indices(schedule)
        return self.run_indices(req, initial=self.config_index(initial))

    def run_indices(self, requested: np.ndarray, initial: int = 0) -> RunResult:
        """:meth:`run` for per-kernel configuration indices."""
        t_tab, e_tab = self.tables
        n = self.n_kernels
        requested = np.asarray(requested, dtype=np.int64)
        if requested.shape != (n,):
            raise ScheduleError(f"expected {n} configuration indices, found shape {requested.shape}.")
        if self.latency_s == 0.0:
            rows = np.arange(n)
            kt, ke = t_tab[rows, requested], e_tab[rows, requested]
            changes = np.flatnonzero(np.diff(np.concatenate([[initial], requested])))
            start = np.concatenate([[0.0], np.cumsum(kt)[:-1]])
            return RunResult(
                time_s=float(kt.sum()), energy_j=float(ke.sum()), switches=int(changes.size),
                off_plan_time_s=0.0, kernel_time_s=kt, kernel_energy_j=ke, start_s=start,
                config_index=requested.copy(), requested_index=requested.copy(),
                switch_issue_s=start[changes], switch_land_s=start[changes], switch_to=requested[changes],
                configs=self.configs)
        state = EngineState.start(1, initial)
        kt = np.empty(n)
        ke = np.empty(n)
        cfg = np.empty(n, dtype=np.int64)
        off = 0.0
        issue_s: list[float] = []
        land_s: list[float] = []
        to: list[int] = []
        clock = 0.0
        for i in range(n):
            out = SwitchEngine.step(t_tab[i : i + 1], e_tab[i : i + 1], requested[i : i + 1], state, self.latency_s)
            if out.issued[0]:
                issue_s.append(clock)
                land_s.append(np.inf)
                to.append(int(requested[i]))
            if np.isfinite(out.landed_after_s[0]) and land_s and not np.isfinite(land_s[-1]):
                land_s[-1] = clock + float(out.landed_after_s[0])
            elif out.issued[0] and self.latency_s == 0.0:
                land_s[-1] = clock
            kt[i], ke[i], cfg[i] = out.time_s[0], out.energy_j[0], out.started_at[0]
            off += float(out.off_plan_s[0])
            clock += kt[i]
        start = np.concatenate([[0.0], np.cumsum(kt)[:-1]])
        return RunResult(
            time_s=float(kt.sum()), energy_j=float(ke.sum()), switches=len(issue_s), off_plan_time_s=off,
            kernel_time_s=kt, kernel_energy_j=ke, start_s=start, config_index=cfg, requested_index=requested.copy(),
            switch_issue_s=np.array(issue_s), switch_land_s=np.array(land_s), switch_to=np.array(to, dtype=np.int64),
            configs=self.configs)

    @cached_property
    def _auto_run(self) -> RunResult:
        return self.run_indices(np.zeros(self.n_kernels, dtype=np.int64))

    def auto_run(self) -> RunResult:
        """The step at the driver's own clocks (cached)."""
        return self._auto_run

    def describe(self) -> str:
        """One line: backend, GPU, trace, configurations, latency."""
        return (f"{type(self).__name__}({self.spec.key}, trace {self.trace.name!r} of {self.n_kernels} kernels, "
                f"{self.n_configs} configurations, switching latency {self.latency_s * 1e3:g} ms)")
