"""Agent recipe, imitation expert, training run folder, W&B offline, checkpoints and the numpy policy."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from stable_baselines3 import PPO

from rlclock.agents.imitation import LagrangianExpert
from rlclock.agents.tracking import wandb_mode
from rlclock.agents.train import _policy
from rlclock.cli import main
from rlclock.config import load_env_spec
from rlclock.config.recipe import load_agent_config, parse_agent_config
from rlclock.env import KernelClockEnv, episode_tables
from rlclock.errors import CheckpointError, SpecError
from rlclock.observation.lookahead import CURRENT_WIDTH
from rlclock.policy import DEFAULT_PRICE_REL, ClockPolicy, PlanningStep, save_checkpoint
from rlclock.policy.inputs import CONTEXT_BLOCK
from rlclock.policy.search import SEARCH_RANKS, ranked_choices
from rlclock.schedule import ClockSchedule
from tests.wandb_offline import read_offline_run

SMALL = {
    "name": "small",
    "gpu": "rtx3080ti",
    "workload": {"generator": "llmc", "batch": 8, "seq": 512, "hidden": 1024, "heads": 8, "layers": 2},
    "switch_latency_s": 0.0005,
    "actions": {"core_step_mhz": 210, "core_min_mhz": 630, "mem_mhz": [5001, 9501]},
    "observation": {"lookahead": 4},
    "reward": {"budget": 0.01},
}


def _random_model(env, seed):
    model = PPO(
        "MlpPolicy",
        env,
        seed=seed,
        device="cpu",
        policy_kwargs={"net_arch": {"pi": [32, 32], "vf": [32, 32]}, "activation_fn": torch.nn.Tanh},
    )
    with torch.no_grad():
        for p in model.policy.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model


def test_recipe_parsing_and_errors(tmp_path):
    cfg = load_agent_config("agents/ppo.yaml")
    assert cfg.algorithm == "ppo" and cfg.policy.net_arch == (64, 64) and cfg.imitation.iterations > 0
    with pytest.raises(SpecError, match="unknown field"):
        parse_agent_config({"ppo": {"learning_rte": 1e-3}})
    with pytest.raises(SpecError, match="activation"):
        parse_agent_config({"policy": {"activation": "gelu"}})
    with pytest.raises(SpecError, match="batch_size"):
        parse_agent_config({"n_envs": 3, "ppo": {"n_steps": 100, "batch_size": 64}})
    with pytest.raises(SpecError, match="not found"):
        load_agent_config(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="prices_per_round"):
        parse_agent_config({"imitation": {"prices_per_round": 0}})


@pytest.mark.parametrize("seed", range(3))
def test_numpy_policy_replays_the_sb3_policy_exactly(seed):
    spec = load_env_spec(SMALL)
    env = KernelClockEnv(spec)
    model = _random_model(env, seed)
    pol = _policy(model, [spec], env.configs, spec.lookahead, {})
    ep = episode_tables(spec)
    obs, _ = env.reset(seed=0, options={"time_price": pol.meta["price_rel"] * ep.mean_power_w})
    done, acts = False, []
    while not done:
        a, _ = model.predict(obs, deterministic=True)
        obs, _, done, _, info = env.step(int(a))
        acts.append(info["config"])  # the request the action made (keep: the last one)
    req = pol.plan(env.backend, spec.reward.budget, meet_budget=False).requests
    a, b = env.backend.run_indices(np.array(acts)), env.backend.run_indices(req)
    assert a.switches == b.switches > 0
    assert np.array_equal(a.config_index, b.config_index)  # the same clocks in effect at every kernel
    assert a.energy_j == b.energy_j and a.time_s == b.time_s


def test_budget_calibration_keeps_the_plan_within_budget():
    spec = load_env_spec(SMALL)
    env = KernelClockEnv(spec)
    backend = env.backend
    for seed in range(4):
        pol = _policy(_random_model(env, 10 + seed), [spec], env.configs, spec.lookahead, {})
        run = backend.run_indices(pol.plan(backend, 0.01).requests)
        raw = backend.run_indices(pol.plan(backend, 0.01, meet_budget=False).requests)
        auto = backend.auto_run()
        if raw.time_s <= auto.time_s * 1.01 or run.time_s <= auto.time_s * 1.01:
            assert run.time_s <= auto.time_s * 1.01 * (1 + 1e-9)


def test_expert_follows_the_lagrangian_optimum_and_prices_time():
    """Driven through the env, the expert's step is the energy + p·time optimum of the switching DAG; a
    higher price of time never makes the step slower, and at the exact optimum's multiplier the step is
    close to the optimum."""
    spec = load_env_spec(dict(SMALL, reward={"budget": 0.01, "time_price": "optimum"}))
    ep = episode_tables(spec)
    ex = LagrangianExpert(ep)
    env = KernelClockEnv(spec)
    times = []
    for rel in (0.5, 1.0, 2.0, ep.time_price / ep.mean_power_w):
        env.reset(seed=0, options={"time_price": rel * ep.mean_power_w})
        done = False
        while not done:
            core = env._core
            a = (
                ex.action(int(core.k[0]), int(core.state.current[0]), rel, env.keep_action)
                if core.state.pending[0] < 0
                else env.keep_action
            )
            _, _, done, _, info = env.step(a)
        _, t_dag, e_dag = ex.dag.follow(ex.choices(rel), 0)
        assert info["time_s"] == pytest.approx(t_dag, rel=1e-9) and info["energy_j"] == pytest.approx(e_dag, rel=1e-9)
        times.append(info["time_s"])
    assert times[0] >= times[1] >= times[2]
    from rlclock.solve.evaluation import optimum_for

    opt = optimum_for(ep.backend, 0.01)
    assert 1 - info["energy_j"] / ep.auto_total_j >= 0.9 * (1 - opt.energy_j / ep.auto_total_j)


def test_dagger_learns_to_agree_with_the_expert():
    """On one small workload, a few DAgger rounds lift the learner's agreement with the expert (on the
    learner's own decisions) well above a random network's."""
    from rlclock.agents.imitation import dagger

    env = KernelClockEnv(dict(SMALL, reward={"budget": 0.01, "time_price": "optimum"}))
    rep = dagger(_random_model(env, 0), env, iterations=3, epochs=5, min_updates=200, prices_per_round=2, seed=0)
    assert rep.samples[-1] > rep.samples[0] > 0
    # a random network already "agrees" where any slot it picks holds the configuration in effect
    assert rep.agreement[-1] > 0.7 and np.mean(rep.agreement[1:]) > rep.agreement[0] + 0.15, rep.agreement


def test_class_balance_weighs_rare_requests_up():
    """Balanced labels give every action requested the same total weight; the mean label weight stays 1; off
    (0) is plain cross-entropy."""
    import torch

    from rlclock.agents.imitation import label_weights

    labels = torch.tensor([0] * 96 + [3] * 4)
    assert label_weights(labels, 0.0) is None
    w = label_weights(labels, 1.0)
    counts = torch.bincount(labels).float()
    assert w.shape == (4,) and w[1] == 0 and w[2] == 0
    assert torch.isclose(w[0] * counts[0], w[3] * counts[3]) and torch.isclose((w * counts).sum(), torch.tensor(100.0))
    half = label_weights(labels, 0.5)
    assert 1 < float(half[3] / half[0]) < float(w[3] / w[0])  # partial balance lies between


def _checkpoint(tmp_path) -> Path:
    spec = load_env_spec(SMALL)
    env = KernelClockEnv(spec)
    pol = _policy(_random_model(env, 0), [spec], env.configs, spec.lookahead, {"env_spec": SMALL})
    return save_checkpoint(
        tmp_path / "ck",
        pol.weights,
        {k: v for k, v in pol.meta.items() if k not in ("format", "version", "activation")},
    )


def test_checkpoint_roundtrip_without_pickle(tmp_path):
    ck = _checkpoint(tmp_path)
    assert sorted(p.name for p in ck.iterdir()) == ["meta.json", "policy.safetensors"]
    pol = ClockPolicy.load(ck)
    backend = episode_tables(load_env_spec(SMALL)).backend
    sched = pol.schedule(backend.trace, backend=backend)
    assert len(sched) == len(backend.trace)
    pol.check_gpu("rtx3080ti")
    with pytest.raises(CheckpointError, match="trained for NVIDIA GeForce RTX 3080 Ti, not NVIDIA H200"):
        pol.check_gpu("h200-sxm")


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda m: m.update(feature_schema_version=99), "feature schema"),
        (lambda m: m.update(clock_table="0000"), "clock table"),
        (lambda m: m.update(format="other"), "format"),
        (lambda m: m.update(lookahead=7), "observation entries"),
        (
            lambda m: m.update(
                configs=[c for c in m["configs"] if not c.endswith("@" + m["configs"][-1].split("@")[1])]
            ),
            "candidate slots",
        ),
    ],
)
def test_mismatched_checkpoints_are_refused(tmp_path, edit, needle):
    ck = _checkpoint(tmp_path)
    meta = json.loads((ck / "meta.json").read_text())
    edit(meta)
    (ck / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=needle):
        ClockPolicy.load(ck)


def test_missing_and_corrupt_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="not an rlclock checkpoint"):
        ClockPolicy.load(tmp_path)
    ck = _checkpoint(tmp_path)
    (ck / "policy.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="unreadable weights"):
        ClockPolicy.load(ck)


def test_wandb_mode(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    assert wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"


def test_train_cli_writes_a_self_describing_run_and_tracks_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))  # staged artifact copies
    env_file = tmp_path / "small.yaml"
    env_file.write_text(yaml.safe_dump(SMALL))
    agent = tmp_path / "agent.yaml"
    agent.write_text(
        yaml.safe_dump(
            {
                "timesteps": 2048,
                "n_envs": 4,
                "ppo": {"n_steps": 256, "batch_size": 256},
                "eval": {"every_steps": 1024},
                "policy": {"net_arch": [32, 32]},
                "imitation": {"iterations": 2, "epochs": 3},
            }
        )
    )
    ck = tmp_path / "checkpoints" / "small"
    assert (
        main(
            [
                "train",
                str(env_file),
                "--agent",
                str(agent),
                "--timesteps",
                "2048",
                "--runs-dir",
                str(tmp_path / "runs"),
                "--save-checkpoint",
                str(ck),
                "--no-progress",
                "--track",
                "--wandb-project",
                "rlclock-tests",
                "--wandb-group",
                "ci",
                "--name",
                "my run ü",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "PPO policy" in out and "latency-aware" in out
    run = next((tmp_path / "runs").iterdir())
    for name in (
        "config.yaml",
        "sb3_model.zip",
        "metrics.csv",
        "summary.json",
        "pareto.png",
        "timeline.png",
        "policy/meta.json",
        "policy/policy.safetensors",
    ):
        assert (run / name).exists(), name
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["agent"]["timesteps"] == 2048 and cfg["git"] and "train" in cfg["command"]
    (offline,) = (run / "wandb").glob("offline-run-*")
    logged = read_offline_run(offline)
    assert (logged.project, logged.group) == ("rlclock-tests", "ci")
    assert logged.config["name"] == "my run ü"  # the user's name is kept; the artifact's is made W&B-safe
    # every numeric SB3 value, numpy scalars included, on the global_step axis
    ppo = logged.rows_with("train/approx_kl")
    assert len(ppo) == 2 and all(isinstance(r["train/approx_kl"], float) and r["global_step"] > 0 for r in ppo)
    assert logged.rows_with("rollout/ep_rew_mean")  # SB3's standard keys, every update's included
    assert logged.rows_with("time/fps") and logged.rows_with("energy/fraction_of_optimum")
    rounds = logged.rows_with("imitation/agreement")
    assert [r["imitation/round"] for r in rounds] == [1, 2] and rounds[-1]["imitation/samples"] > 0
    final = logged.rows_with("plots/pareto") + logged.rows_with("energy/schedule")
    assert len(final) == 2 and all(r["global_step"] == meta_steps(run) for r in final)
    (model,) = [a for a in logged.artifacts if a["type"] == "model"]
    assert model["name"] == "policy-my-run" and {"meta.json", "policy.safetensors", "sb3_model.zip"} <= set(
        model["files"]
    )
    meta = json.loads((ck / "meta.json").read_text())
    assert meta["gpu_key"] == "rtx3080ti" and meta["training"]["timesteps"] >= 2048
    assert (ck / "sb3_model.zip").exists()
    assert main(["evaluate", str(ck), "--env", str(env_file), "--out", str(tmp_path / "ev")]) == 0
    assert (tmp_path / "ev" / "small" / "timeline.png").exists()


def meta_steps(run: Path) -> int:
    """The environment steps a run's checkpoint says it trained for."""
    return int(json.loads((run / "policy" / "meta.json").read_text())["training"]["timesteps"])


