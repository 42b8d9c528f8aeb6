"""The user's own model, end to end, on the corpus of real training steps profiled on the H200 (dry run).

Three parts, per corpus model (``data/corpus-h200``, taken by ``benchmarks/corpus_gpu.py``):

``costs`` — the cost model on real steps: the simulated H200 predicts each kernel from its shapes alone (FLOPs
and bytes derived again from each kernel's operator call by the current rules,
``rlclock.workload.op_costs.refresh_costs``; no anchoring on measurements), against the kernels' measured
in-sequence durations, the bare step time and NVML's energy per step. Targets (the real-models issue): step
time within 10 % and energy within 15 % of measured, and at least 85 % of the kernels of 20 µs or more within
25 % in time. The GPU model predicts kernels; the time the GPU idles inside a step waiting for the host (the
bare step less its measured kernels) does not depend on the GPU's clocks and is not predictable from shapes,
so it is taken as measured and charged at the model's power with the clocks up and nothing running. The
kernel-sum columns compare the model alone.

``timing`` — the timeline the controller plans on against the running step, and the controller timing a
switch test in the running loop (dry run): from each model's ``summary.json`` and ``switch_report.json``.
Targets: timeline period within 3 % of the running median; issue error p95 <= 1 ms (so >= 95 % of switches
within 1 ms of plan) and switch-time error p95 <= 1 ms; step time with the controller within 1 % of the step
without it.

``policy`` — the shipped H200 policy (``gpt3xl-h200``, trained on generated GPT-3 XL steps) scheduling each
real step on its anchored planning model (measured kernel times), at the GPU's default latency and a 1 %
budget, planned from its first choices alone and with the search over its best choices, against the exact
latency-aware optimum, the best static pair and the best whole-job power limit; then the plan a deployment
applies (with the search, and the planner's whole-job stage: the best static pair or power limit where either
saves more than the policy's plan; ``rlclock.policy.whole_job``). Targets: >= 90 % of the optimum's saving on
every model, slowdown within budget + 0.2 pp, never below the best static pair or power limit, planning <= 1 s
per step.

``lomo`` (only when named) — leave one model out: per corpus model, a policy trained (``--agent``, default the
``real-steps`` recipe) on the other models' real steps on ``--base``'s GPU and action set, judged on the model
it never saw, as in ``policy``, beside ``--checkpoint`` (a shipped policy). The left-out steps are planned one at
a time once every fold has trained. ``--ranks 2 4 6 8`` adds a table of the same folds planned with the search over
the policy's k best choices, for each k.

    python benchmarks/real_steps.py                 # all three parts
    python benchmarks/real_steps.py --part costs
    python benchmarks/real_steps.py --part lomo --checkpoint gpt3xl-rtx3080ti --jobs 2
    python benchmarks/real_steps.py --part lomo --checkpoint gpt3xl-rtx3080ti --jobs 2 --ranks 2 4 5 6 8
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def costs(corpus: Path, gpu: str) -> None:
    from rlclock.dvfs.model import gap_power_w
    from rlclock.dvfs.spec import get_spec

    spec = get_spec(gpu)
    gap_w = gap_power_w(spec, spec.abs_max_core_mhz, spec.max_mem_mhz)
    print(
        f"== costs: shapes-only predictions of the simulated {spec.name} ({spec.key}) against {corpus.name}; "
        f"idle time inside the bare step (bare step - measured kernel sum) is host time, taken as measured, "
        f"at the model's gap power {gap_w:.0f} W"
    )
    print(
        f"{'model':31s} {'kernels':>7s} {'kernel ms':>9s} {'predicted':>9s} {'err':>6s} {'bare ms':>8s} "
        f"{'idle ms':>7s} {'step err':>8s} {'J/step':>7s} {'predicted':>9s} {'err':>6s} {'>=20us within 25 %':>19s} "
        f"{'timed':>6s}"
    )
    met = 0
    models = _models(corpus)
    for folder in models:
        trace, measured, t, e = shapes_only(spec, folder)
        summary = json.loads((folder / "summary.json").read_text())
        bare_s, bare_j = summary["bare"]["step_time_s_median"], summary["bare"]["energy_j_per_step"]
        kernel_s, predicted_s = float(np.nansum(measured)), float(t.sum())
        idle_s = max(0.0, bare_s - kernel_s)
        step_err = (predicted_s + idle_s) / bare_s - 1
        energy = float(e.sum()) + gap_w * idle_s
        energy_err = energy / bare_j - 1
        big = measured >= 20e-6
        timed = float(np.nansum(measured[[k.cost_from == "time" for k in trace]])) / kernel_s
        within = int((np.abs(t[big] / measured[big] - 1) <= 0.25).sum())
        ok = abs(step_err) <= 0.10 and abs(energy_err) <= 0.15 and within >= 0.85 * big.sum()
        met += ok
        print(
            f"{folder.name:31s} {len(trace):7d} {1e3 * kernel_s:9.1f} {1e3 * predicted_s:9.1f} "
            f"{100 * (predicted_s / kernel_s - 1):+5.0f}% {1e3 * bare_s:8.1f} {1e3 * idle_s:7.1f} "
            f"{100 * step_err:+7.0f}% {bare_j:7.1f} {energy:9.1f} {100 * energy_err:+5.0f}% "
            f"{within:>8d}/{int(big.sum()):<5d} ({100 * within / max(big.sum(), 1):.0f} %) {100 * timed:5.1f}%"
        )
    print(
        f"targets met on {met} of {len(models)} models (step time within 10 %, energy within 15 %, >= 85 % of "
        "the kernels of 20 us or more within 25 %); timed: the share of the kernel time no cost rule knew, planned "
        "(and here predicted) from its measured time\n"
    )


def shapes_only(spec: Any, folder: Path) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """A corpus model's trace (FLOPs and bytes by the current rules), its kernels' measured in-sequence times,
    and ``spec``'s auto-clock time and energy of each from shapes alone."""
    from rlclock.backends.simulated import SimulatedGpu
    from rlclock.schedule import AUTO
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    trace = refresh_costs(KernelTrace.load(folder / "step.trace.json.gz"))
    measured = np.array([next((m.time_s for m in k.measured if m.source == "in-sequence"), np.nan) for k in trace])
    t, e = SimulatedGpu(spec, trace, [AUTO], anchor=False).tables
    return trace, measured, t[:, 0], e[:, 0]


