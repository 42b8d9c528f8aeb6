"""Digests of the plans every shipped checkpoint makes on its specs, and of the exact optima of those specs.

A refactor of the planner, the switching rule or the solvers must leave them bit-identical:
``tests/test_pinned_plans.py`` recomputes them and compares with ``tests/data/pinned_plans.json``, written by
``python -m tests.pinned_plans --write`` from the version whose plans are the reference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PINNED = Path(__file__).resolve().parent / "data" / "pinned_plans.json"
CASES: dict[str, list[str]] = {
    "gpt3xl-rtx3080ti": ["gpt3xl-rtx3080ti"],
    "gpt3xl-h200": ["gpt3xl-h200"],
    "gpt3xl-h100": ["gpt3xl-h100"],
    "gpt3xl-a100": ["gpt3xl-a100"],
    "family-rtx3080ti": ["heldout-rtx3080ti"],
}
"""Checkpoint → env specs (a family expands to its members) its plans are pinned on."""


def digest(*arrays: np.ndarray) -> str:
    """A short digest of arrays (their bytes, in order)."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:20]


def env_rollout(spec, steps: int = 300) -> str:
    """Digest of a seeded env's observations, rewards and resolved requests under a fixed action cycle."""
    import gymnasium as gym

    env = gym.make("rlclock/KernelClock-v0", spec=spec)
    obs, _ = env.reset(seed=0)
    n = env.action_space.n
    seen, rewards, configs = [obs], [], []
    for i in range(steps):
        obs, r, done, _, info = env.step((7 * i) % n if i % 5 else n - 1)
        seen.append(obs)
        rewards.append(r)
        configs.append(info["config"])
        if done:
            obs, _ = env.reset()
            seen.append(obs)
    return digest(np.stack(seen), np.array(rewards), np.array(configs))


def compute() -> dict[str, str]:
    """``{case: digest}`` for every pinned plan and optimum."""
    from rlclock.config import load_env_spec, load_env_specs
    from rlclock.env import episode_tables
    from rlclock.policy import ClockPolicy
    from rlclock.solve.evaluation import evaluate, optimum_for

    out: dict[str, str] = {}
    for name, specs in CASES.items():
        policy = ClockPolicy.load(ROOT / "checkpoints" / name)
        for spec in load_env_specs(specs):
            backend = episode_tables(spec).backend
            budget = spec.reward.budget
            for label, kwargs in (
                ("plan", {"search": False}),
                ("search", {"search": True}),
                ("uncalibrated", {"meet_budget": False, "search": False}),
                ("uncalibrated-search", {"meet_budget": False, "search": True}),
            ):
                sched = policy.schedule(backend.trace, backend=backend, budget=budget, **kwargs)
                out[f"{name}/{spec.name}/{label}"] = digest(sched.index)
                ev = evaluate(sched, backend)
                r = ev.run
                out[f"run/{name}/{spec.name}/{label}"] = digest(
                    np.array([ev.time_s, ev.energy_j, ev.switches, ev.off_plan_time_s]),
                    r.kernel_time_s,
                    r.kernel_energy_j,
                    r.start_s,
                    r.config_index,
                    r.switch_issue_s,
                    r.switch_land_s,
                    r.switch_to,
                )
            t, e = backend.tables
            out[f"tables/{spec.name}"] = digest(t, e)
            out[f"optimum/{spec.name}"] = digest(optimum_for(backend, budget).requests)
    for name in ("gpt3xl-rtx3080ti", "gpt3xl-h200"):
        out[f"env/{name}"] = env_rollout(load_env_spec(name))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="store the digests as the reference")
    args = parser.parse_args()
    got = compute()
    if args.write:
        PINNED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(got)} digests to {PINNED}")
    else:
        want = json.loads(PINNED.read_text())
        bad = [k for k in want if got.get(k) != want[k]]
        print(f"{len(want) - len(bad)}/{len(want)} pinned plans identical" + (f"; differ: {bad}" if bad else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
