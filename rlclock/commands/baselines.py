"""``rlclock baselines``: every baseline and the exact optima, as a table, a Pareto plot and JSON."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rlclock.commands.args import DefaultsHelp, add_time_limit, fractions, output_folder
from rlclock.commands.common import add_env_args, duration, env_from_args, print_table, signed


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "baselines",
        help="baselines and the exact optimum: table, Pareto plot, JSON",
        description="Compute auto, max, best static, pass-level (local/global), kernel-level local and global "
        "(the paper's knapsack, latency ignored) and the exact latency-aware optimum for an env spec, "
        "evaluate each with the spec's switching latency, print the table and write the "
        "energy-versus-slowdown Pareto plot and a JSON file.",
        formatter_class=DefaultsHelp,
    )
    add_env_args(p)
    p.add_argument("--out", default="runs/baselines", help="folder for the plot and JSON")
    p.add_argument("--edp", action="store_true", help="also the energy-delay-product optimum (slower)")
    p.add_argument(
        "--frontier",
        type=fractions,
        default="0,0.01,0.02,0.05,0.1,0.2",
        help="slowdown budgets of the Pareto frontiers (comma-separated fractions; empty for none)",
    )
    add_time_limit(p, 300.0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlclock.plots import pareto_plot
    from rlclock.solve.baselines import frontier, run_baselines

    spec, backend = env_from_args(args)
    out = output_folder(Path(args.out) / spec.name)  # before the solving: a bad --out fails at once
    budget = spec.reward.budget
    print(backend.describe())
    print(f"slowdown budget {100 * budget:g} %; every schedule is evaluated with the switching latency")
    results = run_baselines(backend, budget, edp=args.edp, time_limit_s=args.time_limit)
    rows = []
    for r in results:
        d = r.row()
        solve = f"{d['solve_s']:.2f}" if "solve_s" in d else ""
        rows.append(
            [
                r.name,
                signed(d["time_pct"]),
                signed(d["energy_pct"]),
                str(d["switches"]),
                f"{1e3 * d['off_plan_time_s']:.1f}",
                solve,
            ]
        )
    print_table(["schedule", "time %", "energy %", "switches", "off-plan ms", "solve s"], rows)
    for r in results:
        if r.optimum is not None and not r.optimum.exact:
            print(f"{r.name}: {r.optimum.describe()}")
    curves: dict[str, list[tuple[float, float]]] = {}
    for i, b in enumerate(args.frontier, 1):  # one budget at a time, a line each: these solves take a while
        t0 = time.perf_counter()
        for name, curve in frontier(backend, [b], time_limit_s=args.time_limit).items():
            curves.setdefault(name, []).extend(curve)
        print(
            f"frontier {i}/{len(args.frontier)}: budget {100 * b:g} % solved in {duration(time.perf_counter() - t0)}",
            flush=True,
        )
    t, e = backend.tables
    auto = backend.auto_run()
    cloud = [
        (100 * (t[:, j].sum() / auto.time_s - 1), 100 * (e[:, j].sum() / auto.energy_j - 1))
        for j in range(backend.n_configs)
    ]
    cloud = [p for p in cloud if p[0] <= 60]
    points = {r.name: (100 * r.evaluation.slowdown, -100 * r.evaluation.saving) for r in results if r.name != "auto"}
    png = pareto_plot(
        out / "pareto.png",
        points,
        curves,
        cloud,
        100 * budget,
        f"{spec.name}: {backend.spec.name}, latency {1e3 * backend.latency_s:g} ms",
    )
    payload = {
        "env": spec.name,
        "gpu": backend.spec.key,
        "latency_s": backend.latency_s,
        "budget": budget,
        "auto": {"time_s": auto.time_s, "energy_j": auto.energy_j},
        "baselines": [r.row() for r in results],
        "frontiers": curves,
        "schedules": {r.name: r.schedule.to_dict() for r in results},
    }
    (out / "baselines.json").write_text(json.dumps(payload, indent=1, default=float))
    print(f"wrote {png} and {out / 'baselines.json'}")
    return 0
