"""What TorchInductor's generated code says about each kernel of a compiled step.

A step run through ``torch.compile`` launches Triton kernels that Inductor generated (``triton_poi_…``
pointwise, ``triton_red_…`` looped reductions, ``triton_per_…`` persistent reductions, ``triton_tem_…``
templates) and library kernels it calls (cuBLAS products, fused attention). The profiler names a generated
kernel's own arguments — whole buffers — so the operator rules of :mod:`rlclock.workload.op_costs` would
count every buffer a kernel touches in full: a loss kernel that reads one logit per row would be charged the
whole logits tensor. The source Inductor wrote says what each kernel actually touches, so this module reads
it:

* :func:`parse_kernel` reads one Triton kernel: its iteration space (``xnumel``, ``r0_numel`` … as
  literals, or as arguments when shapes are dynamic), and each ``tl.load``/``tl.store``/``tl.atomic_add``
  with the pointer it uses and how many distinct elements its index expression reaches over that space (a
  dimension's index divided or taken modulo a constant reaches fewer; an index that reads another load's
  value — a gather — reaches what that load reached), and the arithmetic per element. The result is a
  :class:`KernelCode`, which the cost rules turn into bytes and operations
  (:func:`rlclock.workload.op_costs.call_costs`) and which a trace keeps with the kernel's launch.
* :func:`parse_module` reads an output-code module (the Python file Inductor writes per compiled graph):
  the kernels it defines, and the order in which its ``call`` launches them and the library operators, with
  each argument's shape and type resolved from the buffers' definitions — what a graph replayed as a CUDA
  graph (``mode="reduce-overhead"``) launches without the profiler seeing any operator.

Only the text is read (nothing is imported or executed), so a trace profiled on a GPU can be costed again
anywhere. Anything the reader does not understand leaves the kernel to be planned from its measured time.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any

from rlclock.workload.kernel_code import TRITON_PREFIX, Access, InductorCodeError, KernelCode
from rlclock.workload.trace import LaunchOp, Shape

POINTER_BYTES = {
    "fp64": 8,
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8e4nv": 1,
    "fp8e5": 1,
    "fp8e4b15": 1,
    "i64": 8,
    "u64": 8,
    "i32": 4,
    "u32": 4,
    "i16": 2,
    "u16": 2,
    "i8": 1,
    "u8": 1,
    "i1": 1,
}
"""Bytes per element of a Triton pointer type (``'*bf16'`` → 2)."""

MUFU_OPS = 16.0
"""A special-function-unit instruction (``ex2``, ``lg2``, ``rsqrt``, ``rcp``, ``sin``, ``cos``) in the cost rules'
units of SIMT work (two per FP32 lane-cycle, a multiply-add two): an SM issues 16 of them per cycle against 128
FP32 multiply-adds (compute capability 7.0–9.0, CUDA C++ Programming Guide, "Arithmetic Instructions"), so one costs
eight lane-cycles."""
MATH_OPS: dict[str, float] = {
    "exp": MUFU_OPS + 2.0,
    "exp2": MUFU_OPS,
    "log": MUFU_OPS + 2.0,
    "log2": MUFU_OPS,
    "rsqrt": MUFU_OPS,
    "sqrt": MUFU_OPS + 2.0,
    "sin": MUFU_OPS + 4.0,
    "cos": MUFU_OPS + 4.0,
    "div_rn": MUFU_OPS + 8.0,
    "fdiv": MUFU_OPS + 2.0,
    "tanh": MUFU_OPS + 10.0,
    "sigmoid": 2.0 * MUFU_OPS + 4.0,
    "expm1": MUFU_OPS + 8.0,
    "log1p": MUFU_OPS + 8.0,
    "pow": 2.0 * MUFU_OPS + 4.0,
    "erf": 40.0,
    "erfc": 40.0,
    "atan": 30.0,
    "atan2": 40.0,
    "lgamma": 60.0,
    "isnan": 1.0,
    "isinf": 1.0,
    "abs": 1.0,
    "floor": 1.0,
    "ceil": 1.0,
    "signbit": 1.0,
    "nextafter": 2.0,
    "fmod": MUFU_OPS + 8.0,
}
"""SIMT operations per call of a math function (``libdevice.erf``, ``tl_math.exp`` …), in the units of
:data:`MUFU_OPS`: the special-function instruction the approximation uses, with its range reduction and scaling;
``erf`` is a polynomial on each side of a branch a warp often takes both ways (the count of PyTorch's exact GELU,
:data:`rlclock.workload.op_costs.GELU_FLOPS_PER_ELEMENT`)."""
DEFAULT_MATH_OPS = MUFU_OPS
"""Operations of a math function not in :data:`MATH_OPS`."""
HELPER_OPS: dict[str, float] = {
    "online_softmax_combine": 2.0 * MATH_OPS["exp"] + 6.0,
    "online_softmax_reduce": 2.0 * MATH_OPS["exp"] + 6.0,
    "welford_combine": 10.0,
    "welford_reduce": 10.0,
    "welford": 10.0,
    "maximum": 1.0,
    "minimum": 1.0,
    "max2": 1.0,
    "min2": 1.0,
    "sum2": 1.0,
    "any": 1.0,
    "prod": 1.0,
    "exp": MATH_OPS["exp"],
}
"""SIMT operations per element of the ``triton_helpers`` functions generated code calls (an online softmax step
rescales the running sum: two exponentials, a maximum and a multiply-add; a Welford step updates a mean and a
sum of squares)."""
REDUCTIONS = (
    "sum",
    "max",
    "min",
    "argmax",
    "argmin",
    "prod",
    "xor_sum",
    "reduce",
    "max2",
    "min2",
    "sum2",
    "online_softmax_reduce",
    "welford_reduce",
    "welford",
    "any",
    "all",
)
"""Functions that reduce along a dimension: their result no longer varies along the reduction dimensions."""

KINDS = {
    "poi": "pointwise",
    "red": "reduction",
    "per": "persistent_reduction",
    "tem": "template",
    "for": "foreach",
    "mix": "reduction",
    "spl": "reduction",
    "sca": "scan",
    "sor": "sort",
}
"""Kernel kind by the name's second part (``triton_red_fused_…`` → ``reduction``)."""

