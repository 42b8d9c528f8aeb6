"""Sweep tables as CSV: what a user measured elsewhere, read into :class:`~rlclock.calibration.sweep.SweepRow`.

Columns (a header row names them; order free):

=====================  ==========  =========================================================================
column                 required    meaning
=====================  ==========  =========================================================================
``kernel``             yes         the kernel's name; ``idle`` for an idle-power window (no kernel running)
``flops``              yes         floating-point operations (an FMA counts 2); 0 for ``idle``
``bytes``              yes\\*       DRAM bytes moved (read + written); \\*or ``read_bytes`` and ``write_bytes``
``core_mhz``           yes         the locked core clock, MHz
``mem_mhz``            yes         the memory clock, MHz
``time_s``             yes\\*\\*     the kernel's time (the window, for ``idle``), seconds, > 0; or ``time_ms``
``energy_j``           yes\\*\\*     its energy, joules, > 0; or ``power_w``, its average power (W)
``category``           no          ``gemm``, ``attention``, ``elementwise``, ``copy`` … (default: from the name)
``dtype``              no          ``bf16``, ``fp16``, ``fp32``, ``tf32``, ``fp8`` (default ``bf16``)
``access``             no          ``stream``, ``gather`` or ``reduce`` (default ``stream``)
``blocks``             no          thread blocks of the launch (with ``threads_per_block``: its occupancy)
``threads_per_block``  no          threads per block
``gemm_m/n/k``         no          a matrix product's shape
``onchip_bytes``       no          bytes it moves through shared memory (each store and load), if it counts them
                                   (a table without the column: the suite's ``smem_bound`` rows count 2 per FLOP)
=====================  ==========  =========================================================================

\\*\\* ``time_ms`` may stand for ``time_s`` and ``power_w`` for ``energy_j`` (energy = power × time), as public
measurements often give them.

Every malformed table is refused with one line naming the row and column and what to write instead — values beyond
what any GPU does (:data:`LIMITS`: a kernel of 10^300 FLOPs, a reading of 10^6 s, 10 kW of power) and readings of one
kernel at one clock pair that disagree (:data:`REPEAT_SPREAD`) included.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rlclock.calibration.sweep import IDLE, SMEM_BYTES_PER_FLOP, SMEM_KERNEL, SweepRow
from rlclock.errors import SpecError
from rlclock.workload.kernel_names import classify
from rlclock.workload.trace import ACCESS_CLASSES, CATEGORIES, DTYPES

REQUIRED = ("kernel", "flops", "core_mhz", "mem_mhz", "time_s", "energy_j")
"""Columns every table has (plus ``bytes``, or ``read_bytes`` and ``write_bytes``); ``time_ms`` may stand for
``time_s`` and ``power_w`` for ``energy_j`` (:data:`ALTERNATIVES`)."""
ALTERNATIVES = {"time_s": "time_ms", "energy_j": "power_w"}
"""A required column and the column that may stand for it: the time in milliseconds, the average power in watts
(energy = power × time)."""
OPTIONAL = ("bytes", "read_bytes", "write_bytes", "category", "dtype", "access", "blocks", "threads_per_block",
            "gemm_m", "gemm_n", "gemm_k", "onchip_bytes")
"""Columns a table may have."""
INFO = ("requested", "sm_clock_read_mhz", "mem_clock_read_mhz", "power_w", "time_cv", "energy_cv", "reasons")
"""Columns a sweep on the GPU (``rlclock calibrate --device``) writes beside them — the clocks asked for, what NVML
read during the reading, its spread and clock-event reasons; read back and ignored by the fit."""


LIMITS: dict[str, float] = {
    "flops": 1e18, "bytes": 1e16, "read_bytes": 1e16, "write_bytes": 1e16, "onchip_bytes": 1e18, "time_s": 3600.0,
    "time_ms": 3.6e6, "core_mhz": 1e4, "mem_mhz": 5e4, "blocks": 2.0 ** 31, "threads_per_block": 1024.0,
    "gemm_m": 2.0 ** 31, "gemm_n": 2.0 ** 31, "gemm_k": 2.0 ** 31, "energy_j": 3.6e7, "power_w": 5000.0}
"""The largest value each column may hold: far beyond any kernel, clock or board (an hour-long reading, 10^18 FLOPs,
a 5 kW board), so only a misplaced unit or a corrupt value is refused."""
POWER_RANGE_W: tuple[float, float] = (0.5, 5000.0)
"""A reading's average power (energy over time) must lie in this range, watts: no GPU board draws less or more."""
RATE_LIMITS: dict[str, float] = {"flops": 1e16, "bytes": 1e14}
"""The fastest a reading may move: 10 PFLOP/s and 100 TB/s (each ten times today's largest GPU)."""
REPEAT_SPREAD = 1.25
"""Readings of one kernel at one clock pair (repeats) may differ by at most this factor in time and in energy; more
and they contradict each other."""


