"""KernelClockEnv: one training step's kernels, one clock decision per kernel (``rlclock/KernelClock-v0``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlclock.backends.base import GpuBackend
from rlclock.config import DEFAULT_ENV, EnvSpec, load_env_spec
from rlclock.env.dynamics import BatchCore, start_of
from rlclock.env.tables import EpisodeTables, episode_tables
from rlclock.errors import EnvUsageError, SpecError
from rlclock.observation.layout import obs_size
from rlclock.schedule import ClockConfig

ENV_ID = "rlclock/KernelClock-v0"
RENDER_FPS = 30
"""Lines per second a person is shown (``render_mode="human"``); one line per kernel decision."""


def render_line(core: BatchCore, run: int, n_kernels: int, configs: Sequence[ClockConfig]) -> str:
    """One run's state as a line: kernel, time and energy so far, switches, the configuration in effect."""
    return (
        f"kernel {int(core.k[run])}/{n_kernels}  time {core.time_s[run] * 1e3:.2f} ms  "
        f"energy {core.energy_j[run]:.2f} J  switches {int(core.switches[run])}  "
        f"in effect {configs[int(core.state.current[run])]}"
    )


class KernelClockEnv(gym.Env):
    """Choose the GPU's clock configuration kernel by kernel through one training step.

    ## Description
    An episode is one training step of a transformer (a :class:`~rlclock.workload.trace.KernelTrace`,
    e.g. llm.c's GPT-3 XL: 897 kernel invocations). Each step the agent requests a clock configuration for
    the next kernel; the GPU backend (the calibrated simulator by default) runs it and charges its time and
    energy. With a switching latency, a requested change lands only after that latency while kernels keep
    running at the old clocks (rules in :mod:`rlclock.backends.switching`), so good policies request changes
    ahead of the kernels that need them.

    ## Action space
    ``Discrete(S + 1)``: a *candidate slot* or ``S`` (:attr:`keep_action`): keep — issue nothing, so the
    switch in flight (or else the configuration in effect) stands. Slot 0 is ``auto`` (the driver's own
    clocks); the others hold, at every kernel, the configuration of the action set ``env.unwrapped.configs``
    (``auto@<mem>`` per memory clock and a thinned grid of locked ``core@mem`` pairs, every
    ``actions.core_step_mhz`` MHz) with the largest ``energy + p·time`` gain over a window after a switch
    requested now would land — per window, memory clock and price factor (:mod:`rlclock.observation.lookahead`;
    ``S = 25`` on the RTX 3080 Ti's three memory clocks).
    The slots mean the same on every workload, which is what lets one policy serve many; the exact optimum
    restricted to them is within 1 % of the unrestricted one on the default spec. ``info["config"]`` is the
    configuration a step's action resolved to. Only supported pairs are candidates, so no action is
    invalid and no mask is needed.

    ## Observation space
    ``Box(-1, 2, (obs_size(K, S),), float32)``, in blocks:

    1. **Kernel window**: for the current kernel and the next ``K`` (``lookahead``), ``N_KERNEL_INPUTS``
       entries each — ``N_FEATURES`` shape features, ``N_RESPONSE`` clock-response features and a valid flag
       (zeros past the end of the step).
    2. **Slots**: per candidate slot, ``SLOT_WIDTH`` entries — its configuration (core / max core, memory /
       max memory, core auto, memory auto), then per look-ahead bin its gain ``−(ΔE/P̄ + p·ΔT)``, added time
       ``ΔT`` and added energy ``ΔE/P̄`` against auto (per second of bin; ``P̄`` the step's mean auto power,
       ``p`` the price over it), and whether it is the configuration in effect.
    3. **In effect**: gain, added time and added energy per bin of the configuration in effect
       (``CURRENT_WIDTH``).
    4. **Occupancy**: per bin, the share of it inside the step (``N_BINS``). The bins are two before a switch
       requested now would land and six after it (:func:`rlclock.observation.lookahead.bin_edges_s`), in
       auto-clock time: what the window of kernels does not show on workloads whose kernels are short
       against the latency.
    5. **State** (``N_STATE`` entries):

    | index (in the state block) | meaning | range |
    |---|---|---|
    | 0–3 | configuration in effect: core / max core, memory / max memory, core auto, memory auto | [0, 1] |
    | 4–7 | configuration of the switch in flight (zeros if none), same encoding | [0, 1] |
    | 8 | a switch is in flight | {0, 1} |
    | 9 | time until it lands / switching latency | [0, 1] |
    | 10 | price of time ``p`` of this episode: log2(p / mean auto power of the step) / 2, clipped | [-1, 1] |
    | 11 | auto time left in the step / (8 · switching latency), clipped (1 without latency) | [0, 1] |
    | 12 | log10(switching latency / 1 ms) / 3, clipped | [-1, 1] |

    Kernel features (``rlclock.observation.features.FEATURE_NAMES``) are log FLOPs and bytes, arithmetic
    intensity and roofline position on this GPU, the kernel's auto-clock time (absolute, against the
    switching latency and as a share of the step), its auto power against the power limit, write fraction,
    tensor-core flag, category and phase one-hots — all normalised by fixed bounds. The clock response
    (:func:`rlclock.observation.features.clock_response`) is the kernel's time and energy against auto at six
    reference configurations of the action set; the slots' bins come from the same tables — the backend's
    (on a real GPU: the planning model anchored on its auto-clock measurements).

    ## Rewards
    Per kernel: ``scale · [(E_auto,i − E_i − p·(t_i − t_auto,i)) / E_auto − overrun_penalty · Δoverrun_i /
    T_auto]`` where ``p`` is the episode's price of time (J/s) and ``overrun_i = max(0, T_≤i − (1 + budget) ·
    T_auto,≤i)`` the time over the budget line so far. ``p`` is drawn per episode around
    ``reward.time_price`` (``"optimum"``: the Lagrange multiplier of the exact optimum at the budget, the
    trade-off the optimum makes) with a log-uniform spread ``reward.price_spread``, and observed. The
    overrun terms telescope, so an episode's return is ``scale · (saving − p·ΔT/E_auto − overrun_penalty ·
    final overrun)``. With a price of time the recipes set ``overrun_penalty: 0``: the reward is then the
    Lagrangian ``energy + p·time`` the exact optimum minimises, and a planner meets a budget by choosing
    ``p`` (:meth:`rlclock.deploy.ClockPolicy.plan`).

    ## Starting state
    Auto clocks, no switch in flight, at the first kernel of the step. A family of workloads (``specs`` with
    several entries) draws one per episode with the env's ``np_random``, and so is the price of time.
    ``reset(options={"workload": i, "time_price": p})`` picks both.

    ## Episode end
    Terminates after the last kernel of the step; never truncated.

    ## Info
    Every step: ``energy_j``, ``time_s`` (both so far), ``slowdown`` (time so far against the auto time of
    the same kernels), ``switches`` (issued so far), ``kernel_energy_j``, ``kernel_time_s``, ``config``
    (the request made; keep resolves to the standing one) and ``in_effect`` (configuration the kernel
    started at). At the end also ``saving``, ``auto_energy_j``, ``auto_time_s`` and ``off_plan_time_s``.

    ## Rendering
    ``render_mode="ansi"``: :meth:`render` returns one line (kernel, time and energy so far, switches, the
    configuration in effect); ``"human"``: that line is printed at every step.

    ## Arguments
    ``gym.make("rlclock/KernelClock-v0", spec="gpt3xl-rtx3080ti", **overrides)``: ``spec`` is the name of a
    shipped env spec, a YAML path, a mapping, an :class:`~rlclock.config.EnvSpec`, or a list of them (a
    workload family sharing one GPU and action set); ``overrides`` replace top-level spec fields
    (``switch_latency_s=0``, ``reward={"budget": 0.0}``, …). ``gym.make_vec("rlclock/KernelClock-v0",
    num_envs=N)`` gives the batched :class:`~rlclock.env.vector.KernelClockVectorEnv`.

    ## Version history
    * v0: initial release; feature schema v4 (candidate slots over a look-ahead binned in switching
      latencies; v3 had an action per configuration, a 16-kernel window and no bins).
    """

    metadata = {"render_modes": ["human", "ansi", "rgb_array"], "render_fps": RENDER_FPS}

    def __init__(
        self,
        spec: str | Path | Mapping[str, Any] | EnvSpec | Sequence[Any] = DEFAULT_ENV,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        specs: list[Any] = list(spec) if isinstance(spec, (list, tuple)) else [spec]
        if not specs:
            raise SpecError("KernelClockEnv needs at least one env spec.")
        self.specs: list[EnvSpec] = [_with(load_env_spec(s), overrides) for s in specs]
        self.episodes: list[EpisodeTables] = [episode_tables(s) for s in self.specs]
        first = self.episodes[0]
        for s, ep in zip(self.specs[1:], self.episodes[1:]):
            if ep.backend.configs != first.backend.configs or ep.lookahead != first.lookahead:
                raise SpecError(
                    f"env spec {s.name!r} has another action set or lookahead than {self.specs[0].name!r}; a family "
                    "must share its GPU, action grid and lookahead."
                )
        self.configs: tuple[ClockConfig, ...] = first.backend.configs
        self.lookahead = first.lookahead
        self.n_slots = first.look.n_slots
        self.keep_action = self.n_slots
        self.action_space = gym.spaces.Discrete(self.n_slots + 1)
        self.observation_space = gym.spaces.Box(-1.0, 2.0, (obs_size(self.lookahead, self.n_slots),), np.float32)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise EnvUsageError(
                f"render_mode {render_mode!r} is not supported; use 'human', 'ansi', 'rgb_array' or None."
            )
        self.render_mode = render_mode
        self._core = BatchCore(1)
        self._ep = first
        self._shown = ""
        self._in_effect: list[int] = []  # the configuration in effect at each kernel so far (rgb_array)

    @property
    def env_spec(self) -> EnvSpec:
        """The env spec of the current episode."""
        return self.specs[self.episodes.index(self._ep)]

    @property
    def backend(self) -> GpuBackend:
        """The backend of the current episode."""
        return self._ep.backend

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        idx, price = start_of(self.episodes, self.np_random, options)
        self._ep = self.episodes[idx]
        self._core.start(np.array([0]), [self._ep], np.array([price]))
        self._in_effect = []
        return self._core.observation()[0], {"workload": self.specs[idx].name, "time_price": price}

    def step(self, action):
        a = int(action)
        if not 0 <= a <= self.n_slots:
            raise EnvUsageError(
                f"action {action!r} is outside the action space of {self.n_slots} candidate slots and keep."
            )
        reward, done, info = self._core.step(np.array([a]))
        if self.render_mode == "rgb_array":
            self._in_effect.append(int(self._core.state.current[0]))
        obs = self._core.observation()[0]
        if self.render_mode == "human":
            self.render()
        return obs, float(reward[0]), bool(done[0]), False, info[0]

    def _picture(self) -> np.ndarray:
        n = max(int(self._ep.n), 1)
        image = np.full((RENDER_HEIGHT, n, 3), 255, np.uint8)
        mems = sorted({c.mem_mhz or 0 for c in self.configs})
        top = max((c.core_mhz or 0 for c in self.configs), default=0) or 1
        for col, i in enumerate(self._in_effect[:n]):
            config = self.configs[i]
            height = round(RENDER_HEIGHT * min(1.0, (config.core_mhz or top) / top))
            colour = _MEMORY_COLOURS[mems.index(config.mem_mhz or 0) % len(_MEMORY_COLOURS)]
            image[RENDER_HEIGHT - height :, col] = colour
        return image

    def render(self) -> str | np.ndarray | None:
        """The state as one line (``ansi``: returned; ``human``: printed), or as a picture (``rgb_array``: an
        ``(RENDER_HEIGHT, n, 3)`` image of the kernels so far, one column each, its bar as tall as the core clock in
        effect relative to the GPU's top and its colour the memory clock's)."""
        if self.render_mode is None:
            return None
        if self.render_mode == "rgb_array":
            return self._picture()
        line = render_line(self._core, 0, self._ep.n, self.configs)
        if self.render_mode == "human":
            if line != self._shown:  # step() has shown it already when the caller renders as well
                print(line)
                self._shown = line
            return None
        return line


RENDER_HEIGHT = 64
"""Rows of the ``rgb_array`` picture."""
_MEMORY_COLOURS = np.array([[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189]], np.uint8)


def _with(spec: EnvSpec, overrides: Mapping[str, Any]) -> EnvSpec:
    return spec.with_overrides(**overrides) if overrides else spec
