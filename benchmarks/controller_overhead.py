"""What the clock controller costs a training loop, and how well it times its switches (dry run: nothing is set).

The step is the GPT-3 XL layer (hidden 2048, 16 heads, sequence 2048, batch 4, bf16; forward + backward,
built by :mod:`rlclock.workload.torch_layer`), and a stack of several such layer steps per training step.
Each case goes through the user API exactly as a training script would: ``rlclock.deploy.clocked`` warms up,
profiles five steps, builds the schedule, and starts the controller (switch worker in its own process, CUDA
step anchors) in dry-run mode. The schedule alternates two configurations between GEMM-heavy segments
(memory clock lowered) and memory-bound ones (core clock lowered), each segment at least two switching
latencies long (:mod:`rlclock.deploy.rules`); the controller's plan keeps the switches that can land in time.

Overhead: blocks of steps in three conditions — "off" (no marks: the controller idle, nothing of it runs),
"on" (``with clk.step():``) and "start-only" (``clk.step()`` alone) — interleaved in rounds whose order rotates
and reverses, so drift cancels; every step synchronises (as a loop that reads its loss each step does), so any
host-side cost shows in the step time. The controller anchors every ``anchor_every``-th step (its default
unless ``--anchor-every`` is given; the first step after each "off" block too); ``--sweep`` adds layer cases at
other spacings. Reported: the median step time of each condition and the ratio to "off", the device time of
the step (CUDA events around it, in every condition alike), the time ``clk.step()`` and the end of the ``with``
block take in the training thread (on anchored steps and on the others), and the spread between the medians of
the "off" blocks of odd and even rounds (the noise floor).

Switch timing: the controller's report (issued − planned; issued − ideal from the kernels' GPU times; late
switches; anchor delay). Between anchors a step's start is not measured, so the report places it between
them; ``--timing-sweep`` adds cases at the stress latency that mark every step on the GPU for the report
(``time_all_steps``: the worker still hears only every ``anchor_every``-th), so that the switch-time error of
sparse anchors is measured against every step's actual start. Those cases run the "on" condition only, and
their overhead is not that of the setting.

    python benchmarks/controller_overhead.py --out results/          # on a GPU (about 2.5 minutes)
    python benchmarks/controller_overhead.py --cpu-smoke --sweep "" --timing-sweep 2   # the logic on a CPU
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

GPT3XL_LAYER = TransformerConfig(
    hidden=2048, heads=16, seq=2048, batch=4, layers=1, head=False, style="gpt", dtype="bf16"
)
TENSOR_CONFIG = ClockConfig()
"""Tensor-core kernels: the driver's clocks. (The committed run used ``auto@2201``, memory lowered as the paper does
for power-capped GEMMs; an H200 cannot switch its memory clock while running, so a dry run now refuses it. The
controller's overhead depends on how many switches it issues, not on their targets.)"""


def memory_bound_config() -> ClockConfig:
    """Memory-bound kernels: the core clock lowered to about 70 % of the top of this GPU's table."""
    from rlclock.gpu.nvml import NvmlDevice

    table = NvmlDevice(0).supported_clocks()
    cores = sorted(table[max(table)])
    target = 0.7 * cores[-1]
    return ClockConfig(min(cores, key=lambda c: abs(c - target)), None)


CONDITIONS = ("off", "on", "start-only")
"""Without marks (the controller idle); ``with clk.step():`` (start and end marks); ``clk.step()`` only."""


