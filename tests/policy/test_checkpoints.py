"""The shipped checkpoints load without pickle and still do what their metadata says."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlclock.agents.evaluate import evaluate_policy
from rlclock.config import load_env_spec
from rlclock.policy import ClockPolicy

ROOT = Path(__file__).resolve().parents[2] / "checkpoints"


@pytest.mark.parametrize(
    "name, gpu",
    [
        ("gpt3xl-rtx3080ti", "rtx3080ti"),
        ("gpt3xl-h200", "h200-sxm"),
        ("gpt3xl-h100", "h100-sxm"),
        ("gpt3xl-a100", "a100-sxm4-40gb"),
        ("family-rtx3080ti", "rtx3080ti"),
        ("corpus-h200", "h200-sxm"),
        ("corpus-h100", "h100-sxm"),
        ("corpus-a100", "a100-sxm4-40gb"),
        ("corpus-rtx3080ti", "rtx3080ti"),
    ],
)
def test_shipped_checkpoint(name, gpu):
    """Each loads, and plans its first training spec (a corpus policy: BERT's real step, found in the shipped
    measurements) within budget at the share of the optimum its metadata records for it (so a checkpoint left
    behind by a change of its GPU's preset fails here) and at least half (a family policy) or 85 % of it."""
    pol = ClockPolicy.load(ROOT / name)
    assert pol.gpu_key == gpu
    spec = load_env_spec(pol.meta["env_spec"])
    ev = evaluate_policy(pol, spec)
    assert ev.slowdown_pct <= 100 * spec.reward.budget + 0.2
    assert ev.fraction_of_optimum >= (0.5 if name.startswith("family") else 0.85)
    trained = pol.meta["training"].get("figures", {}).get(spec.name)
    if trained is not None:
        assert ev.fraction_of_optimum >= trained["fraction_of_optimum"] - 0.02


def test_loading_a_checkpoint_never_opens_the_sb3_zip(tmp_path, monkeypatch):
    """ClockPolicy.load reads meta.json and policy.safetensors only: the pickle-based SB3 zip beside them is
    never opened (every file Python opens while loading is recorded by an audit hook, the weights' reader is
    watched, and zip files and unpickling would fail the test)."""
    import pickle
    import shutil
    import sys
    import zipfile

    import safetensors.numpy

    read = safetensors.numpy.load_file
    weights_read: list[str] = []

    def load_file(path, *args, **kwargs):
        weights_read.append(str(path))
        return read(path, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("loading a checkpoint must not open zip files or unpickle")

    monkeypatch.setattr(safetensors.numpy, "load_file", load_file)
    monkeypatch.setattr(zipfile, "ZipFile", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)

    folder = tmp_path / "ck"
    shutil.copytree(ROOT / "gpt3xl-h200", folder)
    assert (folder / "sb3_model.zip").is_file()
    opened: list[str] = []
    recording = [True]

    def hook(event: str, args: tuple) -> None:
        if recording[0] and event == "open" and args and isinstance(args[0], (str, bytes, Path)):
            opened.append(str(args[0]))

    sys.addaudithook(hook)
    try:
        policy = ClockPolicy.load(folder)
    finally:
        recording[0] = False
    assert policy.gpu_key == "h200-sxm"
    mine = [p for p in opened if str(folder) in p]
    assert any(p.endswith("meta.json") for p in mine) and weights_read == [str(folder / "policy.safetensors")]
    assert not any("sb3_model.zip" in p for p in opened), mine
