"""TrainingSession: one deployment over one training run, driven by a framework's events.

The callbacks of :mod:`rlclock.integrations` are thin: they tell a :class:`TrainingSession` when training begins
(:meth:`~TrainingSession.open`), when an optimizer step begins and ends (:meth:`~TrainingSession.begin_step`,
:meth:`~TrainingSession.end_step`), and when training ends or fails (:meth:`~TrainingSession.close`). The session
opens :func:`rlclock.deploy.clocked` with the callback's options, and closes it — the controller stopped, the
clocks restored, the report kept in :attr:`~TrainingSession.report` — exactly once, also when the framework never
says that training ended: then at the next :meth:`~TrainingSession.open`, on leaving a ``with`` block around the
training call, or at the interpreter's exit.
"""

from __future__ import annotations

import atexit
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlclock.deploy.api import Clocked, ScheduleBuilder, clocked
from rlclock.deploy.controller import StepMark
from rlclock.deploy.report import ControllerReport
from rlclock.deploy.settings import DeploySettings
from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError
from rlclock.log import get_logger
from rlclock.schedule import ClockSchedule

_log = get_logger(__name__)


class MissingFrameworkError(DeployError, ModuleNotFoundError):
    """A callback's framework is not installed (also a ``ModuleNotFoundError``, so ``except ImportError`` sees it)."""


def missing_framework(
    exc: ModuleNotFoundError, packages: Sequence[str], extra: str, what: str
) -> MissingFrameworkError:
    """The error for a callback whose framework did not import.

    Args:
        exc: The import's error.
        packages: The modules whose absence means the framework is not installed (``exc.name`` is one of them).
        extra: rlclock's optional extra that installs it (``"hf"``).
        what: The callback, as the message names it.

    Raises:
        ModuleNotFoundError: ``exc`` itself when another module is missing (a framework installed without one of
            its own dependencies): that is the error to show.
    """
    if exc.name not in packages:
        raise exc
    names = " or ".join(p for p in packages if "." not in p)
    return MissingFrameworkError(
        f"{what} needs the {names} package, which is not installed.", f"pip install 'rlclock[{extra}]'."
    )


class TrainingSession:
    """The deployment a framework's callback runs over a training run (module docstring).

    Args:
        schedule: As :func:`~rlclock.deploy.clocked`'s: a :class:`ClockSchedule`, a schedule file, a builder
            ``(trace, auto_time_s, latency_s) -> ClockSchedule``, or ``None`` (``checkpoint=`` or
            ``rlclock apply`` gives it).
        timeline: A :class:`StepTimeline` or its file (default: the first steps are profiled).
        alternatives: Other schedules for the same step (:meth:`Clocked.set_pattern`).
        watch: Mark a point at every block of the model (``True``) or every ``watch``-th block (an int) in the
            forward and backward pass (:meth:`Clocked.watch`); ``False`` (the default) marks steps only.
        options: Any option of :func:`~rlclock.deploy.clocked` (:class:`DeploySettings`' fields).

    Attributes:
        clocked: The deployment of the current training run, or of the last one once it is closed (``None``
            before training begins).
        report: The controller's report of the last run once it is closed (``None`` while it runs, and when no
            schedule was applied: an inactive deployment, or one that ended before profiling finished).
        steps: Optimizer steps marked in the current (or last) training run.

    Raises:
        DeployError: An option ``clocked()`` does not take, or a ``watch`` that is not a bool or a count >= 1.
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
        DeploySettings.check_options(options)
        if not isinstance(watch, (bool, int)) or (not isinstance(watch, bool) and watch < 1):
            raise DeployError(
                f"watch takes True, False or a whole number of blocks >= 1, found {watch!r}.",
                "pass watch=True to mark every block, watch=K for every K-th.",
            )
        self._schedule = schedule
        self._timeline = timeline
        self._alternatives = tuple(alternatives)
        self._watch = int(watch)
        self._options = dict(options)
        self.clocked: Clocked | None = None
        self.report: ControllerReport | None = None
        self.steps = 0
        self._mark: StepMark | None = None
        self._unwatch: Any = None

    @property
    def active(self) -> bool:
        """True from :meth:`open` to :meth:`close`."""
        return self.clocked is not None and self.clocked.state != "closed"

    def open(self, model: Any = None) -> Clocked:
        """Training begins: close a deployment left open, then open a new one (profiling or applying from the
        next step on; inactive on a machine without CUDA unless a schedule and a timeline were given).

        Args:
            model: The ``torch.nn.Module`` being trained, for ``watch`` (ignored without it).

        Raises:
            DeployError: From :func:`~rlclock.deploy.clocked` (a bad option in the environment of ``rlclock
                apply``, a missing checkpoint, clock control asked for without a GPU …).
        """
        if self.active:
            self._say("training began again before the last run was closed: closing it first")
            self.close()
        self.report = None
        self.steps = 0
        self._mark = None
        clk = clocked(self._schedule, timeline=self._timeline, alternatives=self._alternatives, **self._options)
        self.clocked = clk
        try:
            clk.start()
        except BaseException:
            clk.close()
            raise
        atexit.register(self._close_at_exit)
        if self._watch and model is not None and clk.state != "inactive":
            self._unwatch = clk.watch(model, every=self._watch)
        return clk

    def begin_step(self) -> None:
        """An optimizer step begins (the first micro-batch of its gradient accumulation is next)."""
        if not self.active:
            return
        assert self.clocked is not None
        self._mark = self.clocked.step()  # a step whose end was not marked stays without one
        self.steps += 1

    def end_step(self) -> None:
        """The optimizer step that began last has ended (its ``optimizer.step()`` was called)."""
        mark, self._mark = self._mark, None
        if mark is not None:
            mark.__exit__(None, None, None)

    def close(self, failure: BaseException | None = None) -> ControllerReport | None:
        """Training ended: stop the controller (clocks restored) and keep its report (idempotent).

        Args:
            failure: The exception that stopped training, if one did. The deployment is then closed without
                marking the failed step's end, and an error while closing is printed rather than raised, so that
                ``failure`` is what propagates.

        Returns:
            The report (``None`` when no schedule was applied).
        """
        if failure is not None and self.active:
            self._say(
                f"training stopped with {type(failure).__name__} after {self.steps} optimizer steps: "
                "closing the deployment (clocks restored)"
            )
        return self._close(None if failure is None else type(failure).__name__)

    def _close(self, failure: str | None) -> ControllerReport | None:
        clk = self.clocked
        if clk is None or clk.state == "closed":
            return self.report
        atexit.unregister(self._close_at_exit)
        if failure is None:
            self.end_step()
        self._mark = None
        unwatch, self._unwatch = self._unwatch, None
        try:
            if unwatch is not None:
                unwatch()
            self.report = clk.close()
        except Exception as exc:
            if failure is None:
                raise
            _log.warning("closing the deployment after %s failed too: %s", failure, exc)
        return self.report

    def _close_at_exit(self) -> None:
        if self.active:
            self._say(
                f"the interpreter is exiting after {self.steps} optimizer steps and training never said it "
                "ended (an exception in the training call?): closing the deployment (clocks restored)"
            )
            self._close("the interpreter's exit")

    def _say(self, message: str) -> None:
        clk = self.clocked
        if clk is not None and clk.settings.verbose and clk.rank.is_root:
            _log.info(message)

    def __repr__(self) -> str:
        return f"TrainingSession({self.clocked!r}, optimizer steps {self.steps})"
