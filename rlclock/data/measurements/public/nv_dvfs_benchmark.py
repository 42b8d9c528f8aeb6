"""Sweep tables from the NV-DVFS-Benchmark measurements of a Tesla V100 and a Quadro RTX 8000.

Source: Qiang Wang and Xiaowen Chu's DVFS benchmark (github.com/blackjack2015/NV-DVFS-Benchmark, commit
``f189504ff7810168a7b98ad0b1bc418ccb5e0d60``, 2023-08-21; the ICPADS'18 paper "GPGPU Performance Estimation with Core
and Memory Frequency Scaling" and its sequels), files ``data/{v100,rtx8000}-dvfs-{microbenchmark,real}-profile.csv``:
per kernel launch configuration, its time (ms, nvprof) and the board's average power (W, NVML, over a 12 s run of the
kernel repeated) at ten locked core clocks — a Tesla V100 (PCIe, Volta; memory 877 MHz, 405-1380 MHz, 250 W limit)
and a Quadro RTX 8000 (Turing; memory 6500 MHz, 705-1710 MHz, 260 W limit) — with DCGM's activity counters (DRAM
active, FP32/FP64/FP16 and tensor pipes active, SM active and occupancy) at each. 138 microbenchmark configurations
(cachebench, mixbench, shmembench) and 20 application kernels (CUDA samples and Rodinia) per GPU.

The repository carries no licence, so rlclock ships no copy of its numbers: this script derives the tables from a
checkout of it (``git clone https://github.com/blackjack2015/NV-DVFS-Benchmark && git -C NV-DVFS-Benchmark checkout
f189504ff7810168a7b98ad0b1bc418ccb5e0d60``), and ``benchmarks/public_dvfs_kernels.py`` fits and judges them.

What a row holds (the sweep-table format of :mod:`rlclock.calibration.table`): the reading's time and energy
(power × time), and the kernel's shape as its reading at its highest kept core clock shows it — its DRAM bytes the
DRAM-active share of that reading at the board's peak bandwidth, its FLOPs (FP32-equivalent) the share of the reading
the DRAM does not account for (``1 - DRAM active``, at least the busiest arithmetic pipe's) at the SMs' FP32 peak. The
counters tell how a kernel splits between the SMs and memory, not its whole work (integer, shared-memory and L1
traffic are not counted): the tables are meant to be fitted with each kernel anchored on that reading
(``rlclock calibrate --anchor``).

Readings left out, each by a rule the script applies (and prints):

* a clock at which a quarter or more of a GPU's kernels read over :data:`SLOWER_THAN_CLOCK` times slower than the
  clock ratio to the next higher clock allows (no kernel slows more than in proportion to its clock): the V100's
  405 MHz, where compute-bound kernels took twice the time 405 MHz gives — the card ran near 200 MHz;
* a reading whose power is under :data:`POWER_DROP` of the same kernel's at the next lower clock (power rises with
  the clock): four RTX 8000 integer mixbench kernels at 1710 MHz read half the power of 1605 MHz.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

COMMIT = "f189504ff7810168a7b98ad0b1bc418ccb5e0d60"
REPOSITORY = "https://github.com/blackjack2015/NV-DVFS-Benchmark"
SETS = ("microbenchmark", "real")
SLOWER_THAN_CLOCK = 1.6
POWER_DROP = 0.9
DROP_CLOCK_SHARE = 0.25


@dataclass(frozen=True)
class Board:
    """What the derivation needs of a GPU: its name, SM count, FP32 FLOPs per cycle per SM, DRAM peak (bytes/s) and
    memory clock (MHz)."""

    name: str
    sm_count: int
    fp32_per_cycle_per_sm: float
    dram_bytes_per_s: float
    mem_mhz: int


BOARDS: dict[str, Board] = {
    "v100": Board("Tesla V100-PCIE", 80, 128.0, 2.0 * 877e6 * 4096 / 8, 877),
    "rtx8000": Board("Quadro RTX 8000", 72, 128.0, 2.0 * 6500e6 * 384 / 8, 6500),
}
"""The two boards (datasheets: 80 SMs, 4096-bit HBM2 at 877 MHz; 72 SMs, 384-bit GDDR6 at the 6500 MHz NVML reports;
both 64 FP32 lanes per SM)."""

COLUMNS = ("kernel", "flops", "bytes", "category", "dtype", "core_mhz", "mem_mhz", "time_s", "energy_j")


def read_profile(folder: Path, gpu: str, which: str) -> dict[str, list[dict[str, float]]]:
    """The readings of one file, per kernel (``benchmark/argument/kernel``), clocks ascending."""
    path = folder / "data" / f"{gpu}-dvfs-{which}-profile.csv"
    by: dict[str, list[dict[str, float]]] = defaultdict(list)
    with path.open(newline="") as f:
        for raw in csv.DictReader(f):
            name = f"{raw['benchmark']}/{raw['argNo']}/{raw['kernel']}"
            by[name].append(
                {
                    k: float(raw[k]) if raw[k] else math.nan
                    for k in (
                        "core_frequency",
                        "memory_frequency",
                        "time",
                        "average_power",
                        "DRAMA",
                        "FP32A",
                        "FP64A",
                        "FP16A",
                        "TENSO",
                    )
                }
            )
    return {k: sorted(v, key=lambda r: r["core_frequency"]) for k, v in by.items()}


def _too_slow(readings: list[dict[str, float]]) -> set[float]:
    """Clocks at which a kernel reads slower than :data:`SLOWER_THAN_CLOCK` times the clock ratio to the next."""
    out = set()
    for lo, hi in itertools.pairwise(readings):
        if lo["time"] > SLOWER_THAN_CLOCK * hi["time"] * hi["core_frequency"] / lo["core_frequency"]:
            out.add(lo["core_frequency"])
    return out


def derive(folder: Path, gpu: str) -> tuple[dict[str, list[list[object]]], list[str]]:
    """Per set (``microbenchmark``, ``real``), the table rows of one GPU; and what was left out, one line each."""
    board = BOARDS[gpu]
    data = {which: read_profile(folder, gpu, which) for which in SETS}
    every = [r for which in SETS for r in data[which].values()]
    slow: dict[float, int] = defaultdict(int)
    for readings in every:
        for f in _too_slow(readings):
            slow[f] += 1
    dropped_clocks = {f for f, n in slow.items() if n >= DROP_CLOCK_SHARE * len(every)}
    notes = [
        f"{gpu}: {int(f)} MHz left out: {slow[f]} of {len(every)} kernels read over {SLOWER_THAN_CLOCK:g}x slower "
        "than the clock ratio allows"
        for f in sorted(dropped_clocks)
    ]
    tables: dict[str, list[list[object]]] = {}
    for which in SETS:
        rows: list[list[object]] = []
        for name, readings in data[which].items():
            kept = [r for r in readings if r["core_frequency"] not in dropped_clocks]
            power_ok = [
                i == 0 or r["average_power"] >= POWER_DROP * kept[i - 1]["average_power"] for i, r in enumerate(kept)
            ]
            for r, ok in zip(kept, power_ok):
                if not ok:
                    notes.append(
                        f"{gpu}: {name} at {int(r['core_frequency'])} MHz left out: power "
                        f"{r['average_power']:.0f} W under {POWER_DROP:g} of the next lower clock's"
                    )
            kept = [r for r, ok in zip(kept, power_ok) if ok]
            ref = kept[-1]
            time_s = ref["time"] * 1e-3
            pipe = max(ref[k] for k in ("FP32A", "FP64A", "FP16A", "TENSO") if not math.isnan(ref[k]))
            share = max(pipe, 1.0 - ref["DRAMA"])
            flops = share * board.fp32_per_cycle_per_sm * board.sm_count * ref["core_frequency"] * 1e6 * time_s
            nbytes = ref["DRAMA"] * board.dram_bytes_per_s * time_s
            for r in kept:
                t = r["time"] * 1e-3
                rows.append(
                    [
                        name,
                        f"{flops:.6g}",
                        f"{nbytes:.6g}",
                        "elementwise",
                        "fp32",
                        int(r["core_frequency"]),
                        board.mem_mhz,
                        f"{t:.6g}",
                        f"{t * r['average_power']:.6g}",
                    ]
                )
        tables[which] = rows
    return tables, notes


def write(folder: Path, out: Path) -> list[Path]:
    """Write ``nv-dvfs-<gpu>-<set>.csv`` for both GPUs and sets into ``out``; print what was left out."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for gpu in BOARDS:
        tables, notes = derive(folder, gpu)
        for line in notes:
            print(line)
        for which, rows in tables.items():
            path = out / f"nv-dvfs-{gpu}-{which}.csv"
            with path.open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(COLUMNS)
                w.writerows(rows)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help=f"a checkout of {REPOSITORY} at commit {COMMIT}")
    parser.add_argument("--out", type=Path, default=Path("nv-dvfs-tables"), help="folder to write the tables into")
    args = parser.parse_args(argv)
    for path in write(args.checkout, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
