"""Logging for the library: every module logs to ``logging.getLogger(__name__)``, under the ``rlclock`` logger.

Commands print their results; the library says what it does through these loggers. So that a training script that
configures no logging still sees the deployment's lines (``rlclock: profiled 4 of 5 steps …``), the ``rlclock`` logger
gets one handler of its own on first use — to standard error, at the level ``RLCLOCK_LOG_LEVEL`` names (``INFO`` by
default) — and does not pass its records on to the root logger, so they are not printed twice. To route them
elsewhere, configure the ``rlclock`` logger like any other (``logging.getLogger("rlclock")``: set its level, replace
its handlers, or set ``propagate = True`` and handle them at the root).
"""

from __future__ import annotations

import logging
import os
import sys

ROOT_NAME = "rlclock"
LEVEL_ENV = "RLCLOCK_LOG_LEVEL"
"""Environment variable naming the level of the ``rlclock`` logger (``DEBUG``, ``INFO``, ``WARNING`` …)."""
_FORMAT = "rlclock: %(message)s"


def get_logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (``rlclock.deploy.api``), the ``rlclock`` logger's handler set up first."""
    root = logging.getLogger(ROOT_NAME)
    if not getattr(root, "_rlclock_configured", False):
        _configure(root)
    return logging.getLogger(name)


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (a test's capture, a redirected stream)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:  # set by the base class: always the current sys.stderr instead
        pass


def _configure(root: logging.Logger) -> None:
    value = logging.getLevelName(os.environ.get(LEVEL_ENV, "INFO").strip().upper())
    root.setLevel(value if isinstance(value, int) else logging.INFO)
    handler = _Stderr()
    handler.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(handler)
    root.propagate = False
    root._rlclock_configured = True  # type: ignore[attr-defined]
