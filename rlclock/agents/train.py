"""Train a PPO clock policy on simulated envs; write a run folder that describes itself and a checkpoint.

Run folder ``runs/<name>-s<seed>-<date>/``:

====================  ==========================================================================
``config.yaml``       resolved env spec(s), agent recipe, command line, git revision, versions
``policy/``           the deployable checkpoint (``policy.safetensors`` + ``meta.json``)
``sb3_model.zip``     the stable-baselines3 model, for resuming
``metrics.csv``       the evaluation history (steps, saving, slowdown, switches, fraction of optimum)
``summary.json``      final figures per training workload and the training wall time
``pareto.png``        the policy beside the baselines (first workload)
``timeline.png``      the policy's clocks over one step (first workload)
====================  ==========================================================================
"""

from __future__ import annotations

import csv
import json
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlclock.agents.evaluate import PolicyEvaluation, evaluate_policy
from rlclock.agents.tracking import Tracker, sb3_writer
from rlclock.config import EnvSpec
from rlclock.config.recipe import AgentConfig
from rlclock.env import EpisodeTables
from rlclock.observation.layout import obs_size
from rlclock.observation.lookahead import n_slots
from rlclock.policy import DEFAULT_PRICE_REL, ClockPolicy, policy_meta, save_checkpoint
from rlclock.policy.checkpoint import SB3_FILE
from rlclock.version import __version__


@dataclass
class TrainResult:
    """What a training run produced."""

    run_dir: Path
    checkpoint: Path
    evaluations: list[PolicyEvaluation]
    wall_s: float
    history: list[dict[str, Any]] = field(default_factory=list)


