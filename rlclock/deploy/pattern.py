"""Which of several switch plans each step runs: a repeating pattern of plan indices, set from a step on.

A controller may hold several plans for the same step (plan 0, its schedule, and plans 1.. from alternative
schedules), so that a learner can compare them on the GPU itself by alternating them step by step. A
:class:`PlanPattern` says which plan step ``n`` runs: until a pattern is set every step runs plan 0; after
``set(pattern, from_step)`` step ``n >= from_step`` runs ``pattern[(n - from_step) % len(pattern)]``, until a
later ``set`` takes over from its own first step. The controller (which numbers the steps) and the switch worker
(which schedules them) each keep one and apply the same changes, so they agree on every step's plan.
"""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Sequence

from rlclock.errors import DeployError


def check_pattern(pattern: Sequence[int], n_plans: int) -> tuple[int, ...]:
    """``pattern`` as a tuple of plan indices, each in ``range(n_plans)``.

    Raises:
        DeployError: The pattern is empty, not a sequence of whole numbers, or names a plan that does not exist.
    """
    if isinstance(pattern, (str, bytes)) or not isinstance(pattern, Sequence):
        raise DeployError(
            f"a plan pattern is a sequence of plan indices, found {pattern!r}.",
            "pass e.g. [0, 1] to alternate plan 0 (the schedule) and plan 1 (the first alternative).",
        )
    if not pattern:
        raise DeployError(
            "the plan pattern is empty, so no step would have a plan.",
            "pass at least one plan index, e.g. [0] for the schedule alone.",
        )
    out: list[int] = []
    for p in pattern:
        if isinstance(p, bool) or not isinstance(p, numbers.Integral) or not 0 <= p < n_plans:
            raise DeployError(
                f"plan index {p!r} in the pattern {list(pattern)!r} does not name a plan: there are "
                f"{n_plans} (0: the schedule, 1..{n_plans - 1}: the alternatives).",
                f"use whole numbers from 0 to {n_plans - 1}, or pass more alternatives.",
            )
        out.append(int(p))
    return tuple(out)


class PlanPattern:
    """The plan of every step (module docstring).

    Args:
        n_plans: How many plans there are (indices ``0 .. n_plans - 1``).
    """

    def __init__(self, n_plans: int = 1) -> None:
        self.n_plans = int(n_plans)
        self._starts: list[int] = []  # first step of each pattern, increasing
        self._patterns: list[tuple[int, ...]] = []

    def set(self, pattern: Sequence[int], from_step: int) -> tuple[int, ...]:
        """From step ``from_step`` on, step ``n`` runs ``pattern[(n - from_step) % len(pattern)]``; patterns set
        earlier for steps at or after ``from_step`` no longer apply. Returns the checked pattern.

        Raises:
            DeployError: A bad pattern (:func:`check_pattern`) or a negative ``from_step``.
        """
        checked = check_pattern(pattern, self.n_plans)
        if isinstance(from_step, bool) or not isinstance(from_step, numbers.Integral) or from_step < 0:
            raise DeployError(
                f"from_step must be a step number >= 0, found {from_step!r}.",
                "leave it unset for the first step not started yet.",
            )
        keep = bisect.bisect_left(self._starts, int(from_step))
        del self._starts[keep:], self._patterns[keep:]
        self._starts.append(int(from_step))
        self._patterns.append(checked)
        return checked

    def plan_of(self, step: int) -> int:
        """The plan step ``step`` runs (0 before any pattern applies)."""
        i = bisect.bisect_right(self._starts, step) - 1
        if i < 0:
            return 0
        pattern = self._patterns[i]
        return pattern[(step - self._starts[i]) % len(pattern)]

    def plans_of(self, steps: int) -> list[int]:
        """The plan of each of the steps ``0 .. steps - 1``."""
        return [self.plan_of(k) for k in range(steps)]

    def forget_before(self, step: int) -> None:
        """Drop the patterns that no step from ``step`` on runs by (bookkeeping of a long run)."""
        i = bisect.bisect_right(self._starts, step) - 1
        if i > 0:
            del self._starts[:i], self._patterns[:i]

    def to_list(self) -> list[list[object]]:
        """JSON form: ``[[from_step, [plan, ...]], ...]``."""
        return [[s, list(p)] for s, p in zip(self._starts, self._patterns)]

    @classmethod
    def from_list(cls, data: Sequence[Sequence[object]], n_plans: int) -> PlanPattern:
        """Parse :meth:`to_list` output.

        Raises:
            DeployError: Malformed data or a plan index out of range.
        """
        out = cls(n_plans)
        try:
            for from_step, pattern in data:
                out.set(pattern, from_step)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise DeployError(f"malformed plan pattern: {exc}.") from None
        return out
