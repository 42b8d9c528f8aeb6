"""StepTimeline: where each kernel of a training step runs, relative to the step's start on the GPU.

A :class:`~rlclock.schedule.ClockSchedule` says *which* clocks each kernel invocation wants; a timeline says
*when* each invocation is expected to start, so a controller can issue every switch ahead of the kernels it
serves. Offsets are measured from the step's *anchor*: the moment the GPU reaches the step-start marker
(a CUDA event recorded when the training loop calls ``step()``), which is when the GPU has finished the
previous step's work and the host has asked for the next one. Durations are the kernels' times at the
driver's own clocks ("auto"), from a profile of the same step.

A step can also hold *points*: marks the training loop makes inside the step (``clk.point()``, or the hooks
of ``clk.watch(model)`` at every layer), each just before a known kernel. The controller re-times the rest of
the step's switches from each point it sees (:mod:`rlclock.deploy.worker`).

On disk a timeline is JSON::

    {"format": "rlclock.timeline", "version": 1, "period_s": ..., "start_s": [...], "duration_s": [...],
     "names": [...], "source": "...", "points": [...], "jitter_s": [[...], ...]}

(``jitter_s``, where the kernels moved in each step they were located in, only when measured.)
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlclock.errors import DeployError, ScheduleError
from rlclock.workload.trace import KernelTrace

TIMELINE_FORMAT = "rlclock.timeline"
TIMELINE_VERSION = 1


@dataclass(frozen=True, eq=False)
class StepTimeline:
    """Expected start and duration of every kernel invocation of one step.

    Attributes:
        start_s: Start of each invocation, seconds after the step's anchor (non-decreasing).
        duration_s: Duration of each invocation at auto clocks, seconds.
        period_s: Time from one step's anchor to the next one's when steps run back to back, seconds
            (at least the end of the last kernel; larger when the host leaves the GPU idle between steps).
        names: Kernel names (optional, for reports).
        source: Where the figures come from (``"profile"``, ``"trace ..."``, ``"durations"``).
        points: For each point the loop marks inside the step, in order, the index of the kernel it precedes
            (``len`` when it follows the last); non-decreasing. Empty: the step has no points.
        jitter_s: ``(m, n)`` for each of ``m`` steps the kernels were located in, how much later than ``start_s``
            each kernel started there, seconds (``None``: not measured). The planner judges plans over them
            (:class:`~rlclock.backends.executable.Execution`).
    """

    start_s: np.ndarray
    duration_s: np.ndarray
    period_s: float
    names: tuple[str, ...] = ()
    source: str = ""
    points: tuple[int, ...] = ()
    jitter_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        start = np.asarray(self.start_s, dtype=float).reshape(-1)
        dur = np.asarray(self.duration_s, dtype=float).reshape(-1)
        if start.size == 0 or start.shape != dur.shape:
            raise DeployError(
                f"a step timeline needs one start and one duration per kernel; found {start.size} "
                f"starts and {dur.size} durations.",
                "build it from a profile of the step.",
            )
        if not (np.all(np.isfinite(start)) and np.all(np.isfinite(dur))) or np.any(dur < 0) or np.any(start < 0):
            raise DeployError(
                "a step timeline holds negative or non-finite start offsets or durations.",
                "build it from a profile of the step (offsets and durations in seconds, >= 0).",
            )
        if np.any(np.diff(start) < 0):
            i = int(np.flatnonzero(np.diff(start) < 0)[0]) + 1
            raise DeployError(
                f"kernel {i} of the step timeline starts before kernel {i - 1} "
                f"({start[i]:.6g} s < {start[i - 1]:.6g} s); starts must be in execution order.",
                "sort the kernels by their start time.",
            )
        span = float(np.max(start + dur))
        period = float(self.period_s)
        if not math.isfinite(period) or period <= 0:
            raise DeployError(
                f"a step timeline needs a step period > 0 s, found {self.period_s!r}.",
                "give the anchor-to-anchor time of back-to-back steps, in seconds.",
            )
        if self.names and len(self.names) != start.size:
            raise DeployError(f"a step timeline has {start.size} kernels but {len(self.names)} names.")
        points = tuple(int(x) for x in self.points)
        if any(not 0 <= x <= start.size for x in points) or any(b < a for a, b in itertools.pairwise(points)):
            raise DeployError(
                f"a step timeline's points must be kernel indices in 0..{start.size}, in order; "
                f"found {list(points)[:8]}.",
                "locate the points in a profile of the step.",
            )
        object.__setattr__(self, "points", points)
        if self.jitter_s is not None:
            jitter = np.asarray(self.jitter_s, dtype=float)
            if jitter.ndim != 2 or jitter.shape[1] != start.size or not np.all(np.isfinite(jitter)):
                raise DeployError(
                    f"a step timeline's jitter needs one finite offset per kernel and located step; "
                    f"found shape {jitter.shape} for {start.size} kernels.",
                    "locate the kernels in the running steps (rlclock.deploy.capture.StepTimer).",
                )
            jitter.setflags(write=False)
            object.__setattr__(self, "jitter_s", jitter)
        start.setflags(write=False)
        dur.setflags(write=False)
        object.__setattr__(self, "start_s", start)
        object.__setattr__(self, "duration_s", dur)
        object.__setattr__(self, "period_s", max(period, span))
        object.__setattr__(self, "names", tuple(str(n) for n in self.names))

    def __len__(self) -> int:
        return int(self.start_s.size)

    def __repr__(self) -> str:
        return (
            f"StepTimeline({len(self)} kernels, span {self.span_s * 1e3:.3f} ms, "
            f"period {self.period_s * 1e3:.3f} ms, source {self.source!r})"
        )

    @property
    def end_s(self) -> np.ndarray:
        """End of each invocation, seconds after the anchor."""
        return self.start_s + self.duration_s

    @property
    def span_s(self) -> float:
        """From the anchor to the end of the last kernel, seconds."""
        return float(np.max(self.end_s))

    @property
    def points_s(self) -> np.ndarray:
        """When each point is expected, seconds after the anchor: the start of the kernel it precedes (the end
        of the last kernel for a point after it)."""
        at = np.append(self.start_s, self.span_s)
        return at[np.asarray(self.points, dtype=int)] if self.points else np.zeros(0)

    @property
    def busy_s(self) -> float:
        """Sum of the kernels' durations, seconds."""
        return float(self.duration_s.sum())

    def check_length(self, n_kernels: int, what: str = "the schedule") -> None:
        """Raise :class:`~rlclock.errors.ScheduleError` unless the timeline has ``n_kernels`` kernels."""
        if len(self) != n_kernels:
            raise ScheduleError(
                f"{what} has {n_kernels} kernel invocations but the step timeline has {len(self)}.",
                "build the schedule and the timeline from a profile of the same training step.",
            )

    def fitted(self, period_s: float, source: str | None = None) -> StepTimeline:
        """The same kernels re-spaced for a step that runs in ``period_s`` (measured without the profiler).

        A profiler slows the host, so the GPU waits for launches it would otherwise have queued: the profiled
        step holds idle time the running step does not (or, rarely, less). The fit keeps every kernel's
        duration and its overlap with the one before, and scales every idle gap — before the first kernel,
        between kernels and after the last — by one factor, found so that the step's period becomes
        ``period_s``. Only when ``period_s`` is below the kernels packed without gaps are the durations scaled
        too (by ``period_s`` over that packed length).

        Args:
            period_s: The running step's anchor-to-anchor period, seconds (> 0).
            source: The new timeline's source (default: this one's, with the fit noted).
        """
        if not math.isfinite(period_s) or period_s <= 0:
            raise DeployError(f"a step period must be a finite number of seconds > 0, found {period_s!r}.")
        start, dur = self.start_s, self.duration_s
        advance = np.diff(start, prepend=0.0)  # start_i - start_{i-1}; the first from the anchor
        busy = np.minimum(advance, np.concatenate([[0.0], dur[:-1]]))  # the part the previous kernel fills
        idle = advance - busy
        cum_busy, cum_idle = np.cumsum(busy), np.cumsum(idle)
        tail = self.period_s - self.span_s

        def period(f: float) -> float:
            return float(np.max(cum_busy + dur + f * cum_idle)) + f * tail

        packed = period(0.0)
        label = source or f"{self.source}, fitted to a {period_s * 1e3:.3f} ms step"
        if period_s <= packed:
            scale = period_s / packed
            jitter = None if self.jitter_s is None else self.jitter_s * scale
            return StepTimeline(cum_busy * scale, dur * scale, period_s, self.names, label, self.points, jitter)
        lo, hi = 0.0, 1.0
        while period(hi) < period_s:
            hi *= 2.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if period(mid) < period_s else (lo, mid)
        f = 0.5 * (lo + hi)
        return StepTimeline(cum_busy + f * cum_idle, dur, period_s, self.names, label, self.points, self.jitter_s)

    # -- constructors ------------------------------------------------------------------------------------
    @classmethod
    def from_durations(
        cls,
        duration_s: Sequence[float] | np.ndarray,
        gap_s: float = 0.0,
        period_s: float | None = None,
        names: Sequence[str] = (),
        source: str = "durations",
    ) -> StepTimeline:
        """Kernels back to back (``gap_s`` apart) from the anchor on.

        Args:
            duration_s: Duration of each invocation, seconds.
            gap_s: Idle time between consecutive kernels (launch gaps), seconds.
            period_s: Anchor-to-anchor time; default: the end of the last kernel.
            names: Kernel names (optional).
            source: Where the durations come from.
        """
        dur = np.asarray(duration_s, dtype=float).reshape(-1)
        if gap_s < 0 or not math.isfinite(gap_s):
            raise DeployError(f"the gap between kernels must be >= 0 s, found {gap_s!r}.")
        start = np.concatenate([[0.0], np.cumsum(dur + gap_s)[:-1]]) if dur.size else dur
        end = float(start[-1] + dur[-1]) if dur.size else 0.0
        return cls(start, dur, end if period_s is None else float(period_s), tuple(names), source)

    @classmethod
    def from_trace(cls, trace: KernelTrace, gpu: str | None = None, gap_s: float = 0.0) -> StepTimeline:
        """Back-to-back kernels with their measured auto-clock durations from a trace.

        Each kernel's duration is its ``"in-sequence"`` auto measurement (the time it takes inside the step),
        else any auto measurement.

        Args:
            trace: A trace whose kernels carry auto-clock measurements (``rlclock profile`` writes them).
            gpu: Only use measurements of this GPU (NVML name); default: any.
            gap_s: Idle time between consecutive kernels, seconds.

        Raises:
            DeployError: A kernel has no auto-clock measurement.
        """
        dur = []
        for i, k in enumerate(trace):
            auto = [m for m in k.measured if m.is_auto and (gpu is None or m.gpu == gpu)]
            auto.sort(key=lambda m: m.source != "in-sequence")
            if not auto:
                raise DeployError(
                    f"kernel {i} ({k.name!r}) of trace {trace.name!r} has no auto-clock measurement"
                    + (f" on {gpu!r}" if gpu else "")
                    + ", so its place in the step is unknown.",
                    "profile the step (rlclock profile, or let rlclock.deploy.clocked profile it).",
                )
            dur.append(auto[0].time_s)
        return cls.from_durations(dur, gap_s, names=[k.name for k in trace], source=f"trace {trace.name}")

    # -- I/O ---------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        out = {
            "format": TIMELINE_FORMAT,
            "version": TIMELINE_VERSION,
            "period_s": self.period_s,
            "start_s": self.start_s.tolist(),
            "duration_s": self.duration_s.tolist(),
            "names": list(self.names),
            "source": self.source,
            "points": list(self.points),
        }
        if self.jitter_s is not None:
            out["jitter_s"] = self.jitter_s.tolist()
        return out

    @classmethod
    def from_dict(cls, data: Any) -> StepTimeline:
        """Parse :meth:`to_dict` output."""
        if not isinstance(data, dict) or data.get("format") != TIMELINE_FORMAT:
            raise DeployError(
                f"not an rlclock step timeline (expected 'format': {TIMELINE_FORMAT!r}).",
                "pass a file written by StepTimeline.save or rlclock apply --save.",
            )
        if data.get("version") != TIMELINE_VERSION:
            raise DeployError(
                f"step timeline version {data.get('version')!r} is not supported "
                f"(this rlclock reads version {TIMELINE_VERSION}).",
                "re-profile the step.",
            )
        try:
            jitter = data.get("jitter_s")
            return cls(
                np.asarray(data["start_s"], dtype=float),
                np.asarray(data["duration_s"], dtype=float),
                float(data["period_s"]),
                tuple(data.get("names", ())),
                str(data.get("source", "")),
                tuple(data.get("points", ())),
                None if jitter is None else np.asarray(jitter, dtype=float),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DeployError(f"malformed step timeline: {exc}.", "re-profile the step.") from None

    def save(self, path: str | Path) -> Path:
        """Write as JSON (gzip when ``path`` ends in ``.gz``)."""
        path = Path(path)
        text = json.dumps(self.to_dict())
        if path.suffix == ".gz":
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            path.write_text(text)
        return path

    @classmethod
    def load(cls, path: str | Path) -> StepTimeline:
        """Read a timeline written by :meth:`save`."""
        path = Path(path)
        try:
            if path.suffix == ".gz":
                with gzip.open(path, "rt", encoding="utf-8") as f:
                    return cls.from_dict(json.loads(f.read()))
            return cls.from_dict(json.loads(path.read_text()))
        except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DeployError(
                f"cannot read step timeline {str(path)!r}: {exc}.", "pass a file written by StepTimeline.save."
            ) from None
