"""The paired tracker over a real training loop on this machine's GPU: the deployment's controller runs the plan the
tracker picks for each step (dry run unless ``--control-clocks``: every request recorded, nothing set), each step
timed with CUDA events, NVML's energy counter read after every step.

For each model (``benchmarks/corpus_gpu.py``'s real training steps: loss, backward, fused AdamW) it profiles the
step as ``rlclock apply --save`` does, makes the candidate plans on the planning model (the simulated GPU anchored
on the profiled kernel times: :func:`rlclock.agents.online.candidate_plans`), and runs the loop for ``--seconds``
with :class:`~rlclock.agents.online.PairedTracker` choosing each step's plan one step ahead
(``Clocked.set_pattern``), told every step's time two steps later (when its events have surely completed).

In the dry run nothing the plans ask for happens, so every plan's true slowdown is zero: what the tracker reads is
the real loop's noise alone — the check of what ``rlclock.agents.measured`` assumes of it (readings unbiased,
their standard error right, the safety layer's bounds closing in) and of the windowed energy. With
``--control-clocks`` on a GPU whose clocks a user may set, the same run learns for real.

    python benchmarks/online_h200.py --out data/h200-online-observe.json        # on the GPU, dry run
    python benchmarks/online_h200.py --report data/h200-online-observe.json     # the table again
    python benchmarks/online_h200.py --null-plans --out data/h200-online-null.json  # plans that are auto in disguise
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import itertools
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

MODELS = ("train-small-gpt", "bert-base", "llama-0.5b-mha")
BUDGET = 0.01
LAG_STEPS = 2
"""Steps after which a step's CUDA events are read (done by then in any loop that keeps the GPU busy)."""


def candidate_schedules(trace_path: Path) -> tuple[Any, list[Any]]:
    """The candidate plans for the profiled step and their schedules (plan 0 is auto)."""
    import numpy as np

    from rlclock.agents.online import candidate_plans
    from rlclock.backends.simulated import SimulatedGpu
    from rlclock.config import load_env_spec
    from rlclock.deploy.learn import LEARN_BUDGETS, PLAN_TIME_LIMIT_S
    from rlclock.schedule import ClockSchedule
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace, Measurement

    env = load_env_spec("gpt3xl-h200")
    gpu, configs = env.gpu, env.configs()
    trace = refresh_costs(KernelTrace.load(trace_path))
    trace = trace.with_kernels(
        [replace(k, measured=(Measurement(gpu=gpu.key, time_s=k.measured[0].time_s, source="profile"),)) for k in trace]
    )
    cand = candidate_plans(
        SimulatedGpu(gpu, trace, configs, env.latency_s, anchor=True),
        budgets=LEARN_BUDGETS,
        time_limit_s=PLAN_TIME_LIMIT_S,
    )
    schedules = [
        ClockSchedule(configs, np.asarray(p, dtype=np.int64).tolist(), name=label)
        for p, label in zip(cand.plans, cand.labels, strict=True)
    ]
    return cand, schedules


def training_step(name: str) -> tuple[Any, Any]:
    """The model and a function running one full training step of it."""
    from corpus_gpu import build, hf_models, small_gpt, trainer

    if name == "train-small-gpt":
        model, batch, loss = small_gpt()
        return model, trainer(model, batch, loss)
    config, shape = hf_models()[name]
    model, batch, _ = build(name, config, shape)
    return model, trainer(model, batch)


def profiled_candidates(step: Any) -> tuple[Any, Any, list[Any], float, float]:
    """The step profiled as ``rlclock apply --save`` does, and the candidate plans for it: ``(timeline,
    candidates, schedules, profile seconds, planning seconds)``."""
    from corpus_gpu import profiled

    from rlclock.deploy.timeline import StepTimeline

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        profiled(step, folder)
        profile_s = time.perf_counter() - t0
        timeline = StepTimeline.load(folder / "step.timeline.json")
        t0 = time.perf_counter()
        cand, schedules = candidate_schedules(folder / "step.trace.json")
        return timeline, cand, schedules, profile_s, time.perf_counter() - t0


