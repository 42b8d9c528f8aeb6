"""``rlclock calibrate``: fit a GPU's DVFS model from a clock sweep and write it as a GPU spec file."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlclock.commands.args import DefaultsHelp, number


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit a GPU's DVFS model from a clock sweep (a CSV table, or a simulated GPU with hidden parameters)",
        description="Fit the physical parameters of a GPU's DVFS model — voltage curve, power floor, leakage, "
        "clock, tensor and SIMT power, memory power, achieved bandwidth and GEMM rate, DRAM latency — "
        "to a clock sweep of the microbenchmark suite (or of any kernels), starting from a base preset, "
        "and write a GPU spec file with its provenance that env specs take as gpu_file: (or gpu: "
        "PATH.yaml). --table reads a sweep measured elsewhere (CSV; --suite writes the kernels and "
        "clock pairs to measure as a template). --simulated SEED draws a GPU whose parameters differ "
        "from the base preset's within documented ranges, sweeps it (noisy), fits, and says how well "
        "the fit predicts kernels outside the suite at every clock pair: the proof without hardware. "
        "--device INDEX sweeps your own GPU: the suite's kernels run as CUDA work (cuBLAS GEMMs, "
        "copies, Triton kernels with their grids given) over tick-aligned NVML energy windows, about "
        "0.8 s per kernel and clock pair. Without --control-clocks nothing is set: the suite is measured "
        "at the clocks in effect and the preset is checked against it (a fit needs locked clocks). "
        "With --control-clocks (root) each clock pair is locked in turn and the GPU is given back as "
        "found on exit, on signals and by a watchdog.",
        epilog="CSV columns: kernel, flops, bytes (or read_bytes and write_bytes), core_mhz, mem_mhz, time_s (or "
        "time_ms), energy_j (or power_w); optional category, dtype, access, blocks, threads_per_block, "
        "gemm_m/n/k. A row named idle is an idle-power window. A GPU without a preset starts from a spec "
        "built from what it reports (rlclock doctor --spec-out shows it). Examples: rlclock calibrate --table "
        "sweep.csv --gpu h200-sxm --out my-h200.yaml; sudo rlclock calibrate --device 0 --control-clocks "
        "--out my-gpu.yaml --table-out my-gpu-sweep.csv",
        formatter_class=DefaultsHelp,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--table", type=Path, help="a measured sweep (CSV) to fit")
    src.add_argument(
        "--simulated",
        type=int,
        metavar="SEED",
        help="sweep a simulated GPU with hidden parameters (drawn from SEED) and fit it",
    )
    src.add_argument(
        "--suite",
        action="store_true",
        help="write the suite's kernels and clock pairs to measure (--table-out) and exit",
    )
    src.add_argument(
        "--device",
        type=int,
        metavar="INDEX",
        help="sweep this GPU (NVML and CUDA index; set CUDA_DEVICE_ORDER=PCI_BUS_ID so they agree)",
    )
    p.add_argument(
        "--gpu",
        default=None,
        help="base preset (key, NVML name or spec file): clock table, "
        "architecture, and the fit's starting point (default: the --device GPU's preset, or for a GPU "
        "without one a spec built from what it reports; else h200-sxm)",
    )
    p.add_argument(
        "--control-clocks",
        action="store_true",
        help="--device: lock each clock pair of the sweep (needs root; restored on exit, signals and by a "
        "watchdog). Without it nothing is set and only the clocks in effect are measured",
    )
    p.add_argument(
        "--window",
        type=number(0.1, 10.0),
        default=None,
        help="--device: shortest energy window of each reading, seconds (three per reading, each from one "
        "step of NVML's energy counter to another; default: the sweep's own, 0.1)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="print the base preset's time and energy against each reading instead of fitting (what "
        "--device does without --control-clocks)",
    )
    p.add_argument(
        "--drop",
        default=None,
        metavar="KERNEL[,KERNEL]",
        help="leave these kernels' rows out of the fit (one the model cannot describe pulls the "
        "parameters it shares with the others; the per-kernel errors printed after a fit show which)",
    )
    p.add_argument(
        "--anchor",
        action="store_true",
        help="anchor each kernel on its reading at its highest core clock: the model reproduces that "
        "reading and the fit explains how the others move from it (for tables whose FLOPs and bytes "
        "come from counters and tell only how a kernel splits between the SMs and memory, not its "
        "whole work)",
    )
    p.add_argument("--out", type=Path, default=None, help="GPU spec file to write (default: none)")
    p.add_argument("--key", default=None, help="the written spec's key (default: <base>-calibrated)")
    p.add_argument("--name", default=None, help="the written spec's GPU name (default: the base's)")
    p.add_argument("--table-out", type=Path, default=None, help="write the sweep (or the suite template) as CSV")
    p.add_argument("--noise", type=number(0.0, 0.5), default=0.01, help="--simulated: noise of each reading")
    p.add_argument("--per-memory", type=int, default=10, help="core clocks per memory clock of a sweep")
    p.add_argument("--max-nfev", type=int, default=300, help="optimiser evaluations per fit stage")
    p.add_argument(
        "--folds",
        type=int,
        default=5,
        help="groups of kernels the held-out check splits the sweep into: each group is predicted by a fit "
        "to the others, and the calibration is refused where those fits predict it worse than the "
        "base spec (at least 2; fewer groups when there are fewer kernels)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from rlclock.calibration.sweep import rows_from, simulated_sweep, suite, sweep_configs
    from rlclock.calibration.table import read_table, write_table
    from rlclock.dvfs.spec import get_spec
    from rlclock.dvfs.variants import HIDDEN_RANGES, hidden_gpu
    from rlclock.errors import SpecError

    if args.per_memory < 2 or args.max_nfev < 1 or args.folds < 2:
        raise SpecError(
            f"--per-memory must be at least 2, --max-nfev at least 1 and --folds at least 2; got "
            f"{args.per_memory}, {args.max_nfev} and {args.folds}.",
            "give values in those ranges.",
        )
    from rlclock.validation import check_output_file

    for option, path in (("--out", args.out), ("--table-out", args.table_out)):  # before the sweep or the fit
        if path is not None:
            check_output_file(path, option)
    if args.control_clocks and args.device is None:
        raise SpecError("--control-clocks locks a GPU's clocks for a sweep on it.", "add --device INDEX.")
    if args.device is not None:
        return _device(args)
    base = get_spec(args.gpu or "h200-sxm")
    if args.suite:
        kernels, configs = suite(base), sweep_configs(base, args.per_memory)
        zero = np.zeros((len(kernels), len(configs)))
        out = args.table_out or Path(f"{base.key}-sweep-template.csv")
        write_table(rows_from(kernels, configs, zero, zero), out)
        print(
            f"wrote {out}: {len(kernels)} kernels x {len(configs)} clock pairs to measure (fill time_s and "
            f"energy_j; add idle rows), then rlclock calibrate --table {out} --gpu {base.key}"
        )
        return 0
    true_gpu = None
    if args.table is not None:
        rows = read_table(args.table)
        source = f"sweep table {args.table} ({len(rows)} rows)"
    else:
        true_gpu = hidden_gpu(base, args.simulated)
        rows = simulated_sweep(true_gpu, args.per_memory, args.noise, seed=args.simulated)
        source = (
            f"simulated sweep of a GPU drawn from {base.key} with seed {args.simulated} (ranges "
            f"{HIDDEN_RANGES}), noise {args.noise:g} per reading, median of 4"
        )
    if args.table_out is not None:
        print(f"wrote {write_table(rows, args.table_out)}")
    if args.check:
        _print_check(base, rows)
        return 0
    return _fit_and_write(args, base, rows, source, true_gpu)


def _fit_and_write(
    args: argparse.Namespace, base, rows, source: str, true_gpu=None, provenance: dict | None = None
) -> int:
    """Fit ``base`` to ``rows``, print how well it fits (and, for a simulated GPU, how well it predicts kernels
    outside the suite), and write the preset when ``--out`` is given."""
    import datetime as _dt

    import numpy as np

    from rlclock.calibration.sweep import TIE, agreement, write_preset
    from rlclock.calibration.trust import calibrate

    rows = _dropped(rows, args.drop)
    print(
        f"fitting {base.name} ({base.key}) to the {source}, then each of {args.folds} groups of its kernels to the "
        "others (held-out check) ...",
        flush=True,
    )
    anchored = args.anchor
    result = calibrate(base, rows, args.folds, args.max_nfev, anchored)
    fitted, figures = result.spec, result.figures
    _print_per_kernel(base, fitted, rows, anchored)
    print(
        f"sweep: time error median {100 * figures['time_median_before']:.1f} % -> "
        f"{100 * figures['time_median_after']:.1f} %, largest {100 * figures['time_max_before']:.1f} % -> "
        f"{100 * figures['time_max_after']:.1f} %; energy median {100 * figures['energy_median_before']:.1f} % -> "
        f"{100 * figures['energy_median_after']:.1f} %, largest {100 * figures['energy_max_before']:.1f} % -> "
        f"{100 * figures['energy_max_after']:.1f} %"
    )
    if result.held_out is not None:
        print(result.held_out.summary())
    else:
        print("held out: one kernel only, nothing to hold out (the fit is judged on its own readings alone)")
    print(
        f"fitted {len(result.fitted)} parameters the rows inform ({', '.join(result.fitted)}); the others as the "
        "base holds them"
    )
    for w in result.warnings:
        print(f"warning: {w}")
    if true_gpu is not None:
        kernels = _check_kernels()
        got = agreement(fitted, true_gpu, kernels)
        base_got = agreement(base, true_gpu, kernels)
        print(f"on {len(kernels)} kernels outside the suite (shipped steps), at every clock pair:")
        for label, a in (("base preset", base_got), ("fitted", got)):
            print(
                f"  {label:11s}: time error p95 {100 * np.quantile(a.time_err, 0.95):.2f} %, largest "
                f"{100 * a.time_err.max():.2f} %; energy p95 {100 * np.quantile(a.energy_err, 0.95):.2f} %, "
                f"largest {100 * a.energy_err.max():.2f} %; energy-optimal core clock within two steps "
                f"{100 * np.mean(a.optimum_steps <= 2):.0f} %, or of a clock tied with it within "
                f"{100 * TIE:g} % {100 * np.mean(a.optimum_steps_tied <= 2):.0f} % (largest extra energy "
                f"{100 * a.optimum_regret.max():.2f} %)"
            )
    if args.out is not None:
        provenance = {
            "by": "rlclock calibrate",
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "base": base.key,
            "source": source,
            "rows": len(rows),
            **(provenance or {}),
            "anchored": anchored,
            "fit": {k: round(v, 5) for k, v in figures.items()},
            "held_out": None if result.held_out is None else result.held_out.as_dict(),
            "fitted": list(result.fitted),
            "warnings": list(result.warnings),
        }
        key = args.key or f"{base.key}-calibrated"
        print(
            f"wrote {write_preset(fitted, args.out, key, args.name, provenance)} (use it as gpu_file: in an "
            "env spec, or --gpu FILE)"
        )
    return 0


def _dropped(rows, drop: str | None):
    """``rows`` without the kernels named in ``drop`` (comma-separated)."""
    from rlclock.errors import SpecError

    if not drop:
        return rows
    names = {n.strip() for n in drop.split(",") if n.strip()}
    unknown = sorted(names - {r.kernel for r in rows})
    if unknown:
        raise SpecError(
            f"--drop names kernel(s) {unknown} that the sweep does not hold.",
            f"use names of its rows: {sorted({r.kernel for r in rows})}.",
        )
    return [r for r in rows if r.kernel not in names]


def _print_per_kernel(base, fitted, rows, anchored: bool = False) -> None:
    """Per kernel, the median absolute time and energy error over its readings, the base preset's and the fit's."""
    import numpy as np

    from rlclock.calibration.sweep import predictions

    work = [r for r in rows if not r.is_idle]
    t_meas = np.array([r.time_s for r in work])
    e_meas = np.array([r.energy_j for r in work])
    (tb, eb, _), (tf, ef, _) = predictions(base, rows, anchored), predictions(fitted, rows, anchored)
    names = list(dict.fromkeys(r.kernel for r in work))

    def med(pred, meas, m) -> float:
        return 100 * float(np.median(np.abs(pred[m] / meas[m] - 1)))

    print("per kernel, median |error| over its readings (time; energy), base preset -> fitted:")
    for name in names:
        m = np.array([r.kernel == name for r in work])
        print(
            f"  {name:17s} {med(tb, t_meas, m):6.1f} % -> {med(tf, t_meas, m):5.1f} %;  "
            f"{med(eb, e_meas, m):6.1f} % -> {med(ef, e_meas, m):5.1f} %  ({int(m.sum())} readings)"
        )


def _device(args: argparse.Namespace) -> int:
    """``--device``: sweep the suite on this machine's GPU, then fit (locked clocks) or check the preset
    (dry run)."""
    import datetime as _dt

    from rlclock.calibration.device import SWEEP_SETTINGS, device_sweep, planned_configs
    from rlclock.calibration.sweep import suite
    from rlclock.calibration.table import write_table
    from rlclock.gpu import nvml
    from rlclock.gpu.clocks import ClockControl
    from rlclock.gpu.describe import spec_for_device
    from rlclock.gpu.meter import EnergySampler, MeasureSettings

    device = nvml.NvmlDevice(args.device)
    base, origin = spec_for_device(args.device, args.gpu)
    if origin == "derived":
        print(
            f"no preset matches {device.name}: its spec ({base.key}) is built from what the GPU reports "
            f"({base.sm_count} SMs, {base.mem_bus_bits}-bit memory, {base.power_limit_w:g} W, its clock table) with "
            f"generic model parameters (the {base.sources.get('base', '?')} preset's fit, scaled to it)"
        )
    window_s = SWEEP_SETTINGS.window_s if args.window is None else args.window
    settings = MeasureSettings(window_s=window_s, warmup_s=SWEEP_SETTINGS.warmup_s, repeats=SWEEP_SETTINGS.repeats)
    if base.generic_note() is not None:
        print(base.generic_note())
    if args.device:  # CUDA and NVML number GPUs alike when CUDA_DEVICE_ORDER=PCI_BUS_ID
        import torch

        torch.cuda.set_device(args.device)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    table_out = args.table_out or Path(f"{base.key}-sweep-{started[:10]}.csv")
    with ClockControl(args.device, control_clocks=args.control_clocks) as control:
        configs = planned_configs(base, control, args.per_memory)
        mode = (
            "dry run: nothing set, the clocks in effect only"
            if control.dry_run
            else f"{len(configs)} locked clock pairs"
        )
        print(
            f"sweeping GPU {args.device} ({device.name}) against the {base.key} preset — {mode}; about "
            f"{_eta_s(len(configs), len(suite(base)), settings):.0f} s",
            flush=True,
        )
        bar = _progress_bar()

        def progress(reading, done: int, planned: int) -> None:
            r, st = reading.row, reading.stats
            bar.total = planned
            bar.update(done - bar.n)
            bar.write(
                f"  {r.kernel:17s} {reading.requested:>10s} -> {r.core_mhz}@{r.mem_mhz} "
                f"{st.time_s * 1e3:10.4f} ms {st.energy_j:9.5f} J {st.power_w:6.1f} W SM "
                f"{st.sm_clock_mhz:5.0f} MHz cv {100 * max(st.time_cv, st.energy_cv):.2f} % "
                f"{'/'.join(st.reasons)}"
            )

        def save(sweep) -> None:
            write_table(sweep.rows, table_out, [_info(r) for r in sweep.readings])

        with EnergySampler(device, settings.poll_s, settings.clock_period_s) as sampler:
            try:
                sweep = device_sweep(
                    base, control, sampler, _realiser(base), args.per_memory, settings, progress=progress, save=save
                )
            finally:
                bar.close()
    for name, why in sweep.skipped.items():
        print(f"skipped {name}: {why}")
    print(
        f"wrote {table_out}: {len(sweep.readings)} readings in {sweep.seconds:.0f} s; the GPU's clocks are as "
        "they were found"
    )
    source = (
        f"sweep of GPU {args.device} ({device.name}, driver {nvml.try_read(nvml.driver_version)}) on "
        f"{started}, {'clocks in effect (dry run)' if sweep.observe else 'locked clock pairs'}, "
        f"{len(sweep.readings)} readings, table {table_out.name}"
    )
    if sweep.observe or args.check:
        _print_check(base, sweep.rows)
        if sweep.observe:
            print("a fit needs the clock response: run again with --control-clocks (as root) to lock each clock pair.")
        return 0
    return _fit_and_write(
        args,
        base,
        sweep.rows,
        source,
        provenance={
            "gpu": device.name,
            "driver": str(nvml.try_read(nvml.driver_version)),
            "sweep_s": round(sweep.seconds, 1),
            "skipped": sweep.skipped,
        },
    )


def _eta_s(configs: int, kernels: int, settings) -> float:
    """About how long a sweep takes, seconds: warm-up, windows (each a little over its length) and the measured
    overhead per reading."""
    from rlclock.calibration.device import READING_OVERHEAD_S

    per_reading = settings.warmup_s + 1.2 * (settings.repeats + 1) * settings.window_s + READING_OVERHEAD_S
    return (configs * kernels + configs) * per_reading


def _realiser(base):
    from rlclock.gpu.microbench import realise

    return lambda kernel: realise(kernel, base.threads_per_sm)


def _progress_bar():
    from tqdm.auto import tqdm

    return tqdm(total=1, desc="sweep", unit=" readings", dynamic_ncols=True, leave=True)


def _info(reading) -> dict:
    st = reading.stats
    return {
        "requested": reading.requested,
        "sm_clock_read_mhz": round(st.sm_clock_mhz, 1),
        "mem_clock_read_mhz": round(st.mem_clock_mhz, 1),
        "power_w": round(st.power_w, 2),
        "time_cv": round(st.time_cv, 5),
        "energy_cv": round(st.energy_cv, 5),
        "reasons": "/".join(st.reasons),
    }


def _print_check(base, rows) -> None:
    """The preset's time and energy against each reading taken at the clocks in effect."""
    from rlclock.calibration.sweep import predictions
    from rlclock.commands.common import print_table

    t, e, p = predictions(base, rows)
    work = [r for r in rows if not r.is_idle]
    table = [
        [
            r.kernel,
            f"{r.core_mhz}@{r.mem_mhz}",
            f"{r.time_s * 1e3:.4f}",
            f"{t[i] * 1e3:.4f}",
            f"{100 * (t[i] / r.time_s - 1):+.1f}",
            f"{r.energy_j:.5f}",
            f"{e[i]:.5f}",
            f"{100 * (e[i] / r.energy_j - 1):+.1f}",
        ]
        for i, r in enumerate(work)
    ]
    table += [
        [
            r.kernel,
            f"{r.core_mhz}@{r.mem_mhz}",
            "",
            "",
            "",
            f"{r.energy_j / r.time_s:.1f} W",
            f"{p[i]:.1f} W",
            f"{100 * (p[i] * r.time_s / r.energy_j - 1):+.1f}",
        ]
        for i, r in enumerate(x for x in rows if x.is_idle)
    ]
    print(f"the {base.key} preset against the readings (clock pair: the supported one nearest to what NVML read):")
    print_table(
        ["kernel", "clocks", "time ms", "preset ms", "preset err %", "energy J", "preset J", "preset err %"], table
    )


def _check_kernels() -> list:
    """Kernels outside the suite that ship with rlclock: the H200-measured GPT-3 XL layer and the generated
    GPT-3 XL and Llama 1 B steps (their distinct kernels with work)."""
    from rlclock import resources
    from rlclock.config import load_env_spec
    from rlclock.workload.trace import KernelTrace

    traces = [KernelTrace.load(resources.measurement("gpt3xl-h200-layer.trace.json"))]
    traces += [load_env_spec(n).build_trace() for n in ("gpt3xl-h200", "llama-1b-h200")]
    out = []
    for t in traces:
        out += t.distinct_with_work()
    return out
