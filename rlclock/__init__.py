"""rlclock: learn per-kernel GPU core/memory clocks that cut the energy of transformer training.

The public names, imported on first use (``import rlclock`` stays light and registers the environments)::

    import gymnasium as gym
    import rlclock

    env = gym.make("rlclock/KernelClock-v0")                      # or rlclock.KernelClockEnv("gpt3xl-h200")
    envs = gym.make_vec("rlclock/KernelClock-v0", num_envs=16)    # rlclock.KernelClockVectorEnv
    policy = rlclock.ClockPolicy.load("gpt3xl-h200")              # a shipped checkpoint, or a folder
"""

from __future__ import annotations

from rlclock.errors import RlclockError
from rlclock.lazy import lazy_exports
from rlclock.version import __version__

_EXPORTS = {
    "AUTO": "rlclock.schedule",
    "ClockConfig": "rlclock.schedule",
    "ClockSchedule": "rlclock.schedule",
    "EnvSpec": "rlclock.config",
    "load_env_spec": "rlclock.config",
    "load_env_specs": "rlclock.config",
    "GpuSpec": "rlclock.dvfs.spec",
    "get_spec": "rlclock.dvfs.spec",
    "KernelClockEnv": "rlclock.env",
    "KernelClockVectorEnv": "rlclock.env.vector",
    "ENV_ID": "rlclock.env",
    "Evaluation": "rlclock.solve.evaluation",
    "evaluate": "rlclock.solve.evaluation",
    "run_baselines": "rlclock.solve.baselines",
    "ClockPolicy": "rlclock.policy",
    "clocked": "rlclock.deploy",
}

__all__ = ["RlclockError", "__version__", *sorted(_EXPORTS)]


__getattr__, __dir__ = lazy_exports("rlclock", globals(), _EXPORTS)


def _register() -> None:
    import gymnasium as gym

    if "rlclock/KernelClock-v0" not in gym.registry:
        gym.register(
            id="rlclock/KernelClock-v0",
            entry_point="rlclock.env:KernelClockEnv",
            vector_entry_point="rlclock.env.vector:KernelClockVectorEnv",
        )
    if "rlclock/KernelClockNvml-v0" not in gym.registry:
        gym.register(
            id="rlclock/KernelClockNvml-v0",
            entry_point="rlclock.env:KernelClockEnv",
            nondeterministic=True,
            kwargs={"spec": "gpt3xl-h200-nvml"},
        )


_register()
