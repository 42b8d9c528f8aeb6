"""Checked argument types and output folders for the subcommands (light: no rlclock layer above the values).

A bad value is one line before any work starts: argparse reports an ``ArgumentTypeError`` through the
command line's one-line error (:mod:`rlclock.cli`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from rlclock.validation import BUDGET_FIX, budget_problem, check_output_folder


def number(
    low: float | None = None, high: float | None = None, above: bool = False, whole: bool = False
) -> Callable[[str], float]:
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


def budget(text: str) -> float:
    """An argparse type: a slowdown budget (the one rule of :func:`rlclock.validation.budget_problem`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: {BUDGET_FIX}") from None
    problem = budget_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{problem}: {BUDGET_FIX}")
    return value


def add_time_limit(p: argparse.ArgumentParser, default_s: float) -> None:
    """``--time-limit SECONDS``: how long each of the two solvers (the knapsack and the latency-aware optimum) may
    take per step before it answers with the best plan found and the bound it proved."""
    p.add_argument(
        "--time-limit",
        type=number(0.0, above=True),
        default=default_s,
        metavar="SECONDS",
        help="time limit of each solver (knapsack, latency-aware optimum) per step; after it, the best "
        "plan found is shown",
    )


def fractions(text: str) -> list[float]:
    """An argparse type: comma-separated slowdown budgets (``0,0.01,0.05``; empty for none), each by the one
    budget rule."""
    out = []
    for part in text.split(","):
        if part.strip():
            try:
                value = float(part)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a fraction (e.g. 0.01 for 1 %)") from None
            problem = budget_problem(value)
            if problem is not None:
                raise argparse.ArgumentTypeError(f"{problem}: {BUDGET_FIX}")
            out.append(value)
    return out


def output_folder(path: str | Path, option: str = "--out") -> Path:
    """``path`` as a folder to write into, created if missing (:func:`rlclock.validation.check_output_folder`).

    Raises:
        SpecError: It is a file, lies under one, or cannot be created or written into.
    """
    return check_output_folder(path, option)


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in the help, except where the help already says its default or there is none to say."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.default is None or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)
