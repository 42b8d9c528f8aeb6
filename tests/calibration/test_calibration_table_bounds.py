"""Sweep tables whose values no GPU produced are refused by the reader, in one line, before any fit: times and powers
out of range, work no GPU does in the time given, launches CUDA cannot make, and readings of one kernel at one clock
pair that contradict each other. Each class is a row of the table; the fixes are checked to work."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlclock.calibration.table import MAX_RATES, REPEAT_SPREAD, read_table
from rlclock.errors import SpecError

HEADER = "kernel,flops,bytes,core_mhz,mem_mhz,time_s,energy_j,blocks,threads_per_block,gemm_m,gemm_n,gemm_k\n"
GOOD = "k,2e9,1e7,1980,3201,1e-3,0.5,1024,256,,,\n"


def _csv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "rows, match",
    [
        ("k,2e9,1e7,1980,3201,1e300,1,,,,,\n", r"line 2: time_s 1e\+300 is not a time from 0 to 60 s"),
        ("k,2e9,1e7,1980,3201,1e-3,1e6,,,,,\n", r"line 2: .* is 1e\+09 W, outside"),
        ("k,2e9,1e7,1980,3201,1e-3,1e-9,,,,,\n", r"W, outside the 1-5000 W a GPU draws"),
        ("idle,0,0,1980,3201,1e5,1e7,,,,,\n", r"idle window of 1e\+05 s"),
        ("idle,0,0,1980,3201,10,1e6,,,,,\n", r"1e\+05 W, outside"),
        ("k,1e300,1e7,1980,3201,1e-3,0.5,,,,,\n", r"flops in 0.001 s is 1e\+303 per second"),
        ("k,2e9,1e300,1980,3201,1e-3,0.5,,,,,\n", r"dram bytes in 0.001 s"),
        ("k,2e9,1e7,1980,3201,1e-3,0.5,1e300,,,,\n", r"blocks in 0.001 s"),
        ("k,2e9,1e7,1980,3201,1e-3,0.5,,4096,,,\n", r"threads_per_block 4096, more than CUDA's 1024"),
        ("k,2e9,1e7,1980,3201,1e-3,0.5,,,1e300,64,64\n", r"a gemm dimension of 1e\+300"),
        ("k,2e9,1e7,1980,3201,1e-3,0.5,,,65536,65536,65536\n", r"flops in 0.001 s"),  # 5.6e14 FLOPs in a millisecond
        (GOOD + "k,2e9,1e7,1980,3201,3e-3,0.5,1024,256,,,\n", r"2 times with time_s from 0.001 to 0.003.*conflicting"),
        (GOOD + "k,2e9,1e7,1980,3201,1e-3,1.5,1024,256,,,\n", r"energy_j from 0.5 to 1.5.*conflicting"),
    ],
)
def test_values_no_gpu_produced_are_one_line(tmp_path, rows, match):
    with pytest.raises(SpecError, match=match) as e:
        read_table(_csv(tmp_path, HEADER + rows))
    assert "\n" not in str(e.value) and "Fix:" in str(e.value)


def test_the_conflict_fix_works(tmp_path):
    """Keep one reading (or readings that agree) and the table reads; other clocks or kernels never conflict."""
    assert len(read_table(_csv(tmp_path, HEADER + GOOD))) == 1
    agree = GOOD + GOOD.replace("1e-3", "1.2e-3") + GOOD.replace("1980", "1005") + GOOD.replace("k,", "k2,")
    assert len(read_table(_csv(tmp_path, HEADER + agree))) == 4


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(time_s=st.floats(1e-7, 59), power_w=st.floats(1.01, 4990), rate=st.floats(0, 1), spread=st.floats(1, 3))
def test_any_reading_a_gpu_could_make_is_read_and_only_spread_readings_refused(tmp_path, time_s, power_w, rate, spread):
    flops = rate * MAX_RATES["flops"] * time_s
    row = f"k,{flops!r},0,1980,3201,{time_s!r},{power_w * time_s!r},,,,,\n"
    again = f"k,{flops!r},0,1980,3201,{time_s * spread!r},{power_w * time_s * spread!r},,,,,\n"
    assert read_table(_csv(tmp_path, HEADER + row))[0].time_s == time_s
    if spread * time_s > 60:
        return
    if spread <= REPEAT_SPREAD * (1 - 1e-9):
        assert len(read_table(_csv(tmp_path, HEADER + row + again))) == 2
    elif spread > REPEAT_SPREAD * (1 + 1e-9):
        with pytest.raises(SpecError, match="conflicting"):
            read_table(_csv(tmp_path, HEADER + row + again))
