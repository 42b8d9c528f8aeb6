"""Learning on the GPU itself: choosing among plans from measurements only, keeping the slowdown budget.

A plan made on the planning model is worth what the model is. On a real GPU — here a
:class:`~rlclock.backends.true_gpu.TrueGpu` standing for one — a job can only measure what a user's GPU gives:
each step's time (CUDA events; its spread and step-to-step correlation as measured on the H200,
:attr:`TrueGpuDraw.time_noise`) and the energy of a window of steps
(NVML's counter, which moves every ``tick_s``: the energy of a window of duration ``D`` is off by about
``tick / (D·√6)``, as measured on the H200 — ``benchmarks/step_noise.py``). Its arms are candidate plans made on the
planning model for a range of budgets (arm 0 is auto, the reference every slowdown and saving is measured against);
every window of :attr:`MeasuredJob.window_steps` steps runs one arm.

Four learners on the same measurements:

* :class:`NominalPlan` — the plan made for the budget, always (what rlclock does without feedback);
* :class:`SafeBandit` — confidence bounds on each arm's slowdown and saving: it runs the arm with the best
  optimistic saving among those whose slowdown may fit, and commits to the best one whose slowdown surely fits;
* :class:`BudgetFeedback` — the planning model's energy ranking of the arms, the measured step time for the budget;
* :func:`ppo_learner` — stable-baselines3 PPO over the same choice (observation: every arm's estimates and the
  running slowdown; reward: the measured saving, less a penalty for measured overrun), learning online.

All run behind :class:`SafetyLayer`, which shortens a window of an arm (a probe) or runs auto instead wherever the
arm's worst likely slowdown could take the running slowdown over the last ~100 steps more than ``margin`` (0.5 pp)
over the budget.
``benchmarks/online.py`` judges them against the true GPU's best plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlclock.backends.true_gpu import TrueGpu

SQRT6 = math.sqrt(6.0)
MIN_WINDOWS = 3
"""Windows of an arm before its estimates count (one or two windows say nothing about their own spread)."""


class MeasuredJob:
    """A job on a true GPU, measured as a user's GPU measures it.

    Args:
        truth: The true GPU over the job's step.
        plans: Candidate plans (per-kernel configuration indices into ``truth.configs``); arm 0 must be auto.
        window_steps: Steps per measurement window (one arm per window; default: as many as last
            ``window_s`` on the true GPU at auto clocks, at least 8).
        window_s: The shortest window, seconds, when ``window_steps`` is not given.
        tick_s: The energy counter's update period, seconds.
        seed: Seed of the measurement noise.
    """

    def __init__(self, truth: TrueGpu, plans: Sequence[np.ndarray], window_steps: int | None = None,
                 window_s: float = 1.0, tick_s: float = 0.1, seed: int = 0) -> None:
        if not len(plans) or np.any(np.asarray(plans[0]) != 0):
            raise ValueError("arm 0 must be the all-auto plan (the reference of every measurement).")
        runs = [truth.run_indices(np.asarray(p, dtype=np.int64)) for p in plans]
        self.time_s = np.array([r.time_s for r in runs])
        self.energy_j = np.array([r.energy_j for r in runs])
        self.window_steps = (max(8, math.ceil(window_s / self.time_s[0])) if window_steps is None
                             else int(window_steps))
        self.tick_s = float(tick_s)
        self.noise = truth.draw.time_noise
        self.rho = truth.draw.time_correlation
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self._dev = 0.0  # the last step's relative time deviation (an AR(1) series across windows)

    @property
    def n_arms(self) -> int:
        return len(self.time_s)

    def true_slowdown(self, arm: int) -> float:
        return float(self.time_s[arm] / self.time_s[0] - 1.0)

    def true_saving(self, arm: int) -> float:
        return float(1.0 - self.energy_j[arm] / self.energy_j[0])

    def window(self, arm: int, steps: int | None = None) -> tuple[float, float]:
        """Run ``arm`` for one window (of ``steps``, default :attr:`window_steps`): its measured mean step time (s)
        and energy per step (J)."""
        w = self.window_steps if steps is None else max(1, int(steps))
        dev = np.empty(w)
        shocks = self.rng.normal(0.0, self.noise * math.sqrt(1.0 - self.rho ** 2), w)
        for i in range(w):
            self._dev = self.rho * self._dev + shocks[i]
            dev[i] = self._dev
        t = self.time_s[arm] * (1.0 + dev)
        duration = float(t.sum())
        e = self.energy_j[arm] * (1.0 + self.rng.normal(0.0, self.tick_s / (duration * SQRT6)))
        self.steps += w
        return float(t.mean()), float(e)


@dataclass
class Estimates:
    """Running means and spreads of each arm's measured step time and energy per step."""

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


