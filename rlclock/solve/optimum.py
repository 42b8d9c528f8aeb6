"""Exact energy optima of a step under a time budget: latency-blind (the paper's) and latency-aware.

**Latency-blind** (``knapsack_optimum``): the paper's kernel-level global method — a multiple-choice
knapsack: one configuration per invocation, minimum total energy with total time within the budget,
switching ignored. Solved exactly as an integer program over groups of identical invocations (HiGHS).

**Latency-aware** (``latency_aware_optimum``): exact under the switching rules of
:mod:`rlclock.backends.switching`. Its outcomes are the paths of a DAG whose nodes are
``(kernel boundary i, configuration in effect c)`` with no switch in flight:

* *stay*: run kernel ``i`` at ``c`` → ``(i + 1, c)``;
* *switch to b*: issue at boundary ``i``; kernels run at ``c`` until the switch lands ``latency`` later,
  inside kernel ``j`` (split there) → ``(j + 1, b)``. ``j`` depends only on ``i`` and ``c``.

Minimum energy under a time budget on this DAG is a resource-constrained shortest path. We solve it
exactly: a Lagrangian relaxation (dynamic programming for ``energy + λ·time`` over the DAG, bisection
on ``λ``) gives a lower bound and a feasible incumbent. Any path at least as good as the incumbent has
Lagrangian cost at most ``incumbent + λ·budget``; searching a band ``lb + δ`` above the bound, every arc
whose cheapest path through it (forward cost + arc + backward cost) exceeds ``lb + δ + λ·budget`` cannot
be used and is dropped — a tiny share of the DAG survives. A label-setting search with exact Pareto
dominance finds the best path on the survivors; if its energy is within the band it is optimal over the
whole DAG, otherwise the band widens (δ × 4) and the search repeats.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time as _time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rlclock.backends.switching import landing_table
from rlclock.errors import ScheduleError

_EPS = 1e-12


@dataclass(frozen=True)
class Optimum:
    """A solver's answer.

    Attributes:
        requests: Per-invocation requested configuration index (the schedule to run).
        time_s: Total time the solver computed for it.
        energy_j: Total energy the solver computed for it.
        lower_bound_j: Proven lower bound on the optimal energy.
        budget_s: The time budget.
        solve_s: Wall time of the solve.
        exact: True when ``energy_j`` is proven optimal (gap within floating-point tolerance).
        labels: Arcs in the widest band searched (latency-aware only).
        lam_j_per_s: Lagrange multiplier of the time budget: the marginal energy (J) one second of extra
            time buys at the optimum (0 when the budget does not bind).
        stopped: Why the search ended before proving optimality (``"time limit"``, ``"memory limit"``), or
            empty.
    """

    requests: np.ndarray
    time_s: float
    energy_j: float
    lower_bound_j: float
    budget_s: float
    solve_s: float
    exact: bool
    labels: int = 0
    lam_j_per_s: float = 0.0
    stopped: str = ""

    @property
    def gap_j(self) -> float:
        return max(0.0, self.energy_j - self.lower_bound_j)

    def describe(self) -> str:
        """One line: exact, or where the search stopped and how far the plan can be from the optimum."""
        if self.exact:
            return f"exact optimum ({self.solve_s:.1f} s)"
        gap = 100 * self.gap_j / max(self.energy_j, 1e-30)
        why = f"stopped at the {self.stopped}" if self.stopped else "not proven optimal"
        return (f"{why} after {self.solve_s:.1f} s: the best plan found uses at most {gap:.3g} % more energy than "
                "the optimum (proven lower bound)")


@contextlib.contextmanager
def _quiet_solver() -> Iterator[None]:
    """Silence the solver library's own prints to the process's stdout (it writes below Python)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


# -- latency-blind: multiple-choice knapsack --------------------------------------------------------------