_RANGE_INDEX = re.compile(r"^(x|y|z|r\d*_?)index$")
_NUMEL = re.compile(r"^(x|y|z|r\d*_?)numel$")
_DTYPES = {
    "torch.float32": "float",
    "torch.float": "float",
    "torch.bfloat16": "c10::BFloat16",
    "torch.float16": "c10::Half",
    "torch.half": "c10::Half",
    "torch.float64": "double",
    "torch.int64": "long int",
    "torch.long": "long int",
    "torch.int32": "int",
    "torch.int": "int",
    "torch.bool": "bool",
    "torch.uint8": "unsigned char",
    "torch.int8": "signed char",
    "torch.int16": "short int",
    "torch.float8_e4m3fn": "c10::Float8_e4m3fn",
    "torch.float8_e5m2": "c10::Float8_e5m2",
}
"""Profiler type names (``Input type``) of the dtypes Inductor's code names."""


# -- one kernel ----------------------------------------------------------------------------------------------

Card = dict[str, float]
"""Distinct values an expression takes, per dimension of the iteration space it depends on."""


def _kind(name: str) -> str:
    parts = name.split("_")
    return KINDS.get(parts[1], "other") if len(parts) > 1 and name.startswith(TRITON_PREFIX) else "other"


def _dict_literal(src: str, key: str) -> dict[str, Any]:
    """The dict literal passed as ``key=`` to the kernel's decorator (``{}`` when absent or unreadable)."""
    m = re.search(rf"\b{key}=\{{", src)
    if not m:
        return {}
    start, depth = m.end() - 1, 0
    for i in range(start, len(src)):
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            text = src[start : i + 1]
            break
    else:
        return {}
    text = re.sub(r"DeviceProperties\([^)]*\)", "None", text)
    text = re.sub(r"\bset\(\)", "[]", text)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _function(src: str) -> ast.FunctionDef:
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise InductorCodeError(f"not Python source ({exc})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.startswith(TRITON_PREFIX):
            return node
    raise InductorCodeError("no triton_* kernel function in the source")


def _call_name(node: ast.AST) -> str:
    """``tl.load`` for ``tl.load(...)``, ``libdevice.erf`` for ``libdevice.erf(...)``, else ``""``."""
    if isinstance(node, ast.Call):
        f = node.func
        parts = []
        while isinstance(f, ast.Attribute):
            parts.append(f.attr)
            f = f.value
        if isinstance(f, ast.Name):
            parts.append(f.id)
        return ".".join(reversed(parts))
    return ""


class _Reader:
    """Walks one kernel body in order, keeping what each name depends on."""

    def __init__(self, numels: dict[str, float], signature: dict[str, str]) -> None:
        self.numels = numels
        self.signature = signature
        self.cards: dict[str, Card] = {}
        self.indirect: set[str] = set()
        self.accesses: list[Access] = []
        self.ops = 0.0
        self.loop = 0
        self.loops = 0
        self.seen: set[tuple[str, bool, str, int]] = set()

    # cardinality of an index expression
    def card(self, node: ast.AST) -> Card:
        if isinstance(node, ast.Name):
            m = _RANGE_INDEX.match(node.id)
            if m:
                dim = m.group(1)
                return {dim: self.numels.get(dim, 1.0)}
            return dict(self.cards.get(node.id, {}))
        if isinstance(node, ast.Constant):
            return {}
        if isinstance(node, ast.BinOp):
            if (
                isinstance(node.op, (ast.FloorDiv, ast.Mod))
                and isinstance(node.right, ast.Constant)
                and isinstance(node.right.value, int)
                and node.right.value > 0
            ):
                inner = self.card(node.left)
                c = float(node.right.value)
                if isinstance(node.op, ast.FloorDiv):
                    return {d: max(1.0, math.ceil(v / c)) for d, v in inner.items()}
                return {d: min(v, c) for d, v in inner.items()}
            left, right = self.card(node.left), self.card(node.right)
            return self._join(left, right)
        if isinstance(node, (ast.UnaryOp,)):
            return self.card(node.operand)
        if isinstance(node, ast.Call):
            name = _call_name(node)
            out: Card = {}
            if name.endswith("arange"):
                return {}
            base = name.rsplit(".", 1)[-1]
            if name.startswith(("tl.", "triton_helpers.")) and base in REDUCTIONS and "combine" not in base:
                reduced: Card = {}
                for a in node.args:
                    reduced = self._join(reduced, self.card(a))
                return {d: v for d, v in reduced.items() if not d.startswith("r")}
            for a in [*node.args, *(k.value for k in node.keywords)]:
                out = self._join(out, self.card(a))
            if isinstance(node.func, ast.Attribute):  # a method's receiver: ``tmp0.to(tl.float32)``
                out = self._join(out, self.card(node.func.value))
            return out
        if isinstance(node, ast.Attribute):
            return self.card(node.value)
        if isinstance(node, ast.Subscript):
            return self.card(node.value)
        out = {}
        for child in ast.iter_child_nodes(node):
            out = self._join(out, self.card(child))
        return out

    def _join(self, a: Card, b: Card) -> Card:
        """Two terms of one expression: distinct values multiply within a dimension (digits of one index), up
        to the dimension's size."""
        out = dict(a)
        for d, v in b.items():
            out[d] = min(out[d] * v, self.numels.get(d, out[d] * v)) if d in out else v
        return out

    def elements(self, card: Card) -> float:
        return float(math.prod(min(v, self.numels.get(d, v)) for d, v in card.items())) if card else 1.0

    def depends_on_load(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.indirect for n in ast.walk(node))

    # statements
    def access(self, call: ast.Call, store: bool, also_load: bool = False) -> Card:
        if not call.args:
            return {}
        ptr_expr = call.args[0]
        ptr = next((n.id for n in ast.walk(ptr_expr) if isinstance(n, ast.Name) and n.id in self.signature), None)
        if ptr is None:
            return {}
        index = ptr_expr.right if isinstance(ptr_expr, ast.BinOp) and isinstance(ptr_expr.op, ast.Add) else ptr_expr
        card = self.card(index)
        key = (ptr, store, ast.dump(index), self.loop if self.loops_reread else 0)
        if key not in self.seen:
            self.seen.add(key)
            ebytes = POINTER_BYTES.get(self.signature[ptr].lstrip("*"), 4)
            indirect = self.depends_on_load(index)
            for is_store in (False, True) if also_load else (store,):
                self.accesses.append(Access(ptr, is_store, self.elements(card), ebytes, self.loop, indirect))
        return card

    loops_reread = True

    def arithmetic(self, node: ast.AST) -> float:
        n = 0.0
        for sub in ast.walk(node):
            if isinstance(sub, (ast.BinOp, ast.Compare, ast.BoolOp)):
                n += 1.0
            elif isinstance(sub, ast.Call):
                name = _call_name(sub)
                base = name.rsplit(".", 1)[-1]
                if name.startswith(("libdevice.", "tl_math.", "tl.math.")):
                    n += MATH_OPS.get(base, DEFAULT_MATH_OPS)
                elif name.startswith("triton_helpers."):
                    n += HELPER_OPS.get(base, 1.0)
                elif base in (
                    "where",
                    "maximum",
                    "minimum",
                    "sum",
                    "max",
                    "min",
                    "argmax",
                    "argmin",
                    "to",
                    "fma",
                    "abs",
                    "sigmoid",
                    "exp",
                    "log",
                ):
                    n += 2.0 if base in ("fma", "sigmoid", "exp", "log") else 1.0
        return n

    def run(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.For):
                self.loops += 1
                outer, self.loop = self.loop, self.loops
                self.run(stmt.body)
                self.loop = outer
                continue
            if isinstance(stmt, (ast.If, ast.With)):
                self.run(stmt.body)
                self.run(getattr(stmt, "orelse", []))
                continue
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)) else None
            if value is None:
                continue
            targets = [t.id for t in _target_names(stmt)]
            loaded: Card | None = None
            for call in [n for n in ast.walk(value) if isinstance(n, ast.Call)]:
                name = _call_name(call)
                if name == "tl.load":
                    c = self.access(call, store=False)
                    loaded = c if loaded is None else self._join(loaded, c)
                elif name == "tl.store":
                    self.access(call, store=True)
                elif name in ("tl.atomic_add", "tl.atomic_max", "tl.atomic_min", "tl.atomic_xchg", "tl.atomic_cas"):
                    self.access(call, store=True, also_load=True)
            if targets and all(_NUMEL.match(t) for t in targets):
                continue
            if loaded is not None:
                for t in targets:
                    self.cards[t] = loaded
                    self.indirect.add(t)
                continue
            card = self.card(value)
            for t in targets:
                self.cards[t] = card
                if self.depends_on_load(value):
                    self.indirect.add(t)
            if targets and any(t.startswith(("tmp", "_tmp")) for t in targets):
                # executed over the dimensions its value varies along (a row's statistics once per row)
                self.ops += self.arithmetic(value) * math.prod(self.numels.get(d, 1.0) for d in card)


