"""Learning the plan on the GPU itself, inside the training loop: ``rlclock apply --learn``.

After the step is profiled, :func:`candidate_schedules` makes the candidate plans on the policy's planning model
(the simulated GPU anchored on the profiled kernel times: auto, the exact latency-aware optima over a range of
budgets, :func:`rlclock.policy.paired.candidate_plans`, and the policy's own plan — where the learner starts from
what the policy would have applied). The controller gets them all (plan 0 is auto, the others
its alternatives) and :class:`LiveLearner` chooses every step's plan one step ahead with the
:class:`~rlclock.policy.paired.PairedTracker`: each step's time is read from a mark at its start and at the next
step's start (CUDA events, read ``lag_steps`` steps later, when they have surely completed; the host clock without
CUDA), slowdowns against the auto steps that bracket each run of a plan, a safety layer keeping every 100 steps
within the budget + 0.5 pp by their upper bounds, and the commitment the time-shared pair of neighbouring plans that
saves most (by the planning model) while its measured slowdown is likely within the budget.

In a dry run nothing the plans ask for happens, so every plan's true slowdown is zero and the tracker reads the
loop's own noise; with ``--control-clocks`` it learns what the GPU does.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlclock.backends.executable import Execution
from rlclock.deploy.delivered import PlanningCosts, costs_of
from rlclock.policy.paired import PairedTracker, candidate_plans
from rlclock.schedule import ClockSchedule
from rlclock.workload.trace import KernelTrace

LEARN_BUDGETS = (0.0, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.06)
"""Planning budgets of the candidate plans in a live job (fractions; fewer than a simulated study's, as planning
runs inside the job)."""
PLAN_TIME_LIMIT_S = 2.0
"""Each candidate's solver stops at this many seconds (the best plan found so far is used)."""


@dataclass(frozen=True)
class CandidateSchedules:
    """The candidate schedules of a step and what the planning model says of them (plan 0 is auto), with the
    planning model's prices of the step (:class:`~rlclock.deploy.delivered.PlanningCosts`)."""

    schedules: tuple[ClockSchedule, ...]
    slowdown: np.ndarray
    saving: np.ndarray
    parts: np.ndarray
    costs: PlanningCosts | None = None

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.schedules)


def candidate_schedules(
    policy: Any,
    trace: KernelTrace,
    auto_time_s: np.ndarray,
    latency_s: float,
    budgets: tuple[float, ...] = LEARN_BUDGETS,
    time_limit_s: float = PLAN_TIME_LIMIT_S,
    search: bool = False,
    execution: Execution | None = None,
) -> CandidateSchedules:
    """The candidate plans for a profiled step on ``policy``'s planning model (its GPU and action set), as
    schedules: auto, the exact optima at ``budgets``, and the policy's own plan at its budget (where it differs).
    With an ``execution`` (the step's timeline and the controller's rule), each is the configuration every kernel
    runs at when the controller executes it, and its slowdown and saving are judged so."""
    model = policy.backend_for(trace, auto_time_s, None, latency_s)
    own = policy.plan(model, float(policy.budget), search=search, whole_job=False, execution=execution)
    cand = candidate_plans(
        model,
        budgets=budgets,
        time_limit_s=time_limit_s,
        extra=[(f"policy at {100 * float(policy.budget):g} %", np.asarray(own.requests))],
    )
    plans = [np.asarray(p, dtype=np.int64) for p in cand.plans]
    slowdown, saving = np.asarray(cand.slowdown, dtype=float), np.asarray(cand.saving, dtype=float)
    if execution is not None:
        t, e = model.tables
        auto_t, auto_e = float(np.cumsum(t[:, 0])[-1]), float(np.cumsum(e[:, 0])[-1])
        judged = [execution.judge(p, t, e, model.latency_s) for p in plans]
        plans = [j.runs for j in judged]
        slowdown = np.array([j.planned_time_s / auto_t - 1.0 for j in judged])
        saving = np.array([1.0 - j.planned_energy_j / auto_e for j in judged])
    schedules = tuple(
        ClockSchedule(policy.configs, p.tolist(), name=label) for p, label in zip(plans, cand.labels, strict=True)
    )
    return CandidateSchedules(
        schedules, slowdown, saving, cand.parts, costs_of(model, f"policy {policy.gpu_key} on the profiled step")
    )


