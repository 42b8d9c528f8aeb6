"""``rlclock apply``: run a training command with a clock policy (or schedule) applied to its steps."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

EPILOG = """Your script needs no change: every Python process the command starts is attached at start-up, and each
optimizer step marks a training step (gradient accumulation, several optimizers and AMP grad scalers included).
A script that opens rlclock.deploy.clocked() itself, or trains through rlclock's Hugging Face or Lightning
callback, keeps that control (use it to choose where a step starts, or to mark points inside it).

examples:
  rlclock apply -- python train.py --lr 3e-4                        dry run with the shipped policy for this GPU
  rlclock apply --checkpoint corpus-h100 -- python train.py          a given policy (a shipped name or a folder)
  rlclock apply --schedule step.schedule.json --control-clocks -- python train.py       set clocks (root)
  rlclock apply -- torchrun --nproc-per-node 8 train.py              every rank its own GPU; rank 0 plans
  rlclock apply -- accelerate launch train.py                         the same under Accelerate
"""


def register(sub: argparse._SubParsersAction) -> None:
    from rlclock.deploy.settings import DeploySettings

    p = sub.add_parser(
        "apply",
        help="run a training command with a clock policy (or schedule) applied to its steps",
        description="Run COMMAND with a clock deployment in every Python process it starts: after some warm-up "
        "steps the step is profiled (kernel sequence, durations, start offsets; FLOPs and bytes from "
        "operator shapes and, for torch.compile, from the generated code), the schedule is planned by "
        "the policy of --checkpoint (default: the shipped policy for the GPU found) or read from "
        "--schedule, and a clock controller applies it from then on, each switch issued ahead of its "
        "kernels by the switching latency. Without --control-clocks it is a dry run: every switch is "
        "planned, timed and reported, none is set. The command's exit code is passed on.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    DeploySettings.add_arguments(p)
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the training command, after '--' (e.g. -- python train.py ...)",
    )
    p.set_defaults(func=run)


def check_command(cmd: list[str]) -> list[str]:
    """The command after ``--``, checked before anything starts.

    Raises:
        DeployError: No command, or its program is not found, is a folder, or is not executable.
    """
    from rlclock.errors import DeployError

    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise DeployError("no training command was given.", "add it after '--', e.g. rlclock apply -- python train.py.")
    program = cmd[0]
    path = Path(program).expanduser()
    if os.sep in program or program.startswith("."):
        if path.is_dir():
            raise DeployError(
                f"the training command {program!r} is a folder, not a program.",
                f"give the program to run, e.g. rlclock apply -- python {program}/train.py.",
            )
        if not path.exists():
            raise DeployError(f"the training command {program!r} does not exist.", "check the path after '--'.")
        if not os.access(path, os.X_OK):
            raise DeployError(
                f"the training command {program!r} is not executable.",
                f"run it through its interpreter (rlclock apply -- python {program}), or chmod +x it.",
            )
    elif shutil.which(program) is None:
        raise DeployError(
            f"the training command {program!r} was not found on the PATH.",
            "check its spelling, or give its full path after '--'.",
        )
    return cmd


def run(args: argparse.Namespace) -> int:
    from rlclock.deploy.attach import ATTACH_ENV, BOOT_DIR
    from rlclock.deploy.controller import nvml_present
    from rlclock.deploy.settings import DeploySettings

    cmd = check_command(list(args.cmd))
    settings = DeploySettings.from_args(args)  # every option checked before the script starts
    gpu = nvml_present()
    if settings.control_clocks and not gpu:
        from rlclock.errors import GpuUnavailableError

        raise GpuUnavailableError(
            "--control-clocks needs an NVIDIA GPU with NVML, and this machine has none.",
            "run on the GPU machine, or leave out --control-clocks for a dry run.",
        )
    check_before_start(settings, gpu, *_describe_source(settings, gpu))
    work = Path(tempfile.mkdtemp(prefix="rlclock-apply-"))
    if settings.report is None:
        settings = settings.with_(report=str(work / "report.json"))
    assert settings.report is not None
    env = {**os.environ, **settings.to_env(), ATTACH_ENV: str(work)}
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    code = _run_child(cmd, env)
    try:
        _close_lines(work, Path(settings.report), code, settings, keep=args.report is not None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return code


def _describe_source(settings: Any, gpu: bool) -> tuple[Any, Any]:
    """Say where the plan will come from, reading it before the script starts; the policy of ``--checkpoint`` and
    the schedule of ``--schedule`` (``None`` where not given)."""
    say = _say
    policy = sched = None
    if settings.checkpoint is not None:
        from rlclock.deploy.api import load_policy

        policy = load_policy(settings.checkpoint)  # fail here, before the script starts, on a bad checkpoint
        say(
            f"policy {settings.checkpoint} for {getattr(policy, 'gpu_name', '?')} "
            f"({len(getattr(policy, 'configs', ()))} clock configurations)"
        )
    elif settings.schedule is not None:
        from rlclock.schedule import ClockSchedule

        sched = ClockSchedule.load(settings.schedule)
        say(
            f"schedule {sched.name!r} from {settings.schedule}: {len(sched)} kernels, {sched.n_changes} changes per "
            "step"
        )
    elif gpu:
        say("no --checkpoint: each process plans with the shipped policy for its GPU")
    if settings.timeline is not None:
        from rlclock.deploy.timeline import StepTimeline

        StepTimeline.load(settings.timeline)
    if not gpu:
        say(
            "no NVIDIA GPU on this machine (NVML finds none): the command runs unchanged, and what its processes do "
            "is reported at the end"
        )
        if settings.schedule is not None and settings.latency_s is None:
            say(
                "no --latency: the schedule is planned only where the script gives clocked() a latency_s (there is "
                "no GPU preset to take it from)"
            )
    return policy, sched


def check_before_start(settings: Any, gpu: bool, policy: Any = None, schedule: Any = None) -> None:
    """Refuse, before the command starts, what its processes would refuse only after their warm-up and profiling:
    an output that cannot be written (``--report``, ``--save``), a lead shorter than the switching latency,
    and, on a machine with NVIDIA GPUs, a GPU index it lacks, a policy trained for another GPU, or a schedule
    naming a clock configuration no GPU it may run on supports.

    Args:
        settings: The deploy settings of the command line (:class:`~rlclock.deploy.settings.DeploySettings`).
        gpu: Whether NVML sees a GPU on this machine.
        policy: The ``--checkpoint`` policy, if given.
        schedule: The ``--schedule`` schedule, if given.

    Raises:
        RlclockError: One of the above, as one line with its fix.
    """
    from rlclock.validation import check_output_file, check_output_folder

    if settings.report is not None:
        check_output_file(settings.report, "--report")
    if settings.save is not None:
        check_output_folder(settings.save, "--save")
    names = _gpu_names(settings) if gpu else {}
    if policy is not None and names and getattr(policy, "gpu_name", None) not in (None, *names.values()):
        from rlclock.errors import DeployError

        raise DeployError(
            f"the policy checkpoint {settings.checkpoint!r} was trained for {policy.gpu_name!r}, but "
            f"the GPU{'s' if len(names) > 1 else ''} it would run on "
            f"{'are' if len(names) > 1 else 'is'} {', '.join(sorted(set(names.values())))}.",
            "use a checkpoint trained for this GPU (rlclock list shows the shipped ones), or leave "
            "out --checkpoint for the shipped policy of the GPU found.",
        )
    if settings.lead_s is not None:
        latency = _latency_s(settings, names, policy)
        if latency is not None:
            from rlclock.deploy.plan import check_lead

            check_lead(latency, settings.lead_s)
    if schedule is not None and names:
        _check_schedule_clocks(schedule, sorted(names))


def _gpu_names(settings: Any) -> dict[int, str]:
    """The NVML index and name of each GPU the command's processes may use (``--device``, else every one).

    Raises:
        DeployError: ``--device`` names a GPU this machine lacks.
    """
    from rlclock.gpu import nvml

    count = nvml.device_count()
    if settings.device is not None:
        if settings.device >= count:
            from rlclock.errors import DeployError

            raise DeployError(
                f"--device {settings.device}: this machine has {count} NVIDIA GPU(s) (indices 0 to {count - 1}).",
                "give the NVML index of one of them (rlclock doctor lists them).",
            )
        indices = [int(settings.device)]
    else:
        indices = list(range(count))
    return {i: nvml.NvmlDevice(i).name for i in indices}


def _latency_s(settings: Any, names: dict[int, str], policy: Any) -> float | None:
    """The switching latency the processes will plan with, seconds, as the deployment takes it: ``--latency``, else
    the preset of the GPU (the shortest where several differ), else the policy's GPU; ``None`` when unknown."""
    if settings.latency_s is not None:
        return float(settings.latency_s)
    from rlclock.dvfs.spec import get_spec
    from rlclock.errors import SpecError

    known = []
    for name in names.values():
        try:
            known.append(float(get_spec(name).switch_latency_s))
        except SpecError:
            continue
    if known:
        return min(known)
    key = getattr(policy, "gpu_key", None)
    return float(get_spec(key).switch_latency_s) if key and not names else None