def _target_names(stmt: ast.stmt) -> list[ast.Name]:
    """The names an assignment binds (``a = …``, ``a, b = …``, ``a: T = …``)."""
    targets = list(getattr(stmt, "targets", [])) or [getattr(stmt, "target", None)]
    out: list[ast.Name] = []
    for t in targets:
        if isinstance(t, ast.Name):
            out.append(t)
        elif isinstance(t, (ast.Tuple, ast.List)):
            out.extend(e for e in t.elts if isinstance(e, ast.Name))
    return out


def parse_kernel(src: str, launch_numels: dict[str, float] | None = None) -> KernelCode:
    """Read one generated Triton kernel (module docstring).

    Args:
        src: The kernel's source: a kernel file Inductor wrote, or the text its output code passes to
            ``async_compile.triton``.
        launch_numels: Sizes passed at launch, by parameter (``{"xnumel": 8192}``), for dimensions the source
            leaves symbolic (dynamic shapes).

    Raises:
        InductorCodeError: The source holds no kernel, or a dimension's size is neither written in it nor given.
    """
    fn = _function(src)
    meta = _dict_literal(src, "inductor_meta")
    triton_meta = _dict_literal(src, "triton_meta")
    signature = {k: str(v) for k, v in (triton_meta.get("signature") or {}).items() if str(v).startswith("*")}
    params = [a.arg for a in fn.args.args]
    if not signature:  # an older layout: pointers by name
        signature = {p: "*fp32" for p in params if "ptr" in p}
    numels: dict[str, float] = {}
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            m = _NUMEL.match(stmt.targets[0].id)
            if m and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, int):
                numels[m.group(1)] = float(stmt.value.value)
    for p in params:
        m = _NUMEL.match(p)
        if m and m.group(1) not in numels:
            value = (launch_numels or {}).get(p)
            if value is None:
                raise InductorCodeError(
                    f"kernel {fn.name}: the size {p} is not written in its source and was not given at launch"
                )
            numels[m.group(1)] = float(value)
    for alias, dim in (("r", "r0_"),):  # older code names the one reduction dimension r
        if alias in numels and dim not in numels:
            numels[dim] = numels[alias]
    reader = _Reader(numels, signature)
    reader.loops_reread = _kind(fn.name) == "reduction"
    reader.run(fn.body)
    num_gb, flop = meta.get("kernel_num_gb"), meta.get("kernel_flop")
    dims = tuple((d, n) for d, n in numels.items() if not (d == "r" and "r0_" in numels))
    iterations = float(math.prod(n for _, n in dims)) if dims else 1.0
    return KernelCode(
        fn.name,
        _kind(fn.name),
        dims,
        tuple(reader.accesses),
        reader.ops / iterations if iterations else 0.0,
        tuple(params),
        float(num_gb) * 1e9 if isinstance(num_gb, (int, float)) else None,
        float(flop) if isinstance(flop, (int, float)) else None,
    )


