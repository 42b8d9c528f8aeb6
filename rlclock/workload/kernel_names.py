"""Kernel categories from kernel names and the PyTorch operators that launched them.

The rules cover what PyTorch, cuBLAS(Lt), cuDNN and FlashAttention launch for transformer layers; a
kernel nothing matches is ``"other"``. Specific names win over operators (FlashAttention's backward
pre- and post-processing kernels run under the attention operator but are a reduction and a copy).
"""

from __future__ import annotations

import re

LOOPS = ("vectorized", "unrolled", "generic", "other")
"""How a PyTorch TensorIterator kernel walks its elements (:func:`loop_kind`)."""

_NAME_FIRST: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reduction", ("dot_do_o", "splitkreduce", "split_k_reduce")),
    ("copy", ("convert_dq",)),
    ("attention", ("flash", "fmha", "sdpa", "attention", "attn_", "mha_")),
    ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "wgmma", "sm90_", "sm80_", "s16816", "ampere_")),
)

_OPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gemm", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm", "aten::matmul")),
    (
        "attention",
        ("scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention", "aten::_cudnn_attention"),
    ),
    ("norm", ("layer_norm", "rms_norm", "group_norm", "batch_norm")),
    ("softmax", ("softmax", "cross_entropy", "nll_loss")),
    ("embedding", ("embedding", "index_select", "aten::index")),
    ("reduction", ("aten::sum", "aten::mean", "aten::amax", "aten::max", "aten::min", "aten::norm")),
    ("copy", ("aten::copy_", "aten::clone", "aten::contiguous", "aten::cat", "aten::_to_copy", "aten::stack")),
    ("memset", ("aten::zero_", "aten::fill_", "aten::zeros")),
)

_NAME_LAST: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("norm", ("layer_norm", "layernorm", "rms_norm", "rmsnorm", "gamma_beta", "gammabeta", "ln_fwd", "ln_bwd")),
    ("softmax", ("softmax", "cross_entropy", "nll_loss")),
    ("embedding", ("embedding", "indexing_backward", "index_select")),
    ("copy", ("copy", "transpose", "permute", "catarray", "cat_", "memcpy")),
    ("reduction", ("reduce", "sum_kernel")),
    ("memset", ("memset", "fill")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "gelu", "silu", "add", "mul", "activation")),
)


def classify(name: str, op: str | None = None) -> str:
    """The category (one of ``rlclock.workload.trace.CATEGORIES``) of a kernel.

    Args:
        name: Kernel name (mangled or demangled).
        op: The PyTorch operator that launched it (e.g. ``"aten::mm"``), if known.
    """
    low = name.lower()
    for cat, keys in _NAME_FIRST:
        if any(k in low for k in keys):
            return cat
    if op:
        op_low = op.lower()
        for cat, keys in _OPS:
            if any(k in op_low for k in keys):
                return cat
    for cat, keys in _NAME_LAST:
        if any(k in low for k in keys):
            return cat
    return "other"


ROLL_KERNEL = "roll_cuda_kernel"
"""PyTorch's ``torch.roll`` kernel: per element, its index's position along the rolled dimension moved by the shift
(a division and a remainder); on the H200 Swin's rolls run at a fixed rate in elements, bf16 or fp32 alike
(~230 G elements/s), as the generic loop does."""


def loop_kind(name: str) -> str:
    """Which of PyTorch's elementwise loops a kernel runs, from its (demangled) name; one of :data:`LOOPS`.

    ``vectorized``: ``vectorized_elementwise_kernel`` and the vectorized ``CatArrayBatchedCopy`` (contiguous
    operands of one type, 16-byte vector loads); ``unrolled``: ``unrolled_elementwise_kernel`` (contiguous
    operands whose types differ: every load and store goes through a per-element dynamic cast); ``generic``: the
    strided ``elementwise_kernel<nt, vt>`` (an operand broadcast, transposed or otherwise not contiguous: every
    element's offsets computed per operand), the strided ``CatArrayBatchedCopy`` and ``roll_cuda_kernel`` (each
    element's source offset computed from its index, one element per thread); ``other``: anything else.
    """
    if "vectorized_elementwise_kernel" in name or "CatArrayBatchedCopy_vectorized" in name:
        return "vectorized"
    if "unrolled_elementwise_kernel" in name:
        return "unrolled"
    if "::elementwise_kernel<" in name or "CatArrayBatchedCopy" in name or ROLL_KERNEL in name:
        return "generic"
    return "other"