def run_case(
    name: str,
    step_fn: Callable[[], None],
    sync: Callable[[], None],
    clk: Any,
    steps: int,
    blocks: int,
    gpu_timer: Callable[[], Any] | None = None,
    conditions: tuple[str, ...] = CONDITIONS,
) -> dict[str, Any]:
    """Warm up / profile through ``clk`` until it controls, then time interleaved blocks of each condition.

    Args:
        name: Case name.
        step_fn: One training step.
        sync: Waits for the device (the loop reads its loss every step).
        clk: The deployment (``rlclock.deploy.clocked``).
        steps: Steps per block.
        blocks: Rounds; each runs every condition once, in an order rotated and reversed from round to round.
        gpu_timer: Makes a timing event (CUDA) to time each step on the device too, in every condition alike.
        conditions: The conditions to run (a subset of :data:`CONDITIONS`).
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
    wall: dict[str, list[float]] = {c: [] for c in conditions}
    device: dict[str, list[float]] = {c: [] for c in conditions}
    mark: dict[str, list[float]] = {c: [] for c in conditions}
    marked: dict[str, list[bool]] = {c: [] for c in conditions}
    per_block: dict[str, list[float]] = {c: [] for c in conditions}
    n = len(conditions)
    for b in range(blocks):
        order = list(conditions[b % n :] + conditions[: b % n])
        for cond in order if b % 2 == 0 else order[::-1]:
            block = []
            for _ in range(steps):
                g0 = gpu_timer() if gpu_timer else None
                t0 = time.perf_counter()
                if g0 is not None:
                    g0.record()
                cost = 0.0
                on_gpu = False
                if cond == "off":
                    step_fn()
                else:
                    ta = time.perf_counter()
                    m = clk.step()
                    cost += time.perf_counter() - ta
                    on_gpu = m.marked
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
                marked[cond].append(on_gpu)
                if g0 is not None:
                    device[cond].append(g0.elapsed_time(g1) / 1e3)
            wall[cond] += block
            per_block[cond].append(statistics.median(block))
    anchor_every = clk.controller.anchor_every if clk.controller is not None else None
    rep = clk.close()
    med = {c: statistics.median(wall[c]) for c in conditions}
    prof = clk.profile

    def pct(v: list[float]) -> dict[str, float]:
        q = statistics.quantiles(v, n=10) if len(v) > 1 else [v[0]] * 9
        return {"median_s": statistics.median(v), "p10_s": q[0], "p90_s": q[-1]}

    def median_of(values: list[float], keep: list[bool], want: bool) -> float | None:
        v = [x for x, k in zip(values, keep) if k == want]
        return statistics.median(v) if v else None

    out: dict[str, Any] = {
        "case": name,
        "anchor_every": anchor_every,
        "conditions": list(conditions),
        "steps_per_condition": len(wall[conditions[0]]),
        "blocks": blocks,
        "wall": {c: pct(wall[c]) for c in conditions},
        "device": {c: pct(device[c]) for c in conditions if device[c]},
        "mark_cost_s": {c: statistics.median(mark[c]) for c in conditions if c != "off"},
        "mark_cost_marked_s": {c: median_of(mark[c], marked[c], True) for c in conditions if c != "off"},
        "mark_cost_unmarked_s": {c: median_of(mark[c], marked[c], False) for c in conditions if c != "off"},
        "marked_steps": {c: sum(marked[c]) for c in conditions if c != "off"},
        "kernels": None if prof is None else len(prof.trace),
        "profiled_period_s": None if prof is None else prof.timeline.period_s,
        "report": None if rep is None else rep.as_dict(),
        "report_text": None if rep is None else rep.text(),
    }
    if "off" in conditions and "on" in conditions:
        off_even = statistics.median(per_block["off"][0::2])
        off_odd = statistics.median(per_block["off"][1::2]) if blocks > 1 else off_even
        out.update(
            step_off_s=med["off"],
            step_on_s=med["on"],
            overhead_pct=100 * (med["on"] / med["off"] - 1),
            noise_pct=100 * abs(off_even - off_odd) / med["off"],
        )
        if "start-only" in conditions:
            out.update(
                step_start_only_s=med["start-only"], overhead_start_only_pct=100 * (med["start-only"] / med["off"] - 1)
            )
    elif "on" in conditions:
        out.update(step_on_s=med["on"])
    return out


class Cases:
    """Runs the cases of one machine, profiling once per latency and reusing that schedule and timeline."""

    def __init__(
        self,
        builder: Any,
        step_fn: Callable[[int], Callable[[], None]],
        sync: Callable[[], None],
        gpu_timer: Callable[[], Any] | None,
        worker: str = "process",
        given: tuple[Any, Any] | None = None,
    ):
        self.builder = builder
        self.step_fn = step_fn
        self.sync = sync
        self.gpu_timer = gpu_timer
        self.worker = worker
        self.given = given
        self.cache: dict[tuple[int, float], tuple[Any, Any, dict[str, Any]]] = {}
        self.results: list[dict[str, Any]] = []

    def run(
        self,
        name: str,
        layers: int,
        latency: float,
        steps: int,
        blocks: int,
        anchor_every: int | None,
        conditions: tuple[str, ...] = CONDITIONS,
        time_all_steps: bool = False,
    ) -> dict[str, Any]:
        print(
            f"\n=== {name}: {layers} GPT-3 XL layer step(s) per training step, latency {latency * 1e3:g} ms, "
            f"anchor every {anchor_every or 'default'}{', every step timed' if time_all_steps else ''} ===",
            flush=True,
        )
        key = (layers, latency)
        common = {
            "latency_s": latency,
            "worker": self.worker,
            "anchor_every": anchor_every,
            "time_all_steps": time_all_steps,
        }
        if self.given is not None:
            clk = clocked(self.given[0], timeline=self.given[1], verbose=False, **common)
            info: dict[str, Any] = {}
        elif key in self.cache:
            schedule, timeline, info = self.cache[key]
            clk = clocked(schedule, timeline=timeline, verbose=True, **common)
        else:
            clk = clocked(self.builder, warmup_steps=3, profile_steps=5, verbose=True, **common)
            info = {}
        res = run_case(name, self.step_fn(layers), self.sync, clk, steps, blocks, self.gpu_timer, conditions)
        if self.given is None and key not in self.cache and clk.schedule is not None:
            info = {"kernels": res["kernels"], "profiled_period_s": res["profiled_period_s"]}
            self.cache[key] = (clk.schedule, clk.timeline, info)
        for k, v in info.items():
            if res.get(k) is None:
                res[k] = v
        res.update(layers=layers, latency_s=latency, time_all_steps=time_all_steps)
        print(res["report_text"], flush=True)
        self.results.append(res)
        return res


def plan_cases(cases: Cases, args: argparse.Namespace, layer_steps: int, stack_steps: int) -> None:
    """The layer step, the stacked step and the stress latency at the default spacing (or ``--anchor-every``),
    then the sweeps."""
    every = args.anchor_every
    cases.run("layer", 1, args.latency, layer_steps, args.blocks, every)
    if args.stack > 1:
        cases.run(f"stack{args.stack}", args.stack, args.latency, stack_steps, args.blocks, every)
    if args.stress_latency > 0:
        cases.run("layer-stress", 1, args.stress_latency, layer_steps, args.blocks, every)
    for k in args.sweep:
        cases.run(f"layer-every{k}", 1, args.latency, layer_steps, args.sweep_blocks, k)
    if args.stress_latency > 0:
        for k in args.timing_sweep:
            cases.run(
                f"stress-timed-every{k if k else 'default'}",
                1,
                args.stress_latency,
                args.timing_steps,
                1,
                k or None,
                ("on",),
                time_all_steps=True,
            )


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
    cases = Cases(
        class_windows_builder(TENSOR_CONFIG, low),
        layers,
        torch.cuda.synchronize,
        lambda: torch.cuda.Event(enable_timing=True),
    )
    plan_cases(cases, args, args.steps, max(10, args.steps // args.stack))
    for res in cases.results:
        res.update(configs=[str(TENSOR_CONFIG), str(low)])
    return cases.results


def cpu_smoke(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The same measurement on a CPU with a sleeping 'step' and a given timeline: checks the script, no figures."""
    import numpy as np

    from rlclock.deploy.timeline import StepTimeline

    timeline = StepTimeline.from_durations(np.full(40, 2.5e-4))  # a 10 ms step
    schedule = ClockSchedule(["1980@3201", "1410@3201"], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10, "smoke")

    def layers(n: int) -> Callable[[], None]:
        def fn() -> None:
            end = time.perf_counter() + 0.01 * n
            while time.perf_counter() < end:
                time.sleep(0.001)

        return fn

    cases = Cases(None, layers, lambda: None, None, given=(schedule, timeline))
    plan_cases(
        cases,
        argparse.Namespace(**{**vars(args), "timing_steps": min(args.timing_steps, 60)}),
        max(5, args.steps // 10),
        5,
    )
    for res in cases.results:
        res.update(configs=[str(c) for c in schedule.configs])
    return cases.results


def table(results: list[dict[str, Any]]) -> str:
    """One line per case: overhead, mark costs, switch timing."""
    head = (
        "case",
        "every",
        "off ms",
        "on ms",
        "overhead %",
        "start-only %",
        "noise %",
        "GPU off/on ms",
        "mark us anch/other",
        "sw/step",
        "issued",
        "late",
        "issue err p95 ms",
        "switch err med/p95 ms",
        "interp",
        "anchor delay med ms",
    )
    rows = []

    def ms(x: Any) -> str:
        return "-" if x is None or x != x else f"{x * 1e3:.3f}"

    def us(x: Any) -> str:
        return "-" if x is None else f"{x * 1e6:.1f}"

    def pct(x: Any, sign: str = "+") -> str:
        return "-" if x is None else f"{x:{sign}.2f}"

    for r in results:
        rep = r.get("report") or {}
        plan = rep.get("plan", {})
        ie, se, ad = rep.get("issue_error", {}), rep.get("switch_error", {}), rep.get("anchor_delay", {})
        dev = r.get("device", {})
        gpu = f"{ms(dev['off']['median_s'])}/{ms(dev['on']['median_s'])}" if "off" in dev and "on" in dev else "-"
        marks = f"{us(r.get('mark_cost_marked_s', {}).get('on'))}/{us(r.get('mark_cost_unmarked_s', {}).get('on'))}"
        every = f"{r.get('anchor_every', '-')}{'*' if r.get('time_all_steps') else ''}"
        rows.append(
            (
                r["case"],
                every,
                ms(r.get("step_off_s")),
                ms(r.get("step_on_s")),
                pct(r.get("overhead_pct")),
                pct(r.get("overhead_start_only_pct")),
                pct(r.get("noise_pct"), ""),
                gpu,
                marks,
                str(len(plan.get("events", []))),
                str(rep.get("issued", "-")),
                f"{rep.get('late', '-')}/{se.get('n', '-')}",
                ms(ie.get("p95_abs_s")),
                f"{ms(se.get('median_s'))}/{ms(se.get('p95_abs_s'))}",
                str(rep.get("interpolated", "-")),
                ms(ad.get("median_s")),
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(str(v).rjust(w) for v, w in zip(row, widths)) for row in (head, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        "every: steps between anchors (* every step timed on the GPU for the report, only the anchors sent; "
        "its overhead is not that of the setting); interp: judged switches of steps placed between anchors"
    )
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="folder for controller_overhead.json")
    p.add_argument("--steps", type=int, default=120, help="layer steps per block and condition")
    p.add_argument("--blocks", type=int, default=10, help="rounds; each runs every condition once")
    p.add_argument("--latency", type=float, default=0.006, help="switching latency planned with, seconds")
    p.add_argument("--stack", type=int, default=8, help="layer steps per training step in the stacked case")
    p.add_argument(
        "--stress-latency",
        type=float,
        default=0.0005,
        help="also run the layer step at this (hypothetical) latency: many switches per step; 0: skip",
    )
    p.add_argument(
        "--anchor-every",
        type=int,
        default=None,
        help="steps between anchors for the main cases (default: the controller's default)",
    )
    p.add_argument(
        "--sweep",
        type=_ints,
        default=[1, 2, 3, 4],
        metavar="K,K,...",
        help="also run the layer step (overhead) with these anchor spacings",
    )
    p.add_argument("--sweep-blocks", type=int, default=6, help="rounds of each --sweep case")
    p.add_argument(
        "--timing-sweep",
        type=_ints,
        default=[1, 2, 3, 4, 7],
        metavar="K,K,...",
        help="also run the stress latency with every step timed for the report, at these anchor "
        "spacings (0: the default), 'on' condition only",
    )
    p.add_argument("--timing-steps", type=int, default=600, help="steps of each --timing-sweep case")
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
    summary = {
        "machine": machine,
        "command": " ".join(sys.argv),
        "wall_s": round(time.time() - t0, 1),
        "results": results,
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "controller_overhead.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"\ncontroller overhead on {machine} (dry run; median step time with the controller attached vs not):")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
