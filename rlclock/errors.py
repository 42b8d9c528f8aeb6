"""The one error hierarchy of rlclock.

Every error a user can cause (a malformed trace or spec, an unsupported clock, a mismatched checkpoint,
missing permission, an NVML failure) is an :class:`RlclockError`. Its message is one line: what was
wrong, what was found, and how to fix it. The CLI prints that line and exits with status 2 instead of a
traceback from deep inside.
"""

from __future__ import annotations


class RlclockError(Exception):
    """Base class of all errors rlclock raises on purpose.

    Args:
        message: What was wrong, including what was expected and what was found.
        fix: How the user can fix it (optional; appended after "Fix:").
    """

    def __init__(self, message: str, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        text = message if fix is None else f"{message} Fix: {fix}"
        super().__init__(" ".join(text.split()))


class TraceError(RlclockError):
    """A kernel trace is malformed, of an unknown version, or holds invalid values."""


class SpecError(RlclockError):
    """An environment spec, agent recipe or GPU preset is malformed or names something unknown."""


class EnvUsageError(SpecError):
    """The env was called wrongly: an action outside its action space, a reset option or render mode it lacks, a
    number of copies that is not a count. (A :class:`SpecError` too, for code that catches those.)"""


class ClockError(RlclockError):
    """A clock configuration is not supported by the GPU (or not allowed in this mode)."""


class CheckpointError(RlclockError):
    """A checkpoint is missing, malformed, or does not match the GPU, clock table or feature schema."""


class ScheduleError(RlclockError):
    """A clock schedule does not fit the trace or the configuration set it is evaluated on."""


class NvmlError(RlclockError):
    """NVML reported an error, or is not available on this machine."""


class ClockPermissionError(NvmlError):
    """Setting clocks needs privileges the current process does not have."""


class GpuUnavailableError(RlclockError):
    """The operation needs an NVIDIA GPU (and CUDA / NVML) that this machine does not have."""


class NvmlNotSupportedError(NvmlError):
    """The GPU or its driver does not support the NVML function asked for (e.g. locked clocks on a GeForce)."""


class ClockControlDisabledError(ClockError):
    """Clocks would have to be set, but clock control was not opted into (``control_clocks``)."""


class GpuBusyError(ClockError):
    """Another rlclock process controls this GPU's clocks and power limit (one process per GPU at a time)."""


class ClockRestoreError(ClockError):
    """Clocks or a power limit could not be given back, even after retries; the message says what is left."""


class CudaGraphError(RlclockError):
    """Capturing, inspecting, pruning or replaying a CUDA graph failed."""


class MeasurementError(RlclockError):
    """A measurement could not be taken or is unusable (too short a window, a counter that never ticked …)."""


class DeployError(RlclockError):
    """A schedule cannot be deployed in a live training loop (timeline, profile, policy, controller or worker)."""