def numels_at_launch(src: str, concrete: tuple[str, ...]) -> dict[str, float]:
    """The sizes a launch passes for the kernel's size parameters, from the profiler's ``Concrete Inputs``
    (one per parameter, in order)."""
    try:
        params = [a.arg for a in _function(src).args.args]
    except InductorCodeError:
        return {}
    out: dict[str, float] = {}
    for p, v in zip(params, concrete, strict=False):
        if _NUMEL.match(p):
            try:
                out[p] = float(v)
            except ValueError:
                continue
    return out


# -- an output-code module -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphLaunch:
    """One launch in an output-code module's ``call``: a generated kernel or a library operator.

    Attributes:
        name: The kernel's name (``triton_…``) or the operator (``aten::mm``).
        op: The launch as the cost rules read an operator call (its arguments' shapes, types, scalars).
        code: The generated kernel's :class:`KernelCode` (``None`` for an operator).
    """

    name: str
    op: LaunchOp
    code: KernelCode | None = None

    @property
    def generated(self) -> bool:
        """True for a generated (Triton) kernel."""
        return self.code is not None or self.name.startswith(TRITON_PREFIX)


@dataclass
class ModuleCode:
    """An output-code module: its kernels by name and the launches of its ``call``, in order."""

    kernels: dict[str, str] = field(default_factory=dict)
    launches: list[GraphLaunch] = field(default_factory=list)


