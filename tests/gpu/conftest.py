"""Fixtures of the GPU tests: a fake NVML whose state lives in a file (shared with child processes)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

FAKE_DIR = Path(__file__).resolve().parent
ROOT = FAKE_DIR.parents[1]
if str(FAKE_DIR) not in sys.path:
    sys.path.insert(0, str(FAKE_DIR))

import fake_pynvml  # noqa: E402


class FakeNvml:
    """Handle on the fake NVML's state file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def state(self) -> dict[str, Any]:
        return fake_pynvml.read_state(self.path)

    def update(self, **changes: Any) -> None:
        with fake_pynvml.state(self.path) as s:
            s.update(changes)

    def device(self, index: int = 0) -> dict[str, Any]:
        return self.state()["devices"][index]

    def set_device(self, index: int = 0, **changes: Any) -> None:
        with fake_pynvml.state(self.path) as s:
            s["devices"][index].update(changes)

    def calls(self) -> list[dict[str, Any]]:
        return self.state()["calls"]

    def inject(self, fn: str = "*", **fault: Any) -> None:
        """Make calls of ``fn`` fail with an NVML error (:func:`fake_pynvml.inject`)."""
        fake_pynvml.inject(self.path, fn, **fault)

    def clear_faults(self) -> None:
        fake_pynvml.clear_faults(self.path)

    def child_env(self) -> dict[str, str]:
        """Environment for a child process that must see the same fake GPU."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(FAKE_DIR), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        return env


@pytest.fixture
def fake_nvml(tmp_path, monkeypatch):
    """A one-GPU fake H200 behind ``rlclock.gpu.nvml`` (and for child processes through the environment)."""
    from rlclock.gpu import nvml

    path = tmp_path / "fake-nvml.json"
    fake_pynvml.write_state(path, fake_pynvml.default_state())
    monkeypatch.setenv(fake_pynvml.STATE_ENV, str(path))
    monkeypatch.setenv(nvml.MODULE_ENV, "fake_pynvml")
    monkeypatch.setenv("RLCLOCK_LOCK_DIR", str(tmp_path / "locks"))  # the clock locks of this test's fake GPU
    nvml.use_module(None)
    yield FakeNvml(path)
    nvml.use_module(None)


@pytest.fixture
def l40s(fake_nvml):
    """The fake GPU made one no preset matches: an L40S (Ada, GDDR6 on a 384-bit bus, one memory clock)."""
    fake_nvml.set_device(name="NVIDIA L40S", architecture=fake_pynvml.NVML_DEVICE_ARCH_ADA, compute_capability=[8, 9],
                         cuda_cores=18176, memory_bus_bits=384, clocks={"9001": list(range(2520, 209, -15))},
                         default_sm_mhz=2520, default_mem_mhz=9001, power_limit_w=350.0, default_power_limit_w=350.0,
                         power_limit_range_w=[100.0, 350.0], memory_locks="none")
    return fake_nvml


@pytest.fixture
def runtime_memory_locks(fake_nvml):
    """The fake GPU made one whose memory clock locks at runtime (an Ampere GPU's NVML answers), for tests of
    memory locking itself; the default fake H200 locks memory only deferred, as a real one."""
    fake_nvml.set_device(0, architecture=fake_pynvml.NVML_DEVICE_ARCH_AMPERE, memory_locks="runtime")
    return fake_nvml


@pytest.fixture(scope="session")
def owner_host():
    """One process that forks owner processes for the fault tests (tests/gpu/owners.py)."""
    from owners import OwnerHost

    host = OwnerHost()
    yield host
    host.close()


class Owners:
    """Starts owners of the test's fake GPU and ends every one left (and its watchdogs) when the test ends."""

    def __init__(self, host: Any, fake: FakeNvml, tmp_path: Path) -> None:
        self.host, self.fake, self.tmp_path = host, fake, tmp_path
        self.started: list[Any] = []
        self.watchdogs: set[int] = set()

    def start(self, **options: Any) -> Any:
        """A new owner with a live ClockControl on GPU 0 (its ``error`` is set if it was refused)."""
        env = {k: os.environ[k] for k in ("FAKE_NVML_STATE", "RLCLOCK_NVML_MODULE", "RLCLOCK_LOCK_DIR")}
        env["PYTHONPATH"] = self.fake.child_env()["PYTHONPATH"]
        owner = self.host.spawn(env, self.tmp_path / f"owner-{len(self.started)}.err", **options)
        self.started.append(owner)
        if owner.started.get("watchdog"):
            self.watchdogs.add(owner.started["watchdog"])
        return owner

    def finish(self) -> None:
        from owners import wait_gone

        for owner in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(owner.pid, 9)
            owner.close_conn()
        for owner in self.started:
            wait_gone(owner.pid, 10)
        for pid in self.watchdogs:
            wait_gone(pid, 10)


@pytest.fixture
def owners(owner_host, fake_nvml, tmp_path):
    """Start owner processes on the test's fake GPU; any left are killed at the end of the test."""
    o = Owners(owner_host, fake_nvml, tmp_path)
    yield o
    o.finish()
