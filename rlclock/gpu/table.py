"""MeasurementTable: per-kernel, per-clock measurements of a trace on a real GPU, and its file format.

``rlclock measure`` writes one (and :class:`~rlclock.backends.nvml_gpu.NvmlGpu` caches into one);
:class:`~rlclock.backends.recorded.RecordedGpu` replays it on any machine. On disk it is JSON::

    {"format": "rlclock.measurements", "version": 1, "meta": {...}, "rows": [{...}, ...]}

One row per (trace entry, clock configuration): time and energy per launch, board power, the SM and
memory clocks and clock-event reasons seen, and the repeatability over the windows. ``meta`` says on
which GPU, driver and trace, when, and with which window settings.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rlclock.errors import MeasurementError
from rlclock.schedule import ClockConfig

TABLE_FORMAT = "rlclock.measurements"
TABLE_VERSION = 1


@dataclass(frozen=True)
class MeasurementRow:
    """One trace entry measured at one clock configuration.

    Attributes:
        kernel: Trace entry index.
        op: The entry's ``op`` (matching key across traces, with ``name``).
        name: Kernel name.
        config: Clock configuration, text form (``"auto"``, ``"1410@3201"``).
        time_s: Time per launch, seconds.
        energy_j: Energy per launch, joules.
        power_w: Board power while it ran back to back, watts.
        sm_clock_mhz: Mean SM clock seen, MHz.
        mem_clock_mhz: Mean memory clock seen, MHz.
        reasons: Clock-event reasons active in at least half of the samples.
        time_cv: Coefficient of variation of the time over the windows.
        energy_cv: Coefficient of variation of the energy over the windows.
        windows: Energy windows taken.
        units: Launches inside the windows.
        window_s: Mean window length, seconds.
        source: ``"isolated"`` (replayed alone) or ``"in-sequence"``.
        extra: Anything else (reason fractions, busy fraction, memsets kept, copies per launch …).
    """

    kernel: int
    op: str
    name: str
    config: str
    time_s: float
    energy_j: float
    power_w: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    reasons: tuple[str, ...] = ()
    time_cv: float = 0.0
    energy_cv: float = 0.0
    windows: int = 1
    units: int = 1
    window_s: float = 0.0
    source: str = "isolated"
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def clock(self) -> ClockConfig:
        """The configuration as a :class:`ClockConfig`."""
        return ClockConfig.parse(self.config)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        d["extra"] = dict(self.extra)
        return d


_FIELDS = {f.name for f in fields(MeasurementRow)}
_REQUIRED = ("kernel", "op", "name", "config", "time_s", "energy_j", "power_w", "sm_clock_mhz", "mem_clock_mhz")


def _row_from_dict(d: Any, i: int, source: str) -> MeasurementRow:
    where = f"{source}: row #{i}"
    if not isinstance(d, dict):
        raise MeasurementError(f"{where} must be an object, found {type(d).__name__}.")
    missing = [k for k in _REQUIRED if k not in d]
    unknown = sorted(set(d) - _FIELDS)
    if missing or unknown:
        raise MeasurementError(f"{where}: missing {missing}, unknown {unknown}.",
                               "write tables with rlclock measure.")
    kw = dict(d)
    kw["reasons"] = tuple(kw.get("reasons", ()))
    kw["extra"] = dict(kw.get("extra", {}))
    try:
        kw["config"] = str(ClockConfig.parse(kw["config"]))
        row = MeasurementRow(**kw)
    except (TypeError, ValueError) as exc:
        raise MeasurementError(f"{where}: {exc}.") from None
    for name in ("time_s", "energy_j", "power_w"):
        v = getattr(row, name)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (name == "time_s" and v <= 0):
            raise MeasurementError(f"{where} ({row.name!r} at {row.config}): {name} is {v!r}; expected a finite "
                                   f"number {'> 0' if name == 'time_s' else '>= 0'}.",
                                   "re-measure that kernel (rlclock measure).")
    return row


class MeasurementTable:
    """Rows keyed by (trace entry, configuration), with metadata.

    Args:
        meta: GPU, driver, trace, date, settings …
        rows: Initial rows (a later row for the same key replaces an earlier one).
    """

    def __init__(self, meta: Mapping[str, Any] | None = None, rows: list[MeasurementRow] | None = None) -> None:
        self.meta: dict[str, Any] = dict(meta or {})
        self._rows: dict[tuple[int, str], MeasurementRow] = {}
        for r in rows or []:
            self.add(r)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[MeasurementRow]:
        return iter(sorted(self._rows.values(), key=lambda r: (r.kernel, r.config)))

    def add(self, row: MeasurementRow) -> None:
        """Add or replace the row of ``(row.kernel, row.config)``."""
        self._rows[(row.kernel, str(ClockConfig.parse(row.config)))] = row

    def get(self, kernel: int, config: ClockConfig | str) -> MeasurementRow | None:
        """The row of a trace entry at a configuration, if measured."""
        return self._rows.get((kernel, str(ClockConfig.parse(config))))

    def by_key(self) -> dict[tuple[str, str, str], MeasurementRow]:
        """Rows keyed by ``(op, name, config)`` — how another trace of the same layer finds them."""
        return {(r.op, r.name, r.config): r for r in self}

    def configs(self) -> list[str]:
        """Configurations present."""
        return sorted({r.config for r in self})

    # -- I/O ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": TABLE_FORMAT, "version": TABLE_VERSION, "meta": self.meta,
                "rows": [r.as_dict() for r in self]}

    def save(self, path: str | Path) -> Path:
        """Write JSON (atomically: a temporary file renamed into place); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1))
        tmp.replace(path)
        return path

    def save_csv(self, path: str | Path) -> Path:
        """Write the rows as CSV (one line per row; reasons joined with ``|``) for reading by eye."""
        path = Path(path)
        cols = ["kernel", "op", "name", "config", "time_s", "energy_j", "power_w", "sm_clock_mhz",
                "mem_clock_mhz", "reasons", "time_cv", "energy_cv", "windows", "units", "window_s", "source"]
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(cols)
            for r in self:
                d = r.as_dict()
                d["reasons"] = "|".join(r.reasons)
                w.writerow([d[c] for c in cols])
        return path

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> MeasurementTable:
        """Parse and validate the on-disk form."""
        if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT:
            raise MeasurementError(f"{source} is not an rlclock measurement table (expected format "
                                   f"{TABLE_FORMAT!r}).", "give a file written by rlclock measure.")
        if data.get("version") != TABLE_VERSION:
            raise MeasurementError(f"{source}: table version {data.get('version')!r} is not supported (this rlclock "
                                   f"reads version {TABLE_VERSION}).", "re-measure with this rlclock.")
        rows = data.get("rows")
        meta = data.get("meta", {})
        if not isinstance(rows, list) or not isinstance(meta, dict):
            raise MeasurementError(f"{source}: 'rows' must be a list and 'meta' an object.")
        return cls(meta, [_row_from_dict(d, i, source) for i, d in enumerate(rows)])

    @classmethod
    def load(cls, path: str | Path) -> MeasurementTable:
        """Read and validate a table file."""
        path = Path(path)
        if not path.is_file():
            raise MeasurementError(f"measurement table {str(path)!r} does not exist.",
                                   "check the path, or write one with rlclock measure.")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MeasurementError(f"{path}: not a readable JSON table ({exc}).") from None
        return cls.from_dict(data, str(path))
