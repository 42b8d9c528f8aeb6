"""KernelClockSB3VecEnv: ``N`` KernelClockEnv copies stepped together in numpy (stable-baselines3 ``VecEnv``).

Same dynamics, observations, rewards and infos as :class:`~rlclock.env.KernelClockEnv` (both drive
:class:`~rlclock.env.BatchCore`), without ``N`` Python environments and their per-step overhead. Finished
runs reset automatically (a new workload of a family and a new price of time, each drawn), with
``terminal_observation`` in their info, as SB3 expects. ``seed()`` and ``set_options()`` apply to the next
``reset()`` only, as in SB3's own vector envs; the options are the single env's (``workload``, ``time_price``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from rlclock.config import DEFAULT_ENV, EnvSpec
from rlclock.deprecation import renamed
from rlclock.env import BatchCore, KernelClockEnv
from rlclock.env.dynamics import start_of
from rlclock.errors import EnvUsageError


class KernelClockSB3VecEnv(VecEnv):
    """``num_envs`` simulated clock environments in one batch.

    Args:
        num_envs: How many runs to step together.
        spec: As for :class:`KernelClockEnv` (a name, path, mapping, spec, or a list: a workload family).
        seed: Seed of the workload draws of a family.
        **overrides: Top-level spec fields to replace.
    """

    def __init__(
        self,
        num_envs: int = 8,
        spec: str | Path | Mapping[str, Any] | EnvSpec | Sequence[Any] = DEFAULT_ENV,
        seed: int | None = None,
        **overrides: Any,
    ) -> None:
        self._proto = KernelClockEnv(spec, **overrides)
        super().__init__(num_envs, self._proto.observation_space, self._proto.action_space)
        self.configs = self._proto.configs
        self.episodes = self._proto.episodes
        self.specs = self._proto.specs
        self.n_slots = self._proto.n_slots
        self.keep_action = self._proto.keep_action
        self._core = BatchCore(num_envs)
        self._rng = np.random.default_rng(seed)
        self._actions = np.zeros(num_envs, dtype=np.int64)
        self._workload = np.zeros(num_envs, dtype=np.int64)

    def _draw(self, which: np.ndarray) -> None:
        if len(self.episodes) > 1:
            self._workload[which] = self._rng.integers(len(self.episodes), size=len(which))
        eps = [self.episodes[int(i)] for i in self._workload[which]]
        self._core.start(which, eps, np.array([ep.draw_price(self._rng) for ep in eps]))

    def reset(self) -> np.ndarray:
        if self._seeds[0] is not None:
            self._rng = np.random.default_rng(self._seeds[0])
        plain = [j for j in range(self.num_envs) if not self._options[j]]
        if plain:
            self._draw(np.array(plain))
        for j in range(self.num_envs):
            if self._options[j]:
                idx, price = start_of(self.episodes, self._rng, self._options[j])
                self._workload[j] = idx
                self._core.start(np.array([j]), [self.episodes[idx]], np.array([price]))
        self._reset_seeds()
        self._reset_options()
        return self._core.observation()

    def step_async(self, actions: np.ndarray) -> None:
        acts = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        if acts.min() < 0 or acts.max() > self._proto.n_slots:
            raise EnvUsageError(
                f"actions {acts.tolist()} are outside the action space of {self._proto.n_slots} "
                "candidate slots and keep."
            )
        self._actions = acts

    def step_wait(self):
        rewards, done, infos = self._core.step(self._actions)
        obs = self._core.observation()
        if done.any():
            which = np.flatnonzero(done)
            for j in which:
                infos[j]["terminal_observation"] = obs[j].copy()
                infos[j]["TimeLimit.truncated"] = False
            self._draw(which)
            fresh = self._core.observation()
            obs[which] = fresh[which]
        return obs, rewards.astype(np.float32), done, infos

    def close(self) -> None:
        return None

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(self._proto, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self._proto, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        return [getattr(self._proto, method_name)(*method_args, **method_kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices=None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def _get_indices(self, indices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)


__getattr__ = renamed(__name__, {"KernelClockVecEnv": "KernelClockSB3VecEnv"}, since="0.2.0")