def _groups(t: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group identical rows: (first row of each group, group of each row)."""
    both = np.concatenate([t, e], axis=1)
    _, first, inverse = np.unique(both, axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def knapsack_optimum(t: np.ndarray, e: np.ndarray, budget_s: float, time_limit_s: float = 600.0) -> Optimum:
    """Exact latency-blind optimum: one configuration per invocation, min energy s.t. total time ≤ budget.

    Args:
        t: ``(n, C)`` invocation times per configuration.
        e: ``(n, C)`` invocation energies.
        budget_s: Allowed total time.
        time_limit_s: Stop the solver after this long; the answer is then the best plan it found, with its proven
            lower bound (``exact`` False; most steps solve in well under a second, a few real steps take minutes).

    Raises:
        ScheduleError: If even the fastest choice exceeds the budget.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    start = _time.perf_counter()
    n = t.shape[0]
    fastest = float(t.min(axis=1).sum())
    if fastest > budget_s * (1 + 1e-12):
        raise ScheduleError(f"time budget {budget_s:.6g} s is infeasible: the fastest schedule takes {fastest:.6g} s.",
                            "allow more slowdown.")
    first, group = _groups(t, e)
    counts = np.bincount(group, minlength=len(first))
    # per group: drop configurations dominated in both time and energy (never in an optimum)
    cand: list[np.ndarray] = []
    for row in first:
        tt, ee = t[row], e[row]
        order = np.lexsort((ee, tt))
        best_e = np.inf
        keep = []
        for c in order:
            if ee[c] < best_e - _EPS * abs(best_e if np.isfinite(best_e) else 1.0):
                keep.append(c)
                best_e = ee[c]
        cand.append(np.array(keep))
    sizes = np.array([len(c) for c in cand])
    offs = np.concatenate([[0], np.cumsum(sizes)])
    nv = int(offs[-1])
    cost = np.empty(nv)
    tim = np.empty(nv)
    for g, row in enumerate(first):
        cost[offs[g]:offs[g + 1]] = e[row, cand[g]]
        tim[offs[g]:offs[g + 1]] = t[row, cand[g]]
    a_eq = np.zeros((len(first), nv))
    for g in range(len(first)):
        a_eq[g, offs[g]:offs[g + 1]] = 1.0
    # scale time and energy to order one for the solver's tolerances
    ts, es = float(tim.mean()) or 1.0, float(cost.mean()) or 1.0
    cons = [LinearConstraint(a_eq, counts, counts), LinearConstraint(tim[None, :] / ts, -np.inf, budget_s / ts)]
    ub = np.repeat(counts, sizes).astype(float)
    with _quiet_solver():
        res = milp(cost / es, constraints=cons, integrality=np.ones(nv), bounds=Bounds(0, ub),
                   options={"mip_rel_gap": 0.0, "presolve": True, "time_limit": float(time_limit_s)})
    if res.x is None:
        raise ScheduleError(f"the knapsack solver found no solution ({res.message}).")
    x = np.rint(res.x).astype(int)
    # hand out each group's counts to its invocations, in order, keeping equal choices contiguous
    requests = np.empty(n, dtype=np.int64)
    for g in range(len(first)):
        members = np.flatnonzero(group == g)
        picks = np.repeat(cand[g], x[offs[g]:offs[g + 1]])
        picks = picks[np.argsort(t[members[0], picks], kind="stable")]
        requests[members] = picks
    rows = np.arange(n)
    tt, ee = float(t[rows, requests].sum()), float(e[rows, requests].sum())
    bound = float(getattr(res, "mip_dual_bound", res.fun) or res.fun) * es
    return Optimum(requests, tt, ee, min(bound, ee), budget_s, _time.perf_counter() - start,
                   exact=bool(res.success), labels=0, lam_j_per_s=_knapsack_multiplier(t, e, budget_s))


def _knapsack_multiplier(t: np.ndarray, e: np.ndarray, budget_s: float) -> float:
    """The smallest price of time at which the per-kernel Lagrangian choice fits the budget."""
    from rlclock.solve.lagrangian import lagrangian_choice

    rows = np.arange(t.shape[0])
    if t[rows, lagrangian_choice(t, e, 0.0)].sum() <= budget_s:
        return 0.0
    lo, hi = 0.0, float(e.sum() / max(t.sum(), 1e-30))
    while t[rows, lagrangian_choice(t, e, hi)].sum() > budget_s:
        lo, hi = hi, hi * 4.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if t[rows, lagrangian_choice(t, e, mid)].sum() > budget_s:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return hi


# -- latency-aware: exact search over the switch DAG -------------------------------------------------------


class SwitchDag:
    """Arcs of the switching DAG for tables ``t``, ``e`` and a latency (see module docstring)."""

    def __init__(self, t: np.ndarray, e: np.ndarray, latency_s: float) -> None:
        self.t = np.ascontiguousarray(t, float)
        self.e = np.ascontiguousarray(e, float)
        self.n, self.C = t.shape
        self.latency_s = float(latency_s)
        self.pt = np.vstack([np.zeros((1, self.C)), np.cumsum(self.t, axis=0)])  # (n+1, C)
        self.pe = np.vstack([np.zeros((1, self.C)), np.cumsum(self.e, axis=0)])
        # landing kernel j(i, c) and the share of kernel j run at the old clocks before the landing
        self.land, self.frac = landing_table(self.pt, self.t, self.latency_s)
        self.valid = self.land < self.n  # the switch lands within the step

    def switch_costs(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For a switch issued at boundary ``i`` from every ``c`` to every ``b``: ``(land, dt, de)`` with
        ``dt``/``de`` of shape ``(C, C)``, plus the valid mask ``(C,)``."""
        j = np.minimum(self.land[i], self.n - 1)
        cols = np.arange(self.C)
        f = self.frac[i][:, None]
        pre_t = self.pt[j, cols] - self.pt[i, cols]
        pre_e = self.pe[j, cols] - self.pe[i, cols]
        dt = (pre_t + f[:, 0] * self.t[j, cols])[:, None] + (1.0 - f) * self.t[j, :]
        de = (pre_e + f[:, 0] * self.e[j, cols])[:, None] + (1.0 - f) * self.e[j, :]
        return j, dt, de, self.valid[i]

    def backward(self, lam: float, want_path: bool = False, targets: np.ndarray | None = None):
        """Lagrangian cost-to-go ``V[i, c]`` of ``energy + lam·time`` (and the argmin arcs).

        ``targets`` (``(n, S)`` configuration indices), if given, restricts the switches issued at boundary
        ``i`` to ``targets[i]`` (a policy's candidate slots); staying is always allowed."""
        n, C = self.n, self.C
        V = np.zeros((n + 1, C))
        choice = np.full((n, C), -1, dtype=np.int64) if want_path else None  # -1 stay, else target b
        eye = np.eye(C, dtype=bool)
        barred = np.zeros(C, dtype=bool)
        for i in range(n - 1, -1, -1):
            stay = self.e[i] + lam * self.t[i] + V[i + 1]
            j, dt, de, valid = self.switch_costs(i)
            sw = de + lam * dt + V[j + 1]  # [c, b]: row c lands in kernel j[c], continues at b
            blocked = eye | ~valid[:, None]
            if targets is not None:
                barred[:] = True
                barred[targets[i]] = False
                blocked |= barred[None, :]
            sw = np.where(blocked, np.inf, sw)
            best_b = np.argmin(sw, axis=1)
            best = sw[np.arange(C), best_b]
            use = best < stay
            V[i] = np.where(use, best, stay)
            if choice is not None:
                choice[i] = np.where(use, best_b, -1)
        return V, choice

    def time_to_go(self, choice: np.ndarray) -> np.ndarray:
        """``T[i, c]``: time to finish the step from node ``(i, c)`` following ``choice`` (from :meth:`backward`)."""
        T = np.zeros((self.n + 1, self.C))
        cols = np.arange(self.C)
        for i in range(self.n - 1, -1, -1):
            b = choice[i]
            stay = b < 0
            j, dt, _, _ = self.switch_costs(i)
            bb = np.where(stay, 0, b)
            sw = dt[cols, bb] + T[j + 1, bb]
            T[i] = np.where(stay, self.t[i] + T[i + 1], sw)
        return T

    def follow(self, choice: np.ndarray, initial: int) -> tuple[np.ndarray, float, float]:
        """Requests, time and energy of the path that ``choice`` takes from ``(0, initial)``."""
        req = np.empty(self.n, dtype=np.int64)
        i, c, tt, ee = 0, initial, 0.0, 0.0
        while i < self.n:
            b = int(choice[i, c])
            if b < 0:
                req[i] = c
                tt += self.t[i, c]
                ee += self.e[i, c]
                i += 1
            else:
                j, dt, de, _ = self.switch_costs(i)
                req[i : j[c] + 1] = b
                tt += dt[c, b]
                ee += de[c, b]
                i, c = int(j[c]) + 1, b
        return req, tt, ee


def latency_aware_optimum(t: np.ndarray, e: np.ndarray, latency_s: float, budget_s: float, initial: int = 0,
                          lambda_iters: int = 40, time_limit_s: float = 300.0,
                          max_memory_bytes: float = 2e9) -> Optimum:
    """Exact minimum energy within ``budget_s`` under switching latency (module docstring).

    Args:
        t: ``(n, C)`` invocation times.
        e: ``(n, C)`` invocation energies.
        latency_s: Switching latency (0 delegates to :func:`knapsack_optimum`, which is then exact).
        budget_s: Allowed total time.
        initial: Configuration in effect at the start (0 = auto).
        lambda_iters: Bisection steps on the Lagrange multiplier.
        time_limit_s: Stop searching after this long; the answer is then the best plan found, with its proven
            lower bound (``exact`` False, ``stopped`` says why).
        max_memory_bytes: Stop the exact search before its partial paths would take more memory than this.

    Raises:
        ScheduleError: If no schedule meets the budget.
    """
    start = _time.perf_counter()
    if latency_s <= 0.0 and initial == 0:
        return knapsack_optimum(t, e, budget_s)
    dag = SwitchDag(t, e, latency_s)
    scale = float(e.sum() / max(t.sum(), 1e-30))
    tmin = _fastest_times(dag)
    if tmin[0, initial] > budget_s * (1 + 1e-12):
        raise ScheduleError(f"time budget {budget_s:.6g} s is infeasible: the fastest schedule takes "
                            f"{tmin[0, initial]:.6g} s.", "allow more slowdown.")
    # Lagrangian relaxation: the best lower bound over lam, incumbents from the feasible side
    budget_s = budget_s * (1 + 1e-12)  # sums in another order may differ in the last bits
    V0, ch0 = dag.backward(0.0, want_path=True)
    req0, t0, e0 = dag.follow(ch0, initial)
    if t0 <= budget_s:
        return Optimum(req0, t0, e0, float(V0[0, initial]), budget_s, _time.perf_counter() - start, True,
                       lam_j_per_s=0.0)
    lo, hi = 0.0, scale
    for _ in range(80):
        Vh, chh = dag.backward(hi, want_path=True)
        rq, th, eh = dag.follow(chh, initial)
        if th <= budget_s:
            break
        lo, hi = hi, hi * 4.0
    else:  # no finite price reaches the budget (ties at the fastest time): take the fastest schedule
        ch = _fastest_choice(dag)
        rq, th, eh = dag.follow(ch, initial)
        return Optimum(rq, th, eh, -np.inf, budget_s, _time.perf_counter() - start, False, lam_j_per_s=hi)
    best_req, best_t, best_e = rq, th, eh
    lb = float(Vh[0, initial]) - hi * budget_s
    lam_star, V_star = hi, Vh
    bounds = [(0.0, V0), (hi, Vh)]  # every multiplier's cost-to-go bounds a partial path's completion
    ch_fit, ch_miss = chh, ch0  # the choices of the last multiplier that fits the budget and that misses it
    for _ in range(lambda_iters):
        mid = 0.5 * (lo + hi)
        Vm, chm = dag.backward(mid, want_path=True)
        bounds.append((mid, Vm))
        rq, tm, em = dag.follow(chm, initial)
        bound = float(Vm[0, initial]) - mid * budget_s
        if bound > lb:
            lb, lam_star, V_star = bound, mid, Vm
        if tm <= budget_s:
            hi, ch_fit = mid, chm
            if em < best_e:
                best_req, best_t, best_e = rq, tm, em
        else:
            lo, ch_miss = mid, chm
        if hi - lo <= 1e-7 * hi:
            break
    mixed = _time_share(dag, ch_miss, ch_fit, initial, budget_s)
    if mixed is not None and mixed[2] < best_e:
        best_req, best_t, best_e = mixed
    tol = 1e-9 * max(abs(best_e), 1.0)
    if best_e - lb <= tol:
        return Optimum(best_req, best_t, best_e, lb, budget_s, _time.perf_counter() - start, True,
                       lam_j_per_s=lam_star)
    # Iterative deepening on the band above the bound: every path with energy <= lb + delta uses only arcs
    # whose cheapest path through them costs <= lb + delta + lam·budget. If the best path on those arcs has
    # energy <= lb + delta, it is optimal over the whole DAG; otherwise widen the band.
    delta = max(2e-4 * abs(lb), tol)
    n_arcs = 0
    exact = False
    stopped = ""
    deadline = start + time_limit_s
    max_labels = max_memory_bytes / _BYTES_PER_LABEL
    while True:
        cap = min(lb + delta, best_e)
        try:
            arcs = _surviving_arcs(dag, initial, lam_star, V_star, cap + lam_star * budget_s + tol, deadline)
            n_arcs = max(n_arcs, arcs[0].size)
            found = _band_search(dag, initial, arcs, budget_s, lam_star, V_star, bounds, tmin, cap + tol, deadline,
                                 max_labels)
        except _Stopped as why:
            stopped = str(why)
            break
        if found is not None and found[2] < best_e:
            best_req, best_t, best_e = found
        if best_e <= lb + delta + tol:
            exact = True
            break
        if _time.perf_counter() > deadline:
            stopped = "time limit"
            break
        delta *= 4.0
    return Optimum(best_req, best_t, best_e, best_e if exact else lb, budget_s, _time.perf_counter() - start,
                   exact, labels=n_arcs, lam_j_per_s=lam_star, stopped=stopped)


def _time_share(dag: SwitchDag, ch_miss: np.ndarray, ch_fit: np.ndarray, initial: int, budget_s: float
                ) -> tuple[np.ndarray, float, float] | None:
    """The cheapest plan that follows the choices of a multiplier that misses the budget up to some kernel
    boundary ``k`` and those of one that fits it from there (``k`` bisected; the Lagrangian heuristic that
    closes most of the gap two neighbouring multipliers leave)."""
    best: tuple[np.ndarray, float, float] | None = None
    lo, hi = 0, dag.n
    mixed = ch_fit.copy()
    while hi - lo > 1:
        k = (lo + hi) // 2
        mixed[:k], mixed[k:] = ch_miss[:k], ch_fit[k:]
        req, tt, ee = dag.follow(mixed, initial)
        if tt <= budget_s:
            lo = k  # more of the frugal plan still fits
            if best is None or ee < best[2]:
                best = (req, tt, ee)
        else:
            hi = k
    return best


def _forward(dag: SwitchDag, lam: float, initial: int) -> np.ndarray:
    """Lagrangian cost ``F[i, c]`` of the cheapest path from the start to every node."""
    n, C = dag.n, dag.C
    F = np.full((n + 1, C), np.inf)
    F[0, initial] = 0.0
    cols = np.arange(C)
    for i in range(n):
        here = F[i]
        if not np.isfinite(here).any():
            continue
        F[i + 1] = np.minimum(F[i + 1], here + dag.e[i] + lam * dag.t[i])
        j, dt, de, valid = dag.switch_costs(i)
        cost = here[:, None] + de + lam * dt
        cost[cols, cols] = np.inf
        cost[~valid] = np.inf
        best_b = cost.min(axis=0)  # not used directly: rows land at different j
        del best_b
        for jc in np.unique(j[valid & np.isfinite(here)]):
            rows = valid & np.isfinite(here) & (j == jc)
            F[jc + 1] = np.minimum(F[jc + 1], cost[rows].min(axis=0))
    return F


def _surviving_arcs(dag: SwitchDag, initial: int, lam: float, V: np.ndarray, limit: float,
                    deadline: float = np.inf):
    """Arcs ``(i, c) -> (i', b)`` lying on some path whose Lagrangian cost is at most ``limit``.

    Returns arrays ``(i, c, i2, b, dt, de)``; any path with energy at most the incumbent and time within the
    budget has Lagrangian cost ``E + lam·T <= incumbent + lam·budget = limit``, so no such path uses an
    arc outside the set.
    """
    F = _forward(dag, lam, initial)
    out: list[list[np.ndarray]] = [[] for _ in range(6)]
    cols = np.arange(dag.C)
    for i in range(dag.n):
        if i % 256 == 0 and _time.perf_counter() > deadline:
            raise _Stopped("time limit")
        here = F[i]
        live = np.isfinite(here)
        if not live.any():
            continue
        stay_cost = here + dag.e[i] + lam * dag.t[i] + V[i + 1]
        keep = live & (stay_cost <= limit)
        c = cols[keep]
        for arr, val in zip(out, (np.full(c.size, i), c, np.full(c.size, i + 1), c, dag.t[i, c], dag.e[i, c])):
            arr.append(val)
        j, dt, de, valid = dag.switch_costs(i)
        total = here[:, None] + de + lam * dt + V[j + 1]
        total[cols, cols] = np.inf
        total[~(valid & live)] = np.inf
        rr, bb = np.nonzero(total <= limit)
        for arr, val in zip(out, (np.full(rr.size, i), rr, j[rr] + 1, bb, dt[rr, bb], de[rr, bb])):
            arr.append(val)
    return tuple(np.concatenate(a) if a else np.empty(0) for a in out)


class _Stopped(Exception):
    """The band search hit its deadline or its memory cap (the reason is the message)."""


_BYTES_PER_LABEL = 48
"""Memory of one partial path of the band search: stored (parent, arc) and, while pending, time, energy, id
(with the arrays numpy makes on the way)."""


def _band_search(dag: SwitchDag, initial: int, arcs, budget_s: float, lam_star: float, V_star: np.ndarray,
                 bounds: list[tuple[float, np.ndarray]], tmin: np.ndarray, cap_e: float, deadline: float = np.inf,
                 max_labels: float = np.inf) -> tuple[np.ndarray, float, float] | None:
    """Exact best path on the surviving arcs: label setting with dominance and bound pruning.

    Nodes are visited in order of their kernel boundary (the DAG's topological order). A partial path (label)
    is dropped when its fastest completion misses the budget, or when its Lagrangian completion bound
    ``E + lam·(T - budget) + V_lam`` exceeds ``cap_e`` — for the best multiplier ``lam_star`` as each arc
    extends it, for every multiplier of ``bounds`` at the node it reaches; there only the Pareto-optimal
    (time, energy) labels are kept. The cheapest label at the end is the optimum over all paths with energy
    <= ``cap_e`` (None if there is none).

    Raises:
        _Stopped: ``time.perf_counter()`` passed ``deadline``, or more than ``max_labels`` labels were alive.
    """
    ai, ac, aj, ab, adt, ade = arcs
    if ai.size == 0:
        return None
    C = dag.C
    tail = ai.astype(np.int64) * C + ac.astype(np.int64)
    head = aj.astype(np.int64) * C + ab.astype(np.int64)
    order = np.argsort(tail, kind="stable")
    tail, head, adt, ade = tail[order], head[order], adt[order], ade[order]
    nodes, first = np.unique(tail, return_index=True)
    last = np.append(first[1:], tail.size)
    span = {int(u): (int(a), int(b)) for u, a, b in zip(nodes, first, last)}
    pending: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {
        initial: [(np.zeros(1), np.zeros(1), np.full(1, -1, dtype=np.int64))]}
    parent_label: list[np.ndarray] = []
    via_arc: list[np.ndarray] = []
    n_labels = n_pending = 0
    tol_t = 1e-12 * budget_s
    tol_e = 1e-12 * max(abs(cap_e), 1.0)
    lams = np.array([lam for lam, _ in bounds])
    Vs = np.stack([V for _, V in bounds])  # (bounds, n + 1, C)

    def fits(i: int, c: int, T: np.ndarray, E: np.ndarray, every: bool) -> np.ndarray:
        """Labels at node (i, c) that can still end within the budget and at most ``cap_e`` joules (by the best
        multiplier's bound alone, or ``every`` multiplier's)."""
        ok = T + tmin[i, c] <= budget_s + tol_t
        ok &= E + lam_star * (T - budget_s) + V_star[i, c] <= cap_e + tol_e
        if every and ok.any():
            completion = E[:, None] + lams[None, :] * (T[:, None] - budget_s) + Vs[None, :, i, c]
            ok &= completion.max(axis=1) <= cap_e + tol_e
        return ok

    best: tuple[float, int] | None = None
    for node in sorted(set(nodes.tolist()) | set(head.tolist()) | {initial}):
        if _time.perf_counter() > deadline:
            raise _Stopped("time limit")
        parts = pending.pop(node, None)
        if not parts:
            continue
        T = np.concatenate([p[0] for p in parts])
        E = np.concatenate([p[1] for p in parts])
        P = np.concatenate([p[2] for p in parts])  # (parent label, arc) packed as parent * arcs + arc
        n_pending -= T.size
        i, c = divmod(node, C)
        ok = fits(i, c, T, E, every=True)
        T, E, P = T[ok], E[ok], P[ok]
        if T.size == 0:
            continue
        o = np.lexsort((E, T))
        T, E, P = T[o], E[o], P[o]
        keep = np.minimum.accumulate(np.concatenate([[np.inf], E[:-1]])) - tol_e > E
        T, E, P = T[keep], E[keep], P[keep]
        ids = np.arange(n_labels, n_labels + T.size)
        parent_label.append(np.where(P < 0, -1, P // max(tail.size, 1)))
        via_arc.append(np.where(P < 0, -1, P % max(tail.size, 1)))
        n_labels += T.size
        if i == dag.n:
            k = int(np.argmin(E))
            if best is None or E[k] < best[0]:
                best = (float(E[k]), int(ids[k]))
            continue
        if node not in span:
            continue
        a0, a1 = span[node]
        for a in range(a0, a1):
            v = int(head[a])
            Tn, En = T + adt[a], E + ade[a]
            vi, vc = divmod(v, C)
            ok = fits(vi, vc, Tn, En, every=False)
            if ok.any():
                pending.setdefault(v, []).append((Tn[ok], En[ok], ids[ok] * tail.size + a))
                n_pending += int(ok.sum())
        if n_labels + 2 * n_pending > max_labels:
            raise _Stopped("memory limit")
    if best is None:
        return None
    parents = np.concatenate(parent_label)
    arcs_of = np.concatenate(via_arc)
    path = []
    k = best[1]
    while k >= 0 and arcs_of[k] >= 0:
        path.append(int(arcs_of[k]))
        k = int(parents[k])
    req = np.empty(dag.n, dtype=np.int64)
    for a in reversed(path):
        u, v = int(tail[a]), int(head[a])
        i0, c0 = divmod(u, C)
        i1, b = divmod(v, C)
        req[i0:i1] = b if (i1 != i0 + 1 or b != c0) else c0
    tt, ee = _path_cost(dag, req, initial)
    return req, tt, ee


def _fastest_choice(dag: SwitchDag) -> np.ndarray:
    """Per node, the arc of the fastest completion (-1 = stay)."""
    T = _fastest_times(dag)
    choice = np.full((dag.n, dag.C), -1, dtype=np.int64)
    eye = np.eye(dag.C, dtype=bool)
    for i in range(dag.n):
        stay = dag.t[i] + T[i + 1]
        j, dt, _, valid = dag.switch_costs(i)
        sw = np.where(eye | ~valid[:, None], np.inf, dt + T[j + 1])
        b = np.argmin(sw, axis=1)
        choice[i] = np.where(sw[np.arange(dag.C), b] < stay, b, -1)
    return choice


def _fastest_times(dag: SwitchDag) -> np.ndarray:
    """Minimum time to finish the step from every node."""
    n, C = dag.n, dag.C
    T = np.zeros((n + 1, C))
    eye = np.eye(C, dtype=bool)
    for i in range(n - 1, -1, -1):
        stay = dag.t[i] + T[i + 1]
        j, dt, _, valid = dag.switch_costs(i)
        sw = np.where(eye | ~valid[:, None], np.inf, dt + T[j + 1])
        T[i] = np.minimum(stay, sw.min(axis=1))
    return T


def _path_cost(dag: SwitchDag, req: np.ndarray, initial: int) -> tuple[float, float]:
    """Total time and energy of requests under the DAG's rules (mirrors SwitchEngine for one run)."""
    i, c, tt, ee = 0, initial, 0.0, 0.0
    while i < dag.n:
        b = int(req[i])
        if b == c or not dag.valid[i, c]:
            tt += dag.t[i, c]
            ee += dag.e[i, c]
            i += 1
            continue
        j, dt, de, _ = dag.switch_costs(i)
        tt += dt[c, b]
        ee += de[c, b]
        i, c = int(j[c]) + 1, b
    return tt, ee
