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

BASE = {
    "name": "x",
    "gpu": "rtx3080ti",
    "workload": {"generator": "llmc", "batch": 8, "seq": 512, "hidden": 1024, "heads": 16, "layers": 2},
    "actions": {"core_step_mhz": 210, "core_min_mhz": 630, "mem_mhz": [5001, 9501]},
}


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


@pytest.mark.parametrize(
    "change, needle",
    [
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
    ],
)
def test_bad_env_specs(tmp_path, capsys, change, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**BASE, **change}))
    assert needle in one_line_error(capsys, ["simulate", str(path)])


@pytest.mark.parametrize(
    "text, needle",
    [
        ("name: a\nname: b\ngpu: rtx3080ti\n", "appears twice"),
        ("gpu: [unclosed\n", "cannot read env spec"),
    ],
)
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


@pytest.mark.parametrize(
    "recipe, needle",
    [
        ({"timesteps": "lots"}, "timesteps"),
        ({"timesteps": -5}, "timesteps"),
        ({"ppo": {"learning_rte": 1e-3}}, "unknown field"),
        ({"timesteps": 0, "imitation": {"iterations": 0}}, "train nothing"),
    ],
)
def test_bad_recipes(tmp_path, capsys, recipe, needle):
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert needle in one_line_error(capsys, ["train", "gpt3xl-rtx3080ti", "--agent", str(path)])


def test_a_negative_timesteps_override(capsys):
    assert "timesteps" in one_line_error(capsys, ["train", "gpt3xl-rtx3080ti", "--timesteps", "-5"])


@pytest.mark.parametrize("meta, needle", [([1, 2, 3], "JSON object"), ("{", "cannot read checkpoint metadata")])
def test_bad_checkpoint_metadata(tmp_path, capsys, meta, needle):
    (tmp_path / "policy.safetensors").write_bytes(b"")
    (tmp_path / "meta.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    assert needle in one_line_error(capsys, ["evaluate", str(tmp_path)])


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["baselines", "gpt3xl-rtx3080ti", "--frontier", "x,y"], "'x' is not a fraction"),
        (["baselines", "gpt3xl-rtx3080ti", "--time-limit", "-1"], "must be above 0"),
        (["baselines", "gpt3xl-rtx3080ti", "--latency", "nan"], "not a finite number"),
        (["doctor", "--period", "-1"], "must be at least 0"),
        (["apply", "--schedule", "s.json", "--warmup-steps", "many", "--", "true"], None),
    ],
)
def test_bad_arguments(capsys, argv, needle):
    if needle is None:  # parsed by the deploy settings: their one-line error
        assert "warmup_steps" in one_line_error(capsys, argv)
    else:
        assert needle in argparse_error(capsys, argv)


def test_outputs_under_a_regular_file(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert "is a file or lies under one" in one_line_error(
        capsys, ["baselines", "gpt3xl-rtx3080ti", "--out", str(tmp_path / "file" / "out"), "--frontier", ""]
    )
    assert "is a file or lies under one" in one_line_error(
        capsys, ["train", "gpt3xl-rtx3080ti", "--runs-dir", str(tmp_path / "file" / "runs")]
    )


def test_clock_control_without_a_gpu_is_refused_before_the_script_runs(tmp_path, capsys, monkeypatch):
    import rlclock.deploy.controller as controller

    monkeypatch.setattr(controller, "nvml_present", lambda: False)
    marker = tmp_path / "ran"
    err = one_line_error(
        capsys, ["apply", "--schedule", str(tmp_path / "s.json"), "--control-clocks", "--", "touch", str(marker)]
    )
    assert "--control-clocks needs an NVIDIA GPU" in err and not marker.exists()


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["budget", "overrun_penalty", "scale", "time_price", "price_spread", "oops"]),
        st.one_of(st.floats(allow_nan=True), st.integers(-10, 10), st.text(max_size=5), st.booleans(), st.none()),
        max_size=3,
    )
)
def test_any_reward_block_is_accepted_or_one_clear_error(reward):
    try:
        spec = parse_env_spec({**BASE, "reward": reward})
    except SpecError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<dict>:")
    else:
        assert 0.0 <= spec.reward.budget <= 10.0 and spec.reward.scale > 0


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["timesteps", "n_envs", "seed", "algorithm", "policy"]),
        st.one_of(
            st.integers(-5, 10**7),
            st.floats(),
            st.text(max_size=4),
            st.none(),
            st.lists(st.integers(-2, 64), max_size=3),
        ),
        max_size=3,
    )
)
def test_any_recipe_is_accepted_or_one_clear_error(recipe):
    try:
        cfg = parse_agent_config(recipe)
    except RlclockError as exc:
        assert "\n" not in str(exc)
    else:
        assert cfg.timesteps >= 0 and cfg.n_envs > 0


