"""The user API and its settings on a CPU: explicit schedule and timeline, inactive cases, rlclock apply's
environment overriding the script, the policy contract, wrap(), the report file."""

from __future__ import annotations

import json
import sys
import time
import types

import numpy as np
import pytest

import rlclock.deploy
from rlclock.deploy.api import Clocked, clocked, load_policy
from rlclock.deploy.settings import ACTIVE_ENV, DeploySettings
from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError
from rlclock.schedule import AUTO, ClockSchedule


def loop(clk: Clocked, n: int, step_s: float = 0.02) -> None:
    for _ in range(n):
        with clk.step():
            time.sleep(step_s)


def test_the_package_imports_lazily():
    import subprocess

    code = (
        "import sys, rlclock.deploy as d; assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'rlclock.policy' not in sys.modules; print(sorted(d.__all__)[:2])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert rlclock.deploy.ClockController.__name__ == "ClockController"
    with pytest.raises(AttributeError):
        rlclock.deploy.NoSuchThing  # noqa: B018


def test_explicit_schedule_and_timeline_run_a_plan_only_dry_run(no_nvml, alternating, tmp_path):
    schedule, timeline = alternating
    report = tmp_path / "rep.json"
    with clocked(schedule, timeline=timeline, latency_s=0.006, worker="thread", report=report, verbose=False) as clk:
        assert clk.state == "control" and clk.controller is not None and clk.controller.dry_run
        loop(clk, 6, 0.04)
    rep = clk.report
    assert rep is not None and rep.mode == "plan-only" and rep.steps == 6 and rep.issued > 10
    data = json.loads(report.read_text())
    assert data["steps"] == 6 and data["plan"]["latency_s"] == 0.006
    assert clk.close() is rep  # idempotent


def test_wrap_marks_every_call(no_nvml, alternating):
    schedule, timeline = alternating
    with clocked(schedule, timeline=timeline, latency_s=0.006, worker="thread", verbose=False) as clk:
        step = clk.wrap(lambda x: x + 1)
        assert [step(i) for i in range(3)] == [1, 2, 3]
    assert clk.report.steps == 3


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the machine without a GPU")
def test_without_a_schedule_the_shipped_policy_waits_for_the_gpu(capsys):
    with clocked() as clk:  # on a GPU the shipped policy for it would plan (rlclock.deploy.api.shipped_policy_for)
        loop(clk, 3, 0.0)
    assert clk.state == "closed" and clk.report is None and "no CUDA GPU" in clk.reason


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the machine without a GPU")
def test_without_a_gpu_a_profile_based_deployment_says_so(capsys):
    with clocked(lambda trace, t, lat: ClockSchedule.constant("auto", len(trace))) as clk:
        loop(clk, 3, 0.0)
    assert clk.report is None and "no CUDA GPU" in clk.reason
    assert "no CUDA GPU" in capsys.readouterr().err


def test_rlclock_apply_settings_override_the_script(no_nvml, alternating, tmp_path, monkeypatch):
    schedule, timeline = alternating
    schedule.save(tmp_path / "s.json")
    timeline.save(tmp_path / "t.json")
    env = (
        DeploySettings(schedule=str(tmp_path / "s.json"), timeline=str(tmp_path / "t.json"))
        .with_(latency_s=0.006, worker="thread", verbose=False)
        .to_env()
    )
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    other = ClockSchedule.constant("1410@3201", 40)
    with clocked(other, latency_s=0.5, worker="process") as clk:
        loop(clk, 2, 0.01)
    assert clk.schedule.to_dict() == schedule.to_dict()
    assert clk.settings.latency_s == 0.006 and clk.settings.worker == "thread"


def test_settings_round_trip_and_validation(monkeypatch):
    s = DeploySettings(checkpoint="ck", control_clocks=True, latency_s=0.004, warmup_steps=2, read_back=False)
    env = s.to_env()
    assert env[ACTIVE_ENV] == "1" and env["RLCLOCK_DEPLOY_READ_BACK"] == "0"
    back = DeploySettings(**DeploySettings.from_env(env))
    assert back == s and back.control_clocks
    assert DeploySettings.from_env({"RLCLOCK_DEPLOY_CHECKPOINT": "x"}) == {}  # not under rlclock apply
    with pytest.raises(DeployError, match="control mode"), pytest.warns(DeprecationWarning, match="control_clocks"):
        DeploySettings(control="maybe")  # the name before 0.2.0: still read, with a warning
    with pytest.warns(DeprecationWarning, match="lead_s"):
        assert DeploySettings(lookahead_s=0.007).lead_s == 0.007
    with pytest.raises(DeployError, match="only one"):
        DeploySettings(checkpoint="a", schedule="b")
    with pytest.raises(DeployError, match="not a valid"):
        DeploySettings.from_env({ACTIVE_ENV: "1", "RLCLOCK_DEPLOY_WARMUP_STEPS": "many"})


def test_a_checkpoint_without_the_policy_module_is_a_clear_error(no_policy_module, tmp_path):
    with pytest.raises(DeployError, match="no deployable policy") as err:
        load_policy(tmp_path)
    assert "\n" not in str(err.value) and "--schedule" in str(err.value)
    with pytest.raises(DeployError, match="no deployable policy"):
        clocked(checkpoint=tmp_path).start()


def test_the_policy_contract_is_what_the_deployment_calls(monkeypatch, tmp_path):
    calls = []

    class FakeModel:
        def __init__(self, n):
            self.tables = (np.full((n, 1), 1e-3), np.full((n, 1), 0.5))
            self.configs = (AUTO,)

    class FakePolicy:
        gpu_key, gpu_name, configs = "h200-sxm", "NVIDIA H200", ()

        @classmethod
        def load(cls, checkpoint_dir):
            calls.append(("load", str(checkpoint_dir)))
            return cls()

        def backend_for(self, trace, auto_time_s, auto_energy_j=None, latency_s=None):
            calls.append(("model", len(trace), auto_time_s.shape, auto_energy_j, latency_s))
            return FakeModel(len(trace))

        def schedule(self, trace, backend=None, search=False, power_limits=True, execution=None):
            calls.append(("schedule", len(trace), type(backend).__name__, search, power_limits, execution))
            return ClockSchedule.constant("auto", len(trace))

    module = types.ModuleType("rlclock.policy")
    module.ClockPolicy = FakePolicy
    monkeypatch.setitem(sys.modules, "rlclock.policy", module)
    monkeypatch.setattr(rlclock.deploy, "policy", module, raising=False)
    clk = clocked(checkpoint=tmp_path, verbose=False)
    clk.start()
    assert calls == [("load", str(tmp_path))]
    from rlclock.workload.llmc import gpt3xl_step

    trace = gpt3xl_step()
    sched = clk._policy_schedule(trace, np.full(len(trace), 1e-3), 0.006)
    assert calls[-2] == ("model", len(trace), (len(trace),), None, 0.006)  # the planning model, priced once
    assert len(sched) == len(trace) and calls[-1] == (
        "schedule",
        len(trace),
        "FakeModel",
        True,
        True,
        None,
    )  # the search by default; no timeline to execute on
    assert clk.costs.n == len(trace) and clk.costs.configs == (AUTO,)  # kept for the delivered figures
    assert clk._latency_s() in (None, 0.006)  # the H200 preset's latency when NVML cannot name the GPU
    clk.close()
    fast = clocked(checkpoint=tmp_path, verbose=False, search=False)
    fast.start()
    fast._policy_schedule(trace, np.full(len(trace), 1e-3), 0.006)
    assert calls[-1][3] is False  # the fast path asked for is passed on to the policy
    fast.close()
    clocks_only = clocked(checkpoint=tmp_path, verbose=False, power_limit=False)
    clocks_only.start()
    clocks_only._policy_schedule(trace, np.full(len(trace), 1e-3), 0.006)
    assert calls[-1][4] is False  # so is a plan of clocks only (rlclock apply --no-power-limit)
    clocks_only.close()
    timed = clocked(
        checkpoint=tmp_path,
        verbose=False,
        timeline=StepTimeline.from_durations(np.full(len(trace), 1e-3)),
        lead_s=0.007,
    )
    timed.start()
    timed._policy_schedule(trace, np.full(len(trace), 1e-3), 0.006)
    execution = calls[-1][-1]  # with a timeline, plans are judged as the controller executes them on it
    assert execution.rule.latency_s == 0.006 and execution.rule.lead_s == 0.007 and execution.n == len(trace)
    timed.close()


def test_a_real_policy_checkpoint_schedules_a_profiled_step(tmp_path):
    policy = pytest.importorskip("rlclock.policy")
    from test_deploy_capture import Export, normal_step

    from rlclock.deploy.capture import profile_from_chrome
    from rlclock.dvfs.spec import get_spec
    from rlclock.observation.layout import obs_size
    from rlclock.observation.lookahead import n_slots
    from rlclock.schedule import ClockConfig

    configs = [ClockConfig(), ClockConfig(None, 3201), ClockConfig(1380, 3201), ClockConfig(1980, 3201)]
    slots = n_slots(configs)
    n, rng = obs_size(4, slots), np.random.default_rng(0)
    weights = policy.PolicyWeights(
        ((rng.normal(size=(16, n)) * 0.1, np.zeros(16)),),
        (rng.normal(size=(slots + 1, 16)) * 0.1, np.zeros(slots + 1)),
        "tanh",
    )  # + keep
    policy.save_checkpoint(tmp_path, weights, policy.policy_meta(get_spec("h200-sxm"), configs, 4, n, 0.006, 0.01, {}))
    x = Export()
    for k in range(4):
        normal_step(x, 1000.0 * k)
    prof = profile_from_chrome(x.data(), "NVIDIA H200")
    clk = clocked(checkpoint=tmp_path, verbose=False).start()
    sched = clk._policy_schedule(prof.trace, prof.auto_time_s, 0.006)
    assert len(sched) == len(prof.trace) and set(sched.configs) <= set(configs)
    clk.close()


def test_anchor_spacing_reaches_the_controller_and_rlclock_apply_can_set_it(no_nvml, alternating, monkeypatch):
    schedule, timeline = alternating
    with clocked(
        schedule,
        timeline=timeline,
        latency_s=0.006,
        worker="thread",
        anchor_every=3,
        time_all_steps=True,
        verbose=False,
    ) as clk:
        assert clk.controller.anchor_every == 3 and clk.controller.time_all_steps
        loop(clk, 7, 0.01)
    assert clk.report.anchored == 3 and clk.report.timed == 7
    env = DeploySettings(anchor_every=5, time_all_steps=True, search=True).to_env()
    assert env["RLCLOCK_DEPLOY_ANCHOR_EVERY"] == "5" and env["RLCLOCK_DEPLOY_TIME_ALL_STEPS"] == "1"
    assert DeploySettings(**DeploySettings.from_env(env)) == DeploySettings(
        anchor_every=5, time_all_steps=True, search=True
    )
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert clocked(schedule, timeline=timeline, anchor_every=2).settings.anchor_every == 5
    for bad in (0, 2.5):
        with pytest.raises(DeployError, match="anchor_every"):
            DeploySettings(anchor_every=bad)


def test_one_definition_of_the_deploy_options():
    """The apply flags are made from DeploySettings' fields (one each), parse into the same settings, and
    clocked() takes exactly those options."""
    import argparse

    from rlclock.commands import apply

    parser = argparse.ArgumentParser()
    apply.register(parser.add_subparsers())
    sub = parser._subparsers._group_actions[0].choices["apply"]
    dests = {a.dest for a in sub._actions} - {"help", "cmd"}
    assert dests == set(DeploySettings.options())
    assert "95 % confidence interval" in " ".join(sub.format_help().split())  # a literal % does not break --help
    args = parser.parse_args(
        [
            "apply",
            "--checkpoint",
            "gpt3xl-h200",
            "--control-clocks",
            "--latency",
            "0.004",
            "--warmup-steps",
            "2",
            "--no-read-back",
            "--anchor-every",
            "5",
            "--no-search",
            "--quiet",
            "--compare-blocks",
            "10",
            "--",
            "python",
            "train.py",
        ]
    )
    got = DeploySettings.from_args(args)
    assert got == DeploySettings(
        checkpoint="gpt3xl-h200",
        control_clocks=True,
        latency_s=0.004,
        warmup_steps=2,
        read_back=False,
        anchor_every=5,
        search=False,
        verbose=False,
        compare_blocks=10,
    )
    with pytest.raises(DeployError, match="warmup_steps"):
        DeploySettings.from_args(parser.parse_args(["apply", "--schedule", "s.json", "--warmup-steps", "-1", "--"]))
    with pytest.raises(DeployError, match=r"unknown option.*latency"):
        clocked(ClockSchedule.constant("auto", 4), latency=0.006)


class _FakeProfiler:
    """Stands in for capture.StepProfiler on a CPU: counts its marks, returns a two-kernel profile."""

    def __init__(self) -> None:
        self.marks = 0

    def start(self) -> None:
        self.marks = 1

    def mark(self) -> None:
        self.marks += 1

    def stop(self) -> dict:
        from rlclock.deploy.capture import STEP_RANGE

        events = []
        for s in range(self.marks):  # 10 ms steps; the profiler leaves the GPU idle 6 ms of each
            t0 = 10_000.0 * s
            events.append(
                {"ph": "X", "cat": "user_annotation", "name": STEP_RANGE, "ts": t0, "dur": 10_000.0, "tid": 1}
            )
            for j, (start, dur) in enumerate(((1000.0, 2000.0), (6000.0, 2000.0))):
                corr = 100 * s + j
                events.append(
                    {
                        "ph": "X",
                        "cat": "cuda_runtime",
                        "name": "cudaLaunchKernel",
                        "ts": t0 + 10 * j,
                        "dur": 2,
                        "tid": 1,
                        "args": {"correlation": corr},
                    }
                )
                events.append(
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": f"k{j}",
                        "ts": t0 + start,
                        "dur": dur,
                        "tid": 7,
                        "args": {"correlation": corr},
                    }
                )
        return {"traceEvents": events}


