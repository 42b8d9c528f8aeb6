"""FLOPs and DRAM bytes of profiled kernels, from the operator calls that launched them.

A profiled step names, for every kernel, memcpy and memset, the framework operator call that launched it
(:class:`~rlclock.workload.trace.LaunchOp`: operator name, input shapes and types, scalar arguments). This module
turns one call and the device activities it launched into each activity's :class:`Cost` — the FLOPs, the bytes
it must read and write in device memory, its category, arithmetic type and access class — which the DVFS model
predicts time and energy from. An operator that launches several kernels (an embedding's backward sorts its
indices, finds segments, sums them and scatters the rows; attention's backward runs a pre-pass, the main
kernel and a conversion) has its work divided among them by what each kernel's name says it does; kernels of
one call that do the same job (the chunks of a fused optimizer) share it in proportion to their launch sizes.

Rules, by operator family (``aten::`` names, with or without the leading underscore and in-place suffix):

* matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``): ``2·b·m·n·k`` FLOPs and each
  operand once; split-K reduction kernels read fp32 partial sums; FP32 kernels on the SIMT units (``simt``,
  ``sgemm``, ``f32f32`` names) are ``fp32``, FP32 data on tensor cores ``tf32``;
* fused attention (cuDNN, Flash, memory-efficient; forward and backward): ``2·B·H·S_q·S_k·(D + D_v)`` FLOPs
  forward (halved when causal), 2.5 times that backward (five products instead of two); the backward's
  ``dot_do_o`` pre-pass, ``convert_dq`` and grouped-query head reduction get their own bytes (with grouped heads the
  main kernel writes dK/dV for every query head in the input type, as FlashAttention-2 does for grouped heads, and
  the ``fmha_reduce_head`` kernels — one each for dK and dV — sum each group's: counted in fp32 and once per
  kernel, the 134 MB they would read in 12.6 µs on Mistral would need 10.6 TB/s);
* embeddings: the forward gathers the rows of its indices; the dense backward's index sort (one pass of
  keys and values per radix-sort launch), segment scans, ``compute_grad_weight`` and ``sum_and_scatter``;
* losses: ``nll_loss`` reads one value per row (not the vocabulary); its backward scatters one value per row
  into a gradient the preceding fill zeroed; log-softmax and softmax read and write every element, their
  rows read twice when longer than :data:`LONG_ROW_ELEMENTS`;
* LayerNorm / RMSNorm forward and backward (input gradient, γ/β gradient);
* fused and foreach optimizers: every tensor list read once, the updated lists written;
* copies and casts (source read in its type, destination written in its type), ``cat``/``stack``, fills
  and memsets (written only), memcpys;
* reductions (input read, the reduced output written; along contiguous rows, one vector of four elements in flight
  per thread);
* any other operator with tensor inputs: elementwise — each input read once at its own size, the largest
  written (one byte per element for comparisons, plus the mask of a dropout); an ``out=`` tensor is written
  only; one operation per element, GELU and its gradient their math's (:data:`GELU_FLOPS_PER_ELEMENT`).

A device activity whose operator is unknown gets only what its kind says (a memset's or memcpy's bytes);
nothing is ever NaN.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from rlclock.workload.kernel_code import TRITON_PREFIX, KernelCode
from rlclock.workload.kernel_names import activity_kind, classify, loop_kind
from rlclock.workload.trace import Kernel, KernelTrace, LaunchOp, Shape

_log = logging.getLogger(__name__)

LONG_ROW_ELEMENTS = 4096
"""Softmax rows at least this long are read twice (a max pass, then a sum-and-write pass)."""
SPLIT_K_PARTS = 2
"""fp32 partial products a split-K reduction reads per output element (at least two splits)."""
ATTENTION_BACKWARD_FLOPS = 2.5
"""Backward over forward FLOPs of fused attention: five matrix products against two."""
ADAM_FLOPS_PER_ELEMENT = 12.0
"""FLOPs per parameter of an Adam(W) update (moments, bias corrections, the step)."""
VECTOR_LOAD_BYTES = 16.0
"""Bytes in flight per thread when a kernel's loop is not known: one 128-bit vector load."""
GAMMA_BETA_ROWS_PER_THREAD = 8
"""Rows one thread of PyTorch's LayerNorm γ/β-gradient kernel sums (256 rows per block over 32 thread rows)."""
MULTI_TENSOR_CHUNK = 65536
"""Elements one block of PyTorch's ``multi_tensor_apply`` kernels processes (``kChunkSize``)."""
REDUCE_VECTOR_ELEMENTS = 4
"""Elements of the one vector load a thread of PyTorch's ``reduce_kernel`` keeps in flight when it reduces along
contiguous rows (``ReduceOp``'s ``input_vec_size``, = ``vt0`` = 4: each iteration loads a vector and adds it into as
many accumulators before the next load)."""
GELU_FLOPS_PER_ELEMENT: dict[tuple[str, bool], float] = {
    ("tanh", False): 20.0,
    ("tanh", True): 30.0,
    ("none", False): 55.0,
    ("none", True): 75.0,
}
"""SIMT operations per element of GELU, by ``(approximate, backward)`` (the model counts two per FP32 lane-cycle, a
multiply-add as two). The tanh form: a cubic, ``tanhf`` and the scaling (its derivative adds ``1 - tanh²`` and the
cubic's); the exact form (``approximate='none'``, PyTorch's default) evaluates ``erff`` — a polynomial near zero and
an exponential of a second polynomial on the tails, both taken by a warp whose elements fall on both sides — and its
derivative ``erff`` and ``expf`` together. The exact counts are the H200's (``docs/simulator.md``, "Frequency response
on the H200"): under the power cap its exact GELU takes x1.21 the time at x0.78 the clock, a kernel bound by its
math, not its 256 MB of traffic; the tanh counts are the generator's (:mod:`rlclock.workload.transformer`)."""

