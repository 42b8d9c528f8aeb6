"""Baselines and optima, all judged by the same backend accounting (``GpuBackend.run``).

Every baseline chooses a schedule — most of them the way the paper did, with switching latency ignored —
and is then *evaluated* with the backend's switching latency, so the table shows what each approach is
worth when switches take time. The latency-aware optimum is the exact optimum of that evaluation.

========================  ===============================================================================
name                      schedule
========================  ===============================================================================
``auto``                  the driver's own clocks throughout
``max``                   highest core and memory clock of the configuration set, locked
``static``                the one configuration with the least energy whose slowdown fits the budget
``pass-local``            one configuration per pass (forward / backward / optimizer), each pass within its
                          own auto time × (1 + budget) (the paper's "local" aggregation)
``pass-global``           one configuration per pass, only the step's total within the budget
``kernel-local``          per kernel, the least energy within its own auto time × (1 + budget)
``kernel-global``         the paper's method: exact multiple-choice knapsack, latency ignored
``latency-aware``         exact optimum under the switching latency (:mod:`rlclock.solve.optimum`)
``power-limit``           the driver's own clocks under the one board power limit (a step of
                          :data:`POWER_LIMIT_STEP_W` from :data:`POWER_LIMIT_LOW` of the GPU's limit up) with
                          the least energy within the budget — what Zeus's global power-limit optimizer picks
                          for a whole job; no clock switches (simulated GPUs only)
``job-memory``            where the memory clock is a whole-job choice (a GPU with deferred memory locks, such
                          as Hopper): the one configuration — a core clock of the configuration set, or the
                          driver's — at any memory clock the GPU offers with the least energy within the
                          budget (simulated GPUs only); ``static`` at another memory clock
``kernel-edp``            (optional) the latency-blind schedule with the lowest energy-delay product
========================  ===============================================================================

The power limit acts inside every kernel at once (the driver lowers the clock of whichever kernel would draw
more), so it can beat the clock optimum, whose configurations each hold one clock over whole kernels and pay
a latency per switch.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rlclock.backends.base import GpuBackend
from rlclock.errors import ScheduleError
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
from rlclock.solve.evaluation import Evaluation, evaluate
from rlclock.solve.lagrangian import best_within
from rlclock.solve.optimum import Optimum, knapsack_optimum, latency_aware_optimum
from rlclock.validation import check_budget

BASELINES: tuple[str, ...] = (
    "auto",
    "max",
    "static",
    "pass-local",
    "pass-global",
    "kernel-local",
    "kernel-global",
    "latency-aware",
    "power-limit",
    "job-memory",
)
POWER_LIMIT_STEP_W = 25.0
"""Step between the power limits the ``power-limit`` baseline tries, W (Zeus steps its limits likewise)."""
POWER_LIMIT_LOW = 0.4
"""Lowest power limit it tries, as a share of the GPU's default limit."""


@dataclass(frozen=True)
class BaselineResult:
    """A baseline's schedule and its evaluation on the backend.

    Attributes:
        name: Baseline name (see the module table).
        schedule: The requested configuration per kernel.
        evaluation: Its run next to auto, with the backend's switching latency.
        optimum: Solver details for the optima (``None`` for the others).
    """

    name: str
    schedule: ClockSchedule
    evaluation: Evaluation
    optimum: Optimum | None = None

    def row(self) -> dict[str, Any]:
        """Flat summary (percentages against auto) for tables and JSON."""
        r = dict(self.evaluation.row())
        r["name"] = self.name
        if self.optimum is not None:
            r["solve_s"] = self.optimum.solve_s
            r["exact"] = self.optimum.exact
        return r


def _schedule(backend: GpuBackend, idx: np.ndarray, name: str) -> ClockSchedule:
    return ClockSchedule(backend.configs, np.asarray(idx, dtype=np.int64), name)


def _result(backend: GpuBackend, idx: np.ndarray, name: str, opt: Optimum | None = None) -> BaselineResult:
    sched = _schedule(backend, idx, name)
    return BaselineResult(name, sched, evaluate(sched, backend), opt)


