"""The noise of what a real training job can measure per step: step time (CUDA events, host clock) and energy
per window of steps (NVML's counter), on this machine's GPU in a dry run (nothing is set).

An online learner on a real GPU is rewarded only by these readings, so their noise decides how many steps it
needs. For a few real training steps (``benchmarks/corpus_gpu.py``'s models: full steps with loss, backward and a
fused AdamW) it runs the bare loop for ``--seconds`` and records, after every step, its CUDA-event time, its
host time, and the NVML energy counter with the time it was read. It prints the coefficient of variation of the
step time, how often the energy counter moves, and the coefficient of variation of the energy per step measured
over windows of 1 to 64 steps (energy between the counter readings at the windows' ends, over their steps).

    python benchmarks/step_noise.py --out data/h200-step-noise.json       # on the GPU
    python benchmarks/step_noise.py --report data/h200-step-noise.json    # the table again
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

MODELS = ("train-small-gpt", "bert-base", "llama-0.5b-mha")
WINDOWS = (1, 2, 4, 8, 16, 32, 64)


def run_model(name: str, seconds: float) -> dict[str, Any]:
    import torch
    from corpus_gpu import build, hf_models, small_gpt, trainer

    from rlclock.gpu.nvml import NvmlDevice

    if name == "train-small-gpt":
        model, batch, loss = small_gpt()
        step = trainer(model, batch, loss)
    else:
        config, shape = hf_models()[name]
        model, batch, _ = build(name, config, shape)
        step = trainer(model, batch)
    dev = NvmlDevice(torch.cuda.current_device())
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    gpu_s, host_s, energy_j, read_s = [], [], [dev.total_energy_j()], [time.perf_counter()]
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        h0 = time.perf_counter()
        a.record()
        step()
        b.record()
        b.synchronize()
        host_s.append(time.perf_counter() - h0)
        gpu_s.append(a.elapsed_time(b) * 1e-3)
        energy_j.append(dev.total_energy_j())
        read_s.append(time.perf_counter())
    del model
    torch.cuda.empty_cache()
    return {
        "steps": len(gpu_s),
        "gpu_time_s": gpu_s,
        "host_time_s": host_s,
        "energy_counter_j": energy_j,
        "read_s": read_s,
    }


def summarise(name: str, r: dict[str, Any]) -> None:
    import numpy as np

    g, h = np.array(r["gpu_time_s"]), np.array(r["host_time_s"])
    e, t = np.array(r["energy_counter_j"]), np.array(r["read_s"])
    moves = np.nonzero(np.diff(e) != 0)[0]
    tick = float(np.median(np.diff(t[moves + 1]))) if moves.size > 2 else float("nan")
    cv = lambda x: float(np.std(x) / np.mean(x))  # noqa: E731
    per = []
    for w in WINDOWS:
        n = (len(g) // w) * w
        if n < 3 * w:
            continue
        ends = np.arange(0, n + 1, w)
        ew = np.diff(e[ends]) / w
        per.append(f"{w}: {100 * cv(ew):.1f} %")
    print(
        f"{name:16s} {r['steps']:5d} steps, GPU time median {1e3 * np.median(g):7.2f} ms (CV {100 * cv(g):.2f} %), "
        f"host {1e3 * np.median(h):7.2f} ms (CV {100 * cv(h):.2f} %); energy counter moved after "
        f"{100 * moves.size / len(g):.0f} % of steps, every {1e3 * tick:.0f} ms; energy per step, CV over "
        f"windows of " + ", ".join(per) + " steps"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="measure on GPU 0 and write the readings here")
    p.add_argument("--report", type=Path, help="print the table of a file written by --out")
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of training per model")
    p.add_argument("--only", nargs="*", default=list(MODELS), help="models (default: %(default)s)")
    a = p.parse_args(argv)
    if a.out:
        import torch

        data: dict[str, Any] = {
            "gpu": torch.cuda.get_device_name(0),
            "torch": torch.__version__,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "seconds": a.seconds,
            "method": __doc__.split("\n\n")[1],
            "models": {},
        }
        for name in a.only:
            data["models"][name] = run_model(name, a.seconds)
            summarise(name, data["models"][name])
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(data))
        print(f"wrote {a.out}")
    if a.report:
        data = json.loads(a.report.read_text())
        print(f"# {data['gpu']}, {data['date']}, {data['seconds']:g} s of training per model (dry run)")
        for name, r in data["models"].items():
            summarise(name, r)
    if not (a.out or a.report):
        p.error("give --out FILE (measure) or --report FILE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
