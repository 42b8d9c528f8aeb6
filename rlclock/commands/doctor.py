"""``rlclock doctor``: GPU, driver, clocks, power limits, permissions, energy counter — and what rlclock can do here."""

from __future__ import annotations

import argparse
import json

from rlclock.commands.args import number


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="what this machine has and what rlclock can do on it",
        description="Report the GPU(s), driver, supported clocks, power limits, privileges and the energy counter's "
                    "update period, and say which rlclock features work here. Reads only; sets nothing.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--period", type=number(0.0, 60.0), default=1.0, metavar="SECONDS",
                   help="how long to watch the energy counter to find its update period (0: skip)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlclock.gpu.doctor import diagnose

    report = diagnose(period_s=args.period)
    print(json.dumps(report.as_dict(), indent=1, default=str) if args.json else report.text())
    return 0
