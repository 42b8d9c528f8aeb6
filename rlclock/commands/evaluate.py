"""``rlclock evaluate``: a trained policy's schedule beside the baselines and the optimum, with plots."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rlclock.commands.args import DefaultsHelp, add_time_limit, output_folder
from rlclock.commands.common import note_generic, print_table, signed


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="compare a trained policy with the baselines and the exact optimum",
        description="Load a checkpoint (weights + meta.json, no pickle), build the policy's schedule for an env "
        "spec's workload (default: the one it was trained on) and print it beside every baseline and "
        "the exact latency-aware optimum — planned from the policy's choices alone, and with the "
        "planner's search over its best choices; write the clock-timeline plot and a JSON file.",
        formatter_class=DefaultsHelp,
    )
    p.add_argument(
        "checkpoint",
        help="checkpoint: a shipped name (gpt3xl-rtx3080ti, gpt3xl-h200, corpus-h200, "
        "family-rtx3080ti …) or a folder written by rlclock train",
    )
    p.add_argument("--env", nargs="*", default=None, help="env spec(s) to evaluate on (default: the training spec)")
    p.add_argument("--out", default="runs/evaluate", help="folder for plots and JSON")
    add_time_limit(p, COMPARE_SOLVE_S)
    p.set_defaults(func=run)


COMPARE_SOLVE_S = 60.0
"""Default solver time limit of the comparison table, s (a few real steps' knapsack takes minutes to prove)."""


def comparison_rows(
    policy, spec, schedules: dict | None = None, time_limit_s: float = COMPARE_SOLVE_S
) -> tuple[list[str], list[list[str]]]:
    """Table rows: baselines, the policy (planned from its first choices, and with the search over its
    best choices) and the optimum on ``spec`` (same backend, same accounting; each solver stops after
    ``time_limit_s`` with the best plan found). ``schedules``, if given, receives the policy's two schedules
    (``"policy"``, ``"search"``)."""
    from rlclock.env import episode_tables
    from rlclock.solve.baselines import run_baselines
    from rlclock.solve.evaluation import evaluate, optimum_for

    backend = episode_tables(spec).backend
    policy.check_gpu(backend.spec)
    results = run_baselines(backend, spec.reward.budget, time_limit_s=time_limit_s)
    budget = spec.reward.budget
    planned = {
        "policy": policy.schedule(backend.trace, backend=backend, budget=budget, search=False),
        "search": policy.schedule(backend.trace, backend=backend, budget=budget, search=True),
    }
    if schedules is not None:
        schedules.update(planned)
    optimum_saving = 1.0 - optimum_for(backend, budget).energy_j / backend.auto_run().energy_j
    trained_by = policy.meta.get("training", {}).get("trained_by", "PPO")
    rows = []
    chosen = {k: "" if s.name == "policy" else f" -> {s.name}" for k, s in planned.items()}  # a whole-job plan won
    for name, ev in [
        *((r.name, r.evaluation) for r in results),
        (f"{trained_by} policy{chosen['policy']}", evaluate(planned["policy"], backend)),
        (f"{trained_by} policy + search{chosen['search']}", evaluate(planned["search"], backend)),
    ]:
        share = f"{100 * ev.saving / optimum_saving:.0f}" if optimum_saving > 1e-9 else "-"
        rows.append(
            [
                name,
                signed(100 * ev.slowdown),
                signed(-100 * ev.saving),
                str(ev.switches),
                share,
                "yes" if ev.slowdown <= budget + 1e-9 else "no",
            ]
        )
    return ["schedule", "time %", "energy %", "switches", "% of optimum saving", "within budget"], rows


def run(args: argparse.Namespace) -> int:
    from rlclock.config import load_env_spec, load_env_specs
    from rlclock.env import episode_tables
    from rlclock.plots import clock_timeline
    from rlclock.policy import ClockPolicy
    from rlclock.solve.evaluation import evaluate

    policy = ClockPolicy.load(args.checkpoint)
    specs = load_env_specs(args.env) if args.env else [load_env_spec(policy.meta["env_spec"])]
    note_generic(specs)
    for spec in specs:  # before any work: a bad --out fails at once
        output_folder(Path(args.out) / spec.name)
    out: dict[str, Any] = {"checkpoint": str(args.checkpoint), "results": {}}
    for spec in specs:
        backend = episode_tables(spec).backend
        print(f"{spec.name}: {backend.describe()}; budget {100 * spec.reward.budget:g} %")
        planned: dict = {}
        header, rows = comparison_rows(policy, spec, planned, args.time_limit)
        print_table(header, rows)
        folder = Path(args.out) / spec.name
        sched, searched = planned["policy"], planned["search"]
        ev = evaluate(searched, backend)
        png = clock_timeline(
            folder / "timeline.png", ev.run, backend.spec, title=f"{spec.name}: policy clocks (with the search)"
        )
        out["results"][spec.name] = {
            "header": header,
            "rows": rows,
            "schedule": sched.to_dict(),
            "schedule_search": searched.to_dict(),
        }
        (folder / "evaluate.json").write_text(json.dumps(out["results"][spec.name], indent=1))
        print(f"wrote {png} and {folder / 'evaluate.json'}")
        print()
    return 0
