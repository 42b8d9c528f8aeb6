"""The search over the policy's best choices: at one price of time, the plan of least ``energy + price·time`` on
the planning model among the plans that take, at every decision, one of the policy's ``ranks`` best choices
(its actions ranked by their logits; :data:`SEARCH_RANKS` of them by default, of 26 on a GPU with three memory
clocks).

Found exactly, by dynamic programming backwards over the decisions ``(kernel, configuration in effect)``: a
decision keeps the configuration in effect for its kernel, or issues a switch that flies for the switching
latency (landing where :func:`rlclock.backends.switching.landing_table` says), and the next decision comes
at the first kernel after. The result is a set of overrides for :func:`rlclock.policy.rollout.rollout`, which
then plans and accounts the step as always; every request still comes from the policy.

Why six: leave-one-model-out on the real steps of the simulated RTX 3080 Ti (30 ms switches), the search over
the first two choices reached 80-100 % of the exact optimum's saving, over the six best 94-100 % (docs/agent.md);
the decisions it weighs, and so its time, grow with the choices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlclock.backends.switching import landing_table
from rlclock.policy.inputs import DECISION_BLOCK, RANKED, FirstLayerEvaluator, PreparedStep, PriceTables
from rlclock.policy.step import PlanningStep

SEARCH_RANKS = 6
"""How many of the policy's best choices the search weighs at every decision by default."""


@dataclass(frozen=True)
class Searched:
    """The search's result at one price.

    Attributes:
        overrides: ``(n, C)`` per kernel and configuration in effect the policy's action to take where one other
            than its first choice leads to the least ``energy + price·time`` of the step, -1 where its first
            choice does (better-ranked choices win ties): the price's entry of
            :data:`rlclock.policy.rollout.Overrides`.
        objective_j: That least ``energy + price·time`` from the step's start, joules (as the search adds it up:
            running sums where the rollout adds kernel by kernel).
    """

    overrides: np.ndarray
    objective_j: float


def ranked_choices(
    evaluator: FirstLayerEvaluator,
    step: PlanningStep,
    prepared: PreparedStep,
    price_rel: float,
    ranks: int = SEARCH_RANKS,
) -> Searched:
    """The plan of least ``energy + price·time`` among those taking one of the policy's ``ranks`` best choices (2
    to :data:`~rlclock.policy.inputs.RANKED`; all of them where it has fewer actions) at every decision, at one
    price (module docstring)."""
    if not 2 <= ranks <= RANKED:
        raise ValueError(f"the search weighs 2 to {RANKED} of the policy's choices, not {ranks}.")
    n, C = step.time_s.shape
    price = float(price_rel)
    weight = price * step.mean_power_w  # J per s
    t, e = step.time_s, step.energy_j
    if prepared.landings is None:
        prefix = np.concatenate([np.zeros((1, C)), np.cumsum(t, axis=0)])
        prepared.landings = landing_table(prefix, t, step.latency_s)
    land, frac = prepared.landings
    held, actions, requests = _choices(evaluator, prepared, evaluator.price_tables(prepared, price), land, ranks)
    width = len(held)
    pos = np.zeros(C, dtype=np.int64)
    pos[held] = np.arange(width)
    rows, cols = np.arange(n)[:, None], np.arange(width)[None, :]
    land, frac = land[:, held], frac[:, held]
    landed = land < n
    at = np.minimum(land, n - 1)  # the kernel a switch lands in (the last one if it does not land)
    share = np.where(landed, frac, 1.0)
    lag = e + weight * t  # each kernel's energy + price·time at each configuration
    before = np.concatenate([np.zeros((1, width)), np.cumsum(lag[:, held], axis=0)])
    flown = before[at, cols] - before[rows, cols] + share * lag[at, held]  # a switch's flight, but its landing's
    after_switch = np.where(landed, at + 1, n)
    moves = []
    for request in requests:  # first choice, second choice, …: (next decision's value index, cost)
        stay = (request == held[None, :]) | (step.latency_s <= 0.0)
        cost = np.where(stay, lag[rows, request], flown + (1 - share) * lag[at, request])
        after = np.where(stay, rows + 1, after_switch)
        moves.append((after * width + pos[request], cost))
    value, rank = _backwards(moves, n, width)
    out = np.full((n, C), -1, dtype=np.int64)
    out[:, held] = np.where(rank > 0, np.take_along_axis(actions, rank[None], axis=0)[0], -1)
    return Searched(out, float(value[0, pos[0]]))


