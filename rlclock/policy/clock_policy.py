"""ClockPolicy: a trained clock policy, loaded from plain weights, turning a kernel trace into a clock schedule.

A thin facade over the policy package: :mod:`~rlclock.policy.checkpoint` (the format),
:mod:`~rlclock.policy.network` (the numpy MLP), :mod:`~rlclock.policy.inputs` (the incremental first-layer
evaluator), :mod:`~rlclock.policy.rollout` (the decision loop on the switching rule),
:mod:`~rlclock.policy.planner` (meeting a budget) and :mod:`~rlclock.policy.search` (its best choices).
Numpy only: no torch, no stable-baselines3, nothing unpickled.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import rlclock.policy.planner as planner
from rlclock.backends.base import GpuBackend
from rlclock.backends.executable import Execution
from rlclock.dvfs.spec import GpuSpec, get_spec
from rlclock.errors import CheckpointError, RlclockError
from rlclock.observation.features import PRICE_REL_MAX, PRICE_REL_MIN
from rlclock.policy.checkpoint import check_shapes, checkpoint_gpu, clock_table_digest, read_checkpoint
from rlclock.policy.inputs import FirstLayerEvaluator, PreparedStep
from rlclock.policy.network import PolicyWeights
from rlclock.policy.rollout import Overrides, Plan, rollout
from rlclock.policy.search import SEARCH_RANKS
from rlclock.policy.step import PlanningStep
from rlclock.policy.whole_job import cheapest
from rlclock.schedule import ClockConfig, ClockSchedule
from rlclock.workload.trace import KernelTrace, Measurement

DEFAULT_PRICE_REL = 1.15
"""Where plans without a budget start when a checkpoint does not say (exact optima price time at 1-1.5)."""


class ClockPolicy:
    """A deployable clock policy.

    Attributes:
        weights: The network.
        meta: The checkpoint's metadata.
        gpu: The GPU preset it was trained for.
        configs: Its action set (index = configuration requested).
        lookahead: Kernels after the current one it looks at.
        budget: Slowdown budget it was trained for (a fraction).
    """

    def __init__(self, weights: PolicyWeights, meta: dict[str, Any]) -> None:
        self.weights = weights
        self.meta = meta
        self.gpu = checkpoint_gpu(meta)
        self.configs: tuple[ClockConfig, ...] = tuple(ClockConfig.parse(c) for c in meta["configs"])
        self.lookahead = int(meta["lookahead"])
        self.budget = float(meta.get("budget", 0.01))
        check_shapes(weights, meta, self.configs, self.lookahead)
        try:
            self.gpu.check_runtime_configs(self.configs, "this checkpoint's action set")
        except RlclockError as exc:
            raise CheckpointError(
                exc.message, f"retrain it on an env spec whose actions keep one memory clock: {exc.fix}"
            ) from None
        if not any(c.core_mhz is not None and c.mem_mhz is not None for c in self.configs):
            raise CheckpointError(
                "the policy's action set has no locked core@memory pair; its kernel clock response needs at least one.",
                "retrain with locked pairs in the env's actions.",
            )
        self.evaluator = FirstLayerEvaluator(weights, self.gpu, self.configs, self.lookahead)

    @classmethod
    def load(cls, checkpoint: str | Path) -> ClockPolicy:
        """Load a checkpoint (a folder, or the name of a shipped one such as ``gpt3xl-h200``); refuses malformed
        or incompatible ones with a clear error. Reads ``meta.json`` and ``policy.safetensors`` only."""
        weights, meta = read_checkpoint(checkpoint)
        return cls(weights, meta)

    @property
    def gpu_key(self) -> str:
        return self.gpu.key

    @property
    def gpu_name(self) -> str:
        return self.gpu.name

    @property
    def price_rel(self) -> float:
        """The price of time (over the step's mean auto power) a plan without a budget uses."""
        return float(np.clip(self.meta.get("price_rel", DEFAULT_PRICE_REL), PRICE_REL_MIN, PRICE_REL_MAX))

    def check_gpu(self, gpu: GpuSpec | str) -> None:
        """Raise :class:`CheckpointError` unless ``gpu`` (a spec, preset key or NVML name) is the policy's GPU."""
        spec = get_spec(gpu) if isinstance(gpu, str) else gpu
        if spec.key != self.gpu.key or clock_table_digest(spec) != self.meta["clock_table"]:
            raise CheckpointError(
                f"this policy was trained for {self.gpu.name}, not {spec.name}.",
                f"use a checkpoint trained for {spec.key}, or train one.",
            )

    # -- planning ---------------------------------------------------------------------------------------------
    def backend_for(
        self,
        trace: KernelTrace,
        auto_time_s: np.ndarray | None = None,
        auto_energy_j: np.ndarray | None = None,
        latency_s: float | None = None,
    ) -> GpuBackend:
        """The planning model: a simulated backend of the policy's GPU over ``trace``, anchored on measured
        auto points if given."""
        from rlclock.backends.simulated import SimulatedGpu

        if auto_time_s is not None:
            t = np.asarray(auto_time_s, float)
            e = None if auto_energy_j is None else np.asarray(auto_energy_j, float)
            if t.shape != (len(trace),) or (e is not None and e.shape != t.shape):
                raise CheckpointError(f"need {len(trace)} auto times (and energies), found {t.shape}.")
            kernels = [
                replace(
                    k,
                    measured=(
                        Measurement(
                            gpu=self.gpu.key,
                            time_s=float(t[i]),
                            energy_j=None if e is None else float(e[i]),
                            source="profile",
                        ),
                    ),
                )
                for i, k in enumerate(trace)
            ]
            trace = trace.with_kernels(kernels)
        lat = self.meta.get("latency_s", self.gpu.switch_latency_s) if latency_s is None else latency_s
        return SimulatedGpu(self.gpu, trace, self.configs, lat, anchor=True)

    def step_of(self, backend: GpuBackend | PlanningStep) -> PlanningStep:
        """The planning inputs of a backend (whose GPU and configurations must be the policy's)."""
        if isinstance(backend, PlanningStep):
            return backend
        self.check_gpu(backend.spec)
        if tuple(backend.configs) != self.configs:
            raise CheckpointError(
                "the backend's configuration set differs from the policy's action set.",
                "build the backend with policy.configs (or use policy.schedule without one).",
            )
        return PlanningStep.of(backend)

    def schedule(
        self,
        trace: KernelTrace,
        auto_time_s: np.ndarray | None = None,
        auto_energy_j: np.ndarray | None = None,
        latency_s: float | None = None,
        backend: GpuBackend | None = None,
        budget: float | None = None,
        meet_budget: bool = True,
        search: bool = True,
        ranks: int = SEARCH_RANKS,
        whole_job: bool = True,
        power_limits: bool = True,
        execution: Execution | None = None,
    ) -> ClockSchedule:
        """The policy's clock schedule for one step of ``trace``.

        Args:
            trace: The step's kernels (from a generator or ``rlclock profile``).
            auto_time_s: Measured auto-clock duration per kernel (anchors the planning model), optional.
            auto_energy_j: Measured auto-clock energy per kernel, optional.
            latency_s: Switching latency to plan for (default: the one trained for).
            backend: Plan on this backend instead (its configurations must be the policy's).
            budget: Slowdown budget, a fraction (default: the one trained for).
            meet_budget: Choose the price of time so the plan fits the budget (:meth:`plan`); otherwise plan at
                the trained price.
            search: Let the planner weigh the policy's best choices on the planning model (:meth:`plan`; about
                twice the planning time, the best plan by default); ``False`` plans from its first choices alone.
            ranks: How many of its best choices the search weighs at every decision.
            whole_job: With ``meet_budget``, weigh whole-job plans beside the policy's and keep the cheapest
                (:mod:`rlclock.policy.whole_job`); ``False`` judges the policy's own plan.
            power_limits: Among the whole-job plans, weigh the driver's clocks under board power limits: the
                schedule may then name a power limit (:attr:`ClockSchedule.power_limit_w`), which applying it
                sets for the job.
            execution: Judge every plan as a live controller executes it on the step's timeline
                (:class:`~rlclock.backends.executable.Execution`); the schedule is then the configuration each
                kernel runs at under the controller's rule, which skips none of its segments. Without it the
                schedule is the policy's requests, judged by the switching rule on the planning model alone.
        """
        if backend is None:
            backend = self.backend_for(trace, auto_time_s, auto_energy_j, latency_s)
        got = self.plan(
            backend,
            self.budget if budget is None else budget,
            meet_budget,
            search=search,
            ranks=ranks,
            whole_job=whole_job,
            power_limits=power_limits,
            execution=execution,
        )
        return ClockSchedule(
            self.configs, got.requests if got.runs is None else got.runs, name=got.name, power_limit_w=got.power_limit_w
        )

    def plan(
        self,
        backend: GpuBackend | PlanningStep,
        budget: float,
        meet_budget: bool = True,
        prices: int = 24,
        pairs: int = 2,
        mix_tries: int = 8,
        search: bool = False,
        ranks: int = SEARCH_RANKS,
        whole_job: bool = True,
        power_limits: bool = True,
        execution: Execution | None = None,
    ) -> Plan:
        """The requested configuration per kernel and its cost on the planning model (:mod:`rlclock.policy.planner`).

        With ``meet_budget`` the planner tries ``prices`` prices of time, time-shares the ``pairs`` most
        promising pairs (``mix_tries`` rollouts each) and keeps the cheapest plan within ``budget``; without
        it, the policy plans at its trained price. ``search`` adds the search over its ``ranks`` best choices.
        With ``whole_job``, on a backend (not bare planning inputs), the plan within the budget is then weighed
        against the best static configuration and, with ``power_limits``, the best whole-job power limit
        (:func:`rlclock.policy.whole_job.cheapest`). With an ``execution`` every plan is judged as the controller
        executes it (:func:`rlclock.policy.planner.judged`).
        """
        step = self.step_of(backend)
        if execution is not None and execution.n != step.n:
            raise CheckpointError(
                f"the execution's timeline has {execution.n} kernels, the step {step.n}.",
                "build both from a profile of the same training step.",
            )
        if not meet_budget:
            return planner.plan_at(self.evaluator, step, self.price_rel, search, ranks, execution)
        got = planner.plan(
            self.evaluator, step, budget, prices, pairs, mix_tries, search, ranks=ranks, execution=execution
        )
        if not whole_job or isinstance(backend, PlanningStep):
            return got
        return cheapest(got, backend, budget, power_limits)

    def prepare(self, backend: GpuBackend | PlanningStep) -> PreparedStep:
        """What several rollouts of one step share (:meth:`rlclock.policy.inputs.FirstLayerEvaluator.prepare`)."""
        return self.evaluator.prepare(self.step_of(backend))

    def rollout(
        self,
        backend: GpuBackend | PlanningStep,
        price_rel: float | np.ndarray,
        prepared: PreparedStep | None = None,
        timings: list[float] | None = None,
        first_layer: list[np.ndarray] | None = None,
        overrides: Overrides | None = None,
        start: int = 0,
    ) -> Plan:
        """One rollout at a price of time (:func:`rlclock.policy.rollout.rollout`)."""
        return rollout(
            self.evaluator, self.step_of(backend), price_rel, prepared, timings, first_layer, overrides, start
        )
