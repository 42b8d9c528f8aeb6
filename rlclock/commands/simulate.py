"""``rlclock simulate``: a step's time and energy at auto and at chosen clocks."""

from __future__ import annotations

import argparse

from rlclock.commands.args import DefaultsHelp
from rlclock.commands.common import add_env_args, env_from_args, print_table, signed


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="step time and energy at auto and at fixed clocks",
        description="Run the env spec's training step at auto clocks and at each configuration given with "
        "--clocks (the whole step at one configuration) and print time, energy and power.",
        formatter_class=DefaultsHelp,
    )
    add_env_args(p)
    p.add_argument(
        "--clocks",
        nargs="*",
        default=[],
        metavar="CORE@MEM",
        help="configurations to run, e.g. 1680@5001 auto@9501 1200 (memory auto)",
    )
    p.add_argument("--per-kernel", action="store_true", help="also print the distinct kernels at auto")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
    from rlclock.solve.evaluation import evaluate

    spec, backend = env_from_args(args)
    trace = backend.trace
    configs = [AUTO] + [spec.gpu.validate(ClockConfig.parse(c)) for c in args.clocks]
    if any(c not in backend.configs for c in configs):
        spec = spec.with_overrides(actions={"configs": [str(c) for c in dict.fromkeys([*spec.configs(), *configs])]})
        backend = spec.build_backend(trace)
    print(backend.describe())
    rows = []
    for c in configs:
        ev = evaluate(ClockSchedule.constant(c, len(trace)), backend)
        rows.append(
            [
                str(c),
                f"{ev.time_s * 1e3:.2f}",
                f"{ev.energy_j:.2f}",
                f"{ev.energy_j / ev.time_s:.1f}",
                signed(100 * ev.slowdown),
                signed(-100 * ev.saving),
            ]
        )
    print_table(["clocks", "time ms", "energy J", "power W", "time %", "energy %"], rows)
    if args.per_kernel:
        t, e = backend.tables
        first, _ = trace.unique_index
        counts: dict[int, int] = {}
        for j in trace.unique_index[1]:
            counts[int(j)] = counts.get(int(j), 0) + 1
        krows = [
            [
                trace[i].op,
                trace[i].category,
                str(counts[j]),
                f"{t[i, 0] * 1e3:.3f}",
                f"{e[i, 0]:.4f}",
                f"{e[i, 0] / t[i, 0]:.0f}",
            ]
            for j, i in enumerate(first)
        ]
        print_table(["op", "category", "runs", "time ms", "energy J", "power W"], krows)
    return 0
