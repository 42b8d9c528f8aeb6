"""Profile a few steps of the user's own training loop: the kernel sequence, a KernelTrace and a StepTimeline.

:class:`StepProfiler` runs ``torch.profiler`` (CPU and CUDA activity, operator input shapes) over a few
consecutive steps, each wrapped in a ``record_function`` range that starts at the loop's step mark.
:func:`profile_from_chrome` then, from the profiler's Chrome-trace export:

1. assigns every device activity (kernel, memcpy, memset) to the step whose range contains its *launch*
   (the CUDA runtime call with the same correlation id), so no synchronisation between steps is needed;
2. places each step's anchor where the controller's CUDA event would complete: at the later of the step
   mark on the host and the end of the previous step's last device activity (the profile starts after a
   synchronisation, so the first step's GPU is idle);
3. keeps the steps with the most common kernel sequence (the first profiled step is left out when there are
   others: the profiler's own start-up can delay it), and takes per kernel the median start offset from the
   anchor and the median duration — the timeline — and the median anchor-to-anchor period;
4. builds a :class:`~rlclock.workload.trace.KernelTrace`: per kernel its category (from its name and
   launching operator), phase (``backward`` when launched from the autograd engine's thread, ``optimizer``
   inside an ``Optimizer.step`` range, else ``forward``), the operator call that launched it with its input
   shapes (kept in the trace), FLOPs and DRAM bytes derived from them (:mod:`rlclock.workload.op_costs`; 0
   when unknown), and its measured in-sequence duration at the clocks it ran at.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import itertools
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError, GpuUnavailableError
from rlclock.workload.inductor import InductorCode
from rlclock.workload.kernel_names import activity_kind as _activity_kind
from rlclock.workload.kernel_names import classify
from rlclock.workload.op_costs import Launch, costs, kernel_fields
from rlclock.workload.torch_profile import export_chrome, launch_op
from rlclock.workload.trace import Kernel, KernelTrace, LaunchOp, Measurement

STEP_RANGE = "rlclock.deploy.step"
"""Name of the profiler range around each profiled step."""
GENERATOR = "rlclock.deploy.capture"
_DEVICE_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


@dataclass
class StepProfile:
    """What profiling the loop's steps found.

    Attributes:
        trace: The step's kernel sequence as a trace (in-sequence durations measured at the clocks in use).
        timeline: Start offsets from the step's anchor and durations, seconds.
        steps_profiled: Steps the profiler saw.
        steps_used: Steps with the chosen kernel sequence whose medians were taken.
        notes: What was left out and why.
    """

    trace: KernelTrace
    timeline: StepTimeline
    steps_profiled: int
    steps_used: int
    notes: list[str] = field(default_factory=list)

    @property
    def auto_time_s(self) -> np.ndarray:
        """Each kernel's measured duration, seconds."""
        return self.timeline.duration_s.copy()


@dataclass
class _Activity:
    name: str
    kind: str
    ts_us: float
    dur_us: float
    launch_us: float
    phase: str
    op: LaunchOp | None
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    nbytes: int | None


def _triple(v: Any) -> tuple[int, int, int] | None:
    if isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and x > 0 for x in v):
        return (v[0], v[1], v[2])
    return None


