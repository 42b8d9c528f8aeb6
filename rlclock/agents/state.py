"""A training run's resume state — weights and optimiser moments as safetensors, the rest as JSON, no pickle —
and the process that owns a run folder.

In the run folder:

==============================  =====================================================================================
``state.json``                  where the run stands: phase, imitation rounds done (their data, agreement, the
                                random generator's state), PPO steps and updates, the wall time of every segment so
                                far, the best evaluation's score; the optimisers' settings; the tensor file's name
                                and SHA-256
``state-<serial>.safetensors``  the policy's weights and its optimisers' moments, the best weights, the imitation data
``owner.json``                  the process running it: host, pid, start, and a heartbeat every few seconds (with the
                                wall time so far)
``.owner.lock``                 held (``flock``) while a process runs it: the kernel lets it go when the process dies,
                                however it dies
==============================  =====================================================================================

``--resume`` reads only these (never ``sb3_model.zip``, which stable-baselines3 writes with pickle): a state that
is missing, truncated, tampered with or of another shape is one :class:`~rlclock.errors.CheckpointError` line.
The digest beside the tensors proves only that they are the ones the state names, whole — not who wrote them;
nothing in them can execute, so a tampered state can at worst train a bad policy. Every write is atomic: a new
tensor file under a new name, then ``state.json`` replaced in one rename, then the old tensor file removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from rlclock.errors import CheckpointError, SpecError
from rlclock.validation import Float, Int, Settings, validate
from rlclock.yamlio import read_json

STATE_FILE = "state.json"
OWNER_FILE = "owner.json"
LOCK_FILE = ".owner.lock"
STATE_FORMAT = "rlclock.training-state"
STATE_VERSION = 1
HEARTBEAT_S = 5.0
"""Seconds between an owner's heartbeats."""
STALE_S = 60.0
"""A heartbeat older than this means the owner is gone (where the lock cannot tell: another host)."""
_TENSORS = re.compile(r"^state-[0-9]{1,12}\.safetensors$")
FIX = "start a new run (the state was not written by this rlclock's `rlclock train`, or was changed since)."

NonNegative = Annotated[Int, Field(ge=0)]


class StateMeta(Settings):
    """``state.json``, validated (every field typed and in range; no other field)."""

    format: Literal["rlclock.training-state"]
    version: Literal[1]
    phase: Literal["imitation", "ppo"]
    imitation_rounds: NonNegative
    imitation_samples: list[NonNegative]
    imitation_agreement: list[Annotated[Float, Field(ge=0.0, le=1.0)]]
    imitation_rng: dict[str, Any] | None
    timesteps: NonNegative
    updates: NonNegative
    wall_s: Annotated[Float, Field(ge=0.0)]
    best_score: Float | None
    best_step: NonNegative | None
    ppo_optimizer: list[dict[str, Any]]
    imitation_optimizer: list[dict[str, Any]] | None
    numpy_rng: tuple[NonNegative, NonNegative, Float] | None = None
    serial: NonNegative
    tensors: str
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
    tmp.replace(path)


def save_state(run_dir: Path, meta: dict[str, Any], tensors: Mapping[str, Any]) -> None:
    """Write the resume state atomically (module docstring): ``meta`` is ``state.json`` less the tensor file's
    name, digest and serial; ``tensors`` are numpy arrays or torch tensors by name."""
    from safetensors.numpy import save_file

    previous = read_state_meta(run_dir, quiet=True)
    serial = 0 if previous is None else previous.serial + 1
    name = f"state-{serial}.safetensors"
    arrays = {
        k: np.ascontiguousarray(v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v))
        for k, v in tensors.items()
    }
    tmp = run_dir / f".{name}.tmp"
    save_file(arrays, str(tmp))
    tmp.replace(run_dir / name)
    full = {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        **meta,
        "serial": serial,
        "tensors": name,
        "sha256": _digest(run_dir / name),
    }
    validate(StateMeta, full, f"{run_dir / STATE_FILE}", CheckpointError)  # never write what cannot be read back
    _write_json(run_dir / STATE_FILE, full)
    for old in run_dir.glob("state-*.safetensors"):
        if old.name != name:
            with contextlib.suppress(OSError):
                old.unlink()


def read_state_meta(run_dir: Path, quiet: bool = False) -> StateMeta | None:
    """The validated ``state.json`` of a run folder (None if there is none; with ``quiet``, None also when it is
    unreadable)."""
    path = run_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        data = read_json(path, "training state", CheckpointError, FIX, max_bytes=64 << 20)
        return validate(StateMeta, data, str(path), CheckpointError, FIX)
    except CheckpointError:
        if quiet:
            return None
        raise


