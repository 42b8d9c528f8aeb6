"""ClockController: apply a per-kernel clock schedule while a live training loop runs.

The training loop marks each step; everything else happens elsewhere::

    timeline = StepTimeline.load("step.timeline.json")       # when each kernel starts (from a profile)
    schedule = ClockSchedule.load("step.schedule.json")      # which clocks each kernel wants
    with ClockController(schedule, timeline, latency_s=0.006) as ctl:   # dry run: nothing is set
        for batch in data:
            with ctl.step():                                  # or ctl.step() at the top of the loop
                loss = model(batch).backward(); opt.step()
    print(ctl.report.text())

* :func:`~rlclock.deploy.plan.plan_switches` collapses the schedule into the switches it implies, each issued
  ``lead_s`` (>= the switching latency) before the kernels it serves; switches that cannot land in
  time are left out (the rule is in :mod:`rlclock.deploy.plan`).
* A switch worker — its own process by default (:mod:`rlclock.deploy.worker`) — issues them through
  :class:`~rlclock.gpu.clocks.ClockControl` (opt-in with ``control_clocks=True``, validated against the
  GPU's clock table, restored on every way out, watchdog for a killed process). The training loop never
  calls NVML and never waits for the worker.
* Step anchors (:mod:`rlclock.deploy.anchor`) tell the worker when a step started *on the GPU*: a CUDA
  event recorded at the step's mark, waited on by a helper thread. With ``anchor_every`` > 1 only every
  ``anchor_every``-th step is anchored (and the first step after a pause): the plan repeats every step, so the
  worker times the steps in between from the last anchor and its estimate of the step period, and re-times
  them when the next anchor arrives. A step without an anchor costs the training thread a counter increment
  and a clock read. By default a plan with switches is anchored every step, one without any every 40 ms.
* With ``alternatives`` the controller holds several plans for the step (plan 0 from ``schedule``, 1.. from the
  alternatives), and :meth:`ClockController.set_pattern` says which one each step runs — e.g. ``[0, 1]`` alternates
  the schedule and the first alternative step by step, so that their step times can be compared under the same
  slow drift of the machine. The worker follows it, with a switch at the boundary between two plans where one is
  needed (:mod:`rlclock.deploy.worker`); the report gives each plan's steps and switch timing.
* :meth:`ClockController.close` (or leaving the ``with`` block) stops the worker, which restores the
  clocks, and builds the :class:`~rlclock.deploy.report.ControllerReport`: switches issued, missed, and the
  error between planned and actual switch times.

Without ``control_clocks`` the controller is a dry run: every switch is planned, timed and recorded
(with NVML's checks of the clock table), and nothing is set. On a machine without NVML the dry run records
the switches only ("plan-only"); without CUDA the anchors are the host times of the marks.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from collections.abc import Sequence
from typing import Any

from rlclock.deploy.anchor import AnchorLog, CudaAnchors, HostAnchors
from rlclock.deploy.delivered import PlanningCosts, deliver
from rlclock.deploy.pattern import PlanPattern
from rlclock.deploy.plan import SwitchPlan, plan_switches
from rlclock.deploy.process import WorkerHandle
from rlclock.deploy.report import PAUSE_FACTOR, ControllerReport, build_report
from rlclock.deploy.timeline import StepTimeline
from rlclock.deprecation import renamed_keyword
from rlclock.errors import DeployError, GpuUnavailableError
from rlclock.schedule import ClockSchedule

ANCHOR_SOURCES = ("auto", "cuda", "host")
ANCHOR_INTERVAL_S = 0.04
"""Spacing of step anchors, seconds of the planned step period, when the plan has no switch: then the anchors time
nothing (the worker only brings the clocks to the plan's configuration once) and serve the report's step time
alone, so ``anchor_every`` defaults to the whole steps in this interval. A plan with switches is anchored every
step by default: timing steps from an earlier anchor made the switch-time error several times larger on an H200
(docs/deploy.md has the measurements)."""


def auto_anchor_every(period_s: float, interval_s: float = ANCHOR_INTERVAL_S) -> int:
    """Steps between anchors for a step of ``period_s`` seconds: the whole steps in ``interval_s``, at least 1."""
    if not math.isfinite(period_s) or period_s <= 0:
        return 1
    return max(1, int(interval_s / period_s + 1e-9))


def default_anchor_every(plan: SwitchPlan, alternatives: Sequence[SwitchPlan] = ()) -> int:
    """1 for a plan with switches (each step's own anchor times them best); for a plan without any, the whole steps
    in :data:`ANCHOR_INTERVAL_S`. With alternatives: 1 when any plan has switches or they hold different
    configurations (then a change of plan between steps is a switch to time), else as for ``plan``."""
    plans = (plan, *alternatives)
    if any(p.events for p in plans) or len({p.initial for p in plans}) > 1:
        return 1
    return auto_anchor_every(plan.period_s)


class StepMark:
    """Returned by :meth:`ClockController.step`; as a ``with`` block it also marks the step's end (on a step
    that was marked on the GPU; on the others it does nothing)."""

    __slots__ = ("_ctl", "step")

    def __init__(self, ctl: ClockController | None, step: int) -> None:
        self._ctl = ctl
        self.step = step

    @property
    def marked(self) -> bool:
        """True when this step was marked on the GPU (anchored, or timed for the report)."""
        return self._ctl is not None

    def __enter__(self) -> StepMark:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ctl is not None:
            self._ctl._mark_end(self.step)


def default_latency_s(gpu_name: str | None) -> float:
    """The switching latency of the GPU preset matching an NVML name, seconds.

    Raises:
        DeployError: No preset matches, so the latency is unknown.
    """
    from rlclock.dvfs.spec import get_spec
    from rlclock.errors import SpecError

    try:
        if gpu_name:
            return float(get_spec(gpu_name).switch_latency_s)
    except SpecError:
        pass
    raise DeployError(
        f"the switching latency of GPU {gpu_name or '(unknown)'} is not known (no GPU preset matches).",
        "pass latency_s (e.g. 0.006 for a Hopper GPU).",
    )


def nvml_present() -> bool:
    """True when NVML initialises and sees a GPU."""
    from rlclock.gpu import nvml

    return nvml.available()


def cuda_present() -> bool:
    """True when PyTorch is importable and sees a CUDA GPU."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return bool(torch.cuda.is_available())


class ClockController:
    """Applies a clock schedule in a live training loop (module docstring).

    Args:
        schedule: One requested configuration per kernel invocation of the step.
        timeline: When each invocation starts, from the step's anchor (same length as ``schedule``).
        device: NVML index of the GPU to control (the training process's GPU).
        control_clocks: Opt in to setting clocks; without it the controller is a dry run.
        allow_clock_control: Deprecated name of ``control_clocks``.
        lookahead_s: Deprecated name of ``lead_s``.
        latency_s: The GPU's switching latency, seconds; default: its preset's (6 ms for an H200).
        lead_s: How far ahead of its kernels a switch is issued, seconds (>= ``latency_s``; default
            ``latency_s`` + 0.5 ms, :data:`~rlclock.deploy.plan.LEAD_MARGIN_S`).
        min_dwell_s: A switch must land at least this long before its segment ends, seconds.
        read_back: Read the clocks back one latency after each switch (in the worker).
        worker: ``"process"`` (default) or ``"thread"``.
        anchor: ``"cuda"`` (GPU events), ``"host"`` (host time of the marks) or ``"auto"`` (cuda when available).
        nvml: Use NVML (``None``: when available). Without it only a dry run without NVML is possible.
        anchor_every: Anchor every this many steps (``None``: :func:`default_anchor_every`: every step when the
            plan has switches, else every :data:`ANCHOR_INTERVAL_S`). The first step after a pause is anchored too.
            Steps between anchors cost the loop almost nothing, but their switches are timed from the last anchor
            and the estimated period, which is less exact.
        time_all_steps: Mark every step on the GPU for the report, while the worker still hears only every
            ``anchor_every``-th: the switch-time error is then measured against every step's actual start
            (this costs the loop a mark per step, as ``anchor_every=1`` does).
        follow_pace: Stretch the timeline to the running step period the anchors show (the worker's
            ``pace``; :mod:`rlclock.deploy.worker`); default: time switches by the timeline as profiled (on the
            H200's real steps following the pace helped on some loops and hurt on others; docs/deploy.md).
        alternatives: Other schedules for the same step, plans 1.. (plan 0 is ``schedule``), each planned on the
            same timeline with the same latency, lead and dwell; :meth:`set_pattern` chooses which plan each
            step runs (until then every step runs plan 0). They run under ``schedule``'s power limit: one that
            names another is refused.
        costs: The planning model's price of every kernel at every configuration the plans ask for
            (:class:`~rlclock.deploy.delivered.PlanningCosts`): with them the report says what the run delivered
            beside what was planned (:attr:`~rlclock.deploy.report.ControllerReport.delivered`).

    A schedule that names a board power limit (:attr:`~rlclock.schedule.ClockSchedule.power_limit_w`) has it set
    once, before the first switch, by the same clock control (and in a dry run recorded, not set); it is given
    back with the clocks.

    Raises:
        DeployError: Bad latency/lead/anchor_every, no NVML for a live run, unknown latency, worker failure,
            an alternative under another power limit.
        ScheduleError: Schedule (or an alternative) and timeline lengths differ.
        ClockError: A configuration of the schedule or of an alternative is not supported by the GPU.
    """

    def __init__(
        self,
        schedule: ClockSchedule,
        timeline: StepTimeline,
        *,
        device: int = 0,
        control_clocks: bool = False,
        latency_s: float | None = None,
        lead_s: float | None = None,
        min_dwell_s: float = 0.0,
        read_back: bool = True,
        worker: str = "process",
        anchor: str = "auto",
        nvml: bool | None = None,
        anchor_every: int | None = None,
        time_all_steps: bool = False,
        follow_pace: bool = False,
        alternatives: Sequence[ClockSchedule] = (),
        costs: PlanningCosts | None = None,
        allow_clock_control: bool | None = None,
        lookahead_s: float | None = None,
    ) -> None:
        if anchor not in ANCHOR_SOURCES:
            raise DeployError(f"anchor source {anchor!r} is not known.", f"use one of {list(ANCHOR_SOURCES)}.")
        check_anchor_every(anchor_every)
        self.schedule = schedule
        self.timeline = timeline
        self.device = int(device)
        if lookahead_s is not None:
            renamed_keyword("Controller", "lookahead_s", "lead_s", "0.2.0")
            lead_s = lookahead_s if lead_s is None else lead_s
        if allow_clock_control is not None:
            renamed_keyword("Controller", "allow_clock_control", "control_clocks", "0.2.0")
            control_clocks = control_clocks or allow_clock_control
        self.control_clocks = bool(control_clocks)
        self.use_nvml = nvml_present() if nvml is None else bool(nvml)
        if self.control_clocks and not self.use_nvml:
            raise GpuUnavailableError(
                "clock control was asked for, but NVML sees no NVIDIA GPU on this machine.",
                "run on a GPU machine (rlclock doctor), or use the dry-run mode.",
            )
        if latency_s is None:
            latency_s = default_latency_s(self._gpu_name() if self.use_nvml else None)
        self.plan: SwitchPlan = plan_switches(schedule, timeline, float(latency_s), lead_s, min_dwell_s)
        self.alternatives: tuple[ClockSchedule, ...] = tuple(alternatives)
        """Plans 1.. as schedules (plan 0 is :attr:`schedule`)."""
        for i, alt in enumerate(self.alternatives, 1):
            if isinstance(alt, ClockSchedule) and alt.power_limit_w != schedule.power_limit_w:
                raise DeployError(
                    f"alternative {i} ({alt.name!r}) runs under power limit {alt.power_limit_w} W, plan "
                    f"0 under {schedule.power_limit_w} W: the power limit is set once for the job.",
                    "give every plan of one run the same power limit (or none).",
                )
        self.plans: tuple[SwitchPlan, ...] = (
            self.plan,
            *(
                _alternative_plan(i, alt, timeline, float(latency_s), lead_s, min_dwell_s)
                for i, alt in enumerate(self.alternatives, 1)
            ),
        )
        """Every plan a step can run: 0 from :attr:`schedule`, 1.. from :attr:`alternatives`."""
        self.pattern = PlanPattern(len(self.plans))
        """Which plan each step runs (:meth:`set_pattern`; :meth:`plan_of`)."""
        self.anchor_every = (
            default_anchor_every(self.plan, self.plans[1:]) if anchor_every is None else int(anchor_every)
        )
        self.time_all_steps = bool(time_all_steps)
        self.follow_pace = bool(follow_pace)
        self.read_back = bool(read_back)
        self.worker_mode = worker
        if anchor == "auto":
            anchor = "cuda" if cuda_present() else "host"
        if anchor == "cuda" and not cuda_present():
            raise GpuUnavailableError(
                "CUDA step anchors were asked for, but PyTorch sees no CUDA GPU.",
                "use anchor='host' (or 'auto') on a machine without a GPU.",
            )
        self.anchor_source = anchor
        self.costs = costs
        if costs is not None and costs.n != len(timeline):
            raise DeployError(
                f"the planning costs have {costs.n} kernels, the timeline {len(timeline)}.",
                "build both from a profile of the same training step.",
            )
        self.report: ControllerReport | None = None
        self.anchor_log: AnchorLog | None = None
        """After :meth:`close`: what the step anchors saw, per marked step (raw data of the report)."""
        self.worker_result: dict[str, Any] = {}
        """After :meth:`close`: the switch worker's records and read-backs (raw data of the report)."""
        self._handle: WorkerHandle | None = None
        self._anchors: CudaAnchors | HostAnchors | None = None
        self._step = -1
        self._point = 0
        self._pointed_step = -1  # the last anchored step: its points go to the worker
        self._points = len(self.plan.points_s)
        self._next_anchor = 0
        self._last_mark_s = -math.inf
        self._pause_s = PAUSE_FACTOR * self.plan.period_s
        self._lock = threading.Lock()

    def _gpu_name(self) -> str | None:
        from rlclock.gpu import nvml

        try:
            return nvml.NvmlDevice(self.device).name
        except Exception:
            return None

    # -- life cycle ----------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`close`."""
        return self._handle is not None

    @property
    def dry_run(self) -> bool:
        """True unless clocks are actually set."""
        return not self.control_clocks

    @property
    def steps(self) -> int:
        """Steps marked so far."""
        return self._step + 1

    def start(self) -> ClockController:
        """Start the switch worker and the step anchors (idempotent)."""
        with self._lock:
            if self._handle is not None:
                return self
            if self.report is not None:
                raise DeployError("this clock controller was closed.", "create a new ClockController.")
            settings = {
                "plan": self.plan.to_dict(),
                "device": self.device,
                "control_clocks": self.control_clocks,
                "nvml": self.use_nvml,
                "read_back": self.read_back,
                "anchor_every": self.anchor_every,
                "follow_pace": self.follow_pace,
                "power_limit_w": self.schedule.power_limit_w,
            }
            if len(self.plans) > 1:
                settings["alternatives"] = [p.to_dict() for p in self.plans[1:]]
                settings["patterns"] = self.pattern.to_list()
            handle = WorkerHandle(settings, self.worker_mode)
            try:
                self._anchors = (
                    CudaAnchors(handle.send_anchor, on_point=handle.send_point)
                    if self.anchor_source == "cuda"
                    else HostAnchors(handle.send_anchor, handle.send_point)
                )
            except BaseException:
                handle.stop()
                raise
            self._handle = handle
        return self

    def step(self) -> StepMark:
        """Mark the start of the next training step (call it at the top of every step).

        Every ``anchor_every``-th step, and the first one after a pause (more than
        :data:`~rlclock.deploy.report.PAUSE_FACTOR` planned step periods since the last call), is anchored: a
        CUDA event is recorded and its time goes to the worker. Other steps are only counted.

        Returns:
            A :class:`StepMark`; used as ``with ctl.step():`` it also marks the end of an anchored step, which
            makes the report's placement of the kernels more precise.
        """
        if self._handle is None:
            self.start()
        k = self._step = self._step + 1
        now = time.monotonic()
        paused = now - self._last_mark_s > self._pause_s
        self._last_mark_s = now
        self._point = 0
        if k >= self._next_anchor or paused:
            self._next_anchor = k + self.anchor_every
            self._anchors.mark_start(k, True)  # type: ignore[union-attr]
            self._pointed_step = k
            return StepMark(self, k)
        if self.time_all_steps:
            self._anchors.mark_start(k, False)  # type: ignore[union-attr]
            return StepMark(self, k)
        return StepMark(None, k)

    def point(self) -> None:
        """Mark the next point inside the current step (at the same places in every step, e.g. each layer's
        start: :meth:`rlclock.deploy.Clocked.watch` registers them). On an anchored step, and for the points the
        timeline knows, a CUDA event is recorded and the worker re-times the rest of the step from it; otherwise
        this only counts."""
        j = self._point
        self._point = j + 1
        if self._pointed_step == self._step and j < self._points and self._anchors is not None:
            self._anchors.mark_point(self._step, j)

    def set_pattern(self, pattern: Sequence[int], from_step: int | None = None) -> None:
        """Choose the plan of every step from ``from_step`` on: step ``n`` runs plan
        ``pattern[(n - from_step) % len(pattern)]`` (0: :attr:`schedule`, 1..: :attr:`alternatives`), until a later
        call takes over from its own ``from_step``. E.g. ``set_pattern([0, 1])`` alternates the schedule and the first
        alternative step by step. Before any call every step runs plan 0.

        It may be called before the controller starts or while the loop runs; the worker drops the switches it had
        scheduled for those steps under another plan and schedules theirs (switches already issued stay issued).

        Args:
            pattern: Plan indices, one step each, repeated.
            from_step: First step the pattern applies to (steps are numbered from 0 at the first :meth:`step`);
                default: the first step not started yet.

        Raises:
            DeployError: An empty pattern, an index that names no plan, a step already started, or a closed
                controller.
        """
        if self.report is not None:
            raise DeployError(
                "this clock controller was closed, so its steps cannot change plans any more.",
                "set the pattern before leaving the controller's block.",
            )
        first = self.steps
        start = first if from_step is None else from_step
        if not isinstance(start, bool) and isinstance(start, numbers.Integral) and start < first:
            raise DeployError(
                f"step {start} has already started ({first} steps so far), so its plan cannot change.",
                f"pass from_step >= {first}, or leave it unset for the next step.",
            )
        with self._lock:
            checked = self.pattern.set(pattern, start)
            if self._handle is not None:
                self._handle.send_pattern(checked, int(start))

    def plan_of(self, step: int) -> int:
        """The plan step ``step`` runs (index into :attr:`plans`; :meth:`set_pattern`)."""
        return self.pattern.plan_of(step)

    def _mark_end(self, step: int) -> None:
        if self._anchors is not None and step == self._step:
            self._anchors.mark_end(step)

    def close(self) -> ControllerReport:
        """Stop the worker (it restores the clocks) and build the report (idempotent)."""
        with self._lock:
            if self.report is not None:
                return self.report
            if self._handle is None:
                raise DeployError("the clock controller was never started.", "call start() or step() first.")
            log = self._anchors.close() if self._anchors is not None else None
            result = self._handle.stop()
            info = self._handle.info
            if not result and self.control_clocks:
                _reset_after_failure(self.device, info.get("power_limit"))
            self.anchor_log = log if log is not None else AnchorLog(self.anchor_source)
            self.worker_result = result
            self.report = build_report(
                self.plan,
                self.anchor_log,
                result,
                info,
                self.worker_mode,
                steps=self.steps,
                anchor_every=self.anchor_every,
                plans=self.plans,
                plan_of=self.pattern.plan_of,
            )
            if self._handle.send_errors:
                self.report.notes.append(f"{self._handle.send_errors} step anchors could not be sent to the worker")
            if self.costs is not None:
                try:
                    self.report.delivered = deliver(
                        self.plans,
                        self.costs,
                        self.timeline.start_s,
                        self.timeline.duration_s,
                        self.anchor_log,
                        result.get("records", []),
                        self.dry_run,
                        self.pattern.plan_of,
                    )
                except DeployError as exc:
                    self.report.notes.append(f"delivered figures not judged: {exc}")
            self._handle = None
            return self.report

    def __enter__(self) -> ClockController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "live" if self.control_clocks else "dry-run"
        plans = f", {len(self.plans)} plans" if len(self.plans) > 1 else ""
        return (
            f"ClockController({mode}, GPU {self.device}, {len(self.schedule)} kernels, "
            f"{self.plan.n_switches} switches per step{plans}, worker {self.worker_mode}, anchors "
            f"{self.anchor_source} every {self.anchor_every} steps)"
        )


def _alternative_plan(
    index: int,
    schedule: ClockSchedule,
    timeline: StepTimeline,
    latency_s: float,
    lead_s: float | None,
    min_dwell_s: float,
) -> SwitchPlan:
    """Plan ``index`` (an alternative schedule) on the controller's timeline, with the same latency, lead and
    dwell as plan 0."""
    if not isinstance(schedule, ClockSchedule):
        raise DeployError(
            f"alternative {index} is a {type(schedule).__name__}, not a ClockSchedule.",
            "pass alternatives=[ClockSchedule, ...] (ClockSchedule.load(path) reads a schedule file).",
        )
    timeline.check_length(len(schedule), f"alternative {index} ({schedule.name!r})")
    return plan_switches(schedule, timeline, latency_s, lead_s, min_dwell_s)


def check_anchor_every(anchor_every: int | None) -> None:
    """Raise :class:`DeployError` unless ``anchor_every`` is ``None`` or a whole number >= 1."""
    if anchor_every is None:
        return
    if isinstance(anchor_every, bool) or not isinstance(anchor_every, numbers.Integral) or anchor_every < 1:
        raise DeployError(
            f"anchor_every must be a whole number of steps >= 1, found {anchor_every!r}.",
            "leave it unset for the default.",
        )


def _reset_after_failure(device: int, power_limit: dict[str, Any] | None) -> None:
    """The worker did not report a clean end: reset the GPU's locked clocks from here too, and set the power limit
    back to the one the worker found where it changed it (``power_limit``: its record; a limit it never changed is
    left alone)."""
    from rlclock.gpu.clocks import reset_clocks

    found_w = power_limit.get("found_w") if power_limit and power_limit.get("applied") else None
    try:
        reset_clocks([device], power_limit=found_w is not None, power_limit_w=found_w)
    except Exception as exc:  # the watchdog is the last line; say what happened
        print(
            f"rlclock: could not reset the clocks of GPU {device} after the switch worker failed: {exc} "
            "(run rlclock reset-clocks)",
            flush=True,
        )