def test_a_shipped_name_still_loads():
    assert load_env_spec("gpt3xl-rtx3080ti").name == "gpt3xl-rtx3080ti"


# -- class by class: each a table of cases (or a property), each case one line before any work -------------------


def _checkpoint(tmp_path, change=None, text=None):
    """A copy of a shipped checkpoint, its meta.json changed."""
    import shutil

    from rlclock.policy.checkpoint import checkpoint_folder

    folder = tmp_path / "ck"
    shutil.copytree(checkpoint_folder("gpt3xl-rtx3080ti"), folder)
    meta = json.loads((folder / "meta.json").read_text())
    if change is not None:
        change(meta)
    body = json.dumps(meta)
    if text is not None:
        body = body.replace(*text, 1)
    (folder / "meta.json").write_text(body)
    return folder


TAMPERED_META = [
    (lambda m: m.update(latency_s="fast"), None, "latency_s"),
    (lambda m: m.update(latency_s=-0.03), None, "latency_s"),
    (None, ('"latency_s": ', '"latency_s": NaN, "was": '), "NaN"),
    (lambda m: m.update(lookahead="eight"), None, "lookahead"),
    (lambda m: m.update(lookahead=10**6), None, "lookahead"),
    (lambda m: m.update(obs_size=0), None, "obs_size"),
    (lambda m: m.update(budget=5.0), None, "budget"),
    (lambda m: m.update(price_rel=-2.0), None, "price_rel"),
    (lambda m: m.pop("configs"), None, "configs"),
    (lambda m: m.pop("clock_table"), None, "clock_table"),
    (lambda m: m.pop("gpu_key"), None, "gpu_key"),
    (lambda m: m.update(configs="auto"), None, "configs"),
    (lambda m: m["configs"].append("1234@9501"), None, "1234@9501"),
    (lambda m: m.update(activation="gelu"), None, "activation"),
    (lambda m: m.update(training="PPO"), None, "training"),
    (lambda m: m.update(gpu_key="rtx9999"), None, "rtx9999"),
    (None, ('"gpu_key"', '"gpu_key": "x", "gpu_key"'), "twice"),
]


@pytest.mark.parametrize("change, text, needle", TAMPERED_META)
def test_tampered_checkpoint_metadata_is_one_line(tmp_path, capsys, change, text, needle):
    from rlclock.errors import CheckpointError
    from rlclock.policy import ClockPolicy

    folder = _checkpoint(tmp_path, change, text)
    with pytest.raises(CheckpointError) as exc:
        ClockPolicy.load(folder)
    line = str(exc.value)
    assert needle in line and "\n" not in line and "Fix:" in line, line
    assert needle in one_line_error(capsys, ["evaluate", str(folder), "--out", str(tmp_path / "o")])


def test_a_run_folder_is_read_where_a_checkpoint_belongs(tmp_path):
    """`evaluate RUNDIR`: the folder `rlclock train` wrote is a checkpoint's place (its policy/ is read)."""
    from rlclock.policy import ClockPolicy

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("name: x\n")
    _checkpoint(tmp_path).rename(run / "policy")
    assert ClockPolicy.load(run).meta["gpu_key"] == "rtx3080ti"
    (run / "policy").rename(tmp_path / "elsewhere")
    with pytest.raises(RlclockError, match=r"run folder whose policy was not saved yet.*--resume"):
        ClockPolicy.load(run)


