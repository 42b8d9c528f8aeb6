from rlclock.env.kernel_clock import *  # noqa: F403  (temporary)
from rlclock.env.kernel_clock import BatchCore, Episode, KernelClockEnv, config_features, make_episode, obs_size  # noqa: F401