def elements_per_thread(name: str) -> int | None:
    """Elements one thread of a ``generic`` or ``unrolled`` loop handles (``elementwise_kernel<nt, vt>``: ``vt``;
    ``unrolled_elementwise_kernel``: PyTorch's thread work size, 4; ``roll_cuda_kernel``: 1, a thread per element),
    ``None`` for other kernels."""
    kind = loop_kind(name)
    if kind == "unrolled":
        return 4
    if ROLL_KERNEL in name:
        return 1
    if kind == "generic":
        m = re.search(r"::elementwise_kernel<\s*\d+\s*,\s*(\d+)", name)
        return int(m.group(1)) if m else None
    return None


def activity_kind(name: str) -> str:
    """``"memset"`` or ``"memcpy"`` for the profiler's non-kernel device activities (``Memset (Device)``,
    ``Memcpy DtoD …``), ``"kernel"`` for anything else."""
    low = name.lower()
    return "memset" if low.startswith("memset") else "memcpy" if low.startswith("memcpy") else "kernel"


def rms_norm_forward(name: str, op: str | None = None) -> bool:
    """Whether a norm kernel is an RMSNorm forward, whose statistic is a plain sum of squares.

    PyTorch's LayerNorm forward (``vectorized_layer_norm_kernel<T, T_ACC, false>``) takes Welford's online update
    per element — a difference, a reciprocal of the running count, two multiply-adds — and combines the threads'
    partial (mean, variance, count) triples with more of the same; the fused RMSNorm (``aten::_fused_rms_norm``:
    the same kernel with its ``rms_norm`` template flag ``true``) adds ``x·x`` to a sum, one multiply-add, and
    combines plain sums. Known by the operator (``rms_norm`` and not ``backward``), the kernel's template flag, or
    an ``rms_norm`` kernel name (the generator's).
    """
    if op is not None and "rms_norm" in op.lower():
        return "backward" not in op.lower()
    m = re.search(r"layer_norm_kernel<[^<>]*,[^<>]*,\s*(true|false)\s*>", name)
    if m is not None:
        return m.group(1) == "true"
    low = name.lower().replace("_", "")
    return "rmsnorm" in low and "backward" not in low and "grad" not in low


def gemm_narrow_loads(name: str) -> tuple[int, int, int] | None:
    """``(tile rows, tile columns, elements per load)`` of a CUTLASS GEMM whose name gives its alignment
    (``cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2``), ``None`` otherwise.

    The library picks an alignment below eight 16-bit elements when a leading dimension is not a multiple of eight
    (a vocabulary of 30 522 or 50 257): the operand tiles are then fetched ``align`` elements per load instruction
    instead of 16 bytes. Hopper's own kernels (``nvjet``, ``sm90`` names) do not say and are never that narrow.
    """
    m = re.search(r"gemm_[a-z0-9]+_(\d+)x(\d+)_\w*?_align(\d+)", name)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), max(1, int(m.group(3)))


def short_name(name: str, width: int = 60) -> str:
    """A readable prefix of a (demangled) kernel name: template arguments and the return type dropped."""
    s = name
    if s.startswith("void "):
        s = s[5:]
    depth = 0
    out = []
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
            continue
        if depth == 0:
            out.append(ch)
    s = "".join(out).strip() or name
    return s if len(s) <= width else s[: width - 1] + "…"
