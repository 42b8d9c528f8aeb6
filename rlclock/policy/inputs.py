"""The incremental first-layer evaluator: a decision's first-layer sum from parts computed once and reused.

A decision of the policy is ``logits(W1 · obs + b1)``. The observation (:mod:`rlclock.observation.layout`)
is made of parts that change at very different rates, so the first layer's sum is assembled from them:

* per **situation** (kernels with the same kernel window, look-ahead context and time left — repeated layers
  share them; :func:`situations`) the part that depends on neither the price nor the state: the kernel
  window, the bins' occupancy, the time left, the latency and the bias (:meth:`FirstLayerEvaluator.prepare`);
* per **price of time** and look-ahead context, the slots' features but their in-effect flags
  (:class:`PriceTables`), filled :data:`CONTEXT_BLOCK` contexts at a time, and their sum with the situation's
  part :data:`DECISION_BLOCK` situations at a time, as rollouts reach them (:meth:`FirstLayerEvaluator.pre_rows`;
  of the step's 24 grid prices, most are visited at a few of their contexts);
* per price and **configuration in effect**, everything that depends on it — its bins, the in-effect flags of
  the slots holding it, its own features — filled :data:`CONTEXT_BLOCK` contexts at a time, the first time a
  rollout holds it in one of them (:meth:`FirstLayerEvaluator.now_rows`; a rollout visits a few contexts per
  configuration: about an eighth of them on a Qwen2 step).

The rest of the network runs on :data:`DECISION_BLOCK` situations at a time, per price and configuration in
effect (:meth:`FirstLayerEvaluator.decide`): a rollout mostly keeps the configuration in effect from one kernel
to the next, so the decisions of the kernels ahead are wanted next (matrix products instead of one product per
decision; the logits equal the one-by-one ones to rounding).

A decision is taken only with no switch in flight (a request then would be ignored), so the ``pending``,
``in_flight`` and ``time_to_land`` state entries are zero at every decision and take no part. Every sum is the
same float arithmetic as the network on the env's observation (``tests/agents/test_agent.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from rlclock.dvfs.spec import GpuSpec
from rlclock.observation.features import (
    distinct_kernels,
    kernel_window,
    latency_feature,
    price_feature,
    remaining_feature,
)
from rlclock.observation.layout import CONFIG_WIDTH, ObservationLayout, config_features
from rlclock.observation.lookahead import CURRENT_WIDTH, SLOT_WIDTH, StepLookahead, distinct, n_slots
from rlclock.policy.network import PolicyWeights
from rlclock.policy.step import PlanningStep
from rlclock.schedule import ClockConfig

DECISION_BLOCK = 64
"""Situations whose decisions are computed together, at one price and configuration in effect: blocks of
consecutive situation numbers, the same for every rollout of a step, so that a decision's value does not depend
on which rollout asked for it first."""

RANKED = 8
"""How many of the policy's choices are kept per decision, best first (the search weighs up to this many)."""

CONTEXT_BLOCK = 64
"""Look-ahead contexts whose in-effect sums (:class:`NowRows`) are computed together: blocks of consecutive
context numbers, for the same reason as :data:`DECISION_BLOCK`."""


@dataclass(frozen=True)
class Decisions:
    """The policy's decisions at one price and configuration in effect, per situation (filled a block at a time).

    Attributes:
        ranked: ``(situations, min(RANKED, actions))`` the policy's choices, best first (``ranked[:, 0]``: the
            action, the argmax of the logits; ``ranked[:, 1]``: the argmax of the others, …); -1 where not
            computed yet.
    """

    ranked: np.ndarray

    @property
    def action(self) -> np.ndarray:
        """``(situations,)`` the action (a view of ``ranked``)."""
        return self.ranked[:, 0]

    @property
    def second(self) -> np.ndarray:
        """``(situations,)`` the second choice."""
        return self.ranked[:, 1]


