"""The cost model on real steps: shapes-only predictions against the corpus measured on the H200.

For every step of ``data/corpus-h200`` (profiled by ``benchmarks/corpus_gpu.py``, observe mode), the simulated
H200 predicts each kernel from its shapes alone (FLOPs and bytes the profile mapped from the operators; no
anchoring on measurements) and is compared with the kernels' measured in-sequence durations, with the bare
step time and with NVML's energy per step. The targets (the real-models issue): predicted step time within
10 % and energy within 15 % of measured, and at least 85 % of the kernels of 20 µs or more within 25 % in time.

    python benchmarks/corpus_cost.py
    python benchmarks/corpus_cost.py --corpus data/corpus-h200 --gpu h200-sxm
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    from rlclock.backends.simulated import SimulatedGpu
    from rlclock.dvfs.spec import get_spec
    from rlclock.schedule import AUTO
    from rlclock.workload.trace import KernelTrace

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=ROOT / "data" / "corpus-h200")
    parser.add_argument("--gpu", default="h200-sxm", help="GPU preset that predicts (default h200-sxm)")
    args = parser.parse_args(argv)
    spec = get_spec(args.gpu)
    print(f"shapes-only predictions of the simulated {spec.name} ({spec.key}) against {args.corpus.name}")
    print(f"{'model':16s} {'kernels':>7s} {'kernel sum ms':>13s} {'bare ms':>8s} {'predicted ms':>12s} "
          f"{'time err':>9s} {'J/step':>7s} {'predicted J':>11s} {'energy err':>10s} {'>=20us within 25 %':>19s}")
    met = 0
    models = sorted(p for p in args.corpus.iterdir() if p.is_dir())
    for folder in models:
        trace = KernelTrace.load(folder / "step.trace.json.gz")
        summary = json.loads((folder / "summary.json").read_text())
        measured = np.array([next((m.time_s for m in k.measured if m.source == "in-sequence"), np.nan)
                             for k in trace])
        t, e = SimulatedGpu(spec, trace, [AUTO], anchor=False).tables
        bare_s, bare_j = summary["bare"]["step_time_s_median"], summary["bare"]["energy_j_per_step"]
        time_err, energy_err = t[:, 0].sum() / bare_s - 1, e[:, 0].sum() / bare_j - 1
        big = measured >= 20e-6
        within = int((np.abs(t[big, 0] / measured[big] - 1) <= 0.25).sum())
        ok = abs(time_err) <= 0.10 and abs(energy_err) <= 0.15 and within >= 0.85 * big.sum()
        met += ok
        print(f"{folder.name:16s} {len(trace):7d} {1e3 * np.nansum(measured):13.1f} {1e3 * bare_s:8.1f} "
              f"{1e3 * t[:, 0].sum():12.1f} {100 * time_err:+8.0f}% {bare_j:7.1f} {e[:, 0].sum():11.1f} "
              f"{100 * energy_err:+9.0f}% {within:>8d}/{int(big.sum()):<5d} ({100 * within / max(big.sum(), 1):.0f} %)")
    print(f"\ntargets met on {met} of {len(models)} models (time within 10 %, energy within 15 %, >= 85 % of the "
          "kernels of 20 us or more within 25 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