_ELEM_BYTES = {
    "c10::bfloat16": 2,
    "c10::half": 2,
    "float": 4,
    "double": 8,
    "long int": 8,
    "int": 4,
    "bool": 1,
    "unsigned char": 1,
    "signed char": 1,
    "short int": 2,
    "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1,
    "c10::float8_e4m3fnuz": 1,
    "c10::float8_e5m2fnuz": 1,
    "c10::complex<float>": 8,
}
_DTYPES = {
    "c10::bfloat16": "bf16",
    "c10::half": "fp16",
    "float": "fp32",
    "double": "fp32",
    "c10::float8_e4m3fn": "fp8",
    "c10::float8_e5m2": "fp8",
    "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8",
}
_GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "scaled_mm", "addmm_activation"})
_COMPARISONS = frozenset(
    {
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "isneginf",
        "isposinf",
        "isnan",
        "isinf",
        "isfinite",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "signbit",
    }
)
_REDUCTIONS = frozenset(
    {
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "norm",
        "linalg_vector_norm",
        "all",
        "any",
        "prod",
        "var",
        "std",
        "var_mean",
        "std_mean",
        "argmax",
        "argmin",
        "logsumexp",
        "count_nonzero",
    }
)
_FILLS = frozenset({"fill", "zero", "zeros", "ones", "full", "fill_", "zero_", "masked_fill"})
_CAUSAL_ARG = {  # position of is_causal when the operator's schema cannot be read
    "_scaled_dot_product_cudnn_attention": 6,
    "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_efficient_attention": 6,
    "_scaled_dot_product_cudnn_attention_backward": 14,
    "_scaled_dot_product_flash_attention_backward": 11,
    "_scaled_dot_product_efficient_attention_backward": 11,
    "_flash_attention_forward": 8,
    "_efficient_attention_forward": 8,
    "scaled_dot_product_attention": 5,
}


@dataclass(frozen=True)
class Launch:
    """One device activity of an operator call, as the rules see it.

    Attributes:
        name: Kernel name (demangled), or the memcpy's / memset's description.
        kind: ``"kernel"``, ``"memcpy"`` or ``"memset"``.
        grid: Launch grid of a kernel, when known.
        block: Launch block of a kernel, when known.
        nbytes: Bytes a memcpy or memset moves, when known.
    """

    name: str
    kind: str = "kernel"
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    nbytes: int | None = None

    @property
    def threads(self) -> float:
        """Threads launched (1 when the launch shape is unknown)."""
        if self.grid is None or self.block is None:
            return 1.0
        return float(math.prod(self.grid) * math.prod(self.block))


@dataclass(frozen=True)
class Cost:
    """What one device activity must do.

    Attributes:
        flops: Floating-point operations (a multiply-add counts 2).
        read_bytes: Bytes read from device memory (each input once, unless the rule says otherwise).
        write_bytes: Bytes written to device memory.
        category: One of :data:`~rlclock.workload.trace.CATEGORIES`.
        dtype: Arithmetic type (of the tensor-core math for GEMMs and attention).
        access: One of :data:`~rlclock.workload.trace.ACCESS_CLASSES`.
        gemm_bmnk: ``(batch, m, n, k)`` of a matrix product.
        rule: Which rule gave it (``"gemm"``, ``"attention.backward"``, ``"elementwise"``, ``"unknown"`` …).
        mlp_bytes: Bytes of independent loads each thread keeps in flight (:func:`loads_in_flight`).
    """

    flops: float
    read_bytes: float
    write_bytes: float
    category: str
    dtype: str = "fp32"
    access: str = "stream"
    gemm_bmnk: tuple[int, int, int, int] | None = None
    rule: str = "unknown"
    mlp_bytes: float = VECTOR_LOAD_BYTES

    @property
    def known(self) -> bool:
        """Whether any rule applied (an unknown activity has only its measured time)."""
        return self.rule != "unknown"


# -- reading an operator's arguments -------------------------------------------------------------------------


def elem_bytes(type_name: str) -> int | None:
    """Bytes per element of a profiler type name (``"c10::BFloat16"`` → 2), ``None`` for non-tensors."""
    return _ELEM_BYTES.get(type_name.strip().lower())


def _name_elem_bytes(kernel_name: str) -> int:
    """Element size a kernel's template arguments name (tensor lists carry no type): the first element type
    the name mentions (``OpaqueType<N>``: N bytes), 4 when none does."""
    low = kernel_name.lower()
    m = re.search(r"opaquetype<(\d+)", low)
    if m:
        return int(m.group(1))
    found = [(low.find(t), b) for t, b in (("bfloat16", 2), ("half", 2), ("float", 4), ("double", 8)) if t in low]
    return min(found)[1] if found else 4


@dataclass(frozen=True)
class _Args:
    op: LaunchOp

    def tensors(self) -> list[tuple[int, Shape, int]]:
        """``(position, shape, element bytes)`` of the tensor arguments."""
        out: list[tuple[int, Shape, int]] = []
        for i, (dims, t) in enumerate(zip(self.op.input_dims, self.op.input_types, strict=False)):
            eb = elem_bytes(t)
            if eb is not None:
                shape = tuple(d for d in dims if isinstance(d, int))
                if len(shape) == len(dims):
                    out.append((i, shape, eb))
        return out

    def lists(self) -> list[tuple[int, tuple[Shape, ...]]]:
        """``(position, shapes)`` of the tensor-list arguments."""
        out: list[tuple[int, tuple[Shape, ...]]] = []
        for i, (dims, t) in enumerate(zip(self.op.input_dims, self.op.input_types, strict=False)):
            if t.strip() == "TensorList":
                out.append((i, tuple(d for d in dims if isinstance(d, tuple))))
        return out

    def tensor(self, pos: int) -> tuple[Shape, int] | None:
        for i, dims, eb in self.tensors():
            if i == pos:
                return dims, eb
        return None

    def concrete(self, pos: int | None) -> str:
        if pos is None or pos < 0 or pos >= len(self.op.concrete_inputs):
            return ""
        return self.op.concrete_inputs[pos].strip()

    def concrete_int(self, pos: int | None) -> int | None:
        try:
            return int(float(self.concrete(pos)))
        except ValueError:
            return None

    def concrete_ints(self, pos: int | None) -> list[int] | None:
        text = self.concrete(pos)
        if not text.startswith("["):
            return None
        try:
            return [int(x) for x in text.strip("[]").split(",") if x.strip()]
        except ValueError:
            return None

    def dtype(self) -> str:
        """Arithmetic type: the first floating tensor argument's."""
        for t in self.op.input_types:
            d = _DTYPES.get(t.strip().lower())
            if d is not None:
                return d
        return "fp32"