def load_state(run_dir: Path) -> tuple[StateMeta, dict[str, np.ndarray]] | None:
    """The resume state of a run folder: its metadata and tensors, checked (None if the run saved none yet).

    Raises:
        CheckpointError: ``state.json`` or the tensor file is malformed, truncated, changed, or holds NaN.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    meta = read_state_meta(run_dir)
    if meta is None:
        return None
    if not _TENSORS.match(meta.tensors):
        raise CheckpointError(f"{run_dir / STATE_FILE}: 'tensors' is {meta.tensors!r}, not a state tensor file.", FIX)
    path = run_dir / meta.tensors
    if not path.is_file():
        raise CheckpointError(f"{path} is missing (named by {STATE_FILE}).", FIX)
    if _digest(path) != meta.sha256:
        raise CheckpointError(
            f"{path} is not the file {STATE_FILE} names (its SHA-256 differs: truncated or changed).", FIX
        )
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable tensors ({exc}).", FIX) from None
    for name, arr in tensors.items():
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise CheckpointError(f"{path}: tensor {name!r} holds NaN or infinity.", FIX)
    for groups in (meta.ppo_optimizer, meta.imitation_optimizer or []):
        for group in groups:
            for key, value in group.items():
                if not _setting(value):
                    raise CheckpointError(
                        f"{run_dir / STATE_FILE}: optimiser setting {key!r} is {value!r}, where a "
                        "number, a flag or a list of numbers belongs.",
                        FIX,
                    )
    return meta, tensors


def _setting(value: Any) -> bool:
    """Whether ``value`` can be an optimiser setting: a finite number, a flag, None, or a list of numbers."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, list):
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    return isinstance(value, (int, float)) and math.isfinite(value)


# -- random generators ---------------------------------------------------------------------------------------------


def random_state() -> tuple[dict[str, Any], dict[str, Any]]:
    """The global torch and numpy generators' states: the JSON part (``numpy_rng``) and tensors (``rng.*``)."""
    import torch

    _, keys, pos, has_gauss, cached = np.random.get_state()
    return {"numpy_rng": [int(pos), int(has_gauss), float(cached)]}, {
        "rng.torch": torch.get_rng_state(),
        "rng.numpy": np.asarray(keys),
    }