def kernel_accuracy(spec: Any, corpus: Path = ROOT / "data" / "corpus-h200") -> list[tuple[str, float]]:
    """Per corpus model, the share of its kernels of 20 us or more that ``spec`` predicts from shapes alone
    within 25 % of their measured in-sequence time."""
    out = []
    for folder in _models(corpus):
        _trace, measured, t, _e = shapes_only(spec, folder)
        big = measured >= 20e-6
        out.append((folder.name, float(np.mean(np.abs(t[big] / measured[big] - 1) <= 0.25))))
    return out


def timing(corpus: Path) -> None:
    print(
        "== timing: the planned timeline against the running step, and a switch test in the running loop "
        "(dry run; a switch every 12 ms of the timeline, 30 steps, every step timed on the GPU)"
    )
    print(
        f"{'model':31s} {'profiled':>8s} {'timeline':>8s} {'running':>8s} {'period err':>10s} {'issued':>6s} "
        f"{'issue p95':>9s} {'switch p95':>10s} {'late':>6s} {'overhead':>8s}"
    )
    met = 0
    models = _models(corpus)
    for folder in models:
        s = json.loads((folder / "summary.json").read_text())
        sw = json.loads((folder / "switch_report.json").read_text())
        with gzip.open(folder / "step.trace.json.gz", "rt", encoding="utf-8") as f:
            unrolled = json.load(f)["meta"].get("step_period_s")  # the timed steps: no profiler, no controller
        running = s["running_step_s"]
        period_err = s["timeline_period_s"] / running - 1
        issue_p95, switch_p95 = sw["issue_error"]["p95_abs_s"], sw["switch_error"]["p95_abs_s"]
        overhead = sw["step_time_s"] / (unrolled or running) - 1
        ok = abs(period_err) <= 0.03 and issue_p95 <= 1e-3 and switch_p95 <= 1e-3 and overhead <= 0.01
        met += ok
        print(
            f"{folder.name:31s} {1e3 * s['profiled_period_s']:7.1f}ms {1e3 * s['timeline_period_s']:7.1f}ms "
            f"{1e3 * running:7.1f}ms {100 * period_err:+9.1f}% {sw['issued']:6d} {1e3 * issue_p95:7.2f}ms "
            f"{1e3 * switch_p95:8.2f}ms {100 * (sw['late_fraction'] or 0):5.0f}% {100 * overhead:+7.1f}%"
        )
    print(
        f"targets met on {met} of {len(models)} models (timeline period within 3 % of the running step, issue "
        "and switch-time error p95 <= 1 ms, overhead <= 1 %; running: the all-auto controlled run's median "
        "step; overhead: the switch test's median step against the timed steps', without a controller)\n"
    )
    for name, what in (
        ("timing.json", "a later profile of each model, then both switch tests one after the other"),
        (
            "timing_kernels.json",
            "another run, both switch tests under a CUDA-activity profile; "
            "kernels: each switch judged against its segment's first kernel's "
            "own GPU start",
        ),
    ):
        paced_table(models, name, what)
    paced_table(
        models,
        "timing_points.json",
        "a third run, the timeline located with points at every layer "
        "(clk.watch); both switch tests under a CUDA-activity profile",
        "points",
        " --watch",
    )
    paced_table(
        models,
        "timing_points_every4.json",
        "as the third run, with points at every fourth layer only",
        "points",
        " --watch --every 4",
    )


