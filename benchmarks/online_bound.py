"""How many steps the online goal needs at the measured step noise: the statistical limit of learning a plan's
slowdown from step times, and what an oracle could reach within it.

The goal (``benchmarks/online.py``): the plan a learner commits to saves >= 90 % of the true GPU's best within the
budget + 0.2 pp, by 2 000 steps. A learner that reads step times commits to a plan only once its slowdown is
certified: :class:`~rlclock.agents.online.PairedTracker` commits to a mix whose estimated slowdown is within the
budget and whose slowdown ``z`` (2) standard deviations up is within budget + ``tolerance`` (0.2 pp). Whatever the
learner, that certificate needs the standard error of the mix's measured slowdown, and that error is set by the
step-time noise and by how many steps the mix ran.

Part 1, the noise alone (the same replay the true GPUs use, :class:`~rlclock.backends.true_gpu.StepNoise`, each of
the measured series): ``--replays`` runs of a plan 1 % slower than auto, measured

* **paired** as the tracker measures while it learns: auto on one step of every two, at a random place in each
  cycle, the plan on the other — all of the plan steps on the one plan, as an oracle would spend them — read by
  :class:`~rlclock.agents.measured.PairedSlowdown` (each run against the auto steps bracketing it);
* in **windows**, as the window learners measure: the job's windows (``MeasuredJob.window_steps``, >= 1 s) of the
  plan and of auto in turn, read by :class:`~rlclock.agents.measured.Estimates` (window means against window means).

Printed per series and N = 500 / 1 000 / 2 000 / 5 000 / 10 000 steps (half of them the plan's): the true standard
error (the spread of the estimate over the replays), the one the estimator reports (median) and the bias, pp; and
the steps at which the standard error reaches ``tolerance / z`` — what a mix exactly at the budget needs.

Part 2, the oracle on the 60 cases of ``benchmarks/online.py`` (the same workloads, true GPUs and candidate plans,
built by its own functions): it knows every candidate's true slowdown and saving and commits, at N, to the most
saving mix of two candidates it can certify — true slowdown ``s`` within the budget and ``s + z * se(N)`` within
budget + tolerance, ``se(N)`` the standard error of its case's noise series at N (as the estimator reports it, and
as it truly is). It reaches the goal where that mix saves >= 90 % of the true best (a true GPU on which nothing
saves, best 0, counts as missed, as in ``benchmarks/online.py``). This oracle wastes no step on probing and is never
unlucky in its estimate: no learner that reads step times can do better. Printed beside it, the expected rate of an
oracle that knows the ordering but reads its mix's slowdown with the measured error (normal, of the true standard
error): it commits to the mix whose estimate is the most it can certify, so its true slowdown is off by that error,
and it meets the goal only where that lands between the least slowdown of 90 % of the best and budget + 0.2 pp.
Per case also the steps the exact oracle needs: those at which ``z`` standard errors fit between the least slowdown
at which two candidates time-shared save 90 % of the best and budget + tolerance.

The standard errors depend on the noise series only (the noise is relative, and the same whichever plan runs); the
workloads differ in their cases: where the 90 % point lies, and the window length of the window design.

    python benchmarks/online_bound.py                                  # 3 series, 60 cases
    python benchmarks/online_bound.py --gpus 4 --workloads bert-base  # a subsample
    python benchmarks/online_bound.py --no-cases                       # part 1 only (no planning: seconds)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from online import hull_at, planning_model, true_best, true_gpus  # noqa: E402

from rlclock.agents.measured import Estimates, MeasuredJob, PairedSlowdown  # noqa: E402
from rlclock.agents.online import PairedTracker, candidate_plans  # noqa: E402
from rlclock.backends.true_gpu import StepNoise, measured_noise  # noqa: E402

STEPS = (500, 1000, 2000, 5000, 10000)
"""Steps after which the standard errors and the oracle are read."""
PLAN_SLOWDOWN = 0.01
"""The true slowdown of the plan measured against the noise (a fraction; the noise is relative, so its value
matters little)."""


def paired_run(
    noise: np.ndarray, rng: np.random.Generator, steps: tuple[int, ...] = STEPS
) -> list[tuple[float, float]]:
    """The plan measured paired over the deviations ``noise`` (module docstring): at each of ``steps``, its
    estimated log slowdown and the standard error the estimator reports."""
    paired = PairedSlowdown([0.0, PLAN_SLOWDOWN])
    out, k = [], 0
    while k < max(steps):
        auto_at = int(rng.integers(2))
        for j in range(2):
            arm = 0 if j == auto_at else 1
            paired.add(arm, (1.0 + PLAN_SLOWDOWN * arm) * (1.0 + noise[k]))
            k += 1
            if k in steps:
                mean, var, _ = paired.reading_means()
                out.append((float(mean[1]), math.sqrt(var[1])))
    return out


def window_run(noise: np.ndarray, window_steps: int, steps: tuple[int, ...] = STEPS) -> list[tuple[float, float]]:
    """The plan measured in windows of ``window_steps``, plan and auto in turn: at each of ``steps``, its estimated
    log slowdown and reported standard error (from the windows complete by then)."""
    est = Estimates(2)
    out = []
    for n in steps:
        while (int(est.count.sum()) + 1) * window_steps <= n:
            arm = 1 - int(est.count.sum()) % 2
            w0 = int(est.count.sum()) * window_steps
            t = (1.0 + PLAN_SLOWDOWN * arm) * (1.0 + noise[w0 : w0 + window_steps])
            est.add(arm, float(t.mean()), 0.0)
        slow, se = est.slowdown()
        out.append((math.log1p(float(slow[1])), float(se[1]) / (1.0 + float(slow[1]))))
    return out


def spread(runs: list[list[tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per checkpoint: the true standard error (spread of the estimates), the median reported one, and the bias
    (log slowdown)."""
    est = np.array([[r[0] for r in run] for run in runs])
    rep = np.array([[r[1] for r in run] for run in runs])
    return est.std(axis=0, ddof=1), np.median(rep, axis=0), est.mean(axis=0) - math.log1p(PLAN_SLOWDOWN)


