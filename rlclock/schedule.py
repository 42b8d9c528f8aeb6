"""Clock configurations and schedules: the values every layer of rlclock passes around.

A :class:`ClockConfig` is what rlclock asks the driver for: a locked core clock and/or a locked memory
clock, each ``None`` for "let the driver decide" (auto). A :class:`ClockSchedule` requests one
configuration per kernel invocation of a trace, and may name one board power limit for the whole step (the
driver then keeps every kernel's power under it, inside the kernel). How a schedule is judged — run through
``GpuBackend.run`` beside the same backend's auto run — is :func:`rlclock.solve.evaluation.evaluate`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlclock.errors import ClockError, ScheduleError
from rlclock.validation import MAX_KERNELS
from rlclock.yamlio import read_json

_CONFIG_RE = re.compile(r"^\s*(auto|\d+)\s*(?:@\s*(auto|\d+))?\s*$")


@dataclass(frozen=True)
class ClockConfig:
    """A requested clock configuration.

    Attributes:
        core_mhz: Locked core (graphics) clock in MHz, or ``None`` for the driver's choice.
        mem_mhz: Locked memory clock in MHz, or ``None`` for the driver's choice.

    The text form is ``"<core>@<mem>"`` with ``auto`` for a free domain: ``"1500@5001"``,
    ``"auto@5001"``, ``"1500@auto"``; plain ``"auto"`` leaves both to the driver.
    """

    core_mhz: int | None = None
    mem_mhz: int | None = None

    @property
    def is_auto(self) -> bool:
        """True when both domains are left to the driver."""
        return self.core_mhz is None and self.mem_mhz is None

    def __str__(self) -> str:
        if self.is_auto:
            return "auto"
        core = "auto" if self.core_mhz is None else str(self.core_mhz)
        mem = "auto" if self.mem_mhz is None else str(self.mem_mhz)
        return f"{core}@{mem}"

    @classmethod
    def parse(cls, text: str | ClockConfig) -> ClockConfig:
        """Parse ``"1500@5001"``, ``"auto@5001"``, ``"1500"`` (memory auto) or ``"auto"``."""
        if isinstance(text, ClockConfig):
            return text
        m = _CONFIG_RE.match(str(text))
        if not m:
            raise ClockError(
                f"clock configuration {text!r} is not understood.",
                "write it as CORE@MEM in MHz, with 'auto' for a free domain, e.g. 1500@5001 or auto@5001.",
            )
        core, mem = m.group(1), m.group(2)
        return cls(None if core == "auto" else int(core), None if mem in (None, "auto") else int(mem))


AUTO = ClockConfig()
"""The driver's own clocks: nothing locked."""


