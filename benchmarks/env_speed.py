"""Env steps per second on this machine: the plain Gymnasium env and the vectorised form.

    python benchmarks/env_speed.py [--env gpt3xl-rtx3080ti] [--seconds 5] [--num-envs 16]

Targets: >= 5 000 steps/s for the plain env and >= 20 000 for the vectorised one. Random actions, so
switches and latency splits are exercised; the first reset (which builds the tables) is not timed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

from rlclock.agents.vec_env import KernelClockSB3VecEnv
from rlclock.env import KernelClockEnv


def plain(env_name: str, seconds: float) -> float:
    env = KernelClockEnv(env_name)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(1000):
            _, _, done, _, _ = env.step(int(rng.integers(env.action_space.n)))
            n += 1
            if done:
                env.reset()
    return n / (time.perf_counter() - start)


def vectorised(env_name: str, seconds: float, num_envs: int) -> float:
    vec = KernelClockSB3VecEnv(num_envs, env_name, seed=0)
    rng = np.random.default_rng(0)
    vec.reset()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            vec.step(rng.integers(0, vec.action_space.n, num_envs))
            n += num_envs
    return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="gpt3xl-rtx3080ti")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--num-envs", type=int, default=16)
    args = p.parse_args(argv)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; env {args.env}"
    )
    a = plain(args.env, args.seconds)
    b = vectorised(args.env, args.seconds, args.num_envs)
    print(f"plain KernelClockEnv:              {a:9.0f} steps/s  (target >= 5000)  {'ok' if a >= 5000 else 'MISSED'}")
    print(
        f"KernelClockSB3VecEnv ({args.num_envs:2d} envs):      {b:9.0f} steps/s  (target >= 20000) "
        f"{'ok' if b >= 20000 else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
