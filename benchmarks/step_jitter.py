"""Where a real training step's kernels start, step after step — and how well any anchor placement could time
switches in it (dry run; nothing is set).

A controller times a switch from an *anchor*, a moment it learns from the GPU, plus the planned offset of the
switch's segment after it. How far the segment really starts from there, step to step, bounds the switch-time
error of any controller that times switches that way. This measures it on the corpus models
(``benchmarks/corpus_gpu.py``'s Hugging Face architectures and the example's GPT):

``--measure`` (on the GPU): per model, after warm-up, ``--steps`` training steps run under a profile of CUDA
activity alone (no operator recording), a marker kernel (``torch.cuda._sleep``) at the start of each; every
device activity's start after its step's marker is kept (µs), for the steps whose activities are the most
common sequence. One file for all models.

Default (anywhere): for switch points every 12 ms of the median step (the switch test's), each issued one
lookahead (the H200's 6 ms latency + 0.5 ms) before its segment, the error of predicting the segment's start
from an anchor placed

* at the step's start (what the controller does today: one anchor per step), by the median offset;
* at the start of the latest kernel at least one lookahead (+ 0.1 ms for the anchor to arrive) before the
  segment, among anchors spaced every ``Δ`` ms of the median step (kernels inside the step: layer boundaries
  recorded by module hooks would be such anchors);

and the p95 of its absolute value over every switch point of every step.

    python benchmarks/step_jitter.py --measure --out data/corpus-h200/step-jitter.npz    # on the GPU
    python benchmarks/step_jitter.py data/corpus-h200/step-jitter.npz                    # anywhere
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

SEGMENT_S = 0.012
"""Switch points every this many seconds of the median step (the switch test's)."""
LOOKAHEAD_S = 0.0065
"""How early a switch is issued before its segment: the H200's 6 ms latency and the 0.5 ms margin."""
ANCHOR_DELAY_S = 1e-4
"""How long after the GPU passes an anchor the controller can know it (the median anchor delay is ~40 µs)."""
SPACINGS_S = (0.001, 0.002, 0.005, 0.01, 0.02)
"""Spacings of anchors inside the step that the analysis tries, seconds."""


def measure(out: Path, steps: int, only: str) -> None:
    import torch
    from corpus_gpu import build, hf_models, small_gpt, trainer

    from rlclock.deploy.capture import marked_steps
    from rlclock.workload.torch_profile import export_chrome

    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {}
    entries = [
        (name, (lambda n=name, c=config, s=shape: _hf(build, trainer, n, c, s)))
        for name, (config, shape) in hf_models().items()
    ]
    entries.append(("train-small-gpt", lambda: _small(small_gpt, trainer)))
    for name, make in entries:
        if only not in name:
            continue
        step = make()
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(steps + 1):
                torch.cuda._sleep(1)
                step()
            torch.cuda._sleep(1)
            torch.cuda.synchronize()
        marked = marked_steps(export_chrome(prof))[:-1]
        seqs = collections.Counter(tuple(a[2] for a in body) for _, body in marked)
        common, count = seqs.most_common(1)[0]
        kept = [(anchor, body) for anchor, body in marked if tuple(a[2] for a in body) == common]
        arrays[name] = np.array([[a[0] - anchor for a in body] for anchor, body in kept], dtype=np.float32)
        arrays[name + "/duration"] = np.median(np.array([[a[1] for a in body] for _, body in kept]), axis=0)
        meta[name] = {"steps": len(marked), "kept": count, "activities": len(common)}
        print(f"{name}: {count} of {len(marked)} steps with the same {len(common)} activities", flush=True)
        step = None
        torch.cuda.empty_cache()
    meta["_"] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "method": __doc__,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, meta=np.array(json.dumps(meta)), **arrays)
    print(f"wrote {out}")


def _hf(build: Any, trainer: Any, name: str, config: Any, shape: Any) -> Any:
    model, batch, _task = build(name, config, shape)
    return trainer(model, batch)


def _small(small_gpt: Any, trainer: Any) -> Any:
    model, batch, loss = small_gpt()
    return trainer(model, batch, loss)


def switch_points(median_s: np.ndarray) -> np.ndarray:
    """Kernels that start a new 12 ms segment of the median step (the switch test's schedule)."""
    seg = (median_s // SEGMENT_S).astype(int)
    return np.nonzero(np.diff(seg) != 0)[0] + 1


def errors_s(start_s: np.ndarray, spacing_s: float | None) -> np.ndarray:
    """Prediction error of every switch point's start in every step (seconds), from the step anchor
    (``spacing_s`` None) or from anchors inside the step every ``spacing_s`` of the median step."""
    med = np.median(start_s, axis=0)
    points = switch_points(med)
    if spacing_s is None:
        return (start_s[:, points] - med[points]).ravel()
    # anchors: the first kernel starting in each interval of spacing_s (kernel 0 is the step's own anchor)
    slot = (med // spacing_s).astype(int)
    anchors = np.concatenate([[0], np.nonzero(np.diff(slot) != 0)[0] + 1])
    out = []
    for p in points:
        usable = anchors[med[anchors] <= med[p] - LOOKAHEAD_S - ANCHOR_DELAY_S]
        a = int(usable[-1]) if usable.size else 0
        out.append(start_s[:, p] - (start_s[:, a] + med[p] - med[a]) if usable.size else start_s[:, p] - med[p])
    return np.concatenate(out) if out else np.array([])


def analyse(path: Path) -> int:
    data = np.load(path)
    meta = json.loads(str(data["meta"]))
    info = meta.pop("_", {})
    print(
        f"# {info.get('gpu')} ({info.get('date')}); switch points every {SEGMENT_S * 1e3:g} ms of the median step, "
        f"issued {LOOKAHEAD_S * 1e3:g} ms ahead; p95 |error| of the segment's predicted start, ms"
    )
    head = " ".join(f"{'every ' + format(s * 1e3, 'g') + ' ms':>11s}" for s in SPACINGS_S)
    print(f"{'model':16s} {'steps':>5s} {'period ms':>9s} {'p10-p90 ms':>13s} {'step anchor':>11s} {head}")
    for name in meta:
        start_s = data[name].astype(float) * 1e-6
        dur = data[name + "/duration"] * 1e-6
        period = start_s[:, -1] + dur[-1]
        cells = [np.percentile(np.abs(errors_s(start_s, s)), 95) * 1e3 for s in (None, *SPACINGS_S)]
        print(
            f"{name:16s} {start_s.shape[0]:5d} {1e3 * np.median(period):9.1f} "
            f"{1e3 * np.percentile(period, 10):6.1f}-{1e3 * np.percentile(period, 90):6.1f} "
            + " ".join(f"{c:11.2f}" for c in cells)
        )
    print(
        "# step anchor: predicted from the step's start by the median offset; every D ms: from the latest anchor "
        "(a kernel starting in each D ms of the median step) known one lookahead before the segment"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="?", type=Path, default=ROOT / "data" / "corpus-h200" / "step-jitter.npz")
    parser.add_argument("--measure", action="store_true", help="measure on this machine's GPU (dry run)")
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "corpus-h200" / "step-jitter.npz")
    parser.add_argument("--steps", type=int, default=24, help="profiled steps per model (default 24)")
    parser.add_argument("--only", default="", help="models whose name contains this")
    args = parser.parse_args(argv)
    if args.measure:
        measure(args.out, args.steps, args.only)
        return 0
    return analyse(args.data)


if __name__ == "__main__":
    raise SystemExit(main())
