"""Least-squares fitting of a GPU preset's physical DVFS parameters, and storing them in the preset.

Only physical parameters are fitted (voltage ridge, power coefficients, memory power, achieved fractions of
peak per kernel class, latencies); no kernel gets a parameter of its own. The fits themselves —
:mod:`rlclock.calibration.paper` (RTX 3080 Ti, the paper's readings) and :mod:`rlclock.calibration.measured`
(any GPU with a measured trace) — supply the residuals.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from rlclock.dvfs.spec import DvfsParams, GpuSpec

FIT_NAMES: tuple[str, ...] = (
    "f_ridge_mhz",
    "p_const_w",
    "k_leak_w_per_v",
    "c_clock_w",
    "c_tensor_w",
    "c_simt_w",
    "e_xbar_j_per_byte",
    "p_mem_bg_w",
    "e_dram_j_per_byte",
    "eta_gemm",
    "eta_stream",
    "eta_gather",
    "eta_reduce",
    "simt_ops_per_byte",
    "lat_core_cycles",
    "lat_mem_cycles",
    "smooth_p",
    "launch_s",
    "reduce_overhead_cycles",
)
"""Parameters the fits adjust (voltage end points and the attention efficiency stay as set)."""

BOUNDS: dict[str, tuple[float, float]] = {
    "f_ridge_mhz": (600, 1700),
    "p_const_w": (0, 120),
    "k_leak_w_per_v": (0, 150),
    "c_clock_w": (0, 150),
    "c_tensor_w": (10, 400),
    "c_simt_w": (0, 400),
    "e_xbar_j_per_byte": (0, 3e-10),
    "p_mem_bg_w": (5, 200),
    "e_dram_j_per_byte": (0, 3e-10),
    "eta_gemm": (0.5, 1.0),
    "eta_stream": (0.5, 1.0),
    "eta_gather": (0.3, 1.0),
    "eta_reduce": (0.3, 1.0),
    "simt_ops_per_byte": (0, 40),
    "lat_core_cycles": (50, 2000),
    "lat_mem_cycles": (500, 10000),
    "smooth_p": (1.5, 12),
    "launch_s": (5e-7, 5e-6),
    "reduce_overhead_cycles": (0.0, 2e5),
    "eta_simt_gemm": (0.2, 1.0),
    "boost_max_mhz": (0.0, 4000.0),
}

# Typical magnitudes, so the optimiser sees parameters of order one.
_SCALE = {
    "e_xbar_j_per_byte": 1e-11,
    "e_dram_j_per_byte": 1e-11,
    "e_smem_j_per_byte": 1e-11,
    "launch_s": 1e-6,
    "f_ridge_mhz": 100.0,
    "smem_bytes_per_cycle": 10.0,
    "reduce_overhead_cycles": 1e3,
    "l2_resident_bytes": 1e7,
    "l2_bytes_per_cycle": 1000.0,
    "lat_mem_cycles": 1000.0,
    "lat_core_cycles": 100.0,
    "boost_max_mhz": 100.0,
}


def fit(
    spec: GpuSpec,
    residuals: Callable[[GpuSpec], np.ndarray],
    names: Sequence[str] = FIT_NAMES,
    max_nfev: int = 400,
    bounds: dict[str, tuple[float, float]] | None = None,
) -> tuple[GpuSpec, float]:
    """Least-squares fit of ``names`` within ``bounds`` (default :data:`BOUNDS`); returns the fitted spec and
    the final cost."""
    bounds = BOUNDS if bounds is None else bounds
    from scipy.optimize import least_squares

    base = spec.model.as_dict()
    scale = np.array([_SCALE.get(n, 1.0) for n in names])
    lb = np.array([bounds[n][0] for n in names]) / scale
    ub = np.array([bounds[n][1] for n in names]) / scale
    x0 = np.clip(np.array([base[n] for n in names]) / scale, lb + 1e-9, ub - 1e-9)

    def with_x(x: np.ndarray) -> GpuSpec:
        return spec.with_model(**{n: float(v) for n, v in zip(names, x * scale)})

    n_res = residuals(with_x(x0)).size

    def f(x: np.ndarray) -> np.ndarray:
        try:
            res = residuals(with_x(x))
        except (FloatingPointError, ValueError):
            return np.full(n_res, 1e3)
        return np.where(np.isfinite(res), res, 1e3)

    out = least_squares(f, x0, bounds=(lb, ub), x_scale="jac", diff_step=1e-3, max_nfev=max_nfev)
    return with_x(out.x), float(out.cost)


def write_model(key: str, params: DvfsParams, note: str, folder: Path | None = None) -> Path:
    """Replace the ``model:`` block of preset ``key`` with ``params`` (other lines and comments kept)."""
    path = (folder or Path(str(resources.files("rlclock.dvfs").joinpath("presets")))) / f"{key}.yaml"
    text = path.read_text()
    values = {k: float(f"{v:.6g}") for k, v in params.as_dict().items()}
    block = f"model:  # {note}\n" + "".join(
        f"  {k}: {yaml.safe_dump(v).strip().removesuffix('...').strip()}\n" for k, v in values.items()
    )
    new, n = re.subn(r"^model:.*?(?=^\S)", block, text, count=1, flags=re.S | re.M)
    if n != 1:
        raise RuntimeError(f"no model: block found in {path}")
    path.write_text(new)
    return path
