"""Fixtures of the tests of rlclock.gpu: owner processes of the fake GPU for the fault tests (tests/fakes/owners.py).
The fake NVML itself is a fixture of every test (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def owner_host():
    """One process that forks owner processes for the fault tests (tests/fakes/owners.py)."""
    from owners import OwnerHost

    host = OwnerHost()
    yield host
    host.close()


class Owners:
    """Starts owners of the test's fake GPU and ends every one left (and its watchdogs) when the test ends."""

    def __init__(self, host: Any, fake: Any, tmp_path: Path) -> None:
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
