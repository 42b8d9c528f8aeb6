"""What a job can measure on a GPU the planning model does not describe exactly, and what it can infer from it.

A real job sees each step's time (CUDA events) and the GPU's energy counter (NVML; it moves every ``tick_s``, about
100 ms). :class:`MeasuredJob` gives exactly that over a :class:`~rlclock.backends.true_gpu.TrueGpu`: one plan (arm)
per step, each step's time with the true GPU's step noise (:class:`~rlclock.backends.true_gpu.StepNoise`, the same
whichever arm runs), and the counter as it reads. Arm 0 is auto, the reference of every slowdown and saving.

Step times on real loops drift: phases seconds long in which every step is 10–20 % slower (measured on the H200,
``docs/results/step_noise.txt``). A mean over a window of one arm against another window of auto carries that drift
whole; a step of an arm against the auto steps right before and after it does not. :class:`PairedSlowdown` measures
slowdowns that way (each run of an arm against the auto steps bracketing it) and pools every arm's readings
through the planning model — a true slowdown is the model's times a factor common to all arms, plus an arm's own
deviation — so that measuring two arms tells about all. :class:`StepSafety` keeps the true slowdown of any
``span_steps`` consecutive steps within the line, by charging every step with its arm's upper bound rather than
with a noisy measured time.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlclock.backends.true_gpu import StepNoise, TrueGpu

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


class MeasuredJob:
    """A job on a true GPU, measured as a user's GPU measures it (module docstring).

    Args:
        truth: The true GPU over the job's step.
        plans: Candidate plans (per-kernel configuration indices into ``truth.configs``); arm 0 must be auto.
        noise: ``"replay"`` (the measured series the true GPU replays) or ``"ar1"``
            (:class:`~rlclock.backends.true_gpu.StepNoise`).
        tick_s: The energy counter's update period, seconds.
        window_s: The shortest window, seconds, for learners that measure arms a window at a time.
        seed: Seed of the noise (and of the counter's phase).
    """

    def __init__(self, truth: TrueGpu, plans: Sequence[np.ndarray], noise: str = "replay", tick_s: float = 0.1,
                 window_s: float = 1.0, seed: int = 0) -> None:
        if not len(plans) or np.any(np.asarray(plans[0]) != 0):
            raise ValueError("arm 0 must be the all-auto plan (the reference of every measurement).")
        runs = [truth.run_indices(np.asarray(p, dtype=np.int64)) for p in plans]
        self.time_s = np.array([r.time_s for r in runs])
        self.energy_j = np.array([r.energy_j for r in runs])
        self.noise = StepNoise(noise, truth.draw)
        self.tick_s = float(tick_s)
        self.window_steps = max(8, math.ceil(window_s / self.time_s[0]))
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self.elapsed_s = float(self.rng.uniform(0.0, tick_s))  # the counter's phase
        self._energy_j = 0.0
        self._counter_j = 0.0
        self._dev = np.zeros(0)

    @property
    def n_arms(self) -> int:
        return len(self.time_s)

    def _weights(self, plan: int | Mix) -> np.ndarray:
        return (Mix.of(plan) if isinstance(plan, int | np.integer) else plan).weights(self.n_arms)

    def true_slowdown(self, plan: int | Mix) -> float:
        """The noise-free slowdown of an arm (or a mix) against auto, a fraction."""
        return float(self._weights(plan) @ self.time_s / self.time_s[0] - 1.0)

    def true_saving(self, plan: int | Mix) -> float:
        """The noise-free energy saving of an arm (or a mix) against auto, a fraction."""
        return float(1.0 - self._weights(plan) @ self.energy_j / self.energy_j[0])

    def _deviations(self, n: int) -> np.ndarray:
        if self._dev.size < n:
            self._dev = np.concatenate([self._dev, self.noise.series(max(n, 4096), self.rng)])
        out, self._dev = self._dev[:n], self._dev[n:]
        return out

    def run(self, arms: Sequence[int] | np.ndarray) -> np.ndarray:
        """Run one step of each arm in ``arms``, in order; each step's measured time, seconds (the energy counter
        moves on: :meth:`read_energy_j`)."""
        a = np.asarray(arms, dtype=np.int64)
        t = self.time_s[a] * (1.0 + self._deviations(a.size))
        e = self.energy_j[a] * (t / self.time_s[a])  # a longer step draws the arm's power for longer
        end_t = self.elapsed_s + np.cumsum(t)
        end_e = self._energy_j + np.cumsum(e)
        tick = math.floor(end_t[-1] / self.tick_s) * self.tick_s if a.size else -math.inf
        if a.size and tick > self.elapsed_s:  # the counter moved during these steps: its value at its last update
            i = int(np.searchsorted(end_t, tick))
            start_t, start_e = (end_t[i - 1], end_e[i - 1]) if i else (self.elapsed_s, self._energy_j)
            self._counter_j = float(start_e + e[i] * (tick - start_t) / t[i])
        self.steps += a.size
        if a.size:
            self.elapsed_s, self._energy_j = float(end_t[-1]), float(end_e[-1])
        return t

    def read_energy_j(self) -> float:
        """The energy counter now: the energy up to its last update (every :attr:`tick_s`), joules."""
        return self._counter_j

    def window(self, arm: int, steps: int | None = None) -> tuple[float, float]:
        """Run ``arm`` for one window (of ``steps``, default :attr:`window_steps`): its measured mean step time (s)
        and energy per step (J, between the counter's readings at the window's ends)."""
        w = self.window_steps if steps is None else max(1, int(steps))
        e0 = self.read_energy_j()
        t = self.run(np.full(w, arm))
        return float(t.mean()), (self.read_energy_j() - e0) / w


@dataclass
class Estimates:
    """Running means and spreads of each arm's measured step time and energy per step, a window at a time."""

    n_arms: int
    count: np.ndarray = field(init=False)
    t_sum: np.ndarray = field(init=False)
    t_sq: np.ndarray = field(init=False)
    e_sum: np.ndarray = field(init=False)
    e_sq: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        z = lambda: np.zeros(self.n_arms)  # noqa: E731
        self.count, self.t_sum, self.t_sq, self.e_sum, self.e_sq = z(), z(), z(), z(), z()

    def add(self, arm: int, t: float, e: float) -> None:
        self.count[arm] += 1
        self.t_sum[arm] += t
        self.t_sq[arm] += t * t
        self.e_sum[arm] += e
        self.e_sq[arm] += e * e

    def _mean_se(self, s: np.ndarray, sq: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
        """Means and standard errors, the latter widened by Student's t over the normal quantile for few windows
        (so that ``z`` standard errors keep their meaning), infinite below :data:`MIN_WINDOWS`."""
        from scipy.stats import t as student

        n = np.maximum(self.count, 1)
        mean = s / n
        var = np.maximum(sq / n - mean ** 2, 0.0) * n / np.maximum(n - 1, 1)
        se = np.sqrt(np.maximum(var, (floor * mean) ** 2) / n)
        widen = student.ppf(0.975, np.maximum(n - 1, 1)) / 1.96
        return mean, np.where(self.count >= MIN_WINDOWS, se * widen, np.inf)

    def _relative(self, s: np.ndarray, sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each arm's mean over arm 0's, and its standard error (inf for an arm, or a reference, not yet seen)."""
        m, se = self._mean_se(s, sq, 0.002)
        if self.count[0] == 0 or m[0] <= 0:
            return np.full(self.n_arms, np.nan), np.full(self.n_arms, np.inf)
        ratio = m / m[0]
        with np.errstate(invalid="ignore"):
            err = np.sqrt(se ** 2 + (se[0] * ratio) ** 2) / m[0]
        return ratio, np.where(self.count > 0, err, np.inf)

    def slowdown(self) -> tuple[np.ndarray, np.ndarray]:
        """Each arm's estimated slowdown against arm 0 and its standard error."""
        ratio, err = self._relative(self.t_sum, self.t_sq)
        return ratio - 1.0, err

    def saving(self) -> tuple[np.ndarray, np.ndarray]:
        """Each arm's estimated energy saving against arm 0 and its standard error."""
        ratio, err = self._relative(self.e_sum, self.e_sq)
        return 1.0 - ratio, err


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

    def __init__(self, model_slowdown: Sequence[float], parts: np.ndarray | None = None, scale_sd: float = 0.6,
                 shape_sd: float = 0.3, floor: float = 0.01, reference_steps: int = 1,
                 correlation: float = 1.25) -> None:
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
                means = x[n - size * BATCHES:].reshape(BATCHES, size).mean(axis=1)
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
        h[1:, f_n + 1:] = np.eye(a_n - 1)
        prior_mean = np.concatenate([np.ones(f_n), np.zeros(a_n)])
        prior_var = np.concatenate([np.full(f_n, self.scale_sd ** 2),
                                    (self.shape_sd * self.m) ** 2 + self.floor ** 2])
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

    def __init__(self, budget: float, model_slowdown: Sequence[float], parts: np.ndarray | None = None,
                 margin: float = 0.005, z_safe: float = 2.5, span_steps: int = 100) -> None:
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