def restore_random(meta: StateMeta, tensors: Mapping[str, np.ndarray], where: str) -> None:
    """Set the global torch and numpy generators as :func:`random_state` saved them (if it did)."""
    import torch

    if meta.numpy_rng is None or "rng.torch" not in tensors or "rng.numpy" not in tensors:
        return
    pos, has_gauss, cached = meta.numpy_rng
    try:
        torch.set_rng_state(torch.as_tensor(tensors["rng.torch"], dtype=torch.uint8))
        np.random.set_state(("MT19937", tensors["rng.numpy"].astype(np.uint32), pos, has_gauss, cached))
    except (RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{where}: the saved random state is unreadable ({exc}).", FIX) from None


# -- optimisers ---------------------------------------------------------------------------------------------------

_MOMENTS = ("step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")


def optimizer_state(opt: Any, prefix: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """An optimiser's settings (JSON) and its moments (tensors named ``<prefix>.<param>.<moment>``)."""
    sd = opt.state_dict()
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    tensors = {f"{prefix}.{i}.{k}": v for i, st in sd["state"].items() for k, v in st.items()}
    return groups, tensors


def restore_optimizer(
    opt: Any, groups: list[dict[str, Any]], tensors: Mapping[str, np.ndarray], prefix: str, where: str
) -> None:
    """Load an optimiser's settings and moments saved by :func:`optimizer_state`, after checking them against the
    optimiser as built (the same settings of the same types, moments of its parameters' shapes).

    Raises:
        CheckpointError: They do not fit.
    """
    import torch

    fresh = opt.state_dict()
    shapes = [tuple(p.shape) for g in opt.param_groups for p in g["params"]]
    if len(groups) != len(fresh["param_groups"]):
        raise CheckpointError(
            f"{where}: {len(groups)} optimiser parameter groups saved, {len(fresh['param_groups'])} built.", FIX
        )
    restored_groups = []
    for g, f in zip(groups, fresh["param_groups"]):
        if set(g) != set(f) or g["params"] != f["params"]:
            raise CheckpointError(
                f"{where}: the optimiser's settings {sorted(g)} are not those it is built with {sorted(f)}.", FIX
            )
        out = {}
        for key, value in g.items():
            ref = f[key]
            ok = (
                type(value) is type(ref)
                if ref is None or isinstance(ref, bool)
                else isinstance(value, list) and len(value) == len(ref)
                if isinstance(ref, (tuple, list))
                else isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            )
            if not ok:
                raise CheckpointError(
                    f"{where}: optimiser setting {key!r} is {value!r}, where a value like {ref!r} belongs.", FIX
                )
            out[key] = tuple(value) if isinstance(ref, tuple) else value
        restored_groups.append(out)
    state: dict[int, dict[str, Any]] = {}
    for name, arr in tensors.items():
        if not name.startswith(prefix + "."):
            continue
        _, index, moment = name.rsplit(".", 2)
        if not index.isdigit() or int(index) >= len(shapes) or moment not in _MOMENTS:
            raise CheckpointError(f"{where}: tensor {name!r} is no moment of the optimiser.", FIX)
        if moment != "step" and tuple(arr.shape) != shapes[int(index)]:
            raise CheckpointError(
                f"{where}: tensor {name!r} has shape {tuple(arr.shape)}, its parameter {shapes[int(index)]}.", FIX
            )
        state.setdefault(int(index), {})[moment] = torch.as_tensor(arr)
    try:
        opt.load_state_dict({"state": state, "param_groups": restored_groups})
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"{where}: the optimiser's state does not fit ({exc}).", FIX) from None


def restore_module(module: Any, tensors: Mapping[str, np.ndarray], prefix: str, where: str) -> None:
    """Load a torch module's weights from ``<prefix>.<name>`` tensors (all of them, each of its shape)."""
    import torch

    mine = {k[len(prefix) + 1 :]: torch.as_tensor(v) for k, v in tensors.items() if k.startswith(prefix + ".")}
    expected = module.state_dict()
    if set(mine) != set(expected):
        missing, extra = sorted(set(expected) - set(mine)), sorted(set(mine) - set(expected))
        raise CheckpointError(
            f"{where}: the saved {prefix} weights do not match the network (missing {missing[:3]}, "
            f"unknown {extra[:3]}).",
            FIX,
        )
    for k, v in mine.items():
        if tuple(v.shape) != tuple(expected[k].shape):
            raise CheckpointError(
                f"{where}: {prefix} weight {k!r} has shape {tuple(v.shape)}, the network {tuple(expected[k].shape)}.",
                FIX,
            )
    module.load_state_dict(mine)


# -- the owner of a run folder ------------------------------------------------------------------------------------


def _lock(path: Path) -> Any:
    """An exclusive, non-blocking ``flock`` on ``path`` (the open file; None where the system has no flock);
    raises ``BlockingIOError`` when another process holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        return None
    f = path.open("a+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise BlockingIOError(str(path)) from None
    return f


def owner_of(run_dir: Path) -> dict[str, Any] | None:
    """The run folder's ``owner.json`` (None if missing or unreadable)."""
    try:
        data = json.loads((run_dir / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def running_owner(run_dir: Path) -> str | None:
    """A line naming the live process that runs this folder, or None when none does: the lock is free (on this
    host), or — where no lock can tell — the last heartbeat is older than :data:`STALE_S`."""
    owner = owner_of(run_dir) or {}
    pid, host = owner.get("pid"), owner.get("host")
    beat = owner.get("heartbeat_unix")
    age = time.time() - beat if isinstance(beat, (int, float)) else math.inf
    if host in (None, socket.gethostname()):
        try:
            held = _lock(run_dir / LOCK_FILE)
        except BlockingIOError:
            return f"pid {pid} on this host, last heartbeat {age:.0f} s ago"
        except OSError:
            held = None
        if held is not None:
            held.close()
            return None
    return f"pid {pid} on {host}, last heartbeat {age:.0f} s ago" if age < STALE_S else None


def killed_note(run_dir: Path) -> str:
    """Why a run folder left at ``running`` has no live owner (for the line ``--resume`` prints)."""
    owner = owner_of(run_dir)
    if owner is None:
        return "it was stopped before it recorded its process"
    beat = owner.get("heartbeat_unix")
    age = f"{time.time() - beat:.0f} s ago" if isinstance(beat, (int, float)) else "never"
    return f"its process (pid {owner.get('pid')} on {owner.get('host')}) is gone; last heartbeat {age}"


class Owner:
    """Within ``with Owner(run_dir, wall_s):`` this process owns the run folder: it holds the lock, and a thread
    writes ``owner.json`` with a heartbeat (and ``wall_s()``, the run's wall time so far) every
    :data:`HEARTBEAT_S` seconds.

    Raises:
        SpecError: Another live process owns the folder.
    """

    def __init__(self, run_dir: Path, wall_s: Callable[[], float]) -> None:
        self.run_dir, self.wall_s = run_dir, wall_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lockfile: Any = None
        self.started = time.time()

    def __enter__(self) -> Owner:
        try:
            self._lockfile = _lock(self.run_dir / LOCK_FILE)
        except BlockingIOError:
            other = owner_of(self.run_dir) or {}
            raise SpecError(
                f"run folder {self.run_dir} is in use by a running rlclock (pid {other.get('pid')}).",
                "wait for it to end, or stop it (kill -INT saves it) and resume then.",
            ) from None
        self.beat()
        self._thread = threading.Thread(target=self._run, name="rlclock-heartbeat", daemon=True)
        self._thread.start()
        return self

    def beat(self) -> None:
        with contextlib.suppress(OSError):
            _write_json(
                self.run_dir / OWNER_FILE,
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started_unix": self.started,
                    "heartbeat_unix": time.time(),
                    "wall_s": float(self.wall_s()),
                },
            )

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.beat()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * HEARTBEAT_S)
        self.beat()
        if self._lockfile is not None:
            self._lockfile.close()