def paced_table(models: list[Path], name: str, what: str, second: str = "paced", flags: str = "") -> None:
    """The switch test on the timeline as profiled and, on the right, stretched to the running pace (``paced``)
    or re-timed from points at the watched layers (``points``), from ``<model>/name``."""
    paced = [(f, json.loads((f / name).read_text())) for f in models if (f / name).exists()]
    if not paced:
        return
    kernels = any(t["switch_test"]["profiled"].get("kernel_judged") for _, t in paced)
    right = "stretched to the running pace" if second == "paced" else "re-timed from points inside the step"
    print(
        f"== timing, the switch test on the timeline as profiled and {right} "
        f"(benchmarks/corpus_gpu.py --timing-only{' --kernel-times' if kernels else ''}{flags}: {what})"
    )
    extra = f" {'kernels p95':>11s} {'late':>5s}" if kernels else ""
    mid = "pace" if second == "paced" else "points"
    print(
        f"{'model':31s} {'timeline':>8s} {'running':>8s} | {'step':>7s} {'issue p95':>9s} {'switch p95':>10s} "
        f"{'late':>5s}{extra} | {'step':>7s} {mid:>6s} {'issue p95':>9s} {'switch p95':>10s} {'late':>5s}{extra}"
    )
    better = 0

    def judged(sw: dict) -> str:
        k = sw.get("kernel_judged")
        if not kernels:
            return ""
        if not k or not k.get("judged"):
            return f" {'n/a':>11s} {'':>5s}"
        return f" {1e3 * k['p95_abs_s']:9.2f}ms {100 * k['late_fraction']:4.0f}%"

    for folder, t in paced:
        a, b = t["switch_test"]["profiled"], t["switch_test"][second]
        key = "kernel_judged" if kernels else "switch_error"
        better += b[key]["p95_abs_s"] < a[key]["p95_abs_s"]
        print(
            f"{folder.name:31s} {1e3 * t['timeline_period_s']:7.1f}ms {1e3 * t['running_step_s']:7.1f}ms | "
            f"{1e3 * a['step_time_s']:6.1f}ms {1e3 * a['issue_error']['p95_abs_s']:7.2f}ms "
            f"{1e3 * a['switch_error']['p95_abs_s']:8.2f}ms {100 * a['late_fraction']:4.0f}%{judged(a)} | "
            f"{1e3 * b['step_time_s']:6.1f}ms {_middle(b, second)} {1e3 * b['issue_error']['p95_abs_s']:7.2f}ms "
            f"{1e3 * b['switch_error']['p95_abs_s']:8.2f}ms {100 * b['late_fraction']:4.0f}%{judged(b)}"
        )
    judge = "judged on the kernels" if kernels else "the report's"
    how = ("following the pace", "stretched by the pace the worker estimated, at the end of the run")
    if second != "paced":
        how = (
            "re-timing from points",
            "re-timed from the points at the watched layers, forward and backward; "
            "points: how many of them re-timed a switch",
        )
    met = sum(
        t["switch_test"][second][("kernel_judged" if kernels else "switch_error")]["p95_abs_s"] <= 1e-3
        for _, t in paced
    )
    print(
        f"{how[0]} lowered the switch-time error p95 ({judge}) on {better} of {len(paced)} models; p95 <= 1 ms on "
        f"{met} (left: the timeline as profiled; right: {how[1]})\n"
    )