def _numel(shape: Shape) -> int:
    return math.prod(shape) if shape else 1


def _base(op_name: str) -> str:
    """``"aten::_log_softmax_backward_data"`` → ``"log_softmax_backward_data"`` (namespace, ``_`` and in-place
    suffix dropped)."""
    return op_name.split("::")[-1].strip("_")


@lru_cache(maxsize=256)
def _arg_index(op_name: str, arg: str) -> int | None:
    """Position of argument ``arg`` in the schema of ``op_name`` (from PyTorch when it knows the operator)."""
    short = op_name.split("::")[-1]
    try:
        import torch

        packet = getattr(torch.ops.aten, short)
        for overload in ("default", *packet.overloads()):
            schema = getattr(packet, overload)._schema
            names = [a.name for a in schema.arguments]
            if arg in names:
                return names.index(arg)
    except Exception:
        pass
    return _CAUSAL_ARG.get(short) if arg == "is_causal" else None


def gemm_bmnk(op: LaunchOp | None) -> tuple[int, int, int, int] | None:
    """``(batch, m, n, k)`` of ``aten::mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` / ``_scaled_mm`` from their inputs."""
    if op is None:
        return None
    dims = [d for d in op.input_dims if d and all(isinstance(x, int) for x in d)]
    base = _base(op.name)
    if base in ("addmm", "baddbmm", "addmm_activation") and len(dims) >= 3:
        dims = dims[1:3]
    elif base in ("mm", "bmm", "scaled_mm") and len(dims) >= 2:
        dims = dims[:2]
    else:
        return None
    a, b = dims
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return (1, a[0], b[1], a[1])  # type: ignore[return-value]
    if len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return (a[0], a[1], b[2], a[2])  # type: ignore[return-value]
    return None


def loads_in_flight(launch: Launch, elements: float, read_bytes_per_element: float) -> float:
    """Bytes of independent loads a thread of a PyTorch elementwise kernel keeps in flight.

    What the kernel's name says about its loop (:func:`~rlclock.workload.kernel_names.loop_kind`): vectorized
    and unrolled kernels load all the elements a thread handles (``elements`` over the launch's threads) before
    computing; the strided copies of ``cat`` store each element before loading the next (the compiler cannot move
    a load past a store that may alias it), so one element's operands are in flight. Other kernels, the generic
    ``elementwise_kernel<nt, vt>`` among them: :data:`VECTOR_LOAD_BYTES` — measured on the H200, the generic loop
    runs at a rate in elements that its per-element work sets (``loop_ops_per_element`` of the GPU preset), well
    above what one element in flight per thread would allow (its bf16 copies reach 1.3-1.5 TB/s).
    """
    name = launch.name
    if read_bytes_per_element <= 0:
        return VECTOR_LOAD_BYTES
    kind = loop_kind(name)
    if kind == "generic" and "CatArray" in name:
        return read_bytes_per_element
    if kind in ("vectorized", "unrolled") and "CatArray" not in name:
        per_thread = max(1.0, round(elements / launch.threads)) if launch.grid and launch.block else 4.0
        return per_thread * read_bytes_per_element
    return VECTOR_LOAD_BYTES


def gamma_beta_loads(elem_bytes: float, kernel_name: str = "") -> float:
    """Bytes of independent loads a thread of PyTorch's LayerNorm γ/β-gradient kernel keeps in flight.

    ``GammaBetaBackwardCUDAKernelTemplate<T, T_ACC, block_dim_x, block_dim_y, rows_per_block_y, …>`` has each
    thread walk ``rows_per_block_y / block_dim_y`` rows (unrolled), loading the gradient and the input of each
    before summing: two elements per row in flight. The template's numbers come from the name when given,
    else PyTorch's 32 × 32 threads over 256 rows (8 rows per thread).
    """
    m = re.search(r"GammaBetaBackward\w*<[^,]+,[^,]+,\s*(\d+)u?,\s*(\d+)u?,\s*(\d+)u?", kernel_name)
    rows = int(m.group(3)) // max(1, int(m.group(2))) if m else GAMMA_BETA_ROWS_PER_THREAD
    return float(max(1, rows) * 2 * elem_bytes)


def row_loads(launch: Launch, rows: float, row_read_bytes: float) -> float:
    """Bytes of independent loads a thread of a row kernel keeps in flight: a normalisation launched one block per
    row (PyTorch's ``vectorized_layer_norm_kernel`` and its input gradient) has each thread load
    :data:`VECTOR_LOAD_BYTES` of the row at a time, so a row narrower than the block leaves threads without data —
    the block's loads in flight are the row's bytes (over every tensor it reads), spread over its threads. On the
    H200, Swin's fp32 LayerNorms of 96-768 channels ran at 0.21-0.88 of the rate a full block would reach, about that
    share. Other launches (several rows per block, unknown shape): :data:`VECTOR_LOAD_BYTES`."""
    if launch.grid is None or launch.block is None or math.prod(launch.grid) != round(rows):
        return VECTOR_LOAD_BYTES
    return float(min(VECTOR_LOAD_BYTES, row_read_bytes / math.prod(launch.block)))