def _number(raw: dict[str, str], col: str, where: str, positive: bool = False, integer: bool = False,
            default: float | None = None) -> float:
    text = (raw.get(col) or "").strip()
    if not text:
        if default is not None:
            return default
        raise SpecError(f"{where}: column {col!r} is empty.", f"give {col} as a number.")
    try:
        v = float(text)
    except ValueError:
        raise SpecError(f"{where}: {col} {text!r} is not a number.", f"write {col} as a plain number.") from None
    if not math.isfinite(v) or v < 0 or (positive and v <= 0):
        raise SpecError(f"{where}: {col} must be a finite number {'> 0' if positive else '>= 0'}, found {text}.",
                        "fix or drop the row.")
    if integer and v != int(v):
        raise SpecError(f"{where}: {col} must be a whole number, found {text}.", f"write {col} in whole MHz/counts.")
    if col in LIMITS and v > LIMITS[col]:
        raise SpecError(f"{where}: {col} {text} is beyond any GPU (at most {LIMITS[col]:g}).",
                        f"check the row's units ({col} in {_UNITS.get(col, 'counts')}) or drop the row.")
    return v


_UNITS = {"time_s": "seconds", "time_ms": "milliseconds", "energy_j": "joules", "power_w": "watts", "core_mhz": "MHz",
          "mem_mhz": "MHz", "flops": "FLOPs", "bytes": "bytes", "read_bytes": "bytes", "write_bytes": "bytes",
          "onchip_bytes": "bytes"}


def _check_reading(row: SweepRow, where: str) -> None:
    """Refuse a reading whose power or rates no GPU reaches (:data:`POWER_RANGE_W`, :data:`RATE_LIMITS`)."""
    lo, hi = POWER_RANGE_W
    power = row.energy_j / row.time_s
    if not lo <= power <= hi:
        raise SpecError(f"{where}: energy over time is {power:.4g} W, outside what a GPU board draws "
                        f"({lo:g}-{hi:g} W).",
                        "check the row's units (time_s in seconds, energy_j in joules, or power_w in watts).")
    for what, amount in (("flops", row.flops), ("bytes", row.read_bytes + row.write_bytes)):
        if amount / row.time_s > RATE_LIMITS[what]:
            raise SpecError(f"{where}: {amount:.4g} {what} in {row.time_s:.4g} s is {amount / row.time_s:.3g} per "
                            f"second, beyond any GPU (at most {RATE_LIMITS[what]:g}).",
                            "check the row's units (time_s in seconds, flops and bytes as counts).")


def _check_repeats(rows: Sequence[SweepRow], lines: Sequence[int], path: Path) -> None:
    """Refuse readings of one kernel at one clock pair that describe different kernels or disagree by more than
    :data:`REPEAT_SPREAD` (repeats within it are kept: the fit weighs each)."""
    first: dict[tuple[str, int, int], int] = {}
    for i, r in enumerate(rows):
        j = first.setdefault((r.kernel, r.core_mhz, r.mem_mhz), i)
        if j == i:
            continue
        q = rows[j]
        where = f"sweep table {path}, lines {lines[j]} and {lines[i]}"
        shape = replace(r, core_mhz=0, mem_mhz=0, time_s=1.0, energy_j=1.0)
        if shape != replace(q, core_mhz=0, mem_mhz=0, time_s=1.0, energy_j=1.0):
            raise SpecError(f"{where}: two rows of {r.kernel} at {r.core_mhz}@{r.mem_mhz} MHz give different shapes "
                            "(FLOPs, bytes, category, dtype, access, launch or GEMM shape).",
                            "give each distinct kernel its own name, or correct the row.")
        spread = max(r.time_s / q.time_s, q.time_s / r.time_s, r.energy_j / q.energy_j, q.energy_j / r.energy_j)
        if spread > REPEAT_SPREAD:
            raise SpecError(f"{where}: two readings of {r.kernel} at {r.core_mhz}@{r.mem_mhz} MHz disagree by a factor "
                            f"{spread:.3g} (time {q.time_s:.4g} and {r.time_s:.4g} s, energy {q.energy_j:.4g} and "
                            f"{r.energy_j:.4g} J; repeats may differ by {REPEAT_SPREAD:g} at most).",
                            "keep the reading you trust, or measure the pair again.")


def _choice(raw: dict[str, str], col: str, allowed: Sequence[str], default: str, where: str) -> str:
    v = (raw.get(col) or "").strip() or default
    if v not in allowed:
        raise SpecError(f"{where}: {col} {v!r} is not one of {list(allowed)}.", f"write one of them in {col}.")
    return v


