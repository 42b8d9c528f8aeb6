"""Judge a clock policy on an env spec, next to the exact latency-aware optimum (same accounting)."""

from __future__ import annotations

from dataclasses import dataclass

from rlclock.backends.base import GpuBackend
from rlclock.config import EnvSpec
from rlclock.policy import ClockPolicy
from rlclock.solve.evaluation import Evaluation, evaluate, optimum_for


@dataclass(frozen=True)
class PolicyEvaluation:
    """A policy's step on one workload.

    Attributes:
        env: Env spec name.
        evaluation: The policy's schedule run next to auto.
        optimum_saving: Saving of the exact latency-aware optimum at the same budget (fraction).
        budget: The slowdown budget.
    """

    env: str
    evaluation: Evaluation
    optimum_saving: float
    budget: float

    @property
    def saving_pct(self) -> float:
        return 100 * self.evaluation.saving

    @property
    def slowdown_pct(self) -> float:
        return 100 * self.evaluation.slowdown

    @property
    def fraction_of_optimum(self) -> float:
        """Policy saving over optimum saving (1 = as good as the optimum)."""
        return self.evaluation.saving / self.optimum_saving if self.optimum_saving > 1e-9 else float("nan")

    @property
    def within_budget(self) -> bool:
        return self.evaluation.slowdown <= self.budget + 1e-9

    def metrics(self, prefix: str = "energy/") -> dict[str, float]:
        """The W&B metric namespace of the issue: saving, slowdown, switches, fraction of optimum."""
        return {
            f"{prefix}saving_pct": self.saving_pct,
            f"{prefix}slowdown_pct": self.slowdown_pct,
            f"{prefix}switches": float(self.evaluation.switches),
            f"{prefix}fraction_of_optimum": self.fraction_of_optimum,
            f"{prefix}optimum_saving_pct": 100 * self.optimum_saving,
        }


def evaluate_policy(
    policy: ClockPolicy, spec: EnvSpec, backend: GpuBackend | None = None, search: bool = False
) -> PolicyEvaluation:
    """Run the policy's schedule for ``spec``'s workload on its backend, beside the exact optimum (``search``:
    planned with the search over the policy's best choices, :meth:`ClockPolicy.plan`)."""
    if backend is None:
        from rlclock.env import episode_tables

        backend = episode_tables(spec).backend
    budget = spec.reward.budget
    sched = policy.schedule(backend.trace, backend=backend, budget=budget, search=search, whole_job=False)
    ev = evaluate(sched, backend)
    opt = optimum_for(backend, budget)
    auto = backend.auto_run()
    return PolicyEvaluation(spec.name, ev, 1.0 - opt.energy_j / auto.energy_j, budget)
