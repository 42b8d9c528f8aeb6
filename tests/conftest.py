"""Shared fixtures; GPU-marked tests skip cleanly on machines without an NVIDIA GPU."""

from __future__ import annotations

import os

import pytest

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