def test_after_profiling_the_steps_are_timed_and_the_timeline_fitted_to_them(no_nvml, monkeypatch):
    import torch

    import rlclock.deploy.api as api
    import rlclock.deploy.capture as capture

    profiler = _FakeProfiler()
    marks: list[int] = []

    class Timer:
        def __init__(self, steps: int) -> None:
            assert steps == 4

        def mark(self) -> None:
            marks.append(len(marks))

        def period_s(self) -> float:
            return 0.006  # the step runs in 6 ms without the profiler

        def located(self, names):
            return None  # no step located: the operator profile's timeline is fitted

    monkeypatch.setattr(api, "cuda_present", lambda: True)
    monkeypatch.setattr(capture, "StepProfiler", lambda: profiler)
    monkeypatch.setattr(capture, "StepTimer", Timer)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU", raising=False)
    seen = {}

    def builder(trace, auto_time_s, latency_s):
        seen["kernels"] = len(trace)
        return ClockSchedule.constant("auto", len(trace))

    clk = clocked(builder, warmup_steps=1, profile_steps=3, timing_steps=4, latency_s=0.001, device=0, verbose=False)
    with clk:
        states = []
        for _ in range(12):
            with clk.step():
                states.append(clk.state)
    assert states[:8] == ["warmup"] + ["profile"] * 3 + ["timing"] * 4 and states[8] == "control"
    assert len(marks) == 5 and seen["kernels"] == 2  # the timer marks the start and each of the 4 timed steps
    tl = clk.timeline
    assert tl.period_s == pytest.approx(0.006) and tl.duration_s.tolist() == pytest.approx([0.002, 0.002])
    # 6 ms of the profiled 10 were idle (1 before, 3 between, 2 after the kernels); 2 ms remain: a third
    assert tl.start_s.tolist() == pytest.approx([0.001 / 3, 0.001 / 3 + 0.002 + 0.001])
    assert clk.profile.trace.meta["profiled_period_s"] == pytest.approx(0.010)
    assert clk.report is not None and clk.report.steps == 12 - 1 - 3 - 4
    assert "no step was located" in " ".join(clk.profile.notes)


