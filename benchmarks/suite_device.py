"""The calibration suite on this machine's GPU, and the preset checked against it.

``--measure`` runs ``rlclock calibrate --device 0`` in a dry run (nothing set: the suite at the clocks in
effect, each kernel over three tick-aligned NVML energy windows) and writes its table; ``--report`` (the default,
on the committed H200 table) prints the preset's time and energy against every reading, by kernel — what
``docs/simulator.md`` ("The suite on the H200") and the README quote. With clock control on a GPU of one's own,
``rlclock calibrate --device 0 --control-clocks --out my-gpu.yaml`` sweeps and fits instead.

    python benchmarks/suite_device.py --measure --out data/h200-suite-observe.csv   # on the GPU
    python benchmarks/suite_device.py                                                            # the table again
    python benchmarks/suite_device.py --windows data/h200-suite-windows  # readings at each window vs the longest

The window tables were taken with ``rlclock calibrate --device 0 --gpu h200-sxm --window W --table-out
window-W.csv`` for W = 0.1, 0.2, 0.4, 1.0 (dry run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHIPPED = ROOT / "rlclock" / "data" / "measurements" / "h200-suite-observe.csv"


def compare_windows(folder: Path) -> int:
    """Print each kernel's time and energy at every window length against the longest window's."""
    import csv

    tables = sorted(folder.glob("window-*.csv"), key=lambda f: float(f.stem.split("-", 1)[1]))
    if not tables:
        print(f"no window-*.csv tables in {folder}", file=sys.stderr)
        return 1
    read = {float(f.stem.split("-", 1)[1]): {r["kernel"]: r for r in csv.DictReader(f.open())} for f in tables}
    longest = max(read)
    print(f"suite readings against the {longest:g} s windows (time % / energy %), sm clock read, power cap reason")
    for kernel, ref in read[longest].items():
        cells = []
        for w in sorted(read):
            if w == longest or kernel not in read[w]:
                continue
            r = read[w][kernel]
            dt = 100 * (float(r["time_s"]) / float(ref["time_s"]) - 1)
            de = 100 * (float(r["energy_j"]) / float(ref["energy_j"]) - 1)
            cells.append(f"{w:g} s: {dt:+5.1f} / {de:+5.1f}")
        capped = "capped" if "power_cap" in (ref.get("reasons") or "") else ""
        print(f"  {kernel:18s} " + "   ".join(cells) + f"   {float(ref['sm_clock_read_mhz'] or 0):6.0f} MHz {capped}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--measure", action="store_true", help="measure the suite on GPU 0 (dry run) first")
    p.add_argument("--out", type=Path, default=SHIPPED, help="the table to write (--measure) or read")
    p.add_argument("--gpu", default="h200-sxm", help="the preset to check")
    p.add_argument("--window", type=float, default=1.0, help="--measure: energy window, seconds")
    p.add_argument(
        "--windows",
        type=Path,
        metavar="FOLDER",
        help="compare the tables window-W.csv in FOLDER (one per window length W) instead",
    )
    args = p.parse_args(argv)
    if args.windows is not None:
        return compare_windows(args.windows)
    from rlclock.cli import main as rlclock

    if args.measure:
        return rlclock(
            [
                "calibrate",
                "--device",
                "0",
                "--gpu",
                args.gpu,
                "--window",
                str(args.window),
                "--table-out",
                str(args.out),
            ]
        )
    return rlclock(["calibrate", "--table", str(args.out), "--gpu", args.gpu, "--check"])


if __name__ == "__main__":
    raise SystemExit(main())
