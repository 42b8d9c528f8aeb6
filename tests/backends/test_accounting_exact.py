"""Exact values of the accounting core: SwitchEngine, GpuBackend.run / run_indices, schedules and Evaluation.

All tables use halves, quarters and eighths so every expected number is exact in binary floating point.
The toy action set is ``AUTO`` (0), ``A = 1500@3201`` (1) and ``B = 1200@3201`` (2); every kernel takes
1 / 2 / 4 s and 8 / 4 / 2 J at them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest

from rlclock.backends.base import GpuBackend, RunResult
from rlclock.backends.switching import EngineState, SwitchEngine
from rlclock.dvfs.spec import get_spec
from rlclock.errors import ClockError, ScheduleError
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
from rlclock.solve.evaluation import Evaluation, evaluate
from rlclock.workload.trace import Kernel, KernelTrace

A = ClockConfig(1500, 3201)
B = ClockConfig(1200, 3201)
CONFIGS = (AUTO, A, B)
ROW_T = (1.0, 2.0, 4.0)
ROW_E = (8.0, 4.0, 2.0)
INF = float("inf")


class TableGpu(GpuBackend):
    """A backend over hand-written ``(n_kernels, n_configs)`` tables on the H200 spec."""

    def __init__(
        self,
        t: Sequence[Sequence[float]],
        e: Sequence[Sequence[float]],
        latency_s: float,
        configs: Sequence[ClockConfig],
    ) -> None:
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
        super().__init__(get_spec("h200-sxm"), trace, configs, latency_s)
        self._t, self._e = np.asarray(t, float), np.asarray(e, float)

    def _compute_tables(self) -> tuple[np.ndarray, np.ndarray]:
        return self._t.copy(), self._e.copy()


def toy_gpu(latency_s: float, n: int = 3) -> TableGpu:
    """``n`` identical kernels over :data:`CONFIGS` (1 / 2 / 4 s, 8 / 4 / 2 J)."""
    return TableGpu([ROW_T] * n, [ROW_E] * n, latency_s, CONFIGS)


def rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(n, 3)`` time and energy rows of one toy kernel for ``n`` runs of a batch."""
    return np.tile(ROW_T, (n, 1)), np.tile(ROW_E, (n, 1))


def run(gpu: GpuBackend, requested: Sequence[int], initial: int = 0) -> RunResult:
    return gpu.run_indices(np.array(requested), initial=initial)


def timeline(r: RunResult) -> dict[str, list[float] | list[int]]:
    """The per-kernel and per-switch arrays of a run, as lists (exact comparison, readable diffs)."""
    return {
        "kernel_time_s": r.kernel_time_s.tolist(),
        "kernel_energy_j": r.kernel_energy_j.tolist(),
        "start_s": r.start_s.tolist(),
        "config_index": r.config_index.tolist(),
        "requested_index": r.requested_index.tolist(),
        "switch_issue_s": r.switch_issue_s.tolist(),
        "switch_land_s": r.switch_land_s.tolist(),
        "switch_to": r.switch_to.tolist(),
    }


# -- SwitchEngine.step ---------------------------------------------------------------------------------


def test_step_split_kernel_off_plan_is_judged_against_the_kernels_own_request() -> None:
    """Guards off_cur (old-clock part, current != request) and off_new (new-clock part, pending != request)."""
    # three runs, each mid-switch AUTO -> A landing 0.25 s into the kernel; they request AUTO, A and B
    state = EngineState(np.zeros(3, np.int64), np.ones(3, np.int64), np.full(3, 0.25))
    t, e = rows(3)
    out = SwitchEngine.step(t, e, np.array([0, 1, 2]), state, 1.25)
    # frac = 0.25 / 1.0; time 0.25 + 0.75 * 2.0 = 1.75; energy 0.25 * 8 + 0.75 * 4 = 5.0
    assert out.time_s.tolist() == [1.75, 1.75, 1.75]
    assert out.energy_j.tolist() == [5.0, 5.0, 5.0]
    # request AUTO: 0 + 0.75 * 2.0 = 1.5; request A: 0.25 + 0; request B: 0.25 + 1.5 = 1.75
    assert out.off_plan_s.tolist() == [1.5, 0.25, 1.75]
    assert out.issued.tolist() == [False, False, False]
    assert out.started_at.tolist() == [0, 0, 0]
    assert out.landed_after_s.tolist() == [0.25, 0.25, 0.25]
    assert state.current.tolist() == [1, 1, 1]
    assert state.pending.tolist() == [-1, -1, -1]
    assert state.land_in_s.tolist() == [0.0, 0.0, 0.0]