ABSURD_RECIPES = [
    ({"ppo": {"learning_rate": float("inf")}}, "learning_rate"),
    ({"ppo": {"learning_rate": 1e30}}, "learning_rate"),
    ({"ppo": {"learning_rate": float("nan")}}, "learning_rate"),
    ({"imitation": {"learning_rate": 5.0}}, "learning_rate"),
    ({"policy": {"net_arch": [100_000] * 4}}, "net_arch"),
    ({"policy": {"net_arch": [64] * 40}}, "net_arch"),
    ({"n_envs": 10**6}, "n_envs"),
    ({"ppo": {"n_steps": 10**9}}, "n_steps"),
    ({"timesteps": 10**15}, "timesteps"),
    ({"timesteps": 1000, "n_envs": 16, "ppo": {"n_steps": 512, "batch_size": 512}}, "one PPO update"),
    ({"seed": 2**40}, "seed"),
    ({"imitation": {"iterations": 10**9}}, "iterations"),
    ({"ppo": {"clip_range": 1e9}}, "clip_range"),
    ({"checkpoint_every": 0}, "checkpoint_every"),
]


@pytest.mark.parametrize("recipe, needle", ABSURD_RECIPES)
def test_finite_but_absurd_recipes_are_refused(recipe, needle):
    with pytest.raises(SpecError, match=needle) as exc:
        parse_agent_config(recipe, "agent.yaml")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("arch, fits", [([64, 64], True), ([2048, 2048], True), ([16384] * 4, False)])
def test_a_network_too_large_for_its_observation_is_refused_before_training(arch, fits):
    cfg = parse_agent_config({"policy": {"net_arch": arch}})
    if fits:
        cfg.check_fits(2000, 50, "agent.yaml")
    else:
        with pytest.raises(SpecError, match="weights on 2000 observation entries"):
            cfg.check_fits(2000, 50, "agent.yaml")


BUDGET_DOORS = {
    "env spec": lambda v: parse_env_spec({**BASE, "reward": {"budget": v}}),
    "check_budget": lambda v: __import__("rlclock.validation", fromlist=["x"]).check_budget(v, "x"),
    "--budget": lambda v: main(["simulate", "gpt3xl-rtx3080ti", "--budget", str(v)]),
    "--frontier": lambda v: main(["baselines", "gpt3xl-rtx3080ti", "--frontier", f"0,{v}"]),
}


@pytest.mark.parametrize("door", sorted(BUDGET_DOORS))
@pytest.mark.parametrize("value", [5.0, -0.01, float("nan"), 0.5000001])
def test_one_budget_rule_at_every_door(capsys, door, value):
    from rlclock.validation import BUDGET_FIX

    try:
        code = BUDGET_DOORS[door](value)
    except RlclockError as exc:
        line = str(exc)
    else:
        assert code == 2
        line = capsys.readouterr().err.strip()
    assert BUDGET_FIX.rstrip(".") in line and "\n" not in line, line


@pytest.mark.parametrize("door", ["env spec", "check_budget"])
def test_the_budget_fix_applied_works(door):
    """The fix says 0 to 0.5: the ends of that range are taken."""
    for value in (0.0, 0.5):
        BUDGET_DOORS[door](value)


def test_the_deploy_settings_take_the_same_budget_range():
    """`rlclock apply --budget` refuses and takes what every other door does."""
    from rlclock.deploy.settings import DeploySettings
    from rlclock.errors import DeployError
    from rlclock.validation import MAX_BUDGET, validate

    validate(DeploySettings, {"checkpoint": "gpt3xl-h200", "learn": True, "budget": MAX_BUDGET}, "x", DeployError)
    with pytest.raises(DeployError, match="budget"):
        validate(
            DeploySettings, {"checkpoint": "gpt3xl-h200", "learn": True, "budget": MAX_BUDGET * 1.01}, "x", DeployError
        )


@pytest.mark.parametrize("mode", ["garbage", "on", "1"])
def test_a_bad_wandb_mode_is_refused_before_the_run_folder(tmp_path, capsys, monkeypatch, mode):
    from rlclock.agents.tracking import wandb_mode

    monkeypatch.setenv("WANDB_MODE", mode)
    err = one_line_error(capsys, ["train", "gpt3xl-rtx3080ti", "--track", "--runs-dir", str(tmp_path / "runs")])
    assert "WANDB_MODE" in err and "WANDB_MODE=offline" in err and not (tmp_path / "runs").exists()
    monkeypatch.setenv("WANDB_MODE", "offline")  # the fix
    assert wandb_mode() == "offline"


