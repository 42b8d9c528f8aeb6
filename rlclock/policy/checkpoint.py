"""The checkpoint format: weights as safetensors and metadata as JSON in one folder; nothing executes on load.

A checkpoint is a folder::

    policy.safetensors   the policy network's weights (numpy arrays)
    meta.json            GPU, clock table, action set, feature schema, env spec, training figures
    sb3_model.zip        (optional) the stable-baselines3 model, for SB3's own tools — pickle-based (SB3's
                         format): rlclock never opens it (a run resumes from its safetensors state,
                         :mod:`rlclock.agents.state`)

:func:`read_checkpoint` refuses a folder whose format, feature schema, GPU clock table or shapes do not match
this rlclock, each with one line saying what differs and what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rlclock import resources
from rlclock.dvfs.spec import GpuSpec, get_spec, preset_keys, spec_from_mapping, spec_to_mapping
from rlclock.errors import CheckpointError, RlclockError, SpecError
from rlclock.observation.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION
from rlclock.observation.layout import obs_size
from rlclock.observation.lookahead import n_slots
from rlclock.policy.network import ACTIVATIONS, PolicyWeights
from rlclock.schedule import ClockConfig
from rlclock.validation import Budget, Float, Int, validate
from rlclock.yamlio import read_json

CHECKPOINT_FORMAT = "rlclock.policy"
CHECKPOINT_VERSION = 1
WEIGHTS_FILE = "policy.safetensors"
META_FILE = "meta.json"
SB3_FILE = "sb3_model.zip"
"""The stable-baselines3 model written at the end of a run for SB3's own tools (pickle-based; rlclock never reads
it: a run resumes from its safetensors state)."""
REQUIRED_META = ("gpu_key", "configs", "lookahead", "clock_table", "obs_size", "candidate_slots")
_RETRAIN = "give a checkpoint written by `rlclock train` (a shipped name, a run folder or its policy/), unchanged."


class CheckpointMeta(BaseModel):
    """The fields of ``meta.json`` rlclock reads, each typed and in range (other fields are kept, unread)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    activation: Literal["tanh", "relu"] = "tanh"
    gpu_key: Annotated[str, Field(min_length=1)]
    gpu_name: str | None = None
    gpu_spec: dict[str, Any] | None = None
    clock_table: str
    configs: Annotated[list[str], Field(min_length=1)]
    feature_names: list[str] | None = None
    lookahead: Annotated[Int, Field(ge=0, le=64)]
    candidate_slots: Annotated[Int, Field(ge=1, le=4096)]
    obs_size: Annotated[Int, Field(ge=1, le=1_000_000)]
    latency_s: Annotated[Float, Field(ge=0.0, le=10.0)] | None = None
    budget: Budget = 0.01
    price_rel: Annotated[Float, Field(gt=0.0, le=1e6)] | None = None
    training: dict[str, Any] | None = None
    env_spec: dict[str, Any] | None = None


def clock_table_digest(spec: GpuSpec) -> str:
    """A short digest of a GPU's clock table (memory clock → supported core clocks)."""
    text = json.dumps({str(m): list(spec.clocks[m]) for m in sorted(spec.clocks)})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _is_preset(gpu: GpuSpec) -> bool:
    """Whether ``gpu`` is a shipped preset as it ships (else a checkpoint carries the spec itself)."""
    return gpu.key in preset_keys() and get_spec(gpu.key) == gpu


def checkpoint_gpu(meta: dict[str, Any]) -> GpuSpec:
    """The GPU a checkpoint was trained for: the spec it carries (a calibrated GPU), else the preset it names."""
    if isinstance(meta.get("gpu_spec"), dict):
        return spec_from_mapping(meta["gpu_spec"], "the checkpoint's GPU spec")
    return get_spec(str(meta["gpu_key"]))