def test_step_takes_each_runs_own_latency() -> None:
    """Guards the per-run broadcast of ``latency_s`` (an ``(N,)`` array) in issue, split and landing."""
    state = EngineState.start(4)
    t, e = rows(4)
    lat = np.array([0.0, 0.25, 1.0, 1.75])
    k0 = SwitchEngine.step(t, e, np.ones(4, np.int64), state, lat)
    # lat 0: lands at once, 2.0 s at A; 0.25: 0.25 + 0.75 * 2 = 1.75; 1.0: lands at the boundary; 1.75: in flight
    assert k0.time_s.tolist() == [2.0, 1.75, 1.0, 1.0]
    assert k0.energy_j.tolist() == [4.0, 0.25 * 8 + 0.75 * 4, 8.0, 8.0]
    assert k0.off_plan_s.tolist() == [0.0, 0.25, 1.0, 1.0]
    assert k0.issued.tolist() == [True, True, True, True]
    assert k0.started_at.tolist() == [1, 0, 0, 0]
    np.testing.assert_array_equal(k0.landed_after_s, [np.nan, 0.25, 1.0, np.nan])
    assert state.current.tolist() == [1, 1, 1, 0]
    assert state.pending.tolist() == [-1, -1, -1, 1]
    assert state.land_in_s.tolist() == [0.0, 0.0, 0.0, 0.75]  # 1.75 - 1.0
    k1 = SwitchEngine.step(t, e, np.ones(4, np.int64), state, lat)
    # run 3 lands 0.75 s in: 0.75 + 0.25 * 2.0 = 1.25 s, 0.75 * 8 + 0.25 * 4 = 7 J, 0.75 s off-plan
    assert k1.time_s.tolist() == [2.0, 2.0, 2.0, 1.25]
    assert k1.energy_j.tolist() == [4.0, 4.0, 4.0, 7.0]
    assert k1.off_plan_s.tolist() == [0.0, 0.0, 0.0, 0.75]
    assert k1.issued.tolist() == [False, False, False, False]
    np.testing.assert_array_equal(k1.landed_after_s, [np.nan, np.nan, np.nan, 0.75])
    assert state.current.tolist() == [1, 1, 1, 1]


def test_engine_state_start_broadcasts_the_initial_configuration() -> None:
    """Guards EngineState.start: per-run or scalar initial, nothing in flight."""
    s = EngineState.start(3, np.array([0, 2, 1]))
    assert s.current.tolist() == [0, 2, 1]
    assert s.pending.tolist() == [-1, -1, -1]
    assert s.land_in_s.tolist() == [0.0, 0.0, 0.0]
    assert EngineState.start(2, 1).current.tolist() == [1, 1]


def test_engine_state_reset_touches_only_the_masked_runs() -> None:
    """Guards EngineState.reset: masked runs get ``initial`` and nothing in flight; the others are untouched."""
    s = EngineState(np.array([1, 1, 1, 0]), np.array([-1, 2, -1, 1]), np.array([0.0, 0.5, 0.0, 0.75]))
    s.reset(np.array([False, True, True, False]), initial=2)
    assert s.current.tolist() == [1, 2, 2, 0]
    assert s.pending.tolist() == [-1, -1, -1, 1]
    assert s.land_in_s.tolist() == [0.0, 0.0, 0.0, 0.75]
    s.reset(np.array([False, False, False, True]))
    assert s.current.tolist() == [1, 2, 2, 0]
    assert s.pending.tolist() == [-1, -1, -1, -1]
    assert s.land_in_s.tolist() == [0.0, 0.0, 0.0, 0.0]


# -- GpuBackend.run_indices / run ----------------------------------------------------------------------


