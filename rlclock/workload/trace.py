"""KernelTrace: the ordered kernel invocations of one training step, and its on-disk format.

A trace lists every kernel launch of one step in execution order — for a transformer: each layer's
forward kernels, the head and loss, each layer's backward kernels, the optimizer. Per kernel it holds
what a model needs (FLOPs, DRAM bytes read and written, GEMM shape, memory-access class) and, where a
real GPU supplied them, measured reference points.

On disk a trace is JSON (optionally gzip-compressed when the name ends in ``.gz``)::

    {"format": "rlclock.trace", "version": 2, "name": "...", "meta": {...}, "kernels": [{...}, ...]}

Loading validates every field and raises :class:`~rlclock.errors.TraceError` with the kernel index,
its name and the fix on the first problem found. A file is read in chunks and its kernels one at a time, each
turned into a :class:`Kernel` at once (equal names, shapes and numbers shared), so a trace of a million kernels
loads within a fraction of its JSON size in memory; a key given twice inside a kernel, ``NaN``, and more than
:data:`~rlclock.validation.MAX_KERNELS` kernels are refused.
"""

from __future__ import annotations

import codecs
import gzip
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from rlclock.errors import SpecError, TraceError
from rlclock.validation import MAX_KERNELS, check_kernels, measurement_problem
from rlclock.workload.kernel_code import InductorCodeError, KernelCode
from rlclock.yamlio import STRICT_JSON

TRACE_FORMAT = "rlclock.trace"
TRACE_VERSION = 2
"""Version 2 marks the kernels no cost rule knew (``cost_from: "time"``) and keeps a generated kernel's code with its
launch; a version-1 file's kernels with no work were such kernels, and are read as them."""
READ_VERSIONS = (1, 2)
TRACE_FIX = "re-create the trace with rlclock (`rlclock profile`, or KernelTrace.save) and do not edit it by hand."
"""The fix of a trace that is not as rlclock writes it."""

CATEGORIES: tuple[str, ...] = (
    "gemm",  # dense matrix multiply on tensor cores (incl. batched)
    "attention",  # fused attention (flash / SDPA) on tensor cores
    "softmax",  # softmax / cross-entropy rows
    "norm",  # layernorm / rmsnorm
    "elementwise",  # activation, residual add, dropout, optimizer updates …
    "reduction",  # bias gradients, sums
    "copy",  # permute / transpose / concat / memcpy
    "embedding",  # embedding gather / scatter-add
    "memset",  # fills
    "other",
)
"""Kernel categories. ``gemm`` and ``attention`` run on tensor cores; the rest on the SIMT units."""

TENSOR_CATEGORIES: frozenset[str] = frozenset({"gemm", "attention"})

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")

COST_SOURCES: tuple[str, ...] = ("rules", "time")
"""Where a kernel's work comes from (:attr:`Kernel.cost_from`)."""

ACCESS_CLASSES: tuple[str, ...] = ("stream", "gather", "reduce")
"""How a kernel touches DRAM: ``stream`` (coalesced, read once / write once), ``gather`` (rows picked by
index, scatter-adds), ``reduce`` (multi-pass reductions across rows, e.g. norm and softmax backward)."""

DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")

DEFAULT_ACCESS: Mapping[str, str] = {
    "gemm": "stream",
    "attention": "stream",
    "softmax": "stream",
    "norm": "stream",
    "elementwise": "stream",
    "reduction": "stream",
    "copy": "stream",
    "embedding": "gather",
    "memset": "stream",
    "other": "stream",
}


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured reference point of a kernel on a real GPU.

    Attributes:
        gpu: GPU name as NVML reports it (e.g. ``"NVIDIA H200"``) or a preset key.
        time_s: Duration of one launch, seconds.
        energy_j: Energy of one launch, joules (``None`` when only time was measured).
        core_mhz: Locked core clock, or ``None`` for the driver's own choice ("auto").
        mem_mhz: Locked memory clock, or ``None`` for "auto".
        sm_clock_mhz: Mean SM clock observed while it ran (``None`` if not recorded).
        source: How it was obtained (``"isolated"``, ``"in-sequence"``, ``"paper"`` …).
    """

    gpu: str
    time_s: float
    energy_j: float | None = None
    core_mhz: int | None = None
    mem_mhz: int | None = None
    sm_clock_mhz: float | None = None
    source: str = "isolated"

    @property
    def is_auto(self) -> bool:
        """True when both clocks were left to the driver."""
        return self.core_mhz is None and self.mem_mhz is None


Shape = tuple[int, ...]
"""A tensor's sizes (``()`` for a 0-d tensor or an argument that is not a tensor)."""


