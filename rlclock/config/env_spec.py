"""Environment specs: workload + GPU + backend + switching latency + action set + reward + budget, in YAML.

An env spec is a small YAML file (the shipped ones are found by name: ``gpt3xl-rtx3080ti`` is the default;
``rlclock.resources``). Every field is validated on load by the typed model :class:`EnvSpec`, with a one-line
error naming the file, the field, what was found and what is allowed::

    name: gpt3xl-rtx3080ti
    gpu: rtx3080ti                  # preset key (or gpu_file: path/to/spec.yaml)
    workload: {generator: llmc, batch: 40, seq: 1024, hidden: 2048, heads: 16, layers: 24}
    backend: {kind: simulated, anchor: true, noise_std: 0.0}
    switch_latency_s: null          # null: the GPU's default
    actions: {core_step_mhz: 105, mem_mhz: [405, 810, 5001, 9251, 9501], auto: true}
    observation: {lookahead: 8}
    reward: {budget: 0.01, scale: 100.0, time_price: optimum, price_spread: 0.5}

A *family* file lists several specs sharing one GPU and action set (:func:`load_env_specs`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator

from rlclock import resources
from rlclock.backends.base import GpuBackend
from rlclock.backends.settings import BACKEND_KINDS, BackendSettings, SimulatedSettings
from rlclock.config.family import MAX_FAMILY, corpus_family, random_family
from rlclock.dvfs.spec import GpuSpec, get_spec, load_spec_file
from rlclock.errors import SpecError
from rlclock.schedule import ClockConfig
from rlclock.validation import Budget, Float, Int, Settings, validate
from rlclock.workload.trace import KernelTrace
from rlclock.yamlio import read_yaml

DEFAULT_ENV = resources.DEFAULT_ENV


class RewardSpec(Settings):
    """Reward settings.

    Attributes:
        budget: Allowed slowdown against auto (0.01 = 1 %), from 0 to
            :data:`~rlclock.validation.MAX_BUDGET`.
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

    budget: Budget = 0.01
    overrun_penalty: Annotated[Float, Field(ge=0.0, le=1e6)] = 0.0
    scale: Annotated[Float, Field(gt=0.0, le=1e9)] = 100.0
    time_price: Annotated[Float, Field(ge=0.0, le=1e6)] | Literal["optimum"] = 0.0
    price_spread: Annotated[Float, Field(ge=0.0, le=3.0)] = 0.0


class ActionSpec(Settings):
    """How the action set is thinned from the GPU's supported clocks (see ``GpuSpec.config_grid``).

    Attributes:
        core_step_mhz: Keep core clocks ``core_min_mhz + j·step`` (``null``: every supported one).
        core_min_mhz: Lowest core clock kept (default: the lowest supported).
        mem_mhz: Memory clocks used (default: all supported).
        auto: Include ``auto`` and ``auto@<mem>`` per memory clock.
        configs: An explicit list of configurations (``CORE@MEM``) instead of the grid.
    """

    core_step_mhz: Annotated[Int, Field(gt=0)] | None = 105
    core_min_mhz: Annotated[Int, Field(gt=0)] | None = None
    mem_mhz: tuple[Annotated[Int, Field(gt=0)], ...] | None = None
    auto: bool = True
    configs: tuple[str, ...] | None = None


class ObservationSpec(Settings):
    """What the policy observes.

    Attributes:
        lookahead: Kernels after the current one in the observed kernel window.
    """

    lookahead: Annotated[Int, Field(ge=0, le=64)] = 8


