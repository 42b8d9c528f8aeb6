"""Fixtures of the integration tests: a plan that needs no GPU (a schedule and a step timeline, so the controller
runs a dry run with host-time anchors), and tiny training jobs for the real frameworks."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def plan():
    """A 40 ms step of 40 kernels of 1 ms in four 10 ms segments, alternating two H200 configurations (a switch
    into each segment: every step is anchored)."""
    from rlclock.deploy.timeline import StepTimeline
    from rlclock.schedule import ClockSchedule

    timeline = StepTimeline.from_durations(np.full(40, 1e-3))
    schedule = ClockSchedule(["1980@3201", "1410@3201"], [0] * 10 + [1] * 10 + [0] * 10 + [1] * 10, "alternating")
    return schedule, timeline


@pytest.fixture
def plan_options(plan):
    """The callback arguments of a dry run without NVML (``schedule``, ``timeline`` and the options it needs)."""
    schedule, timeline = plan
    return {"schedule": schedule, "timeline": timeline, "latency_s": 0.006, "worker": "thread", "verbose": False}
