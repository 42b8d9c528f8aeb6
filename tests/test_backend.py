"""The one accounting: switching latency, splitting, in-flight requests, off-plan time."""

from __future__ import annotations

import numpy as np
import pytest

from rlclock.backends.base import GpuBackend
from rlclock.backends.switching import EngineState, SwitchEngine
from rlclock.dvfs.spec import get_spec
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
from rlclock.solve.evaluation import evaluate
from rlclock.workload.trace import Kernel, KernelTrace


class TableGpu(GpuBackend):
    """A backend over hand-written tables."""

    def __init__(self, t, e, latency_s, configs):
        spec = get_spec("h200-sxm")
        trace = KernelTrace("toy", [Kernel(name=f"k{i}", op=f"k{i}", category="gemm", phase="forward", flops=1.0,
                                           dram_read_bytes=1.0, dram_write_bytes=1.0) for i in range(len(t))])
        super().__init__(spec, trace, configs, latency_s)
        self._t, self._e = np.asarray(t, float), np.asarray(e, float)

    def _compute_tables(self):
        return self._t.copy(), self._e.copy()


CONFIGS = [AUTO, ClockConfig(1500, 3201)]


def _gpu(latency):
    # kernel durations at auto / at 1500 MHz; energies likewise
    t = [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]
    e = [[10.0, 6.0], [10.0, 6.0], [10.0, 6.0], [10.0, 6.0]]
    return TableGpu(t, e, latency, CONFIGS)


def test_zero_latency_is_a_table_lookup():
    gpu = _gpu(0.0)
    run = gpu.run_indices(np.array([1, 1, 0, 1]))
    assert run.time_s == 7.0 and run.energy_j == 28.0 and run.switches == 3 and run.off_plan_time_s == 0.0


def test_switch_lands_mid_kernel_and_splits_it():
    gpu = _gpu(0.5)
    run = gpu.run_indices(np.array([1, 1, 1, 1]))
    # kernel 0: 0.5 s at auto (half its work), the other half at 1500 MHz: 0.5 * 2.0 = 1.0 s
    assert run.kernel_time_s[0] == pytest.approx(1.5)
    assert run.kernel_energy_j[0] == pytest.approx(0.5 * 10 + 0.5 * 6)
    assert run.kernel_time_s[1:] == pytest.approx([2.0, 2.0, 2.0])
    assert run.off_plan_time_s == pytest.approx(0.5)
    assert run.switches == 1
    assert run.switch_land_s[0] == pytest.approx(0.5)


def test_requests_in_flight_are_not_issued_again():
    gpu = _gpu(2.5)
    run = gpu.run_indices(np.array([1, 0, 1, 1]))
    # switch to 1500 issued at t=0 lands at 2.5 s: kernels 0, 1 at auto (2 s), kernel 2 lands after 0.5 s
    assert run.switches == 1
    assert run.kernel_time_s[:2] == pytest.approx([1.0, 1.0])
    assert run.kernel_time_s[2] == pytest.approx(0.5 + 0.5 * 2.0)
    # kernel 1 asked for auto and got auto; kernel 0 and part of kernel 2 ran off-plan
    assert run.off_plan_time_s == pytest.approx(1.0 + 0.5)


def test_switch_landing_exactly_at_a_boundary():
    gpu = _gpu(1.0)
    run = gpu.run_indices(np.array([1, 1, 1, 1]))
    assert run.kernel_time_s == pytest.approx([1.0, 2.0, 2.0, 2.0])


def test_engine_batches_agree_with_single_runs():
    gpu = _gpu(0.7)
    t, e = gpu.tables
    rng = np.random.default_rng(0)
    reqs = rng.integers(0, 2, size=(5, 4))
    state = EngineState.start(5)
    total = np.zeros(5)
    for i in range(4):
        out = SwitchEngine.step(np.repeat(t[i : i + 1], 5, 0), np.repeat(e[i : i + 1], 5, 0), reqs[:, i], state, 0.7)
        total += out.time_s
    for j in range(5):
        assert total[j] == pytest.approx(gpu.run_indices(reqs[j]).time_s)


def test_evaluate_against_auto():
    gpu = _gpu(0.0)
    ev = evaluate(ClockSchedule.constant("1500@3201", 4), gpu)
    assert ev.slowdown == pytest.approx(1.0) and ev.saving == pytest.approx(0.4)


def test_schedule_length_and_configs_are_checked():
    from rlclock.errors import ScheduleError

    gpu = _gpu(0.0)
    with pytest.raises(ScheduleError, match="3 entries but the trace has 4"):
        gpu.run(ClockSchedule.constant("auto", 3))
    with pytest.raises(ScheduleError, match="does not offer"):
        gpu.run(ClockSchedule.constant("1200@3201", 4))


def test_schedule_json_roundtrip(tmp_path):
    s = ClockSchedule.from_configs(["auto", "1500@3201", "1500@3201", "auto@2201"], name="x")
    back = ClockSchedule.load(s.save(tmp_path / "s.json"))
    assert back.per_kernel == s.per_kernel and back.n_changes == 2
