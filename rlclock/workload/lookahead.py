"""What a policy sees of the step ahead in time, and the candidate configurations it chooses among.

A switch requested now lands one switching latency later and then holds for a while, so what matters to a
request is the stretch of the step from the landing on — measured in time, not in kernels: sixteen kernels
are 5 ms of one workload and 200 ms of another. :class:`StepLookahead` precomputes, for every kernel ``k``
of a step and every configuration ``c`` of the action set, how the upcoming time would change at ``c``,
in bins of auto-clock time from where ``k`` starts: two before a switch requested at ``k`` would land
(``[0, L/2)``, ``[L/2, L)`` for a latency ``L``) and six after it, at :data:`POST_LANDING_EDGES` units
``u = max(L, 1 ms)`` from the landing:

* ``bin_time[k, b, c]``: seconds added (over auto) per second of bin ``b`` (zero for an empty bin);
* ``bin_energy[k, b, c]``: joules added per (mean auto power × second of bin ``b``);
* ``occupancy[k, b]``: the share of bin ``b`` inside the step (bins past its end are empty).

At a price of time ``p`` (over the mean auto power) the *gain* of ``c`` in a bin is
``−(bin_energy + p · bin_time)``: the Lagrangian ``energy + p·time`` saved per unit of bin.

**Candidate slots.** The policy does not pick one of dozens of configurations by index — a choice that does
not carry over between workloads, where the best core clock for a stretch differs. It picks a *slot*: slot 0
is ``auto``; then, for the plan's price and half of it (:data:`CANDIDATE_PRICE_FACTORS`), every window of
:data:`CANDIDATE_WINDOWS` (from the landing on) and every memory clock of the action set, the configuration
with the largest gain over that window. The slots' meaning is
the same on every workload; the exact ``energy + p·time`` optimum restricted to these candidates reaches the
unrestricted one on the simulated RTX 3080 Ti's held-out workloads (docs/agent.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlclock.errors import SpecError

POST_LANDING_EDGES = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 7.0)
"""Edges of the bins after a switch's landing, in units ``u = max(latency, MIN_BIN_UNIT_S)`` from it."""
N_BINS = 2 + len(POST_LANDING_EDGES) - 1
MIN_BIN_UNIT_S = 1e-3
"""The post-landing bins' unit when the switching latency is shorter than this (or zero)."""
CANDIDATE_WINDOWS = ((2, 3), (2, 4), (2, 6), (2, 8))
"""Bin ranges ``[a, b)`` over which candidates are ranked by gain: from the landing over 0.5, 1, 3 and 7
units."""
CANDIDATE_PRICE_FACTORS = (1.0, 0.5)
"""Candidates are ranked at the plan's price of time and at these multiples of it: the exact optimum often
holds a slower, more frugal configuration for a short stretch (typically just before a switch lands), which
no window ranks first at the full price."""
SLOT_WIDTH = 4 + 3 * N_BINS + 1
"""Observation entries per slot: configuration features (4), gain, time and energy per bin, is-in-effect."""
CURRENT_WIDTH = 3 * N_BINS
"""Observation entries for the configuration in effect: gain, time and energy per bin."""


def memory_groups(configs: Sequence) -> list[np.ndarray]:
    """Indices of the configurations (``ClockConfig``) at each requested memory clock, lowest first
    (``auto@<mem>`` belongs to its memory clock); full ``auto`` is in none."""
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(configs):
        if c.mem_mhz is not None:
            groups.setdefault(int(c.mem_mhz), []).append(i)
    if not groups:
        raise SpecError("the action set has no configuration with a memory clock; candidate slots need one.",
                        "add locked core@memory pairs to the env spec's actions.")
    return [np.asarray(groups[m], dtype=np.int64) for m in sorted(groups)]


def n_slots(configs: Sequence) -> int:
    """Candidate slots for an action set: ``auto`` plus one per price factor, window and memory clock."""
    return 1 + len(CANDIDATE_PRICE_FACTORS) * len(CANDIDATE_WINDOWS) * len(memory_groups(configs))


def bin_edges_s(latency_s: float) -> np.ndarray:
    """``(N_BINS + 1,)`` edges of the look-ahead bins in seconds from a decision (see the module docstring)."""
    lat = max(float(latency_s), 0.0)
    unit = max(lat, MIN_BIN_UNIT_S)
    return np.concatenate([[0.0, 0.5 * lat], lat + unit * np.asarray(POST_LANDING_EDGES)])


