"""``rlclock apply`` running a script, its one-line errors, and two gloo ranks sharing rank 0's schedule."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from rlclock.cli import main
from rlclock.schedule import ClockSchedule

SCRIPT = """
import sys, time
import rlclock.deploy
with rlclock.deploy.clocked() as clk:
    for _ in range(8):
        with clk.step():
            time.sleep(0.02)
print("script done", clk.state, flush=True)
"""


def test_apply_runs_the_script_with_the_schedule(no_nvml, alternating, tmp_path, capfd):
    schedule, timeline = alternating
    schedule.save(tmp_path / "s.json")
    timeline.save(tmp_path / "t.json")
    (tmp_path / "train.py").write_text(SCRIPT)
    code = main(
        [
            "apply",
            "--schedule",
            str(tmp_path / "s.json"),
            "--timeline",
            str(tmp_path / "t.json"),
            "--latency",
            "0.006",
            "--worker",
            "thread",
            "--report",
            str(tmp_path / "rep.json"),
            "--",
            sys.executable,
            str(tmp_path / "train.py"),
        ]
    )
    out = capfd.readouterr()
    assert code == 0, out.err
    assert "script done closed" in out.out
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["steps"] == 8 and rep["mode"] == "plan-only" and rep["issued"] > 10
    assert "switches issued" in out.err


def test_apply_passes_an_anchor_spacing_from_the_environment(no_nvml, alternating, tmp_path, capfd, monkeypatch):
    schedule, timeline = alternating
    schedule.save(tmp_path / "s.json")
    timeline.save(tmp_path / "t.json")
    (tmp_path / "train.py").write_text(SCRIPT)
    monkeypatch.setenv("RLCLOCK_DEPLOY_ANCHOR_EVERY", "4")
    code = main(
        [
            "apply",
            "--schedule",
            str(tmp_path / "s.json"),
            "--timeline",
            str(tmp_path / "t.json"),
            "--latency",
            "0.006",
            "--worker",
            "thread",
            "--report",
            str(tmp_path / "rep.json"),
            "--quiet",
            "--",
            sys.executable,
            str(tmp_path / "train.py"),
        ]
    )
    assert code == 0, capfd.readouterr().err
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["steps"] == 8 and rep["anchor_every"] == 4 and rep["anchored"] == 2


def test_apply_passes_the_scripts_exit_status_and_says_when_nothing_was_applied(no_nvml, alternating, tmp_path, capfd):
    schedule, _ = alternating
    schedule.save(tmp_path / "s.json")
    code = main(["apply", "--schedule", str(tmp_path / "s.json"), "--", sys.executable, "-c", "raise SystemExit(3)"])
    assert code == 3
    assert "nothing was controlled" in capfd.readouterr().err


def test_apply_errors_are_one_line(no_policy_module, tmp_path, capsys):
    assert main(["apply", "--checkpoint", str(tmp_path), "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlclock: error:") and "no deployable policy" in err and "\n" not in err
    ClockSchedule.constant("auto", 3).save(tmp_path / "s.json")
    assert main(["apply", "--schedule", str(tmp_path / "s.json")]) == 2
    assert "no training command" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert main(["apply", "--schedule", str(tmp_path / "bad.json"), "--", "true"]) == 2
    assert "not an rlclock schedule" in capsys.readouterr().err


RANK = r"""
import json, os, sys, time
import numpy as np
import torch.distributed as dist
import rlclock.deploy
from rlclock.deploy.timeline import StepTimeline
from rlclock.schedule import ClockSchedule
dist.init_process_group("gloo")
rank = dist.get_rank()
tl = StepTimeline.from_durations(np.full(40, 1e-3))
if rank == 0:
    s = ClockSchedule(["1980@3201", "1410@3201"], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10, "rank0")
else:  # another schedule: the broadcast must replace it
    s = ClockSchedule.constant("1200@2201", 40, "rank1")
with rlclock.deploy.clocked(s, timeline=tl, latency_s=0.006, worker="thread", report=sys.argv[1],
                            verbose=False) as clk:
    for _ in range(6):
        with clk.step():
            time.sleep(0.03)
            dist.barrier()
print(json.dumps({"rank": rank, "schedule": clk.schedule.name, "device": clk.controller.device,
                  "steps": clk.report.steps, "issued": clk.report.issued}), flush=True)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_apply_rank_0s_schedule_each_on_its_own_gpu(no_nvml, tmp_path):
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK, str(tmp_path / "rep.json")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the ranks did not finish")
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert [o["schedule"] for o in outs] == ["rank0", "rank0"]
    assert [o["device"] for o in outs] == [0, 1]  # each rank its own GPU (its local rank)
    assert all(o["steps"] == 6 and o["issued"] > 10 for o in outs)
    assert sorted(p.name for p in tmp_path.glob("rep.rank*.json")) == ["rep.rank0.json", "rep.rank1.json"]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU mode of the example")
def test_the_example_runs_on_a_cpu_and_says_there_is_no_gpu():
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "train_small_gpt.py"
    out = subprocess.run([sys.executable, str(example), "--steps", "2"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no CUDA GPU" in out.stdout and "trained 2 steps" in out.stdout and "no schedule was applied" in out.stdout