def step_overhead(name: str, seconds: float) -> dict[str, Any]:
    """The median step of the loop bare, under the controller with one plan, with a pattern set every step (two
    plans alternating), and with the tracker choosing — what running a plan chosen per step costs the loop."""
    import numpy as np
    import torch

    import rlclock.deploy
    from rlclock.agents.online import PairedTracker

    model, step = training_step(name)
    timeline, cand, schedules, _, _ = profiled_candidates(step)
    out: dict[str, Any] = {}
    for mode in ("bare", "one plan", "pattern", "tracker", "bare again"):
        events: list[Any] = []
        ran: list[int] = []
        arm = 0
        tracker = PairedTracker(BUDGET, list(cand.slowdown), list(cand.saving), cand.parts)
        top = len(schedules) - 1
        ctx = (
            contextlib.nullcontext()
            if mode.startswith("bare")
            else rlclock.deploy.clocked(
                schedules[0], timeline=timeline, alternatives=schedules[1:], verbose=False, time_all_steps=True
            )
        )
        with ctx as clk:
            t_end, k = time.perf_counter() + seconds, 0
            while time.perf_counter() < t_end:
                with clk.step() if clk is not None else contextlib.nullcontext():
                    ev = torch.cuda.Event(enable_timing=True)
                    ev.record()
                    step()
                events.append(ev)
                ran.append(arm)
                if mode == "pattern":
                    clk.set_pattern([top if k % 2 == 0 else 0], from_step=k + 1)
                elif mode == "tracker":
                    arm = tracker.next_arm()
                    clk.set_pattern([arm], from_step=k + 1)
                    if len(events) > LAG_STEPS:
                        events[-LAG_STEPS].synchronize()
                        tracker.observe(
                            ran[-LAG_STEPS - 1], events[-LAG_STEPS - 1].elapsed_time(events[-LAG_STEPS]) * 1e-3
                        )
                k += 1
            torch.cuda.synchronize()
        times = [a.elapsed_time(b) * 1e-3 for a, b in itertools.pairwise(events)]
        out[mode] = {"steps": len(times), "median_s": float(np.median(times)), "mean_s": float(np.mean(times))}
    del model
    torch.cuda.empty_cache()
    return out


def null_schedules(schedules: list[Any]) -> list[Any]:
    """Every plan replaced by auto under its own name: plans that cannot differ from auto, read by the same tracker
    (the planning model's figures kept, so it chooses alike) — whatever slowdown it reads is the measurement's."""
    from rlclock.schedule import ClockSchedule

    return [ClockSchedule.constant("auto", len(s), name=f"{s.name} (auto)") for s in schedules]


def run_model(name: str, seconds: float, control: bool, null: bool = False) -> dict[str, Any]:
    import numpy as np
    import torch

    import rlclock.deploy
    from rlclock.agents.online import PairedTracker
    from rlclock.gpu.nvml import NvmlDevice

    model, step = training_step(name)
    dev = NvmlDevice(torch.cuda.current_device())
    timeline, cand, schedules, profile_s, plan_s = profiled_candidates(step)
    if null:
        schedules = null_schedules(schedules)
    tracker = PairedTracker(BUDGET, list(cand.slowdown), list(cand.saving), cand.parts)
    arms: list[int] = []
    events: list[Any] = []
    times_s: list[float] = []
    energy_j: list[float] = []
    read_s: list[float] = []
    committed: list[tuple[int, int, int, float]] = []
    control_mode = "clocks" if control else "dry-run"
    with rlclock.deploy.clocked(
        schedules[0],
        timeline=timeline,
        alternatives=schedules[1:],
        control=control_mode,
        verbose=False,
        time_all_steps=True,
    ) as clk:
        arm = tracker.next_arm()  # auto: plan 0, what a step runs before any pattern is set
        t_end = time.perf_counter() + seconds
        k = 0
        while time.perf_counter() < t_end:
            with clk.step():
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                step()
            arms.append(arm)
            arm = tracker.next_arm()  # the next step's plan, chosen while this one runs on the GPU
            clk.set_pattern([arm], from_step=k + 1)
            events.append(ev)
            energy_j.append(dev.total_energy_j())
            read_s.append(time.perf_counter())
            done = len(events) - 1 - LAG_STEPS  # the step whose end (the next step's start) is surely past
            if done >= 0:
                events[done + 1].synchronize()
                t = events[done].elapsed_time(events[done + 1]) * 1e-3
                times_s.append(t)
                tracker.observe(arms[done], t)
                mix = tracker.commit()
                committed.append((done, mix.lo, mix.hi, mix.share_hi))
            k += 1
        torch.cuda.synchronize()
    report = clk.report.as_dict() if clk.report is not None else {}
    mu, cov = tracker.guard.paired.posterior()
    del model
    torch.cuda.empty_cache()
    return {
        "steps": len(arms),
        "profile_s": profile_s,
        "plan_s": plan_s,
        "plans": list(cand.labels),
        "model_slowdown": [float(x) for x in cand.slowdown],
        "model_saving": [float(x) for x in cand.saving],
        "arms": arms,
        "step_time_s": times_s,
        "energy_counter_j": energy_j,
        "read_s": read_s,
        "committed": committed,
        "readings": [list(map(float, r)) for r in tracker.guard.paired.readings],
        "posterior_log_slowdown": [float(x) for x in mu],
        "posterior_sd": [float(x) for x in np.sqrt(np.diag(cov))],
        "report": {
            k: report.get(k)
            for k in (
                "steps",
                "mode",
                "issued",
                "late",
                "boundary",
                "superseded",
                "replaced",
                "overtaken",
                "missed",
                "switch_error",
                "per_plan",
                "energy_j",
                "step_time_s",
            )
        },
    }


