"""Frequency response of real kernels on a GPU whose clocks may not be set: the GPU's own power cap lowers the
SM clock, and each kernel class is timed there and at boost (dry run; nothing is ever set).

Method (``--measure``, on the GPU):

* **The clock, measured where the probe runs**: ``torch.cuda._sleep(N)`` spins for ``N`` SM clock cycles, so a
  gauge of ``N`` = 2·10^5 cycles timed with CUDA events gives the SM clock of that moment, ``N / (t - t0)``, with
  ``t0`` the fixed cost of a kernel between two events (from gauges of two lengths at the start). NVML's reading
  averages over 1/6-1 s and lags short phases. A gauge runs just before and just after every probe.
* **Capped**: bursts of large bf16 GEMMs (power-heavy: the firmware holds the SM clock below boost under the
  board power limit), 48 of them first, then before every timing; the probe — one kernel class, on
  preallocated tensors — runs right after its gauge on the same stream, timed with CUDA events around it alone
  (the stream is busy, so no launch gap is timed).
* **Boost**: after 1 s idle (the firmware keeps a power-capped clock for long after a burst; from idle it is
  at boost within a fraction of a millisecond), the same with a 1 ms spin before each gauge instead of a burst
  (the stream busy, the clock up, the power low).
* **Transitions**: gauges back to back after 1.5 s idle, and after 48 bursts: the clock against time.
  NVML's SM clock and power are read every 10 ms beside everything.

Each probe is also profiled once (``torch.profiler``) into a kernel trace whose FLOPs and bytes come from the
operators' shapes, as a profiled training step's are (``rlclock.workload.op_costs``).

``--compare`` (anywhere) predicts each probe's time ratio (capped / boost) with a GPU preset at the SM clocks the
gauges measured, from shapes alone (FLOPs and bytes derived again from the profiled operator calls by the current
rules) and anchored on the profiled time, and prints it beside the measured ratio.

    python benchmarks/freq_response.py --measure --out data/h200-response.json      # on the GPU
    python benchmarks/freq_response.py --compare data/h200-response.json            # the preset against it
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
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
                    (float(self.device.sm_clock_mhz()), self.device.power_w())
                )
            time.sleep(self.period_s)

    def close(self) -> None:
        self._stop = True
        self._thread.join()


def _profile(torch: Any, name: str, fn: Callable[[], Any]) -> dict[str, Any]:
    """One probe profiled into a kernel trace (shapes → FLOPs and bytes), as a training step is."""
    from rlclock.deploy.capture import STEP_RANGE, profile_from_chrome
    from rlclock.workload.torch_profile import export_chrome

    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA], record_shapes=True
    ) as prof:
        for _ in range(4):
            with torch.profiler.record_function(STEP_RANGE):
                fn()
            torch.cuda.synchronize()
    return profile_from_chrome(export_chrome(prof), torch.cuda.get_device_name(0), name=name).trace.to_dict()


GAUGE_CYCLES = 200_000
"""SM cycles of one clock gauge (about 100 us at 1980 MHz)."""


def measure(out: Path, reps: int, burst_gemms: int) -> None:
    import torch

    from rlclock.gpu.nvml import NvmlDevice

    dev = NvmlDevice(0)
    heavy_a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    heavy_b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    heavy_c = torch.empty_like(heavy_a)

    def burst(gemms: int = burst_gemms) -> None:
        for _ in range(gemms):
            torch.matmul(heavy_a, heavy_b, out=heavy_c)

    def event() -> Any:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def gauge() -> None:
        torch.cuda._sleep(GAUGE_CYCLES)

    def gauge_cost_s() -> float:
        """The fixed cost of one gauge between two events (launch and retire), from gauges of N and 4N cycles."""
        torch.cuda._sleep(50_000_000)  # ~25 ms at boost
        pairs = []
        for _ in range(20):
            e0 = event()
            torch.cuda._sleep(GAUGE_CYCLES)
            e1 = event()
            torch.cuda._sleep(4 * GAUGE_CYCLES)
            e2 = event()
            pairs.append((e0, e1, e2))
        torch.cuda.synchronize()
        t1 = statistics.median(a.elapsed_time(b) * 1e-3 for a, b, _ in pairs)
        t4 = statistics.median(b.elapsed_time(c) * 1e-3 for _, b, c in pairs)
        return max(t1 - (t4 - t1) / 3, 0.0)

    sampler = NvmlSampler(dev)
    table = probes(torch)
    torch.cuda.synchronize()
    time.sleep(1.0)
    t0 = gauge_cost_s()
    print(f"gauge: fixed cost {t0 * 1e6:.2f} us per kernel between events", flush=True)
    result: dict[str, Any] = {
        "gpu": dev.name,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "power_limit_w": dev.power_limit_w(),
        "reps": reps,
        "burst_gemms": burst_gemms,
        "gauge_cycles": GAUGE_CYCLES,
        "gauge_cost_s": t0,
        "torch": torch.__version__,
        "method": __doc__.split("Method")[1].split("Each probe is")[0].strip(),
        "probes": {},
    }
    for fn in table.values():  # warm every probe (and its allocator blocks) before timing
        fn()
    torch.cuda.synchronize()
    for name, fn in table.items():
        entry: dict[str, Any] = {"trace": _profile(torch, name, fn)}
        for phase in ("boost", "capped"):
            if phase == "capped":
                burst(8 * burst_gemms)  # the firmware at the power cap before the first timing
            else:
                torch.cuda.synchronize()
                time.sleep(1.0)  # idle: the clock the last burst left behind is forgotten
            sampler.phase, sampler.on = f"{name}/{phase}", True
            marks = []
            for _ in range(reps):
                if phase == "capped":
                    burst()
                else:
                    torch.cuda._sleep(2_000_000)
                e0 = event()
                gauge()
                e1 = event()
                fn()
                e2 = event()
                gauge()
                e3 = event()
                marks.append((e0, e1, e2, e3))
            torch.cuda.synchronize()
            sampler.on = False
            ms = [(a.elapsed_time(b), b.elapsed_time(c), c.elapsed_time(d)) for a, b, c, d in marks]
            s = sampler.samples.get(f"{name}/{phase}", [])
            entry[phase] = {
                "time_s": [t * 1e-3 for _, t, _ in ms],
                "clock_mhz": [GAUGE_CYCLES / ((g0 + g1) / 2 * 1e-3 - t0) / 1e6 for g0, _, g1 in ms],
                "nvml_sm_clock_mhz": [c for c, _ in s],
                "nvml_power_w": [p for _, p in s],
            }
        result["probes"][name] = entry
        b, c = (statistics.median(entry[p]["time_s"]) for p in ("boost", "capped"))
        fb, fc = (statistics.median(entry[p]["clock_mhz"]) for p in ("boost", "capped"))
        print(
            f"{name:16s} boost {b * 1e6:9.1f} us at {fb:6.0f} MHz  capped {c * 1e6:9.1f} us at {fc:6.0f} MHz  "
            f"time x{c / b:.3f} for clock x{fc / fb:.3f}",
            flush=True,
        )
    result["transitions"] = transitions(torch, burst, event, gauge, t0)
    sampler.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    print(f"wrote {out}")


def transitions(
    torch: Any,
    burst: Callable[..., None],
    event: Callable[[], Any],
    gauge: Callable[[], None],
    t0: float,
    n: int = 1500,
) -> dict[str, Any]:
    """The firmware's own clock transitions: clock gauges back to back (clock against time, from CUDA events)."""
    out: dict[str, Any] = {}
    for label, before in (("from_idle", lambda: time.sleep(1.5)), ("after_bursts", lambda: burst(48))):
        torch.cuda.synchronize()
        before()
        evs = [event()]
        for _ in range(n):
            gauge()
            evs.append(event())
        torch.cuda.synchronize()
        dts = [evs[i].elapsed_time(evs[i + 1]) * 1e-3 for i in range(n)]
        out[label] = {
            "t_s": list(itertools.accumulate(dts)),
            "clock_mhz": [GAUGE_CYCLES / (dt - t0) / 1e6 for dt in dts],
        }
    return out