def _middle(sw: dict, second: str) -> str:
    return f"x{sw['pace']:.3f}" if second == "paced" else f"{sw.get('points', 0):6d}"


def policy(corpus: Path, checkpoint: str, budget: float, time_limit_s: float) -> None:
    from rlclock.policy import ClockPolicy
    from rlclock.solve.baselines import latency_aware, power_limit, static
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    pol = ClockPolicy.load(checkpoint)
    latency_s = pol.gpu.switch_latency_s  # the GPU's default
    anchored = None
    print(
        f"== policy: {checkpoint} ({pol.gpu.name}) on each real step's planning model, latency "
        f"{latency_s * 1e3:g} ms, budget {100 * budget:g} %; savings against auto"
    )
    print(f"{'':16s} {'':8s} {'first choices':^30s} {'with the search':^30s} {'deployed (+ whole-job stage)':^47s}")
    cell = f"{'policy':>7s} {'of opt':>6s} {'slowdown':>8s} {'plan s':>6s}"
    print(
        f"{'model':31s} {'optimum':>8s} {cell} {cell} {cell} {'plan':>16s} {'static':>7s} {'power limit':>16s} "
        f"{'model s':>7s} solve"
    )
    for folder in _models(corpus):
        trace = refresh_costs(KernelTrace.load(folder / "step.trace.json.gz"))
        # anchored on the measured kernel times where they were measured on the policy's GPU; from shapes alone
        # on another GPU (the corpus was profiled on an H200)
        anchored = trace.meta.get("gpu") == pol.gpu.name
        auto_s = np.array([k.measured[0].time_s for k in trace]) if anchored else None
        backend = pol.backend_for(trace, auto_s, None, latency_s)
        t0 = time.perf_counter()
        _ = backend.tables  # the planning model, shared by both plans, the solver and the baselines
        model_s = time.perf_counter() - t0
        planned = [planned_on(pol, backend, budget, search) for search in (False, True)]
        deployed = planned_on(pol, backend, budget, True, whole_job=True)
        opt = latency_aware(backend, budget, time_limit_s)
        st, pl = static(backend, budget).evaluation, power_limit(backend, budget).evaluation
        best = opt.evaluation.saving
        o = opt.optimum
        if o is None or o.exact:
            solve = f"exact, {o.solve_s:.0f} s" if o is not None else ""
        else:
            bound = best + o.gap_j / opt.evaluation.auto_energy_j
            solve = f"best found, {o.solve_s:.0f} s; optimum <= {100 * bound:.2f}%"
        cells = " ".join(
            f"{100 * ev.saving:6.2f}% {100 * ev.saving / best if best > 0 else float('nan'):5.0f}% "
            f"{100 * ev.slowdown:+7.2f}% {plan_s:6.2f}"
            for ev, plan_s in [*planned, deployed]
        )
        print(
            f"{folder.name:31s} {100 * best:7.2f}% {cells} {deployed[0].name[:16]:>16s} {100 * st.saving:6.2f}% "
            f"{100 * pl.saving:6.2f}% ({pl.name.split(' ', 1)[1]:>6s}) {model_s:7.2f} {solve}"
        )
    print(
        "of opt: the policy's saving over the optimum's (the best schedule the solver found within its time "
        "limit, with the bound it proved on the true optimum's saving); deployed: the schedule rlclock apply "
        "plans by default, with the search (the policy's, or the whole-job plan named under plan where that saves "
        "more); plan s: "
        "ClockPolicy.schedule and its "
        "evaluation on the planning model; model s: building the planning model (the simulated GPU's tables "
        "for the step, once for both plans, the solver and the baselines); planning model "
        + (
            "anchored on the measured kernel times"
            if anchored
            else "from shapes alone (the steps were measured on another GPU)"
        )
        + "\n"
    )


