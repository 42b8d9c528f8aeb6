"""Read a W&B offline run back without network (tests only).

An offline run's ``run-<id>.wandb`` is a record log: a 7-byte header (``:W&B``, uint16 0xBEE1, uint8 version),
then 32 KiB blocks of chunks, each ``(crc32, length, type)`` then the bytes; a record is one FULL chunk or a
FIRST, MIDDLE..., LAST sequence, and is a serialized ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_BLOCK, _HEADER = 32768, 7
_FULL, _FIRST, _LAST = 1, 2, 4


def records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    if struct.unpack("<4sHB", data[:_HEADER]) != (b":W&B", 0xBEE1, 0):
        raise ValueError(f"{path} is not a W&B record log")
    pos, buf = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        buf = chunk if kind in (_FULL, _FIRST) else buf + chunk
        if kind in (_FULL, _LAST):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def _items(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for it in items:
        keys = [it.key] if it.key else list(it.nested_key)
        d = out
        for k in keys[:-1]:
            d = d.setdefault(k, {})
        d[keys[-1]] = json.loads(it.value_json)
    return out


@dataclass
class OfflineRun:
    """What an offline run recorded: the run's identity, its config, every history row and its artifacts."""

    project: str = ""
    entity: str = ""
    group: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)

    def rows_with(self, key: str) -> list[dict[str, Any]]:
        return [row for row in self.history if key in row]


def read_offline_run(folder: Path) -> OfflineRun:
    """The run in an ``offline-run-*`` folder."""
    (log,) = folder.glob("run-*.wandb")
    out = OfflineRun()
    for rec in records(log):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out.project, out.entity, out.group = rec.run.project, rec.run.entity, rec.run.run_group
            out.config.update(_items(rec.run.config.update))
        elif kind == "config":
            out.config.update(_items(rec.config.update))
        elif kind == "history":
            out.history.append(_items(rec.history.item))
        elif kind == "artifact":
            a = rec.artifact
            out.artifacts.append({"name": a.name, "type": a.type, "files": sorted(e.path for e in a.manifest.contents)})
    return out