def test_run_off_plan_when_a_switch_lands_in_a_kernel_requesting_a_third_config() -> None:
    """Guards off_new through run_indices: the part after the landing is off-plan when the kernel wants B."""
    r = run(toy_gpu(1.25), [1, 2, 2])
    # k0 at 0.0: AUTO -> A issued, 1.0 s at AUTO (off 1.0), 0.25 s left
    # k1 at 1.0: B dropped (in flight); lands 0.25 in: 0.25 + 0.75 * 2 = 1.75 s, off 0.25 + 0.75 * 2 = 1.75
    # k2 at 2.75: A -> B issued, lands 1.25 in (frac 5/8): 1.25 + 0.375 * 4 = 2.75 s, off 1.25
    assert r.off_plan_time_s == 1.0 + 1.75 + 1.25
    assert r.switches == 2
    assert r.time_s == 1.0 + 1.75 + 2.75
    assert r.energy_j == 8.0 + (0.25 * 8 + 0.75 * 4) + (0.625 * 4 + 0.375 * 2)
    assert timeline(r) == {
        "kernel_time_s": [1.0, 1.75, 2.75],
        "kernel_energy_j": [8.0, 5.0, 3.25],
        "start_s": [0.0, 1.0, 2.75],
        "config_index": [0, 0, 1],
        "requested_index": [1, 2, 2],
        "switch_issue_s": [0.0, 2.75],
        "switch_land_s": [1.25, 4.0],
        "switch_to": [1, 2],
    }


def test_run_off_plan_when_a_switch_lands_in_a_kernel_requesting_the_old_config() -> None:
    """Guards off_new with off_cur = 0: a kernel asking for the clocks in effect is off-plan only after landing."""
    r = run(toy_gpu(1.25), [1, 0, 0])
    # k0: off 1.0; k1 (wants AUTO, is at AUTO): lands 0.25 in, 0.75 * 2.0 = 1.5 s at A off-plan
    # k2 at 2.75: A -> AUTO issued, lands 1.25 in (frac 5/8): 1.25 + 0.375 * 1.0 = 1.625 s, off 1.25
    assert r.off_plan_time_s == 1.0 + 1.5 + 1.25
    assert r.kernel_time_s.tolist() == [1.0, 1.75, 1.625]
    assert r.kernel_energy_j.tolist() == [8.0, 5.0, 0.625 * 4 + 0.375 * 8]
    assert r.switches == 2
    assert r.switch_to.tolist() == [1, 0]
    assert r.switch_issue_s.tolist() == [0.0, 2.75]
    assert r.switch_land_s.tolist() == [1.25, 4.0]


def test_switch_landing_at_a_boundary_lets_the_next_kernel_issue() -> None:
    """Guards ``remaining <= 0.0``: a switch landing exactly at a kernel's end is done before the next request."""
    r = run(toy_gpu(1.0), [2, 1, 1])
    # k0: AUTO -> B issued at 0, lands at 1.0 = the end of k0 (1.0 s at AUTO, off 1.0)
    # k1 at 1.0: B -> A issued at once, lands 1.0 into a 4 s kernel (frac 1/4): 1.0 + 0.75 * 2 = 2.5 s, off 1.0
    # k2 at 3.5: at A as requested. With "< 0.0" the k1 request would be dropped: off 1 + 4 + 1, issue at 5.0
    assert r.switches == 2
    assert r.off_plan_time_s == 2.0
    assert r.time_s == 1.0 + 2.5 + 2.0
    assert r.energy_j == 8.0 + (0.25 * 2 + 0.75 * 4) + 4.0
    assert timeline(r) == {
        "kernel_time_s": [1.0, 2.5, 2.0],
        "kernel_energy_j": [8.0, 3.5, 4.0],
        "start_s": [0.0, 1.0, 3.5],
        "config_index": [0, 2, 1],
        "requested_index": [2, 1, 1],
        "switch_issue_s": [0.0, 1.0],
        "switch_land_s": [1.0, 2.0],
        "switch_to": [2, 1],
    }