class StepLookahead:
    """Binned look-ahead of one step on a planning model (see the module docstring).

    Args:
        t_tab: ``(n, C)`` seconds per kernel and configuration.
        e_tab: ``(n, C)`` joules per kernel and configuration.
        auto_time_s: ``(n,)`` auto-clock seconds per kernel.
        auto_energy_j: ``(n,)`` auto-clock joules per kernel.
        latency_s: Switching latency.
        configs: The action set (``ClockConfig`` per column).
    """

    def __init__(self, t_tab: np.ndarray, e_tab: np.ndarray, auto_time_s: np.ndarray, auto_energy_j: np.ndarray,
                 latency_s: float, configs: Sequence) -> None:
        t = np.asarray(t_tab, float)
        e = np.asarray(e_tab, float)
        at = np.asarray(auto_time_s, float)
        ae = np.asarray(auto_energy_j, float)
        n, C = t.shape
        self.n, self.C = n, C
        power = float(ae.sum() / max(at.sum(), 1e-12))
        start = np.concatenate([[0.0], np.cumsum(at)])
        cum_t = np.vstack([np.zeros(C), np.cumsum(t - at[:, None], axis=0)])
        cum_e = np.vstack([np.zeros(C), np.cumsum(e - ae[:, None], axis=0)])
        edges = bin_edges_s(latency_s)
        q = np.minimum(start[:n, None] + edges[None, :], start[n])  # (n, N_BINS + 1) auto-time points
        pos = np.interp(q, start, np.arange(n + 1.0))  # fractional kernel index of each point
        i0 = np.minimum(np.floor(pos).astype(np.int64), n - 1)
        f = (pos - i0)[..., None]
        at_t = cum_t[i0] + f * (cum_t[i0 + 1] - cum_t[i0])  # (n, N_BINS + 1, C) cumulative added time
        at_e = cum_e[i0] + f * (cum_e[i0 + 1] - cum_e[i0])
        width_s = np.diff(edges)
        inv = np.divide(1.0, width_s, out=np.zeros_like(width_s), where=width_s > 0)  # empty bins read 0
        self.bin_time = (np.diff(at_t, axis=1) * inv[None, :, None]).astype(np.float32)
        self.bin_energy = (np.diff(at_e, axis=1) * (inv / power)[None, :, None]).astype(np.float32)
        self.occupancy = (np.diff(q, axis=1) * inv[None, :]).astype(np.float32)
        # window sums of the added time (s) and energy (J / mean power), for ranking candidates
        self._win_time = np.stack([at_t[:, b] - at_t[:, a] for a, b in CANDIDATE_WINDOWS], axis=1)
        self._win_energy = np.stack([at_e[:, b] - at_e[:, a] for a, b in CANDIDATE_WINDOWS], axis=1) / power
        # per kernel and configuration, bins last: what a decision gathers for its slots (rollout fast path)
        self.time_by_config = np.ascontiguousarray(self.bin_time.transpose(0, 2, 1), dtype=np.float64)
        self.energy_by_config = np.ascontiguousarray(self.bin_energy.transpose(0, 2, 1), dtype=np.float64)
        self.clipped_by_config = np.concatenate([np.clip(self.time_by_config, -1.0, 2.0),
                                                 np.clip(self.energy_by_config, -1.0, 1.0)], axis=2)
        self.groups = memory_groups(configs)
        self.n_slots = 1 + len(CANDIDATE_PRICE_FACTORS) * len(CANDIDATE_WINDOWS) * len(self.groups)
        self._candidates: dict[float, np.ndarray] = {}

    def candidates(self, price_rel: float) -> np.ndarray:
        """``(n, n_slots)`` configuration index of every slot at every kernel, at price ``price_rel``."""
        key = float(price_rel)
        got = self._candidates.get(key)
        if got is None:
            cols = [np.zeros(self.n, dtype=np.int64)]  # slot 0: auto
            for factor in CANDIDATE_PRICE_FACTORS:
                gain = -(self._win_energy + factor * key * self._win_time)  # (n, W, C)
                for w in range(len(CANDIDATE_WINDOWS)):
                    for grp in self.groups:
                        cols.append(grp[np.argmax(gain[:, w, grp], axis=1)])
            got = np.stack(cols, axis=1)
            if len(self._candidates) > 64:
                self._candidates.clear()
            self._candidates[key] = got
        return got

    def candidates_per_kernel(self, price_rel: np.ndarray) -> np.ndarray:
        """``(n, n_slots)`` candidates with one price per kernel (each row from its kernel's price)."""
        prices = np.asarray(price_rel, float)
        out = np.empty((self.n, self.n_slots), dtype=np.int64)
        for p in np.unique(prices):
            rows = prices == p
            out[rows] = self.candidates(float(p))[rows]
        return out

    def _gain(self, k: np.ndarray, configs: np.ndarray, price_rel: np.ndarray) -> np.ndarray:
        """Clipped gain per bin of ``configs`` at kernels ``k`` (broadcast together) at ``price_rel``."""
        gain = -(self.energy_by_config[k, configs] + price_rel * self.time_by_config[k, configs])
        return np.clip(gain, -1.0, 1.0, out=gain)

    def gains(self, price_rel: float) -> np.ndarray:
        """``(n, C, N_BINS)``: the clipped gain per bin of every configuration at every kernel."""
        return np.clip(-(self.energy_by_config + price_rel * self.time_by_config), -1.0, 1.0)

    def slot_features(self, k: np.ndarray, slots: np.ndarray, current: np.ndarray, price_rel: np.ndarray,
                      config_feat: np.ndarray) -> np.ndarray:
        """``(R, n_slots, SLOT_WIDTH)`` for ``R`` decisions (kernels ``k``, slot configurations ``slots``
        ``(R, n_slots)``, configurations in effect ``current`` — ``-1`` flags none — and prices): per slot
        its configuration's features, then per bin its gain, added time and added energy (clipped), and
        whether it is the configuration in effect."""
        kk = np.asarray(k)[:, None]
        out = np.empty((*slots.shape, SLOT_WIDTH))
        out[..., :4] = config_feat[slots]
        out[..., 4 : 4 + N_BINS] = self._gain(kk, slots, np.asarray(price_rel, float)[:, None, None])
        out[..., 4 + N_BINS : 4 + 3 * N_BINS] = self.clipped_by_config[kk, slots]
        out[..., -1] = slots == np.asarray(current)[:, None]
        return out

    def current_features(self, k: np.ndarray, current: np.ndarray, price_rel: np.ndarray) -> np.ndarray:
        """``(R, CURRENT_WIDTH)``: gain, added time and added energy per bin of the configurations in effect."""
        out = np.empty((len(current), CURRENT_WIDTH))
        out[:, :N_BINS] = self._gain(k, current, np.asarray(price_rel, float)[:, None])
        out[:, N_BINS:] = self.clipped_by_config[k, current]
        return out
