"""Delivered, not planned: per model, the plan's saving and slowdown beside what the controller delivers when the
switches land where the running step's kernels are — on the CPU by replaying measured jitter on the committed
corpora, on a GPU in a dry run of the deployment itself (dry run: nothing is ever set).

Per model it prints planned and delivered saving and slowdown (the planning model's; against auto), the segments
the controller's rule skips in the deployed schedule, the share of switches that land after their segment's first
kernel started (late), the jitter measured (p95 of how far a kernel starts from its median place, ms), what the
jitter-aware plan changed against the jitter-blind one, and — on a GPU — the deployment's own overhead on the step.

**CPU mode** (default; ``--corpus`` data/corpus-h200, -h200-heldout, -h100, -h100-compiled): each model's step is
planned by the shipped policy for its GPU (``corpus-h200``, ``corpus-h100``), at the GPU's default latency and a 1 %
budget, in each jitter mode of :class:`rlclock.backends.executable.Execution` (``blind``, ``margin``, ``expected``,
``settled``) and as deployments planned before (``requests``: the policy's requests judged by its planning model's
switching rule alone, run by the controller's rule as they are; its line also says what the planner's figure was),
then *replayed*: each replayed step places the kernels where they started in a measured step, the
switches land as planned from the step's anchor, and the step is priced on the planning model
(:func:`rlclock.backends.executable.executed_cost`). Where the kernels come from:

* ``data/corpus-h200/step-jitter.npz`` (the ten corpus models on the H200: every kernel's start in 25 consecutive
  steps, :mod:`benchmarks.step_jitter`): the first four steps are the timing steps the deployment locates kernels in
  (the timeline is their median, their offsets its ``jitter_s``); the other 21 are replayed;
* every other model (no per-kernel record of its steps): steps stretched as a whole, ``start × (1 + δ)`` with δ
  Laplace-distributed, its centre and scale fitted to that model's own switch test (``switch_report.json``: the
  switch-time error's median and p95 against the planned switch points), four steps drawn for the timing steps and
  20 others replayed. On the H200 corpus both are run, as a check of the stretched model against the real steps.

The jitter-free latency-aware optimum (:func:`rlclock.solve.baselines.latency_aware`, ``--optimum-seconds`` a model)
is the reference of the savings: the targets are a delivered slowdown <= budget + 0.2 pp and a delivered saving
>= 80 % of the optimum's, on every model. About 45 s a model on a 2-core machine (four plans and the optimum), 30 min
for the four corpora; ``--only``, ``--modes`` and ``--corpus`` narrow it.

**GPU mode** (``--gpu --out DIR``; one GPU, dry run: a dry run throughout, nothing is set, no clock or power
call is made but the dry run's recording of them): the corpus models (``benchmarks/corpus_gpu.py``'s Hugging Face
architectures and the example's GPT), then the held-out ones, then — while time is left — the compiled ones. Per model:

1. ``rlclock.deploy.clocked(checkpoint=<the shipped policy for the GPU>)`` as ``rlclock apply`` runs it: 3 warm-up,
   5 profiled and 8 timing steps, then ``--steps`` (16) controlled steps, every step timed on the GPU
   (``time_all_steps``), ``--save`` to a scratch folder: the report (planned and delivered, per switch), the step's
   plot; about 10-25 s a model (most of it profiling and planning);
2. the same plan in ``--located`` (10) controlled steps under a CUDA-activity profile with a marker kernel per step:
   every switch judged against where its step's kernels really ran (delivered, kernels located), and each kernel's
   start per step kept (``located.npz``, for later CPU replays); about 3-6 s;
3. the overhead: ``--rounds`` (3) rounds of a bare block and a controlled block of ``--block`` (8) steps, the order
   reversed every other round, each block timed on the host after a synchronisation (wall time inside the script);
   about 2-8 s.

Each model is built, run and freed on its own (one model's failure is reported and the rest run). The run keeps
to ``--budget-s`` (420 s from the script's start, imports included): a model starts only with ``--model-seconds``
(45; twice that for a compiled one) of it left, and one still running 20 s after it is stopped and reported. Written
as it goes, so a run stopped from outside keeps every finished model: per model ``DIR/<model>/`` ``summary.json``,
``report.json.gz``, ``step.png``, ``step.trace.json.gz``, ``step.timeline.json.gz``, ``step.schedule.json.gz``, and
``DIR/summary.json``, ``DIR/located.npz`` after every model (a few MB in all); prints the summary table last. The
compiled models take 35-65 s each to compile on an H100, so on one H100 the eager models fill most of the budget.
``--from DIR`` turns the folder into the committed results (the table with each model's optimum and the verdict in
``docs/results/delivered_<gpu>.txt``, the summaries and located starts in ``rlclock/data/measurements/
delivered-<gpu>/``, a claim in ``docs/results.yaml`` and ``docs/results.md`` rendered again).

    python benchmarks/delivered.py                                    # CPU: every corpus, every mode
    python benchmarks/delivered.py --corpus data/corpus-h200 --only bert --modes blind,settled
    python benchmarks/delivered.py --gpu --out /tmp/delivered         # GPU dry run (dry run), <= 7.5 min
    python benchmarks/delivered.py --from /tmp/delivered              # ... into the committed results
    python benchmarks/delivered.py --rows /tmp/rows.json              # CPU: saved rows (or printed lines) again
    python benchmarks/delivered.py --replay /tmp/delivered            # CPU: the GPU run's models and located steps
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip
import json
import math
import re
import shutil
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

import numpy as np

STARTED = time.perf_counter()
"""When this script started (``time.perf_counter``, seconds): the GPU mode's time budget counts from here, the imports
of torch and the models included."""
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BUDGET = 0.01
LOCATED = 4
"""Timing steps the deployment locates kernels in (``timing_steps`` 8: half of them)."""
REPLAYED = 20
"""Steps replayed where no measured ones are (the stretched model)."""
MODES = ("requests", "blind", "margin", "expected", "settled")
"""``requests``: the policy's requests as its planner judged them (by the switching rule on the planning model alone),
executed by the controller's rule as they are — what deployments ran before plans were judged as executed; the
others: the jitter modes of :class:`rlclock.backends.executable.Execution`."""
CORPORA = ("corpus-h200", "corpus-h200-heldout", "corpus-h100", "corpus-h100-compiled")
POLICY = {"NVIDIA H200": "corpus-h200", "NVIDIA H100 80GB HBM3": "corpus-h100"}
"""The shipped policy planning each GPU's steps."""


def policy_name(gpu: str) -> str:
    """The shipped policy for an NVML name (an H100 or H200 of another form by its family's)."""
    return POLICY.get(gpu) or ("corpus-h200" if "H200" in gpu else "corpus-h100")


