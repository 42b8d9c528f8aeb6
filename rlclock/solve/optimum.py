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

**Bounded.** Both solvers keep their time limit from their first instruction — every stage checks the clock
— and the latency-aware one keeps its own arrays within ``max_memory_bytes`` (beyond the two tables it is
given). Stopped, each answers with the best plan found so far and the lower bound proven so far
(:attr:`Optimum.stopped` says why). The cheap stages come first, so even a step of a million kernels under a
limit of seconds gets a plan and a bound: the plan that keeps the clocks it starts with (the knapsack: the
fastest plan), the bound of the latency-blind relaxation (a kernel a switch lands in runs a convex combination
of its two configurations' time and energy, so that bound holds under latency too), and the best single
configuration after one switch at the start.
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
        why = f"stopped at the {self.stopped}" if self.stopped else "not proven optimal"
        if not np.isfinite(self.lower_bound_j):
            return f"{why} after {self.solve_s:.1f} s: the best plan found, with no lower bound proven yet"
        gap = 100 * self.gap_j / max(self.energy_j, 1e-30)
        return (
            f"{why} after {self.solve_s:.1f} s: the best plan found uses at most {gap:.3g} % more energy than "
            "the optimum (proven lower bound)"
        )


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


# -- limits: the clock and the memory every stage answers to ----------------------------------------------


class _Stopped(Exception):
    """A search hit its deadline or its memory cap (the reason is the message)."""


class _Clock:
    """A solver's deadline, set at its first instruction.

    Args:
        limit_s: Seconds the solver may take (``inf``: no limit).

    Raises:
        ScheduleError: The limit is not a number of seconds above 0.
    """

    def __init__(self, limit_s: float) -> None:
        self.start = _time.perf_counter()
        if (
            isinstance(limit_s, bool)
            or not isinstance(limit_s, (int, float, np.integer, np.floating))
            or not limit_s > 0
        ):
            raise ScheduleError(
                f"the solver's time limit must be a number of seconds above 0, found {limit_s!r}.",
                "give a time limit above 0 (e.g. 60).",
            )
        self.deadline = self.start + float(limit_s)

    def check(self) -> None:
        """Raise :class:`_Stopped` once the deadline has passed."""
        if _time.perf_counter() > self.deadline:
            raise _Stopped("time limit")

    def passed(self) -> bool:
        return _time.perf_counter() > self.deadline

    def left_s(self) -> float:
        return self.deadline - _time.perf_counter()

    def elapsed_s(self) -> float:
        return _time.perf_counter() - self.start


_CHUNK_ROWS = 1 << 15
"""Rows of a table handled at once by the vectorised stages (bounds their temporary arrays and how long the clock
goes unchecked)."""


class _Answer:
    """The best plan found so far and the best lower bound proven so far: what a stopped solver answers with.

    Args:
        budget_s: The time budget a plan must meet (with its rounding slack).
    """

    def __init__(self, budget_s: float, report_budget_s: float | None = None) -> None:
        self.budget_s = budget_s
        self.report_budget_s = budget_s if report_budget_s is None else report_budget_s
        self.plan: tuple[np.ndarray, float, float] | None = None
        self.lb = -np.inf
        self.lam = 0.0

    @property
    def energy_j(self) -> float:
        return np.inf if self.plan is None else self.plan[2]

    def offer(self, requests: np.ndarray, time_s: float, energy_j: float) -> None:
        """Keep the plan if it meets the budget and uses less energy than the best so far."""
        if time_s <= self.budget_s and energy_j < self.energy_j:
            self.plan = (requests, float(time_s), float(energy_j))

    def bound(self, value_j: float, lam: float) -> bool:
        """Keep a proven lower bound (and the multiplier that proved it) if it is the best so far."""
        if value_j > self.lb:
            self.lb, self.lam = float(value_j), float(lam)
            return True
        return False

    def tolerance_j(self) -> float:
        return 1e-9 * max(abs(self.energy_j), 1.0) if self.plan is not None else 0.0

    def proven(self) -> bool:
        """Whether the best plan is proven optimal (within floating-point tolerance)."""
        return self.plan is not None and self.energy_j - self.lb <= self.tolerance_j()

    def optimum(
        self, clock: _Clock, exact: bool | None = None, stopped: str = "", labels: int = 0, lam: float | None = None
    ) -> Optimum:
        if self.plan is None:
            raise ScheduleError(
                f"no plan within the time budget was found before the solver stopped at its "
                f"{stopped or 'limit'} ({clock.elapsed_s():.1f} s).",
                "give the solver more time (--time-limit) or allow more slowdown.",
            )
        req, tt, ee = self.plan
        proven = self.proven() if exact is None else exact
        return Optimum(
            req,
            tt,
            ee,
            ee if proven else min(self.lb, ee),
            self.report_budget_s,
            clock.elapsed_s(),
            proven,
            labels=labels,
            lam_j_per_s=self.lam if lam is None else lam,
            stopped="" if proven else stopped,
        )


def _groups(t: np.ndarray, e: np.ndarray, clock: _Clock) -> tuple[np.ndarray, np.ndarray] | None:
    """Group identical rows: (first row of each group, group of each row), or None when the rows are mostly
    distinct (half of the first chunk's are: grouping would only cost time). Rows are hashed to one number each
    (so a million rows sort in well under a second), and every group is checked to hold identical rows only;
    a hash that two different rows share falls back to sorting the rows themselves."""
    n, C = t.shape
    rng = np.random.default_rng(0x5EED)
    wt, we = rng.uniform(1.0, 2.0, C), rng.uniform(1.0, 2.0, C)
    h = np.empty(n)
    for s in range(0, n, _CHUNK_ROWS):
        clock.check()
        h[s : s + _CHUNK_ROWS] = (t[s : s + _CHUNK_ROWS] * wt).sum(axis=1) + (e[s : s + _CHUNK_ROWS] * we).sum(axis=1)
        if s == 0 and n > _CHUNK_ROWS and np.unique(h[:_CHUNK_ROWS]).size > _CHUNK_ROWS // 2:
            return None
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    for s in range(0, n, _CHUNK_ROWS):
        clock.check()
        rep = first[inverse[s : s + _CHUNK_ROWS]]
        if not (np.array_equal(t[rep], t[s : s + _CHUNK_ROWS]) and np.array_equal(e[rep], e[s : s + _CHUNK_ROWS])):
            both = np.concatenate([t, e], axis=1)
            _, first, inverse = np.unique(both, axis=0, return_index=True, return_inverse=True)
            return first, inverse.reshape(-1)
    return first, inverse


class _Relaxation:
    """The Lagrangian relaxation of the latency-blind problem over groups of identical invocations: for a price
    of time ``lam``, every group takes the configuration minimising ``energy + lam·time``.

    Args:
        t: ``(n, C)`` invocation times.
        e: ``(n, C)`` invocation energies.
        clock: The solver's deadline.
    """

    def __init__(self, t: np.ndarray, e: np.ndarray, clock: _Clock) -> None:
        groups = _groups(t, e, clock)
        if groups is None:  # every invocation its own group
            self.first = self.group = np.arange(t.shape[0])
            self.t, self.e = t, e
        else:
            self.first, self.group = groups
            self.t, self.e = t[self.first], e[self.first]
        self.counts = np.bincount(self.group, minlength=len(self.first)).astype(float)
        self.clock = clock
        clock.check()

    def totals(self, lam: float) -> tuple[np.ndarray, float, float]:
        """Per group the configuration minimising ``energy + lam·time`` (latency ignored), and the plan's total
        time and energy."""
        from rlclock.solve.lagrangian import lagrangian_choice

        G = self.t.shape[0]
        choice = np.empty(G, dtype=np.int64)
        tt = ee = 0.0
        for s in range(0, G, _CHUNK_ROWS):
            self.clock.check()
            c = lagrangian_choice(self.t[s : s + _CHUNK_ROWS], self.e[s : s + _CHUNK_ROWS], lam)
            rows = np.arange(s, s + c.size)
            choice[s : s + c.size] = c
            w = self.counts[s : s + c.size]
            tt += float((w * self.t[rows, c]).sum())
            ee += float((w * self.e[rows, c]).sum())
        return choice, tt, ee

    def bisect(self, answer: _Answer, iters: int = 60) -> tuple[float, np.ndarray] | None:
        """Bisection on ``lam``: every ``lam >= 0`` proves the bound ``sum_i min_c (e + lam·t) - lam·budget`` (kept
        in ``answer``). Returns the smallest price found whose choice fits the budget, with that choice per
        invocation (None if the clock ran out before one was found). Stops quietly at the deadline: every bound it
        proved holds."""
        budget = answer.budget_s
        try:
            j0, t0, e0 = self.totals(0.0)
            answer.bound(e0, 0.0)
            if t0 <= budget:
                return 0.0, j0[self.group]
            lo, hi = (
                0.0,
                float((self.counts[:, None] * self.e).sum() / max(float((self.counts[:, None] * self.t).sum()), 1e-30)),
            )
            for _ in range(200):
                jh, th, eh = self.totals(hi)
                answer.bound(eh + hi * (th - budget), hi)
                if th <= budget:
                    break
                lo, hi = hi, hi * 4.0
            else:
                return None
            fit = jh
            for _ in range(iters):
                mid = 0.5 * (lo + hi)
                jm, tm, em = self.totals(mid)
                answer.bound(em + mid * (tm - budget), mid)
                if tm <= budget:
                    hi, fit = mid, jm
                else:
                    lo = mid
                if hi - lo <= 1e-9 * hi:
                    break
            return hi, fit[self.group]
        except _Stopped:
            return None


# -- latency-blind: multiple-choice knapsack --------------------------------------------------------------


def knapsack_optimum(t: np.ndarray, e: np.ndarray, budget_s: float, time_limit_s: float = 600.0) -> Optimum:
    """Exact latency-blind optimum: one configuration per invocation, min energy s.t. total time ≤ budget.

    Args:
        t: ``(n, C)`` invocation times per configuration.
        e: ``(n, C)`` invocation energies.
        budget_s: Allowed total time.
        time_limit_s: Answer within this long (from the call); the answer is then the best plan found, with its
            proven lower bound (``exact`` False; most steps solve in well under a second, a few real steps take
            minutes).

    Raises:
        ScheduleError: If even the fastest choice exceeds the budget, or the time limit is not above 0.
    """
    clock = _Clock(time_limit_s)
    t = np.ascontiguousarray(t, dtype=float)
    e = np.ascontiguousarray(e, dtype=float)
    n = t.shape[0]
    rows = np.arange(n)
    answer = _Answer(budget_s * (1 + 1e-12), budget_s)
    # a plan at once: the first configuration throughout (auto, on a backend's tables), when it fits
    answer.offer(np.zeros(n, dtype=np.int64), float(t[:, 0].sum()), float(e[:, 0].sum()))
    try:
        relaxation = _Relaxation(t, e, clock)
    except _Stopped as why:
        if answer.plan is not None:
            return answer.optimum(clock, stopped=str(why))
        relaxation = _Relaxation(t, e, _Clock(np.inf))  # without a plan, whether the budget is feasible must be known
    fastest_group = np.argmin(relaxation.t, axis=1)
    fastest = float((relaxation.counts * relaxation.t[np.arange(len(fastest_group)), fastest_group]).sum())
    if fastest > budget_s * (1 + 1e-12):
        raise ScheduleError(
            f"time budget {budget_s:.6g} s is infeasible: the fastest schedule takes {fastest:.6g} s.",
            "allow more slowdown.",
        )
    if answer.plan is None:
        fastest_choice = fastest_group[relaxation.group]
        answer.offer(fastest_choice, float(t[rows, fastest_choice].sum()), float(e[rows, fastest_choice].sum()))
    relaxed = relaxation.bisect(answer)
    lam = relaxed[0] if relaxed is not None else answer.lam
    if relaxed is not None:
        answer.offer(relaxed[1], float(t[rows, relaxed[1]].sum()), float(e[rows, relaxed[1]].sum()))
    try:
        exact = _knapsack_exact(t, e, budget_s, relaxation, answer, clock)
    except _Stopped as why:
        return answer.optimum(clock, stopped=str(why), lam=lam)
    return answer.optimum(clock, exact=exact or answer.proven(), stopped="" if exact else "time limit", lam=lam)


_MILP_MAX_GROUPS = 200_000
"""Distinct invocations the integer program takes at most (HiGHS's memory and time grow with them; a step of
real kernels has a few thousand): past it, the knapsack answers with its relaxation's plan and bound."""


_MILP_IMPORT_S = 1.5
"""Seconds loading the integer solver (SciPy's optimize package) may take, about: with less time left on a first
call, the knapsack answers with its relaxation's plan and bound."""


def _knapsack_exact(
    t: np.ndarray, e: np.ndarray, budget_s: float, groups: _Relaxation, answer: _Answer, clock: _Clock
) -> bool:
    """The integer program over groups of identical invocations (HiGHS), within the clock's time; its plan and
    bound go to ``answer``. Returns whether HiGHS proved its plan optimal."""
    n = t.shape[0]
    first, group = groups.first, groups.group
    if len(first) > _MILP_MAX_GROUPS:
        raise _Stopped("memory limit")
    if "scipy.optimize" not in sys.modules and clock.left_s() < _MILP_IMPORT_S:
        raise _Stopped("time limit")  # the integer solver would not even be loaded in time
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix

    counts = np.bincount(group, minlength=len(first))
    # per group: drop configurations dominated in both time and energy (never in an optimum); the rest in order
    # of time
    tg, eg = groups.t, groups.e
    order = np.lexsort((eg, tg), axis=1)
    ts, es = np.take_along_axis(tg, order, axis=1), np.take_along_axis(eg, order, axis=1)
    best_before = np.concatenate([np.full((len(first), 1), np.inf), np.minimum.accumulate(es, axis=1)[:, :-1]], axis=1)
    keep = es < best_before - _EPS * np.abs(np.where(np.isfinite(best_before), best_before, 1.0))
    clock.check()
    sizes = keep.sum(axis=1)
    var_config, cost, tim = order[keep], es[keep], ts[keep]  # row-major: grouped, each group by time
    var_group = np.repeat(np.arange(len(first)), sizes)
    nv = int(var_config.size)
    a_eq = csr_matrix((np.ones(nv), (var_group, np.arange(nv))), shape=(len(first), nv))
    # scale time and energy to order one for the solver's tolerances
    t_scale, e_scale = float(tim.mean()) or 1.0, float(cost.mean()) or 1.0
    cons = [
        LinearConstraint(a_eq, counts, counts),
        LinearConstraint(tim[None, :] / t_scale, -np.inf, budget_s / t_scale),
    ]
    left = 0.95 * clock.left_s()  # the rest: handing the plan out
    if left <= 0:
        raise _Stopped("time limit")
    with _quiet_solver():
        res = milp(
            cost / e_scale,
            constraints=cons,
            integrality=np.ones(nv),
            bounds=Bounds(0, counts[var_group]),
            options={"mip_rel_gap": 0.0, "presolve": True, "time_limit": left},
        )
    bound = getattr(res, "mip_dual_bound", None)
    if bound is not None and np.isfinite(bound):
        answer.bound(float(bound) * e_scale, answer.lam)
    if res.x is None:
        raise _Stopped("time limit")
    x = np.rint(res.x).astype(np.int64)
    if np.any(x < 0) or not np.array_equal(np.bincount(var_group, weights=x, minlength=len(first)), counts):
        raise _Stopped("time limit")  # not a whole plan (stopped mid-way): keep the best one so far
    # hand out each group's counts to its invocations, in order, keeping equal choices contiguous
    requests = np.empty(n, dtype=np.int64)
    requests[np.argsort(group, kind="stable")] = np.repeat(var_config, x)
    rows = np.arange(n)
    answer.offer(requests, float(t[rows, requests].sum()), float(e[rows, requests].sum()))
    return bool(res.success)


# -- latency-aware: exact search over the switch DAG -------------------------------------------------------


def _prefix(a: np.ndarray, clock: _Clock | None = None) -> np.ndarray:
    """``(n + 1, C)`` running sums of ``a`` from a row of zeros (in chunks of rows, each carried on from the last
    sum, so the sums are those of one pass; the clock checked between)."""
    out = np.empty((a.shape[0] + 1, a.shape[1]))
    out[0] = 0.0
    for s in range(0, a.shape[0], _CHUNK_ROWS):
        if clock is not None:
            clock.check()
        block = a[s : s + _CHUNK_ROWS]
        seeded = np.empty((block.shape[0] + 1, a.shape[1]))
        seeded[0], seeded[1:] = out[s], block
        out[s + 1 : s + 1 + block.shape[0]] = np.cumsum(seeded, axis=0)[1:]
    return out


class SwitchDag:
    """Arcs of the switching DAG for tables ``t``, ``e`` and a latency (see module docstring).

    Args:
        t: ``(n, C)`` kernel times, seconds.
        e: ``(n, C)`` kernel energies, joules.
        latency_s: Switching latency, seconds.
        clock: A deadline checked while the landing table is built (one configuration at a time).
    """

    def __init__(self, t: np.ndarray, e: np.ndarray, latency_s: float, clock: _Clock | None = None) -> None:
        self.t = np.ascontiguousarray(t, float)
        self.e = np.ascontiguousarray(e, float)
        self.n, self.C = t.shape
        self.latency_s = float(latency_s)
        self.pt = _prefix(self.t, clock)  # (n+1, C)
        self.pe = _prefix(self.e, clock)
        # landing kernel j(i, c) and the share of kernel j run at the old clocks before the landing, built one
        # configuration at a time (its column contiguous: twice as fast, and the clock is checked between)
        self.land = np.empty((self.n, self.C), dtype=np.int32 if self.n < 2**31 - 1 else np.int64)
        self.frac = np.empty((self.n, self.C))
        self.valid = np.empty((self.n, self.C), dtype=bool)  # the switch lands within the step
        for s in range(0, self.n, _CHUNK_ROWS):  # their memory touched a chunk at a time (a column's writes touch
            if clock is not None:  # every page: the first column would take the time of all)
                clock.check()
            self.land[s : s + _CHUNK_ROWS], self.frac[s : s + _CHUNK_ROWS], self.valid[s : s + _CHUNK_ROWS] = (
                0,
                0.0,
                False,
            )
        self.reach = 0  # kernels a switch lands after its boundary, at most (how far ahead a pass looks)
        boundaries = np.arange(self.n)
        for c in range(self.C):
            if clock is not None:
                clock.check()
            land, frac = landing_table(
                np.ascontiguousarray(self.pt[:, c : c + 1]), np.ascontiguousarray(self.t[:, c : c + 1]), self.latency_s
            )
            self.land[:, c], self.frac[:, c], self.valid[:, c] = land[:, 0], frac[:, 0], land[:, 0] < self.n
            if self.n:
                self.reach = max(self.reach, int((np.minimum(land[:, 0], self.n - 1) - boundaries).max()))
        self.choice_dtype = np.int16 if self.C < 2**15 else np.int32

    @staticmethod
    def nbytes(n: int, C: int) -> int:
        """Memory a DAG of ``n`` kernels and ``C`` configurations holds beyond its tables, bytes."""
        return 2 * 8 * (n + 1) * C + n * C * (4 + 8 + 1)

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

    def backward(
        self,
        lam: float,
        want_path: bool = False,
        targets: np.ndarray | None = None,
        clock: _Clock | None = None,
        keep: bool = True,
    ):
        """Lagrangian cost-to-go ``V[i, c]`` of ``energy + lam·time`` (and the argmin arcs).

        ``targets`` (``(n, S)`` configuration indices), if given, restricts the switches issued at boundary
        ``i`` to ``targets[i]`` (a policy's candidate slots); staying is always allowed. ``clock``: a deadline
        checked every 512 kernels. Without ``keep``, only the rows a pass still looks at are held (a ring of
        :attr:`reach` + 2 rows; ``V[0]`` is then the only row that holds its own boundary's cost), and each
        kernel's cost is computed where it is used: far less memory, a little more time."""
        n, C = self.n, self.C
        if clock is not None:
            clock.check()
        R = n + 1 if keep else min(n + 1, self.reach + 2)
        V = np.zeros((R, C))
        choice = np.full((n, C), -1, dtype=self.choice_dtype) if want_path else None  # -1 stay, else target b
        # a switch from c at boundary i landing in kernel j costs, in energy + lam·time, the kernels before j at c,
        # the share ``frac`` of kernel j at c and the rest of it at b (switch_costs, in one sum per kernel)
        W = None
        if keep:
            W = np.empty((n, C))
            for s in range(0, n, _CHUNK_ROWS):
                if clock is not None:
                    clock.check()
                np.add(self.e[s : s + _CHUNK_ROWS], lam * self.t[s : s + _CHUNK_ROWS], out=W[s : s + _CHUNK_ROWS])
        cols = np.arange(C)
        diag = cols * (C + 1)
        barred = np.zeros(C, dtype=bool)
        for i in range(n - 1, -1, -1):
            if clock is not None and i % 512 == 0:
                clock.check()
            j = np.minimum(self.land[i], n - 1)
            if W is not None:
                stay = W[i] + V[i + 1]
                Wj = W[j]
                later = V[j + 1]
            else:
                stay = self.e[i] + lam * self.t[i] + V[(i + 1) % R]
                Wj = self.e[j] + lam * self.t[j]
                later = V[(j + 1) % R]
            f = self.frac[i]
            before = (
                (self.pe[j, cols] - self.pe[i, cols]) + lam * (self.pt[j, cols] - self.pt[i, cols]) + f * Wj[cols, cols]
            )
            sw = (1.0 - f)[:, None] * Wj + later  # [c, b]: row c lands in kernel j[c], continues at b
            sw += before[:, None]
            sw.flat[diag] = np.inf
            sw[~self.valid[i]] = np.inf
            if targets is not None:
                barred[:] = True
                barred[targets[i]] = False
                sw[:, barred] = np.inf
            best_b = np.argmin(sw, axis=1)
            best = sw[cols, best_b]
            use = best < stay
            V[i % R] = np.where(use, best, stay)
            if choice is not None:
                choice[i] = np.where(use, best_b, -1)
        return V, choice

    def time_to_go(self, choice: np.ndarray) -> np.ndarray:
        """``T[i, c]``: time to finish the step from node ``(i, c)`` following ``choice`` (from :meth:`backward`)."""
        T = np.zeros((self.n + 1, self.C))
        cols = np.arange(self.C)
        for i in range(self.n - 1, -1, -1):
            b = choice[i].astype(np.int64)
            stay = b < 0
            j, dt, _, _ = self.switch_costs(i)
            bb = np.where(stay, 0, b)
            sw = dt[cols, bb] + T[j + 1, bb]
            T[i] = np.where(stay, self.t[i] + T[i + 1], sw)
        return T

    def follow(self, choice: np.ndarray, initial: int, clock: _Clock | None = None) -> tuple[np.ndarray, float, float]:
        """Requests, time and energy of the path that ``choice`` takes from ``(0, initial)``: from switch to
        switch (a stretch at one configuration summed from the running sums), so its cost grows with the switches
        taken, not the kernels (``clock``: a deadline checked every 1024 switches)."""
        n = self.n
        req = np.empty(n, dtype=np.int64)
        leaves: dict[int, np.ndarray] = {}  # per configuration, the boundaries where the choice switches away
        i, c, tt, ee = 0, initial, 0.0, 0.0
        steps = 0
        while i < n:
            steps += 1
            if clock is not None and steps % 1024 == 0:
                clock.check()
            if c not in leaves:
                leaves[c] = np.flatnonzero(choice[:, c] >= 0)
            k = int(np.searchsorted(leaves[c], i))
            stop = int(leaves[c][k]) if k < leaves[c].size else n
            if stop > i:  # stay at c up to the next switch
                req[i:stop] = c
                tt += self.pt[stop, c] - self.pt[i, c]
                ee += self.pe[stop, c] - self.pe[i, c]
                i = stop
                continue
            b = int(choice[i, c])
            j, dt, de, _ = self.switch_costs(i)
            req[i : j[c] + 1] = b
            tt += dt[c, b]
            ee += de[c, b]
            i, c = int(j[c]) + 1, b
        return req, float(tt), float(ee)


DEFAULT_MEMORY_BYTES = 2.5e9
"""The latency-aware solver's own arrays at most (beyond the tables it is given), bytes: with a million-kernel
step's tables and trace it stays within 4 GB (benchmarks/solver_bounds.py)."""


def latency_aware_optimum(
    t: np.ndarray,
    e: np.ndarray,
    latency_s: float,
    budget_s: float,
    initial: int = 0,
    lambda_iters: int = 40,
    time_limit_s: float = 300.0,
    max_memory_bytes: float = DEFAULT_MEMORY_BYTES,
) -> Optimum:
    """Exact minimum energy within ``budget_s`` under switching latency (module docstring).

    Args:
        t: ``(n, C)`` invocation times.
        e: ``(n, C)`` invocation energies.
        latency_s: Switching latency (0 delegates to :func:`knapsack_optimum`, which is then exact).
        budget_s: Allowed total time.
        initial: Configuration in effect at the start (0 = auto).
        lambda_iters: Bisection steps on the Lagrange multiplier.
        time_limit_s: Answer within this long, counted from the call; the answer is then the best plan found,
            with its proven lower bound (``exact`` False, ``stopped`` says why).
        max_memory_bytes: The search's own arrays at most (the DAG, cost-to-go tables, partial paths), bytes;
            past it the search stops the same way.

    Raises:
        ScheduleError: If no schedule meets the budget (or none was found before the solver had to stop, when
            even the plan that keeps the initial clocks misses the budget).
    """
    clock = _Clock(time_limit_s)
    if latency_s <= 0.0 and initial == 0:
        return knapsack_optimum(t, e, budget_s, max(clock.left_s(), 1e-9))
    t = np.ascontiguousarray(t, dtype=float)
    e = np.ascontiguousarray(e, dtype=float)
    search = _LatencySearch(t, e, latency_s, budget_s, initial, clock, float(max_memory_bytes))
    try:
        search.solve(lambda_iters)
    except _Stopped as why:
        search.stopped = str(why)
    return search.result()


class _LatencySearch:
    """The stages of :func:`latency_aware_optimum`, each under the clock and the memory cap; what it found so far
    is in ``answer``."""

    def __init__(
        self,
        t: np.ndarray,
        e: np.ndarray,
        latency_s: float,
        budget_s: float,
        initial: int,
        clock: _Clock,
        max_memory_bytes: float,
    ) -> None:
        self.t, self.e, self.latency_s, self.initial, self.clock = t, e, latency_s, initial, clock
        self.n, self.C = t.shape
        self.memory = max_memory_bytes
        self.answer = _Answer(budget_s * (1 + 1e-12))  # sums in another order may differ in the last bits
        self.raw_budget_s = budget_s
        self.exact = False
        self.stopped = ""
        self.labels = 0
        self.lam_star = 0.0
        self.dag: SwitchDag | None = None
        self.tmin: np.ndarray | None = None
        self.keep = True
        # the plan that keeps the clocks it starts with: a plan at once, whenever it fits
        self.answer.offer(
            np.full(self.n, initial, dtype=np.int64), float(t[:, initial].sum()), float(e[:, initial].sum())
        )

    @property
    def v_bytes(self) -> int:
        return 8 * (self.n + 1) * self.C

    @property
    def choice_bytes(self) -> int:
        return (2 if self.C < 2**15 else 4) * self.n * self.C

    def result(self) -> Optimum:
        if self.exact:
            return self.answer.optimum(self.clock, exact=True, labels=self.labels, lam=self.lam_star)
        return self.answer.optimum(
            self.clock, stopped=self.stopped, labels=self.labels, lam=self.lam_star if self.dag is not None else None
        )

    def solve(self, lambda_iters: int) -> None:
        clock, answer, n, C, initial = self.clock, self.answer, self.n, self.C, self.initial
        budget_s = answer.budget_s
        _Relaxation(self.t, self.e, clock).bisect(answer)
        self.lam_star = answer.lam
        self._single_configurations()
        clock.check()
        # the DAG and three choice tables at least; with room for a pass's costs, two cost-to-go tables and the
        # band search's two, the passes keep their tables whole, else only the rows they still look at
        fixed = SwitchDag.nbytes(n, C) + 3 * self.choice_bytes
        if fixed > self.memory:
            raise _Stopped("memory limit")
        keep = self.keep = fixed + 5 * self.v_bytes <= self.memory
        if keep:
            fixed += 3 * self.v_bytes
        dag = self.dag = SwitchDag(self.t, self.e, self.latency_s, clock)
        if self.answer.plan is None:
            self._fastest_plan(dag)
        # Lagrangian relaxation: the best lower bound over lam, incumbents from the feasible side
        V0, ch0 = dag.backward(0.0, want_path=True, clock=clock, keep=keep)
        self._bound(V0, 0.0)
        req0, t0, e0 = dag.follow(ch0, initial, clock)
        if t0 <= budget_s:  # the least-energy path fits: exact
            answer.offer(req0, t0, e0)
            self.exact, self.lam_star = True, 0.0
            answer.lam = 0.0
            return
        # cost-to-go tables kept for the band search's pruning: as many as the memory left holds (the band search
        # needs room for the fastest times and one forward table)
        spare = (
            min(
                _MAX_BOUNDS,
                max(0, int((self.memory - fixed - (2 if self.tmin is None else 1) * self.v_bytes) // self.v_bytes)),
            )
            if keep
            else 0
        )
        bounds: list[tuple[float, np.ndarray]] = [(0.0, V0)] if spare > 0 else []
        lo, hi = 0.0, float(self.e.sum() / max(float(self.t.sum()), 1e-30))  # the step's mean power first
        Vh = chh = None
        for _ in range(80):
            Vh, chh = dag.backward(hi, want_path=True, clock=clock, keep=keep)
            self._bound(Vh, hi)
            rq, th, eh = dag.follow(chh, initial, clock)
            if th <= budget_s:
                answer.offer(rq, th, eh)
                break
            lo, hi = hi, hi * 4.0
        else:  # no finite price reaches the budget (ties at the fastest time): the fastest schedule stands
            return
        assert Vh is not None and chh is not None
        # the multiplier whose cost-to-go proves the best bound from the fitting side on (the band search prunes by
        # it and searches above its bound)
        V_star, lam_star = Vh, hi
        best_dp = self._bound_value(V_star, lam_star)
        _keep_bound(bounds, (hi, Vh), spare, hi)
        del V0
        ch_fit, ch_miss = chh, ch0  # the choices of the last multiplier that fits the budget and that misses it
        for _ in range(lambda_iters):
            mid = 0.5 * (lo + hi)
            Vm, chm = dag.backward(mid, want_path=True, clock=clock, keep=keep)
            self._bound(Vm, mid)
            if self._bound_value(Vm, mid) > best_dp:
                V_star, lam_star, best_dp = Vm, mid, self._bound_value(Vm, mid)
            _keep_bound(bounds, (mid, Vm), spare, mid)
            rq, tm, em = dag.follow(chm, initial, clock)
            if tm <= budget_s:
                hi, ch_fit = mid, chm
                answer.offer(rq, tm, em)
            else:
                lo, ch_miss = mid, chm
            del Vm
            if hi - lo <= 1e-7 * hi:
                break
        self.lam_star = lam_star
        mixed = _time_share(dag, ch_miss, ch_fit, initial, budget_s, clock)
        if mixed is not None:
            answer.offer(*mixed)
        del ch_fit, ch_miss, chm
        if answer.proven():
            self.exact = True
            return
        if not keep:  # the band search needs whole tables: the best multiplier's, the fastest times, one forward
            del V_star
            if fixed + 4 * self.v_bytes > self.memory:
                raise _Stopped("memory limit")
            V_star = dag.backward(lam_star, clock=clock)[0]
        if not any(lam == lam_star for lam, _ in bounds):
            bounds.append((lam_star, V_star))
        self._band_search(dag, lam_star, V_star, bounds, best_dp)

    def _bound_value(self, V: np.ndarray, lam: float) -> float:
        return float(V[0, self.initial]) - lam * self.answer.budget_s

    def _bound(self, V: np.ndarray, lam: float) -> bool:
        """Keep the lower bound a multiplier's cost-to-go proves (``V[0, initial] - lam·budget``)."""
        return self.answer.bound(self._bound_value(V, lam), lam)

    def _single_configurations(self) -> None:
        """The plans that switch once at the start and keep one configuration throughout (before the DAG: the
        switch lands within the first kernels, whose own small DAG gives its cost)."""
        c0, n = self.initial, self.n
        ahead = np.cumsum(self.t[: min(n, _CHUNK_ROWS), c0])
        m = int(np.searchsorted(ahead, self.latency_s, side="left")) + 2  # the kernels the switch lands within
        if m > ahead.size:
            return  # it lands far into the step (or never): not worth a plan of its own
        head = SwitchDag(self.t[:m], self.e[:m], self.latency_s)
        j, dt, de, valid = head.switch_costs(0)
        if not valid[c0]:
            return
        k = int(j[c0]) + 1
        rest_t = self.t.sum(axis=0) - head.pt[k]
        rest_e = self.e.sum(axis=0) - head.pe[k]
        tt, ee = dt[c0] + rest_t, de[c0] + rest_e
        fits = (tt <= self.answer.budget_s) & (np.arange(self.C) != c0)
        if fits.any():
            b = int(np.flatnonzero(fits)[np.argmin(ee[fits])])
            self.answer.offer(np.full(n, b, dtype=np.int64), float(tt[b]), float(ee[b]))

    def _fastest_plan(self, dag: SwitchDag) -> None:
        """The fastest plan: the budget is infeasible if even it misses it (else it is a plan)."""
        T, choice = _fastest(dag, self.clock, keep=self.keep)
        if T[0, self.initial] > self.answer.budget_s:
            raise ScheduleError(
                f"time budget {self.raw_budget_s:.6g} s is infeasible: the fastest schedule takes "
                f"{T[0, self.initial]:.6g} s.",
                "allow more slowdown.",
            )
        if self.keep:
            self.tmin = T
        del T
        self.answer.offer(*dag.follow(choice, self.initial, self.clock))

    def _band_search(
        self, dag: SwitchDag, lam_star: float, V_star: np.ndarray, bounds: list[tuple[float, np.ndarray]], lb: float
    ) -> None:
        """Iterative deepening on the band above the bound: every path with energy <= lb + delta uses only arcs
        whose cheapest path through them costs <= lb + delta + lam·budget. If the best path on those arcs has
        energy <= lb + delta, it is optimal over the whole DAG; otherwise widen the band."""
        answer, clock = self.answer, self.clock
        budget_s = answer.budget_s
        if self.tmin is None:
            self.tmin = _fastest(dag, clock)[0]
        lams = np.array([lam for lam, _ in bounds])
        Vs = np.stack([V for _, V in bounds])  # (bounds, n + 1, C)
        bounds.clear()
        used = SwitchDag.nbytes(self.n, self.C) + (len(lams) + 3) * self.v_bytes
        tol = answer.tolerance_j()
        delta = max(2e-4 * abs(lb), tol)
        while True:
            cap = min(lb + delta, answer.energy_j)
            arcs = _surviving_arcs(
                dag,
                self.initial,
                lam_star,
                V_star,
                cap + lam_star * budget_s + tol,
                clock,
                max_arcs=(self.memory - used) / _BYTES_PER_ARC,
            )
            self.labels = max(self.labels, arcs[0].size)
            left = self.memory - used - arcs[0].size * _BYTES_PER_ARC
            found = _band_search(
                dag,
                self.initial,
                arcs,
                budget_s,
                lam_star,
                V_star,
                lams,
                Vs,
                self.tmin,
                cap + tol,
                clock,
                max_labels=left / _BYTES_PER_LABEL,
            )
            del arcs
            if found is not None:
                answer.offer(*found)
            if answer.energy_j <= lb + delta + tol:
                answer.bound(answer.energy_j, lam_star)
                self.exact = True
                return
            clock.check()
            delta *= 4.0


_MAX_BOUNDS = 128
"""Cost-to-go tables the band search prunes by, at most (one per multiplier tried: every one of them on a step of
thousands of kernels)."""


def _keep_bound(
    bounds: list[tuple[float, np.ndarray]], item: tuple[float, np.ndarray], spare: int, near: float
) -> None:
    """Keep a multiplier's cost-to-go for the band search's pruning, at most ``spare`` of them (the memory they
    may take): past it, the one whose multiplier lies farthest from ``near`` makes room."""
    if spare <= 0:
        return
    bounds.append(item)
    if len(bounds) > spare:
        far = max(range(len(bounds)), key=lambda k: abs(bounds[k][0] - near))
        bounds.pop(far)


def _time_share(
    dag: SwitchDag, ch_miss: np.ndarray, ch_fit: np.ndarray, initial: int, budget_s: float, clock: _Clock | None = None
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
        req, tt, ee = dag.follow(mixed, initial, clock)
        if tt <= budget_s:
            lo = k  # more of the frugal plan still fits
            if best is None or ee < best[2]:
                best = (req, tt, ee)
        else:
            hi = k
    return best


def _forward(dag: SwitchDag, lam: float, initial: int, clock: _Clock | None = None) -> np.ndarray:
    """Lagrangian cost ``F[i, c]`` of the cheapest path from the start to every node."""
    n, C = dag.n, dag.C
    F = np.full((n + 1, C), np.inf)
    F[0, initial] = 0.0
    cols = np.arange(C)
    for i in range(n):
        if clock is not None and i % 512 == 0:
            clock.check()
        here = F[i]
        if not np.isfinite(here).any():
            continue
        F[i + 1] = np.minimum(F[i + 1], here + dag.e[i] + lam * dag.t[i])
        j, dt, de, valid = dag.switch_costs(i)
        cost = here[:, None] + de + lam * dt
        cost[cols, cols] = np.inf
        cost[~valid] = np.inf
        for jc in np.unique(j[valid & np.isfinite(here)]):
            rows = valid & np.isfinite(here) & (j == jc)
            F[jc + 1] = np.minimum(F[jc + 1], cost[rows].min(axis=0))
    return F


_BYTES_PER_ARC = 6 * 8
"""Memory of one surviving arc (tail, head, time, energy and their indices)."""


def _surviving_arcs(
    dag: SwitchDag,
    initial: int,
    lam: float,
    V: np.ndarray,
    limit: float,
    clock: _Clock | None = None,
    max_arcs: float = np.inf,
):
    """Arcs ``(i, c) -> (i', b)`` lying on some path whose Lagrangian cost is at most ``limit``.

    Returns arrays ``(i, c, i2, b, dt, de)``; any path with energy at most the incumbent and time within the
    budget has Lagrangian cost ``E + lam·T <= incumbent + lam·budget = limit``, so no such path uses an
    arc outside the set.

    Raises:
        _Stopped: The clock's deadline passed, or more than ``max_arcs`` arcs survive.
    """
    F = _forward(dag, lam, initial, clock)
    out: list[list[np.ndarray]] = [[] for _ in range(6)]
    cols = np.arange(dag.C)
    count = 0
    for i in range(dag.n):
        if clock is not None and i % 256 == 0:
            clock.check()
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
        count += c.size + rr.size
        if count > max_arcs:
            raise _Stopped("memory limit")
    return tuple(np.concatenate(a) if a else np.empty(0) for a in out)


_BYTES_PER_LABEL = 48
"""Memory of one partial path of the band search: stored (parent, arc) and, while pending, time, energy, id
(with the arrays numpy makes on the way)."""


def _band_search(
    dag: SwitchDag,
    initial: int,
    arcs,
    budget_s: float,
    lam_star: float,
    V_star: np.ndarray,
    lams: np.ndarray,
    Vs: np.ndarray,
    tmin: np.ndarray,
    cap_e: float,
    clock: _Clock | None = None,
    max_labels: float = np.inf,
) -> tuple[np.ndarray, float, float] | None:
    """Exact best path on the surviving arcs: label setting with dominance and bound pruning.

    Nodes are visited in order of their kernel boundary (the DAG's topological order). A partial path (label)
    is dropped when its fastest completion misses the budget, or when its Lagrangian completion bound
    ``E + lam·(T - budget) + V_lam`` exceeds ``cap_e`` — for the best multiplier ``lam_star`` as each arc
    extends it, for every multiplier of ``lams`` (their cost-to-go stacked in ``Vs``) at the node it reaches;
    there only the Pareto-optimal (time, energy) labels are kept. The cheapest label at the end is the optimum
    over all paths with energy <= ``cap_e`` (None if there is none).

    Raises:
        _Stopped: The clock's deadline passed, or more than ``max_labels`` labels were alive.
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
        initial: [(np.zeros(1), np.zeros(1), np.full(1, -1, dtype=np.int64))]
    }
    parent_label: list[np.ndarray] = []
    via_arc: list[np.ndarray] = []
    n_labels = n_pending = 0
    tol_t = 1e-12 * budget_s
    tol_e = 1e-12 * max(abs(cap_e), 1.0)

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
        if clock is not None:
            clock.check()
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


def _fastest(dag: SwitchDag, clock: _Clock | None = None, keep: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Minimum time to finish the step from every node, and per node the arc of that fastest completion
    (-1 = stay); without ``keep``, only a ring of the times (``T[0]`` the start's; see :meth:`SwitchDag.backward`)."""
    n, C = dag.n, dag.C
    R = n + 1 if keep else min(n + 1, dag.reach + 2)
    T = np.zeros((R, C))
    choice = np.full((n, C), -1, dtype=dag.choice_dtype)
    eye = np.eye(C, dtype=bool)
    rows = np.arange(C)
    for i in range(n - 1, -1, -1):
        if clock is not None and i % 512 == 0:
            clock.check()
        stay = dag.t[i] + T[(i + 1) % R]
        j, dt, _, valid = dag.switch_costs(i)
        sw = dt + T[(j + 1) % R]
        sw[eye | ~valid[:, None]] = np.inf
        b = np.argmin(sw, axis=1)
        best = sw[rows, b]
        use = best < stay
        T[i % R] = np.where(use, best, stay)
        choice[i] = np.where(use, b, -1)
    return T, choice


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