def auto(backend: GpuBackend) -> BaselineResult:
    """The driver's own clocks throughout."""
    return _result(backend, np.zeros(backend.n_kernels), "auto")


def max_clocks(backend: GpuBackend) -> BaselineResult:
    """Highest locked core clock at the highest memory clock in the configuration set."""
    locked = [(i, c) for i, c in enumerate(backend.configs) if c.core_mhz is not None]
    if not locked:
        raise ScheduleError("the configuration set has no locked core clock for the 'max' baseline.")
    i = max(locked, key=lambda ic: (backend.spec.effective_mem_mhz(ic[1]), ic[1].core_mhz))[0]
    return _result(backend, np.full(backend.n_kernels, i), "max")


def budget_time_s(backend: GpuBackend, budget: float) -> float:
    """The longest step time within a slowdown ``budget`` (a fraction) on ``backend``, seconds: its auto step's times
    ``1 + budget``; judges compare with ``(1 + 1e-12)`` of it, for rounding.

    Raises:
        ScheduleError: The budget is not one (:func:`rlclock.validation.check_budget`: a fraction from 0 to
            :data:`~rlclock.validation.MAX_BUDGET`).
    """
    return backend.auto_run().time_s * (1.0 + check_budget(budget, "slowdown budget", ScheduleError))


def static(backend: GpuBackend, budget: float) -> BaselineResult:
    """The single configuration with the least energy whose step time fits the budget."""
    t, e = backend.tables
    tt, ee = t.sum(axis=0), e.sum(axis=0)
    ok = tt <= budget_time_s(backend, budget) * (1 + 1e-12)
    j = int(np.argmin(np.where(ok, ee, np.inf))) if ok.any() else 0
    return _result(backend, np.full(backend.n_kernels, j), "static")


def job_memory(backend: GpuBackend, budget: float) -> BaselineResult:
    """The best single configuration at any memory clock of the GPU, within the budget (module table).

    Raises:
        ScheduleError: The backend cannot run other configurations (:meth:`GpuBackend.with_configs`).
    """
    spec = backend.spec
    cores = sorted({c.core_mhz for c in backend.configs}, key=lambda f: -1 if f is None else f)
    grid = [AUTO] + [
        ClockConfig(f, m) for m in spec.mem_clocks_mhz for f in cores if f is None or f in spec.core_clocks_mhz(m)
    ]
    whole = backend.with_configs(grid)
    got = static(whole, budget)
    chosen = got.schedule[0]
    return BaselineResult(
        "job-memory",
        ClockSchedule.constant(chosen, backend.n_kernels, name=f"job-memory {spec.effective_mem_mhz(chosen)} MHz"),
        got.evaluation,
    )


def power_limits_w(top_w: float) -> np.ndarray:
    """The board power limits the ``power-limit`` baseline tries, watts: ``top_w`` (the GPU's own limit) first,
    then down in steps of :data:`POWER_LIMIT_STEP_W` to :data:`POWER_LIMIT_LOW` of it."""
    return np.arange(top_w, POWER_LIMIT_LOW * top_w - 1e-9, -POWER_LIMIT_STEP_W)


def power_limit(backend: GpuBackend, budget: float) -> BaselineResult:
    """The driver's clocks under the whole-job power limit with the least energy whose step fits the budget: a
    schedule of auto clocks naming that limit (or none, where the GPU's own limit is best).

    Raises:
        ScheduleError: The backend cannot change its power limit (:meth:`GpuBackend.at_power_limit`).
    """
    n = backend.n_kernels
    limit_s = budget_time_s(backend, budget) * (1 + 1e-12)
    top = backend.power_limit_w
    best_w, best = top, evaluate(ClockSchedule.constant(AUTO, n), backend)
    for w in power_limits_w(top)[1:]:
        got = evaluate(ClockSchedule.constant(AUTO, n, power_limit_w=float(w)), backend)
        if got.time_s > limit_s:
            break  # a lower limit never runs a kernel faster: every limit below misses the budget too
        if got.energy_j < best.energy_j:
            best_w, best = float(w), got
    name = f"power-limit {best_w:.0f} W"
    schedule = ClockSchedule.constant(AUTO, n, name, power_limit_w=None if best_w == top else best_w)
    return BaselineResult("power-limit", schedule, replace(best, name=name))


