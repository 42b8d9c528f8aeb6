"""``rlclock apply``: run a training script with a clock policy or schedule applied to its steps."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

EPILOG = """The script opens the deployment around its training loop and marks each step:

    import rlclock.deploy
    with rlclock.deploy.clocked() as clk:        # this command's options apply
        for batch in loader:
            with clk.step():
                ...                               # forward, backward, optimizer step

examples:
  rlclock apply --checkpoint checkpoints/gpt3xl-h200 -- python train.py --lr 3e-4      dry run (nothing set)
  rlclock apply --schedule step.schedule.json --control-clocks -- python train.py       set clocks (root)
  rlclock apply --checkpoint DIR -- torchrun --nproc-per-node 8 train.py               every rank, its own GPU
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "apply",
        help="run a training script with a clock policy (or schedule) applied to its steps",
        description="Run COMMAND (a training script that opens rlclock.deploy.clocked() around its loop) with this "
                    "deployment in its environment: after some warm-up steps the step is profiled (kernel sequence, "
                    "durations, start offsets; FLOPs/bytes from operator shapes), the schedule is built by the "
                    "policy of --checkpoint or read from --schedule, and a clock controller applies it from then on, "
                    "each switch issued ahead of its kernels by at least the switching latency. Without "
                    "--control-clocks it is a dry run: every switch is planned, timed and reported, none is set.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", type=Path, help="policy checkpoint folder (ClockPolicy) that builds the schedule")
    src.add_argument("--schedule", type=Path, help="schedule file (JSON, ClockSchedule.save) to apply instead")
    p.add_argument("--timeline", type=Path, default=None,
                   help="step timeline file (JSON) to use instead of profiling the first steps")
    p.add_argument("--control-clocks", action="store_true",
                   help="set the clocks (needs root; restored on exit, signals and by a watchdog); default: dry run")
    p.add_argument("--device", type=int, default=None,
                   help="NVML index of the GPU (default: the one behind the script's CUDA device, per rank)")
    p.add_argument("--latency", type=float, default=None, metavar="SECONDS",
                   help="switching latency (default: the GPU preset's, e.g. 0.006 for an H200)")
    p.add_argument("--lookahead", type=float, default=None, metavar="SECONDS",
                   help="issue each switch this long before its kernels (>= latency; default latency + 0.5 ms)")
    p.add_argument("--min-dwell", type=float, default=None, metavar="SECONDS",
                   help="a switch must land at least this long before its segment ends (default 0)")
    p.add_argument("--warmup-steps", type=int, default=None, help="steps run untouched before profiling (default 3)")
    p.add_argument("--profile-steps", type=int, default=None, help="steps profiled (default 5)")
    p.add_argument("--worker", choices=["process", "thread"], default=None,
                   help="where switches are issued from (default: a separate process)")
    p.add_argument("--report", type=Path, default=None,
                   help="write the controller's report here (JSON; default: a temporary file, summarised at the end)")
    p.add_argument("--save", type=Path, default=None,
                   help="write the profiled trace, the timeline and the schedule to this folder")
    p.add_argument("--search", action="store_true",
                   help="plan the checkpoint's schedule with the search over the policy's second choices (about a "
                        "second more, once)")
    p.add_argument("--quiet", action="store_true", help="no progress lines from the deployment")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the training command, after '--' (e.g. -- python train.py ...)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlclock.deploy.settings import DeploySettings
    from rlclock.errors import DeployError

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise DeployError("no training command was given.", "add it after '--', e.g. rlclock apply --checkpoint DIR "
                          "-- python train.py.")
    if args.checkpoint is not None:
        from rlclock.deploy.api import load_policy

        policy = load_policy(args.checkpoint)  # fail here, before the script starts, on a bad checkpoint
        print(f"rlclock apply: policy {args.checkpoint} for {getattr(policy, 'gpu_name', '?')} "
              f"({len(getattr(policy, 'configs', ()))} clock configurations)", file=sys.stderr, flush=True)
    if args.schedule is not None:
        from rlclock.schedule import ClockSchedule

        sched = ClockSchedule.load(args.schedule)
        print(f"rlclock apply: schedule {sched.name!r} from {args.schedule}: {len(sched)} kernels, "
              f"{sched.n_changes} changes per step", file=sys.stderr, flush=True)
    if args.timeline is not None:
        from rlclock.deploy.timeline import StepTimeline

        StepTimeline.load(args.timeline)
    tmp = None
    report = args.report
    if report is None:
        tmp = tempfile.mkdtemp(prefix="rlclock-apply-")
        report = Path(tmp) / "report.json"
    settings = DeploySettings(
        checkpoint=None if args.checkpoint is None else str(args.checkpoint.resolve()),
        schedule=None if args.schedule is None else str(args.schedule.resolve()),
        timeline=None if args.timeline is None else str(args.timeline.resolve()),
        control="on" if args.control_clocks else "dry-run").with_(
        device=args.device, latency_s=args.latency, lookahead_s=args.lookahead, min_dwell_s=args.min_dwell,
        warmup_steps=args.warmup_steps, profile_steps=args.profile_steps, worker=args.worker,
        report=str(Path(report).resolve()), save=None if args.save is None else str(args.save.resolve()),
        verbose=not args.quiet, search=args.search)
    env = {**os.environ, **settings.to_env()}
    try:
        proc = subprocess.Popen(cmd, env=env)
    except FileNotFoundError:
        raise DeployError(f"the training command {cmd[0]!r} was not found.", "check the command after '--'.") from None
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:  # the script got the same Ctrl-C: let it restore the clocks and end
            continue
    reports = sorted(Path(report).parent.glob(f"{Path(report).stem}*{Path(report).suffix}"))
    if not reports:
        print("rlclock apply: the script never applied a schedule (it did not open rlclock.deploy.clocked(), or it "
              "ended before profiling finished): nothing was controlled.", file=sys.stderr)
    for path in reports:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        print(f"rlclock apply: {path.name}: {data.get('mode')} on GPU {data.get('device')}, {data.get('steps')} steps, "
              f"{data.get('issued')} switches issued, {data.get('missed')} missed"
              + (f"; report kept at {path}" if args.report is not None else ""), file=sys.stderr)
    if tmp is not None:
        for path in reports:
            path.unlink(missing_ok=True)
        if not any(Path(tmp).iterdir()):
            os.rmdir(tmp)
    return code