def test_timing_steps_zero_plans_on_the_profiled_period(no_nvml, monkeypatch):
    import torch

    import rlclock.deploy.api as api
    import rlclock.deploy.capture as capture

    monkeypatch.setattr(api, "cuda_present", lambda: True)
    monkeypatch.setattr(capture, "StepProfiler", _FakeProfiler)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU", raising=False)
    clk = clocked(
        lambda t, a, lat: ClockSchedule.constant("auto", len(t)),
        warmup_steps=0,
        profile_steps=3,
        timing_steps=0,
        latency_s=0.001,
        device=0,
        verbose=False,
    )
    with clk:
        for _ in range(6):
            with clk.step():
                pass
    meta = clk.profile.trace.meta
    assert clk.timeline.period_s == pytest.approx(0.010) == meta["step_period_s"] and "profiled_period_s" not in meta


def test_watch_marks_a_point_at_every_block_forward_and_backward(no_nvml, alternating):
    torch = pytest.importorskip("torch")
    schedule, tl = alternating
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)]))
    points = (5, 10, 15, 25, 30, 35)  # three blocks forward, three backward
    timeline = StepTimeline(tl.start_s, tl.duration_s, tl.period_s, points=points)
    with clocked(schedule, timeline=timeline, latency_s=0.006, worker="thread", verbose=False) as clk:
        remove = clk.watch(model)
        for _ in range(4):
            with clk.step():
                x = model[0](torch.ones(2, 4))
                for block in model[1]:
                    x = block(x)
                x.sum().backward()
        remove()
        with clk.step():  # no hooks any more: no points
            model[1][0](torch.ones(2, 4))
    log = clk.controller.anchor_log
    assert [(s, j) for s, j, _ in log.points] == [(s, j) for s in range(4) for j in range(6)]
    assert clk.controller.worker_result["points"] > 0  # the worker re-timed switches from them
    with pytest.raises(DeployError, match="ModuleList"):
        clk.watch(torch.nn.Linear(2, 2))
    with pytest.raises(DeployError, match="every"):
        clk.watch(model, every=0)


