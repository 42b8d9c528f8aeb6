"""The decision loop: a step rolled forward through the switching rule, deciding where a decision can act.

At every kernel where nothing is in flight the policy picks a slot (or keep); a switch then flies
(:func:`rlclock.backends.switching.fly`) and nothing is decided until it lands. Decisions and the moves they
make are reused across repeated layers and across a step's rollouts (exact: the same inputs give the same
numbers). A run of kernels whose decisions keep the configuration in effect is found a window at a time from
decisions computed in blocks, and accounted as one move (its kernels' seconds and joules added in kernel
order, as one by one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from rlclock.backends.switching import fly
from rlclock.errors import CheckpointError
from rlclock.policy.inputs import FirstLayerEvaluator, PreparedStep, PriceTables
from rlclock.policy.step import PlanningStep

Overrides = dict[float, np.ndarray]
"""price → ``(n, C)`` per kernel and configuration in effect the action that replaces the policy's there when
the kernel decides at that price (-1: the policy's own; :func:`rlclock.policy.search.ranked_choices`)."""


@dataclass(frozen=True)
class Plan:
    """A planned step (a rollout's, or the planner's pick among its rollouts).

    Attributes:
        requests: Requested configuration index per kernel.
        time_s: The step's seconds on the planning model.
        energy_j: Its joules on the planning model.
        computed: Decisions the rollout computed (the others reused a repeated layer's, or an earlier
            rollout's); in blocks (:meth:`FirstLayerEvaluator.decide`), some of them ahead of kernels the
            rollout did not decide at.
        power_limit_w: The board power limit the plan runs under, watts (``None``: the GPU's own; only the
            planner's whole-job stage names one, :mod:`rlclock.policy.whole_job`).
        name: What made it: ``"policy"``, or the whole-job plan that replaced the policy's (``"static 1410@3201"``,
            ``"power-limit 650 W"``).
        runs: The configuration each kernel runs at when the plan was judged as a controller executes it
            (:class:`~rlclock.backends.executable.Execution`; then ``time_s`` and ``energy_j`` are that judgement's),
            ``None`` when it was judged by its requests alone.
    """

    requests: np.ndarray
    time_s: float
    energy_j: float
    computed: int
    power_limit_w: float | None = None
    name: str = "policy"
    runs: np.ndarray | None = None

    def objective(self, weight_j_per_s: float) -> float:
        """``energy + weight · time``, joules."""
        return self.energy_j + weight_j_per_s * self.time_s


def rollout(
    evaluator: FirstLayerEvaluator,
    step: PlanningStep,
    price_rel: float | np.ndarray,
    prepared: PreparedStep | None = None,
    timings: list[float] | None = None,
    first_layer: list[np.ndarray] | None = None,
    overrides: Overrides | None = None,
    start: int = 0,
) -> Plan:
    """The decision loop (numpy only) at a price of time ``price_rel`` (J/s per watt of mean auto power; one
    for the step or one per kernel).

    ``step`` holds the planning model's tables (they give the kernels' clock response, the look-ahead bins,
    the candidate slots and the plan's accounting). ``prepared`` is :meth:`FirstLayerEvaluator.prepare` of the
    step, when the caller rolls it out at several prices (it keeps what each price needs). ``timings``
    receives the seconds spent per decision, ``first_layer`` the first layer's input-side sum ``W1 · obs + b1``
    at each decision (for checking against the env's observations); either makes the loop compute every
    decision on its own. ``overrides`` replaces the policy's action at some kernels and configurations in
    effect, per price (:func:`rlclock.policy.search.ranked_choices`). ``start``: the first kernel the policy
    decides at; the kernels before it run at auto and request nothing (:func:`rlclock.policy.planner.start_later`).
    """
    n = step.n
    C = step.time_s.shape[1]
    latency_s = step.latency_s
    if prepared is None:
        prepared = evaluator.prepare(step)
    price = np.asarray(price_rel, dtype=float)
    if price.shape not in ((), (n,)) or not np.all(np.isfinite(price)) or np.any(price < 0):
        raise CheckpointError(f"price of time {price_rel!r}: need one finite price >= 0 or one per kernel ({n}).")
    if not 0 <= start <= n:
        raise CheckpointError(f"start kernel {start!r}: need 0 <= start <= {n}.")
    prices = np.broadcast_to(price, (n,))
    look = prepared.look
    levels, which_array = np.unique(prices, return_inverse=True)
    tables = [evaluator.price_tables(prepared, float(p)) for p in levels]
    replaced = [(overrides or {}).get(float(p)) for p in levels]
    if any(r is not None and r.shape != (n, C) for r in replaced):
        raise CheckpointError(f"overrides: need one action per kernel and configuration, ({n}, {C}).")
    which = which_array.tolist()
    # where each run of kernels at one price ends
    level_ends = [*(np.flatnonzero(np.diff(which_array)) + 1).tolist(), n]
    situation, context = prepared.situation.item, look.context.item
    # a decision depends on the kernel's inputs, the price and the configuration in effect only, and the
    # move it makes (the kernels it covers, their time and energy) on its context, the configuration in
    # effect and the one requested, while those kernels lie within the context's span: kernels of repeated
    # layers, and later rollouts of the step, reuse both unless each decision is recorded
    reuse = first_layer is None and timings is None
    moves = prepared.moves if reuse else {}
    keeps = _KeepRuns(evaluator, step, prepared, tables, replaced) if reuse else None
    span = look.span.item
    keep = look.n_slots  # the action that issues nothing
    t_at, e_at = step.time_s.item, step.energy_j.item
    clock = time.perf_counter
    held: list[int] = []  # the configuration requested over each move, and the kernels it covers
    covers: list[int] = []
    cur, k, total_t, total_e, computed, run = 0, 0, 0.0, 0.0, 0, 0
    if start:  # the kernels before the policy's first decision run at auto, added in kernel order
        total_t = float(np.cumsum(step.time_s[:start, 0])[-1])
        total_e = float(np.cumsum(step.energy_j[:start, 0])[-1])
        held.append(0)
        covers.append(start)
        k = start
    while k < n:  # one pass per decision that issues a switch (or, deciding one by one, per decision)
        t0 = clock() if timings is not None else 0.0
        level = which[k]
        tab = tables[level]
        s, u = situation(k), context(k)
        if keeps is not None:
            # the kernels from here on (at this price) whose decision keeps the configuration in effect run
            # there, one kernel per decision
            while level_ends[run] <= k:
                run += 1
            kept, got = keeps.run(level, cur, k, level_ends[run])
            computed += got
            if kept:
                total_t, total_e = keeps.account(cur, k, kept, total_t, total_e)
                held.append(cur)
                covers.append(kept)
                k += kept
                continue
            action = tab.decided[cur].action.item(s)
        else:
            h = evaluator.pre_rows(prepared, tab, s)[s] + evaluator.now_rows(look, tab, cur, u)[u]
            if first_layer is not None:
                first_layer.append(h.copy())
            action = int(evaluator.logits(h).argmax())
            computed += 1
        over = replaced[level]
        if over is not None and over.item(k, cur) >= 0:
            action = over.item(k, cur)
        a = cur if action >= keep else tab.candidates.item(u, action)
        if timings is not None:
            timings.append(clock() - t0)
        move = moves.get((u, cur, a))
        if move is None:
            if a == cur or latency_s <= 0.0:  # nothing in flight: the kernel runs at what is in effect
                j, dt, de = k + 1, t_at(k, a), e_at(k, a)
            else:
                j, _, dt, de = fly(t_at, e_at, n, k, cur, a, latency_s)
            if reuse and j - k <= span(u):
                moves[(u, cur, a)] = (j - k, dt, de)
        else:
            j, dt, de = move
            j += k
        cur = a
        total_t += dt
        total_e += de
        held.append(cur)
        covers.append(j - k)
        k = j
    return Plan(np.repeat(np.asarray(held, dtype=np.int64), covers), total_t, total_e, computed)


_SCALAR_RUN = 8
"""Kernels a run of kept configurations is followed one by one before it is followed a window at a time."""


class _KeepRuns:
    """The runs of kernels whose decisions keep the configuration in effect, found a window of kernels at a
    time from decisions computed in blocks (:meth:`FirstLayerEvaluator.decide`), and their accounting."""

    def __init__(
        self,
        evaluator: FirstLayerEvaluator,
        step: PlanningStep,
        prepared: PreparedStep,
        tables: list[PriceTables],
        replaced: list[np.ndarray | None],
    ) -> None:
        self.evaluator = evaluator
        self.step = step
        self.prepared = prepared
        self.tables = tables
        self.replaced = replaced
        self.keep = prepared.look.n_slots

    def run(self, level: int, cur: int, k: int, stop: int) -> tuple[int, int]:
        """``(kept, computed)``: how many kernels from ``k`` on (before ``stop``) decide to keep ``cur`` in
        effect at price ``level``, and the decisions computed to find out (those up to the first that does
        not keep are then computed too). Kernel by kernel while their decisions are known (short runs, as
        between frequent switches), then a window at a time."""
        tab = self.tables[level]
        over = self.replaced[level]
        decided = tab.decided.get(cur)
        situation, context, candidates = self.prepared.situation, self.prepared.look.context, tab.candidates
        kept = 0
        if decided is not None:
            known = decided.action
            while kept < _SCALAR_RUN and k + kept < stop:
                a = known.item(situation.item(k + kept))
                if a < 0:
                    break
                if over is not None and over.item(k + kept, cur) >= 0:
                    a = over.item(k + kept, cur)
                if a < self.keep and candidates.item(context.item(k + kept), a) != cur:
                    return kept, 0
                kept += 1
        width, computed = 4 * _SCALAR_RUN, 0
        while k + kept < stop:
            lo, hi = k + kept, min(stop, k + kept + width)
            sits = situation[lo:hi]
            decided, got = self.evaluator.decide(self.prepared, tab, cur, sits)
            computed += got
            action = decided.action[sits]
            if over is not None:
                mine = over[lo:hi, cur]
                action = np.where(mine >= 0, mine, action)
            slot = candidates[context[lo:hi], np.minimum(action, self.keep - 1)]
            same = (action >= self.keep) | (slot == cur)
            m = hi - lo if same.all() else int(same.argmin())
            kept += m
            if m < hi - lo:
                break
            width *= 4
        return kept, computed

    def account(self, cur: int, k: int, kept: int, time_s: float, energy_j: float) -> tuple[float, float]:
        """The running totals after kernels ``k .. k + kept - 1`` run at ``cur``, added one at a time in kernel
        order (as kernel-by-kernel accounting adds them)."""
        if kept <= _SCALAR_RUN:
            t_at, e_at = self.step.time_s.item, self.step.energy_j.item
            for j in range(k, k + kept):
                time_s += t_at(j, cur)
                energy_j += e_at(j, cur)
            return time_s, energy_j
        t = np.concatenate(([time_s], self.step.time_s[k : k + kept, cur]))
        e = np.concatenate(([energy_j], self.step.energy_j[k : k + kept, cur]))
        return float(np.cumsum(t)[-1]), float(np.cumsum(e)[-1])