@dataclass
class SafetyLayer:
    """Keeps the running slowdown within ``budget + margin`` (module docstring): before a window it projects the
    running slowdown with the arm's worst likely slowdown — measured, its upper confidence bound; not yet measured,
    the planning model's slowdown plus ``prior_error`` — and runs auto instead where that would cross the line.

    Attributes:
        budget: The slowdown budget, a fraction.
        margin: How far over the budget the running slowdown (over ``span_steps``) may go.
        span_steps: Steps the running slowdown averages over.
        prior_slowdown: Each arm's slowdown on the planning model (``None``: unknown, ``prior_error`` alone).
        prior_error: How far a true slowdown may lie above the planning model's (an error of ordinary size).
    """

    budget: float
    margin: float = 0.005
    span_steps: int = 100
    prior_slowdown: np.ndarray | None = None
    prior_error: float = 0.02
    recent: list[tuple[int, float]] = field(default_factory=list)  # (steps, measured slowdown) per window

    def record(self, steps: int, slowdown: float) -> None:
        self.recent.append((steps, slowdown))
        total = 0
        for i in range(len(self.recent) - 1, -1, -1):
            total += self.recent[i][0]
            if total >= self.span_steps:
                del self.recent[:i]
                break

    @property
    def running(self) -> float:
        steps = sum(s for s, _ in self.recent)
        return sum(s * d for s, d in self.recent) / steps if steps else 0.0

    def worst(self, arm: int, est: Estimates) -> float:
        """The arm's worst likely slowdown over its next window."""
        if arm == 0:
            return 0.0
        if est.count[arm] >= MIN_WINDOWS and est.count[0] >= MIN_WINDOWS:
            slow, se = est.slowdown()
            return float(slow[arm] + 2 * se[arm])
        prior = 0.0 if self.prior_slowdown is None else float(self.prior_slowdown[arm])
        return prior + self.prior_error

    def guard(self, arm: int, est: Estimates, window_steps: int, shortest: int = 4) -> tuple[int, int]:
        """``(arm, steps)`` to run next: ``arm`` for as many of ``window_steps`` steps as keep the projected running
        slowdown within ``budget + margin`` (a short probe of an arm not yet known), or auto for the window where
        fewer than ``shortest`` would."""
        line, worst, run = self.budget + self.margin, self.worst(arm, est), self.running
        if run > line:
            return 0, window_steps  # over the line already: back the fastest way
        if worst <= self.budget:
            return arm, window_steps
        # probe so that the projection stays within the budget itself, the margin left to the measurement's own
        # error: (run * (span - w) + worst * w) / span <= budget  <=>  w <= span * (budget - run) / (worst - run)
        w = int(self.span_steps * (self.budget - run) / (worst - run)) if worst > run else window_steps
        w = min(w, window_steps)
        return (arm, w) if w >= shortest else (0, window_steps)


class NominalPlan:
    """The plan made for the budget on the planning model, always."""

    def __init__(self, arm: int) -> None:
        self.arm = arm

    def choose(self, est: Estimates) -> int:
        return self.arm

    def commit(self, est: Estimates) -> int:
        return self.arm


