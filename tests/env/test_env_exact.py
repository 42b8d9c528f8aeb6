"""Exact rewards, infos and state-block observation entries of the env dynamics (``BatchCore``).

The toy step has four identical kernels over ``AUTO`` (0) and ``X = 1500@3201`` (1): 1 / 2 s and 8 / 4 J.
The auto step is 4 s and 32 J (mean power 8 W). The reward spec is ``budget 0.25, overrun_penalty 2,
scale 4`` at a price of time of 16 J/s (twice the mean power). With one memory clock every candidate slot
but slot 0 holds ``X``, so action 0 requests AUTO, 1 requests X and 9 keeps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlclock.config import RewardSpec
from rlclock.env import BatchCore, EpisodeTables
from rlclock.observation.layout import N_STATE
from rlclock.schedule import AUTO, ClockConfig
from tests.backends.test_accounting_exact import TableGpu

X = ClockConfig(1500, 3201)
TO_AUTO, TO_X, KEEP = 0, 1, 9
PRICE = 16.0
REWARD = RewardSpec(budget=0.25, overrun_penalty=2.0, scale=4.0, time_price=PRICE)
AUTO_FEAT = [1.0, 1.0, 1.0, 1.0]  # core 1980 / 1980 (auto requests the top clock), memory 3201 / 3201, both auto
X_FEAT = [1500 / 1980, 1.0, 0.0, 0.0]
NONE_FEAT = [0.0, 0.0, 0.0, 0.0]


def toy_episode(latency_s: float, reward: RewardSpec = REWARD) -> EpisodeTables:
    """Four kernels of 1 / 2 s and 8 / 4 J at AUTO / X."""
    gpu = TableGpu([[1.0, 2.0]] * 4, [[8.0, 4.0]] * 4, latency_s, [AUTO, X])
    return EpisodeTables.build(gpu, reward, lookahead=2)


def started(*episodes: EpisodeTables, price: float = PRICE) -> BatchCore:
    """A core with one run per episode, all at ``price``."""
    core = BatchCore(len(episodes))
    core.start(np.arange(len(episodes)), list(episodes), np.full(len(episodes), price))
    return core


def state_block(core: BatchCore, j: int = 0) -> list[float]:
    """The ``N_STATE`` state entries of run ``j``'s observation."""
    return core.observation()[j, -N_STATE:].tolist()


def state(
    cur: list[float], pend: list[float], flying: float, land: float, price: float, remaining: float, latency: float
) -> list[float]:
    """The state block as the env builds it, in float32."""
    return np.array([*cur, *pend, flying, land, price, remaining, latency], dtype=np.float32).tolist()


def play(core: BatchCore, actions: list[int]) -> tuple[list[float], list[dict[str, Any]]]:
    """Step run 0 of ``core`` through ``actions``; its rewards and infos."""
    rewards, infos = [], []
    for a in actions:
        r, _done, info = core.step(np.array([a]))
        rewards.append(float(r[0]))
        infos.append(info[0])
    return rewards, infos


