"""The paired tracker: choosing each step's plan of a live job from its measured step times, within the budget.

A plan made on the planning model is worth what the model is; a real GPU tells only each step's time (CUDA events)
and its energy counter. This module holds what a live loop needs to learn from that — here in the deployable layer,
so that ``rlclock apply --learn`` runs it inside the user's training loop (numpy only):

* :func:`candidate_plans` — auto and the planning model's exact latency-aware optima over a range of budgets (the
  arms; arm 0 is auto, the reference of every slowdown and saving);
* :class:`PairedSlowdown` — every arm's slowdown read from step times against the auto steps bracketing each run of
  it (real step times drift: phases seconds long in which every step is 10–20 % slower, ``docs/results/
  step_noise.txt``), pooled through the planning model — a true slowdown is the model's times a factor common to
  all arms, plus an arm's own deviation — so that measuring two arms tells about all;
* :class:`StepSafety` / :class:`GuardedSteps` — the safety layer: a step runs an arm only if every ``span_steps``
  steps, each charged with its arm's upper bound, stay within ``budget + margin``;
* :class:`PairedTracker` — the budget's own root: commits to the time-shared pair of neighbouring arms that saves
  most (by the planning model's ranking) while its slowdown is likely within the budget (:func:`best_mix`).

The simulated jobs these are judged on, and the other learners (bandit, budget feedback, PPO), are in
:mod:`rlclock.agents.measured` and :mod:`rlclock.agents.online`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlclock.backends.simulated import SimulatedGpu

MIN_WINDOWS = 3
"""Windows (or bracketed runs) of an arm before its own readings count."""
BATCHES = 10
"""Batches of an arm's readings whose means give its standard error (once each has :data:`MIN_BATCH`)."""
MIN_BATCH = 5


@dataclass(frozen=True)
class Mix:
    """A plan made of two arms time-shared step by step: ``hi`` on a ``share_hi`` fraction of the steps, ``lo`` on
    the rest (one arm when ``lo == hi`` or ``share_hi`` is 0). Time and energy per step mix linearly."""

    lo: int
    hi: int
    share_hi: float = 0.0

    @staticmethod
    def of(arm: int) -> Mix:
        return Mix(arm, arm, 0.0)

    def weights(self, n_arms: int) -> np.ndarray:
        w = np.zeros(n_arms)
        w[self.lo] += 1.0 - self.share_hi
        w[self.hi] += self.share_hi
        return w

    def label(self) -> str:
        if self.lo == self.hi or self.share_hi <= 0.0:
            return f"a{self.lo}"
        return f"a{self.lo}/{self.hi}:{self.share_hi:.2f}"


PLAN_BUDGETS = (0.0, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.06)
"""Planning budgets of the candidate plans (fractions)."""
LATENCY_SCALES = (3.0,)
"""Further switching latencies, over the planning model's, the candidate plans are also made for (at
:data:`LATENCY_BUDGETS`): a GPU whose clock settles slower than the model's wants plans that switch less."""
LATENCY_BUDGETS = (0.005, 0.01, 0.02)


@dataclass(frozen=True)
class Candidates:
    """Candidate plans for a step and what the planning model says of them.

    Attributes:
        plans: Per-kernel configuration indices, auto first.
        labels: What each plan was made for.
        slowdown: Each plan's slowdown on the planning model, a fraction.
        saving: Each plan's energy saving on the planning model, a fraction.
        parts: Each plan's slowdown split into the clocks' part (switches landing at once) and the switching
            latency's (``(plans, 2)``, fractions).
    """

    plans: list[np.ndarray]
    labels: list[str]
    slowdown: np.ndarray
    saving: np.ndarray
    parts: np.ndarray