class _Marks:
    """A mark at the start of each step: CUDA events on the current stream (or the host clock)."""

    def __init__(self, cuda: bool | None = None) -> None:
        self._torch: Any = None
        if cuda is None:
            try:
                import torch
            except ImportError:
                cuda = False
            else:
                cuda = bool(torch.cuda.is_available())
        if cuda:
            import torch

            self._torch = torch

    def mark(self) -> Any:
        if self._torch is None:
            return time.perf_counter()
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def elapsed_s(self, a: Any, b: Any) -> float:
        if self._torch is None:
            return float(b - a)
        b.synchronize()
        return float(a.elapsed_time(b)) / 1e3


class LiveLearner:
    """The paired tracker over a live loop: :meth:`on_step` at the start of every controlled step returns the plan
    of the next one.

    Args:
        candidates: The plans and the planning model's figures.
        budget: The slowdown budget, a fraction.
        cuda: Time steps with CUDA events (else the host clock); default: when PyTorch sees a CUDA device.
        lag_steps: Steps after which a step's end mark is read.
        seed: Seed of where auto runs in each cycle.
    """

    def __init__(
        self, candidates: CandidateSchedules, budget: float, cuda: bool | None = None, lag_steps: int = 2, seed: int = 0
    ) -> None:
        self.candidates = candidates
        self.budget = float(budget)
        self.tracker = PairedTracker(
            budget, list(candidates.slowdown), list(candidates.saving), candidates.parts, seed=seed
        )
        self.lag_steps = int(lag_steps)
        self._marks = _Marks(cuda)
        self._pending: deque[tuple[int, Any]] = deque()  # (arm, start mark) of steps not yet read
        self._next = 0  # the plan of the step about to start (plan 0 until a choice is made)
        self.steps = 0
        self.ran = np.zeros(len(candidates.schedules), dtype=np.int64)
        self.step_time_s: list[float] = []

    def on_step(self) -> int:
        """A controlled step begins: mark it, read a step ``lag_steps`` back, and return the next step's plan."""
        arm = self._next
        self._pending.append((arm, self._marks.mark()))
        self.ran[arm] += 1
        self.steps += 1
        while len(self._pending) > self.lag_steps + 1:
            done_arm, start = self._pending.popleft()
            t = self._marks.elapsed_s(start, self._pending[0][1])
            self.step_time_s.append(t)
            self.tracker.observe(done_arm, t)
        self._next = self.tracker.next_arm()
        return self._next

    def summary(self) -> dict[str, Any]:
        """What was learned: the commitment, its measured slowdown and spread, and how often each plan ran."""
        mix = self.tracker.commit()
        paired = self.tracker.guard.paired
        n = paired.n_arms
        w = mix.weights(n)
        mu, cov = paired.posterior()
        labels = self.candidates.labels
        return {
            "steps": self.steps,
            "read": len(self.step_time_s),
            "budget": self.budget,
            "plans": list(labels),
            "model_slowdown": [float(x) for x in self.candidates.slowdown],
            "model_saving": [float(x) for x in self.candidates.saving],
            "ran": [int(x) for x in self.ran],
            "committed": {
                "lo": mix.lo,
                "hi": mix.hi,
                "share_hi": mix.share_hi,
                "label": mix.label(),
                "measured_slowdown": float(np.expm1(w @ mu)),
                "sd": float(np.sqrt(max(float(w @ cov @ w), 0.0))),
                "model_saving": float(w @ self.candidates.saving),
            },
            "median_step_s": float(np.median(self.step_time_s)) if self.step_time_s else None,
        }

    def describe(self) -> str:
        """One line of :meth:`summary`."""
        s = self.summary()
        c = s["committed"]
        labels = s["plans"]
        plan = (
            labels[c["lo"]]
            if c["lo"] == c["hi"] or c["share_hi"] <= 0
            else (f"{labels[c['lo']]} / {labels[c['hi']]} at {100 * c['share_hi']:.0f} %")
        )
        return (
            f"learned over {s['steps']} steps ({s['read']} timed): committed to plan {plan} — measured slowdown "
            f"{100 * c['measured_slowdown']:+.2f} % ± {100 * c['sd']:.2f} % (budget {100 * self.budget:g} %), "
            f"planning-model saving {100 * c['model_saving']:.1f} %; auto ran on "
            f"{100 * s['ran'][0] / max(1, s['steps']):.0f} % of steps"
        )
