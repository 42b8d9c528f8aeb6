"""The switching rule: how a sequence of clock requests turns into time and energy. Written once, here.

* A request is issued at the start of a kernel. If it differs from the configuration in effect and no
  switch is in flight, a switch starts; it lands ``latency_s`` later (immediately when the latency is 0).
* Kernels keep running at the old clocks until the switch lands. A switch that lands inside a kernel
  splits it (:func:`split`): the part of its work done before runs at the old clocks, the rest at the new.
  A switch that lands exactly at the end of a kernel leaves that kernel whole at the old clocks.
* While a switch is in flight, further requests are not issued (the driver call is still busy); the
  request of the first kernel that starts after the landing is looked at afresh.
* Time a kernel spends at a configuration other than the one requested for it is "off-plan" time.

Every judge uses these four forms of the rule, which ``tests/backends/test_switching_rule.py`` holds to the same
results: :func:`fly` (one switch, scalar — the backend's whole-schedule run and the policy's rollout),
:class:`SwitchEngine` (one kernel of many runs at once — the environment), :func:`landing_table` (where a
switch issued at any kernel boundary lands — the exact optimum's switching DAG) and the live controller's
switch plan (:mod:`rlclock.deploy.plan`: one switch at a time, landing a latency after it is issued).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

CostAt = Callable[[int, int], float]
"""``cost(kernel, configuration)``: a kernel's seconds (or joules) at a configuration."""


def split(
    t_old: np.ndarray | float,
    e_old: np.ndarray | float,
    t_new: np.ndarray | float,
    e_new: np.ndarray | float,
    land_s: np.ndarray | float,
) -> tuple[np.ndarray | float, np.ndarray | float]:
    """``(seconds, joules)`` of a kernel inside which a switch lands ``land_s`` after the kernel starts
    (``0 <= land_s < t_old``): the share ``land_s / t_old`` of its work at the old configuration, the rest at
    the new one. Scalars or arrays alike."""
    frac = land_s / t_old
    return land_s + (1.0 - frac) * t_new, frac * e_old + (1.0 - frac) * e_new


@dataclass
class FlightLog:
    """Per-kernel results a :func:`fly` writes (arrays over the step's kernels).

    Attributes:
        requested: The configuration requested for each kernel (for off-plan time).
        time_s: Each kernel's duration, written for the kernels of the flight.
        energy_j: Each kernel's energy, likewise.
        off_plan_s: Each kernel's time at a configuration other than the requested one, likewise.
    """

    requested: np.ndarray
    time_s: np.ndarray
    energy_j: np.ndarray
    off_plan_s: np.ndarray


def fly(
    t_at: CostAt, e_at: CostAt, n: int, k: int, cur: int, target: int, latency_s: float, log: FlightLog | None = None
) -> tuple[int, float, float, float]:
    """A switch from ``cur`` to ``target`` issued at the start of kernel ``k`` of ``n``.

    Returns ``(stop, land_after_s, time_s, energy_j)``: the first kernel after the landing (``n`` if the step
    ends first; nothing is issued before it), how long after the start of kernel ``stop - 1`` the switch
    landed (``inf`` if it did not land), and the seconds and joules of kernels ``k .. stop - 1``, summed in
    kernel order. ``log``, if given, receives each of those kernels' time, energy and off-plan time.
    """
    land, total_t, total_e = latency_s, 0.0, 0.0
    j = k
    while j < n:
        tc, ec = t_at(j, cur), e_at(j, cur)
        if land < tc:  # lands inside kernel j
            tn, en = t_at(j, target), e_at(j, target)
            dt, de = split(tc, ec, tn, en, land)
            if log is not None:
                r = int(log.requested[j])
                off_old = land if cur != r else 0.0
                off_new = (1.0 - land / tc) * tn if target != r else 0.0
                log.time_s[j], log.energy_j[j], log.off_plan_s[j] = dt, de, off_old + off_new
            return j + 1, float(land), total_t + float(dt), total_e + float(de)
        if log is not None:
            log.time_s[j], log.energy_j[j] = tc, ec
            log.off_plan_s[j] = tc if cur != int(log.requested[j]) else 0.0
        total_t += tc
        total_e += ec
        land -= tc
        j += 1
        if land <= 0.0:  # lands exactly at the end of kernel j - 1
            return j, float(tc), total_t, total_e
    return j, float("inf"), total_t, total_e


