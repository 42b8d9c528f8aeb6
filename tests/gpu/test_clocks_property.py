"""A property of clock control under faults, over random sequences: clock sets and power limits, restores, kills and
SIGTERMs of the watchdog, a second process asking for the GPU, NVML errors injected at chosen calls in the owner, its
watchdog or anyone (once, twice, or for good), and an end by close, exit, SIGTERM or SIGKILL of the owner.

Whatever the sequence, once the owner and its watchdogs are gone the fake GPU is back at the defaults it started
from — or, where an NVML error persisted past the retries, every setting still changed is named as left in what the
owner or its watchdog said, with the fix, and that fix (``rlclock reset-clocks``) brings the defaults back. On the
way: a watchdog never changes the GPU while its owner runs, a second process is refused and changes nothing, and a
watchdog's last word never claims to have reset what is still set.
"""

from __future__ import annotations

import os
import signal
import time

import fake_pynvml
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from owners import wait_gone

from rlclock.gpu.clocks import reset_clocks

SET_CORE, SET_MEM = "nvmlDeviceSetGpuLockedClocks", "nvmlDeviceSetMemoryLockedClocks"
RESET_CORE, RESET_MEM = "nvmlDeviceResetGpuLockedClocks", "nvmlDeviceResetMemoryLockedClocks"
SET_POWER = "nvmlDeviceSetPowerManagementLimit"
DEFAULT_POWER_W = 700.0
OPTIONS = {"tries": 3, "backoff_s": 0.002}

STEPS = st.one_of(
    st.tuples(st.just("apply"), st.sampled_from(["1200@2201", "1410@3201", "auto@2201", "1980", "auto"])),
    st.tuples(st.just("power"), st.sampled_from([450, 500, None])),
    st.tuples(st.just("restore")),
    st.tuples(st.just("kill_guard")),
    st.tuples(st.just("term_guard")),
    st.tuples(st.just("intruder")),
    st.tuples(
        st.just("fault"),
        st.sampled_from([SET_CORE, SET_MEM, RESET_CORE, RESET_MEM, SET_POWER]),
        st.sampled_from(["owner", "watchdog", "any"]),
        st.sampled_from([1, 2, None]),
    ),
)