def planned_on(
    pol: Any, backend: Any, budget: float, search: bool, ranks: int | None = None, whole_job: bool = False
) -> tuple[Any, float]:
    """``pol``'s schedule for ``backend``'s step at ``budget`` (from its first choices, or with the search over its
    ``ranks`` best choices, default the planner's; the policy's own plan, or with ``whole_job`` the plan a
    deployment applies), evaluated on ``backend``, and the seconds planning and evaluating took."""
    from rlclock.solve.evaluation import evaluate

    t0 = time.perf_counter()
    more = {} if ranks is None else {"ranks": ranks}
    sched = pol.schedule(backend.trace, backend=backend, budget=budget, search=search, whole_job=whole_job, **more)
    ev = evaluate(sched, backend)
    return ev, time.perf_counter() - t0


def corpus_specs(corpus: Path, base: str, budget: float) -> list[Any]:
    """One env spec per corpus model: ``base`` (a shipped spec: its GPU, action set, latency and reward) over the
    model's profiled step, its FLOPs and bytes derived again by the current rules
    (:func:`rlclock.config.family.corpus_family`, as a ``family: {corpus: …}`` file does). On the GPU the
    corpus was profiled on, the planning model is anchored on the measured kernel times; on another GPU it
    predicts from shapes alone."""
    from rlclock.config import load_env_spec
    from rlclock.config.family import corpus_family

    spec = load_env_spec(base)
    return [spec.with_overrides(**member, reward={"budget": budget}) for member in corpus_family(corpus)]


_FOLDS: dict[str, Any] = {}
"""What every fold of ``lomo`` shares (set before the worker processes fork, so they inherit its tables)."""


