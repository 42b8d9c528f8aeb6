"""The shipped checkpoints load without pickle and still do what their metadata says."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlclock.agents.evaluate import evaluate_policy
from rlclock.config import load_env_spec
from rlclock.policy import ClockPolicy

ROOT = Path(__file__).resolve().parent.parent / "checkpoints"


@pytest.mark.parametrize("name, gpu", [("gpt3xl-rtx3080ti", "rtx3080ti"), ("gpt3xl-h200", "h200-sxm"),
                                       ("family-rtx3080ti", "rtx3080ti")])
def test_shipped_checkpoint(name, gpu):
    pol = ClockPolicy.load(ROOT / name)
    assert pol.gpu_key == gpu
    spec = load_env_spec(pol.meta["env_spec"])
    ev = evaluate_policy(pol, spec)
    assert ev.slowdown_pct <= 100 * spec.reward.budget + 0.2
    assert ev.fraction_of_optimum >= (0.9 if name.startswith("gpt3xl") else 0.5)