def git_revision() -> str:
    """The commit of the rlclock checkout this code runs from (``unknown`` for an installed package)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return "unknown"
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def typical_price_rel(episodes: Sequence[EpisodeTables]) -> float:
    """Median price of time of the episodes' rewards over their steps' mean auto power
    (``DEFAULT_PRICE_REL`` if none prices time): where a plan without a budget starts."""
    rel = [ep.time_price / ep.mean_power_w for ep in episodes if ep.time_price > 0]
    return float(np.median(rel)) if rel else DEFAULT_PRICE_REL


def _policy(model, specs: Sequence[EnvSpec], configs, lookahead: int, extra: dict[str, Any]) -> ClockPolicy:
    from rlclock.agents.export import weights_from_sb3

    s0 = specs[0]
    meta = policy_meta(s0.gpu, configs, lookahead, obs_size(lookahead, n_slots(configs)), s0.latency_s,
                       s0.reward.budget, extra)
    meta.update(format="rlclock.policy", version=1)
    if "price_rel" not in meta:
        from rlclock.env import episode_tables

        meta["price_rel"] = typical_price_rel([episode_tables(s) for s in specs])
    w = weights_from_sb3(model)
    meta["activation"] = w.activation
    return ClockPolicy(w, meta)


def train(specs: Sequence[EnvSpec], agent: AgentConfig, runs_dir: str | Path = "runs", name: str | None = None,
          track: bool = False, progress: bool = True, save_to: str | Path | None = None,
          eval_specs: Sequence[EnvSpec] | None = None, command: str | None = None,
          wandb_project: str | None = None, wandb_entity: str | None = None,
          wandb_group: str | None = None) -> TrainResult:
    """Train PPO on ``specs`` (one spec, or a family sharing GPU and action set).

    Args:
        specs: Env specs to train on (a family is sampled per episode).
        agent: The agent recipe.
        runs_dir: Parent folder of the run folder.
        name: Run name (default: the first spec's name, or ``family-<gpu>``).
        track: Log to Weights & Biases (offline unless configured; see :mod:`rlclock.agents.tracking`).
        progress: Show a progress bar.
        save_to: Also copy the checkpoint (and the SB3 zip) to this folder, e.g. ``checkpoints/<name>``.
        eval_specs: Specs evaluated during and after training (default: ``specs``).
        command: The command line to record (default: this process's).
        wandb_project: W&B project (default ``WANDB_PROJECT``, else ``rlclock``).
        wandb_entity: W&B entity (default ``WANDB_ENTITY``).
        wandb_group: W&B run group (default ``WANDB_RUN_GROUP``).
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import Logger, make_output_format
    from stable_baselines3.common.vec_env import VecMonitor

    from rlclock.agents.vec_env import KernelClockVecEnv

    specs = list(specs)
    eval_specs = list(eval_specs or specs)
    name = name or (specs[0].name if len(specs) == 1 else f"family-{specs[0].gpu.key}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(runs_dir) / f"{name}-s{agent.seed}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"name": name, "agent": agent.as_dict(), "envs": [dict(s.raw) for s in specs],
              "eval_envs": [s.name for s in eval_specs], "command": command or " ".join(sys.argv),
              "git": git_revision(), "rlclock": __version__, "python": platform.python_version(),
              "torch": str(torch.__version__)}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    torch.manual_seed(agent.seed)
    np.random.seed(agent.seed)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    proto = KernelClockVecEnv(agent.n_envs, specs, seed=agent.seed)
    vec = VecMonitor(proto)
    act = torch.nn.Tanh if agent.policy.activation == "tanh" else torch.nn.ReLU
    arch = list(agent.policy.net_arch)
    p = agent.ppo
    model = PPO("MlpPolicy", vec, learning_rate=p.learning_rate, n_steps=p.n_steps, batch_size=p.batch_size,
                n_epochs=p.n_epochs, gamma=p.gamma, gae_lambda=p.gae_lambda, clip_range=p.clip_range,
                ent_coef=p.ent_coef, vf_coef=p.vf_coef, max_grad_norm=p.max_grad_norm, seed=agent.seed,
                policy_kwargs={"net_arch": {"pi": arch, "vf": arch}, "activation_fn": act}, device="cpu", verbose=0)
    tracker = Tracker(track, name=run_dir.name, config=config, folder=run_dir, tags=[specs[0].gpu.key],
                      project=wandb_project, entity=wandb_entity, group=wandb_group)
    formats = [make_output_format("csv", str(run_dir))]
    if tracker.enabled:
        formats.append(sb3_writer(tracker))
    model.set_logger(Logger(str(run_dir), formats))
    lookahead = specs[0].lookahead
    price_rel = typical_price_rel(proto.episodes)
    history: list[dict[str, Any]] = []
    started = time.perf_counter()

    def run_eval(step: int) -> list[PolicyEvaluation]:
        pol = _policy(model, specs, proto.configs, lookahead, {"price_rel": price_rel})
        evs = [evaluate_policy(pol, s) for s in eval_specs]
        row: dict[str, Any] = {"step": step, "wall_s": time.perf_counter() - started}
        for ev in evs:
            for k, v in ev.metrics(f"energy/{ev.env}/" if len(evs) > 1 else "energy/").items():
                row[k] = v
        if len(evs) > 1:
            row["energy/mean_fraction_of_optimum"] = _mean_fraction(evs)
            row["energy/mean_slowdown_pct"] = float(np.mean([ev.slowdown_pct for ev in evs]))
        history.append(row)
        tracker.log(row, step=step)
        return evs

    class EvalEvery(BaseCallback):
        def __init__(self, every: int, keep: _Best | None) -> None:
            super().__init__()
            self.every = every
            self.next = every
            self.keep = keep

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next:
                self.next += self.every
                evs = run_eval(self.num_timesteps)
                if self.keep is not None:
                    self.keep.offer(evs, model)
            return True

    im = agent.imitation
    if im.iterations > 0:
        from rlclock.agents.imitation import DaggerReport, dagger
        from rlclock.env import KernelClockEnv

        def on_round(report: DaggerReport) -> None:
            metrics = report.round_metrics(im.iterations)
            tracker.log_round(metrics)
            if progress:
                print(f"imitation round {len(report.samples)}/{im.iterations}: {report.samples[-1]} samples, learner "
                      f"agreed with the expert on {100 * report.agreement[-1]:.1f} % of its decisions before this "
                      "round")

        dagger(model, KernelClockEnv(specs), iterations=im.iterations, epochs=im.epochs, batch_size=im.batch_size,
               learning_rate=im.learning_rate, beta_decay=im.beta_decay,
               prices_per_round=im.prices_per_round, min_updates=im.min_updates, seed=agent.seed, on_round=on_round)
        best = _Best(run_eval(0), model)
    else:
        best = None
    if agent.timesteps > 0:
        cb = EvalEvery(agent.eval.every_steps, best)
        model.learn(total_timesteps=agent.timesteps, callback=cb, progress_bar=progress)
    wall = time.perf_counter() - started
    evs = run_eval(model.num_timesteps)
    if best is not None and best.better_than(evs):
        best.restore(model)
        evs = best.evs
    figures = {ev.env: {"saving_pct": ev.saving_pct, "slowdown_pct": ev.slowdown_pct,
                        "switches": ev.evaluation.switches, "optimum_saving_pct": 100 * ev.optimum_saving,
                        "fraction_of_optimum": ev.fraction_of_optimum} for ev in evs}
    extra = {"training": {"timesteps": int(model.num_timesteps), "wall_s": wall, "seed": agent.seed,
                          "envs": [s.name for s in specs], "figures": figures, "git": config["git"],
                          "agent": agent.as_dict()},
             "price_rel": price_rel,
             "env_spec": dict(specs[0].raw)}
    pol = _policy(model, specs, proto.configs, lookahead, extra)
    ckpt = save_checkpoint(run_dir / "policy", pol.weights, {k: v for k, v in pol.meta.items()
                                                              if k not in ("format", "version", "activation")})
    model.save(str(run_dir / SB3_FILE))
    _write_history(run_dir / "metrics.csv", history)
    (run_dir / "summary.json").write_text(json.dumps({"name": name, "wall_s": wall, "figures": figures}, indent=1))
    final_step = int(model.num_timesteps)
    _plots(run_dir, pol, eval_specs[0], tracker, final_step)
    tracker.table("energy/schedule", ["kernel", "op", "requested", "in effect", "time_ms", "energy_j"],
                  _schedule_rows(pol, eval_specs[0]), step=final_step)
    tracker.artifact(ckpt, f"policy-{name}", metadata=figures, extra_files=[run_dir / SB3_FILE])
    tracker.finish()
    if save_to is not None:
        dest = Path(save_to)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(ckpt, dest)
        shutil.copy2(run_dir / SB3_FILE, dest / SB3_FILE)
    vec.close()
    return TrainResult(run_dir, ckpt, evs, wall, history)


def score(evs: Sequence[PolicyEvaluation]) -> float:
    """How good a policy is on its evaluation workloads: the mean fraction of the optimum's saving, minus 20 ×
    the mean slowdown over the budget (0.5 pp over costs 0.1, i.e. ten points of the optimum's saving)."""
    frac = _mean_fraction(evs)
    over = float(np.mean([max(0.0, ev.evaluation.slowdown - ev.budget) for ev in evs]))
    return frac - 20.0 * over


def _mean_fraction(evs: Sequence[PolicyEvaluation]) -> float:
    """Mean fraction of the optimum's saving over the workloads where the optimum saves anything (a workload
    whose optimum is auto has no fraction to average; 0 if none has)."""
    fr = [ev.fraction_of_optimum for ev in evs if np.isfinite(ev.fraction_of_optimum)]
    return float(np.mean(fr)) if fr else 0.0


class _Best:
    """The best policy weights seen (by :func:`score`), so a run ends with its best policy, not its last."""

    def __init__(self, evs: Sequence[PolicyEvaluation], model) -> None:
        self.evs = list(evs)
        self.value = score(evs)
        self.state = {k: v.clone() for k, v in model.policy.state_dict().items()}

    def offer(self, evs: Sequence[PolicyEvaluation], model) -> None:
        if score(evs) > self.value:
            self.evs, self.value = list(evs), score(evs)
            self.state = {k: v.clone() for k, v in model.policy.state_dict().items()}

    def better_than(self, evs: Sequence[PolicyEvaluation]) -> bool:
        return self.value > score(evs)

    def restore(self, model) -> None:
        model.policy.load_state_dict(self.state)


def _write_history(path: Path, history: list[dict[str, Any]]) -> None:
    if not history:
        return
    keys = list(dict.fromkeys(k for row in history for k in row))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(history)


def _schedule_rows(policy: ClockPolicy, spec: EnvSpec) -> list[list[Any]]:
    from rlclock.env import episode_tables

    backend = episode_tables(spec).backend
    sched = policy.schedule(backend.trace, backend=backend, budget=spec.reward.budget)
    run = backend.run(sched)
    return [[i, backend.trace[i].op, str(backend.configs[int(run.requested_index[i])]),
             str(backend.configs[int(run.config_index[i])]), 1e3 * float(run.kernel_time_s[i]),
             float(run.kernel_energy_j[i])] for i in range(len(backend.trace))]


def _plots(run_dir: Path, policy: ClockPolicy, spec: EnvSpec, tracker: Tracker, step: int) -> None:
    from rlclock.env import episode_tables
    from rlclock.plots import clock_timeline, pareto_plot
    from rlclock.solve.baselines import run_baselines
    from rlclock.solve.evaluation import evaluate

    backend = episode_tables(spec).backend
    sched = policy.schedule(backend.trace, backend=backend, budget=spec.reward.budget)
    ev = evaluate(sched, backend)
    points = {r.name: (100 * r.evaluation.slowdown, -100 * r.evaluation.saving)
              for r in run_baselines(backend, spec.reward.budget) if r.name != "auto"}
    points["PPO policy"] = (100 * ev.slowdown, -100 * ev.saving)
    searched = evaluate(policy.schedule(backend.trace, backend=backend, budget=spec.reward.budget, search=True),
                        backend)
    points["PPO policy + search"] = (100 * searched.slowdown, -100 * searched.saving)
    pareto = pareto_plot(run_dir / "pareto.png", points, budget_pct=100 * spec.reward.budget,
                         title=f"{spec.name}: policy vs baselines (latency {1e3 * backend.latency_s:g} ms)")
    timeline = clock_timeline(run_dir / "timeline.png", ev.run, backend.spec, title=f"{spec.name}: policy clocks")
    tracker.image("plots/pareto", pareto, step=step)
    tracker.image("plots/clock_timeline", timeline, step=step)
