"""The cost model on real steps: shapes-only predictions against the corpus measured on the H200.

For every step of ``data/corpus-h200`` (profiled by ``benchmarks/corpus_gpu.py``, observe mode), the simulated
H200 predicts each kernel from its shapes alone (FLOPs and bytes derived again from each kernel's operator
call by the current rules, ``rlclock.workload.op_costs.refresh_costs``; no anchoring on measurements) and is
compared with the kernels' measured in-sequence durations, with the bare step time and with NVML's energy per
step. The targets (the real-models issue): predicted step time within 10 % and energy within 15 % of measured,
and at least 85 % of the kernels of 20 µs or more within 25 % in time.
The GPU model predicts kernels; the time the GPU idles inside a step waiting for the host (launch gaps, the
bare step less its measured kernels) does not depend on the GPU's clocks and is not predictable from
shapes, so it is taken as measured and charged at the model's power with the clocks up and nothing running.
The kernel-sum columns compare the model alone.

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
    from rlclock.dvfs.model import gap_power_w
    from rlclock.dvfs.spec import get_spec
    from rlclock.schedule import AUTO
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=ROOT / "data" / "corpus-h200")
    parser.add_argument("--gpu", default="h200-sxm", help="GPU preset that predicts (default h200-sxm)")
    args = parser.parse_args(argv)
    spec = get_spec(args.gpu)
    gap_w = gap_power_w(spec, spec.abs_max_core_mhz, spec.max_mem_mhz)
    print(f"shapes-only predictions of the simulated {spec.name} ({spec.key}) against {args.corpus.name}; "
          f"idle time inside the bare step (bare step - measured kernel sum) is host time, taken as measured, "
          f"at the model's gap power {gap_w:.0f} W")
    print(f"{'model':16s} {'kernels':>7s} {'kernel ms':>9s} {'predicted':>9s} {'err':>6s} {'bare ms':>8s} "
          f"{'idle ms':>7s} {'step err':>8s} {'J/step':>7s} {'predicted':>9s} {'err':>6s} {'>=20us within 25 %':>19s}")
    met = 0
    models = sorted(p for p in args.corpus.iterdir() if p.is_dir())
    for folder in models:
        trace = refresh_costs(KernelTrace.load(folder / "step.trace.json.gz"))
        summary = json.loads((folder / "summary.json").read_text())
        measured = np.array([next((m.time_s for m in k.measured if m.source == "in-sequence"), np.nan)
                             for k in trace])
        t, e = SimulatedGpu(spec, trace, [AUTO], anchor=False).tables
        bare_s, bare_j = summary["bare"]["step_time_s_median"], summary["bare"]["energy_j_per_step"]
        kernel_s, predicted_s = float(np.nansum(measured)), float(t[:, 0].sum())
        idle_s = max(0.0, bare_s - kernel_s)
        step_err = (predicted_s + idle_s) / bare_s - 1
        energy = float(e[:, 0].sum()) + gap_w * idle_s
        energy_err = energy / bare_j - 1
        big = measured >= 20e-6
        within = int((np.abs(t[big, 0] / measured[big] - 1) <= 0.25).sum())
        ok = abs(step_err) <= 0.10 and abs(energy_err) <= 0.15 and within >= 0.85 * big.sum()
        met += ok
        print(f"{folder.name:16s} {len(trace):7d} {1e3 * kernel_s:9.1f} {1e3 * predicted_s:9.1f} "
              f"{100 * (predicted_s / kernel_s - 1):+5.0f}% {1e3 * bare_s:8.1f} {1e3 * idle_s:7.1f} "
              f"{100 * step_err:+7.0f}% {bare_j:7.1f} {energy:9.1f} {100 * energy_err:+5.0f}% "
              f"{within:>8d}/{int(big.sum()):<5d} ({100 * within / max(big.sum(), 1):.0f} %)")
    print(f"\ntargets met on {met} of {len(models)} models (step time within 10 %, energy within 15 %, >= 85 % of "
          "the kernels of 20 us or more within 25 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
