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

Every malformed table is refused with one line naming the row and column and what to write instead.
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
    return v


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
    rows = []
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
    if not rows:
        raise SpecError(f"sweep table {p} holds a header but no rows.", "add the measurements.")
    if "onchip_bytes" not in header:  # written before the column: the suite's on-chip loop counts 2 bytes per FLOP
        rows = [replace(r, onchip_bytes=SMEM_BYTES_PER_FLOP * r.flops) if r.kernel == SMEM_KERNEL else r
                for r in rows]
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
