"""Does a memory-bound kernel find its input in L2 when the kernel before it just wrote it? (dry run)

A kernel replayed alone re-reads what its own previous launch touched; in a training step it reads what some
earlier kernel wrote — just before, or long ago. How much of a memory-bound kernel's traffic the L2 serves in
each case decides how far a model fitted to isolated replays is off inside a step. This measures it for the
elementwise kernels a training step is full of, at the input sizes of real steps, on preallocated tensors:

* **cold**: a 512 MiB buffer is written first (the 60 MB L2 holds nothing of the input), then the kernel;
* **hot**: the same flush, then a producer kernel rewrites the input in place (``x.mul_(1)``), then the kernel;
* **replay**: the kernel right after its own previous launch (what an isolated replay measures).

Each case is timed with CUDA events around the kernel alone, queued behind the flush so that no launch gap is
timed; medians of ``--reps``. Nothing is set: the clocks are the driver's own (NVML's SM clock is read beside
each case). Each kernel is also profiled once into a kernel trace whose FLOPs and bytes come from the
operators' shapes (``rlclock.workload.op_costs``), so ``--compare`` can put the preset's prediction beside it.

    python benchmarks/l2_reuse.py --measure --out data/h200-l2-reuse.json     # on the GPU
    python benchmarks/l2_reuse.py --compare data/h200-l2-reuse.json           # anywhere
    python benchmarks/l2_reuse.py --refit 0.25                                # an experiment, anywhere

``--refit W`` refits the H200 preset's parameters (``rlclock.calibration.measured``: the GPT-3 XL layer's
isolated replays and their priors) with these kernels' times beside them, weighted ``W``, each in its case: no
L2 residency when cold, the model's rule (a footprint's share that fits in L2) when hot and in replay. The preset's
own fit (``python -m rlclock.calibration h200-sxm``) takes the cold and hot times at weight 0.25.
It prints the layer's fit errors, these kernels' and the corpus's shapes-only accuracy
(``benchmarks/real_steps.py --part costs``' kernel column) before and after; nothing is written.
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

INPUT_MB = (4, 8, 16, 32, 48, 64, 128, 512)
"""Input sizes, MiB of the kernel's first operand."""
CASES = ("cold", "hot", "replay")


