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

Every malformed table is refused with one line naming the row and column and what to write instead: a time or
power no GPU has (a kernel's time at most :data:`~rlclock.validation.MAX_KERNEL_S`, an idle window's at most
:data:`MAX_IDLE_S`; power within :data:`~rlclock.validation.POWER_RANGE_W`), and one kernel measured twice at one
clock pair with times or energies further apart than :data:`REPEAT_SPREAD` are refused too.
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
from rlclock.validation import MAX_KERNEL_S, POWER_RANGE_W, measurement_problem
from rlclock.workload.kernel_names import classify
from rlclock.workload.trace import ACCESS_CLASSES, CATEGORIES, DTYPES

REQUIRED = ("kernel", "flops", "core_mhz", "mem_mhz", "time_s", "energy_j")
"""Columns every table has (plus ``bytes``, or ``read_bytes`` and ``write_bytes``); ``time_ms`` may stand for
``time_s`` and ``power_w`` for ``energy_j`` (:data:`ALTERNATIVES`)."""
ALTERNATIVES = {"time_s": "time_ms", "energy_j": "power_w"}
"""A required column and the column that may stand for it: the time in milliseconds, the average power in watts
(energy = power × time)."""
OPTIONAL = (
    "bytes",
    "read_bytes",
    "write_bytes",
    "category",
    "dtype",
    "access",
    "blocks",
    "threads_per_block",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "onchip_bytes",
)
"""Columns a table may have."""
INFO = ("requested", "sm_clock_read_mhz", "mem_clock_read_mhz", "power_w", "time_cv", "energy_cv", "reasons")
"""Columns a sweep on the GPU (``rlclock calibrate --device``) writes beside them — the clocks asked for, what NVML
read during the reading, its spread and clock-event reasons; read back and ignored by the fit."""
MAX_IDLE_S = 3600.0
"""The longest idle-power window a row may hold, seconds."""
MAX_RATES = {"flops": 1e17, "dram bytes": 1e15, "onchip_bytes": 1e16, "blocks": 1e11}
"""The most FLOPs, DRAM bytes (read + written), shared-memory bytes and thread blocks per second of a row's time:
each some twenty times what the fastest GPU does (a B200's 4.5 PFLOP/s of dense FP8, 8 TB/s of HBM). A row past one
holds a value in the wrong unit (or none a GPU ran), which the fit would chase for ever."""
MAX_GEMM_DIM = 1 << 24
"""The largest ``gemm_m``, ``gemm_n`` or ``gemm_k``."""
MAX_THREADS_PER_BLOCK = 1024
"""CUDA's limit on threads per block."""
MAX_CLOCK_MHZ = {"core_mhz": 10_000, "mem_mhz": 50_000}
"""The highest core and memory clock a row may name, MHz (several times any GPU's)."""
REPEAT_SPREAD = 1.5
"""Rows of one kernel (same name, work and launch) at one clock pair may repeat a reading; their largest time (and
energy) may be at most this many times their smallest, else the readings contradict each other."""


def _number(
    raw: dict[str, str],
    col: str,
    where: str,
    positive: bool = False,
    integer: bool = False,
    default: float | None = None,
) -> float:
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
        raise SpecError(
            f"{where}: {col} must be a finite number {'> 0' if positive else '>= 0'}, found {text}.",
            "fix or drop the row.",
        )
    if integer and v != int(v):
        raise SpecError(f"{where}: {col} must be a whole number, found {text}.", f"write {col} in whole MHz/counts.")
    return v


def _choice(raw: dict[str, str], col: str, allowed: Sequence[str], default: str, where: str) -> str:
    v = (raw.get(col) or "").strip() or default
    if v not in allowed:
        raise SpecError(f"{where}: {col} {v!r} is not one of {list(allowed)}.", f"write one of them in {col}.")
    return v