@dataclass
class PriceTables:
    """What a decision reads at one price of time, per look-ahead context ``u`` (``U`` of them).

    Attributes:
        price_rel: The price of time over the step's mean auto power.
        candidates: ``(U, S)`` configuration of every slot.
        slot_part: ``(U, H)`` first-layer sum over the slots' features but their in-effect flags; a row is
            valid once its block of :data:`CONTEXT_BLOCK` contexts is done (``slot_done``).
        now: configuration → the first-layer sums over everything that depends on it being in effect
            (:class:`NowRows`).
        pre: ``(situations, H)`` the first layer's sum over everything but the configuration in effect; a row is
            valid once its block of :data:`DECISION_BLOCK` situations is done (``pre_done``;
            :meth:`FirstLayerEvaluator.pre_rows`).
        price_part: ``(H,)`` the first layer's price entry's part.
        slot_done: ``(context blocks,)`` which blocks of ``slot_part`` are filled.
        pre_done: ``(situation blocks,)`` which blocks of ``pre`` are filled.
        decided: configuration in effect → the policy's decisions there (:meth:`FirstLayerEvaluator.decide`).
    """

    price_rel: float
    candidates: np.ndarray
    slot_part: np.ndarray
    now: dict[int, NowRows]
    pre: np.ndarray
    price_part: np.ndarray
    slot_done: np.ndarray
    pre_done: np.ndarray
    decided: dict[int, Decisions] = field(default_factory=dict)


@dataclass(frozen=True)
class NowRows:
    """The first layer's sum over everything that depends on one configuration being in effect, per context, at
    one price: filled a :data:`CONTEXT_BLOCK` at a time (:meth:`FirstLayerEvaluator.now_rows`).

    Attributes:
        values: ``(U, H)`` float32; a row is valid once its block is ``done``.
        done: ``(blocks,)`` whether each block of contexts is filled.
    """

    values: np.ndarray
    done: np.ndarray


@dataclass
class PreparedStep:
    """What the rollouts of one step share (:meth:`FirstLayerEvaluator.prepare`).

    Attributes:
        base: ``(situations, H)`` first-layer sum over the price- and state-independent inputs.
        look: The step's binned look-ahead and candidate slots.
        per_price: price → :class:`PriceTables`.
        situation: ``(n,)`` per kernel its row of ``base`` (:func:`situations`).
        situation_context: ``(situations,)`` the look-ahead context of each.
        moves: ``(context, in effect, requested)`` → ``(kernels, seconds, joules)`` of the move a decision makes.
        landings: Where a switch issued at each kernel with each configuration in effect lands, and the share of
            that kernel at the old clocks (the switching rule's landing table; filled by the search).
    """

    base: np.ndarray
    look: StepLookahead
    per_price: dict[float, PriceTables]
    situation: np.ndarray
    situation_context: np.ndarray
    moves: dict[tuple[int, int, int], tuple[int, float, float]] = field(default_factory=dict)
    landings: tuple[np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True)
class FirstLayer:
    """The first layer's weights split by the observation's parts (columns as row-major matrices).

    Attributes:
        window: ``(window entries, H)`` float32, the kernel window.
        slots: ``(S · SLOT_WIDTH, H)`` float32, the slots.
        now: ``(CURRENT_WIDTH + S, H)`` float32, the in-effect bins, then each slot's in-effect flag.
        occupancy: ``(N_BINS, H)``, the bins' occupancy.
        in_effect: ``(CONFIG_WIDTH, H)``, the in-effect configuration's features.
        price: ``(H,)``, the price entry.
        time_left: ``(H,)``, the time-left entry.
        latency: ``(H,)``, the latency entry.
    """

    window: np.ndarray
    slots: np.ndarray
    now: np.ndarray
    occupancy: np.ndarray
    in_effect: np.ndarray
    price: np.ndarray
    time_left: np.ndarray
    latency: np.ndarray

    @classmethod
    def split(cls, w1: np.ndarray, layout: ObservationLayout) -> FirstLayer:
        """Split ``w1`` (``(H, obs_size)``) along ``layout``."""
        S = layout.n_slots
        w_slot = w1[:, layout.slots].reshape(-1, S, SLOT_WIDTH)
        flags = w_slot[:, :, -1].T  # each slot's "is the configuration in effect" entry
        return cls(
            window=np.ascontiguousarray(w1[:, layout.window].T, dtype=np.float32),
            slots=np.ascontiguousarray(w_slot.reshape(w1.shape[0], -1).T, dtype=np.float32),
            now=np.ascontiguousarray(np.vstack([w1[:, layout.current].T, flags]), dtype=np.float32),
            occupancy=np.ascontiguousarray(w1[:, layout.occupancy].T),
            in_effect=w1[:, layout.entry("in_effect")],
            price=w1[:, layout.index("price")].copy(),
            time_left=w1[:, layout.index("time_left")].copy(),
            latency=w1[:, layout.index("latency")].copy(),
        )


