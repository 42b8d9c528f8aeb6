"""The Gymnasium environment: ``rlclock/KernelClock-v0`` (:class:`KernelClockEnv`), its dynamics for many runs
at once (:class:`BatchCore`) and the tables its episodes replay (:class:`EpisodeTables`)."""

from rlclock.env.dynamics import BatchCore
from rlclock.env.kernel_clock import ENV_ID, KernelClockEnv
from rlclock.env.tables import EpisodeTables, episode_tables

__all__ = ["ENV_ID", "BatchCore", "EpisodeTables", "KernelClockEnv", "episode_tables"]
