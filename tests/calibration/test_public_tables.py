"""Public measurements turned into sweep tables (rlclock/data/measurements/public/nv_dvfs_benchmark.py), the
core-clock ceiling on DRAM traffic they call for, and fitting tables anchored on one reading per kernel."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from rlclock.calibration.sweep import SweepRow, fit_sweep, plan_fit, predictions, reference_rows, simulated_sweep
from rlclock.calibration.table import read_table
from rlclock.dvfs import model
from rlclock.dvfs.spec import get_spec
from rlclock.dvfs.variants import hidden_gpu
from rlclock.schedule import ClockConfig
from rlclock.workload.trace import Kernel

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "rlclock" / "data" / "measurements" / "public" / "nv_dvfs_benchmark.py"


def _module():
    spec = importlib.util.spec_from_file_location("nv_dvfs_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["nv_dvfs_benchmark"] = mod
    spec.loader.exec_module(mod)
    return mod


HEADER = [
    "DRAMA",
    "FP16A",
    "FP32A",
    "FP64A",
    "SMACT",
    "SMOCC",
    "TENSO",
    "argNo",
    "average_power",
    "benchmark",
    "core_frequency",
    "kernel",
    "memory_frequency",
    "time",
]


def _write(
    folder: Path, gpu: str, which: str, kernels: dict[str, list[tuple[int, float, float]]], drama: float = 0.1
) -> None:
    (folder / "data").mkdir(parents=True, exist_ok=True)
    with (folder / "data" / f"{gpu}-dvfs-{which}-profile.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for name, readings in kernels.items():
            for core, time_ms, power in readings:
                w.writerow([drama, 0, 0.3, 0, 0.9, 0.5, 0, "input000", power, name, core, "k", 877, time_ms])


def test_the_derivation_writes_tables_and_leaves_out_what_its_rules_say(tmp_path):
    """A clock at which a quarter of the kernels read twice as slow as the clock allows is left out for all; a reading
    whose power falls under the lower clock's is left out alone; the shape comes from the top kept reading."""
    mod = _module()
    clocks = [502, 600, 705, 1380]

    def compute(scale: float, slow_at_502: bool, glitch: bool = False):
        out = []
        for f in clocks:
            t = scale * 1380 / f * (2.0 if slow_at_502 and f == 502 else 1.0)
            p = 50 + 0.1 * f
            out.append((f, t, 10.0 if glitch and f == 1380 else p))
        return out

    for gpu in ("v100", "rtx8000"):
        _write(
            tmp_path,
            gpu,
            "microbenchmark",
            {"a": compute(1.0, True), "b": compute(2.0, True), "c": compute(1.0, False, glitch=True)},
        )
        _write(tmp_path, gpu, "real", {"app": compute(3.0, False)})
    written = mod.write(tmp_path, tmp_path / "out")
    assert len(written) == 4
    rows = read_table(tmp_path / "out" / "nv-dvfs-v100-microbenchmark.csv")
    assert {r.core_mhz for r in rows} == {600, 705, 1380}  # 502 MHz left out for all kernels
    c = [r for r in rows if r.kernel.startswith("c/")]
    assert {r.core_mhz for r in c} == {600, 705}  # its 1380 MHz reading drew less than its 705 MHz one
    a = [r for r in rows if r.kernel.startswith("a/")]
    top = max(a, key=lambda r: r.core_mhz)
    board = mod.BOARDS["v100"]
    assert a[0].read_bytes == pytest.approx(0.1 * board.dram_bytes_per_s * top.time_s, rel=1e-5)
    peak = board.fp32_per_cycle_per_sm * board.sm_count * 1380e6
    assert a[0].flops == pytest.approx(0.9 * peak * top.time_s, rel=1e-5)  # 1 - DRAM active beats the FP32 pipe


def test_the_core_clock_ceiling_slows_memory_bound_kernels_below_its_knee_only():
    h200 = get_spec("h200-sxm")
    stream = Kernel(
        "copy", "copy", "copy", "forward", flops=0.0, dram_read_bytes=2.0**30, dram_write_bytes=2.0**30, dtype="fp32"
    )
    configs = [ClockConfig(1980, 3201), ClockConfig(990, 3201), ClockConfig(495, 3201)]
    off = model.predict(model.kernel_arrays([stream], h200), h200, configs).time_s[0]
    ceiling = h200.with_model(xbar_bytes_per_cycle=16.0)  # 16 B/cycle/SM × 132 SMs ≈ 4.2 TB/s at 1980 MHz
    on = model.predict(model.kernel_arrays([stream], ceiling), ceiling, configs).time_s[0]
    assert on[0] == pytest.approx(off[0], rel=0.2)
    assert on[2] / on[1] == pytest.approx(2.0, rel=0.1)  # below the knee: in proportion to the core clock
    assert off[1] / off[0] < 1.1 and off[2] / off[1] < 1.3  # without it: flat to 990 MHz, little below


def test_anchoring_at_a_locked_clock_reproduces_that_reading():
    h200 = get_spec("h200-sxm")
    k = Kernel("k", "k", "elementwise", "forward", flops=1e11, dram_read_bytes=1e9, dram_write_bytes=1e9, dtype="fp32")
    ka = model.kernel_arrays([k], h200)
    anchored = model.anchor(ka, h200, np.array([2e-3]), np.array([0.5]), core_mhz=np.array([990.0]))
    got = model.predict_clocks(anchored, h200, np.array([[990.0]]), np.array([[3201.0]]))
    assert got.time_s[0, 0] == pytest.approx(2e-3, rel=1e-4) and got.energy_j[0, 0] == pytest.approx(0.5, rel=1e-3)


def test_an_anchored_fit_reproduces_each_reference_reading_and_finds_a_hidden_ceiling():
    """A sweep of a GPU with a core-clock ceiling on DRAM traffic, its kernels' FLOPs and bytes off by a factor (as
    counters give them): anchored, every kernel's highest-clock reading is reproduced exactly, and the fit switches
    the ceiling on, which its base holds off."""
    base = get_spec("h200-sxm")
    true = hidden_gpu(base, 3).with_model(xbar_bytes_per_cycle=12.0)
    kinds = ("dram_stream", "simt_stream", "fma_bound", "latency_stream")  # no GEMM under the power cap: quick
    rows = [r for r in simulated_sweep(true, per_memory=5, noise_std=0.0) if r.kernel in kinds]
    scaled = [
        SweepRow(
            **{
                **r.__dict__,
                "flops": 0.5 * r.flops,
                "read_bytes": 0.5 * r.read_bytes,
                "write_bytes": 0.5 * r.write_bytes,
            }
        )
        for r in rows
    ]
    t, _e, _ = predictions(base, scaled, anchored=True)
    idx = reference_rows(scaled, np.unique([r.kernel for r in scaled], return_inverse=True)[1])
    assert np.allclose(t[idx], [scaled[i].time_s for i in idx], rtol=1e-3)
    start, time_names, _ = plan_fit(base, scaled, anchored=True)
    assert start.model.xbar_bytes_per_cycle > 0 and "xbar_bytes_per_cycle" in time_names
    fitted, figures = fit_sweep(base, scaled, max_nfev=15, anchored=True)
    assert figures["time_median_after"] < figures["time_median_before"]
    assert fitted.model.xbar_bytes_per_cycle > 0
