"""TrueGpu: a simulated GPU that differs from the planning model the way a real one does — for judging what runs
on a GPU the model does not describe exactly (online learning, budget safety), without hardware.

Drawn by :func:`draw_true_gpu` around a preset:

* **parameters** within :data:`rlclock.dvfs.variants.HIDDEN_RANGES` (voltage curve, power floor, leakage, clock,
  tensor and SIMT power, memory power, bandwidth, DRAM latency);
* **switching latency** × 0.3–3 of the preset's;
* **two structural differences the planning model lacks**: the firmware keeps the board a few percent below its
  nominal power limit (0–5 %), so under the cap a clock lands below the request where the model expects it to hold;
  and raising the core clock takes longer than lowering it (× 1–3 of the latency: on the H200 the clock drops at
  once under the power cap and climbs back over ~100 ms, ``docs/simulator.md``);
* **step-time noise** of 2–9 % from step to step, correlated 0.7–0.8 with the step before (as measured on real
  training steps on the H200), applied by whoever measures steps (:attr:`TrueGpuDraw.time_noise`).

Anchored on the same measured auto-clock points as the planning model: the true GPU reproduces the measured step at
auto clocks and differs in how it answers other clocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from rlclock.backends.simulated import SimulatedGpu
from rlclock.dvfs.spec import GpuSpec
from rlclock.dvfs.variants import hidden_gpu
from rlclock.schedule import ClockConfig
from rlclock.workload.trace import KernelTrace

LATENCY_SCALE = (0.3, 3.0)
"""Range of the true switching latency over the preset's (log-uniform)."""
RAISE_FACTOR = (1.0, 3.0)
"""Range of how much longer a switch to a higher core clock takes than one to a lower."""
CAP_MARGIN = (0.0, 0.05)
"""Range of the share of the nominal power limit the firmware keeps in reserve."""
TIME_NOISE = (0.02, 0.09)
"""Range of the relative spread of a step's time from step to step (2.3-9.3 % measured on real training steps on
the H200, ``data/h200-step-noise.json``)."""
TIME_CORRELATION = (0.7, 0.8)
"""Range of the correlation of one step's time deviation with the next's (0.7-0.8 measured there: slow phases
last several steps)."""


@dataclass(frozen=True)
class TrueGpuDraw:
    """One true GPU: its hidden spec and its differences from the planning model.

    Attributes:
        spec: The hidden parameters (key and name of the preset, so measured points anchor it).
        latency_scale: True switching latency over the preset's.
        raise_factor: How much longer a switch to a higher core clock takes.
        cap_margin: Share of the power limit the firmware keeps in reserve.
        time_noise: Relative standard deviation of a step's time from one step to the next.
        seed: The seed it was drawn with.
        time_correlation: Correlation of one step's time deviation with the next's.
    """

    spec: GpuSpec
    latency_scale: float
    raise_factor: float
    cap_margin: float
    time_noise: float
    seed: int
    time_correlation: float = 0.0

    def describe(self) -> str:
        return (f"true {self.spec.name} #{self.seed}: latency x{self.latency_scale:.2f} (raising "
                f"x{self.raise_factor:.2f}), power cap -{100 * self.cap_margin:.1f} %, step noise "
                f"{100 * self.time_noise:.1f} %")


def draw_true_gpu(base: GpuSpec, seed: int) -> TrueGpuDraw:
    """A true GPU around preset ``base`` (module docstring), reproducible from ``seed``."""
    rng = np.random.default_rng(10_000 + seed)
    spec = replace(hidden_gpu(base, seed), key=base.key)
    return TrueGpuDraw(spec, float(np.exp(rng.uniform(*np.log(LATENCY_SCALE)))), float(rng.uniform(*RAISE_FACTOR)),
                       float(rng.uniform(*CAP_MARGIN)), float(rng.uniform(*TIME_NOISE)), seed,
                       float(rng.uniform(*TIME_CORRELATION)))


class TrueGpu(SimulatedGpu):
    """The step of ``trace`` on a true GPU (module docstring), over ``configs``.

    Args:
        draw: The true GPU.
        trace: The step (its measured auto points anchor the true GPU as they anchor the planning model).
        configs: Configuration set (the planning model's).
        latency_s: The nominal switching latency the planning model uses (default: the preset's).
    """

    def __init__(self, draw: TrueGpuDraw, trace: KernelTrace, configs: Sequence[ClockConfig],
                 latency_s: float | None = None) -> None:
        nominal = draw.spec.switch_latency_s if latency_s is None else latency_s
        super().__init__(draw.spec, trace, configs, nominal * draw.latency_scale, anchor=True,
                         power_limit_w=draw.spec.power_limit_w * (1.0 - draw.cap_margin))
        self.draw = draw
        core = [draw.spec.requested_core_mhz(c) for c in self.configs]
        self._core_mhz = np.array(core, dtype=float)

    def switch_latency_s(self, current: int, target: int) -> float:
        """Lowering the core clock takes the latency; raising it ``raise_factor`` times as long."""
        up = self._core_mhz[target] > self._core_mhz[current]
        return self.latency_s * (self.draw.raise_factor if up else 1.0)