def test_zero_latency_timeline() -> None:
    """Guards run_indices' latency-0 path: table lookup, switches at request changes, land = issue = start."""
    r = run(toy_gpu(0.0, 4), [1, 1, 0, 2])
    assert (r.time_s, r.energy_j, r.switches, r.off_plan_time_s) == (9.0, 18.0, 3, 0.0)
    assert timeline(r) == {
        "kernel_time_s": [2.0, 2.0, 1.0, 4.0],
        "kernel_energy_j": [4.0, 4.0, 8.0, 2.0],
        "start_s": [0.0, 2.0, 4.0, 5.0],
        "config_index": [1, 1, 0, 2],
        "requested_index": [1, 1, 0, 2],
        "switch_issue_s": [0.0, 4.0, 5.0],
        "switch_land_s": [0.0, 4.0, 5.0],
        "switch_to": [1, 0, 2],
    }
    assert r.configs == CONFIGS
    assert r.mean_power_w == 2.0


def test_latency_timeline_with_a_switch_still_in_flight_at_the_end() -> None:
    """Guards the engine path's timeline arrays, incl. ``switch_land_s = inf`` for a switch the step outlives."""
    r = run(toy_gpu(1.75, 4), [1, 1, 0, 1])
    # k0 at 0: AUTO -> A issued, 1.0 s at AUTO (off 1.0), 0.75 left
    # k1 at 1.0: lands 0.75 in: 0.75 + 0.25 * 2 = 1.25 s, 0.75 * 8 + 0.25 * 4 = 7 J, off 0.75
    # k2 at 2.25: A -> AUTO issued, lands 1.75 into 2.0 s (frac 7/8): 1.75 + 0.125 * 1 = 1.875 s, 3.5 + 1 = 4.5 J,
    #   off 1.75, landing at 4.0
    # k3 at 4.125: AUTO -> A issued; 1.0 s at AUTO (off 1.0); the step ends 0.75 s before it lands
    assert (r.time_s, r.energy_j, r.switches, r.off_plan_time_s) == (5.125, 27.5, 3, 4.5)
    assert timeline(r) == {
        "kernel_time_s": [1.0, 1.25, 1.875, 1.0],
        "kernel_energy_j": [8.0, 7.0, 4.5, 8.0],
        "start_s": [0.0, 1.0, 2.25, 4.125],
        "config_index": [0, 0, 1, 0],
        "requested_index": [1, 1, 0, 1],
        "switch_issue_s": [0.0, 2.25, 4.125],
        "switch_land_s": [1.75, 4.0, INF],
        "switch_to": [1, 0, 1],
    }


def test_run_from_a_locked_initial_config_without_latency() -> None:
    """Guards ``initial`` in the latency-0 path: no switch for kernels already at the initial clocks."""
    gpu = toy_gpu(0.0, 4)
    sched = ClockSchedule([A, AUTO, B], [0, 0, 1, 2])  # backend indices [1, 1, 0, 2]
    r = gpu.run(sched, initial=A)
    assert (r.time_s, r.energy_j, r.switches, r.off_plan_time_s) == (9.0, 18.0, 2, 0.0)
    assert r.switch_issue_s.tolist() == [4.0, 5.0]
    assert r.switch_land_s.tolist() == [4.0, 5.0]
    assert r.switch_to.tolist() == [0, 2]
    assert r.config_index.tolist() == [1, 1, 0, 2]
    assert r.requested_index.tolist() == [1, 1, 0, 2]
    assert gpu.run(sched).switches == 3  # from AUTO the first kernel switches too


def test_run_from_a_locked_initial_config_with_latency() -> None:
    """Guards ``initial`` in the engine path: the run starts at A, nothing in flight."""
    gpu = toy_gpu(1.75, 4)
    r = gpu.run(ClockSchedule([AUTO, A], [1, 0, 0, 0]), initial=A)
    # k0: at A as requested, 2.0 s, 4 J; k1 at 2.0: A -> AUTO issued, lands 1.75 into 2.0 s (frac 7/8):
    #   1.75 + 0.125 * 1 = 1.875 s, 3.5 + 1 = 4.5 J, off 1.75; k2, k3 at AUTO: 1 s, 8 J each
    assert (r.time_s, r.energy_j, r.switches, r.off_plan_time_s) == (5.875, 24.5, 1, 1.75)
    assert timeline(r) == {
        "kernel_time_s": [2.0, 1.875, 1.0, 1.0],
        "kernel_energy_j": [4.0, 4.5, 8.0, 8.0],
        "start_s": [0.0, 2.0, 3.875, 4.875],
        "config_index": [1, 1, 0, 0],
        "requested_index": [1, 0, 0, 0],
        "switch_issue_s": [2.0],
        "switch_land_s": [3.75],
        "switch_to": [0],
    }


