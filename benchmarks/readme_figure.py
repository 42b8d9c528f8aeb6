"""The README's figure: energy against time of one training step, every baseline, the optima and the shipped policy.

Simulated RTX 3080 Ti (the preset fitted to the paper's readings), llm.c's GPT-3 XL step, 30 ms clock switches,
a 1 % slowdown budget. Curves: the latency-blind optimum as it plans (the paper's setting: switches take no time),
the same schedules run with the switching latency, and the latency-aware optimum; points: the baselines and the
shipped ``gpt3xl-rtx3080ti`` policy's plan (with the search). Every figure is planned on the simulator.

    python benchmarks/readme_figure.py                 # writes docs/img/pareto-gpt3xl-rtx3080ti.png (~1-2 min)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="gpt3xl-rtx3080ti", help="env spec (a shipped name or a YAML file)")
    parser.add_argument("--checkpoint", default="gpt3xl-rtx3080ti", help="policy checkpoint (a shipped name or DIR)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "pareto-gpt3xl-rtx3080ti.png")
    args = parser.parse_args(argv)

    from rlclock.config import load_env_spec
    from rlclock.env import episode_tables
    from rlclock.plots import pareto_plot
    from rlclock.policy import ClockPolicy
    from rlclock.solve.baselines import frontier, run_baselines
    from rlclock.solve.evaluation import evaluate

    t0 = time.perf_counter()
    spec = load_env_spec(args.env)
    backend = episode_tables(spec).backend
    budget = spec.reward.budget
    results = run_baselines(backend, budget)
    policy = ClockPolicy.load(args.checkpoint)
    planned = policy.schedule(backend.trace, backend=backend, budget=budget, search=True)
    points = {
        r.name: (100 * r.evaluation.slowdown, -100 * r.evaluation.saving)
        for r in results
        if r.name not in ("auto", "max")
    }
    ev = evaluate(planned, backend)
    points["RL policy (shipped)"] = (100 * ev.slowdown, -100 * ev.saving)
    curves: dict[str, list[tuple[float, float]]] = {}
    for i, b in enumerate(BUDGETS, 1):
        for name, pts in frontier(backend, [b]).items():
            curves.setdefault(name, []).extend(pts)
        print(f"frontier {i}/{len(BUDGETS)} ({100 * b:g} %) after {time.perf_counter() - t0:.0f} s", flush=True)
    renamed = {
        "kernel-global (planned)": "optimum ignoring switch time, as planned",
        "kernel-global (with latency)": "the same plans, switches taking their time",
        "latency-aware": "optimum planned around switch time",
    }
    curves = {renamed.get(k, k): v for k, v in curves.items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    title = f"{spec.name}: simulated {backend.spec.name}, {1e3 * backend.latency_s:g} ms switches (planned)"
    pareto_plot(args.out, points, curves, None, 100 * budget, title)
    for name, (t, e) in points.items():
        print(f"{name:24s} time {t:+6.2f} %  energy {e:+6.2f} %")
    print(f"wrote {args.out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