def test_watch_every_kth_block(no_nvml, alternating):
    torch = pytest.importorskip("torch")
    schedule, tl = alternating
    blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(4)])
    timeline = StepTimeline(tl.start_s, tl.duration_s, tl.period_s, points=(10, 20, 30, 35))
    with clocked(schedule, timeline=timeline, latency_s=0.006, worker="thread", verbose=False) as clk:
        clk.watch(blocks, blocks=blocks, every=2)  # blocks 0 and 2, forward and backward: 4 points
        with clk.step():
            x = torch.ones(2, 4, requires_grad=True)
            for block in blocks:
                x = block(x)
            x.sum().backward()
    assert [(s, j) for s, j, _ in clk.controller.anchor_log.points] == [(0, j) for j in range(4)]


def test_learn_makes_candidate_plans_and_chooses_every_step_from_the_step_times(no_nvml, monkeypatch, tmp_path):
    """``learn``: after profiling, the candidate plans are made on the checkpoint's planning model, the controller
    gets them all, and every controlled step's plan is the tracker's choice, read from the step times (here the host
    clock: no CUDA); what it committed to is in ``clk.learned``, the report and the save folder."""
    import torch

    import rlclock.deploy.api as api
    import rlclock.deploy.capture as capture

    class Timer:
        def __init__(self, steps: int) -> None:
            pass

        def mark(self) -> None:
            pass

        def period_s(self) -> float:
            return 0.006

        def located(self, names):
            return None

    monkeypatch.setattr(api, "cuda_present", lambda: True)
    monkeypatch.setattr(capture, "StepProfiler", _FakeProfiler)
    monkeypatch.setattr(capture, "StepTimer", Timer)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU", raising=False)
    import rlclock.deploy.learn as learn
    from rlclock.policy.paired import Candidates

    made = {}

    def candidates(model, budgets, time_limit_s, extra=()):  # the profile's two kernels carry no work: plans made
        made["kernels"], made["extra"] = len(model.trace), [label for label, _ in extra]  # up here
        plans = [np.zeros(2, dtype=np.int64), np.array([1, 0]), np.array([1, 1])]
        return Candidates(
            plans,
            ["auto", "0.5 %", "2 %"],
            np.array([0.0, 0.004, 0.02]),
            np.array([0.0, 0.05, 0.1]),
            np.array([[0.0, 0.0], [0.004, 0.0], [0.02, 0.0]]),
        )

    monkeypatch.setattr(learn, "candidate_plans", candidates)
    chosen: list[list[int]] = []
    clk = clocked(
        checkpoint="gpt3xl-h200",
        learn=True,
        budget=0.01,
        warmup_steps=1,
        profile_steps=2,
        timing_steps=2,
        device=0,
        verbose=False,
        save=str(tmp_path / "out"),
    )
    with clk:
        for _ in range(60):
            with clk.step():
                time.sleep(0.002)
            if clk.controller is not None and not chosen:

                def spy(pattern, from_step=None, real=clk.controller.set_pattern):
                    chosen.append(list(pattern))
                    return real(pattern, from_step)

                monkeypatch.setattr(clk.controller, "set_pattern", spy)
    learned = clk.learned
    assert learned is not None and learned["steps"] == 60 - 1 - 2 - 2
    assert made["kernels"] == 2 and learned["plans"] == ["auto", "0.5 %", "2 %"] and len(clk.alternatives) == 2
    assert made["extra"] == ["policy at 1 %"]  # the policy's own plan is offered as a candidate
    assert sum(learned["ran"]) == learned["steps"] and learned["read"] == learned["steps"] - 3
    assert len(chosen) == learned["steps"] - 1 and all(len(p) == 1 for p in chosen)
    assert {p[0] for p in chosen} <= set(range(len(learned["plans"])))
    assert any(p[0] == 0 for p in chosen)  # auto runs every few steps: the reference of the paired readings
    assert any("learned over" in n for n in clk.report.notes)
    assert json.loads((tmp_path / "out" / "learn.json").read_text())["steps"] == learned["steps"]
    assert (tmp_path / "out" / "step.plan1.schedule.json").is_file()


def test_learn_needs_a_checkpoint():
    with pytest.raises(DeployError, match="checkpoint"):
        DeploySettings(schedule="a.json", learn=True)