def _random_policy(seed: int):
    """A random policy on SMALL and SMALL's step as its planner sees it."""
    spec = load_env_spec(SMALL)
    env = KernelClockEnv(spec)
    pol = _policy(_random_model(env, seed), [spec], env.configs, spec.lookahead, {})
    return pol, PlanningStep.of(env.backend)


def test_rollout_takes_one_price_or_one_per_kernel():
    pol, step = _random_policy(3)
    n = step.n
    assert np.array_equal(pol.rollout(step, 1.3).requests, pol.rollout(step, np.full(n, 1.3)).requests)
    half = n // 2
    low = pol.rollout(step, 0.3).requests
    mixed = pol.rollout(step, np.where(np.arange(n) < half, 0.3, 3.0))
    assert np.array_equal(mixed.requests[:half], low[:half])  # kernel k decides at price k
    assert np.isfinite(mixed.time_s) and np.isfinite(mixed.energy_j)


def test_the_in_effect_part_is_computed_only_for_configurations_a_rollout_holds():
    """A step's rollout holds a handful of the configurations: the first layer's part for the configuration
    in effect is computed per configuration held, a block of contexts at a time, not for all of them."""
    pol, step = _random_policy(4)
    prepared = pol.prepare(step)
    req = pol.rollout(step, 1.1, prepared=prepared).requests
    tab = pol.evaluator.price_tables(prepared, 1.1)
    assert set(tab.now) <= set(req.tolist()) | {0}
    assert 0 in tab.now and len(tab.now) < len(pol.configs)
    look = prepared.look
    for c, rows in tab.now.items():  # each equals its parts: bins and in-effect flags, then the configuration's
        assert rows.done.any()
        for u in np.flatnonzero(np.repeat(rows.done, CONTEXT_BLOCK)[: look.n_contexts]):
            bins = look.bin_features(u, c, 1.1, extra=look.n_slots)
            bins[CURRENT_WIDTH:] = tab.candidates[u] == c
            np.testing.assert_allclose(
                rows.values[u], bins @ pol.evaluator.first.now + pol.evaluator.now_config[c], rtol=1e-6, atol=1e-6
            )


