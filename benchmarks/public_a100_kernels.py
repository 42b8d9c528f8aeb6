"""Public per-kernel measurements of an A100 at several locked clocks, against rlclock's models of that GPU.

Data (``data/public/``, sources and licence in its README): the Kernel Tuner tutorial's measurements on an NVIDIA
A100-PCIE-40GB — an FP32 multiply-add kernel at ten locked graphics clocks (time and NVML power) and three
configurations of CLBlast's fp32 GEMM (4096³) at seven (time and energy efficiency). The PCIe card is the A100's
GA100 die (108 SMs, the same clock table as the SXM4 preset) on a 250 W board.

Models compared, each at the measured clocks under the card's 250 W limit:

* ``preset`` — the generic ``a100-sxm4-40gb`` preset (its initial values), its board limit set to 250 W;
* ``built`` — the spec rlclock builds for an A100-PCIE-40GB from what NVML and CUDA report about it
  (:func:`rlclock.dvfs.derive.spec_from_facts`: the datasheet's facts here; the H200's fit scaled to 108 SMs), as a
  user of that GPU without a preset gets it;
* ``fitted`` — ``built`` fitted to these rows (:func:`rlclock.calibration.sweep.fit_sweep`, as ``rlclock calibrate
  --table`` does): what the measurements say about the voltage curve and the power terms.

The FP32 kernel's FLOPs are not published; it is taken to keep the FP32 units busy at the measured rate of its
slowest clock (its time is ∝ 1/clock within 0.6 %), which sets its FLOPs. Printed per kernel: time and energy
errors of each model over the clocks, the energy-optimal clock measured and predicted, and the fitted voltage curve.

    python benchmarks/public_a100_kernels.py
    python benchmarks/public_a100_kernels.py --fit-all   # every parameter free in the fit
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import public_a100  # noqa: E402

from rlclock.calibration.sweep import (  # noqa: E402
    POWER_FIT_NAMES,
    SIMT_GEMM_FIT_NAMES,
    TIME_FIT_NAMES,
    SweepRow,
    fit_sweep,
    predictions,
)
from rlclock.dvfs.derive import DeviceFacts, spec_from_facts  # noqa: E402
from rlclock.dvfs.spec import GpuSpec, get_spec  # noqa: E402

DATA = ROOT / "data" / "public"
MEM_MHZ = 1215
A100_PCIE = DeviceFacts(
    name="NVIDIA A100-PCIE-40GB",
    architecture="Ampere",
    compute_capability=(8, 0),
    cuda_cores=6912,
    sm_count=108,
    threads_per_sm=2048,
    l2_bytes=40 * 2**20,
    mem_bus_bits=5120,
    clocks={MEM_MHZ: tuple(range(1410, 209, -15))},
    default_mem_mhz=MEM_MHZ,
    power_limit_w=250.0,
)
"""What an A100-PCIE-40GB reports (its datasheet: 108 SMs of 64 FP32 lanes, 40 MB L2, 5120-bit HBM2 at 1215 MHz,
210-1410 MHz in 15 MHz steps, 250 W)."""
GEMM_N = 4096
PERSEUS_BOARD_W = 400.0  # the SXM board's limit (public_a100 runs the layer without a cap anyway)


def fp32_rows(fp32_per_cycle: float) -> list[SweepRow]:
    """The FP32 kernel's rows; its FLOPs from its slowest clock at the FP32 peak (``fp32_per_cycle`` per cycle)."""
    with (DATA / "kerneltuner-a100-pcie-fp32.csv").open() as f:
        raw = list(csv.DictReader(f))
    slow = min(raw, key=lambda r: int(r["nvml_gr_clock"]))
    flops = float(slow["time_ms"]) * 1e-3 * int(slow["nvml_gr_clock"]) * 1e6 * fp32_per_cycle
    return [
        SweepRow(
            "fp32_kernel",
            flops,
            0.0,
            0.0,
            "elementwise",
            "fp32",
            int(r["nvml_gr_clock"]),
            MEM_MHZ,
            float(r["time_ms"]) * 1e-3,
            float(r["time_ms"]) * 1e-3 * float(r["nvml_power_w"]),
        )
        for r in raw
    ]


def sgemm_rows() -> list[SweepRow]:
    """The three GEMM configurations' rows (energy = GFLOP ÷ GFLOPS/W)."""
    flops = 2.0 * GEMM_N**3 + 2.0 * GEMM_N**2
    out = []
    names: dict[str, str] = {}
    with (DATA / "kerneltuner-a100-pcie-sgemm.csv").open() as f:
        table = list(csv.DictReader(f))
    for r in table:
        name = names.setdefault(r["config"], f"sgemm_{len(names) + 1}")
        out.append(
            SweepRow(
                name,
                flops,
                2 * 4.0 * GEMM_N**2,
                4.0 * GEMM_N**2,
                "gemm",
                "fp32",
                int(r["nvml_gr_clock"]),
                MEM_MHZ,
                float(r["time_ms"]) * 1e-3,
                flops / 1e9 / float(r["gflops_per_w"]),
                gemm_mnk=(GEMM_N, GEMM_N, GEMM_N),
            )
        )
    return out


