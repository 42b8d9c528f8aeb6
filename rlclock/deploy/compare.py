"""Measured, where clocks may be set: blocks of planned and driver-default steps in turn, compared.

With ``compare_blocks=B`` (``rlclock apply --compare-blocks B``) the controller runs the plan for ``B`` steps, then
the driver's own clocks for ``B`` steps, and so on (a plan pattern, :mod:`rlclock.deploy.pattern`; the driver's
clocks are one more plan). At every block's first step the GPU's queue is drained (``torch.cuda.synchronize()``,
once per block) and NVML's energy counter and the host clock are read: each block's energy and time are then
exactly its steps' on the GPU. Each planned block is compared with the driver-default blocks beside it (their mean
where there are two, which cancels a drift that is linear over the three); over the pairs, the mean relative change
in energy and in time per step with a 95 % confidence interval (Student's t).

In a dry run nothing is set, so the two kinds of block differ only by the loop's own noise: the same comparison is the
*noise floor*, and from its spread the report says how many steps a run with ``--control-clocks`` would need for the
interval to exclude zero at the planned saving.

NVML's energy counter advances in ticks (every ~0.1 s on an H200), so a block should last a second or more (the
counter's tick is then within a few per cent of it); the report says when blocks are shorter.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

COUNTER_TICK_S = 0.1
"""The energy counter's update interval on the GPUs measured (seconds); blocks much shorter are noisy."""


def _t95(dof: int) -> float:
    """The two-sided 95 % quantile of Student's t with ``dof`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


@dataclass
class Comparison:
    """Planned against driver-default blocks (module docstring).

    Attributes:
        block_steps: Steps per block.
        dry_run: Nothing was set (the comparison is the noise floor).
        blocks: ``[plan, steps, time_s, energy_j]`` of every complete block (``plan``: 0 planned, 1 driver default).
        pairs: Planned blocks compared.
        energy_change: Mean relative change of a planned step's energy against the driver's (negative: a saving).
        energy_ci: Its 95 % confidence interval ``[low, high]``.
        time_change: Mean relative change of a planned step's time.
        time_ci: Its interval.
        planned_saving: The plan's saving on the planning model, a fraction (``None``: not known).
        steps_needed: In a dry run, the steps a run with the clocks set would need for the energy interval to exclude
            zero at the planned saving (``None`` without a planned saving or a spread).
        notes: What makes the figures less certain.
    """

    block_steps: int
    dry_run: bool
    blocks: list[list[float]] = field(default_factory=list)
    pairs: int = 0
    energy_change: float = math.nan
    energy_ci: list[float] = field(default_factory=lambda: [math.nan, math.nan])
    time_change: float = math.nan
    time_ci: list[float] = field(default_factory=lambda: [math.nan, math.nan])
    planned_saving: float | None = None
    steps_needed: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One line for the console."""
        if self.pairs < 2:
            return (
                f"compared blocks of {self.block_steps} steps: too few ({self.pairs} planned blocks beside driver "
                "ones; at least 2 are needed)"
            )
        e, t = 100 * self.energy_change, 100 * self.time_change
        (elo, ehi), (tlo, thi) = (100 * x for x in self.energy_ci), (100 * x for x in self.time_ci)
        head = (
            f"measured over {self.pairs} pairs of {self.block_steps}-step blocks: energy per step {e:+.2f} % "
            f"(95 % CI {elo:+.2f} to {ehi:+.2f} %), time {t:+.2f} % ({tlo:+.2f} to {thi:+.2f} %)"
        )
        if not self.dry_run:
            return head + " against the driver's clocks"
        floor = f"dry run, nothing set: this is the noise floor ({head[len('measured ') :]})"
        if self.steps_needed is not None and self.planned_saving is not None:
            floor += (
                f"; resolving the planned {100 * self.planned_saving:.2f} % saving would take about "
                f"{self.steps_needed} steps with --control-clocks"
            )
        return floor

    def lines(self) -> list[str]:
        """The summary and the notes."""
        return [self.summary, *(f"note: {n}" for n in self.notes)]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary
        return d


