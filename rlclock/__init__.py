"""rlclock: learn per-kernel GPU core/memory clocks that cut the energy of transformer training."""

from __future__ import annotations

__version__ = "0.1.0"

from rlclock.errors import RlclockError

__all__ = ["RlclockError", "__version__"]


def _register() -> None:
    import gymnasium as gym

    if "rlclock/KernelClock-v0" not in gym.registry:
        gym.register(id="rlclock/KernelClock-v0", entry_point="rlclock.env:KernelClockEnv")
    if "rlclock/KernelClockNvml-v0" not in gym.registry:
        gym.register(id="rlclock/KernelClockNvml-v0", entry_point="rlclock.env:KernelClockEnv",
                     nondeterministic=True, kwargs={"spec": "gpt3xl-h200-nvml"})


_register()
