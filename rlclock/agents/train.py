"""Train a PPO clock policy on simulated envs; write a run folder that describes itself and a checkpoint.

Run folder ``runs/<name>-s<seed>-<date>/``:

====================  ==========================================================================
``config.yaml``       resolved env spec(s), agent recipe, command line, git revision, versions
``policy/``           the deployable checkpoint (``policy.safetensors`` + ``meta.json``): the best policy so far
``state.json`` + …    the resume state (:mod:`rlclock.agents.state`: safetensors + JSON, no pickle), written
                      after every imitation round and every ``checkpoint_every`` PPO updates
``owner.json``        the process running it, with a heartbeat (:mod:`rlclock.agents.state`)
``sb3_model.zip``     the stable-baselines3 model at the end, for SB3's own tools (pickle; rlclock never reads it)
``metrics.csv``       the evaluation history (steps, saving, slowdown, switches, fraction of optimum)
``summary.json``      final figures per training workload and the training wall time of every segment
``pareto.png``        the policy beside the baselines (first workload)
``timeline.png``      the policy's clocks over one step (first workload)
====================  ==========================================================================

A run killed at any point (even ``kill -9``) is recognised as such — its ``summary.json`` still says
``running`` but no process owns it — and ``--resume`` continues it from its last state: the imitation rounds
not yet run, then PPO.
"""

from __future__ import annotations

import csv
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

from rlclock.agents.evaluate import PolicyEvaluation, evaluate_policy
from rlclock.agents.runs import StopOnSignal, create_run_folder, read_summary, write_summary
from rlclock.agents.state import (
    FIX,
    Owner,
    StateMeta,
    killed_note,
    load_state,
    optimizer_state,
    owner_of,
    random_state,
    restore_module,
    restore_optimizer,
    restore_random,
    running_owner,
    save_state,
)
from rlclock.agents.tracking import Tracker, sb3_writer, wandb_mode
from rlclock.config import EnvSpec
from rlclock.config.recipe import AgentConfig
from rlclock.env import EpisodeTables
from rlclock.errors import CheckpointError, SpecError
from rlclock.observation.layout import obs_size
from rlclock.observation.lookahead import n_slots
from rlclock.policy import DEFAULT_PRICE_REL, ClockPolicy, policy_meta, save_checkpoint
from rlclock.policy.checkpoint import SB3_FILE
from rlclock.validation import check_output_folder
from rlclock.version import __version__
from rlclock.yamlio import dump_yaml, read_yaml


@dataclass
class TrainResult:
    """What a training run produced.

    Attributes:
        run_dir: The run folder.
        checkpoint: The deployable checkpoint in it.
        evaluations: The saved policy's figures per evaluation workload (empty if never evaluated).
        wall_s: Training wall time, seconds.
        history: Every evaluation during training.
        status: ``finished`` or ``interrupted``.
        trained_by: ``PPO`` when PPO ran, ``imitation`` when only the warm start did.
    """

    run_dir: Path
    checkpoint: Path
    evaluations: list[PolicyEvaluation]
    wall_s: float
    history: list[dict[str, Any]] = field(default_factory=list)
    status: str = "finished"
    trained_by: str = "PPO"
    wandb_dir: Path | None = None
    wandb_mode: str = "disabled"
    note: str = ""


