"""Environment specs: workload + GPU + backend + switching latency + action set + reward + budget, in YAML.

An env spec is a small YAML file under ``envs/`` (``gpt3xl-rtx3080ti.yaml`` is the default). Every field is
validated on load with a one-line error naming the file, the field and the fix::

    name: gpt3xl-rtx3080ti
    gpu: rtx3080ti                  # preset key (or gpu_file: path/to/spec.yaml)
    workload: {generator: llmc, batch: 40, seq: 1024, hidden: 2048, heads: 16, layers: 24}
    backend: {kind: simulated, anchor: true, noise_std: 0.0}
    switch_latency_s: null          # null: the GPU's default
    actions: {core_step_mhz: 105, mem_mhz: [405, 810, 5001, 9251, 9501], auto: true}
    observation: {lookahead: 8}
    reward: {budget: 0.01, scale: 100.0, time_price: optimum, price_spread: 0.5}
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlclock.errors import SpecError
from rlclock.gpu.spec import GpuSpec, get_spec, load_spec_file
from rlclock.schedule import ClockConfig
from rlclock.workload.trace import KernelTrace
from rlclock.yamlio import read_yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ENV = "gpt3xl-rtx3080ti"

_TOP_KEYS = {"name", "description", "gpu", "gpu_file", "workload", "backend", "switch_latency_s", "actions",
             "observation", "reward", "max_episode_steps"}


@dataclass(frozen=True)
class RewardSpec:
    """Reward settings.

    Attributes:
        budget: Allowed slowdown against auto (0.01 = 1 %).
        overrun_penalty: Weight of time over the budget line against energy saved (both as fractions of the
            auto step); above the optimum's marginal energy-per-time the budget becomes a hard wall.
        scale: Multiplier so an episode's return is in percent-sized units.
        time_price: Price of time in joules per second charged on every kernel's time change against auto
            (a dense Lagrangian term); ``"optimum"`` uses the Lagrange multiplier of the exact optimum at the
            budget (what a second of slack is worth there), 0 charges nothing.
        price_spread: Each episode draws its price of time as ``time_price · exp(u)``, ``u`` uniform in
            ``[-price_spread, +price_spread]`` (0: always ``time_price``). The drawn price is part of the
            observation, so one policy learns the whole energy/time trade-off curve and a planner can pick
            the point that fits a budget.
    """

    budget: float = 0.01
    overrun_penalty: float = 0.0
    scale: float = 100.0
    time_price: float | str = 0.0
    price_spread: float = 0.0


@dataclass(frozen=True)
class ActionSpec:
    """How the action set is thinned from the GPU's supported clocks (see ``GpuSpec.config_grid``)."""

    core_step_mhz: int | None = 105
    core_min_mhz: int | None = None
    mem_mhz: tuple[int, ...] | None = None
    auto: bool = True
    configs: tuple[str, ...] | None = None  # explicit list overrides the grid


@dataclass(frozen=True)
class EnvSpec:
    """A validated environment spec (see the module docstring for the YAML form)."""

    name: str
    gpu: GpuSpec
    workload: Mapping[str, Any]
    backend: Mapping[str, Any] = field(default_factory=lambda: {"kind": "simulated"})
    switch_latency_s: float | None = None
    actions: ActionSpec = ActionSpec()
    lookahead: int = 8
    reward: RewardSpec = RewardSpec()
    description: str = ""
    source: str = "<dict>"
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def latency_s(self) -> float:
        """Switching latency in effect (the spec's, else the GPU's default)."""
        return self.gpu.switch_latency_s if self.switch_latency_s is None else self.switch_latency_s

    def configs(self) -> tuple[ClockConfig, ...]:
        """The action set: validated configurations, ``auto`` first when included."""
        a = self.actions
        if a.configs is not None:
            return tuple(self.gpu.validate(c) for c in a.configs)
        return self.gpu.config_grid(a.core_step_mhz, a.core_min_mhz, a.mem_mhz, a.auto)

    def build_trace(self) -> KernelTrace:
        """The workload's kernel trace."""
        from rlclock.workload import build_workload

        return build_workload(self.workload, base_dir=Path(self.source).parent if self.source != "<dict>" else None)

    def build_backend(self, trace: KernelTrace | None = None, seed: int | None = None):
        """The backend named by ``backend.kind`` for this spec (a ``GpuBackend``)."""
        from rlclock.gpu.factory import make_backend

        return make_backend(self, trace if trace is not None else self.build_trace(), seed=seed)

    def with_overrides(self, **changes: Any) -> EnvSpec:
        """A copy with top-level YAML fields replaced (e.g. ``switch_latency_s=0``, ``reward={...}``)."""
        raw = copy.deepcopy(dict(self.raw))
        for k, v in changes.items():
            if isinstance(v, Mapping) and isinstance(raw.get(k), Mapping):
                raw[k] = {**raw[k], **v}
            else:
                raw[k] = v
        return parse_env_spec(raw, self.source)


