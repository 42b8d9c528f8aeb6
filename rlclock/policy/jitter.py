"""Plans that survive the loop's jitter: switch landings chosen for where the kernels will be, not where they were.

A controller times each switch from the step's anchor, but the kernels do not start at the same offsets in every
step: a host-bound loop launches them a little earlier or later, by up to tens of milliseconds on real steps
(``docs/results/step_jitter.txt``). The timing steps run before planning (:class:`~rlclock.deploy.capture.StepTimer`)
locate every kernel in a few steps; :class:`~rlclock.backends.executable.Execution` keeps how far each kernel moved
in each (``jitter_s``). A plan is then worth what it costs over those steps, not over the median step alone.

:func:`rlclock.policy.planner.settle` moves the best plan's switch landings to where a late or early landing
costs little: coordinate descent (:func:`descend`) over each landing's time (the kernel starts of the timeline,
keeping landings a latency apart) and over dropping a switch (a segment whose saving the jitter eats), minimising the
expected ``energy + λ·time`` over the measured steps and the median one; ``λ`` bisected so that the expected time
fits the budget. Each step's cost comes
from running sums of every kernel's cost at every configuration (:class:`LandingCosts`), so moving one landing is
priced without pricing the step again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlclock.backends.executable import Execution, in_effect_at

SETTLE_SWEEPS = 4
"""Passes of coordinate descent over the landings at each price of time."""
SETTLE_PRICES = 10
"""Prices of time :func:`settle` bisects over."""
SETTLE_CANDIDATES = 160
"""Most landing times tried for one landing in one pass (evenly spaced among those allowed)."""


@dataclass(frozen=True)
class LandingCosts:
    """A step's ``energy + price·time`` under switch landings, over several placements of its kernels.

    Attributes:
        cost: ``(n, C)`` each kernel's ``energy + price·time`` at each configuration.
        prefix: ``(n + 1, C)`` its running sums.
        starts_s: ``(m, n)`` where each kernel starts in each placement, seconds after the anchor.
        duration_s: ``(n,)`` each kernel's duration.
        period_s: The step period (landings repeat every period).
    """

    cost: np.ndarray
    prefix: np.ndarray
    starts_s: np.ndarray
    duration_s: np.ndarray
    period_s: float

    @classmethod
    def of(cls, time_s: np.ndarray, energy_j: np.ndarray, price_j_per_s: float, execution: Execution) -> LandingCosts:
        """The costs at one price of time, over the median step and every measured one of ``execution``."""
        cost = energy_j + price_j_per_s * time_s
        prefix = np.vstack([np.zeros((1, cost.shape[1])), np.cumsum(cost, axis=0)])
        return cls(
            cost,
            prefix,
            placements(execution),
            np.asarray(execution.duration_s, dtype=float),
            float(execution.period_s),
        )

    def _terms(self, lands: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """``(m, q)`` what each landing (``q`` of them, any shape flattened) adds to each placement's cost: its
        segment boundary in the running sums and the split of the kernel it lands in."""
        m = self.starts_s.shape[0]
        lands = np.asarray(lands, dtype=float).reshape(-1)
        k = np.stack([np.searchsorted(self.starts_s[i], lands, side="left") for i in range(m)])  # (m, q)
        out = self.prefix[k, old[None, :]] - self.prefix[k, new[None, :]]
        j = np.maximum(k - 1, 0)
        s = np.take_along_axis(self.starts_s, j, axis=1)
        d = self.duration_s[j]
        inside = (k > 0) & (lands[None, :] > s) & (lands[None, :] < s + d)
        rest = np.where(inside, 1.0 - (lands[None, :] - s) / np.where(d > 0, d, 1.0), 0.0)
        return out + rest * (self.cost[j, new[None, :]] - self.cost[j, old[None, :]])

    def total(self, lands: np.ndarray, configs: np.ndarray, hold: int = 0) -> np.ndarray:
        """``(m,)`` each placement's cost with switches landing at ``lands`` (sorted, within one step's cycle) into
        ``configs``, step after step (``hold`` without any switch)."""
        n = self.cost.shape[0]
        if len(lands) == 0:
            return np.full(self.starts_s.shape[0], self.prefix[n, hold])
        cfg = np.asarray(configs, dtype=np.int64)
        old = np.roll(cfg, 1)
        base = self.prefix[n, cfg[-1]]  # the step starts in the last landing's configuration
        p = self.period_s
        all_lands = np.concatenate([lands - p, lands, lands + p])
        terms = self._terms(all_lands, np.concatenate([old] * 3), np.concatenate([cfg] * 3))
        return base + terms.sum(axis=1)

    def moved(self, lands: np.ndarray, configs: np.ndarray, i: int, times_s: np.ndarray) -> np.ndarray:
        """``(q,)`` the mean cost over the placements with landing ``i`` moved to each of ``times_s`` instead (the
        others kept), less the mean cost with it where it is."""
        cfg = np.asarray(configs, dtype=np.int64)
        old, new = cfg[i - 1], cfg[i]
        p = self.period_s
        q = np.asarray(times_s, dtype=float)
        shifts = np.array([-p, 0.0, p])
        cand = (q[:, None] + shifts[None, :]).reshape(-1)
        here = lands[i] + shifts
        olds, news = np.full(cand.size, old), np.full(cand.size, new)
        gain = self._terms(cand, olds, news).reshape(self.starts_s.shape[0], q.size, 3).sum(axis=2)
        now = self._terms(here, np.full(3, old), np.full(3, new)).sum(axis=1)
        return (gain - now[:, None]).mean(axis=0)


def placements(execution: Execution) -> np.ndarray:
    """``(1 + m, n)`` where the kernels start in the median step and in each measured step
    (:meth:`~rlclock.backends.executable.Execution.placements`; the median step alone when the execution judges
    plans as planned)."""
    if not execution.jittered:
        return np.asarray(execution.start_s, dtype=float)[None, :]
    return execution.placements()


def _drop(lands: list[float], configs: list[int], i: int) -> tuple[list[float], list[int], int]:
    """The landings without landing ``i``, and without those that then change nothing, and the configuration held
    when none is left."""
    ls, cs = lands[:i] + lands[i + 1 :], configs[:i] + configs[i + 1 :]
    while len(cs) > 1:
        same = [j for j in range(len(cs)) if cs[j] == cs[j - 1]]
        if not same:
            break
        ls.pop(same[0])
        cs.pop(same[0])
    if len(cs) <= 1:
        return [], [], cs[0] if cs else configs[i - 1]
    return ls, cs, cs[-1]


def descend(
    costs: LandingCosts,
    lands: np.ndarray,
    configs: np.ndarray,
    grid_s: np.ndarray,
    latency_s: float,
    hold: int,
    sweeps: int = SETTLE_SWEEPS,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Coordinate descent of the mean cost over the landings (module docstring): each landing moved to the best time
    of ``grid_s`` that keeps it a latency from its neighbours (cyclically), or dropped where that costs less.
    Returns the landings (sorted), their configurations and the configuration held when no switch is left."""
    order = np.argsort(lands, kind="stable")
    ls, cs = [float(x) for x in np.asarray(lands)[order]], [int(x) for x in np.asarray(configs)[order]]
    p = costs.period_s

    def mean_total(a: list[float], b: list[int], held: int) -> float:
        return float(costs.total(np.array(a), np.array(b, dtype=np.int64), held).mean())

    best = mean_total(ls, cs, hold)
    for _ in range(sweeps):
        improved = False
        i = 0
        while len(ls) >= 2 and i < len(ls):
            k = len(ls)
            lo = (ls[i - 1] if i else ls[-1] - p) + latency_s
            hi = (ls[i + 1] if i < k - 1 else ls[0] + p) - latency_s
            allowed = grid_s[(grid_s >= lo) & (grid_s <= hi)]
            if allowed.size > SETTLE_CANDIDATES:
                allowed = allowed[np.linspace(0, allowed.size - 1, SETTLE_CANDIDATES).astype(int)]
            if allowed.size:
                delta = costs.moved(np.array(ls), np.array(cs, dtype=np.int64), i, allowed)
                j = int(np.argmin(delta))
                if delta[j] < -1e-12 * max(1.0, abs(best)):
                    ls[i] = float(allowed[j])
                    best = mean_total(ls, cs, hold)
                    improved = True
            a, b, held = _drop(ls, cs, i)
            v = mean_total(a, b, held)
            if v < best - 1e-12 * max(1.0, abs(best)):
                ls, cs, hold, best, improved = a, b, held, v, True
                continue
            i += 1
        if not improved:
            break
    return np.array(ls), np.array(cs, dtype=np.int64), hold


def runs_of(lands: np.ndarray, configs: np.ndarray, execution: Execution, hold: int) -> np.ndarray:
    """The configuration each kernel asks for so that :func:`~rlclock.backends.executable.execute` lands the
    switches at ``lands``: from the first kernel starting one lookahead margin after each landing."""
    margin = execution.rule.lead_s - execution.rule.latency_s
    start = np.asarray(execution.start_s, dtype=float)
    return in_effect_at(
        np.asarray(lands, dtype=float),
        np.asarray(configs, dtype=np.int64),
        hold,
        start - margin,
        float(execution.period_s),
    )
