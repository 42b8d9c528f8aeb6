"""A calibration a user can trust: physical constraints in the fit, a held-out check that refuses a fit worse than
its start, warnings at the ends of the ranges, and tables with absurd or contradicting readings refused in one line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlclock.calibration.sweep import (
    IDLE,
    SweepRow,
    constraint_residuals,
    fit_names,
    fit_sweep,
    fitted_names,
    idle_readings,
    power_floor_w,
    simulated_sweep,
    violations,
)
from rlclock.calibration.table import read_table, write_table
from rlclock.calibration.trust import calibrate, fold_of, held_out
from rlclock.cli import main
from rlclock.dvfs.spec import PARAMETER_RANGES, get_spec, out_of_range, preset_keys
from rlclock.dvfs.variants import hidden_gpu
from rlclock.errors import SpecError

HEADER = "kernel,flops,bytes,core_mhz,mem_mhz,time_s,energy_j\n"
GOOD = "k,1e9,1e6,1980,3201,1e-3,0.5\n"


def _table(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


# the classes of values no GPU produced are tables in tests/calibration/test_calibration_table_bounds.py; here the
# readings in other units and the clocks
@pytest.mark.parametrize(
    "text, match",
    [
        (HEADER + "k,1e9,1e6,1e300,3201,1e-3,0.5\n", r"line 2: core_mhz must be a whole number|core_mhz .* no clock"),
        (HEADER + "k,1e9,1e6,99000,3201,1e-3,0.5\n", r"line 2: core_mhz 9.9e\+04 is no clock a GPU runs at"),
        ("kernel,flops,bytes,core_mhz,mem_mhz,time_ms,power_w\nk,1e9,1e6,1980,3201,1,9000\n", r"9000 W, outside"),
        (HEADER + GOOD + "k,1e9,1e6,1980,3201,2e-3,0.5\n", r"is given 2 times with time_s from 0.001 to 0.002"),
        (HEADER + GOOD + "k,1e9,1e6,1980,3201,1e-3,5\n", r"energy_j from 0.5 to 5, more than 1.5x apart"),
    ],
)
def test_a_table_with_absurd_or_contradicting_readings_gets_one_line(tmp_path, text, match):
    with pytest.raises(SpecError, match=match) as e:
        read_table(_table(tmp_path, text))
    assert "\n" not in str(e.value) and "Fix:" in str(e.value)


def test_repeated_readings_that_agree_are_kept(tmp_path):
    rows = read_table(_table(tmp_path, HEADER + GOOD + "k,1e9,1e6,1980,3201,1.1e-3,0.52\n" + GOOD))
    assert len(rows) == 3


def test_the_command_refuses_an_absurd_table_before_any_fit(tmp_path, capsys):
    table = _table(tmp_path, HEADER + "k,1e300,1e6,1980,3201,1e-3,0.5\nk,1e300,1e6,990,3201,2e-3,0.5\n")
    assert main(["calibrate", "--table", str(table), "--out", str(tmp_path / "x.yaml")]) == 2
    captured = capsys.readouterr()
    assert "fitting" not in captured.out and len(captured.err.strip().splitlines()) == 1
    assert not (tmp_path / "x.yaml").exists()


def test_every_preset_lies_inside_the_documented_ranges():
    for key in preset_keys():
        assert out_of_range(get_spec(key).model) == [], key
    assert all(lo < hi for lo, hi, _ in PARAMETER_RANGES.values())


def test_violations_name_a_falling_voltage_a_floor_above_idle_and_a_value_out_of_range():
    h200 = get_spec("h200-sxm")
    assert violations(h200, {3201: 130.0}, ["eta_gemm"]) == []
    bad = h200.with_model(v_min_v=0.9, v_max_v=0.82, eta_gemm=1.3)
    floor = power_floor_w(bad, 3201)
    got = violations(bad, {3201: floor / 2}, ["eta_gemm"])
    assert len(got) == 3
    assert "voltage falls" in got[0] and "above the idle reading" in got[1] and "eta_gemm" in got[2]
    assert np.all(constraint_residuals(bad, {3201: floor / 2}) > 0)
    assert not np.any(constraint_residuals(h200, {3201: 2 * power_floor_w(h200, 3201)}))


@pytest.mark.slow  # whole fits (and a k-fold of them): 10-40 s on a loaded 2-core machine
def test_the_fit_keeps_the_voltage_rising_and_the_floor_under_idle_where_the_data_pull_otherwise():
    """A sweep from a GPU whose voltage falls with the clock and whose floor is above its own idle reading (no
    physical GPU): the fit still returns a voltage that does not fall and a floor not above the idle reading."""
    base = get_spec("h200-sxm")
    odd = base.with_model(v_min_v=0.85, v_max_v=0.75, f_ridge_mhz=900.0)
    rows = simulated_sweep(odd, per_memory=6, noise_std=0.0)
    idle = {r.mem_mhz: 0.6 * r.energy_j / r.time_s for r in rows if r.kernel == IDLE}
    rows = [replace(r, energy_j=0.6 * r.energy_j) if r.kernel == IDLE else r for r in rows]
    fitted, _ = fit_sweep(base, rows, max_nfev=60)
    assert idle_readings(rows) == pytest.approx(idle)
    assert fitted.model.v_max_v >= fitted.model.v_min_v - 1e-3
    assert all(power_floor_w(fitted, m) <= 1.02 * w for m, w in idle.items())


def test_a_parameter_the_table_cannot_inform_stays_at_its_prior():
    """An FMA chain (and idle rows) moves a megabyte of DRAM traffic, a share of its time and energy no meter sees:
    its kind would free the DRAM parameters (a SIMT row with bytes), but moving them changes no reading, so the fit
    keeps them, with the tensor-core and the memory-clock ones, at the base's values."""
    base = get_spec("h200-sxm")
    true = hidden_gpu(base, 2)
    rows = [r for r in simulated_sweep(true, per_memory=4) if r.kernel in ("fma_bound", IDLE)]
    assert {"eta_stream", "e_dram_j_per_byte"} <= set(sum(fit_names(rows), ()))
    time_names, power_names = fitted_names(base, rows)
    assert not {"eta_stream", "e_dram_j_per_byte", "lat_core_cycles", "simt_ops_per_byte"} & set(
        time_names + power_names
    )
    fitted, _ = fit_sweep(base, rows, max_nfev=60)
    for name in (
        "eta_gemm",
        "c_tensor_w",
        "eta_stream",
        "eta_reduce",
        "e_dram_j_per_byte",
        "e_xbar_j_per_byte",
        "lat_core_cycles",
        "smem_bytes_per_cycle",
    ):
        assert getattr(fitted.model, name) == getattr(base.model, name), name
    # tied to the constant power at one memory clock: where the rows allow either split, it keeps the base's
    assert fitted.model.p_mem_bg_w == pytest.approx(base.model.p_mem_bg_w, rel=0.02)
    assert fitted.model.c_simt_w != base.model.c_simt_w


