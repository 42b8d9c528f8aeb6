"""Warm-start a PPO policy by imitating the Lagrangian optimum (DAgger).

On a simulated GPU the best schedule for ``energy + p·time`` at a price of time ``p`` is exact and cheap:
dynamic programming over the switching DAG (:class:`~rlclock.solve.optimum.SwitchDag`) gives, at every decision
state (kernel ``i``, configuration ``c`` in effect, nothing in flight), the request that minimises the rest of
the step — stay at ``c`` or switch to ``b``, counting the switch's landing. The exact budget-constrained
optimum is such a schedule at its multiplier ``λ*`` (:mod:`rlclock.solve.optimum`). The policy observes the
episode's price (relative to the step's mean auto power), so it learns the whole trade-off curve; a planner
then meets any budget by choosing the price. The expert may switch only to the step's candidate slots (what
the policy can request; :mod:`rlclock.observation.lookahead`), and its choice is labelled as the first slot
holding its target, or keep. DAgger (Ross et al., AISTATS 2011) rolls out a mix of the expert and the
learner, labels every decision state the learner visits with the expert's choice, and trains the policy
network on everything gathered so far with cross-entropy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rlclock.env import EpisodeTables, KernelClockEnv
from rlclock.solve.optimum import SwitchDag

PRICE_LADDER = (0.5, 0.65, 0.8, 0.9, 1.0, 1.1, 1.2, 1.35, 1.5, 1.75, 2.1, 2.6)
"""Prices of time the expert teaches, relative to a step's mean auto power (the exact optima of the
simulated RTX 3080 Ti family price time at 1.0-1.5 of it at a 1 % budget)."""


class LagrangianExpert:
    """The ``energy + p·time`` optimum's choice at any decision state of one workload, for prices ``p``
    relative to the step's mean auto power (solved lazily, once per price). With ``restricted`` (the
    default) the optimum may switch only to the step's candidate slots at that price
    (:class:`~rlclock.observation.lookahead.StepLookahead`) — what a policy can request."""

    def __init__(self, episode: EpisodeTables, restricted: bool = True) -> None:
        self.mean_power_w = episode.mean_power_w
        self.look = episode.look
        self.restricted = restricted
        self.dag = SwitchDag(episode.time_s, episode.energy_j, episode.backend.latency_s)
        self._choices: dict[float, np.ndarray] = {}

    def choices(self, price_rel: float) -> np.ndarray:
        """``(n, C)`` table: the request at node ``(i, c)`` (``-1``: stay) at price ``price_rel``."""
        if price_rel not in self._choices:
            targets = self.look.candidates(price_rel) if self.restricted else None
            _, ch = self.dag.backward(price_rel * self.mean_power_w, want_path=True, targets=targets)
            self._choices[price_rel] = ch
        return self._choices[price_rel]

    def action(self, i: int, current: int, price_rel: float, keep: int) -> int:
        """The slot to request at kernel ``i`` with ``current`` in effect and nothing in flight (the first
        slot holding the optimum's target), or ``keep`` where the optimum stays."""
        b = int(self.choices(price_rel)[i, current])
        if b < 0:
            return keep
        slots = np.flatnonzero(self.look.candidates(price_rel)[i] == b)
        if len(slots) == 0:
            raise ValueError(
                f"the expert's target {b} at kernel {i} is no candidate slot; label a slot policy with "
                "LagrangianExpert(episode, restricted=True)."
            )
        return int(slots[0])


@dataclass
class DaggerProgress:
    """Where an imitation stands after its last whole round: what a resumed run continues from.

    Attributes:
        rounds: Rounds done.
        report: Their figures.
        obs: Every decision state gathered so far, ``(k, obs_size)``.
        act: The expert's label of each, ``(k,)``.
        rng_state: The mixing generator's state (``numpy.random.Generator.bit_generator.state``).
        optimizer: The imitation's optimiser (torch), whose moments go on.
    """

    rounds: int
    report: DaggerReport
    obs: np.ndarray
    act: np.ndarray
    rng_state: dict
    optimizer: object


@dataclass
class DaggerReport:
    """What imitation did: per iteration the samples gathered and the learner's agreement with the expert."""

    samples: list[int]
    agreement: list[float]

    def round_metrics(self, rounds: int) -> dict[str, float]:
        """The last round's figures in the ``imitation/`` namespace (with ``imitation/round``, 1-based)."""
        return {
            "imitation/round": len(self.samples),
            "imitation/rounds": rounds,
            "imitation/samples": self.samples[-1],
            "imitation/agreement": self.agreement[-1],
        }


def dagger(
    model,
    env: KernelClockEnv,
    iterations: int = 6,
    epochs: int = 30,
    batch_size: int = 512,
    learning_rate: float = 1e-3,
    beta_decay: float = 0.5,
    prices_per_round: int = 2,
    min_updates: int = 500,
    seed: int = 0,
    class_balance: float = 0.0,
    on_round: Callable[[DaggerReport], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_visit: Callable[[], None] | None = None,
    optimizer=None,
    resume_from: DaggerProgress | None = None,
    on_checkpoint: Callable[[DaggerProgress], None] | None = None,
) -> DaggerReport:
    """Train ``model``'s policy network to imitate the expert on every workload of ``env``.

    Args:
        model: A stable-baselines3 PPO whose policy acts on ``env``'s observations.
        env: The (single) env; its workloads are all visited every iteration.
        iterations: DAgger rounds (the first rolls out the expert alone).
        prices_per_round: Prices of time (drawn from :data:`PRICE_LADDER`) each workload is rolled out at
            per round.
        epochs: Gradient steps per round, in passes over the round's new data (minibatches are drawn from
            everything gathered so far).
        min_updates: At least this many gradient steps per round (one workload gives little data).
        batch_size: Minibatch size.
        learning_rate: Adam learning rate.
        beta_decay: Probability of following the expert in round ``m`` is ``beta_decay ** m``.
        seed: Seed of the expert/learner mixing.
        class_balance: Weigh each label by its action's frequency among all labels gathered to the power
            ``-class_balance`` (0: plain cross-entropy; 1: each action requested weighs the same in all).
        on_round: Called after every round with the report so far (progress, metrics).
        should_stop: Asked between episodes and gradient steps; True ends the imitation there.
        on_visit: Called after every episode (``iterations × workloads × prices_per_round`` of them in all).
        optimizer: The optimiser of the policy network (default: a new Adam at ``learning_rate``).
        resume_from: Go on after these rounds (their data, generator state and the optimiser's moments, which
            ``optimizer`` must already hold).
        on_checkpoint: Called after every whole round with where the imitation stands (to save it).
    """
    import torch

    from rlclock.agents.export import weights_from_sb3

    rng = np.random.default_rng(seed)
    experts = [LagrangianExpert(ep) for ep in env.episodes]
    obs_data: list[np.ndarray] = []
    act_data: list[int] = []
    report = DaggerReport([], [])
    policy = model.policy
    opt = optimizer if optimizer is not None else torch.optim.Adam(policy.parameters(), lr=learning_rate)
    first = 0
    if resume_from is not None:
        rng.bit_generator.state = resume_from.rng_state
        obs_data, act_data = list(resume_from.obs), [int(a) for a in resume_from.act]
        report = DaggerReport(list(resume_from.report.samples), list(resume_from.report.agreement))
        first = resume_from.rounds
    k_prices = min(prices_per_round, len(PRICE_LADDER))
    for m in range(first, iterations):
        beta = beta_decay**m
        learner = weights_from_sb3(model)
        agree = total = 0
        for w, expert in enumerate(experts):
            for rel in rng.choice(PRICE_LADDER, size=k_prices, replace=False):
                if should_stop():
                    return report
                a, t = _visit(env, w, expert, float(rel), learner, beta, rng, obs_data, act_data)
                agree, total = agree + a, total + t
                if on_visit is not None:
                    on_visit()
        report.samples.append(len(act_data))
        report.agreement.append(agree / max(total, 1))
        X = torch.as_tensor(np.asarray(obs_data), dtype=torch.float32)
        Y = torch.as_tensor(np.asarray(act_data), dtype=torch.long)
        n = X.shape[0]
        if n > 0:
            _fit(
                policy,
                opt,
                X,
                Y,
                n - (report.samples[-2] if len(report.samples) > 1 else 0),
                epochs,
                batch_size,
                min_updates,
                should_stop,
                label_weights(Y, class_balance),
            )
        if on_round is not None:
            on_round(report)
        if on_checkpoint is not None and not should_stop():
            on_checkpoint(
                DaggerProgress(
                    m + 1,
                    report,
                    np.asarray(obs_data, dtype=np.float32),
                    np.asarray(act_data, dtype=np.int64),
                    dict(rng.bit_generator.state),
                    opt,
                )
            )
    return report


def label_weights(labels, class_balance: float):
    """Per action, the cross-entropy weight of its labels: frequency ``** -class_balance``, scaled so that the
    labels' mean weight is 1 (``None`` for plain cross-entropy)."""
    import torch

    if class_balance <= 0:
        return None
    counts = torch.bincount(labels).to(torch.float64)
    w = torch.where(counts > 0, counts.clamp(min=1) ** -class_balance, torch.zeros_like(counts))
    w *= labels.numel() / float((w * counts).sum())
    return w.to(torch.float32)


def _fit(
    policy,
    opt,
    X,
    Y,
    new: int,
    epochs: int,
    batch_size: int,
    min_updates: int,
    should_stop: Callable[[], bool],
    weight=None,
) -> None:
    """One round's gradient steps: ``epochs`` passes' worth over the round's ``new`` samples (at least
    ``min_updates``), minibatches drawn from all ``X, Y`` gathered so far; until ``should_stop()``;
    ``weight``: per-action weights of the cross-entropy (:func:`label_weights`)."""
    import torch

    n = X.shape[0]
    updates, target = 0, max(epochs * -(-new // batch_size), min_updates)
    while updates < target:
        perm = torch.randperm(n)
        for s in range(0, n, batch_size):
            if updates >= target or should_stop():
                return
            updates += 1
            idx = perm[s : s + batch_size]
            logits = _logits(policy, X[idx])
            if weight is not None and weight.shape[0] < logits.shape[1]:
                weight = torch.nn.functional.pad(weight, (0, logits.shape[1] - weight.shape[0]))
            loss = torch.nn.functional.cross_entropy(logits, Y[idx], weight=weight)
            opt.zero_grad()
            loss.backward()
            opt.step()


def _logits(policy, obs):
    """The action logits of an SB3 ``ActorCriticPolicy`` (what its categorical distribution is built on)."""
    return policy.action_net(policy.mlp_extractor.forward_actor(policy.extract_features(obs)))


def _visit(
    env: KernelClockEnv,
    workload: int,
    expert: LagrangianExpert,
    price_rel: float,
    learner,
    beta: float,
    rng: np.random.Generator,
    obs_data: list[np.ndarray],
    act_data: list[int],
) -> tuple[int, int]:
    """One episode of ``workload`` at ``price_rel``, following the expert with probability ``beta`` per
    decision and the learner otherwise; every decision state is labelled with the expert's choice.
    Returns (decisions where the learner agreed, decisions)."""
    obs, _ = env.reset(options={"workload": workload, "time_price": price_rel * expert.mean_power_w})
    core = env._core
    keep = env.keep_action
    agree = total = 0
    done = False
    while not done:
        if core.state.pending[0] < 0:
            cur = int(core.state.current[0])
            a_exp = expert.action(int(core.k[0]), cur, price_rel, keep)
            a_learn = int(learner.act(obs[None])[0])
            obs_data.append(obs.copy())
            act_data.append(a_exp)
            # the same request either way: the same configuration, or keeping what is in effect
            agree += int(core.resolve(np.array([a_learn]))[0] == core.resolve(np.array([a_exp]))[0])
            total += 1
            a = a_exp if rng.random() < beta else a_learn
        else:
            a = keep
        obs, _, done, _, _ = env.step(a)
    return agree, total
