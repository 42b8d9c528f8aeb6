"""Array-level building blocks of the baselines: per-kernel tables in, configuration choices out.

``t`` and ``e`` are ``(K, C)`` arrays of kernel time and energy at each configuration; ``w`` (``(K,)``)
counts how often each kernel runs (1 for per-invocation tables). Schedule-level baselines live in
:mod:`rlclock.solve.baselines`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FrontierPoint:
    """One vertex of the lower convex hull of (total time, total energy)."""

    lam: float  # joules per second traded: the slope at this vertex
    time_s: float
    energy_j: float
    choice: np.ndarray  # (K,) configuration per kernel


def lagrangian_choice(t: np.ndarray, e: np.ndarray, lam: float) -> np.ndarray:
    """Per kernel, the configuration minimising ``energy + lam · time`` (ties: lowest time)."""
    cost = e + lam * t
    best = cost.min(axis=1, keepdims=True)
    tie = cost <= best * (1 + 1e-12) + 1e-300
    return np.argmin(np.where(tie, t, np.inf), axis=1)


def lp_frontier(t: np.ndarray, e: np.ndarray, w: np.ndarray | None = None, n_lambda: int = 400) -> list[FrontierPoint]:
    """Vertices of the (time, energy) lower convex hull, from the most energy-frugal to the fastest.

    Found by sweeping the trade-off ``lam`` (J/s) over a log grid; consecutive vertices bound the
    linear-programming relaxation of the multiple-choice knapsack.
    """
    w = np.ones(t.shape[0]) if w is None else np.asarray(w, float)
    scale = float((w[:, None] * e).sum() / max((w[:, None] * t).sum(), 1e-30))
    lams = np.concatenate([[0.0], scale * np.logspace(-4, 4, n_lambda)])
    out: list[FrontierPoint] = []
    rows = np.arange(t.shape[0])
    for lam in lams:
        j = lagrangian_choice(t, e, lam)
        tt = float((w * t[rows, j]).sum())
        ee = float((w * e[rows, j]).sum())
        if out and abs(out[-1].time_s - tt) <= 1e-15 * tt and abs(out[-1].energy_j - ee) <= 1e-15 * ee:
            continue
        out.append(FrontierPoint(float(lam), tt, ee, j))
    return out


def lp_energy_at(frontier: list[FrontierPoint], budget_s: float) -> float:
    """Lowest energy of the LP relaxation at total time ``budget_s`` (interpolated on the hull)."""
    times = np.array([p.time_s for p in frontier])
    energies = np.array([p.energy_j for p in frontier])
    if budget_s >= times[0]:
        return float(energies[0])
    if budget_s <= times[-1]:
        return float(energies[-1]) if budget_s == times[-1] else float("inf")
    i = int(np.searchsorted(-times, -budget_s))
    a, b = i - 1, i
    f = (times[a] - budget_s) / (times[a] - times[b])
    return float(energies[a] + f * (energies[b] - energies[a]))


def best_within(t: np.ndarray, e: np.ndarray, limit_s: np.ndarray) -> np.ndarray:
    """Per row, the lowest-energy configuration whose time is within ``limit_s`` (the fastest if none)."""
    ok = t <= limit_s.reshape(-1, 1) * (1 + 1e-12)
    pick = np.argmin(np.where(ok, e, np.inf), axis=1)
    none = ~ok.any(axis=1)
    pick[none] = np.argmin(t[none], axis=1)
    return pick