def test_the_in_effect_part_of_a_context_does_not_depend_on_which_contexts_asked_first():
    """The in-effect sums are filled a fixed block of contexts at a time: asking for contexts one by one, in
    reverse, gives the same float32 rows, bit for bit, as asking for all of them at once."""
    pol, step = _random_policy(4)
    ev = pol.evaluator
    prepared = pol.prepare(step)
    look = prepared.look
    everything = np.arange(look.n_contexts)
    at_once = ev.now_rows(look, ev.price_tables(prepared, 0.8), 0, everything).copy()
    prepared = pol.prepare(step)
    tab = ev.price_tables(prepared, 0.8)
    for u in everything[::-1].tolist():
        one_by_one = ev.now_rows(look, tab, 0, u)
    assert np.array_equal(at_once, one_by_one)


@pytest.mark.parametrize("latency_s", [0.0, 0.0005, 0.004, 10.0])
def test_the_rollout_accounts_its_plan_as_the_backend_runs_it(latency_s):
    """The planned step's time and energy are the backend's for the returned requests: switches landing
    inside a kernel, at once (no latency) and never (still in flight when the step ends)."""
    pol, step = _random_policy(5)
    step = dataclasses.replace(step, latency_s=latency_s)
    spec = load_env_spec(dict(SMALL, switch_latency_s=latency_s))
    backend = spec.build_backend()
    for price in (0.3, 3.0):
        planned = pol.rollout(step, price)
        run = backend.run(ClockSchedule(pol.configs, planned.requests))
        assert run.switches > 0
        assert planned.time_s == pytest.approx(run.time_s, rel=1e-9)
        assert planned.energy_j == pytest.approx(run.energy_j, rel=1e-9)


