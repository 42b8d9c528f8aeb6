"""Every bad input gets one clear line and a non-zero exit, before any work starts — never a traceback."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlclock.cli import main
from rlclock.config import load_env_spec, parse_env_spec
from rlclock.config.recipe import parse_agent_config
from rlclock.errors import RlclockError, SpecError

BASE = {"name": "x", "gpu": "rtx3080ti",
        "workload": {"generator": "llmc", "batch": 8, "seq": 512, "hidden": 1024, "heads": 16, "layers": 2},
        "actions": {"core_step_mhz": 210, "core_min_mhz": 630, "mem_mhz": [5001, 9501]}}


def one_line_error(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    assert err.startswith("rlclock: error:") and "\n" not in err and "Traceback" not in err, err
    return err


def argparse_error(capsys, argv: list[str]) -> str:
    """A command line the parser refuses: the same one-line error, naming the command's --help."""
    err = one_line_error(capsys, argv)
    assert f"rlclock {argv[0]}" in err and "--help" in err
    return err


@pytest.mark.parametrize("change, needle", [
    ({"observation": {"look_ahead": 4}}, "observation.look_ahead': unknown field"),
    ({"observation": {"lookahead": 2.7}}, "observation.lookahead"),
    ({"backend": {"kind": "simulated", "noise_std": -3}}, "backend.noise_std"),
    ({"actions": {"mem_mhz": 9501}}, "actions.mem_mhz"),
    ({"reward": {"budget": "lots"}}, "reward.budget"),
    ({"reward": {"time_price": "opt"}}, "'optimum'"),
    ({"max_episode_steps": 10}, "max_episode_steps': unknown field"),
    ({"switch_latency_s": True}, "switch_latency_s"),
    ({"backend": {"kind": "cloud"}}, "'backend'"),
    ({"gpu": "rtx9999"}, "unknown GPU"),
])
def test_bad_env_specs(tmp_path, capsys, change, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, **change}))
    assert needle in one_line_error(capsys, ["simulate", str(path)])


@pytest.mark.parametrize("text, needle", [
    ("name: a\nname: b\ngpu: rtx3080ti\n", "appears twice"),
    ("gpu: [unclosed\n", "cannot read env spec"),
])
def test_malformed_yaml(tmp_path, capsys, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert needle in one_line_error(capsys, ["simulate", str(path)])


def test_binary_yaml(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"\xff\xfe\x00\x81binary")
    assert "not UTF-8" in one_line_error(capsys, ["simulate", str(path)])


def test_a_missing_path_is_not_a_shipped_spec_of_the_same_name(tmp_path, capsys):
    err = one_line_error(capsys, ["simulate", str(tmp_path / "nowhere" / "gpt3xl-rtx3080ti.yaml")])
    assert "not found" in err


@pytest.mark.parametrize("recipe, needle", [
    ({"timesteps": "lots"}, "timesteps"),
    ({"timesteps": -5}, "timesteps"),
    ({"ppo": {"learning_rte": 1e-3}}, "unknown field"),
    ({"timesteps": 0, "imitation": {"iterations": 0}}, "train nothing"),
])
def test_bad_recipes(tmp_path, capsys, recipe, needle):
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert needle in one_line_error(capsys, ["train", "gpt3xl-rtx3080ti", "--agent", str(path)])


def test_a_negative_timesteps_override(capsys):
    assert "timesteps" in one_line_error(capsys, ["train", "gpt3xl-rtx3080ti", "--timesteps", "-5"])


@pytest.mark.parametrize("meta, needle", [([1, 2, 3], "JSON object"), ("{", "unreadable metadata")])
def test_bad_checkpoint_metadata(tmp_path, capsys, meta, needle):
    (tmp_path / "policy.safetensors").write_bytes(b"")
    (tmp_path / "meta.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    assert needle in one_line_error(capsys, ["evaluate", str(tmp_path)])


@pytest.mark.parametrize("argv, needle", [
    (["baselines", "gpt3xl-rtx3080ti", "--frontier", "x,y"], "'x' is not a fraction"),
    (["baselines", "gpt3xl-rtx3080ti", "--time-limit", "-1"], "must be above 0"),
    (["baselines", "gpt3xl-rtx3080ti", "--latency", "nan"], "not a finite number"),
    (["doctor", "--period", "-1"], "must be at least 0"),
    (["apply", "--schedule", "s.json", "--warmup-steps", "many", "--", "true"], None),
])
def test_bad_arguments(capsys, argv, needle):
    if needle is None:  # parsed by the deploy settings: their one-line error
        assert "warmup_steps" in one_line_error(capsys, argv)
    else:
        assert needle in argparse_error(capsys, argv)


def test_outputs_under_a_regular_file(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert "is a file or lies under one" in one_line_error(
        capsys, ["baselines", "gpt3xl-rtx3080ti", "--out", str(tmp_path / "file" / "out"), "--frontier", ""])
    assert "is a file or lies under one" in one_line_error(
        capsys, ["train", "gpt3xl-rtx3080ti", "--runs-dir", str(tmp_path / "file" / "runs")])


def test_clock_control_without_a_gpu_is_refused_before_the_script_runs(tmp_path, capsys, monkeypatch):
    import rlclock.deploy.controller as controller

    monkeypatch.setattr(controller, "nvml_present", lambda: False)
    marker = tmp_path / "ran"
    err = one_line_error(capsys, ["apply", "--schedule", str(tmp_path / "s.json"), "--control-clocks", "--", "touch",
                                  str(marker)])
    assert "--control-clocks needs an NVIDIA GPU" in err and not marker.exists()


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["budget", "overrun_penalty", "scale", "time_price", "price_spread", "oops"]),
                       st.one_of(st.floats(allow_nan=True), st.integers(-10, 10), st.text(max_size=5), st.booleans(),
                                 st.none()), max_size=3))
def test_any_reward_block_is_accepted_or_one_clear_error(reward):
    try:
        spec = parse_env_spec({**BASE, "reward": reward})
    except SpecError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<dict>:")
    else:
        assert 0.0 <= spec.reward.budget <= 10.0 and spec.reward.scale > 0


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["timesteps", "n_envs", "seed", "algorithm", "policy"]),
                       st.one_of(st.integers(-5, 10**7), st.floats(), st.text(max_size=4), st.none(),
                                 st.lists(st.integers(-2, 64), max_size=3)), max_size=3))
def test_any_recipe_is_accepted_or_one_clear_error(recipe):
    try:
        cfg = parse_agent_config(recipe)
    except RlclockError as exc:
        assert "\n" not in str(exc)
    else:
        assert cfg.timesteps >= 0 and cfg.n_envs > 0


def test_a_shipped_name_still_loads():
    assert load_env_spec("gpt3xl-rtx3080ti").name == "gpt3xl-rtx3080ti"
