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
        trace = KernelTrace(
            "toy",
            [
                Kernel(
                    name=f"k{i}",
                    op=f"k{i}",
                    category="gemm",
                    phase="forward",
                    flops=1.0,
                    dram_read_bytes=1.0,
                    dram_write_bytes=1.0,
                )
                for i in range(len(t))
            ],
        )
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


def test_a_schedule_names_a_power_limit_and_keeps_it_through_json(tmp_path):
    from rlclock.errors import ScheduleError

    s = ClockSchedule.constant("auto", 3, power_limit_w=650)
    assert s.power_limit_w == 650.0 and "power limit 650 W" in repr(s)
    back = ClockSchedule.load(s.save(tmp_path / "s.json"))
    assert back.power_limit_w == 650.0 and back.per_kernel == s.per_kernel
    assert "power_limit_w" not in ClockSchedule.constant("auto", 3).to_dict()  # none named: the file as before
    for bad in (0, -5.0, float("nan"), float("inf"), True, "650"):
        with pytest.raises(ScheduleError, match=r"power limit .* must be a number of watts above 0"):
            ClockSchedule.constant("auto", 3, power_limit_w=bad)
    with pytest.raises(ScheduleError, match="must be a number of watts"):
        ClockSchedule.from_dict({**s.to_dict(), "power_limit_w": "lots"})


def test_a_schedule_under_another_power_limit_runs_on_that_limit():
    """The one accounting under a schedule's power limit is the backend at that limit, its per-kernel indices
    still into this backend's configurations; the GPU's own limit (or none) runs as before; a backend that
    cannot change its limit says so in one line."""
    from rlclock.backends.simulated import SimulatedGpu
    from rlclock.config import load_env_spec
    from rlclock.errors import ScheduleError

    backend = load_env_spec("gpt3xl-h200").build_backend()
    assert isinstance(backend, SimulatedGpu)
    n = backend.n_kernels
    locked = backend.configs[3]
    per_kernel = [AUTO if i % 7 else locked for i in range(n)]
    plain = ClockSchedule.from_configs(per_kernel)
    capped = ClockSchedule(plain.configs, plain.index, power_limit_w=600.0)
    got = backend.run(capped)
    ref = backend.at_power_limit(600.0).run(plain)
    assert got.time_s == ref.time_s and got.energy_j == ref.energy_j and got.switches == ref.switches
    assert got.configs == backend.configs
    np.testing.assert_array_equal(got.requested_index, backend.schedule_indices(plain))
    assert {backend.configs[i] for i in got.config_index} <= {AUTO, locked}
    np.testing.assert_array_equal([backend.configs[i] for i in got.switch_to], [ref.configs[i] for i in ref.switch_to])
    assert got.time_s > backend.run(plain).time_s  # a lower limit slows the capped kernels
    own = ClockSchedule(plain.configs, plain.index, power_limit_w=backend.power_limit_w)
    assert backend.run(own).energy_j == backend.run(plain).energy_j
    table = _gpu(0.001)
    with pytest.raises(ScheduleError, match="cannot run under another power limit"):
        table.run(ClockSchedule.constant("auto", 4, power_limit_w=500.0))


def test_a_run_without_a_switch_takes_no_switching_path():
    """A schedule that never leaves the clocks in effect runs as a table lookup, exactly as the switching path
    would account it."""
    gpu = _gpu(0.005)
    for cfg, initial in ((AUTO, AUTO), ("1500@3201", ClockConfig(1500, 3201))):
        run = gpu.run(ClockSchedule.constant(cfg, 4), initial=initial)
        assert run.switches == 0 and run.off_plan_time_s == 0.0 and run.switch_land_s.size == 0
        assert run.time_s == (4.0 if cfg == AUTO else 8.0)
    switched = gpu.run(ClockSchedule.constant("1500@3201", 4))  # from auto: one switch, in flight for 5 ms
    assert switched.switches == 1 and switched.off_plan_time_s > 0
