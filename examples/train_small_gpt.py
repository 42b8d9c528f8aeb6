"""Train a small GPT for a few hundred steps with rlclock's clock controller attached (dry run by default).

The model (byte-level GPT: token + position embedding, pre-norm blocks of causal attention and a GELU MLP,
tied output head) learns to continue text — the source files of this repository, so nothing is downloaded.
The training loop is ordinary PyTorch; rlclock adds two lines: ``with rlclock.deploy.clocked(...) as clk``
around the loop and ``with clk.step():`` around each step. After a few warm-up steps rlclock profiles five
steps, builds a schedule, and applies it from then on; at the end the script prints the GPU energy it
measured (NVML's energy counter), the schedule and the controller's report.

The schedule comes from, in this order: ``--checkpoint DIR`` (a trained policy), ``--schedule FILE``, or a
simple rule for demonstration — GEMM-heavy parts of the step at the driver's clocks, memory-bound parts with
the core clock lowered to about 70 % of its top, in windows of at least two switching latencies
(:mod:`rlclock.deploy.rules`) — which is not a tuned schedule.

    python examples/train_small_gpt.py                          # dry run: switches planned and timed, none set
    sudo python examples/train_small_gpt.py --control on        # set the clocks (root; restored afterwards)
    rlclock apply --checkpoint checkpoints/NAME -- python examples/train_small_gpt.py

Without a CUDA GPU it trains a smaller model on the CPU for a few steps and says that no clock is controlled.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import rlclock.deploy  # noqa: E402
from rlclock.schedule import ClockConfig, ClockSchedule  # noqa: E402


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class SmallGpt(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.tok.weight.T


def corpus(device: str) -> torch.Tensor:
    """The bytes of this repository's Python sources and docs: a small, local text corpus."""
    files = sorted(ROOT.glob("rlclock/**/*.py")) + sorted(ROOT.glob("docs/*.md")) + [Path(__file__)]
    data = b"\n".join(f.read_bytes() for f in files if f.is_file())
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device=device, dtype=torch.long)


def rule_schedule(trace, auto_time_s, latency_s) -> ClockSchedule:
    """Demonstration rule (rlclock.deploy.rules): GEMM-heavy windows of the step at the driver's clocks,
    memory-bound ones with the core clock lowered to about 70 % of its top; windows of two latencies or more."""
    from rlclock.deploy.rules import class_windows
    from rlclock.gpu.nvml import NvmlDevice

    table = NvmlDevice(0).supported_clocks()
    cores = sorted(table[max(table)])
    low = ClockConfig(min(cores, key=lambda c: abs(c - 0.7 * cores[-1])), None)
    return class_windows(trace, auto_time_s, latency_s, ClockConfig(), low)


def describe_schedule(schedule: ClockSchedule, plan) -> str:
    counts = {str(c): int((schedule.index == i).sum()) for i, c in enumerate(schedule.configs)}
    lines = [
        f"schedule {schedule.name!r}: {len(schedule)} kernels per step, {schedule.n_changes} changes of "
        f"request per step; kernels per configuration {counts}",
        f"switch plan: {plan.describe()}",
    ]
    for e in plan.events:
        seg = plan.segments[e.segment]
        lines.append(
            f"  switch to {e.config!s:>10s} at {e.issue_s * 1e3:+8.3f} ms (lands {e.land_s * 1e3:+8.3f} ms) "
            f"for kernels {seg.first_kernel}-{seg.stop_kernel - 1} "
            f"({e.start_s * 1e3:.3f}-{e.end_s * 1e3:.3f} ms)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Train a small GPT with rlclock's clock controller attached.")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument(
        "--control",
        choices=["dry-run", "on"],
        default="dry-run",
        help="dry-run: plan and time the switches, set nothing; on: set the clocks (root)",
    )
    p.add_argument("--checkpoint", default=None, help="policy checkpoint that builds the schedule")
    p.add_argument("--schedule", default=None, help="schedule file to apply instead of the demonstration rule")
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--report", default=None, help="write the controller's report (JSON) here")
    args = p.parse_args(argv)

    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    if not gpu:
        print(
            "train_small_gpt: no CUDA GPU on this machine: training a smaller model on the CPU for a few steps; "
            "no clock can be controlled and no GPU energy measured.",
            flush=True,
        )
        args.width, args.layers, args.heads, args.seq, args.batch = 64, 2, 4, 64, 4
        args.steps = min(args.steps, 10)
    torch.manual_seed(0)
    data = corpus(device)
    model = SmallGpt(256, args.width, args.heads, args.layers, args.seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {n_params / 1e6:.1f} M parameters, {args.layers} layers of width {args.width}, sequence "
        f"{args.seq}, batch {args.batch}, {'bf16 autocast on ' + torch.cuda.get_device_name() if gpu else 'CPU'}"
    )

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        i = torch.randint(0, data.numel() - args.seq - 1, (args.batch,), device=device)
        off = torch.arange(args.seq + 1, device=device)
        chunk = data[i[:, None] + off]
        return chunk[:, :-1], chunk[:, 1:]

    def train_step() -> torch.Tensor:
        x, y = batch()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=gpu):
            loss = F.cross_entropy(model(x).float().view(-1, 256), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    source = args.checkpoint or args.schedule
    schedule = args.schedule if args.schedule else (None if args.checkpoint else rule_schedule)
    energy0 = None
    if gpu:
        from rlclock.deploy.distributed import nvml_index
        from rlclock.gpu import nvml

        if nvml.available():
            dev = nvml.NvmlDevice(nvml_index(torch.cuda.current_device(), torch.cuda.current_device()))
            energy0 = (dev, dev.total_energy_j(), time.monotonic())
    t0 = time.monotonic()
    with rlclock.deploy.clocked(
        schedule, checkpoint=args.checkpoint, control=args.control, report=args.report, verbose=True
    ) as clk:
        for step in range(args.steps):
            with clk.step():
                loss = train_step()
            if step % 50 == 0 or step == args.steps - 1 or (not gpu and step % 5 == 0):
                print(f"step {step:4d}  loss {loss.item():.3f}  ({clk.state})", flush=True)
    if gpu:
        torch.cuda.synchronize()
    wall = time.monotonic() - t0
    print(
        f"\ntrained {args.steps} steps in {wall:.1f} s; final loss {loss.item():.3f} "
        f"(ln 256 = {math.log(256):.2f} at the start)"
    )
    if energy0 is not None:
        dev, e0, te = energy0
        e = dev.total_energy_j() - e0
        print(
            f"GPU energy (NVML counter, whole run incl. warm-up and profiling): {e:.1f} J over "
            f"{time.monotonic() - te:.1f} s, {e / args.steps:.2f} J per step, {e / (time.monotonic() - te):.0f} W"
        )
    if clk.report is not None:
        print(describe_schedule(clk.schedule, clk.controller.plan))
        if clk.report.energy_j is not None:
            print(
                f"GPU energy over the {clk.report.steps} controlled steps: {clk.report.energy_j:.1f} J "
                f"({clk.report.energy_j / max(clk.report.steps, 1):.2f} J per step)"
            )
        mode = clk.report.mode
        print(
            f"controller mode: {mode}"
            + (" (nothing was set: the energy is that of the driver's own clocks)" if mode != "live" else "")
        )
    else:
        print(
            f"no schedule was applied ({clk.reason or 'the run ended before the controller started'})"
            + (f"; source {source}" if source else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
