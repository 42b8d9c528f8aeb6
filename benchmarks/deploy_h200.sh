#!/usr/bin/env bash
# The deploy figures on a GPU in one run, in dry-run mode (no clock or other GPU setting is changed):
# the controller's overhead and switch timing (benchmarks/controller_overhead.py), the example
# (examples/train_small_gpt.py, 150 steps), and the GPU-marked deploy tests. Prints a summary last.
#
#     benchmarks/deploy_h200.sh OUTDIR
set -u
out=${1:?usage: benchmarks/deploy_h200.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
query="name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu"
nvidia-smi --query-gpu=$query --format=csv > "$out/gpu_state.csv" 2>&1
python3 benchmarks/controller_overhead.py --out "$out" 2>&1 | tee "$out/overhead.log"
python3 examples/train_small_gpt.py --steps 150 --report "$out/example_report.json" 2>&1 | tee "$out/example.log"
python3 -m pytest -m gpu tests/deploy -q -p no:cacheprovider 2>&1 | tee "$out/pytest_gpu.log"
nvidia-smi --query-gpu=$query --format=csv,noheader >> "$out/gpu_state.csv" 2>&1
echo
echo "=== summary ==="
cat "$out/gpu_state.csv"
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from controller_overhead import table
out = Path(sys.argv[1])
try:
    data = json.loads((out / "controller_overhead.json").read_text())
    print(f"controller overhead ({data['machine']}, {data['wall_s']} s):")
    print(table(data["results"]))
except (OSError, KeyError, ValueError) as exc:
    print(f"no overhead figures: {exc}")
for name in ("example.log", "pytest_gpu.log"):
    try:
        lines = (out / name).read_text().splitlines()
    except OSError:
        continue
    keep = [l for l in lines if any(k in l for k in ("GPU energy", "trained", "controller mode", "switch plan",
                                                      "passed", "failed", "error"))]
    print(f"{name}:", *keep[-8:], sep="\n  ")
PY
