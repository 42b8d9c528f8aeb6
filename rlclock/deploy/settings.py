"""DeploySettings: the options of a deployment, and the environment variables ``rlclock apply`` passes them in.

``rlclock apply [options] -- python train.py`` runs the script with these variables set; the user API
(:func:`rlclock.deploy.clocked`) reads them. Under ``rlclock apply`` its options override the arguments the
script passes to ``clocked`` (the command line is the user's choice for this run); outside it, the script's
arguments and the defaults apply.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from rlclock.errors import DeployError

ENV_PREFIX = "RLCLOCK_DEPLOY_"
ACTIVE_ENV = "RLCLOCK_DEPLOY"
"""Set to ``1`` by ``rlclock apply``: the settings in the environment are in force."""
CONTROL_MODES = ("dry-run", "on")


@dataclass(frozen=True)
class DeploySettings:
    """How to deploy a clock schedule in a training loop.

    Attributes:
        checkpoint: Folder of a trained :class:`~rlclock.policy.ClockPolicy` that builds the schedule.
        schedule: A schedule file (``ClockSchedule.save``) to apply instead.
        timeline: A step-timeline file (``StepTimeline.save``); default: profile the first steps.
        control: ``"dry-run"`` (record only; the default) or ``"on"`` (set clocks; needs root).
        device: NVML index of the GPU; default: the one behind the process's CUDA device.
        latency_s: Switching latency, seconds; default: the GPU preset's.
        lookahead_s: How far ahead of its kernels a switch is issued, seconds; default: latency + 0.5 ms.
        min_dwell_s: A switch must land at least this long before its segment ends, seconds.
        warmup_steps: Steps run untouched before profiling (compilation, allocator, cuDNN autotuning).
        profile_steps: Steps profiled for the kernel sequence and timeline.
        worker: ``"process"`` or ``"thread"``.
        read_back: Read the clocks back after each switch.
        anchor_every: Anchor every this many steps on the GPU; default: every step when the plan has switches,
            every 40 ms when it has none (:func:`~rlclock.deploy.controller.default_anchor_every`).
        time_all_steps: Time every step on the GPU for the report (measures the switch-time error of sparse
            anchors; costs the loop a mark per step).
        search: Plan a checkpoint's schedule with the search over the policy's second choices
            (:meth:`~rlclock.policy.ClockPolicy.plan`; about a second more, once).
        report: Where to write the controller's report (JSON); ``.rankN`` is added under torch.distributed.
        save: Folder to write the profiled trace, the timeline and the schedule to.
        verbose: Print what the deployment does (one line each) and the report at the end.
    """

    checkpoint: str | None = None
    schedule: str | None = None
    timeline: str | None = None
    control: str = "dry-run"
    device: int | None = None
    latency_s: float | None = None
    lookahead_s: float | None = None
    min_dwell_s: float = 0.0
    warmup_steps: int = 3
    profile_steps: int = 5
    worker: str = "process"
    read_back: bool = True
    anchor_every: int | None = None
    time_all_steps: bool = False
    search: bool = False
    report: str | None = None
    save: str | None = None
    verbose: bool = True

    def __post_init__(self) -> None:
        if self.control not in CONTROL_MODES:
            raise DeployError(f"control mode {self.control!r} is not known.",
                              f"use one of {list(CONTROL_MODES)} ('on' sets clocks and needs root).")
        if self.checkpoint and self.schedule:
            raise DeployError("both a policy checkpoint and a schedule file were given.", "pass only one of them.")
        if self.warmup_steps < 0 or self.profile_steps < 1:
            raise DeployError(f"warmup_steps must be >= 0 and profile_steps >= 1, found {self.warmup_steps} and "
                              f"{self.profile_steps}.")
        if self.anchor_every is not None and (isinstance(self.anchor_every, bool) or int(self.anchor_every) !=
                                              self.anchor_every or self.anchor_every < 1):
            raise DeployError(f"anchor_every must be a whole number of steps >= 1, found {self.anchor_every!r}.",
                              "leave it unset for the default.")
        for name in ("latency_s", "lookahead_s"):
            v = getattr(self, name)
            if v is not None and (not math.isfinite(v) or v < 0):
                raise DeployError(f"{name} must be a finite number >= 0 s, found {v!r}.")

    @property
    def allow_clock_control(self) -> bool:
        """True when clocks are to be set."""
        return self.control == "on"

    def with_(self, **changes: Any) -> DeploySettings:
        """A copy with the given fields changed (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_env(self) -> dict[str, str]:
        """The environment variables that carry these settings (unset fields are left out)."""
        env = {ACTIVE_ENV: "1"}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                env[ENV_PREFIX + f.name.upper()] = str(int(v)) if isinstance(v, bool) else str(v)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The fields set in the environment (empty unless ``RLCLOCK_DEPLOY=1``), parsed.

        Raises:
            DeployError: A variable cannot be parsed.
        """
        env = os.environ if environ is None else environ
        if env.get(ACTIVE_ENV) != "1":
            return {}
        out: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            kind = str(f.type)
            try:
                if "bool" in kind:
                    out[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
                elif "int" in kind:
                    out[f.name] = int(raw)
                elif "float" in kind:
                    out[f.name] = float(raw)
                else:
                    out[f.name] = raw
            except ValueError:
                raise DeployError(f"environment variable {ENV_PREFIX + f.name.upper()}={raw!r} is not a valid "
                                  f"{kind}.", "fix or unset it (rlclock apply sets it).") from None
        return out
