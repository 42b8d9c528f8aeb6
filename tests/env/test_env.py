from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlclock  # noqa: F401  (registers the env)
from rlclock.agents.vec_env import KernelClockSB3VecEnv
from rlclock.config import load_env_spec
from rlclock.env import KernelClockEnv
from rlclock.errors import ClockError, EnvUsageError, SpecError

SMALL = {
    "name": "small",
    "gpu": "rtx3080ti",
    "workload": {"generator": "llmc", "batch": 8, "seq": 512, "hidden": 1024, "heads": 8, "layers": 2},
    "switch_latency_s": 0.002,
    "actions": {"core_step_mhz": 210, "core_min_mhz": 210},
    "observation": {"lookahead": 4},
    "reward": {"budget": 0.01, "overrun_penalty": 10.0, "scale": 100.0},
}


def test_env_checkers():
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = KernelClockEnv(SMALL)
    gym_check(env, skip_render_check=True)
    sb3_check(KernelClockEnv(SMALL), warn=False)


def test_registered_and_default_spec():
    env = gym.make("rlclock/KernelClock-v0")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert len(env.unwrapped.backend.trace) == 897  # the paper's GPT-3 XL step
    assert env.unwrapped.backend.latency_s == pytest.approx(0.030)


def _rollout(env, seed, policy_seed=1):
    rng = np.random.default_rng(policy_seed)
    obs, _ = env.reset(seed=seed)
    done, ret, infos, observations = False, 0.0, [], [obs]
    while not done:
        obs, r, done, _trunc, info = env.step(int(rng.integers(env.action_space.n)))
        ret += r
        infos.append(info)
        observations.append(obs)
    return ret, infos, np.array(observations)


def test_deterministic_for_a_seed():
    a = _rollout(KernelClockEnv(SMALL), 3)
    b = _rollout(KernelClockEnv(SMALL), 3)
    assert a[0] == b[0] and np.array_equal(a[2], b[2])


def test_return_telescopes_to_saving_minus_overrun_penalty():
    env = KernelClockEnv(SMALL)
    ret, infos, _ = _rollout(env, 0)
    last = infos[-1]
    overrun = max(0.0, last["time_s"] - 1.01 * last["auto_time_s"]) / last["auto_time_s"]
    assert ret == pytest.approx(100 * (last["saving"] - 10.0 * overrun), rel=1e-9, abs=1e-9)
    for key in ("energy_j", "time_s", "slowdown", "switches"):
        assert key in last


def test_all_auto_is_worth_nothing():
    env = KernelClockEnv(SMALL)
    env.reset(seed=0)
    done, total = False, 0.0
    while not done:
        _, r, done, _, info = env.step(0)
        total += r
    assert total == pytest.approx(0.0, abs=1e-9) and info["switches"] == 0 and info["slowdown"] == pytest.approx(0)


def test_vec_env_matches_single_env():
    vec = KernelClockSB3VecEnv(3, SMALL)
    single = [KernelClockEnv(SMALL) for _ in range(3)]
    obs = vec.reset()
    for j, e in enumerate(single):
        o, _ = e.reset(seed=0)
        assert np.array_equal(o, obs[j])
    rng = np.random.default_rng(0)
    n = len(single[0].backend.trace)
    for _step in range(n + 2):
        acts = rng.integers(0, vec.action_space.n, 3)
        vobs, vr, vd, vinfo = vec.step(acts)
        for j, e in enumerate(single):
            o, r, d, _, _info = e.step(int(acts[j]))
            assert r == pytest.approx(vr[j], rel=1e-5, abs=1e-6)
            assert d == vd[j]
            if d:
                assert np.array_equal(o, vinfo[j]["terminal_observation"])
                o, _ = e.reset(seed=0)
            assert np.array_equal(o, vobs[j])


def test_price_of_time_is_drawn_observed_and_charged():
    from rlclock.observation.features import price_feature
    from rlclock.observation.layout import N_STATE

    spec = dict(SMALL, reward={"budget": 0.01, "overrun_penalty": 0.0, "time_price": 500.0, "price_spread": 0.7})
    env = KernelClockEnv(spec)
    prices = {env.reset(seed=s)[1]["time_price"] for s in range(8)}
    assert len(prices) == 8 and all(500 * np.exp(-0.7) <= p <= 500 * np.exp(0.7) for p in prices)
    ep = env._ep
    for p in (100.0, 1000.0):
        obs, info = env.reset(seed=0, options={"time_price": p})
        assert info["time_price"] == p
        assert obs[-N_STATE + 10] == pytest.approx(price_feature(p / ep.mean_power_w))
        ret, done = 0.0, False
        while not done:
            _, r, done, _, info = env.step(env.action_space.n - 2)  # the slowest configuration (the last one is keep)
            ret += r
        dt = info["time_s"] - info["auto_time_s"]
        assert ret == pytest.approx(100 * (info["saving"] - p * dt / info["auto_energy_j"]), rel=1e-9)
    with pytest.raises(EnvUsageError, match="time_price"):
        env.reset(options={"time_price": -1.0})
    with pytest.raises(SpecError, match="price_spread"):
        KernelClockEnv(dict(SMALL, reward={"price_spread": 9}))