def _spread(
    launches: Sequence[Launch], total: Cost, elements: float = 0.0, read_bytes_per_element: float = 0.0
) -> list[Cost]:
    """An operator's work done once by its kernels together (PyTorch splits a tensor too large for 32-bit
    offsets over several launches): each kernel gets a share in proportion to its launch size, and its loads
    in flight (:func:`loads_in_flight`); memsets and memcpys their own bytes."""
    kernels = [lk for lk in launches if lk.kind == "kernel"]
    shares = iter(_share(kernels, total)) if kernels else iter(())
    total_threads = sum(k.threads for k in kernels)
    weights = iter([k.threads / total_threads for k in kernels])
    out = []
    for lk in launches:
        if lk.kind != "kernel":
            out.append(_kind_cost(lk, total.category))
            continue
        c, w = next(shares), next(weights)
        out.append(replace(c, mlp_bytes=loads_in_flight(lk, elements * w, read_bytes_per_element)))
    return out


# -- the rules ---------------------------------------------------------------------------------------------


def _kind_cost(launch: Launch, category: str | None = None) -> Cost:
    """A memset's or memcpy's own bytes; an unknown kernel's nothing."""
    n = float(launch.nbytes or 0)
    if launch.kind == "memset":
        return Cost(0.0, 0.0, n, "memset", rule="memset" if launch.nbytes else "unknown")
    if launch.kind == "memcpy":
        return Cost(0.0, n, n, "copy", rule="memcpy" if launch.nbytes else "unknown")
    return Cost(0.0, 0.0, 0.0, category or "other")


def _share(launches: Sequence[Launch], total: Cost) -> list[Cost]:
    """``total`` divided among kernels doing the same job, in proportion to their launch sizes."""
    weights = [lk.threads for lk in launches]
    s = sum(weights)
    return [
        Cost(
            total.flops * w / s,
            total.read_bytes * w / s,
            total.write_bytes * w / s,
            total.category,
            total.dtype,
            total.access,
            total.gemm_bmnk,
            total.rule,
            total.mlp_bytes,
        )
        for w in weights
    ]