OUTPUTS = [
    (["baselines", "gpt3xl-rtx3080ti", "--out", "{p}"], "--out"),
    (["evaluate", "gpt3xl-rtx3080ti", "--out", "{p}"], "--out"),
    (["train", "gpt3xl-rtx3080ti", "--save-checkpoint", "{p}", "--runs-dir", "{t}/runs"], "--save-checkpoint"),
    (["train", "gpt3xl-rtx3080ti", "--runs-dir", "{p}"], "runs folder"),
    (["measure", "{t}/t.json", "--out", "{p}/m.json"], "--out"),
    (["profile", "--out", "{p}/t.json"], "--out"),
    (["doctor", "--spec-out", "{p}/g.yaml"], "--spec-out"),
    (["calibrate", "--simulated", "1", "--out", "{p}/g.yaml"], "--out"),
    (["calibrate", "--simulated", "1", "--table-out", "{p}/s.csv"], "--table-out"),
]


@pytest.mark.parametrize("argv, option", OUTPUTS)
@pytest.mark.parametrize("place", ["a file", "under a file"])
def test_an_output_that_cannot_be_written_is_refused_before_the_work(
    tmp_path, capsys, monkeypatch, argv, option, place
):
    import rlclock.solve.baselines as baselines

    def no_work(*a, **k):
        raise AssertionError("the work started before the output was checked")

    monkeypatch.setattr(baselines, "run_baselines", no_work)
    (tmp_path / "file").write_text("")
    (tmp_path / "t.json").write_text(
        json.dumps(
            {
                "format": "rlclock.trace",
                "version": 1,
                "name": "t",
                "kernels": [
                    {
                        "name": "k",
                        "op": "o",
                        "category": "gemm",
                        "phase": "forward",
                        "flops": 1.0,
                        "dram_read_bytes": 1.0,
                        "dram_write_bytes": 1.0,
                    }
                ],
            }
        )
    )
    path = str(tmp_path / "file") if place == "a file" else str(tmp_path / "file" / "sub")
    err = one_line_error(capsys, [a.replace("{p}", path).replace("{t}", str(tmp_path)) for a in argv])
    assert option in err and ("file" in err) and "Fix:" in err, err


@pytest.mark.parametrize("option", ["--out", "--save-checkpoint", "--table-out"])
def test_the_output_fix_applied_works(tmp_path, option):
    """ "give OPTION a folder": a folder (created if missing) passes the check that refused the file."""
    from rlclock.validation import check_output_file, check_output_folder

    (tmp_path / "file").write_text("")
    with pytest.raises(SpecError, match="is a file"):
        check_output_folder(tmp_path / "file", option)
    assert check_output_folder(tmp_path / "new" / "folder", option).is_dir()
    assert check_output_file(tmp_path / "new2" / "x.json", option).parent.is_dir()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:&*[]{}-, \n\t!'\"#|>0.9e")), max_size=120))
def test_any_yaml_text_reads_or_is_one_clear_error(text):
    from rlclock.yamlio import parse_yaml

    try:
        parse_yaml(text, "x.yaml", "env spec")
    except SpecError as exc:
        assert "\n" not in str(exc) and "x.yaml" in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('{}[]":,0123456789.eE-+ tfnaulNIy')), max_size=120))
def test_any_json_text_reads_strictly_or_is_one_clear_error(text):
    from rlclock.yamlio import parse_json

    try:
        value = parse_json(text, "x.json", "schedule")
    except SpecError as exc:
        assert "\n" not in str(exc)
    else:
        assert ("NaN" not in text and "Infinity" not in text) or not isinstance(value, float)


@pytest.mark.parametrize("reader", ["env spec", "agent recipe", "GPU spec", "run config"])
@pytest.mark.parametrize(
    "body, needle",
    [
        ("a: &a [x, x, x]\nb: [*a, *a]\n", "alias"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "nested deeper"),
        ("a: " + "x" * (2 << 20) + "\n", "larger than"),
    ],
)
def test_yaml_that_would_expand_or_drown_is_refused(tmp_path, reader, body, needle):
    import time

    from rlclock.yamlio import read_yaml

    path = tmp_path / "f.yaml"
    path.write_text(body)
    start = time.perf_counter()
    with pytest.raises(SpecError, match=needle):
        read_yaml(path, reader)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize(
    "workload, needle",
    [
        ({"generator": "llmc", "layers": 10**6}, "more than rlclock plans"),
        ({"generator": "llmc", "layers": 10**12}, "more than rlclock plans"),
        ({"generator": "llmc", "hidden": 2**20, "heads": 16}, "'hidden'"),
        ({"generator": "llmc", "batch": 10**9}, "'batch'"),
        ({"generator": "transformer", "layers": 10**7}, "more than rlclock plans"),
        ({"generator": "transformer", "vocab": 10**12}, "'vocab'"),
        ({"generator": "transformer", "seq": 1 << 21, "batch": 1 << 10}, "'tokens'"),
    ],
)
def test_a_step_past_the_limits_is_refused_before_it_is_built(workload, needle):
    import time

    spec = parse_env_spec({**BASE, "workload": workload})
    start = time.perf_counter()
    with pytest.raises(SpecError, match=needle) as exc:
        spec.build_trace()
    assert time.perf_counter() - start < 5.0 and "\n" not in str(exc.value) and "Fix: give" in str(exc.value)


