#!/usr/bin/env bash
# `rlclock apply` on unmodified training scripts on this machine's GPU, in observe mode (a dry run: no clock or
# other GPU setting is changed): a plain PyTorch loop, a Hugging Face Trainer run, the plain loop through
# torch.compile (default mode and reduce-overhead) and under torchrun. Each run's log, report and saved plan go to
# OUT/<run>/; the GPU's settings are read before and after (OUT/gpu_state.csv).
#
#     benchmarks/apply_gpu.sh OUT [STEPS]
#     RUNS="compiled compiled-cudagraphs" benchmarks/apply_gpu.sh OUT      # only those runs
set -u
runs=${RUNS:-plain hf-trainer compiled compiled-cudagraphs torchrun}
out=${1:?usage: benchmarks/apply_gpu.sh OUT [STEPS]}
steps=${2:-60}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
query="name,driver_version,power.limit,persistence_mode,compute_mode,clocks.applications.graphics,clocks.applications.memory"
nvidia-smi --query-gpu=$query --format=csv > "$out/gpu_state.csv" 2>&1
run() {
    name=$1; shift
    case " $runs " in *" $name "*) ;; *) return ;; esac
    mkdir -p "$out/$name"
    start=$(date +%s)
    $py -m rlclock apply --save "$out/$name" --report "$out/$name/report.json" -- "$@" > "$out/$name/log.txt" 2>&1
    echo "exit $? after $(( $(date +%s) - start )) s" >> "$out/$name/log.txt"
    echo "=== $name"; grep -a "rlclock\|^exit\|steps in" "$out/$name/log.txt" | grep -v "^  " | tail -12
}
run plain $py examples/train_plain.py --steps "$steps"
run hf-trainer $py examples/train_hf_trainer.py --steps "$steps"
run compiled $py examples/train_plain.py --steps "$steps" --compile
run compiled-cudagraphs $py examples/train_plain.py --steps "$steps" --compile --mode reduce-overhead
run torchrun torchrun --nproc-per-node 1 examples/train_plain.py --steps "$steps"
nvidia-smi --query-gpu=$query --format=csv,noheader >> "$out/gpu_state.csv" 2>&1
for d in "$out"/*/; do  # keep what is worth committing: logs, reports, plans (gzipped traces)
    [ -f "$d/step.trace.json" ] && gzip -f "$d/step.trace.json"
done
cat "$out/gpu_state.csv"