def candidate_plans(
    model: SimulatedGpu,
    budgets: Sequence[float] = PLAN_BUDGETS,
    latency_scales: Sequence[float] = LATENCY_SCALES,
    latency_budgets: Sequence[float] = LATENCY_BUDGETS,
    time_limit_s: float = 20.0,
    extra: Sequence[tuple[str, np.ndarray]] = (),
) -> Candidates:
    """Auto and the planning model's exact latency-aware optima at ``budgets``, and at ``latency_budgets`` for each
    switching latency ``latency_scales`` times the model's, then the ``extra`` plans (label, per-kernel
    configuration indices: a policy's own plan, say), each plan once (all judged on the model as it is)."""
    from rlclock.solve.optimum import latency_aware_optimum

    t, e = model.tables
    auto = model.auto_run()
    plans = [np.zeros(len(model.trace), dtype=np.int64)]
    labels = ["auto"]
    for scale in (1.0, *latency_scales):
        for b in budgets if scale == 1.0 else latency_budgets:
            plan = latency_aware_optimum(
                t, e, model.latency_s * scale, auto.time_s * (1 + b), time_limit_s=time_limit_s
            ).requests
            if any(np.array_equal(plan, p) for p in plans):
                continue  # the same plan (e.g. auto itself, where no switch pays at that latency)
            plans.append(plan)
            labels.append(f"{100 * b:g} %" + ("" if scale == 1.0 else f" at latency x{scale:g}"))
    for label, plan in extra:
        plan = np.asarray(plan, dtype=np.int64)
        if plan.shape != plans[0].shape:
            raise ValueError(f"extra plan {label!r} has {plan.shape} entries for a step of {plans[0].shape}")
        if not any(np.array_equal(plan, p) for p in plans):
            plans.append(plan)
            labels.append(label)
    runs = [model.run_indices(p) for p in plans]
    slowdown = np.array([r.time_s / auto.time_s - 1 for r in runs])
    saving = np.array([1 - r.energy_j / auto.energy_j for r in runs])
    instant = SimulatedGpu(
        model.spec, model.trace, model.configs, 0.0, anchor=model.anchor, power_limit_w=model.power_limit_w
    )
    base = instant.auto_run().time_s
    clock = np.array([instant.run_indices(p).time_s / base - 1 for p in plans])
    return Candidates(plans, labels, slowdown, saving, np.c_[clock, slowdown - clock])


