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
* **step-time noise** as measured on real training steps on the H200 (``data/h200-step-noise.json``), applied by
  whoever measures steps: by default one of the measured series itself, replayed in blocks
  (:class:`StepNoise`: its slow drift — phases seconds long, a step 12 % or 15 % slower for hundreds of steps — and
  its spikes kept as measured), or drawn as a correlated series of 2–9 % spread (``noise="ar1"``,
  :attr:`TrueGpuDraw.time_noise`).

Anchored on the same measured auto-clock points as the planning model: the true GPU reproduces the measured step at
auto clocks and differs in how it answers other clocks.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from rlclock.backends.simulated import SimulatedGpu
from rlclock.dvfs.spec import GpuSpec
from rlclock.dvfs.variants import hidden_gpu
from rlclock.errors import RlclockError, ScheduleError
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
NOISE_FILE = "h200-step-noise.json"
"""The shipped measurement whose step-time series the true GPUs replay (``benchmarks/step_noise.py``)."""
REPLAY_BLOCK_STEPS = 128
"""Steps per block of a replayed series (long enough to keep its drift and its correlation from step to step)."""
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
        noise_series: The measured step-time series this GPU's steps replay (a model of
            :data:`NOISE_FILE`).
    """

    spec: GpuSpec
    latency_scale: float
    raise_factor: float
    cap_margin: float
    time_noise: float
    seed: int
    time_correlation: float = 0.0
    noise_series: str = ""

    def describe(self) -> str:
        return (
            f"true {self.spec.name} #{self.seed}: latency x{self.latency_scale:.2f} (raising "
            f"x{self.raise_factor:.2f}), power cap -{100 * self.cap_margin:.1f} %, step noise "
            f"{100 * self.time_noise:.1f} % (replays {self.noise_series or 'none'})"
        )


def draw_true_gpu(base: GpuSpec, seed: int) -> TrueGpuDraw:
    """A true GPU around preset ``base`` (module docstring), reproducible from ``seed``."""
    rng = np.random.default_rng(10_000 + seed)
    spec = replace(hidden_gpu(base, seed), key=base.key)
    draw = TrueGpuDraw(
        spec,
        float(np.exp(rng.uniform(*np.log(LATENCY_SCALE)))),
        float(rng.uniform(*RAISE_FACTOR)),
        float(rng.uniform(*CAP_MARGIN)),
        float(rng.uniform(*TIME_NOISE)),
        seed,
        float(rng.uniform(*TIME_CORRELATION)),
    )
    names = sorted(measured_noise())
    return replace(draw, noise_series=names[int(rng.integers(len(names)))])


@functools.cache
def measured_noise() -> dict[str, np.ndarray]:
    """The measured step-time series of :data:`NOISE_FILE`, per model: each step's GPU time over the series'
    median, less one (a relative deviation).

    Raises:
        RlclockError: The shipped measurement is missing or malformed.
    """
    from rlclock.resources import measurement

    path = measurement(NOISE_FILE)
    try:
        models = json.loads(path.read_text())["models"]
        out = {}
        for name, rec in models.items():
            t = np.asarray(rec["gpu_time_s"], dtype=float)
            if t.size < 2 * 8 or not np.all(np.isfinite(t)) or np.any(t <= 0):
                raise ValueError(f"model {name!r}: fewer than 16 steps or a non-positive time")
            out[name] = t / np.median(t) - 1.0
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise RlclockError(
            f"the step-noise measurement {path} cannot be read: {exc}.",
            "reinstall rlclock, or measure it: python benchmarks/step_noise.py --out FILE.",
        ) from exc
    if not out:
        raise RlclockError(f"the step-noise measurement {path} holds no model.", "measure it again.")
    return out


@dataclass(frozen=True)
class StepNoise:
    """Where a true GPU's step times deviate from their noise-free values: each step's relative deviation, the same
    whichever plan runs (host and firmware jitter do not ask which clocks the plan wants).

    Attributes:
        kind: ``"replay"`` (a measured series, :attr:`TrueGpuDraw.noise_series`, in blocks of
            :data:`REPLAY_BLOCK_STEPS` from random places) or ``"ar1"`` (a correlated series of
            :attr:`TrueGpuDraw.time_noise` spread and :attr:`TrueGpuDraw.time_correlation`).
        draw: The true GPU.
    """

    kind: str
    draw: TrueGpuDraw

    def __post_init__(self) -> None:
        if self.kind not in ("replay", "ar1"):
            raise RlclockError(f"step noise {self.kind!r} is not known.", "use 'replay' or 'ar1'.")

    def series(self, steps: int, rng: np.random.Generator) -> np.ndarray:
        """Relative deviations of ``steps`` consecutive steps."""
        if self.kind == "ar1":
            rho, sd = self.draw.time_correlation, self.draw.time_noise
            shocks = rng.normal(0.0, sd * np.sqrt(1.0 - rho**2), steps)
            out = np.empty(steps)
            dev = rng.normal(0.0, sd)
            for i in range(steps):
                dev = rho * dev + shocks[i]
                out[i] = dev
            return out
        base = measured_noise()[self.draw.noise_series]
        block = min(REPLAY_BLOCK_STEPS, base.size // 2)
        starts = rng.integers(0, base.size - block + 1, size=-(-steps // block))
        return np.concatenate([base[s : s + block] for s in starts])[:steps]


class TrueGpu(SimulatedGpu):
    """The step of ``trace`` on a true GPU (module docstring), over ``configs``.

    Args:
        draw: The true GPU.
        trace: The step (its measured auto points anchor the true GPU as they anchor the planning model).
        configs: Configuration set (the planning model's).
        latency_s: The nominal switching latency the planning model uses (default: the preset's).
    """

    def __init__(
        self, draw: TrueGpuDraw, trace: KernelTrace, configs: Sequence[ClockConfig], latency_s: float | None = None
    ) -> None:
        nominal = draw.spec.switch_latency_s if latency_s is None else latency_s
        super().__init__(
            draw.spec,
            trace,
            configs,
            nominal * draw.latency_scale,
            anchor=True,
            power_limit_w=draw.spec.power_limit_w * (1.0 - draw.cap_margin),
        )
        self.draw = draw
        core = [draw.spec.requested_core_mhz(c) for c in self.configs]
        self._core_mhz = np.array(core, dtype=float)

    def at_power_limit(self, power_limit_w: float) -> SimulatedGpu:
        """Refused: a true GPU's firmware reserve and switching asymmetry are not carried to another limit.

        Raises:
            ScheduleError: Always.
        """
        raise ScheduleError(
            "a true GPU of the online study runs under its own power limit only.",
            "compare power limits on the planning model (SimulatedGpu).",
        )

    def switch_latency_s(self, current: int, target: int) -> float:
        """Lowering the core clock takes the latency; raising it ``raise_factor`` times as long."""
        up = self._core_mhz[target] > self._core_mhz[current]
        return self.latency_s * (self.draw.raise_factor if up else 1.0)
