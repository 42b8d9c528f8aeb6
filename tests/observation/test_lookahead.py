"""The binned look-ahead and the candidate slots (rlclock.observation.lookahead)."""

from __future__ import annotations

import numpy as np
import pytest

from rlclock.config import load_env_spec
from rlclock.env import episode_tables
from rlclock.errors import SpecError
from rlclock.observation.features import distinct_kernels, kernel_window
from rlclock.observation.lookahead import (
    CANDIDATE_PRICE_FACTORS,
    CANDIDATE_WINDOWS,
    N_BINS,
    SLOT_WIDTH,
    StepLookahead,
    bin_edges_s,
    distinct,
    kernel_contexts,
    memory_groups,
    n_slots,
    table_rows,
)
from rlclock.schedule import ClockConfig
from rlclock.solve.optimum import SwitchDag

CONFIGS = (
    ClockConfig(),
    ClockConfig(None, 9501),
    ClockConfig(1800, 9501),
    ClockConfig(1200, 9501),
    ClockConfig(1800, 5001),
    ClockConfig(1200, 5001),
)


def _tables(n: int = 40, seed: int = 0):
    """Kernels of 1 ms at auto; per configuration a fixed time and energy ratio per kernel kind."""
    rng = np.random.default_rng(seed)
    at = np.full(n, 1e-3)
    ae = np.full(n, 0.3)
    kind = rng.integers(0, 2, n)  # 0: compute-bound, 1: memory-bound
    t_ratio = np.array([[1.0, 1.0, 1.0, 1.5, 1.05, 1.6], [1.0, 1.0, 1.0, 1.02, 1.8, 1.9]])
    e_ratio = np.array([[1.0, 1.0, 0.98, 0.8, 0.9, 0.75], [1.0, 1.0, 0.99, 0.85, 0.95, 0.9]])
    return at[:, None] * t_ratio[kind], ae[:, None] * e_ratio[kind], at, ae


def test_bins_hold_the_added_time_and_energy_in_latency_units():
    t, e, at, ae = _tables()
    look = StepLookahead(t, e, at, ae, 0.004, CONFIGS)
    edges = bin_edges_s(0.004)
    assert edges.shape == (N_BINS + 1,) and edges[2] == pytest.approx(0.004)  # the landing
    k, b = 3, 4  # bin 4 spans whole kernels: [L + 1 ms, L + 4 ms) from kernel 3's start
    lo, hi = 3 + round(edges[b] / 1e-3), 3 + round(edges[b + 1] / 1e-3)
    width = edges[b + 1] - edges[b]
    np.testing.assert_allclose(look.bin_time[k, b], (t[lo:hi] - at[lo:hi, None]).sum(0) / width, rtol=1e-5)
    power = ae.sum() / at.sum()
    np.testing.assert_allclose(look.bin_energy[k, b], (e[lo:hi] - ae[lo:hi, None]).sum(0) / (power * width), rtol=1e-5)
    assert np.all(look.bin_time[:, :, 0] == 0) and np.all(look.bin_energy[:, :, 0] == 0)  # auto adds nothing
    assert look.occupancy[0].tolist() == [1.0] * N_BINS
    # the last 1 ms kernel fills half the first bin; the bins after it are past the step's end
    assert look.occupancy[-1, 0] == pytest.approx(0.5) and look.occupancy[-1, -1] == 0.0


def test_without_latency_the_bins_before_the_landing_are_empty():
    t, e, at, ae = _tables()
    look = StepLookahead(t, e, at, ae, 0.0, CONFIGS)
    assert np.all(look.occupancy[:, :2] == 0) and np.all(look.bin_time[:, :2] == 0)
    assert np.all(np.isfinite(look.bin_time)) and np.all(np.isfinite(look.bin_energy))