def _passes(backend: GpuBackend) -> list[np.ndarray]:
    phases = np.array([k.phase for k in backend.trace])
    return [phases == p for p in dict.fromkeys(phases.tolist())]


def pass_level(backend: GpuBackend, budget: float, aggregation: str = "local") -> BaselineResult:
    """One configuration per pass; ``local``: each pass within its own budget, ``global``: the step's."""
    t, e = backend.tables
    masks = _passes(backend)
    tp = np.stack([t[m].sum(axis=0) for m in masks])  # (passes, C)
    ep = np.stack([e[m].sum(axis=0) for m in masks])
    if aggregation == "local":
        choice = best_within(tp, ep, tp[:, 0] * (1.0 + budget))
    elif aggregation == "global":
        limit = budget_time_s(backend, budget)
        # keep each pass's Pareto-efficient configurations, then search their combinations
        cands = [_pareto(tp[p], ep[p]) for p in range(len(masks))]
        best, choice = np.inf, np.zeros(len(masks), dtype=np.int64)
        for combo in itertools.product(*cands):
            c = np.array(combo)
            if tp[np.arange(len(c)), c].sum() <= limit * (1 + 1e-12):
                en = ep[np.arange(len(c)), c].sum()
                if en < best:
                    best, choice = en, c
    else:
        raise ScheduleError(f"pass aggregation {aggregation!r} is unknown; use 'local' or 'global'.")
    idx = np.zeros(backend.n_kernels, dtype=np.int64)
    for m, c in zip(masks, choice):
        idx[m] = c
    return _result(backend, idx, f"pass-{aggregation}")


def _pareto(t: np.ndarray, e: np.ndarray) -> list[int]:
    order = np.lexsort((e, t))
    out, best = [], np.inf
    for j in order:
        if e[j] < best:
            out.append(int(j))
            best = e[j]
    return out


def kernel_local(backend: GpuBackend, budget: float) -> BaselineResult:
    """Per kernel, the least energy within its own auto time × (1 + budget)."""
    t, e = backend.tables
    return _result(backend, best_within(t, e, t[:, 0] * (1.0 + budget)), "kernel-local")


def kernel_global(backend: GpuBackend, budget: float, time_limit_s: float = 300.0) -> BaselineResult:
    """The paper's method: the exact latency-blind knapsack optimum (the best found within ``time_limit_s``),
    evaluated with the backend's latency."""
    t, e = backend.tables
    opt = knapsack_optimum(t, e, budget_time_s(backend, budget), time_limit_s)
    return _result(backend, opt.requests, "kernel-global", opt)


def latency_aware(backend: GpuBackend, budget: float, time_limit_s: float = 300.0) -> BaselineResult:
    """The exact optimum under the backend's switching latency."""
    t, e = backend.tables
    opt = latency_aware_optimum(t, e, backend.latency_s, budget_time_s(backend, budget), time_limit_s=time_limit_s)
    return _result(backend, opt.requests, "latency-aware", opt)