# -- CPU mode ---------------------------------------------------------------------------------------------------------


def fit_stretch(report: dict[str, Any], rng: np.random.Generator) -> tuple[float, float]:
    """``(centre, scale)`` of the Laplace step stretch δ whose switch-time errors, ``-τ·δ`` at the switch test's planned
    switch points τ, have the report's median and p95 of |error|."""
    err = report.get("switch_error") or {}
    med, p95 = err.get("median_s"), err.get("p95_abs_s")
    taus = np.array([e[4] for e in report["plan"]["events"]], dtype=float)
    if med is None or p95 is None or not taus.size or not np.isfinite([med, p95]).all():
        return 0.0, 0.0
    u = rng.laplace(0.0, 1.0, size=4096)
    tau = rng.choice(taus, size=u.size)
    centre = -float(med) / float(np.median(taus))

    def p95_of(scale: float) -> float:
        return float(np.percentile(np.abs(-tau * (centre + scale * u)), 95))

    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if p95_of(mid) < p95 else (lo, mid)
    return centre, 0.5 * (lo + hi)


def stretched(start: np.ndarray, centre: float, scale: float, steps: int, rng: np.random.Generator) -> np.ndarray:
    """``(steps, n)`` kernel starts of steps stretched as a whole by a Laplace δ."""
    delta = centre + scale * rng.laplace(0.0, 1.0, size=(steps, 1))
    return start[None, :] * np.maximum(1.0 + delta, 0.1)


def cases(folder: Path, npz: Any) -> list[dict[str, Any]]:
    """The ways a model's steps are replayed: measured steps where ``npz`` holds them, the stretched model always."""
    from rlclock.deploy.timeline import StepTimeline

    timeline = StepTimeline.load(folder / "step.timeline.json.gz")
    out = []
    name = folder.name
    if npz is not None and name in npz.files and folder.parent.name == "corpus-h200":
        starts = npz[name].astype(float) * 1e-6
        dur = np.asarray(npz[name + "/duration"], dtype=float) * 1e-6
        if starts.shape[1] == len(timeline):
            tl = np.maximum.accumulate(np.median(starts[:LOCATED], axis=0))
            tail = timeline.period_s - timeline.span_s
            period = float(np.max(tl + dur)) + max(tail, 0.0)
            out.append(
                {
                    "jitter": "measured",
                    "start": tl,
                    "dur": dur,
                    "period": period,
                    "located": starts[:LOCATED] - tl,
                    "replay": starts[LOCATED:],
                }
            )
    report_path = folder / "switch_report.json"
    if report_path.exists():
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        centre, scale = fit_stretch(json.loads(report_path.read_text()), rng)
        start = np.asarray(timeline.start_s, dtype=float)
        out.append(
            {
                "jitter": f"stretched (δ {100 * centre:+.1f} % ± {100 * scale:.1f} %)",
                "start": start,
                "dur": np.asarray(timeline.duration_s, dtype=float),
                "period": timeline.period_s,
                "located": stretched(start, centre, scale, LOCATED, rng) - start,
                "replay": stretched(start, centre, scale, REPLAYED, rng),
            }
        )
    return out


