"""Files shipped inside the package, found by name from any directory.

rlclock installs with its environment specs (``envs``), agent recipes (``agents``), trained checkpoints
(``checkpoints``: deployable weights and metadata) and the measurements its presets are fitted to
(``measurements``) under ``rlclock/data/``; a source checkout shows the same folders at its top level.
A name (``gpt3xl-rtx3080ti``) means the shipped file; anything that looks like a path (it has a folder or a
suffix) means that path and nothing else, so a typo in a path is an error rather than a shipped look-alike.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from rlclock.errors import SpecError

DEFAULT_ENV = "gpt3xl-rtx3080ti"
"""The shipped env spec commands and environments use when none is named."""

KINDS: dict[str, tuple[str, str]] = {
    "envs": (".yaml", "env spec"),
    "agents": (".yaml", "agent recipe"),
    "checkpoints": ("", "checkpoint"),
}
"""Kind of shipped file → (suffix, what it is called in messages)."""


def data_dir() -> Path:
    """The folder that holds the shipped files (``rlclock/data``)."""
    return Path(str(resources.files("rlclock"))) / "data"


def shipped(kind: str) -> list[str]:
    """Names of the shipped files of a kind (``envs``, ``agents``, ``checkpoints``), sorted."""
    suffix, _ = KINDS[kind]
    folder = data_dir() / kind
    if not folder.is_dir():
        return []
    if suffix:
        return sorted(p.name[: -len(suffix)] for p in folder.iterdir() if p.name.endswith(suffix))
    return sorted(p.name for p in folder.iterdir() if p.is_dir())


def looks_like_path(name: str | Path) -> bool:
    """True for a path (a folder part or a file suffix), False for a bare name."""
    p = Path(name)
    return isinstance(name, Path) or len(p.parts) > 1 or bool(p.suffix)


def locate(kind: str, name: str | Path) -> Path:
    """The file of ``name``: the path itself if it looks like one, else the shipped file of that name.

    Raises:
        SpecError: The path does not exist, or no shipped file has that name (the message lists them).
    """
    suffix, what = KINDS[kind]
    if looks_like_path(name):
        path = Path(name).expanduser()
        if path.exists():
            return path
        raise SpecError(
            f"{what} {str(name)!r} not found.",
            f"check the path, or give the name of a shipped {what}: {shipped(kind)}.",
        )
    path = data_dir() / kind / f"{name}{suffix}"
    if path.exists():
        return path
    raise SpecError(
        f"{what} {str(name)!r} not found among the shipped ones.", f"use one of {shipped(kind)}, or give a path."
    )


def measurement(name: str) -> Path:
    """A shipped measurement file (``rlclock/data/measurements/<name>``; see its README)."""
    path = data_dir() / "measurements" / name
    if not path.is_file():
        raise SpecError(
            f"shipped measurement {name!r} is missing from this installation ({path}).", "reinstall rlclock."
        )
    return path
