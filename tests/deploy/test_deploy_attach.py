"""``rlclock apply`` on scripts that never import rlclock: the attachment, its step marks, and its closing lines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlclock.cli import main
from rlclock.deploy.attach import BOOT_DIR, DISCOVERY_STEPS, FOLLOWED, STALE_STEPS, StepFinder

PLAIN = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
steps, accum = int(sys.argv[1]), int(sys.argv[2])
for i in range(steps * accum):
    (model(torch.randn(8, 16)).pow(2).mean() / accum).backward()
    if (i + 1) % accum == 0:
        opt.step(); opt.zero_grad()
if len(sys.argv) > 3:
    raise RuntimeError("the script failed on purpose")
"""

GAN = """
import torch
g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
og, od = torch.optim.SGD(g.parameters(), lr=1e-2), torch.optim.SGD(d.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cpu")
for i in range(12):
    for _ in range(3):  # the critic steps three times per generator step
        d(torch.randn(2, 4)).mean().backward(); od.step(); od.zero_grad()
    loss = g(torch.randn(2, 4)).mean() * (float("inf") if i in (5, 6) else 1.0)  # two steps the scaler skips
    scaler.scale(loss).backward(); scaler.step(og); scaler.update(); og.zero_grad()
"""

EXPLICIT = """
import torch, rlclock.deploy
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
with rlclock.deploy.clocked() as clk:
    for _ in range(9):
        with clk.step():
            model(torch.randn(2, 4)).mean().backward(); opt.step(); opt.zero_grad()
"""


def _finder_marks(sequence: list[str]) -> int:
    """Marks since the finder last started again."""
    marks: list[int] = []
    finder = StepFinder(lambda: marks.append(1), marks.clear)
    optimizers = {name: object() for name in sequence}
    for name in sequence:
        finder.stepped(optimizers[name])
    return len(marks)


@pytest.mark.parametrize(
    "sequence, marks",
    [
        (["a"] * 10, 10 - DISCOVERY_STEPS + 1),  # one optimizer: a mark per step after discovery
        (["a", "b"] * 10, 10),  # two stepped alike: one mark per round (at b)
        ((["c"] * 5 + ["g"]) * 6, 6),  # a critic stepped 5x per generator step
        (["c"] * 40 + (["c"] * 5 + ["g"]) * 6, 5),  # a generator made later: marked from its 2nd step
        (["a"] * 2, 0),  # ended while discovering: no mark
        ((["c", "c", "g"]) * 4, 4),  # the rarer one marks, also if it steps last
        (["a"] * 30 + ["p"] * 5 + ["a"] * 30 + ["q"] * 5 + ["a"] * 30, 88),  # evaluation probes: the marks stay
        # a fresh inner optimizer per batch, of a size unknown here (a real small one never marks: the test below)
        ([x for i in range(40) for x in (f"x{i}",) * 3 + ("a",)], 40),
        (["a"] * 20 + ["b"] * 40, 40 - STALE_STEPS + 1),  # a new phase: the marks move on to b
    ],
)
def test_a_training_step_is_one_round_of_the_optimizers(sequence, marks):
    assert _finder_marks(sequence) == marks


def test_small_optimizers_never_mark_and_the_followed_ones_stay_few():
    import torch

    marks: list[int] = []
    finder = StepFinder(lambda: marks.append(1), marks.clear)
    model = torch.optim.SGD(torch.nn.Linear(64, 64).parameters(), lr=0.1)
    for _ in range(200):  # an adversarial perturbation with its own optimizer, made afresh for every batch
        inner = torch.optim.SGD([torch.zeros(4, requires_grad=True)], lr=0.1)
        finder.stepped(inner)
        finder.stepped(model)
        del inner
    assert finder.marking == "SGD" and finder.restarts == 0 and len(finder.counts) <= FOLLOWED
    assert len(marks) == 200 - DISCOVERY_STEPS + 1 and finder.steps_by_class() == {"SGD": 400}


@pytest.fixture
def plan_files(alternating, tmp_path):
    schedule, timeline = alternating
    schedule.save(tmp_path / "s.json")
    timeline.save(tmp_path / "t.json")
    return [
        "--schedule",
        str(tmp_path / "s.json"),
        "--timeline",
        str(tmp_path / "t.json"),
        "--latency",
        "0.006",
        "--worker",
        "thread",
        "--warmup-steps",
        "0",
    ]