def _check_schedule_clocks(schedule: Any, devices: list[int]) -> None:
    """Refuse a configuration of ``schedule`` that none of ``devices`` supports (the first GPU's reason).

    Raises:
        ClockError: A configuration no GPU of ``devices`` can run.
    """
    from rlclock.errors import ClockError, RlclockError
    from rlclock.gpu.clocks import ClockControl

    controls = [ClockControl(i, control_clocks=False, watchdog=False, handle_signals=False) for i in devices]
    try:
        for config in schedule.configs:
            reasons: list[RlclockError] = []
            for control in controls:
                try:
                    control.validate(config)
                    break
                except ClockError as exc:
                    reasons.append(exc)
            else:
                which = "no GPU here can" if len(devices) > 1 else "the GPU cannot"
                raise ClockError(
                    f"the schedule names {config}, which {which} run: {reasons[0].message}", reasons[0].fix
                )
    finally:
        for control in controls:
            control.close()


def _run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run the command and return its exit code (128 + the signal's number when a signal ended it)."""
    from rlclock.errors import DeployError

    try:
        proc = subprocess.Popen(cmd, env=env)
    except OSError as exc:
        raise DeployError(
            f"the training command {cmd[0]!r} could not be started ({exc.strerror or exc}).",
            "check the command after '--'.",
        ) from None
    # a signal sent to this process alone (a supervisor's, a container stop) goes on to the command, which restores
    # the clocks and ends; Ctrl-C reaches the whole process group, the command included, already
    forwarded = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
    previous = {sig: signal.signal(sig, lambda sig, _frame: proc.send_signal(sig)) for sig in forwarded}
    try:
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:  # the command got the same Ctrl-C: let it restore the clocks and end
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def _say(message: str) -> None:
    print(f"rlclock apply: {message}", file=sys.stderr, flush=True)


def _close_lines(work: Path, report: Path, code: int, settings: Any, keep: bool) -> None:
    """The closing lines: each report's figures, or what the processes saw when nothing was controlled."""
    import json

    from rlclock.deploy.attach import read_statuses

    statuses = read_statuses(work)
    reports = sorted(report.parent.glob(f"{report.stem}*{report.suffix}"))
    for path in reports:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        _say(
            f"{path.name}: {data.get('mode')} on GPU {data.get('device')}, {data.get('steps')} steps, "
            f"{data.get('issued')} switches issued, {data.get('missed')} missed"
            + (f"; report kept at {path}" if keep else "")
        )
        for line in _delivered_lines(data):
            _say(f"{path.name}: {line}")
    if not reports:
        _say(_nothing_controlled(statuses, settings))
    restarted = max((s.restarts for s in statuses), default=0)
    if restarted:
        _say(
            f"the training step moved to another optimizer {restarted} time(s) (a new phase of training, or a "
            "generator beside its critic): each time the deployment started again, and its report is the last one"
        )
    unseen = [s for s in statuses if s.exit == "running" and not s.forked]
    if unseen:
        _say(
            f"{len(unseen)} process(es) ended without exiting through Python (a signal, os._exit or a crash), "
            f"after {', '.join(_steps(s) for s in unseen)}: their last reports, if any, are not complete"
        )
    forked = [s for s in statuses if s.forked and s.optimizer_steps]
    if forked:
        _say(
            f"{len(forked)} forked process(es) trained ({', '.join(_steps(s) for s in forked)}); a forked process "
            "controls no clocks: start workers with the 'spawn' method to have them controlled"
        )
    if code != 0:
        failed = sorted(
            (s for s in statuses if s.exit not in ("normal", "running")), key=lambda s: (s.rank is None, s.failed_at)
        )
        where = ""
        if failed:
            first = failed[0]
            where = (
                f" ({'rank ' + str(first.rank) + ': ' if first.rank is not None else ''}"
                f"{first.exit.strip().splitlines()[0]})"
            )
        restored = "clocks restored" if settings.control_clocks else "dry run: nothing was set"
        name = (
            signal.Signals(code - 128).name if 128 < code < 128 + 65 and code - 128 in signal.valid_signals() else None
        )
        _say(
            f"the training command failed with exit code {code}"
            + (f" ({name})" if name else "")
            + where
            + f"; {restored}"
        )
    if not keep:
        for path in reports:
            path.unlink(missing_ok=True)


def _delivered_lines(data: dict[str, Any]) -> list[str]:
    """What a report says the run planned and delivered (a dry run: would deliver), and what its compared blocks
    measured; nothing for a report without them."""
    out = []
    d = data.get("delivered")
    if isinstance(d, dict) and d.get("steps"):
        verb = "would deliver" if d.get("dry_run") else "delivered"
        out.append(
            f"planned {100 * d['planned_saving']:.2f} % energy at {100 * d['planned_slowdown']:+.2f} % time; "
            f"{verb} {100 * d['saving']:.2f} % at {100 * d['slowdown']:+.2f} % over {d['steps']} steps "
            f"(slowest step {100 * d['worst_slowdown']:+.2f} %; on the planning model)"
        )
    c = data.get("compared")
    if isinstance(c, dict) and c.get("summary"):
        out.append(str(c["summary"]))
    return out


def _nothing_controlled(statuses: list[Any], settings: Any) -> str:
    """One line on why no schedule was applied, from what the attached processes saw."""
    needed = (
        settings.warmup_steps + settings.profile_steps + (settings.timing_steps if settings.timeline is None else 0)
    )
    if not statuses:
        return (
            "nothing was controlled: no Python process of the command reported importing torch (a program that "
            "is not Python, an interpreter started with -I or -S, which skip the attachment, or one ended by a "
            "signal or os._exit before its first optimizer step)"
        )
    stepped = [s for s in statuses if s.optimizer_steps and not s.forked]
    if not stepped and any(s.forked and s.optimizer_steps for s in statuses):
        return "nothing was controlled: only forked processes trained (see above)"
    failed = next((s.reason for s in statuses if s.reason), "")
    if not stepped and failed:
        return f"nothing was controlled: {failed}"
    if not stepped:
        return (
            f"nothing was controlled: {len(statuses)} process(es) imported torch, but none called an optimizer's "
            "step() — rlclock marks a training step at each optimizer step (or at clk.step() in a script that "
            "opens rlclock.deploy.clocked())"
        )
    best = max(stepped, key=lambda s: s.marks)
    seen = f"{len(stepped)} process(es) stepped optimizers ({_steps(best)})"
    if best.stood_down:
        return f"{seen}; the script opened its own deployment, which wrote no report"
    if best.reason:
        return f"{seen}; nothing was controlled: {best.reason}"
    return (
        f"{seen}; it ended after {best.marks} training steps, before the schedule was applied (that takes "
        f"{needed}: --warmup-steps, --profile-steps and --timing-steps)"
    )


def _steps(status: Any) -> str:
    """``AdamW: 120 steps (4 skipped by the grad scaler)`` for one process's status."""
    text = ", ".join(f"{name}: {n} step{'s' if n != 1 else ''}" for name, n in sorted(status.optimizer_steps.items()))
    text = text or "no optimizer step"
    return text + (f" ({status.skipped_steps} skipped by the grad scaler)" if status.skipped_steps else "")
