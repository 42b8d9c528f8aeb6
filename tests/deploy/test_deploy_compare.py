"""Measured, where clocks may be set: blocks of planned and driver-default steps in turn, their energy (NVML) and
time compared with a confidence interval; in a dry run the same comparison is the noise floor. Against the fake NVML
with a simulated GPU behind it: a step draws less power and runs longer while the fake's SM clock is locked."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy.stats import t as student

from rlclock.deploy.api import clocked
from rlclock.deploy.compare import BlockComparison, Comparison
from rlclock.deploy.delivered import PlanningCosts
from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule

B = ClockConfig(1410, 3201)


def test_blocks_are_paired_with_the_driver_blocks_beside_them():
    marks = iter([(0.0, 0.0), (1.0, 10.0), (2.0, 20.0), (3.1, 29.0), (4.1, 39.0), (5.3, 47.0), (6.3, 57.0)])
    clock_energy = {"t": 0.0, "e": 0.0}

    def clock():
        return clock_energy["t"]

    def energy():
        return clock_energy["e"]

    cmp = BlockComparison(5, energy, clock=clock)
    for step in range(31):
        if step % 5 == 0:
            clock_energy["t"], clock_energy["e"] = next(marks)
        cmp.on_step(step)
    assert cmp.pattern(3) == [0] * 5 + [3] * 5
    got = cmp.result(dry_run=False)
    # blocks: auto 1 s 10 J (plan 1), plan 1.1 s 9 J, auto 1 s 10 J, plan 1.2 s 8 J, auto 1 s 10 J, plan 1st
    assert [b[0] for b in got.blocks] == [0, 1, 0, 1, 0, 1] and got.pairs == 3
    d_e = np.array([10 / 10 - 1, 9 / 10 - 1, 8 / 10 - 1])  # block 0 has one neighbour; the others two
    d_t = np.array([1.0 / 1.0 - 1, 1.1 / 1.0 - 1, 1.2 / 1.0 - 1])
    half = student.ppf(0.975, 2) * d_e.std(ddof=1) / math.sqrt(3)
    assert got.energy_change == pytest.approx(d_e.mean()) and got.energy_ci == pytest.approx(
        [d_e.mean() - half, d_e.mean() + half]
    )
    assert got.time_change == pytest.approx(d_t.mean())
    assert "measured over 3 pairs of 5-step blocks" in got.summary and got.steps_needed is None
    floor = cmp.result(dry_run=True, planned_saving=0.05)
    spread = d_e.std(ddof=1)
    pairs = floor.steps_needed // 10
    assert student.ppf(0.975, pairs - 1) * spread / 0.05 <= math.sqrt(pairs)  # enough pairs for the interval
    assert student.ppf(0.975, pairs - 2) * spread / 0.05 > math.sqrt(pairs - 1)  # and not one more than needed
    assert "noise floor" in floor.summary and f"about {floor.steps_needed} steps" in floor.summary


def test_too_few_blocks_and_bad_block_sizes_are_said():
    cmp = BlockComparison(2, None, clock=iter(np.arange(10.0)).__next__)
    for step in range(5):
        cmp.on_step(step)
    got = cmp.result(dry_run=False)
    assert got.pairs == 1 and "too few" in got.summary and any("energy" in n for n in got.notes)
    assert isinstance(Comparison(3, True).as_dict()["summary"], str)
    with pytest.raises(ValueError, match="at least one step"):
        BlockComparison(0)
    with pytest.raises(DeployError, match="learn"):
        clocked(
            ClockSchedule.constant(AUTO, 4),
            timeline=StepTimeline.from_durations([1e-3] * 4),
            learn=True,
            compare_blocks=5,
            checkpoint="gpt3xl-h200",
        )


class SimulatedGpu:
    """A GPU behind the fake NVML: a step runs ``step_s`` at ``power_w`` at the driver's clocks, and while the fake's
    SM clock is locked ``slower`` times longer at ``locked_power_w``; the energy counter integrates what it draws."""

    def __init__(self, read, write, step_s=0.02, power_w=500.0, locked_power_w=420.0, slower=1.05) -> None:
        self.read, self.write = read, write
        self.step_s, self.power_w, self.locked_power_w, self.slower = step_s, power_w, locked_power_w, slower

    def _draw(self, power_w: float) -> None:
        with self.write() as s:
            d = s["devices"][0]
            if d["power_w"] != power_w:  # keep the counter where it is: re-base it at the new power
                ticks = math.floor((time.time() - s["t0"]) / s["tick_s"])
                s["energy0_j"] += (d["power_w"] - power_w) * ticks * s["tick_s"]
                d["power_w"] = power_w

    def step(self) -> None:
        locked = self.read()["devices"][0]["locked_core"] is not None
        self._draw(self.locked_power_w if locked else self.power_w)
        time.sleep(self.step_s * (self.slower if locked else 1.0))


@pytest.mark.realtime
@pytest.mark.parametrize("control_clocks", [True, False])
def test_planned_blocks_measure_the_saving_on_a_simulated_gpu_and_a_dry_run_the_noise_floor(fake_gpu, control_clocks):
    import fake_pynvml

    with fake_pynvml.state() as s:
        s["tick_s"] = 0.002
    gpu = SimulatedGpu(fake_pynvml.read_state, fake_pynvml.state)
    n = 20
    timeline = StepTimeline.from_durations(np.full(n, 1e-3), period_s=0.02)
    schedule = ClockSchedule.constant(B, n, name="hold 1410")
    costs = PlanningCosts(
        np.column_stack([np.full(n, 1e-3), np.full(n, 1.05e-3)]),
        np.column_stack([np.full(n, 0.5), np.full(n, 0.441)]),
        (AUTO, B),
    )
    clk = clocked(
        schedule,
        timeline=timeline,
        control_clocks=control_clocks,
        compare_blocks=4,
        worker="thread",
        latency_s=0.001,
        verbose=False,
    )
    clk.costs = costs
    with clk:
        for _ in range(4 * 2 * 6 + 1):
            with clk.step():
                gpu.step()
    got = clk.report.compared
    assert got is not None and got.pairs >= 5 and got.dry_run == (not control_clocks)
    if control_clocks:  # 420 W for 21 ms against 500 W for 20 ms: -11.8 % energy, +5 % time
        assert got.energy_ci[0] < 420 * 1.05 / 500 - 1 < got.energy_ci[1] and got.energy_ci[1] < 0
        assert got.time_ci[1] > 0
        assert "against the driver's clocks" in got.summary
    else:  # nothing set: nothing differs but the noise; the planned 11.8 % would need a few steps to resolve
        # (a fake counter ticking on the wall clock adds a little skew of its own: far below the planned -11.8 %)
        assert got.energy_ci[0] < 0 < got.energy_ci[1] or abs(got.energy_change) < 0.04
        assert got.steps_needed is not None and got.steps_needed >= 16
        assert "noise floor" in got.summary
    assert "compared" in clk.report.as_dict() and clk.report.as_dict()["compared"]["summary"] == got.summary
