"""NvmlGpu with a stand-in measurer: each (kernel, clock) measured once, cached, observe mode enforced."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlclock  # noqa: F401  (registers the envs)
from rlclock.backends.nvml_gpu import NvmlGpu
from rlclock.config import load_env_spec
from rlclock.dvfs.spec import get_spec
from rlclock.errors import ClockControlDisabledError, GpuUnavailableError
from rlclock.gpu.clocks import ClockControl
from rlclock.gpu.measure import measure_trace, require_clock_control
from rlclock.gpu.table import MeasurementRow
from rlclock.schedule import AUTO, ClockConfig
from rlclock.workload.transformer import TransformerConfig, transformer_step

LOW = ClockConfig(1410, 3201)


class CountingMeasurer:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def __call__(self, index: int, config: ClockConfig) -> MeasurementRow:
        self.calls.append((index, str(config)))
        t = 1e-4 * (1 + index) * (1.2 if config == LOW else 1.0)
        return MeasurementRow(
            kernel=index,
            op=f"op{index}",
            name="k",
            config=str(config),
            time_s=t,
            energy_j=500.0 * t,
            power_w=500.0,
            sm_clock_mhz=1400.0,
            mem_clock_mhz=3201.0,
        )


@pytest.fixture
def two_layer_trace():
    return transformer_step(TransformerConfig(hidden=64, heads=4, seq=16, batch=2, layers=2, head=False))


def test_each_distinct_kernel_and_clock_is_measured_once(two_layer_trace, tmp_path):
    spec = get_spec("h200-sxm")
    m = CountingMeasurer()
    cache = tmp_path / "cache.json"
    gpu = NvmlGpu(spec, two_layer_trace, [AUTO, LOW], 0.0, measurer=m, cache_path=cache)
    assert not gpu.deterministic
    t, e = gpu.tables
    first, _ = two_layer_trace.unique_index
    assert len(m.calls) == len(set(m.calls)) == 2 * len(first) < 2 * len(two_layer_trace)
    assert t.shape == (len(two_layer_trace), 2) and np.allclose(e, 500.0 * t)
    assert np.allclose(t[:, 1], 1.2 * t[:, 0])
    assert gpu.measure(len(two_layer_trace) - 1, "auto") is not None and len(m.calls) == 2 * len(first)
    # a second backend on the same cache measures nothing
    m2 = CountingMeasurer()
    gpu2 = NvmlGpu(spec, two_layer_trace, [AUTO, LOW], 0.0, measurer=m2, cache_path=cache)
    assert np.array_equal(gpu2.tables[0], t) and m2.calls == []


def test_measure_trace_skips_what_the_table_has(two_layer_trace):
    m = CountingMeasurer()
    saved = []
    table = measure_trace(m, two_layer_trace, [AUTO], indices=[0, 1], save=lambda t: saved.append(len(t)))
    assert m.calls == [(0, "auto"), (1, "auto")] and saved == [1, 2]
    measure_trace(m, two_layer_trace, [AUTO, LOW], indices=[0, 1], table=table)
    assert m.calls[2:] == [(0, "1410@3201"), (1, "1410@3201")]


def test_clocks_other_than_auto_need_clock_control(fake_nvml):
    require_clock_control(None, AUTO)
    with pytest.raises(ClockControlDisabledError, match=r"clock control is off \(dry run\)"):
        require_clock_control(None, LOW)
    with ClockControl(0) as dry, pytest.raises(ClockControlDisabledError):
        require_clock_control(dry, LOW)
    with ClockControl(0, control_clocks=True, watchdog=False, handle_signals=False) as live:
        require_clock_control(live, LOW)


def test_the_live_env_is_registered_nondeterministic_and_fails_cleanly_without_a_gpu(monkeypatch):
    from rlclock.gpu import nvml

    monkeypatch.setenv(nvml.MODULE_ENV, "no_such_nvml_bindings")
    nvml.use_module(None)
    try:
        assert gym.spec("rlclock/KernelClockNvml-v0").nondeterministic
        spec = load_env_spec("gpt3xl-h200-nvml")
        assert spec.backend.kind == "nvml" and spec.configs() == (AUTO,)
        assert len(spec.build_trace()) == 33
        with pytest.raises(GpuUnavailableError):
            spec.build_backend()
        with pytest.raises(GpuUnavailableError):
            gym.make("rlclock/KernelClockNvml-v0")
    finally:
        nvml.use_module(None)
