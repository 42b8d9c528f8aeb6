"""Fixtures of the deploy tests: the file-backed fake NVML of tests/gpu, and small schedules and timelines."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

GPU_TESTS = Path(__file__).resolve().parents[1] / "gpu"
ROOT = Path(__file__).resolve().parents[2]
if str(GPU_TESTS) not in sys.path:
    sys.path.insert(0, str(GPU_TESTS))

import fake_pynvml  # noqa: E402


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """A one-GPU fake H200 behind rlclock.gpu.nvml, also for worker and watchdog processes (via the environment).

    Yields a function returning the fake's state.
    """
    from rlclock.gpu import nvml

    path = tmp_path / "fake-nvml.json"
    fake_pynvml.write_state(path, fake_pynvml.default_state())
    monkeypatch.setenv(fake_pynvml.STATE_ENV, str(path))
    monkeypatch.setenv(nvml.MODULE_ENV, "fake_pynvml")
    monkeypatch.setenv("RLCLOCK_LOCK_DIR", str(tmp_path / "locks"))  # the fake GPU's clock lock, not in /run/lock
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(GPU_TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    nvml.use_module(None)
    yield lambda: fake_pynvml.read_state(path)
    nvml.use_module(None)


@pytest.fixture
def no_nvml(monkeypatch):
    """NVML absent (a machine without an NVIDIA driver)."""
    from rlclock.gpu import nvml

    monkeypatch.setenv(nvml.MODULE_ENV, "rlclock_no_such_nvml_module")
    nvml.use_module(None)
    yield
    nvml.use_module(None)


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