class FirstLayerEvaluator:
    """A policy network's decisions on a planning model, from first-layer parts computed once (module docstring).

    Args:
        weights: The network.
        gpu: The GPU the policy plans for.
        configs: Its action set.
        lookahead: Kernels after the current one in its window.
    """

    def __init__(self, weights: PolicyWeights, gpu: GpuSpec, configs: Sequence[ClockConfig], lookahead: int) -> None:
        self.weights = weights
        self.gpu = gpu
        self.configs = tuple(configs)
        self.lookahead = lookahead
        self.layout = ObservationLayout.of(lookahead, n_slots(self.configs))

    @cached_property
    def first(self) -> FirstLayer:
        return FirstLayer.split(self.weights.hidden[0][0], self.layout)

    @cached_property
    def config_feat(self) -> np.ndarray:
        """``(C, CONFIG_WIDTH)`` float32 features of the action set's configurations."""
        return config_features(self.gpu, self.configs)

    @cached_property
    def now_config(self) -> np.ndarray:
        """``(C, H)`` float32: the first layer's sum over each configuration's own features when in effect."""
        assert self.first.in_effect.shape[1] == CONFIG_WIDTH
        return (self.config_feat.astype(np.float64) @ self.first.in_effect.T).astype(np.float32)

    def logits(self, h: np.ndarray) -> np.ndarray:
        """The action logits of a decision from its first layer's pre-activation ``h`` (overwritten)."""
        return self.weights.logits_from_first(h)

    def prepare(self, step: PlanningStep) -> PreparedStep:
        """What every rollout of one step shares: its :class:`StepLookahead`, its situations and per situation
        the first layer's sum over the parts of the observation that depend on neither the price nor the state
        (kernel window, occupancy of the bins ahead, time left, latency, bias)."""
        K = self.lookahead
        first = self.first
        b1 = self.weights.hidden[0][1]
        look = StepLookahead(
            step.time_s,
            step.energy_j,
            step.auto_time_s,
            step.auto_energy_j,
            step.latency_s,
            self.configs,
            kernel_groups=step.trace.unique_index,
        )
        width = self.layout.window.stop
        kernels = distinct_kernels(step.trace, look.row_ids)
        window = kernel_window(
            step.trace,
            self.gpu,
            step.auto_time_s,
            step.auto_energy_j,
            step.latency_s,
            step.time_s,
            step.energy_j,
            self.configs,
            K,
            kernels,
        )
        prefix = np.concatenate([[0.0], np.cumsum(step.auto_time_s)])
        remaining = remaining_feature(float(prefix[-1]) - prefix[:-1], step.latency_s)
        situation, firsts = situations(kernels[0], look.context, remaining, K)
        # once per situation; the window product in float32, as the network was trained
        rows = window[firsts[:, None] + np.arange(K + 1)].reshape(len(firsts), width)
        base = (rows @ first.window).astype(np.float64)
        base += b1 + look.occupancy_by_context[look.context[firsts]] @ first.occupancy
        base += np.outer(remaining[firsts], first.time_left)
        base += latency_feature(step.latency_s) * first.latency
        return PreparedStep(base, look, {}, situation, look.context[firsts])

    def price_tables(self, prepared: PreparedStep, price_rel: float) -> PriceTables:
        """The :class:`PriceTables` of one price (made once per price and step; its sums are filled as rollouts
        reach them, :meth:`pre_rows`)."""
        got = prepared.per_price.get(price_rel)
        if got is None:
            look = prepared.look
            m, H = prepared.base.shape
            got = PriceTables(
                price_rel,
                look.context_candidates(price_rel),
                np.empty((look.n_contexts, H)),
                {},
                np.empty((m, H)),
                float(price_feature(price_rel)) * self.first.price,
                np.zeros(-(-look.n_contexts // CONTEXT_BLOCK), dtype=bool),
                np.zeros(-(-m // DECISION_BLOCK), dtype=bool),
            )
            if len(prepared.per_price) >= 32:
                prepared.per_price.clear()
            prepared.per_price[price_rel] = got
        return got

    def pre_rows(self, prepared: PreparedStep, tables: PriceTables, rows: np.ndarray | int) -> np.ndarray:
        """``tables.pre``, valid (at least) in situations ``rows`` (one or an array): their blocks of
        :data:`DECISION_BLOCK` situations are filled now if they were not before — each the situation's part
        plus the slots' part of its context (whose :data:`CONTEXT_BLOCK` blocks are filled first) plus the
        price's."""
        blocks = _missing(rows, tables.pre_done, DECISION_BLOCK)
        if not blocks.size:
            return tables.pre
        r = (blocks[:, None] * DECISION_BLOCK + np.arange(DECISION_BLOCK)).ravel()
        r = r[r < len(prepared.situation_context)]  # only the last block can be short, and it comes last
        contexts = prepared.situation_context[r]
        self._slot_rows(prepared.look, tables, contexts)
        pre = prepared.base[r] + tables.slot_part[contexts]
        pre += tables.price_part
        tables.pre[r] = pre
        tables.pre_done[blocks] = True
        return tables.pre

    def _slot_rows(self, look: StepLookahead, tables: PriceTables, contexts: np.ndarray) -> None:
        """Fill the blocks of ``tables.slot_part`` that hold ``contexts`` and are not filled yet (together)."""
        blocks = _missing(contexts, tables.slot_done, CONTEXT_BLOCK)
        if not blocks.size:
            return
        u = (blocks[:, None] * CONTEXT_BLOCK + np.arange(CONTEXT_BLOCK)).ravel()
        u = u[u < look.n_contexts]  # only the last block can be short, and it comes last
        cand = tables.candidates[u]
        feats = np.empty((len(u), look.n_slots, SLOT_WIDTH), dtype=np.float32)
        feats[..., :CONFIG_WIDTH] = self.config_feat[cand]
        look.bin_features(u[:, None], cand, tables.price_rel, out=feats[..., CONFIG_WIDTH:-1])
        feats[..., -1] = 0.0  # no slot is flagged as in effect: that is in `now`
        tables.slot_part[u] = (feats.reshape(len(u), -1) @ self.first.slots).astype(np.float64)
        tables.slot_done[blocks] = True

    def decide(
        self, prepared: PreparedStep, tables: PriceTables, config: int, wanted: np.ndarray
    ) -> tuple[Decisions, int]:
        """The policy's decisions at the tables' price with configuration ``config`` in effect, computed for
        (at least) the situations ``wanted``, and how many it computed now: those not computed before, with
        the rest of their :data:`DECISION_BLOCK`, as one batch through the network."""
        got = tables.decided.get(config)
        m = len(prepared.situation_context)
        if got is None:
            got = Decisions(np.full((m, min(RANKED, self.weights.head[1].shape[0])), -1, dtype=np.int64))
            tables.decided[config] = got
        missing = wanted[got.action[wanted] < 0]
        if not missing.size:
            return got, 0
        blocks = np.unique(missing // DECISION_BLOCK)
        rows = (blocks[:, None] * DECISION_BLOCK + np.arange(DECISION_BLOCK)).ravel()
        rows = rows[rows < m]  # only the step's last block can be short, and it comes last
        contexts = prepared.situation_context[rows]
        h = self.pre_rows(prepared, tables, rows)[rows]
        h += self.now_rows(prepared.look, tables, config, contexts)[contexts]
        z = np.empty((len(rows), self.weights.head[1].shape[0]))
        for lo in range(0, len(rows), DECISION_BLOCK):
            z[lo : lo + DECISION_BLOCK] = self.weights.logits_from_first_rows(h[lo : lo + DECISION_BLOCK])
        got.ranked[rows] = np.argsort(-z, axis=1, kind="stable")[:, : got.ranked.shape[1]]  # ties: lower first
        return got, len(rows)

    def now_rows(self, look: StepLookahead, tables: PriceTables, config: int, contexts: np.ndarray | int) -> np.ndarray:
        """``(U, H)``: the first layer's sum over everything that depends on configuration ``config`` being in
        effect, per context, at the tables' price — its bins, the in-effect flags of the slots holding it, its
        features —, valid (at least) in ``contexts`` (one or an array): their blocks are filled now if they were
        not before (kept in ``tables.now``)."""
        got = tables.now.get(config)
        if got is None:
            U = look.n_contexts
            got = NowRows(
                np.empty((U, self.first.now.shape[1]), dtype=np.float32), np.zeros(-(-U // CONTEXT_BLOCK), dtype=bool)
            )
            tables.now[config] = got
        S = look.n_slots
        for b in _missing(contexts, got.done, CONTEXT_BLOCK).tolist():
            u = slice(b * CONTEXT_BLOCK, min((b + 1) * CONTEXT_BLOCK, look.n_contexts))
            bins = look.bin_features(np.arange(u.start, u.stop), config, tables.price_rel, extra=S)
            bins[:, CURRENT_WIDTH:] = tables.candidates[u] == config
            now = bins @ self.first.now
            now += self.now_config[config]
            got.values[u] = now
            got.done[b] = True
        return got.values


def _missing(rows: np.ndarray | int, done: np.ndarray, block: int) -> np.ndarray:
    """The numbers of the blocks of ``block`` consecutive rows that hold ``rows`` (one or an array) and are not
    ``done`` yet, ascending."""
    if isinstance(rows, int | np.integer):
        b = int(rows) // block
        return np.empty(0, dtype=np.int64) if done.item(b) else np.array([b])
    blocks = np.unique(rows // block)
    return blocks[~done[blocks]]


_HASH_MULTIPLIERS = np.random.default_rng(0x51A7).integers(1, 2**63, size=64, dtype=np.uint64) | np.uint64(1)
"""Independent odd 64-bit multipliers for hashing situations (structured ones let small integer combinations
of the ids collide)."""


def situations(
    kernel_ids: np.ndarray, context: np.ndarray, remaining: np.ndarray, lookahead: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(situation, first)``: per kernel a number shared by the kernels that see the same inputs but for the
    state and the price — the same kernel window (``kernel_ids``: equal numbers for equal rows of the window,
    :func:`~rlclock.observation.features.distinct_kernels`), look-ahead context and time left (which saturates
    eight latencies before the end) —, and the first kernel of each, numbered in step order. Repeated layers
    share them, so their decisions are computed once per state (exact: the groups are checked element by
    element)."""
    n = len(context)
    padding = np.full(lookahead, int(kernel_ids.max()) + 1)  # the rows past the step's end: one more kind
    ids = np.concatenate([kernel_ids, padding]).astype(np.uint64)
    mults = _HASH_MULTIPLIERS[: lookahead + 3]
    with np.errstate(over="ignore"):
        key = context.astype(np.uint64) * mults[0] + remaining.view(np.uint64) * mults[1]
        for j in range(lookahead + 1):
            key += ids[j : j + n] * mults[j + 2]
    situation, first = distinct(key)
    order = np.argsort(first)  # situations numbered in step order (repeated layers: consecutive kernels, one block)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    situation, first = rank[situation], first[order]
    same = [context, remaining, *(ids[j : j + n] for j in range(lookahead + 1))]
    if not all(np.array_equal(x[first[situation]], x) for x in same):
        return np.arange(n), np.arange(n)
    return situation, first
