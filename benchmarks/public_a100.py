"""The A100 preset against public multi-clock measurements of a GPT-3 layer stack on an A100 SXM.

Data (``data/public/perseus-a100-sxm-gpt3-175b.csv``): the Perseus artifact (Chung et al., SOSP'24;
github.com/ml-energy/zeus, branch ``kronos``, commit ``38cb3f9``, file
``sosp24_data/emulation/stage_profile/gpt3-175b+a100_sxm_bf16.csv``, Apache-2.0), stage 0 of eight identical
pipeline stages of GPT-3 175B (bf16, tensor parallel 8): per-GPU time and energy of its forward and backward
pass at 38 locked SM clocks, 1410-855 MHz, on an NVIDIA A100-80GB SXM (the memory clock left alone). The
microbatch and sequence length are not in the file, so absolute figures cannot be predicted; the shape of
time and energy against the core clock can.

Model: the preset's GPU at those clocks (its default memory clock, no power cap: the board measured drew
~475 W at 1410 MHz, above the 40 GB preset's 400 W limit) over one GPT-3 175B decoder layer from the generator
(forward and backward, bf16, sequence 2048, one sequence, no tensor parallelism: GEMM-dominated as the stage
is; the stage's GEMMs are the same products split eight ways). Printed: time and energy relative to 1410 MHz,
measured and predicted, the energy-optimal clock and how much more energy 1410 MHz takes.

    python benchmarks/public_a100.py
    python benchmarks/public_a100.py --gpu a100-sxm4-40gb
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT / "data" / "public" / "perseus-a100-sxm-gpt3-175b.csv"
SHOWN_MHZ = (1410, 1305, 1200, 1080, 990, 855)


def measured(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clocks (MHz, descending) and the stage's forward + backward time (s) and energy (J) at each."""
    rows = list(csv.DictReader(path.open()))
    clocks = sorted({int(r["frequency"]) for r in rows if r["stage"] == "0"}, reverse=True)
    t = np.array(
        [sum(float(r["time"]) for r in rows if r["stage"] == "0" and int(r["frequency"]) == f) for f in clocks]
    )
    e = np.array(
        [sum(float(r["energy"]) for r in rows if r["stage"] == "0" and int(r["frequency"]) == f) for f in clocks]
    )
    return np.array(clocks, dtype=float), t, e


def predicted(gpu, clocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time (s) and energy (J) of one GPT-3 175B layer at ``clocks`` on ``gpu`` (a preset key or a GpuSpec)."""
    from rlclock.dvfs import model
    from rlclock.dvfs.spec import get_spec
    from rlclock.workload.transformer import TransformerConfig, transformer_step

    spec = get_spec(gpu) if isinstance(gpu, str) else gpu
    trace = transformer_step(TransformerConfig(hidden=12288, heads=96, seq=2048, batch=1, layers=1, head=False))
    ka = model.kernel_arrays(list(trace), spec)
    req = clocks[None, :]
    mem = np.full_like(req, float(spec.default_mem_mhz))
    pred = model.predict_clocks(ka, spec, req, mem, power_limit_w=1e9)
    return pred.time_s.sum(axis=0), pred.energy_j.sum(axis=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="a100-sxm4-40gb", help="preset to check (default a100-sxm4-40gb)")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    f, t, e = measured(args.data)
    pt, pe = predicted(args.gpu, f)
    print(
        f"# {args.data.name}: GPT-3 175B stage 0, forward + backward, A100-80GB SXM (Perseus artifact); preset "
        f"{args.gpu} over one GPT-3 175B layer; relative to 1410 MHz"
    )
    print(
        f"{'SM MHz':>6s} {'time meas':>9s} {'time model':>10s} {'energy meas':>11s} {'energy model':>12s} "
        f"{'power meas W':>12s}"
    )
    for mhz in SHOWN_MHZ:
        i = int(np.nonzero(f == mhz)[0][0])
        print(
            f"{mhz:6.0f} {t[i] / t[0]:9.3f} {pt[i] / pt[0]:10.3f} {e[i] / e[0]:11.3f} {pe[i] / pe[0]:12.3f} "
            f"{e[i] / t[i]:12.0f}"
        )
    print(shape_summary(f, t, e, pt, pe))
    return 0


def shape_summary(f: np.ndarray, t: np.ndarray, e: np.ndarray, pt: np.ndarray, pe: np.ndarray) -> str:
    """The energy-optimal clock and the top clock's extra energy, measured and modelled, and the largest errors in
    time and energy relative to the top clock (``f`` descending, first the top clock)."""
    im, ip = int(np.argmin(e)), int(np.argmin(pe))
    err_t = np.max(np.abs(pt / pt[0] - t / t[0]))
    err_e = np.max(np.abs(pe / pe[0] - e / e[0]))
    return (
        f"energy-optimal clock: measured {f[im]:.0f} MHz (1410 MHz takes {100 * (e[0] / e[im] - 1):.0f} % more), "
        f"model {f[ip]:.0f} MHz (1410 MHz takes {100 * (pe[0] / pe[ip] - 1):.0f} % more); energy at 855 MHz over "
        f"the minimum: measured {100 * (e[-1] / e[im] - 1):.0f} %, model {100 * (pe[-1] / pe[ip] - 1):.0f} %\n"
        f"largest error over the {f.size} clocks: relative time {100 * err_t:.1f} pp, relative energy "
        f"{100 * err_e:.1f} pp"
    )


if __name__ == "__main__":
    raise SystemExit(main())
