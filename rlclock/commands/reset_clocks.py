"""``rlclock reset-clocks``: give locked core and memory clocks back to the driver and set a changed power limit
back to its default (undo anything left behind)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reset-clocks",
        help="reset locked core/memory clocks and the power limit to the driver defaults",
        description="Reset the locked core (graphics) and memory clocks of the GPU(s) to the driver's defaults, and a "
                    "changed power limit to the driver's default limit, e.g. after a program that changed them was "
                    "killed and no watchdog could run. Needs root.",
    )
    p.add_argument("--device", type=int, action="append", default=None, metavar="INDEX",
                   help="NVML index of a GPU to reset (repeatable; default: all GPUs)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be reset")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlclock.gpu.clocks import reset_clocks

    for line in reset_clocks(args.device, dry_run=args.dry_run):
        print(line)
    return 0
