"""Train a small Llama with the Hugging Face ``Trainer``, rlclock's callback attached (dry run by default).

The model is built from a ``LlamaConfig`` (nothing is downloaded) and learns random token sequences; the
training is the Trainer's own, with gradient accumulation. rlclock adds one object,
``RlclockTrainerCallback(...)`` in ``callbacks=[...]``: when training begins it opens the deployment, marks each
optimizer step, and closes it when training ends (the report printed, and in ``--report FILE``). After
``warmup_steps`` (3) steps it profiles 5 steps and times 8, builds the schedule and applies it from then on.

    pip install 'rlclock[hf]'
    python examples/train_hf.py                                            # dry run: planned and timed, none set
    sudo python examples/train_hf.py --control-clocks                      # set the clocks (root; restored)
    rlclock apply --checkpoint corpus-h100 -- python examples/train_hf.py  # the command's options apply
    torchrun --nproc-per-node 2 examples/train_hf.py                       # every rank, its own GPU
    python examples/train_hf.py --schedule S.json --timeline T.json        # a saved plan: no profiling

The schedule comes from ``--checkpoint`` (default: the shipped ``corpus-*`` policy for the GPU found, e.g.
``corpus-h100`` on an H100; another GPU needs its own checkpoint), or from ``--schedule`` (with ``--timeline``,
profiling is skipped); under ``rlclock apply`` the command's options override the script's. On a machine without
a CUDA GPU a tiny model trains on the CPU for a few steps and the deployment says it is inactive (no CUDA: the
step cannot be profiled), unless a schedule and a timeline are given: then the controller runs a dry
run, its steps anchored on the host clock.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlclock.integrations.hf import RlclockTrainerCallback


class RandomTokens(torch.utils.data.Dataset):
    """``n`` random token sequences of length ``seq`` (the labels are the inputs: next-token prediction)."""

    def __init__(self, n: int, seq: int, vocab: int, seed: int = 0) -> None:
        self.ids = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main(argv: list[str] | None = None) -> RlclockTrainerCallback:
    p = argparse.ArgumentParser(description="Train a small Llama with the HF Trainer and rlclock's callback.")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: 100 on a GPU, 6 on a CPU)")
    p.add_argument("--accumulate", type=int, default=2, help="gradient accumulation steps (micro-batches a step)")
    p.add_argument(
        "--checkpoint",
        default=None,
        help="policy checkpoint (a folder, or a shipped name; default: the shipped policy for this GPU)",
    )
    p.add_argument("--schedule", default=None, help="schedule file to apply (ClockSchedule.save)")
    p.add_argument("--timeline", default=None, help="step timeline file (StepTimeline.save): no profiling")
    p.add_argument(
        "--latency",
        type=float,
        default=None,
        help="switching latency, seconds (default: the GPU's preset's; needed for a plan-only run without a GPU)",
    )
    p.add_argument("--control-clocks", action="store_true", help="set the clocks (root); default: a dry run")
    p.add_argument("--report", default=None, help="write the controller's report (JSON) here")
    p.add_argument("--output-dir", default=None, help="the Trainer's output folder (default: a temporary one)")
    args = p.parse_args(argv)

    gpu = torch.cuda.is_available()
    if gpu:
        width, layers, heads, seq, batch, vocab, steps = 1024, 8, 16, 1024, 8, 8192, 100
    else:
        print(
            "train_hf: no CUDA GPU: a tiny model trains on the CPU for a few steps; no clock can be controlled.",
            flush=True,
        )
        width, layers, heads, seq, batch, vocab, steps = 32, 2, 2, 32, 2, 128, 6
    steps = args.steps or steps
    checkpoint = args.checkpoint  # none: the shipped policy for the GPU found plans
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=width,
        intermediate_size=width * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=seq,
    )
    model = transformers.LlamaForCausalLM(config)
    data = RandomTokens(steps * args.accumulate * batch, seq, vocab)
    clock = RlclockTrainerCallback(
        args.schedule,
        timeline=args.timeline,
        checkpoint=checkpoint,
        control_clocks=args.control_clocks,
        report=args.report,
        latency_s=args.latency,
    )
    with tempfile.TemporaryDirectory(prefix="train_hf-") as tmp:
        targs = transformers.TrainingArguments(
            output_dir=args.output_dir or tmp,
            max_steps=steps,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=args.accumulate,
            learning_rate=3e-4,
            bf16=gpu,
            use_cpu=not gpu,
            logging_steps=max(1, steps // 5),
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
        )
        trainer = transformers.Trainer(model=model, args=targs, train_dataset=data, callbacks=[clock])
        with clock:  # closes the deployment (clocks restored) also if train() raises
            trainer.train()
    n_params = sum(q.numel() for q in model.parameters())
    print(
        f"train_hf: {trainer.state.global_step} optimizer steps of {args.accumulate} micro-batches, a "
        f"{n_params:,}-parameter Llama on {'the GPU' if gpu else 'the CPU'}; rlclock marked {clock.steps}"
    )
    if clock.report is not None:
        print(f"train_hf: the controller ran {clock.report.steps} steps ({clock.report.mode})")
    elif clock.clocked is not None and not clock.clocked.reason:  # (an inactive deployment said why)
        print("train_hf: no schedule was applied: the run ended before it was built")
    return clock


if __name__ == "__main__":
    main()
