"""Tick-aligned energy windows against the fake NVML (its counter steps every 0.1 s at a known power)."""

from __future__ import annotations

import time

import pytest

from rlclock.errors import MeasurementError
from rlclock.gpu import nvml
from rlclock.gpu.meter import EnergySampler, MeasureSettings, counter_period_s, cv, measure


class SleepRunner:
    """Fake GPU work: each launch 'runs' ``batch_s`` of wall time holding ``units`` kernel executions."""

    def __init__(self, batch_s: float, units: int) -> None:
        self.batch_s = batch_s
        self.units_per_launch = units
        self.launches = 0

    def launch(self) -> None:
        time.sleep(self.batch_s)
        self.launches += 1

    def mark(self) -> float:
        return time.perf_counter()

    def wait(self, mark: float) -> None:
        pass

    def elapsed_s(self, start: float, end: float) -> float:
        return end - start


def test_energy_per_unit_is_power_times_time(fake_nvml):
    fake_nvml.set_device(power_w=400.0)
    dev = nvml.NvmlDevice(0)
    runner = SleepRunner(0.002, units=4)
    settings = MeasureSettings(window_s=0.3, warmup_s=0.05, repeats=3)
    with EnergySampler(dev) as sampler:
        stats = measure(runner, sampler, settings)
    assert stats.windows == 3
    assert stats.window_s >= 0.3
    # host timing of the counter's steps jitters by a few ms on a loaded machine
    assert stats.power_w == pytest.approx(400.0, rel=0.06)
    assert stats.energy_j == pytest.approx(stats.power_w * stats.time_s, rel=0.02)  # medians of each
    assert 0.9 * 0.002 / 4 <= stats.time_s <= 3 * 0.002 / 4  # a sleep never undershoots; a loaded machine overshoots
    assert stats.busy_fraction == pytest.approx(1.0, rel=0.1)
    assert stats.time_cv < 0.2 and stats.energy_cv < 0.2
    assert stats.sm_clock_mhz == 1980 and stats.mem_clock_mhz == 3201
    assert stats.reasons == ("sw_power_cap",) and stats.reason_fractions == {"sw_power_cap": 1.0}
    assert stats.units >= 3 * 0.3 / 0.004 * 4


def test_counter_period_is_found(fake_nvml):
    period = counter_period_s(nvml.NvmlDevice(0), duration_s=0.45)
    assert period == pytest.approx(0.1, rel=0.05)


def test_a_counter_that_never_ticks_times_out(fake_nvml):
    fake_nvml.set_device(power_w=0.0)
    with EnergySampler(nvml.NvmlDevice(0)) as sampler, pytest.raises(MeasurementError, match="did not complete"):
        measure(SleepRunner(0.001, 1), sampler, MeasureSettings(window_s=0.1, warmup_s=0.0, repeats=1, timeout_s=0.4))


def test_invalid_settings():
    with pytest.raises(MeasurementError):
        MeasureSettings(window_s=0)
    assert cv([1.0]) == 0.0 and cv([1.0, 3.0]) == pytest.approx(0.5)