def models(rows: list[SweepRow], fit_all: bool = False) -> dict[str, GpuSpec]:
    """The three models of the card (module docstring); ``fit_all``: the fit frees every parameter a sweep of the
    suite fits, not only those these rows inform."""
    preset = get_spec("a100-sxm4-40gb")
    preset = replace(preset, power_limit_w=A100_PCIE.power_limit_w)
    built = spec_from_facts(A100_PCIE)
    every = (TIME_FIT_NAMES + SIMT_GEMM_FIT_NAMES[:1], POWER_FIT_NAMES + SIMT_GEMM_FIT_NAMES[1:])
    fitted, _ = fit_sweep(built, rows, names=every if fit_all else None)
    return {"preset": preset, "built": built, "fitted": fitted}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--fit-all",
        action="store_true",
        help="free every parameter a suite sweep fits, not only those these rows inform (how the "
        "fit behaved before it fitted only what a table shows)",
    )
    args = parser.parse_args(argv)
    built = spec_from_facts(A100_PCIE)
    rows = fp32_rows(built.simt_flops_per_cycle_per_sm * built.sm_count) + sgemm_rows()
    specs = models(rows, args.fit_all)
    kernels = list(dict.fromkeys(r.kernel for r in rows))
    t_meas = np.array([r.time_s for r in rows])
    e_meas = np.array([r.energy_j for r in rows])
    preds = {k: predictions(s, rows)[:2] for k, s in specs.items()}
    print(
        f"# {len(rows)} public readings on an A100-PCIE-40GB (250 W): {', '.join(kernels)}; models at the measured "
        "clocks under the 250 W limit"
    )
    print(
        f"{'kernel':12s} {'MHz':>5s} {'t ms':>8s} {'P W':>6s} "
        + " ".join(f"{k + ' t%':>9s} {k + ' P%':>9s}" for k in specs)
    )
    for i, r in enumerate(rows):
        cells = " ".join(
            f"{100 * (preds[k][0][i] / t_meas[i] - 1):+9.1f} "
            f"{100 * (preds[k][1][i] / preds[k][0][i] / (e_meas[i] / t_meas[i]) - 1):+9.1f}"
            for k in specs
        )
        print(f"{r.kernel:12s} {r.core_mhz:5d} {1e3 * r.time_s:8.3f} {r.energy_j / r.time_s:6.1f} {cells}")
    print(
        "# per kernel: median |error| in time / energy over its clocks; energy-optimal clock (MHz) and how much "
        "more energy the top clock takes than it"
    )
    print(f"{'kernel':12s} {'measured':>18s} " + " ".join(f"{k:>30s}" for k in specs))
    for name in kernels:
        idx = [i for i, r in enumerate(rows) if r.kernel == name]
        clocks = np.array([rows[i].core_mhz for i in idx])
        top = int(np.argmax(clocks))

        def optimum(e: np.ndarray, clocks: np.ndarray = clocks, top: int = top) -> str:
            best = int(np.argmin(e))
            return f"{clocks[best]:4d} MHz, top +{100 * (e[top] / e[best] - 1):3.0f}%"

        cells = []
        for k in specs:
            t, e = preds[k][0][idx], preds[k][1][idx]
            terr = np.median(np.abs(t / t_meas[idx] - 1))
            eerr = np.median(np.abs(e / e_meas[idx] - 1))
            cells.append(f"{100 * terr:4.1f}/{100 * eerr:4.1f}% {optimum(e)}")
        print(f"{name:12s} {optimum(e_meas[idx]):>18s} " + " ".join(f"{c:>30s}" for c in cells))
    print(
        "# each model on the Perseus GPT-3 175B stage (A100-80GB SXM, benchmarks/public_a100.py): does what the "
        "kernels show carry over to a training step of another board?"
    )
    f, t, e = public_a100.measured(public_a100.DATA)
    for k, s in specs.items():
        pt, pe = public_a100.predicted(replace(s, power_limit_w=PERSEUS_BOARD_W), f)
        print(f"{k:8s} " + public_a100.shape_summary(f, t, e, pt, pe).replace("\n", "; "))
    print("# voltage curve and power terms (V: volts; W per GHz at 1 V for clock / SIMT power)")
    for k, s in specs.items():
        m = s.model
        print(
            f"{k:8s} v_min {m.v_min_v:.3f} V, knee {m.f_ridge_mhz:6.0f} MHz, v_max {m.v_max_v:.3f} V "
            f"(x{m.v_max_v / m.v_min_v:.2f}); floor {m.p_const_w + m.k_leak_w_per_v * m.v_min_v:5.1f} W at v_min; "
            f"clock {m.c_clock_w:6.1f}, SIMT {m.c_simt_w:6.1f}, SIMT GEMM +{m.c_simt_gemm_w:6.1f} W/GHz; "
            f"SIMT GEMM at {100 * m.eta_simt_gemm:4.1f} % of the FP32 peak"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