def test_folds_deal_kernels_round_robin():
    assert fold_of(["a", "b", "a", "c", "d"], 2) == {"a": 0, "b": 1, "c": 0, "d": 1}


@pytest.mark.slow  # whole fits (and a k-fold of them): 10-40 s on a loaded 2-core machine
def test_the_held_out_check_reports_a_good_fit_and_warns_at_the_ends_of_ranges():
    base = get_spec("h200-sxm")
    rows = simulated_sweep(hidden_gpu(base, 1), per_memory=4, seed=1)
    result = calibrate(base, rows, folds=3, max_nfev=60)
    check = result.held_out
    assert check is not None and check.folds == 3 and len(check.kernels) == 10
    assert check.score("fit") < check.score("base") and check.within("fit") >= check.within("base")
    assert "held out (3-fold over 10 kernels)" in check.summary()
    assert all("sits at the" in w or "not fitted" in w for w in result.warnings)
    assert held_out(base, [r for r in rows if r.kernel in ("fma_bound", IDLE)]) is None


def _corrupted(base, tmp_path: Path) -> Path:
    """The base GPU's own suite, but one kernel read at three times its energy: a fit bends the shared parameters to
    it, and predicts the other kernels — which the base predicts exactly — worse."""
    rows = simulated_sweep(base, per_memory=4, noise_std=0.0)
    rows = [replace(r, energy_j=3 * r.energy_j) if r.kernel == "dram_stream" else r for r in rows]
    return write_table(rows, tmp_path / "bad.csv")


@pytest.mark.slow  # whole fits (and a k-fold of them): 10-40 s on a loaded 2-core machine
def test_a_fit_that_predicts_held_out_kernels_worse_than_its_start_is_refused(tmp_path, capsys):
    base = get_spec("h200-sxm")
    with pytest.raises(SpecError, match=r"predicts kernels it was not fitted to worse than the h200-sxm spec"):
        calibrate(base, read_table(_corrupted(base, tmp_path)), folds=3, max_nfev=40)
    out = tmp_path / "never.yaml"
    code = main(
        [
            "calibrate",
            "--table",
            str(_corrupted(base, tmp_path)),
            "--gpu",
            "h200-sxm",
            "--folds",
            "3",
            "--max-nfev",
            "40",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no spec was written" in err[0] and "Fix:" in err[0]
    assert not out.exists()


def test_folds_below_two_are_refused(capsys):
    assert main(["calibrate", "--simulated", "1", "--folds", "1"]) == 2
    assert "--folds at least 2" in capsys.readouterr().err
    rows: list[SweepRow] = []
    with pytest.raises(SpecError, match="at least 2 folds"):
        calibrate(get_spec("h200-sxm"), rows, folds=1)