def steps_to(se: np.ndarray, target: float, steps: tuple[int, ...] = STEPS) -> float:
    """The steps at which a standard error falling as ``se`` at ``steps`` reaches ``target`` (log-log between the
    checkpoints, as 1/sqrt(steps) beyond them)."""
    x, y = np.log(np.asarray(steps, dtype=float)), np.log(np.maximum(se, 1e-12))
    if se[0] <= target:
        return float(np.exp(x[0] + 2.0 * (y[0] - math.log(target))))
    for i in range(1, len(steps)):
        if se[i] <= target:
            return float(np.exp(x[i - 1] + (y[i - 1] - math.log(target)) * (x[i] - x[i - 1]) / (y[i - 1] - y[i])))
    return float(np.exp(x[-1] + 2.0 * (y[-1] - math.log(target))))


def slowdown_for(points: list[tuple[float, float]], saving: float, budget: float) -> float:
    """The least slowdown (a fraction, within ``budget``) at which two of the ``(slowdown, saving)`` plans
    time-shared save ``saving``; ``inf`` if none does within the budget."""
    if hull_at(points, budget) < saving:
        return math.inf
    lo, hi = 0.0, budget
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if hull_at(points, mid) >= saving else (mid, hi)
    return hi


def goal_chance(s90: float, cap: float, error_sd: float, line: float) -> float:
    """The chance that an oracle whose estimate of its mix's slowdown errs by a normal error of ``error_sd`` commits
    to a mix that meets the goal: it takes the mix whose *estimated* slowdown is ``cap`` (the most it can certify),
    whose true slowdown is then ``cap`` less the error; the goal needs that within [``s90``, ``line``] (fractions)."""
    if not math.isfinite(s90):
        return 0.0
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))  # noqa: E731
    return max(0.0, phi((cap - s90) / error_sd) - phi((cap - line) / error_sd))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=20, help="true GPUs per workload (default 20)")
    p.add_argument(
        "--workloads",
        nargs="+",
        default=["train-small-gpt", "vit-base", "bert-base"],
        help="models of data/corpus-h200",
    )
    p.add_argument("--budget", type=float, default=0.01, help="slowdown budget, a fraction (default 0.01)")
    p.add_argument("--replays", type=int, default=200, help="replays of the noise per series (default 200)")
    p.add_argument("--no-cases", action="store_true", help="part 1 only")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    rule = PairedTracker(a.budget, [0.0], [0.0])
    z, tol = rule.z, rule.tolerance
    target = tol / z
    t0 = time.perf_counter()
    models = {wl: planning_model(wl) for wl in a.workloads}
    first = {wl: next(true_gpus(m, 1)) for wl, m in models.items()}
    windows = {
        wl: MeasuredJob(truth, [np.zeros(len(m.trace), dtype=np.int64)]).window_steps
        for (wl, m), (_, _, truth) in zip(models.items(), first.values(), strict=True)
    }
    print(
        f"# commit rule (PairedTracker): estimate within the budget and estimate + {z:g} s.e. within budget + "
        f"{100 * tol:g} pp; a mix at the budget needs s.e. <= {100 * target:.2f} pp"
    )
    print(
        f"# part 1: {a.replays} replays per measured series of a plan {100 * PLAN_SLOWDOWN:g} % slower than auto; "
        f"N = {list(STEPS)} steps, half of them the plan's; s.e. and bias in pp of slowdown"
    )
    base = first[a.workloads[0]][1]
    se_paired: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in sorted(measured_noise()):
        noise = StepNoise("replay", replace(base, noise_series=name))
        rng = np.random.default_rng(a.seed)
        runs, wruns = [], {wl: [] for wl in a.workloads}
        for _ in range(a.replays):
            dev = noise.series(max(STEPS), rng)
            runs.append(paired_run(dev, rng))
            for wl in a.workloads:
                wruns[wl].append(window_run(dev, windows[wl]))
        true_se, rep_se, bias = spread(runs)
        se_paired[name] = (rep_se, true_se)
        cells = lambda v: " ".join(f"{100 * x:6.3f}" for x in v)  # noqa: E731
        print(
            f"{name:16s} {'paired':20s} true s.e. {cells(true_se)}   reported {cells(rep_se)}   "
            f"bias {cells(bias)}   s.e. {100 * target:.2f} pp at ~{steps_to(true_se, target):,.0f} steps "
            f"(reported: ~{steps_to(rep_se, target):,.0f})"
        )
        for wl in a.workloads:
            wt, wr, wb = spread(wruns[wl])
            print(
                f"{name:16s} {f'windows of {windows[wl]}':20s} true s.e. {cells(wt)}   reported {cells(wr)}   "
                f"bias {cells(wb)}   s.e. {100 * target:.2f} pp at ~{steps_to(wt, target):,.0f} steps "
                f"({wl}'s 1 s windows)",
                flush=True,
            )
    print(f"# part 1 in {time.perf_counter() - t0:.0f} s")
    if a.no_cases:
        return 0
    print(
        f"# part 2: the oracle on the cases of benchmarks/online.py (budget {100 * a.budget:g} %): share of the "
        f"true best of the most saving mix it can certify at N = {list(STEPS)} (s.e. as reported / as true)"
    )
    print(
        f"{'workload':16s} {'gpu':>3s} {'noise':>15s} {'best':>6s} {'arms@budget':>11s}  "
        + "  ".join(f"{'@' + str(n):>11s}" for n in STEPS)
        + "   the least slowdown of 90 % of the best: steps to "
        "certify it"
    )
    goals: dict[str, dict[int, list[tuple[float, float, float]]]] = {}
    needs: dict[str, list[list[float]]] = {wl: [] for wl in models}
    for wl, model in models.items():
        cand = candidate_plans(model)
        goals[wl] = {n: [] for n in STEPS}
        for seed, draw, truth in true_gpus(model, a.gpus):
            best = true_best(truth, a.budget, cand.plans)
            job = MeasuredJob(truth, cand.plans, seed=seed)
            points = [(job.true_slowdown(i), job.true_saving(i)) for i in range(job.n_arms)]
            arms = hull_at(points, a.budget) / best if best > 0 else float("nan")
            s90 = slowdown_for(points, 0.9 * best, a.budget) if best > 0 else math.inf
            cells = []
            for i, n in enumerate(STEPS):
                shares = []
                for se in se_paired[draw.noise_series]:
                    line = min(a.budget, a.budget + tol - z * float(np.expm1(se[i])))
                    shares.append(hull_at(points, line) / best if best > 0 and line >= 0 else float("nan"))
                rep_se, true_se = (float(np.expm1(se[i])) for se in se_paired[draw.noise_series])
                goals[wl][n].append(
                    (
                        shares[0] >= 0.9,
                        shares[1] >= 0.9,
                        goal_chance(s90, min(a.budget, a.budget + tol - z * rep_se), true_se, a.budget + tol),
                    )
                )
                cells.append(f"{100 * shares[0]:4.0f}/{100 * shares[1]:4.0f}%")
            need = [
                steps_to(se, (a.budget + tol - s90) / z) if math.isfinite(s90) else math.inf
                for se in se_paired[draw.noise_series]
            ]
            needs[wl].append(need)
            print(
                f"{wl:16s} {seed:3d} {draw.noise_series:>15s} {100 * best:5.2f}% {100 * arms:10.0f}%  "
                + "  ".join(f"{c:>11s}" for c in cells)
                + f"   90 % at {100 * s90:+.2f} %: {need[0]:7,.0f} / {need[1]:7,.0f} steps",
                flush=True,
            )
    print(
        "# the oracle's goal rate (>= 90 % of the true best, certified within budget + 0.2 pp), per workload and "
        "all: its estimate exact, s.e. as reported / as true; and (in brackets) the expected rate with its "
        "estimate's error"
    )
    for n in STEPS:
        per = [np.array(goals[wl][n]) for wl in a.workloads]
        both = np.concatenate(per)
        cell = lambda g: f"{100 * g[:, 0].mean():3.0f} / {100 * g[:, 1].mean():3.0f} % ({100 * g[:, 2].mean():3.0f} %)"  # noqa: E731
        print(
            f"  @{n:<6d} "
            + "   ".join(f"{wl} {cell(g)}" for wl, g in zip(a.workloads, per, strict=True))
            + f"   all {cell(both)} of {len(both)}"
        )
    print(
        "# steps the oracle needs to certify a mix of 90 % of the true best (quartiles and max over the cases that "
        "have one; s.e. as reported / as true)"
    )
    for wl in a.workloads:
        need = np.array(needs[wl])
        fin = np.isfinite(need[:, 0])
        q = lambda v: " / ".join(f"{x:,.0f}" for x in np.percentile(v, [25, 50, 75, 100]))  # noqa: E731
        print(
            f"  {wl:16s} {q(need[fin, 0]) if fin.any() else '-'}   ({q(need[fin, 1]) if fin.any() else '-'})   "
            f"{int((~fin).sum())} of {len(need)} without "
            "such a mix among the candidates"
        )
    print(f"# in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
