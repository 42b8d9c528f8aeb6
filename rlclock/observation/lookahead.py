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

A training step repeats its layers, so most kernels see the same steps ahead as a kernel of another layer:
the bins are computed once per *context* (:func:`kernel_contexts`) and read through ``context[k]``. The bins
are kept in float32 (differences of float64 running sums); candidates are ranked on float64 window sums.

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
from functools import cached_property, lru_cache

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
assert len({a for a, _ in CANDIDATE_WINDOWS}) == 1  # all from the landing on (StepLookahead relies on it)
_WINDOW_START = CANDIDATE_WINDOWS[0][0]
_WINDOW_ENDS = np.array([b for _, b in CANDIDATE_WINDOWS])
_CLIP_HIGH = np.array([2.0] * N_BINS + [1.0] * N_BINS, dtype=np.float32)
"""Upper clips of the added time and energy per bin (both are clipped below at -1)."""
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
    return _memory_groups([c.mem_mhz for c in configs])


def _memory_groups(mem_mhz: Sequence[int | None]) -> list[np.ndarray]:
    """:func:`memory_groups` of configurations at memory clocks ``mem_mhz`` (``None``: auto)."""
    groups: dict[int, list[int]] = {}
    for i, m in enumerate(mem_mhz):
        if m is not None:
            groups.setdefault(int(m), []).append(i)
    if not groups:
        raise SpecError(
            "the action set has no configuration with a memory clock; candidate slots need one.",
            "add locked core@memory pairs to the env spec's actions.",
        )
    return [np.asarray(groups[m], dtype=np.int64) for m in sorted(groups)]


@lru_cache(maxsize=64)
def _group_indexers(mem_mhz: tuple[int | None, ...]) -> tuple[slice | np.ndarray, ...]:
    """:func:`memory_groups` of configurations at memory clocks ``mem_mhz`` (``None``: auto) as indexers over
    them: a slice where a group is a contiguous run (as in the presets' action sets), its index array
    otherwise."""
    out: list[slice | np.ndarray] = []
    for g in _memory_groups(mem_mhz):
        contiguous = np.array_equal(g, np.arange(g[0], g[0] + len(g)))
        out.append(slice(int(g[0]), int(g[0]) + len(g)) if contiguous else g)
    return tuple(out)


def n_slots(configs: Sequence) -> int:
    """Candidate slots for an action set: ``auto`` plus one per price factor, window and memory clock."""
    return 1 + len(CANDIDATE_PRICE_FACTORS) * len(CANDIDATE_WINDOWS) * len(memory_groups(configs))


def bin_edges_s(latency_s: float) -> np.ndarray:
    """``(N_BINS + 1,)`` edges of the look-ahead bins in seconds from a decision (see the module docstring)."""
    lat = max(float(latency_s), 0.0)
    unit = max(lat, MIN_BIN_UNIT_S)
    return np.concatenate([[0.0, 0.5 * lat], lat + unit * np.asarray(POST_LANDING_EDGES)])


@lru_cache(maxsize=64)
def _bin_geometry(latency_s: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`bin_edges_s` and the float32 inverse width of each bin (0 for an empty one), read-only."""
    edges = bin_edges_s(latency_s)
    width_s = np.diff(edges)
    inv = np.divide(1.0, width_s, out=np.zeros_like(width_s), where=width_s > 0).astype(np.float32)
    edges.flags.writeable = inv.flags.writeable = False  # shared by every call
    return edges, inv


def _gain(bins: np.ndarray, price_rel: np.ndarray | float, out: np.ndarray | None = None) -> np.ndarray:
    """The gain per bin, ``−(energy + p·time)`` clipped to [-1, 1], from ``(..., 2 N_BINS)`` bins (added time,
    then added energy): computed in float64 (``price_rel`` as an array), written to ``out`` if given."""
    gain = bins[..., :N_BINS] * -np.asarray(price_rel, float)
    gain -= bins[..., N_BINS:]
    np.minimum(gain, 1.0, out=gain)  # two ufuncs rather than np.clip (its overhead dominates on small arrays)
    return np.maximum(gain, -1.0, out=gain if out is None else out)


def _clip(bins: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``(..., 2 N_BINS)`` bins clipped: added time to [-1, 2], added energy to [-1, 1] (a new array unless
    ``out``; never written into ``bins``)."""
    out = np.minimum(bins, _CLIP_HIGH, out=out)
    return np.maximum(out, -1.0, out=out)


def distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, first)`` of a 1-D array: per entry the rank of its value among the distinct values, and the index
    of each distinct value's first entry — ``np.unique``'s inverse and index, in fewer passes."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    new = np.empty(len(values), dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    ids = np.empty(len(values), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids, order[new]


