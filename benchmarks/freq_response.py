"""Frequency response of real kernels on a GPU whose clocks may not be set: the GPU's own power cap lowers the
SM clock, and each kernel class is timed there and at boost (observe mode; nothing is ever set).

Method (``--measure``, on the GPU):

* **Capped**: bursts of large bf16 GEMMs (power-heavy: the firmware holds the SM clock below boost under the
  board power limit) with the probe — one kernel class, on preallocated tensors — enqueued right after each
  burst, on the same stream, timed with CUDA events around it alone (the stream is busy, so no launch gap is
  timed). A thread reads NVML's SM clock and power every 10 ms during the bursts.
* **Boost**: the same probe after a spin kernel (``torch.cuda._sleep``: keeps the stream busy and the SM clock
  up, at little power), timed the same way, with NVML read beside it.
* **Transitions**: after 1.5 s idle, a stream of 2048³ GEMMs, each timed: how long until they run at boost
  speed; and after a burst, how long until a probe's time is back at its boost value.

Each probe is also profiled once (``torch.profiler``) into a kernel trace whose FLOPs and bytes come from the
operators' shapes, as a profiled training step's are (``rlclock.workload.op_costs``).

``--compare`` (anywhere) predicts each probe's time ratio (capped / boost) with a GPU preset at the SM clocks
NVML read, from shapes alone and anchored on the profiled time, and prints it beside the measured ratio.

    python benchmarks/freq_response.py --measure --out data/h200-response.json      # on the GPU
    python benchmarks/freq_response.py --compare data/h200-response.json            # the preset against it
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOLERANCE_PP = 5.0
"""Target: predicted time ratio within this many percentage points of the measured one, per kernel class."""


def probes(torch: Any) -> dict[str, Callable[[], Any]]:
    """Kernel class → a callable launching it on preallocated tensors (shapes of a 1 B-parameter model)."""
    F = torch.nn.functional
    dev, bf, f32 = "cuda", torch.bfloat16, torch.float32
    a4, b4 = torch.randn(4096, 4096, device=dev, dtype=bf), torch.randn(4096, 4096, device=dev, dtype=bf)
    a2, b2 = torch.randn(2048, 2048, device=dev, dtype=bf), torch.randn(2048, 2048, device=dev, dtype=bf)
    tok, w = torch.randn(16384, 2048, device=dev, dtype=bf), torch.randn(2048, 2048, device=dev, dtype=bf)
    q = torch.randn(4, 16, 2048, 128, device=dev, dtype=bf)
    big = torch.randn(64 * 2**20, device=dev, dtype=bf)
    big2 = torch.empty_like(big)
    big32 = torch.randn(64 * 2**20, device=dev, dtype=f32)
    logits = torch.randn(8192, 32000, device=dev, dtype=f32)
    ln_w, ln_b = torch.ones(2048, device=dev, dtype=bf), torch.zeros(2048, device=dev, dtype=bf)
    table = torch.randn(50304, 2048, device=dev, dtype=bf)
    ids = torch.randint(0, 50304, (8192,), device=dev)
    params = [torch.randn(2048, 2048, device=dev, dtype=f32, requires_grad=True) for _ in range(24)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    return {
        "gemm-4096": lambda: a4 @ b4,
        "gemm-2048": lambda: a2 @ b2,
        "gemm-skinny": lambda: tok @ w,
        "attention-fwd": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "elementwise-add": lambda: torch.add(big, big, out=big2),
        "activation-gelu": lambda: F.gelu(big),
        "copy": lambda: big2.copy_(big),
        "cast-fp32-bf16": lambda: big32.to(bf),
        "layernorm": lambda: F.layer_norm(tok, (2048,), ln_w, ln_b),
        "rmsnorm": lambda: F.rms_norm(tok, (2048,), ln_w),
        "log-softmax": lambda: F.log_softmax(logits, dim=-1),
        "reduction": lambda: tok.sum(dim=0),
        "embedding": lambda: F.embedding(ids, table),
        "adamw-fused": opt.step,
    }


class NvmlSampler:
    """Reads the SM clock and power every ``period_s`` while ``on`` (a thread; NVML reads only)."""

    def __init__(self, device: Any, period_s: float = 0.01) -> None:
        self.device, self.period_s = device, period_s
        self.on = False
        self.samples: dict[str, list[tuple[float, float]]] = {}
        self.phase = ""
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            if self.on:
                self.samples.setdefault(self.phase, []).append(
                    (float(self.device.sm_clock_mhz()), self.device.power_w()))
            time.sleep(self.period_s)

    def close(self) -> None:
        self._stop = True
        self._thread.join()


def _profile(torch: Any, name: str, fn: Callable[[], Any]) -> dict[str, Any]:
    """One probe profiled into a kernel trace (shapes → FLOPs and bytes), as a training step is."""
    import tempfile

    from rlclock.deploy.capture import STEP_RANGE, profile_from_chrome

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(4):
            with torch.profiler.record_function(STEP_RANGE):
                fn()
            torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        data = json.loads(Path(f.name).read_text())
    return profile_from_chrome(data, torch.cuda.get_device_name(0), name=name).trace.to_dict()


def measure(out: Path, reps: int, burst_gemms: int) -> None:
    import torch

    from rlclock.gpu.nvml import NvmlDevice

    dev = NvmlDevice(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    heavy_a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    heavy_b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    heavy_c = torch.empty_like(heavy_a)

    def burst() -> None:
        for _ in range(burst_gemms):
            torch.matmul(heavy_a, heavy_b, out=heavy_c)

    def timed(fn: Callable[[], Any]) -> float:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e-3

    sampler = NvmlSampler(dev)
    table = probes(torch)
    result: dict[str, Any] = {
        "gpu": dev.name, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "power_limit_w": dev.power_limit_w(), "reps": reps, "burst_gemms": burst_gemms,
        "torch": torch.__version__, "method": __doc__.split("Method")[1].split("``--compare``")[0].strip(),
        "probes": {}}
    for fn in table.values():  # warm every probe (and its allocator blocks) before timing
        fn()
    torch.cuda.synchronize()
    for name, fn in table.items():
        entry: dict[str, Any] = {"trace": _profile(torch, name, fn)}
        for phase in ("boost", "capped"):
            if phase == "capped":
                for _ in range(20):  # ~0.2 s of bursts first: the firmware is at the power cap before timing
                    burst()
            sampler.phase, sampler.on = f"{name}/{phase}", True
            times = []
            for _ in range(reps):
                if phase == "capped":
                    burst()
                else:
                    torch.cuda._sleep(2_000_000)  # ~1 ms spin: the stream is busy, the clock up, the power low
                times.append(timed(fn))
            torch.cuda.synchronize()
            sampler.on = False
            s = sampler.samples.get(f"{name}/{phase}", [])
            entry[phase] = {"time_s": times, "sm_clock_mhz": [c for c, _ in s], "power_w": [p for _, p in s]}
        result["probes"][name] = entry
        b, c = (statistics.median(entry[p]["time_s"]) for p in ("boost", "capped"))
        print(f"{name:16s} boost {b * 1e6:9.1f} us  capped {c * 1e6:9.1f} us  ratio {c / b:.3f}  "
              f"SM {statistics.median(entry['boost']['sm_clock_mhz'] or [0]):.0f} / "
              f"{statistics.median(entry['capped']['sm_clock_mhz'] or [0]):.0f} MHz", flush=True)
    result["transitions"] = transitions(torch, burst, table["gemm-2048"], timed)
    sampler.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    print(f"wrote {out}")


def transitions(torch: Any, burst: Callable[[], None], probe: Callable[[], Any],
                timed: Callable[[Callable[[], Any]], float]) -> dict[str, Any]:
    """The firmware's own clock transitions, seen through a probe's time (each GEMM timed alone)."""
    out: dict[str, Any] = {}
    torch.cuda.synchronize()
    time.sleep(1.5)  # idle: the SM clock drops
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(201)]
    evs[0].record()
    for e in evs[1:]:
        probe()
        e.record()
    torch.cuda.synchronize()
    out["from_idle_s"] = [evs[i].elapsed_time(evs[i + 1]) * 1e-3 for i in range(200)]
    burst()
    burst()
    evs[0].record()
    for e in evs[1:]:
        probe()
        e.record()
    torch.cuda.synchronize()
    out["after_burst_s"] = [evs[i].elapsed_time(evs[i + 1]) * 1e-3 for i in range(200)]
    out["probe"] = "gemm-2048, back to back, each timed by the events around it"
    _ = timed
    return out


def compare(path: Path, gpu: str) -> int:
    import numpy as np

    from rlclock.dvfs import model
    from rlclock.dvfs.spec import get_spec
    from rlclock.workload.trace import KernelTrace

    data = json.loads(path.read_text())
    spec = get_spec(gpu)
    mem = spec.default_mem_mhz
    print(f"# {data['gpu']} ({data['date']}, power limit {data['power_limit_w']:.0f} W), preset {spec.key}; "
          f"medians of {data['reps']} timings per phase; model at the SM clocks NVML read, memory {mem} MHz")
    print(f"{'kernel class':16s} {'boost us':>9s} {'capped us':>9s} {'SM MHz':>11s} {'clock x':>7s} "
          f"{'measured x':>10s} {'shapes x':>9s} {'anchored x':>10s} {'|err| pp':>8s}  within {TOLERANCE_PP:g} pp")
    worst, misses = 0.0, 0
    for name, e in data["probes"].items():
        tb, tc = (statistics.median(e[p]["time_s"]) for p in ("boost", "capped"))
        fb = statistics.median(e["boost"]["sm_clock_mhz"] or [spec.abs_max_core_mhz])
        fc = statistics.median(e["capped"]["sm_clock_mhz"] or [fb])
        trace = KernelTrace.from_dict(e["trace"])
        ka = model.kernel_arrays(list(trace), spec)
        clocks = np.array([[fb, fc]])
        mems = np.array([[mem, mem]], dtype=float)
        shapes = model.predict_clocks(ka, spec, clocks, mems, power_limit_w=1e9).time_s.sum(axis=0)
        t = np.array([k.measured[0].time_s for k in trace])
        anchored_ka = model.anchor(ka, spec, t, np.full(len(t), np.nan))
        anch = model.predict_clocks(anchored_ka, spec, clocks, mems, power_limit_w=1e9).time_s.sum(axis=0)
        meas = tc / tb
        err = 100 * abs(anch[1] / anch[0] - meas)
        worst = max(worst, err)
        misses += err > TOLERANCE_PP
        print(f"{name:16s} {tb * 1e6:9.1f} {tc * 1e6:9.1f} {fb:5.0f}/{fc:5.0f} {fc / fb:7.3f} {meas:10.3f} "
              f"{shapes[1] / shapes[0]:9.3f} {anch[1] / anch[0]:10.3f} {err:8.1f}  "
              f"{'yes' if err <= TOLERANCE_PP else 'NO'}")
    print(f"# {len(data['probes']) - misses} of {len(data['probes'])} kernel classes within {TOLERANCE_PP:g} pp "
          f"(anchored); worst {worst:.1f} pp")
    tr = data.get("transitions")
    if tr:
        for label, key in (("from 1.5 s idle", "from_idle_s"), ("after a power-capped burst", "after_burst_s")):
            ts = np.array(tr[key])
            settled = float(np.median(ts[-50:]))
            first = int(np.argmax(ts <= settled * 1.03))
            print(f"# transition {label}: first probe {ts[0] * 1e6:.1f} us, settled {settled * 1e6:.1f} us, "
                  f"within 3 % of settled after {first} probes ({ts[:first].sum() * 1e3:.2f} ms)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measure", action="store_true", help="measure on this machine's GPU 0 (observe mode)")
    p.add_argument("--out", type=Path, default=Path("data/h200-response.json"), help="where --measure writes")
    p.add_argument("--reps", type=int, default=40, help="timings per probe and phase")
    p.add_argument("--burst-gemms", type=int, default=6, help="8192^3 bf16 GEMMs per burst before a capped probe")
    p.add_argument("--compare", type=Path, help="a measurement file to check a preset against")
    p.add_argument("--gpu", default="h200-sxm", help="the preset --compare checks")
    a = p.parse_args(argv)
    if a.measure:
        measure(a.out, a.reps, a.burst_gemms)
    if a.compare:
        return compare(a.compare, a.gpu)
    if not a.measure:
        p.error("give --measure and/or --compare FILE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
