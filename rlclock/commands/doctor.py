"""``rlclock doctor``: GPU, driver, clocks, power limits, permissions, energy counter — and what rlclock can do here."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlclock.commands.args import DefaultsHelp, number


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="what this machine has and what rlclock can do on it",
        description="Report the GPU(s), driver, supported clocks, power limits, privileges and the energy counter's "
        "update period, and say which rlclock features work here. Reads only; sets nothing.",
        formatter_class=DefaultsHelp,
    )
    p.add_argument(
        "--period",
        type=number(0.0, 60.0),
        default=1.0,
        metavar="SECONDS",
        help="how long to watch the energy counter to find its update period (0: skip)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--spec-out",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write GPU --device's spec to FILE: its preset, or — for a GPU without one — the spec "
        "built from what it reports (generic model; use it as --gpu FILE, and calibrate it with "
        "rlclock calibrate --device N --gpu FILE)",
    )
    p.add_argument(
        "--device", type=number(0, 63, whole=True), default=0, metavar="INDEX", help="the GPU --spec-out describes"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlclock.gpu.doctor import diagnose
    from rlclock.validation import check_output_file

    if args.spec_out is not None:
        check_output_file(args.spec_out, "--spec-out")  # before the diagnosis
    report = diagnose(period_s=args.period)
    print(json.dumps(report.as_dict(), indent=1, default=str) if args.json else report.text())
    if args.spec_out is not None:
        from rlclock.dvfs.spec import spec_to_mapping, write_spec_file
        from rlclock.gpu.describe import spec_for_device

        spec, origin = spec_for_device(args.device)
        what = {"preset": f"the {spec.key} preset", "derived": "built from what the GPU reports (generic model)"}
        path = write_spec_file(
            spec_to_mapping(spec),
            args.spec_out,
            f"GPU spec of {spec.name} written by rlclock doctor: {what.get(origin, origin)}",
        )
        print(
            f"wrote {path} ({what.get(origin, origin)}); use it as --gpu {path} or gpu_file: {path}",
            file=sys.stderr if args.json else sys.stdout,
        )
    return 0