@pytest.mark.parametrize("latency_s, price_rel", [(0.0005, 0.3), (0.0005, 1.0), (0.0, 5.0), (0.002, 1.7)])
def test_numpy_rollout_sees_exactly_what_the_env_shows(latency_s, price_rel):
    """At every decision the numpy rollout's first-layer input equals ``W1 · obs + b1`` of the env's
    observation at the same state (features, clock response, price, time left, latency, keep)."""
    spec = load_env_spec(dict(SMALL, switch_latency_s=latency_s))
    env = KernelClockEnv(spec)
    pol = _policy(_random_model(env, 7), [spec], env.configs, spec.lookahead, {})
    keep = env.keep_action
    head_w, head_b = pol.weights.head
    head_b = head_b.copy()
    head_b[keep] += 6.0  # lean on keep so that path is exercised too
    pol.weights.__dict__["head"] = (head_w, head_b)
    seen: list[np.ndarray] = []
    req = pol.rollout(env.backend, price_rel, first_layer=seen).requests
    ep = episode_tables(spec)
    obs, _ = env.reset(seed=0, options={"time_price": price_rel * ep.mean_power_w})
    w1, b1 = pol.weights.hidden[0]
    done, i, keeps = False, 0, 0
    while not done:
        core = env._core
        k = int(core.k[0])
        if core.state.pending[0] < 0:
            np.testing.assert_allclose(seen[i], w1 @ obs.astype(np.float64) + b1, rtol=1e-5, atol=1e-5)
            a = int(pol.weights.act(obs[None])[0])
            keeps += a == keep
            i += 1
        else:
            a = keep
        obs, _, done, _, info = env.step(a)
        assert info["config"] == req[k]
    assert i == len(seen) and keeps > 0


