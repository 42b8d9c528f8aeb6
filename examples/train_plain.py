"""A plain PyTorch training loop that knows nothing of rlclock — run it under ``rlclock apply`` unchanged.

A byte-level GPT (pre-norm blocks of causal attention and a GELU MLP) trains on random bytes with AdamW, under
bf16 autocast on a GPU. ``--compile`` trains it through ``torch.compile`` (``--mode reduce-overhead`` replays the
step as CUDA graphs), ``--accumulate K`` takes K micro-batches per optimizer step. Nothing here imports rlclock:

    python examples/train_plain.py --steps 60                         # as it is
    rlclock apply -- python examples/train_plain.py --steps 60        # the same, with the clock deployment (dry run)
    rlclock apply -- python examples/train_plain.py --compile --mode reduce-overhead

Under ``rlclock apply`` every optimizer step marks a training step; after warm-up, profiling and timing steps the
shipped policy for the GPU plans the clocks and the controller applies them (in a dry run: times and reports every
switch, sets nothing). On a machine without a GPU it trains a small model on the CPU.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, width: int, heads: int, layers: int, context: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(256, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.tok.weight.T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default 60)")
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    parser.add_argument("--compile", action="store_true", help="train through torch.compile")
    parser.add_argument("--mode", default=None, help="torch.compile mode (e.g. reduce-overhead)")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    width, layers, batch, context = (768, 8, 16, 512) if gpu else (64, 2, 4, 32)
    torch.manual_seed(0)
    model = Gpt(width, 12 if gpu else 4, layers, context).to(device)
    forward = torch.compile(model, mode=args.mode) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=gpu)
    t0 = time.perf_counter()
    for step in range(args.steps):
        for _ in range(args.accumulate):
            data = torch.randint(0, 256, (batch, context + 1), device=device)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=gpu):
                logits = forward(data[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, 256), data[:, 1:].reshape(-1)) / args.accumulate
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step}: loss {loss.item() * args.accumulate:.3f}", flush=True)
    if gpu:
        torch.cuda.synchronize()
    print(f"{args.steps} steps in {time.perf_counter() - t0:.1f} s on {device}")


if __name__ == "__main__":
    main()
