"""``rlclock measure``: each kernel of a profiled trace replayed alone and measured (time, energy, clocks)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlclock.commands.args import DefaultsHelp, number


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "measure",
        help="measure every kernel of a profiled trace at clock configurations (NVML energy, CUDA-event time)",
        description="Re-capture the step a trace was profiled from, replay each kernel alone (with the memsets "
        "it depends on) and measure it over tick-aligned NVML energy windows: time, energy, power, "
        "SM clock, clock-event reasons and repeatability. Writes a measurement table that RecordedGpu "
        "replays anywhere; an existing table is completed, not redone. Only 'auto' can be measured "
        "unless --control-clocks (root) lets rlclock lock the clocks; they are restored afterwards.",
        formatter_class=DefaultsHelp,
    )
    p.add_argument("trace", type=Path, help="trace written by rlclock profile")
    p.add_argument(
        "--out", type=Path, default=None, help="measurement table (default: the trace's name with .measurements.json)"
    )
    p.add_argument(
        "--clocks",
        nargs="*",
        default=["auto"],
        metavar="CORE@MEM",
        help="configurations to measure, e.g. auto 1410@3201 auto@2201",
    )
    p.add_argument(
        "--control-clocks",
        action="store_true",
        help="allow rlclock to lock the clocks (needs root; restored on exit, signals and by a watchdog)",
    )
    p.add_argument(
        "--device",
        type=number(0, 63, whole=True),
        default=0,
        help="index of the GPU (NVML and CUDA; set CUDA_DEVICE_ORDER=PCI_BUS_ID so they agree)",
    )
    p.add_argument("--kernels", type=_indices, default=None, help="comma-separated trace entries (default: all)")
    p.add_argument("--window", type=number(0.5, 60.0), default=2.0, help="energy window, seconds (0.5 to 60)")
    p.add_argument("--warmup", type=number(0.0, 60.0), default=0.5, help="warm-up before the windows, seconds")
    p.add_argument(
        "--repeats", type=number(1, 100, whole=True), default=3, help="windows per kernel (their spread is the CV)"
    )
    p.add_argument("--write-trace", type=Path, default=None, help="also write the trace with the measurements attached")
    p.add_argument(
        "--schedule",
        type=Path,
        default=None,
        help="replay this schedule (JSON, ClockSchedule.save) segment by segment with the clock change "
        "between segments (recorded, not applied, without --control-clocks) and compare it with "
        "the whole step; kernels are then measured only if --kernels is given",
    )
    p.set_defaults(func=run)


def _indices(text: str) -> list[int]:
    """An argparse type: comma-separated trace entries (whole numbers >= 0)."""
    out = []
    for part in text.split(","):
        if part.strip():
            if not part.strip().isdigit():
                raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a trace entry (a whole number >= 0)")
            out.append(int(part))
    return out


def run(args: argparse.Namespace) -> int:
    from rlclock.commands.common import print_table
    from rlclock.errors import SpecError
    from rlclock.gpu.clocks import ClockControl
    from rlclock.gpu.measure import KernelMeasurer, attach_measurements, measure_trace, table_meta
    from rlclock.gpu.meter import MeasureSettings
    from rlclock.gpu.nvml import NvmlDevice
    from rlclock.gpu.profile import capture_for_trace
    from rlclock.gpu.table import MeasurementTable
    from rlclock.schedule import ClockConfig
    from rlclock.validation import check_output_file
    from rlclock.workload.trace import KernelTrace

    out = args.out or args.trace.with_name(
        args.trace.name.replace(".trace.json", "").replace(".json", "") + ".measurements.json"
    )
    check_output_file(out, "--out")  # before any measuring
    if args.write_trace is not None:
        check_output_file(args.write_trace, "--write-trace")
    trace = KernelTrace.load(args.trace)
    configs = [ClockConfig.parse(c) for c in args.clocks]
    indices = args.kernels
    if indices is not None and any(i >= len(trace) for i in indices):
        raise SpecError(
            f"--kernels names entry {max(indices)}, but the trace has {len(trace)} entries.",
            f"give entries from 0 to {len(trace) - 1}.",
        )
    schedule = None
    if args.schedule is not None:
        from rlclock.schedule import ClockSchedule

        schedule = ClockSchedule.load(args.schedule)
        schedule.check_length(len(trace))
    settings = MeasureSettings(window_s=args.window, warmup_s=args.warmup, repeats=args.repeats)
    device = NvmlDevice(args.device)
    if args.device:  # CUDA and NVML number GPUs alike when CUDA_DEVICE_ORDER=PCI_BUS_ID
        import torch

        torch.cuda.set_device(args.device)
    with ClockControl(args.device, control_clocks=args.control_clocks) as control:
        for c in configs:
            control.validate(c)
        if any(not c.is_auto for c in configs) and control.dry_run:
            from rlclock.errors import ClockControlDisabledError

            raise ClockControlDisabledError(
                f"measuring at {[str(c) for c in configs if not c.is_auto]} needs the clocks locked.",
                "add --control-clocks (as root), or measure only 'auto'.",
            )
        captured = capture_for_trace(trace)
        if args.schedule is not None:
            _replay(schedule, captured, control, device, settings)
            if indices is None:
                return 0
        table = (
            MeasurementTable.load(out)
            if Path(out).is_file()
            else MeasurementTable(table_meta(device, trace, settings, "observe" if control.dry_run else "live"))
        )
        measurer = KernelMeasurer(captured, trace, device, control, settings)
        try:

            def progress(r) -> None:
                print(
                    f"  {r.kernel:3d} {r.config:>10s} {r.time_s * 1e6:10.2f} us {r.energy_j * 1e3:9.3f} mJ "
                    f"{r.power_w:6.1f} W SM {r.sm_clock_mhz:5.0f} MHz cv {max(r.time_cv, r.energy_cv) * 100:.2f}% "
                    f"{'/'.join(r.reasons)}",
                    flush=True,
                )

            measure_trace(
                measurer,
                trace,
                configs,
                indices if indices is not None else range(len(trace)),
                table,
                progress=progress,
                save=lambda t: t.save(out),
            )
        finally:
            measurer.close()
    table.save(out)
    rows = [
        [
            str(r.kernel),
            r.config,
            r.op,
            f"{r.time_s * 1e6:.2f}",
            f"{r.energy_j * 1e3:.3f}",
            f"{r.power_w:.0f}",
            f"{r.sm_clock_mhz:.0f}",
            f"{100 * r.time_cv:.2f}",
            f"{100 * r.energy_cv:.2f}",
            "/".join(r.reasons),
        ]
        for r in table
    ]
    print_table(["#", "clocks", "op", "time us", "energy mJ", "W", "SM MHz", "cv t %", "cv E %", "reasons"], rows)
    print(f"table written to {out}")
    if args.write_trace:
        attach_measurements(trace, table).save(args.write_trace)
        print(f"trace with measurements written to {args.write_trace}")
    return 0


def _replay(schedule, captured, control, device, settings) -> None:
    from rlclock.gpu.measure import measure_step
    from rlclock.gpu.replay import replay_schedule

    for c in schedule.configs:
        control.validate(c)
    whole = measure_step(captured, device, settings)
    rep = replay_schedule(captured, schedule, control, device, settings)
    mode = "recorded, not applied (dry run)" if rep.dry_run else "applied"
    print(
        f"whole step       {whole.time_s * 1e3:8.3f} ms {whole.energy_j:7.3f} J {whole.power_w:6.1f} W "
        f"SM {whole.sm_clock_mhz:5.0f} MHz"
    )
    print(
        f"schedule {schedule.name!r}: {rep.segments} segments, {rep.switches_per_step} clock changes per step ({mode})"
    )
    print(
        f"segmented step   {rep.stats.time_s * 1e3:8.3f} ms {rep.stats.energy_j:7.3f} J {rep.stats.power_w:6.1f} W "
        f"SM {rep.stats.sm_clock_mhz:5.0f} MHz  ({100 * (rep.stats.time_s / whole.time_s - 1):+.2f} % time, "
        f"{100 * (rep.stats.energy_j / whole.energy_j - 1):+.2f} % energy)"
    )