def test_bad_prices_and_actions_get_one_clear_error():
    from rlclock.agents.vec_env import KernelClockSB3VecEnv

    pol, step = _random_policy(1)
    for bad in (float("nan"), -1.0, np.ones(3)):
        with pytest.raises(CheckpointError, match="price of time"):
            pol.rollout(step, bad)
    vec = KernelClockSB3VecEnv(2, SMALL)
    vec.reset()
    with pytest.raises(SpecError, match="outside the action space"):
        vec.step(np.array([0, vec.action_space.n]))


def test_repeated_layers_share_decisions_and_the_plan_is_unchanged():
    """Kernels of repeated layers that see the same inputs reuse a decision per state: the plan equals the
    one computed decision by decision (timings asked for: no reuse)."""
    pol = ClockPolicy.load("checkpoints/gpt3xl-rtx3080ti")
    step = PlanningStep.of(episode_tables(load_env_spec("gpt3xl-rtx3080ti")).backend)
    prepared = pol.prepare(step)
    assert len(set(prepared.situation)) < step.n / 4
    for price in (0.7, 1.3, np.where(np.arange(step.n) < 300, 0.7, 1.3)):
        shared = pol.rollout(step, price, prepared=prepared)
        each = pol.rollout(step, price, prepared=prepared, timings=[])
        assert np.array_equal(shared.requests, each.requests)
        assert (shared.time_s, shared.energy_j) == (each.time_s, each.energy_j)


def test_the_search_over_the_best_choices_only_lowers_the_objective_and_keeps_the_budget():
    """The search replaces first choices by the policy's next best only, and its plan's energy + price·time is
    the least it counted and no more than the first choices'; without replacements the plan is the first
    choices'; a plan with the search fits the budget and uses no more energy than the plan without it."""
    pol, step = _random_policy(6)
    prepared = pol.prepare(step)
    price = 1.2
    weight = price * step.auto_energy_j.sum() / step.auto_time_s.sum()
    plain = pol.rollout(step, price, prepared=prepared)
    before = plain.energy_j + weight * plain.time_s
    found = ranked_choices(pol.evaluator, step, prepared, price)
    tab = pol.evaluator.price_tables(prepared, price)
    k, c = np.nonzero(found.overrides >= 0)
    assert k.size and all(
        found.overrides[i, j] in tab.decided[j].ranked[prepared.situation[i], 1:SEARCH_RANKS]
        for i, j in zip(k.tolist(), c.tolist(), strict=True)
    )  # the next best choices only
    none = np.full_like(found.overrides, -1)
    assert np.array_equal(pol.rollout(step, price, prepared=prepared, overrides={price: none}).requests, plain.requests)
    searched = pol.rollout(step, price, prepared=prepared, overrides={price: found.overrides})
    after = searched.energy_j + weight * searched.time_s
    assert after == pytest.approx(found.objective_j, rel=1e-12)
    assert after <= before * (1 + 1e-12) and (after < before) == (not np.array_equal(searched.requests, plain.requests))
    spec = load_env_spec(SMALL)
    backend = KernelClockEnv(spec).backend
    auto = backend.auto_run()
    runs = [backend.run(ClockSchedule(pol.configs, pol.plan(backend, 0.01, search=s).requests)) for s in (False, True)]
    assert all(r.time_s <= auto.time_s * 1.01 * (1 + 1e-9) for r in runs)
    assert runs[1].energy_j <= runs[0].energy_j * (1 + 1e-12)
    # without calibration: the search at the trained price, judged by that price's objective
    start = DEFAULT_PRICE_REL
    w = start * auto.energy_j / auto.time_s
    fixed = [
        backend.run(ClockSchedule(pol.configs, pol.plan(backend, 0.01, meet_budget=False, search=s).requests))
        for s in (False, True)
    ]
    assert fixed[1].energy_j + w * fixed[1].time_s <= (fixed[0].energy_j + w * fixed[0].time_s) * (1 + 1e-12)
