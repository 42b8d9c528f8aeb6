"""Exact values that kill the mutants of the accounting core and the switching rule (``benchmarks/mutation.py``).

Each test pins one rule that the tests of ``tests/backends/test_accounting_exact.py`` left open: a mutant of it survived
them. The toy backend is the one of that module (``AUTO`` / ``A`` / ``B`` at 1 / 2 / 4 s and 8 / 4 / 2 J); values
are halves and quarters, exact in binary floating point, except where a test is about rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlclock.backends.switching import EngineState, SwitchEngine, landing_table
from rlclock.errors import ScheduleError
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
from rlclock.solve.evaluation import optimum_for
from tests.backends.test_accounting_exact import CONFIGS, ROW_E, ROW_T, TableGpu, rows, toy_gpu

# -- GpuBackend: construction, tables, description ----------------------------------------------------------


def test_a_table_backend_is_deterministic() -> None:
    """Pins ``GpuBackend.deterministic``: a backend over fixed tables is registered deterministic."""
    assert toy_gpu(0.0).deterministic is True


@pytest.mark.parametrize("latency_s", [-0.25, float("inf"), float("nan")])
def test_latency_must_be_finite_and_not_negative(latency_s: float) -> None:
    """Pins ``not isfinite(latency) or latency < 0``: either failure alone rejects the backend."""
    with pytest.raises(ScheduleError, match="switching latency must be a finite number >= 0 s"):
        toy_gpu(latency_s)


def test_tables_of_the_wrong_width_are_rejected() -> None:
    """Pins the shape check ``t.shape != (n, C) or e.shape != t.shape``: a wrong time table is enough, even when
    the energy table has the same wrong shape."""
    gpu = TableGpu([[1.0, 2.0]] * 2, [[8.0, 4.0]] * 2, 0.0, CONFIGS)
    with pytest.raises(RuntimeError, match=r"backend produced tables of shape \(2, 2\)/\(2, 2\)"):
        _ = gpu.tables
    gpu = TableGpu([ROW_T] * 2, [[8.0, 4.0]] * 2, 0.0, CONFIGS)
    with pytest.raises(RuntimeError, match=r"backend produced tables of shape \(2, 3\)/\(2, 2\)"):
        _ = gpu.tables


@pytest.mark.parametrize(
    "t, e",
    [
        ([[1.0, 0.0, 4.0]], [ROW_E]),  # a zero time
        ([[1.0, -2.0, 4.0]], [ROW_E]),
        ([[1.0, float("inf"), 4.0]], [ROW_E]),
        ([ROW_T], [[8.0, float("nan"), 2.0]]),
        ([ROW_T], [[8.0, -0.5, 2.0]]),
    ],
)
def test_tables_need_positive_finite_times_and_finite_non_negative_energies(
    t: list[list[float]], e: list[list[float]]
) -> None:
    """Pins ``isfinite(t) and t > 0 and isfinite(e) and e >= 0``, each condition on its own."""
    with pytest.raises(ScheduleError, match="non-finite or non-positive kernel times, or non-finite or negative"):
        _ = TableGpu(t, e, 0.0, CONFIGS).tables


def test_zero_energies_are_accepted_and_tables_are_read_only() -> None:
    """Pins ``e >= 0`` (a kernel may cost 0 J) and that :attr:`GpuBackend.tables` hands out read-only arrays."""
    t, e = TableGpu([ROW_T], [[8.0, 0.0, 2.0]], 0.0, CONFIGS).tables
    assert e.tolist() == [[8.0, 0.0, 2.0]]
    assert (t.flags.writeable, e.flags.writeable) == (False, False)


def test_describe() -> None:
    """Pins :meth:`GpuBackend.describe`: backend, GPU, trace, configurations and latency in milliseconds."""
    assert toy_gpu(1.25).describe() == (
        "TableGpu(h200-sxm, trace 'toy' of 3 kernels, 3 configurations, switching latency 1250 ms)"
    )


# -- SwitchEngine, landing_table --------------------------------------------------------------------------------


def test_step_switch_to_auto_without_latency_is_in_effect_at_once() -> None:
    """Pins ``now = (pending >= 0) & (land_in_s <= 0)`` for a switch to configuration 0: with latency 0 the
    kernel starts at AUTO (nothing in flight, no landing inside it), like a switch to any other index."""
    state = EngineState.start(2, np.array([1, 2]))
    t, e = rows(2)
    out = SwitchEngine.step(t, e, np.array([0, 0]), state, 0.0)
    assert out.started_at.tolist() == [0, 0]
    assert (out.time_s.tolist(), out.energy_j.tolist(), out.off_plan_s.tolist()) == ([1.0, 1.0], [8.0, 8.0], [0.0, 0.0])
    assert out.issued.tolist() == [True, True]
    assert np.isnan(out.landed_after_s).all()
    assert (state.current.tolist(), state.pending.tolist(), state.land_in_s.tolist()) == ([0, 0], [-1, -1], [0.0, 0.0])


def test_landing_table_share_of_a_switch_that_does_not_land_is_one() -> None:
    """Pins ``frac = 1.0`` where the switch does not land within the step (``land == n``)."""
    t = np.array([[1.0], [1.0]])
    prefix = np.array([[0.0], [1.0], [2.0]])
    land, frac = landing_table(prefix, t, 4.0)
    assert land.tolist() == [[2], [2]]
    assert frac.tolist() == [[1.0], [1.0]]


def test_landing_table_clips_a_share_that_rounding_pushes_above_one() -> None:
    """Pins the upper clip of ``frac`` at 1.0: with kernels of 0.1 and 0.2 s and a latency of 0.1 + 0.2 s the
    switch issued at 0 lands at the end of kernel 1, where ``(0.1 + 0.2 - 0.1) / 0.2`` rounds to 1 + 2⁻⁵²."""
    t = np.array([[0.1], [0.2]])
    prefix = np.vstack([np.zeros((1, 1)), np.cumsum(t, axis=0)])
    assert (0.1 + 0.2 - 0.1) / 0.2 > 1.0
    land, frac = landing_table(prefix, t, 0.1 + 0.2)
    assert land[0, 0] == 1
    assert frac[0, 0] == 1.0


# -- ClockSchedule ------------------------------------------------------------------------------------------------


def test_schedule_index_may_be_any_iterable_but_not_a_scalar_array() -> None:
    """Pins ``list(index) if not isinstance(index, np.ndarray) else index``: a generator is read as a list; an
    array is taken as it is, so a 0-d array is refused as not one index per kernel."""
    s = ClockSchedule([AUTO, CONFIGS[1]], (i % 2 for i in range(3)))
    assert s.index.tolist() == [0, 1, 0]
    with pytest.raises(ScheduleError, match="one configuration index per kernel"):
        ClockSchedule([AUTO], np.array(0))


def test_from_configs_sorts_memory_clock_first_with_zero_for_a_free_or_zero_clock() -> None:
    """Pins the sort key ``(mem or 0, core or 0)`` at clocks of 0 and 1 MHz, where ``or 1`` would tie them: every
    configuration at memory 0 comes before those at memory 1, and at one memory clock core 0 before core 1."""
    mem = [ClockConfig(c, m) for m in (1, 0) for c in (1500, 1200)]
    assert ClockSchedule.from_configs(mem).configs == (
        ClockConfig(1200, 0),
        ClockConfig(1500, 0),
        ClockConfig(1200, 1),
        ClockConfig(1500, 1),
    )
    mems = (2201, 3201, 5001, 7001)
    core = [ClockConfig(c, m) for m in mems for c in (1, 0)]
    assert ClockSchedule.from_configs(core).configs == tuple(ClockConfig(c, m) for m in mems for c in (0, 1))


def test_schedule_repr() -> None:
    """Pins ``ClockSchedule.__repr__``: name, kernels and request changes."""
    assert repr(ClockSchedule([AUTO, CONFIGS[1]], [0, 1, 1, 0], name="x")) == "ClockSchedule('x', 4 kernels, 2 changes)"


# -- optimum_for ---------------------------------------------------------------------------------------------------


def test_optimum_for_solves_at_the_auto_time_times_one_plus_the_budget_and_memoises() -> None:
    """Pins ``optimum_for``: the deadline is ``auto time · (1 + budget)`` and the result is kept per budget."""
    gpu = toy_gpu(0.0, 2)  # auto: 2 s, 16 J
    opt = optimum_for(gpu, 0.5)
    # deadline 3 s: one kernel at A (2 s, 4 J), one at AUTO (1 s, 8 J); 4 s at A, A would be over it
    assert (opt.budget_s, opt.time_s, opt.energy_j, opt.requests.tolist()) == (3.0, 3.0, 12.0, [0, 1])
    assert optimum_for(gpu, 0.5) is opt
    wide = optimum_for(gpu, 1.0)  # deadline 4 s: both at A
    assert (wide.budget_s, wide.time_s, wide.energy_j, wide.requests.tolist()) == (4.0, 4.0, 8.0, [1, 1])
