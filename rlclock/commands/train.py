"""``rlclock train``: train a PPO clock policy on simulated envs (W&B optional), then compare it."""

from __future__ import annotations

import argparse
import shlex

from rlclock.commands.args import DefaultsHelp, add_time_limit
from rlclock.commands.common import duration, note_generic, print_table, tool_command
from rlclock.commands.evaluate import COMPARE_SOLVE_S


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a PPO clock policy (progress bar, run folder, checkpoint, optional W&B)",
        description="Train stable-baselines3 PPO on the vectorised simulated env of one env spec (or a family of "
        "specs sharing GPU and action set), write a self-describing run folder under --runs-dir, and "
        "print the policy beside the baselines and the exact optimum.",
        formatter_class=DefaultsHelp,
    )
    p.add_argument(
        "env",
        nargs="*",
        default=["gpt3xl-rtx3080ti"],
        help="env spec(s): shipped names (e.g. gpt3xl-rtx3080ti) or YAML paths; a YAML with 'family:' lists several",
    )
    p.add_argument(
        "--agent",
        default="quick",
        help="agent recipe: a shipped one (quick: about a minute; ppo: the full recipe of the shipped "
        "GPT-3 XL checkpoints; real-steps: for families of real profiled steps, e.g. corpus-h200; "
        "ppo-scratch) or a YAML path",
    )
    p.add_argument("--seed", type=int, default=None, help="random seed (default: the recipe's)")
    p.add_argument("--timesteps", type=int, default=None, help="environment steps (default: the recipe's)")
    p.add_argument(
        "--track",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log to Weights & Biases (offline unless W&B is configured; `wandb sync` uploads later)",
    )
    p.add_argument("--wandb-project", default=None, help="W&B project (default: $WANDB_PROJECT, else rlclock)")
    p.add_argument("--wandb-entity", default=None, help="W&B entity (default: $WANDB_ENTITY, else your own)")
    p.add_argument("--wandb-group", default=None, help="W&B run group (default: $WANDB_RUN_GROUP, else none)")
    p.add_argument("--name", default=None, help="run name (default: the env spec's name)")
    p.add_argument("--runs-dir", default="runs", help="parent folder of run folders")
    p.add_argument(
        "--save-checkpoint",
        default=None,
        metavar="DIR",
        help="also copy the trained policy to DIR (e.g. checkpoints/gpt3xl-rtx3080ti)",
    )
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True, help="progress bar")
    p.add_argument("--eval-env", nargs="*", default=None, help="env specs to evaluate on (default: the training ones)")
    add_time_limit(p, COMPARE_SOLVE_S)
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN",
        help="continue a run folder that was interrupted or killed: from its last saved state, the "
        "imitation rounds not yet run, then PPO (--timesteps: the total to reach; the env specs "
        "and recipe are the run's)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rlclock.agents.runs import StopOnSignal

    with StopOnSignal():  # Ctrl-C (or SIGTERM) from the first second: before training, it stops at once
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from rlclock.agents.train import resume_inputs, train
    from rlclock.config import EnvSpec, load_env_specs
    from rlclock.config.recipe import load_agent_config

    eval_specs: list[EnvSpec] | None
    if args.resume:
        specs, agent, eval_specs = resume_inputs(args.resume)
        agent = agent.with_(timesteps=args.timesteps)
    else:
        specs = load_env_specs(args.env)
        agent = load_agent_config(args.agent).with_(seed=args.seed, timesteps=args.timesteps)
        eval_specs = load_env_specs(args.eval_env) if args.eval_env else None
    note_generic(specs)
    phases = (
        [f"{agent.imitation.iterations} imitation rounds"]
        if agent.imitation.iterations and not args.resume
        else ["the imitation rounds not yet run"]
        if agent.imitation.iterations
        else []
    ) + ([f"{'up to ' if args.resume else ''}{agent.timesteps} PPO steps"] if agent.trains_ppo else [])
    print(
        f"{'resuming' if args.resume else 'training'} on {', '.join(s.name for s in specs)}: "
        f"{' then '.join(phases)} ({agent.n_envs} envs, seed {agent.seed}); "
        f"W&B: {'on' if args.track else 'off (--track to log)'}"
    )
    res = train(
        specs,
        agent,
        runs_dir=args.runs_dir,
        name=args.name,
        track=args.track,
        progress=args.progress,
        save_to=args.save_checkpoint,
        eval_specs=eval_specs,
        command=getattr(args, "command_line", None),
        wandb_project=args.wandb_project,
        wandb_entity=args.wandb_entity,
        wandb_group=args.wandb_group,
        resume=args.resume,
    )
    if res.status == "interrupted":
        print(
            f"interrupted after {duration(res.wall_s)}: the best policy so far is in {res.checkpoint}; continue "
            f"with `rlclock train --resume {res.run_dir}`"
        )
        _say_wandb(res)
        return 130
    print(f"trained in {duration(res.wall_s)} (the final evaluation follows); run folder {res.run_dir}")
    from rlclock.commands.evaluate import comparison_rows
    from rlclock.policy import ClockPolicy

    policy = ClockPolicy.load(res.checkpoint)
    for spec in eval_specs or specs:
        print()
        print(f"{spec.name}: budget {100 * spec.reward.budget:g} %, latency {1e3 * spec.latency_s:g} ms")
        header, rows = comparison_rows(policy, spec, time_limit_s=args.time_limit)
        print_table(header, rows)
    if args.save_checkpoint:
        print(f"checkpoint written to {args.save_checkpoint}")
    _say_wandb(res)
    return 0


def _say_wandb(res) -> None:
    """Where the W&B run is, and how to upload it when it is offline."""
    if res.wandb_dir is None:
        return
    if res.wandb_mode == "offline":
        sync = f"{tool_command('wandb')} sync {shlex.quote(str(res.wandb_dir))}"
        print(f"W&B run (offline): {res.wandb_dir}; upload it with `{sync}`")
    else:
        print(f"W&B run ({res.wandb_mode}): {res.wandb_dir}")
