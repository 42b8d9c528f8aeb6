"""The observation's layout: its blocks, the state entries, ``obs_size`` — the one definition the env fills and
the deployed policy's incremental evaluator reads (by name, never by position).

The vector is, in order (``K`` the kernel look-ahead, ``S`` the candidate slots):

1. ``window``: the current kernel and the next ``K``, :data:`~rlclock.observation.features.N_KERNEL_INPUTS`
   entries each (:func:`~rlclock.observation.features.kernel_window`);
2. ``slots``: :data:`~rlclock.observation.lookahead.SLOT_WIDTH` entries per slot
   (:meth:`~rlclock.observation.lookahead.StepLookahead.slot_features`);
3. ``current``: the configuration in effect's bins (``CURRENT_WIDTH``);
4. ``occupancy``: the share of each bin inside the step (``N_BINS``);
5. ``state``: the :data:`STATE` entries below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from rlclock.dvfs.spec import GpuSpec
from rlclock.observation.features import N_KERNEL_INPUTS
from rlclock.observation.lookahead import CURRENT_WIDTH, N_BINS, SLOT_WIDTH
from rlclock.schedule import ClockConfig

CONFIG_WIDTH = 4
"""Entries encoding one configuration (:func:`config_features`)."""

STATE: tuple[tuple[str, int], ...] = (
    ("in_effect", CONFIG_WIDTH),  # configuration in effect (config_features)
    ("pending", CONFIG_WIDTH),  # configuration of the switch in flight, zeros if none
    ("in_flight", 1),  # a switch is in flight: {0, 1}
    ("time_to_land", 1),  # time until it lands / switching latency, [0, 1]
    ("price", 1),  # price of time of the episode (price_feature), [-1, 1]
    ("time_left", 1),  # auto time left in the step (remaining_feature), [0, 1]
    ("latency", 1),  # switching latency (latency_feature), [-1, 1]
)
"""The state block: ``(name, entries)`` in order."""
N_STATE = sum(width for _, width in STATE)
"""Entries in the state block."""


def _offsets() -> dict[str, slice]:
    out, at = {}, 0
    for name, width in STATE:
        out[name] = slice(at, at + width)
        at += width
    return out


STATE_SLICES: dict[str, slice] = _offsets()
"""Each state entry's place within the state block."""


@dataclass(frozen=True)
class ObservationLayout:
    """Where each block of the observation lies, for ``lookahead`` kernels ahead and ``n_slots`` slots.

    Attributes:
        lookahead: Kernels after the current one in the window.
        n_slots: Candidate slots.
    """

    lookahead: int
    n_slots: int

    @staticmethod
    @lru_cache(maxsize=64)
    def of(lookahead: int, n_slots: int) -> ObservationLayout:
        """The (shared) layout for ``lookahead`` kernels and ``n_slots`` slots."""
        return ObservationLayout(lookahead, n_slots)

    @cached_property
    def window(self) -> slice:
        return slice(0, (self.lookahead + 1) * N_KERNEL_INPUTS)

    @cached_property
    def slots(self) -> slice:
        return slice(self.window.stop, self.window.stop + self.n_slots * SLOT_WIDTH)

    @cached_property
    def current(self) -> slice:
        return slice(self.slots.stop, self.slots.stop + CURRENT_WIDTH)

    @cached_property
    def occupancy(self) -> slice:
        return slice(self.current.stop, self.current.stop + N_BINS)

    @cached_property
    def state(self) -> slice:
        return slice(self.occupancy.stop, self.occupancy.stop + N_STATE)

    @property
    def size(self) -> int:
        """Length of the observation vector."""
        return self.state.stop

    @cached_property
    def _entries(self) -> dict[str, slice]:
        at = self.state.start
        return {name: slice(at + part.start, at + part.stop) for name, part in STATE_SLICES.items()}

    def entry(self, name: str) -> slice:
        """Where state entry ``name`` (:data:`STATE`) lies in the observation."""
        return self._entries[name]

    def index(self, name: str) -> int:
        """Position of the one-entry state entry ``name`` in the observation."""
        part = self._entries[name]
        if part.stop - part.start != 1:
            raise ValueError(f"state entry {name!r} has {part.stop - part.start} entries")
        return part.start


def obs_size(lookahead: int, slots: int) -> int:
    """Length of the observation vector for a look-ahead of ``lookahead`` kernels and ``slots`` slots."""
    return ObservationLayout(lookahead, slots).size


def config_features(gpu: GpuSpec, configs: Sequence[ClockConfig]) -> np.ndarray:
    """``(C, CONFIG_WIDTH)``: requested core / max core, memory / max memory, core-is-auto, memory-is-auto."""
    rows = []
    for c in configs:
        core = gpu.requested_core_mhz(c) / gpu.abs_max_core_mhz
        mem = gpu.effective_mem_mhz(c) / gpu.max_mem_mhz
        rows.append([core, mem, float(c.core_mhz is None), float(c.mem_mhz is None)])
    return np.asarray(rows, dtype=np.float32)