def _apply(tmp_path, options, script: str, *args: str) -> int:
    (tmp_path / "train.py").write_text(script)
    return main(
        [
            "apply",
            *options,
            "--report",
            str(tmp_path / "rep.json"),
            "--",
            sys.executable,
            str(tmp_path / "train.py"),
            *args,
        ]
    )


@pytest.mark.parametrize("steps, accum", [(12, 1), (12, 4)])
def test_an_unmodified_script_gets_a_step_per_optimizer_step(no_nvml, plan_files, tmp_path, capfd, steps, accum):
    assert _apply(tmp_path, plan_files, PLAIN, str(steps), str(accum)) == 0, capfd.readouterr().err
    report = json.loads((tmp_path / "rep.json").read_text())
    assert report["steps"] == steps - DISCOVERY_STEPS + 1  # gradient accumulation does not add steps
    assert "switches issued" in capfd.readouterr().err


def test_several_optimizers_and_a_skipping_grad_scaler(no_nvml, plan_files, tmp_path, capfd):
    assert _apply(tmp_path, plan_files, GAN) == 0, capfd.readouterr().err
    assert json.loads((tmp_path / "rep.json").read_text())["steps"] == 12  # the skipped steps still mark


def test_a_script_with_its_own_deployment_keeps_it(no_nvml, plan_files, tmp_path, capfd):
    assert _apply(tmp_path, plan_files, EXPLICIT) == 0, capfd.readouterr().err
    assert json.loads((tmp_path / "rep.json").read_text())["steps"] == 9  # marked once per step, by the script


@pytest.mark.parametrize(
    "script, args, code, says",
    [
        (PLAIN, ("5", "1", "fail"), 1, "RuntimeError: the script failed on purpose"),
        ("import torch\n", (), 0, "none called an optimizer's step()"),
        ("raise SystemExit(3)\n", (), 3, "no Python process of the command reported importing torch"),
        (PLAIN, ("1", "1"), 0, "before the schedule was applied"),
    ],
)
def test_the_exit_code_is_passed_on_with_a_line_saying_what_happened(
    no_nvml, tmp_path, capfd, script, args, code, says
):
    assert _apply(tmp_path, ["--warmup-steps", "3"], script, *args) == code
    err = capfd.readouterr().err
    assert says in err and "Traceback (most recent call last)" not in err.split("rlclock apply:")[-1]


FORKED = """
import multiprocessing as mp, sys, torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
def train(n):
    for _ in range(n):
        model(torch.randn(2, 4)).mean().backward(); opt.step(); opt.zero_grad()
train(10)
child = mp.get_context("fork").Process(target=lambda: (torch.optim.SGD(model.parameters(), lr=0.1).step(), train(2)))
child.start(); child.join()
train(20)
"""

WRAPPED_SCALER = """
import torch
class Lookahead:  # a wrapper that is not an Optimizer, handed to the grad scaler
    def __init__(self, inner): self.inner = inner
    param_groups = property(lambda self: self.inner.param_groups)
    state = property(lambda self: self.inner.state)
    def step(self, closure=None): return self.inner.step(closure)
    def zero_grad(self): self.inner.zero_grad()
model = torch.nn.Linear(4, 1)
opt = Lookahead(torch.optim.SGD(model.parameters(), lr=1e-2))
scaler = torch.amp.GradScaler("cpu")
for _ in range(12):
    scaler.scale(model(torch.randn(2, 4)).mean()).backward(); scaler.step(opt); scaler.update(); opt.zero_grad()
"""


def test_a_schedule_without_a_gpu_or_a_latency_says_what_it_needs(no_nvml, plan_files, tmp_path, capfd):
    options = [o for o in plan_files if o not in ("--latency", "0.006")]
    assert main(["apply", *options, "--", sys.executable, "-c", "raise SystemExit(9)"]) == 9
    assert "no --latency" in capfd.readouterr().err


def test_a_forked_child_leaves_the_parents_deployment_alone(no_nvml, plan_files, tmp_path, capfd):
    assert _apply(tmp_path, plan_files, FORKED) == 0, capfd.readouterr().err
    report = json.loads((tmp_path / "rep.json").read_text())
    assert report["steps"] == 30 - DISCOVERY_STEPS + 1 and report["issued"] > 0  # the worker lived on
    err = capfd.readouterr().err
    assert "forked process(es) trained (SGD: 3 steps)" in err and "did not report back" not in err


def test_a_wrapper_handed_to_the_grad_scaler_is_not_a_skipped_step(no_nvml, tmp_path, capfd):
    assert _apply(tmp_path, [], WRAPPED_SCALER) == 0
    err = capfd.readouterr().err
    assert "SGD: 12 steps" in err and "skipped" not in err