class PairedSlowdown:
    """Every arm's slowdown against auto, from step times, each run of an arm read against the auto steps that
    bracket it, pooled through the planning model (module docstring).

    A run of arm ``a`` (consecutive steps of it) between two runs of auto gives one reading: its mean log step time
    less the mean of the log times of up to ``reference_steps`` auto steps right before and right after it (one
    each is best on the measured series: drift cancels to first order, and farther steps add drift back).

    The model: an arm's true log slowdown is ``sum_f k_f * x_af + d_a``, with ``x_af`` the planning model's parts of
    its slowdown (by default one, the whole; with ``parts``, e.g. the slowdown from the clocks alone and what the
    switching latency adds, which a real GPU scales differently), each ``k_f`` common to all arms (prior: normal
    around 1 with ``scale_sd``) and ``d_a`` the arm's own deviation (normal, spread ``shape_sd`` times its model
    slowdown and ``floor`` together). The readings' mean per arm is that plus noise of the measured
    spread over their count (widened by ``correlation`` for the auto steps neighbouring readings share). The
    posterior is normal (a linear model with a normal prior): :meth:`posterior`.

    Args:
        model_slowdown: Each arm's slowdown on the planning model (arm 0, auto: 0), fractions.
        parts: Optional ``(arms, parts)`` split of each arm's model slowdown (fractions, summing to it).
        scale_sd: Prior spread of the common factors ``k_f``.
        shape_sd: Prior spread of an arm's own deviation, relative to its model slowdown.
        floor: Prior spread of an arm's deviation whatever its model slowdown (log slowdown).
        reference_steps: Auto steps on each side a run is read against.
        correlation: Widening of the standard error for readings that share auto steps (until batches tell).
    """

    def __init__(
        self,
        model_slowdown: Sequence[float],
        parts: np.ndarray | None = None,
        scale_sd: float = 0.6,
        shape_sd: float = 0.3,
        floor: float = 0.01,
        reference_steps: int = 1,
        correlation: float = 1.25,
    ) -> None:
        m = np.log1p(np.asarray(model_slowdown, dtype=float))
        if m.ndim != 1 or m.size < 1 or abs(m[0]) > 1e-12:
            raise ValueError("model_slowdown must list every arm, auto (slowdown 0) first.")
        x = m[:, None] if parts is None else np.asarray(parts, dtype=float)
        if x.ndim != 2 or x.shape[0] != m.size or np.any(np.abs(x[0]) > 1e-12):
            raise ValueError("parts must be (arms, parts), auto's all 0.")
        if parts is not None:
            x = x * (m / np.where(np.abs(np.expm1(m)) > 0, np.expm1(m), 1.0))[:, None]  # into log slowdown
        self.m, self.x = m, x
        self.scale_sd, self.shape_sd, self.floor = float(scale_sd), float(shape_sd), float(floor)
        self.reference_steps, self.correlation = int(reference_steps), float(correlation)
        self.readings: list[list[float]] = [[] for _ in m]
        self._before: deque[float] = deque(maxlen=self.reference_steps)  # the last auto steps (log times)
        self._after: list[float] = []  # auto steps since the last step of an arm
        self._ref: float | None = None  # the reference before the runs now open
        self._runs: list[tuple[int, list[float]]] = []  # runs since the last auto stretch, waiting for the next
        self._cache: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def n_arms(self) -> int:
        return int(self.m.size)

    def count(self) -> np.ndarray:
        """Readings per arm."""
        return np.array([len(r) for r in self.readings])

    def add(self, arm: int, time_s: float) -> None:
        """One step of ``arm`` took ``time_s`` seconds."""
        x = math.log(time_s)
        if arm == 0:
            self._before.append(x)
            if self._runs:
                self._after.append(x)
                if len(self._after) >= self.reference_steps:
                    self._close()
            return
        if self._runs and self._after:
            self._close()
        if not self._runs:
            self._ref = float(np.mean(self._before)) if self._before else None
        if self._runs and self._runs[-1][0] == arm:
            self._runs[-1][1].append(x)
        else:
            self._runs.append((arm, [x]))

    def _close(self) -> None:
        """The runs now open get their readings (the auto steps after them are in)."""
        if self._ref is not None:
            ref = 0.5 * (self._ref + float(np.mean(self._after)))
            for arm, xs in self._runs:
                self.readings[arm].append(float(np.mean(xs)) - ref)
            self._cache = None
        self._runs, self._after = [], []

    def reading_means(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per arm: the mean reading, its variance, and whether it counts.

        The variance is the readings' spread (pooled over the arms) over their count, widened by
        :attr:`correlation` (readings share auto steps); with :data:`BATCHES` batches of at least :data:`MIN_BATCH`
        readings it is the variance of the batch means instead (whatever the readings' correlation), at least a
        quarter of the former. Readings are not clipped: step-time spikes are one-sided, and clipping the
        differences they leave biases the slowdown low.
        """
        mean = np.zeros(self.n_arms)
        var = np.full(self.n_arms, np.inf)
        sq, dof = 0.0, 0
        for a, r in enumerate(self.readings):
            if a and len(r) >= 2:
                x = np.asarray(r)
                sq += float(((x - x.mean()) ** 2).sum())
                dof += len(r) - 1
        if dof < 2 * MIN_WINDOWS:
            return mean, var, np.zeros(self.n_arms, dtype=bool)
        spread = max(math.sqrt(sq / dof), 1e-6)  # pooled over the arms: one arm's few readings say little of it
        for a, r in enumerate(self.readings):
            n = len(r)
            if not a or n < MIN_WINDOWS:
                continue
            x = np.asarray(r)
            mean[a] = float(x.mean())
            iid = (self.correlation * spread) ** 2 / n
            if n >= BATCHES * MIN_BATCH:
                size = n // BATCHES
                means = x[n - size * BATCHES :].reshape(BATCHES, size).mean(axis=1)
                var[a] = max(float(means.var(ddof=1)) / BATCHES, 0.25 * iid)
            else:
                var[a] = iid
        return mean, var, np.isfinite(var)

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of every arm's log slowdown (arm 0: exactly 0)."""
        if self._cache is not None:
            return self._cache
        mean_r, var_r, seen = self.reading_means()
        a_n, f_n = self.n_arms, self.x.shape[1]
        # unknowns: (k_1 .. k_F, d_0 .. d_{n-1}); arm a's log slowdown is x_a . k + d_a (auto: 0; d_0 unused)
        h = np.zeros((a_n, f_n + a_n))
        h[:, :f_n] = self.x
        h[1:, f_n + 1 :] = np.eye(a_n - 1)
        prior_mean = np.concatenate([np.ones(f_n), np.zeros(a_n)])
        prior_var = np.concatenate([np.full(f_n, self.scale_sd**2), (self.shape_sd * self.m) ** 2 + self.floor**2])
        prec = np.diag(1.0 / prior_var)
        rhs = prec @ prior_mean
        rows = np.flatnonzero(seen)
        if rows.size:
            hs = h[rows]
            w = 1.0 / var_r[rows]
            prec = prec + hs.T @ (hs * w[:, None])
            rhs = rhs + hs.T @ (w * mean_r[rows])
        cov_x = np.linalg.inv(prec)
        mu = h @ (cov_x @ rhs)
        cov = h @ cov_x @ h.T
        self._cache = (mu, cov)
        return mu, cov

    def slowdown(self, z: float = 0.0) -> np.ndarray:
        """Every arm's slowdown, a fraction, ``z`` posterior standard deviations above its mean."""
        mu, cov = self.posterior()
        return np.expm1(mu + z * np.sqrt(np.maximum(np.diag(cov), 0.0)))

    def of_mix(self, mix: Mix, z: float = 0.0) -> float:
        """A mix's slowdown, ``z`` standard deviations above its mean (a fraction)."""
        mu, cov = self.posterior()
        w = mix.weights(self.n_arms)
        return float(np.expm1(w @ mu + z * math.sqrt(max(float(w @ cov @ w), 0.0))))


@dataclass
class StepSafety:
    """Keeps the true slowdown of any ``span_steps`` consecutive steps within ``budget + margin`` (module
    docstring): a step may run an arm only if the arms of the last ``span_steps - 1`` steps and this one, each
    charged with its upper bound (``upper``, a fraction per arm, as known now), average within the line.

    Attributes:
        budget: The slowdown budget, a fraction.
        margin: How far over the budget the slowdown of a span may go.
        span_steps: The span, steps.
    """

    budget: float
    margin: float = 0.005
    span_steps: int = 100
    _recent: deque[int] = field(init=False)
    _counts: dict[int, int] = field(init=False)

    def __post_init__(self) -> None:
        self._recent = deque(maxlen=max(1, self.span_steps - 1))
        self._counts = {}

    @property
    def line(self) -> float:
        return self.budget + self.margin

    def allows(self, arm: int, upper: np.ndarray) -> bool:
        """Whether a step of ``arm`` now keeps the span within the line (auto always does)."""
        if arm == 0:
            return True
        charged = sum(n * max(float(upper[a]), 0.0) for a, n in self._counts.items()) + max(float(upper[arm]), 0.0)
        return charged <= self.span_steps * self.line

    def fallback(self, arm: int, upper: np.ndarray) -> int:
        """``arm`` if allowed, else the allowed arm of the highest bound below it (arms ordered by slowdown), else
        auto."""
        if self.allows(arm, upper):
            return arm
        lower = [a for a in range(len(upper)) if upper[a] < upper[arm] and self.allows(a, upper)]
        return max(lower, key=lambda a: upper[a]) if lower else 0

    def record(self, arm: int) -> None:
        """A step of ``arm`` ran."""
        if len(self._recent) == self._recent.maxlen:
            old = self._recent[0]
            self._counts[old] -= 1
        self._recent.append(arm)
        self._counts[arm] = self._counts.get(arm, 0) + 1


class GuardedSteps:
    """The paired estimator and the safety layer together: which arm may run next, and what ran (one step at a time,
    from the step times alone — as a live training loop gives them).

    Args:
        budget: The slowdown budget, a fraction.
        model_slowdown: Each arm's slowdown on the planning model (the estimator's prior).
        parts: Optional split of it (:class:`PairedSlowdown`).
        margin: How far over the budget any ``span_steps`` may run.
        z_safe: Standard deviations above its estimate an arm's slowdown is charged with.
        span_steps: The span the safety layer keeps.
    """

    def __init__(
        self,
        budget: float,
        model_slowdown: Sequence[float],
        parts: np.ndarray | None = None,
        margin: float = 0.005,
        z_safe: float = 2.5,
        span_steps: int = 100,
    ) -> None:
        self.budget, self.z_safe = float(budget), float(z_safe)
        self.paired = PairedSlowdown(model_slowdown, parts)
        self.safety = StepSafety(budget, margin, span_steps)
        self._upper: np.ndarray | None = None
        self._readings = -1

    def upper(self) -> np.ndarray:
        """Every arm's slowdown bound now (recomputed when a reading came in)."""
        n = int(self.paired.count().sum())
        if self._upper is None or n != self._readings:
            self._upper, self._readings = self.paired.slowdown(self.z_safe), n
        return self._upper

    def allows(self, arm: int) -> bool:
        return self.safety.allows(arm, self.upper())

    def admit(self, arm: int) -> int:
        """``arm``, or what the safety layer runs instead (:meth:`StepSafety.fallback`)."""
        return self.safety.fallback(arm, self.upper())

    def observe(self, arm: int, time_s: float) -> None:
        """A step of ``arm`` took ``time_s`` seconds."""
        self.paired.add(arm, time_s)
        self.safety.record(arm)


def best_mix(
    paired: PairedSlowdown,
    model_saving: Sequence[float] | np.ndarray,
    budget: float,
    tolerance: float = 0.002,
    z: float = 2.0,
    grid: int = 51,
) -> Mix:
    """The pair of arms neighbouring in estimated slowdown (among auto and the arms measured), time-shared step by
    step, that saves most by the planning model's ranking among those whose estimated slowdown is within ``budget``
    and whose slowdown ``z`` standard deviations up is within ``budget + tolerance`` (auto if none). Only neighbours
    are mixed: a plan's saving is known from the model only, and the model's savings of plans far apart need not
    scale as the GPU's do (interpolating between neighbours leans on that least)."""
    saving = np.asarray(model_saving, dtype=float)
    measured = np.flatnonzero((paired.count() >= MIN_WINDOWS) | (np.arange(paired.n_arms) == 0))
    order = measured[np.argsort(paired.slowdown()[measured], kind="stable")]
    lo, hi = order[:-1], order[1:]
    if not lo.size:
        return Mix.of(0)
    mu, cov = paired.posterior()
    share = np.linspace(0.0, 1.0, grid)[None, :]
    mean = (1 - share) * mu[lo][:, None] + share * mu[hi][:, None]
    var = (
        (1 - share) ** 2 * cov[lo, lo][:, None]
        + share**2 * cov[hi, hi][:, None]
        + 2 * share * (1 - share) * cov[lo, hi][:, None]
    )
    up = mean + z * np.sqrt(np.maximum(var, 0.0))
    ok = (np.expm1(mean) <= budget) & (np.expm1(up) <= budget + tolerance)
    gain = np.where(ok, (1 - share) * saving[lo][:, None] + share * saving[hi][:, None], -np.inf)
    i, j = np.unravel_index(int(np.argmax(gain)), gain.shape)
    if not np.isfinite(gain[i, j]) or gain[i, j] <= 0:
        return Mix.of(0)
    p = float(share[0, j])
    if p >= 1.0:
        return Mix.of(int(hi[i]))
    return Mix(int(lo[i]), int(hi[i]), p) if p > 0 else Mix.of(int(lo[i]))


class PairedTracker:
    """The budget's own root, from paired step times (module docstring).

    One step in every ``reference_every`` runs auto — at a random place in each cycle, so that nothing the loop
    does every other step (the tracker's own updates, on a loop that waits on the host) reads as a plan's slowdown;
    the others run the plan it would commit to now (its two arms in
    their share), and one cycle in ``probe_every`` (every cycle while the commitment is auto) probes an arm that might
    do better: one whose slowdown ``z`` deviations down may fit the budget and that the planning model expects to
    save more than the commitment — of those the one of the largest expected gain; none once every such arm is known
    to overrun. Once the committed plan's slowdown is known to within ``tolerance / 2`` (one standard deviation)
    auto runs only every ``settled_every``-th step, to keep watching.

    It needs only each step's time: :meth:`next_arm` before a step (already through the safety layer), then
    :meth:`observe` with what it took — in a live loop (``rlclock apply --learn``) as over a simulated job
    (:func:`rlclock.agents.online.run_tracker`).

    Args:
        budget: The slowdown budget, a fraction.
        model_slowdown: Each arm's slowdown on the planning model (the paired estimator's prior).
        model_saving: Each arm's saving on the planning model (the ranking it commits by).
        parts: Optional split of the model slowdowns (:class:`PairedSlowdown`).
        tolerance: How far over the budget the committed plan's slowdown may be, ``z`` deviations up.
        z: Standard deviations of the commitment's margin.
        reference_every: Steps per auto step while learning.
        settled_every: Steps per auto step once settled.
        probe_every: Cycles per probe.
        margin: How far over the budget any ``span_steps`` may run (the safety layer).
        z_safe: Standard deviations above its estimate an arm's slowdown is charged with (the safety layer).
        seed: Seed of where in each cycle auto runs.
    """

    def __init__(
        self,
        budget: float,
        model_slowdown: Sequence[float],
        model_saving: Sequence[float],
        parts: np.ndarray | None = None,
        tolerance: float = 0.002,
        z: float = 2.0,
        reference_every: int = 2,
        settled_every: int = 8,
        probe_every: int = 2,
        margin: float = 0.005,
        z_safe: float = 2.5,
        seed: int = 0,
    ) -> None:
        self.budget, self.saving = float(budget), np.asarray(model_saving, dtype=float)
        self.guard = GuardedSteps(budget, model_slowdown, parts, margin, z_safe)
        self.tolerance, self.z = float(tolerance), float(z)
        self.reference_every, self.settled_every, self.probe_every = reference_every, settled_every, probe_every
        self._rng = np.random.default_rng(seed)
        self._pos = self._len = self._auto_at = 0
        self._cycle = 0
        self._hi_steps = 0.0
        self._mix = Mix.of(0)
        self._readings = -1

    def commit(self) -> Mix:
        paired = self.guard.paired
        n = int(paired.count().sum())
        if n != self._readings:
            self._mix = best_mix(paired, self.saving, self.budget, self.tolerance, self.z)
            self._readings = n
        return self._mix

    def settled(self) -> bool:
        mix = self.commit()
        if mix.hi == 0:
            return False
        _, cov = self.guard.paired.posterior()
        w = mix.weights(self.guard.paired.n_arms)
        return math.sqrt(max(float(w @ cov @ w), 0.0)) < self.tolerance / 2

    def _probe(self, mix: Mix) -> int | None:
        """An arm that might do better than ``mix`` (class docstring), or ``None``: of those, the one of the largest
        expected gain — the planning model's extra saving times the chance its slowdown fits."""
        paired = self.guard.paired
        mu, cov = paired.posterior()
        sd = np.sqrt(np.maximum(np.diag(cov), 1e-12))
        low = np.expm1(mu - self.z * sd)
        gain = float(mix.weights(paired.n_arms) @ self.saving)
        could = [
            a
            for a in range(1, paired.n_arms)
            if a not in (mix.lo, mix.hi) and low[a] <= self.budget and self.saving[a] > gain
        ]
        if not could:
            return None
        line = math.log1p(self.budget)
        fits = {a: 0.5 * math.erfc((mu[a] - line) / (sd[a] * math.sqrt(2.0))) for a in could}
        return max(could, key=lambda a: (self.saving[a] - gain) * fits[a])

    def _wanted(self) -> int:
        if self._pos >= self._len:  # a new cycle: its length, and where in it auto runs (at random)
            self._len = self.settled_every if self.settled() else self.reference_every
            self._auto_at = int(self._rng.integers(self._len))
            self._pos = 0
            self._cycle += 1
        k = self._pos
        self._pos += 1
        if k == self._auto_at:
            return 0
        mix = self.commit()
        first = k == (1 if self._auto_at == 0 else 0)
        if mix.hi == 0 or (self._cycle % self.probe_every == 0 and first):
            probe = self._probe(mix)
            if probe is not None:
                return probe
        self._hi_steps += mix.share_hi
        if self._hi_steps >= 1.0:
            self._hi_steps -= 1.0
            return mix.hi
        return mix.lo if mix.lo else mix.hi

    def next_arm(self) -> int:
        """The arm the next step runs (what the safety layer allows of what the tracker wants)."""
        return self.guard.admit(self._wanted())

    def observe(self, arm: int, time_s: float) -> None:
        """The step of ``arm`` took ``time_s`` seconds."""
        self.guard.observe(arm, time_s)