_EXTERN = {
    "extern_kernels.mm": "aten::mm",
    "extern_kernels.addmm": "aten::addmm",
    "extern_kernels.bmm": "aten::bmm",
    "extern_kernels.baddbmm": "aten::baddbmm",
    "extern_kernels.convolution": "aten::convolution",
    "extern_kernels._scaled_mm": "aten::_scaled_mm",
}


def _op_name(call: str) -> str | None:
    if call in _EXTERN:
        return _EXTERN[call]
    m = re.match(r"^(?:torch\.ops\.)?(aten|prims|_c10d_functional|c10d)\.(\w+)(?:\.\w+)?$", call)
    if m:
        return f"{m.group(1)}::{m.group(2)}"
    return None


class _Buffers:
    """Shapes and types of the names in ``call``: inputs checked by ``assert_size_stride``, buffers from
    ``empty_strided_*``, views from ``reinterpret_tensor``, aliases."""

    def __init__(self) -> None:
        self.shape: dict[str, Shape] = {}
        self.dtype: dict[str, str] = {}

    def of(self, node: ast.AST) -> tuple[Shape | None, str | None]:
        if isinstance(node, ast.Name):
            return self.shape.get(node.id), self.dtype.get(node.id)
        if isinstance(node, ast.Call) and _call_name(node) == "reinterpret_tensor" and len(node.args) >= 2:
            _, dtype = self.of(node.args[0])
            return _shape(node.args[1]), dtype
        if isinstance(node, ast.Subscript):
            return None, self.of(node.value)[1]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("view", "reshape")
        ):
            return _view_shape(node.args), self.of(node.func.value)[1]
        return None, None

    def define(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Expr) and _call_name(stmt.value) == "assert_size_stride":
            call = stmt.value
            assert isinstance(call, ast.Call)
            if len(call.args) >= 2 and isinstance(call.args[0], ast.Name):
                shape = _shape(call.args[1])
                if shape is not None:
                    self.shape.setdefault(call.args[0].id, shape)
            return
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            return
        target = stmt.targets[0]
        names = (
            [target.id]
            if isinstance(target, ast.Name)
            else [t.id for t in getattr(target, "elts", []) if isinstance(t, ast.Name)]
        )
        value = stmt.value
        fname = _call_name(value)
        if fname.startswith("empty_strided") and isinstance(value, ast.Call) and len(value.args) >= 3:
            shape = _shape(value.args[0])
            for n in names:
                if shape is not None:
                    self.shape[n] = shape
                self.dtype[n] = _DTYPES.get(ast.unparse(value.args[2]), "float")
        elif isinstance(value, (ast.Name, ast.Call, ast.Subscript)) and len(names) == 1:
            shape, dtype = self.of(value)
            if shape is not None:
                self.shape[names[0]] = shape
            if dtype is not None:
                self.dtype[names[0]] = dtype


def _view_shape(args: list[ast.expr]) -> Shape | None:
    """The shape of ``.view(a, b)`` or ``.view((a, b))``."""
    if len(args) == 1:
        return _shape(args[0])
    dims = [_shape(ast.Tuple(elts=[a], ctx=ast.Load())) for a in args]
    return tuple(d[0] for d in dims if d) if all(d and len(d) == 1 for d in dims) else None