def _check_reading(kernel: str, time_s: float, energy_j: float, where: str) -> None:
    """Refuse a row whose time (seconds) or power (energy / time, watts) no GPU has."""
    if kernel == IDLE:
        power = energy_j / time_s
        problem = (
            f"an idle window of {time_s:.4g} s, longer than {MAX_IDLE_S:g} s"
            if time_s > MAX_IDLE_S
            else None
            if POWER_RANGE_W[0] <= power <= POWER_RANGE_W[1]
            else f"{energy_j:.4g} J in {time_s:.4g} s is {power:.4g} W, outside the {POWER_RANGE_W[0]:g}-"
            f"{POWER_RANGE_W[1]:g} W a GPU draws"
        )
    else:
        problem = measurement_problem(time_s, energy_j)
    if problem is not None:
        raise SpecError(
            f"{where}: {problem}.",
            f"re-measure the row or drop it (a kernel runs more than 0 and at "
            f"most {MAX_KERNEL_S:g} s; time_s is in seconds, energy_j in joules).",
        )


def _check_work(row: SweepRow, where: str) -> None:
    """Refuse a row whose work no GPU does in its time (:data:`MAX_RATES`), whose launch CUDA cannot make, or whose
    clocks no GPU runs at (:data:`MAX_CLOCK_MHZ`)."""
    work = {
        "flops": row.flops,
        "dram bytes": row.read_bytes + row.write_bytes,
        "onchip_bytes": row.onchip_bytes,
        "blocks": float(row.blocks),
    }
    if row.gemm_mnk is not None:
        if max(row.gemm_mnk) > MAX_GEMM_DIM:
            raise SpecError(
                f"{where}: a gemm dimension of {float(max(row.gemm_mnk)):.4g}, more than {MAX_GEMM_DIM}.",
                "give gemm_m, gemm_n and gemm_k as the matrix product's sizes (or leave them empty).",
            )
        work["flops"] = max(work["flops"], 2.0 * math.prod(row.gemm_mnk))
    for what, amount in work.items():
        if amount > MAX_RATES[what] * row.time_s:
            raise SpecError(
                f"{where}: {amount:.4g} {what} in {row.time_s:.4g} s is {amount / row.time_s:.4g} per "
                f"second, more than any GPU does ({MAX_RATES[what]:g}).",
                "check the row's units (flops and bytes are counts per launch, time_s seconds), or drop it.",
            )
    for col, top in MAX_CLOCK_MHZ.items():
        if getattr(row, col) > top:
            raise SpecError(
                f"{where}: {col} {getattr(row, col):.4g} is no clock a GPU runs at (at most {top} MHz).",
                f"give {col} in MHz, as NVML reports it.",
            )
    if row.threads_per_block > MAX_THREADS_PER_BLOCK:
        raise SpecError(
            f"{where}: threads_per_block {row.threads_per_block}, more than CUDA's {MAX_THREADS_PER_BLOCK}.",
            "give the threads of one block (or leave it empty).",
        )


def _check_repeats(rows: Sequence[SweepRow], path: Path) -> None:
    """Refuse readings of one kernel at one clock pair that contradict each other (:data:`REPEAT_SPREAD`)."""
    seen: dict[tuple[Any, ...], list[SweepRow]] = {}
    for row in rows:
        key = (
            row.kernel,
            row.flops,
            row.read_bytes,
            row.write_bytes,
            row.category,
            row.dtype,
            row.access,
            row.blocks,
            row.threads_per_block,
            row.gemm_mnk,
            row.onchip_bytes,
            row.core_mhz,
            row.mem_mhz,
        )
        seen.setdefault(key, []).append(row)
    for same in seen.values():
        for what in ("time_s", "energy_j"):
            values = [getattr(r, what) for r in same]
            if len(values) > 1 and max(values) > REPEAT_SPREAD * min(values):
                raise SpecError(
                    f"sweep table {path}: kernel {same[0].kernel!r} at {same[0].core_mhz}@"
                    f"{same[0].mem_mhz} MHz is given {len(values)} times with {what} from "
                    f"{min(values):.4g} to {max(values):.4g}, more than {REPEAT_SPREAD:g}x apart: "
                    "conflicting readings.",
                    "keep one reading per kernel and clock pair (or readings that agree), and drop the others.",
                )


