"""How the commands print numbers, durations and commands to run."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import pytest

from rlclock.commands.common import duration, signed, tool_command


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.0, "+0.00"),
        (-0.0, "+0.00"),
        (-0.004, "+0.00"),
        (0.004, "+0.00"),
        (-0.006, "-0.01"),
        (1.234, "+1.23"),
        (-7.2, "-7.20"),
    ],
)
def test_signed_never_prints_minus_zero(value, shown):
    assert signed(value) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.4, "0 s"), (38.2, "38 s"), (119, "119 s"), (150, "2.5 min"), (7199, "120.0 min"), (9000, "2.5 h")],
)
def test_duration_reads_like_a_person_would_say_it(seconds, shown):
    assert duration(seconds) == shown


def test_tool_command_runs_as_printed(tmp_path, monkeypatch):
    bin_dir = Path(sys.executable).absolute().parent
    monkeypatch.setenv("PATH", str(tmp_path))  # this environment's scripts are not on the PATH
    assert tool_command("wandb") == f"{sys.executable} -m wandb"
    script = bin_dir / "wandb"
    if script.exists():
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{tmp_path}")
        assert tool_command("wandb") == "wandb"


def test_help_says_each_default_once():
    from rlclock.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        text = " ".join(command.format_help().split())
        assert "(default: None)" not in text, name
        assert not re.search(r"\(default[^)]*\)\s*\(default", text), name