def test_candidates_are_the_best_of_their_memory_clock_over_each_window():
    t, e, at, ae = _tables()
    look = StepLookahead(t, e, at, ae, 0.002, CONFIGS)
    price = 1.3
    cand = look.candidates(price)
    groups = memory_groups(CONFIGS)
    assert (
        cand.shape
        == (len(t), n_slots(CONFIGS))
        == (len(t), 1 + len(CANDIDATE_PRICE_FACTORS) * len(CANDIDATE_WINDOWS) * 2)
    )
    assert np.all(cand[:, 0] == 0)
    edges = bin_edges_s(0.002)
    power = ae.sum() / at.sum()
    k, slot = 5, 1
    for factor in CANDIDATE_PRICE_FACTORS:
        for a, b in CANDIDATE_WINDOWS:
            lo, hi = k + round(edges[a] / 1e-3), k + round(edges[b] / 1e-3)
            added_t = (t[lo:hi] - at[lo:hi, None]).sum(0)
            gain = -((e[lo:hi] - ae[lo:hi, None]).sum(0) / power + factor * price * added_t)
            for grp in groups:
                assert cand[k, slot] == grp[np.argmax(gain[grp])]
                slot += 1
    # per context: every kernel reads its context's row
    assert np.array_equal(cand, look.context_candidates(price)[look.context])


def test_slot_features_have_the_documented_layout():
    t, e, at, ae = _tables()
    look = StepLookahead(t, e, at, ae, 0.002, CONFIGS)
    cf = np.arange(len(CONFIGS) * 4, dtype=float).reshape(-1, 4)
    k = np.array([7, 9])
    slots = look.candidates(1.0)[k]
    cur = np.array([slots[0, 1], -1])
    f = look.slot_features(k, slots, cur, np.array([1.0, 1.0]), cf)
    assert f.shape == (2, slots.shape[1], SLOT_WIDTH)
    np.testing.assert_array_equal(f[:, :, :4], cf[slots])
    assert f[0, 1, -1] == 1.0 and not f[1, :, -1].any()  # -1: nothing flagged
    gain = look.gains_of(look.context[9], slots[1], 1.0)
    np.testing.assert_allclose(f[1, :, 4 : 4 + N_BINS], gain)
    now = look.current_features(k, slots[:, 1], np.array([1.0, 1.0]))
    np.testing.assert_allclose(now, f[:, 1, 4:-1])


def test_a_restricted_optimum_never_beats_the_full_one_and_equals_it_with_every_target():
    t, e, at, ae = _tables(30)
    dag = SwitchDag(t, e, 0.002)
    lam = 300.0
    V, _ = dag.backward(lam)
    everything = np.tile(np.arange(len(CONFIGS)), (len(t), 1))
    V_all, _ = dag.backward(lam, targets=everything)
    np.testing.assert_allclose(V_all, V)
    look = StepLookahead(t, e, at, ae, 0.002, CONFIGS)
    V_r, ch = dag.backward(lam, want_path=True, targets=look.candidates(lam / (ae.sum() / at.sum())))
    assert np.all(V_r >= V - 1e-9)
    assert set(np.unique(ch[ch >= 0])) <= set(np.unique(look.candidates(lam / (ae.sum() / at.sum()))))


def test_the_rtx_3080_ti_action_set_has_25_slots():
    ep = episode_tables(load_env_spec("gpt3xl-rtx3080ti"))
    assert ep.look.n_slots == 25 == n_slots(ep.backend.configs)


def test_an_action_set_without_memory_clocks_is_refused():
    with pytest.raises(SpecError, match="memory clock"):
        memory_groups([ClockConfig()])


def test_kernels_with_the_same_steps_ahead_share_a_context():
    t, e, at, ae = _tables(12)
    t = t * (1 + 1e-3 * np.arange(12))[:, None]  # every kernel of a layer differs from the others
    reps = 6
    t, e, at, ae = np.tile(t, (reps, 1)), np.tile(e, (reps, 1)), np.tile(at, reps), np.tile(ae, reps)
    context, first = kernel_contexts(t, e, at, ae, horizon_s=0.0045)  # five 1 ms kernels ahead
    assert np.array_equal(context[first], np.arange(len(first)))
    # every layer repeats the first one's contexts, until the step's end comes within the horizon
    assert np.array_equal(context[12:24], context[:12]) and np.array_equal(context[48:55], context[:7])
    assert context[-5] == context[7]  # its five kernels are the layer's last ones
    assert len(set(context[-4:])) == 4 and not set(context[-4:]) & set(context[:-4])  # these reach the end
    assert len(first) == 12 + 4
    t[30, 2] *= 1.01  # one kernel differs: the contexts that see it are new
    changed, _ = kernel_contexts(t, e, at, ae, horizon_s=0.0045)
    assert len(set(changed[26:31])) == 5 and not set(changed[26:31]) & set(changed[:26])