def _activities(
    data: dict[str, Any], code: InductorCode | None = None
) -> tuple[list[tuple[float, float]], list[_Activity]]:
    """Step ranges (µs) and device activities with launch time and phase, from a Chrome trace; a launch of a
    kernel TorchInductor generated carries what its source says (``code``, by its ``kernel_file``)."""
    events = data.get("traceEvents", []) if isinstance(data, dict) else []
    ranges: list[tuple[float, float]] = []
    main_tid: Any = None
    optim: list[tuple[float, float]] = []
    launch: dict[int, tuple[float, Any]] = {}
    replayed: set[int] = set()  # launches that replay a CUDA graph: their kernels' operator is not the caller's
    ops: dict[int, tuple[LaunchOp, float, Any]] = {}
    for e in events:
        cat, name, args = e.get("cat"), str(e.get("name", "")), e.get("args") or {}
        if cat == "user_annotation" and name == STEP_RANGE:
            ranges.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))))
            main_tid = e.get("tid")
        elif cat in ("user_annotation", "cpu_op") and name.startswith("Optimizer.step"):
            optim.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))))
        elif cat in _LAUNCH_CATS and isinstance(args.get("correlation"), int):
            launch[args["correlation"]] = (float(e["ts"]), e.get("tid"))
            if "GraphLaunch" in name:
                replayed.add(args["correlation"])
        if cat == "cpu_op" and isinstance(args.get("External id"), int):
            op = launch_op(name, args, args["External id"])
            if code is not None and isinstance(args.get("kernel_file"), str):
                op = replace(op, code=code.kernel(args["kernel_file"], op.concrete_inputs))
            ops[args["External id"]] = (op, float(e["ts"]), e.get("tid"))
    ranges.sort()
    out: list[_Activity] = []
    for e in events:
        kind = _DEVICE_KINDS.get(e.get("cat"))
        if kind is None or e.get("ph") != "X":
            continue
        args = e.get("args") or {}
        corr, ext = args.get("correlation"), args.get("External id")
        op_rec = ops.get(ext) if isinstance(ext, int) and corr not in replayed else None
        if isinstance(corr, int) and corr in launch:
            t_launch, tid = launch[corr]
        elif op_rec is not None:
            t_launch, tid = op_rec[1], op_rec[2]
        else:
            t_launch, tid = float(e["ts"]), None
        if tid is not None and main_tid is not None and tid != main_tid:
            phase = "backward"
        elif any(a <= t_launch < b for a, b in optim):
            phase = "optimizer"
        else:
            phase = "forward"
        nbytes = args.get("bytes")
        out.append(
            _Activity(
                str(e.get("name", kind)) or kind,
                kind,
                float(e["ts"]),
                float(e.get("dur", 0.0)),
                t_launch,
                phase,
                op_rec[0] if op_rec else None,
                _triple(args.get("grid")),
                _triple(args.get("block")),
                int(nbytes) if isinstance(nbytes, (int, float)) else None,
            )
        )
    out.sort(key=lambda a: a.ts_us)
    return ranges, out


def _kernels(acts: list[_Activity], dur_s: np.ndarray, gpu: str) -> list[Kernel]:
    """The trace's kernels: each activity with its operator call, its cost from that call's shapes
    (:func:`rlclock.workload.op_costs.costs`) and its measured in-sequence duration."""
    launches = [Launch(a.name, a.kind, a.grid, a.block, a.nbytes) for a in acts]
    ops = [a.op for a in acts]
    calls: dict[int, int] = {}  # the profiler's operator ids, renumbered in order of first launch
    for op in ops:
        if op is not None and op.call >= 0:
            calls.setdefault(op.call, len(calls))
    ops = [replace(op, call=calls[op.call]) if op is not None and op.call >= 0 else op for op in ops]
    out = []
    for i, (a, op, c) in enumerate(zip(acts, ops, costs(ops, launches), strict=True)):
        opname = (op.name.split("::")[-1] if op else a.kind).strip("_") or a.kind
        out.append(
            Kernel(
                name=a.name,
                op=f"{a.phase[:3]}.{opname}.{i}",
                phase=a.phase,
                layer=-1,
                launch_grid=a.grid,
                launch_block=a.block,
                launch_op=op,
                measured=(Measurement(gpu=gpu, time_s=max(float(dur_s[i]), 1e-9), source="in-sequence"),),
                **kernel_fields(c),
            )
        )
    return out


