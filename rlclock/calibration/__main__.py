"""``python -m rlclock.calibration GPU [--write]``: refit a shipped GPU preset (docs/simulator.md)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from rlclock.calibration.fit import write_model
from rlclock.calibration.measured import fit_measured
from rlclock.calibration.paper import fit_paper
from rlclock.dvfs.spec import get_spec

SAME_DIE: dict[str, tuple[str, ...]] = {"h200-sxm": ("h100-sxm",)}
"""Fitted preset → presets of GPUs on the same die that carry its fit (``--write`` writes them too): the H100 is the
H200's GH100 die with other memory (docs/simulator.md, "The H100 preset against a real H100")."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlclock.calibration",
        description="Fit a GPU preset's physical DVFS parameters (see docs/simulator.md).",
    )
    parser.add_argument("gpu", help="preset key: rtx3080ti (paper fit) or h200-sxm (measured fit)")
    parser.add_argument("--max-nfev", type=int, default=400, help="optimiser evaluations (default 400)")
    parser.add_argument("--write", action="store_true", help="store the fitted parameters in the preset")
    args = parser.parse_args(argv)
    spec = get_spec(args.gpu)
    if spec.key == "rtx3080ti":
        fitted, cost = fit_paper(spec, args.max_nfev)
        note = "fitted by python -m rlclock.calibration to Spaan et al. (shapes alone)"
    else:
        fitted, cost = fit_measured(spec, args.max_nfev)
        note = "fitted by python -m rlclock.calibration to the measured trace under data/ (shapes alone)"
    print(f"cost {cost:.4g}")
    for k, v in fitted.model.as_dict().items():
        print(f"  {k:22s} {v:.6g}")
    if args.write:
        print("wrote", write_model(spec.key, fitted.model, note))
        for key in SAME_DIE.get(spec.key, ()):  # presets that carry this fit, each capped at its own L2
            other = get_spec(key)
            carried = replace(fitted.model, l2_resident_bytes=min(fitted.model.l2_resident_bytes, other.l2_bytes))
            print(
                "wrote",
                write_model(
                    key,
                    carried,
                    f"the {spec.key} preset's fit (same die), the L2 residency at "
                    f"most this GPU's {other.l2_bytes / 1e6:g} MB: not fitted to it",
                ),
            )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
