"""The one way a schedule is judged: its run on a backend beside the same backend's auto run.

Every judge — the environment, the baselines, the optimum, the deployed policy's evaluation — runs a schedule
through ``GpuBackend.run`` and compares it with the auto run through :func:`evaluate`, so numbers are
comparable by construction. :func:`optimum_for` is the exact latency-aware optimum a figure is a share of.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from rlclock.backends.base import GpuBackend, RunResult
from rlclock.schedule import ClockSchedule
from rlclock.solve.optimum import Optimum, latency_aware_optimum


@dataclass(frozen=True)
class Evaluation:
    """A schedule's run next to the same backend's auto run.

    Attributes:
        name: The schedule's name.
        time_s: Step time, seconds.
        energy_j: Step energy, joules.
        auto_time_s: Step time at auto clocks on the same backend.
        auto_energy_j: Step energy at auto clocks.
        switches: Clock changes issued.
        off_plan_time_s: Time run at a clock other than the requested one (a switch had not landed yet).
        run: The full per-kernel result.
    """

    name: str
    time_s: float
    energy_j: float
    auto_time_s: float
    auto_energy_j: float
    switches: int
    off_plan_time_s: float
    run: RunResult

    @property
    def slowdown(self) -> float:
        """Relative time change against auto (0.01 = 1 % slower)."""
        return self.time_s / self.auto_time_s - 1.0

    @property
    def saving(self) -> float:
        """Relative energy saved against auto (0.1 = 10 % less energy)."""
        return 1.0 - self.energy_j / self.auto_energy_j

    @property
    def edp_change(self) -> float:
        """Relative change of the energy-delay product against auto."""
        return (self.time_s * self.energy_j) / (self.auto_time_s * self.auto_energy_j) - 1.0

    def row(self) -> dict[str, Any]:
        """Flat summary for tables and JSON."""
        return {
            "name": self.name,
            "time_s": self.time_s,
            "energy_j": self.energy_j,
            "time_pct": 100 * self.slowdown,
            "energy_pct": -100 * self.saving,
            "switches": self.switches,
            "off_plan_time_s": self.off_plan_time_s,
        }


def evaluate(schedule: ClockSchedule, backend: GpuBackend) -> Evaluation:
    """Run ``schedule`` and the auto schedule on ``backend``; return both side by side."""
    run = backend.run(schedule)
    auto = backend.auto_run()
    return Evaluation(
        name=schedule.name,
        time_s=run.time_s,
        energy_j=run.energy_j,
        auto_time_s=auto.time_s,
        auto_energy_j=auto.energy_j,
        switches=run.switches,
        off_plan_time_s=run.off_plan_time_s,
        run=run,
    )


_OPTIMA: weakref.WeakKeyDictionary[GpuBackend, dict[float, Optimum]] = weakref.WeakKeyDictionary()


def optimum_for(backend: GpuBackend, budget: float) -> Optimum:
    """The exact latency-aware optimum of a backend at a slowdown budget (memoised per backend object)."""
    memo = _OPTIMA.setdefault(backend, {})
    if budget not in memo:
        t, e = backend.tables
        memo[budget] = latency_aware_optimum(t, e, backend.latency_s, backend.auto_run().time_s * (1 + budget))
    return memo[budget]