def cost_notes(kernels: Sequence[Kernel]) -> list[str]:
    """What the profile's summary says about the kernels no rule knew: how many, and their share of the step's
    measured kernel time (they are planned from their measured time)."""
    timed = [k for k in kernels if k.cost_from == "time"]
    if not timed:
        return []
    total = sum(k.measured[0].time_s for k in kernels if k.measured) or 1.0
    share = sum(k.measured[0].time_s for k in timed if k.measured) / total
    names = Counter(k.name for k in timed).most_common(3)
    return [
        f"{len(timed)} of {len(kernels)} kernels ({100 * share:.1f} % of the kernel time) matched no cost rule "
        f"and are planned from their measured time (most often: " + ", ".join(f"{n[:60]} x{c}" for n, c in names) + ")"
    ]


IMPLAUSIBLE_RATIO = 10.0
"""A kernel whose cost from the rules predicts a time this many times above or below its measured one is planned
from its measured time instead (and the profile says so)."""


def check_costs(trace: KernelTrace, spec: Any) -> tuple[KernelTrace, list[str]]:
    """The trace with every kernel whose rule-given cost is implausible on ``spec`` — its predicted time at the
    driver's clocks more than :data:`IMPLAUSIBLE_RATIO` times from its measured one — planned from its measured time
    instead, and a line saying how many and how much of the step they are (empty when none is)."""
    from rlclock.backends.simulated import SimulatedGpu
    from rlclock.schedule import AUTO

    predicted, _ = SimulatedGpu(spec, trace, [AUTO], anchor=False).tables
    measured = np.array([k.measured[0].time_s if k.measured else np.nan for k in trace])
    ratio = predicted[:, 0] / measured
    odd = [
        i
        for i, k in enumerate(trace)
        if k.cost_from == "rules"
        and np.isfinite(ratio[i])
        and not 1.0 / IMPLAUSIBLE_RATIO <= ratio[i] <= IMPLAUSIBLE_RATIO
        and _activity_kind(k.name) == "kernel"
    ]
    if not odd:
        return trace, []
    kernels = list(trace)
    for i in odd:
        kernels[i] = replace(kernels[i], flops=0.0, dram_read_bytes=0.0, dram_write_bytes=0.0, cost_from="time")
    worst = max(odd, key=lambda i: abs(np.log(ratio[i])))
    share = float(np.nansum(measured[odd]) / np.nansum(measured))
    return trace.with_kernels(kernels), [
        f"{len(odd)} kernels ({100 * share:.1f} % of the kernel time) were predicted from their shapes more than "
        f"{IMPLAUSIBLE_RATIO:g}x from their measured time and are planned from it instead (worst: "
        f"{trace[worst].name[:60]}, {1e6 * predicted[worst, 0]:.0f} us predicted, {1e6 * measured[worst]:.0f} us "
        "measured)"
    ]