def identical_rows(rows: np.ndarray) -> np.ndarray:
    """``(m,)`` int64: equal numbers for equal rows of a 2-D array (a projection on fixed weights, checked
    exactly; ``np.unique`` on the rows if two different rows project alike)."""
    probe = _probe(rows.shape[1])
    ids, rep = distinct(rows.astype(np.float64, copy=False) @ probe)
    if not np.array_equal(rows[rep[ids]], rows):
        ids = np.unique(rows, axis=0, return_inverse=True)[1].ravel().astype(np.int64)
    return ids


@lru_cache(maxsize=16)
def _probe(width: int) -> np.ndarray:
    probe = 1.0 + (np.arange(width) * 0.6180339887498949) % 1.0  # golden-ratio weights in [1, 2)
    probe.flags.writeable = False  # shared by every call
    return probe


@lru_cache(maxsize=16)
def _hash_powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``B^i`` and ``B^-i`` for ``i = 0 .. n`` in wrapping uint64 arithmetic (:func:`kernel_contexts`' base)."""
    mult = np.uint64(0x9E3779B97F4A7C15)
    powers = np.cumprod(np.concatenate([[np.uint64(1)], np.full(n, mult)]))
    inverse = np.cumprod(np.concatenate([[np.uint64(1)], np.full(n, np.uint64(pow(int(mult), -1, 2**64)))]))
    powers.flags.writeable = inverse.flags.writeable = False  # shared by every call
    return powers, inverse


def table_rows(
    t_tab: np.ndarray,
    e_tab: np.ndarray,
    auto_time_s: np.ndarray,
    auto_energy_j: np.ndarray,
    hint: tuple[Sequence[int], np.ndarray] | None = None,
) -> np.ndarray:
    """:func:`identical_rows` of a step's planning-model rows: per kernel its time and energy at every
    configuration and at auto. ``hint``: a proposed grouping ``(first, group)`` — the first kernel of each
    group and every kernel's group, as ``KernelTrace.unique_index`` —, taken if every kernel's row equals its
    group's first (equal numbers then still mean equal rows; equal rows in two groups keep two numbers)."""
    cols = (t_tab, e_tab, auto_time_s, auto_energy_j)
    if hint is not None:
        same = np.asarray(hint[0], dtype=np.int64)[hint[1]]
        if all(np.array_equal(x[same], x) for x in cols):
            return np.asarray(hint[1], dtype=np.int64)
    return identical_rows(np.column_stack(cols))


def kernel_contexts(
    t_tab: np.ndarray,
    e_tab: np.ndarray,
    auto_time_s: np.ndarray,
    auto_energy_j: np.ndarray,
    horizon_s: float,
    row_ids: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(context, first)``: per kernel the index of its *context*, and the first kernel of each context.

    Two kernels share a context when the kernels from each over ``horizon_s`` of auto time ahead (or to the
    step's end, if that comes first) are the same sequence of identical table rows: everything the look-ahead
    shows of them is then equal. A training step repeats its layers, so the ~900 kernels of a GPT-3 XL step
    on the simulated RTX 3080 Ti fall into ~130 contexts, and the look-ahead is computed once per context.
    Identical rows are found by :func:`identical_rows`; sequences are compared by a 64-bit polynomial hash
    mixed with their length and whether they reach the step's end (a collision between two different
    sequences has a chance of about ``n² / 2⁶⁴``). ``row_ids``: :func:`table_rows` of these tables, if known.
    """
    n = len(auto_time_s)
    ids = table_rows(t_tab, e_tab, auto_time_s, auto_energy_j) if row_ids is None else row_ids
    start = np.concatenate([[0.0], np.cumsum(auto_time_s)])
    end = np.searchsorted(start, start[:n] + horizon_s, side="left")  # kernels k .. end - 1 (n + 1: past the end)
    reaches_end = end > n
    end = np.minimum(end, n)
    # hash of ids[k:end] in wrapping uint64 arithmetic: (P[end] - P[k]) · B^-k with P[i] = Σ_{j<i} h_j · B^j
    powers, inverse = _hash_powers(n)
    h = ids.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9) + np.uint64(1)
    prefix = np.concatenate([[np.uint64(0)], np.cumsum(h * powers[:n])])
    with np.errstate(over="ignore"):
        length = (end - np.arange(n)).astype(np.uint64)
        key = (
            (prefix[end] - prefix[:n]) * inverse[:n]
            + length * np.uint64(0xD6E8FEB86659FD93)
            + reaches_end.astype(np.uint64) * np.uint64(0xA0761D6478BD642F)
        )
    context, first = distinct(key)
    order = np.argsort(first)  # contexts numbered in step order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[context], first[order]


_CHUNK = 1 << 15
"""Kernels per block of the running sums in :func:`_running_added` (bounds its memory on long steps)."""


def _running_added(
    t: np.ndarray, e: np.ndarray, at: np.ndarray, ae: np.ndarray, power: float, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """At each kernel index of ``rows`` (any shape): the seconds and joules / ``power`` added over auto by all
    kernels before it (``(..., 2C)``, running sums in kernel order), and by that kernel itself.

    The step is walked in blocks of :data:`_CHUNK` kernels, each block's sums continuing from the last (the
    same additions, in the same order, as one running sum over the step), and only the asked-for rows kept:
    memory stays a block's, not the step's."""
    n, C = t.shape
    flat = rows.reshape(-1)
    # the rows in kernel order, so that each block's are consecutive (one block: in the order asked)
    order = None if n <= _CHUNK else np.argsort(flat, kind="stable")
    wanted = flat if order is None else flat[order]
    cum = np.empty((flat.size, 2 * C))
    own = np.empty((flat.size, 2 * C))

    def put(out: np.ndarray, source: np.ndarray, lo: int, hi: int, take: np.ndarray) -> None:
        if order is None:
            np.take(source, take, axis=0, out=out)
        else:
            out[order[lo:hi]] = source[take]

    carry = np.zeros(2 * C)
    at_k = 0  # next position of `wanted` to fill
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        # row i + 1: kernel lo + i's own added seconds and joules, then the running sum through it; row 0: the
        # carry, the sum before the block
        running = np.empty((hi - lo + 1, 2 * C))
        block = running[1:]
        np.subtract(t[lo:hi], at[lo:hi, None], out=block[:, :C])
        np.subtract(e[lo:hi], ae[lo:hi, None], out=block[:, C:])
        block[:, C:] /= power
        stop = flat.size if order is None else int(np.searchsorted(wanted, hi, side="left"))
        take = wanted[at_k:stop] - lo
        put(own, block, at_k, stop, take)
        running[0] = carry
        block[0] += carry
        np.cumsum(block, axis=0, out=block)
        put(cum, running, at_k, stop, take)  # the sum before kernel k: row k - lo
        carry = running[-1].copy()
        at_k = stop
    return cum.reshape(*rows.shape, 2 * C), own.reshape(*rows.shape, 2 * C)


class StepLookahead:
    """Binned look-ahead of one step on a planning model (see the module docstring).

    Computed once per kernel context (:func:`kernel_contexts`); the per-kernel views index through
    ``context``. Arrays named ``*_by_context`` have a row per context.

    Args:
        t_tab: ``(n, C)`` seconds per kernel and configuration.
        e_tab: ``(n, C)`` joules per kernel and configuration.
        auto_time_s: ``(n,)`` auto-clock seconds per kernel.
        auto_energy_j: ``(n,)`` auto-clock joules per kernel.
        latency_s: Switching latency.
        configs: The action set (``ClockConfig`` per column).
        share_contexts: Compute once per context (default); ``False`` computes every kernel on its own.
        kernel_groups: ``KernelTrace.unique_index`` of the step, if known (see :func:`table_rows`).
    """

    def __init__(
        self,
        t_tab: np.ndarray,
        e_tab: np.ndarray,
        auto_time_s: np.ndarray,
        auto_energy_j: np.ndarray,
        latency_s: float,
        configs: Sequence,
        share_contexts: bool = True,
        kernel_groups: tuple[Sequence[int], np.ndarray] | None = None,
    ) -> None:
        t = np.asarray(t_tab, float)
        e = np.asarray(e_tab, float)
        at = np.asarray(auto_time_s, float)
        ae = np.asarray(auto_energy_j, float)
        n, C = t.shape
        self.n, self.C = n, C
        edges, inv = _bin_geometry(float(latency_s))
        self.row_ids = table_rows(t, e, at, ae, kernel_groups)
        """Per kernel the number of its row of the planning model (equal rows, equal numbers)."""
        if share_contexts:
            self.context, self.first = kernel_contexts(t, e, at, ae, float(edges[-1]), self.row_ids)
        else:
            self.context, self.first = np.arange(n), np.arange(n)
        power = float(ae.sum() / max(at.sum(), 1e-12))
        start = np.concatenate([[0.0], np.cumsum(at)])
        # kernels over the horizon from each context's first one: what the context's kernels share
        self.span = np.minimum(np.searchsorted(start, start[self.first] + edges[-1], side="left"), n) - self.first
        q = np.minimum(start[self.first, None] + edges[None, :], start[n])  # (U, N_BINS + 1) auto-time points
        pos = np.interp(q, start, np.arange(n + 1.0))  # fractional kernel index of each point
        i0 = np.minimum(np.floor(pos).astype(np.int64), n - 1)
        # cumulative added time and energy up to each point: (U, N_BINS + 1, 2C)
        cum, added = _running_added(t, e, at, ae, power, i0)
        upto = cum
        part = added
        part *= (pos - i0)[..., None]  # (in place: a broadcast operand first is several times slower)
        upto += part
        # differences of the cumulative sums in float64; the (small) bin values from here on in float32
        U = len(self.first)
        bins = np.empty((U, N_BINS, 2 * C), dtype=np.float32)
        np.subtract(upto[:, 1:], upto[:, :-1], out=bins, casting="same_kind")
        bins *= inv[None, :, None]
        # per context and configuration: added time, then added energy, per bin
        self.by_context = np.empty((U, C, 2 * N_BINS), dtype=np.float32)
        parts = self.by_context.reshape(U, C, 2, N_BINS)
        np.copyto(parts, bins.reshape(U, N_BINS, 2, C).transpose(0, 3, 2, 1))
        self.time_by_context, self.energy_by_context = parts[:, :, 0], parts[:, :, 1]
        self.occupancy_by_context = (np.diff(q, axis=1) * inv[None, :]).astype(np.float32)
        # window sums per context, for ranking candidates within each memory clock's group of configurations
        self._groups = _group_indexers(tuple(c.mem_mhz for c in configs))
        # per memory clock's group: the window sums of added time and energy, (U, W, group size) each, in float64
        # (near-ties between candidates stay resolved), contiguous for the ranking
        win = upto[:, _WINDOW_ENDS] - upto[:, _WINDOW_START, None]
        self._win = [
            (np.ascontiguousarray(win[..., :C][..., g]), np.ascontiguousarray(win[..., C:][..., g]))
            for g in self._groups
        ]
        self.n_slots = 1 + len(CANDIDATE_PRICE_FACTORS) * len(CANDIDATE_WINDOWS) * len(self._groups)
        self._candidates: dict[float, np.ndarray] = {}

    @property
    def n_contexts(self) -> int:
        return len(self.first)

    @cached_property
    def occupancy(self) -> np.ndarray:
        """``(n, N_BINS)`` the share of each bin inside the step, per kernel."""
        return self.occupancy_by_context[self.context]

    @property
    def bin_time(self) -> np.ndarray:
        """``(n, N_BINS, C)`` seconds added (over auto) per second of each bin, per kernel."""
        return self.time_by_context[self.context].transpose(0, 2, 1)

    @property
    def bin_energy(self) -> np.ndarray:
        """``(n, N_BINS, C)`` joules added per (mean auto power × second) of each bin, per kernel."""
        return self.energy_by_context[self.context].transpose(0, 2, 1)

    def context_candidates(self, price_rel: float) -> np.ndarray:
        """``(U, n_slots)`` configuration index of every slot in every context, at price ``price_rel``."""
        key = float(price_rel)
        got = self._candidates.get(key)
        if got is None:
            U, G = self.n_contexts, len(self._groups)
            # slot 0: auto; then per price factor, window and memory clock (in that order) the configuration of
            # least energy + price·time
            slots = np.empty((U, len(CANDIDATE_PRICE_FACTORS), len(CANDIDATE_WINDOWS), G), dtype=np.int64)
            for f, factor in enumerate(CANDIDATE_PRICE_FACTORS):
                for j, (g, (win_t, win_e)) in enumerate(zip(self._groups, self._win, strict=True)):
                    gain = win_t * (factor * key)
                    gain += win_e  # minus the gain: (U, W, group size)
                    best = gain.argmin(axis=2)
                    slots[:, f, :, j] = best + g.start if isinstance(g, slice) else g[best]
            got = np.concatenate([np.zeros((U, 1), dtype=np.int64), slots.reshape(U, -1)], axis=1)
            if len(self._candidates) > 64:
                self._candidates.clear()
            self._candidates[key] = got
        return got

    def candidates(self, price_rel: float) -> np.ndarray:
        """``(n, n_slots)`` configuration index of every slot at every kernel, at price ``price_rel``."""
        return self.context_candidates(price_rel)[self.context]

    def _rows(self, u: np.ndarray | int, configs: np.ndarray | int) -> np.ndarray:
        """``(..., 2 N_BINS)`` float32 rows of :attr:`by_context` per context ``u`` and configuration (broadcast
        together), gathered as whole rows of one axis (faster than indexing two)."""
        U, C, width = self.by_context.shape
        return np.take(self.by_context.reshape(U * C, width), np.multiply(u, C) + configs, axis=0)

    def gains_of(self, u: np.ndarray, configs: np.ndarray, price_rel: np.ndarray | float) -> np.ndarray:
        """Clipped gain per bin of ``configs`` in contexts ``u`` (broadcast together) at ``price_rel``."""
        return _gain(self._rows(u, configs), price_rel)

    def clipped(self, u: np.ndarray | int, configs: np.ndarray | int) -> np.ndarray:
        """``(..., 2 N_BINS)`` float32 per context ``u`` and configuration (broadcast together): the added time
        per bin clipped to [-1, 2], then the added energy per bin clipped to [-1, 1]."""
        return _clip(self._rows(u, configs))

    def bin_features(
        self,
        u: np.ndarray | int,
        configs: np.ndarray | int,
        price_rel: float,
        extra: int = 0,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """``(..., 3 N_BINS + extra)`` float32 per context ``u`` and configuration (broadcast together): the
        clipped gain per bin at ``price_rel`` (:meth:`gains_of`), the clipped added time and energy per bin
        (:meth:`clipped`), then ``extra`` zeros (for the caller to fill) — written into ``out`` (``(..., 3
        N_BINS)``, ``extra`` ignored) where given."""
        got = self._rows(u, configs)
        if out is None:
            out = np.zeros((*got.shape[:-1], 3 * N_BINS + extra), dtype=np.float32)
        _gain(got, price_rel, out=out[..., :N_BINS])
        _clip(got, out=out[..., N_BINS : 3 * N_BINS])
        return out

    def slot_features(
        self,
        k: np.ndarray,
        slots: np.ndarray,
        current: np.ndarray,
        price_rel: np.ndarray,
        config_feat: np.ndarray,
        contexts: bool = False,
    ) -> np.ndarray:
        """``(R, n_slots, SLOT_WIDTH)`` for ``R`` decisions (kernels ``k`` — contexts, with ``contexts`` —,
        slot configurations ``slots`` ``(R, n_slots)``, configurations in effect ``current`` — ``-1`` flags
        none — and prices): per slot its configuration's features, then per bin its gain, added time and
        added energy (clipped), and whether it is the configuration in effect."""
        uu = (np.asarray(k) if contexts else self.context[k])[:, None]
        out = np.empty((*slots.shape, SLOT_WIDTH))
        out[..., :4] = config_feat[slots]
        out[..., 4 : 4 + N_BINS] = self.gains_of(uu, slots, np.asarray(price_rel, float)[:, None, None])
        out[..., 4 + N_BINS : 4 + 3 * N_BINS] = self.clipped(uu, slots)
        out[..., -1] = slots == np.asarray(current)[:, None]
        return out

    def current_features(self, k: np.ndarray, current: np.ndarray, price_rel: np.ndarray) -> np.ndarray:
        """``(R, CURRENT_WIDTH)``: gain, added time and added energy per bin of the configurations in effect."""
        u = self.context[k]
        out = np.empty((len(current), CURRENT_WIDTH))
        out[:, :N_BINS] = self.gains_of(u, current, np.asarray(price_rel, float)[:, None])
        out[:, N_BINS:] = self.clipped(u, current)
        return out
