"""A Lightning ``Callback`` that runs a clock deployment over ``trainer.fit()``.

::

    import lightning.pytorch as pl
    from rlclock.integrations.lightning import RlclockLightningCallback

    clock = RlclockLightningCallback(checkpoint="corpus-h100")        # clocked()'s options; dry run by default
    trainer = pl.Trainer(max_steps=1000, accumulate_grad_batches=4, callbacks=[clock])
    trainer.fit(model, loader)
    print(clock.report.text())

The events it uses:

* ``on_train_start``: opens :func:`rlclock.deploy.clocked` with the callback's options (under ``rlclock apply``
  the command's options override them); it comes after the sanity check's validation batches;
* ``on_train_batch_start``: a step begins when the batch begins an optimizer step. With automatic optimization
  that is a batch whose index in the epoch is a multiple of ``trainer.accumulate_grad_batches`` (read at every
  batch, so ``GradientAccumulationScheduler`` is followed): Lightning steps the optimizer after every
  ``accumulate_grad_batches``-th batch and after an epoch's last one, so the next batch begins a step. With
  manual optimization (``automatic_optimization = False``) every batch is a step;
* ``on_train_batch_end``: the step ends when the batch stepped the optimizer (``trainer.global_step`` moved);
* ``on_train_end``, ``on_exception`` (any exception out of ``fit()``, ``KeyboardInterrupt`` included) and
  ``teardown``: close the deployment (clocks restored; the report in :attr:`RlclockLightningCallback.report`,
  and in the ``report=`` file if one was named). After an exception the failed step's end is not marked and the
  exception propagates.

The class derives from ``lightning.pytorch.Callback``, or from ``pytorch_lightning.Callback`` where only that
package is installed; Lightning calls callbacks by their hook names, so either works with either package's
``Trainer``. Under a multi-process strategy (``ddp``, ``ddp_spawn``, FSDP …) every rank runs the callback: rank
0 profiles and plans, every rank receives the plan and controls its own GPU. With ``ddp_spawn`` the ranks run
in child processes, so the callback object in the launching process has no report: name a ``report=`` file
(each rank writes its own, ``.rankN``). Strategies whose engine accumulates gradients itself (DeepSpeed) do not
step on an epoch's last batch; a step that straddles two epochs is then counted as two.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlclock.deploy.api import Clocked, ScheduleBuilder
from rlclock.deploy.report import ControllerReport
from rlclock.deploy.timeline import StepTimeline
from rlclock.integrations.session import TrainingSession, missing_framework
from rlclock.schedule import ClockSchedule

try:
    import lightning.pytorch as pl
except ModuleNotFoundError as exc:
    if exc.name not in ("lightning", "lightning.pytorch"):
        raise
    try:
        import pytorch_lightning as pl
    except ModuleNotFoundError as missing:
        raise missing_framework(
            missing,
            ("lightning", "pytorch_lightning"),
            "lightning",
            "rlclock.integrations.lightning (the Lightning callback)",
        ) from None

Callback: Any = pl.Callback


class RlclockLightningCallback(Callback):
    """Runs :func:`rlclock.deploy.clocked` over ``trainer.fit()``, one step per optimizer step (module docstring).

    Args:
        schedule: A :class:`ClockSchedule`, a schedule file, a builder ``(trace, auto_time_s, latency_s) ->
            ClockSchedule``, or ``None`` (then ``checkpoint=``, or ``rlclock apply``, gives the schedule).
        timeline: A :class:`StepTimeline` or its file; with ``schedule`` it skips profiling (and runs a dry run
            without NVML on a machine without CUDA).
        alternatives: Other schedules for the same step (:meth:`Clocked.set_pattern`).
        watch: Mark a point at every block of the LightningModule (``True``) or every ``watch``-th one
            (:meth:`Clocked.watch`).
        **options: :func:`~rlclock.deploy.clocked`'s options — ``checkpoint``, ``control_clocks``, ``search``,
            ``budget``, ``learn``, ``report``, ``save``, ``warmup_steps``, ``profile_steps`` … (docs/integrations.md).

    Raises:
        DeployError: An option ``clocked()`` does not take.
    """

    def __init__(
        self,
        schedule: ClockSchedule | ScheduleBuilder | str | Path | None = None,
        *,
        timeline: StepTimeline | str | Path | None = None,
        alternatives: Sequence[ClockSchedule] = (),
        watch: bool | int = False,
        **options: Any,
    ) -> None:
        super().__init__()
        self.session = TrainingSession(schedule, timeline=timeline, alternatives=alternatives, watch=watch, **options)
        self._step_began_at: int | None = None  # trainer.global_step when the open step began

    @property
    def clocked(self) -> Clocked | None:
        """The deployment of the current (or last) ``fit()`` call."""
        return self.session.clocked

    @property
    def report(self) -> ControllerReport | None:
        """The controller's report once training ended (``None`` when no schedule was applied)."""
        return self.session.report

    @property
    def steps(self) -> int:
        """Optimizer steps marked in the current (or last) ``fit()`` call."""
        return self.session.steps

    @staticmethod
    def begins_step(trainer: Any, pl_module: Any, batch_idx: int) -> bool:
        """Whether training batch ``batch_idx`` (its index in the epoch) begins an optimizer step."""
        if not getattr(pl_module, "automatic_optimization", True):
            return True
        every = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
        return batch_idx % every == 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._step_began_at = None
        self.session.open(pl_module)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.begins_step(trainer, pl_module, batch_idx):
            self.session.begin_step()
            self._step_began_at = int(trainer.global_step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._step_began_at is not None and int(trainer.global_step) != self._step_began_at:
            self.session.end_step()
            self._step_began_at = None

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.session.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.session.close(exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.session.close()

    def close(self, failure: BaseException | None = None) -> ControllerReport | None:
        """Close the deployment now (clocks restored; :meth:`TrainingSession.close`)."""
        return self.session.close(failure)

    def __repr__(self) -> str:
        return f"RlclockLightningCallback({self.session.clocked!r}, optimizer steps {self.session.steps})"
