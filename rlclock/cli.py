"""The ``rlclock`` command line: simulate, baselines, train, evaluate, profile, measure, doctor, …

Each subcommand lives in a small ``rlclock/commands/<name>.py`` module exposing ``register(subparsers)``;
this file only assembles them, turns :class:`~rlclock.errors.RlclockError` into one line on stderr with exit
status 2, and keeps imports lazy so ``rlclock --help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from rlclock.errors import RlclockError
from rlclock.version import __version__

COMMANDS: tuple[str, ...] = (
    "list",
    "simulate",
    "baselines",
    "train",
    "evaluate",
    "profile",
    "measure",
    "calibrate",
    "doctor",
    "reset_clocks",
    "apply",
)
"""Subcommand modules under ``rlclock.commands`` (a missing module is skipped)."""

EPILOG = """examples (names of shipped files work from any folder; `rlclock list` shows them):
  rlclock list                                                the shipped envs, recipes, checkpoints, GPUs
  rlclock simulate gpt3xl-rtx3080ti                           step time and energy at auto clocks
  rlclock simulate gpt3xl-rtx3080ti --clocks 1680@5001 auto@9501
  rlclock baselines gpt3xl-rtx3080ti --budget 0.01            baselines and the exact optimum
  rlclock train gpt3xl-rtx3080ti --track                      train a clock policy (W&B offline)
  rlclock evaluate gpt3xl-rtx3080ti                           a shipped policy beside the baselines
  rlclock calibrate --table sweep.csv --gpu h200-sxm --out my-gpu.yaml
                                                              fit a GPU's model to a clock sweep
  rlclock doctor                                              what rlclock can do on this machine
  rlclock apply -- python train.py                            plan and apply clocks in your training (dry run)
docs: the docs/ folder of the source (`mkdocs serve`), starting at docs/index.md
"""


class UsageError(RlclockError):
    """A command line that the rlclock command cannot parse."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad command line reported as rlclock's one-line error (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}.", f"see `{self.prog} --help`.")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rlclock",
        description="Cut the energy of transformer training by choosing GPU core/memory clocks kernel by kernel.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rlclock {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"rlclock.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"rlclock.commands.{name}":
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"rlclock: error: {exc}", file=sys.stderr)
        return 2
    args.command_line = "rlclock " + " ".join(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except RlclockError as exc:
        if args.debug or os.environ.get("RLCLOCK_DEBUG"):
            raise
        print(f"rlclock: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlclock: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