def wait_for(pred, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


class Run:
    """One sequence against one owner, and what the test saw on the way."""

    def __init__(self, owners, fake) -> None:
        self.owners, self.fake = owners, fake
        self.owner = owners.start(**OPTIONS)
        assert self.owner.error is None, self.owner.error
        self.watchdogs = {self.owner.started["watchdog"]}
        self.said: list[str] = []  # error messages the owner answered with
        self.persistent = False

    def step(self, kind: str, *args) -> None:
        owner = self.owner
        if kind in ("apply", "power"):
            self.answer(owner.ask(kind, *args))
        elif kind == "restore":
            self.answer(owner.ask("restore"))
        elif kind == "kill_guard":
            old = owner.watchdog_pid
            if old is not None:
                os.kill(old, signal.SIGKILL)
                replaced = wait_for(
                    lambda: owner.watchdog_pid not in (None, old) or "no more changes are made" in owner.stderr()
                )
                assert replaced, f"the owner did not replace its watchdog: {owner.stderr()}"
                self.watchdogs.add(owner.watchdog_pid)
        elif kind == "term_guard":
            wd = owner.watchdog_pid
            if wd is not None:
                seen = owner.stderr().count("SIGTERM ignored")
                os.kill(wd, signal.SIGTERM)
                assert wait_for(lambda: owner.stderr().count("SIGTERM ignored") > seen), owner.stderr()
                assert owner.watchdog_pid == wd  # still on guard
        elif kind == "intruder":
            other = self.owners.start(**OPTIONS)
            assert other.error is not None and other.error[0] == "GpuBusyError", other.error
            assert f"pid {owner.pid}" in other.error[1]
            other.kill()
            assert wait_gone(other.pid)
            assert [c for c in self.fake.calls() if c["pid"] == other.pid] == []
        elif kind == "fault":
            fn, where, times = args
            pid = {"owner": owner.pid, "watchdog": owner.watchdog_pid, "any": None}[where]
            if where == "watchdog" and pid is None:
                return
            self.fake.inject(fn, pid=pid, times=times)
            self.persistent |= times is None

    def answer(self, answer) -> None:
        if answer[0] == "error":
            self.said.append(answer[2])

    def end(self, how: str) -> float:
        """End the owner; returns the time it was told to end."""
        t_end = time.time()
        owner = self.owner
        if how == "close":
            self.answer(owner.ask("close"))
            owner.ask("exit")
        elif how == "exit":
            owner.ask("exit")
        else:
            owner.kill(signal.SIGKILL if how == "kill" else signal.SIGTERM)
        assert wait_gone(owner.pid), "the owner did not end"
        for wd in self.watchdogs:
            assert wait_gone(wd), f"watchdog {wd} did not end"
        return t_end


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEPS, max_size=8), how=st.sampled_from(["close", "exit", "term", "kill"]))
def test_the_gpu_always_ends_at_its_defaults_or_the_report_names_what_is_left(owners, fake_nvml, steps, how):
    state = fake_pynvml.default_state()  # a new GPU (new UUID: a lock of its own) for every example
    state["devices"][0].update(architecture=fake_pynvml.NVML_DEVICE_ARCH_AMPERE, memory_locks="runtime")
    fake_pynvml.write_state(fake_nvml.path, state)
    run = Run(owners, fake_nvml)
    for step in steps:
        run.step(*step)
    t_end = run.end(how)

    gpu = fake_nvml.device()
    left = {
        "core clock is left locked": gpu["locked_core"] is not None,
        "memory clock is left locked": gpu["locked_mem"] is not None,
        "power limit is left": gpu["power_limit_w"] != DEFAULT_POWER_W,
    }
    text = run.owner.stderr() + "\n".join(run.said)
    event(f"left: {', '.join(k.split()[0] for k, v in left.items() if v) or 'nothing'}")
    event(f"guard replaced: {run.owner.stderr().count('started a new one')}")
    calls = fake_nvml.calls()
    # a watchdog changes the GPU only once its owner is gone; only the owner and its watchdogs change it at all
    assert [c for c in calls if c["pid"] in run.watchdogs and c["t"] < t_end] == []
    assert {c["pid"] for c in calls} <= {run.owner.pid} | run.watchdogs
    if not run.persistent:
        assert not any(left.values()), f"left changed without a lasting NVML error: {gpu} {text}"
    for phrase, is_left in left.items():
        if is_left:
            assert phrase in text and "rlclock reset-clocks --device 0" in text, f"{phrase} not reported: {text}"
    for line in run.owner.stderr().splitlines():  # the watchdog's word is the last: it must be true
        if line.startswith("rlclock watchdog:") and "ended without giving" in line:
            assert ("core clock is left locked" in line) == left["core clock is left locked"], line
            assert ("memory clock is left locked" in line) == left["memory clock is left locked"], line
            assert ("power limit is left" in line) == left["power limit is left"], line
    fake_nvml.clear_faults()
    reset_clocks([0])  # the fix the reports name
    gpu = fake_nvml.device()
    assert (gpu["locked_core"], gpu["locked_mem"], gpu["power_limit_w"]) == (None, None, DEFAULT_POWER_W)


@pytest.mark.parametrize("how", ["close", "exit", "term", "kill"])
def test_a_quiet_run_ends_at_the_defaults_however_it_ends(owners, runtime_memory_locks, how):
    run = Run(owners, runtime_memory_locks)
    for step in [("apply", "1200@2201"), ("power", 450), ("apply", "1410@3201")]:
        run.step(*step)
    run.end(how)
    gpu = runtime_memory_locks.device()
    assert (gpu["locked_core"], gpu["locked_mem"], gpu["power_limit_w"]) == (None, None, DEFAULT_POWER_W)
    by_watchdog = [c["fn"] for c in runtime_memory_locks.calls() if c["pid"] in run.watchdogs]
    assert by_watchdog == ([RESET_CORE, RESET_MEM, SET_POWER] if how == "kill" else [])
