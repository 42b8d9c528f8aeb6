"""Backends: a GPU executing a trace — simulated, replayed from a table, or measured live — and the one
switching rule that turns requests into time and energy."""

from rlclock.backends.base import GpuBackend, RunResult
from rlclock.backends.switching import EngineState, SwitchEngine

__all__ = ["EngineState", "GpuBackend", "RunResult", "SwitchEngine"]