def replayed(
    t: np.ndarray, e: np.ndarray, executed: Any, replay: np.ndarray, dur: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """Each replayed step's seconds and joules, and the share of switches landing after their segment's first kernel
    started in it."""
    from rlclock.backends.executable import executed_cost

    costs = np.array([executed_cost(t, e, executed, np.maximum.accumulate(p), dur) for p in replay])
    first = executed.segments.first[executed.segment]
    late = [executed.land_s > p[first] + 1e-12 for p in replay] if executed.land_s.size else []
    return costs[:, 0], costs[:, 1], float(np.mean(late)) if len(late) else 0.0


def cpu_model(
    folder: Path,
    npz: Any,
    modes: tuple[str, ...],
    optimum_s: float,
    policy: Any = None,
    label: str = "",
    only_cases: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every replay case of one corpus model (or ``only_cases``), every mode (planned by ``policy``, default the
    shipped one for the model's GPU; ``label`` is added to each mode's name)."""
    from rlclock.backends.executable import Execution, SwitchRule
    from rlclock.deploy.plan import plan_switches
    from rlclock.deploy.timeline import StepTimeline
    from rlclock.policy import ClockPolicy
    from rlclock.schedule import ClockSchedule
    from rlclock.solve.baselines import latency_aware
    from rlclock.solve.evaluation import evaluate
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    trace = refresh_costs(KernelTrace.load(folder / "step.trace.json.gz"))
    gpu = str(trace.meta.get("gpu"))
    policy = policy or ClockPolicy.load(policy_name(gpu))
    latency = policy.gpu.switch_latency_s
    auto_s = np.array([k.measured[0].time_s for k in trace])
    backend = policy.backend_for(trace, auto_s, None, latency)
    t, e = backend.tables
    auto_t, auto_e = float(np.cumsum(t[:, 0])[-1]), float(np.cumsum(e[:, 0])[-1])
    t0 = time.perf_counter()
    opt = latency_aware(backend, BUDGET, optimum_s).evaluation
    opt_s = time.perf_counter() - t0
    rule = SwitchRule.of(latency)
    rows = []
    for case in only_cases if only_cases is not None else cases(folder, npz):
        blind_ex = None
        for mode in modes:
            ex = (
                None
                if mode == "requests"
                else Execution(case["start"], case["dur"], case["period"], rule, case["located"], mode)
            )
            t0 = time.perf_counter()
            sched = policy.schedule(trace, backend=backend, budget=BUDGET, search=True, execution=ex)
            plan_s = time.perf_counter() - t0
            got = Execution(case["start"], case["dur"], case["period"], rule).judge(
                sched.index, t, e, latency, runs=True
            )
            executed = got.executed
            tt, ee, late = replayed(t, e, executed, case["replay"], case["dur"])
            timeline = StepTimeline(case["start"], case["dur"], case["period"])
            skipped = len(plan_switches(ClockSchedule(policy.configs, sched.index), timeline, latency).skipped)
            located = np.abs(case["located"])
            if mode == "blind":
                blind_ex = executed
            judged_by = None
            if mode == "requests":  # what the planner's own figure said
                own = evaluate(sched, backend)
                judged_by = [float(own.saving), float(own.slowdown)]
            rows.append(
                {
                    "model": folder.name,
                    "corpus": folder.parent.name,
                    "jitter": case["jitter"],
                    "mode": mode + label,
                    "plan": sched.name,
                    "planned_saving": 1 - got.planned_energy_j / auto_e,
                    "planned_slowdown": got.planned_time_s / auto_t - 1,
                    "saving": 1 - float(ee.mean()) / auto_e,
                    "slowdown": float(tt.mean()) / auto_t - 1,
                    "worst_slowdown": float(tt.max()) / auto_t - 1,
                    "switches": int(executed.land_s.size),
                    "skipped": skipped,
                    "late": late,
                    "jitter_p95_ms": 1e3 * float(np.percentile(located, 95)),
                    "changed": changed(blind_ex, executed) if mode != "blind" and blind_ex is not None else "",
                    "optimum_saving": float(opt.saving),
                    "optimum_s": opt_s,
                    "plan_s": plan_s,
                    "planner_said": judged_by,
                    "replayed": len(case["replay"]),
                }
            )
    return rows


def changed(blind: Any, other: Any) -> str:
    """What a jitter-aware plan changed against the blind one: switches, and how far the landings moved."""
    a, b = np.sort(blind.land_s), np.sort(other.land_s)
    if not a.size and not b.size:
        return "none (no switch)"
    text = f"{a.size}->{b.size} switches"
    if a.size and b.size:
        moved = np.abs(b[:, None] - a[None, :]).min(axis=1)
        text += f", landings moved median {1e3 * float(np.median(moved)):.1f} ms"
    return text


def cpu(corpora: list[Path], only: str, modes: tuple[str, ...], optimum_s: float, out: Path | None) -> int:
    npz_path = ROOT / "data" / "corpus-h200" / "step-jitter.npz"
    npz = np.load(npz_path) if npz_path.exists() else None
    rows: list[dict[str, Any]] = []
    print(
        f"# CPU replay, budget {100 * BUDGET:g} %, the GPU's default latency; planning model's figures against auto",
        flush=True,
    )
    for corpus in corpora:
        for folder in sorted(p for p in corpus.iterdir() if p.is_dir()):
            if only and not any(part in folder.name for part in only.split(",")):
                continue
            try:
                got = cpu_model(folder, npz, modes, optimum_s)
            except Exception as exc:  # one model's failure is reported; the others still run
                traceback.print_exc()
                print(f"{folder.name}: failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            rows += got
            for r in got:
                print(line(r), flush=True)
            if out is not None:  # after every model: a replay stopped before its end keeps what it did
                out.parent.mkdir(parents=True, exist_ok=True)
                _write_json(out, rows)
    print()
    table(rows)
    return 0


def line(r: dict[str, Any]) -> str:
    ok = r["slowdown"] <= BUDGET + 0.002 and r["saving"] >= 0.8 * r["optimum_saving"]
    of_opt = r["saving"] / r["optimum_saving"] if r["optimum_saving"] > 0 else math.nan
    said = r.get("planner_said")
    note = f" (the planner said {100 * said[0]:.2f}% {100 * said[1]:+.2f}%)" if said else ""
    return (
        f"{r['corpus'][7:]:15s} {r['model']:31s} {r['jitter'][:9]:9s} {r['mode']:8s} "
        f"{100 * r['planned_saving']:5.2f}% {100 * r['planned_slowdown']:+5.2f}% | "
        f"{100 * r['saving']:5.2f}% {100 * r['slowdown']:+5.2f}% {100 * r['worst_slowdown']:+5.2f}% | "
        f"opt {100 * r['optimum_saving']:4.2f}% {of_opt:4.0%} "
        f"sw {r['switches']:2d} skip {r['skipped']} late {100 * r['late']:3.0f}% jit {r['jitter_p95_ms']:5.1f}ms "
        f"{'ok ' if ok else 'MISS'} {r['changed']}{note}"
    )


LINE = re.compile(
    r"^(?P<corpus>\S+)\s+(?P<model>\S+)\s+(?P<jitter>\S+)\s+(?P<mode>\S+)\s+(?P<planned_saving>-?[\d.]+)% "
    r"(?P<planned_slowdown>[-+][\d.]+)% \|\s+(?P<saving>-?[\d.]+)% (?P<slowdown>[-+][\d.]+)% "
    r"(?P<worst_slowdown>[-+][\d.]+)% \| opt (?P<optimum_saving>-?[\d.]+)%\s+\S+ sw\s+(?P<switches>\d+) "
    r"skip (?P<skipped>\d+) late\s+(?P<late>\d+)% jit\s+(?P<jitter_p95_ms>[\d.]+)ms (?:ok |MISS) ?(?P<changed>.*)$"
)
"""A line of :func:`line`, read back (:func:`parse_line`)."""


def parse_line(text: str) -> dict[str, Any] | None:
    """The row a line of :func:`line` prints, read back to its printed precision (fractions, as the rows hold them);
    None for any other line. A replay stopped before its end keeps its printed lines: ``--rows`` tables them."""
    m = LINE.match(text)
    if m is None:
        return None
    g = m.groupdict()
    row: dict[str, Any] = {
        "corpus": "corpus-" + g["corpus"],
        "model": g["model"],
        "jitter": g["jitter"],
        "mode": g["mode"],
        "changed": g["changed"].split(" (the planner said")[0],
        "switches": int(g["switches"]),
        "skipped": int(g["skipped"]),
        "jitter_p95_ms": float(g["jitter_p95_ms"]),
        "late": float(g["late"]) / 100,
    }
    for k in ("planned_saving", "planned_slowdown", "saving", "slowdown", "worst_slowdown", "optimum_saving"):
        row[k] = float(g[k]) / 100
    return row


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows from a ``--out`` JSON, or from the lines a replay printed (any other line is left out)."""
    if path.suffix == ".json":
        return list(json.loads(path.read_text()))
    return [r for r in (parse_line(t) for t in path.read_text().splitlines()) if r is not None]


def _summary_line(label: str, sel: list[dict[str, Any]]) -> str:
    """One line of :func:`table` over the rows ``sel``."""
    slow = sum(r["slowdown"] <= BUDGET + 0.002 for r in sel)
    save = sum(r["saving"] >= 0.8 * r["optimum_saving"] for r in sel)
    both = sum(r["slowdown"] <= BUDGET + 0.002 and r["saving"] >= 0.8 * r["optimum_saving"] for r in sel)
    share = np.mean([r["saving"] / r["optimum_saving"] for r in sel if r["optimum_saving"] > 0])
    mean = {
        k: 100 * float(np.mean([r[k] for r in sel]))
        for k in ("planned_saving", "planned_slowdown", "saving", "slowdown", "optimum_saving")
    }
    return (
        f"{label} models {len(sel):2d}: slowdown target {slow:2d}, saving target {save:2d}, both {both:2d}; "
        f"mean planned {mean['planned_saving']:.2f} % at {mean['planned_slowdown']:+.2f} %, delivered "
        f"{mean['saving']:.2f} % at {mean['slowdown']:+.2f} % (optimum {mean['optimum_saving']:.2f} %); "
        f"delivered saving {100 * share:5.1f} % of the optimum's; worst slowdown "
        f"{100 * max(r['slowdown'] for r in sel):+.2f} %; skipped segments {sum(r['skipped'] for r in sel)}"
    )


def table(rows: list[dict[str, Any]]) -> None:
    """Per jitter source and mode, then per corpus, jitter source and mode: models meeting each target (delivered
    slowdown <= budget + 0.2 pp; delivered saving >= 80 % of the jitter-free optimum's), and the means (%)."""

    def order(k: tuple[str, ...]) -> tuple[Any, ...]:
        return (*k[:-1], MODES.index(k[-1].split("+")[0]), k[-1])

    print(
        "== per mode: models within budget + 0.2 pp delivered; models at >= 80 % of the optimum's saving delivered; "
        "mean planned and delivered saving and slowdown; mean delivered saving over the optimum's; worst delivered "
        "slowdown"
    )
    for source, mode in sorted({(r["jitter"].split(" ")[0], r["mode"]) for r in rows}, key=order):
        sel = [r for r in rows if r["jitter"].startswith(source) and r["mode"] == mode]
        print(_summary_line(f"{source:9s} {mode:8s}", sel))
    print("\n== per corpus and mode")
    for corpus, source, mode in sorted({(r["corpus"], r["jitter"].split(" ")[0], r["mode"]) for r in rows}, key=order):
        sel = [r for r in rows if r["corpus"] == corpus and r["jitter"].startswith(source) and r["mode"] == mode]
        print(_summary_line(f"{corpus[7:]:15s} {source:9s} {mode:8s}", sel))


# -- PPO on landings that jitter as measured ----------------------------------------------------------------------


def landing_jitter(npz: Any) -> np.ndarray:
    """How much later than its median place each kernel started in each located step, seconds, pooled over the
    corpus models of ``npz``: a switch timed from the step's anchor lands that much earlier among the kernels."""
    out = []
    for name in [f for f in npz.files if "/" not in f and f != "meta"]:
        starts = npz[name].astype(float)[:LOCATED] * 1e-6
        out.append((starts - np.median(starts, axis=0)[None, :]).ravel())
    return np.concatenate(out)


def ppo(out: Path, timesteps: int, seed: int, modes: tuple[str, ...], optimum_s: float) -> int:
    """The shipped corpus policy's recipe (imitation of the exact optimum, then PPO) trained again on the H200 corpus
    with every switch landing a random measured displacement away (the switching rule's latency plus a draw of
    :func:`landing_jitter`, for the whole run of this function: the env's switching engine is wrapped here), then
    planned and replayed like the shipped policy. Writes the run folder under ``out`` and the rows to
    ``out/ppo.json``."""
    import rlclock.backends.switching as switching
    from rlclock.agents.train import train
    from rlclock.config import load_env_specs
    from rlclock.config.recipe import load_agent_config
    from rlclock.policy import ClockPolicy

    npz = np.load(ROOT / "data" / "corpus-h200" / "step-jitter.npz")
    deltas = landing_jitter(npz)
    rng = np.random.default_rng(seed)
    plain = switching.SwitchEngine.step

    def jittered(time_row: Any, energy_row: Any, request: Any, state: Any, latency_s: Any) -> Any:
        lat = np.broadcast_to(np.asarray(latency_s, dtype=float), request.shape)
        return plain(time_row, energy_row, request, state, np.maximum(lat - rng.choice(deltas, lat.shape), 0.0))

    agent = load_agent_config("real-steps").with_(timesteps=int(timesteps), seed=int(seed))
    specs = load_env_specs(["corpus-h200"])
    t0 = time.perf_counter()
    switching.SwitchEngine.step = staticmethod(jittered)  # type: ignore[method-assign]
    try:
        result = train(specs, agent, runs_dir=out, name="corpus-h200-jittered", progress=False)
    finally:
        switching.SwitchEngine.step = staticmethod(plain)  # type: ignore[method-assign]
    train_s = time.perf_counter() - t0
    policy = ClockPolicy.load(result.checkpoint)
    print(
        f"# trained in {train_s:.0f} s ({timesteps} PPO timesteps, seed {seed}) with landings jittered as measured "
        f"(p95 {1e3 * float(np.percentile(np.abs(deltas), 95)):.1f} ms)",
        flush=True,
    )
    rows = []
    for folder in sorted(p for p in (ROOT / "data" / "corpus-h200").iterdir() if p.is_dir()):
        got = cpu_model(folder, npz, modes, optimum_s, policy, "+ppo")
        rows += [r for r in got if r["jitter"] == "measured"]
        for r in got:
            if r["jitter"] == "measured":
                print(line(r), flush=True)
    table(rows)
    (out / "ppo.json").write_text(json.dumps({"train_s": train_s, "timesteps": timesteps, "rows": rows}, indent=1))
    return 0


# -- GPU mode ---------------------------------------------------------------------------------------------------------


def gpu_entries() -> list[tuple[str, Any]]:
    """(name, maker) of every model: the corpus, the held-out set, then the compiled ones."""
    from corpus_gpu import build, compiled, heldout_models, hf_models, small_gpt

    entries: list[tuple[str, Any]] = []

    def hf(name: str, config: Any, shape: Any) -> Any:
        def make() -> Any:
            model, batch, task = build(name, config, shape)
            return model, batch, None, task, config, shape

        return make

    def small() -> Any:
        model, batch, loss = small_gpt()
        return model, batch, loss, "causal-lm", {}, {"batch": 16, "seq": 512}

    corpus = [(n, hf(n, c, s)) for n, (c, s) in hf_models().items()] + [("train-small-gpt", small)]
    heldout = [(n, hf(n, c, s)) for n, (c, s) in heldout_models().items()]
    for name, make in corpus + heldout:
        entries.append((name, lambda make=make: compiled(make, "eager")))
    for name, make in corpus:
        if name in ("bert-base", "gpt2-medium", "llama-0.5b-mha", "train-small-gpt", "vit-base"):
            for mode in ("default", "reduce-overhead"):
                entries.append((f"{name}+{mode}", lambda make=make, mode=mode: compiled(make, mode)))
    return entries


def controlled_run(step: Any, model: Any, checkpoint: str, scratch: Path, steps: int) -> Any:
    """The deployment as rlclock apply runs it (dry run), every step timed: returns the Clocked."""
    import rlclock.deploy

    with rlclock.deploy.clocked(
        checkpoint=checkpoint,
        save=str(scratch),
        report=str(scratch / "report.json"),
        time_all_steps=True,
        verbose=False,
    ) as clk:
        total = 3 + 5 + 8 + steps
        for _ in range(total):
            with clk.step():
                step()
    return clk


def located_run(step: Any, schedule: Any, timeline: Any, steps: int) -> tuple[Any, np.ndarray]:
    """The same plan under a CUDA-activity profile with a marker kernel per step: the controller and each step's
    kernel starts after its marker (µs), for the steps whose kernels are the timeline's."""
    import torch

    import rlclock.deploy
    from rlclock.deploy.capture import marked_steps
    from rlclock.workload.torch_profile import export_chrome

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    with rlclock.deploy.clocked(schedule, timeline=timeline, time_all_steps=True, verbose=False) as clk:
        prof.__enter__()
        for _ in range(steps):
            with clk.step():
                torch.cuda._sleep(1)
                step()
        torch.cuda.synchronize()
        prof.__exit__(None, None, None)
    names = tuple(timeline.names)
    starts = []
    for anchor, body in marked_steps(export_chrome(prof))[-steps:]:
        starts.append([a[0] - anchor for a in body] if tuple(a[2] for a in body) == names else None)
    return clk, starts


def located_delivered(clk: Any, costs: Any, starts: list[Any], timeline: Any) -> dict[str, Any]:
    """Each step of the located run priced where its kernels really ran, its switches landing at their issue time
    plus the latency (times after the step's anchor, the anchors' clock)."""
    ctl = clk.controller
    plan = ctl.plan
    log = ctl.anchor_log
    anchors = dict(zip(log.step, log.final_anchors_s(), strict=True))
    lands = sorted(
        (r[4] + plan.latency_s, ctl.plans[getattr(r, "plan", 0)].events[r[2]].config if r[2] >= 0 else plan.initial)
        for r in ctl.worker_result.get("records", [])
        if r[0] in ("switch", "boundary", "resync") and math.isfinite(r[4])
    )
    land_abs = np.array([x[0] for x in lands])
    rows = []
    for k, got in enumerate(starts):
        if got is None or k == 0 or k not in anchors:
            continue
        a = anchors[k]
        place = np.maximum.accumulate(np.array(got, dtype=float) * 1e-6)
        i = int(np.searchsorted(land_abs, a, side="right"))
        j = int(np.searchsorted(land_abs, a + place[-1] + timeline.duration_s[-1], side="right"))
        before = lands[i - 1][1] if i > 0 else plan.initial
        rows.append(costs.cost(place, timeline.duration_s, land_abs[i:j] - a, [c for _, c in lands[i:j]], before))
    if not rows:
        return {"steps": 0}
    arr = np.array(rows)
    return {
        "steps": len(rows),
        "saving": 1 - float(arr[:, 1].mean()) / costs.auto_energy_j,
        "slowdown": float(arr[:, 0].mean()) / costs.auto_time_s - 1,
        "worst_slowdown": float(arr[:, 0].max()) / costs.auto_time_s - 1,
    }


def overhead(step: Any, schedule: Any, timeline: Any, rounds: int, block: int) -> dict[str, Any]:
    """Bare and controlled blocks interleaved (the order reversed every other round), each timed on the host after a
    synchronisation: the deployment's overhead on the step's wall time."""
    import torch

    import rlclock.deploy

    walls: dict[str, list[float]] = {"bare": [], "controlled": []}
    with rlclock.deploy.clocked(schedule, timeline=timeline, verbose=False) as clk:
        for r in range(rounds):
            for kind in ("bare", "controlled") if r % 2 == 0 else ("controlled", "bare"):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(block):
                    if kind == "bare":
                        step()
                    else:
                        with clk.step():
                            step()
                torch.cuda.synchronize()
                walls[kind].append((time.perf_counter() - t0) / block)
    bare, ctl = float(np.median(walls["bare"])), float(np.median(walls["controlled"]))
    return {"bare_s": bare, "controlled_s": ctl, "overhead": ctl / bare - 1, "walls": walls}


def _gz(src: Path, dst: Path) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb") as g:
        shutil.copyfileobj(f, g)


class BudgetSpent(Exception):
    """Raised in the model being run when the run's time budget (plus its grace) is spent."""


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON through a temporary file, so a run killed while writing leaves the previous file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


def needed_s(name: str, model_s: float) -> float:
    """The budget a model needs left to be started, seconds: ``model_s``, twice that for a compiled one (it
    compiles first)."""
    return model_s * (2.0 if "+" in name else 1.0)


def run_models(
    out: Path,
    entries: list[tuple[str, Any]],
    measure: Any,
    budget_s: float,
    model_s: float,
    grace_s: float = 20.0,
    only: str = "",
    header: dict[str, Any] | None = None,
    started: float | None = None,
) -> dict[str, Any]:
    """Run ``measure(name, make, folder, left_s) -> summary`` on each entry in order, writing as it goes:
    ``out/<model>/summary.json`` and ``out/summary.json`` after every model, so a run stopped from outside still
    leaves every finished model's results. A model starts only with :func:`needed_s` of ``budget_s`` (seconds from
    ``started``, a ``time.perf_counter`` reading; default this call) left; one still running ``grace_s`` seconds
    after the budget is stopped (``SIGALRM``, where there is one) and reported; one model's failure is reported and
    the rest run. Returns the summaries by model."""
    import signal

    started = time.perf_counter() if started is None else started
    out.mkdir(parents=True, exist_ok=True)
    summaries: dict[str, Any] = {}
    alarm = hasattr(signal, "setitimer")

    def spent(_signum: int, _frame: Any) -> None:
        raise BudgetSpent(f"the time budget ({budget_s:.0f} s + {grace_s:.0f} s) is spent")

    previous = signal.signal(signal.SIGALRM, spent) if alarm else None
    try:
        for name, make in entries:
            if only and not any(part in name for part in only.split(",")):
                continue
            left = budget_s - (time.perf_counter() - started)
            if left < needed_s(name, model_s):
                s: dict[str, Any] = {"model": name, "skipped": f"{max(left, 0):.0f} s of the time budget left"}
                print(f"=== {name}: skipped ({max(left, 0):.0f} s left)", flush=True)
            else:
                print(f"=== {name}", flush=True)
                t0 = time.perf_counter()
                folder = out / name
                folder.mkdir(parents=True, exist_ok=True)
                if alarm:
                    signal.setitimer(signal.ITIMER_REAL, left + grace_s)
                try:
                    s = measure(name, make, folder, left)
                    s["wall_s"] = time.perf_counter() - t0
                    print(gpu_line(s), flush=True)
                except Exception as exc:  # one model's failure (or the budget's end) is reported; the rest run
                    if not isinstance(exc, BudgetSpent):
                        traceback.print_exc()
                    s = {"model": name, "error": f"{type(exc).__name__}: {exc}", "wall_s": time.perf_counter() - t0}
                    print(f"{name}: failed: {s['error']}", flush=True)
                finally:
                    if alarm:
                        signal.setitimer(signal.ITIMER_REAL, 0.0)
                _write_json(folder / "summary.json", s)
            summaries[name] = s
            _write_json(
                out / "summary.json",
                {
                    **(header or {}),
                    "elapsed_s": time.perf_counter() - started,
                    "budget_s": budget_s,
                    "models": summaries,
                },
            )
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, previous)
    return summaries


def gpu(
    out: Path, only: str, steps: int, located: int, rounds: int, block: int, budget_s: float, model_s: float
) -> int:
    """The GPU mode: every model of :func:`gpu_entries` measured by :func:`measure_on_gpu` within ``budget_s``
    seconds (see :func:`run_models`); prints the summary table last."""
    import torch

    from rlclock.deploy.delivered import execution_for  # noqa: F401 (imported early: its import time is not a model's)

    gpu_name = torch.cuda.get_device_name()
    checkpoint = policy_name(gpu_name)
    located_arrays: dict[str, np.ndarray] = {}
    print(
        f"# {gpu_name}, policy {checkpoint}, dry run (nothing is set), budget "
        f"{100 * BUDGET:g} %, time budget {budget_s:.0f} s",
        flush=True,
    )

    def measure(name: str, make: Any, folder: Path, left_s: float) -> dict[str, Any]:
        s = measure_on_gpu(
            name, make, folder, left_s, gpu_name, checkpoint, steps, located, rounds, block, located_arrays
        )
        np.savez_compressed(out / "located.npz", **located_arrays)
        return s

    header = {"gpu": gpu_name, "policy": checkpoint, "budget": BUDGET}
    summaries = run_models(out, gpu_entries(), measure, budget_s, model_s, only=only, header=header, started=STARTED)
    np.savez_compressed(out / "located.npz", **located_arrays)
    print(
        f"\n# {len([s for s in summaries.values() if 'saving' in s])} models in "
        f"{time.perf_counter() - STARTED:.0f} s; planning model's figures against auto, dry run: would deliver"
    )
    print(gpu_table(summaries))
    return 0 if all("error" not in s for s in summaries.values()) else 1


def measure_on_gpu(
    name: str,
    make: Any,
    folder: Path,
    left_s: float,
    gpu_name: str,
    checkpoint: str,
    steps: int,
    located: int,
    rounds: int,
    block: int,
    located_arrays: dict[str, np.ndarray],
) -> dict[str, Any]:
    """One model on the GPU: built, the deployment run (dry run), its located steps and its overhead while
    ``left_s`` (seconds of the run's budget) allows, then freed. Returns its summary; writes its files to
    ``folder``."""
    import gc

    import torch

    t0 = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="rlclock-delivered-"))
    model = step = None
    try:
        model, step, _task, _config, _shape = make()
        clk = controlled_run(step, model, checkpoint, scratch, steps)
        parts = {"run_s": time.perf_counter() - t0}
        s = summary_of(clk, name, gpu_name, checkpoint)
        timeline = clk.timeline
        for f in ("step.trace.json", "step.timeline.json", "step.schedule.json"):
            if (scratch / f).exists():
                _gz(scratch / f, folder / f"{f}.gz")
        if (scratch / "step.png").exists():
            shutil.copy(scratch / "step.png", folder / "step.png")
        with gzip.open(folder / "report.json.gz", "wt") as g:
            json.dump(clk.report.as_dict(), g, default=str)
        if left_s - (time.perf_counter() - t0) > 20:
            t1 = time.perf_counter()
            lclk, starts = located_run(step, clk.schedule, timeline, located)
            s["located"] = located_delivered(lclk, clk.costs, starts, timeline)
            kept = [x for x in starts if x is not None]
            if kept:
                located_arrays[name] = np.round(np.maximum(np.array(kept), 0.0)).astype(np.uint32)
            parts["located_s"] = time.perf_counter() - t1
        if left_s - (time.perf_counter() - t0) > 10:
            t1 = time.perf_counter()
            s["overhead"] = overhead(step, clk.schedule, timeline, rounds, block)
            parts["overhead_s"] = time.perf_counter() - t1
        s["parts_s"] = parts
        return s
    finally:
        model = step = None
        gc.collect()
        torch.cuda.empty_cache()
        shutil.rmtree(scratch, ignore_errors=True)