def test_a_process_that_ends_without_exiting_through_python_is_said_so(no_nvml, tmp_path, capfd):
    script = PLAIN.replace("if len(sys.argv) > 3:", "import os, time\ntime.sleep(1.2)\nos._exit(4)\nif False:")
    assert _apply(tmp_path, [], script, "6", "1") == 4
    err = capfd.readouterr().err
    assert "ended without exiting through Python" in err and "AdamW: 6 steps" in err
    assert "no Python process" not in err


def test_a_signal_to_rlclock_apply_goes_on_to_the_command(no_nvml, tmp_path):
    import signal
    import subprocess
    import time

    (tmp_path / "train.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlclock", "apply", "--", sys.executable, str(tmp_path / "train.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err  # the command ended through its own handler, and its code came back


def test_without_a_gpu_the_script_runs_unchanged_and_says_so(no_nvml, tmp_path, capfd):
    assert _apply(tmp_path, [], PLAIN, "6", "1") == 0
    err = capfd.readouterr().err
    assert "no NVIDIA GPU on this machine" in err and "AdamW: 6 steps" in err and "no CUDA GPU" in err


@pytest.mark.parametrize(
    "command, says",
    [
        (["no-such-program-xyz"], "was not found on the PATH"),
        (["/"], "is a folder"),
        ([str(Path(__file__))], "is not executable"),
        ([], "no training command"),
    ],
)
def test_a_bad_command_is_one_line_before_anything_starts(no_nvml, capsys, command, says):
    assert main(["apply", "--", *command]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and err.startswith("rlclock: error:")


def test_the_shipped_policy_for_a_gpu():
    from rlclock.deploy.api import shipped_policy_for
    from rlclock.errors import DeployError

    assert shipped_policy_for("NVIDIA H100 80GB HBM3") == "corpus-h100"
    assert shipped_policy_for("NVIDIA H200") == "corpus-h200"
    with pytest.raises(DeployError, match="no shipped clock policy") as err:
        shipped_policy_for("NVIDIA L40S")
    assert "--checkpoint" in str(err.value)


def test_the_boot_folder_runs_the_sitecustomize_it_shadows(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_SITECUSTOMIZE'] = 'ran'\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(BOOT_DIR), str(other)]),
        "RLCLOCK_ATTACH_DIR": str(tmp_path / "status"),
    }
    code = "import os, sys; print(os.environ.get('SHADOWED_SITECUSTOMIZE'), 'rlclock.deploy.attach' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["ran", "True"], out.stderr


DDP = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(12):
    model(torch.randn(4, 8)).pow(2).mean().backward(); opt.step(); opt.zero_grad()
    if len(sys.argv) > 1 and dist.get_rank() == 1 and i == 6:
        raise RuntimeError("rank 1 failed on purpose")
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None, reason="no torchrun")
@pytest.mark.parametrize("fail", [False, True])
def test_torchrun_ranks_are_attached_and_a_failed_rank_is_said(no_nvml, plan_files, tmp_path, capfd, fail):
    (tmp_path / "ddp.py").write_text(DDP)
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    code = main(
        [
            "apply",
            *plan_files,
            "--report",
            str(tmp_path / "rep.json"),
            "--",
            str(torchrun),
            "--nproc-per-node",
            "2",
            str(tmp_path / "ddp.py"),
            *(["fail"] if fail else []),
        ]
    )
    err = capfd.readouterr().err
    if fail:
        assert code != 0 and "rank 1: RuntimeError: rank 1 failed on purpose" in err
    else:
        assert code == 0, err
        assert "rep.rank0.json" in err and "rep.rank1.json" in err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("accelerate", path=os.path.dirname(sys.executable)) is None, reason="no accelerate")
def test_accelerate_launch_is_attached(no_nvml, plan_files, tmp_path, capfd):
    (tmp_path / "train.py").write_text(PLAIN)
    accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable))
    code = main(
        [
            "apply",
            *plan_files,
            "--report",
            str(tmp_path / "rep.json"),
            "--",
            str(accelerate),
            "launch",
            "--num_processes",
            "1",
            "--cpu",
            str(tmp_path / "train.py"),
            "10",
            "1",
        ]
    )
    assert code == 0, capfd.readouterr().err
    assert json.loads((tmp_path / "rep.json").read_text())["steps"] == 10 - DISCOVERY_STEPS + 1
