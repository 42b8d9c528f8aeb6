"""What the callbacks share, without a framework: the session's life (open, steps, close, close once), the close
at the interpreter's exit when no framework event said that training ended, and the installation without the
frameworks (``import rlclock`` imports none of them; a missing one is a one-line error naming the extra)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlclock.errors import DeployError
from rlclock.integrations.session import MissingFrameworkError, TrainingSession

ROOT = Path(__file__).resolve().parents[2]


def test_a_session_marks_steps_and_closes_once(no_nvml, plan_options):
    session = TrainingSession(**plan_options)
    session.begin_step()  # before training began: nothing to mark
    assert session.steps == 0 and session.clocked is None and session.close() is None
    session.open()
    assert session.active and session.clocked.state == "control"
    for _ in range(3):
        session.begin_step()
        time.sleep(0.01)
        session.end_step()
    report = session.close()
    assert report is not None and report.steps == 3 and session.steps == 3 and not session.active
    assert session.close() is report and session.close(RuntimeError("late")) is report  # idempotent
    session.open()  # a second training run: a new deployment, steps counted afresh
    assert session.report is None and session.steps == 0 and session.active
    session.begin_step()
    assert session.close().steps == 1


def test_an_error_while_closing_after_a_failure_does_not_hide_the_failure(no_nvml, plan_options, capsys, monkeypatch):
    session = TrainingSession(**{**plan_options, "verbose": True})
    session.open()
    session.begin_step()

    def broken_close(clk):
        real = clk.close

        def close():
            real()  # the controller stops; then closing fails
            raise DeployError("the worker did not answer.")

        monkeypatch.setattr(clk, "close", close)

    broken_close(session.clocked)
    assert session.close(RuntimeError("boom")) is None  # printed, not raised: the RuntimeError is what propagates
    err = capsys.readouterr().err
    assert "training stopped with RuntimeError after 1 optimizer steps" in err
    assert "closing the deployment after RuntimeError failed too: the worker did not answer." in err
    session.open()
    broken_close(session.clocked)
    with pytest.raises(DeployError, match="did not answer"):  # without a failure, the error is the news
        session.close()


SCRIPT = """
import time
from rlclock.deploy.timeline import StepTimeline
from rlclock.integrations.session import TrainingSession
from rlclock.schedule import ClockSchedule

session = TrainingSession(ClockSchedule(["1980@3201", "1410@3201"], [0] * 10 + [1] * 10),
                          timeline=StepTimeline.from_durations([1e-3] * 20), latency_s=0.006, worker="thread",
                          report={report!r})
session.open()
for step in range(5):
    session.begin_step()
    time.sleep(0.01)
    if step == 3:
        raise RuntimeError("boom in the fourth step")
    session.end_step()
"""


def test_an_uncaught_exception_closes_the_deployment_at_the_interpreters_exit(no_nvml, tmp_path):
    report = tmp_path / "report.json"
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT.format(report=str(report)))],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 1 and "RuntimeError: boom in the fourth step" in out.stderr
    assert "the interpreter is exiting after 4 optimizer steps" in out.stderr
    assert json.loads(report.read_text())["steps"] == 4


FRAMELESS = """
import sys
for name in ("transformers", "lightning", "pytorch_lightning"):
    sys.modules[name] = None  # not installed
import rlclock, rlclock.integrations
assert sorted(rlclock.integrations.__all__)
heavy = [m for m in ("torch", "transformers", "lightning", "pytorch_lightning") if sys.modules.get(m) is not None]
assert not heavy, heavy
for module in ("rlclock.integrations.hf", "rlclock.integrations.lightning"):
    try:
        __import__(module)
    except ImportError as exc:
        print(type(exc).__name__, exc)
"""


def test_rlclock_installs_and_imports_without_the_frameworks():
    out = subprocess.run([sys.executable, "-c", FRAMELESS], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == [
        "MissingFrameworkError rlclock.integrations.hf (the Hugging Face Trainer callback) needs the transformers "
        "package, which is not installed. Fix: pip install 'rlclock[hf]'.",
        "MissingFrameworkError rlclock.integrations.lightning (the Lightning callback) needs the lightning or "
        "pytorch_lightning package, which is not installed. Fix: pip install 'rlclock[lightning]'.",
    ]
    assert issubclass(MissingFrameworkError, DeployError) and issubclass(MissingFrameworkError, ModuleNotFoundError)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"latency": 0.006}, "unknown option"),
        ({"watch": 0}, "watch"),
        ({"watch": -2}, "watch"),
        ({"watch": 1.5}, "watch"),
        ({"watch": "yes"}, "watch"),
    ],
)
def test_bad_arguments_fail_when_the_session_is_made(kwargs, match):
    with pytest.raises(DeployError, match=match):
        TrainingSession(**kwargs)
