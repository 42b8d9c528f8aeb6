"""Helpers shared by the subcommands: env-spec arguments, checked argument types, output folders, tables."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from rlclock.backends.base import GpuBackend
from rlclock.config import DEFAULT_ENV, EnvSpec, load_env_spec
from rlclock.errors import SpecError


def number(low: float | None = None, high: float | None = None, above: bool = False,
           whole: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number at least ``low`` (above it, with ``above``) and at most ``high``;
    ``whole`` for an integer. A bad value is argparse's one-line error, before any work starts."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or (whole and not value.is_integer()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole' if whole else 'finite'} number")
        if low is not None and (value <= low if above else value < low):
            raise argparse.ArgumentTypeError(f"{text} must be {'above' if above else 'at least'} {low:g}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text} must be at most {high:g}")
        return int(value) if whole else value

    return parse


def fractions(text: str) -> list[float]:
    """An argparse type: comma-separated fractions >= 0 (``0,0.01,0.05``; empty for none)."""
    out = []
    for part in text.split(","):
        if part.strip():
            try:
                value = float(part)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a fraction (e.g. 0.01 for 1 %)") from None
            if not math.isfinite(value) or value < 0:
                raise argparse.ArgumentTypeError(f"{part.strip()!r} must be a fraction >= 0")
            out.append(value)
    return out


def output_folder(path: str | Path) -> Path:
    """``path`` as a folder to write into, created if missing.

    Raises:
        SpecError: It is a file, lies under one, or cannot be created.
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise SpecError(f"output folder {str(folder)!r} is a file or lies under one.", "give --out a folder.") from None
    except OSError as exc:
        raise SpecError(f"cannot create the output folder {str(folder)!r}: {exc.strerror or exc}.") from None
    return folder


def add_env_args(p: argparse.ArgumentParser, positional: bool = True) -> None:
    """The env spec (positional) and the overrides every env-driven command accepts."""
    if positional:
        p.add_argument("env", nargs="?", default=DEFAULT_ENV, help="env spec: a name under envs/ or a YAML path")
    p.add_argument("--latency", type=number(0.0, 10.0), default=None, metavar="SECONDS",
                   help="switching latency in seconds (default: the spec's)")
    p.add_argument("--budget", type=number(0.0, 10.0), default=None, metavar="FRACTION",
                   help="allowed slowdown against auto, e.g. 0.01 for 1 %% (default: the spec's)")


def env_from_args(args: argparse.Namespace) -> tuple[EnvSpec, GpuBackend]:
    """The env spec with the command-line overrides applied, and its backend."""
    spec = load_env_spec(args.env)
    changes = {}
    if getattr(args, "latency", None) is not None:
        changes["switch_latency_s"] = args.latency
    if getattr(args, "budget", None) is not None:
        changes["reward"] = {"budget": args.budget}
    if changes:
        spec = spec.with_overrides(**changes)
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