def git_revision() -> str:
    """The commit of the rlclock checkout this code runs from (``unknown`` for an installed package)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return "unknown"
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
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
    meta = policy_meta(
        s0.gpu, configs, lookahead, obs_size(lookahead, n_slots(configs)), s0.latency_s, s0.reward.budget, extra
    )
    meta.update(format="rlclock.policy", version=1)
    if "price_rel" not in meta:
        from rlclock.env import episode_tables

        meta["price_rel"] = typical_price_rel([episode_tables(s) for s in specs])
    w = weights_from_sb3(model)
    meta["activation"] = w.activation
    return ClockPolicy(w, meta)


def train(
    specs: Sequence[EnvSpec],
    agent: AgentConfig,
    runs_dir: str | Path = "runs",
    name: str | None = None,
    track: bool = False,
    progress: bool = True,
    save_to: str | Path | None = None,
    eval_specs: Sequence[EnvSpec] | None = None,
    command: str | None = None,
    wandb_project: str | None = None,
    wandb_entity: str | None = None,
    wandb_group: str | None = None,
    resume: str | Path | None = None,
) -> TrainResult:
    """Train PPO on ``specs`` (one spec, or a family sharing GPU and action set): imitation, then PPO, then the
    run folder's policy, figures and plots.

    The run always ends in a known state (:mod:`rlclock.agents.runs`): on SIGINT or SIGTERM during training
    the best policy so far is saved with ``"status": "interrupted"``; killed outright, its last state stays
    (module docstring). ``resume`` continues either.

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
        resume: A run folder to continue (:func:`resume_inputs` gives its ``specs``, ``agent`` and
            ``eval_specs``): from its last state, the imitation rounds not yet run, then PPO up to
            ``agent.timesteps`` in all.

    Raises:
        SpecError: An output cannot be written (checked before any work), tracking is misconfigured, or the run
            to resume is still running or already done.
    """
    import torch

    specs = list(specs)
    eval_specs = list(eval_specs or specs)
    name = name or (specs[0].name if len(specs) == 1 else f"family-{specs[0].gpu.key}")
    if track:
        wandb_mode()  # a bad WANDB_MODE is one line now, not after the run folder is made
    agent.check_fits(
        obs_size(specs[0].lookahead, n_slots(specs[0].configs())), n_slots(specs[0].configs()), agent.source
    )
    if save_to is not None:
        check_output_folder(save_to, "--save-checkpoint")
    note = ""
    if resume is not None:
        run_dir = Path(resume)
        note = resumable(run_dir, agent)
        if note:
            print(f"{run_dir}: {note}", flush=True)
        config = read_yaml(run_dir / "config.yaml", "run config")
        config["resumed"] = [*config.get("resumed", []), command or " ".join(sys.argv)]
    else:
        run_dir = create_run_folder(runs_dir, name, agent.seed)
        config = {
            "name": name,
            "agent": agent.as_dict(),
            "envs": [dict(s.raw) for s in specs],
            "env_sources": [s.source for s in specs],
            "eval_envs": [s.name for s in eval_specs],
            "eval_env_specs": [dict(s.raw) for s in eval_specs],
            "eval_env_sources": [s.source for s in eval_specs],
            "command": command or " ".join(sys.argv),
            "git": git_revision(),
            "rlclock": __version__,
            "python": platform.python_version(),
            "torch": str(torch.__version__),
        }
    wall = _Wall(_prior_wall_s(run_dir) if resume is not None else 0.0)
    with Owner(run_dir, wall), StopOnSignal() as stop:  # a signal from here on ends the run in a known state
        _atomic_text(run_dir / "config.yaml", dump_yaml(config))
        session: _Session | None = None
        tracker: Tracker | None = None
        try:
            write_summary(run_dir, name=name, status="running", folder=str(run_dir), wall_s=wall())
            tracker = Tracker(
                track,
                name=name,
                config=config,
                folder=run_dir,
                tags=[specs[0].gpu.key],
                project=wandb_project,
                entity=wandb_entity,
                group=wandb_group,
            )
            session = _Session(
                specs,
                eval_specs,
                agent,
                run_dir,
                tracker,
                progress,
                wall,
                load_state(run_dir) if resume is not None else None,
            )
            if progress:
                print(f"estimated on this machine: {session.estimate()}", flush=True)
            stop.graceful = True  # from here on there is a model to save
            if stop.interrupted:  # a signal before this point whose KeyboardInterrupt the code it hit swallowed
                raise KeyboardInterrupt(stop.signal_name)
            if session.imitation_left():
                write_summary(run_dir, phase="imitation")
                session.imitate(stop)
            if not stop.requested:
                write_summary(run_dir, phase="ppo")
                session.ppo(stop)
            stop.graceful = False  # the final figures and plots run to the end (or a signal ends them)
            result = session.finish("interrupted" if stop.requested else "finished", save_to, name)
            result.note = note
            return result
        except KeyboardInterrupt:
            stop.graceful = False
            if session is not None:
                session.finish("interrupted", save_to, name, final=False)
            else:
                write_summary(
                    run_dir, status="interrupted", wall_s=wall(), note="stopped before training began: no policy"
                )
                if tracker is not None:
                    tracker.finish()
            raise
        except BaseException as exc:
            write_summary(run_dir, status="failed", error=f"{type(exc).__name__}: {exc}", wall_s=wall())
            if tracker is not None:
                tracker.finish()
            raise


class _Wall:
    """The run's wall time: every earlier segment's, and this one's so far, seconds."""

    def __init__(self, before_s: float) -> None:
        self.before_s = before_s
        self.started = time.perf_counter()

    def __call__(self) -> float:
        return self.before_s + time.perf_counter() - self.started


