"""The planner's last stage: whole-job plans weighed beside the policy's plan.

Two plans need no policy and can beat one on some steps: the best single configuration of the action set (the
``static`` baseline) and the driver's own clocks under the best whole-job board power limit (the
``power-limit`` baseline, what Zeus's power-limit optimizer picks). A power limit acts inside every kernel at once
— the firmware lowers the clock of whichever kernel would draw more, within a millisecond — so on a step of many
short kernels, where switches that take milliseconds cannot follow the kernels, it can save more than the exact
clock optimum. Both are weighed on the planning model, by the same accounting as the policy's plan, and the
cheapest plan within the budget is the plan: never below either baseline on the planning model.
"""

from __future__ import annotations

import numpy as np

from rlclock.backends.base import GpuBackend
from rlclock.errors import ScheduleError
from rlclock.policy.rollout import Plan
from rlclock.solve.baselines import budget_time_s, power_limit, static


def cheapest(plan: Plan, backend: GpuBackend, budget: float, power_limits: bool = True) -> Plan:
    """``plan`` (the policy's, on ``backend``'s step), or a whole-job plan that costs less within ``budget``.

    Args:
        plan: The policy's plan, requests indexing ``backend.configs``.
        backend: The planning model.
        budget: Slowdown budget against auto, a fraction.
        power_limits: Weigh whole-job power limits too (a backend that cannot run under another limit, such as
            a recorded table, weighs the static pair only).

    Returns:
        The plan with the least energy within the budget; a whole-job plan only where it is strictly cheaper
        (the static pair before a power limit, which changes one more setting of the GPU).
    """
    limit_s = budget_time_s(backend, budget) * (1 + 1e-12)
    best = plan
    fixed = static(backend, budget)
    if fixed.evaluation.time_s <= limit_s and fixed.evaluation.energy_j < best.energy_j:
        requests = fixed.schedule.reindexed(backend.configs)
        best = Plan(requests, fixed.evaluation.time_s, fixed.evaluation.energy_j, 0, name=f"static {fixed.schedule[0]}")
    if power_limits:
        try:
            capped = power_limit(backend, budget)
        except ScheduleError:
            return best
        if (
            capped.schedule.power_limit_w is not None
            and capped.evaluation.time_s <= limit_s
            and capped.evaluation.energy_j < best.energy_j
        ):
            best = Plan(
                np.zeros(backend.n_kernels, dtype=np.int64),
                capped.evaluation.time_s,
                capped.evaluation.energy_j,
                0,
                capped.schedule.power_limit_w,
                capped.schedule.name,
            )
    return best
