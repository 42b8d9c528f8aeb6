"""KernelClockVectorEnv: ``N`` copies of ``rlclock/KernelClock-v0`` stepped together in numpy (Gymnasium's
``vector_entry_point``: ``gym.make_vec("rlclock/KernelClock-v0", num_envs=N)``).

The same dynamics, observations, rewards and infos as :class:`~rlclock.env.kernel_clock.KernelClockEnv` (both
drive :class:`~rlclock.env.dynamics.BatchCore`), without ``N`` Python environments. A finished copy starts its
next episode in the same step (``AutoresetMode.SAME_STEP``): its last observation and info are in
``infos["final_obs"]`` and ``infos["final_info"]`` (masks ``_final_obs``, ``_final_info``), and the
observation returned is the new episode's first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from rlclock.config import DEFAULT_ENV, EnvSpec
from rlclock.env.dynamics import BatchCore, start_of
from rlclock.env.kernel_clock import RENDER_FPS, KernelClockEnv, render_line
from rlclock.errors import EnvUsageError


class KernelClockVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` simulated clock environments in one batch (module docstring).

    Args:
        num_envs: Copies stepped together.
        spec: As for :class:`KernelClockEnv` (a name, path, mapping, spec, or a list: a workload family).
        render_mode: ``"ansi"`` (``render()`` returns a line per copy), ``"human"`` (printed every step) or None.
        **overrides: Top-level spec fields to replace.
    """

    metadata = {"render_modes": ["human", "ansi"], "render_fps": RENDER_FPS, "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        spec: str | Path | Mapping[str, Any] | EnvSpec | Sequence[Any] = DEFAULT_ENV,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise EnvUsageError(f"num_envs must be a whole number >= 1, found {num_envs!r}.")
        self.proto = KernelClockEnv(spec, render_mode=render_mode, **overrides)
        self.num_envs = int(num_envs)
        self.render_mode = render_mode
        self.single_observation_space = self.proto.observation_space
        self.single_action_space = self.proto.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.episodes = self.proto.episodes
        self.configs = self.proto.configs
        self._core = BatchCore(self.num_envs)
        self._workload = np.zeros(self.num_envs, dtype=np.int64)
        self._shown: tuple[str, ...] = ()

    def _start(self, which: np.ndarray, options: Mapping[str, Any] | None = None) -> None:
        starts = [start_of(self.episodes, self.np_random, options) for _ in which]
        self._workload[which] = [i for i, _ in starts]
        self._core.start(which, [self.episodes[i] for i, _ in starts], np.array([p for _, p in starts]))

    def _start_info(self, which: np.ndarray) -> dict[str, Any]:
        return {
            "workload": np.array([self.proto.specs[int(self._workload[j])].name for j in which], dtype=object),
            "time_price": self._core.price[which].copy(),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start every copy (``options``: ``workload`` and ``time_price``, as for the single env, for all)."""
        super().reset(seed=seed)
        every = np.arange(self.num_envs)
        self._start(every, options)
        info = self._start_info(every)
        return self._core.observation(), {**info, **{f"_{k}": np.ones(self.num_envs, dtype=bool) for k in info}}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        acts = np.asarray(actions, dtype=np.int64).reshape(-1)
        if acts.shape != (self.num_envs,) or acts.min() < 0 or acts.max() > self.proto.n_slots:
            raise EnvUsageError(
                f"actions {np.asarray(actions).tolist()} are not {self.num_envs} slot indices in "
                f"0..{self.proto.n_slots} (the last is keep)."
            )
        rewards, done, per_run = self._core.step(acts)
        obs = self._core.observation()
        keys = [k for k in per_run[0] if all(k in info for info in per_run)]
        infos: dict[str, Any] = {}
        for k in keys:
            infos[k] = np.array([info[k] for info in per_run])
            infos[f"_{k}"] = np.ones(self.num_envs, dtype=bool)
        if done.any():
            which = np.flatnonzero(done)
            for j in which:
                infos = self._add_info(infos, {"final_obs": obs[j].copy(), "final_info": per_run[j]}, int(j))
            self._start(which)
            obs[which] = self._core.observation()[which]
            started = self._start_info(which)
            for row, run in enumerate(which):
                infos = self._add_info(infos, {name: values[row] for name, values in started.items()}, int(run))
        if self.render_mode == "human":
            self.render()
        return obs, rewards, done, np.zeros(self.num_envs, dtype=bool), infos

    def render(self) -> tuple[str, ...] | None:
        """Each copy's state as a line (``ansi``: returned; ``human``: printed)."""
        if self.render_mode is None:
            return None
        lines = tuple(render_line(self._core, j, self._core.eps[j].n, self.configs) for j in range(self.num_envs))
        if self.render_mode == "human":
            if lines != self._shown:  # step() has shown them already when the caller renders as well
                print("\n".join(lines))
                self._shown = lines
            return None
        return lines