def policy_meta(
    gpu: GpuSpec,
    configs: Sequence[ClockConfig],
    lookahead: int,
    obs_entries: int,
    latency_s: float,
    budget: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The metadata a checkpoint carries (see the module docstring)."""
    return {
        "gpu_key": gpu.key,
        "gpu_name": gpu.name,
        **({} if _is_preset(gpu) else {"gpu_spec": spec_to_mapping(gpu)}),
        "clock_table": clock_table_digest(gpu),
        "configs": [str(c) for c in configs],
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "feature_names": list(FEATURE_NAMES),
        "lookahead": lookahead,
        "candidate_slots": n_slots(configs),
        "obs_size": obs_entries,
        "latency_s": latency_s,
        "budget": budget,
        **extra,
    }


def save_checkpoint(folder: str | Path, weights: PolicyWeights, meta: dict[str, Any]) -> Path:
    """Write ``policy.safetensors`` and ``meta.json`` into ``folder``, atomically: both into a new folder beside
    it, which then takes its place (files already in ``folder`` besides these two are kept)."""
    import shutil

    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    old = folder.with_name(f".{folder.name}.{os.getpid()}.old")
    for stale in (tmp, old):
        shutil.rmtree(stale, ignore_errors=True)
    if folder.is_dir():
        shutil.copytree(folder, tmp, ignore=shutil.ignore_patterns(WEIGHTS_FILE, META_FILE))
    else:
        tmp.mkdir()
    save_file(weights.tensors(), str(tmp / WEIGHTS_FILE))
    full = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "activation": weights.activation, **meta}
    (tmp / META_FILE).write_text(json.dumps(full, indent=1, default=float))
    if folder.exists():
        folder.replace(old)
    tmp.replace(folder)
    shutil.rmtree(old, ignore_errors=True)
    return folder


def checkpoint_folder(name: str | Path) -> Path:
    """The folder of a checkpoint: a path, the name of a shipped one (``gpt3xl-h200`` …), or a run folder of
    ``rlclock train`` (its ``policy/``)."""
    try:
        folder = resources.locate("checkpoints", name)
    except SpecError as exc:
        raise CheckpointError(exc.message, exc.fix) from None
    if not (folder / META_FILE).exists() and (folder / "policy" / META_FILE).is_file():
        return folder / "policy"  # a run folder: its checkpoint
    return folder


def read_checkpoint(name: str | Path) -> tuple[PolicyWeights, dict[str, Any]]:
    """The weights and metadata of a checkpoint (a folder or a shipped name), checked against this rlclock.

    Raises:
        CheckpointError: Missing files, unreadable or malformed metadata or weights, another format or feature
            schema, another GPU clock table, or shapes that do not fit the action set and observation.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    folder = checkpoint_folder(name)
    meta_path, weights_path = folder / META_FILE, folder / WEIGHTS_FILE
    if not meta_path.is_file() or not weights_path.is_file():
        if (folder / "config.yaml").is_file():
            raise CheckpointError(
                f"{folder} is a run folder whose policy was not saved yet (no policy/{META_FILE}).",
                f"let the run save one (it does at its first evaluation), or continue it: "
                f"rlclock train --resume {folder}.",
            )
        missing = [f for f in (META_FILE, WEIGHTS_FILE) if not (folder / f).is_file()]
        raise CheckpointError(
            f"{folder} is not an rlclock checkpoint (it lacks {' and '.join(missing)}).",
            "give a checkpoint folder (policy.safetensors + meta.json: a shipped name such as "
            "gpt3xl-rtx3080ti, a run folder, or its policy/ folder).",
        )
    meta = read_json(meta_path, "checkpoint metadata", CheckpointError, _RETRAIN, max_bytes=16 << 20)
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"{meta_path}: the metadata must be a JSON object, found {type(meta).__name__}.",
            "give a folder written by `rlclock train`.",
        )
    if meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{meta_path}: format {meta.get('format')!r} v{meta.get('version')!r}, expected "
            f"{CHECKPOINT_FORMAT!r} v{CHECKPOINT_VERSION}.",
            "retrain or upgrade rlclock.",
        )
    if meta.get("feature_schema_version") != FEATURE_SCHEMA_VERSION:
        raise CheckpointError(
            f"{folder}: feature schema v{meta.get('feature_schema_version')} does not match this rlclock's "
            f"v{FEATURE_SCHEMA_VERSION}.",
            "retrain the policy with this version of rlclock.",
        )
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise CheckpointError(f"{meta_path}: missing {missing}.", _RETRAIN)
    if meta.get("activation", "tanh") not in ACTIVATIONS:
        raise CheckpointError(
            f"{meta_path}: activation {meta.get('activation')!r} is unknown; rlclock's policies "
            f"use {list(ACTIVATIONS)}.",
            _RETRAIN,
        )
    validate(CheckpointMeta, meta, str(meta_path), CheckpointError, _RETRAIN)
    try:
        gpu = checkpoint_gpu(meta)
    except SpecError as exc:
        raise CheckpointError(f"{meta_path}: {exc.message}", _RETRAIN) from None
    for c in meta["configs"]:
        try:
            gpu.validate(c)
        except RlclockError as exc:
            raise CheckpointError(
                f"{meta_path}: configuration {c!r} is not one {gpu.name} runs ({exc.message})", _RETRAIN
            ) from None
    if meta["clock_table"] != clock_table_digest(gpu):
        raise CheckpointError(
            f"{folder}: clock table of {gpu.name} differs from the one the policy was trained on.",
            "retrain the policy for this GPU preset.",
        )
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{weights_path}: unreadable weights ({exc}).", _RETRAIN) from None
    try:
        weights = PolicyWeights.from_tensors(tensors, meta.get("activation", "tanh"))
    except KeyError as exc:
        raise CheckpointError(f"{weights_path}: missing tensor {exc}.", _RETRAIN) from None
    return weights, meta