def test_toy_action_set_has_auto_then_x_in_every_slot() -> None:
    """Guards the fixture's premise (slot 0 = AUTO, slots 1-8 = X, 9 = keep) the other tests rely on."""
    ep = toy_episode(1.25)
    assert ep.look.n_slots == 9
    assert ep.backend.configs == (AUTO, X)
    assert started(ep).candidates[0].tolist() == [[0, 1, 1, 1, 1, 1, 1, 1, 1]] * 4
    assert (ep.auto_total_s, ep.auto_total_j, ep.mean_power_w) == (4.0, 32.0, 8.0)
    assert ep.auto_prefix_s.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_rewards_and_infos_through_a_dropped_request_and_a_split() -> None:
    """Guards reward = scale·[(E_auto,i − E_i − p·(t_i − t_auto,i)) / E_auto − penalty·Δoverrun / T_auto],
    the infos, and off_new (a kernel asking for AUTO while a switch to X lands inside it)."""
    rewards, infos = play(started(toy_episode(1.25)), [TO_X, TO_AUTO, KEEP, TO_AUTO])
    # k0 at 0: AUTO -> X issued (lands at 1.25); 1 s, 8 J at AUTO; line 1.25 · 1 = 1.25, no overrun; saved 0
    # k1 at 1: AUTO dropped (in flight); lands 0.25 in: 0.25 + 0.75 · 2 = 1.75 s, 0.25 · 8 + 0.75 · 4 = 5 J;
    #   off-plan 0.75 · 2 = 1.5 (at X, asked AUTO); time 2.75, line 2.5, overrun 0.25;
    #   saved 8 − 5 − 16 · 0.75 = −9: 4 · (−9/32 − 2 · 0.25/4) = −1.625
    # k2 at 2.75: keep is the standing X: 2 s, 4 J; time 4.75, line 3.75, overrun 1;
    #   saved 8 − 4 − 16 · 1 = −12: 4 · (−12/32 − 2 · 0.75/4) = −3
    # k3 at 4.75: X -> AUTO issued, lands 1.25 in (frac 5/8): 1.25 + 0.375 · 1 = 1.625 s, 2.5 + 3 = 5.5 J,
    #   off-plan 1.25; time 6.375, line 5, overrun 1.375; saved 8 − 5.5 − 16 · 0.625 = −7.5:
    #   4 · (−7.5/32 − 2 · 0.375/4) = −1.6875
    assert rewards == [0.0, -1.625, -3.0, -1.6875]
    # the return telescopes: 4 · (saving − p·ΔT/E_auto − 2 · overrun/T_auto) = 4 · (0.296875 − 1.1875 − 0.6875)
    assert sum(rewards) == 4 * (0.296875 - 16 * 2.375 / 32 - 2 * 1.375 / 4) == -6.3125
    assert [i["kernel_time_s"] for i in infos] == [1.0, 1.75, 2.0, 1.625]
    assert [i["kernel_energy_j"] for i in infos] == [8.0, 5.0, 4.0, 5.5]
    assert [i["time_s"] for i in infos] == [1.0, 2.75, 4.75, 6.375]
    assert [i["energy_j"] for i in infos] == [8.0, 13.0, 17.0, 22.5]
    assert [i["slowdown"] for i in infos] == [0.0, 2.75 / 2 - 1, 4.75 / 3 - 1, 6.375 / 4 - 1]
    assert [i["switches"] for i in infos] == [1, 1, 1, 2]
    assert [i["config"] for i in infos] == [1, 0, 1, 0]
    assert [i["in_effect"] for i in infos] == [0, 0, 1, 1]
    assert "saving" not in infos[2]
    last = infos[-1]
    assert (last["saving"], last["auto_energy_j"], last["auto_time_s"]) == (1 - 22.5 / 32, 32.0, 4.0)
    assert last["off_plan_time_s"] == 1.0 + 1.5 + 1.25


def test_boundary_landing_then_a_new_request_in_the_env() -> None:
    """Guards ``remaining <= 0.0`` in the env: the switch landing at k0's end frees k1's request to issue."""
    core = started(toy_episode(1.0))
    rewards, infos = play(core, [TO_X])
    # k0: AUTO -> X lands exactly at 1.0, the end of k0: X in effect, nothing in flight; remaining 3 / 8
    assert state_block(core) == state(X_FEAT, NONE_FEAT, 0.0, 0.0, 0.5, 3 / 8, 1.0)
    more, tail = play(core, [TO_AUTO, KEEP, KEEP])
    rewards += more
    infos += tail
    # k1 at 1: X -> AUTO issued at once, lands 1.0 into a 2 s kernel: 1 + 0.5 · 1 = 1.5 s, 2 + 4 = 6 J, off 1.0;
    #   time 2.5 = line 2.5; saved 8 − 6 − 16 · 0.5 = −6: 4 · (−6/32) = −0.75. k2, k3 at AUTO: nothing
    assert [i["switches"] for i in infos] == [1, 2, 2, 2]
    assert [i["kernel_time_s"] for i in infos] == [1.0, 1.5, 1.0, 1.0]
    assert [i["in_effect"] for i in infos] == [0, 1, 0, 0]
    assert rewards == [0.0, -0.75, 0.0, 0.0]
    assert infos[-1]["off_plan_time_s"] == 2.0
    assert infos[-1]["saving"] == 1 - 30 / 32


def test_state_block_at_reset_and_with_a_switch_in_flight() -> None:
    """Guards state entries 0-12: in effect, in flight, flag, time to landing / latency, price, remaining,
    latency."""
    core = started(toy_episode(1.25))
    # price 16 / 8 W = 2: log2(2) / 2 = 0.5; remaining 4 s / (8 · 1.25) = 0.4; log10(1250) / 3 > 1, clipped to 1
    assert state_block(core) == state(AUTO_FEAT, NONE_FEAT, 0.0, 0.0, 0.5, 0.4, 1.0)
    core.step(np.array([TO_X]))
    # X in flight, 0.25 s of 1.25 left: 0.2; remaining (4 − 1) / 10 = 0.3
    assert state_block(core) == state(AUTO_FEAT, X_FEAT, 1.0, 0.25 / 1.25, 0.5, 0.3, 1.0)
    core.step(np.array([KEEP]))
    # landed inside k1: X in effect, nothing in flight; remaining 2 / 10
    assert state_block(core) == state(X_FEAT, NONE_FEAT, 0.0, 0.0, 0.5, 0.2, 1.0)