def summarise(name: str, r: dict[str, Any]) -> None:
    import numpy as np

    from rlclock.agents.measured import PairedSlowdown

    readings = r["readings"]
    paired = PairedSlowdown(r["model_slowdown"])
    paired.readings = [list(x) for x in readings]
    mean, var, seen = paired.reading_means()
    arms = np.array(r["arms"])
    used = np.bincount(arms, minlength=len(r["plans"]))
    z = [mean[a] / np.sqrt(var[a]) for a in range(1, len(readings)) if seen[a]]
    t = np.array(r["step_time_s"])
    e = np.array(r["energy_counter_j"])
    windows = []
    for w in (8, 32, 128):
        n = (len(e) - 1) // w
        if n >= 4:
            per = np.diff(e[::w][: n + 1]) / w
            windows.append(f"{w}: {100 * per.std() / per.mean():.1f} %")
    pooled = np.concatenate([np.asarray(x) for x in readings[1:] if len(x) >= 2] or [np.zeros(0)])
    rep = r["report"]
    print(
        f"{name:16s} {r['steps']:5d} steps (profile {r['profile_s']:.0f} s, {len(r['plans'])} plans in "
        f"{r['plan_s']:.0f} s); step {1e3 * np.median(t):.2f} ms (CV {100 * t.std() / t.mean():.1f} %); "
        f"auto on {100 * used[0] / used.sum():.0f} % of steps; paired readings {pooled.size} "
        f"(mean {100 * pooled.mean():+.2f} %, spread {100 * pooled.std():.2f} %), "
        f"per plan z = reading / its s.e.: mean {np.mean(z):+.2f}, "
        f"|z| <= 2 on {100 * np.mean(np.abs(z) <= 2):.0f} % of {len(z)} plans; energy per step over windows of "
        + ", ".join(windows)
        + f"; controller ({rep.get('mode')}): {rep.get('issued')} switches requested, "
        f"{rep.get('boundary')} of them at plan boundaries, {rep.get('late')} late"
    )


def print_overhead(name: str, r: dict[str, Any]) -> None:
    base = r["bare"]["median_s"]
    print(
        f"{name:16s} median step: "
        + ", ".join(
            f"{mode} {1e3 * v['median_s']:.2f} ms ({100 * (v['median_s'] / base - 1):+.1f} %, {v['steps']} steps)"
            for mode, v in r.items()
        )
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="run on this machine's GPU and write the data here (JSON)")
    p.add_argument("--report", type=Path, help="print the table of a file written by --out")
    p.add_argument("--seconds", type=float, default=45.0, help="seconds of training per model (default 45)")
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument(
        "--overhead",
        action="store_true",
        help="also time the loop bare, under the controller, with a pattern per step and with the tracker",
    )
    p.add_argument(
        "--null-plans",
        action="store_true",
        help="run every plan as auto under its own name (the null check of the readings)",
    )
    p.add_argument(
        "--control-clocks",
        action="store_true",
        help="set the clocks the plans ask for (a GPU you may set clocks on; needs the permission)",
    )
    a = p.parse_args(argv)
    if a.report:
        data = json.loads(a.report.read_text())
        print(
            f"# {data['gpu']}, {data['date']}, {data['seconds']:.0f} s per model, "
            f"{'clocks set' if data['control_clocks'] else 'dry run (dry run: nothing set)'}"
            + ("; every plan run as auto (null check)" if data.get("null_plans") else "")
        )
        for name, r in data["models"].items():
            summarise(name, r)
        for name, r in data.get("overhead", {}).items():
            print_overhead(name, r)
        return 0
    if a.out is None:
        p.error("give --out FILE (run on the GPU) or --report FILE")
    import torch

    from rlclock.gpu.nvml import NvmlDevice

    models, overhead = {}, {}
    for name in a.models:
        models[name] = run_model(name, a.seconds, a.control_clocks, a.null_plans)
        summarise(name, models[name])
        if a.overhead:
            overhead[name] = step_overhead(name, min(a.seconds, 20.0))
            print_overhead(name, overhead[name])
    data = {
        "gpu": NvmlDevice(torch.cuda.current_device()).name,
        "torch": torch.__version__,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "seconds": a.seconds,
        "control_clocks": a.control_clocks,
        "null_plans": a.null_plans,
        "budget": BUDGET,
        "models": models,
        "overhead": overhead,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
