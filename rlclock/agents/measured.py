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
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlclock.backends.true_gpu import StepNoise, TrueGpu
from rlclock.policy.paired import MIN_WINDOWS, GuardedSteps, Mix, PairedSlowdown, StepSafety

__all__ = ["MIN_WINDOWS", "Estimates", "GuardedSteps", "MeasuredJob", "Mix", "PairedSlowdown", "StepSafety"]
"""The paired estimator, the safety layer and :class:`Mix` live in :mod:`rlclock.policy.paired` (a live loop runs
them); they are named here too, beside the simulated job they are judged on."""


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

    def __init__(
        self,
        truth: TrueGpu,
        plans: Sequence[np.ndarray],
        noise: str = "replay",
        tick_s: float = 0.1,
        window_s: float = 1.0,
        seed: int = 0,
    ) -> None:
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
        var = np.maximum(sq / n - mean**2, 0.0) * n / np.maximum(n - 1, 1)
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
            err = np.sqrt(se**2 + (se[0] * ratio) ** 2) / m[0]
        return ratio, np.where(self.count > 0, err, np.inf)

    def slowdown(self) -> tuple[np.ndarray, np.ndarray]:
        """Each arm's estimated slowdown against arm 0 and its standard error."""
        ratio, err = self._relative(self.t_sum, self.t_sq)
        return ratio - 1.0, err

    def saving(self) -> tuple[np.ndarray, np.ndarray]:
        """Each arm's estimated energy saving against arm 0 and its standard error."""
        ratio, err = self._relative(self.e_sum, self.e_sq)
        return 1.0 - ratio, err
