"""Memory-clock capabilities: runtime locks (Ampere and newer), deferred only (Hopper) or none (one memory clock).

The default fake GPU is an H200 whose NVML answers a runtime memory lock with NOT_SUPPORTED, as a real one.
"""

from __future__ import annotations

import pytest

from rlclock.dvfs.spec import get_spec, memory_locks_of
from rlclock.errors import CheckpointError, ClockError, SpecError
from rlclock.gpu.clocks import ClockControl
from rlclock.schedule import ClockConfig


@pytest.mark.parametrize(
    "architecture, mems, want",
    [
        ("Hopper", (3201, 2201), "deferred"),
        ("hopper", (2619, 1593), "deferred"),
        ("Ampere", (9501, 405), "runtime"),
        ("Ada", (10501, 405), "runtime"),
        ("Hopper", (2619,), "none"),
        ("Ampere", (1215,), "none"),
        ("", (5001, 405), "runtime"),
        ("Hopper", None, "deferred"),
        ("", None, "runtime"),
    ],
)
def test_the_one_rule(architecture, mems, want):
    assert memory_locks_of(architecture, mems) == want


def test_presets_say_what_their_gpus_can_do():
    assert get_spec("rtx3080ti").memory_locks == "runtime"
    assert get_spec("h200-sxm").memory_locks == "deferred" and not get_spec("h200-sxm").runtime_memory
    assert get_spec("a100-sxm4-40gb").memory_locks == "none"
    assert get_spec("h100-sxm").memory_locks == "deferred"  # a real H100 lists 2619 and 1593 MHz (data/h100-doctor.txt)


def test_a_deferred_gpu_gets_an_action_set_at_its_memory_clock():
    h200 = get_spec("h200-sxm")
    assert {c.mem_mhz for c in h200.config_grid(core_step_mhz=105)} == {None, 3201}
    assert {c.mem_mhz for c in get_spec("rtx3080ti").config_grid(core_step_mhz=210)} >= {405, 9501}
    with pytest.raises(SpecError, match=r"memory clock .*deferred.*\[2201, 3201\].*mem_mhz: \[3201\]"):
        h200.check_runtime_configs(h200.config_grid(core_step_mhz=105, mem_mhz=[3201, 2201]), "actions")
    h200.check_runtime_configs(h200.config_grid(core_step_mhz=105, mem_mhz=[2201]), "actions")  # one: a job's


def test_an_env_spec_that_switches_hopper_memory_is_refused():
    from rlclock.config import load_env_spec

    with pytest.raises(SpecError, match=r"gpt3xl-h200\.yaml: actions: NVIDIA H200 cannot switch its memory clock"):
        load_env_spec("gpt3xl-h200").with_overrides(actions={"mem_mhz": [3201, 2201]}).configs()


def test_a_checkpoint_that_switches_hopper_memory_is_refused(tmp_path):
    import numpy as np

    from rlclock.observation.layout import obs_size
    from rlclock.observation.lookahead import n_slots
    from rlclock.policy import ClockPolicy, PolicyWeights, policy_meta, save_checkpoint

    configs = [ClockConfig(), ClockConfig(1380, 3201), ClockConfig(1980, 2201)]
    slots, n = n_slots(configs), obs_size(4, n_slots(configs))
    weights = PolicyWeights(((np.zeros((8, n)), np.zeros(8)),), (np.zeros((slots + 1, 8)), np.zeros(slots + 1)), "tanh")
    save_checkpoint(tmp_path, weights, policy_meta(get_spec("h200-sxm"), configs, 4, n, 0.006, 0.01, {}))
    with pytest.raises(CheckpointError, match=r"cannot switch its memory clock.*retrain"):
        ClockPolicy.load(tmp_path)


def test_clock_control_reads_the_capability_from_nvml(fake_nvml):
    with ClockControl(0) as clocks:
        assert clocks.memory_locks == "deferred" and clocks.memory_in_effect_mhz == 3201
    fake_nvml.set_device(0, architecture=7, memory_locks="runtime")
    with ClockControl(0) as clocks:
        assert clocks.memory_locks == "runtime" and clocks.memory_in_effect_mhz is None
    fake_nvml.set_device(0, clocks={"2619": list(range(1980, 344, -15))}, default_mem_mhz=2619)
    with ClockControl(0) as clocks:
        assert clocks.memory_locks == "none"