def _prior_wall_s(run_dir: Path) -> float:
    """The wall time of a run's earlier segments: the most its state, its summary or its owner's last heartbeat
    recorded (a run killed outright spent the time since its last state too)."""
    seen = [read_summary(run_dir).get("wall_s"), (owner_of(run_dir) or {}).get("wall_s")]
    try:
        from rlclock.agents.state import read_state_meta

        meta = read_state_meta(run_dir, quiet=True)
        seen.append(meta.wall_s if meta is not None else None)
    except CheckpointError:
        pass
    return max([float(v) for v in seen if isinstance(v, (int, float)) and np.isfinite(v) and v >= 0] or [0.0])


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def resumable(run_dir: Path, agent: AgentConfig) -> str:
    """Check that a run folder can be continued now; a line saying how it ended when it was killed ("" else).

    Raises:
        SpecError: A live process runs it, or it finished with as many PPO steps as asked.
        CheckpointError: Its resume state is unreadable (checked here, before any work).
    """
    summary = read_summary(run_dir)
    status = summary.get("status")
    live = running_owner(run_dir)
    if live is not None:
        raise SpecError(
            f"run {run_dir} is still running ({live}).",
            "let it finish, or stop it with Ctrl-C or kill -INT (it saves its state), then resume.",
        )
    state = load_state(run_dir)
    done = state[0].timesteps if state is not None and state[0].phase == "ppo" else 0
    if status == "finished" and done >= agent.timesteps:
        raise SpecError(
            f"run {run_dir} finished with {done} PPO steps; --resume continues it only up to more.",
            f"give --timesteps above {done} to train it on.",
        )
    if status == "running":
        return f"the run was killed ({killed_note(run_dir)}); continuing from its last state" + (
            f" ({state[0].phase}, {state[0].imitation_rounds} imitation rounds, {state[0].timesteps} PPO steps)"
            if state is not None
            else " (none saved yet: from the start)"
        )
    return ""


def resume_inputs(run_dir: str | Path) -> tuple[list[EnvSpec], AgentConfig, list[EnvSpec]]:
    """The env specs, agent recipe and evaluation specs of a run folder (what ``train(resume=...)`` continues).

    Raises:
        SpecError: The folder is not a run folder written by ``rlclock train``, or its config is not one.
        CheckpointError: It was written by an rlclock that kept its model only in a pickle file.
    """
    from rlclock.agents.state import STATE_FILE
    from rlclock.config import parse_env_spec
    from rlclock.config.recipe import parse_agent_config
    from rlclock.policy.checkpoint import META_FILE

    folder = Path(run_dir)
    cfg_path = folder / "config.yaml"
    fix = "give --resume the run folder `rlclock train` printed (runs/<name>-s<seed>-<date>)."
    if not folder.is_dir():
        raise SpecError(f"{folder} is not a folder.", fix)
    if not cfg_path.is_file():
        what = " (it is a policy checkpoint: `rlclock evaluate` reads it)" if (folder / META_FILE).is_file() else ""
        raise SpecError(f"{folder} is not a run folder to resume: it has no config.yaml{what}.", fix)
    if (
        not (folder / STATE_FILE).is_file()
        and (folder / SB3_FILE).is_file()
        and read_summary(folder).get("status") != "running"
    ):
        raise CheckpointError(
            f"{folder} was written by an earlier rlclock: its model is only in {SB3_FILE}, which "
            "rlclock no longer loads (a pickle file can run code).",
            "start a new run with the env spec and recipe of its config.yaml.",
        )
    config = read_yaml(cfg_path, "run config")
    if not isinstance(config, dict):
        raise SpecError(f"{cfg_path}: not a config written by `rlclock train` (not a mapping).", fix)
    try:

        def specs_of(raws: Any, sources: Any) -> list[EnvSpec]:
            if not isinstance(raws, list) or not raws:
                raise TypeError("no env specs")
            return [parse_env_spec(raw, src) for raw, src in zip(raws, sources or ["<dict>"] * len(raws))]

        specs = specs_of(config["envs"], config.get("env_sources"))
        evals = specs_of(
            config.get("eval_env_specs", config["envs"]), config.get("eval_env_sources", config.get("env_sources"))
        )
        agent = parse_agent_config(config["agent"], str(cfg_path))
    except (KeyError, TypeError, AttributeError) as exc:
        raise SpecError(f"{cfg_path}: not a config written by `rlclock train` ({exc}).", fix) from None
    return specs, agent, evals