class SafeBandit:
    """Confidence bounds over the arms (module docstring).

    Args:
        budget: The slowdown budget.
        start: The arm to try first (the nominal plan).
        z: Width of the confidence bounds, in standard errors.
        reference_every: Measure auto (arm 0) at least once every this many windows.
    """

    def __init__(self, budget: float, start: int, z: float = 2.0, reference_every: int = 8) -> None:
        self.budget, self.start, self.z, self.reference_every = budget, start, z, reference_every
        self.windows = 0

    def choose(self, est: Estimates) -> int:
        self.windows += 1
        if est.count[0] < MIN_WINDOWS or self.windows % self.reference_every == 0:
            return 0
        if est.count[self.start] < MIN_WINDOWS:
            return self.start
        slow, sse = est.slowdown()
        save, vse = est.saving()
        plausible = [a for a in range(est.n_arms)
                     if est.count[a] < MIN_WINDOWS or slow[a] - self.z * sse[a] <= self.budget]
        unseen = [a for a in plausible if est.count[a] < MIN_WINDOWS]
        if unseen:  # the untried arm closest to the nominal one
            return min(unseen, key=lambda a: abs(a - self.start))
        return max(plausible, key=lambda a: save[a] + self.z * vse[a]) if plausible else 0

    def commit(self, est: Estimates) -> int:
        slow, sse = est.slowdown()
        save, _ = est.saving()
        fits = [a for a in range(est.n_arms)
                if est.count[a] >= MIN_WINDOWS and slow[a] + self.z * sse[a] <= self.budget]
        return max(fits, key=lambda a: save[a]) if fits else 0


class BudgetFeedback:
    """The planning model's ranking of the arms by energy, the GPU's measured step time for the budget (module
    docstring): it runs the arm the model expects to save most among those not yet shown to overrun — to settle it
    while unsure, to keep it once it surely fits — and commits to the most saving arm whose measured slowdown surely
    fits. An arm still undecided after ``patience`` windows is too close to the budget to tell and is passed over.
    Energy readings (per window, through a 100 ms counter) are too coarse to rank plans that differ by tenths of a
    percent; step times are not, so it needs only short windows.

    Args:
        budget: The slowdown budget.
        model_saving: Each arm's saving on the planning model (arm 0, auto: 0).
        z: Width of the confidence bounds on the slowdown, in standard errors.
        reference_every: Measure auto at least once every this many windows.
        patience: Windows an arm may stay undecided before it is passed over.
    """

    def __init__(self, budget: float, model_saving: Sequence[float], z: float = 2.0, reference_every: int = 4,
                 patience: int = 24) -> None:
        self.budget, self.z, self.reference_every, self.patience = budget, z, reference_every, patience
        self.order = [int(a) for a in np.argsort(-np.asarray(model_saving, dtype=float), kind="stable")]
        self.windows = 0

    def _verdict(self, est: Estimates, arm: int) -> int:
        """+1 if ``arm`` surely fits the budget, -1 if it surely overruns (or stayed undecided too long), 0 while
        unsure."""
        if arm == 0:
            return 1
        if est.count[arm] < MIN_WINDOWS or est.count[0] < MIN_WINDOWS:
            return 0
        slow, se = est.slowdown()
        if slow[arm] + self.z * se[arm] <= self.budget:
            return 1
        if slow[arm] - self.z * se[arm] > self.budget or est.count[arm] >= self.patience:
            return -1
        return 0

    def choose(self, est: Estimates) -> int:
        self.windows += 1
        if est.count[0] < MIN_WINDOWS or self.windows % self.reference_every == 0:
            return 0
        return next(a for a in self.order if self._verdict(est, a) >= 0)

    def commit(self, est: Estimates) -> int:
        return next(a for a in self.order if self._verdict(est, a) > 0)


def observation(est: Estimates, safety: SafetyLayer) -> np.ndarray:
    """What the PPO learner sees: every arm's estimated slowdown and saving (percent, 0 if unseen), their
    standard errors (percent, capped), log counts, and the running slowdown (percent)."""
    slow, sse = est.slowdown()
    save, vse = est.saving()
    seen = est.count > 0
    f = lambda x: np.where(seen, np.clip(100 * np.nan_to_num(x), -20, 20), 0.0)  # noqa: E731
    return np.concatenate([f(slow), f(save), f(np.minimum(sse, 0.2)), f(np.minimum(vse, 0.2)),
                           np.log1p(est.count), [100 * safety.running]]).astype(np.float32)


