"""The paper's workload: one training step of llm.c's GPT-2/3 model (``train_gpt2.cu``, bf16).

The kernel sequence, FLOPs and DRAM bytes follow llm.c's CUDA implementation as the paper ran it
(Spaan et al., arXiv 2601.08539, Fig. 3 / Table 1): separate GELU and bias-gradient kernels, attention
as permute → batched GEMM → autoregressive softmax → batched GEMM → unpermute, GELU recomputed in the
backward pass. The iteration is embedding → L × layer forward → LM head + loss → L × layer backward →
embedding backward (46 kernel types; 897 invocations for 24 layers).

Bytes are the minimum each kernel must move: every input read once, every output written once, at the
tensor's storage type (bf16 activations and weights, fp32 statistics). FLOPs count a multiply-add as 2;
for non-GEMM kernels they are the arithmetic per element of the implementation.
``mlp_bytes`` is the bytes of independent loads a thread keeps in flight in llm.c's implementation: 16 for
its 128-bit ``x128`` loads, 2 per scalar bf16 load in the (un)permute kernels.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from importlib import resources

from rlclock.errors import SpecError
from rlclock.workload.trace import Kernel, KernelTrace, Measurement, check_step_size

PAPER_GPU = "rtx3080ti"
"""Preset key of the GPU the paper's measurements were taken on."""

BF16 = 2
FP32 = 4


