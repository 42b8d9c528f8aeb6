"""Warm-start a PPO policy by imitating the exact optimum (DAgger with a Lagrangian expert).

On a simulated GPU the exact latency-aware optimum of a training workload costs seconds
(:mod:`rlclock.optimum`), so the policy can learn from it before reinforcement learning refines it. The
expert at a decision state (kernel ``i``, configuration ``c`` in effect, nothing in flight, time spent so
far) picks the request that minimises ``energy + λ·time`` to the end of the step — stay at ``c`` or
switch to ``b``, counting the switch's landing — on the switching DAG
(:class:`~rlclock.optimum.SwitchDag`), with the lowest price of time ``λ`` whose remainder still fits
the budget left. DAgger (Ross et al., AISTATS 2011) rolls out a mix of
the expert and the learner, labels every decision state the learner visits with the expert's choice, and
trains the policy network on everything gathered so far with cross-entropy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rlclock.agents.evaluate import optimum_for
from rlclock.env import Episode, KernelClockEnv
from rlclock.optimum import SwitchDag


class LagrangianExpert:
    """The optimum's choice at any decision state of one workload, aware of the budget left.

    For a ladder of prices of time around the optimum's multiplier ``λ*`` the expert knows, at every node,
    the Lagrangian-optimal request and how long the rest of the step takes following it. At a state it
    takes the lowest price whose remainder still fits the time left in the budget — so behind schedule it
    buys time back, ahead of schedule it spends the slack on energy.
    """

    LADDER = (0.25, 0.4, 0.55, 0.7, 0.85, 1.0, 1.15, 1.35, 1.7, 2.2, 3.0, 4.5, 7.0, 12.0, 25.0)

    def __init__(self, episode: Episode) -> None:
        t, e = episode.time_s, episode.energy_j
        backend = episode.backend
        self.budget_s = episode.auto_total_s * (1.0 + episode.reward.budget)
        opt = optimum_for(backend, episode.reward.budget)
        self.optimum = opt
        self.dag = SwitchDag(t, e, backend.latency_s)
        base = opt.lam_j_per_s if opt.lam_j_per_s > 0 else float(e.sum() / t.sum()) * 0.05
        self.lams = [base * f for f in self.LADDER]
        self.choices = []
        self.times = []
        for lam in self.lams:
            _, ch = self.dag.backward(lam, want_path=True)
            self.choices.append(ch)
            self.times.append(self.dag.time_to_go(ch))

    def action(self, i: int, current: int, elapsed_s: float = 0.0) -> int:
        """Request at kernel ``i`` with ``current`` in effect, nothing in flight and ``elapsed_s`` spent so far."""
        left = self.budget_s - elapsed_s
        pick = len(self.lams) - 1
        for k in range(len(self.lams)):
            if self.times[k][i, current] <= left:
                pick = k
                break
        b = int(self.choices[pick][i, current])
        return current if b < 0 else b


@dataclass
class DaggerReport:
    """What imitation did: per iteration the samples gathered and the learner's agreement with the expert."""

    samples: list[int]
    agreement: list[float]


def dagger(model, env: KernelClockEnv, iterations: int = 6, epochs: int = 30, batch_size: int = 512,
           learning_rate: float = 1e-3, beta_decay: float = 0.5, seed: int = 0,
           log: Callable[[str], None] | None = None) -> DaggerReport:
    """Train ``model``'s policy network to imitate the expert on every workload of ``env``.

    Args:
        model: A stable-baselines3 PPO whose policy acts on ``env``'s observations.
        env: The (single) env; its workloads are all visited every iteration.
        iterations: DAgger rounds (the first rolls out the expert alone).
        epochs: Passes over the aggregated data per round.
        batch_size: Minibatch size.
        learning_rate: Adam learning rate.
        beta_decay: Probability of following the expert in round ``m`` is ``beta_decay ** m``.
        seed: Seed of the expert/learner mixing.
        log: Optional progress printer.
    """
    import torch

    rng = np.random.default_rng(seed)
    experts = [LagrangianExpert(ep) for ep in env.episodes]
    obs_data: list[np.ndarray] = []
    act_data: list[int] = []
    report = DaggerReport([], [])
    policy = model.policy
    opt = torch.optim.Adam(policy.parameters(), lr=learning_rate)
    for m in range(iterations):
        beta = beta_decay**m
        agree = total = 0
        for w, expert in enumerate(experts):
            obs, _ = env.reset(options={"workload": w})
            core = env._core
            done = False
            while not done:
                k = int(core.k[0])
                free = core.state.pending[0] < 0
                if free:
                    a_exp = expert.action(k, int(core.state.current[0]), float(core.time_s[0]))
                    a_learn = int(model.predict(obs, deterministic=True)[0])
                    obs_data.append(obs.copy())
                    act_data.append(a_exp)
                    agree += int(a_learn == a_exp)
                    total += 1
                    a = a_exp if rng.random() < beta else a_learn
                else:
                    a = int(core.state.pending[0])
                obs, _, done, _, _ = env.step(a)
        report.samples.append(len(act_data))
        report.agreement.append(agree / max(total, 1))
        X = torch.as_tensor(np.asarray(obs_data), dtype=torch.float32)
        Y = torch.as_tensor(np.asarray(act_data), dtype=torch.long)
        n = X.shape[0]
        for _ in range(epochs):
            perm = torch.randperm(n)
            for s in range(0, n, batch_size):
                idx = perm[s : s + batch_size]
                dist = policy.get_distribution(X[idx])
                loss = -dist.log_prob(Y[idx]).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        if log is not None:
            log(f"imitation round {m + 1}/{iterations}: {len(act_data)} samples, learner agreed with the expert on "
                f"{100 * report.agreement[-1]:.1f} % of its decisions before this round")
    return report