def _num(d: Mapping[str, Any], key: str, where: str, default: float, lo: float = 0.0,
         hi: float = float("inf")) -> float:
    v = d.get(key, default)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not (lo <= v <= hi):
        raise SpecError(f"{where}: {key!r} must be a number in [{lo}, {hi}], found {v!r}.")
    return float(v)


def parse_env_spec(data: Any, source: str = "<dict>") -> EnvSpec:
    """Validate an env spec mapping."""
    where = source
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: an env spec must be a YAML mapping, found {type(data).__name__}.")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {sorted(unknown)}.", f"use only {sorted(_TOP_KEYS)}.")
    name = data.get("name") or Path(source).stem
    if "gpu_file" in data:
        path = Path(data["gpu_file"])
        if not path.is_absolute() and source != "<dict>":
            path = Path(source).parent / path
        gpu = load_spec_file(path)
    elif "gpu" in data:
        if not isinstance(data["gpu"], str):
            raise SpecError(f"{where}: 'gpu' must be a preset key such as 'rtx3080ti'.")
        gpu = get_spec(data["gpu"])
    else:
        raise SpecError(f"{where}: 'gpu' is missing.", "name a preset (rtx3080ti, h200-sxm, …) or give gpu_file.")
    workload = data.get("workload")
    if not isinstance(workload, Mapping):
        raise SpecError(f"{where}: 'workload' must be a mapping (generator: llmc | transformer, or trace: file).")
    backend = data.get("backend", {"kind": "simulated"})
    if not isinstance(backend, Mapping) or backend.get("kind", "simulated") not in ("simulated", "recorded", "nvml"):
        raise SpecError(f"{where}: 'backend.kind' must be simulated, recorded or nvml, found {backend!r}.")
    lat = data.get("switch_latency_s")
    if lat is not None:
        lat = _num(data, "switch_latency_s", where, 0.0, 0.0, 10.0)
    act_raw = data.get("actions", {}) or {}
    if not isinstance(act_raw, Mapping):
        raise SpecError(f"{where}: 'actions' must be a mapping.")
    bad = set(act_raw) - {"core_step_mhz", "core_min_mhz", "mem_mhz", "auto", "configs"}
    if bad:
        raise SpecError(f"{where}: unknown action field(s) {sorted(bad)}.")
    mem = act_raw.get("mem_mhz")
    configs = act_raw.get("configs")
    try:
        actions = ActionSpec(
            core_step_mhz=None if act_raw.get("core_step_mhz", 105) is None else int(act_raw.get("core_step_mhz", 105)),
            core_min_mhz=None if act_raw.get("core_min_mhz") is None else int(act_raw["core_min_mhz"]),
            mem_mhz=None if mem is None else tuple(int(m) for m in mem),
            auto=bool(act_raw.get("auto", True)),
            configs=None if configs is None else tuple(str(c) for c in configs),
        )
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{where}: malformed 'actions': {exc}.") from None
    if actions.core_step_mhz is not None and actions.core_step_mhz <= 0:
        raise SpecError(f"{where}: actions.core_step_mhz must be > 0.")
    obs = data.get("observation", {}) or {}
    lookahead = int(_num(obs, "lookahead", where + " observation", 8, 0, 64))
    rw = data.get("reward", {}) or {}
    if not isinstance(rw, Mapping) or set(rw) - {"budget", "overrun_penalty", "scale", "time_price",
                                                 "price_spread"}:
        raise SpecError(f"{where}: 'reward' takes budget, overrun_penalty, scale, time_price and price_spread only.")
    price = rw.get("time_price", 0.0)
    if price != "optimum":
        price = _num(rw, "time_price", where + " reward", 0.0, 0.0, 1e6)
    reward = RewardSpec(
        budget=_num(rw, "budget", where + " reward", 0.01, 0.0, 10.0),
        overrun_penalty=_num(rw, "overrun_penalty", where + " reward", 0.0, 0.0, 1e6),
        scale=_num(rw, "scale", where + " reward", 100.0, 1e-9, 1e9),
        time_price=price,
        price_spread=_num(rw, "price_spread", where + " reward", 0.0, 0.0, 3.0),
    )
    spec = EnvSpec(name=str(name), gpu=gpu, workload=dict(workload), backend=dict(backend), switch_latency_s=lat,
                   actions=actions, lookahead=lookahead, reward=reward, description=str(data.get("description", "")),
                   source=source, raw=dict(data))
    spec.configs()  # validate the action set against the GPU now
    return spec