def _backwards(moves: list[tuple[np.ndarray, np.ndarray]], n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``(value, rank)``: per decision ``(kernel, held configuration)`` the least cost from there to the step's
    end (``(n + 1, width)``, 0 at the end) and the rank of the choice that reaches it (``(n, width)``; 0: the
    first, which wins ties, then the second, …), from each choice's next decision (a flat index into ``value``)
    and cost.

    A choice that keeps the configuration in effect leads to the next kernel's decision in the same column,
    ``v[k] = min(b[k], a[k] + v[k + 1])`` (``a``: the keeping choice's cost, ``b``: the best switch's cost plus
    its value); a switch lands further on. The step is cut, from its end, into stretches from which every
    switch lands past the stretch's end, so that ``b`` is known there; in a stretch, the recurrences of all
    columns are solved at once by a scan of their compositions, ``(a1, b1)∘(a2, b2) = (a1 + a2, min(b1, a1 +
    b2))``."""
    value = np.zeros((n + 1, width))
    flat = value.reshape(-1)
    rank = np.zeros((n, width), dtype=np.int64)
    same = (np.arange(n)[:, None] + 1) * width + np.arange(width)[None, :]
    keeps = [after == same for after, _ in moves]
    lands = (
        np.min([np.where(k, n, after // width) for k, (after, _) in zip(keeps, moves, strict=True)], axis=0)
        .min(axis=1)
        .tolist()
    )
    hi = n
    while hi > 0:  # the stretch [lo, hi): every switch from it lands at hi or later
        lo = hi - 1
        while lo > 0 and lands[lo - 1] >= hi:
            lo -= 1
        part = slice(lo, hi)
        kept = [k[part] for k in keeps]
        switches = [
            np.where(k, np.inf, cost[part] + flat[np.where(k, 0, after[part])])
            for k, (after, cost) in zip(kept, moves, strict=True)
        ]
        a = np.full((hi - lo, width), np.inf)  # the cost of keeping (the best-ranked choice that keeps)
        for k, (_, cost) in reversed(list(zip(kept, moves, strict=True))):
            a = np.where(k, cost[part], a)
        b = np.min(switches, axis=0)
        step = 1
        while step < hi - lo:  # a[i], b[i] compose the stretch's recurrences from i to i + 2·step - 1
            b[:-step] = np.minimum(b[:-step], a[:-step] + b[step:])
            a[:-step] = a[:-step] + a[step:]
            step *= 2
        value[part] = np.minimum(b, a + value[hi])
        after = value[lo + 1 : hi + 1]
        rank[part] = np.argmin(
            [
                np.where(k, cost[part] + after, switch)  # ties: the first minimum, best-ranked
                for k, (_, cost), switch in zip(kept, moves, switches, strict=True)
            ],
            axis=0,
        )
        hi = lo
    return value, rank


def _choices(
    evaluator: FirstLayerEvaluator, prepared: PreparedStep, tab: PriceTables, land: np.ndarray, ranks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(held, actions, requests)``: the configurations held at the decisions that the policy's ``ranks`` best
    choices reach from the step's start (auto), and per rank, kernel and held configuration (``(ranks, n,
    len(held))`` each) the policy's action there and the configuration it requests (at a decision they do not
    reach: keep, and what keeps). ``land``: the kernel a switch issued at each kernel with each configuration in
    effect lands in (:func:`~rlclock.backends.switching.landing_table`).

    The decisions reached are found in one sweep over the step, a block of kernels at a time (every move goes
    forward): in each block, for each configuration entered there (at the step's start, where a switch to it
    lands, or by a run of keeps from the block before), the runs of kernels on which one of the choices keeps
    it, and where their switches land. The policy decides only there (in
    :data:`~rlclock.policy.inputs.DECISION_BLOCK` blocks of situations): a configuration held for a few
    kernels costs a few blocks, not the step."""
    n, C = land.shape
    situation = prepared.situation
    reached = np.zeros((n, C), dtype=bool)
    entered = np.zeros((n, C), dtype=bool)  # reached by a switch landing (or the start), not followed yet
    entered[0, 0] = True
    carried = np.zeros(C, dtype=bool)  # a run of keeps reaching the block's first kernel
    for lo in range(0, n, DECISION_BLOCK):
        hi = min(n, lo + DECISION_BLOCK)
        index = np.arange(hi - lo)
        onwards = np.zeros(C, dtype=bool)  # a run of keeps reaching the next block
        while True:
            todo = np.flatnonzero((entered[lo:hi] & ~reached[lo:hi]).any(axis=0) | carried)
            if not todo.size:
                break
            for c in todo.tolist():
                decided, _ = evaluator.decide(prepared, tab, c, situation[lo:hi])
                chosen = _request(prepared, tab, c, decided.ranked[situation[lo:hi], :ranks], lo, hi)  # (B, ranks)
                keeps = (chosen == c).any(axis=1)
                starts = entered[lo:hi, c] & ~reached[lo:hi, c]
                starts[0] |= carried[c]
                carried[c] = False
                # kernel i is reached when a run starts at or before it and every kernel from there keeps c
                breaks = np.concatenate([[False], ~keeps[:-1]])
                last_start = np.maximum.accumulate(np.where(starts, index, -1))
                last_break = np.maximum.accumulate(np.where(breaks, index, -1))
                new = (last_start >= 0) & (last_start >= last_break) & ~reached[lo:hi, c]
                reached[lo:hi, c] |= new
                onwards[c] |= bool(new[-1] and keeps[-1])
                switch, rank = np.nonzero(new[:, None] & (chosen != c))
                lands = land[lo + switch, c] + 1
                inside = lands < n
                entered[lands[inside], chosen[switch, rank][inside]] = True
        carried = onwards
    held = np.flatnonzero(reached.any(axis=0))
    keep = prepared.look.n_slots
    acts = [
        np.where(reached[:, c, None], tab.decided[c].ranked[situation, :ranks], keep)  # unreached: keep
        for c in held.tolist()
    ]
    reqs = [_request(prepared, tab, c, a, 0, n) for c, a in zip(held.tolist(), acts, strict=True)]
    return held, np.stack(acts).transpose(2, 1, 0), np.stack(reqs).transpose(2, 1, 0)  # (ranks, n, len(held))


def _request(
    prepared: PreparedStep, tab: PriceTables, current: int, action: np.ndarray, lo: int, hi: int
) -> np.ndarray:
    """Per kernel ``lo .. hi - 1`` the configuration ``action`` (``(hi - lo,)``, or ``(hi - lo, ranks)``) requests
    with ``current`` in effect (keep: ``current``)."""
    keep = prepared.look.n_slots
    context = prepared.look.context[lo:hi].reshape((-1,) + (1,) * (action.ndim - 1))
    slot = tab.candidates[context, np.clip(action, 0, keep - 1)]
    return np.where(action >= keep, current, slot)