def _gemm(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    bmnk = gemm_bmnk(a.op)
    if bmnk is None:
        return None
    b, m, n, k = bmnk
    ts = a.tensors()
    operands = ts[1:3] if _base(a.op.name) in ("addmm", "baddbmm", "addmm_activation") else ts[:2]
    eb = operands[0][2] if operands else 2
    bias = ts[0] if _base(a.op.name) in ("addmm", "baddbmm") and ts else None
    read = float(sum(_numel(s) * e for _, s, e in operands) + (_numel(bias[1]) * bias[2] if bias else 0))
    write = float(b * m * n * eb)
    mains = [i for i, lk in enumerate(launches) if lk.kind == "kernel" and _is_gemm_kernel(lk.name)] or [
        i for i, lk in enumerate(launches) if lk.kind == "kernel" and "reduce" not in lk.name.lower()
    ]
    out: list[Cost] = []
    for i, lk in enumerate(launches):
        low = lk.name.lower()
        if lk.kind != "kernel":
            out.append(_kind_cost(lk))
        elif i in mains:
            simt = any(s in low for s in ("simt", "sgemm", "f32f32_f32f32"))
            dtype = "fp32" if simt else ("tf32" if a.dtype() == "fp32" else a.dtype())
            share = 1.0 / len(mains)
            out.append(
                Cost(
                    2.0 * b * m * n * k * share, read * share, write * share, "gemm", dtype, gemm_bmnk=bmnk, rule="gemm"
                )
            )
        elif "reduce" in low:
            out.append(
                Cost(
                    float(b * m * n * SPLIT_K_PARTS),
                    float(4 * SPLIT_K_PARTS * b * m * n),
                    write,
                    "reduction",
                    rule="gemm.split_k_reduce",
                )
            )
        else:
            out.append(Cost(0.0, 0.0, 0.0, classify(lk.name, a.op.name)))
    return out


def _is_gemm_kernel(name: str) -> bool:
    low = name.lower()
    return classify(name) == "gemm" and "reduce" not in low


def _attention(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    base = a.op.name.split("::")[-1]
    backward = "backward" in base
    t4 = [(s, e) for _, s, e in a.tensors() if len(s) == 4]
    qkv = t4[1:4] if backward else t4[0:3]
    if len(qkv) < 3:
        return None
    (q, eb), (k, _), (v, _) = qkv
    bsz, heads, sq, d = q
    heads_kv, sk, dv = k[1], k[2], v[3]
    causal = a.concrete(_arg_index(a.op.name, "is_causal")) == "True"
    frac = (sk - (sq - 1) / 2.0) / sk if causal and sq <= sk else 1.0
    fwd_flops = 2.0 * bsz * heads * sq * sk * (d + dv) * frac
    q_b, o_b = float(bsz * heads * sq * d * eb), float(bsz * heads * sq * dv * eb)
    kv_b = float(bsz * heads_kv * sk * (d + dv) * eb)
    rows = float(bsz * heads * sq)
    dtype = a.dtype()
    names = [lk.name.lower() for lk in launches]
    fp32_dq = any("convert_dq" in nm for nm in names)
    n_reduce = sum("reduce_head" in nm for nm in names)
    mains = [
        i
        for i, lk in enumerate(launches)
        if lk.kind == "kernel"
        and classify(lk.name, a.op.name) == "attention"
        and "reduce_head" not in names[i]
        and "philox" not in names[i]
    ]
    out: list[Cost] = []
    for i, lk in enumerate(launches):
        nm = names[i]
        if lk.kind != "kernel":
            out.append(_kind_cost(lk))
        elif "dot_do_o" in nm:  # row sums of dO·O; also zeroes the fp32 dQ accumulator that convert_dq reads
            clear = q_b * 4.0 / eb if fp32_dq else 0.0
            out.append(Cost(2.0 * rows * dv, 2.0 * o_b, 4.0 * rows + clear, "reduction", rule="attention.dot_do_o"))
        elif "convert_dq" in nm:
            out.append(Cost(0.0, q_b * 4.0 / eb, q_b, "copy", rule="attention.convert_dq"))
        elif "reduce_head" in nm:  # sums the query heads' dK/dV of each group; the reduce_head kernels share it
            per_q = float(bsz * heads * sk * (d + dv) * eb) / n_reduce
            out.append(Cost(per_q / eb, per_q, kv_b / n_reduce, "reduction", rule="attention.reduce_heads"))
        elif i in mains:
            share = 1.0 / len(mains)
            if backward:
                dk_dv = float(bsz * heads * sk * (d + dv) * eb) if n_reduce else kv_b  # grouped: per query head
                read = q_b + kv_b + 2.0 * o_b + 8.0 * rows
                write = (q_b * 4.0 / eb if fp32_dq else q_b) + dk_dv
                out.append(
                    Cost(
                        ATTENTION_BACKWARD_FLOPS * fwd_flops * share,
                        read * share,
                        write * share,
                        "attention",
                        dtype,
                        rule="attention.backward",
                    )
                )
            else:
                out.append(
                    Cost(
                        fwd_flops * share,
                        (q_b + kv_b) * share,
                        (o_b + 4.0 * rows) * share,
                        "attention",
                        dtype,
                        rule="attention.forward",
                    )
                )
        else:
            out.append(Cost(0.0, 0.0, 0.0, classify(lk.name, a.op.name), rule="attention.helper"))
    return out


def _embedding(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    ts = a.tensors()
    if len(ts) < 2:
        return None
    (_, table, eb), (_, index, ieb) = ts[0], ts[-1] if _base(a.op.name) == "index_select" else ts[1]
    n = _numel(index)
    if _base(a.op.name) == "gather" and len(index) == len(table):  # torch.gather: one element per index
        row = 1
    else:
        row = table[-1] if table else 1
    read, write = float(n * (row * eb + ieb)), float(n * row * eb)
    return _spread(launches, Cost(0.0, read, write, "embedding", access="gather", rule="embedding.forward"))


def _embedding_backward(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    ts = a.tensors()
    if len(ts) < 2:
        return None
    (_, grad, geb), (_, index, ieb) = ts[0], ts[1]
    n = float(_numel(index))
    hidden = float(grad[-1]) if grad else 1.0
    vocab = float(a.concrete_int(2) or n)
    rows = min(n, vocab)
    out = []
    for lk in launches:
        nm = lk.name.lower().replace("_", "")
        if lk.kind != "kernel":
            out.append(_kind_cost(lk))
            continue
        if "onesweep" in nm:  # one radix pass over keys and values
            r, w, rule = 2.0 * ieb * n, 2.0 * ieb * n, "sort"
        elif "histogram" in nm:
            r, w, rule = ieb * n, 0.0, "sort"
        elif "computegradweight" in nm:
            r, w, rule = n * hidden * geb + 2.0 * ieb * n, rows * hidden * 4.0, "partial_sums"
        elif "sumandscatter" in nm:
            r, w, rule = rows * hidden * 4.0 + 2.0 * ieb * n, rows * hidden * geb, "scatter"
        elif "fill" in nm:
            r, w, rule = 0.0, vocab * hidden * geb, "zero"
        elif "init" in nm or "exclusivesum" in nm or "numofpartial" in nm:
            r, w, rule = 0.0, 0.0, "setup"
        else:  # unique-by-key, scans, segment offsets: one pass over the indices
            r, w, rule = 2.0 * ieb * n, ieb * n, "segments"
        access = "gather" if rule in ("partial_sums", "scatter") else "stream"
        out.append(Cost(0.0, r, w, "embedding", access=access, rule=f"embedding.backward.{rule}"))
    return out


def _nll_loss(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    backward = "backward" in a.op.name
    ts = a.tensors()
    logp = next(((s, e) for _, s, e in ts if len(s) >= 2), None)
    target = next(((s, e) for _, s, e in ts if e == 8), None)
    if logp is None:
        return None
    shape, eb = logp
    rows = float(_numel(target[0]) if target else _numel(shape) / shape[1])
    ieb = target[1] if target else 8
    out = []
    for lk in launches:
        if lk.kind != "kernel":
            out.append(_kind_cost(lk))
        elif "fill" in lk.name.lower():
            out.append(Cost(0.0, 0.0, float(_numel(shape) * eb), "memset", rule="nll_loss.zero"))
        elif backward:
            out.append(Cost(rows, rows * ieb, rows * eb, "softmax", access="gather", rule="nll_loss.backward"))
        else:
            out.append(Cost(rows, rows * (ieb + eb), 2.0 * eb, "softmax", access="gather", rule="nll_loss.forward"))
    return out


def _softmax(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    ts = a.tensors()
    if not ts:
        return None
    backward = "backward" in a.op.name
    _, shape, eb = ts[0]
    n = float(_numel(shape))
    passes = 2.0 if shape and shape[-1] >= LONG_ROW_ELEMENTS else 1.0
    if backward:  # grad_output and output read, the input gradient written in the input's type
        read = n * eb * (passes + 1.0)
        write = n * eb
    else:
        to_float = a.concrete(2) == "True"
        read, write = n * eb * passes, n * (4 if to_float else eb)
    return _spread(
        launches, Cost(5.0 * n, read, write, "softmax", rule="softmax.backward" if backward else "softmax.forward")
    )


def _norm(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    ts = a.tensors()
    if not ts:
        return None
    backward = "backward" in a.op.name
    _, x, eb = ts[1] if backward and len(ts) > 1 else ts[0]
    n = float(_numel(x))
    hidden = float(x[-1]) if x else 1.0
    rows = n / hidden
    out = []
    for lk in launches:
        nm = lk.name.lower().replace("_", "")
        if lk.kind != "kernel":
            out.append(_kind_cost(lk))
        elif not backward:
            out.append(
                Cost(
                    8.0 * n,
                    n * eb + 2.0 * hidden * 4.0,
                    n * eb + 8.0 * rows,
                    "norm",
                    rule="norm.forward",
                    mlp_bytes=row_loads(lk, rows, hidden * eb),
                )
            )
        elif "gamma" in nm or "beta" in nm or ("weight" in nm and "input" not in nm):
            out.append(
                Cost(
                    4.0 * n,
                    2.0 * n * eb + 8.0 * rows,
                    2.0 * hidden * 4.0,
                    "norm",
                    access="reduce",
                    rule="norm.backward.weight",
                    mlp_bytes=gamma_beta_loads(eb, lk.name),
                )
            )
        else:
            out.append(
                Cost(
                    10.0 * n,
                    2.0 * n * eb + 8.0 * rows + hidden * 4.0,
                    n * eb,
                    "norm",
                    rule="norm.backward.input",
                    mlp_bytes=row_loads(lk, rows, 2.0 * hidden * eb),
                )
            )
    return out


def _optimizer(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    """Fused and foreach optimizers (``multi_tensor_apply``): every tensor list the kernel touches read once,
    the updated ones written. The profiler drops the shapes of long tensor lists; then each kernel's elements
    come from its grid, one :data:`MULTI_TENSOR_CHUNK` per block."""
    kernels = [lk for lk in launches if lk.kind == "kernel"]
    if not kernels:
        return None
    base = _base(a.op.name)
    lists = [shapes for _, shapes in a.lists() if shapes]
    eb = float(_name_elem_bytes(kernels[0].name))
    m = re.search(r"tensorlistmetadata<(\d+)", kernels[0].name.lower())
    depth = int(m.group(1)) if m else max(1, len(lists))
    inplace = a.op.name.endswith("_")
    if base.startswith("fused_adam"):  # params, grads, exp_avgs, exp_avg_sqs (, max_exp_avg_sqs) in the kernel
        reads, writes, flops_per = depth, depth - 1, ADAM_FLOPS_PER_ELEMENT
    elif base.startswith("fused"):
        reads, writes, flops_per = depth, max(1, depth - 2), 4.0
    elif "norm" in base:
        reads, writes, flops_per = depth, 0, 2.0
    else:
        reads, writes, flops_per = (depth if inplace else depth - 1), 1, 2.0
    if lists:
        total = float(sum(_numel(s) for s in lists[0]))
        per_kernel = [c.flops for c in _share(kernels, Cost(total, 0.0, 0.0, "elementwise"))]
    else:
        per_kernel = [float(lk.grid[0] * MULTI_TENSOR_CHUNK) if lk.grid else 0.0 for lk in kernels]
    rule = "optimizer" if base.startswith("fused") else "foreach"
    it = iter(per_kernel)
    out = []
    for lk in launches:
        if lk.kind != "kernel":
            out.append(_kind_cost(lk))
            continue
        n = next(it)
        out.append(
            Cost(
                flops_per * n,
                reads * eb * n,
                (writes * eb * n) if writes else 4.0,
                "elementwise",
                rule=rule if n else "unknown",
            )
        )
    return out


def _copy(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    base = _base(a.op.name)
    if base in ("cat", "stack", "concat", "concatenate"):
        lists = a.lists()
        kernels = [lk for lk in launches if lk.kind == "kernel"]
        if not lists or not kernels:
            return None
        eb = _name_elem_bytes(kernels[0].name)
        total_n = float(sum(_numel(s) for s in lists[0][1]))
        return _spread(launches, Cost(0.0, total_n * eb, total_n * eb, "copy", rule="cat"), total_n, eb)
    ts = a.tensors()
    if not ts:
        return None
    dst = ts[0]
    src = ts[1] if len(ts) > 1 and base in ("copy", "copy_") else ts[0]
    n = float(_numel(dst[1]))
    read, write = float(_numel(src[1]) * src[2]), n * dst[2]
    return _spread(launches, Cost(0.0, read, write, "copy", rule="copy"), n, src[2])


def _fill(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    ts = a.tensors()
    if not ts:
        return None
    _, shape, eb = ts[0]
    n = float(_numel(shape))
    read = n * 1.0 if _base(a.op.name) == "masked_fill" else 0.0  # reads its mask
    return _spread(launches, Cost(0.0, read, n * eb, "memset", rule="fill"))


def _reduction(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    ts = a.tensors()
    if not ts:
        return None
    _, shape, eb = ts[0]
    n = float(_numel(shape))
    dims = a.concrete_ints(1)
    if dims is None:
        single = a.concrete_int(1)
        dims = [single] if single is not None and len(a.op.concrete_inputs) > 1 and shape else None
    if dims and shape:
        reduced = {d % len(shape) for d in dims}
        out_n = float(math.prod(s for j, s in enumerate(shape) if j not in reduced)) or 1.0
        rows_contiguous = (len(shape) - 1) in reduced
    else:
        out_n, rows_contiguous = 1.0, False
    access = "stream" if rows_contiguous or out_n == 1.0 else "reduce"
    out = _spread(launches, Cost(n, n * eb, out_n * eb, "reduction", access=access, rule="reduction"))
    if rows_contiguous:  # the vectorized input loop: one vector of REDUCE_VECTOR_ELEMENTS in flight per thread
        out = [
            replace(c, mlp_bytes=float(REDUCE_VECTOR_ELEMENTS * eb)) if "reduce_kernel<" in lk.name else c
            for c, lk in zip(out, launches)
        ]
    return out


def _conv(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    backward = "backward" in a.op.name
    ts = [(s, e) for _, s, e in a.tensors() if len(s) >= 3]
    if len(ts) < 2:
        return None
    (x, eb), (w, _) = (ts[1], ts[2]) if backward and len(ts) >= 3 else (ts[0], ts[1])
    stride = a.concrete_ints(4 if backward else 3) or [1] * (len(x) - 2)
    spatial = [max(1, (x[2 + j] - w[2 + j]) // max(1, stride[min(j, len(stride) - 1)]) + 1) for j in range(len(x) - 2)]
    fwd_flops = 2.0 * x[0] * w[0] * math.prod(w[1:]) * math.prod(spatial)
    out_b = float(x[0] * w[0] * math.prod(spatial) * eb)
    x_b, w_b = float(_numel(x) * eb), float(_numel(w) * eb)
    mains = [i for i, lk in enumerate(launches) if lk.kind == "kernel" and classify(lk.name) == "gemm"]
    out = []
    for i, lk in enumerate(launches):
        nm = lk.name.lower()
        if lk.kind != "kernel":
            out.append(_kind_cost(lk))
        elif i in mains:
            flops = (2.0 if backward else 1.0) * fwd_flops / len(mains)
            out.append(
                Cost(
                    flops,
                    (x_b + w_b + (out_b if backward else 0.0)) / len(mains),
                    (x_b + w_b if backward else out_b) / len(mains),
                    "gemm",
                    "tf32" if a.dtype() == "fp32" else a.dtype(),
                    rule="conv",
                )
            )
        elif "nchw" in nm or "nhwc" in nm:
            out.append(Cost(0.0, x_b, x_b, "copy", rule="conv.layout"))
        else:
            out.append(Cost(0.0, 0.0, 0.0, classify(lk.name, a.op.name), rule="conv.helper"))
    return out


def _elementwise(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    ts = a.tensors()
    lists = a.lists()
    if not ts and not lists:
        return None
    if not ts:
        return _optimizer(a, launches)
    base = _base(a.op.name)
    out_pos = _arg_index(a.op.name, "out") if len(ts) > 1 else None
    given_out = next(((s, e) for i, s, e in ts if i == out_pos), None)  # an ``out=`` tensor: written, not read
    sizes = [(_numel(s), e, len(s)) for i, s, e in ts if i != out_pos or given_out is None]
    n = max(k for k, _, _ in sizes)
    # the result's type: promoted over the tensors with dimensions (0-d ones take part as scalars)
    out_eb = max((e for k, e, nd in sizes if nd), default=max(e for _, e, _ in sizes))
    if base in _COMPARISONS:
        out_eb = 1
    inplace = a.op.name.endswith("_") and not a.op.name.endswith("__")
    read = float(sum(k * e for k, e, _ in sizes))
    if given_out is not None:
        write = float(_numel(given_out[0]) * given_out[1])
    else:
        write = float(sizes[0][0] * sizes[0][1] if inplace else n * out_eb)
    if base == "native_dropout":
        write += float(n)  # the keep mask, one byte per element
    streamed = float(sum(e for k, e, _ in sizes if k == n))  # per output element; broadcast inputs stay cached
    flops = float(n) * _math_flops_per_element(a)
    return _spread(launches, Cost(flops, read, write, "elementwise", rule="elementwise"), float(n), streamed)


def _math_flops_per_element(a: _Args) -> float:
    """SIMT operations per output element of an elementwise operator: :data:`GELU_FLOPS_PER_ELEMENT` for GELU and its
    gradient (``approximate`` read from the call, ``'none'`` when absent), one for any other."""
    base = _base(a.op.name)
    if base not in ("gelu", "gelu_backward"):
        return 1.0
    backward = base == "gelu_backward"
    text = a.concrete(_arg_index(a.op.name, "approximate") or (2 if backward else 1)).strip("'\" ")
    return GELU_FLOPS_PER_ELEMENT[("tanh" if text == "tanh" else "none", backward)]


Rule = Callable[[_Args, Sequence[Launch]], "list[Cost] | None"]


_GENERATED_CATEGORY = {
    "pointwise": "elementwise",
    "foreach": "elementwise",
    "reduction": "reduction",
    "persistent_reduction": "reduction",
    "scan": "reduction",
    "sort": "reduction",
    "template": "gemm",
}


def _generated(a: _Args, launches: Sequence[Launch]) -> list[Cost] | None:
    """A kernel TorchInductor generated, from what its source says (:class:`~rlclock.workload.kernel_code.KernelCode`):
    each load and store at the distinct elements its index reaches, a pointer's loads together at most its
    buffer (the launch's argument of that parameter) once per loop that reads it; the arithmetic per element
    over the iteration space. Indirect loads (gathers) make its access ``gather``."""
    code = a.op.code
    if code is None or len(launches) != 1 or code.kind == "template":
        return None
    caps: dict[str, float] = {}
    for param, dims in zip(code.args, a.op.input_dims, strict=False):
        if dims and all(isinstance(d, int) for d in dims):
            caps[param] = float(_numel(dims))  # type: ignore[arg-type]
    totals: dict[tuple[str, bool], list[float]] = {}
    loops: dict[tuple[str, bool], set[int]] = {}
    bytes_per: dict[tuple[str, bool], int] = {}
    gathered = 0.0
    for acc in code.accesses:
        key = (acc.arg, acc.store)
        totals.setdefault(key, []).append(acc.elements)
        loops.setdefault(key, set()).add(acc.loop)
        bytes_per[key] = acc.elem_bytes
        if acc.indirect:
            gathered += acc.elements * acc.elem_bytes
    read = write = 0.0
    for key, elements in totals.items():
        n = sum(elements)
        if key[0] in caps:
            n = min(n, caps[key[0]] * len(loops[key]))
        if key[1]:
            write += n * bytes_per[key]
        else:
            read += n * bytes_per[key]
    category = _GENERATED_CATEGORY.get(code.kind, "elementwise")
    access = "gather" if gathered > 0.5 * max(read + write, 1.0) else "stream"
    flops = code.ops_per_element * code.iterations
    return [
        Cost(
            flops,
            read,
            write,
            category,
            access=access,
            rule=f"inductor.{code.kind}",
            mlp_bytes=_generated_loads_in_flight(code, launches[0], read),
        )
    ]


GENERATED_MLP_BYTES = (16.0, 256.0)
"""Bounds of the bytes a thread of a generated kernel keeps in flight: at least one 128-bit vector load, at most
what its registers hold."""


def _generated_loads_in_flight(code: KernelCode, launch: Launch, read_bytes: float) -> float:
    """Bytes each thread of a generated kernel keeps in flight: a pointwise kernel or a persistent reduction loads
    its whole block at once (a program's rows, spread over its threads); a looped reduction one vector per pointer
    it reads in each pass of its loop."""
    low, high = GENERATED_MLP_BYTES
    if code.kind == "reduction":
        pointers = len({a.arg for a in code.accesses if not a.store and a.loop > 0})
        return float(min(high, max(low, VECTOR_LOAD_BYTES * pointers)))
    if launch.grid is None or launch.block is None:
        return VECTOR_LOAD_BYTES
    return float(min(high, max(low, read_bytes / launch.threads)))


def _rule(op_name: str) -> Rule:
    base = _base(op_name)
    low = op_name.lower()
    if base in _GEMM_OPS:
        return _gemm
    if "attention" in base and ("dot_product" in base or "flash" in base or "efficient" in base or "cudnn" in base):
        return _attention
    if base in ("embedding", "index_select", "gather"):
        return _embedding
    if base in ("embedding_dense_backward", "embedding_backward"):
        return _embedding_backward
    if base.startswith("nll_loss"):
        return _nll_loss
    if base in ("log_softmax", "softmax", "log_softmax_backward_data", "softmax_backward_data"):
        return _softmax
    if "layer_norm" in base or "rms_norm" in base:
        return _norm
    if base.startswith(("fused_adam", "fused_sgd", "fused_adagrad")) or "foreach" in low:
        return _optimizer
    if base in ("copy", "cat", "stack", "concat", "concatenate", "to_copy", "clone"):
        return _copy
    if base in _FILLS:
        return _fill
    if base in _REDUCTIONS:
        return _reduction
    if "convolution" in base:
        return _conv
    return _elementwise


def call_costs(op: LaunchOp | None, launches: Sequence[Launch], strict: bool = False) -> list[Cost]:
    """The cost of each device activity one operator call launched (module docstring).

    Args:
        op: The operator call (``None`` when the profile could not tell).
        launches: Its kernels, memcpys and memsets, in order.
        strict: Raise when a rule fails on the call's arguments (tests); by default the call falls back to
            the elementwise rule, then to what each activity's kind says — a profile must never stop a run.

    Returns:
        One :class:`Cost` per launch.
    """
    costs: list[Cost] | None = None
    generated = op is not None and (op.code is not None or op.name.startswith(TRITON_PREFIX))
    if generated:  # its arguments are whole buffers: only its source can say what it touches
        rules: tuple[Rule, ...] = (_generated,)
    elif op is not None:
        rules = tuple(dict.fromkeys((_rule(op.name), _elementwise)))
    if op is not None:
        for rule in rules:
            try:
                costs = rule(_Args(op), launches)
            except Exception:  # arguments a rule does not expect must not stop a training run
                if strict:
                    raise
                costs = None
            if costs is not None and len(costs) == len(launches):
                break
            costs = None
    if costs is None:
        costs = [_kind_cost(lk, classify(lk.name, op.name if op else None)) for lk in launches]
    if op is None:
        return costs
    dtype = _Args(op).dtype()  # the SIMT kernels' type is their operator's
    return [c if c.category in ("gemm", "attention") else replace(c, dtype=dtype) for c in costs]


def costs(ops: Sequence[LaunchOp | None], launches: Sequence[Launch], strict: bool = False) -> list[Cost]:
    """:func:`call_costs` over a step: activities grouped by their operator call (``LaunchOp.call``; ``-1``
    or ``None`` stands alone), each group's costs returned in the activities' order."""
    if len(ops) != len(launches):
        raise ValueError(f"{len(ops)} operators for {len(launches)} launches")
    groups: dict[tuple[int, int], list[int]] = {}
    for i, op in enumerate(ops):
        key = (0, op.call) if op is not None and op.call >= 0 else (1, i)
        groups.setdefault(key, []).append(i)
    out: list[Cost | None] = [None] * len(launches)
    for idx in groups.values():
        for i, c in zip(idx, call_costs(ops[idx[0]], [launches[i] for i in idx], strict), strict=True):
            out[i] = c
    return [c for c in out if c is not None]


def launch_of(k: Kernel) -> Launch:
    """What the rules see of a trace's kernel: its kind from its name (``Memset``/``Memcpy``) and, for those,
    the bytes it stored."""
    kind = activity_kind(k.name)
    nbytes = int(k.dram_write_bytes) if kind != "kernel" else None
    return Launch(k.name, kind, k.launch_grid, k.launch_block, nbytes)


def refresh_costs(trace: KernelTrace, strict: bool = False) -> KernelTrace:
    """The trace with the FLOPs, bytes, category, type and access of every kernel that carries its
    :class:`~rlclock.workload.trace.LaunchOp` derived again by these rules (measurements kept) — brings a
    profiled trace up to date when the rules improve. Kernels without one are left as they are; a profiled trace
    whose kernels carry none (written before operator calls were recorded) says so in one warning, with how to
    profile it again."""
    carrying = [i for i, k in enumerate(trace) if k.launch_op is not None]
    measured = sum(1 for k in trace if k.measured)
    if measured and len(carrying) < 0.5 * measured:
        _log.warning(
            "trace %r: %d of its %d measured kernels carry no operator call (it was profiled before rlclock "
            "recorded them), so their costs cannot be derived again; they keep the costs they were written "
            "with, or are planned from their measured time. To refresh them, profile the step again "
            "(rlclock apply --save DIR -- python train.py).",
            trace.name,
            len(trace) - len(carrying),
            len(trace),
        )
    new = costs([trace[i].launch_op for i in carrying], [launch_of(trace[i]) for i in carrying], strict)
    kernels = list(trace)
    for i, c in zip(carrying, new, strict=True):
        kernels[i] = replace(kernels[i], **kernel_fields(c))
    return trace.with_kernels(kernels)


def kernel_fields(c: Cost) -> dict[str, Any]:
    """The :class:`~rlclock.workload.trace.Kernel` fields a cost sets: a kernel no rule knew does no work by them
    and is marked to take its work from its measured time (``cost_from="time"``)."""
    timed = not c.known and c.flops == 0 and c.read_bytes + c.write_bytes == 0
    return {
        "flops": c.flops,
        "dram_read_bytes": c.read_bytes,
        "dram_write_bytes": c.write_bytes,
        "category": c.category,
        "dtype": c.dtype,
        "access": c.access,
        "gemm_bmnk": c.gemm_bmnk,
        "mlp_bytes": c.mlp_bytes if c.known else None,
        "cost_from": "time" if timed else "rules",
    }
