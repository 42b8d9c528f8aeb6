"""Fixtures of the deploy tests: small schedules and timelines."""

from __future__ import annotations

import sys

import numpy as np
import pytest


@pytest.fixture
def alternating():
    """A 40 ms step of 40 kernels of 1 ms in four 10 ms segments, alternating two configurations."""
    from rlclock.deploy.timeline import StepTimeline
    from rlclock.schedule import ClockSchedule

    timeline = StepTimeline.from_durations(np.full(40, 1e-3))
    schedule = ClockSchedule(["1980@3201", "1410@3201"], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10, "alt")
    return schedule, timeline


@pytest.fixture
def no_policy_module(monkeypatch):
    """An installation without ``rlclock.policy`` (also when another test imported it already)."""
    import rlclock.deploy

    monkeypatch.setitem(sys.modules, "rlclock.policy", None)
    monkeypatch.delattr(rlclock.deploy, "policy", raising=False)