def profile_from_chrome(
    data: dict[str, Any],
    gpu_name: str,
    name: str = "training-step",
    meta: dict[str, Any] | None = None,
    code: dict[str, str] | None = None,
) -> StepProfile:
    """The step's trace and timeline from a profiler Chrome trace holding :data:`STEP_RANGE` ranges.

    Args:
        data: The parsed JSON of ``torch.profiler.profile.export_chrome_trace``.
        gpu_name: The GPU's name, for the trace's measurements.
        name: Trace name.
        meta: Extra metadata for the trace.
        code: The source TorchInductor generated for the process (:func:`inductor_code`), for compiled steps:
            a generated kernel's cost comes from its source, and the kernels of a graph replayed as a CUDA graph
            from the launches its output code makes.

    Raises:
        DeployError: No step range, or no device activity inside the profiled steps.
    """
    generated = InductorCode.read(code) if code else None
    ranges, acts = _activities(data, generated)
    if not ranges:
        raise DeployError(
            f"the profile holds no '{STEP_RANGE}' ranges, so its steps cannot be told apart.",
            "profile through rlclock.deploy (clocked) with a step() call per training step.",
        )
    starts = [a for a, _ in ranges]
    per_step: list[list[_Activity]] = [[] for _ in ranges]
    for a in acts:
        k = bisect.bisect_right(starts, a.launch_us) - 1
        if 0 <= k < len(ranges) and a.launch_us < ranges[k][1]:
            per_step[k].append(a)
    notes: list[str] = []
    anchors: list[float] = []
    prev_end = -float("inf")
    for k, (t0, _) in enumerate(ranges):
        anchors.append(max(t0, prev_end))
        if per_step[k]:
            prev_end = max(prev_end, max(a.ts_us + a.dur_us for a in per_step[k]))
    anchors.append(max(ranges[-1][1], prev_end))
    usable = [k for k in range(len(ranges)) if per_step[k]]
    if not usable:
        raise DeployError(
            f"the {len(ranges)} profiled steps launched no GPU work.",
            "make sure the model and data are on the GPU, and step() marks each training step.",
        )
    if len(usable) > 1:
        usable = usable[1:]
    sigs = {k: tuple((a.kind, a.name) for a in per_step[k]) for k in usable}
    best, _count = Counter(sigs.values()).most_common(1)[0]
    chosen = [k for k in usable if sigs[k] == best]
    if len(chosen) < len(usable):
        notes.append(
            f"{len(usable) - len(chosen)} of {len(usable)} profiled steps launched a different kernel "
            "sequence and were left out"
        )
    offs = np.array([[(a.ts_us - anchors[k]) * 1e-6 for a in per_step[k]] for k in chosen])
    durs = np.array([[a.dur_us * 1e-6 for a in per_step[k]] for k in chosen])
    start_s = np.maximum.accumulate(np.maximum(np.median(offs, axis=0), 0.0))
    dur_s = np.maximum(np.median(durs, axis=0), 0.0)
    period_s = statistics.median((anchors[k + 1] - anchors[k]) * 1e-6 for k in chosen)
    ref = per_step[chosen[0]]
    if generated is not None and generated.modules:
        found = generated.align([a.name for a in ref], [a.kind for a in ref], [a.op for a in ref], classify)
        ref = [replace(a, op=op) for a, op in zip(ref, found, strict=True)]
    kernels = _kernels(ref, dur_s, gpu_name)
    notes.extend(cost_notes(kernels))
    trace = KernelTrace(
        name,
        kernels,
        {
            "generator": GENERATOR,
            "gpu": gpu_name,
            "steps_profiled": len(ranges),
            "steps_used": len(chosen),
            "step_period_s": period_s,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "source": "torch.profiler (CUPTI) over live training steps; FLOPs/bytes estimated from operator shapes",
            **(meta or {}),
        },
    )
    timeline = StepTimeline(start_s, dur_s, period_s, tuple(a.name for a in ref), "profile")
    return StepProfile(trace, timeline, len(ranges), len(chosen), notes)


def inductor_code(data: dict[str, Any] | None = None) -> dict[str, str]:
    """The Python source TorchInductor generated for this process, by file path: every output-code module it
    loaded (each holds its graph's Triton kernels and the ``call`` that launches them with the buffers' shapes)
    and every kernel file a profiled Triton launch names (its ``kernel_file`` argument in ``data``, a Chrome
    trace). Empty when the process compiled nothing; a file that cannot be read is left out."""
    import sys

    paths: list[str] = []
    codecache = sys.modules.get("torch._inductor.codecache")
    cache = getattr(codecache, "PyCodeCache", None)
    for module in [*getattr(cache, "modules", ()), *getattr(cache, "modules_no_attr", {}).values()]:
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            paths.append(path)
    for e in (data or {}).get("traceEvents", []) if isinstance(data, dict) else []:
        path = (e.get("args") or {}).get("kernel_file") if isinstance(e, dict) else None
        if isinstance(path, str) and path:
            paths.append(path)
    out: dict[str, str] = {}
    for path in dict.fromkeys(paths):
        try:
            with open(path, encoding="utf-8") as f:
                out[path] = f.read()
        except (OSError, UnicodeDecodeError):
            continue
    return out


