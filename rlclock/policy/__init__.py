"""The deployable policy: a checkpoint of plain weights that plans a step's clocks (numpy only).

:class:`ClockPolicy` is the facade; the package's modules each do one job — :mod:`.checkpoint` (format, load,
save), :mod:`.network` (the MLP), :mod:`.step` (a step's planning inputs), :mod:`.inputs` (the incremental
first-layer evaluator), :mod:`.rollout` (the decision loop on the switching rule), :mod:`.search` (the
policy's best choices) and :mod:`.planner` (meeting a slowdown budget).
"""

from rlclock.policy.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    policy_meta,
    read_checkpoint,
    save_checkpoint,
)
from rlclock.policy.clock_policy import DEFAULT_PRICE_REL, ClockPolicy
from rlclock.policy.network import PolicyWeights
from rlclock.policy.rollout import Plan
from rlclock.policy.step import PlanningStep

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "DEFAULT_PRICE_REL",
    "ClockPolicy",
    "Plan",
    "PlanningStep",
    "PolicyWeights",
    "policy_meta",
    "read_checkpoint",
    "save_checkpoint",
]