def summary_of(clk: Any, name: str, gpu_name: str, policy: str) -> dict[str, Any]:
    """A finished deployment's summary (a :class:`rlclock.deploy.api.Clocked` after its block): planned and delivered
    saving and slowdown (fractions against auto, the planning model's), switches, segments skipped, switches missed,
    the late share, the jitter its timing steps measured and the switch-time error (p95, ms), the step time (s).

    Raises:
        RuntimeError: No controller ran (the deployment says why).
    """
    rep = clk.report
    if rep is None:
        raise RuntimeError(f"no controller ran ({clk.reason or clk.state})")
    d = rep.delivered
    if d is None:
        raise RuntimeError("the report has no delivered figures (no planning costs)")
    plan = clk.controller.plan
    jitter = clk.timeline.jitter_s
    return {
        "model": name,
        "gpu": gpu_name,
        "policy": policy,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "planned_saving": d.planned_saving,
        "planned_slowdown": d.planned_slowdown,
        "saving": d.saving,
        "slowdown": d.slowdown,
        "worst_slowdown": d.worst_slowdown,
        "delivered_steps": d.steps,
        "switches": plan.n_switches,
        "skipped": len(plan.skipped),
        "missed": rep.missed,
        "late_fraction": rep.late_fraction,
        "schedule": clk.schedule.name,
        "jitter_p95_ms": None if jitter is None else 1e3 * float(np.percentile(np.abs(jitter), 95)),
        "switch_error_p95_ms": 1e3 * rep.switch_error.p95_abs_s,
        "step_time_s": rep.step_time_s,
    }


