"""FP32 matrix products on the SIMT units, timed on a GPU (dry run), and a preset's prediction beside them.

With TF32 off (PyTorch's default for matmuls) cuBLAS runs an fp32 ``mm`` / ``bmm`` on the FP32 units: FFMA
kernels (``sm80_xmma_gemm_f32f32_f32f32_f32_…_ffma``), whose operands pass through shared memory and registers
for every multiply-add. ``--measure`` times a set of shapes — the attention products of an fp32 T5 step among
them, and square, skinny and batched shapes of other sizes — back to back with CUDA events (median of ``--reps``
timings of ``LAUNCHES`` launches each, after a warm-up); nothing is set, the clocks are the driver's own (the SM
clock is measured before and after each timing by a spin kernel of known cycles, as ``freq_response.py`` does).
Each product is also profiled once into a kernel trace whose FLOPs and bytes come from the operator's shapes
(``rlclock.workload.op_costs``), so ``--compare`` can put the preset's prediction beside it.

``--power`` runs each product back to back over tick-aligned NVML energy windows instead (``rlclock.gpu.meter``, as
``rlclock calibrate --device`` reads the suite): the board's power, the SM clock and the clock-event reasons while
it runs, which the H200 preset's fit of their switching power takes (``rlclock.calibration.measured.SIMT_GEMM_POWER``).

    python benchmarks/simt_gemm.py --measure --out data/h200-simt-gemm.json     # on the GPU
    python benchmarks/simt_gemm.py --power data/h200-simt-gemm-power.json       # on the GPU
    python benchmarks/simt_gemm.py --compare data/h200-simt-gemm.json [--power-file data/h200-simt-gemm-power.json]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

LAUNCHES = 10
"""Launches between the two events of one timing."""
SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    # name: (shape of A, shape of B); 3-d shapes are a bmm
    "t5-scores": ((192, 512, 64), (192, 64, 512)),
    "t5-context": ((192, 512, 512), (192, 512, 64)),
    "t5-scores-short": ((192, 128, 64), (192, 64, 128)),
    "bmm-1024x128": ((64, 1024, 128), (64, 128, 1024)),
    "bmm-1024x1024x128": ((64, 1024, 1024), (64, 1024, 128)),
    "bmm-256x256x256": ((128, 256, 256), (128, 256, 256)),
    "mm-4096": ((4096, 4096), (4096, 4096)),
    "mm-8192x1024x1024": ((8192, 1024), (1024, 1024)),
    "mm-2048x2048x8192": ((2048, 8192), (8192, 2048)),
}


def products(torch: Any) -> dict[str, Callable[[], Any]]:
    """Shape name → a callable launching its fp32 product on preallocated tensors."""
    out: dict[str, Callable[[], Any]] = {}
    for name, (sa, sb) in SHAPES.items():
        a = torch.randn(*sa, device="cuda", dtype=torch.float32)
        b = torch.randn(*sb, device="cuda", dtype=torch.float32)
        out[name] = (lambda a=a, b=b: torch.bmm(a, b)) if len(sa) == 3 else (lambda a=a, b=b: torch.mm(a, b))
    return out


def measure(out: Path, reps: int) -> None:
    import torch
    from freq_response import GAUGE_CYCLES, _profile

    torch.backends.cuda.matmul.allow_tf32 = False

    def event() -> Any:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "launches": LAUNCHES,
        "reps": reps,
        "gauge_cycles": GAUGE_CYCLES,
        "method": __doc__.split("``--measure``")[1].split("Each product")[0].strip(),
        "products": {},
    }
    for name, fn in products(torch).items():
        entry: dict[str, Any] = {"trace": _profile(torch, name, fn)}
        for _ in range(20):
            fn()
        times, clocks = [], []
        for _ in range(reps):
            g0 = event()
            torch.cuda._sleep(GAUGE_CYCLES)
            e0 = event()
            for _ in range(LAUNCHES):
                fn()
            e1 = event()
            torch.cuda._sleep(GAUGE_CYCLES)
            g1 = event()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) * 1e-3 / LAUNCHES)
            gauge_s = (g0.elapsed_time(e0) + e1.elapsed_time(g1)) / 2 * 1e-3
            clocks.append(GAUGE_CYCLES / gauge_s / 1e6)
        entry["time_s"], entry["clock_mhz"] = times, clocks
        result["products"][name] = entry
        print(
            f"{name:20s} {statistics.median(times) * 1e6:9.1f} us at ~{statistics.median(clocks):5.0f} MHz", flush=True
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    print(f"wrote {out}")


def power(out: Path, window_s: float) -> None:
    """Each product back to back over NVML energy windows: power, SM clock and clock-event reasons (nothing set)."""
    import torch

    from rlclock.gpu.meter import EnergySampler, MeasureSettings, measure
    from rlclock.gpu.microbench import SuiteRunner
    from rlclock.gpu.nvml import NvmlDevice

    torch.backends.cuda.matmul.allow_tf32 = False
    device = NvmlDevice(0)
    settings = MeasureSettings(window_s=window_s, warmup_s=0.3, repeats=3)
    result: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "power_limit_w": device.power_limit_w(),
        "window_s": window_s,
        "repeats": 3,
        "method": __doc__.split("``--power``")[1].split("    python")[0].strip(),
        "products": {},
    }
    with EnergySampler(device, settings.poll_s, settings.clock_period_s) as sampler:
        for name, fn in products(torch).items():
            runner = SuiteRunner(name, fn)
            try:
                st = measure(runner, sampler, settings)
            finally:
                runner.close()
            result["products"][name] = {
                "power_w": st.power_w,
                "sm_clock_mhz": st.sm_clock_mhz,
                "reasons": list(st.reasons),
                "time_s": st.time_s,
                "energy_j": st.energy_j,
            }
            print(
                f"{name:20s} {st.time_s * 1e6:9.1f} us {st.power_w:6.1f} W at {st.sm_clock_mhz:5.0f} MHz "
                f"{'/'.join(st.reasons)}",
                flush=True,
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


def compare_power(path: Path, traces_path: Path, gpu: str) -> None:
    """The model's power of each product at the SM clock NVML read (``path``), against the board's measured power;
    the products' kernels come from the timing file ``traces_path`` (``--measure``'s)."""
    from rlclock.calibration.measured import simt_power_at_clock
    from rlclock.dvfs.spec import get_spec
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    spec = get_spec(gpu)
    data = json.loads(path.read_text())
    traces = json.loads(traces_path.read_text())["products"]
    print(
        f"# {data['gpu']} ({data['date']}, limit {data['power_limit_w']:.0f} W): NVML energy windows of "
        f">= {data['window_s']} s, back to back; model power at the SM clock read"
    )
    print(f"{'product':20s} {'MHz':>5s} {'meas W':>7s} {'model W':>7s} {'err':>6s}  reasons")
    for name, e in data["products"].items():
        ks = (
            [k for k in refresh_costs(KernelTrace.from_dict(traces[name]["trace"])) if k.category == "gemm"]
            if name in traces
            else []
        )
        p_model = float(simt_power_at_clock(spec, ks, [e["sm_clock_mhz"]])[0]) if len(ks) == 1 else float("nan")
        print(
            f"{name:20s} {e['sm_clock_mhz']:5.0f} {e['power_w']:7.1f} {p_model:7.1f} "
            f"{100 * (p_model / e['power_w'] - 1):+5.1f}%  {'/'.join(e['reasons'])}"
        )


def compare(path: Path, gpu: str) -> int:
    import numpy as np

    from rlclock.dvfs import model
    from rlclock.dvfs.spec import get_spec
    from rlclock.schedule import AUTO
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    data = json.loads(path.read_text())
    spec = get_spec(gpu)
    print(
        f"# {data['gpu']} ({data['date']}), preset {spec.key}: fp32 products, medians of {data['reps']} timings of "
        f"{data['launches']} launches; model from shapes alone at auto clocks"
    )
    print(f"{'product':20s} {'kernel':44s} {'GFLOP':>7s} {'meas us':>8s} {'TFLOP/s':>7s} {'model us':>8s} {'err':>6s}")
    errs = []
    for name, e in data["products"].items():
        trace = refresh_costs(KernelTrace.from_dict(e["trace"]))
        ks = [k for k in trace if k.category == "gemm"]
        t_meas = statistics.median(e["time_s"])
        t_model = float(model.predict(model.kernel_arrays(ks, spec), spec, [AUTO]).time_s.sum())
        flops = sum(k.flops for k in ks)
        errs.append(t_model / t_meas - 1)
        kname = ks[0].name.split("_execute")[0][-44:] if ks else "-"
        print(
            f"{name:20s} {kname:44s} {flops / 1e9:7.2f} {t_meas * 1e6:8.1f} {flops / t_meas / 1e12:7.1f} "
            f"{t_model * 1e6:8.1f} {100 * errs[-1]:+5.0f}%"
        )
    a = np.abs(np.array(errs))
    print(f"# {int((a <= 0.25).sum())} of {len(a)} within 25 %; largest error {100 * a.max():.0f} %")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measure", action="store_true", help="measure on this machine's GPU 0 (dry run)")
    p.add_argument("--out", type=Path, default=Path("data/h200-simt-gemm.json"), help="where --measure writes")
    p.add_argument("--reps", type=int, default=15, help="timings per product")
    p.add_argument("--compare", type=Path, help="a measurement file to check a preset against")
    p.add_argument("--gpu", default="h200-sxm", help="the preset --compare checks")
    p.add_argument("--power", type=Path, help="measure each product's power on GPU 0 (dry run) into this file")
    p.add_argument("--window", type=float, default=1.0, help="--power: shortest energy window, seconds")
    p.add_argument("--power-file", type=Path, help="--compare: also check the model's power against this file")
    a = p.parse_args(argv)
    if a.measure:
        measure(a.out, a.reps)
    if a.power:
        power(a.power, a.window)
    if a.compare:
        rc = compare(a.compare, a.gpu)
        if a.power_file:
            compare_power(a.power_file, a.compare, a.gpu)
        return rc
    if not (a.measure or a.power):
        p.error("give --measure, --power FILE and/or --compare FILE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
