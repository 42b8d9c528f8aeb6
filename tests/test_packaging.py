"""A regular (non-editable) install works from any folder: the built wheel, in a fresh virtual environment,
finds its env specs, recipes, checkpoints and presets by name and registers the environments."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the wheel built from this checkout; its dependencies come from this interpreter's
    site-packages (without this checkout's own editable install)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp / "dist").glob("rlclock-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # plain path: its .pth files stay off
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    return venv, wheel


def run(venv: Path, *cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(venv / "bin" / cmd[0]), *cmd[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_wheel_ships_the_data_files(installed):
    _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in (
        "rlclock/py.typed",
        "rlclock/data/envs/gpt3xl-rtx3080ti.yaml",
        "rlclock/data/agents/ppo.yaml",
        "rlclock/data/checkpoints/gpt3xl-h200/policy.safetensors",
        "rlclock/data/measurements/gpt3xl-h200-layer.trace.json",
        "rlclock/dvfs/presets/h200-sxm.yaml",
        "rlclock/data/envs/corpus-h100.yaml",
        "rlclock/data/measurements/corpus-h200/bert-base/step.trace.json.gz",
    ):
        assert must in names, must
    assert not any(n.endswith("sb3_model.zip") for n in names)  # resuming only: not part of the package


def test_the_installed_package_works_from_another_folder(installed, tmp_path):
    venv, _ = installed
    where = run(venv, "python", "-c", "import rlclock; print(rlclock.__file__)", cwd=tmp_path)
    assert where.returncode == 0 and "site-packages" in where.stdout and str(ROOT) not in where.stdout, where
    out = run(venv, "rlclock", "simulate", "gpt3xl-rtx3080ti", "--clocks", "1680@5001", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "1680@5001" in out.stdout and "auto" in out.stdout
    code = (
        "import gymnasium as gym, rlclock\n"
        "env = gym.make('rlclock/KernelClock-v0', spec='gpt3xl-h200')\n"
        "obs, _ = env.reset(seed=0)\n"
        "envs = gym.make_vec('rlclock/KernelClock-v0', num_envs=2)\n"
        "print(obs.shape, envs.num_envs, type(envs.unwrapped).__name__)\n"
        "p = rlclock.ClockPolicy.load('gpt3xl-h200')\n"
        "from rlclock.config import load_agent_config\n"
        "print(p.gpu_key, load_agent_config().timesteps > 0)\n"
    )
    gym_out = run(venv, "python", "-c", code, cwd=tmp_path)
    assert gym_out.returncode == 0, gym_out.stderr
    assert "KernelClockVectorEnv" in gym_out.stdout and "h200-sxm True" in gym_out.stdout
    module = run(venv, "python", "-m", "rlclock", "--version", cwd=tmp_path)
    assert module.returncode == 0 and module.stdout.startswith("rlclock ")
