"""Helpers shared by the subcommands: env-spec arguments, plain-text tables and how numbers and commands print."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rlclock.commands.args import budget, number
from rlclock.resources import DEFAULT_ENV

if TYPE_CHECKING:
    from rlclock.backends.base import GpuBackend
    from rlclock.config import EnvSpec


def add_env_args(p: argparse.ArgumentParser, positional: bool = True) -> None:
    """The env spec (positional) and the overrides every env-driven command accepts."""
    if positional:
        p.add_argument(
            "env",
            nargs="?",
            default=DEFAULT_ENV,
            help="env spec: a shipped name (e.g. gpt3xl-rtx3080ti) or a YAML path",
        )
    p.add_argument(
        "--latency",
        type=number(0.0, 10.0),
        default=None,
        metavar="SECONDS",
        help="switching latency in seconds (default: the spec's)",
    )
    p.add_argument(
        "--budget",
        type=budget,
        default=None,
        metavar="FRACTION",
        help="allowed slowdown against auto, e.g. 0.01 for 1 %% (default: the spec's)",
    )


def note_generic(specs: Sequence[EnvSpec]) -> None:
    """Say once per GPU, on stderr, when an env's GPU preset is generic rather than fitted to that GPU."""
    import sys

    seen = set()
    for spec in specs:
        note = spec.gpu.generic_note()
        if note and spec.gpu.key not in seen:
            seen.add(spec.gpu.key)
            print(note, file=sys.stderr)


def env_from_args(args: argparse.Namespace) -> tuple[EnvSpec, GpuBackend]:
    """The env spec with the command-line overrides applied, and its backend."""
    from rlclock.config import load_env_spec

    spec = load_env_spec(args.env)
    changes = {}
    if getattr(args, "latency", None) is not None:
        changes["switch_latency_s"] = args.latency
    if getattr(args, "budget", None) is not None:
        changes["reward"] = {"budget": args.budget}
    if changes:
        spec = spec.with_overrides(**changes)
    note_generic([spec])
    return spec, spec.build_backend()


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print an aligned plain-text table (first column left-aligned, the rest right-aligned)."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def fmt(row: Sequence[str]) -> str:
        return "  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths)))

    print(fmt(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(fmt(r))


def signed(value: float, digits: int = 2) -> str:
    """``value`` with its sign and ``digits`` decimals; what rounds to zero prints as ``+0.00``, never ``-0.00``."""
    shown = round(value, digits)
    return f"{shown if shown != 0 else 0.0:+.{digits}f}"


def duration(seconds: float) -> str:
    """A wall time for people: ``38 s``, ``4.2 min``, ``1.3 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def tool_command(name: str) -> str:
    """How to run the console script ``name`` of this environment as printed: its bare name when the shell finds this
    environment's one on the PATH, else ``python -m name`` with this interpreter."""
    import shutil
    import sys

    found = shutil.which(name)
    if found is not None and Path(found).absolute().parent == Path(sys.executable).absolute().parent:
        return name
    return f"{shlex.quote(sys.executable)} -m {name}"