def read_table(path: str | Path) -> list[SweepRow]:
    """Read a sweep table (module docstring).

    Raises:
        SpecError: The file is missing or not a CSV table, lacks a required column, or a row holds a bad value.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(
            f"sweep table {p} does not exist.",
            "give the path of a CSV table (rlclock calibrate --help lists its columns).",
        ) from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        raise SpecError(
            f"sweep table {p} cannot be read as text ({type(exc).__name__}).", "give a UTF-8 CSV file."
        ) from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED if c not in header and ALTERNATIVES.get(c) not in header]
    if not ("bytes" in header or ("read_bytes" in header and "write_bytes" in header)):
        missing.append("bytes (or read_bytes and write_bytes)")
    if missing:
        raise SpecError(
            f"sweep table {p}: missing column(s) {missing}; found {header or 'no header'}.",
            f"give a header row with {list(REQUIRED)} and bytes (time_ms may stand for time_s, power_w for energy_j).",
        )
    unknown = [h for h in header if h not in REQUIRED + OPTIONAL + INFO + tuple(ALTERNATIVES.values())]
    if unknown:
        raise SpecError(f"sweep table {p}: unknown column(s) {unknown}.", f"use {list(REQUIRED + OPTIONAL)}.")
    rows = []
    for raw0 in reader:
        where = f"sweep table {p}, line {reader.line_num}"
        if None in raw0:
            raise SpecError(
                f"{where}: more fields than the header's {len(header)}.", "give every row one value per header column."
            )
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
        time_s = (
            _number(raw, "time_s", where, positive=True)
            if "time_s" in header
            else 1e-3 * _number(raw, "time_ms", where, positive=True)
        )
        energy_j = (
            _number(raw, "energy_j", where, positive=True)
            if "energy_j" in header
            else time_s * _number(raw, "power_w", where, positive=True)
        )
        _check_reading(name, time_s, energy_j, where)
        rows.append(
            row := SweepRow(
                kernel=name,
                flops=_number(raw, "flops", where),
                read_bytes=rb,
                write_bytes=wb,
                category=_choice(raw, "category", CATEGORIES, default_category, where),
                dtype=_choice(raw, "dtype", DTYPES, "bf16", where),
                core_mhz=int(_number(raw, "core_mhz", where, positive=True, integer=True)),
                mem_mhz=int(_number(raw, "mem_mhz", where, positive=True, integer=True)),
                time_s=time_s,
                energy_j=energy_j,
                access=_choice(raw, "access", ACCESS_CLASSES, "stream", where),
                blocks=int(_number(raw, "blocks", where, integer=True, default=0.0)),
                threads_per_block=int(_number(raw, "threads_per_block", where, integer=True, default=0.0)),
                gemm_mnk=shape if shape is None else (shape[0], shape[1], shape[2]),
                onchip_bytes=_number(raw, "onchip_bytes", where, default=0.0),
            )
        )
        _check_work(row, where)
    if not rows:
        raise SpecError(f"sweep table {p} holds a header but no rows.", "add the measurements.")
    _check_repeats(rows, p)
    if "onchip_bytes" not in header:  # written before the column: the suite's on-chip loop counts 2 bytes per FLOP
        rows = [replace(r, onchip_bytes=SMEM_BYTES_PER_FLOP * r.flops) if r.kernel == SMEM_KERNEL else r for r in rows]
    return rows


def write_table(rows: Sequence[SweepRow], path: str | Path, info: Sequence[Mapping[str, Any]] | None = None) -> Path:
    """Write rows as a sweep table that :func:`read_table` reads back (``info``: per row, values of :data:`INFO`
    columns to write beside)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    base_cols = [
        "kernel",
        "flops",
        "read_bytes",
        "write_bytes",
        "category",
        "dtype",
        "access",
        "blocks",
        "threads_per_block",
        "gemm_m",
        "gemm_n",
        "gemm_k",
        "onchip_bytes",
        "core_mhz",
        "mem_mhz",
        "time_s",
        "energy_j",
    ]
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
            d.update(
                {"gemm_m": "", "gemm_n": "", "gemm_k": ""}
                if mnk is None
                else {"gemm_m": mnk[0], "gemm_n": mnk[1], "gemm_k": mnk[2]}
            )
            if info is not None:
                d.update({c: info[n].get(c, "") for c in cols[len(base_cols) :]})
            w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in d.items()})
    return p
