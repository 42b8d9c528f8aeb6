"""What a sweep fits: the parameters its rows can show (rlclock.calibration.sweep.fit_names)."""

from __future__ import annotations

from rlclock.calibration.sweep import (
    POWER_FIT_NAMES,
    TIME_FIT_NAMES,
    SweepRow,
    confounded,
    fit_names,
    simulated_sweep,
)
from rlclock.dvfs.spec import get_spec


def _row(kernel: str, category: str, dtype: str, nbytes: float, access: str = "stream") -> SweepRow:
    return SweepRow(kernel, 1e9, nbytes, 0.0, category, dtype, 1410, 1215, 1e-3, 0.1, access)


def test_the_suite_shows_every_parameter():
    for key in ("h200-sxm", "rtx3080ti"):
        assert fit_names(simulated_sweep(get_spec(key), per_memory=2)) == (TIME_FIT_NAMES, POWER_FIT_NAMES)


def test_one_memory_clock_ties_the_memory_background_to_the_constant_power():
    """At one memory clock (the H200's memory locks deferred) the memory's background power only adds to the constant
    power: it is fitted against its base value; at several (the RTX 3080 Ti's lock at runtime) freely."""
    assert confounded(simulated_sweep(get_spec("h200-sxm"), per_memory=2)) == ("p_mem_bg_w",)
    assert confounded(simulated_sweep(get_spec("rtx3080ti"), per_memory=2)) == ()


def test_a_table_of_few_kernel_classes_fits_only_what_they_show():
    fp32_chain, sgemm = _row("fma", "elementwise", "fp32", 0.0), _row("sgemm", "gemm", "fp32", 2e8)
    time_names, power_names = fit_names([fp32_chain, sgemm])
    assert time_names == ("eta_simt_gemm",)  # no tensor-core and no memory-bound row
    assert "c_simt_gemm_w" in power_names and "c_tensor_w" not in power_names
    assert "e_dram_j_per_byte" not in power_names and {"v_min_v", "f_ridge_mhz", "p_const_w"} <= set(power_names)
    time_names, power_names = fit_names(
        [_row("gemm", "gemm", "bf16", 1e8), _row("sum", "reduction", "fp32", 1e9, "reduce")]
    )
    assert time_names == ("eta_gemm", "eta_reduce", "simt_ops_per_byte", "lat_core_cycles", "lat_mem_cycles")
    assert "c_tensor_w" in power_names and "e_dram_j_per_byte" in power_names
