"""The settings each kind of backend takes in an env spec's ``backend:`` — one definition of each.

``backend:`` is one of :class:`SimulatedSettings` (the default), :class:`RecordedSettings` or
:class:`NvmlSettings`, told apart by ``kind`` (:data:`BackendSettings`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, BeforeValidator, Field

from rlclock.validation import Float, Int, Settings


class SimulatedSettings(Settings):
    """The calibrated simulator (:class:`~rlclock.backends.simulated.SimulatedGpu`).

    Attributes:
        anchor: Anchor kernels that carry a measured auto-clock point on it.
        noise_std: Relative standard deviation of log-normal noise on every table entry (0: none).
        seed: Seed of that noise (default: the seed the caller passes, e.g. the training seed).
        power_limit_w: Board power limit in watts (default: the GPU preset's).
    """

    kind: Literal["simulated"] = "simulated"
    anchor: bool = True
    noise_std: Annotated[Float, Field(ge=0.0, le=1.0)] = 0.0
    seed: Int | None = None
    power_limit_w: Annotated[Float, Field(gt=0.0)] | None = None


class RecordedSettings(Settings):
    """A measurement table replayed (:class:`~rlclock.backends.recorded.RecordedGpu`).

    Attributes:
        table: The table file written by ``rlclock measure``.
        missing: ``error`` (every pair must be measured) or ``simulated`` (fill gaps from the simulator).
    """

    kind: Literal["recorded"]
    table: str
    missing: Literal["error", "simulated"] = "error"


class NvmlSettings(Settings):
    """This machine's GPU, measured live (:class:`~rlclock.backends.nvml_gpu.NvmlGpu`).

    Attributes:
        device: NVML index of the GPU.
        control_clocks: Set clocks to measure other configurations (root; otherwise a dry run: ``auto`` only).
            ``allow_clock_control`` is its deprecated name.
        cache: Measurement cache file (a sweep resumes where it stopped).
        window_s: Length of one energy window, seconds.
        warmup_s: Run before the first window, seconds.
        repeats: Windows per measurement.
        target_batch_s: Replays batched per launch, seconds of work.
    """

    kind: Literal["nvml"]
    device: Annotated[Int, Field(ge=0)] = 0
    control_clocks: bool = Field(False, validation_alias=AliasChoices("control_clocks", "allow_clock_control"))
    cache: str | None = None
    window_s: Annotated[Float, Field(gt=0.0)] = 0.5
    warmup_s: Annotated[Float, Field(ge=0.0)] = 0.3
    repeats: Annotated[Int, Field(ge=1)] = 3
    target_batch_s: Annotated[Float, Field(gt=0.0)] = 0.002


def _simulated_by_default(value: object) -> object:
    if isinstance(value, dict) and "kind" not in value:
        return {**value, "kind": "simulated"}
    return value


BackendSettings = Annotated[
    SimulatedSettings | RecordedSettings | NvmlSettings,
    Field(discriminator="kind"),
    BeforeValidator(_simulated_by_default),
]
"""The ``backend:`` of an env spec (``kind`` defaults to ``simulated``)."""
BACKEND_KINDS = frozenset({"simulated", "recorded", "nvml"})
