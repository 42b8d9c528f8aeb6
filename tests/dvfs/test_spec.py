from __future__ import annotations

import pytest

from rlclock.dvfs.spec import get_spec, preset_keys
from rlclock.errors import ClockError, SpecError
from rlclock.schedule import AUTO, ClockConfig


def test_presets_exist():
    assert set(preset_keys()) >= {"rtx3080ti", "a100-sxm4-40gb", "h100-sxm", "h200-sxm"}


def test_rtx3080ti_clock_table(rtx):
    assert rtx.mem_clocks_mhz == (9501, 9251, 5001, 810, 405)
    assert len(rtx.core_clocks_mhz(9501)) == 127
    assert rtx.core_clocks_mhz(405) == (420, 405, 390, 375, 360, 345, 330, 315, 300, 285, 270, 255, 240, 225, 210)
    assert rtx.bandwidth_bytes_per_s(9501) == pytest.approx(912e9, rel=0.001)
    assert rtx.bandwidth_bytes_per_s(5001) == pytest.approx(480e9, rel=0.001)


def test_h200_clock_table(h200):
    assert h200.mem_clocks_mhz == (3201, 2201)
    assert all(len(h200.core_clocks_mhz(m)) == 110 for m in (3201, 2201))
    assert h200.max_core_mhz() == 1980 and h200.min_core_mhz == 345
    assert h200.default_mem_mhz == 3201


def test_validate_rejects_unsupported_pairs(rtx, h200):
    assert rtx.validate("420@405") == ClockConfig(420, 405)
    with pytest.raises(ClockError, match="not supported at memory 405"):
        rtx.validate("1500@405")  # the 405 MHz coupling rule
    with pytest.raises(ClockError, match="memory clock 1234"):
        h200.validate("1500@1234")
    with pytest.raises(ClockError, match="steps of 15"):
        h200.validate("1501@3201")
    with pytest.raises(ClockError, match="not understood"):
        ClockConfig.parse("fast")


def test_config_text_roundtrip():
    for text in ("auto", "auto@5001", "1500@auto", "1500@5001"):
        assert str(ClockConfig.parse(text)) == text
    assert ClockConfig.parse("1500") == ClockConfig(1500, None)
    assert AUTO.is_auto


def test_config_grid_is_valid_and_thinned(rtx):
    grid = rtx.config_grid(core_step_mhz=210, core_min_mhz=210)
    assert grid[0] == AUTO
    for c in grid:
        rtx.validate(c)
    cores = {c.core_mhz for c in grid if c.core_mhz is not None}
    assert cores == set(range(210, 2101, 210))
    assert ClockConfig(630, 405) not in grid and ClockConfig(420, 405) in grid


def test_unknown_gpu():
    with pytest.raises(SpecError, match="unknown GPU 'rtx9090'"):
        get_spec("rtx9090")
    assert get_spec("NVIDIA H200").key == "h200-sxm"
    assert get_spec("h200").key == "h200-sxm"


def test_boost_ceiling_below_the_clock_table_is_one_clear_line(rtx):
    from rlclock.dvfs.spec import spec_from_mapping, spec_to_mapping

    data = spec_to_mapping(rtx)
    data["model"] = {**data["model"], "boost_max_mhz": 100.0}
    with pytest.raises(SpecError, match="boost_max_mhz 100 is below the lowest core clock 210 MHz"):
        spec_from_mapping(data, "my-gpu.yaml")
    data["model"]["boost_max_mhz"] = 1800.0
    assert spec_from_mapping(data, "my-gpu.yaml").top_core_mhz == 1800.0


def test_the_h100_preset_carries_the_h200_fit():
    """One GH100 die: the H100 preset's model is the H200 preset's fit (``python -m rlclock.calibration h200-sxm
    --write`` writes both), but for the L2 residency, at most the H100's own 50 MB L2; it stays a generic preset (not
    fitted to an H100)."""
    h100, h200 = get_spec("h100-sxm"), get_spec("h200-sxm")
    a, b = h100.model.as_dict(), h200.model.as_dict()
    assert a["l2_resident_bytes"] == min(b["l2_resident_bytes"], h100.l2_bytes) == 50e6
    assert {k: v for k, v in a.items() if k != "l2_resident_bytes"} == {
        k: v for k, v in b.items() if k != "l2_resident_bytes"
    }
    assert h100.generic and not h200.generic
