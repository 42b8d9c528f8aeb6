"""The env as the RL ecosystem drives it: rl-baselines3-zoo trains and enjoys it with its defaults, a
CleanRL-style loop runs it through Gymnasium's vector API, and Gymnasium's own checker passes."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

import rlclock  # noqa: F401  (registers the envs)

ENV = "rlclock/KernelClock-v0"


def test_rl_zoo_trains_and_enjoys_the_env_with_its_defaults(tmp_path):
    pytest.importorskip("rl_zoo3")
    (tmp_path / "hp.yml").write_text(
        f"{ENV}:\n  n_timesteps: 512\n  policy: MlpPolicy\n  n_envs: 2\n  n_steps: 128\n  batch_size: 128\n"
    )
    train = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_zoo3.train",
            "--algo",
            "ppo",
            "--env",
            ENV,
            "--gym-packages",
            "rlclock",
            "-conf",
            "hp.yml",
            "-f",
            "logs",
            "--seed",
            "0",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert list((tmp_path / "logs" / "ppo").glob("rlclock-KernelClock-v0_1/rlclock-KernelClock-v0.zip"))
    enjoy = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_zoo3.enjoy",
            "--algo",
            "ppo",
            "--env",
            ENV,
            "--gym-packages",
            "rlclock",
            "-f",
            "logs",
            "-n",
            "20",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert enjoy.returncode == 0, enjoy.stderr[-3000:]
    lines = [line for line in enjoy.stdout.splitlines() if line.startswith("kernel ")]
    assert len(lines) == 20 and len(set(lines)) == 20  # rendered once per step ("human": printed)


def test_a_cleanrl_style_loop_over_the_vector_env():
    envs = gym.make_vec(ENV, num_envs=4)
    assert type(envs.unwrapped).__name__ == "KernelClockVectorEnv"
    obs, _ = envs.reset(seed=1)
    returns, finished = np.zeros(4), []
    keep = envs.single_action_space.n - 1
    for _ in range(1000):
        obs, reward, _, _, infos = envs.step(np.full(4, keep))
        returns += reward
        if "final_info" in infos:
            finished += list(infos["final_info"]["saving"][infos["_final_info"]])
    assert obs.shape == (4, envs.single_observation_space.shape[0]) and len(finished) == 4
    assert np.all(np.isfinite(returns))


def test_gymnasiums_checker_and_render_metadata():
    from gymnasium.utils.env_checker import check_env

    env = gym.make(ENV, render_mode="ansi")
    assert env.metadata["render_fps"] > 0 and set(env.metadata["render_modes"]) == {"human", "ansi", "rgb_array"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=False)
    env.reset(seed=0)
    env.step(0)
    assert env.render().startswith("kernel 1/")


def test_stable_baselines3s_make_vec_env_with_its_defaults():
    from stable_baselines3.common.env_util import make_vec_env

    envs = make_vec_env(ENV, n_envs=2)  # asks for render_mode="rgb_array"
    envs.reset()
    for _ in range(3):
        envs.step(np.zeros(2, dtype=np.int64))
    pictures = envs.get_images()
    assert len(pictures) == 2 and pictures[0].dtype == np.uint8 and pictures[0].shape[2] == 3
    drawn = (pictures[0] != 255).any(axis=(0, 2))  # a column with a bar (the clock in effect at that kernel)
    assert drawn[:3].all() and not drawn[3:].any()