def read_table(path: str | Path) -> list[SweepRow]:
    """Read a sweep table (module docstring).

    Raises:
        SpecError: The file is missing or not a CSV table, lacks a required column, or a row holds a bad value.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"sweep table {p} does not exist.", "give the path of a CSV table (rlclock calibrate "
                        "--help lists its columns).") from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        raise SpecError(f"sweep table {p} cannot be read as text ({type(exc).__name__}).",
                        "give a UTF-8 CSV file.") from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header and ALTERNATIVES.get(c) not in header]
    if not ("bytes" in header or ("read_bytes" in header and "write_bytes" in header)):
        missing.append("bytes (or read_bytes and write_bytes)")
    if missing:
        raise SpecError(f"sweep table {p}: missing column(s) {missing}; found {header or 'no header'}.",
                        f"give a header row with {list(REQUIRED)} and bytes (time_ms may stand for time_s, power_w "
                        "for energy_j).")
    unknown = [h for h in header if h not in REQUIRED + OPTIONAL + INFO + tuple(ALTERNATIVES.values())]
    if unknown:
        raise SpecError(f"sweep table {p}: unknown column(s) {unknown}.", f"use {list(REQUIRED + OPTIONAL)}.")
    rows: list[SweepRow] = []
    lines: list[int] = []
    for raw0 in reader:
        where = f"sweep table {p}, line {reader.line_num}"
        if None in raw0:
            raise SpecError(f"{where}: more fields than the header's {len(header)}.",
                            "give every row one value per header column.")
        raw = {k.strip(): v for k, v in raw0.items()}
        name = (raw.get("kernel") or "").strip()
        if not name:
            raise SpecError(f"{where}: column 'kernel' is empty.", "name the kernel (or write idle).")
        if "read_bytes" in header and (raw.get("read_bytes") or "").strip():
            rb = _number(raw, "read_bytes", where)
            wb = _number(raw, "write_bytes", where, default=0.0)
        else:
            rb, wb = _number(raw, "bytes", where, default=0.0 if name == IDLE else None), 0.0
        gemm = [(raw.get(f"gemm_{d}") or "").strip() for d in "mnk"]
        shape = None
        if any(gemm):
            shape = tuple(int(_number(raw, f"gemm_{d}", where, positive=True, integer=True)) for d in "mnk")
        default_category = "other" if name == IDLE else classify(name)
        time_s = (_number(raw, "time_s", where, positive=True) if "time_s" in header
                  else 1e-3 * _number(raw, "time_ms", where, positive=True))
        energy_j = (_number(raw, "energy_j", where, positive=True) if "energy_j" in header
                    else time_s * _number(raw, "power_w", where, positive=True))
        rows.append(SweepRow(
            kernel=name, flops=_number(raw, "flops", where), read_bytes=rb, write_bytes=wb,
            category=_choice(raw, "category", CATEGORIES, default_category, where),
            dtype=_choice(raw, "dtype", DTYPES, "bf16", where),
            core_mhz=int(_number(raw, "core_mhz", where, positive=True, integer=True)),
            mem_mhz=int(_number(raw, "mem_mhz", where, positive=True, integer=True)),
            time_s=time_s, energy_j=energy_j,
            access=_choice(raw, "access", ACCESS_CLASSES, "stream", where),
            blocks=int(_number(raw, "blocks", where, integer=True, default=0.0)),
            threads_per_block=int(_number(raw, "threads_per_block", where, integer=True, default=0.0)),
            gemm_mnk=shape if shape is None else (shape[0], shape[1], shape[2]),
            onchip_bytes=_number(raw, "onchip_bytes", where, default=0.0)))
        _check_reading(rows[-1], where)
        lines.append(reader.line_num)
    if not rows:
        raise SpecError(f"sweep table {p} holds a header but no rows.", "add the measurements.")
    if "onchip_bytes" not in header:  # written before the column: the suite's on-chip loop counts 2 bytes per FLOP
        rows = [replace(r, onchip_bytes=SMEM_BYTES_PER_FLOP * r.flops) if r.kernel == SMEM_KERNEL else r
                for r in rows]
    _check_repeats(rows, lines, p)
    return rows


def write_table(rows: Sequence[SweepRow], path: str | Path, info: Sequence[Mapping[str, Any]] | None = None) -> Path:
    """Write rows as a sweep table that :func:`read_table` reads back (``info``: per row, values of :data:`INFO`
    columns to write beside)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    base_cols = ["kernel", "flops", "read_bytes", "write_bytes", "category", "dtype", "access", "blocks",
                 "threads_per_block", "gemm_m", "gemm_n", "gemm_k", "onchip_bytes", "core_mhz", "mem_mhz", "time_s",
                 "energy_j"]
    cols = list(base_cols)
    if info is not None:
        if len(info) != len(rows):
            raise ValueError(f"{len(info)} info entries for {len(rows)} rows")
        cols += [c for c in INFO if any(c in i for i in info)]
    with p.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for n, r in enumerate(rows):
            d = asdict(r)
            mnk = d.pop("gemm_mnk")
            d.update({"gemm_m": "", "gemm_n": "", "gemm_k": ""} if mnk is None else
                     {"gemm_m": mnk[0], "gemm_n": mnk[1], "gemm_k": mnk[2]})
            if info is not None:
                d.update({c: info[n].get(c, "") for c in cols[len(base_cols):]})
            w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in d.items()})
    return p
