"""``rlclock apply`` refuses, before the command starts, what its processes would refuse only after warm-up and
profiling: outputs it cannot write, a lead shorter than the switching latency, a GPU index, policy or schedule
clock the machine's GPU lacks. Each row is one class of bad input; the command would leave a file if it ran."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from rlclock.cli import main

CHILD = "open('ran', 'w').close(); raise SystemExit(7)"
"""The training command: leaves ``ran`` behind and exits 7, so a check that passes is told apart from a refusal."""


def _schedule(tmp: Path, *configs: str) -> str:
    path = tmp / "s.json"
    path.write_text(
        json.dumps(
            {
                "format": "rlclock.schedule",
                "version": 1,
                "name": "s",
                "configs": list(configs),
                "runs": [[i, 2] for i in range(len(configs))],
            }
        )
    )
    return str(path)


def _apply(tmp: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> int:
    (tmp / "file").write_text("")
    monkeypatch.chdir(tmp)
    return main(["apply", *[a.replace("{d}", str(tmp)) for a in args], "--", sys.executable, "-c", CHILD])


REFUSED_ON_ANY_MACHINE = [
    (["--report", "{d}/file/r.json"], "--report folder of '.*' is a file"),
    (["--report", "{d}"], "--report '.*' is a folder"),
    (["--save", "{d}/file"], "--save '.*' is a file"),
    (["--checkpoint", "gpt3xl-h200", "--lead", "0.000001"], r"shorter than the switching latency \(0.006 s\)"),
    (["--latency", "0.01", "--lead", "0.005"], r"issue lead \(0.005 s\) is shorter"),
]

REFUSED_ON_A_GPU = [
    (["--schedule", "SCHEDULE:auto,1234@5678"], "the schedule names 1234@5678, which the GPU cannot run"),
    (["--schedule", "SCHEDULE:1000@3201"], "core clock 1000 MHz is not supported"),
    (["--lead", "0.002"], r"shorter than the switching latency \(0.006 s\)"),
    (["--device", "3"], "--device 3: this machine has 1 NVIDIA GPU"),
    (["--checkpoint", "gpt3xl-rtx3080ti"], "trained for 'NVIDIA GeForce RTX 3080 Ti'.*is NVIDIA H200"),
]

ACCEPTED_ON_A_GPU = [
    ["--schedule", "SCHEDULE:auto,1980@3201,1005@3201"],
    ["--checkpoint", "gpt3xl-h200", "--lead", "0.006"],
    ["--device", "0", "--report", "{d}/new/r.json", "--save", "{d}/saved"],
]


def _expand(tmp: Path, args: list[str]) -> list[str]:
    return [_schedule(tmp, *a.split(":", 1)[1].split(",")) if a.startswith("SCHEDULE:") else a for a in args]


def _refused(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert _apply(tmp, monkeypatch, _expand(tmp, args)) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rlclock: error:") and "Fix:" in err
    assert re.search(says, err), err
    assert not (tmp / "ran").exists()  # refused before the command started


@pytest.mark.parametrize("args, says", REFUSED_ON_ANY_MACHINE)
def test_refused_before_the_command_starts_without_a_gpu(no_nvml, tmp_path, monkeypatch, capsys, args, says):
    _refused(tmp_path, monkeypatch, capsys, args, says)


@pytest.mark.parametrize("args, says", REFUSED_ON_ANY_MACHINE + REFUSED_ON_A_GPU)
def test_refused_before_the_command_starts_on_a_gpu(fake_gpu, tmp_path, monkeypatch, capsys, args, says):
    _refused(tmp_path, monkeypatch, capsys, args, says)


@pytest.mark.parametrize("args", ACCEPTED_ON_A_GPU)
def test_good_inputs_reach_the_command(fake_gpu, tmp_path, monkeypatch, capsys, args):
    assert _apply(tmp_path, monkeypatch, _expand(tmp_path, args)) == 7
    assert (tmp_path / "ran").exists()
    assert fake_gpu()["calls"] == []  # the checks change nothing on the GPU


@pytest.mark.parametrize("lead_s", [0.006, 0.0065, 1.0])
def test_the_lead_fix_works(lead_s):
    """The fix of a too-short lead names the least one that plans, and the default: both plan."""
    from rlclock.deploy.plan import LEAD_MARGIN_S, check_lead
    from rlclock.errors import DeployError

    with pytest.raises(DeployError, match=r"at least 0.006 s.*default \(0.0065 s\)"):
        check_lead(0.006, 0.001)
    assert check_lead(0.006, lead_s) == lead_s
    assert check_lead(0.006) == pytest.approx(0.006 + LEAD_MARGIN_S)
