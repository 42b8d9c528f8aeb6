"""The search over the policy's second choices: at one price of time, the plan of least ``energy + price·time``
on the planning model among the plans that take, at every decision, the policy's first or its second choice.

Found exactly, by dynamic programming backwards over the decisions ``(kernel, configuration in effect)``: a
decision keeps the configuration in effect for its kernel, or issues a switch that flies for the switching
latency (landing where :func:`rlclock.backends.switching.landing_table` says), and the next decision comes
at the first kernel after. The result is a set of overrides for :func:`rlclock.policy.rollout.rollout`, which
then plans and accounts the step as always; every request still comes from the policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlclock.backends.switching import landing_table
from rlclock.policy.inputs import DECISION_BLOCK, FirstLayerEvaluator, PreparedStep, PriceTables
from rlclock.policy.step import PlanningStep


@dataclass(frozen=True)
class Searched:
    """The search's result at one price.

    Attributes:
        overrides: ``(n, C)`` per kernel and configuration in effect the policy's second choice where taking it
            leads to the least ``energy + price·time`` of the step, -1 where its first choice does (first
            choices win ties): the price's entry of :data:`rlclock.policy.rollout.Overrides`.
        objective_j: That least ``energy + price·time`` from the step's start, joules (as the search adds it up:
            running sums where the rollout adds kernel by kernel).
    """

    overrides: np.ndarray
    objective_j: float


def second_choices(evaluator: FirstLayerEvaluator, step: PlanningStep, prepared: PreparedStep,
                   price_rel: float) -> Searched:
    """The plan of least ``energy + price·time`` among those taking the policy's first or second choice at every
    decision, at one price (module docstring)."""
    n, C = step.time_s.shape
    price = float(price_rel)
    weight = price * step.mean_power_w  # J per s
    t, e = step.time_s, step.energy_j
    if prepared.landings is None:
        prefix = np.concatenate([np.zeros((1, C)), np.cumsum(t, axis=0)])
        prepared.landings = landing_table(prefix, t, step.latency_s)
    land, frac = prepared.landings
    held, actions, requests = _choices(evaluator, prepared, evaluator.price_tables(prepared, price), land)
    width = len(held)
    pos = np.zeros(C, dtype=np.int64)
    pos[held] = np.arange(width)
    rows, cols = np.arange(n)[:, None], np.arange(width)[None, :]
    land, frac = land[:, held], frac[:, held]
    landed = land < n
    at = np.minimum(land, n - 1)  # the kernel a switch lands in (the last one if it does not land)
    share = np.where(landed, frac, 1.0)
    before_t, before_e = (np.concatenate([np.zeros((1, width)), np.cumsum(x[:, held], axis=0)]) for x in (t, e))
    moves = []
    for request in requests:  # first choice, second choice: (next decision's value index, cost)
        stay = (request == held[None, :]) | (step.latency_s <= 0.0)
        flight_t = before_t[at, cols] - before_t[rows, cols] + share * t[at, held] + (1 - share) * t[at, request]
        flight_e = before_e[at, cols] - before_e[rows, cols] + share * e[at, held] + (1 - share) * e[at, request]
        cost = np.where(stay, e[rows, request] + weight * t[rows, request], flight_e + weight * flight_t)
        after = np.where(stay, rows + 1, np.where(landed, at + 1, n))
        moves.append((after * width + pos[request], cost))
    value, second = _backwards(moves, n, width)
    out = np.full((n, C), -1, dtype=np.int64)
    out[:, held] = np.where(second, actions[1], -1)
    return Searched(out, float(value[0, pos[0]]))


def _backwards(moves: list[tuple[np.ndarray, np.ndarray]], n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """``(value, second)``: per decision ``(kernel, held configuration)`` the least cost from there to the step's
    end (``(n + 1, width)``, 0 at the end) and whether the second choice reaches it (``(n, width)``), from each
    choice's next decision (a flat index into ``value``) and cost.

    A choice that keeps the configuration in effect leads to the next kernel's decision in the same column,
    ``v[k] = min(b[k], a[k] + v[k + 1])`` (``a``: the keeping choice's cost, ``b``: the best switch's cost plus
    its value); a switch lands further on. The step is cut, from its end, into stretches from which every
    switch lands past the stretch's end, so that ``b`` is known there; in a stretch, the recurrences of all
    columns are solved at once by a scan of their compositions, ``(a1, b1)∘(a2, b2) = (a1 + a2, min(b1, a1 +
    b2))``."""
    (next1, cost1), (next2, cost2) = moves
    value = np.zeros((n + 1, width))
    flat = value.reshape(-1)
    second = np.zeros((n, width), dtype=bool)
    same = (np.arange(n)[:, None] + 1) * width + np.arange(width)[None, :]
    keeps1, keeps2 = next1 == same, next2 == same
    lands = np.minimum(np.where(keeps1, n, next1 // width), np.where(keeps2, n, next2 // width)).min(axis=1).tolist()
    hi = n
    while hi > 0:  # the stretch [lo, hi): every switch from it lands at hi or later
        lo = hi - 1
        while lo > 0 and lands[lo - 1] >= hi:
            lo -= 1
        part = slice(lo, hi)
        k1, k2 = keeps1[part], keeps2[part]
        switch1 = np.where(k1, np.inf, cost1[part] + flat[np.where(k1, 0, next1[part])])
        switch2 = np.where(k2, np.inf, cost2[part] + flat[np.where(k2, 0, next2[part])])
        a = np.where(k1, cost1[part], np.where(k2, cost2[part], np.inf))
        b = np.minimum(switch1, switch2)
        step = 1
        while step < hi - lo:  # a[i], b[i] compose the stretch's recurrences from i to i + 2·step - 1
            b[:-step] = np.minimum(b[:-step], a[:-step] + b[step:])
            a[:-step] = a[:-step] + a[step:]
            step *= 2
        value[part] = np.minimum(b, a + value[hi])
        after = value[lo + 1 : hi + 1]
        v1 = np.where(k1, cost1[part] + after, switch1)
        v2 = np.where(k2, cost2[part] + after, switch2)
        second[part] = v2 < v1
        hi = lo
    return value, second


def _choices(evaluator: FirstLayerEvaluator, prepared: PreparedStep, tab: PriceTables, land: np.ndarray
             ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``(held, actions, requests)``: the configurations held at the decisions that the policy's first and second
    choices reach from the step's start (auto), and per kernel and held configuration ``(n, len(held))`` the
    policy's first and second actions there and the configurations they request (at a decision they do not
    reach: keep, and what keeps). ``land``: the kernel a switch issued at each kernel with each configuration
    in effect lands in (:func:`~rlclock.backends.switching.landing_table`).

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
                first = _request(prepared, tab, c, decided.action[situation[lo:hi]], lo, hi)
                second = _request(prepared, tab, c, decided.second[situation[lo:hi]], lo, hi)
                keeps = (first == c) | (second == c)
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
                for request in (first, second):
                    switch = np.flatnonzero(new & (request != c))
                    lands = land[lo + switch, c] + 1
                    inside = lands < n
                    entered[lands[inside], request[switch][inside]] = True
        carried = onwards
    held = np.flatnonzero(reached.any(axis=0))
    actions, requests = [], []
    for which in ("action", "second"):
        columns = []
        for c in held.tolist():
            act = getattr(tab.decided[c], which)[situation]
            columns.append(np.where(reached[:, c], act, prepared.look.n_slots))  # unreached: keep
        actions.append(np.stack(columns, axis=1))
        requests.append(np.stack([_request(prepared, tab, c, actions[-1][:, i], 0, n)
                                  for i, c in enumerate(held.tolist())], axis=1))
    return held, (actions[0], actions[1]), (requests[0], requests[1])


def _request(prepared: PreparedStep, tab: PriceTables, current: int, action: np.ndarray, lo: int, hi: int
             ) -> np.ndarray:
    """Per kernel ``lo .. hi - 1`` the configuration ``action`` requests with ``current`` in effect (keep:
    ``current``)."""
    keep = prepared.look.n_slots
    slot = tab.candidates[prepared.look.context[lo:hi], np.clip(action, 0, keep - 1)]
    return np.where(action >= keep, current, slot)
