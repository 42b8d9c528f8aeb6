"""The calibration suite on this machine's GPU, and the preset checked against it.

``--measure`` runs ``rlclock calibrate --device 0`` in observe mode (nothing set: the suite at the clocks in
effect, each kernel over three tick-aligned NVML energy windows) and writes its table; ``--report`` (the default,
on the committed H200 table) prints the preset's time and energy against every reading, by kernel — what
``docs/simulator.md`` ("The suite on the H200") and the README quote. With clock control on a GPU of one's own,
``rlclock calibrate --device 0 --control-clocks --out my-gpu.yaml`` sweeps and fits instead.

    python benchmarks/suite_device.py --measure --out data/h200-suite-observe.csv   # on the GPU
    python benchmarks/suite_device.py                                                            # the table again
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHIPPED = ROOT / "rlclock" / "data" / "measurements" / "h200-suite-observe.csv"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--measure", action="store_true", help="measure the suite on GPU 0 (observe mode) first")
    p.add_argument("--out", type=Path, default=SHIPPED, help="the table to write (--measure) or read")
    p.add_argument("--gpu", default="h200-sxm", help="the preset to check")
    p.add_argument("--window", type=float, default=1.0, help="--measure: energy window, seconds")
    args = p.parse_args(argv)
    from rlclock.cli import main as rlclock

    if args.measure:
        return rlclock(["calibrate", "--device", "0", "--gpu", args.gpu, "--window", str(args.window),
                        "--table-out", str(args.out)])
    return rlclock(["calibrate", "--table", str(args.out), "--gpu", args.gpu, "--check"])


if __name__ == "__main__":
    raise SystemExit(main())