def landing_table(prefix_s: np.ndarray, t: np.ndarray, latency_s: float) -> tuple[np.ndarray, np.ndarray]:
    """For a switch issued at every kernel boundary ``i`` with every configuration ``c`` in effect: the kernel
    it lands in, ``land[i, c]`` (``n`` when it does not land within the step; the kernel whose end it lands
    at, on a boundary), and the share of that kernel run at the old clocks, ``frac[i, c]``.

    ``prefix_s`` is ``(n + 1, C)``: the step's running time at each configuration; ``t`` the ``(n, C)`` kernel
    times. Vectorised over the DAG, so it compares prefix sums where :func:`fly` subtracts kernel by kernel.
    """
    n, C = t.shape
    land = np.empty((n, C), dtype=np.int64)
    frac = np.empty((n, C))
    for c in range(C):
        target = prefix_s[:-1, c] + latency_s
        k = np.searchsorted(prefix_s[:, c], target, side="left")  # first prefix >= target
        j = np.maximum(k - 1, np.arange(n))
        land[:, c] = j
        inside = np.clip(j, 0, n - 1)
        before = target - prefix_s[inside, c]
        frac[:, c] = np.where(j < n, np.clip(before / t[inside, c], 0.0, 1.0), 1.0)
    return land, frac


@dataclass
class EngineState:
    """Switching state of a batch of ``N`` independent runs (all arrays of shape ``(N,)``).

    Attributes:
        current: Configuration in effect.
        pending: Configuration a switch in flight goes to, -1 if none.
        land_in_s: Time until the switch in flight lands, seconds.
    """

    current: np.ndarray
    pending: np.ndarray
    land_in_s: np.ndarray

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
    """What one kernel of every run cost (arrays of shape ``(N,)``).

    Attributes:
        time_s: The kernel's duration.
        energy_j: Its energy.
        issued: A switch was issued at the kernel's start.
        off_plan_s: Its time at a configuration other than the requested one.
        started_at: Configuration in effect when the kernel started.
        landed_after_s: Time into the kernel at which a switch landed (nan if none did).
    """

    time_s: np.ndarray
    energy_j: np.ndarray
    issued: np.ndarray
    off_plan_s: np.ndarray
    started_at: np.ndarray
    landed_after_s: np.ndarray


class SwitchEngine:
    """Steps batches of runs through kernels under the switching rule (module docstring)."""

    @staticmethod
    def step(
        time_row: np.ndarray,
        energy_row: np.ndarray,
        request: np.ndarray,
        state: EngineState,
        latency_s: np.ndarray | float,
    ) -> StepOutcome:
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
        inside = inflight & (state.land_in_s < t_cur)
        land = np.where(inside, state.land_in_s, 0.0)
        t_split, e_split = split(t_cur, e_cur, t_new, e_new, land)
        dt = np.where(inside, t_split, t_cur)
        de = np.where(inside, e_split, e_cur)
        off_cur = np.where(state.current != request, np.where(inside, state.land_in_s, t_cur), 0.0)
        off_new = np.where(inside & (state.pending != request), (1.0 - land / t_cur) * t_new, 0.0)
        landed_after = np.where(inside, state.land_in_s, np.nan)
        # advance the switch in flight
        remaining = np.where(inflight & ~inside, state.land_in_s - t_cur, 0.0)
        lands = inflight & (inside | (remaining <= 0.0))
        state.current = np.where(lands, state.pending, state.current)
        state.pending = np.where(lands, -1, state.pending)
        state.land_in_s = np.where(lands, 0.0, remaining)
        landed_after = np.where(lands & ~inside, t_cur, landed_after)
        return StepOutcome(dt, de, issue, off_cur + off_new, started, landed_after)
