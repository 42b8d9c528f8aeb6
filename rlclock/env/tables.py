"""What the env precomputes per (workload, backend) and its episodes replay, cached per process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from rlclock.backends.base import GpuBackend
from rlclock.config import EnvSpec, RewardSpec
from rlclock.observation.features import kernel_window
from rlclock.observation.layout import config_features
from rlclock.observation.lookahead import StepLookahead
from rlclock.solve.evaluation import optimum_for


@dataclass
class EpisodeTables:
    """Everything precomputed for one (workload, backend) pair that the env's episodes replay: the backend's
    tables, the auto run, the kernel window, the binned look-ahead and the price of time."""

    backend: GpuBackend
    reward: RewardSpec
    lookahead: int
    time_s: np.ndarray  # (n, C)
    energy_j: np.ndarray  # (n, C)
    auto_time_s: np.ndarray  # (n,)
    auto_energy_j: np.ndarray  # (n,)
    auto_prefix_s: np.ndarray  # (n + 1,) auto time before each kernel
    auto_total_s: float
    auto_total_j: float
    window: np.ndarray  # (n + lookahead, N_KERNEL_INPUTS): features, clock response, valid flag; zero-padded
    config_feat: np.ndarray  # (C, 4)
    time_price: float  # J/s charged on time changes against auto (the centre of the episode draws)
    look: StepLookahead  # binned look-ahead in switching latencies and the candidate slots

    @property
    def mean_power_w(self) -> float:
        """Mean auto-clock power of the step (the unit of the observed price of time)."""
        return self.auto_total_j / self.auto_total_s

    def draw_price(self, rng: np.random.Generator) -> float:
        """An episode's price of time (J/s): ``time_price · exp(u)``, ``u ~ U(-spread, spread)``."""
        s = self.reward.price_spread
        return self.time_price * float(np.exp(rng.uniform(-s, s))) if s > 0 else self.time_price

    @classmethod
    def build(cls, backend: GpuBackend, reward: RewardSpec, lookahead: int) -> EpisodeTables:
        t, e = backend.tables
        auto = backend.auto_run()
        window = kernel_window(
            backend.trace,
            backend.spec,
            auto.kernel_time_s,
            auto.kernel_energy_j,
            backend.latency_s,
            t,
            e,
            backend.configs,
            lookahead,
        )
        prefix = np.concatenate([[0.0], np.cumsum(auto.kernel_time_s)])
        price = reward.time_price
        if price == "optimum":
            price = optimum_for(backend, reward.budget).lam_j_per_s
        look = StepLookahead(t, e, auto.kernel_time_s, auto.kernel_energy_j, backend.latency_s, backend.configs)
        return cls(
            backend,
            reward,
            lookahead,
            t,
            e,
            auto.kernel_time_s,
            auto.kernel_energy_j,
            prefix,
            float(auto.time_s),
            float(auto.energy_j),
            window,
            config_features(backend.spec, backend.configs),
            float(price),
            look,
        )

    @property
    def n(self) -> int:
        return self.time_s.shape[0]


_EPISODE_CACHE: dict[tuple[Any, ...], EpisodeTables] = {}
_EPISODE_CACHE_SIZE = 512  # episodes of a few MB each; training families have a few hundred workloads


def episode_tables(spec: EnvSpec) -> EpisodeTables:
    """Precompute (and cache per process) the tables and features of an env spec."""
    key = (spec.source, yaml.safe_dump(dict(spec.raw), sort_keys=True))
    ep = _EPISODE_CACHE.pop(key, None)
    if ep is None:
        ep = EpisodeTables.build(spec.build_backend(), spec.reward, spec.lookahead)
        while len(_EPISODE_CACHE) >= _EPISODE_CACHE_SIZE:  # drop the least recently used
            _EPISODE_CACHE.pop(next(iter(_EPISODE_CACHE)))
    _EPISODE_CACHE[key] = ep
    return ep