def test_family_of_workloads():
    other = dict(SMALL, name="other", workload=dict(SMALL["workload"], batch=4))
    env = KernelClockEnv([SMALL, other])
    names = {env.reset(seed=s)[1]["workload"] for s in range(12)}
    assert names == {"small", "other"}


def test_overrides_merge_a_workload_of_the_same_kind_and_replace_another(tmp_path):
    """A family member's ``workload`` changes fields of its base's generator, but a trace file (or another
    generator) replaces the base's workload whole: it takes no generator fields."""
    base = load_env_spec(SMALL)
    assert base.with_overrides(workload={"batch": 4}).workload == {**SMALL["workload"], "batch": 4}
    path = tmp_path / "step.trace.json"
    base.build_trace().save(path)
    traced = base.with_overrides(name="traced", workload={"trace": str(path)})
    assert traced.workload == {"trace": str(path)} and len(traced.build_trace()) == len(base.build_trace())
    padded = base.with_overrides(workload={"vocab_padded": 50304})  # a field only llm.c's generator takes
    decoder = {"generator": "transformer", "hidden": 512, "heads": 8, "seq": 256, "batch": 2, "layers": 1}
    assert padded.with_overrides(workload=decoder).workload == decoder
    assert traced.with_overrides(workload={"trace": str(path)}).workload == {"trace": str(path)}


@pytest.mark.parametrize(
    "change, err, needle",
    [
        ({"colour": 1}, SpecError, "unknown field"),
        ({"gpu": "rtx9090"}, SpecError, "unknown GPU"),
        ({"switch_latency_s": -1}, SpecError, "switch_latency_s"),
        ({"actions": {"configs": ["1500@405"]}}, ClockError, "not supported at memory 405"),
        ({"reward": {"budget": "lots"}}, SpecError, "budget"),
        ({"workload": {"generator": "llmc", "layers": 0}}, SpecError, "layers"),
    ],
)
def test_bad_specs(change, err, needle):
    with pytest.raises(err, match=needle):
        KernelClockEnv(dict(SMALL, **change))


def test_env_files_load():
    for name in ("gpt3xl-rtx3080ti", "gpt3xl-h200", "gpt3xl-rtx3080ti-paper", "llama-1b-h200"):
        spec = load_env_spec(name)
        assert spec.configs()[0].is_auto
    with pytest.raises(SpecError, match="not found"):
        load_env_spec("no-such-env")


def test_action_out_of_range():
    env = KernelClockEnv(SMALL)
    env.reset(seed=0)
    with pytest.raises(EnvUsageError, match="outside the action space"):
        env.step(10_000)


def test_the_sb3_vector_env_honours_seed_and_set_options():
    """SB3's conventions: seed() and set_options() apply to the next reset only; options are the single env's."""
    from rlclock.agents.vec_env import KernelClockSB3VecEnv

    base = load_env_spec("gpt3xl-rtx3080ti")
    family = [base, base.with_overrides(name="small", workload={**base.workload, "layers": 2})]
    vec = KernelClockSB3VecEnv(3, family, seed=0)
    vec.set_options({"workload": 1, "time_price": 123.0})
    vec.reset()
    assert list(vec._workload) == [1, 1, 1] and np.allclose(vec._core.price, 123.0)
    vec.seed(7)
    first = vec.reset().copy()
    prices = vec._core.price.copy()
    vec.seed(7)
    assert np.array_equal(vec.reset(), first) and np.array_equal(vec._core.price, prices)
    assert not np.allclose(prices, 123.0)  # the options were used once
    vec.set_options([{"time_price": 5.0}, {}, {"workload": 0}])
    vec.reset()
    assert vec._core.price[0] == 5.0 and vec._workload[2] == 0
    with pytest.raises(SpecError, match="unknown"):
        vec.set_options({"worklaod": 1})
        vec.reset()
