"""Deploy a clock schedule in a live PyTorch training loop.

Public names (imported lazily, so ``import rlclock.deploy`` needs neither torch nor a GPU):

* :class:`ClockController` — applies a :class:`~rlclock.schedule.ClockSchedule` on a step timeline from a
  separate worker, with the safety of :class:`~rlclock.gpu.clocks.ClockControl` (dry run by default);
* :func:`clocked` / :class:`Clocked` — the user API around a training loop: profiles the first steps, builds
  the schedule (a policy checkpoint, a schedule file or a builder function) and applies it;
* :class:`StepTimeline`, :func:`plan_switches`, :class:`SwitchPlan`, :class:`SwitchEvent`, :class:`Segment`,
  :class:`ControllerReport` (with :class:`PlanFigures` per plan), :class:`DeploySettings`, :class:`PlanPattern`
  (which of several plans each step runs: :meth:`ClockController.set_pattern`).

* :class:`ClockPolicy` (from :mod:`rlclock.policy`), :class:`ClockSchedule` and :class:`ClockConfig`, the
  values a deployment is built from.

The policy is loaded only when a checkpoint is used.
"""

from __future__ import annotations

from rlclock.lazy import lazy_exports

_EXPORTS = {
    "ClockController": "rlclock.deploy.controller",
    "StepMark": "rlclock.deploy.controller",
    "Clocked": "rlclock.deploy.api",
    "clocked": "rlclock.deploy.api",
    "StepTimeline": "rlclock.deploy.timeline",
    "plan_switches": "rlclock.deploy.plan",
    "SwitchPlan": "rlclock.deploy.plan",
    "SwitchEvent": "rlclock.deploy.plan",
    "Segment": "rlclock.deploy.plan",
    "ControllerReport": "rlclock.deploy.report",
    "PlanFigures": "rlclock.deploy.report",
    "PlanPattern": "rlclock.deploy.pattern",
    "DeploySettings": "rlclock.deploy.settings",
    "StepProfile": "rlclock.deploy.capture",
    "ClockPolicy": "rlclock.policy",
    "ClockSchedule": "rlclock.schedule",
    "ClockConfig": "rlclock.schedule",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("rlclock.deploy", globals(), _EXPORTS)
