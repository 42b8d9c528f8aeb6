"""Generic decoder-layer workloads (GPT- and Llama-style) with FLOPs and bytes derived from the shapes.

The kernel list follows what PyTorch launches in eager mode for a bf16 model: cuBLAS GEMMs (bias in the
epilogue), fused scaled-dot-product (flash) attention, vectorised elementwise kernels, LayerNorm's forward
and two backward kernels, bias gradients as reductions. Llama-style layers use grouped-query attention,
rotary embeddings, SwiGLU and RMSNorm (one fused kernel each way). Bytes are each kernel's minimum
traffic (inputs read once, outputs written once); FLOPs count a multiply-add as 2 and, for causal
attention, only the lower triangle.

With ``autocast`` the step is what ``torch.autocast(dtype=bfloat16)`` runs for a model of ``nn.Linear``,
``nn.LayerNorm``, ``nn.Embedding``, ``F.gelu`` and ``F.scaled_dot_product_attention`` with fp32 parameters (as
profiled on an H200 and an H100: ``data/corpus-h200/train-small-gpt``): every linear layer casts its fp32 weight
and bias to bf16 and, where its input comes from a norm, that input too (a copy kernel each); norms run in fp32 and
the residual stream is fp32 (each residual add reads the fp32 stream and the bf16 branch); cuBLAS and cuDNN clear a
few bytes before their kernels (``Memset (Device)``); the backward casts each weight and bias gradient back to fp32,
casts the gradient entering each linear layer to bf16 and the one leaving it towards a norm to fp32, and adds the
residual branches' fp32 gradients; the loss is a cast of the logits to fp32, ``log_softmax`` and ``nll_loss`` in
fp32 and their backward; the optimizer (``optimizer``) is fused AdamW over fp32 parameters, gradients and both
moments.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from rlclock.errors import SpecError
from rlclock.workload.op_costs import GELU_FLOPS_PER_ELEMENT, gamma_beta_loads
from rlclock.workload.trace import DTYPES, Kernel, KernelTrace, check_step_size

_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
F32 = 4


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a decoder-only transformer training step.

    Attributes:
        hidden: Model width.
        heads: Query heads.
        kv_heads: Key/value heads (``heads`` for multi-head attention, fewer for GQA).
        ffn: Feed-forward inner width (per branch for SwiGLU).
        seq: Tokens per sequence.
        batch: Sequences per step.
        layers: Decoder layers.
        style: ``"gpt"`` (LayerNorm, biases, GELU) or ``"llama"`` (RMSNorm, RoPE, SwiGLU, no biases).
        dtype: Storage / tensor-core type of activations and weights.
        vocab: Vocabulary size of the embedding and LM head.
        causal: Causal attention mask.
        head: Include embedding, final norm, LM head and loss.
        optimizer: Include a fused AdamW step over all parameters.
        autocast: The step as ``torch.autocast`` runs it over fp32 parameters (module docstring); else a pure
            ``dtype`` graph.
        tied_head: The LM head is the token embedding's weight (a matmul with no bias of its own; its gradient is
            added to the embedding's).
    """

    hidden: int = 2048
    heads: int = 16
    kv_heads: int | None = None
    ffn: int | None = None
    seq: int = 2048
    batch: int = 4
    layers: int = 24
    style: str = "gpt"
    dtype: str = "bf16"
    vocab: int = 50304
    causal: bool = True
    head: bool = True
    optimizer: bool = False
    autocast: bool = False
    tied_head: bool = False

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "seq", "batch", "layers", "vocab"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise SpecError(f"transformer config: {name!r} must be a positive integer, found {v!r}.")
        if self.style not in ("gpt", "llama"):
            raise SpecError(f"transformer config: style {self.style!r} is unknown.", "use 'gpt' or 'llama'.")
        if self.dtype not in DTYPES:
            raise SpecError(f"transformer config: dtype {self.dtype!r} is unknown.", f"use one of {list(DTYPES)}.")
        if self.hidden % self.heads:
            raise SpecError(f"transformer config: hidden ({self.hidden}) must be divisible by heads ({self.heads}).")
        kv = self.n_kv_heads
        if not isinstance(kv, int) or kv <= 0 or self.heads % kv:
            raise SpecError(f"transformer config: kv_heads ({kv}) must be a positive divisor of heads ({self.heads}).")
        if self.ffn is not None and (not isinstance(self.ffn, int) or self.ffn <= 0):
            raise SpecError(f"transformer config: 'ffn' must be a positive integer, found {self.ffn!r}.")
        for name in ("causal", "head", "optimizer", "autocast", "tied_head"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"transformer config: {name!r} must be true or false, found {getattr(self, name)!r}.")
        if self.autocast and self.dtype not in ("bf16", "fp16"):
            raise SpecError(
                f"transformer config: autocast runs in bf16 or fp16, not {self.dtype!r}.",
                "set dtype: bf16 (or fp16) with autocast: true.",
            )

    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def ffn_dim(self) -> int:
        if self.ffn is not None:
            return self.ffn
        if self.style == "gpt":
            return 4 * self.hidden
        return 256 * -(-int(8 * self.hidden / 3) // 256)  # Llama's rounding of 8/3 · hidden

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    @property
    def params_per_layer(self) -> int:
        c, f, kv = self.hidden, self.ffn_dim, self.n_kv_heads * self.head_dim
        if self.style == "gpt":
            return c * 3 * c + 3 * c + c * c + c + c * f + f + f * c + c + 4 * c
        return c * (c + 2 * kv) + c * c + 3 * c * f + 2 * c

    @property
    def n_params(self) -> int:
        if not self.head:
            return self.layers * self.params_per_layer
        if not self.autocast:  # the pure graph's count, kept as it was: one vocabulary matrix and the final norm
            return self.layers * self.params_per_layer + self.vocab * self.hidden + 2 * self.hidden
        head = self.vocab * self.hidden * (1 if self.tied_head else 2) + 2 * self.hidden
        if self.style == "gpt":
            head += self.seq * self.hidden  # learned positions
        return self.layers * self.params_per_layer + head


def _kern(name: str, op: str, cat: str, phase: str, flops: float, rd: float, wr: float, dtype: str, **kw) -> Kernel:
    return Kernel(
        name=name,
        op=op,
        category=cat,
        phase=phase,
        flops=float(flops),
        dram_read_bytes=float(rd),
        dram_write_bytes=float(wr),
        dtype=dtype,
        **kw,
    )


class _Builder:
    """Emits the kernels of one configuration; ``s`` is the element size in bytes."""

    def __init__(self, cfg: TransformerConfig) -> None:
        self.c = cfg
        self.s = _BYTES[cfg.dtype]

    def gemm(self, op: str, phase: str, m: int, n: int, k: int, bias: bool = False) -> Kernel:
        s = self.s
        return _kern(
            "gemm",
            op,
            "gemm",
            phase,
            2.0 * m * n * k + (m * n if bias else 0),
            s * (m * k + k * n + (n if bias else 0)),
            s * m * n,
            self.c.dtype,
            gemm_bmnk=(1, m, n, k),
        )

    def ew(self, name: str, op: str, phase: str, n_in: int, n_out: int, elems: int, flops_per: float) -> Kernel:
        """An elementwise kernel reading ``n_in`` and writing ``n_out`` tensors of ``elems`` elements."""
        return _kern(
            name,
            op,
            "elementwise",
            phase,
            flops_per * elems,
            self.s * n_in * elems,
            self.s * n_out * elems,
            self.c.dtype,
            mlp_bytes=16.0,
        )

    def bias_grad(self, op: str, m: int, n: int) -> Kernel:
        return _kern(
            "reduce_kernel",
            op,
            "reduction",
            "backward",
            m * n,
            self.s * m * n,
            self.s * n,
            self.c.dtype,
            access="reduce",
            mlp_bytes=16.0,
        )

    def norm_fwd(self, op: str) -> Kernel:
        c, s = self.c, self.s
        m, h = c.tokens, c.hidden
        if c.style == "gpt":
            return _kern(
                "vectorized_layer_norm_kernel",
                op,
                "norm",
                "forward",
                8 * m * h,
                s * (m * h + 2 * h),
                s * m * h + F32 * 2 * m,
                c.dtype,
                access="reduce",
                mlp_bytes=16.0,
            )
        return _kern(
            "rms_norm_kernel",
            op,
            "norm",
            "forward",
            4 * m * h,
            s * (m * h + h),
            s * m * h + F32 * m,
            c.dtype,
            access="reduce",
            mlp_bytes=16.0,
        )

    def norm_bwd(self, op: str) -> list[Kernel]:
        c, s = self.c, self.s
        m, h = c.tokens, c.hidden
        stats = F32 * (2 if c.style == "gpt" else 1) * m
        out = [
            _kern(
                "layer_norm_backward_kernel",
                f"{op}.dx",
                "norm",
                "backward",
                12 * m * h,
                s * (2 * m * h + h) + stats,
                s * m * h,
                c.dtype,
                access="reduce",
                mlp_bytes=16.0,
            ),
            _kern(
                "gamma_beta_backward_kernel",
                f"{op}.dw",
                "norm",
                "backward",
                4 * m * h,
                s * 2 * m * h + stats,
                F32 * 2 * h,
                c.dtype,
                access="reduce",
                mlp_bytes=gamma_beta_loads(s),
            ),
        ]
        return out

    def attention_fwd(self) -> Kernel:
        c, s = self.c, self.s
        b, hq, hk, t, d = c.batch, c.heads, c.n_kv_heads, c.seq, c.head_dim
        pairs = t * (t + 1) / 2 if c.causal else t * t
        flops = 4.0 * b * hq * pairs * d
        rd = s * b * t * d * (hq + 2 * hk)
        wr = s * b * t * hq * d + F32 * b * hq * t
        return _kern(
            "flash_fwd_kernel", "attn.fwd", "attention", "forward", flops, rd, wr, c.dtype, gemm_bmnk=(b * hq, t, t, d)
        )

    def attention_bwd(self) -> list[Kernel]:
        c, s = self.c, self.s
        b, hq, hk, t, d = c.batch, c.heads, c.n_kv_heads, c.seq, c.head_dim
        pairs = t * (t + 1) / 2 if c.causal else t * t
        o = b * t * hq * d
        # The preprocessing kernel reads dO and O, writes the fp32 row sums D = rowsum(dO * O) and also zeroes
        # the fp32 dQ accumulator that the main kernel adds into and `attn.bwd.dq` converts (FlashAttention-2's
        # compute_dot_do_o<Clear_dQaccum=true>, cuDNN's compute_dot_do_o_specialized<true, ...>).
        return [
            _kern(
                "flash_bwd_dot_do_o_kernel",
                "attn.bwd.pre",
                "reduction",
                "backward",
                2 * o,
                s * 2 * o,
                F32 * b * hq * t + F32 * o,
                c.dtype,
                access="reduce",
                mlp_bytes=16.0,
            ),
            _kern(
                "flash_bwd_dq_dk_dv_kernel",
                "attn.bwd",
                "attention",
                "backward",
                10.0 * b * hq * pairs * d,
                s * (2 * o + b * t * d * 2 * hk) + F32 * 2 * b * hq * t,
                F32 * o + s * b * t * d * 2 * hk,
                c.dtype,
                gemm_bmnk=(b * hq, t, t, d),
            ),
            _kern(
                "flash_bwd_convert_dq_kernel",
                "attn.bwd.dq",
                "copy",
                "backward",
                o,
                F32 * o,
                s * o,
                c.dtype,
                mlp_bytes=16.0,
            ),
        ]

    def layer_forward(self) -> list[Kernel]:
        c = self.c
        m, h, f = c.tokens, c.hidden, c.ffn_dim
        kv = c.n_kv_heads * c.head_dim
        gpt = c.style == "gpt"
        out = [self.norm_fwd("ln1.fwd"), self.gemm("qkv.fwd", "forward", m, h + 2 * kv, h, bias=gpt)]
        if not gpt:
            out.append(self.ew("rotary_kernel", "rope.fwd", "forward", 1, 1, m * (h + kv), 6))
        out += [
            self.attention_fwd(),
            self.gemm("attnproj.fwd", "forward", m, h, h, bias=gpt),
            self.ew("add_kernel", "residual1.fwd", "forward", 2, 1, m * h, 1),
            self.norm_fwd("ln2.fwd"),
        ]
        if gpt:
            out += [
                self.gemm("fc.fwd", "forward", m, f, h, bias=True),
                self.ew("gelu_kernel", "gelu.fwd", "forward", 1, 1, m * f, GELU_FLOPS_PER_ELEMENT[("tanh", False)]),
                self.gemm("proj.fwd", "forward", m, h, f, bias=True),
            ]
        else:
            out += [
                self.gemm("gate_up.fwd", "forward", m, 2 * f, h),
                self.ew("silu_mul_kernel", "swiglu.fwd", "forward", 2, 1, m * f, 8),
                self.gemm("down.fwd", "forward", m, h, f),
            ]
        out.append(self.ew("add_kernel", "residual2.fwd", "forward", 2, 1, m * h, 1))
        return out

    def layer_backward(self) -> list[Kernel]:
        c = self.c
        m, h, f = c.tokens, c.hidden, c.ffn_dim
        kv = c.n_kv_heads * c.head_dim
        gpt = c.style == "gpt"
        out: list[Kernel] = []
        if gpt:
            out += [
                self.gemm("proj.dgrad", "backward", m, f, h),
                self.gemm("proj.wgrad", "backward", h, f, m),
                self.bias_grad("proj.dbias", m, h),
                self.ew(
                    "gelu_backward_kernel", "gelu.bwd", "backward", 2, 1, m * f, GELU_FLOPS_PER_ELEMENT[("tanh", True)]
                ),
                self.gemm("fc.dgrad", "backward", m, h, f),
                self.gemm("fc.wgrad", "backward", f, h, m),
                self.bias_grad("fc.dbias", m, f),
            ]
        else:
            out += [
                self.gemm("down.dgrad", "backward", m, f, h),
                self.gemm("down.wgrad", "backward", h, f, m),
                self.ew("silu_mul_backward_kernel", "swiglu.bwd", "backward", 3, 2, m * f, 12),
                self.gemm("gate_up.dgrad", "backward", m, h, 2 * f),
                self.gemm("gate_up.wgrad", "backward", 2 * f, h, m),
            ]
        out += self.norm_bwd("ln2.bwd")
        out.append(self.ew("add_kernel", "residual1.bwd", "backward", 2, 1, m * h, 1))
        out += [self.gemm("attnproj.dgrad", "backward", m, h, h), self.gemm("attnproj.wgrad", "backward", h, h, m)]
        if gpt:
            out.append(self.bias_grad("attnproj.dbias", m, h))
        out += self.attention_bwd()
        if not gpt:
            out.append(self.ew("rotary_backward_kernel", "rope.bwd", "backward", 1, 1, m * (h + kv), 6))
        # the fused q/k/v projection's output was split: its gradient is the concatenation of dq, dk, dv
        out.append(
            _kern(
                "cat_kernel",
                "qkv.cat.bwd",
                "copy",
                "backward",
                0,
                self.s * m * (h + 2 * kv),
                self.s * m * (h + 2 * kv),
                c.dtype,
                mlp_bytes=16.0,
            )
        )
        out += [
            self.gemm("qkv.dgrad", "backward", m, h, h + 2 * kv),
            self.gemm("qkv.wgrad", "backward", h + 2 * kv, h, m),
        ]
        if gpt:
            out.append(self.bias_grad("qkv.dbias", m, h + 2 * kv))
        out += self.norm_bwd("ln1.bwd")
        out.append(self.ew("add_kernel", "residual0.bwd", "backward", 2, 1, m * h, 1))
        return out

    def head_forward(self) -> list[Kernel]:
        c, s = self.c, self.s
        m, h, v = c.tokens, c.hidden, c.vocab
        return [
            self.norm_fwd("lnf.fwd"),
            self.gemm("lm_head.fwd", "forward", m, v, h),
            _kern(
                "cross_entropy_kernel",
                "loss.fwd",
                "softmax",
                "forward",
                5 * m * v,
                s * m * v + 8 * m,
                F32 * 2 * m,
                c.dtype,
                mlp_bytes=16.0,
            ),
        ]

    def head_backward(self) -> list[Kernel]:
        c, s = self.c, self.s
        m, h, v = c.tokens, c.hidden, c.vocab
        return [
            _kern(
                "cross_entropy_backward_kernel",
                "loss.bwd",
                "softmax",
                "backward",
                4 * m * v,
                s * m * v + F32 * 2 * m,
                s * m * v,
                c.dtype,
                mlp_bytes=16.0,
            ),
            self.gemm("lm_head.dgrad", "backward", m, h, v),
            self.gemm("lm_head.wgrad", "backward", v, h, m),
            *self.norm_bwd("lnf.bwd"),
        ]

    def embedding(self, phase: str) -> Kernel:
        c, s = self.c, self.s
        m, h = c.tokens, c.hidden
        if phase == "forward":
            return _kern(
                "embedding_kernel",
                "embed.fwd",
                "embedding",
                phase,
                0,
                s * m * h + 8 * m,
                s * m * h,
                c.dtype,
                access="gather",
                mlp_bytes=16.0,
            )
        return _kern(
            "embedding_backward_kernel",
            "embed.bwd",
            "embedding",
            phase,
            m * h,
            s * 2 * m * h + 8 * m,
            s * m * h,
            c.dtype,
            access="gather",
            mlp_bytes=16.0,
        )

    def optimizer(self) -> Kernel:
        n = self.c.n_params
        return _kern(
            "multi_tensor_apply_kernel",
            "adamw",
            "elementwise",
            "optimizer",
            12 * n,
            F32 * 3 * n + self.s * 2 * n,
            F32 * 2 * n + self.s * n,
            self.c.dtype,
            mlp_bytes=16.0,
        )


MEMSET = "Memset (Device)"
"""The profiler's name of a driver memset (cuBLAS and cuDNN clear a few bytes before some of their kernels)."""


class _Autocast(_Builder):
    """The kernels of :class:`TransformerConfig` with ``autocast``: fp32 parameters, norms and residual stream, bf16
    matrix products, and the casts between (module docstring)."""

    def cast(self, op: str, phase: str, elems: float, to_low: bool = True) -> Kernel:
        """A dtype conversion of ``elems`` elements (fp32 → the low type, or back)."""
        rd, wr = (F32, self.s) if to_low else (self.s, F32)
        return _kern(
            "copy_kernel",
            op,
            "copy",
            phase,
            0,
            rd * elems,
            wr * elems,
            "fp32" if not to_low else self.c.dtype,
            mlp_bytes=16.0,
        )

    def memset(self, op: str, phase: str) -> Kernel:
        return _kern(MEMSET, op, "memset", phase, 0, 0, 8, self.c.dtype)

    def linear(self, op: str, m: int, n: int, k: int, bias: bool, cast_input: bool) -> list[Kernel]:
        """A linear layer forward: its bias, input (from a norm) and weight cast to bf16, then the product."""
        out = [self.cast(f"{op}.bias_cast", "forward", n)] if bias else []
        if cast_input:
            out.append(self.cast(f"{op}.input_cast", "forward", m * k))
        out += [
            self.cast(f"{op}.weight_cast", "forward", n * k),
            self.memset(op, "forward"),
            self.gemm(op, "forward", m, n, k, bias=bias),
        ]
        return out

    def linear_backward(self, op: str, m: int, n: int, k: int, bias: bool, to_norm: bool) -> list[Kernel]:
        """A linear layer backward (its input gradient, weight gradient, bias gradient), the parameter gradients
        cast to fp32, and the input gradient cast to fp32 where it flows to a norm."""
        out = [self.gemm(f"{op}.dgrad", "backward", m, k, n), self.gemm(f"{op}.wgrad", "backward", n, k, m)]
        if bias:
            out += [self.memset(f"{op}.dbias", "backward"), self.bias_grad(f"{op}.dbias", m, n)]
        if to_norm:
            out.append(self.cast(f"{op}.dgrad_cast", "backward", m * k, to_low=False))
        out.append(self.cast(f"{op}.wgrad_cast", "backward", n * k, to_low=False))
        if bias:
            out.append(self.cast(f"{op}.dbias_cast", "backward", n, to_low=False))
        return out

    def residual(self, op: str, phase: str) -> Kernel:
        """The fp32 residual stream plus a bf16 branch (forward), or two fp32 gradients added (backward)."""
        mh = self.c.tokens * self.c.hidden
        rd = (F32 + self.s) * mh if phase == "forward" else 2 * F32 * mh
        return _kern("add_kernel", op, "elementwise", phase, mh, rd, F32 * mh, "fp32", mlp_bytes=16.0)

    def norm32(self, op: str) -> list[Kernel]:
        """A norm forward in fp32."""
        c = self.c
        m, h = c.tokens, c.hidden
        if c.style == "gpt":
            return [
                _kern(
                    "vectorized_layer_norm_kernel",
                    op,
                    "norm",
                    "forward",
                    8 * m * h,
                    F32 * (m * h + 2 * h),
                    F32 * m * h + F32 * 2 * m,
                    "fp32",
                    access="reduce",
                    mlp_bytes=16.0,
                )
            ]
        return [
            _kern(
                "rms_norm_kernel",
                op,
                "norm",
                "forward",
                4 * m * h,
                F32 * (m * h + h),
                F32 * m * h + F32 * m,
                "fp32",
                access="reduce",
                mlp_bytes=16.0,
            )
        ]

    def norm32_backward(self, op: str) -> list[Kernel]:
        c = self.c
        m, h = c.tokens, c.hidden
        stats = F32 * (2 if c.style == "gpt" else 1) * m
        return [
            _kern(
                "layer_norm_backward_kernel",
                f"{op}.dx",
                "norm",
                "backward",
                12 * m * h,
                F32 * (2 * m * h + h) + stats,
                F32 * m * h,
                "fp32",
                access="reduce",
                mlp_bytes=16.0,
            ),
            _kern(
                "gamma_beta_backward_kernel",
                f"{op}.dw",
                "norm",
                "backward",
                4 * m * h,
                F32 * 2 * m * h + stats,
                F32 * 2 * h,
                "fp32",
                access="reduce",
                mlp_bytes=gamma_beta_loads(F32),
            ),
        ]

    def layer_forward(self) -> list[Kernel]:
        c = self.c
        m, h, f = c.tokens, c.hidden, c.ffn_dim
        kv = c.n_kv_heads * c.head_dim
        gpt = c.style == "gpt"
        out = [*self.norm32("ln1.fwd"), *self.linear("qkv.fwd", m, h + 2 * kv, h, gpt, True)]
        if not gpt:
            out.append(self.ew("rotary_kernel", "rope.fwd", "forward", 1, 1, m * (h + kv), 6))
        out += [
            self.memset("attn.fwd", "forward"),
            self.attention_fwd(),
            *self.linear("attnproj.fwd", m, h, h, gpt, False),
            self.residual("residual1.fwd", "forward"),
            *self.norm32("ln2.fwd"),
        ]
        if gpt:
            out += [
                *self.linear("fc.fwd", m, f, h, True, True),
                self.ew("gelu_kernel", "gelu.fwd", "forward", 1, 1, m * f, GELU_FLOPS_PER_ELEMENT[("tanh", False)]),
                *self.linear("proj.fwd", m, h, f, True, False),
            ]
        else:
            out += [
                *self.linear("gate_up.fwd", m, 2 * f, h, False, True),
                self.ew("silu_mul_kernel", "swiglu.fwd", "forward", 2, 1, m * f, 8),
                *self.linear("down.fwd", m, h, f, False, False),
            ]
        out.append(self.residual("residual2.fwd", "forward"))
        return out

    def layer_backward(self) -> list[Kernel]:
        c = self.c
        m, h, f = c.tokens, c.hidden, c.ffn_dim
        kv = c.n_kv_heads * c.head_dim
        gpt = c.style == "gpt"
        out = [self.cast("residual2.bwd_cast", "backward", m * h)]
        if gpt:
            out += [
                *self.linear_backward("proj", m, h, f, True, False),
                self.ew(
                    "gelu_backward_kernel", "gelu.bwd", "backward", 2, 1, m * f, GELU_FLOPS_PER_ELEMENT[("tanh", True)]
                ),
                *self.linear_backward("fc", m, f, h, True, True),
            ]
        else:
            out += [
                *self.linear_backward("down", m, h, f, False, False),
                self.ew("silu_mul_backward_kernel", "swiglu.bwd", "backward", 3, 2, m * f, 12),
                *self.linear_backward("gate_up", m, 2 * f, h, False, True),
            ]
        out += [
            *self.norm32_backward("ln2.bwd"),
            self.residual("residual1.bwd", "backward"),
            self.cast("residual1.bwd_cast", "backward", m * h),
            *self.linear_backward("attnproj", m, h, h, gpt, False),
            self.memset("attn.bwd", "backward"),
            *self.attention_bwd(),
        ]
        if not gpt:
            out.append(self.ew("rotary_backward_kernel", "rope.bwd", "backward", 1, 1, m * (h + kv), 6))
        out.append(
            _kern(
                "cat_kernel",
                "qkv.cat.bwd",
                "copy",
                "backward",
                0,
                self.s * m * (h + 2 * kv),
                self.s * m * (h + 2 * kv),
                c.dtype,
                mlp_bytes=16.0,
            )
        )
        out += [
            *self.linear_backward("qkv", m, h + 2 * kv, h, gpt, True),
            *self.norm32_backward("ln1.bwd"),
            self.residual("residual0.bwd", "backward"),
        ]
        return out

    def embedding(self, phase: str) -> Kernel:
        c = self.c
        m, h = c.tokens, c.hidden
        if phase == "forward":
            return _kern(
                "embedding_kernel",
                "embed.fwd",
                "embedding",
                phase,
                0,
                F32 * m * h + 8 * m,
                F32 * m * h,
                "fp32",
                access="gather",
                mlp_bytes=16.0,
            )
        return _kern(
            "embedding_backward_kernel",
            "embed.bwd",
            "embedding",
            phase,
            m * h,
            F32 * 2 * m * h + 8 * m,
            F32 * m * h,
            "fp32",
            access="gather",
            mlp_bytes=16.0,
        )

    def embed_forward(self) -> list[Kernel]:
        c = self.c
        m, h = c.tokens, c.hidden
        out = [self.embedding("forward")]
        if c.style == "gpt":  # learned positions, added to the tokens' embeddings
            out += [
                _kern(
                    "embedding_kernel",
                    "pos.fwd",
                    "embedding",
                    "forward",
                    0,
                    F32 * c.seq * h,
                    F32 * c.seq * h,
                    "fp32",
                    access="gather",
                    mlp_bytes=16.0,
                ),
                _kern(
                    "add_kernel",
                    "pos.add",
                    "elementwise",
                    "forward",
                    m * h,
                    F32 * (m * h + c.seq * h),
                    F32 * m * h,
                    "fp32",
                    mlp_bytes=16.0,
                ),
            ]
        return out

    def head_forward(self) -> list[Kernel]:
        c = self.c
        m, h, v = c.tokens, c.hidden, c.vocab
        return [
            *self.norm32("lnf.fwd"),
            self.cast("lm_head.weight_cast", "forward", v * h),
            self.cast("lm_head.input_cast", "forward", m * h),
            self.memset("lm_head.fwd", "forward"),
            self.gemm("lm_head.fwd", "forward", m, v, h),
            self.cast("loss.logits_cast", "forward", m * v, to_low=False),
            _kern(
                "log_softmax_kernel",
                "loss.log_softmax",
                "softmax",
                "forward",
                4 * m * v,
                F32 * m * v,
                F32 * m * v,
                "fp32",
                access="reduce",
                mlp_bytes=16.0,
            ),
            _kern(
                "nll_loss_forward_kernel",
                "loss.nll",
                "softmax",
                "forward",
                m,
                F32 * m + 8 * m,
                F32,
                "fp32",
                access="gather",
                mlp_bytes=16.0,
            ),
        ]

    def head_backward(self) -> list[Kernel]:
        c = self.c
        m, h, v = c.tokens, c.hidden, c.vocab
        return [
            _kern("fill_kernel", "loss.grad_zero", "memset", "backward", 0, 0, F32 * m * v, "fp32"),
            _kern(
                "nll_loss_backward_kernel",
                "loss.nll.bwd",
                "softmax",
                "backward",
                m,
                8 * m + F32,
                F32 * m,
                "fp32",
                access="gather",
                mlp_bytes=16.0,
            ),
            _kern(
                "log_softmax_backward_kernel",
                "loss.log_softmax.bwd",
                "softmax",
                "backward",
                3 * m * v,
                F32 * 2 * m * v,
                F32 * m * v,
                "fp32",
                access="reduce",
                mlp_bytes=16.0,
            ),
            self.cast("loss.grad_cast", "backward", m * v),
            *self.linear_backward("lm_head", m, v, h, False, True),
            *self.norm32_backward("lnf.bwd"),
        ]

    def embed_backward(self) -> list[Kernel]:
        c = self.c
        out = [self.embedding("backward")]
        if c.style == "gpt":
            out.append(
                _kern(
                    "embedding_backward_kernel",
                    "pos.bwd",
                    "embedding",
                    "backward",
                    c.tokens * c.hidden,
                    F32 * c.tokens * c.hidden + 8 * c.tokens,
                    F32 * c.seq * c.hidden,
                    "fp32",
                    access="reduce",
                    mlp_bytes=16.0,
                )
            )
        if c.tied_head:  # the head's weight gradient added to the embedding's
            vh = c.vocab * c.hidden
            out.append(
                _kern(
                    "add_kernel",
                    "embed.tied_add",
                    "elementwise",
                    "backward",
                    vh,
                    F32 * 2 * vh,
                    F32 * vh,
                    "fp32",
                    mlp_bytes=16.0,
                )
            )
        return out

    def optimizer(self) -> Kernel:
        n = self.c.n_params
        return _kern(
            "multi_tensor_apply_kernel",
            "adamw",
            "elementwise",
            "optimizer",
            12 * n,
            F32 * 4 * n,
            F32 * 3 * n,
            "fp32",
            mlp_bytes=16.0,
        )


def _builder(cfg: TransformerConfig) -> _Builder:
    return _Autocast(cfg) if cfg.autocast else _Builder(cfg)


def layer_kernels(cfg: TransformerConfig) -> tuple[list[Kernel], list[Kernel]]:
    """One layer's forward and backward kernels."""
    b = _builder(cfg)
    return b.layer_forward(), b.layer_backward()


def step_kernels(cfg: TransformerConfig) -> list[Kernel]:
    """All invocations of one training step in execution order."""
    b = _builder(cfg)
    if isinstance(b, _Autocast):
        return _autocast_step(b, cfg)
    fwd, bwd = b.layer_forward(), b.layer_backward()
    out: list[Kernel] = [b.embedding("forward")] if cfg.head else []
    for layer in range(cfg.layers):
        out += [replace(k, layer=layer) for k in fwd]
    if cfg.head:
        out += b.head_forward() + b.head_backward()
    for layer in reversed(range(cfg.layers)):
        out += [replace(k, layer=layer) for k in bwd]
    if cfg.head:
        out.append(b.embedding("backward"))
    if cfg.optimizer:
        out.append(b.optimizer())
    return out


def _autocast_step(b: _Autocast, cfg: TransformerConfig) -> list[Kernel]:
    fwd, bwd = b.layer_forward(), b.layer_backward()
    out: list[Kernel] = b.embed_forward() if cfg.head else []
    for layer in range(cfg.layers):
        out += [replace(k, layer=layer) for k in fwd]
    if cfg.head:
        out += b.head_forward() + b.head_backward()
    for layer in reversed(range(cfg.layers)):
        out += [replace(k, layer=layer) for k in bwd]
    if cfg.head:
        out += b.embed_backward()
    if cfg.optimizer:
        out.append(b.optimizer())
    return out


def transformer_step(cfg: TransformerConfig) -> KernelTrace:
    """A decoder-only transformer training step as a trace."""
    check_step_size(
        "transformer config",
        {
            "hidden": cfg.hidden,
            "ffn": cfg.ffn,
            "heads": cfg.heads,
            "kv_heads": cfg.kv_heads,
            "seq": cfg.seq,
            "batch": cfg.batch,
            "vocab": cfg.vocab,
            "tokens": cfg.batch * cfg.seq,
        },
        cfg.layers,
        lambda layers: len(step_kernels(replace(cfg, layers=layers))),
    )
    name = (
        f"{cfg.style}-c{cfg.hidden}-h{cfg.heads}"
        + (f"kv{cfg.kv_heads}" if cfg.kv_heads else "")
        + f"-f{cfg.ffn_dim}-t{cfg.seq}-b{cfg.batch}-l{cfg.layers}-{cfg.dtype}"
        + ("-autocast" if cfg.autocast else "")
    )
    meta = {"generator": "rlclock.workload.transformer.transformer_step", "config": asdict(cfg)}
    return KernelTrace(name, step_kernels(cfg), meta)