def _shape(node: ast.AST) -> Shape | None:
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def parse_module(src: str) -> ModuleCode:
    """Read an output-code module (module docstring): its kernels and its ``call``'s launches in order.

    Raises:
        InductorCodeError: The source is not Python or holds no ``call``.
    """
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise InductorCodeError(f"not Python source ({exc})") from None
    out = ModuleCode()
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _call_name(node.value).endswith("async_compile.triton")
            and len(node.value.args) >= 2
        ):
            name, text = node.value.args[0], node.value.args[1]
            if isinstance(name, ast.Constant) and isinstance(text, ast.Constant) and isinstance(text.value, str):
                out.kernels[str(name.value)] = text.value
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    call = functions.get("call")
    if call is None:
        raise InductorCodeError("no call() in the module")
    _Launches(out, functions).run(call.body)
    return out


class _Launches:
    """Collects a module's launches in the order ``call`` makes them, entering the graph partitions it calls
    (``self.partitions[i](...)`` runs ``partition_i``: the parts replayed as CUDA graphs)."""

    def __init__(self, module: ModuleCode, functions: dict[str, ast.FunctionDef]) -> None:
        self.module = module
        self.functions = functions
        self.buffers = _Buffers()
        self.codes: dict[str, KernelCode | None] = {}
        self.depth = 0

    def partition(self, node: ast.AST) -> ast.FunctionDef | None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                f = sub.func
                if (
                    isinstance(f, ast.Subscript)
                    and isinstance(f.slice, ast.Constant)
                    and ast.unparse(f.value).endswith("partitions")
                ):
                    return self.functions.get(f"partition_{f.slice.value!s}")
                if isinstance(f, ast.Name) and f.id.startswith("partition_"):
                    return self.functions.get(f.id)
        return None

    def run(self, body: list[ast.stmt]) -> None:
        for stmt in _statements(body):
            part = self.partition(stmt)
            if part is not None and self.depth < 4:
                self.depth += 1
                self.run(part.body)
                self.depth -= 1
            self.buffers.define(stmt)
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
            if isinstance(value, ast.Call):
                self.launch(stmt, value)

    def launch(self, stmt: ast.stmt, value: ast.Call) -> None:
        kernels = self.module.kernels
        fname = _call_name(value)
        if fname.endswith(".run") and fname[:-4] in kernels:
            kname = fname[:-4]
            op = _launch_op(kname, value, self.buffers)
            if kname not in self.codes:
                try:
                    self.codes[kname] = parse_kernel(
                        kernels[kname], numels_at_launch(kernels[kname], op.concrete_inputs)
                    )
                except InductorCodeError:
                    self.codes[kname] = None
            self.module.launches.append(GraphLaunch(kname, op, self.codes[kname]))
            return
        opname = _op_name(fname)
        receiver = None
        if opname is None and isinstance(value.func, ast.Attribute) and value.func.attr in TENSOR_METHODS:
            opname, receiver = f"aten::{value.func.attr}", value.func.value
        if opname is not None and not opname.endswith(("::empty_strided", "::as_strided")):
            self.module.launches.append(GraphLaunch(opname, _launch_op(opname, value, self.buffers, receiver)))
            if isinstance(stmt, ast.Assign):  # an operator's output: shapes follow from assert_size_stride
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        self.buffers.dtype.setdefault(t.id, _first_dtype(value, self.buffers))


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``call`` in order, ``with`` blocks (the stream guard) opened."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.With, ast.If)):
            out.extend(_statements(stmt.body))
        else:
            out.append(stmt)
    return out


def _first_dtype(call: ast.Call, buffers: _Buffers) -> str:
    for a in call.args:
        dtype = buffers.of(a)[1]
        if dtype is not None:
            return dtype
    return "float"


def _schema(op_name: str, keywords: set[str]) -> list[str] | None:
    """The argument names of the first overload of ``op_name`` (``aten::convolution``) that takes every one of
    ``keywords``, from PyTorch's operator registry (``None`` without PyTorch or for an unknown operator)."""
    if not keywords:
        return None
    ns, _, short = op_name.partition("::")
    try:
        import torch

        packet = getattr(getattr(torch.ops, ns), short)
        for overload in ("default", *packet.overloads()):
            names = [a.name for a in getattr(packet, overload)._schema.arguments]
            if keywords <= set(names):
                return names
    except Exception:  # an operator this PyTorch does not know: keywords stay unplaced
        return None
    return None


def _argument(node: ast.AST, buffers: _Buffers, fallback: str) -> tuple[Shape, str, str]:
    """One argument as the profiler records it: ``(dims, type, concrete value)``."""
    shape, dtype = buffers.of(node)
    if isinstance(node, ast.Constant) and not isinstance(node.value, str):
        return (), "Scalar", str(node.value)
    if isinstance(node, (ast.Tuple, ast.List)):
        try:
            return (), "int[]", str(list(ast.literal_eval(node)))
        except (ValueError, SyntaxError):
            return (), "", ""
    if shape is not None or isinstance(node, (ast.Name, ast.Call, ast.Subscript)):
        return shape or (), dtype or fallback, ""
    return (), "", ""