class EnvSpec(Settings):
    """A validated environment spec (the YAML form is in the module docstring).

    Attributes:
        name: The spec's name (default: its file's stem).
        description: One line about it.
        gpu: GPU preset key (``rtx3080ti``, ``h200-sxm`` …) or NVML name; or ``gpu_file``, a GPU spec file.
        workload: The step: ``{generator: llmc | transformer, …}`` or ``{trace: FILE}``
            (:func:`rlclock.workload.build_workload`).
        backend: How kernels are timed and charged (:mod:`rlclock.backends.settings`).
        switch_latency_s: Time from a clock request to the new clocks, seconds (``null``: the GPU's).
        actions: The action set.
        observation: What the policy observes.
        reward: Reward, price of time and budget.
        source: The file it was read from (``<dict>`` for a mapping): relative paths inside start there.
        raw: The mapping as written (what overrides and checkpoints record).
    """

    union_tags = BACKEND_KINDS

    name: str = ""
    description: str = ""
    gpu_key: str | None = Field(default=None, alias="gpu")
    gpu_file: str | None = None
    workload: dict[str, Any]
    backend: BackendSettings = SimulatedSettings()
    switch_latency_s: Annotated[Float, Field(ge=0.0, le=10.0)] | None = None
    actions: ActionSpec = ActionSpec()
    observation: ObservationSpec = ObservationSpec()
    reward: RewardSpec = RewardSpec()
    _gpu: GpuSpec = PrivateAttr()
    _source: str = PrivateAttr(default="<dict>")
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def gpu(self) -> GpuSpec:
        """The GPU preset (or spec file) the spec names."""
        return self._gpu

    @property
    def source(self) -> str:
        return self._source

    @property
    def raw(self) -> dict[str, Any]:
        return self._raw

    @property
    def lookahead(self) -> int:
        """Kernels after the current one in the observed window."""
        return self.observation.lookahead

    @property
    def latency_s(self) -> float:
        """Switching latency in effect (the spec's, else the GPU's default)."""
        return self.gpu.switch_latency_s if self.switch_latency_s is None else self.switch_latency_s

    def configs(self) -> tuple[ClockConfig, ...]:
        """The action set: validated configurations, ``auto`` first when included."""
        a = self.actions
        if a.configs is not None:
            configs = tuple(self.gpu.validate(c) for c in a.configs)
        else:
            configs = self.gpu.config_grid(a.core_step_mhz, a.core_min_mhz, a.mem_mhz, a.auto)
        self.gpu.check_runtime_configs(configs, f"{self.source}: actions")
        return configs

    def build_trace(self) -> KernelTrace:
        """The workload's kernel trace."""
        from rlclock.workload import build_workload

        return build_workload(self.workload, base_dir=None if self.source == "<dict>" else Path(self.source).parent)

    def build_backend(self, trace: KernelTrace | None = None, seed: int | None = None) -> GpuBackend:
        """The backend named by ``backend.kind`` for this spec."""
        from rlclock.backends.factory import make_backend

        return make_backend(
            self.gpu,
            trace if trace is not None else self.build_trace(),
            self.configs(),
            self.switch_latency_s,
            self.backend,
            seed=seed,
            where=self.source,
        )

    def with_overrides(self, **changes: Any) -> EnvSpec:
        """A copy with top-level YAML fields replaced (e.g. ``switch_latency_s=0``, ``reward={...}``; a mapping
        is merged into the mapping it replaces, except a workload of another kind — a trace file, or another
        generator — which replaces the base's workload whole)."""
        raw = copy.deepcopy(dict(self.raw))
        for k, v in changes.items():
            if (
                isinstance(v, Mapping)
                and isinstance(raw.get(k), Mapping)
                and not (k == "workload" and _other_workload(raw[k], v))
            ):
                raw[k] = {**raw[k], **v}
            else:
                raw[k] = v
        return parse_env_spec(raw, self.source)


def _other_workload(base: Mapping[str, Any], override: Mapping[str, Any]) -> bool:
    """Whether a workload override is of another kind than its base (a trace file, or another generator)."""
    return (
        "trace" in base
        or "trace" in override
        or override.get("generator", base.get("generator")) != base.get("generator")
    )


def parse_env_spec(data: Any, source: str = "<dict>") -> EnvSpec:
    """Validate an env spec mapping (``source``: the file it came from, for messages and relative paths)."""
    spec = validate(
        EnvSpec, data, source, fix="the shipped specs (envs/*.yaml) and rlclock.config.EnvSpec show every field."
    )
    if (spec.gpu_key is None) == (spec.gpu_file is None):
        raise SpecError(
            f"{source}: give exactly one of 'gpu' and 'gpu_file'.",
            "name a preset (rtx3080ti, h200-sxm, …) or give gpu_file: a GPU spec file.",
        )
    file = (
        spec.gpu_file
        if spec.gpu_file is not None
        else (spec.gpu_key if spec.gpu_key is not None and spec.gpu_key.lower().endswith((".yaml", ".yml")) else None)
    )
    if file is not None:  # a GPU spec file, relative to the env spec's folder (gpu_file:, or gpu: PATH.yaml)
        path = Path(file)
        if not path.is_absolute() and source != "<dict>":
            path = Path(source).parent / path
        gpu = load_spec_file(path)
    else:
        assert spec.gpu_key is not None
        gpu = get_spec(spec.gpu_key)
    if not spec.name:
        spec = spec.model_copy(update={"name": Path(source).stem if source != "<dict>" else "env"})
    spec._gpu = gpu
    spec._source = source
    spec._raw = dict(data)
    spec.configs()  # the action set against the GPU, now
    return spec


def find_env_file(name: str | Path) -> Path:
    """The file of an env spec: a path, or the name of a shipped spec (:func:`rlclock.resources.locate`)."""
    return resources.locate("envs", name)


def load_env_specs(names: Any) -> list[EnvSpec]:
    """Load several env specs; a YAML file with a ``family:`` list expands to its members.

    A family file::

        name: family-rtx3080ti
        family:
          - gpt3xl-rtx3080ti                      # an env spec name or path (relative to this file)
          - {base: gpt3xl-rtx3080ti, workload: {generator: llmc, batch: 8}, switch_latency_s: 0.06}

    ``base`` takes an existing spec and replaces the given top-level fields. ``family: {random: N, seed: S,
    base: SPEC}`` draws ``N`` workloads (see :func:`rlclock.config.family.random_family`); ``family: {corpus:
    FOLDER, base: SPEC}`` takes every profiled step in a folder (relative to the family file, or a shipped
    corpus such as ``corpus-h200``; :func:`rlclock.config.family.corpus_family`), its costs derived again by
    this version's rules unless ``refresh_costs: false``; with ``latency_scales: [1, 0.5, 2]`` each step comes
    at the base's switching latency times each scale (1: the step itself; others named
    ``<step>-latency-x<scale>``): a policy trained on a few real steps then sees each at several horizons.
    """
    out: list[EnvSpec] = []
    for name in [names] if isinstance(names, (str, Path, Mapping, EnvSpec)) else list(names):
        if isinstance(name, (str, Path)):
            path = find_env_file(name)
            data = read_yaml(path, "env spec")
            if isinstance(data, Mapping) and "family" in data:
                out.extend(_family(data, path))
                continue
        out.append(load_env_spec(name))
    return out