class BlockComparison:
    """Reads the energy counter and the clock at each block boundary of a controlled run (module docstring).

    Args:
        block_steps: Steps per block (>= 1).
        read_energy_j: The GPU's energy counter, joules (``None``: not measured, time only).
        sync: Drains the GPU's queue before a reading (``torch.cuda.synchronize``; ``None``: nothing to drain).
        clock: The time source, seconds.
    """

    def __init__(
        self,
        block_steps: int,
        read_energy_j: Callable[[], float] | None = None,
        sync: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if block_steps < 1:
            raise ValueError(f"blocks need at least one step, found {block_steps!r}.")
        self.block_steps = int(block_steps)
        self.read_energy_j = read_energy_j
        self.sync = sync
        self.clock = clock
        self.marks: list[tuple[int, float, float]] = []
        """``(step, time_s, energy_j)`` at the start of every block (energy NaN when not measured)."""

    def pattern(self, default_plan: int) -> list[int]:
        """The plan pattern: ``block_steps`` steps of plan 0, then as many of ``default_plan``."""
        return [0] * self.block_steps + [default_plan] * self.block_steps

    def on_step(self, step: int) -> None:
        """Step ``step`` (counted from the first controlled step) starts: read at a block boundary."""
        if step % self.block_steps:
            return
        if self.sync is not None:
            self.sync()
        energy = self.read_energy_j() if self.read_energy_j is not None else math.nan
        self.marks.append((step, self.clock(), energy))

    def result(self, dry_run: bool, planned_saving: float | None = None) -> Comparison:
        """The comparison of the complete blocks read so far."""
        out = Comparison(self.block_steps, dry_run, planned_saving=planned_saving)
        for (s0, t0, e0), (s1, t1, e1) in zip(self.marks, self.marks[1:]):
            out.blocks.append([(s0 // self.block_steps) % 2, s1 - s0, t1 - t0, e1 - e0])
        if not out.blocks:
            return out
        b = np.array(out.blocks, dtype=float)
        per_t, per_e = b[:, 2] / b[:, 1], b[:, 3] / b[:, 1]
        d_t, d_e = [], []
        for i in np.flatnonzero(b[:, 0] == 0).tolist():
            ref = [j for j in (i - 1, i + 1) if 0 <= j < len(b) and b[j, 0] == 1]
            if not ref:
                continue
            d_t.append(per_t[i] / per_t[ref].mean() - 1.0)
            d_e.append(per_e[i] / per_e[ref].mean() - 1.0)
        out.pairs = len(d_t)
        if out.pairs >= 2:
            q = _t95(out.pairs - 1)
            for values, name in ((np.array(d_t), "time"), (np.array(d_e), "energy")):
                mean, half = float(values.mean()), q * float(values.std(ddof=1)) / math.sqrt(values.size)
                setattr(out, f"{name}_change", mean)
                setattr(out, f"{name}_ci", [mean - half, mean + half])
            spread = float(np.std(d_e, ddof=1))
            if dry_run and planned_saving and planned_saving > 0 and math.isfinite(spread) and spread > 0:
                pairs = max(2, math.ceil((1.96 * spread / planned_saving) ** 2))
                for _ in range(4):  # Student's t for that many pairs
                    pairs = max(2, math.ceil((_t95(pairs - 1) * spread / planned_saving) ** 2))
                out.steps_needed = 2 * pairs * self.block_steps
        if self.read_energy_j is None:
            out.notes.append("no energy counter: the energy change is not measured")
        short = float(np.median(b[:, 2]))
        if short < 10 * COUNTER_TICK_S:
            out.notes.append(
                f"blocks of {short:.2f} s: the energy counter's ~{COUNTER_TICK_S:g} s tick is "
                f"{100 * COUNTER_TICK_S / short:.0f} % of a block (use longer blocks)"
            )
        return out
