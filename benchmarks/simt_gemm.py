"""FP32 matrix products on the SIMT units, timed on a GPU (observe mode), and a preset's prediction beside them.

With TF32 off (PyTorch's default for matmuls) cuBLAS runs an fp32 ``mm`` / ``bmm`` on the FP32 units: FFMA
kernels (``sm80_xmma_gemm_f32f32_f32f32_f32_…_ffma``), whose operands pass through shared memory and registers
for every multiply-add. ``--measure`` times a set of shapes — the attention products of an fp32 T5 step among
them, and square, skinny and batched shapes of other sizes — back to back with CUDA events (median of ``--reps``
timings of ``LAUNCHES`` launches each, after a warm-up); nothing is set, the clocks are the driver's own (the SM
clock is measured before and after each timing by a spin kernel of known cycles, as ``freq_response.py`` does).
Each product is also profiled once into a kernel trace whose FLOPs and bytes come from the operator's shapes
(``rlclock.workload.op_costs``), so ``--compare`` can put the preset's prediction beside it.

    python benchmarks/simt_gemm.py --measure --out data/h200-simt-gemm.json     # on the GPU
    python benchmarks/simt_gemm.py --compare data/h200-simt-gemm.json           # anywhere
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
        "gpu": torch.cuda.get_device_name(0), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "launches": LAUNCHES, "reps": reps, "gauge_cycles": GAUGE_CYCLES,
        "method": __doc__.split("``--measure``")[1].split("Each product")[0].strip(), "products": {}}
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
        print(f"{name:20s} {statistics.median(times) * 1e6:9.1f} us at ~{statistics.median(clocks):5.0f} MHz",
              flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    print(f"wrote {out}")


def compare(path: Path, gpu: str) -> int:
    import numpy as np

    from rlclock.dvfs import model
    from rlclock.dvfs.spec import get_spec
    from rlclock.schedule import AUTO
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    data = json.loads(path.read_text())
    spec = get_spec(gpu)
    print(f"# {data['gpu']} ({data['date']}), preset {spec.key}: fp32 products, medians of {data['reps']} timings of "
          f"{data['launches']} launches; model from shapes alone at auto clocks")
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
        print(f"{name:20s} {kname:44s} {flops / 1e9:7.2f} {t_meas * 1e6:8.1f} {flops / t_meas / 1e12:7.1f} "
              f"{t_model * 1e6:8.1f} {100 * errs[-1]:+5.0f}%")
    a = np.abs(np.array(errs))
    print(f"# {int((a <= 0.25).sum())} of {len(a)} within 25 %; largest error {100 * a.max():.0f} %")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measure", action="store_true", help="measure on this machine's GPU 0 (observe mode)")
    p.add_argument("--out", type=Path, default=Path("data/h200-simt-gemm.json"), help="where --measure writes")
    p.add_argument("--reps", type=int, default=15, help="timings per product")
    p.add_argument("--compare", type=Path, help="a measurement file to check a preset against")
    p.add_argument("--gpu", default="h200-sxm", help="the preset --compare checks")
    a = p.parse_args(argv)
    if a.measure:
        measure(a.out, a.reps)
    if a.compare:
        return compare(a.compare, a.gpu)
    if not a.measure:
        p.error("give --measure and/or --compare FILE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
