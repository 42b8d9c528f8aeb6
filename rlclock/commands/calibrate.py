"""``rlclock calibrate``: fit a GPU's DVFS model from a clock sweep and write it as a GPU spec file."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlclock.commands.args import number


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
                    "Nothing here touches a GPU.",
        epilog="CSV columns: kernel, flops, bytes (or read_bytes and write_bytes), core_mhz, mem_mhz, time_s, "
               "energy_j; optional category, dtype, access, blocks, threads_per_block, gemm_m/n/k. A row named "
               "idle is an idle-power window. Example: rlclock calibrate --table sweep.csv --gpu h200-sxm "
               "--out my-h200.yaml",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--table", type=Path, help="a measured sweep (CSV) to fit")
    src.add_argument("--simulated", type=int, metavar="SEED",
                     help="sweep a simulated GPU with hidden parameters (drawn from SEED) and fit it")
    src.add_argument("--suite", action="store_true",
                     help="write the suite's kernels and clock pairs to measure (--table-out) and exit")
    p.add_argument("--gpu", default="h200-sxm", help="base preset (key, NVML name or spec file): clock table, "
                   "architecture, and the fit's starting point")
    p.add_argument("--out", type=Path, default=None, help="GPU spec file to write (default: none)")
    p.add_argument("--key", default=None, help="the written spec's key (default: <base>-calibrated)")
    p.add_argument("--name", default=None, help="the written spec's GPU name (default: the base's)")
    p.add_argument("--table-out", type=Path, default=None, help="write the sweep (or the suite template) as CSV")
    p.add_argument("--noise", type=number(0.0, 0.5), default=0.01, help="--simulated: noise of each reading")
    p.add_argument("--per-memory", type=int, default=10, help="core clocks per memory clock of a sweep")
    p.add_argument("--max-nfev", type=int, default=300, help="optimiser evaluations per fit stage")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import datetime as _dt

    import numpy as np

    from rlclock.calibration.sweep import (
        agreement,
        fit_sweep,
        rows_from,
        simulated_sweep,
        suite,
        sweep_configs,
        write_preset,
    )
    from rlclock.calibration.table import read_table, write_table
    from rlclock.dvfs.spec import get_spec
    from rlclock.dvfs.variants import HIDDEN_RANGES, hidden_gpu
    from rlclock.errors import SpecError

    if args.per_memory < 2 or args.max_nfev < 1:
        raise SpecError("--per-memory must be at least 2 and --max-nfev at least 1.")
    base = get_spec(args.gpu)
    if args.suite:
        kernels, configs = suite(base), sweep_configs(base, args.per_memory)
        zero = np.zeros((len(kernels), len(configs)))
        out = args.table_out or Path(f"{base.key}-sweep-template.csv")
        write_table(rows_from(kernels, configs, zero, zero), out)
        print(f"wrote {out}: {len(kernels)} kernels x {len(configs)} clock pairs to measure (fill time_s and "
              f"energy_j; add idle rows), then rlclock calibrate --table {out} --gpu {base.key}")
        return 0
    true_gpu = None
    if args.table is not None:
        rows = read_table(args.table)
        source = f"sweep table {args.table} ({len(rows)} rows)"
    else:
        true_gpu = hidden_gpu(base, args.simulated)
        rows = simulated_sweep(true_gpu, args.per_memory, args.noise, seed=args.simulated)
        source = (f"simulated sweep of a GPU drawn from {base.key} with seed {args.simulated} (ranges "
                  f"{HIDDEN_RANGES}), noise {args.noise:g} per reading, median of 4")
    if args.table_out is not None:
        print(f"wrote {write_table(rows, args.table_out)}")
    print(f"fitting {base.name} ({base.key}) to the {source} ...", flush=True)
    fitted, figures = fit_sweep(base, rows, args.max_nfev)
    print(f"sweep: time error median {100 * figures['time_median_before']:.1f} % -> "
          f"{100 * figures['time_median_after']:.1f} %, largest {100 * figures['time_max_before']:.1f} % -> "
          f"{100 * figures['time_max_after']:.1f} %; energy median {100 * figures['energy_median_before']:.1f} % -> "
          f"{100 * figures['energy_median_after']:.1f} %, largest {100 * figures['energy_max_before']:.1f} % -> "
          f"{100 * figures['energy_max_after']:.1f} %")
    if true_gpu is not None:
        kernels = _check_kernels()
        got = agreement(fitted, true_gpu, kernels)
        base_got = agreement(base, true_gpu, kernels)
        print(f"on {len(kernels)} kernels outside the suite (shipped steps), at every clock pair:")
        for label, a in (("base preset", base_got), ("fitted", got)):
            print(f"  {label:11s}: time error p95 {100 * np.quantile(a.time_err, 0.95):.2f} %, largest "
                  f"{100 * a.time_err.max():.2f} %; energy p95 {100 * np.quantile(a.energy_err, 0.95):.2f} %, "
                  f"largest {100 * a.energy_err.max():.2f} %; energy-optimal core clock within two steps "
                  f"{100 * np.mean(a.optimum_steps <= 2):.0f} % (largest extra energy "
                  f"{100 * a.optimum_regret.max():.2f} %)")
    if args.out is not None:
        provenance = {"by": "rlclock calibrate", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds"), "base": base.key, "source": source, "rows": len(rows),
            "fit": {k: round(v, 5) for k, v in figures.items()}}
        key = args.key or f"{base.key}-calibrated"
        print(f"wrote {write_preset(fitted, args.out, key, args.name, provenance)} (use it as gpu_file: in an "
              "env spec)")
    return 0


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
