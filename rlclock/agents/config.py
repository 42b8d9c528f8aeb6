"""AgentConfig: one typed source of truth for an agent recipe (``agents/*.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rlclock.config import REPO_ROOT
from rlclock.errors import SpecError
from rlclock.yamlio import read_yaml

_ACTIVATIONS = ("tanh", "relu")


@dataclass(frozen=True)
class PpoParams:
    """stable-baselines3 PPO hyperparameters (same names and meaning as ``PPO(...)``)."""

    learning_rate: float = 3e-4
    n_steps: int = 512
    batch_size: int = 1024
    n_epochs: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


@dataclass(frozen=True)
class PolicyParams:
    """Network shape: hidden layer widths (policy and value alike) and activation."""

    net_arch: tuple[int, ...] = (64, 64)
    activation: str = "tanh"


@dataclass(frozen=True)
class EvalParams:
    """Deterministic evaluation during training."""

    every_steps: int = 100_000
    episodes: int = 1


@dataclass(frozen=True)
class ImitationParams:
    """Warm start by DAgger from the ``energy + p·time`` optimum before PPO (``iterations: 0`` disables it).

    Per round every workload is rolled out at ``prices_per_round`` prices; the network then takes
    ``epochs`` passes' worth of gradient steps over the round's new data (at least ``min_updates``), with
    minibatches drawn from everything gathered so far.
    """

    iterations: int = 8
    epochs: int = 30
    batch_size: int = 512
    learning_rate: float = 1e-3
    beta_decay: float = 0.5
    prices_per_round: int = 2
    min_updates: int = 500


@dataclass(frozen=True)
class AgentConfig:
    """An agent recipe.

    Attributes:
        algorithm: ``ppo`` (stable-baselines3 PPO).
        timesteps: Environment steps (kernel decisions) to train for.
        n_envs: Environment copies in the vectorised env.
        seed: Random seed (torch, numpy, env draws).
        policy: Network shape.
        ppo: PPO hyperparameters.
        eval: Evaluation cadence.
        imitation: Warm start from the Lagrangian optimum (DAgger) before PPO.
        source: Where the recipe came from.
    """

    algorithm: str = "ppo"
    timesteps: int = 1_500_000
    n_envs: int = 16
    seed: int = 0
    policy: PolicyParams = field(default_factory=PolicyParams)
    ppo: PpoParams = field(default_factory=PpoParams)
    eval: EvalParams = field(default_factory=EvalParams)
    imitation: ImitationParams = field(default_factory=ImitationParams)
    source: str = "<defaults>"

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["policy"]["net_arch"] = list(self.policy.net_arch)
        return d


def _section(cls, data: Any, where: str):
    if data is None:
        return cls()
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: must be a mapping.")
    names = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {sorted(unknown)}.", f"use {sorted(names)}.")
    out = {}
    for k, v in data.items():
        default = getattr(cls(), k)
        try:
            if isinstance(default, tuple):
                out[k] = tuple(int(x) for x in v)
            elif isinstance(default, bool):
                out[k] = bool(v)
            elif isinstance(default, int):
                if isinstance(v, float) and not v.is_integer():
                    raise ValueError(f"{v} is not a whole number")
                out[k] = int(v)
            elif isinstance(default, float):
                out[k] = float(v)
            else:
                out[k] = v
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{where}.{k}: {exc}.") from None
    return cls(**out)


def parse_agent_config(data: Any, source: str = "<dict>") -> AgentConfig:
    """Validate an agent recipe mapping."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{source}: an agent recipe must be a YAML mapping.")
    allowed = {"algorithm", "timesteps", "n_envs", "seed", "policy", "ppo", "eval", "imitation"}
    unknown = set(data) - allowed
    if unknown:
        raise SpecError(f"{source}: unknown key(s) {sorted(unknown)}.", f"use {sorted(allowed)}.")
    algo = data.get("algorithm", "ppo")
    if algo != "ppo":
        raise SpecError(f"{source}: algorithm {algo!r} is not supported.", "use 'ppo'.")
    cfg = AgentConfig(
        algorithm=algo,
        timesteps=int(data.get("timesteps", 1_500_000)),
        n_envs=int(data.get("n_envs", 16)),
        seed=int(data.get("seed", 0)),
        policy=_section(PolicyParams, data.get("policy"), f"{source}: policy"),
        ppo=_section(PpoParams, data.get("ppo"), f"{source}: ppo"),
        eval=_section(EvalParams, data.get("eval"), f"{source}: eval"),
        imitation=_section(ImitationParams, data.get("imitation"), f"{source}: imitation"),
        source=source,
    )
    if cfg.timesteps < 0 or cfg.n_envs <= 0:
        raise SpecError(f"{source}: timesteps must be >= 0 and n_envs positive.")
    im = cfg.imitation
    if im.iterations < 0 or im.epochs < 0 or im.min_updates < 0 or im.prices_per_round < 1 or im.batch_size < 1:
        raise SpecError(f"{source}: imitation needs iterations, epochs, min_updates >= 0, prices_per_round >= 1 "
                        "and batch_size >= 1.")
    if cfg.policy.activation not in _ACTIVATIONS:
        raise SpecError(f"{source}: policy.activation {cfg.policy.activation!r} is unknown; use {list(_ACTIVATIONS)}.")
    if not cfg.policy.net_arch or any(w <= 0 for w in cfg.policy.net_arch):
        raise SpecError(f"{source}: policy.net_arch must list positive layer widths.")
    if (cfg.ppo.n_steps * cfg.n_envs) % cfg.ppo.batch_size:
        raise SpecError(f"{source}: ppo.batch_size ({cfg.ppo.batch_size}) must divide n_steps x n_envs "
                        f"({cfg.ppo.n_steps * cfg.n_envs}).")
    return cfg


def load_agent_config(path: str | Path | None = None) -> AgentConfig:
    """Load an agent recipe (default ``agents/ppo.yaml``)."""
    p = Path(path) if path is not None else REPO_ROOT / "agents" / "ppo.yaml"
    if not p.is_file() and (REPO_ROOT / "agents" / f"{p}.yaml").is_file():
        p = REPO_ROOT / "agents" / f"{p}.yaml"
    if not p.is_file():
        raise SpecError(f"agent recipe {str(p)!r} not found.", "give a YAML path such as agents/ppo.yaml.")
    return parse_agent_config(read_yaml(p, "agent recipe") or {}, str(p))