def gpu_table(summaries: dict[str, Any]) -> str:
    """The GPU run's table: a head line, then one line a model."""
    return "\n".join([GPU_HEAD, *(gpu_line(s) for s in summaries.values())])


GPU_HEAD = (
    f"{'model':31s} {'planned':>15s} | {'would deliver':>15s} {'worst':>7s} | {'kernels located':>15s} | "
    f"sw skip miss late  jit p95 | overhead"
)


def gpu_line(s: dict[str, Any]) -> str:
    if "saving" not in s:
        return f"{s['model']:31s} {s.get('error') or s.get('skipped')}"
    loc = s.get("located") or {}
    located = f"{100 * loc['saving']:6.2f}% {100 * loc['slowdown']:+6.2f}%" if loc.get("steps") else f"{'-':>15s}"
    over = s.get("overhead")
    jit = s.get("jitter_p95_ms")
    return (
        f"{s['model']:31s} {100 * s['planned_saving']:6.2f}% {100 * s['planned_slowdown']:+6.2f}% | "
        f"{100 * s['saving']:6.2f}% {100 * s['slowdown']:+6.2f}% {100 * s['worst_slowdown']:+6.2f}% | "
        f"{located} | {s['switches']:2d} {s['skipped']:4d} {s['missed']:4d} "
        f"{100 * (s['late_fraction'] or 0):3.0f}% "
        f"{'     -  ' if jit is None else format(jit, '6.2f') + 'ms'} | "
        f"{'-' if over is None else format(100 * over['overhead'], '+.2f') + ' %'}"
    )


