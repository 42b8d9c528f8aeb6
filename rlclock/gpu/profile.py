"""``rlclock profile``: capture a transformer layer's training step on a GPU and write its KernelTrace.

1. Build the layer of a :class:`~rlclock.workload.transformer.TransformerConfig` in PyTorch
   (:mod:`rlclock.workload.torch_layer`), warm it up, and profile one eager forward + backward to learn
   which operator (with which shapes) launched each kernel, and in which pass.
2. Capture forward + backward as a CUDA graph (``keep_graph=True``) and list its nodes in execution order
   (:class:`~rlclock.gpu.cuda_graph.GraphView`): kernel names and launch shapes, memsets, memcpys.
3. Profile ``replays`` graph replays: each kernel's in-sequence duration is its median over the replays.
4. Map the kernels onto the analytic kernels (:mod:`rlclock.workload.mapping`) and write the trace: one
   entry per kernel and memcpy node, each with an ``"in-sequence"`` :class:`Measurement`.

The graph stays available (:class:`CapturedStep`) for kernel isolation, measurement and schedule replay.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import difflib
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from rlclock.errors import CudaGraphError, GpuUnavailableError
from rlclock.workload.kernel_names import classify
from rlclock.workload.mapping import MappingStats, ProfiledEntry, map_to_kernels
from rlclock.workload.torch_profile import DeviceEvent, profile_eager, profile_replays
from rlclock.workload.trace import KernelTrace
from rlclock.workload.transformer import TransformerConfig

ENTRY_NODE_TYPES = ("kernel", "memcpy")
"""Graph node types that become trace entries (memsets are replayed with the kernel that needs them)."""


def _require_cuda() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        raise GpuUnavailableError("PyTorch is not installed.", "pip install torch (with CUDA).") from None
    if not torch.cuda.is_available():
        raise GpuUnavailableError(
            "profiling needs an NVIDIA GPU with CUDA, and PyTorch sees none.",
            "run on a GPU machine (rlclock doctor says what is missing).",
        )
    return torch


def _graph_handle(raw: Any) -> int:
    if isinstance(raw, int):
        return raw
    try:
        return int(raw)
    except TypeError:
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        return int(get(raw, None))


@dataclass
class CapturedStep:
    """A layer's forward + backward captured as a CUDA graph, with its nodes listed.

    Attributes:
        cfg: The layer's configuration.
        step: The PyTorch step (its tensors are the graph's buffers: keep it alive).
        graph: The ``torch.cuda.CUDAGraph`` (its memory pool holds the buffers).
        view: The graph's nodes in execution order.
        entries: Node positions of the trace entries (kernel and memcpy nodes), in order.
    """

    cfg: TransformerConfig
    step: Any
    graph: Any
    view: Any
    entries: list[int]

    @property
    def raw_graph(self) -> int:
        """The ``CUgraph`` handle."""
        return _graph_handle(self.graph.raw_cuda_graph())

    def replay(self) -> None:
        """Run the whole step once (asynchronously, on the current stream)."""
        self.graph.replay()

    def entry_names(self) -> list[str]:
        """Names of the entry nodes (kernel names; ``""`` for memcpys)."""
        return [self.view.nodes[p].name for p in self.entries]


def capture_step(
    cfg: TransformerConfig, warmup: int = 3, seed: int = 0, eager_profile: bool = False
) -> tuple[CapturedStep, list[DeviceEvent]]:
    """Build, warm up and capture a layer's forward + backward.

    Args:
        cfg: Layer shape.
        warmup: Eager steps before capture (cuBLAS / cuDNN pick their kernels here).
        seed: Seed of weights and data.
        eager_profile: Also profile one eager step (operators, shapes, phases) before capturing.

    Returns:
        The captured step and the eager step's device events (empty unless ``eager_profile``).

    Raises:
        GpuUnavailableError: No CUDA GPU.
        CudaGraphError: The graph cannot be inspected.
    """
    torch = _require_cuda()
    from rlclock.gpu.cuda_graph import GraphView
    from rlclock.workload.torch_layer import LayerStep

    step = LayerStep(cfg, "cuda", seed)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step.zero_grad()
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    eager: list[DeviceEvent] = []
    if eager_profile:
        step.zero_grad()
        eager = profile_eager(step.forward, lambda y: y.backward(step.dy))
    step.zero_grad()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        step()
    graph.instantiate()
    graph.replay()
    torch.cuda.synchronize()
    view = GraphView(_graph_handle(graph.raw_cuda_graph()))
    entries = view.positions(*ENTRY_NODE_TYPES)
    if not entries:
        raise CudaGraphError("the captured step has no kernels.", "check that the layer runs on the GPU.")
    return CapturedStep(cfg, step, graph, view, entries), eager


def capture_for_trace(trace: KernelTrace, seed: int = 0) -> CapturedStep:
    """Capture the step a profiled trace was made from, and check it launches the same kernels.

    Raises:
        CudaGraphError: The trace was not made by ``rlclock profile``, or this machine's PyTorch/cuBLAS
            launch other kernels than the ones profiled.
    """
    cfg_raw = trace.meta.get("config")
    if trace.meta.get("generator") != GENERATOR or not isinstance(cfg_raw, dict):
        raise CudaGraphError(
            f"trace {trace.name!r} was not written by rlclock profile, so its step cannot be re-captured.",
            "profile the layer with rlclock profile first.",
        )
    captured, _ = capture_step(TransformerConfig(**cfg_raw), seed=seed)
    types = trace.meta.get("entry_types", list(ENTRY_NODE_TYPES))
    captured.entries = captured.view.positions(*types)
    names = captured.entry_names()
    expected = [
        k.name if captured.view.types[p] == "kernel" else "" for k, p in zip(trace, captured.entries, strict=False)
    ]
    if len(names) != len(trace) or names != expected:
        bad = next(
            (i for i, (a, b) in enumerate(zip(names, expected, strict=False)) if a != b), min(len(names), len(trace))
        )
        raise CudaGraphError(
            f"the step captured here has {len(names)} kernels, the trace {trace.name!r} {len(trace)}; they first "
            f"differ at entry {bad}.",
            "re-profile on this machine (rlclock profile) with the same software.",
        )
    return captured


GENERATOR = "rlclock.gpu.profile"


@dataclass
class ProfileResult:
    """What :func:`profile_layer` found.

    Attributes:
        trace: The trace (one entry per kernel / memcpy node, with in-sequence measurements).
        captured: The captured step, for isolation and measurement.
        mapping: How entries were mapped to analytic kernels.
        graph_counts: Graph nodes by type.
        in_sequence_kernel_s: Sum of the entries' in-sequence durations, seconds.
        memset_s: In-sequence time of memset nodes per step, seconds (0 if the profiler shows none).
        step_event_s: Step time from CUDA events around graph replays, seconds.
        eager_matched: Entries whose operator and phase came from the eager profile.
        name_mismatches: Entries whose profiled name differs from the graph node's.
    """

    trace: KernelTrace
    captured: CapturedStep
    mapping: MappingStats
    graph_counts: dict[str, int]
    in_sequence_kernel_s: float
    memset_s: float
    step_event_s: float
    eager_matched: int
    name_mismatches: int
    notes: list[str] = field(default_factory=list)


def _chunks(events: list[DeviceEvent], kinds: tuple[str, ...], per: int, replays: int) -> list[list[DeviceEvent]]:
    sel = [e for e in events if e.kind in kinds]
    if per == 0 or len(sel) != per * replays:
        raise CudaGraphError(
            f"the profiler saw {len(sel)} {'/'.join(kinds)} executions in {replays} graph replays, expected "
            f"{per * replays}.",
            "make sure nothing else runs on the GPU while profiling.",
        )
    return [sel[r * per : (r + 1) * per] for r in range(replays)]


def step_time_s(replay: Any, launches: int = 20) -> float:
    """Median time of one ``replay()`` from CUDA events over ``launches`` replays (after a warm-up), seconds."""
    import torch

    for _ in range(3):
        replay()
    times = []
    for _ in range(launches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def profile_layer(cfg: TransformerConfig, replays: int = 20, seed: int = 0, name: str | None = None) -> ProfileResult:
    """Profile one layer's training step (forward + backward) and build its trace.

    Args:
        cfg: Layer shape (``layers`` and ``head`` are ignored: one layer is captured).
        replays: Graph replays profiled for the in-sequence durations.
        seed: Seed of weights and data.
        name: Trace name (default from the shape and the GPU).

    Raises:
        GpuUnavailableError: No CUDA GPU.
        CudaGraphError: Capture, inspection or profiling failed.
    """
    torch = _require_cuda()
    captured, eager = capture_step(cfg, seed=seed, eager_profile=True)
    view = captured.view
    events = profile_replays(captured.replay, replays)
    notes: list[str] = []
    try:
        chunks = _chunks(events, ENTRY_NODE_TYPES, len(captured.entries), replays)
    except CudaGraphError:  # the profiler does not show memcpys inside graphs: kernels only
        captured.entries = view.positions("kernel")
        chunks = _chunks(events, ("kernel",), len(captured.entries), replays)
        notes.append("memcpy nodes are not trace entries: the profiler reported none inside graph replays")
    per = len(captured.entries)
    durations = [statistics.median(c[j].dur_us for c in chunks) * 1e-6 for j in range(per)]
    memsets = [e for e in events if e.kind == "memset"]
    memset_s = sum(e.dur_us for e in memsets) * 1e-6 / replays
    prof_names = [e.name for e in chunks[0]]
    graph_names = [
        view.nodes[p].name if view.types[p] == "kernel" else prof_names[j] for j, p in enumerate(captured.entries)
    ]
    graph_names = [g if g and g != "unknown_kernel" else prof_names[j] for j, g in enumerate(graph_names)]
    mismatches = sum(1 for a, b in zip(prof_names, graph_names, strict=False) if a != b)
    eager_dev = [e for e in eager if e.kind in ("kernel", "memcpy")]
    match: dict[int, DeviceEvent] = {}
    sm = difflib.SequenceMatcher(None, [e.name for e in eager_dev], prof_names, autojunk=False)
    for blk in sm.get_matching_blocks():
        for t in range(blk.size):
            match[blk.b + t] = eager_dev[blk.a + t]
    entries: list[ProfiledEntry] = []
    phase = "forward"
    for j, p in enumerate(captured.entries):
        node = view.nodes[p]
        ev = match.get(j)
        if ev is not None and ev.phase:
            phase = ev.phase
        op = ev.op if ev is not None else None
        kind = view.types[p]
        cat = classify(graph_names[j], op.name if op else None) if kind == "kernel" else "copy"
        entries.append(
            ProfiledEntry(
                name=graph_names[j] if kind == "kernel" else "memcpy",
                category=cat,
                phase=phase,
                time_s=durations[j],
                grid=node.grid,
                block=node.block,
                op=op,
                nbytes=(ev.nbytes if ev is not None else None) if kind == "memcpy" else None,
            )
        )
    gpu_name = torch.cuda.get_device_name()
    kernels, stats = map_to_kernels(entries, cfg, gpu_name)
    step_s = step_time_s(captured.replay)
    layer_cfg = TransformerConfig(**{**asdict(cfg), "layers": 1, "head": False, "optimizer": False})
    from rlclock.gpu import nvml

    meta = {
        "generator": GENERATOR,
        "config": asdict(layer_cfg),
        "gpu": gpu_name,
        "driver": nvml.try_read(nvml.driver_version),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "graph_nodes": view.counts(),
        "entry_node_types": [view.types[p] for p in captured.entries],
        "entry_types": sorted({view.types[p] for p in captured.entries}),
        "memset_bytes": [view.nodes[p].memset_bytes for p in view.positions("memset")],
        "in_sequence": {
            "replays": replays,
            "kernel_time_s": sum(durations),
            "memset_time_s": memset_s,
            "step_event_time_s": step_s,
            "source": "torch.profiler (CUPTI) over CUDA graph replays",
        },
        "mapping": stats.as_dict(),
        "notes": notes,
    }
    trace = KernelTrace(
        name or f"{cfg.style}-c{cfg.hidden}-h{cfg.heads}-t{cfg.seq}-b{cfg.batch}-{cfg.dtype}-layer", kernels, meta
    )
    return ProfileResult(
        trace,
        captured,
        stats,
        view.counts(),
        sum(durations),
        memset_s,
        step_s,
        sum(1 for j in range(per) if j in match),
        mismatches,
        notes,
    )