def find_env_file(name: str | Path) -> Path:
    """Resolve an env spec name or path: a file, ``envs/<name>.yaml`` here, or in the rlclock checkout."""
    p = Path(name)
    candidates = [p, Path("envs") / f"{name}.yaml", REPO_ROOT / "envs" / f"{name}.yaml",
                  REPO_ROOT / "envs" / p.name]
    for c in candidates:
        if c.is_file():
            return c
    available = sorted(x.stem for x in (REPO_ROOT / "envs").glob("*.yaml"))
    raise SpecError(f"env spec {str(name)!r} not found.", f"give a YAML path or one of {available}.")


def load_env_specs(names: Any) -> list[EnvSpec]:
    """Load several env specs; a YAML file with a ``family:`` list expands to its members.

    A family file::

        name: family-rtx3080ti
        family:
          - gpt3xl-rtx3080ti                      # an env spec name or path
          - {base: gpt3xl-rtx3080ti, workload: {generator: llmc, batch: 8}, switch_latency_s: 0.06}

    ``base`` takes an existing spec and replaces the given top-level fields. ``family: {random: N, seed: S,
    base: SPEC}`` draws ``N`` workloads (see :func:`rlclock.workload.family.random_family`).
    """
    out: list[EnvSpec] = []
    for name in [names] if isinstance(names, (str, Path, Mapping, EnvSpec)) else list(names):
        if isinstance(name, (str, Path)):
            path = find_env_file(name)
            data = read_yaml(path, "env spec")
            if isinstance(data, Mapping) and "family" in data:
                members = data["family"]
                if isinstance(members, Mapping) and "random" in members:
                    from rlclock.workload.family import random_family

                    out.extend(random_family(load_env_spec(members.get("base", DEFAULT_ENV)), int(members["random"]),
                                             int(members.get("seed", 0))))
                    continue
                if not isinstance(members, list) or not members:
                    raise SpecError(f"{path}: 'family' must be a non-empty list of env specs.")
                for j, m in enumerate(members):
                    if isinstance(m, Mapping) and "base" in m:
                        base = load_env_spec(m["base"])
                        changes = {k: v for k, v in m.items() if k != "base"}
                        changes.setdefault("name", f"{base.name}-{j}")
                        out.append(base.with_overrides(**changes))
                    else:
                        out.append(load_env_spec(m))
                continue
        out.append(load_env_spec(name))
    return out


def load_env_spec(name: str | Path | Mapping[str, Any] | EnvSpec = DEFAULT_ENV) -> EnvSpec:
    """Load and validate an env spec by name, path or mapping."""
    if isinstance(name, EnvSpec):
        return name
    if isinstance(name, Mapping):
        return parse_env_spec(name)
    path = find_env_file(name)
    return parse_env_spec(read_yaml(path, "env spec"), str(path))