def lomo(
    corpus: Path,
    base: str,
    agent_name: str,
    budget: float,
    jobs: int,
    runs: Path,
    compare: str | None,
    latency_scales: tuple[float, ...] = (1.0,),
    ranks: tuple[int, ...] = (),
) -> None:
    """Leave one model out: per corpus model, a policy trained on the other models' real steps (``base``'s GPU
    and action set, ``agent_name``'s recipe), judged on the model it never saw, beside the exact latency-aware
    optimum, the best static pair, the best whole-job power limit and (``compare``) a shipped checkpoint."""
    import multiprocessing

    from tqdm import tqdm

    from rlclock.config.env_spec import at_latency_scales
    from rlclock.config.recipe import load_agent_config
    from rlclock.env import episode_tables

    specs = corpus_specs(corpus, base, budget)
    gpu = specs[0].gpu
    for spec in tqdm(
        at_latency_scales(specs, latency_scales), desc="planning models and optima", unit="step", file=sys.stderr
    ):
        episode_tables(spec)  # built once here; the folds inherit them
    _FOLDS.update(
        specs=specs, agent=load_agent_config(agent_name), runs=runs, compare=compare, scales=latency_scales, ranks=ranks
    )
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(max(1, min(jobs, len(specs)))) as pool:
        rows = []
        for row in tqdm(
            pool.imap_unordered(_fold, range(len(specs))), total=len(specs), desc="folds", unit="fold", file=sys.stderr
        ):
            rows.append(row)  # each fold as it ends, so a run cut short still says what it found
            tqdm.write(f"{row['model']}: trained in {row['train_s']:.0f} s ({row['checkpoint']})", file=sys.stderr)
    rows.sort(key=lambda r: r["model"])
    # planned here, one step at a time once every fold has trained: the planning times are a quiet machine's,
    # not those of a process sharing the cores with other folds' training
    for r in tqdm(rows, desc="planning the left-out steps", unit="step", file=sys.stderr):
        _judge(r)
        tqdm.write(
            f"{r['model']}: "
            + " / ".join(f"{100 * sv:.2f}% at {100 * sd:+.2f}%" for sv, sd, _ in r["plans"])
            + f" (optimum {100 * r['optimum']:.2f}%)",
            file=sys.stderr,
        )
    latency_s = episode_tables(specs[0]).backend.latency_s
    others = [f"x{x:g}" for x in latency_scales if x != 1.0]
    scaled = f", each also at {' and '.join(others)} the latency" if others else ""
    print(
        f"== leave one model out: {gpu.name} ({gpu.key}), policies trained ({agent_name} recipe) on the other "
        f"{len(specs) - 1} real steps{scaled}, judged on the one left out; latency {1e3 * latency_s:g} ms, budget "
        f"{100 * budget:g} %; savings against auto"
    )
    head = f"{'policy':>7s} {'of opt':>6s} {'slowdown':>8s} {'plan s':>6s}"
    print(
        f"{'':16s} {'':8s} {'left out, first choices':^30s} {'left out, with the search':^30s}"
        + (f" {compare + ', with the search':^30s}" if compare else "")
        + f" {'left out, deployed':^47s}"
    )
    print(
        f"{'model':31s} {'optimum':>8s} {head} {head}"
        + (f" {head}" if compare else "")
        + f" {head} {'plan':>16s} {'static':>7s} {'power limit':>16s} {'train s':>7s}"
    )
    met = 0
    for r in rows:
        best = r["optimum"]
        cells = " ".join(
            f"{100 * sv:6.2f}% {100 * sv / best if best > 0 else float('nan'):5.0f}% {100 * sd:+7.2f}% {ps:6.2f}"
            for sv, sd, ps in [*r["plans"], r["deployed"][:3]]
        )
        floor = max(r["static"], r["power_limit"])
        sv, sd, ps, name = r["deployed"]
        met += sv >= 0.9 * best and sd <= budget + 0.002 + 1e-9 and sv >= floor - 1e-9 and ps <= 1.0
        print(
            f"{r['model']:31s} {100 * best:7.2f}% {cells} {name[:16]:>16s} {100 * r['static']:6.2f}% "
            f"{100 * r['power_limit']:6.2f}% ({r['power_limit_name']:>6s}) {r['train_s']:7.0f}"
        )
    print(
        f"targets met by the deployed plan on {met} of {len(rows)} models (>= 90 % of the optimum's saving, "
        "slowdown within budget + 0.2 pp, never below the best static pair or power limit, planning <= 1 s); "
        "deployed: with the search and the planner's whole-job stage, what rlclock apply applies by default "
        "(the policy's plan, or the whole-job plan named under plan); optimum: the exact latency-aware optimum "
        "on the step's planning model ("
        + (
            "anchored on the measured kernel times"
            if any(r["anchored"] for r in rows)
            else "from shapes alone: the steps were measured on another GPU"
        )
        + "); plan s: planning and evaluating "
        "one step, one at a time after every fold has trained; train s: the fold's training wall time\n"
    )
    if ranks:
        _ranks_table(rows, ranks, budget)