def test_deferred_gpu_locks_the_core_only_and_refuses_another_memory_clock(fake_nvml):
    with ClockControl(0, control_clocks=True, watchdog=False, handle_signals=False) as clocks:
        rec = clocks.apply("1410@3201")  # the memory clock in effect: left alone
        assert rec.calls == ("set_locked_core_clocks(1410, 1410)",) and rec.applied
        assert fake_nvml.device()["locked_core"] == [1410, 1410] and fake_nvml.device()["locked_mem"] is None
        n_calls = len(fake_nvml.calls())
        with pytest.raises(ClockError, match=r"cannot lock its memory clock while running.*2201.*3201 MHz"):
            clocks.apply("auto@2201")
        assert len(fake_nvml.calls()) == n_calls  # refused before any NVML call
        assert clocks.current == ClockConfig(1410, 3201)
    assert fake_nvml.device()["locked_core"] is None
    # the restore never resets a memory lock it cannot have taken (an administrator's deferred lock stays)
    assert [c["fn"] for c in fake_nvml.calls()] == ["nvmlDeviceSetGpuLockedClocks", "nvmlDeviceResetGpuLockedClocks"]


def test_dry_run_on_a_deferred_gpu_plans_core_calls_only(fake_nvml):
    with ClockControl(0) as clocks:
        assert clocks.apply("1500@3201").calls == ("set_locked_core_clocks(1500, 1500)",)
        assert clocks.apply("1500@auto").calls == ()
        with pytest.raises(ClockError, match="deferred memory locks"):
            clocks.validate("1500@2201")
    assert fake_nvml.calls() == []


def test_a_runtime_lock_the_driver_refuses_becomes_one_clear_error(fake_nvml):
    """A GPU believed to lock memory at runtime whose driver says otherwise: one line, no more memory calls, and
    the core lock taken just before is given back on close."""
    with ClockControl(0, control_clocks=True, watchdog=False, handle_signals=False, memory_locks="runtime") as clocks:
        with pytest.raises(ClockError, match=r"refused a runtime memory lock.*core clocks only"):
            clocks.apply("1410@2201")
        assert clocks.memory_locks == "deferred" and clocks.memory_in_effect_mhz == 3201
        with pytest.raises(ClockError, match="cannot lock its memory clock"):
            clocks.apply("1410@2201")
        n_calls = len(fake_nvml.calls())
        assert clocks.apply("1200@3201").calls == ("set_locked_core_clocks(1200, 1200)",)  # the one in effect: fine
        assert len(fake_nvml.calls()) == n_calls + 1
    assert fake_nvml.device()["locked_core"] is None


def test_an_unknown_capability_is_refused(fake_nvml):
    with pytest.raises(ClockError, match="memory_locks 'sometimes'"):
        ClockControl(0, memory_locks="sometimes")


def test_the_deployed_worker_refuses_a_plan_with_another_memory_clock(fake_nvml):
    from rlclock.deploy.plan import SwitchPlan
    from rlclock.deploy.worker import build_control

    plan = {
        "segments": [[0, 5, "auto", 0.0, 0.005], [5, 10, "1410@2201", 0.005, 0.01]],
        "events": [[1, "1410@2201", 0.0, 0.005, 0.005, 0.01]],
        "skipped": [],
        "initial": "auto",
        "latency_s": 0.006,
        "lead_s": 0.0,
        "min_dwell_s": 0.0,
        "period_s": 0.01,
        "span_s": 0.01,
        "on_plan_fraction": 1.0,
    }
    assert ClockConfig(1410, 2201) in SwitchPlan.from_dict(plan).configs
    with pytest.raises(ClockError, match="cannot lock its memory clock"):
        build_control({"plan": plan, "device": 0, "control_clocks": False}, handle_signals=False)
