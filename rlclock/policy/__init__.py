from rlclock.policy.policy import *  # noqa: F403  (temporary)
from rlclock.policy.policy import DEFAULT_PRICE_REL, ClockPolicy, PolicyWeights, policy_meta, save_checkpoint  # noqa: F401