def _power_limit(value: Any, name: str) -> float | None:
    """A schedule's power limit, checked: ``None`` or a finite number of watts above 0."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not np.isfinite(value)
        or value <= 0
    ):
        raise ScheduleError(
            f"schedule {name!r} has power limit {value!r}; it must be a number of watts above 0.",
            "give a board power limit in watts (e.g. 650), or none to leave the GPU's as it is.",
        )
    return float(value)


class ClockSchedule:
    """A requested clock configuration per kernel invocation.

    Args:
        configs: The distinct configurations the schedule uses (or may use).
        index: For every kernel invocation, the position of its requested configuration in ``configs``.
        name: What produced it (``"auto"``, ``"kernel-global"``, ``"ppo"`` …).
        power_limit_w: The board power limit the whole step runs under, watts; ``None`` (the default) leaves
            the GPU's limit as it is. A whole-job setting: it is set once before the step, not per kernel.

    A request is a wish: the backend issues it at the kernel's start, and with a switching latency the
    clocks change only after that latency (see ``GpuBackend.run``).
    """

    def __init__(
        self,
        configs: Sequence[ClockConfig],
        index: Iterable[int],
        name: str = "schedule",
        power_limit_w: float | None = None,
    ) -> None:
        self.configs: tuple[ClockConfig, ...] = tuple(ClockConfig.parse(c) for c in configs)
        if not self.configs:
            raise ScheduleError("a schedule needs at least one clock configuration.")
        self.index = np.asarray(list(index) if not isinstance(index, np.ndarray) else index, dtype=np.int64)
        if self.index.ndim != 1 or self.index.size == 0:
            raise ScheduleError("a schedule needs one configuration index per kernel invocation.")
        bad = self.index[(self.index < 0) | (self.index >= len(self.configs))]
        if bad.size:
            raise ScheduleError(
                f"schedule {name!r} refers to configuration {int(bad[0])} but has only {len(self.configs)} "
                f"(indices 0 to {len(self.configs) - 1})."
            )
        self.name = name
        self.power_limit_w = _power_limit(power_limit_w, name)

    @classmethod
    def constant(
        cls, config: ClockConfig | str, n: int, name: str | None = None, power_limit_w: float | None = None
    ) -> ClockSchedule:
        """The same configuration for all ``n`` invocations (under ``power_limit_w`` watts, if given)."""
        c = ClockConfig.parse(config)
        return cls([c], np.zeros(n, dtype=np.int64), name or str(c), power_limit_w)

    @classmethod
    def from_configs(cls, per_kernel: Sequence[ClockConfig | str], name: str = "schedule") -> ClockSchedule:
        """Build from one configuration per invocation."""
        parsed = [ClockConfig.parse(c) for c in per_kernel]
        distinct = sorted(
            set(parsed), key=lambda c: (c.mem_mhz or 0, c.core_mhz or 0, c.core_mhz is not None, c.mem_mhz is not None)
        )
        pos = {c: i for i, c in enumerate(distinct)}
        return cls(distinct, [pos[c] for c in parsed], name)

    def __len__(self) -> int:
        return int(self.index.size)

    def __getitem__(self, i: int) -> ClockConfig:
        return self.configs[int(self.index[i])]

    def __repr__(self) -> str:
        limit = "" if self.power_limit_w is None else f", power limit {self.power_limit_w:g} W"
        return f"ClockSchedule({self.name!r}, {len(self)} kernels, {self.n_changes} changes{limit})"

    @property
    def per_kernel(self) -> list[ClockConfig]:
        """The requested configuration of every invocation."""
        return [self.configs[i] for i in self.index]

    @property
    def n_changes(self) -> int:
        """How often the requested configuration changes from one kernel to the next."""
        return int(np.count_nonzero(np.diff(self.index)))

    def reindexed(self, configs: Sequence[ClockConfig]) -> np.ndarray:
        """The per-kernel indices into another configuration list (which must contain every used one)."""
        pos = {c: i for i, c in enumerate(configs)}
        used = np.unique(self.index)
        missing = [str(self.configs[u]) for u in used if self.configs[u] not in pos]
        if missing:
            raise ScheduleError(
                f"schedule {self.name!r} uses configuration(s) {missing[:5]} that the backend does not offer.",
                "evaluate it on a backend whose configuration set includes them.",
            )
        lut = np.array([pos.get(c, -1) for c in self.configs], dtype=np.int64)
        return lut[self.index]

    def check_length(self, n_kernels: int) -> None:
        """Raise :class:`ScheduleError` unless the schedule has ``n_kernels`` entries."""
        if len(self) != n_kernels:
            raise ScheduleError(
                f"schedule {self.name!r} has {len(self)} entries but the trace has {n_kernels} kernels.",
                "build the schedule for this trace.",
            )

    # -- I/O ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON form: the distinct configurations and run-length encoded indices."""
        runs: list[list[int]] = []
        for i in self.index.tolist():
            if runs and runs[-1][0] == i:
                runs[-1][1] += 1
            else:
                runs.append([i, 1])
        out: dict[str, Any] = {
            "format": "rlclock.schedule",
            "version": 1,
            "name": self.name,
            "configs": [str(c) for c in self.configs],
            "runs": runs,
        }
        if self.power_limit_w is not None:
            out["power_limit_w"] = self.power_limit_w
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "schedule") -> ClockSchedule:
        """Parse :meth:`to_dict` output (``source``: where it came from, for messages). Every run covers a whole
        number of kernels >= 1 and all of them at most :data:`~rlclock.validation.MAX_KERNELS`, checked before the
        schedule is expanded."""
        fix = "write schedules with rlclock (ClockSchedule.save, `rlclock apply --save`)."
        if not isinstance(data, dict) or data.get("format") != "rlclock.schedule":
            raise ScheduleError(f"{source}: not an rlclock schedule (expected 'format': 'rlclock.schedule').", fix)
        if data.get("version", 1) != 1:
            raise ScheduleError(
                f"{source}: schedule version {data.get('version')!r} is not supported (this rlclock reads version 1).",
                fix,
            )
        configs, runs = data.get("configs"), data.get("runs")
        if not isinstance(configs, list) or not isinstance(runs, list) or not configs:
            raise ScheduleError(
                f"{source}: malformed schedule: 'configs' and 'runs' must be lists ('configs' not empty).", fix
            )
        name = data.get("name", "schedule")
        if not isinstance(name, str):
            raise ScheduleError(f"{source}: the schedule's 'name' must be text, found {name!r}.", fix)
        total = 0
        for k, run in enumerate(runs):
            if not (isinstance(run, list) and len(run) == 2 and all(_whole(x) for x in run) and run[1] >= 1):
                raise ScheduleError(
                    f"{source}: malformed schedule: run #{k} is {str(run)[:60]}; each run is "
                    "[configuration index, kernels], and covers a whole number >= 1 of kernels.",
                    fix,
                )
            if not 0 <= run[0] < len(configs):
                raise ScheduleError(
                    f"{source}: run #{k} refers to configuration {run[0]} but the schedule lists "
                    f"{len(configs)} (indices 0 to {len(configs) - 1}).",
                    fix,
                )
            total += run[1]
            if total > MAX_KERNELS:
                raise ScheduleError(
                    f"{source}: the runs cover more than {MAX_KERNELS} kernels (run #{k} is "
                    f"{run[1]} long); a step has at most {MAX_KERNELS}.",
                    fix,
                )
        try:
            parsed = [ClockConfig.parse(c) for c in configs]
        except ClockError as exc:
            raise ScheduleError(f"{source}: malformed schedule: {exc}") from None
        pairs = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
        index = np.repeat(pairs[:, 0], pairs[:, 1])
        return cls(parsed, index, name, data.get("power_limit_w"))

    def save(self, path: str | Path) -> Path:
        """Write as JSON."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict()))
        return path

    @classmethod
    def load(cls, path: str | Path) -> ClockSchedule:
        """Read a schedule written by :meth:`save` (a missing, oversized or malformed file, a key given twice, or
        runs past :data:`~rlclock.validation.MAX_KERNELS` kernels is one :class:`ScheduleError` line)."""
        data = read_json(path, "schedule", ScheduleError, "give a schedule written by rlclock (ClockSchedule.save).")
        return cls.from_dict(data, str(path))


def _whole(x: Any) -> bool:
    """Whether ``x`` is a whole number (an int, not a boolean)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)
