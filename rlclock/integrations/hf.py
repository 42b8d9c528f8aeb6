"""A Hugging Face ``transformers`` ``TrainerCallback`` that runs a clock deployment over ``trainer.train()``.

::

    from rlclock.integrations.hf import RlclockTrainerCallback

    clock = RlclockTrainerCallback(checkpoint="corpus-h100")          # clocked()'s options; dry run by default
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[clock])
    with clock:                                                        # optional: closes it if train() raises
        trainer.train()
    print(clock.report.text())

The events it uses:

* ``on_train_begin``: opens :func:`rlclock.deploy.clocked` with the callback's options (under ``rlclock apply``
  the command's options override them);
* ``on_step_begin`` / ``on_step_end``: the start and end of each step. The Trainer calls them once per optimizer
  step — before the first micro-batch of a gradient accumulation and after ``optimizer.step()`` — so a step is one
  optimizer step, ``gradient_accumulation_steps`` micro-batches (fewer in an epoch's last one);
* ``on_train_end``: closes the deployment (clocks restored; the report in :attr:`RlclockTrainerCallback.report`,
  and in the ``report=`` file if one was named).

The Trainer has no event for an exception: one raised inside ``trainer.train()`` reaches no callback. The
deployment is then closed by whichever comes first: leaving a ``with callback:`` block around ``train()`` (the
exception propagates), the next ``on_train_begin`` (a retry, or ``auto_find_batch_size``), or the interpreter's
exit (an uncaught exception ends a script that way). Until then a deployment that sets clocks keeps its worker
running; if the process dies instead, the worker and its watchdog restore the clocks (``docs/deploy.md``,
Safety).

Under ``torch.distributed`` (``torchrun``, ``accelerate launch``) the Trainer runs the callback on every rank:
rank 0 profiles and plans, every rank receives the plan and controls its own GPU.
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
    import transformers
except ModuleNotFoundError as exc:
    raise missing_framework(
        exc, ("transformers",), "hf", "rlclock.integrations.hf (the Hugging Face Trainer callback)"
    ) from None

TrainerCallback: Any = transformers.TrainerCallback


class RlclockTrainerCallback(TrainerCallback):
    """Runs :func:`rlclock.deploy.clocked` over ``trainer.train()``, one step per optimizer step (module docstring).

    Args:
        schedule: A :class:`ClockSchedule`, a schedule file, a builder ``(trace, auto_time_s, latency_s) ->
            ClockSchedule``, or ``None`` (then ``checkpoint=``, or ``rlclock apply``, gives the schedule).
        timeline: A :class:`StepTimeline` or its file; with ``schedule`` it skips profiling (and runs a dry run
            without NVML on a machine without CUDA).
        alternatives: Other schedules for the same step (:meth:`Clocked.set_pattern`).
        watch: Mark a point at every block of the model (``True``) or every ``watch``-th one (:meth:`Clocked.watch`).
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
        self.session = TrainingSession(schedule, timeline=timeline, alternatives=alternatives, watch=watch, **options)

    @property
    def clocked(self) -> Clocked | None:
        """The deployment of the current (or last) ``train()`` call."""
        return self.session.clocked

    @property
    def report(self) -> ControllerReport | None:
        """The controller's report once training ended (``None`` when no schedule was applied)."""
        return self.session.report

    @property
    def steps(self) -> int:
        """Optimizer steps marked in the current (or last) ``train()`` call."""
        return self.session.steps

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.session.open(model)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.begin_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.end_step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.close()

    def close(self, failure: BaseException | None = None) -> ControllerReport | None:
        """Close the deployment now (clocks restored), e.g. after ``train()`` raised (:meth:`TrainingSession.close`)."""
        return self.session.close(failure)

    def __enter__(self) -> RlclockTrainerCallback:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self.session.close(exc)

    def __repr__(self) -> str:
        return f"RlclockTrainerCallback({self.session.clocked!r}, optimizer steps {self.session.steps})"
