"""Which GPU a process controls, and one schedule for all ranks under ``torch.distributed``.

Each rank controls its own GPU: the CUDA device it trains on (``torch.cuda.current_device()``, normally its
local rank), found in NVML by UUID so that ``CUDA_VISIBLE_DEVICES`` renumbering cannot point a rank at
another process's GPU. Rank 0 profiles its step and builds the schedule; :func:`share` broadcasts the
schedule and timeline to every rank, so all ranks switch alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError
from rlclock.schedule import ClockSchedule


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a distributed run.

    Attributes:
        distributed: True when ``torch.distributed`` is initialised.
        rank: Global rank (0 when not distributed).
        world_size: Number of ranks (1 when not distributed).
        local_rank: Rank on this host (``LOCAL_RANK``, else ``rank`` modulo the GPUs visible).
    """

    distributed: bool = False
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_root(self) -> bool:
        """True on rank 0."""
        return self.rank == 0


def rank_info() -> RankInfo:
    """This process's rank, world size and local rank."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return RankInfo()
    if not (dist.is_available() and dist.is_initialized()):
        return RankInfo()
    rank, world = dist.get_rank(), dist.get_world_size()
    local = os.environ.get("LOCAL_RANK")
    if local is not None and local.strip().isdigit():
        local_rank = int(local)
    else:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        local_rank = rank % n if n else rank
    return RankInfo(True, rank, world, local_rank)


def cuda_device_index() -> int | None:
    """The CUDA device this process trains on (``None`` without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.current_device())


def nvml_index(cuda_index: int | None, fallback: int) -> int:
    """The NVML index of CUDA device ``cuda_index``, matched by UUID.

    Args:
        cuda_index: CUDA device index (as PyTorch numbers it).
        fallback: Index to use when the UUIDs cannot be compared (no CUDA, old PyTorch, no NVML).
    """
    if cuda_index is None:
        return fallback
    try:
        import torch

        from rlclock.gpu import nvml

        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        for i in range(nvml.device_count()):
            nvml_uuid = nvml.NvmlDevice(i).uuid
            if nvml_uuid.removeprefix("GPU-").lower() == uuid.removeprefix("GPU-").lower():
                return i
    except Exception:  # no NVML, no uuid attribute: fall back
        return fallback
    return fallback


def share(
    info: RankInfo, schedule: ClockSchedule | None, timeline: StepTimeline | None
) -> tuple[ClockSchedule, StepTimeline]:
    """Rank 0's schedule and timeline on every rank (a broadcast; every rank must call it).

    Args:
        info: This process's rank.
        schedule: Rank 0's schedule (ignored on other ranks).
        timeline: Rank 0's timeline (ignored on other ranks).

    Raises:
        DeployError: Rank 0 had none to share (it then sends why, and every rank raises).
    """
    if not info.distributed:
        if schedule is None or timeline is None:
            raise DeployError("no schedule and timeline to apply.")
        return schedule, timeline
    import torch.distributed as dist

    payload: list[Any] = [None]
    if info.is_root:
        payload = [
            {"schedule": schedule.to_dict(), "timeline": timeline.to_dict()}
            if schedule is not None and timeline is not None
            else {"error": "rank 0 built no schedule"}
        ]
    dist.broadcast_object_list(payload, src=0)
    data = payload[0]
    if not isinstance(data, dict) or "error" in data:
        raise DeployError(
            f"rank {info.rank} received no schedule from rank 0 ({(data or {}).get('error')}).",
            "see rank 0's error above.",
        )
    return ClockSchedule.from_dict(data["schedule"]), StepTimeline.from_dict(data["timeline"])
