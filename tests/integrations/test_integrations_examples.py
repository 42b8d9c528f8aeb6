"""The examples run on a CPU, in this process (their frameworks are imported once for the whole file): plainly
(the deployment says it is inactive: no CUDA), with a saved schedule and timeline (a dry run without NVML over the
script's optimizer steps), and with the environment ``rlclock apply`` gives its command."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning"),  # Lightning's, under a newer torch
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FRAMEWORK = {"train_hf": "transformers", "train_lightning": "lightning.pytorch"}


def example(name: str):
    pytest.importorskip(FRAMEWORK[name])
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def saved_plan(plan, tmp_path):
    schedule, timeline = plan
    schedule.save(tmp_path / "s.json")
    timeline.save(tmp_path / "t.json")
    return str(tmp_path / "s.json"), str(tmp_path / "t.json")


@pytest.mark.parametrize("name", sorted(FRAMEWORK))
def test_plainly_on_a_cpu_the_deployment_says_it_is_inactive(name, capsys):
    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    clock = example(name).main(["--steps", "3"])
    err = capsys.readouterr()
    assert clock.steps == 3 and clock.report is None and "no CUDA GPU" in clock.clocked.reason
    assert "rlclock: no CUDA GPU" in err.err and f"{name}: 3 optimizer steps" in err.out
    assert clock.clocked.settings.checkpoint is None  # the shipped policy for the GPU is chosen once one is found


@pytest.mark.parametrize("name", sorted(FRAMEWORK))
def test_a_saved_plan_runs_a_plan_only_dry_run_over_the_optimizer_steps(name, no_nvml, saved_plan, tmp_path):
    schedule, timeline = saved_plan
    report = tmp_path / "report.json"
    clock = example(name).main(
        [
            "--steps",
            "4",
            "--accumulate",
            "3",
            "--schedule",
            schedule,
            "--timeline",
            timeline,
            "--latency",
            "0.006",
            "--report",
            str(report),
        ]
    )
    assert clock.steps == 4 and clock.report.mode == "plan-only" and clock.report.steps == 4
    assert json.loads(report.read_text())["steps"] == 4


@pytest.mark.parametrize("name", sorted(FRAMEWORK))
def test_under_rlclock_apply_the_commands_options_apply(name, no_nvml, saved_plan, tmp_path, monkeypatch):
    from rlclock.commands import apply
    from rlclock.deploy.settings import DeploySettings

    schedule, timeline = saved_plan
    parser = argparse.ArgumentParser()
    apply.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "apply",
            "--schedule",
            schedule,
            "--timeline",
            timeline,
            "--latency",
            "0.006",
            "--worker",
            "thread",
            "--report",
            str(tmp_path / "apply.json"),
            "--",
            "python",
            f"examples/{name}.py",
        ]
    )
    for k, v in DeploySettings.from_args(args).to_env().items():
        monkeypatch.setenv(k, v)
    clock = example(name).main(["--steps", "3"])  # the script names the shipped policy; the command overrides it
    assert clock.clocked.settings.checkpoint is None and clock.clocked.settings.schedule == schedule
    assert clock.report.steps == 3 and json.loads((tmp_path / "apply.json").read_text())["steps"] == 3
