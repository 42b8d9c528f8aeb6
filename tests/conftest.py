"""Shared fixtures; GPU-marked tests skip cleanly on machines without an NVIDIA GPU.

The fake NVML (tests/fakes/fake_pynvml.py) keeps its state in a file, so worker and watchdog processes started by a
test see the same fake GPU: ``fake_nvml`` (a handle on it), ``fake_gpu`` (a function returning its state), and
``no_nvml`` (a machine without an NVIDIA driver) serve every folder of tests.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

FAKES = Path(__file__).resolve().parent / "fakes"
ROOT = FAKES.parents[1]
if str(FAKES) not in sys.path:
    sys.path.insert(0, str(FAKES))

import fake_pynvml  # noqa: E402

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover - torch missing or broken
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CUDA (run on a GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker, not the tests/gpu folder name
            item.add_marker(skip)


@pytest.fixture(scope="session")
def paper_trace():
    from rlclock.workload.llmc import gpt3xl_step

    return gpt3xl_step()


@pytest.fixture(scope="session")
def rtx():
    from rlclock.dvfs.spec import get_spec

    return get_spec("rtx3080ti")


@pytest.fixture(scope="session")
def h200():
    from rlclock.dvfs.spec import get_spec

    return get_spec("h200-sxm")


def child_pythonpath() -> str:
    """``PYTHONPATH`` for a child process that must see the fake NVML and this checkout."""
    return os.pathsep.join([str(FAKES), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


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
        env["PYTHONPATH"] = child_pythonpath()
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
    fake_nvml.set_device(
        name="NVIDIA L40S",
        architecture=fake_pynvml.NVML_DEVICE_ARCH_ADA,
        compute_capability=[8, 9],
        cuda_cores=18176,
        memory_bus_bits=384,
        clocks={"9001": list(range(2520, 209, -15))},
        default_sm_mhz=2520,
        default_mem_mhz=9001,
        power_limit_w=350.0,
        default_power_limit_w=350.0,
        power_limit_range_w=[100.0, 350.0],
        memory_locks="none",
    )
    return fake_nvml


@pytest.fixture
def runtime_memory_locks(fake_nvml):
    """The fake GPU made one whose memory clock locks at runtime (an Ampere GPU's NVML answers), for tests of
    memory locking itself; the default fake H200 locks memory only deferred, as a real one."""
    fake_nvml.set_device(0, architecture=fake_pynvml.NVML_DEVICE_ARCH_AMPERE, memory_locks="runtime")
    return fake_nvml


@pytest.fixture
def fake_gpu(fake_nvml, monkeypatch):
    """The fake GPU of ``fake_nvml``, also for worker and watchdog processes (through ``PYTHONPATH``); yields a
    function returning the fake's state."""
    monkeypatch.setenv("PYTHONPATH", child_pythonpath())
    yield fake_nvml.state


@pytest.fixture
def no_nvml(monkeypatch):
    """NVML absent (a machine without an NVIDIA driver): the controller plans and times, and sets nothing."""
    from rlclock.gpu import nvml

    monkeypatch.setenv(nvml.MODULE_ENV, "rlclock_no_such_nvml_module")
    nvml.use_module(None)
    yield
    nvml.use_module(None)