class _Session:
    """One training run's model, env, tracker and evaluation history (:func:`train`'s phases)."""

    def __init__(
        self,
        specs: list[EnvSpec],
        eval_specs: list[EnvSpec],
        agent: AgentConfig,
        run_dir: Path,
        tracker: Tracker,
        progress: bool,
        wall: _Wall,
        state: tuple[StateMeta, dict[str, np.ndarray]] | None = None,
    ) -> None:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.logger import CSVOutputFormat, Logger
        from stable_baselines3.common.vec_env import VecMonitor

        from rlclock.agents.vec_env import KernelClockSB3VecEnv

        self.specs, self.eval_specs, self.agent = specs, eval_specs, agent
        self.run_dir, self.tracker, self.progress = run_dir, tracker, progress
        from rlclock.env import episode_tables

        for spec in _bar(specs, progress, "tables", "workloads"):  # cached: the envs below reuse them
            episode_tables(spec)
        torch.manual_seed(agent.seed)
        np.random.seed(agent.seed)
        torch.set_num_threads(1)  # the networks are small: more threads only wait on each other
        self.proto = KernelClockSB3VecEnv(agent.n_envs, specs, seed=agent.seed)
        self.vec = VecMonitor(self.proto)
        act = torch.nn.Tanh if agent.policy.activation == "tanh" else torch.nn.ReLU
        arch = list(agent.policy.net_arch)
        p = agent.ppo
        self.model = PPO(
            "MlpPolicy",
            self.vec,
            learning_rate=p.learning_rate,
            n_steps=p.n_steps,
            batch_size=p.batch_size,
            n_epochs=p.n_epochs,
            gamma=p.gamma,
            gae_lambda=p.gae_lambda,
            clip_range=p.clip_range,
            ent_coef=p.ent_coef,
            vf_coef=p.vf_coef,
            max_grad_norm=p.max_grad_norm,
            seed=agent.seed,
            policy_kwargs={"net_arch": {"pi": arch, "vf": arch}, "activation_fn": act},
            device="cpu",
            verbose=0,
        )
        self.wall = wall
        self.state = state[0] if state is not None else None
        self.imitation_optimizer = torch.optim.Adam(self.model.policy.parameters(), lr=agent.imitation.learning_rate)
        self.dagger: Any = None  # where the imitation stands (DaggerProgress), once a round is done
        if state is not None:
            self._restore(*state)
        # SB3's training curves; a resumed run writes progress.2.csv, … beside the first one
        segments = len(list(run_dir.glob("progress*.csv")))
        formats: list[Any] = [
            CSVOutputFormat(str(run_dir / ("progress.csv" if segments == 0 else f"progress.{segments + 1}.csv")))
        ]
        if tracker.enabled:
            formats.append(sb3_writer(tracker))
        self.model.set_logger(Logger(str(run_dir), formats))
        self.price_rel = typical_price_rel(self.proto.episodes)
        self.history: list[dict[str, Any]] = _read_history(run_dir / "metrics.csv") if state is not None else []
        self.best: _Best | None = None
        if state is not None and state[0].best_score is not None:
            self.best = self._best_from(state[1])
        self.saved_at = int(self.model.num_timesteps)

    def _restore(self, meta: StateMeta, tensors: dict[str, np.ndarray]) -> None:
        """Where the run's last state left it: the policy's weights, the optimisers' moments, the counters, and
        for an imitation under way its data and generator."""
        from rlclock.agents.imitation import DaggerProgress, DaggerReport
        from rlclock.agents.state import STATE_FILE

        where = str(self.run_dir / STATE_FILE)
        restore_module(self.model.policy, tensors, "policy", where)
        restore_optimizer(self.model.policy.optimizer, meta.ppo_optimizer, tensors, "ppo_optimizer", where)
        if meta.phase == "imitation":
            if meta.imitation_optimizer is None or "imitation.obs" not in tensors or "imitation.act" not in tensors:
                raise CheckpointError(f"{where}: an imitation under way without its data or optimiser.", FIX)
            restore_optimizer(self.imitation_optimizer, meta.imitation_optimizer, tensors, "imitation_optimizer", where)
            obs, act = tensors["imitation.obs"], tensors["imitation.act"]
            width = int(np.prod(self.model.policy.observation_space.shape or ()))
            if (
                obs.ndim != 2
                or (obs.size and obs.shape[1] != width)
                or act.shape != (obs.shape[0],)
                or len(meta.imitation_samples) != meta.imitation_rounds
                or len(meta.imitation_agreement) != meta.imitation_rounds
                or meta.imitation_rounds > self.agent.imitation.iterations
                or (act.size and (act.min() < 0 or act.max() > self.proto.keep_action))
            ):
                raise CheckpointError(f"{where}: the imitation's data do not fit this run's network and rounds.", FIX)
            try:
                np.random.default_rng().bit_generator.state = meta.imitation_rng or {}
            except (TypeError, ValueError, KeyError) as exc:
                raise CheckpointError(f"{where}: the imitation's random state is unreadable ({exc}).", FIX) from None
            self.dagger = DaggerProgress(
                meta.imitation_rounds,
                DaggerReport(list(meta.imitation_samples), list(meta.imitation_agreement)),
                obs,
                act.astype(np.int64),
                dict(meta.imitation_rng or {}),
                self.imitation_optimizer,
            )
        self.model.num_timesteps = meta.timesteps
        self.model._n_updates = meta.updates
        restore_random(meta, tensors, where)

    def _best_from(self, tensors: dict[str, np.ndarray]) -> _Best | None:
        """The best policy a resumed run had kept, evaluated again (its figures are not stored)."""
        import torch

        best = {k[len("best.") :]: torch.as_tensor(v) for k, v in tensors.items() if k.startswith("best.")}
        if not best:
            return None
        current = {k: v.clone() for k, v in self.model.policy.state_dict().items()}
        if set(best) != set(current) or any(best[k].shape != current[k].shape for k in best):
            from rlclock.agents.state import STATE_FILE

            raise CheckpointError(
                f"{self.run_dir / STATE_FILE}: the best policy's weights do not fit the network.", FIX
            )
        self.model.policy.load_state_dict(best)
        kept = _Best([evaluate_policy(self.policy(), s) for s in self.eval_specs], self.model)
        self.model.policy.load_state_dict(current)
        return kept

    def imitation_left(self) -> bool:
        """Whether imitation rounds remain to run (none once a resumed run had reached PPO)."""
        if self.state is not None and self.state.phase == "ppo":
            return False
        done = self.dagger.rounds if self.dagger is not None else 0
        return self.agent.imitation.iterations > done or self.best is None

    def save_state(self, phase: str) -> None:
        """Write the resume state (:mod:`rlclock.agents.state`) as the run stands now."""
        groups, tensors = optimizer_state(self.model.policy.optimizer, "ppo_optimizer")
        tensors.update({f"policy.{k}": v for k, v in self.model.policy.state_dict().items()})
        if self.best is not None:
            tensors.update({f"best.{k}": v for k, v in self.best.state.items()})
        meta: dict[str, Any] = {
            "phase": phase,
            "imitation_rounds": 0,
            "imitation_samples": [],
            "imitation_agreement": [],
            "imitation_rng": None,
            "imitation_optimizer": None,
            "timesteps": int(self.model.num_timesteps),
            "updates": int(self.model._n_updates),
            "wall_s": self.wall(),
            "ppo_optimizer": groups,
            "best_score": None if self.best is None else float(self.best.value),
            "best_step": None if self.best is None else int(self.best.step),
        }
        d = self.dagger
        if d is not None:
            meta.update(
                imitation_rounds=d.rounds,
                imitation_samples=list(d.report.samples),
                imitation_agreement=[float(a) for a in d.report.agreement],
                imitation_rng=d.rng_state,
            )
            if phase == "imitation":
                im_groups, im_tensors = optimizer_state(d.optimizer, "imitation_optimizer")
                meta["imitation_optimizer"] = im_groups
                tensors.update(im_tensors)
                tensors["imitation.obs"] = np.asarray(d.obs, dtype=np.float32).reshape(len(d.act), -1)
                tensors["imitation.act"] = np.asarray(d.act, dtype=np.int64)
        rng_meta, rng_tensors = random_state()
        meta.update(rng_meta)
        tensors.update(rng_tensors)
        save_state(self.run_dir, meta, tensors)
        self.saved_at = int(self.model.num_timesteps)
        write_summary(
            self.run_dir,
            wall_s=self.wall(),
            timesteps=int(self.model.num_timesteps),
            saved={"phase": phase, "imitation_rounds": meta["imitation_rounds"], "timesteps": meta["timesteps"]},
        )

    def estimate(self) -> str:
        """How long the phases will take on this machine, from short timed probes (on copies: the run's own env
        and network are not touched)."""
        import copy

        import torch

        from rlclock.agents.imitation import PRICE_LADDER, LagrangianExpert
        from rlclock.agents.vec_env import KernelClockSB3VecEnv
        from rlclock.env import KernelClockEnv, episode_tables

        agent = self.agent
        net = copy.deepcopy(self.model.policy)
        opt = torch.optim.Adam(net.parameters(), lr=1e-4)
        x = torch.zeros((agent.imitation.batch_size, int(np.prod(self.model.policy.observation_space.shape or ()))))
        y = torch.zeros(agent.imitation.batch_size, dtype=torch.long)

        def timed(fn: Any, repeats: int) -> float:
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            return (time.perf_counter() - start) / repeats

        def grad_step(ppo: bool) -> None:
            loss = (
                net.evaluate_actions(x, y)[1].mean()
                if ppo
                else torch.nn.functional.cross_entropy(net.action_net(net.mlp_extractor.forward_actor(x)), y)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()

        t_imitate, t_ppo = timed(lambda: grad_step(False), 5), timed(lambda: grad_step(True), 5)
        vec = KernelClockSB3VecEnv(agent.n_envs, self.specs, seed=0)
        vec.reset()
        keep = np.full(agent.n_envs, self.proto.keep_action)
        t_vec = timed(lambda: vec.step(keep), 32)
        parts = []
        rounds = agent.imitation.iterations - (self.dagger.rounds if self.dagger is not None else 0)
        if self.imitation_left() and rounds > 0:
            im = agent.imitation
            env = KernelClockEnv(self.specs[:1])
            env.reset(seed=0)
            t_env = timed(lambda: env.step(env.keep_action), 64)
            first = episode_tables(self.specs[0])
            t_dp = timed(lambda: LagrangianExpert(first).choices(1.0), 1) / max(first.n, 1)
            k = min(im.prices_per_round, len(PRICE_LADDER))
            kernels = sum(episode_tables(s).n for s in self.specs)
            imit = (
                rounds * k * kernels * 2 * t_env
                + min(len(PRICE_LADDER), k * rounds) * kernels * t_dp
                + rounds * im.min_updates * t_imitate
            )
            parts.append(f"imitation ~{_duration(imit)}")
        if agent.trains_ppo:
            p = agent.ppo
            remaining = max(0, agent.timesteps - int(self.model.num_timesteps))
            updates = remaining / (p.n_steps * agent.n_envs)
            ppo = (
                remaining / agent.n_envs * t_vec
                + updates
                * p.n_epochs
                * (p.n_steps * agent.n_envs / p.batch_size)
                * t_ppo
                * p.batch_size
                / agent.imitation.batch_size
            )
            parts.append(f"PPO ~{_duration(ppo)}")
        return ", ".join(parts) + " (then the final evaluation and plots)"

    def policy(self, extra: dict[str, Any] | None = None) -> ClockPolicy:
        return _policy(
            self.model,
            self.specs,
            self.proto.configs,
            self.specs[0].lookahead,
            {"price_rel": self.price_rel, **(extra or {})},
        )

    def evaluate(self, step: int) -> list[PolicyEvaluation]:
        """The current policy on every evaluation workload, logged (``energy/…``) at ``step``."""
        evs = [evaluate_policy(self.policy(), s) for s in self.eval_specs]
        row: dict[str, Any] = {"step": step, "wall_s": self.wall()}
        for ev in evs:
            for k, v in ev.metrics(f"energy/{ev.env}/" if len(evs) > 1 else "energy/").items():
                row[k] = v
        if len(evs) > 1:
            row["energy/mean_fraction_of_optimum"] = _mean_fraction(evs)
            row["energy/mean_slowdown_pct"] = float(np.mean([ev.slowdown_pct for ev in evs]))
        self.history.append(row)
        self.tracker.log(row, step=step)
        _write_history(self.run_dir / "metrics.csv", self.history)
        return evs

    def offer(self, evs: list[PolicyEvaluation], step: int) -> None:
        """Keep the current policy if it is the best so far: its weights, and the run's deployable checkpoint."""
        if self.best is None:
            self.best = _Best(evs, self.model, step)
        elif not self.best.offer(evs, self.model, step):
            return
        self._write_policy("best so far")

    def _write_policy(self, status: str, extra: dict[str, Any] | None = None) -> Path:
        """The deployable checkpoint of the current weights, written atomically to ``policy/``."""
        pol = self.policy(
            extra
            or {
                "training": {
                    "timesteps": int(self.model.num_timesteps),
                    "status": status,
                    "envs": [s.name for s in self.specs],
                },
                "env_spec": dict(self.specs[0].raw),
            }
        )
        return save_checkpoint(
            self.run_dir / "policy",
            pol.weights,
            {k: v for k, v in pol.meta.items() if k not in ("format", "version", "activation")},
        )

    def imitate(self, stop: StopOnSignal) -> None:
        """The DAgger warm start (if the recipe has rounds), then a first evaluation."""
        im = self.agent.imitation
        from rlclock.agents.imitation import PRICE_LADDER, DaggerProgress, DaggerReport, dagger
        from rlclock.env import KernelClockEnv

        done = self.dagger.rounds if self.dagger is not None else 0
        if im.iterations <= done:
            if self.best is None and not stop.requested:
                self.offer(self.evaluate(0), 0)
                self.save_state("ppo")
            return
        env = KernelClockEnv(self.specs)
        visits = (im.iterations - done) * len(env.episodes) * min(im.prices_per_round, len(PRICE_LADDER))
        bar = _bar(None, self.progress, "imitation", "episodes", total=visits)

        def on_checkpoint(progress: DaggerProgress) -> None:
            self.dagger = progress
            self.save_state("imitation")

        def on_round(report: DaggerReport) -> None:
            self.tracker.log_round(report.round_metrics(im.iterations))
            if bar is not None:
                bar.set_postfix_str(
                    f"round {len(report.samples)}/{im.iterations}: learner agreed on {100 * report.agreement[-1]:.0f} %"
                )

        dagger(
            self.model,
            env,
            iterations=im.iterations,
            epochs=im.epochs,
            batch_size=im.batch_size,
            learning_rate=im.learning_rate,
            beta_decay=im.beta_decay,
            prices_per_round=im.prices_per_round,
            min_updates=im.min_updates,
            seed=self.agent.seed,
            class_balance=im.class_balance,
            on_round=on_round,
            should_stop=stop,
            on_visit=None if bar is None else bar.update,
            optimizer=self.imitation_optimizer,
            resume_from=self.dagger,
            on_checkpoint=on_checkpoint,
        )
        if bar is not None:
            bar.close()
        if not stop.requested:
            self.offer(self.evaluate(0), 0)
            self.save_state("ppo")

    def ppo(self, stop: StopOnSignal) -> None:
        """PPO up to the recipe's timesteps, evaluating and keeping the best policy as it goes."""
        from stable_baselines3.common.callbacks import BaseCallback

        remaining = self.agent.timesteps - int(self.model.num_timesteps)
        if remaining <= 0 or stop.requested:
            return
        session = self
        per_update = self.agent.ppo.n_steps * self.agent.n_envs

        class EvalEvery(BaseCallback):
            """Evaluates every ``eval.every_steps`` (keeping the best), and saves the state every
            ``checkpoint_every`` updates (at the start of the next rollout: the update just done)."""

            def __init__(self, every: int) -> None:
                super().__init__()
                self.next = (session.model.num_timesteps // every + 1) * every
                self.every = every

            def _on_rollout_start(self) -> None:
                if self.num_timesteps - session.saved_at >= session.agent.checkpoint_every * per_update:
                    session.save_state("ppo")

            def _on_step(self) -> bool:
                if self.num_timesteps >= self.next:
                    self.next += self.every
                    session.offer(session.evaluate(self.num_timesteps), self.num_timesteps)
                return not stop.requested

        self.model.learn(
            total_timesteps=remaining,
            callback=EvalEvery(self.agent.eval.every_steps),
            progress_bar=self.progress,
            reset_num_timesteps=False,
        )
        if self.model.logger.name_to_value:  # SB3 writes an update's train/* at the next one's start: the last too
            self.model.logger.dump(step=self.model.num_timesteps)

    def finish(self, status: str, save_to: str | Path | None, name: str, final: bool = True) -> TrainResult:
        """Save the best policy (the current one if none was evaluated), the SB3 model, the history and the
        summary; with ``final``, evaluate once more, plot, and log the tables and the checkpoint artifact."""
        steps = int(self.model.num_timesteps)
        run_dir, tracker = self.run_dir, self.tracker
        if not self.imitation_left():  # the current model: what --resume continues (an imitation under way keeps
            self.save_state("ppo")  # its last whole round's state)
        self.model.save(str(run_dir / SB3_FILE))  # for stable-baselines3's own tools; rlclock never reads it
        evs: list[PolicyEvaluation] = []
        if final and status == "finished":
            if self.progress:
                print(f"final evaluation on {len(self.eval_specs)} workload(s), baselines and plots …", flush=True)
            evs = self.evaluate(steps)
        if self.best is not None and (not evs or self.best.better_than(evs)):
            self.best.restore(self.model)
            evs = self.best.evs
        figures = {
            ev.env: {
                "saving_pct": ev.saving_pct,
                "slowdown_pct": ev.slowdown_pct,
                "switches": ev.evaluation.switches,
                "optimum_saving_pct": 100 * ev.optimum_saving,
                "fraction_of_optimum": ev.fraction_of_optimum,
            }
            for ev in evs
        }
        trained = "PPO" if self.agent.trains_ppo and steps > 0 else "imitation"
        wall = self.wall()
        extra = {
            "training": {
                "timesteps": steps,
                "wall_s": wall,
                "seed": self.agent.seed,
                "status": status,
                "trained_by": trained,
                "envs": [s.name for s in self.specs],
                "figures": figures,
                "agent": self.agent.as_dict(),
                "git": git_revision(),
            },
            "env_spec": dict(self.specs[0].raw),
        }
        pol = self.policy(extra)
        ckpt = self._write_policy(status, extra)
        _write_history(run_dir / "metrics.csv", self.history)
        write_summary(
            run_dir,
            status=status,
            wall_s=wall,
            timesteps=steps,
            trained_by=trained,
            figures=figures,
            **({"signal": "interrupted by a signal"} if status == "interrupted" else {}),
        )
        if final:
            _plots(run_dir, pol, self.eval_specs[0], tracker, steps, trained)
            tracker.table(
                "energy/schedule",
                ["kernel", "op", "requested", "in effect", "time_ms", "energy_j"],
                _schedule_rows(pol, self.eval_specs[0]),
                step=steps,
            )
        tracker.artifact(
            ckpt, f"policy-{name}", metadata={"status": status, **figures}, extra_files=[run_dir / SB3_FILE]
        )
        wandb_dir, wandb_mode = tracker.local_dir, tracker.mode
        tracker.finish()
        if save_to is not None:
            dest = Path(save_to)
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(ckpt, dest)
            shutil.copy2(run_dir / SB3_FILE, dest / SB3_FILE)
        self.vec.close()
        return TrainResult(run_dir, ckpt, evs, wall, self.history, status, trained, wandb_dir, wandb_mode)


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

    def __init__(self, evs: Sequence[PolicyEvaluation], model, step: int = 0) -> None:
        self.evs = list(evs)
        self.value = score(evs)
        self.step = step
        self.state = {k: v.clone() for k, v in model.policy.state_dict().items()}

    def offer(self, evs: Sequence[PolicyEvaluation], model, step: int = 0) -> bool:
        """Keep the model's weights if they score better; whether they did."""
        if score(evs) > self.value:
            self.evs, self.value, self.step = list(evs), score(evs), step
            self.state = {k: v.clone() for k, v in model.policy.state_dict().items()}
            return True
        return False

    def better_than(self, evs: Sequence[PolicyEvaluation]) -> bool:
        return self.value > score(evs)

    def restore(self, model) -> None:
        model.policy.load_state_dict(self.state)


def _duration(seconds: float) -> str:
    """``seconds`` as a person reads them: ``40 s``, ``3 min``, ``2.5 h``."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _bar(items: Any, show: bool, desc: str, unit: str, total: int | None = None) -> Any:
    """``items`` behind a progress bar (with its time left) when ``show``; with ``items`` None, the bar itself
    (``None`` when not shown)."""
    if not show:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit=f" {unit}", total=total, dynamic_ncols=True, leave=True)


def _read_history(path: Path) -> list[dict[str, Any]]:
    """The evaluation history a run wrote so far (numbers as floats)."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return [{k: float(v) if v not in ("", None) else v for k, v in row.items()} for row in csv.DictReader(f)]


def _write_history(path: Path, history: list[dict[str, Any]]) -> None:
    """The evaluation history as CSV, written atomically (after every evaluation: a killed run keeps it)."""
    if not history:
        return
    keys = list(dict.fromkeys(k for row in history for k in row))
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(history)
    tmp.replace(path)


def _schedule_rows(policy: ClockPolicy, spec: EnvSpec) -> list[list[Any]]:
    from rlclock.env import episode_tables

    backend = episode_tables(spec).backend
    sched = policy.schedule(backend.trace, backend=backend, budget=spec.reward.budget, search=False)
    run = backend.run(sched)
    return [
        [
            i,
            backend.trace[i].op,
            str(backend.configs[int(run.requested_index[i])]),
            str(backend.configs[int(run.config_index[i])]),
            1e3 * float(run.kernel_time_s[i]),
            float(run.kernel_energy_j[i]),
        ]
        for i in range(len(backend.trace))
    ]


PLOT_SOLVE_S = 30.0
"""Solver time limit for the end-of-training plots' baselines, s (the knapsack optimum of a few real steps takes
minutes to prove; the plot shows the best plan found by then)."""


def _plots(run_dir: Path, policy: ClockPolicy, spec: EnvSpec, tracker: Tracker, step: int, trained_by: str) -> None:
    from rlclock.env import episode_tables
    from rlclock.plots import clock_timeline, pareto_plot
    from rlclock.solve.baselines import run_baselines
    from rlclock.solve.evaluation import evaluate

    backend = episode_tables(spec).backend
    sched = policy.schedule(backend.trace, backend=backend, budget=spec.reward.budget, whole_job=False)
    ev = evaluate(sched, backend)
    points = {
        r.name: (100 * r.evaluation.slowdown, -100 * r.evaluation.saving)
        for r in run_baselines(backend, spec.reward.budget, time_limit_s=PLOT_SOLVE_S)
        if r.name != "auto"
    }
    points[f"{trained_by} policy"] = (100 * ev.slowdown, -100 * ev.saving)
    searched = evaluate(
        policy.schedule(backend.trace, backend=backend, budget=spec.reward.budget, search=True, whole_job=False),
        backend,
    )
    points[f"{trained_by} policy + search"] = (100 * searched.slowdown, -100 * searched.saving)
    pareto = pareto_plot(
        run_dir / "pareto.png",
        points,
        budget_pct=100 * spec.reward.budget,
        title=f"{spec.name}: policy vs baselines (latency {1e3 * backend.latency_s:g} ms)",
    )
    timeline = clock_timeline(run_dir / "timeline.png", ev.run, backend.spec, title=f"{spec.name}: policy clocks")
    tracker.image("plots/pareto", pareto, step=step)
    tracker.image("plots/clock_timeline", timeline, step=step)