def test_auto_run_is_the_all_auto_schedule() -> None:
    """Guards GpuBackend.auto_run: every kernel at index 0 from AUTO, no switches."""
    a = toy_gpu(1.75, 4).auto_run()
    assert (a.time_s, a.energy_j, a.switches, a.off_plan_time_s) == (4.0, 32.0, 0, 0.0)
    assert a.switch_issue_s.tolist() == []
    assert a.config_index.tolist() == [0, 0, 0, 0]


# -- Evaluation ------------------------------------------------------------------------------------------


def test_evaluate_carries_the_runs_switches_and_off_plan_time() -> None:
    """Guards evaluate(): the schedule's run and the auto run side by side, and every derived number."""
    ev = evaluate(ClockSchedule([AUTO, A], [1, 1, 0, 1], name="plan"), toy_gpu(1.75, 4))
    # the run of test_latency_timeline_with_a_switch_still_in_flight_at_the_end; auto: 4 s, 32 J
    assert (ev.name, ev.time_s, ev.energy_j, ev.auto_time_s, ev.auto_energy_j) == ("plan", 5.125, 27.5, 4.0, 32.0)
    assert (ev.switches, ev.off_plan_time_s) == (3, 4.5)
    assert ev.run.switch_land_s.tolist() == [1.75, 4.0, INF]
    assert ev.slowdown == 5.125 / 4.0 - 1.0 == 0.28125
    assert ev.saving == 1.0 - 27.5 / 32.0 == 0.140625
    assert ev.edp_change == (5.125 * 27.5) / (4.0 * 32.0) - 1.0 == 0.10107421875
    assert ev.row() == {
        "name": "plan",
        "time_s": 5.125,
        "energy_j": 27.5,
        "time_pct": 28.125,
        "energy_pct": -14.0625,
        "switches": 3,
        "off_plan_time_s": 4.5,
    }


def test_evaluation_ratios() -> None:
    """Guards slowdown, saving and edp_change: each a ratio against auto minus one (saving: one minus)."""
    r = toy_gpu(0.0, 4).auto_run()
    ev = Evaluation(
        "e", time_s=3.0, energy_j=6.0, auto_time_s=2.0, auto_energy_j=8.0, switches=5, off_plan_time_s=0.5, run=r
    )
    assert ev.slowdown == 0.5  # 3 / 2 - 1
    assert ev.saving == 0.25  # 1 - 6 / 8
    assert ev.edp_change == 0.125  # 18 / 16 - 1
    assert ev.row() == {
        "name": "e",
        "time_s": 3.0,
        "energy_j": 6.0,
        "time_pct": 50.0,
        "energy_pct": -25.0,
        "switches": 5,
        "off_plan_time_s": 0.5,
    }


def test_energy_pct_is_minus_the_saving() -> None:
    """Guards the sign of row()["energy_pct"]: less energy is negative, more energy is positive."""
    ev = evaluate(ClockSchedule.constant(B, 4), toy_gpu(0.0, 4))
    # B: 16 s, 8 J against 4 s, 32 J; t * e is 128 at both, so the EDP is unchanged
    assert (ev.slowdown, ev.saving, ev.edp_change, ev.switches) == (3.0, 0.75, 0.0, 1)
    assert ev.row()["energy_pct"] == -75.0
    assert ev.row()["time_pct"] == 300.0
    more = dataclasses.replace(ev, energy_j=40.0)
    assert more.saving == -0.25
    assert more.row()["energy_pct"] == 25.0


# -- ClockConfig ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, core, mem",
    [
        ("1500@3201", 1500, 3201),
        (" auto @ 3201 ", None, 3201),
        ("1500@auto", 1500, None),
        ("1500", 1500, None),
        ("auto", None, None),
        ("auto@auto", None, None),
    ],
)
def test_clock_config_parse(text: str, core: int | None, mem: int | None) -> None:
    """Guards the text form's grammar: ``core[@mem]``, ``auto`` for a free domain, memory auto if omitted."""
    assert ClockConfig.parse(text) == ClockConfig(core, mem)