def _ranks_table(rows: list[dict[str, Any]], ranks: tuple[int, ...], budget: float) -> None:
    """The left-out steps planned with the search over each number of the policy's best choices in ``ranks``."""
    print(
        "== the same folds, planned with the search over the policy's k best choices (k = --ranks): share of the "
        "optimum's saving, slowdown, planning s"
    )
    print(f"{'model':31s} " + " ".join(f"{f'k = {k}':>24s}" for k in ranks))
    met = dict.fromkeys(ranks, 0)
    for r in rows:
        cells = []
        for k, (sv, sd, ps) in zip(ranks, r["ranked"], strict=True):
            best, floor = r["optimum"], max(r["static"], r["power_limit"])
            met[k] += sv >= 0.9 * best and sd <= budget + 0.002 + 1e-9 and sv >= floor - 1e-9
            cells.append(f"{100 * sv / best if best > 0 else float('nan'):5.0f}% {100 * sd:+7.2f}% {ps:7.2f} s")
        print(f"{r['model']:31s} " + " ".join(f"{c:>24s}" for c in cells))
    print(
        "at >= 90 % of the optimum's saving, within budget + 0.2 pp and above static and power limit: "
        + ", ".join(f"k = {k}: {met[k]} of {len(rows)}" for k in ranks)
        + "\n"
    )


def _fold(i: int) -> dict[str, Any]:
    """Fold ``i`` of :func:`lomo`: train without corpus model ``i`` and judge the baselines on it (the policies are
    judged by :func:`_judge`, after every fold has trained)."""
    from rlclock.agents.train import train
    from rlclock.config.env_spec import at_latency_scales
    from rlclock.env import episode_tables
    from rlclock.solve.baselines import power_limit, static
    from rlclock.solve.evaluation import optimum_for

    specs, agent, runs = _FOLDS["specs"], _FOLDS["agent"], _FOLDS["runs"]
    held, rest = specs[i], specs[:i] + specs[i + 1 :]
    rest = at_latency_scales(rest, _FOLDS["scales"])  # as a corpus family's latency_scales
    t0 = time.perf_counter()
    res = train(
        rest,
        agent,
        runs_dir=runs,
        name=f"lomo-{held.gpu.key}-{held.name}",
        progress=False,
        command=f"benchmarks/real_steps.py --part lomo (left out: {held.name})",
    )
    train_s = time.perf_counter() - t0
    backend = episode_tables(held).backend
    budget = held.reward.budget
    auto_j = backend.auto_run().energy_j
    pl = power_limit(backend, budget).evaluation
    return {
        "fold": i,
        "model": held.name,
        "checkpoint": str(res.checkpoint),
        "optimum": 1.0 - optimum_for(backend, budget).energy_j / auto_j,
        "static": static(backend, budget).evaluation.saving,
        "power_limit": pl.saving,
        "power_limit_name": pl.name.split(" ", 1)[1],
        "train_s": train_s,
        "anchored": bool(backend.anchored_kernels()),
    }