def test_shared_contexts_change_nothing_on_a_gpt3_xl_step():
    ep = episode_tables(load_env_spec("gpt3xl-rtx3080ti"))
    b = ep.backend
    args = (ep.time_s, ep.energy_j, ep.auto_time_s, ep.auto_energy_j, b.latency_s, b.configs)
    shared, alone = StepLookahead(*args), StepLookahead(*args, share_contexts=False)
    assert shared.n_contexts < len(ep.time_s) / 4 and alone.n_contexts == len(ep.time_s)
    np.testing.assert_allclose(shared.bin_time, alone.bin_time, atol=1e-12)
    np.testing.assert_allclose(shared.bin_energy, alone.bin_energy, atol=1e-12)
    np.testing.assert_allclose(shared.occupancy, alone.occupancy, atol=1e-12)
    for price in (0.5, 1.2, 3.0):
        assert np.array_equal(shared.candidates(price), alone.candidates(price))


def test_distinct_numbers_values_as_numpy_unique_does():
    rng = np.random.default_rng(3)
    for values in (rng.integers(0, 7, 200), rng.random(50), np.zeros(5), np.arange(9)[::-1]):
        ids, first = distinct(values)
        _, np_first, np_ids = np.unique(values, return_index=True, return_inverse=True)
        assert np.array_equal(ids, np_ids.ravel()) and np.array_equal(first, np_first)


def test_table_rows_take_a_grouping_hint_only_where_the_rows_agree():
    t, e, at, ae = _tables(12)
    t, e, at, ae = np.tile(t, (3, 1)), np.tile(e, (3, 1)), np.tile(at, 3), np.tile(ae, 3)
    exact = table_rows(t, e, at, ae)
    assert np.array_equal(exact[:12], exact[12:24]) and len(set(exact)) == 2  # two kinds of kernel
    by_position = (list(range(12)), np.tile(np.arange(12), 3))  # finer than the rows: taken as it is
    assert np.array_equal(table_rows(t, e, at, ae, by_position), by_position[1])
    lumped = ([0], np.zeros(36, dtype=np.int64))  # one group, but the rows differ: not taken
    assert np.array_equal(table_rows(t, e, at, ae, lumped), exact)
    e2 = e.copy()
    e2[30, 3] *= 1.001  # one row differs from its group's first
    assert len(set(table_rows(t, e2, at, ae, by_position))) == 3


def test_a_kernel_window_built_once_per_distinct_kernel_equals_the_full_one():
    ep = episode_tables(load_env_spec("gpt3xl-rtx3080ti"))
    b = ep.backend
    args = (b.trace, b.spec, ep.auto_time_s, ep.auto_energy_j, b.latency_s, ep.time_s, ep.energy_j, b.configs, 4)
    kernels = distinct_kernels(b.trace, table_rows(ep.time_s, ep.energy_j, ep.auto_time_s, ep.auto_energy_j))
    assert len(kernels[1]) < len(b.trace) // 10  # the layers repeat
    np.testing.assert_array_equal(kernel_window(*args, kernels), kernel_window(*args))


def test_the_blocked_running_sums_are_the_step_long_ones(monkeypatch):
    """The look-ahead walks a long step in blocks; whatever the block size, every bin is bit-for-bit the same."""
    import rlclock.observation.lookahead as lookahead

    ep = episode_tables(load_env_spec("gpt3xl-rtx3080ti"))
    auto = ep.backend.auto_run()
    args = (ep.time_s, ep.energy_j, auto.kernel_time_s, auto.kernel_energy_j, ep.backend.latency_s, ep.backend.configs)
    whole = lookahead.StepLookahead(*args)
    for chunk in (1, 7, 256):
        monkeypatch.setattr(lookahead, "_CHUNK", chunk)
        blocked = lookahead.StepLookahead(*args)
        assert np.array_equal(blocked.by_context, whole.by_context)
        assert np.array_equal(blocked._win, whole._win)
        assert np.array_equal(blocked.context_candidates(1.2), whole.context_candidates(1.2))
