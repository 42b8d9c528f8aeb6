"""Weights & Biases tracking — the only module that imports wandb (lazily).

``Tracker(enabled=True)`` logs offline by default: no account or network is needed and ``wandb sync
runs/<run>/wandb/offline-run-*`` uploads later. It logs online when the user has configured W&B (a
``WANDB_API_KEY`` in the environment or a ``wandb login``), and always follows an explicit ``WANDB_MODE``.
"""

from __future__ import annotations

import netrc
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlclock.errors import RlclockError


def wandb_mode() -> str:
    """``offline`` unless W&B is configured (or ``WANDB_MODE`` says otherwise)."""
    explicit = os.environ.get("WANDB_MODE")
    if explicit:
        return explicit
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        rc = netrc.netrc()
        if rc.authenticators("api.wandb.ai"):
            return "online"
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        pass
    return "offline"


class Tracker:
    """A W&B run, or nothing at all when disabled (every method is then a no-op).

    Args:
        enabled: Track at all.
        project: W&B project.
        name: Run name.
        config: Resolved configuration to record.
        folder: Where the local run files go (``<folder>/wandb``).
        tags: Run tags.
    """

    def __init__(self, enabled: bool, project: str = "rlclock", name: str | None = None,
                 config: Mapping[str, Any] | None = None, folder: str | Path = "runs",
                 tags: Sequence[str] = ()) -> None:
        self.enabled = enabled
        self.run = None
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
        self.run = wandb.init(project=project, name=name, config=dict(config or {}), dir=str(folder),
                              mode=self.mode, tags=list(tags), reinit="finish_previous")

    def log(self, values: Mapping[str, Any], step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(dict(values), step=step)

    def table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int | None = None) -> None:
        if self.run is not None:
            self.run.log({key: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])}, step=step)

    def image(self, key: str, path: str | Path, step: int | None = None) -> None:
        if self.run is not None:
            self.run.log({key: self._wandb.Image(str(path))}, step=step)

    def artifact(self, folder: str | Path, name: str, kind: str = "model", metadata: Mapping[str, Any] | None = None
                 ) -> None:
        if self.run is not None:
            art = self._wandb.Artifact(name, type=kind, metadata=dict(metadata or {}))
            art.add_dir(str(folder))
            self.run.log_artifact(art)

    @property
    def run_dir(self) -> str | None:
        return None if self.run is None else str(self.run.dir)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def sb3_writer(tracker: Tracker):
    """A stable-baselines3 logger output that forwards SB3's training curves to the tracker."""
    from stable_baselines3.common.logger import KVWriter

    class _Writer(KVWriter):
        def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
            vals = {k: v for k, v in key_values.items() if isinstance(v, (int, float))}
            if vals:
                tracker.log(vals, step=step)

        def close(self) -> None:
            return None

    return _Writer()