class StepProfiler:
    """Profiles consecutive training steps of a live loop (module docstring).

    Call :meth:`start` at a step mark, :meth:`mark` at each following one, and :meth:`stop` at the mark that
    ends the last profiled step.

    Raises:
        GpuUnavailableError: No CUDA GPU.
    """

    def __init__(self) -> None:
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            raise GpuUnavailableError("PyTorch is not installed.", "pip install torch (with CUDA).") from None
        if not torch.cuda.is_available():
            raise GpuUnavailableError(
                "profiling the training step needs a CUDA GPU, and PyTorch sees none.",
                "run on a GPU machine, or pass both a schedule and a step timeline.",
            )
        self._torch = torch
        self._prof: Any = None
        self._range: Any = None
        self.steps = 0

    def start(self) -> None:
        """Start profiling; the current step is the first profiled one."""
        from torch.profiler import ProfilerActivity, profile

        self._torch.cuda.synchronize()
        self._prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True)
        self._prof.__enter__()
        self._open()

    def _open(self) -> None:
        self._range = self._torch.autograd.profiler.record_function(STEP_RANGE)
        self._range.__enter__()
        self.steps += 1

    def _close(self) -> None:
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None

    def mark(self) -> None:
        """The next profiled step starts now."""
        self._close()
        self._open()

    def stop(self) -> dict[str, Any]:
        """End the last profiled step and the profiler; returns the Chrome trace."""
        self._close()
        return _stop_and_export(self._torch, self._prof)


MARKER_KERNEL = "spin_kernel"
"""Name of the kernel :class:`StepTimer` launches at each mark of a located step (``torch.cuda._sleep``)."""


class StepTimer:
    """The running step: where its kernels fall and how long it takes, without the operator profiler.

    Of ``steps`` timed steps, the first ``steps // 2`` run under a profile of CUDA activity alone — no
    operator recording, so the host keeps nearly its own pace — with a marker kernel launched at each mark:
    they *locate* every kernel in the running step (:meth:`located`). The rest are timed by CUDA events at
    their marks alone: :meth:`period_s` is the median time between consecutive events (the first interval,
    which follows the profile's shutdown, is left out when there are three or more). An event completes when
    the GPU has finished everything launched before its mark, so that period is the step as it runs,
    GPU-bound or host-bound.

    Call :meth:`mark` at the mark that starts each timed step and at the one that ends the last.
    """

    def __init__(self, steps: int) -> None:
        import torch

        self._torch = torch
        self.steps = steps
        self.locating = steps // 2
        self.points: list[int] = []
        """Points the loop marked inside each located step (:meth:`point`), per step."""
        self._marks = 0
        self._events: list[Any] = []
        self._prof: Any = None
        self._data: dict[str, Any] | None = None
        if self.locating:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CUDA])
            self._prof.__enter__()

    def mark(self) -> None:
        """A timed step starts (or the last one ends) now."""
        k = self._marks
        self._marks += 1
        if k <= self.locating and self._prof is not None:
            self._torch.cuda._sleep(1)  # the marker: a kernel of ~1 µs where the GPU reaches this mark
            if k < self.locating:
                self.points.append(0)
            if k == self.locating:
                self._data = _stop_and_export(self._torch, self._prof)
                self._prof = None
        if k >= self.locating:
            ev = self._torch.cuda.Event(enable_timing=True)
            ev.record()
            self._events.append(ev)

    def point(self) -> None:
        """The loop passes a point inside the step now: in a located step a marker kernel places it."""
        if self._prof is not None and 0 < self._marks <= self.locating:
            self._torch.cuda._sleep(1)
            self.points[-1] += 1

    def close(self) -> None:
        """Stop the profile if the loop ended inside it."""
        if self._prof is not None:
            self._prof.__exit__(None, None, None)
            self._prof = None

    def period_s(self) -> float | None:
        """Median step period of the event-timed steps, seconds (``None`` with fewer than two marks)."""
        if len(self._events) < 2:
            return None
        self._events[-1].synchronize()
        periods = [a.elapsed_time(b) * 1e-3 for a, b in itertools.pairwise(self._events)]
        if len(periods) >= 3:
            periods = periods[1:]
        return float(statistics.median(periods))

    def located(self, names: tuple[str, ...]) -> StepTimeline | None:
        """The located steps' timeline (:func:`timeline_from_markers`), ``None`` when none was located."""
        return timeline_from_markers(self._data, names, self.points) if self._data is not None else None