@dataclass(frozen=True, slots=True)
class LaunchOp:
    """The framework operator whose call launched a profiled kernel, with the shapes its cost comes from.

    Attributes:
        name: Operator name, e.g. ``"aten::embedding_dense_backward"``.
        input_dims: Per argument: a tensor's sizes, a tensor list's sizes (a tuple of shapes), or ``()``.
        input_types: Per argument: its type as the profiler names it (``"c10::BFloat16"``, ``"float"``,
            ``"long int"``, ``"TensorList"``, ``"Scalar"`` …).
        concrete_inputs: Per argument: the value of a scalar argument as text (``"True"``, ``"32000"``), else
            ``""``.
        call: Which call of the step it was (kernels launched by one call share it), ``-1`` if unknown.
        code: For a kernel TorchInductor generated, what its source says it loads, stores and computes
            (:mod:`rlclock.workload.inductor`); ``None`` otherwise.
    """

    name: str
    input_dims: tuple[Shape | tuple[Shape, ...], ...] = ()
    input_types: tuple[str, ...] = ()
    concrete_inputs: tuple[str, ...] = ()
    call: int = -1
    code: KernelCode | None = None


@dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel invocation.

    Attributes:
        name: Kernel (function) name, e.g. ``"layernorm_forward_kernel3"``.
        op: Logical operation it implements, e.g. ``"ln1.fwd"``; invocations of the same op in different
            layers share it.
        category: One of :data:`CATEGORIES`.
        phase: One of :data:`PHASES`.
        flops: Floating-point operations of the launch (a fused multiply-add counts 2).
        dram_read_bytes: Bytes the kernel must read from device memory (each input once).
        dram_write_bytes: Bytes it must write to device memory.
        dtype: Arithmetic type of the tensor-core math (one of :data:`DTYPES`).
        layer: Transformer layer index, or -1 outside the layers (embedding, head, optimizer).
        gemm_bmnk: ``(batch, m, n, k)`` of a (batched) matrix product, when known.
        mlp_bytes: Bytes of independent DRAM loads each thread keeps in flight (memory-level
            parallelism; 16 for one 128-bit vector load). ``None``: unknown (models assume 16).
        access: DRAM access class, one of :data:`ACCESS_CLASSES`.
        launch_grid: CUDA grid ``(x, y, z)`` when known.
        launch_block: CUDA block ``(x, y, z)`` when known.
        measured: Reference points measured on real GPUs.
        launch_op: The operator call that launched it, for a profiled kernel (its FLOPs and bytes are derived
            from it by :mod:`rlclock.workload.op_costs`).
        onchip_bytes: Bytes it moves through shared memory (each store and load counted), when known — a kernel
            whose time is shared-memory round trips (the calibration suite's on-chip loop). ``None``: none counted.
        cost_from: Where its FLOPs and bytes come from (one of :data:`COST_SOURCES`): ``"rules"`` — a generator,
            the operator's shapes or the generated code; ``"time"`` — no rule knew it, so its work is what its
            measured duration takes on the GPU model (:func:`rlclock.workload.op_costs.costs` leaves it for
            :func:`rlclock.dvfs.model.work_from_time` to fill).
    """

    name: str
    op: str
    category: str
    phase: str
    flops: float
    dram_read_bytes: float
    dram_write_bytes: float
    dtype: str = "bf16"
    layer: int = -1
    gemm_bmnk: tuple[int, int, int, int] | None = None
    mlp_bytes: float | None = None
    access: str = "stream"
    launch_grid: tuple[int, int, int] | None = None
    launch_block: tuple[int, int, int] | None = None
    measured: tuple[Measurement, ...] = field(default_factory=tuple)
    launch_op: LaunchOp | None = None
    onchip_bytes: float | None = None
    cost_from: str = "rules"

    @property
    def dram_bytes(self) -> float:
        """Bytes read plus bytes written."""
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def uses_tensor_cores(self) -> bool:
        """True for GEMM and fused attention kernels, unless in ``fp32`` (FFMA on the SIMT units; ``tf32``
        is fp32 data on tensor cores)."""
        return self.category in TENSOR_CATEGORIES and self.dtype != "fp32"

    def measurement(self, gpu: str | None = None, auto_only: bool = True) -> Measurement | None:
        """The first measured reference point (at auto clocks by default), optionally for one GPU."""
        for m in self.measured:
            if auto_only and not m.is_auto:
                continue
            if gpu is None or m.gpu == gpu:
                return m
        return None

    def physical_key(self) -> tuple[Any, ...]:
        """Everything a GPU model looks at; equal keys mean the model treats the kernels alike."""
        return (
            self.name,
            self.category,
            self.flops,
            self.dram_read_bytes,
            self.dram_write_bytes,
            self.dtype,
            self.gemm_bmnk,
            self.mlp_bytes,
            self.access,
            self.measured,
            self.onchip_bytes,
        )


class KernelTrace(Sequence[Kernel]):
    """The ordered kernel invocations of one training step.

    Args:
        name: A short name, e.g. ``"gpt3xl-llmc-b40-t1024"``.
        kernels: The invocations in execution order.
        meta: Free-form description: generator and its configuration, GPU it was profiled on, …
    """

    def __init__(
        self, name: str, kernels: Sequence[Kernel], meta: Mapping[str, Any] | None = None, _validated: bool = False
    ) -> None:
        if not kernels:
            raise TraceError(f"trace {name!r} has no kernels.", "give at least one kernel invocation.")
        if len(kernels) > MAX_KERNELS:
            raise TraceError(
                f"trace {name!r} has {len(kernels)} kernels, more than rlclock plans ({MAX_KERNELS} at most).",
                "give a smaller step: fewer layers or a smaller batch of steps.",
            )
        self.name = name
        self.kernels: tuple[Kernel, ...] = tuple(kernels)
        self.meta: dict[str, Any] = dict(meta or {})
        if not _validated:  # the loader validates each kernel as it reads it
            for i, k in enumerate(self.kernels):
                _validate_kernel(k, i)

    # -- sequence protocol -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.kernels)

    def __getitem__(self, i):
        return self.kernels[i]

    def __iter__(self) -> Iterator[Kernel]:
        return iter(self.kernels)

    def __repr__(self) -> str:
        return f"KernelTrace({self.name!r}, {len(self)} kernels, {len(self.unique_index[0])} distinct)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelTrace) and (self.name, self.kernels, self.meta) == (
            other.name,
            other.kernels,
            other.meta,
        )

    __hash__ = None  # type: ignore[assignment]

    # -- derived views -----------------------------------------------------------------------------
    def distinct_with_work(self) -> list[Kernel]:
        """The first invocation of each distinct kernel that does work (FLOPs or DRAM bytes), in trace order."""
        first, _ = self.unique_index
        return [self.kernels[i] for i in first if self.kernels[i].flops > 0 or self.kernels[i].dram_bytes > 0]

    @cached_property
    def unique_index(self) -> tuple[list[int], np.ndarray]:
        """``(first, inverse)``: indices of the first invocation of each distinct kernel, and for every
        invocation the position of its distinct kernel in ``first``. Models evaluate distinct kernels once."""
        seen: dict[tuple[Any, ...], int] = {}
        first: list[int] = []
        inverse = np.empty(len(self.kernels), dtype=np.int64)
        for i, k in enumerate(self.kernels):
            key = k.physical_key()
            j = seen.get(key)
            if j is None:
                j = seen[key] = len(first)
                first.append(i)
            inverse[i] = j
        return first, inverse

    @cached_property
    def columns(self) -> dict[str, np.ndarray]:
        """Per-invocation numeric columns (read-only): ``flops``, ``read_bytes``, ``write_bytes``, ``tensor``
        (bool), and indices into :data:`CATEGORIES`, :data:`PHASES` and :data:`DTYPES`."""
        ks = self.kernels
        cols = {
            "flops": np.array([k.flops for k in ks], float),
            "read_bytes": np.array([k.dram_read_bytes for k in ks], float),
            "write_bytes": np.array([k.dram_write_bytes for k in ks], float),
            "tensor": np.array([k.uses_tensor_cores for k in ks], bool),
            "category": np.array([CATEGORIES.index(k.category) for k in ks], np.int64),
            "phase": np.array([PHASES.index(k.phase) for k in ks], np.int64),
            "dtype": np.array([DTYPES.index(k.dtype) for k in ks], np.int64),
        }
        for v in cols.values():
            v.setflags(write=False)
        return cols

    def with_kernels(self, kernels: Sequence[Kernel], name: str | None = None) -> KernelTrace:
        """A copy with other kernels (and optionally another name), same meta."""
        return KernelTrace(name or self.name, kernels, self.meta)

    def phase_mask(self, phase: str) -> np.ndarray:
        """Boolean mask of the invocations in ``phase``."""
        return np.array([k.phase == phase for k in self.kernels])

    # -- I/O ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The versioned on-disk form."""
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "name": self.name,
            "meta": self.meta,
            "kernels": [_kernel_to_dict(k) for k in self.kernels],
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> KernelTrace:
        """Parse and validate the on-disk form; raises :class:`TraceError` on the first problem."""
        if not isinstance(data, dict):
            raise TraceError(f"{source}: a trace must be a JSON object, found {type(data).__name__}.", TRACE_FIX)
        raw = data.get("kernels")
        if not isinstance(raw, list) or not raw:
            _check_header(data, source)
            raise TraceError(f"{source}: 'kernels' must be a non-empty list.", TRACE_FIX)
        if len(raw) > MAX_KERNELS:
            raise TraceError(
                f"{source}: {len(raw)} kernels, more than rlclock plans ({MAX_KERNELS} at most).",
                "give a smaller step: fewer layers or a smaller batch of steps.",
            )
        shared = _Shared()
        return cls._from_parts(data, [_kernel_from_dict(d, i, source, shared) for i, d in enumerate(raw)], source)

    @classmethod
    def _from_parts(cls, header: dict[str, Any], kernels: list[Kernel], source: str) -> KernelTrace:
        """The trace from its checked header fields and its validated kernels."""
        name, meta, version = _check_header(header, source)
        if not kernels:
            raise TraceError(f"{source}: 'kernels' must be a non-empty list.", TRACE_FIX)
        if version == 1:
            _upgrade_v1(kernels)
        return cls(name, kernels, meta, _validated=True)

    def save(self, path: str | Path) -> Path:
        """Write the trace as JSON (gzip when ``path`` ends in ``.gz``), a kernel at a time and atomically (a
        temporary file renamed into place); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        sep = (",", ":")
        head = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "name": self.name, "meta": self.meta}
        with gzip.open(tmp, "wt", encoding="utf-8") if path.suffix == ".gz" else tmp.open("w", encoding="utf-8") as f:
            f.write(json.dumps(head, separators=sep)[:-1] + ',"kernels":[')
            for i, k in enumerate(self.kernels):
                f.write(("," if i else "") + json.dumps(_kernel_to_dict(k), separators=sep))
            f.write("]}")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> KernelTrace:
        """Read and validate a trace file, kernel by kernel (module docstring)."""
        path = Path(path)
        if not path.exists():
            raise TraceError(f"trace file {str(path)!r} does not exist.", "check the path.")
        if not path.is_file():
            raise TraceError(f"trace file {str(path)!r} is not a regular file.", "give the path of a trace file.")
        try:
            with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as f:
                return _read_trace(_JsonStream(f, str(path)), str(path))
        except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
            raise TraceError(f"{path}: not a readable JSON trace ({exc}).", "re-create it with rlclock.") from None


# -- (de)serialisation and validation ----------------------------------------------------------------

_KERNEL_FIELDS = {f for f in Kernel.__dataclass_fields__}
_MEASUREMENT_FIELDS = {f for f in Measurement.__dataclass_fields__}
_LAUNCH_OP_FIELDS = {f for f in LaunchOp.__dataclass_fields__}


def _check_header(data: dict[str, Any], source: str) -> tuple[str, dict[str, Any], int]:
    """A trace's format, version, name and meta, checked; its name, meta and version."""
    if data.get("format") != TRACE_FORMAT:
        raise TraceError(
            f"{source}: 'format' is {data.get('format')!r}, expected {TRACE_FORMAT!r}.",
            "write traces with rlclock (KernelTrace.save or `rlclock profile`).",
        )
    version = data.get("version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise TraceError(
            f"{source}: trace version {version!r} is not supported (this rlclock reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}).",
            "upgrade rlclock or re-create the trace with this version.",
        )
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise TraceError(f"{source}: 'name' must be a non-empty string, found {name!r}.", TRACE_FIX)
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise TraceError(f"{source}: 'meta' must be an object, found {type(meta).__name__}.", TRACE_FIX)
    return name, meta, version


def _upgrade_v1(kernels: list[Kernel]) -> None:
    """Read a version-1 trace's kernels as version 2, in place: a profiled kernel no rule knew carried no work, so it
    is one to plan from its measured time (``cost_from: "time"``)."""
    for i, k in enumerate(kernels):
        if (
            k.measured
            and k.flops == 0
            and k.dram_bytes == 0
            and k.onchip_bytes is None
            and "memset" not in k.name.lower()
            and "memcpy" not in k.name.lower()
        ):
            kernels[i] = replace(k, cost_from="time")


_READ_BYTES = 1 << 22
"""Bytes read from a trace file at a time."""
_MAX_VALUE_CHARS = 64 << 20
"""The longest single value (a kernel, the meta) a trace file may hold, characters."""


class _JsonStream:
    """The text of a JSON file, decoded a chunk at a time, with a cursor: whole values are taken one by one
    (:meth:`value`) while the structure around them is walked by hand (:meth:`expect`, :meth:`peek`)."""

    _SPACE = " \t\n\r"

    def __init__(self, f: Any, source: str) -> None:
        self.f, self.source = f, source
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof = "", 0, False

    def error(self, what: str) -> TraceError:
        return TraceError(f"{self.source}: not a readable JSON trace ({what}).", "re-create it with rlclock.")

    def more(self) -> bool:
        """Read the next chunk (dropping what the cursor passed); False at the end of the file."""
        if self.eof:
            return False
        data = self.f.read(_READ_BYTES)
        self.eof = not data
        self.buf = self.buf[self.pos :] + self.decoder.decode(data, final=self.eof)
        self.pos = 0
        return not self.eof

    def peek(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in self._SPACE:
                self.pos += 1
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise self.error(f"expected {char!r} at this point, found {found or 'the end of the file'!r}")
        self.pos += 1

    def value(self) -> Any:
        """The next whole JSON value (strict: a key given twice in an object, or NaN, is an error)."""
        self.peek()
        while True:
            try:
                obj, end = STRICT_JSON.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if len(self.buf) - self.pos <= _MAX_VALUE_CHARS and self.more():
                    continue  # the value may go on in the next chunk
                if len(self.buf) - self.pos > _MAX_VALUE_CHARS:
                    raise self.error(f"a value longer than {_MAX_VALUE_CHARS} characters") from None
                raise self.error(str(exc)) from None
            except ValueError as exc:
                raise self.error(str(exc)) from None
            except RecursionError:
                raise self.error("nested too deeply") from None
            if end == len(self.buf) and self.more():
                continue  # a number may go on in the next chunk
            self.pos = end
            return obj


def _read_trace(stream: _JsonStream, source: str) -> KernelTrace:
    """A trace from its JSON text: the top-level object walked by hand, each kernel parsed and turned into a
    :class:`Kernel` as it comes (the rest of the header checked where it is found)."""
    header: dict[str, Any] = {}
    kernels: list[Kernel] = []
    shared = _Shared()
    stream.expect("{")
    if stream.peek() == "}":
        stream.pos += 1
    else:
        while True:
            key = stream.value()
            if not isinstance(key, str):
                raise stream.error(f"expected a key, found {key!r}")
            if key in header or (key == "kernels" and kernels):
                raise stream.error(f"key {key!r} appears twice in one object")
            stream.expect(":")
            if key == "kernels" and stream.peek() == "[":
                header[key] = True
                stream.pos += 1
                if stream.peek() == "]":
                    stream.pos += 1
                else:
                    while True:
                        if len(kernels) >= MAX_KERNELS:
                            raise TraceError(
                                f"{source}: more than {MAX_KERNELS} kernels, more than rlclock plans.",
                                "give a smaller step: fewer layers or a smaller batch of steps.",
                            )
                        kernels.append(_kernel_from_dict(stream.value(), len(kernels), source, shared))
                        sep = stream.peek()
                        stream.pos += 1
                        if sep == "]":
                            break
                        if sep != ",":
                            raise stream.error(f"expected ',' or ']' after kernel #{len(kernels) - 1}")
            else:
                header[key] = stream.value()
                if key in ("format", "version"):
                    _check_header(
                        {"format": TRACE_FORMAT, "version": TRACE_VERSION, "name": "x", **{key: header[key]}}, source
                    )
            sep = stream.peek()
            stream.pos += 1
            if sep == "}":
                break
            if sep != ",":
                raise stream.error("expected ',' or '}' between the trace's fields")
    if stream.peek() != "":
        raise stream.error("extra data after the trace's object")
    if not kernels:
        _check_header(header, source)
        raise TraceError(f"{source}: 'kernels' must be a non-empty list.", TRACE_FIX)
    return KernelTrace._from_parts(header, kernels, source)


class _Shared:
    """One object for equal values across the kernels of a trace being read (names, shapes, numbers): a million
    kernels of a few dozen distinct ones cost little more than those. Values of another type are never merged
    (``1`` stays an int beside ``1.0``)."""

    def __init__(self) -> None:
        self.memo: dict[Any, Any] = {}
        self.tuples: dict[Any, tuple[Any, ...]] = {}

    def __call__(self, value: Any) -> Any:
        kind = type(value)
        if kind is str or kind is float or kind is int:
            return self.memo.setdefault((kind, value), value)
        if kind is list or kind is tuple:
            items = tuple(self(v) for v in value)
            return self.tuples.setdefault((items, tuple(type(v) for v in items)), items)
        return value


def _kernel_to_dict(k: Kernel) -> dict[str, Any]:
    d = asdict(k)
    d["measured"] = [asdict(m) for m in k.measured]
    if k.launch_op is not None:
        d["launch_op"] = {key: v for key, v in d["launch_op"].items() if key != "code"}
        if k.launch_op.code is not None:
            d["launch_op"]["code"] = k.launch_op.code.to_dict()
    if k.cost_from == "rules":
        del d["cost_from"]
    return {key: (list(v) if isinstance(v, tuple) else v) for key, v in d.items() if v is not None}


def _is_shape(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)


def _launch_op_from_dict(d: Any, where: str, shared: _Shared | None = None) -> LaunchOp:
    if not isinstance(d, dict) or set(d) - _LAUNCH_OP_FIELDS or not isinstance(d.get("name"), str):
        raise TraceError(
            f"{where}: 'launch_op' must be an object with a 'name' and only the fields "
            f"{sorted(_LAUNCH_OP_FIELDS)}; found {d!r}.",
            TRACE_FIX,
        )
    dims: list[Shape | tuple[Shape, ...]] = []
    for v in d.get("input_dims", []):
        if _is_shape(v):
            dims.append(tuple(v))
        elif isinstance(v, (list, tuple)) and all(_is_shape(x) for x in v):
            dims.append(tuple(tuple(x) for x in v))
        else:
            raise TraceError(
                f"{where}: launch_op input dims {v!r} are neither a shape nor a list of shapes.", TRACE_FIX
            )
    texts = {}
    for key in ("input_types", "concrete_inputs"):
        v = d.get(key, [])
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise TraceError(f"{where}: launch_op {key!r} must be a list of strings, found {v!r}.", TRACE_FIX)
        texts[key] = tuple(v)
    call = d.get("call", -1)
    if not isinstance(call, int) or isinstance(call, bool) or call < -1:
        raise TraceError(f"{where}: launch_op 'call' must be an integer >= -1, found {call!r}.", TRACE_FIX)
    code = None
    if d.get("code") is not None:
        try:
            code = KernelCode.from_dict(d["code"]) if isinstance(d["code"], dict) else None
        except InductorCodeError as exc:
            raise TraceError(f"{where}: launch_op {exc}.", TRACE_FIX) from None
        if code is None:
            raise TraceError(f"{where}: launch_op 'code' must be an object, found {d['code']!r}.", TRACE_FIX)
        numbers = [n for _, n in code.numels] + [x for a in code.accesses for x in (a.elements, a.elem_bytes, a.loop)]
        numbers += [x for x in (code.ops_per_element, code.inductor_bytes, code.inductor_flops) if x is not None]
        if not all(math.isfinite(x) and x >= 0 for x in numbers):
            raise TraceError(
                f"{where}: launch_op 'code' holds a size or count that is not a finite number >= 0.", TRACE_FIX
            )
    if shared is None:
        return LaunchOp(d["name"], tuple(dims), texts["input_types"], texts["concrete_inputs"], call, code)
    return LaunchOp(
        shared(d["name"]),
        shared(tuple(dims)),
        shared(texts["input_types"]),
        shared(texts["concrete_inputs"]),
        shared(call),
        code,
    )


def _where(i: int, d: Any) -> str:
    name = d.get("name") if isinstance(d, dict) else None
    return f"kernel #{i}" + (f" ({name!r})" if isinstance(name, str) else "")


def _kernel_from_dict(d: Any, i: int, source: str, shared: _Shared | None = None) -> Kernel:
    where = f"{source}: {_where(i, d)}"
    if not isinstance(d, dict):
        raise TraceError(f"{where}: each kernel must be an object, found {type(d).__name__}.", TRACE_FIX)
    unknown = set(d) - _KERNEL_FIELDS
    if unknown:
        raise TraceError(
            f"{where}: unknown field(s) {sorted(unknown)}.",
            f"use only {sorted(_KERNEL_FIELDS)}.",
        )
    for req in ("name", "op", "category", "phase", "flops", "dram_read_bytes", "dram_write_bytes"):
        if req not in d:
            raise TraceError(f"{where}: required field {req!r} is missing.", TRACE_FIX)
    kw = dict(d)
    for key in ("gemm_bmnk", "launch_grid", "launch_block"):
        if kw.get(key) is not None:
            v = kw[key]
            if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise TraceError(f"{where}: {key!r} must be a list of integers, found {v!r}.", TRACE_FIX)
            kw[key] = tuple(v)
    meas = kw.get("measured", [])
    if not isinstance(meas, list):
        raise TraceError(f"{where}: 'measured' must be a list, found {type(meas).__name__}.", TRACE_FIX)
    parsed = []
    for j, m in enumerate(meas):
        if not isinstance(m, dict) or set(m) - _MEASUREMENT_FIELDS or "gpu" not in m or "time_s" not in m:
            raise TraceError(
                f"{where}: measurement #{j} must be an object with 'gpu' and 'time_s' and only the fields "
                f"{sorted(_MEASUREMENT_FIELDS)}; found {m!r}.",
                TRACE_FIX,
            )
        if shared is not None:
            m = {key: shared(v) for key, v in m.items()}
        try:
            parsed.append(Measurement(**m))
        except TypeError as exc:  # pragma: no cover - guarded by the field checks above
            raise TraceError(f"{where}: measurement #{j}: {exc}.", TRACE_FIX) from None
    kw["measured"] = tuple(parsed)
    if kw.get("launch_op") is not None:
        kw["launch_op"] = _launch_op_from_dict(kw["launch_op"], where, shared)
    if shared is not None:
        kw = {key: (v if key in ("measured", "launch_op") else shared(v)) for key, v in kw.items()}
    try:
        k = Kernel(**kw)
    except TypeError as exc:  # pragma: no cover - guarded by the field checks above
        raise TraceError(f"{where}: {exc}.", TRACE_FIX) from None
    _validate_kernel(k, i, source)
    return k


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _validate_kernel(k: Kernel, i: int, source: str = "trace") -> None:
    where = f"{source}: kernel #{i} ({k.name!r})" if isinstance(k.name, str) else f"{source}: kernel #{i}"
    if not isinstance(k.name, str) or not k.name:
        raise TraceError(f"{where}: 'name' must be a non-empty string.", TRACE_FIX)
    if not isinstance(k.op, str) or not k.op:
        raise TraceError(f"{where}: 'op' must be a non-empty string.", TRACE_FIX)
    if k.category not in CATEGORIES:
        raise TraceError(f"{where}: category {k.category!r} is unknown.", f"use one of {list(CATEGORIES)}.")
    if k.phase not in PHASES:
        raise TraceError(f"{where}: phase {k.phase!r} is unknown.", f"use one of {list(PHASES)}.")
    if k.cost_from not in COST_SOURCES:
        raise TraceError(f"{where}: cost_from {k.cost_from!r} is unknown.", f"use one of {list(COST_SOURCES)}.")
    if k.dtype not in DTYPES:
        raise TraceError(f"{where}: dtype {k.dtype!r} is unknown.", f"use one of {list(DTYPES)}.")
    if k.access not in ACCESS_CLASSES:
        raise TraceError(f"{where}: access {k.access!r} is unknown.", f"use one of {list(ACCESS_CLASSES)}.")
    for fname in ("flops", "dram_read_bytes", "dram_write_bytes"):
        v = getattr(k, fname)
        if not _is_num(v) or not math.isfinite(v) or v < 0:
            raise TraceError(
                f"{where}: {fname!r} is {v!r}; expected a finite number >= 0.",
                "fix the generator or profiler that wrote it (NaN usually means an unmapped kernel).",
            )
    if k.flops == 0 and k.dram_read_bytes + k.dram_write_bytes == 0 and not k.measured:
        raise TraceError(
            f"{where}: has neither FLOPs, DRAM bytes nor a measurement, so nothing can predict its time.",
            "give its FLOPs/bytes or a measured time.",
        )
    if not isinstance(k.layer, int) or isinstance(k.layer, bool) or k.layer < -1:
        raise TraceError(f"{where}: 'layer' must be an integer >= -1, found {k.layer!r}.", TRACE_FIX)
    if k.mlp_bytes is not None and (not _is_num(k.mlp_bytes) or not math.isfinite(k.mlp_bytes) or k.mlp_bytes <= 0):
        raise TraceError(f"{where}: 'mlp_bytes' must be a finite number > 0, found {k.mlp_bytes!r}.", TRACE_FIX)
    if k.onchip_bytes is not None and (
        not _is_num(k.onchip_bytes) or not math.isfinite(k.onchip_bytes) or k.onchip_bytes < 0
    ):
        raise TraceError(f"{where}: 'onchip_bytes' must be a finite number >= 0, found {k.onchip_bytes!r}.", TRACE_FIX)
    for key, n in (("gemm_bmnk", 4), ("launch_grid", 3), ("launch_block", 3)):
        v = getattr(k, key)
        if v is not None and (len(v) != n or any(x <= 0 for x in v)):
            raise TraceError(f"{where}: {key!r} must be {n} positive integers, found {v!r}.", TRACE_FIX)
    for j, m in enumerate(k.measured):
        problem = measurement_problem(m.time_s, m.energy_j)
        if problem is not None:
            raise TraceError(
                f"{where}: measurement #{j}: {problem}.",
                "re-measure the kernel (rlclock profile / rlclock measure), or drop the measurement.",
            )
        if not isinstance(m.gpu, str) or not m.gpu or not isinstance(m.source, str):
            raise TraceError(
                f"{where}: measurement #{j}: 'gpu' and 'source' must be text, found {m.gpu!r}, {m.source!r}.", TRACE_FIX
            )
        for name in ("core_mhz", "mem_mhz"):
            v = getattr(m, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise TraceError(
                    f"{where}: measurement #{j}: {name!r} must be a clock in MHz (a whole number > 0) "
                    f"or null for auto, found {v!r}.",
                    TRACE_FIX,
                )
        if m.sm_clock_mhz is not None and (
            not _is_num(m.sm_clock_mhz) or not math.isfinite(m.sm_clock_mhz) or m.sm_clock_mhz < 0
        ):
            raise TraceError(
                f"{where}: measurement #{j}: 'sm_clock_mhz' must be a number >= 0, found {m.sm_clock_mhz!r}.", TRACE_FIX
            )


STEP_MAXIMA: Mapping[str, int] = {
    "hidden": 1 << 17,
    "ffn": 1 << 19,
    "heads": 1 << 12,
    "kv_heads": 1 << 12,
    "seq": 1 << 22,
    "batch": 1 << 20,
    "vocab": 1 << 23,
    "vocab_padded": 1 << 23,
    "tokens": 1 << 26,
}
"""The largest size of each dimension a generated step may have (``tokens``: batch × sequence) — several times
the largest models trained today; past them a step's FLOPs mean nothing."""


def check_step_size(where: str, sizes: Mapping[str, int | None], layers: int, count: Callable[[int], int]) -> None:
    """Refuse a generated step past the limits before it is built: a dimension over :data:`STEP_MAXIMA`, or more
    than :data:`~rlclock.validation.MAX_KERNELS` kernels (counted from steps of one and two layers: a step grows
    by the same kernels per layer).

    Args:
        where: The generator, for the message (``"llm.c config"``).
        sizes: Its dimensions by name (``None``: not given).
        layers: Its layers.
        count: Kernels of the step at a number of layers.

    Raises:
        SpecError: A dimension or the step is too large.
    """
    for name, value in sizes.items():
        top = STEP_MAXIMA.get(name)
        if top is not None and value is not None and value > top:
            raise SpecError(
                f"{where}: {name!r} is {value}, more than rlclock models ({top} at most).",
                f"give {name} of at most {top}.",
            )
    one = count(1)
    total = one if layers <= 1 else one + (layers - 1) * (count(2) - one)
    check_kernels(
        total,
        where,
        SpecError,
        f"give fewer layers (at most about "
        f"{max(1, (MAX_KERNELS - one) // max(count(2) - one, 1) + 1)} for this shape).",
    )


def replace_kernel(k: Kernel, **changes: Any) -> Kernel:
    """A copy of ``k`` with some fields changed (validated when placed in a trace)."""
    return replace(k, **changes)