def kernels(torch: Any, mib: int) -> dict[str, tuple[Any, Callable[[], Any]]]:
    """Kernel → (its input tensor, a callable launching it), for an input of ``mib`` MiB (bf16 unless named)."""
    dev, bf, f32 = "cuda", torch.bfloat16, torch.float32
    n = mib * 2**20 // 2  # bf16 elements
    cols = 1024
    rows = n // cols
    x16 = torch.randn(rows, cols, device=dev, dtype=bf)
    z16 = torch.randn_like(x16)
    y32 = torch.empty(rows, cols, device=dev, dtype=f32)
    y16 = torch.empty_like(x16)
    x32 = torch.randn(rows // 2, cols, device=dev, dtype=f32)  # the same bytes as x16
    v32 = torch.randn(cols, device=dev, dtype=f32)
    o32 = torch.empty_like(x32)
    o16 = torch.empty(rows // 2, cols, device=dev, dtype=bf)
    heads = x16.view(-1, 64, 16, 64)  # (b·s/64, 64, heads, head_dim) → heads first: a strided copy
    return {
        "cast bf16->fp32 (copy_)": (x16, lambda: y32.copy_(x16)),
        "cast fp32->bf16 (copy_)": (x32, lambda: o16.copy_(x32)),
        "add bf16+bf16": (x16, lambda: torch.add(x16, z16, out=y16)),
        "add bf16+fp32->fp32": (x16, lambda: torch.add(x16, y32, out=y32)),
        "mul fp32 x row (broadcast)": (x32, lambda: torch.mul(x32, v32, out=o32)),
        "transpose copy bf16": (x16, lambda: heads.transpose(1, 2).contiguous()),
    }


def measure(out: Path, reps: int) -> None:
    import torch
    from freq_response import _profile  # one probe profiled into a kernel trace, as a step is

    from rlclock.gpu.nvml import NvmlDevice

    dev = NvmlDevice(torch.cuda.current_device())
    flush = torch.empty(512 * 2**20, device="cuda", dtype=torch.uint8)
    results: dict[str, Any] = {}
    for mib in INPUT_MB:
        for name, (inp, fn) in kernels(torch, mib).items():
            key = f"{name} @ {mib} MiB"
            fn()
            torch.cuda.synchronize()
            times: dict[str, list[float]] = {c: [] for c in CASES}
            clocks: list[int] = []
            for _ in range(reps):
                for case in CASES:
                    flush.fill_(1)
                    if case == "hot":
                        inp.mul_(1)
                    elif case == "replay":
                        fn()
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    fn()
                    b.record()
                    b.synchronize()
                    times[case].append(a.elapsed_time(b) * 1e-3)
                clocks.append(dev.sm_clock_mhz())
            results[key] = {
                "kernel": name,
                "input_mib": mib,
                "time_s": times,
                "sm_clock_mhz_median": statistics.median(clocks),
                "trace": _profile(torch, key, fn),
            }
            print(
                f"{key:40s} "
                + " ".join(f"{c} {1e6 * statistics.median(times[c]):8.1f} us" for c in CASES)
                + f"  SM {statistics.median(clocks):.0f} MHz",
                flush=True,
            )
            del inp, fn
        torch.cuda.empty_cache()
    data = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "reps": reps,
        "power_limit_w": dev.power_limit_w(),
        "method": __doc__,
        "cases": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    print(f"wrote {out}")


def compare(path: Path, gpu: str) -> int:
    from rlclock.dvfs import model
    from rlclock.dvfs.spec import get_spec
    from rlclock.schedule import AUTO
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    data = json.loads(path.read_text())
    spec = get_spec(gpu)
    print(
        f"# {data['gpu']} ({data['date']}), preset {spec.key}: medians of {data['reps']}; GB/s = the kernel's "
        "bytes (op_costs) over its time; model: shapes alone at auto clocks"
    )
    print(
        f"{'kernel':40s} {'MB moved':>8s} {'cold us':>8s} {'hot us':>8s} {'replay us':>9s} {'cold GB/s':>9s} "
        f"{'hot GB/s':>8s} {'model us':>8s} {'model/cold':>10s} {'model/hot':>9s}"
    )
    for key, e in data["cases"].items():
        trace = refresh_costs(KernelTrace.from_dict(e["trace"]))  # FLOPs and bytes by the current rules
        ks = [k for k in trace if k.dram_read_bytes + k.dram_write_bytes > 0]
        moved = sum(k.dram_read_bytes + k.dram_write_bytes for k in ks)
        ka = model.kernel_arrays(ks, spec)
        pred = float(model.predict(ka, spec, [AUTO]).time_s.sum()) if ks else float("nan")
        t = {c: statistics.median(e["time_s"][c]) for c in CASES}
        print(
            f"{key:40s} {moved / 1e6:8.1f} {1e6 * t['cold']:8.1f} {1e6 * t['hot']:8.1f} {1e6 * t['replay']:9.1f} "
            f"{moved / t['cold'] / 1e9:9.0f} {moved / t['hot'] / 1e9:8.0f} {1e6 * pred:8.1f} "
            f"{pred / t['cold']:10.2f} {pred / t['hot']:9.2f}"
        )
    return 0


def _cases(path: Path) -> list[tuple[Any, float, float]]:
    """``(kernel, measured time, L2-resident share of its footprint)`` per single-kernel case and condition."""
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    out = []
    for e in json.loads(path.read_text())["cases"].values():
        ks = [k for k in refresh_costs(KernelTrace.from_dict(e["trace"])) if k.dram_read_bytes + k.dram_write_bytes]
        if len(ks) != 1:
            continue
        k = ks[0]
        for case, share in (("cold", 0.0), ("hot", 1.0), ("replay", 1.0)):  # hot and replay: the model's rule
            out.append((k, statistics.median(e["time_s"][case]), share))
    return out


def refit(path: Path, weight: float, gpu: str) -> int:
    import numpy as np
    from real_steps import kernel_accuracy

    from rlclock.calibration import measured as fitted_to
    from rlclock.calibration.fit import fit
    from rlclock.dvfs import model
    from rlclock.dvfs.spec import get_spec
    from rlclock.schedule import AUTO

    spec = get_spec(gpu)
    cases = _cases(path)
    measured_t = np.array([t for _, t, _ in cases])
    kernels, t, e, f = fitted_to.isolated_points(fitted_to.measured_trace(spec), spec)

    def l2_times(s: Any) -> np.ndarray:
        return np.array(
            [
                float(
                    model.predict(
                        model.kernel_arrays([k], c := s.with_model(l2_hit_fraction=s.model.l2_hit_fraction * share)),
                        c,
                        [AUTO],
                    ).time_s[0, 0]
                )
                for k, _, share in cases
            ]
        )

    def residuals(s: Any) -> np.ndarray:
        return np.concatenate(
            [fitted_to._residuals(s, kernels, t, e, f), weight * 2 * np.log(l2_times(s) / measured_t)]
        )

    def show(s: Any, label: str) -> None:
        p = fitted_to.predict_auto(s, kernels)
        et, ee = np.abs(p.time_s[:, 0] / t - 1), np.abs(p.energy_j[:, 0] / e - 1)
        big = t >= 20e-6
        l2 = np.abs(l2_times(s) / measured_t - 1)
        print(
            f"{label}: GPT-3 XL layer (isolated, kernels >= 20 us) largest error time {100 * et[big].max():.1f} %, "
            f"energy {100 * ee[big].max():.1f} % (its target 20 %); these kernels' time error median "
            f"{100 * np.median(l2):.0f} %, p90 {100 * np.percentile(l2, 90):.0f} %"
        )
        print(
            "  corpus kernels >= 20 us within 25 %: "
            + ", ".join(f"{name} {100 * share:.0f} %" for name, share in kernel_accuracy(s))
        )

    show(spec, "preset")
    new, _cost = fit(spec, residuals, fitted_to.FIT_NAMES, max_nfev=300, bounds=fitted_to._BOUNDS)
    show(new, f"refit (weight {weight:g})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure", action="store_true", help="measure on this machine's GPU (dry run)")
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "h200-l2-reuse.json")
    parser.add_argument("--reps", type=int, default=15, help="timings per case (default 15)")
    parser.add_argument("--compare", type=Path, help="a measured file to put the preset beside")
    parser.add_argument("--gpu", default="h200-sxm", help="preset for --compare and --refit (default h200-sxm)")
    parser.add_argument("--refit", type=float, metavar="W", help="refit the preset with these kernels at weight W")
    args = parser.parse_args(argv)
    if args.measure:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        measure(args.out, args.reps)
        return 0
    if args.compare:
        return compare(args.compare, args.gpu)
    if args.refit is not None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        return refit(args.out, args.refit, args.gpu)
    parser.error("give --measure (on a GPU) or --compare FILE")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