def check_shapes(weights: PolicyWeights, meta: dict[str, Any], configs: Sequence[ClockConfig], lookahead: int) -> None:
    """Raise :class:`CheckpointError` unless the network fits the action set and the observation layout."""
    if not weights.hidden:
        raise CheckpointError(
            "the policy has no hidden layer; rlclock's policies have at least one.",
            "retrain the policy with this version of rlclock.",
        )
    slots = n_slots(configs)
    if int(meta.get("candidate_slots", slots)) != slots:
        raise CheckpointError(
            f"the policy was trained with {meta['candidate_slots']} candidate slots; its "
            f"listed action set gives {slots}.",
            "retrain the policy for this action set.",
        )
    expect = obs_size(lookahead, slots)
    w0 = weights.hidden[0][0]
    if w0.shape[1] != expect or int(meta["obs_size"]) != expect:
        raise CheckpointError(
            f"policy expects {w0.shape[1]} observation entries, this rlclock builds {expect}.",
            "retrain the policy with this version of rlclock.",
        )
    for i, ((w, b), width) in enumerate(zip(weights.hidden, [w0.shape[1]] + [w.shape[0] for w, _ in weights.hidden])):
        if w.ndim != 2 or w.shape[1] != width or b.shape != (w.shape[0],):
            raise CheckpointError(
                f"hidden layer {i} has weights {w.shape} and bias {b.shape}, which do not chain.",
                "retrain the policy with this version of rlclock.",
            )
    head_w, head_b = weights.head
    if head_w.shape != (slots + 1, weights.hidden[-1][0].shape[0]) or head_b.shape != (slots + 1,):
        raise CheckpointError(
            f"policy has {head_w.shape[0]} actions but its action set gives {slots} candidate slots (+ keep).",
            "retrain the policy for this action set.",
        )
    if not all(np.all(np.isfinite(a)) for layer in (*weights.hidden, weights.head) for a in layer):
        raise CheckpointError("the policy's weights hold NaN or infinity.", "retrain the policy.")
