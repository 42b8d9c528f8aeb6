"""Learning on the GPU itself: choosing a plan from measurements only, within the slowdown budget.

A plan made on the planning model is worth what the model is. On a real GPU — here a
:class:`~rlclock.backends.true_gpu.TrueGpu` standing for one — a job can only measure what a user's GPU gives
(:class:`~rlclock.agents.measured.MeasuredJob`: each step's time, the energy counter). The arms are candidate plans
made on the planning model for a range of budgets (arm 0 is auto, the reference of every slowdown and saving).

Learners on the same measurements:

* :class:`NominalPlan` — the plan made for the budget, always (what rlclock does without feedback; run without the
  safety layer, as a user would run it);
* :class:`PairedTracker` — the budget's own root: it reads slowdowns step by step against interleaved auto steps
  (:class:`~rlclock.agents.measured.PairedSlowdown`, which cancels the slow drift of real step times and pools every
  arm through the planning model), and commits to the time-shared pair of neighbouring arms that saves most (by the
  planning model's ranking) while its slowdown is likely within the budget;
* :class:`SafeBandit` — confidence bounds on each arm's measured slowdown and saving, a window (>= 1 s) per arm:
  the bandit baseline over the plan parameter (the planning budget);
* :class:`BudgetFeedback` — the planning model's energy ranking of the arms, the measured step time for the budget,
  a window at a time;
* :func:`ppo_learner` — stable-baselines3 PPO over the same choice (observation: every arm's estimates; reward:
  the measured saving less a penalty for measured overrun), learning online a window at a time.

All but the nominal plan run in a :class:`GuardedRun`, behind :class:`~rlclock.agents.measured.StepSafety`: a step
runs an arm only if every step of the last ~100, each charged with its arm's upper bound (the paired estimate plus
``z_safe`` standard deviations, as known now), stays within ``budget + margin`` (0.5 pp); otherwise a lower arm or
auto runs. ``benchmarks/online.py`` judges them against the true GPU's best plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlclock.agents.measured import MIN_WINDOWS, Estimates, GuardedSteps, MeasuredJob, Mix
from rlclock.policy.paired import (
    LATENCY_BUDGETS,
    LATENCY_SCALES,
    PLAN_BUDGETS,
    Candidates,
    PairedTracker,
    best_mix,
    candidate_plans,
)

__all__ = [
    "LATENCY_BUDGETS",
    "LATENCY_SCALES",
    "PLAN_BUDGETS",
    "BudgetFeedback",
    "Candidates",
    "GuardedRun",
    "NominalPlan",
    "PairedTracker",
    "SafeBandit",
    "Trajectory",
    "best_mix",
    "candidate_plans",
    "observation",
    "ppo_learner",
    "run_learner",
    "run_nominal",
    "run_tracker",
]


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
        plausible = [
            a for a in range(est.n_arms) if est.count[a] < MIN_WINDOWS or slow[a] - self.z * sse[a] <= self.budget
        ]
        unseen = [a for a in plausible if est.count[a] < MIN_WINDOWS]
        if unseen:  # the untried arm closest to the nominal one
            return min(unseen, key=lambda a: abs(a - self.start))
        return max(plausible, key=lambda a: save[a] + self.z * vse[a]) if plausible else 0

    def commit(self, est: Estimates) -> int:
        slow, sse = est.slowdown()
        save, _ = est.saving()
        fits = [
            a for a in range(est.n_arms) if est.count[a] >= MIN_WINDOWS and slow[a] + self.z * sse[a] <= self.budget
        ]
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

    def __init__(
        self, budget: float, model_saving: Sequence[float], z: float = 2.0, reference_every: int = 4, patience: int = 24
    ) -> None:
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


@dataclass
class Trajectory:
    """What a learner did: the arm each step ran, and the plan it would commit to from each step on."""

    ran: list[int] = field(default_factory=list)
    commit_steps: list[int] = field(default_factory=list)  # the step count at which each commitment was made
    committed: list[Mix] = field(default_factory=list)

    def commit(self, steps: int, mix: Mix) -> None:
        if not self.committed or self.committed[-1] != mix:
            self.commit_steps.append(steps)
            self.committed.append(mix)

    def committed_at(self, steps: int) -> Mix:
        """The plan committed to after ``steps`` steps (auto before the first commitment)."""
        i = int(np.searchsorted(self.commit_steps, steps, side="right")) - 1
        return self.committed[i] if i >= 0 else Mix.of(0)

    def running_slowdowns(self, job: MeasuredJob, span_steps: int = 100) -> np.ndarray:
        """The true slowdown of the arms run, averaged over every stretch of ``span_steps`` consecutive steps."""
        slow = job.time_s / job.time_s[0] - 1.0
        true = slow[np.asarray(self.ran, dtype=np.int64)]
        if true.size < span_steps:
            return true
        return np.convolve(true, np.ones(span_steps) / span_steps, mode="valid")


class GuardedRun:
    """A learner's run on ``job``: steps through the safety layer (:class:`~rlclock.agents.measured.GuardedSteps`),
    windows' readings into :class:`~rlclock.agents.measured.Estimates`.

    Args:
        job: The measured job.
        budget: The slowdown budget, a fraction.
        model_slowdown: Each arm's slowdown on the planning model (the paired estimator's prior).
        parts: Optional split of each arm's model slowdown into parts a GPU may scale differently
            (:class:`~rlclock.agents.measured.PairedSlowdown`).
        margin: How far over the budget any ``span_steps`` may run.
        z_safe: Standard deviations above its estimate an arm's slowdown is charged with.
        span_steps: The span the safety layer keeps.
    """

    def __init__(
        self,
        job: MeasuredJob,
        budget: float,
        model_slowdown: Sequence[float],
        parts: np.ndarray | None = None,
        margin: float = 0.005,
        z_safe: float = 2.5,
        span_steps: int = 100,
    ) -> None:
        self.job, self.budget = job, float(budget)
        self.guard = GuardedSteps(budget, model_slowdown, parts, margin, z_safe, span_steps)
        self.est = Estimates(job.n_arms)
        self.traj = Trajectory()

    def upper(self) -> np.ndarray:
        return self.guard.upper()

    def step(self, arm: int) -> tuple[int, float]:
        """One step of ``arm``, or of what the safety layer runs instead: ``(arm run, its time in seconds)``."""
        ran = self.guard.admit(arm)
        t = float(self.job.run([ran])[0])
        self.guard.observe(ran, t)
        self.traj.ran.append(ran)
        return ran, t

    def window(self, arm: int, steps: int | None = None) -> tuple[int, float, float, int]:
        """A window of ``arm`` for as many of ``steps`` (default the job's window) as the safety layer allows, or of
        auto when it allows none: ``(arm run, mean step time s, energy per step J, steps)``."""
        w = self.job.window_steps if steps is None else int(steps)
        if not self.guard.allows(arm):
            arm = 0
        e0, ts = self.job.read_energy_j(), list[float]()
        for _ in range(w):
            if ts and not self.guard.allows(arm):
                break
            ts.append(self.step(arm)[1])
        n = len(ts)
        t, e = float(np.mean(ts)), (self.job.read_energy_j() - e0) / n
        self.est.add(arm, t, e)
        return arm, t, e, n


def observation(est: Estimates, run: GuardedRun) -> np.ndarray:
    """What the PPO learner sees: every arm's estimated slowdown and saving (percent, 0 if unseen), their
    standard errors (percent, capped), log counts, and every arm's paired slowdown bound (percent)."""
    slow, sse = est.slowdown()
    save, vse = est.saving()
    seen = est.count > 0
    f = lambda x: np.where(seen, np.clip(100 * np.nan_to_num(x), -20, 20), 0.0)  # noqa: E731
    return np.concatenate(
        [
            f(slow),
            f(save),
            f(np.minimum(sse, 0.2)),
            f(np.minimum(vse, 0.2)),
            np.log1p(est.count),
            np.clip(100 * run.upper(), -20, 20),
        ]
    ).astype(np.float32)


def run_learner(run: GuardedRun, learner: SafeBandit | BudgetFeedback, steps: int) -> Trajectory:
    """Run a window learner in ``run`` until the job has run ``steps`` steps."""
    while run.job.steps < steps:
        run.window(learner.choose(run.est))
        run.traj.commit(run.job.steps, Mix.of(learner.commit(run.est)))
    return run.traj


def run_nominal(job: MeasuredJob, arm: int, steps: int) -> Trajectory:
    """The nominal plan, every step, without a safety layer (as it runs today)."""
    traj = Trajectory()
    job.run(np.full(steps, arm))
    traj.ran = [arm] * steps
    traj.commit(0, Mix.of(arm))
    return traj


def ppo_learner(run: GuardedRun, steps: int, start: int, seed: int = 0, penalty: float = 10.0) -> Trajectory:
    """Stable-baselines3 PPO learning the arm choice online from the job's measurements (module docstring): one
    environment step per window; the first windows measure auto and the nominal plan; it commits to the arm its
    policy prefers among those whose slowdown surely fits (else auto)."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    est, job, budget = run.est, run.job, run.budget
    bandit_rule = SafeBandit(budget, start)

    class _Env(gym.Env):
        def __init__(self) -> None:
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (6 * job.n_arms,), np.float32)
            self.action_space = gym.spaces.Discrete(job.n_arms)

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
            super().reset(seed=seed)
            return observation(est, run), {}

        def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
            arm = int(action)
            if est.count[0] < MIN_WINDOWS:
                arm = 0
            elif est.count[start] < MIN_WINDOWS:
                arm = start
            arm, t, e, _ = run.window(arm)
            t0, e0 = est.t_sum[0] / est.count[0], est.e_sum[0] / est.count[0]
            slow = t / t0 - 1.0
            reward = 100 * ((1.0 - e / e0) - penalty * max(0.0, slow - budget))
            run.traj.commit(job.steps, Mix.of(_commit()))
            return observation(est, run), float(reward), False, job.steps >= steps, {}

    def _commit() -> int:
        slow, se = est.slowdown()
        fits = [
            a for a in range(job.n_arms) if est.count[a] >= MIN_WINDOWS and slow[a] + bandit_rule.z * se[a] <= budget
        ]
        if not fits:
            return 0
        obs = observation(est, run)
        dist = model.policy.get_distribution(model.policy.obs_to_tensor(obs)[0]).distribution
        probs = dist.probs  # type: ignore[union-attr]  # a Categorical for a Discrete action space
        p = probs.detach().cpu().numpy()[0]
        return max(fits, key=lambda a: p[a])

    env = _Env()
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=16,
        batch_size=16,
        n_epochs=4,
        learning_rate=3e-4,
        gamma=0.9,
        ent_coef=0.01,
        seed=seed,
        verbose=0,
        device="cpu",
    )
    windows = math.ceil(steps / job.window_steps)
    model.learn(total_timesteps=max(windows, 16))
    while job.steps < steps:  # PPO's rollouts end on a multiple of their length: the rest by its last commitment
        run.window(run.traj.committed_at(job.steps).lo)
    return run.traj


def run_tracker(tracker: PairedTracker, job: MeasuredJob, steps: int) -> Trajectory:
    """Run ``tracker`` over ``job`` until it has run ``steps`` steps."""
    traj = Trajectory()
    while job.steps < steps:
        arm = tracker.next_arm()
        tracker.observe(arm, float(job.run([arm])[0]))
        traj.ran.append(arm)
        traj.commit(job.steps, tracker.commit())
    return traj