@pytest.mark.parametrize(
    "config, text",
    [
        (AUTO, "auto"),
        (A, "1500@3201"),
        (ClockConfig(None, 3201), "auto@3201"),
        (ClockConfig(1500, None), "1500@auto"),
    ],
)
def test_clock_config_str_round_trips(config: ClockConfig, text: str) -> None:
    """Guards __str__ (``auto`` alone when both are free) and that parse reads it back."""
    assert str(config) == text
    assert ClockConfig.parse(text) == config


@pytest.mark.parametrize("text", ["", "fast", "1500@", "@3201", "1500@3201@1", "-5", "AUTO", "1500.5"])
def test_clock_config_parse_rejects(text: str) -> None:
    with pytest.raises(ClockError, match="not understood"):
        ClockConfig.parse(text)


def test_clock_config_parse_passes_a_config_through() -> None:
    assert ClockConfig.parse(A) is A
    assert AUTO.is_auto
    assert not ClockConfig(None, 3201).is_auto
    assert not ClockConfig(1500, None).is_auto


# -- ClockSchedule -------------------------------------------------------------------------------------------


def test_constant_schedule() -> None:
    s = ClockSchedule.constant("1500@3201", 3)
    assert (s.configs, s.index.tolist(), s.name, s.n_changes) == ((A,), [0, 0, 0], "1500@3201", 0)
    assert ClockSchedule.constant(A, 2, name="x").name == "x"


def test_from_configs_orders_distinct_configs_by_memory_then_core() -> None:
    """Guards from_configs' sort key ``(mem or 0, core or 0)`` and the index it builds."""
    low = ClockConfig(None, 2201)
    s = ClockSchedule.from_configs(["auto@2201", "1500@3201", "auto", "1200@3201", "1500@3201"], name="f")
    assert s.configs == (AUTO, low, B, A)
    assert s.index.tolist() == [1, 3, 0, 2, 3]
    assert s.per_kernel == [low, A, AUTO, B, A]
    assert s[1] == A
    assert len(s) == 5
    assert s.n_changes == 4
    assert s.name == "f"


def test_n_changes_counts_request_changes_between_neighbours() -> None:
    assert ClockSchedule([AUTO, A], [0, 0, 1, 1, 0, 1]).n_changes == 3
    assert ClockSchedule([AUTO, A], [1]).n_changes == 0


def test_to_dict_run_length_encodes() -> None:
    s = ClockSchedule([AUTO, A], [1, 1, 0, 0, 0, 1], name="x")
    assert s.to_dict() == {
        "format": "rlclock.schedule",
        "version": 1,
        "name": "x",
        "configs": ["auto", "1500@3201"],
        "runs": [[1, 2], [0, 3], [1, 1]],
    }


def test_from_dict_round_trips_and_defaults_the_name() -> None:
    s = ClockSchedule([B, AUTO, A], [2, 0, 0, 1], name="r")
    back = ClockSchedule.from_dict(s.to_dict())
    assert (back.configs, back.index.tolist(), back.name) == ((B, AUTO, A), [2, 0, 0, 1], "r")
    bare = ClockSchedule.from_dict({"format": "rlclock.schedule", "configs": ["auto"], "runs": [[0, 2]]})
    assert (bare.name, bare.index.tolist()) == ("schedule", [0, 0])


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"format": "other", "configs": ["auto"], "runs": [[0, 1]]}, "not an rlclock schedule"),
        ([1, 2], "not an rlclock schedule"),
        ({"format": "rlclock.schedule", "configs": ["auto"]}, "malformed"),
        ({"format": "rlclock.schedule", "configs": ["auto"], "runs": [[0]]}, "malformed"),
        ({"format": "rlclock.schedule", "configs": ["auto"], "runs": [[0, "x"]]}, "malformed"),
        ({"format": "rlclock.schedule", "configs": ["auto"], "runs": [[1, 1]]}, "refers to configuration 1"),
    ],
)
def test_from_dict_rejects(data: object, needle: str) -> None:
    with pytest.raises(ScheduleError, match=needle):
        ClockSchedule.from_dict(data)


