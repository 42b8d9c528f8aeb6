#!/usr/bin/env bash
# The deploy figures on a GPU in one run, in dry-run mode (no clock or other GPU setting is changed):
# the controller's overhead and switch timing (benchmarks/controller_overhead.py), the example
# (examples/train_small_gpt.py, 150 steps), and the GPU-marked deploy tests. Prints a summary last.
#
#     benchmarks/deploy_h200.sh OUTDIR [--baseline SRC] [--no-example] [-- controller_overhead.py options]
#
# --baseline SRC also runs SRC/benchmarks/controller_overhead.py (SRC: an export of an earlier revision's
# rlclock/ and benchmarks/, e.g. `git archive REV rlclock benchmarks | tar -x -C SRC`) for a before/after on
# the same machine; --no-example skips the example.
set -u
out=${1:?usage: benchmarks/deploy_h200.sh OUTDIR [--baseline SRC] [--no-example] [-- overhead options]}
shift
baseline=""
example=1
while [ $# -gt 0 ]; do
    case "$1" in
        --baseline) baseline=${2:?--baseline needs a folder}; shift 2 ;;
        --no-example) example=0; shift ;;
        --) shift; break ;;
        *) echo "deploy_h200.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
export PYTHONUNBUFFERED=1
query="name,driver_version,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu"
nvidia-smi --query-gpu=$query --format=csv > "$out/gpu_state.csv" 2>&1
if [ -n "$baseline" ]; then
    mkdir -p "$out/baseline"
    python3 "$baseline/benchmarks/controller_overhead.py" --out "$out/baseline" --stress-latency 0 2>&1 \
        | tee "$out/baseline/overhead.log"
fi
python3 benchmarks/controller_overhead.py --out "$out" "$@" 2>&1 | tee "$out/overhead.log"
if [ "$example" = 1 ]; then
    python3 examples/train_small_gpt.py --steps 150 --report "$out/example_report.json" 2>&1 | tee "$out/example.log"
fi
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
for label, path in (("before (baseline)", out / "baseline" / "controller_overhead.json"),
                    ("controller overhead", out / "controller_overhead.json")):
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        continue
    print(f"{label} ({data['machine']}, {data['wall_s']} s):")
    print(table(data["results"]))
for name in ("example.log", "pytest_gpu.log"):
    try:
        lines = (out / name).read_text().splitlines()
    except OSError:
        continue
    keep = [l for l in lines if any(k in l for k in ("GPU energy", "trained", "controller mode", "switch plan",
                                                      "passed", "failed", "error"))]
    print(f"{name}:", *keep[-8:], sep="\n  ")
PY
