"""Fakes the worker tests share: a clock the test moves by hand, and a dry-run control that logs what it applied
and when."""

from __future__ import annotations

from rlclock.deploy.worker import PlanOnlyControl
from rlclock.schedule import ClockConfig


class Clock:
    """A time source that stands still until the test moves :attr:`t` (seconds)."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Recording(PlanOnlyControl):
    """Logs ``(time, configuration)`` per switch applied: the clock's time, or its time since ``origin_s``
    rounded to the microsecond when ``origin_s`` is given."""

    def __init__(self, clock: Clock, origin_s: float | None = None) -> None:
        super().__init__()
        self.clock = clock
        self.origin_s = origin_s
        self.log: list[tuple[float, ClockConfig]] = []

    def apply(self, config, read_back=False):
        super().apply(config)
        t = self.clock() if self.origin_s is None else round(self.clock() - self.origin_s, 6)
        self.log.append((t, self.current))
