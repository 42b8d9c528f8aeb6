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
        "killed and no watchdog could run. Each call is retried; one line per GPU says what was done and "
        "what is left. A GPU that a running rlclock process controls is left alone (it gives its clocks "
        "back itself) unless --force. Needs root. Exit status: 0 when every GPU is back at its "
        "defaults, 1 when something is left or a GPU was left alone, 2 on an error (e.g. no permission).",
    )
    p.add_argument(
        "--device",
        type=int,
        action="append",
        default=None,
        metavar="INDEX",
        help="NVML index of a GPU to reset (repeatable; default: all GPUs)",
    )
    p.add_argument("--dry-run", action="store_true", help="only say what would be reset")
    p.add_argument(
        "--force",
        action="store_true",
        help="reset a GPU even while another rlclock process controls it (that process may set its clocks again)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlclock.gpu.clocks import reset_gpus

    results = reset_gpus(args.device, dry_run=args.dry_run, force=args.force)
    for result in results:
        print(result.line)
    return 0 if args.dry_run or all(r.ok for r in results) else 1