def gpu_slug(gpu_name: str) -> str:
    """``h100``, ``h200`` or the NVML name made a file name (lower case, words joined by ``-``)."""
    for family in ("H100", "H200"):
        if family in gpu_name:
            return family.lower()
    return "-".join("".join(c if c.isalnum() else " " for c in gpu_name.lower()).split()) or "gpu"


def optimum_of(folder: Path, optimum_s: float) -> float | None:
    """The jitter-free latency-aware optimum's saving on a GPU run's model (its saved step trace, planned on the
    shipped policy's planning model, 1 % budget, ``optimum_s`` seconds at most); None without a trace."""
    from rlclock.policy import ClockPolicy
    from rlclock.solve.baselines import latency_aware
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    path = folder / "step.trace.json.gz"
    if not path.is_file():
        return None
    trace = refresh_costs(KernelTrace.load(path))
    policy = ClockPolicy.load(policy_name(str(trace.meta.get("gpu"))))
    auto_s = np.array([k.measured[0].time_s for k in trace])
    backend = policy.backend_for(trace, auto_s, None, policy.gpu.switch_latency_s)
    return float(latency_aware(backend, BUDGET, optimum_s).evaluation.saving)


def gpu_targets(summaries: dict[str, Any]) -> str:
    """The GPU run's verdict lines: models within budget + 0.2 pp delivered, at >= 80 % of the optimum's saving, the
    worst delivered slowdown and the largest overhead."""
    done = [s for s in summaries.values() if "saving" in s]
    if not done:
        return "no model finished"
    slow = sum(s["slowdown"] <= BUDGET + 0.002 for s in done)
    with_opt = [s for s in done if s.get("optimum_saving")]
    save = sum(s["saving"] >= 0.8 * s["optimum_saving"] for s in with_opt)
    overheads = [s["overhead"]["overhead"] for s in done if s.get("overhead")]
    worst = max(done, key=lambda s: s["slowdown"])
    lines = [
        f"models finished {len(done)} of {len(summaries)}; delivered slowdown <= budget + 0.2 pp on {slow} of "
        f"{len(done)}; delivered saving >= 80 % of the optimum's on {save} of {len(with_opt)}; worst delivered "
        f"slowdown {100 * worst['slowdown']:+.2f} % ({worst['model']}); mean planned saving "
        f"{100 * float(np.mean([s['planned_saving'] for s in done])):.2f} %, delivered "
        f"{100 * float(np.mean([s['saving'] for s in done])):.2f} %"
    ]
    if overheads:
        lines.append(
            f"overhead on the step: largest {100 * max(overheads):+.2f} %, within 1 % on "
            f"{sum(o <= 0.01 for o in overheads)} of {len(overheads)}"
        )
    met = slow == len(done) and save == len(with_opt) == len(done)
    lines.append(f"targets (every model finished): {'met' if met else 'MISSED'}")
    return "\n".join(lines)


