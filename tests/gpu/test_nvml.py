"""The NVML layer: units converted once, reasons decoded, NVML errors mapped to one-line RlclockErrors."""

from __future__ import annotations

import pytest

from rlclock.errors import ClockPermissionError, GpuUnavailableError, NvmlNotSupportedError, RlclockError
from rlclock.gpu import nvml


def test_units_are_converted_from_raw_nvml_integers(fake_nvml):
    fake_nvml.set_device(power_w=432.5, power_limit_w=700.0)
    dev = nvml.NvmlDevice(0)
    assert dev.name == "NVIDIA H200"
    assert dev.power_w() == pytest.approx(432.5)
    assert dev.power_limit_w() == pytest.approx(700.0)
    e1 = dev.total_energy_j()
    assert e1 == pytest.approx(86400.0, abs=500.0)  # joules, not millijoules
    s = dev.clocks()
    assert (s.sm_clock_mhz, s.mem_clock_mhz) == (1980, 3201)
    assert s.reasons == ("sw_power_cap",)
    assert dev.supported_mem_clocks_mhz() == (3201, 2201)
    assert dev.supported_core_clocks_mhz(2201)[:2] == (1980, 1965)
    assert len(dev.supported_clocks()[3201]) == 110


def test_reason_mask_decodes_known_and_unknown_bits():
    assert nvml.reasons_from_mask(0) == ()
    assert nvml.reasons_from_mask(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert nvml.reasons_from_mask(0x1 | 0x1000) == ("gpu_idle", "bit_0x1000")


def test_missing_library_says_no_gpu_in_one_line(fake_nvml):
    fake_nvml.update(library_missing=True)
    with pytest.raises(GpuUnavailableError) as exc:
        nvml.NvmlDevice(0)
    text = str(exc.value)
    assert "no NVIDIA GPU/NVML" in text and "\n" not in text and "Fix:" in text
    assert not nvml.available()


def test_missing_bindings_module_is_a_clean_error(monkeypatch):
    monkeypatch.setenv(nvml.MODULE_ENV, "no_such_nvml_module_xyz")
    nvml.use_module(None)
    try:
        with pytest.raises(GpuUnavailableError, match="nvidia-ml-py"):
            nvml.device_count()
    finally:
        nvml.use_module(None)


def test_permission_and_support_errors_are_mapped(fake_nvml):
    dev = nvml.NvmlDevice(0)
    fake_nvml.update(root=False)
    with pytest.raises(ClockPermissionError) as exc:
        dev.set_locked_core_clocks(1500, 1500)
    assert "root" in str(exc.value) and "\n" not in str(exc.value)
    fake_nvml.update(root=True, locked_clocks_supported=False)
    with pytest.raises(NvmlNotSupportedError, match="not supported"):
        dev.set_locked_mem_clocks(2201, 2201)


def test_bad_device_index(fake_nvml):
    with pytest.raises(GpuUnavailableError, match="does not exist"):
        nvml.NvmlDevice(3)


def test_try_read_turns_errors_into_text(fake_nvml):
    fake_nvml.update(library_missing=True)
    out = nvml.try_read(nvml.driver_version)
    assert isinstance(out, str) and out.startswith("unavailable (")


def test_non_nvml_exceptions_pass_through(fake_nvml, monkeypatch):
    dev = nvml.NvmlDevice(0)

    def boom(handle):
        raise ValueError("not an NVML error")

    monkeypatch.setattr(dev._nvml, "nvmlDeviceGetPowerUsage", boom)
    with pytest.raises(ValueError):
        dev.power_w()
    assert not issubclass(ValueError, RlclockError)


def test_power_limits_are_in_watts_and_set_in_milliwatts(fake_nvml):
    fake_nvml.set_device(power_limit_w=612.345, default_power_limit_w=700.0, power_limit_range_w=[200.0, 700.0])
    dev = nvml.NvmlDevice(0)
    assert dev.power_limit_w() == pytest.approx(612.345)
    assert dev.default_power_limit_w() == pytest.approx(700.0)
    assert dev.power_limit_range_w() == (pytest.approx(200.0), pytest.approx(700.0))
    dev.set_power_limit_w(450.5)
    assert fake_nvml.calls()[-1]["value"] == 450_500 and dev.power_limit_w() == pytest.approx(450.5)


def test_power_limit_errors_are_mapped(fake_nvml):
    dev = nvml.NvmlDevice(0)
    fake_nvml.update(root=False)
    with pytest.raises(ClockPermissionError) as exc:
        dev.set_power_limit_w(450)
    text = str(exc.value)
    assert "setting the power limit to 450 W" in text and "power limit" in text.split("Fix:")[1] and "\n" not in text
    fake_nvml.update(root=True)
    with pytest.raises(RlclockError, match="refused as invalid"):
        dev.set_power_limit_w(701)  # NVML's own check, behind rlclock's
    fake_nvml.set_device(power_limit_supported=False)
    for read in (dev.power_limit_w, dev.default_power_limit_w, dev.power_limit_range_w):
        with pytest.raises(NvmlNotSupportedError, match="not supported"):
            read()
    with pytest.raises(NvmlNotSupportedError):
        dev.set_power_limit_w(450)
    assert [c.get("error") for c in fake_nvml.calls()] == [4, 2, 3]  # refused calls are logged with their error