def _launch_op(name: str, call: ast.Call, buffers: _Buffers, receiver: ast.AST | None = None) -> LaunchOp:
    """A launch as the profiler would have recorded its operator: per argument its shape and type (a tensor whose
    type the code does not say takes the call's first known type), a scalar's value; keyword arguments at their
    places in the operator's schema, ``out=`` last. ``receiver``: the tensor a method is called on (its first
    argument)."""
    fallback = _first_dtype(call, buffers)
    positional = ([receiver] if receiver is not None else []) + list(call.args)
    args = [_argument(a, buffers, fallback) for a in positional]
    keywords = {k.arg: k.value for k in call.keywords if k.arg and k.arg not in ("out", "stream")}
    names = _schema(name, set(keywords)) if not name.startswith(TRITON_PREFIX) else None
    if names is not None:
        args += [((), "", "")] * max(0, len(names) - len(args))
        for key, node in keywords.items():
            args[names.index(key)] = _argument(node, buffers, fallback)
    out = next((k.value for k in call.keywords if k.arg == "out"), None)
    if out is not None:  # out= is the last tensor of the schema's .out form
        args.append(_argument(out, buffers, fallback))
        dtype = buffers.of(out)[1]
        if dtype is not None and name in _SAME_TYPE:  # a product's operands are of its output's type
            args = [(d, dtype if t not in ("", "Scalar", "int[]") else t, c) for d, t, c in args]
    return LaunchOp(name, tuple(a[0] for a in args), tuple(a[1] for a in args), tuple(a[2] for a in args))


TENSOR_METHODS = frozenset(
    {
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "copy_",
        "zero_",
        "fill_",
        "add_",
        "mul_",
        "div_",
        "clone",
        "contiguous",
        "cumsum",
        "argmax",
        "index_put_",
        "scatter_add_",
    }
)
"""Tensor methods the output code calls that launch kernels of their own (``workspace[…].view(…).sum(dim=0)``)."""

_SAME_TYPE = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})


# -- a profiled step -------------------------------------------------------------------------------------------

GRAPH_CALL_BASE = 1 << 40
"""Call ids given to launches found in output code (above any id the profiler gives its operators)."""
LOOKAHEAD_LAUNCHES = 8
"""How far ahead in a graph's launches a generated kernel is looked for before another graph is tried."""