def from_gpu_run(folder: Path, root: Path = ROOT, optimum_s: float = 10.0, render: bool = True) -> list[Path]:
    """Turn a GPU run's folder into committed results: ``docs/results/delivered_<gpu>.txt`` (the table, each model's
    optimum computed here, and the verdict), ``rlclock/data/measurements/delivered-<gpu>/summary.json`` (and the
    located kernel starts), a claim in ``docs/results.yaml`` when it has none for that text, and — with
    ``render`` — ``docs/results.md`` rendered again. Returns the files written."""
    data = json.loads((folder / "summary.json").read_text())
    summaries: dict[str, Any] = data.get("models", data)
    gpu_name = str(data.get("gpu") or next((s.get("gpu") for s in summaries.values() if s.get("gpu")), "GPU"))
    slug = gpu_slug(gpu_name)
    for name, s in summaries.items():
        if "saving" in s and "optimum_saving" not in s:
            try:
                s["optimum_saving"] = optimum_of(folder / name, optimum_s)
            except Exception as exc:  # a model whose trace cannot be planned here is reported without its optimum
                s["optimum_error"] = f"{type(exc).__name__}: {exc}"
    text = root / "docs" / "results" / f"delivered_{slug}.txt"
    text.parent.mkdir(parents=True, exist_ok=True)
    text.write_text(
        f"# python benchmarks/delivered.py --gpu --out DIR; python benchmarks/delivered.py --from DIR\n"
        f"# {gpu_name}, policy {data.get('policy', '?')}, dry run (nothing is set), budget "
        f"{100 * BUDGET:g} %, {float(data.get('elapsed_s', math.nan)):.0f} s of "
        f"{float(data.get('budget_s', math.nan)):.0f} s; planning model's figures against auto\n"
        f"{gpu_table(summaries)}\n\n{gpu_targets(summaries)}\n"
    )
    kept = root / "rlclock" / "data" / "measurements" / f"delivered-{slug}"
    kept.mkdir(parents=True, exist_ok=True)
    _write_json(kept / "summary.json", {**data, "models": summaries})
    written = [text, kept / "summary.json"]
    located = folder / "located.npz"
    if located.is_file() and located.stat().st_size < 8 << 20:
        shutil.copy(located, kept / "located.npz")
        written.append(kept / "located.npz")
    registry = root / "docs" / "results.yaml"
    rel = text.relative_to(root).as_posix()
    if registry.is_file() and rel not in registry.read_text():
        import yaml

        claim = yaml.safe_dump([gpu_claim(gpu_name, rel)], sort_keys=False, allow_unicode=True, width=1000)
        with registry.open("a") as f:
            f.write("".join(f"      {ln}\n" for ln in claim.splitlines()))
        written.append(registry)
    if render and registry.is_file():
        import results_page

        if results_page.main([]) != 0:
            raise SystemExit("docs/results.md could not be rendered: see above")
        written.append(root / "docs" / "results.md")
    return written


