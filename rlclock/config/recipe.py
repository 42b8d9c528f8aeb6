"""AgentConfig: one typed source of truth for an agent recipe (the shipped ones: ``ppo``, ``ppo-scratch``)."""

from __future__ import annotations

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


class PpoParams(Settings):
    """stable-baselines3 PPO hyperparameters (same names and meaning as ``PPO(...)``)."""

    learning_rate: Annotated[Float, Field(gt=0.0)] = 3e-4
    n_steps: Positive = 512
    batch_size: Positive = 1024
    n_epochs: Positive = 10
    gamma: Fraction = 0.99
    gae_lambda: Fraction = 0.95
    clip_range: Annotated[Float, Field(gt=0.0)] = 0.2
    ent_coef: Annotated[Float, Field(ge=0.0)] = 0.01
    vf_coef: Annotated[Float, Field(ge=0.0)] = 0.5
    max_grad_norm: Annotated[Float, Field(gt=0.0)] = 0.5


class PolicyParams(Settings):
    """Network shape: hidden layer widths (policy and value alike) and activation."""

    net_arch: Annotated[tuple[Positive, ...], Field(min_length=1)] = (64, 64)
    activation: Literal["tanh", "relu"] = "tanh"


class EvalParams(Settings):
    """Deterministic evaluation during training."""

    every_steps: Positive = 100_000
    episodes: Positive = 1


class ImitationParams(Settings):
    """Warm start by DAgger from the ``energy + p·time`` optimum before PPO (``iterations: 0`` disables it).

    Per round every workload is rolled out at ``prices_per_round`` prices; the network then takes
    ``epochs`` passes' worth of gradient steps over the round's new data (at least ``min_updates``), with
    minibatches drawn from everything gathered so far. ``class_balance`` weighs each label by its action's
    frequency among the labels to the power ``-class_balance`` (0: plain cross-entropy; 1: every action
    requested carries the same weight in all) — on long real steps the expert keeps on almost every
    decision, and unweighted the network can learn to keep everywhere.
    """

    iterations: NonNegative = 8
    epochs: NonNegative = 30
    batch_size: Positive = 512
    learning_rate: Annotated[Float, Field(gt=0.0)] = 1e-3
    beta_decay: Fraction = 0.5
    prices_per_round: Positive = 2
    min_updates: NonNegative = 500
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
    timesteps: NonNegative = 1_500_000
    n_envs: Positive = 16
    seed: NonNegative = 0
    policy: PolicyParams = PolicyParams()
    ppo: PpoParams = PpoParams()
    eval: EvalParams = EvalParams()
    imitation: ImitationParams = ImitationParams()
    checkpoint_every: Positive = 1
    source: str = Field(default="<defaults>", exclude=True)

    @model_validator(mode="after")
    def _batches_fit(self) -> AgentConfig:
        if (self.ppo.n_steps * self.n_envs) % self.ppo.batch_size:
            raise ValueError(f"ppo.batch_size ({self.ppo.batch_size}) must divide n_steps x n_envs "
                             f"({self.ppo.n_steps * self.n_envs})")
        if self.timesteps == 0 and self.imitation.iterations == 0:
            raise ValueError("timesteps 0 and imitation.iterations 0 would train nothing")
        return self

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
    p = resources.locate("agents", DEFAULT_RECIPE if path is None else path)
    return parse_agent_config(read_yaml(p, "agent recipe"), str(p))
