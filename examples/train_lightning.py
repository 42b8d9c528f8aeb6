"""Train a small causal transformer with Lightning, rlclock's callback attached (dry run by default).

The model (token and position embeddings, pre-norm ``nn.TransformerEncoderLayer`` blocks with a causal mask, a
tied output head) learns random token sequences; the training is Lightning's own, with gradient accumulation.
rlclock adds one object, ``RlclockLightningCallback(...)`` in ``callbacks=[...]``: when training starts it opens
the deployment, marks each optimizer step, and closes it when training ends or fails (the report printed, and in
``--report FILE``). After ``warmup_steps`` (3) steps it profiles 5 steps and times 8, builds the schedule and
applies it from then on.

    pip install 'rlclock[lightning]'
    python examples/train_lightning.py                                            # dry run: planned and timed, none set
    sudo python examples/train_lightning.py --control-clocks                      # set the clocks (root; restored)
    rlclock apply --checkpoint corpus-h100 -- python examples/train_lightning.py  # the command's options apply
    python examples/train_lightning.py --devices 2                                # DDP: every rank, its own GPU
    python examples/train_lightning.py --schedule S.json --timeline T.json        # a saved plan: no profiling

The schedule comes from ``--checkpoint`` (default: the shipped ``corpus-*`` policy for the GPU found, e.g.
``corpus-h100`` on an H100; another GPU needs its own checkpoint), or from ``--schedule`` (with ``--timeline``,
profiling is skipped); under ``rlclock apply`` the command's options override the script's. On a machine without
a CUDA GPU a tiny model trains on the CPU for a few steps and the deployment says it is inactive (no CUDA: the
step cannot be profiled), unless a schedule and a timeline are given: then the controller runs a dry
run, its steps anchored on the host clock. It uses ``lightning.pytorch``, or ``pytorch_lightning``
where only that is installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlclock.integrations.lightning import RlclockLightningCallback

try:
    import lightning.pytorch as pl
except ModuleNotFoundError:
    import pytorch_lightning as pl  # type: ignore[no-redef]


class TinyLM(pl.LightningModule):
    """A causal transformer language model of ``layers`` blocks of width ``width``."""

    def __init__(self, vocab: int, width: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(
                width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
            )
            for _ in range(layers)
        )
        self.ln = nn.LayerNorm(width)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x, src_mask=self.mask, is_causal=True)
        return self.ln(x) @ self.tok.weight.T

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits = self(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-4, weight_decay=0.1)


def main(argv: list[str] | None = None) -> RlclockLightningCallback:
    p = argparse.ArgumentParser(description="Train a small transformer with Lightning and rlclock's callback.")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: 100 on a GPU, 6 on a CPU)")
    p.add_argument("--accumulate", type=int, default=2, help="accumulate_grad_batches (batches an optimizer step)")
    p.add_argument("--devices", type=int, default=1, help="GPUs (DDP above 1)")
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
    p.add_argument("--report", default=None, help="write the controller's report (JSON) here (.rankN under DDP)")
    args = p.parse_args(argv)

    gpu = torch.cuda.is_available()
    if gpu:
        width, layers, heads, seq, batch, vocab, steps = 1024, 8, 16, 1024, 8, 8192, 100
    else:
        print(
            "train_lightning: no CUDA GPU: a tiny model trains on the CPU for a few steps; no clock can be controlled.",
            flush=True,
        )
        width, layers, heads, seq, batch, vocab, steps = 32, 2, 2, 32, 2, 128, 6
    steps = args.steps or steps
    checkpoint = args.checkpoint  # none: the shipped policy for the GPU found plans
    torch.manual_seed(0)
    tokens = torch.randint(
        0, vocab, (steps * args.accumulate * batch, seq + 1), generator=torch.Generator().manual_seed(0)
    )
    loader = torch.utils.data.DataLoader(tokens, batch_size=batch, shuffle=True)
    model = TinyLM(vocab, width, heads, layers, seq)
    clock = RlclockLightningCallback(
        args.schedule,
        timeline=args.timeline,
        checkpoint=checkpoint,
        control_clocks=args.control_clocks,
        report=args.report,
        latency_s=args.latency,
    )
    trainer = pl.Trainer(
        max_steps=steps,
        accumulate_grad_batches=args.accumulate,
        callbacks=[clock],
        accelerator="gpu" if gpu else "cpu",
        devices=args.devices if gpu else 1,
        precision="bf16-mixed" if gpu else "32-true",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=gpu,
        log_every_n_steps=max(1, steps // 5),
    )
    trainer.fit(model, loader)
    if trainer.global_rank == 0:
        n_params = sum(q.numel() for q in model.parameters())
        print(
            f"train_lightning: {trainer.global_step} optimizer steps of {args.accumulate} batches, a "
            f"{n_params:,}-parameter model on {'the GPU' if gpu else 'the CPU'}; rlclock marked "
            f"{clock.steps}"
        )
        if clock.report is not None:
            print(f"train_lightning: the controller ran {clock.report.steps} steps ({clock.report.mode})")
        elif clock.clocked is not None and not clock.clocked.reason:  # (an inactive deployment said why)
            print("train_lightning: no schedule was applied: the run ended before it was built")
    return clock


if __name__ == "__main__":
    main()