@dataclass
class Trajectory:
    """What a learner did: the arm each window ran, the arm it would commit to after each window, and the steps."""

    ran: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # steps run so far, after each window

    def committed_at(self, steps: int) -> int:
        """The arm committed to after ``steps`` steps (auto before the first window)."""
        i = int(np.searchsorted(self.steps, steps, side="right")) - 1
        return self.committed[i] if i >= 0 else 0

    def running_slowdowns(self, job: MeasuredJob, span_steps: int = 100) -> np.ndarray:
        """The true slowdown of the arms run, averaged over every stretch of ``span_steps`` consecutive steps."""
        lengths = np.diff(np.concatenate([[0], self.steps])).astype(np.int64)
        true = np.repeat([job.true_slowdown(a) for a in self.ran], lengths)
        if true.size < span_steps:
            return true
        return np.convolve(true, np.ones(span_steps) / span_steps, mode="valid")


def run_learner(job: MeasuredJob, learner: NominalPlan | SafeBandit | BudgetFeedback, budget: float, steps: int,
                margin: float = 0.005, prior_slowdown: Sequence[float] | None = None) -> Trajectory:
    """Run ``learner`` behind the safety layer for ``steps`` steps of ``job`` (``prior_slowdown``: each arm's
    slowdown on the planning model, for the safety layer)."""
    est, traj = Estimates(job.n_arms), Trajectory()
    safety = SafetyLayer(budget, margin, prior_slowdown=None if prior_slowdown is None else np.asarray(prior_slowdown))
    while job.steps < steps:
        arm, n = safety.guard(learner.choose(est), est, job.window_steps)
        t, e = job.window(arm, n)
        est.add(arm, t, e)
        if est.count[0] > 0:
            safety.record(n, t / (est.t_sum[0] / est.count[0]) - 1.0)
        traj.ran.append(arm)
        traj.committed.append(learner.commit(est))
        traj.steps.append(job.steps)
    return traj


def ppo_learner(job: MeasuredJob, budget: float, steps: int, start: int, seed: int = 0, margin: float = 0.005,
                penalty: float = 10.0, prior_slowdown: Sequence[float] | None = None) -> Trajectory:
    """Stable-baselines3 PPO learning the arm choice online from the job's measurements (module docstring): one
    environment step per window; the first windows measure auto and the nominal plan; it commits to the arm its
    policy prefers among those whose slowdown surely fits (else auto)."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    est, traj = Estimates(job.n_arms), Trajectory()
    safety = SafetyLayer(budget, margin, prior_slowdown=None if prior_slowdown is None else np.asarray(prior_slowdown))
    bandit_rule = SafeBandit(budget, start)

    class _Env(gym.Env):
        def __init__(self) -> None:
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (5 * job.n_arms + 1,), np.float32)
            self.action_space = gym.spaces.Discrete(job.n_arms)

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
            super().reset(seed=seed)
            return observation(est, safety), {}

        def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
            arm = int(action)
            if est.count[0] < MIN_WINDOWS:
                arm = 0
            elif est.count[start] < MIN_WINDOWS:
                arm = start
            arm, n = safety.guard(arm, est, job.window_steps)
            t, e = job.window(arm, n)
            est.add(arm, t, e)
            t0, e0 = est.t_sum[0] / est.count[0], est.e_sum[0] / est.count[0]
            slow = t / t0 - 1.0
            safety.record(n, slow)
            reward = 100 * ((1.0 - e / e0) - penalty * max(0.0, slow - budget))
            traj.ran.append(arm)
            traj.steps.append(job.steps)
            traj.committed.append(_commit())
            return observation(est, safety), float(reward), False, job.steps >= steps, {}

    def _commit() -> int:
        slow, se = est.slowdown()
        fits = [a for a in range(job.n_arms)
                if est.count[a] >= MIN_WINDOWS and slow[a] + bandit_rule.z * se[a] <= budget]
        if not fits:
            return 0
        obs = observation(est, safety)
        dist = model.policy.get_distribution(model.policy.obs_to_tensor(obs)[0]).distribution
        probs = dist.probs  # type: ignore[union-attr]  # a Categorical for a Discrete action space
        p = probs.detach().cpu().numpy()[0]
        return max(fits, key=lambda a: p[a])

    env = _Env()
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=4, learning_rate=3e-4, gamma=0.9,
                ent_coef=0.01, seed=seed, verbose=0, device="cpu")
    windows = math.ceil(steps / job.window_steps)
    model.learn(total_timesteps=max(windows, 16))
    return traj
