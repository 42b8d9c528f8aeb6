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
    from rlclock.deploy.settings import DeploySettings

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
    DeploySettings.add_arguments(p)
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
    settings = DeploySettings.from_args(args)  # every option checked before the script starts
    if settings.allow_clock_control:
        from rlclock.deploy.controller import nvml_present
        from rlclock.errors import GpuUnavailableError

        if not nvml_present():
            raise GpuUnavailableError("--control-clocks needs an NVIDIA GPU with NVML, and this machine has none.",
                                      "run on the GPU machine, or leave out --control-clocks for a dry run.")
    if settings.checkpoint is not None:
        from rlclock.deploy.api import load_policy

        policy = load_policy(settings.checkpoint)  # fail here, before the script starts, on a bad checkpoint
        print(f"rlclock apply: policy {settings.checkpoint} for {getattr(policy, 'gpu_name', '?')} "
              f"({len(getattr(policy, 'configs', ()))} clock configurations)", file=sys.stderr, flush=True)
    if settings.schedule is not None:
        from rlclock.schedule import ClockSchedule

        sched = ClockSchedule.load(settings.schedule)
        print(f"rlclock apply: schedule {sched.name!r} from {settings.schedule}: {len(sched)} kernels, "
              f"{sched.n_changes} changes per step", file=sys.stderr, flush=True)
    if settings.timeline is not None:
        from rlclock.deploy.timeline import StepTimeline

        StepTimeline.load(settings.timeline)
    tmp = None
    if settings.report is None:
        tmp = tempfile.mkdtemp(prefix="rlclock-apply-")
        settings = settings.with_(report=str(Path(tmp) / "report.json"))
    assert settings.report is not None
    report = Path(settings.report)
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