def kernel_edp(
    backend: GpuBackend, max_slowdown: float = 0.5, steps: int = 24, time_limit_s: float = 300.0
) -> BaselineResult:
    """The latency-blind schedule with the lowest energy-delay product.

    The EDP optimum lies on the energy/time Pareto frontier; exact knapsack optima at slowdown budgets on a
    grid (then refined around the best by golden-section search) trace that frontier. The whole search answers
    within ``time_limit_s`` (each solve gets the time left; past it, the best point found so far stands).
    """
    import time

    t, e = backend.tables
    t0 = backend.auto_run().time_s
    deadline = time.perf_counter() + time_limit_s

    def solve(b: float) -> tuple[float, Optimum]:
        o = knapsack_optimum(t, e, t0 * (1.0 + b), max(deadline - time.perf_counter(), 1e-3))
        return o.time_s * o.energy_j, o

    grid = np.linspace(0.0, max_slowdown, steps)
    vals = [solve(b) for b in grid if b == 0.0 or time.perf_counter() < deadline]
    k = int(np.argmin([v[0] for v in vals]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, steps - 1)]
    best = vals[k]
    g = (np.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = solve(a), solve(b)
    for _ in range(12):
        if time.perf_counter() >= deadline:
            break
        if fa[0] < fb[0]:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = solve(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = solve(b)
    for cand in (fa, fb):
        if cand[0] < best[0]:
            best = cand
    return _result(backend, best[1].requests, "kernel-edp", best[1])


def run_baselines(
    backend: GpuBackend, budget: float, names: Sequence[str] = BASELINES, edp: bool = False, time_limit_s: float = 300.0
) -> list[BaselineResult]:
    """Compute the named baselines (module table) at a slowdown budget, each evaluated on ``backend``; the two
    solvers (``kernel-global``, ``latency-aware``) stop after ``time_limit_s`` each with the best plan found."""
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ScheduleError(f"unknown baseline(s) {unknown}.", f"use some of {list(BASELINES)}.")
    out: list[BaselineResult] = []
    for n in names:
        if n == "auto":
            out.append(auto(backend))
        elif n == "max":
            out.append(max_clocks(backend))
        elif n == "static":
            out.append(static(backend, budget))
        elif n == "pass-local":
            out.append(pass_level(backend, budget, "local"))
        elif n == "pass-global":
            out.append(pass_level(backend, budget, "global"))
        elif n == "kernel-local":
            out.append(kernel_local(backend, budget))
        elif n == "kernel-global":
            out.append(kernel_global(backend, budget, time_limit_s))
        elif n == "latency-aware":
            out.append(latency_aware(backend, budget, time_limit_s))
        elif n == "power-limit":
            try:
                out.append(power_limit(backend, budget))
            except ScheduleError:  # a backend whose power limit cannot change (a real GPU): not this baseline
                continue
        elif n == "job-memory" and backend.spec.memory_locks == "deferred":
            try:
                out.append(job_memory(backend, budget))
            except ScheduleError:  # a backend that cannot predict other configurations (a real GPU)
                continue
    if edp:
        out.append(kernel_edp(backend, time_limit_s=time_limit_s))
    return out


def frontier(
    backend: GpuBackend, budgets: Sequence[float], latency_aware_too: bool = True, time_limit_s: float = 120.0
) -> dict[str, list[tuple[float, float]]]:
    """Energy-versus-slowdown frontiers: ``{name: [(time %, energy %), ...]}`` at each budget.

    ``kernel-global (planned)`` is the knapsack optimum as it plans (latency ignored);
    ``kernel-global (with latency)`` is that schedule run with the backend's latency; ``latency-aware``
    is the exact optimum under latency.
    """
    t, e = backend.tables
    auto_run = backend.auto_run()
    out: dict[str, list[tuple[float, float]]] = {
        "kernel-global (planned)": [],
        "kernel-global (with latency)": [],
        "latency-aware": [],
    }
    for b in budgets:
        limit = auto_run.time_s * (1.0 + b)
        k = knapsack_optimum(t, e, limit, time_limit_s)
        out["kernel-global (planned)"].append(
            (100 * (k.time_s / auto_run.time_s - 1), 100 * (k.energy_j / auto_run.energy_j - 1))
        )
        r = backend.run_indices(k.requests)
        out["kernel-global (with latency)"].append(
            (100 * (r.time_s / auto_run.time_s - 1), 100 * (r.energy_j / auto_run.energy_j - 1))
        )
        if latency_aware_too and backend.latency_s > 0:
            la = latency_aware_optimum(t, e, backend.latency_s, limit, time_limit_s=time_limit_s)
            out["latency-aware"].append(
                (100 * (la.time_s / auto_run.time_s - 1), 100 * (la.energy_j / auto_run.energy_j - 1))
            )
    if not out["latency-aware"]:
        del out["latency-aware"]
    return out