def compare(path: Path, gpu: str) -> int:
    import numpy as np

    from rlclock.dvfs import model
    from rlclock.dvfs.spec import get_spec
    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import KernelTrace

    data = json.loads(path.read_text())
    spec = get_spec(gpu)
    mem = spec.default_mem_mhz
    print(
        f"# {data['gpu']} ({data['date']}, power limit {data['power_limit_w']:.0f} W), preset {spec.key}; "
        f"medians of {data['reps']} timings per phase; model at the SM clocks the gauges measured, memory {mem} MHz"
    )
    print(
        f"{'kernel class':16s} {'boost us':>9s} {'capped us':>9s} {'SM MHz':>11s} {'clock x':>7s} "
        f"{'measured x':>10s} {'shapes x':>9s} {'anchored x':>10s} {'|err| pp':>8s}  within {TOLERANCE_PP:g} pp"
    )
    worst, misses = 0.0, 0
    for name, e in data["probes"].items():
        tb, tc = (statistics.median(e[p]["time_s"]) for p in ("boost", "capped"))
        fb, fc = (statistics.median(e[p]["clock_mhz"]) for p in ("boost", "capped"))
        trace = refresh_costs(KernelTrace.from_dict(e["trace"]))  # FLOPs and bytes by the current rules
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
        print(
            f"{name:16s} {tb * 1e6:9.1f} {tc * 1e6:9.1f} {fb:5.0f}/{fc:5.0f} {fc / fb:7.3f} {meas:10.3f} "
            f"{shapes[1] / shapes[0]:9.3f} {anch[1] / anch[0]:10.3f} {err:8.1f}  "
            f"{'yes' if err <= TOLERANCE_PP else 'NO'}"
        )
    print(
        f"# {len(data['probes']) - misses} of {len(data['probes'])} kernel classes within {TOLERANCE_PP:g} pp "
        f"(anchored); worst {worst:.1f} pp"
    )
    tr = data.get("transitions")
    if tr:
        for label, key in (("from 1.5 s idle", "from_idle"), ("after 48 power-capped bursts", "after_bursts")):
            t, f = np.array(tr[key]["t_s"]) * 1e3, np.array(tr[key]["clock_mhz"])
            settled = float(np.median(f[-100:]))
            steps = []
            for level in np.linspace(f[0], settled, 6)[1:]:  # when a rolling median of 9 gauges first reaches it
                rolled = np.array([np.median(f[max(0, i - 4) : i + 5]) for i in range(len(f))])
                up = level >= f[0]
                hit = np.nonzero(rolled >= level * 0.995 if up else rolled <= level * 1.005)[0]
                if hit.size:
                    steps.append(f"{level:.0f} MHz at {t[hit[0]]:.1f} ms")
            print(
                f"# transition {label}: first gauge {f[0]:.0f} MHz (ends {t[0]:.2f} ms), settled "
                f"{settled:.0f} MHz (median of the last 100 of {len(f)} gauges, {t[-1]:.0f} ms); " + "; ".join(steps)
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measure", action="store_true", help="measure on this machine's GPU 0 (dry run)")
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