def _judge(row: dict[str, Any]) -> None:
    """Plan fold ``row``'s left-out step with its policy (first choices, then the search) and, if asked, the
    shipped checkpoint (with the search); adds ``plans``: (saving, slowdown, planning seconds) each, and
    ``deployed``: the same and the plan's name for the fold policy's deployed plan (the search and the planner's
    whole-job stage)."""
    from rlclock.env import episode_tables
    from rlclock.policy import ClockPolicy

    held = _FOLDS["specs"][row["fold"]]
    backend = episode_tables(held).backend
    pols = [ClockPolicy.load(row["checkpoint"])] * 2
    if _FOLDS["compare"]:
        pols.append(ClockPolicy.load(_FOLDS["compare"]))
    row["plans"], row["ranked"] = [], []
    for pol, search in zip(pols, (False, True, True), strict=False):
        ev, plan_s = planned_on(pol, backend, held.reward.budget, search)
        row["plans"].append((ev.saving, ev.slowdown, plan_s))
    ev, plan_s = planned_on(pols[0], backend, held.reward.budget, True, whole_job=True)
    row["deployed"] = (ev.saving, ev.slowdown, plan_s, ev.name)
    for k in _FOLDS["ranks"]:
        ev, plan_s = planned_on(ClockPolicy.load(row["checkpoint"]), backend, held.reward.budget, True, k)
        row["ranked"].append((ev.saving, ev.slowdown, plan_s))


def _models(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.iterdir() if p.is_dir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=ROOT / "data" / "corpus-h200")
    parser.add_argument("--gpu", default="h200-sxm", help="GPU preset that predicts (default h200-sxm)")
    parser.add_argument(
        "--part",
        choices=["costs", "timing", "policy", "lomo", "all"],
        default="all",
        help="which part (default all: costs, timing, policy; lomo only when named)",
    )
    parser.add_argument("--checkpoint", default="gpt3xl-h200", help="policy for the policy part")
    parser.add_argument("--budget", type=float, default=0.01, help="slowdown budget (default 0.01)")
    parser.add_argument("--time-limit", type=float, default=120.0, help="solver time limit per step, s")
    parser.add_argument(
        "--base",
        default=None,
        help="lomo: the shipped env spec whose GPU, action set and latency the folds use "
        "(default gpt3xl-<GPU of --checkpoint>, e.g. gpt3xl-h200)",
    )
    parser.add_argument("--agent", default="real-steps", help="lomo: training recipe (default real-steps)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="lomo: folds trained at once")
    parser.add_argument(
        "--latency-scales",
        type=float,
        nargs="+",
        default=[1.0],
        help="lomo: each training step at the GPU's latency times each of these (default 1: the "
        "steps alone; 1 0.5 2: each also at half and twice it, a corpus family's "
        "latency_scales)",
    )
    parser.add_argument(
        "--ranks",
        type=int,
        nargs="+",
        default=[],
        help="lomo: also plan each left-out step with the search over the policy's k best choices, "
        "for each k given (2 to 8; the planner's default: 6), in a table of their own",
    )
    parser.add_argument(
        "--runs",
        type=Path,
        default=Path("runs") / "real-steps-lomo",
        help="lomo: where the folds' run folders go (default runs/real-steps-lomo)",
    )
    args = parser.parse_args(argv)
    if min(args.latency_scales) <= 0 or len(set(args.latency_scales)) < len(args.latency_scales):
        parser.error(f"--latency-scales takes distinct positive factors, found {args.latency_scales}")
    from rlclock.policy.inputs import RANKED

    if any(not 2 <= k <= RANKED for k in args.ranks):
        parser.error(f"--ranks takes numbers of choices from 2 to {RANKED}, found {args.ranks}")
    if args.part in ("costs", "all"):
        costs(args.corpus, args.gpu)
    if args.part in ("timing", "all"):
        timing(args.corpus)
    if args.part in ("policy", "all"):
        policy(args.corpus, args.checkpoint, args.budget, args.time_limit)
    if args.part == "lomo":
        base = args.base or args.checkpoint.replace("family-", "gpt3xl-")
        lomo(
            args.corpus,
            base,
            args.agent,
            args.budget,
            args.jobs,
            args.runs,
            args.checkpoint,
            tuple(args.latency_scales),
            tuple(args.ranks),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