def _family(data: Mapping[str, Any], path: Path) -> list[EnvSpec]:
    unknown = set(data) - {"name", "description", "family"}
    if unknown:
        raise SpecError(f"{path}: a family file takes name, description and family, found {sorted(unknown)}.")
    members = data["family"]

    def member(ref: Any) -> EnvSpec:
        if isinstance(ref, str) and resources.looks_like_path(ref) and not Path(ref).is_absolute():
            ref = path.parent / ref
        return load_env_spec(ref)

    if isinstance(members, Mapping) and "corpus" in members:
        corpus = validate(_CorpusFamily, members, f"{path}: family", fix=_FAMILY_FIX)
        folder = path.parent / corpus.corpus
        if not folder.is_dir() and not resources.looks_like_path(corpus.corpus):
            folder = resources.data_dir() / "measurements" / corpus.corpus
        base = member(corpus.base)
        steps = [base.with_overrides(**changes) for changes in corpus_family(folder, corpus.refresh_costs)]
        return at_latency_scales(steps, corpus.latency_scales)
    if isinstance(members, Mapping):
        draw = validate(_RandomFamily, members, f"{path}: family", fix=_FAMILY_FIX)
        base = member(draw.base)
        return [base.with_overrides(**changes) for changes in random_family(base.raw, draw.random, draw.seed)]
    if not isinstance(members, list) or not members:
        raise SpecError(
            f"{path}: 'family' must be a non-empty list of env specs, {{random: N, seed: S, base: "
            "SPEC}, or {corpus: FOLDER, base: SPEC}."
        )
    if len(members) > MAX_FAMILY:
        raise SpecError(
            f"{path}: a family of {len(members)} env specs is more than rlclock trains on ({MAX_FAMILY} at most).",
            "split it into several families.",
        )
    out = []
    for j, m in enumerate(members):
        if isinstance(m, Mapping) and "base" in m:
            base = member(m["base"])
            changes = {k: v for k, v in m.items() if k != "base"}
            changes.setdefault("name", f"{base.name}-{j}")
            out.append(base.with_overrides(**changes))
        else:
            out.append(member(m))
    return out


_FAMILY_FIX = (
    "a family is {random: N (1 to 1000), seed: S, base: SPEC}, {corpus: FOLDER, base: SPEC, latency_scales: "
    "[up to 16 scales]}, or a list of env specs (envs/family-rtx3080ti.yaml shows one)."
)


def at_latency_scales(specs: Sequence[EnvSpec], scales: Sequence[float]) -> list[EnvSpec]:
    """Each spec at its switching latency times each of ``scales``, in order (a scale of 1: the spec itself; any
    other: a copy named ``<name>-latency-x<scale>``) — a corpus family's ``latency_scales``."""
    return [
        spec
        if scale == 1.0
        else spec.with_overrides(name=f"{spec.name}-latency-x{scale:g}", switch_latency_s=scale * spec.latency_s)
        for spec in specs
        for scale in scales
    ]


class _RandomFamily(Settings):
    random: Annotated[Int, Field(ge=1, le=MAX_FAMILY)]
    seed: Int = 0
    base: str = DEFAULT_ENV


class _CorpusFamily(Settings):
    corpus: str
    base: str = DEFAULT_ENV
    refresh_costs: bool = True
    latency_scales: Annotated[list[Annotated[Float, Field(gt=0.0, le=100.0)]], Field(min_length=1, max_length=16)] = [
        1.0
    ]

    @field_validator("latency_scales")
    @classmethod
    def _distinct(cls, scales: list[float]) -> list[float]:
        if len(set(scales)) < len(scales):
            raise ValueError("give each scale once (1 stands for each step at the base's latency)")
        return scales


def load_env_spec(name: str | Path | Mapping[str, Any] | EnvSpec = DEFAULT_ENV) -> EnvSpec:
    """Load and validate an env spec by name, path or mapping."""
    if isinstance(name, EnvSpec):
        return name
    if isinstance(name, Mapping):
        return parse_env_spec(name)
    path = find_env_file(name)
    data = read_yaml(path, "env spec")
    if isinstance(data, Mapping) and "family" in data:
        raise SpecError(
            f"{path} is a family of env specs, not one.",
            "load it with load_env_specs (or pass it where several specs are accepted, as `rlclock train` does).",
        )
    return parse_env_spec(data, str(path))
