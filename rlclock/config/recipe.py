"""AgentConfig: one typed source of truth for an agent recipe (the shipped ones: ``ppo``, ``ppo-scratch``)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from rlclock import resources
from rlclock.validation import Float, Int, Settings, validate
from rlclock.yamlio import read_yaml

DEFAULT_RECIPE = "quick"
"""The shipped recipe ``rlclock train`` uses when none is named (about a minute; ``ppo`` is the full one)."""

Positive = Annotated[Int, Field(gt=0)]
NonNegative = Annotated[Int, Field(ge=0)]
Fraction = Annotated[Float, Field(ge=0.0, le=1.0)]
Rate = Annotated[Float, Field(gt=0.0, le=1.0)]
"""A learning rate: above 0 and at most 1 (Adam's steps past 1 only diverge)."""

MAX_PARAMETERS = 50_000_000
"""The most weights a recipe's network may have, policy and value together (a clock policy needs thousands; 50
million take 200 MB as float32, and as much again per optimiser moment)."""
MAX_ROLLOUT_BYTES = 4 << 30
"""The most memory one PPO rollout's observations may take, bytes (``n_steps × n_envs`` of them)."""


class PpoParams(Settings):
    """stable-baselines3 PPO hyperparameters (same names and meaning as ``PPO(...)``)."""

    learning_rate: Rate = 3e-4
    n_steps: Annotated[Int, Field(gt=0, le=1 << 20)] = 512
    batch_size: Annotated[Int, Field(gt=0, le=1 << 22)] = 1024
    n_epochs: Annotated[Int, Field(gt=0, le=1000)] = 10
    gamma: Fraction = 0.99
    gae_lambda: Fraction = 0.95
    clip_range: Annotated[Float, Field(gt=0.0, le=10.0)] = 0.2
    ent_coef: Annotated[Float, Field(ge=0.0, le=10.0)] = 0.01
    vf_coef: Annotated[Float, Field(ge=0.0, le=100.0)] = 0.5
    max_grad_norm: Annotated[Float, Field(gt=0.0, le=1e6)] = 0.5


class PolicyParams(Settings):
    """Network shape: hidden layer widths (policy and value alike) and activation."""

    net_arch: Annotated[tuple[Annotated[Int, Field(gt=0, le=16384)], ...], Field(min_length=1, max_length=16)] = (
        64,
        64,
    )
    activation: Literal["tanh", "relu"] = "tanh"


class EvalParams(Settings):
    """Deterministic evaluation during training."""

    every_steps: Annotated[Int, Field(gt=0, le=10**12)] = 100_000
    episodes: Annotated[Int, Field(gt=0, le=1000)] = 1


class ImitationParams(Settings):
    """Warm start by DAgger from the ``energy + p·time`` optimum before PPO (``iterations: 0`` disables it).

    Per round every workload is rolled out at ``prices_per_round`` prices; the network then takes
    ``epochs`` passes' worth of gradient steps over the round's new data (at least ``min_updates``), with
    minibatches drawn from everything gathered so far. ``class_balance`` weighs each label by its action's
    frequency among the labels to the power ``-class_balance`` (0: plain cross-entropy; 1: every action
    requested carries the same weight in all) — on long real steps the expert keeps on almost every
    decision, and unweighted the network can learn to keep everywhere.
    """

    iterations: Annotated[Int, Field(ge=0, le=1000)] = 8
    epochs: Annotated[Int, Field(ge=0, le=10_000)] = 30
    batch_size: Annotated[Int, Field(gt=0, le=1 << 20)] = 512
    learning_rate: Rate = 1e-3
    beta_decay: Fraction = 0.5
    prices_per_round: Annotated[Int, Field(gt=0, le=64)] = 2
    min_updates: Annotated[Int, Field(ge=0, le=10_000_000)] = 500
    class_balance: Fraction = 0.0


class AgentConfig(Settings):
    """An agent recipe.

    Attributes:
        algorithm: ``ppo`` (stable-baselines3 PPO).
        timesteps: PPO environment steps (kernel decisions) after the warm start; 0: imitation only.
        n_envs: Environment copies in the vectorised env.
        seed: Random seed (torch, numpy, env draws).
        policy: Network shape.
        ppo: PPO hyperparameters.
        eval: Evaluation cadence.
        imitation: Warm start from the Lagrangian optimum (DAgger) before PPO.
        checkpoint_every: PPO updates between two saves of the resume state (every imitation round saves one
            too; :mod:`rlclock.agents.state`).
        source: Where the recipe came from.
    """

    algorithm: Literal["ppo"] = "ppo"
    timesteps: Annotated[Int, Field(ge=0, le=10**12)] = 1_500_000
    n_envs: Annotated[Int, Field(gt=0, le=4096)] = 16
    seed: Annotated[Int, Field(ge=0, lt=2**32)] = 0
    policy: PolicyParams = PolicyParams()
    ppo: PpoParams = PpoParams()
    eval: EvalParams = EvalParams()
    imitation: ImitationParams = ImitationParams()
    checkpoint_every: Annotated[Int, Field(gt=0, le=1_000_000)] = 1
    source: str = Field(default="<defaults>", exclude=True)

    @model_validator(mode="after")
    def _batches_fit(self) -> AgentConfig:
        if (self.ppo.n_steps * self.n_envs) % self.ppo.batch_size:
            raise ValueError(
                f"ppo.batch_size ({self.ppo.batch_size}) must divide n_steps x n_envs "
                f"({self.ppo.n_steps * self.n_envs})"
            )
        if self.timesteps == 0 and self.imitation.iterations == 0:
            raise ValueError("timesteps 0 and imitation.iterations 0 would train nothing")
        if 0 < self.timesteps < self.ppo.n_steps * self.n_envs:
            raise ValueError(
                f"one PPO update takes n_steps x n_envs = {self.ppo.n_steps * self.n_envs} steps, more "
                f"than timesteps ({self.timesteps}): give timesteps of at least that, or fewer n_steps"
            )
        return self

    def check_fits(self, obs_entries: int, actions: int, where: str) -> None:
        """Refuse, before any work, a network or a rollout too large for a workstation (:data:`MAX_PARAMETERS`,
        :data:`MAX_ROLLOUT_BYTES`) for observations of ``obs_entries`` numbers and ``actions`` actions."""
        from rlclock.errors import SpecError

        widths = [obs_entries, *self.policy.net_arch]
        weights = sum(a * b + b for a, b in itertools.pairwise(widths))
        params = 2 * weights + (widths[-1] + 1) * (actions + 1)  # policy and value stacks, and their heads
        if params > MAX_PARAMETERS:
            raise SpecError(
                f"{where}: policy.net_arch {list(self.policy.net_arch)} makes a network of {params:,} "
                f"weights on {obs_entries} observation entries, more than {MAX_PARAMETERS:,}.",
                "give narrower hidden layers (rlclock's recipes use [64, 64]).",
            )
        rollout = self.ppo.n_steps * self.n_envs * obs_entries * 4
        if self.trains_ppo and rollout > MAX_ROLLOUT_BYTES:
            raise SpecError(
                f"{where}: a rollout of n_steps x n_envs = {self.ppo.n_steps * self.n_envs:,} "
                f"observations of {obs_entries} entries takes {rollout / 2**30:.1f} GiB, more than "
                f"{MAX_ROLLOUT_BYTES / 2**30:.0f}.",
                "give fewer ppo.n_steps or n_envs.",
            )

    @property
    def trains_ppo(self) -> bool:
        """True when PPO runs after the warm start (``timesteps > 0``)."""
        return self.timesteps > 0

    def as_dict(self) -> dict[str, Any]:
        """The recipe as plain data (what run folders and checkpoints record)."""
        d = self.model_dump()
        d["policy"]["net_arch"] = list(self.policy.net_arch)
        return d

    def with_(self, **changes: Any) -> AgentConfig:
        """A copy with top-level fields changed (``None`` values are ignored), validated like the recipe."""
        data = {**self.as_dict(), **{k: v for k, v in changes.items() if v is not None}}
        return parse_agent_config(data, self.source)


def parse_agent_config(data: Any, source: str = "<dict>") -> AgentConfig:
    """Validate an agent recipe mapping."""
    if data is None:
        data = {}
    if isinstance(data, dict):
        data = {**data, "source": source}
    return validate(AgentConfig, data, source, fix="see the shipped recipe agents/ppo.yaml for every field.")


def load_agent_config(path: str | Path | None = None) -> AgentConfig:
    """Load an agent recipe: a YAML path, or the name of a shipped recipe (default ``quick``; ``ppo`` is the full
    recipe the shipped checkpoints were trained with, ``ppo-scratch`` PPO without a warm start)."""
    from rlclock.errors import SpecError

    p = resources.locate("agents", DEFAULT_RECIPE if path is None else path)
    data = read_yaml(p, "agent recipe")
    if data is None:
        raise SpecError(
            f"agent recipe {str(p)!r} is empty.",
            "give a recipe: the shipped agents/quick.yaml and "
            "agents/ppo.yaml show every field (or leave out --agent for the quick one).",
        )
    return parse_agent_config(data, str(p))
