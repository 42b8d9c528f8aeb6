"""``rlclock profile``: capture a transformer layer's training step on the GPU and write its kernel trace."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

from rlclock.commands.args import DefaultsHelp, number
from rlclock.errors import SpecError

_LAYER_FIELDS = ("hidden", "heads", "kv_heads", "ffn", "seq", "batch", "style", "dtype", "causal")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="capture a layer's forward+backward as a CUDA graph and write its KernelTrace",
        description="Build one decoder layer in PyTorch (GPT or Llama style), run forward and backward, capture "
        "the step as a CUDA graph, profile graph replays for each kernel's in-sequence duration, map "
        "the kernels to the analytic FLOPs/bytes and write the trace (JSON). Needs an NVIDIA GPU.",
        formatter_class=DefaultsHelp,
    )
    p.add_argument("--env", default=None, help="take the layer shape from this env spec's transformer workload")
    p.add_argument("--style", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads (GQA); default: --heads")
    p.add_argument("--ffn", type=int, default=None, help="feed-forward width; default: the style's")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument(
        "--replays",
        type=number(1, 10_000, whole=True),
        default=20,
        help="graph replays profiled for in-sequence durations",
    )
    p.add_argument(
        "--isolate",
        action="store_true",
        help="also replay every kernel alone and compare with its in-sequence duration",
    )
    p.add_argument("--name", default=None, help="trace name")
    p.add_argument("--out", type=Path, default=None, help="trace file (default: runs/profile/<name>.trace.json)")
    p.set_defaults(func=run)


def layer_config(args: argparse.Namespace):
    """The TransformerConfig of one layer from the arguments (or the env spec's workload)."""
    from rlclock.workload.transformer import TransformerConfig

    if args.env:
        from rlclock.config import load_env_spec

        w = dict(load_env_spec(args.env).workload)
        if w.pop("generator", None) != "transformer":
            raise SpecError(
                f"env spec {args.env!r} has no transformer workload to profile.",
                "give the layer shape with --hidden/--heads/... instead.",
            )
        known = {f.name for f in fields(TransformerConfig)}
        kw = {k: v for k, v in w.items() if k in known}
    else:
        kw = {k: getattr(args, k) for k in _LAYER_FIELDS if hasattr(args, k) and getattr(args, k) is not None}
    kw.update(layers=1, head=False, optimizer=False)
    return TransformerConfig(**kw)


def run(args: argparse.Namespace) -> int:
    from rlclock.commands.common import print_table
    from rlclock.gpu.profile import profile_layer
    from rlclock.validation import check_output_file
    from rlclock.workload.kernel_names import short_name

    if args.out is not None:
        check_output_file(args.out, "--out")  # before the capture
    cfg = layer_config(args)
    res = profile_layer(cfg, replays=args.replays, name=args.name)
    trace = res.trace
    rows = [
        [str(i), k.phase[:3], k.category, k.op, f"{k.measured[0].time_s * 1e6:.1f}", short_name(k.name, 50)]
        for i, k in enumerate(trace)
    ]
    print_table(["#", "pass", "category", "op", "in-seq us", "kernel"], rows)
    print(
        f"{len(trace)} kernels ({res.graph_counts}); in-sequence sum {res.in_sequence_kernel_s * 1e3:.3f} ms, "
        f"step {res.step_event_s * 1e3:.3f} ms (CUDA events); mapped {res.mapping.mapped}, estimated "
        f"{res.mapping.estimated}, time only {res.mapping.time_only}"
    )
    if args.isolate:
        from rlclock.gpu.isolation import check_isolation, summarize

        checks = check_isolation(res.captured, trace)
        print_table(
            ["#", "category", "in-seq us", "isolated us", "ratio", "memsets", "note"],
            [
                [
                    str(c.index),
                    c.category,
                    f"{c.in_sequence_s * 1e6:.1f}",
                    f"{c.isolated_s * 1e6:.1f}",
                    f"{c.ratio:.2f}",
                    str(c.memsets),
                    c.note,
                ]
                for c in checks
            ],
        )
        s = summarize(checks)
        print(
            f"isolated / in-sequence: sum {s['ratio_of_sums']:.3f}, median {s['median_ratio']:.3f}, "
            f"{s['outliers']} outlier(s)"
        )
    out = args.out or Path("runs/profile") / f"{trace.name}.trace.json"
    trace.save(out)
    print(f"trace written to {out}")
    return 0
