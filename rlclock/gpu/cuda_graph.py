"""Inspect, prune and replay captured CUDA graphs through the CUDA driver API (``libcuda`` via ctypes).

PyTorch captures a training step into a ``cudaGraph_t`` (``torch.cuda.CUDAGraph(keep_graph=True)``,
``raw_cuda_graph()``). :class:`GraphView` lists its nodes in execution (topological) order with each
kernel's name and launch shape, and builds sub-graphs from it: one kernel with exactly the memsets it
depends on (kernel isolation, see :mod:`rlclock.gpu.graph_pruning`), or a contiguous segment of the step.
A sub-graph is a clone of the captured graph with every other node destroyed, so its kernels run with
their real arguments in the real buffers — which stay owned by PyTorch's graph memory pool: keep the
``CUDAGraph`` object alive while sub-graphs run.

ctypes against ``libcuda.so.1`` needs nothing beyond the driver; the functions are looked up by their
exported, versioned names (``cuGraphKernelNodeGetParams_v2`` …), whose ABI does not change.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from rlclock.errors import CudaGraphError, GpuUnavailableError
from rlclock.gpu import graph_pruning

NODE_TYPES = {
    0: "kernel",
    1: "memcpy",
    2: "memset",
    3: "host",
    4: "graph",
    5: "empty",
    6: "wait_event",
    7: "event_record",
    8: "semaphore_signal",
    9: "semaphore_wait",
    10: "mem_alloc",
    11: "mem_free",
    12: "batch_mem_op",
    13: "conditional",
}
"""``CUgraphNodeType`` values and the names rlclock uses for them."""

_p = ctypes.c_void_p
_sz = ctypes.c_size_t


class _KernelNodeParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS_v2``."""

    _fields_ = [
        ("func", _p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", _p),
        ("extra", _p),
        ("kern", _p),
        ("ctx", _p),
    ]


class _MemsetNodeParams(ctypes.Structure):
    """``CUDA_MEMSET_NODE_PARAMS``."""

    _fields_ = [
        ("dst", ctypes.c_uint64),
        ("pitch", _sz),
        ("value", ctypes.c_uint),
        ("elementSize", ctypes.c_uint),
        ("width", _sz),
        ("height", _sz),
    ]


class _EdgeData(ctypes.Structure):
    """``CUgraphEdgeData``."""

    _fields_ = [
        ("from_port", ctypes.c_ubyte),
        ("to_port", ctypes.c_ubyte),
        ("type", ctypes.c_ubyte),
        ("reserved", ctypes.c_ubyte * 5),
    ]


_SIGNATURES: dict[str, tuple[type, ...]] = {
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuGetErrorString": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuGraphGetNodes": (_p, ctypes.POINTER(_p), ctypes.POINTER(_sz)),
    "cuGraphNodeGetType": (_p, ctypes.POINTER(ctypes.c_int)),
    "cuGraphNodeGetDependencies_v2": (_p, ctypes.POINTER(_p), ctypes.POINTER(_EdgeData), ctypes.POINTER(_sz)),
    "cuGraphNodeGetDependencies": (_p, ctypes.POINTER(_p), ctypes.POINTER(_sz)),
    "cuGraphKernelNodeGetParams_v2": (_p, ctypes.POINTER(_KernelNodeParams)),
    "cuGraphMemsetNodeGetParams": (_p, ctypes.POINTER(_MemsetNodeParams)),
    "cuFuncGetName": (ctypes.POINTER(ctypes.c_char_p), _p),
    "cuKernelGetName": (ctypes.POINTER(ctypes.c_char_p), _p),
    "cuGraphClone": (ctypes.POINTER(_p), _p),
    "cuGraphNodeFindInClone": (ctypes.POINTER(_p), _p, _p),
    "cuGraphDestroyNode": (_p,),
    "cuGraphAddDependencies_v2": (_p, ctypes.POINTER(_p), ctypes.POINTER(_p), ctypes.POINTER(_EdgeData), _sz),
    "cuGraphAddDependencies": (_p, ctypes.POINTER(_p), ctypes.POINTER(_p), _sz),
    "cuGraphCreate": (ctypes.POINTER(_p), ctypes.c_uint),
    "cuGraphAddChildGraphNode": (ctypes.POINTER(_p), _p, ctypes.POINTER(_p), _sz, _p),
    "cuGraphInstantiateWithFlags": (ctypes.POINTER(_p), _p, ctypes.c_ulonglong),
    "cuGraphLaunch": (_p, _p),
    "cuGraphExecDestroy": (_p,),
    "cuGraphDestroy": (_p,),
}


class CudaDriver:
    """The driver functions rlclock needs, loaded from ``libcuda.so.1``.

    Raises:
        GpuUnavailableError: No CUDA driver on this machine.
    """

    def __init__(self) -> None:
        try:
            self._lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            raise GpuUnavailableError(
                "no NVIDIA GPU/CUDA driver on this machine (libcuda.so.1 not found).",
                "run on a machine with an NVIDIA GPU and driver.",
            ) from None
        self._fns: dict[str, Any] = {}

    def has(self, name: str) -> bool:
        """Whether the driver exports ``name``."""
        return self._fn(name) is not None

    def _fn(self, name: str):
        if name not in self._fns:
            try:
                f = getattr(self._lib, name)
            except AttributeError:
                f = None
            if f is not None:
                f.restype = ctypes.c_int
                f.argtypes = list(_SIGNATURES[name])
            self._fns[name] = f
        return self._fns[name]

    def error_text(self, code: int) -> str:
        """``NAME: description`` of a ``CUresult``."""
        name, desc = ctypes.c_char_p(), ctypes.c_char_p()
        self._fn("cuGetErrorName")(code, ctypes.byref(name))
        self._fn("cuGetErrorString")(code, ctypes.byref(desc))
        return f"{(name.value or b'?').decode()}: {(desc.value or b'?').decode()}"

    def call(self, name: str, *args) -> None:
        """Call a driver function; raise :class:`CudaGraphError` on a non-zero result."""
        f = self._fn(name)
        if f is None:
            raise CudaGraphError(f"the CUDA driver lacks {name}.", "update the NVIDIA driver (CUDA 12.3 or newer).")
        rc = f(*args)
        if rc != 0:
            raise CudaGraphError(
                f"{name} failed with {self.error_text(rc)}.",
                "this graph or driver does not support the operation; run rlclock doctor.",
            )


@lru_cache(maxsize=1)
def driver() -> CudaDriver:
    """The process's :class:`CudaDriver`."""
    return CudaDriver()


@lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The C++ name of a mangled kernel symbol (the symbol itself when it is not mangled or demangling fails)."""
    if not name.startswith("_Z"):
        return name
    try:
        lib = ctypes.CDLL("libstdc++.so.6")
        fn = lib.__cxa_demangle
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        status = ctypes.c_int()
        ptr = fn(name.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return name
        out = ctypes.cast(ptr, ctypes.c_char_p).value or b""
        libc = ctypes.CDLL(None)
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free(ptr)
        return out.decode(errors="replace")
    except (OSError, AttributeError):
        return name


@dataclass(frozen=True)
class GraphNode:
    """One node of a captured graph.

    Attributes:
        position: Position in topological (execution) order.
        type: ``"kernel"``, ``"memset"``, ``"memcpy"``, ``"empty"`` … (see :data:`NODE_TYPES`).
        preds: Positions of its predecessors.
        name: Kernel symbol, demangled (empty for other nodes).
        grid: Launch grid of a kernel.
        block: Launch block of a kernel.
        shared_mem_bytes: Dynamic shared memory of a kernel, bytes.
        memset_bytes: Bytes a memset node fills.
    """

    position: int
    type: str
    preds: tuple[int, ...]
    name: str = ""
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    shared_mem_bytes: int | None = None
    memset_bytes: int | None = None


class GraphView:
    """The nodes of a captured CUDA graph in execution order, and sub-graphs cut from it.

    Args:
        graph: The ``cudaGraph_t`` / ``CUgraph`` handle (e.g. ``CUDAGraph.raw_cuda_graph()``).
    """

    def __init__(self, graph: int) -> None:
        self.drv = driver()
        self.graph = ctypes.c_void_p(graph)
        n = _sz(0)
        self.drv.call("cuGraphGetNodes", self.graph, None, ctypes.byref(n))
        handles = (_p * max(n.value, 1))()
        self.drv.call("cuGraphGetNodes", self.graph, handles, ctypes.byref(n))
        raw = cast(list[int], [handles[i] for i in range(n.value)])
        index = {h: i for i, h in enumerate(raw)}
        types = [self._type(h) for h in raw]
        preds = [[index[d] for d in self._deps(h)] for h in raw]
        order = graph_pruning.topological_order(preds)
        pos = {node: p for p, node in enumerate(order)}
        self.handles: list[int] = [raw[i] for i in order]
        self.types: list[str] = [types[i] for i in order]
        self.preds: list[list[int]] = [sorted(pos[q] for q in preds[i]) for i in order]
        self.nodes: list[GraphNode] = [self._describe(p) for p in range(len(order))]

    def __len__(self) -> int:
        return len(self.nodes)

    def counts(self) -> dict[str, int]:
        """Number of nodes of each type."""
        out: dict[str, int] = {}
        for t in self.types:
            out[t] = out.get(t, 0) + 1
        return out

    def positions(self, *types: str) -> list[int]:
        """Positions of the nodes of the given types, in execution order."""
        return [p for p, t in enumerate(self.types) if t in types]

    # -- node queries ------------------------------------------------------------------------------
    def _type(self, h: int) -> str:
        t = ctypes.c_int()
        self.drv.call("cuGraphNodeGetType", _p(h), ctypes.byref(t))
        return NODE_TYPES.get(t.value, f"type{t.value}")

    def _deps(self, h: int) -> list[int]:
        n = _sz(0)
        if self.drv.has("cuGraphNodeGetDependencies_v2"):
            self.drv.call("cuGraphNodeGetDependencies_v2", _p(h), None, None, ctypes.byref(n))
            if n.value == 0:
                return []
            deps = (_p * n.value)()
            edges = (_EdgeData * n.value)()
            self.drv.call("cuGraphNodeGetDependencies_v2", _p(h), deps, edges, ctypes.byref(n))
        else:
            self.drv.call("cuGraphNodeGetDependencies", _p(h), None, ctypes.byref(n))
            if n.value == 0:
                return []
            deps = (_p * n.value)()
            self.drv.call("cuGraphNodeGetDependencies", _p(h), deps, ctypes.byref(n))
        return cast(list[int], [deps[i] for i in range(n.value)])

    def _describe(self, p: int) -> GraphNode:
        h, t = self.handles[p], self.types[p]
        if t == "kernel":
            params = _KernelNodeParams()
            self.drv.call("cuGraphKernelNodeGetParams_v2", _p(h), ctypes.byref(params))
            return GraphNode(
                p,
                t,
                tuple(self.preds[p]),
                self._kernel_name(params),
                (params.gridDimX, params.gridDimY, params.gridDimZ),
                (params.blockDimX, params.blockDimY, params.blockDimZ),
                int(params.sharedMemBytes),
            )
        if t == "memset":
            ms = _MemsetNodeParams()
            self.drv.call("cuGraphMemsetNodeGetParams", _p(h), ctypes.byref(ms))
            nbytes = int(ms.elementSize * ms.width * max(ms.height, 1))
            return GraphNode(p, t, tuple(self.preds[p]), memset_bytes=nbytes)
        return GraphNode(p, t, tuple(self.preds[p]))

    def _kernel_name(self, params: _KernelNodeParams) -> str:
        name = ctypes.c_char_p()
        for fn, handle in (("cuFuncGetName", params.func), ("cuKernelGetName", params.kern)):
            if handle and self.drv.has(fn):
                try:
                    self.drv.call(fn, ctypes.byref(name), _p(handle))
                except CudaGraphError:
                    continue
                if name.value:
                    return demangle(name.value.decode(errors="replace"))
        return "unknown_kernel"

    # -- sub-graphs ----------------------------------------------------------------------------------
    def subgraph(self, keep: Sequence[int]) -> int:
        """A new graph holding only the nodes at positions ``keep`` (their order preserved).

        Returns:
            A ``CUgraph`` handle the caller owns (destroy it with :func:`destroy_graph`).
        """
        keep_set = set(keep)
        clone = _p()
        self.drv.call("cuGraphClone", ctypes.byref(clone), self.graph)
        try:
            mapped: dict[int, int] = {}
            for p, h in enumerate(self.handles):
                c = _p()
                self.drv.call("cuGraphNodeFindInClone", ctypes.byref(c), _p(h), clone)
                mapped[p] = cast(int, c.value)
            for p in range(len(self.handles)):
                if p not in keep_set:
                    self.drv.call("cuGraphDestroyNode", _p(mapped[p]))
            for a, b in graph_pruning.bridging_edges(keep_set, self.preds):
                src, dst = (_p * 1)(mapped[a]), (_p * 1)(mapped[b])
                if self.drv.has("cuGraphAddDependencies_v2"):
                    self.drv.call("cuGraphAddDependencies_v2", clone, src, dst, None, 1)
                else:
                    self.drv.call("cuGraphAddDependencies", clone, src, dst, 1)
        except CudaGraphError:
            destroy_graph(cast(int, clone.value))
            raise
        return cast(int, clone.value)

    def isolation_set(self, position: int, kernels_back: int = 0) -> list[int]:
        """Positions kept when the node at ``position`` is replayed alone (it and its dependency memsets)."""
        return graph_pruning.isolation_set(position, self.types, self.preds, kernels_back)


def destroy_graph(graph: int) -> None:
    """Destroy a graph made by :meth:`GraphView.subgraph` or :func:`batch_graph`."""
    driver().call("cuGraphDestroy", _p(graph))


def batch_graph(child: int, copies: int) -> int:
    """A graph running ``copies`` copies of ``child`` back to back (child-graph nodes in a chain).

    Returns:
        A ``CUgraph`` handle the caller owns.
    """
    drv = driver()
    g = _p()
    drv.call("cuGraphCreate", ctypes.byref(g), 0)
    try:
        prev = None
        for _ in range(int(copies)):
            node = _p()
            if prev is None:
                drv.call("cuGraphAddChildGraphNode", ctypes.byref(node), g, None, 0, _p(child))
            else:
                deps = (_p * 1)(prev)
                drv.call("cuGraphAddChildGraphNode", ctypes.byref(node), g, deps, 1, _p(child))
            prev = node.value
    except CudaGraphError:
        destroy_graph(cast(int, g.value))
        raise
    return cast(int, g.value)


class GraphExec:
    """An instantiated graph that can be launched on a stream.

    Args:
        graph: A ``CUgraph``.
        owns_graph: Destroy ``graph`` too on :meth:`close`.
    """

    def __init__(self, graph: int, owns_graph: bool = False) -> None:
        self.drv = driver()
        self.graph = int(graph)
        self.owns_graph = owns_graph
        ex = _p()
        self.drv.call("cuGraphInstantiateWithFlags", ctypes.byref(ex), _p(self.graph), 0)
        self.handle = ex.value

    def launch(self, stream: int) -> None:
        """Enqueue one run of the graph on ``stream`` (a ``cudaStream_t`` as an integer)."""
        self.drv.call("cuGraphLaunch", _p(self.handle), _p(stream))

    def close(self) -> None:
        """Free the executable graph (and the graph when owned). Idempotent."""
        if self.handle:
            self.drv.call("cuGraphExecDestroy", _p(self.handle))
            self.handle = None
        if self.owns_graph and self.graph:
            destroy_graph(self.graph)
            self.graph = 0

    def __enter__(self) -> GraphExec:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