def marked_steps(data: dict[str, Any]) -> list[tuple[float, list[tuple[float, float, str]]]]:
    """The steps of a CUDA-activity profile whose steps begin with a :data:`MARKER_KERNEL`: per marker, in GPU
    order, the end of the marker (µs, the profile's clock) and the device activities after it up to the next
    marker (or the end), each ``(start µs, duration µs, name)``."""
    events = data.get("traceEvents", []) if isinstance(data, dict) else []
    acts = sorted(
        (
            (float(e["ts"]), float(e.get("dur", 0.0)), str(e.get("name", "")))
            for e in events
            if e.get("cat") in _DEVICE_KINDS and e.get("ph") == "X"
        ),
        key=lambda a: a[0],
    )
    marks = [i for i, a in enumerate(acts) if MARKER_KERNEL in a[2]]
    return [
        (acts[m0][0] + acts[m0][1], acts[m0 + 1 : m1]) for m0, m1 in zip(marks, [*marks[1:], len(acts)], strict=True)
    ]


def timeline_from_markers(
    data: dict[str, Any], names: tuple[str, ...], points: Sequence[int] = ()
) -> StepTimeline | None:
    """A step timeline from a CUDA-activity profile whose steps begin with a :data:`MARKER_KERNEL`.

    Each step's activities are those between two step markers in GPU order, placed from the end of the first
    marker (where the controller's anchor completes); of the steps whose activities carry exactly ``names``,
    each activity's median offset and duration, the median marker-to-marker period, and how far each activity
    started from its median offset in each of those steps (the timeline's ``jitter_s``). ``points`` gives, per
    step in order, how many point markers (:meth:`StepTimer.point`) follow its step marker: each point is
    placed before the activity that follows its marker, and the timeline keeps the points where every
    matching step had them at the same places.

    Returns:
        The timeline, or ``None`` when no step launched that sequence.
    """
    segments = marked_steps(data)
    steps: list[tuple[float, list[tuple[float, float, str]], tuple[int, ...]]] = []
    i = 0
    for n_points in [*points, 0] if points else [0] * len(segments):  # the last marker ends the last step
        if i + n_points >= len(segments):
            break
        anchor, body = segments[i]
        before: list[int] = []
        for _, part in segments[i + 1 : i + 1 + n_points]:
            before.append(len(body))
            body = [*body, *part]
        steps.append((anchor, body, tuple(before)))
        i += 1 + n_points
    offs, durs, periods = [], [], []
    placed: list[tuple[int, ...]] = []
    for (anchor, step, at), (next_anchor, _, _) in itertools.pairwise(steps):
        if tuple(a[2] for a in step) != tuple(names):
            continue
        offs.append([(a[0] - anchor) * 1e-6 for a in step])
        durs.append([a[1] * 1e-6 for a in step])
        periods.append((next_anchor - anchor) * 1e-6)
        placed.append(at)
    if not offs:
        return None
    start = np.maximum.accumulate(np.maximum(np.median(np.array(offs), axis=0), 0.0))
    kept: tuple[int, ...] = placed[0] if all(p == placed[0] for p in placed) else ()
    return StepTimeline(
        start,
        np.median(np.array(durs), axis=0),
        float(statistics.median(periods)),
        names,
        f"{len(offs)} steps located without operator recording",
        kept,
        np.array(offs) - start,
    )


def _stop_and_export(torch: Any, prof: Any) -> dict[str, Any]:
    torch.cuda.synchronize()
    prof.__exit__(None, None, None)
    return export_chrome(prof)