def test_state_block_without_latency() -> None:
    """Guards the latency-0 branches: landing at once, entry 9 = 0, remaining 1, latency log10(1e-3) / 3 = -1."""
    core = started(toy_episode(0.0))
    _, infos = play(core, [TO_X])
    assert (infos[0]["kernel_time_s"], infos[0]["in_effect"], infos[0]["switches"]) == (2.0, 1, 1)
    assert state_block(core) == state(X_FEAT, NONE_FEAT, 0.0, 0.0, 0.5, 1.0, -1.0)


@pytest.mark.parametrize(
    "latency_s, remaining, latency",
    [
        (0.01, 1.0, 1 / 3),  # 4 s / 0.08 s clipped to 1; log10(10) / 3
        (0.25, 1.0, float(np.log10(250.0)) / 3),  # 4 s / 2 s clipped to 1
        (1.0, 0.5, 1.0),  # 4 s / 8 s; log10(1000) / 3
    ],
)
def test_remaining_and_latency_entries(latency_s: float, remaining: float, latency: float) -> None:
    """Guards entries 11 (auto time left / 8 latencies, clipped) and 12 (log10(latency / 1 ms) / 3, clipped)."""
    s = state_block(started(toy_episode(latency_s)))
    assert s[11:] == pytest.approx([remaining, latency], rel=1e-6)


@pytest.mark.parametrize("price, feature", [(16.0, 0.5), (4.0, -0.5), (8.0, 0.0), (64.0, 1.0), (1.0, -1.0)])
def test_price_entry_is_log2_of_price_over_mean_power_halved(price: float, feature: float) -> None:
    """Guards entry 10: log2(p / 8 W) / 2, clipped at p / P̄ in [1/4, 4]."""
    assert state_block(started(toy_episode(1.25), price=price))[10] == feature


def test_price_is_charged_per_kernel_without_overrun_penalty() -> None:
    """Guards the price term alone: reward = scale · (E_auto,i − E_i − p·(t_i − t_auto,i)) / E_auto."""
    reward = RewardSpec(budget=0.0, overrun_penalty=0.0, scale=1.0, time_price=4.0)
    rewards, _ = play(started(toy_episode(0.0, reward), price=4.0), [TO_X, KEEP, TO_AUTO, KEEP])
    # at X: (8 − 4 − 4 · (2 − 1)) / 32 = 0; at AUTO: 0. At p = 2: (4 − 2) / 32 = 0.0625 per X kernel
    assert rewards == [0.0, 0.0, 0.0, 0.0]
    rewards, _ = play(started(toy_episode(0.0, reward), price=2.0), [TO_X, KEEP, TO_AUTO, KEEP])
    assert rewards == [0.0625, 0.0625, 0.0, 0.0]


def test_batch_of_runs_with_different_latencies_and_a_masked_restart() -> None:
    """Guards BatchCore's per-run latency array and start()'s masked EngineState.reset of one run."""
    slow, fast = toy_episode(1.25), toy_episode(1.0)
    core = started(slow, fast)
    _, _, infos = core.step(np.array([TO_X, TO_X]))
    # both 1 s at AUTO; slow: X 0.25 s from landing (0.25 / 1.25); fast: landed at the boundary
    assert [i["kernel_time_s"] for i in infos] == [1.0, 1.0]
    assert state_block(core, 0) == state(AUTO_FEAT, X_FEAT, 1.0, 0.2, 0.5, 0.3, 1.0)
    assert state_block(core, 1) == state(X_FEAT, NONE_FEAT, 0.0, 0.0, 0.5, 3 / 8, 1.0)
    core.start(np.array([1]), [fast], np.array([PRICE]))
    # run 1 restarts at AUTO, kernel 0, nothing in flight; run 0 keeps its switch in flight and its totals
    assert state_block(core, 1) == state(AUTO_FEAT, NONE_FEAT, 0.0, 0.0, 0.5, 0.5, 1.0)
    assert core.state.pending.tolist() == [1, -1]
    assert core.state.land_in_s.tolist() == [0.25, 0.0]
    assert core.k.tolist() == [1, 0]
    assert core.time_s.tolist() == [1.0, 0.0]
    assert core.switches.tolist() == [1, 0]
    rewards, _, infos = core.step(np.array([KEEP, KEEP]))
    # run 0: keep is X in flight; lands 0.25 in: 1.75 s, off 0.25; reward −1.625 as in the single-run case
    # run 1: keep is AUTO in effect: 1 s, 8 J, no switch, reward 0
    assert [i["kernel_time_s"] for i in infos] == [1.75, 1.0]
    assert [i["config"] for i in infos] == [1, 0]
    assert [i["time_s"] for i in infos] == [2.75, 1.0]
    assert [i["switches"] for i in infos] == [1, 0]
    assert rewards.tolist() == [-1.625, 0.0]
    assert core.off_plan_s.tolist() == [1.0 + 0.25, 0.0]
