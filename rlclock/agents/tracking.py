"""Weights & Biases tracking — the only module that imports wandb (lazily).

``Tracker(enabled=True)`` logs offline by default: no account or network is needed and ``wandb sync
<run folder>/wandb/offline-run-*`` uploads later. It logs online when the user has configured W&B (a
``WANDB_API_KEY`` in the environment or a ``wandb login``), and always follows an explicit ``WANDB_MODE``.
The project is the one given, else ``WANDB_PROJECT``, else ``rlclock``; entity and group likewise (their
variables are ``WANDB_ENTITY`` and ``WANDB_RUN_GROUP``).

Every value is logged against ``global_step`` — environment steps (kernel decisions) of PPO, 0 for what
happens before it — and the imitation rounds against ``imitation/round``, so curves of both phases line up.
"""

from __future__ import annotations

import netrc
import numbers
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlclock.errors import RlclockError

DEFAULT_PROJECT = "rlclock"
STEP = "global_step"
"""The x-axis of every metric: environment steps (kernel decisions) trained so far."""
ROUND = "imitation/round"
"""The x-axis of the imitation metrics (``imitation/*``)."""


WANDB_MODES = ("online", "offline", "disabled", "shared", "dryrun")
"""The values of ``WANDB_MODE`` W&B takes (``dryrun``: its old name of ``offline``)."""


def wandb_mode() -> str:
    """``offline`` unless W&B is configured (or ``WANDB_MODE`` says otherwise).

    Raises:
        RlclockError: ``WANDB_MODE`` is set to something W&B does not take.
    """
    explicit = os.environ.get("WANDB_MODE")
    if explicit is not None and explicit.strip():
        if explicit.strip() not in WANDB_MODES:
            raise RlclockError(
                f"WANDB_MODE is {explicit!r}; W&B takes {', '.join(WANDB_MODES[:4])}.",
                "set WANDB_MODE=offline (or unset it: offline unless you ran `wandb login`).",
            )
        return explicit.strip()
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        rc = netrc.netrc()
        if rc.authenticators("api.wandb.ai"):
            return "online"
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        pass
    return "offline"


def artifact_name(text: str) -> str:
    """``text`` as a name W&B accepts for an artifact (letters, digits, ``-``, ``_``, ``.``; at most 128)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "run"
    if name.startswith(("run-", "source-", "wandb-")):
        name = "rlclock-" + name
    return name[:128]


def numeric(values: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of ``values`` as floats (numpy scalars and booleans included; text and media left
    out)."""
    out: dict[str, float] = {}
    for k, v in values.items():
        if isinstance(v, np.ndarray) and v.size == 1:
            v = v.item()
        if isinstance(v, (numbers.Real, np.bool_)):
            out[k] = float(v)
    return out


class Tracker:
    """A W&B run, or nothing at all when disabled (every method is then a no-op).

    Args:
        enabled: Track at all.
        name: Run name (W&B's display name; the run's own name is kept as the user gave it).
        config: Resolved configuration to record.
        folder: Where the local run files go (``<folder>/wandb``).
        tags: Run tags.
        project: W&B project (default ``WANDB_PROJECT``, else ``rlclock``).
        entity: W&B entity (default ``WANDB_ENTITY``, else the user's).
        group: W&B run group (default ``WANDB_RUN_GROUP``, else none).
    """

    def __init__(
        self,
        enabled: bool,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        folder: str | Path = "runs",
        tags: Sequence[str] = (),
        project: str | None = None,
        entity: str | None = None,
        group: str | None = None,
    ) -> None:
        self.enabled = enabled
        self.run: Any = None
        self.mode = "disabled"
        if not enabled:
            return
        try:
            import wandb
        except ImportError as exc:  # pragma: no cover - wandb is a dependency
            raise RlclockError("--track needs the wandb package.", "pip install wandb") from exc
        self._wandb = wandb
        self.mode = wandb_mode()
        Path(folder).mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(
            project=project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            entity=entity or None,
            group=group or None,
            name=name,
            config=dict(config or {}),
            dir=str(folder),
            mode=self.mode,  # type: ignore[arg-type]
            tags=list(tags),
            reinit="finish_previous",
        )
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)
        self.run.define_metric(ROUND)
        self.run.define_metric("imitation/*", step_metric=ROUND)

    @property
    def project(self) -> str | None:
        return None if self.run is None else str(self.run.project)

    @property
    def local_dir(self) -> Path | None:
        """The run's local folder (for an offline run: what ``wandb sync`` uploads)."""
        return None if self.run is None else Path(self.run.dir).parent

    def log(self, values: Mapping[str, Any], step: int) -> None:
        """Log the numeric entries of ``values`` at ``global_step = step``."""
        if self.run is not None:
            self.run.log({**numeric(values), STEP: step})

    def log_round(self, values: Mapping[str, Any]) -> None:
        """Log an imitation round's metrics (``imitation/*``, with ``imitation/round`` among them)."""
        if self.run is not None:
            self.run.log(numeric(values))

    def table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        if self.run is not None:
            self.run.log({key: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows]), STEP: step})

    def image(self, key: str, path: str | Path, step: int) -> None:
        if self.run is not None:
            self.run.log({key: self._wandb.Image(str(path)), STEP: step})

    def artifact(
        self,
        folder: str | Path,
        name: str,
        kind: str = "model",
        metadata: Mapping[str, Any] | None = None,
        extra_files: Sequence[str | Path] = (),
    ) -> str | None:
        """Log ``folder`` (and ``extra_files``) as an artifact named after ``name`` (:func:`artifact_name`);
        returns the name used."""
        if self.run is None:
            return None
        safe = artifact_name(name)
        art = self._wandb.Artifact(safe, type=kind, metadata=dict(metadata or {}))
        art.add_dir(str(folder))
        for f in extra_files:
            if Path(f).is_file():
                art.add_file(str(f))
        self.run.log_artifact(art)
        return safe

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def sb3_writer(tracker: Tracker) -> Any:
    """A stable-baselines3 logger output that forwards every numeric value SB3 records to the tracker."""
    from stable_baselines3.common.logger import KVWriter

    class _Writer(KVWriter):
        def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
            vals = numeric(key_values)
            if vals:
                tracker.log(vals, step=step)

        def close(self) -> None:
            return None

    return _Writer()