def test_the_layers_fix_applied_fits():
    """ "give fewer layers (at most about N)": N layers fit the kernel limit, N + 1 do not."""
    import re

    from rlclock.validation import MAX_KERNELS
    from rlclock.workload.llmc import LlmcConfig, gpt3xl_step, step_kernels

    with pytest.raises(SpecError) as exc:
        gpt3xl_step(LlmcConfig(layers=10**6))
    n = int(re.search(r"at most about (\d+)", str(exc.value)).group(1))
    per_layer = len(step_kernels(LlmcConfig(layers=2))) - len(step_kernels(LlmcConfig(layers=1)))
    assert len(step_kernels(LlmcConfig(layers=1))) + (n - 1) * per_layer <= MAX_KERNELS
    assert len(step_kernels(LlmcConfig(layers=1))) + n * per_layer > MAX_KERNELS


@pytest.mark.parametrize(
    "family, needle",
    [
        ({"random": 10**6}, "random"),
        (["gpt3xl-rtx3080ti"] * 1001, "family of 1001"),
    ],
)
def test_a_family_past_its_limit_is_refused(tmp_path, family, needle):
    from rlclock.config import load_env_specs

    (tmp_path / "fam.yaml").write_text(yaml.safe_dump({"family": family}))
    with pytest.raises(SpecError, match=needle):
        load_env_specs(str(tmp_path / "fam.yaml"))


@pytest.mark.parametrize(
    "runs, needle",
    [
        ([[0, 10**12]], "more than 1048576 kernels"),
        ([[0, 600_000], [0, 600_000]], "more than 1048576 kernels"),
        ([[0, -1]], "whole number >= 1"),
        ([[0, True]], "whole number >= 1"),
        ([[5, 1]], "refers to configuration 5"),
        ([["a", 1]], "malformed"),
        ("all", "must be lists"),
    ],
)
def test_schedule_runs_are_checked_before_they_are_expanded(runs, needle):
    import time

    from rlclock.errors import ScheduleError
    from rlclock.schedule import ClockSchedule

    start = time.perf_counter()
    with pytest.raises(ScheduleError, match=needle):
        ClockSchedule.from_dict({"format": "rlclock.schedule", "configs": ["auto"], "runs": runs})
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    "measured, needle",
    [
        ({"gpu": "x", "time_s": 1e6, "energy_j": 0.0}, "not a time from 0 to 60 s"),
        ({"gpu": "x", "time_s": 1e-3, "energy_j": 0.0}, "outside the 1-5000 W"),
        ({"gpu": "x", "time_s": 1e-3, "energy_j": 60.0}, "outside the 1-5000 W"),
        ({"gpu": "x", "time_s": "1 ms"}, "not a time"),
        ({"gpu": "x", "time_s": 1e-3, "core_mhz": "max"}, "core_mhz"),
        ({"gpu": 7, "time_s": 1e-3}, "'gpu'"),
    ],
)
def test_implausible_measurements_in_a_trace_are_refused(measured, needle):
    from rlclock.errors import TraceError
    from rlclock.workload.trace import KernelTrace

    kernel = {
        "name": "k",
        "op": "o",
        "category": "gemm",
        "phase": "forward",
        "flops": 1.0,
        "dram_read_bytes": 1.0,
        "dram_write_bytes": 1.0,
        "measured": [measured],
    }
    with pytest.raises(TraceError, match=needle):
        KernelTrace.from_dict({"format": "rlclock.trace", "version": 1, "name": "t", "kernels": [kernel]})
