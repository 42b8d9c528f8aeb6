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

from rlclock.errors import ClockError, MeasurementError
from rlclock.schedule import ClockConfig
from rlclock.validation import measurement_problem
from rlclock.yamlio import read_json

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


_NUMBERS = ("time_s", "energy_j", "power_w", "sm_clock_mhz", "mem_clock_mhz", "time_cv", "energy_cv", "window_s")
_COUNTS = {"kernel": 0, "windows": 1, "units": 1}
_TEXTS = ("op", "name", "source")
FIX = "re-measure with `rlclock measure` (a table is written by it, not by hand)."


def _row_from_dict(d: Any, i: int, source: str) -> MeasurementRow:
    """One row, every field checked: its type, its range, and that its time and energy are a kernel's."""
    where = f"{source}: row #{i}"
    if not isinstance(d, dict):
        raise MeasurementError(f"{where} must be an object, found {type(d).__name__}.", FIX)
    missing = [k for k in _REQUIRED if k not in d]
    unknown = sorted(set(d) - _FIELDS)
    if missing or unknown:
        raise MeasurementError(f"{where}: missing {missing}, unknown {unknown}.", FIX)
    for name in _NUMBERS:
        v = d.get(name, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise MeasurementError(f"{where}: {name} is {v!r}; expected a finite number >= 0.", FIX)
    for name, low in _COUNTS.items():
        v = d.get(name, low)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise MeasurementError(f"{where}: {name} is {v!r}; expected a whole number >= {low}.", FIX)
    for name in _TEXTS:
        if name in d and (not isinstance(d[name], str) or not d[name]):
            raise MeasurementError(f"{where}: {name} is {d[name]!r}; expected text.", FIX)
    reasons, extra = d.get("reasons", ()), d.get("extra", {})
    if (
        not isinstance(reasons, (list, tuple))
        or not all(isinstance(r, str) for r in reasons)
        or not isinstance(extra, dict)
    ):
        raise MeasurementError(f"{where}: 'reasons' must be a list of text and 'extra' an object.", FIX)
    try:
        config = str(ClockConfig.parse(d["config"])) if isinstance(d["config"], str) else None
    except ClockError:
        config = None
    if config is None:
        raise MeasurementError(
            f"{where}: config {d['config']!r} is not a clock configuration (CORE@MEM in MHz, "
            "'auto' for a free domain).",
            FIX,
        )
    problem = measurement_problem(d["time_s"], d["energy_j"])
    if problem is not None:
        raise MeasurementError(f"{where} ({d['name']!r} at {config}): {problem}.", FIX)
    return MeasurementRow(**{**d, "config": config, "reasons": tuple(reasons), "extra": dict(extra)})


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

    def check_clocks(self, spec: Any, source: str = "measurement table") -> None:
        """Raise :class:`MeasurementError` unless the GPU ``spec`` (a :class:`~rlclock.dvfs.spec.GpuSpec`) supports
        every configuration the rows were measured at."""
        for config in self.configs():
            c = ClockConfig.parse(config)
            try:
                if c.mem_mhz is not None and c.mem_mhz not in spec.mem_clocks_mhz:
                    raise ClockError(
                        f"memory clock {c.mem_mhz} MHz is not one of {spec.name}'s {list(spec.mem_clocks_mhz)}."
                    )
                spec.validate(c)
            except ClockError as exc:
                raise MeasurementError(
                    f"{source}: rows at {config}, which {spec.name} cannot run ({exc.message})",
                    "measure the table on this GPU with `rlclock measure`, or name the GPU it was measured on.",
                ) from None

    # -- I/O ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": TABLE_FORMAT,
            "version": TABLE_VERSION,
            "meta": self.meta,
            "rows": [r.as_dict() for r in self],
        }

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
        cols = [
            "kernel",
            "op",
            "name",
            "config",
            "time_s",
            "energy_j",
            "power_w",
            "sm_clock_mhz",
            "mem_clock_mhz",
            "reasons",
            "time_cv",
            "energy_cv",
            "windows",
            "units",
            "window_s",
            "source",
        ]
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
            raise MeasurementError(
                f"{source} is not an rlclock measurement table (expected format {TABLE_FORMAT!r}).",
                "give a file written by rlclock measure.",
            )
        if data.get("version") != TABLE_VERSION:
            raise MeasurementError(
                f"{source}: table version {data.get('version')!r} is not supported (this rlclock "
                f"reads version {TABLE_VERSION}).",
                "re-measure with this rlclock.",
            )
        rows = data.get("rows")
        meta = data.get("meta", {})
        if not isinstance(rows, list) or not isinstance(meta, dict):
            raise MeasurementError(f"{source}: 'rows' must be a list and 'meta' an object.")
        return cls(meta, [_row_from_dict(d, i, source) for i, d in enumerate(rows)])

    @classmethod
    def load(cls, path: str | Path) -> MeasurementTable:
        """Read and validate a table file."""
        data = read_json(
            path, "measurement table", MeasurementError, "check the path, or write one with rlclock measure."
        )
        return cls.from_dict(data, str(path))