@dataclass
class InductorCode:
    """The code TorchInductor generated for a process (:func:`rlclock.deploy.capture.inductor_code`'s
    ``{path: source}``), read once: output-code modules and kernel files by path."""

    modules: list[ModuleCode] = field(default_factory=list)
    kernel_files: dict[str, str] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    _codes: dict[tuple[str, tuple[str, ...]], KernelCode | None] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, sources: dict[str, str]) -> InductorCode:
        """Sort ``{path: source}`` into modules (those with a ``call``) and kernel files."""
        out = cls()
        for path, src in sources.items():
            if "def call(" in src:
                try:
                    out.modules.append(parse_module(src))
                except InductorCodeError:
                    out.unreadable.append(path)
            elif "@triton.jit" in src:
                out.kernel_files[path] = src
        return out

    def kernel(self, path: str, concrete: tuple[str, ...]) -> KernelCode | None:
        """The kernel in file ``path`` (a profiled launch's ``kernel_file``), sized by the launch's ``concrete``
        inputs where the source leaves a size symbolic; ``None`` if the file is unknown or unreadable."""
        src = self.kernel_files.get(path)
        if src is None:
            return None
        key = (path, concrete)
        if key not in self._codes:
            try:
                self._codes[key] = parse_kernel(src, numels_at_launch(src, concrete))
            except InductorCodeError:
                self._codes[key] = None
        return self._codes[key]

    def align(
        self, names: list[str], kinds: list[str], ops: list[LaunchOp | None], library_kind: Any = None
    ) -> list[LaunchOp | None]:
        """The operator of every kernel a graph replay launched, found in the output code's launches.

        A replayed CUDA graph's kernels carry no operator in the profile. Walking the step's device activities
        in order, a generated kernel is found by name among the launches of the graph last followed (up to
        :data:`LOOKAHEAD_LAUNCHES` ahead), else where the graph that goes on as the trace does launches it; a
        library kernel (a cuBLAS product, fused attention, a PyTorch reduction) joins the library call before it
        when it is that call's helper (:data:`HELPERS`) or its first kernel of the call's own category after
        helpers, and otherwise takes the graph's next library launch. Activities that already have an operator
        (launched eagerly) and memsets and memcopies keep theirs.

        Args:
            names: Device activities' names, in order.
            kinds: Their kinds (``kernel``, ``memset``, ``memcpy``).
            ops: Their operators where the profile knew them.
            library_kind: ``(kernel name, operator name) -> category`` (:func:`rlclock.workload.kernel_names.classify`)
                to tell a library kernel's call by its category (default: every one starts a call).

        Returns:
            ``ops`` with the found launches filled in (each launch its own call id).
        """
        index: dict[str, list[tuple[int, int]]] = {}
        for m, mod in enumerate(self.modules):
            for q, launch in enumerate(mod.launches):
                if launch.generated:
                    index.setdefault(launch.name, []).append((m, q))
        out = list(ops)
        cur: tuple[int, int] | None = None
        last: LaunchOp | None = None  # the library call the last library kernel belonged to
        last_kind = ""  # its category (by its operator)
        last_has_own = False  # it has launched a kernel of its own category (not only helpers)
        for i, (name, kind, op) in enumerate(zip(names, kinds, ops, strict=True)):
            if op is not None or kind != "kernel":
                continue
            if name.startswith(TRITON_PREFIX):
                found = None
                if cur is not None:
                    launches = self.modules[cur[0]].launches
                    for q in range(cur[1], min(cur[1] + LOOKAHEAD_LAUNCHES, len(launches))):
                        if launches[q].name == name:
                            found = (cur[0], q)
                            break
                if found is None and index.get(name):
                    found = self._best_start(index[name], names, kinds, ops, i)
                if found is None:
                    cur, last = None, None
                    continue
                launch = self.modules[found[0]].launches[found[1]]
                out[i] = _with_call(launch.op, found, launch.code)
                cur, last = (found[0], found[1] + 1), None
                continue
            if cur is None:
                continue
            launches = self.modules[cur[0]].launches
            nxt = launches[cur[1]] if cur[1] < len(launches) and not launches[cur[1]].generated else None
            kind_of = library_kind or (lambda _n, _op=None: "other")
            own = kind_of(name)
            helper = next((host for host, keys in HELPERS.items() if any(k in name.lower() for k in keys)), None)
            joins = last is not None and (
                (helper is not None and helper == last_kind)  # a split-K reduction, attention's pre-pass …
                or (own == last_kind and not last_has_own)  # the call's main kernel after its helpers
                or nxt is None
                or (kind_of("", nxt.op.name) != own and helper is None and last_kind == own)
            )
            if joins and last is not None:
                out[i] = last
                last_has_own = last_has_own or own == last_kind
                continue
            if nxt is not None:
                last = _with_call(nxt.op, cur, None)
                last_kind = kind_of("", nxt.op.name)
                last_has_own = own == last_kind
                out[i] = last
                cur = (cur[0], cur[1] + 1)
        return out

    def _best_start(
        self, candidates: list[tuple[int, int]], names: list[str], kinds: list[str], ops: list[LaunchOp | None], i: int
    ) -> tuple[int, int]:
        """Of the launches named like activity ``i``, the one whose graph goes on as the trace does (the most of
        the next :data:`LOOKAHEAD_LAUNCHES` generated kernels found in order after it; the latest loaded graph
        on a tie: a process may hold the code of graphs it no longer runs)."""
        ahead = [
            n
            for n, k, op in zip(names[i + 1 :], kinds[i + 1 :], ops[i + 1 :], strict=True)
            if op is None and k == "kernel" and n.startswith(TRITON_PREFIX)
        ][:LOOKAHEAD_LAUNCHES]
        return max(candidates, key=lambda c: (_score(self.modules[c[0]].launches, c[1] + 1, ahead), c[0], -c[1]))


HELPERS: dict[str, tuple[str, ...]] = {
    "gemm": ("splitkreduce", "split_k_reduce", "splitk_reduce"),
    "attention": ("dot_do_o", "convert_dq", "reduce_head", "philox"),
}
"""Library kernels that do part of another kind of call's work, by that call's category (by name, lower case)."""


def _score(launches: list[GraphLaunch], q: int, ahead: list[str]) -> int:
    """How many of the trace's next generated kernels ``ahead`` follow launch ``q`` of a graph, in order."""
    gen = [launch.name for launch in launches[q : q + 4 * len(ahead) + 8] if launch.generated]
    score = 0
    for name in ahead:
        if name in gen:
            gen = gen[gen.index(name) + 1 :]
            score += 1
    return score


def _with_call(op: LaunchOp, where: tuple[int, int], code: KernelCode | None) -> LaunchOp:
    from dataclasses import replace

    return replace(op, call=GRAPH_CALL_BASE + (where[0] << 24) + where[1], code=code)
