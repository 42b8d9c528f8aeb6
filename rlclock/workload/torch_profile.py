"""Device activity from ``torch.profiler``: kernel, memcpy and memset events with their launching operators.

Two uses: profiling the eager step once (which PyTorch operator with which input shapes launched each
kernel, and whether it ran in the forward or the backward pass), and profiling replays of the captured
CUDA graph (each kernel's in-sequence duration). Both read the profiler's Chrome-trace export, whose
kernel events carry ``ts``/``dur`` in microseconds and ``args`` with ``grid``, ``block`` and the
``External id`` of the operator that launched them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlclock.workload.trace import LaunchOp, Shape

_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
FORWARD_RANGE = "rlclock.forward"
BACKWARD_RANGE = "rlclock.backward"


def _dims(v: Any) -> Shape | tuple[Shape, ...]:
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return tuple(v)
    if isinstance(v, list) and v and all(isinstance(x, list) and all(isinstance(y, int) for y in x) for x in v):
        return tuple(tuple(x) for x in v)  # a tensor list
    return ()


def launch_op(name: str, args: dict[str, Any], call: int = -1) -> LaunchOp:
    """The operator of a ``cpu_op`` event (profiled with ``record_shapes=True``) from its ``args``."""
    dims = tuple(_dims(d) for d in args.get("Input Dims", []) or [])
    types = tuple(str(t) for t in args.get("Input type", []) or [])
    concrete = tuple(str(c) for c in args.get("Concrete Inputs", []) or [])
    return LaunchOp(name, dims, types, concrete, call)


@dataclass(frozen=True)
class DeviceEvent:
    """One kernel, memcpy or memset execution.

    Attributes:
        name: Kernel name (demangled) or the copy's / fill's description.
        kind: ``"kernel"``, ``"memcpy"`` or ``"memset"``.
        ts_us: Start, microseconds on the profiler's clock.
        dur_us: Duration, microseconds.
        grid: Launch grid of a kernel.
        block: Launch block of a kernel.
        op: The launching operator, when known.
        nbytes: Bytes moved by a memcpy or memset, when known.
        phase: ``"forward"`` / ``"backward"`` when the step was annotated, else ``None``.
    """

    name: str
    kind: str
    ts_us: float
    dur_us: float
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    op: LaunchOp | None = None
    nbytes: int | None = None
    phase: str | None = None


def _tuple(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return tuple(v)
    return None


def parse_chrome_trace(data: dict[str, Any]) -> list[DeviceEvent]:
    """Device events of a profiler Chrome trace, sorted by start, with launching operators and phases.

    Args:
        data: The parsed JSON of ``prof.export_chrome_trace``.
    """
    events = data.get("traceEvents", []) if isinstance(data, dict) else []
    ops: dict[int, LaunchOp] = {}
    ranges: dict[str, tuple[float, float]] = {}
    for e in events:
        cat, args = e.get("cat"), e.get("args") or {}
        if cat == "cpu_op" and isinstance(args.get("External id"), int):
            ops[args["External id"]] = launch_op(str(e.get("name")), args, args["External id"])
        elif cat == "user_annotation" and e.get("name") in (FORWARD_RANGE, BACKWARD_RANGE):
            ranges[e["name"]] = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)))
    bwd_start = ranges.get(BACKWARD_RANGE, (None, None))[0]
    out: list[DeviceEvent] = []
    for e in events:
        kind = _KINDS.get(e.get("cat"))
        if kind is None or e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        ext = args.get("External id")
        nbytes = args.get("bytes")
        ts = float(e["ts"])
        phase = None if bwd_start is None else ("forward" if ts < bwd_start else "backward")
        out.append(
            DeviceEvent(
                str(e.get("name")),
                kind,
                ts,
                float(e.get("dur", 0.0)),
                _tuple(args.get("grid")),
                _tuple(args.get("block")),
                ops.get(ext) if isinstance(ext, int) else None,
                int(nbytes) if isinstance(nbytes, (int, float)) else None,
                phase,
            )
        )
    out.sort(key=lambda ev: ev.ts_us)
    return out


def export_chrome(prof: Any) -> dict[str, Any]:
    """A finished ``torch.profiler.profile``'s Chrome trace, parsed (through a temporary file, removed after)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="rlclock-profile-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    finally:
        os.unlink(path)


def profile_eager(forward: Callable[[], Any], backward: Callable[[Any], None]) -> list[DeviceEvent]:
    """Profile one eager forward and backward (synchronised in between) with operator shapes.

    Args:
        forward: Runs the forward pass, returns what ``backward`` needs.
        backward: Runs the backward pass.

    Returns:
        Device events in order, each with its operator and phase.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        with record_function(FORWARD_RANGE):
            out = forward()
            torch.cuda.synchronize()
        with record_function(BACKWARD_RANGE):
            backward(out)
            torch.cuda.synchronize()
    return parse_chrome_trace(export_chrome(prof))


def profile_replays(replay: Callable[[], None], replays: int) -> list[DeviceEvent]:
    """Profile ``replays`` runs of ``replay`` (e.g. a CUDA graph's), synchronised after each.

    Returns:
        All device events, in order.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            replay()
            torch.cuda.synchronize()
    return parse_chrome_trace(export_chrome(prof))