@dataclass(frozen=True)
class LlmcConfig:
    """Shape of an llm.c GPT training step.

    Attributes:
        batch: Sequences per step (B).
        seq: Tokens per sequence (T).
        hidden: Model width (C).
        heads: Attention heads (NH); head size is ``hidden // heads``.
        layers: Transformer layers (L).
        vocab_padded: Padded vocabulary (Vp).
    """

    batch: int = 40
    seq: int = 1024
    hidden: int = 2048
    heads: int = 16
    layers: int = 24
    vocab_padded: int = 50304

    def __post_init__(self) -> None:
        for name in ("batch", "seq", "hidden", "heads", "layers", "vocab_padded"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise SpecError(f"llm.c config: {name!r} must be a positive integer, found {v!r}.")
        if self.hidden % self.heads:
            raise SpecError(f"llm.c config: hidden ({self.hidden}) must be divisible by heads ({self.heads}).")


def _k(name: str, op: str, cat: str, phase: str, flops: float, rd: float, wr: float, **kw) -> Kernel:
    return Kernel(
        name=name,
        op=op,
        category=cat,
        phase=phase,
        flops=float(flops),
        dram_read_bytes=float(rd),
        dram_write_bytes=float(wr),
        **kw,
    )


def _gemm(
    name: str, op: str, phase: str, b: int, m: int, n: int, k: int, read_extra: float = 0.0, bias: bool = False
) -> Kernel:
    """A (batched) bf16 GEMM C[b,m,n] = A[b,m,k] · B[b,k,n] (+ bias)."""
    flops = 2.0 * b * m * n * k + (b * m * n if bias else 0)
    rd = BF16 * b * (m * k + k * n) + (BF16 * n if bias else 0) + read_extra
    wr = BF16 * b * m * n
    return _k(name, op, "gemm", phase, flops, rd, wr, gemm_bmnk=(b, m, n, k), mlp_bytes=16.0)


def layer_forward(cfg: LlmcConfig) -> list[Kernel]:
    """Kernels 2–13 of the paper: one layer's forward pass (its ln1 runs in the previous kernel)."""
    B, T, C, NH = cfg.batch, cfg.seq, cfg.hidden, cfg.heads
    M, HS, BNH = B * T, C // NH, B * NH
    tri = BNH * T * (T + 1) / 2  # elements of the causal (lower) triangle of all attention matrices
    f = "forward"
    return [
        _gemm("matmul_forward_cublaslt", "qkv.fwd", f, 1, M, 3 * C, C, bias=True),
        _k("permute_kernel", "attn.permute", "copy", f, 0, BF16 * M * 3 * C, BF16 * M * 3 * C, mlp_bytes=3 * BF16),
        _gemm("cublasGemmStridedBatched", "attn.qk", f, BNH, T, T, HS),
        _k("softmax_forward_kernel5", "attn.softmax", "softmax", f, 5 * tri, BF16 * tri, BF16 * tri, mlp_bytes=16.0),
        _gemm("cublasGemmStridedBatched", "attn.av", f, BNH, T, HS, T),
        _k("unpermute_kernel", "attn.unpermute", "copy", f, 0, BF16 * M * C, BF16 * M * C, mlp_bytes=BF16),
        _gemm("matmul_forward_cublaslt", "attproj.fwd", f, 1, M, C, C, bias=True),
        _k(
            "fused_residual_forward_kernel5",
            "residual1+ln2.fwd",
            "norm",
            f,
            10 * M * C,
            BF16 * (2 * M * C + 2 * C),
            BF16 * 2 * M * C + FP32 * 2 * M,
            mlp_bytes=32.0,
        ),
        _gemm("matmul_forward_cublaslt", "fc.fwd", f, 1, M, 4 * C, C, bias=True),
        _k(
            "gelu_forward_kernel2",
            "gelu.fwd",
            "elementwise",
            f,
            15 * M * 4 * C,
            BF16 * M * 4 * C,
            BF16 * M * 4 * C,
            mlp_bytes=16.0,
        ),
        _gemm("matmul_forward_cublaslt", "fcproj.fwd", f, 1, M, C, 4 * C, bias=True),
        _k(
            "fused_residual_forward_kernel5",
            "residual2+ln1.fwd",
            "norm",
            f,
            10 * M * C,
            BF16 * (2 * M * C + 2 * C),
            BF16 * 2 * M * C + FP32 * 2 * M,
            mlp_bytes=32.0,
        ),
    ]


def _bias_backward(op: str, M: int, OC: int) -> list[Kernel]:
    """llm.c's matmul_backward_bias_kernel (partial column sums) and reduce_add_sum_kernel."""
    parts = 4  # partial sums written per output channel by the first kernel (grid rows)
    return [
        _k(
            "matmul_backward_bias_kernel9",
            f"{op}.dbias",
            "reduction",
            "backward",
            M * OC,
            BF16 * M * OC,
            FP32 * parts * OC,
            mlp_bytes=16.0,
        ),
        _k(
            "reduce_add_sum_kernel",
            f"{op}.dbias_reduce",
            "reduction",
            "backward",
            parts * OC,
            FP32 * parts * OC,
            BF16 * OC,
            mlp_bytes=16.0,
        ),
    ]


def _layernorm_backward(op: str, M: int, C: int) -> Kernel:
    """layernorm_backward_kernel10: dinp += f(dout, inp, mean, rstd, weight); dweight, dbias."""
    return _k(
        "layernorm_backward_kernel10",
        op,
        "norm",
        "backward",
        20 * M * C,
        BF16 * 3 * M * C + FP32 * 2 * M + BF16 * C,
        BF16 * M * C + FP32 * 2 * C,
        access="reduce",
        mlp_bytes=16.0,
    )


def layer_backward(cfg: LlmcConfig) -> list[Kernel]:
    """Kernels 19–43 of the paper: one layer's backward pass, in llm.c's order."""
    B, T, C, NH = cfg.batch, cfg.seq, cfg.hidden, cfg.heads
    M, HS, BNH = B * T, C // NH, B * NH
    tri = BNH * T * (T + 1) / 2
    b = "backward"
    return [
        _k(
            "gelu_forward_kernel2",
            "gelu.recompute",
            "elementwise",
            b,
            15 * M * 4 * C,
            BF16 * M * 4 * C,
            BF16 * M * 4 * C,
            mlp_bytes=16.0,
        ),
        *_bias_backward("fcproj", M, C),
        _gemm("cublasLtMatmul", "fcproj.dinp", b, 1, M, 4 * C, C),
        _k(
            "gelu_backward_inplace_kernel",
            "gelu.bwd",
            "elementwise",
            b,
            20 * M * 4 * C,
            BF16 * 2 * M * 4 * C,
            BF16 * M * 4 * C,
            mlp_bytes=32.0,
        ),
        _gemm("cublasLtMatmul", "fcproj.dweight", b, 1, C, 4 * C, M),
        *_bias_backward("fc", M, 4 * C)[:1],
        _gemm("cublasLtMatmul", "fc.dinp", b, 1, M, C, 4 * C),
        _gemm("cublasLtMatmul", "fc.dweight", b, 1, 4 * C, C, M),
        _layernorm_backward("ln2.bwd", M, C),
        *_bias_backward("attproj", M, C),
        _gemm("cublasLtMatmul", "attproj.dinp", b, 1, M, C, C),
        _gemm("cublasLtMatmul", "attproj.dweight", b, 1, C, C, M),
        _k("unpermute_kernel_backward", "attn.unpermute.bwd", "copy", b, 0, BF16 * M * C, BF16 * M * C, mlp_bytes=BF16),
        _gemm("cublasGemmStridedBatched", "attn.datt", b, BNH, T, T, HS),
        _gemm("cublasGemmStridedBatched", "attn.dv", b, BNH, T, HS, T),
        _k(
            "softmax_autoregressive_backward_kernel",
            "attn.softmax.bwd",
            "softmax",
            b,
            4 * tri,
            BF16 * 2 * tri,
            BF16 * tri,
            access="reduce",
            mlp_bytes=16.0,
        ),
        _gemm("cublasGemmStridedBatched", "attn.dq", b, BNH, T, HS, T),
        _gemm("cublasGemmStridedBatched", "attn.dk", b, BNH, T, HS, T),
        _k(
            "permute_kernel_backward",
            "attn.permute.bwd",
            "copy",
            b,
            0,
            BF16 * 3 * M * C,
            BF16 * 3 * M * C,
            mlp_bytes=3 * BF16,
        ),
        *_bias_backward("qkv", M, 3 * C)[:1],
        _gemm("cublasLtMatmul", "qkv.dinp", b, 1, M, C, 3 * C),
        _gemm("cublasLtMatmul", "qkv.dweight", b, 1, 3 * C, C, M),
        _layernorm_backward("ln1.bwd", M, C),
    ]


def step_kernels(cfg: LlmcConfig) -> list[Kernel]:
    """All invocations of one training step, in execution order (layer index set per invocation)."""
    B, T, C, Vp = cfg.batch, cfg.seq, cfg.hidden, cfg.vocab_padded
    M = B * T
    f, b = "forward", "backward"
    pre = [
        _k(
            "encoder_forward_kernel3",
            "embed.fwd",
            "embedding",
            f,
            M * C,
            BF16 * (M * C + T * C) + FP32 * M,
            BF16 * M * C,
            access="gather",
            mlp_bytes=32.0,
        ),
        _k(
            "layernorm_forward_kernel3",
            "ln1.fwd",
            "norm",
            f,
            8 * M * C,
            BF16 * (M * C + 2 * C),
            BF16 * M * C + FP32 * 2 * M,
            mlp_bytes=16.0,
        ),
    ]
    head = [
        _gemm("matmul_forward_cublaslt", "lm_head.fwd", f, 1, M, Vp, C),
        _k(
            "fused_classifier_kernel5",
            "classifier",
            "softmax",
            f,
            5 * M * Vp,
            BF16 * M * Vp + FP32 * M,
            BF16 * M * Vp + FP32 * M,
            mlp_bytes=16.0,
        ),
        _gemm("cublasLtMatmul", "lm_head.dinp", b, 1, M, C, Vp),
        _gemm("cublasLtMatmul", "lm_head.dweight", b, 1, Vp, C, M),
        _layernorm_backward("lnf.bwd", M, C),
    ]
    post = [
        _k("wpe_backward_kernel", "embed.wpe.bwd", "reduction", b, M * C, BF16 * M * C, BF16 * T * C, mlp_bytes=16.0),
        _k(
            "wte_backward_kernel",
            "embed.wte.bwd",
            "embedding",
            b,
            M * C,
            BF16 * 2 * M * C,
            BF16 * M * C,
            access="gather",
            mlp_bytes=16.0,
        ),
    ]
    out = list(pre)
    fwd, bwd = layer_forward(cfg), layer_backward(cfg)
    for layer in range(cfg.layers):
        out += [_with_layer(k, layer) for k in fwd]
    out += head
    for layer in reversed(range(cfg.layers)):
        out += [_with_layer(k, layer) for k in bwd]
    out += post
    return out


def _with_layer(k: Kernel, layer: int) -> Kernel:
    return replace(k, layer=layer)


def kernel_types(cfg: LlmcConfig) -> list[Kernel]:
    """The 46 kernel types of the paper's Table, in its numbering (0–45), one invocation each."""
    return step_kernels(replace(cfg, layers=1))


@dataclass(frozen=True)
class PaperKernel:
    """One row of the paper's per-kernel figure (RTX 3080 Ti, one invocation)."""

    idx: int
    kernel: str
    call: str
    t_auto_s: float
    e_auto_j: float
    t_worst_s: float
    e_worst_j: float


def paper_table() -> list[PaperKernel]:
    """The paper's per-kernel auto / worst-clock readings (``data/spaan2026_gpt3xl_rtx3080ti.csv``)."""
    text = resources.files("rlclock.workload").joinpath("data/spaan2026_gpt3xl_rtx3080ti.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return [
        PaperKernel(
            int(r["idx"]),
            r["kernel"],
            r["call"],
            float(r["t_auto_ms"]) / 1e3,
            float(r["e_auto_j"]),
            float(r["t_worst_ms"]) / 1e3,
            float(r["e_worst_j"]),
        )
        for r in rows
    ]


def gpt3xl_step(cfg: LlmcConfig | None = None, paper_measurements: bool = False) -> KernelTrace:
    """The paper's GPT-3 XL training step as a trace.

    Args:
        cfg: Shape; default the paper's (batch 40, sequence 1024, 24 layers of width 2048).
        paper_measurements: Attach the paper's auto-clock readings (RTX 3080 Ti) to each kernel as a
            measured reference point, so a calibrated model anchors on them. Only valid for the paper's
            shape.

    Returns:
        The 897-invocation trace (for 24 layers).
    """
    cfg = cfg or LlmcConfig()
    check_step_size(
        "llm.c config",
        {
            "hidden": cfg.hidden,
            "heads": cfg.heads,
            "seq": cfg.seq,
            "batch": cfg.batch,
            "vocab_padded": cfg.vocab_padded,
            "tokens": cfg.batch * cfg.seq,
        },
        cfg.layers,
        lambda layers: len(step_kernels(replace(cfg, layers=layers))),
    )
    kernels = step_kernels(cfg)
    if paper_measurements:
        if cfg != LlmcConfig():
            raise SpecError(
                "the paper's measurements exist only for its shape (batch 40, seq 1024, 24 × 2048).",
                "drop paper_measurements or use the default LlmcConfig().",
            )
        table = paper_table()
        idx = _paper_index(cfg)
        kernels = [
            replace(
                k,
                measured=(
                    Measurement(gpu=PAPER_GPU, time_s=table[j].t_auto_s, energy_j=table[j].e_auto_j, source="paper"),
                ),
            )
            for k, j in zip(kernels, idx)
        ]
    meta = {
        "generator": "rlclock.workload.llmc.gpt3xl_step",
        "config": cfg.__dict__,
        "paper_measurements": paper_measurements,
        "source": "llm.c train_gpt2.cu as run by Spaan et al., arXiv 2601.08539",
    }
    name = f"llmc-gpt-b{cfg.batch}-t{cfg.seq}-c{cfg.hidden}-l{cfg.layers}"
    return KernelTrace(name, kernels, meta)


def _paper_index(cfg: LlmcConfig) -> list[int]:
    """For each invocation of :func:`step_kernels`, its row in the paper's table (0–45)."""
    idx = [0, 1]
    for _ in range(cfg.layers):
        idx += list(range(2, 14))
    idx += list(range(14, 19))
    for _ in range(cfg.layers):
        idx += list(range(19, 44))
    idx += [44, 45]
    return idx


def paper_index(trace: KernelTrace) -> list[int]:
    """Paper-table row of every invocation of a trace made by :func:`gpt3xl_step`."""
    cfg = LlmcConfig(**trace.meta["config"])
    return _paper_index(cfg)
