"""The compiled corpus: traces of compiled training steps, derived from what a GPU run captured.

``benchmarks/corpus_gpu.py --compile default,reduce-overhead`` trains each model through ``torch.compile`` on the
GPU (dry run) and keeps, per model and mode, the deployment's ``--save`` folder: the profiler's own export
(``step.profile.json.gz``), the source TorchInductor generated (``step.inductor.json.gz``), the step's timeline,
the bare step's time and energy. This script derives each step's trace from the export and the generated code with
the current rules (:func:`rlclock.deploy.capture.profile_from_chrome`) and writes the corpus folder the
benchmarks read (``step.trace.json.gz``, ``step.timeline.json.gz``, the summaries and the generated code kept for
re-deriving the costs of its kernels)::

    python benchmarks/corpus_gpu.py --out RAW --only bert,vit --compile default,reduce-overhead   # on the GPU
    python benchmarks/compiled_corpus.py RAW data/corpus-h100-compiled                            # anywhere
    python benchmarks/real_steps.py --part costs --corpus data/corpus-h100-compiled --gpu h100-sxm
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEEP = ("summary.json", "report.json", "switch_report.json", "step.inductor.json.gz")
DROP_META = ("generator", "gpu", "steps_profiled", "steps_used", "step_period_s", "date", "source")


def derive(raw: Path, out: Path) -> str:
    """One model's trace from its raw capture in ``raw``, written with the rest of its corpus entry to ``out``."""
    from rlclock.deploy.capture import profile_from_chrome

    with gzip.open(raw / "step.profile.json.gz", "rt") as f:
        data = json.load(f)
    with gzip.open(raw / "step.inductor.json.gz", "rt") as f:
        code = json.load(f)
    saved = json.loads((raw / "step.trace.json").read_text()) if (raw / "step.trace.json").exists() else None
    meta = {k: v for k, v in (saved or {}).get("meta", {}).items() if k not in DROP_META}
    gpu = (saved or {}).get("meta", {}).get("gpu") or json.loads((raw / "summary.json").read_text())["gpu"]
    prof = profile_from_chrome(data, gpu, name=(saved or {}).get("name", "training-step"), meta=meta, code=code)
    if saved is not None and [k["name"] for k in saved["kernels"]] != [k.name for k in prof.trace]:
        raise SystemExit(f"{raw}: the derived kernel sequence differs from the one the run saved")
    prof.trace.meta.update({k: v for k, v in (saved or {}).get("meta", {}).items() if k not in prof.trace.meta})
    out.mkdir(parents=True, exist_ok=True)
    prof.trace.save(out / "step.trace.json.gz")
    with open(raw / "step.timeline.json", "rb") as src, gzip.open(out / "step.timeline.json.gz", "wb") as dst:
        dst.write(src.read())  # the timeline the deployment fitted to the running steps, as the run saved it
    for name in KEEP:
        if (raw / name).exists():
            shutil.copy(raw / name, out / name)
    return "; ".join(prof.notes) or "every kernel costed by a rule"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path, nargs="+", help="folders written by corpus_gpu.py --compile (OUT)")
    parser.add_argument("out", type=Path, help="the corpus folder to write")
    args = parser.parse_args(argv)
    for folder in args.raw:
        for model in sorted(p for p in folder.iterdir() if (p / "step.profile.json.gz").exists()):
            print(f"{model.name}: {derive(model, args.out / model.name)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
