"""``rlclock list``: every shipped thing by the name the other commands take."""

from __future__ import annotations

import json

import pytest

from rlclock.cli import main
from rlclock.resources import shipped


def test_every_shipped_name_is_listed(capsys):
    assert main(["list", "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)
    for kind in ("envs", "agents", "checkpoints"):
        assert [row["name"] for row in tables[kind]] == shipped(kind)
    assert {row["name"] for row in tables["gpus"]} >= {"h100-sxm", "h200-sxm", "rtx3080ti"}
    assert next(r for r in tables["checkpoints"] if r["name"] == "corpus-h100")["gpu"] == "NVIDIA H100 80GB HBM3"


def test_one_kind_as_a_table(capsys):
    assert main(["list", "gpus"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpus (") and "h200-sxm" in out and "envs" not in out


@pytest.mark.parametrize("args", [["list", "everything"], ["list", "--nope"]])
def test_a_bad_kind_is_one_line(capsys, args):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlclock: error:") and "\n" not in err
