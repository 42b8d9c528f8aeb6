"""The search over the policy's second choices: where the runner-up request lowers the planned step's
``energy + price·time`` on the planning model, it replaces the first choice in that state."""

from __future__ import annotations

from rlclock.policy.inputs import FirstLayerEvaluator, PreparedStep
from rlclock.policy.rollout import Choices, rollout
from rlclock.policy.step import PlanningStep


def refine(evaluator: FirstLayerEvaluator, step: PlanningStep, prepared: PreparedStep, price_rel: float,
           passes: int = 3) -> dict[tuple[int, int], int]:
    """The ``(situation, configuration in effect)`` states, at one price, whose first choice the policy's second
    choice replaces because that lowers the planned step's ``energy + price·time`` (the objective the policy
    was trained on at this price).

    States are tried in order of the policy's margin between the two (least sure first), one rollout each, a
    replacement kept when it lowers the objective; ``passes`` rounds, stopping early when a round keeps none.
    Replacing a state's action changes it at every kernel that decides in that state — in every repeat of a
    layer at once.
    """
    price = float(price_rel)
    weight = price * step.mean_power_w  # J per s
    chosen: dict[tuple[int, int], int] = {}
    seen: Choices = {}
    best = rollout(evaluator, step, price, prepared=prepared, choices=seen).objective(weight)
    for _ in range(passes):
        kept = False
        for state, (_, second) in sorted(seen.items(), key=lambda kv: kv[1][0]):
            if state in chosen:
                continue
            chosen[state] = second
            objective = rollout(evaluator, step, price, prepared=prepared, overrides={price: chosen},
                                choices=seen).objective(weight)
            if objective < best * (1.0 - 1e-12):
                best, kept = objective, True
            else:
                del chosen[state]
        if not kept:
            break
    return chosen