def test_reindexed_maps_into_another_configuration_list() -> None:
    """Guards reindexed: positions in the target list, unused configurations need not be there."""
    assert ClockSchedule([A, AUTO], [0, 1, 0]).reindexed([AUTO, B, A]).tolist() == [2, 0, 2]
    assert ClockSchedule([A, B], [0, 0]).reindexed([AUTO, A]).tolist() == [1, 1]


def test_reindexed_rejects_a_used_configuration_the_target_lacks() -> None:
    with pytest.raises(ScheduleError, match=r"uses configuration\(s\) \['1200@3201'\] that the backend does not"):
        ClockSchedule([A, B], [0, 1], name="s").reindexed([AUTO, A])


def test_check_length() -> None:
    s = ClockSchedule([AUTO], [0, 0, 0], name="s")
    s.check_length(3)
    with pytest.raises(ScheduleError, match="schedule 's' has 3 entries but the trace has 4 kernels"):
        s.check_length(4)


@pytest.mark.parametrize(
    "configs, index, needle",
    [
        ([], [0], "at least one clock configuration"),
        ([AUTO], [], "one configuration index per kernel"),
        ([AUTO], [[0]], "one configuration index per kernel"),
        ([AUTO, A], [0, 2], "refers to configuration 2 but has only 2"),
    ],
)
def test_schedule_rejects_bad_indices(configs: list[ClockConfig], index: list, needle: str) -> None:
    with pytest.raises(ScheduleError, match=needle):
        ClockSchedule(configs, index)


def test_run_indices_refuses_indices_outside_the_configuration_set():
    """An index outside 0..C-1 (or a bad initial one) is one clear error on both latency paths, not a wrapped
    lookup or an IndexError."""
    for latency in (0.0, 0.5):
        gpu = TableGpu([[1.0, 2.0]] * 3, [[1.0, 1.0]] * 3, latency, [AUTO, ClockConfig(1500, 3201)])
        for bad in ([-1, -1, -1], [0, 7, 0], [0, 2, 0]):
            with pytest.raises(ScheduleError, match=r"must lie in 0\.\.1"):
                gpu.run_indices(np.array(bad))
        for initial in (7, 2, -1):
            with pytest.raises(ScheduleError, match=rf"initial {initial}"):
                gpu.run_indices(np.zeros(3, dtype=np.int64), initial=initial)


def test_a_schedule_names_the_bad_index_it_refers_to():
    with pytest.raises(ScheduleError, match="refers to configuration -1 but has only 2"):
        ClockSchedule([AUTO, ClockConfig(1500, 3201)], [-1, 1])


@pytest.mark.parametrize(
    "data, needle",
    [
        ({"format": "rlclock.schedule", "configs": "12", "runs": [[0, 1]]}, "must be lists"),
        ({"format": "rlclock.schedule", "configs": ["auto"], "runs": [[0, -5]]}, "whole number >= 1"),
        ({"format": "rlclock.schedule", "configs": ["auto"], "runs": [[0, 2], [0, 0]]}, "whole number >= 1"),
        ({"format": "rlclock.schedule", "configs": ["auto"], "runs": [[0, 1.5]]}, "whole number >= 1"),
        ({"format": "rlclock.schedule", "configs": ["fast"], "runs": [[0, 1]]}, "not understood"),
    ],
)
def test_malformed_schedule_files_are_schedule_errors(data, needle):
    with pytest.raises(ScheduleError, match=needle):
        ClockSchedule.from_dict(data)


def test_from_configs_orders_auto_before_a_locked_clock_of_the_same_value():
    """Ties of the sort key (auto reads as 0 MHz) are broken auto first, in both domains."""
    s = ClockSchedule.from_configs([ClockConfig(0, 3201), ClockConfig(None, 3201)])
    assert s.configs == (ClockConfig(None, 3201), ClockConfig(0, 3201))
    s = ClockSchedule.from_configs([ClockConfig(1500, 0), ClockConfig(1500, None)])
    assert s.configs == (ClockConfig(1500, None), ClockConfig(1500, 0))
