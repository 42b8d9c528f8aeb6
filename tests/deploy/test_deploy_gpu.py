"""On a CUDA GPU (skipped without one): step anchors from CUDA events, and the whole deployment of a small
model's training loop — profile, schedule, dry-run controller, report. Nothing here sets a clock."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rlclock.deploy.api import clocked
from rlclock.deploy.timeline import StepTimeline
from rlclock.schedule import ClockConfig, ClockSchedule

pytestmark = pytest.mark.gpu


def _sleep_cycles(seconds: float) -> int:
    """GPU clock cycles that ``torch.cuda._sleep`` spins for about ``seconds`` (measured with CUDA events)."""
    import torch

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    b.synchronize()
    return int(10_000_000 * seconds / (a.elapsed_time(b) / 1e3))


@pytest.mark.parametrize("anchor_every", [1, 4])
def test_anchors_follow_the_gpu_not_the_host(anchor_every):
    import torch

    torch.cuda.init()
    cycles = _sleep_cycles(0.01)
    timeline = StepTimeline.from_durations(np.full(10, 1e-3))
    schedule = ClockSchedule.constant("auto", 10)
    with clocked(schedule, timeline=timeline, latency_s=0.006, anchor_every=anchor_every, verbose=False) as clk:
        assert clk.controller.anchor_source == "cuda" and clk.controller.anchor_every == anchor_every
        for _ in range(30):  # the host queues 30 steps far ahead of the GPU (more marks than the event pool)
            with clk.step():
                torch.cuda._sleep(cycles)
        host_done = time.monotonic()
        torch.cuda.synchronize()
    rep = clk.report
    assert rep.steps == 30 and rep.anchor_source == "cuda" and rep.anchored == len(range(0, 30, anchor_every))
    assert rep.step_time_s == pytest.approx(0.01, rel=0.3)  # the GPU's step time, not the host's queueing time
    log = clk.controller._anchors.log
    assert log.step == list(range(0, 30, anchor_every)) and not log.errors
    anchors = log.final_anchors_s()
    # the last anchor is where the GPU reached the last anchored step, long after the host had queued everything
    assert anchors[-1] - anchors[0] == pytest.approx(log.step[-1] * rep.step_time_s, rel=0.05)
    assert anchors[-1] > host_done + 0.1
    assert rep.anchor_delay.median_s < 5e-3
    assert np.nanmedian(log.busy_s) == pytest.approx(0.01, rel=0.3)  # end marks of the anchored steps


def _tiny_model():
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024), nn.LayerNorm(1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(2048, 1024, device="cuda")
    return model, opt, x


def _train(clk, model, opt, x, steps: int) -> None:
    """``steps`` training steps of the tiny model, each marked for the deployment."""
    import torch

    for _ in range(steps):
        with clk.step():
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def test_profile_build_and_dry_run_on_a_real_loop(tmp_path):

    model, opt, x = _tiny_model()
    seen = {}

    from rlclock.gpu.nvml import NvmlDevice

    table = NvmlDevice(0).supported_clocks()
    mem = max(table)
    cores = sorted(table[mem])
    lower = ClockConfig(cores[len(cores) // 2], mem)  # a supported clock pair: the dry run validates it

    def builder(trace, auto_time_s, latency_s):
        seen.update(n=len(trace), latency=latency_s, cats={k.category for k in trace})
        return ClockSchedule.from_configs(["auto" if k.uses_tensor_cores else lower for k in trace], "test")

    with clocked(
        builder,
        warmup_steps=2,
        profile_steps=4,
        latency_s=0.006,
        save=tmp_path,
        report=tmp_path / "rep.json",
        verbose=False,
    ) as clk:
        _train(clk, model, opt, x, 20)
    assert seen["n"] > 5 and seen["latency"] == 0.006 and "gemm" in seen["cats"]
    prof = clk.profile
    assert prof is not None and prof.steps_used >= 2 and len(prof.trace) == seen["n"]
    assert {k.phase for k in prof.trace} >= {"forward", "backward"}
    assert prof.timeline.period_s > 0 and np.all(np.diff(prof.timeline.start_s) >= 0)
    assert any(k.flops > 0 for k in prof.trace if k.category == "gemm")
    assert all(k.launch_op is not None for k in prof.trace if not k.name.startswith(("Memset", "Memcpy")))
    running = prof.trace.meta["step_period_s"]  # 8 steps timed without the profiler; the timeline fits them
    assert prof.timeline.period_s == pytest.approx(running, rel=1e-6) and running > 0
    assert prof.trace.meta["located_period_s"] > 0 and "steps located" in " ".join(prof.notes)
    rep = clk.report
    assert rep is not None and rep.steps == 20 - 2 - 4 - 8 and rep.mode in ("dry-run", "plan-only")
    for name in ("step.trace.json", "step.timeline.json", "step.schedule.json", "rep.json"):
        assert (tmp_path / name).is_file()


def test_learn_on_a_real_loop_in_observe_mode(tmp_path):
    """``learn`` over a real loop: candidate plans made on the H200 checkpoint's planning model from the profiled
    step, every step's plan chosen from CUDA-event step times, nothing set (dry run)."""
    import torch

    from rlclock.gpu.nvml import NvmlDevice

    if NvmlDevice(0).name != "NVIDIA H200":
        pytest.skip("the shipped learning test plans on the H200 checkpoint")
    model, opt, x = _tiny_model()
    x = x.to(torch.bfloat16)
    model = model.to(torch.bfloat16)
    with clocked(
        checkpoint="gpt3xl-h200", learn=True, warmup_steps=2, profile_steps=4, save=tmp_path, verbose=False
    ) as clk:
        _train(clk, model, opt, x, 150)
    learned = clk.learned
    assert learned is not None and learned["steps"] == 150 - 2 - 4 - 8 and learned["plans"][0] == "auto"
    assert learned["read"] == learned["steps"] - 3 and sum(learned["ran"]) == learned["steps"]
    assert len(learned["plans"]) == len(clk.alternatives) + 1
    if len(learned["plans"]) > 1:  # auto as the reference, and plans tried
        assert learned["ran"][0] > 0 and sum(learned["ran"][1:]) > 0
    else:  # the planning model found nothing to save on this small fp32 step: auto only
        assert learned["ran"][0] == learned["steps"] and learned["committed"]["label"] == "a0"
    assert 0 < learned["median_step_s"] < 1.0
    assert clk.report is not None and clk.report.mode in ("dry-run", "plan-only")
    assert (tmp_path / "learn.json").is_file()


def test_a_power_limit_schedule_in_a_dry_run_on_the_gpu_sets_nothing():
    """A schedule that names a whole-job power limit, applied in a dry run on the real GPU: the worker's clock
    control validates it against the range NVML reports, records it and sets nothing; the report says so."""
    import torch

    from rlclock.deploy.controller import ClockController
    from rlclock.gpu.nvml import NvmlDevice

    dev = NvmlDevice(0)
    before = dev.power_limit_w()
    lo, hi = dev.power_limit_range_w()
    timeline = StepTimeline.from_durations(np.full(10, 1e-3))
    schedule = ClockSchedule.constant("auto", 10, power_limit_w=round((lo + hi) / 2))
    cycles = _sleep_cycles(0.01)
    with ClockController(schedule, timeline, latency_s=0.006) as ctl:
        for _ in range(5):
            ctl.step()
            torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
    rep = ctl.report
    assert rep.mode == "dry-run" and rep.power_limit is not None and not rep.power_limit["applied"]
    assert rep.power_limit["found_w"] == pytest.approx(before) and "dry run: not set" in rep.text()
    assert dev.power_limit_w() == before
