"""What the clock controller costs a training loop, and how well it times its switches (dry run: nothing is set).

The step is the GPT-3 XL layer (hidden 2048, 16 heads, sequence 2048, batch 4, bf16; forward + backward,
built by :mod:`rlclock.workload.torch_layer`), and a stack of several such layer steps per training step.
Each case goes through the user API exactly as a training script would: ``rlclock.deploy.clocked`` warms up,
profiles five steps, builds the schedule, and starts the controller (switch worker in its own process, CUDA
step anchors) in dry-run mode. The schedule alternates two configurations between GEMM-heavy segments
(memory clock lowered) and memory-bound ones (core clock lowered), each segment at least two switching
latencies long (:mod:`rlclock.deploy.rules`); the controller's plan keeps the switches that can land in time.

Overhead: blocks of steps in three conditions — "off" (no marks: the controller idle, nothing of it runs),
"on" (``with clk.step():``, start and end marks) and "start-only" (``clk.step()`` alone) — interleaved in
rounds whose order rotates and reverses, so drift cancels; every step synchronises (as a loop that reads its
loss each step does), so any host-side cost shows in the step time. Reported: the median step time of each
condition and the ratio to "off", the device time of the step (CUDA events around it, in every condition
alike), the time the marks take in the training thread, and the spread between the medians of the "off"
blocks of odd and even rounds (the noise floor). Switch timing: the controller's report (issued − planned;
issued − ideal from the kernels' GPU times; late switches; anchor delay).

    python benchmarks/controller_overhead.py --out results/          # on a GPU (about a minute)
    python benchmarks/controller_overhead.py --cpu-smoke             # the script's logic on a CPU, no figures
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlclock.deploy.api import clocked  # noqa: E402
from rlclock.deploy.rules import class_windows_builder  # noqa: E402
from rlclock.schedule import ClockConfig, ClockSchedule  # noqa: E402
from rlclock.workload.transformer import TransformerConfig  # noqa: E402

GPT3XL_LAYER = TransformerConfig(hidden=2048, heads=16, seq=2048, batch=4, layers=1, head=False, style="gpt",
                                 dtype="bf16")
TENSOR_CONFIG = ClockConfig(None, 2201)
"""Tensor-core kernels: memory clock lowered (the paper's pattern for power-capped GEMMs)."""


def memory_bound_config() -> ClockConfig:
    """Memory-bound kernels: the core clock lowered to about 70 % of the top of this GPU's table."""
    from rlclock.gpu.nvml import NvmlDevice

    table = NvmlDevice(0).supported_clocks()
    cores = sorted(table[max(table)])
    target = 0.7 * cores[-1]
    return ClockConfig(min(cores, key=lambda c: abs(c - target)), None)


CONDITIONS = ("off", "on", "start-only")
"""Without marks (the controller idle); ``with clk.step():`` (start and end marks); ``clk.step()`` only."""


def run_case(name: str, step_fn: Callable[[], None], sync: Callable[[], None], clk: Any, steps: int,
             blocks: int, gpu_timer: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Warm up / profile through ``clk`` until it controls, then time interleaved blocks of each condition.

    Args:
        name: Case name.
        step_fn: One training step.
        sync: Waits for the device (the loop reads its loss every step).
        clk: The deployment (``rlclock.deploy.clocked``).
        steps: Steps per block.
        blocks: Rounds; each runs every condition once, in an order rotated and reversed from round to round.
        gpu_timer: Makes a timing event (CUDA) to time each step on the device too, in every condition alike.
    """
    clk.start()
    guard = 0
    while clk.state not in ("control", "inactive", "closed"):
        with clk.step():
            step_fn()
        sync()
        guard += 1
        if guard > 100:
            raise RuntimeError("the deployment never started controlling")
    wall: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    device: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    mark: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    per_block: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    for b in range(blocks):
        order = list(CONDITIONS[b % 3:] + CONDITIONS[:b % 3])
        for cond in (order if b % 2 == 0 else order[::-1]):
            block = []
            for _ in range(steps):
                g0 = gpu_timer() if gpu_timer else None
                t0 = time.perf_counter()
                if g0 is not None:
                    g0.record()
                cost = 0.0
                if cond == "off":
                    step_fn()
                else:
                    ta = time.perf_counter()
                    m = clk.step()
                    cost += time.perf_counter() - ta
                    step_fn()
                    if cond == "on":
                        tc = time.perf_counter()
                        m.__exit__(None, None, None)
                        cost += time.perf_counter() - tc
                g1 = gpu_timer() if gpu_timer else None
                if g1 is not None:
                    g1.record()
                sync()
                block.append(time.perf_counter() - t0)
                mark[cond].append(cost)
                if g0 is not None:
                    device[cond].append(g0.elapsed_time(g1) / 1e3)
            wall[cond] += block
            per_block[cond].append(statistics.median(block))
    rep = clk.close()
    med = {c: statistics.median(wall[c]) for c in CONDITIONS}
    off_even = statistics.median(per_block["off"][0::2])
    off_odd = statistics.median(per_block["off"][1::2]) if blocks > 1 else off_even
    prof = clk.profile

    def pct(v: list[float]) -> dict[str, float]:
        q = statistics.quantiles(v, n=10) if len(v) > 1 else [v[0]] * 9
        return {"median_s": statistics.median(v), "p10_s": q[0], "p90_s": q[-1]}

    return {
        "case": name, "steps_per_condition": len(wall["on"]), "blocks": blocks,
        "step_off_s": med["off"], "step_on_s": med["on"], "step_start_only_s": med["start-only"],
        "overhead_pct": 100 * (med["on"] / med["off"] - 1),
        "overhead_start_only_pct": 100 * (med["start-only"] / med["off"] - 1),
        "noise_pct": 100 * abs(off_even - off_odd) / med["off"],
        "wall": {c: pct(wall[c]) for c in CONDITIONS},
        "device": {c: pct(device[c]) for c in CONDITIONS if device[c]},
        "mark_cost_s": {c: statistics.median(mark[c]) for c in CONDITIONS if c != "off"},
        "kernels": None if prof is None else len(prof.trace),
        "profiled_period_s": None if prof is None else prof.timeline.period_s,
        "report": None if rep is None else rep.as_dict(),
        "report_text": None if rep is None else rep.text(),
    }


def gpu_cases(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from rlclock.workload.torch_layer import LayerStep

    step = LayerStep(GPT3XL_LAYER, "cuda", seed=0)

    def layers(n: int) -> Callable[[], None]:
        def fn() -> None:
            for _ in range(n):
                step.zero_grad()
                step()

        return fn

    for _ in range(5):
        layers(1)()
    torch.cuda.synchronize()
    low = memory_bound_config()
    builder = class_windows_builder(TENSOR_CONFIG, low)
    cases = [("layer", 1, args.latency, args.steps), (f"stack{args.stack}", args.stack, args.latency,
                                                      max(10, args.steps // args.stack))]
    if args.stress_latency > 0:
        cases.append(("layer-stress", 1, args.stress_latency, args.steps))
    results = []
    for name, n, latency, steps in cases:
        print(f"\n=== {name}: {n} GPT-3 XL layer step(s) per training step, latency {latency * 1e3:g} ms ===",
              flush=True)
        clk = clocked(builder, control="dry-run", latency_s=latency, warmup_steps=3, profile_steps=5,
                      worker="process", verbose=True)
        res = run_case(name, layers(n), torch.cuda.synchronize, clk, steps, args.blocks,
                       lambda: torch.cuda.Event(enable_timing=True))
        res.update(layers=n, latency_s=latency, configs=[str(TENSOR_CONFIG), str(low)])
        print(res["report_text"], flush=True)
        results.append(res)
    return results


def cpu_smoke(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The same measurement on a CPU with a sleeping 'step' and a given timeline: checks the script, no figures."""
    import numpy as np

    from rlclock.deploy.timeline import StepTimeline

    timeline = StepTimeline.from_durations(np.full(40, 1e-3))
    schedule = ClockSchedule(["1980@3201", "1410@3201"], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10, "smoke")

    def fn() -> None:
        end = time.perf_counter() + 0.04
        while time.perf_counter() < end:
            time.sleep(0.001)

    clk = clocked(schedule, timeline=timeline, latency_s=args.latency, worker="process", verbose=False)
    res = run_case("cpu-smoke", fn, lambda: None, clk, max(5, args.steps // 10), min(args.blocks, 4))
    res.update(layers=0, latency_s=args.latency, configs=[str(c) for c in schedule.configs])
    print(res["report_text"])
    return [res]


def table(results: list[dict[str, Any]]) -> str:
    head = ("case", "off ms", "on ms", "overhead %", "start-only %", "noise %", "GPU off/on ms", "mark us",
            "sw/step", "issued", "late", "issue err p95 ms", "switch err med/p95 ms", "anchor delay med ms")
    rows = []
    for r in results:
        rep = r["report"] or {}
        plan = rep.get("plan", {})
        ie, se, ad = rep.get("issue_error", {}), rep.get("switch_error", {}), rep.get("anchor_delay", {})

        def ms(x: Any) -> str:
            return "-" if x is None or x != x else f"{x * 1e3:.3f}"

        dev = r.get("device", {})
        gpu = (f"{ms(dev['off']['median_s'])}/{ms(dev['on']['median_s'])}" if "off" in dev and "on" in dev else "-")
        rows.append((r["case"], f"{r['step_off_s'] * 1e3:.3f}", f"{r['step_on_s'] * 1e3:.3f}",
                     f"{r['overhead_pct']:+.2f}", f"{r['overhead_start_only_pct']:+.2f}", f"{r['noise_pct']:.2f}", gpu,
                     f"{r['mark_cost_s']['on'] * 1e6:.1f}", str(len(plan.get("events", []))),
                     str(rep.get("issued", "-")), f"{rep.get('late', '-')}/{se.get('n', '-')}",
                     ms(ie.get("p95_abs_s")), f"{ms(se.get('median_s'))}/{ms(se.get('p95_abs_s'))}",
                     ms(ad.get("median_s"))))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(str(v).rjust(w) for v, w in zip(row, widths)) for row in (head, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="folder for controller_overhead.json")
    p.add_argument("--steps", type=int, default=120, help="layer steps per block and condition")
    p.add_argument("--blocks", type=int, default=6, help="rounds; each runs every condition once")
    p.add_argument("--latency", type=float, default=0.006, help="switching latency planned with, seconds")
    p.add_argument("--stack", type=int, default=8, help="layer steps per training step in the stacked case")
    p.add_argument("--stress-latency", type=float, default=0.0005,
                   help="also run the layer step at this (hypothetical) latency: many switches per step; 0: skip")
    p.add_argument("--cpu-smoke", action="store_true", help="check the script on a CPU (no figures)")
    args = p.parse_args(argv)
    t0 = time.time()
    if args.cpu_smoke:
        results = cpu_smoke(args)
        machine = "CPU smoke test"
    else:
        import torch

        if not torch.cuda.is_available():
            print("controller_overhead: no CUDA GPU; run with --cpu-smoke to check the script on a CPU.")
            return 1
        results = gpu_cases(args)
        machine = torch.cuda.get_device_name()
    summary = {"machine": machine, "command": " ".join(sys.argv), "wall_s": round(time.time() - t0, 1),
               "results": results}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "controller_overhead.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"\ncontroller overhead on {machine} (dry run; median step time with the controller attached vs not):")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
