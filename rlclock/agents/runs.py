"""Run folders that never clash and always end in a known state, and stopping a run cleanly on a signal.

A run folder is created exclusively (``<name>-s<seed>-<date>``, then ``-2``, ``-3`` … if that exists), so two
runs started in the same second never share one. Its ``summary.json`` says where the run stands —
``"status": "running"`` from the start, then ``"finished"``, ``"interrupted"`` or ``"failed"`` — written
atomically, so a reader never sees half of it.

:class:`StopOnSignal`: the first SIGINT (Ctrl-C) or SIGTERM asks the run to stop at its next safe point,
where the best policy so far is saved; a second one ends the process at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from rlclock.errors import SpecError

SUMMARY_FILE = "summary.json"
STATUSES = ("running", "finished", "interrupted", "failed")


def folder_part(name: str) -> str:
    """``name`` as one folder name: no path separators or control characters, not empty."""
    return re.sub(r"[\x00-\x1f/\\]+", "_", name).strip(" ._") or "run"


def create_run_folder(runs_dir: str | Path, name: str, seed: int) -> Path:
    """A new folder ``<runs_dir>/<name>-s<seed>-<date>`` (with ``-2``, ``-3`` … when taken), created exclusively.

    Raises:
        SpecError: ``runs_dir`` cannot hold folders (it is a file, or lies under one, or is not writable).
    """
    parent = Path(runs_dir)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise SpecError(
            f"runs folder {str(parent)!r} is a file or lies under one.",
            "give --runs-dir a folder (it is created if missing).",
        ) from None
    except OSError as exc:
        raise SpecError(f"cannot create the runs folder {str(parent)!r}: {exc.strerror or exc}.") from None
    base = f"{folder_part(name)}-s{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    for k in range(1, 10_000):
        path = parent / (base if k == 1 else f"{base}-{k}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise SpecError(f"cannot create a run folder in {str(parent)!r}: {exc.strerror or exc}.") from None
    raise SpecError(f"{str(parent)!r} already holds 9999 runs named {base!r}.", "give another --name.")


def write_summary(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into the run's ``summary.json`` (written atomically) and return the whole summary."""
    path = run_dir / SUMMARY_FILE
    summary = read_summary(run_dir)
    summary.update(fields)
    if summary.get("status") not in STATUSES:
        raise ValueError(f"run status {summary.get('status')!r}")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(summary, indent=1, default=float))
    tmp.replace(path)
    return summary


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's summary so far (empty before the first write)."""
    path = run_dir / SUMMARY_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


class StopOnSignal:
    """Within ``with StopOnSignal(...) as stop:``, SIGINT and SIGTERM ask the run to stop.

    While ``stop.graceful`` is False (nothing worth saving yet) the first signal interrupts at once, as Python's
    default Ctrl-C does (``KeyboardInterrupt``). Once it is True, the first signal only sets ``stop.requested``
    — the run checks it at safe points, saves what it has and ends — and a second one ends the process at once
    (exit status 128 + the signal's number). Outside the main thread it does nothing.

    Args:
        say: Prints a line to the user.
    """

    def __init__(self, say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> None:
        self.say = say
        self.graceful = False
        self.requested = False
        self.interrupted = False
        """A signal came while there was nothing to save: its ``KeyboardInterrupt`` was raised (and perhaps
        swallowed by the code it interrupted: the run checks this before it starts training)."""
        self.signal_name = ""
        self._previous: dict[int, Any] = {}

    def __call__(self) -> bool:
        """True once a stop was asked for."""
        return self.requested

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            self.say(f"rlclock: {name} again: stopping at once (the run folder keeps what was saved).")
            os._exit(128 + signum)
        if not self.graceful:
            self.signal_name = name
            self.interrupted = True  # also heard if the code it interrupts swallows the KeyboardInterrupt
            raise KeyboardInterrupt(name)
        self.requested = True
        self.signal_name = name
        self.say(f"rlclock: {name}: saving the best policy so far, then stopping (send it again to stop at once).")
