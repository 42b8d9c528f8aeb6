"""The user API: ``with rlclock.deploy.clocked(...) as clk:`` around a training loop, ``clk.step()`` per step.

::

    import rlclock.deploy

    with rlclock.deploy.clocked(checkpoint="checkpoints/gpt3xl-h200") as clk:   # dry run by default
        for batch in loader:
            with clk.step():                     # or: clk.step() at the top of the step
                loss = model(batch); loss.backward(); opt.step(); opt.zero_grad()
    print(clk.report.text())

``clk.watch(model)`` (before the loop) also marks a point at every layer's start, forward and backward, so the
controller follows each step as it runs rather than only from its start (:meth:`Clocked.watch`).

What happens, step by step:

1. ``warmup_steps`` steps run untouched (compilation, allocator and autotuning settle).
2. ``profile_steps`` steps are profiled (:mod:`rlclock.deploy.capture`): the kernel sequence with each
   kernel's duration and start offset, and a :class:`~rlclock.workload.trace.KernelTrace` with FLOPs and
   bytes derived from the operators' shapes. Then ``timing_steps`` steps run without the operator profiler
   (:class:`~rlclock.deploy.capture.StepTimer`): half of them locate the kernels in the running step, the
   rest time it with CUDA events, and the timeline is fitted to that
   (:meth:`~rlclock.deploy.timeline.StepTimeline.fitted`): the profiler's own overhead does not reach the
   plan.
3. The schedule is built: by the policy of ``checkpoint`` (``ClockPolicy.schedule``), taken from a file or
   :class:`~rlclock.schedule.ClockSchedule` (``schedule=``), or by a function
   ``schedule(trace, auto_time_s, latency_s) -> ClockSchedule``. Under ``torch.distributed`` rank 0 builds it
   and every rank receives it (:mod:`rlclock.deploy.distributed`).
4. From the next step on a :class:`~rlclock.deploy.controller.ClockController` applies it on the process's
   own GPU; leaving the block restores the clocks and produces :attr:`Clocked.report`, with the GPU energy
   over the controlled steps (NVML's energy counter) when NVML is present.

With both ``schedule`` and ``timeline`` given, steps 1–3 are skipped. Without a CUDA GPU the loop runs
unchanged and the deployment says so, unless a schedule and a timeline are given: then the controller runs a
dry run without NVML, with host-time anchors. ``rlclock apply -- python train.py`` passes its options through
:class:`~rlclock.deploy.settings.DeploySettings` environment variables, which override the script's arguments.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlclock.deploy.controller import ClockController, StepMark, cuda_present, nvml_present
from rlclock.deploy.distributed import RankInfo, cuda_device_index, nvml_index, rank_info, share
from rlclock.deploy.report import ControllerReport
from rlclock.deploy.settings import DeploySettings
from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError, RlclockError
from rlclock.log import get_logger
from rlclock.schedule import ClockSchedule
from rlclock.workload.trace import KernelTrace

ScheduleBuilder = Callable[[KernelTrace, np.ndarray, float], ClockSchedule]
"""``(trace, auto_time_s, latency_s) -> ClockSchedule``: builds the schedule for a profiled step."""

_log = get_logger(__name__)

_NULL = StepMark(None, -1)
_EXPLICIT = [0]
"""Deployments the script opened itself and has not closed (an attached deployment stands down for them)."""
DEFAULT_POLICY_PREFIXES = ("corpus-", "gpt3xl-")
"""Without a checkpoint or schedule, the shipped policy for the GPU found: one trained on real steps first."""


def explicit_deployments() -> int:
    """How many deployments the script opened itself (``clocked()``, a framework callback) and still runs."""
    return _EXPLICIT[0]


def shipped_policy_for(gpu_name: str) -> str:
    """The shipped policy checkpoint trained for the GPU NVML names ``gpu_name`` (one trained on real steps first).

    Raises:
        DeployError: No shipped policy was trained for that GPU (the message says how to get one).
    """
    import json

    from rlclock.resources import data_dir, shipped

    found: dict[str, str] = {}
    for name in shipped("checkpoints"):
        try:
            meta = json.loads((data_dir() / "checkpoints" / name / "meta.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("gpu_name") == gpu_name:
            found[name] = name
    for prefix in DEFAULT_POLICY_PREFIXES:
        for name in sorted(found):
            if name.startswith(prefix):
                return name
    if found:
        return sorted(found)[0]
    raise DeployError(
        f"no shipped clock policy was trained for this GPU ({gpu_name}).",
        "train one (`rlclock calibrate --device 0` to fit its model, then `rlclock train`) and pass it "
        "with --checkpoint DIR, or pass a schedule with --schedule FILE.",
    )


def load_policy(checkpoint: str | Path) -> Any:
    """``rlclock.policy.ClockPolicy.load(checkpoint)``, imported only now.

    Raises:
        DeployError: This installation has no policy module.
        CheckpointError: The checkpoint is missing or malformed (raised by the policy).
    """
    try:
        policy_module = importlib.import_module("rlclock.policy")
    except ModuleNotFoundError as exc:
        if exc.name != "rlclock.policy":
            raise
        raise DeployError(
            f"cannot load the policy checkpoint {str(checkpoint)!r}: this rlclock installation has "
            "no deployable policy (module rlclock.policy is missing).",
            "pass a schedule file instead (--schedule FILE / schedule=...), or install an rlclock "
            "version that ships rlclock.policy.",
        ) from None
    return policy_module.ClockPolicy.load(checkpoint)


class Clocked:
    """A deployment around a training loop (module docstring); made by :func:`clocked`.

    Attributes:
        settings: The options in force (the script's arguments, overridden under ``rlclock apply``).
        rank: This process's rank information.
        controller: The running controller (``None`` before the schedule is applied).
        schedule: The schedule applied (``None`` until built).
        timeline: The step timeline applied.
        alternatives: Other schedules for the same step (plans 1..; :meth:`set_pattern`).
        profile: The profile of the first steps (rank 0, when profiled).
        report: The controller's report, after the block ends.
        learned: With ``learn``, what the learner committed to and measured (after the block ends).
        state: ``"warmup"``, ``"profile"``, ``"timing"``, ``"control"``, ``"inactive"`` or ``"closed"``.
        reason: Why the deployment is inactive (empty otherwise).
    """

    def __init__(
        self,
        settings: DeploySettings,
        schedule: ClockSchedule | None = None,
        builder: ScheduleBuilder | None = None,
        timeline: StepTimeline | None = None,
        alternatives: Sequence[ClockSchedule] = (),
        attached: bool = False,
    ) -> None:
        self.settings = settings
        self.attached = attached
        self.report_path: Path | None = None
        self._counted = False
        self.alternatives: tuple[ClockSchedule, ...] = tuple(alternatives)
        self.rank: RankInfo = RankInfo()
        self.controller: ClockController | None = None
        self.schedule = schedule
        self.timeline = timeline
        self.profile: Any = None
        self.report: ControllerReport | None = None
        self.state = "new"
        self.reason = ""
        self._builder = builder
        self._policy: Any = None
        self._profiler: Any = None
        self._steps = 0
        self._profile_first = 0
        self._timing_first = 0
        self._profiled: Any = None
        self._timer: Any = None
        self._energy: tuple[Any, float, float] | None = None
        self._learner: Any = None
        self.learned: dict[str, Any] | None = None
        self.costs: Any = None
        self._compare: Any = None
        """The planning model's prices of the step (:class:`~rlclock.deploy.delivered.PlanningCosts`), for the
        report's delivered figures; ``None`` until planned (or when nothing prices the step)."""

    # -- set-up --------------------------------------------------------------------------------------------
    def _say(self, message: str) -> None:
        if self.settings.verbose and self.rank.is_root:
            _log.info(message)

    def start(self) -> Clocked:
        """Decide what to do (load the policy or schedule, check the machine); called by ``with``."""
        if self.state != "new":
            return self
        if not self.attached and not self._counted:
            self._counted = True
            _EXPLICIT[0] += 1
        s = self.settings
        self.rank = rank_info()
        if s.schedule:
            self.schedule = ClockSchedule.load(s.schedule)
        if s.timeline:
            self.timeline = StepTimeline.load(s.timeline)
        if s.learn and self.rank.distributed:
            raise DeployError(
                "learn chooses every step's plan from this process's step times, and this is one "
                f"rank of {self.rank.world_size}.",
                "learn in a single-process run, then apply the "
                "plan it commits to (--save writes the candidates) to every rank.",
            )
        if s.checkpoint:
            if self.rank.is_root:
                self._policy = load_policy(s.checkpoint)
            self._builder = self._policy_schedule
        if s.control_clocks and not nvml_present():
            from rlclock.errors import GpuUnavailableError

            raise GpuUnavailableError(
                "clock control is on, but NVML sees no NVIDIA GPU on this machine.",
                "run on a GPU machine, or use control='dry-run'.",
            )
        if self.schedule is None and self._builder is None:
            self._builder = self._shipped_schedule  # the shipped policy for the GPU found, once it is known
        if self.schedule is not None and self.timeline is not None:
            self._begin_control()
        elif not cuda_present():
            self._inactive(
                "no CUDA GPU: the training step cannot be profiled, so no clock is controlled (the loop runs unchanged)"
            )
        else:
            self.state = "warmup"
            timed = f", {s.timing_steps} timed" if self._times_steps() else ""
            self._say(
                f"deploying ({_mode(s)}): {s.warmup_steps} warm-up steps, then {s.profile_steps} profiled"
                f"{timed} steps, then the schedule is applied"
            )
        return self

    def _inactive(self, reason: str) -> None:
        self.state = "inactive"
        self.reason = reason
        self._say(reason)

    def _shipped_schedule(self, trace: KernelTrace, auto_time_s: np.ndarray, latency_s: float) -> ClockSchedule:
        """No checkpoint or schedule was given: the shipped policy trained for this process's GPU plans."""
        name = shipped_policy_for(self._gpu_name(self._device()))
        self._policy = load_policy(name)
        self.settings = self.settings.with_(checkpoint=name)
        self._say(f"no checkpoint given: planning with the shipped policy {name} for {self._policy.gpu_name}")
        return self._policy_schedule(trace, auto_time_s, latency_s)

    def _gpu_name(self, device: int) -> str:
        """The name NVML (or, without it, CUDA) gives this process's GPU."""
        if nvml_present():
            from rlclock.gpu.nvml import NvmlDevice

            return NvmlDevice(device).name
        import torch

        return str(torch.cuda.get_device_name())

    def _policy_schedule(self, trace: KernelTrace, auto_time_s: np.ndarray, latency_s: float) -> ClockSchedule:
        backend = self._policy.backend_for(trace, auto_time_s, None, latency_s)
        schedule = self._policy.schedule(
            trace,
            backend=backend,
            search=self.settings.search,
            power_limits=self.settings.power_limit,
            execution=self._execution(len(trace), latency_s),
        )
        self._set_costs(backend, schedule)
        return schedule

    def _execution(self, n: int, latency_s: float) -> Any:
        """The clock the plan will run on (the timeline, the controller's rule, the located steps' jitter): plans are
        judged as the controller executes them (:class:`~rlclock.backends.executable.Execution`)."""
        from rlclock.deploy.delivered import execution_for

        timeline = self.timeline if self.timeline is not None else getattr(self.profile, "timeline", None)
        if timeline is None or len(timeline) != n:
            return None
        s = self.settings
        return execution_for(timeline, latency_s, s.lead_s, s.min_dwell_s)

    def _set_costs(self, backend: Any, schedule: ClockSchedule) -> None:
        """Keep the planning model's prices of the step, for the report's delivered figures."""
        from rlclock.deploy.delivered import costs_of

        model = backend if schedule.power_limit_w is None else backend.at_power_limit(schedule.power_limit_w)
        self.costs = costs_of(model, f"policy {self.settings.checkpoint} on the profiled step")

    def _device(self) -> int:
        if self.settings.device is not None:
            return int(self.settings.device)
        return nvml_index(cuda_device_index(), self.rank.local_rank)

    def _latency_s(self) -> float | None:
        if self.settings.latency_s is not None:
            return self.settings.latency_s
        if nvml_present():
            return None  # the controller takes the preset of the GPU NVML names
        key = getattr(self._policy, "gpu_key", None)
        if key:
            from rlclock.dvfs.spec import get_spec

            return float(get_spec(key).switch_latency_s)
        return None

    def _check_policy_gpu(self, device: int) -> None:
        want = getattr(self._policy, "gpu_name", None)
        if not want or not nvml_present():
            return
        from rlclock.gpu.nvml import NvmlDevice

        have = NvmlDevice(device).name
        if have != want:
            raise DeployError(
                f"the policy checkpoint {self.settings.checkpoint!r} was trained for {want!r}, but this "
                f"process's GPU {device} is {have!r}.",
                "use a checkpoint trained for this GPU.",
            )

    # -- the loop ------------------------------------------------------------------------------------------
    def step(self) -> StepMark:
        """Mark the start of a training step; ``with clk.step():`` also marks its end.

        Call it once per step, at the same place in every step. An anchored step costs the training thread a
        few tens of microseconds, a step between anchors (``anchor_every`` > 1) a few microseconds.
        """
        if self.state == "control":
            return self._controlled()
        if self.state == "new":
            self.start()
            if self.state == "control":
                return self._controlled()
        k = self._steps
        self._steps += 1
        if self.state == "warmup" and k >= self.settings.warmup_steps:
            self.state = "profile"
            self._profile_first = k
            if self.rank.is_root:
                from rlclock.deploy.capture import StepProfiler

                self._profiler = StepProfiler()
                self._profiler.start()
        elif self.state == "profile":
            if k - self._profile_first < self.settings.profile_steps:
                if self._profiler is not None:
                    self._profiler.mark()
            elif self._times_steps():
                self.state = "timing"
                self._timing_first = k
                if self._profiler is not None:
                    self._profiled = self._read_profile()
                    from rlclock.deploy.capture import StepTimer

                    self._timer = StepTimer(self.settings.timing_steps)
                    self._timer.mark()
            else:
                return self._control_from_here()
        elif self.state == "timing":
            if self._timer is not None:
                self._timer.mark()
            if k - self._timing_first >= self.settings.timing_steps:
                return self._control_from_here()
        return _NULL

    def _times_steps(self) -> bool:
        """Whether steps are timed without the profiler before the schedule is applied."""
        return self.settings.timing_steps > 0 and self.timeline is None

    def _control_from_here(self) -> StepMark:
        self._finish_profile()
        return self._controlled()

    def _controlled(self) -> StepMark:
        """A controlled step begins; when learning, the learner chooses the next step's plan."""
        assert self.controller is not None
        if self._compare is not None:
            self._compare.on_step(self.controller.steps)
        mark = self.controller.step()
        if self._learner is not None:
            self.controller.set_pattern([self._learner.on_step()])
        return mark

    def point(self) -> None:
        """Mark a point inside the current step — at the same places in every step (each layer's start, say).

        In the steps that locate the kernels a marker kernel places the point in the timeline; once the schedule
        is applied, the controller re-times the rest of the step's switches from each point the GPU passes
        (:meth:`ClockController.point`). Elsewhere it does nothing. :meth:`watch` calls it from module hooks.
        """
        if self.state == "control" and self.controller is not None:
            self.controller.point()
        elif self.state == "timing" and self._timer is not None:
            self._timer.point()

    def set_pattern(self, pattern: Sequence[int], from_step: int | None = None) -> None:
        """Choose which plan each step runs from ``from_step`` on (0: the schedule, 1..: ``alternatives``); see
        :meth:`ClockController.set_pattern`. Steps are counted from the first controlled step, as in the report.

        Raises:
            DeployError: The schedule is not applied yet (warm-up, profiling, timing, or an inactive deployment),
                or the controller's own checks (an empty pattern, an index that names no plan, a step already
                started).
        """
        if self.state != "control" or self.controller is None:
            raise DeployError(
                f"set_pattern() needs the schedule to be applied, but the deployment is {self.state!r}.",
                "call it once clk.state is 'control' (after the warm-up, profiling and timing steps), "
                "or pass schedule= and timeline= so that control begins at once.",
            )
        self.controller.set_pattern(pattern, from_step)

    def watch(self, model: Any, blocks: Any = None, every: int = 1) -> Callable[[], None]:
        """Mark a point at the start of every block of ``model``, in the forward pass and in the backward pass.

        Each point costs the training thread a hook call and a CUDA event, and the anchor thread a wake-up: on a
        loop that waits on the host that is host time (a few per cent of the step on the H200 for 48 points of
        a 0.4 B-parameter model; ``docs/deploy.md``), so mark fewer blocks there (``every``).

        Args:
            model: A ``torch.nn.Module``.
            blocks: The modules to mark (default: the children of the model's longest ``nn.ModuleList`` — and of
                any other as long, such as a decoder's beside its encoder's —, which in a transformer are its
                layers).
            every: Mark every ``every``-th block only (the first, then every ``every``-th after it).

        Returns:
            A function that removes the hooks.

        Raises:
            DeployError: No blocks were given and the model holds no ``nn.ModuleList``.
        """
        import torch

        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise DeployError(f"watch(every=...) takes a whole number of blocks >= 1, found {every!r}.")
        if blocks is None:
            lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
            if not lists:
                raise DeployError(
                    f"{type(model).__name__} holds no nn.ModuleList to find its layers in.",
                    "pass blocks=[...] (the modules to mark a point at).",
                )
            longest = max(len(m) for m in lists)
            blocks = [b for m in lists if len(m) == longest for b in m]  # an encoder's and a decoder's layers
        handles: list[Any] = []

        def before(module: Any, args: Any) -> None:
            self.point()

        def after(module: Any, args: Any, output: Any) -> None:
            out = output[0] if isinstance(output, (tuple, list)) and output else output
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(_backward_point)  # the block's backward starts with this gradient

        def _backward_point(grad: Any) -> None:
            self.point()

        for block in list(blocks)[::every]:
            handles += [block.register_forward_pre_hook(before), block.register_forward_hook(after)]

        def remove() -> None:
            for h in handles:
                h.remove()

        return remove

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with a step mark around every call (for loops written as a step function)."""

        def stepped(*args: Any, **kwargs: Any) -> Any:
            with self.step():
                return fn(*args, **kwargs)

        stepped.__name__ = getattr(fn, "__name__", "step")
        stepped.__doc__ = getattr(fn, "__doc__", None)
        return stepped

    def _finish_profile(self) -> None:
        built: tuple[ClockSchedule, StepTimeline] | None = None
        error: RlclockError | None = None
        if self.rank.is_root:
            try:
                built = self._build()
            except RlclockError as exc:
                error = exc
        if error is not None and not self.rank.distributed:
            raise error
        try:
            self.schedule, self.timeline = share(self.rank, *(built if built else (None, None)))
        except DeployError:
            if error is not None:
                raise error from None
            raise
        self._begin_control()

    def _read_profile(self) -> Any:
        """Stop the operator profile and read it (its raw export is dropped at once: a large object graph
        would slow the host's garbage collector in the steps that follow)."""
        import gc

        import torch

        from rlclock.deploy.capture import inductor_code, profile_from_chrome

        data = self._profiler.stop()
        self._profiler = None
        code = inductor_code(data)
        prof = profile_from_chrome(data, torch.cuda.get_device_name(), meta={"torch": torch.__version__}, code=code)
        if self.settings.save:
            self._save_raw(data, code)
        del data
        gc.collect()
        self._say(
            f"profiled {prof.steps_used} of {prof.steps_profiled} steps: {len(prof.trace)} kernels, step "
            f"{prof.timeline.period_s * 1e3:.3f} ms" + "".join(f"; {n}" for n in prof.notes)
        )
        return prof

    def _save_raw(self, data: dict[str, Any], code: dict[str, str]) -> None:
        """Keep the profiler's own export (``step.profile.json.gz``) and the source TorchInductor generated
        (``step.inductor.json.gz``, path → source) in the ``save`` folder: the trace's costs can be derived again
        from them by later rules."""
        import gzip
        import json

        out = Path(self.settings.save or ".")
        out.mkdir(parents=True, exist_ok=True)
        with gzip.open(out / "step.profile.json.gz", "wt", encoding="utf-8") as f:
            json.dump(data, f)
        if code:
            with gzip.open(out / "step.inductor.json.gz", "wt", encoding="utf-8") as f:
                json.dump(code, f)

    def _check_costs(self, prof: Any, device: int) -> None:
        """Plan from their measured time the kernels whose cost from the rules is implausible on this GPU's model
        (:func:`rlclock.deploy.capture.check_costs`), and say so."""
        from rlclock.deploy.capture import check_costs
        from rlclock.dvfs.spec import get_spec
        from rlclock.errors import SpecError

        try:
            spec = get_spec(self._gpu_name(device))
        except SpecError:  # a GPU without a preset: its policy's, if one was given
            key = getattr(self._policy, "gpu_key", None)
            if not key:
                return
            spec = get_spec(key)
        prof.trace, notes = check_costs(prof.trace, spec)
        for note in notes:
            prof.notes.append(note)
            self._say(note)

    def _timed(self, prof: Any) -> None:
        """Place the profile's kernels as the running step has them (:class:`~rlclock.deploy.capture.StepTimer`):
        located without operator recording where that worked, and fitted to the event-timed period."""
        timer, self._timer = self._timer, None
        if timer is None:
            return
        running_s = timer.period_s()
        located = timer.located(prof.timeline.names)
        profiled_s = prof.timeline.period_s
        base = located if located is not None else prof.timeline
        if running_s is None:
            running_s = base.period_s
        prof.timeline = base.fitted(running_s)
        prof.trace.meta.update(
            profiled_period_s=profiled_s,
            step_period_s=running_s,
            located_period_s=located.period_s if located is not None else None,
        )
        where = (
            f"kernels placed from {located.source}"
            if located is not None
            else "kernels placed from the operator profile (no step was located)"
        )
        prof.notes.append(
            f"the step ran in {running_s * 1e3:.3f} ms without the profiler ({profiled_s * 1e3:.3f} ms "
            f"profiled); {where}, the timeline fitted to it"
        )
        self._say(prof.notes[-1])

    def _build(self) -> tuple[ClockSchedule, StepTimeline]:
        prof, self._profiled = self._profiled, None
        if prof is None:
            prof = self._read_profile()
        device = self._device()
        self._check_policy_gpu(device)
        self._check_costs(prof, device)
        self._timed(prof)
        self.profile = prof
        timeline = self.timeline if self.timeline is not None else prof.timeline
        if self.schedule is not None:
            schedule = self.schedule
        else:
            assert self._builder is not None
            latency = self._latency_s()
            if latency is None:
                from rlclock.deploy.controller import default_latency_s
                from rlclock.gpu.nvml import NvmlDevice

                latency = default_latency_s(NvmlDevice(device).name)
            if self.settings.learn:
                schedule = self._learn_candidates(prof, latency)
            else:
                schedule = self._builder(prof.trace, prof.auto_time_s, latency)
        schedule.check_length(len(prof.trace))
        timeline.check_length(len(schedule))
        if self.settings.save:
            out = Path(self.settings.save)
            out.mkdir(parents=True, exist_ok=True)
            prof.trace.save(out / "step.trace.json")
            timeline.save(out / "step.timeline.json")
            schedule.save(out / "step.schedule.json")
            for i, alt in enumerate(self.alternatives, 1):
                alt.save(out / f"step.plan{i}.schedule.json")
            self._say(f"wrote the profiled trace, timeline and schedule{'s' if self.alternatives else ''} to {out}/")
        return schedule, timeline

    def _learn_candidates(self, prof: Any, latency_s: float) -> ClockSchedule:
        """The candidate plans of ``learn`` (auto first, the rest the alternatives) and the learner over them."""
        from rlclock.deploy.learn import LiveLearner, candidate_schedules

        if self._policy is None:
            raise DeployError(
                "learn makes its candidate plans on a checkpoint's planning model, and none was given.",
                "pass checkpoint= (rlclock apply --checkpoint DIR --learn).",
            )
        t0 = time.perf_counter()
        execution = self._execution(len(prof.trace), latency_s)
        cand = candidate_schedules(
            self._policy,
            prof.trace,
            prof.auto_time_s,
            latency_s,
            search=self.settings.search,
            execution=None if execution is None else execution.blind(),
        )
        self.costs = cand.costs
        budget = self.settings.budget if self.settings.budget is not None else float(self._policy.budget)
        self.alternatives = cand.schedules[1:]
        self._learner = LiveLearner(cand, budget)
        self._say(
            f"learning: {len(cand.schedules)} candidate plans made on the planning model in "
            f"{time.perf_counter() - t0:.1f} s ("
            + ", ".join(
                f"{lab} {100 * sl:+.2f} % time / {100 * sv:.1f} % energy"
                for lab, sl, sv in zip(cand.labels, cand.slowdown, cand.saving, strict=True)
            )
            + f"); each step's plan is chosen from the measured step times, budget {100 * budget:g} %"
        )
        return cand.schedules[0]

    def _begin_control(self) -> None:
        s = self.settings
        assert self.schedule is not None and self.timeline is not None
        if self.rank.distributed and self.state == "new":
            self.schedule, self.timeline = share(self.rank, self.schedule, self.timeline)
        device = self._device()
        use_nvml = nvml_present()
        self.controller = ClockController(
            self.schedule,
            self.timeline,
            device=device,
            control_clocks=s.control_clocks,
            latency_s=self._latency_s(),
            lead_s=s.lead_s,
            min_dwell_s=s.min_dwell_s,
            read_back=s.read_back,
            worker=s.worker,
            nvml=use_nvml,
            anchor_every=None if s.anchor_every is None else int(s.anchor_every),
            time_all_steps=s.time_all_steps,
            follow_pace=s.follow_pace,
            alternatives=(*self.alternatives, *self._compare_alternatives()),
            costs=self._costs_for_control(),
        ).start()
        self._start_compare(device, use_nvml)
        self.state = "control"
        limit = self.schedule.power_limit_w
        self._say(
            f"applying schedule {self.schedule.name!r} ({_mode(s)}) on GPU {device}: "
            f"{self.controller.plan.describe()}" + ("" if limit is None else f"; power limit {limit:g} W")
        )
        if use_nvml:
            from rlclock.gpu.nvml import NvmlDevice

            try:
                dev = NvmlDevice(device)
                self._energy = (dev, dev.total_energy_j(), time.monotonic())
            except RlclockError:
                self._energy = None
        if not cuda_present():
            self._say("no CUDA GPU: a dry run without NVML, steps anchored on the host clock")

    def _compare_alternatives(self) -> tuple[ClockSchedule, ...]:
        """With ``compare_blocks``, the driver's own clocks as one more plan (under the schedule's power limit)."""
        if not self.settings.compare_blocks or self.schedule is None or self.schedule.power_limit_w is not None:
            return ()
        from rlclock.schedule import AUTO

        return (ClockSchedule.constant(AUTO, len(self.schedule), name="driver default"),)

    def _start_compare(self, device: int, use_nvml: bool) -> None:
        """With ``compare_blocks``: alternate blocks of the plan and of the driver's clocks (:mod:`.compare`)."""
        blocks = self.settings.compare_blocks
        if not blocks or self.controller is None:
            return
        if self.schedule is not None and self.schedule.power_limit_w is not None:
            self._say(
                "compare_blocks: the plan is a whole-job power limit, set once for the job, so its blocks cannot "
                "alternate with the driver's: not compared"
            )
            return
        from rlclock.deploy.compare import BlockComparison

        read = None
        if use_nvml:
            from rlclock.gpu.nvml import NvmlDevice

            read = NvmlDevice(device).total_energy_j
        sync = None
        if cuda_present():
            import torch

            sync = torch.cuda.synchronize
        self._compare = BlockComparison(blocks, read, sync)
        self.controller.set_pattern(self._compare.pattern(len(self.controller.plans) - 1), 0)
        self._say(f"comparing: blocks of {blocks} steps of the plan and of the driver's clocks in turn")

    def _costs_for_control(self) -> Any:
        """The prices the controller judges its steps with: the policy's planning model, or for a given schedule the
        GPU preset over the profiled step (``None`` where neither is known, or they do not fit the timeline)."""
        if self.costs is None and self.schedule is not None and self.profile is not None and self.rank.is_root:
            from rlclock.deploy.delivered import simulated_costs

            try:
                latency = self._latency_s()
                self.costs = simulated_costs(
                    self._gpu_name(self._device()),
                    self.profile.trace,
                    self.profile.auto_time_s,
                    self.schedule.configs,
                    0.0 if latency is None else latency,
                )
            except RlclockError:
                self.costs = None
        if self.costs is None or self.timeline is None or self.costs.n != len(self.timeline):
            return None
        return self.costs

    # -- the end ---------------------------------------------------------------------------------------------
    def close(self) -> ControllerReport | None:
        """Stop the controller (clocks restored) and return its report (``None`` if it never started)."""
        if self.state == "closed":
            return self.report
        if self._counted:
            self._counted = False
            _EXPLICIT[0] -= 1
        previous = self.state
        self.state = "closed"
        if self._profiler is not None:
            with contextlib.suppress(Exception):  # the run is ending; the profile is not needed any more
                self._profiler.stop()
            self._profiler = None
            self._say(
                f"the loop ended while profiling ({self._steps - self._profile_first} of "
                f"{self.settings.profile_steps} steps): no schedule was applied"
            )
        elif previous == "timing":
            if self._timer is not None:
                self._timer.close()
            self._profiled = self._timer = None
            self._say(
                f"the loop ended while timing the steps after profiling ({self._steps - self._timing_first} "
                f"of {self.settings.timing_steps}): no schedule was applied"
            )
        if self.controller is None:
            if previous == "warmup":
                self._say(f"the loop ended after {self._steps} steps, before profiling began: nothing was applied")
            return None
        if self._energy is not None and cuda_present():
            import torch

            torch.cuda.synchronize()
        self.report = self.controller.close()
        if self._compare is not None:
            delivered = self.report.delivered
            self.report.compared = self._compare.result(
                self.controller.dry_run, None if delivered is None else delivered.planned_saving
            )
        if self._learner is not None:
            self.learned = self._learner.summary()
            self.report.notes.append(self._learner.describe())
            if self.settings.save:
                import json

                out = Path(self.settings.save)
                out.mkdir(parents=True, exist_ok=True)
                (out / "learn.json").write_text(json.dumps(self.learned, indent=1))
        if self._energy is not None:
            dev, e0, t0 = self._energy
            try:
                self.report.energy_j = dev.total_energy_j() - e0
                self.report.energy_time_s = time.monotonic() - t0
            except RlclockError as exc:
                self.report.notes.append(f"energy not read: {exc}")
        if self.settings.save and self.rank.is_root:
            self._plot(Path(self.settings.save) / "step.png")
        if self.settings.report:
            path = Path(self.settings.report)
            if self.rank.distributed and self.rank.world_size > 1:
                path = path.with_name(f"{path.stem}.rank{self.rank.rank}{path.suffix}")
            self.report.save(path)
            self.report_path = path
        if self.settings.verbose and self.rank.is_root:
            _log.info("%s", self.report.text().removeprefix("rlclock "))
        return self.report

    def _plot(self, path: Path) -> None:
        """Draw one controlled step (:func:`rlclock.deploy.plot.plot_step`); a failure is a note, not an error."""
        from rlclock.deploy.plot import plot_step

        assert self.controller is not None and self.report is not None
        try:
            plot_step(
                path, self.controller.schedule, self.controller.timeline, self.controller.plan, self.report.delivered
            )
            self._say(f"drew a step to {path}")
        except Exception as exc:  # the run is over; a plot must not fail it
            self.report.notes.append(f"the step's plot was not drawn: {exc}")

    def __enter__(self) -> Clocked:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Clocked({self.state}, {_mode(self.settings)}, steps {self._steps})"


def clocked(
    schedule: ClockSchedule | ScheduleBuilder | str | Path | None = None,
    *,
    timeline: StepTimeline | str | Path | None = None,
    alternatives: Sequence[ClockSchedule] = (),
    attached: bool = False,
    **options: Any,
) -> Clocked:
    """Deploy a clock schedule around a training loop (see :class:`Clocked` and the module docstring).

    Args:
        schedule: A :class:`ClockSchedule`, a schedule file, or a builder
            ``(trace, auto_time_s, latency_s) -> ClockSchedule``; or ``checkpoint=`` instead.
        timeline: A :class:`StepTimeline` or its file; default: profile the first steps.
        alternatives: Other schedules for the same step (plans 1..), each with one entry per kernel of the step's
            timeline; ``clk.set_pattern`` then chooses the plan of every step (:meth:`Clocked.set_pattern`). Under
            ``torch.distributed`` they are not broadcast: every rank passes its own.
        **options: Any field of :class:`~rlclock.deploy.settings.DeploySettings` — ``checkpoint`` (a policy
            checkpoint whose ``ClockPolicy`` builds the schedule), ``control_clocks`` (``False`` by default: a dry
            run; ``True`` sets clocks, needs root), ``device``, ``latency_s``, ``lead_s``, ``min_dwell_s``,
            ``warmup_steps``, ``profile_steps``, ``worker``, ``read_back``, ``anchor_every``, ``time_all_steps``,
            ``follow_pace``, ``search``, ``learn`` (choose every step's plan from the measured step times,
            ``budget``), ``report``, ``save``, ``verbose``; each documented there (and in
            ``rlclock apply --help``). ``None`` leaves an option at its default.

        attached: Opened by ``rlclock apply``'s attachment (:mod:`rlclock.deploy.attach`), not by the script; it
            stands down while the script has a deployment of its own.

    Returns:
        The deployment; use it as a context manager.

    Raises:
        DeployError: An unknown option, conflicting or invalid ones, a missing policy module.
    """
    DeploySettings.check_options(options)
    env = DeploySettings.from_env()
    args: dict[str, Any] = {k: str(v) if isinstance(v, Path) else v for k, v in options.items() if v is not None}
    sched_obj: ClockSchedule | None = None
    builder: ScheduleBuilder | None = None
    if isinstance(schedule, (str, Path)):
        args["schedule"] = str(schedule)
    elif isinstance(schedule, ClockSchedule):
        sched_obj = schedule
    elif callable(schedule):
        builder = schedule
    elif schedule is not None:
        raise DeployError(f"schedule= takes a ClockSchedule, a file or a function, found {type(schedule).__name__}.")
    tl_obj: StepTimeline | None = None
    if isinstance(timeline, (str, Path)):
        args["timeline"] = str(timeline)
    elif isinstance(timeline, StepTimeline):
        tl_obj = timeline
    elif timeline is not None:
        raise DeployError(f"timeline= takes a StepTimeline or a file, found {type(timeline).__name__}.")
    if env.get("checkpoint") or env.get("schedule"):  # rlclock apply chose the schedule for this run
        args.pop("checkpoint", None)
        args.pop("schedule", None)
        sched_obj, builder = None, None
    if env.get("timeline"):
        tl_obj = None
    for i, alt in enumerate(alternatives, 1):
        if not isinstance(alt, ClockSchedule):
            raise DeployError(
                f"alternatives= takes ClockSchedules; alternative {i} is a {type(alt).__name__}.",
                "load a schedule file with ClockSchedule.load(path).",
            )
    return Clocked(DeploySettings(**{**args, **env}), sched_obj, builder, tl_obj, alternatives, attached)


def _mode(settings: DeploySettings) -> str:
    """The deployment's clock-control mode, as its lines say it."""
    return "setting clocks" if settings.control_clocks else "dry run"
