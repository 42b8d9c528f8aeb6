"""BatchCore: the environment's dynamics — requests, the switching rule, rewards, infos, observations — for
``N`` runs at once. :class:`~rlclock.env.kernel_clock.KernelClockEnv` drives one run, the vector envs many."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlclock.backends.switching import EngineState, SwitchEngine
from rlclock.env.tables import EpisodeTables
from rlclock.errors import EnvUsageError
from rlclock.observation.features import latency_feature, price_feature, remaining_feature
from rlclock.observation.layout import ObservationLayout

RESET_OPTIONS = ("workload", "time_price")
"""What ``reset(options=...)`` takes: the index of the workload of a family, and the price of time in J/s."""


def start_of(
    episodes: Sequence[EpisodeTables], rng: np.random.Generator, options: Mapping[str, Any] | None
) -> tuple[int, float]:
    """The workload and the price of time (J/s) a new episode starts with: from ``options`` where given,
    otherwise drawn with ``rng`` (the workload first, for a family; then the price around its ``time_price``).

    Raises:
        EnvUsageError: An unknown option, a workload outside the family, a price that is not finite and >= 0.
    """
    options = dict(options or {})
    unknown = set(options) - set(RESET_OPTIONS)
    if unknown:
        raise EnvUsageError(f"reset options {sorted(unknown)} are unknown.", f"use {list(RESET_OPTIONS)}.")
    idx = 0
    if "workload" in options:
        idx = options["workload"]
        if isinstance(idx, bool) or not isinstance(idx, (int, np.integer)) or not 0 <= idx < len(episodes):
            raise EnvUsageError(
                f"workload {idx!r} is outside this env's {len(episodes)} workloads.",
                f"give a whole number from 0 to {len(episodes) - 1}.",
            )
        idx = int(idx)
    elif len(episodes) > 1:
        idx = int(rng.integers(len(episodes)))
    price = float(options["time_price"]) if "time_price" in options else episodes[idx].draw_price(rng)
    if not np.isfinite(price) or price < 0:
        raise EnvUsageError(f"time_price {price!r} J/s is not a finite, non-negative number.")
    return idx, price


class BatchCore:
    """The environment dynamics for ``N`` runs at once (the env steps ``N = 1``, the vector envs more)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.state = EngineState.start(n)
        self.k = np.zeros(n, dtype=np.int64)
        self.time_s = np.zeros(n)
        self.energy_j = np.zeros(n)
        self.overrun_s = np.zeros(n)
        self.switches = np.zeros(n, dtype=np.int64)
        self.off_plan_s = np.zeros(n)
        self.price = np.zeros(n)
        self.eps: list[EpisodeTables] = []
        self.candidates: list[np.ndarray] = []  # per run: (n_kernels, n_slots) configuration of every slot
        self._rows = np.arange(n)

    def start(self, which: np.ndarray, episodes: Sequence[EpisodeTables], prices: np.ndarray | None = None) -> None:
        """(Re)start runs ``which`` on ``episodes`` at prices of time ``prices`` (J/s; default: each
        episode's ``time_price``), one per entry of ``which``."""
        if not self.eps:
            self.eps = [episodes[0]] * self.n
            self.candidates = [episodes[0].look.candidates(1.0)] * self.n
        for i, (j, ep) in enumerate(zip(which, episodes)):
            self.eps[int(j)] = ep
            self.price[int(j)] = ep.time_price if prices is None else float(prices[i])
            self.candidates[int(j)] = ep.look.candidates(self.price[int(j)] / ep.mean_power_w)
        mask = np.zeros(self.n, dtype=bool)
        mask[which] = True
        self.state.reset(mask)
        for arr in (self.k, self.time_s, self.energy_j, self.overrun_s, self.switches, self.off_plan_s):
            arr[mask] = 0

    def _gather(self) -> tuple[np.ndarray, np.ndarray]:
        if all(ep is self.eps[0] for ep in self.eps):
            ep = self.eps[0]
            return ep.time_s[self.k], ep.energy_j[self.k]
        t = np.stack([ep.time_s[k] for ep, k in zip(self.eps, self.k)])
        e = np.stack([ep.energy_j[k] for ep, k in zip(self.eps, self.k)])
        return t, e

    def resolve(self, actions: np.ndarray) -> np.ndarray:
        """Configuration index each run's action asks for: its slot's candidate at the current kernel, or for
        keep (any action past the slots) the standing request."""
        st = self.state
        out = np.where(st.pending >= 0, st.pending, st.current).astype(np.int64)
        for j, a in enumerate(np.asarray(actions, dtype=np.int64)):
            cand = self.candidates[j]
            if a < cand.shape[1]:
                out[j] = cand[min(int(self.k[j]), cand.shape[0] - 1), a]
        return out

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Run the current kernel of every run at the requested slots (``n_slots``: keep)."""
        t_row, e_row = self._gather()
        lat = np.array([ep.backend.latency_s for ep in self.eps])
        st = self.state
        actions = self.resolve(actions)
        out = SwitchEngine.step(t_row, e_row, actions, st, lat)
        k = self.k
        self.time_s += out.time_s
        self.energy_j += out.energy_j
        self.switches += out.issued
        self.off_plan_s += out.off_plan_s
        rewards = np.empty(self.n)
        infos: list[dict[str, Any]] = []
        done = np.empty(self.n, dtype=bool)
        for j, ep in enumerate(self.eps):
            kj = int(k[j])
            r = ep.reward
            line = (1.0 + r.budget) * ep.auto_prefix_s[kj + 1]
            over = max(0.0, self.time_s[j] - line)
            saved = ep.auto_energy_j[kj] - out.energy_j[j] - self.price[j] * (out.time_s[j] - ep.auto_time_s[kj])
            rewards[j] = r.scale * (
                saved / ep.auto_total_j - r.overrun_penalty * (over - self.overrun_s[j]) / ep.auto_total_s
            )
            self.overrun_s[j] = over
            done[j] = kj + 1 >= ep.n
            info = {
                "energy_j": float(self.energy_j[j]),
                "time_s": float(self.time_s[j]),
                "slowdown": float(self.time_s[j] / ep.auto_prefix_s[kj + 1] - 1.0),
                "switches": int(self.switches[j]),
                "kernel_energy_j": float(out.energy_j[j]),
                "kernel_time_s": float(out.time_s[j]),
                "config": int(actions[j]),
                "in_effect": int(out.started_at[j]),
            }
            if done[j]:
                info.update(
                    saving=float(1.0 - self.energy_j[j] / ep.auto_total_j),
                    auto_energy_j=ep.auto_total_j,
                    auto_time_s=ep.auto_total_s,
                    off_plan_time_s=float(self.off_plan_s[j]),
                )
            infos.append(info)
        self.k += 1
        return rewards, done, infos

    def observation(self) -> np.ndarray:
        """``(N, obs_size)`` observations at the current kernels (blocks: :mod:`rlclock.observation.layout`)."""
        ep0 = self.eps[0]
        lay = ObservationLayout.of(ep0.lookahead, ep0.look.n_slots)
        obs = np.empty((self.n, lay.size), dtype=np.float32)
        st = self.state
        rows_of: dict[int, list[int]] = {}  # runs on the same episode are filled together
        for j, ep in enumerate(self.eps):
            rows_of.setdefault(id(ep), []).append(j)
        for rows in rows_of.values():
            ep = self.eps[rows[0]]
            r = np.asarray(rows)
            k = np.minimum(self.k[r], ep.n - 1)
            cur = st.current[r]
            rel = self.price[r] / ep.mean_power_w
            obs[r, lay.window] = ep.window[k[:, None] + np.arange(ep.lookahead + 1)].reshape(len(r), -1)
            look = ep.look
            slots = np.stack([self.candidates[j][kj] for j, kj in zip(rows, k)])  # (R, S)
            obs[r, lay.slots] = look.slot_features(k, slots, cur, rel, ep.config_feat).reshape(len(r), -1)
            obs[r, lay.current] = look.current_features(k, cur, rel)
            obs[r, lay.occupancy] = look.occupancy[k]
            cf = ep.config_feat
            obs[r, lay.entry("in_effect")] = cf[cur]
            pend = st.pending[r]
            flying = pend >= 0
            obs[r, lay.entry("pending")] = np.where(flying[:, None], cf[np.maximum(pend, 0)], 0.0)
            obs[r, lay.index("in_flight")] = flying
            lat = ep.backend.latency_s
            obs[r, lay.index("time_to_land")] = (
                np.where(flying, np.minimum(1.0, st.land_in_s[r] / lat), 0.0) if lat > 0 else 0.0
            )
            obs[r, lay.index("price")] = price_feature(rel)
            obs[r, lay.index("time_left")] = remaining_feature(ep.auto_total_s - ep.auto_prefix_s[k], lat)
            obs[r, lay.index("latency")] = latency_feature(lat)
        return obs