def gpu_claim(gpu_name: str, output: str) -> dict[str, Any]:
    """The claim ``--from`` adds to docs/results.yaml (its last section, the delivered figures) for a GPU's text."""
    return {
        "claim": f"Deployment dry run on the {gpu_name}, every model: planned, and would deliver with the switches "
        "landing where the step's kernels ran",
        "target": "delivered slowdown ≤ 1.2 %, delivered saving ≥ 80 % of the optimum's, on every model",
        "kind": "planned",
        "machine": f"real {gpu_name}, dry run (dry run), priced on the planning model",
        "command": "python benchmarks/delivered.py --gpu --out DIR; python benchmarks/delivered.py --from DIR",
        "output": output,
        "read": {
            "regex": r"delivered slowdown <= budget \+ 0.2 pp on (?P<slow>\d+) of (?P<done>\d+); delivered "
            r"saving >= 80 % of the optimum.s on (?P<save>\d+) of \d+; worst delivered slowdown "
            r"(?P<worst>[-+][\d.]+) %.*mean planned saving (?P<planned>[\d.]+) %, delivered "
            r"(?P<delivered>[\d.]+) %"
        },
        "show": "planned {planned} %, would deliver {delivered} %; slowdown target on {slow} of {done}, saving "
        "target on {save}; worst {worst} %",
        "verdict": {"regex": r"targets \(every model finished\): (\w+)"},
    }


def replay(folder: Path, modes: tuple[str, ...], optimum_s: float) -> int:
    """The GPU run's models replayed on the CPU: planned from their saved trace and timeline (the deployment's, with
    its timing steps' jitter) in each mode, and replayed over the kernel starts of the located run."""
    from rlclock.deploy.timeline import StepTimeline

    data = np.load(folder / "located.npz")
    rows = []
    for name in sorted(data.files):
        timeline = StepTimeline.load(folder / name / "step.timeline.json.gz")
        if timeline.jitter_s is None:
            continue
        case = {
            "jitter": "measured",
            "start": np.asarray(timeline.start_s),
            "dur": np.asarray(timeline.duration_s),
            "period": timeline.period_s,
            "located": np.asarray(timeline.jitter_s),
            "replay": data[name].astype(float) * 1e-6,
        }
        rows += cpu_model(folder / name, None, modes, optimum_s, only_cases=[case])
    for r in rows:
        print(line(r))
    table(rows)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true", help="run on this machine's GPU (dry run, dry run)")
    parser.add_argument("--out", type=Path, help="GPU mode: the folder to write to; CPU mode: a JSON of the rows")
    parser.add_argument("--replay", type=Path, help="CPU: replay a GPU run's folder")
    parser.add_argument(
        "--ppo",
        type=int,
        metavar="TIMESTEPS",
        help="CPU: train the corpus recipe with PPO on "
        "landings jittered as measured for this many timesteps, then replay its plans (--out DIR)",
    )
    parser.add_argument("--seed", type=int, default=0, help="--ppo: the seed")
    parser.add_argument("--corpus", type=Path, action="append", help="CPU: a corpus folder (default: all four)")
    parser.add_argument("--only", default="", help="models whose name contains this (or one of these, comma-separated)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"CPU: jitter modes (default {','.join(MODES)})")
    parser.add_argument("--optimum-seconds", type=float, default=10.0, help="CPU: the optimum's time limit a model")
    parser.add_argument("--steps", type=int, default=16, help="GPU: controlled steps (default 16)")
    parser.add_argument("--located", type=int, default=10, help="GPU: controlled steps located (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="GPU: overhead rounds (default 3)")
    parser.add_argument("--block", type=int, default=8, help="GPU: steps per overhead block (default 8)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="GPU: the run's time budget from the script's start, seconds; no model starts after it, "
        "one still running 20 s later is stopped (default 420)",
    )
    parser.add_argument(
        "--model-seconds",
        type=float,
        default=45.0,
        help="GPU: start a model only with this much of the budget left, twice it for a compiled one (default 45 s)",
    )
    parser.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        metavar="DIR",
        help="turn a GPU run's folder into committed results (docs/results/delivered_<gpu>.txt, "
        "rlclock/data/measurements/delivered-<gpu>/, a claim in docs/results.yaml, "
        "docs/results.md rendered again)",
    )
    parser.add_argument(
        "--rows",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="CPU: print the lines and tables of "
        "saved --out JSONs, or of the printed lines of replays (stopped or not), again (no planning)",
    )
    args = parser.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    if set(modes) - set(MODES):
        parser.error(f"--modes takes {', '.join(MODES)}")
    if args.gpu:
        if args.out is None:
            parser.error("--gpu needs --out DIR")
        return gpu(
            args.out, args.only, args.steps, args.located, args.rounds, args.block, args.budget_s, args.model_seconds
        )
    if args.from_dir is not None:
        for path in from_gpu_run(args.from_dir, optimum_s=args.optimum_seconds):
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        return 0
    if args.rows:  # a model replayed in several files: the last file's rows; --modes' modes only
        kept = {
            (r["corpus"], r["model"], r["jitter"].split(" ")[0], r["mode"]): r
            for path in args.rows
            for r in read_rows(path)
            if r["mode"].split("+")[0] in modes
        }
        rows = list(kept.values())
        print(
            f"# CPU replay, budget {100 * BUDGET:g} %, the GPU's default latency; planning model's figures against auto"
        )
        models = {(r["corpus"], r["model"]) for r in rows}
        print(
            f"# {len(models)} models in {len({c for c, _ in models})} corpora, modes "
            f"{', '.join(sorted({r['mode'] for r in rows}, key=lambda m: MODES.index(m.split('+')[0])))}"
        )
        for r in rows:
            print(line(r))
        print()
        table(rows)
        return 0
    if args.replay is not None:
        return replay(args.replay, modes, args.optimum_seconds)
    if args.ppo is not None:
        if args.out is None:
            parser.error("--ppo needs --out DIR")
        return ppo(args.out, args.ppo, args.seed, modes, args.optimum_seconds)
    corpora = args.corpus or [ROOT / "data" / c for c in CORPORA]
    return cpu(corpora, args.only, modes, args.optimum_seconds, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
