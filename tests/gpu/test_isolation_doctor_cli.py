"""Outlier explanations, the CUDA driver layer without a GPU, doctor, and the GPU subcommands."""

from __future__ import annotations

import re

import pytest

from rlclock.cli import main
from rlclock.errors import GpuUnavailableError
from rlclock.gpu import nvml
from rlclock.gpu.isolation import IsolationCheck, explain, summarize
from rlclock.workload.trace import Kernel


def k(category: str, read_bytes: float) -> Kernel:
    return Kernel(
        name="k",
        op="k",
        category=category,
        phase="forward",
        flops=1.0,
        dram_read_bytes=read_bytes,
        dram_write_bytes=1.0,
    )


def test_explain_outliers():
    assert explain(k("gemm", 1e8), 100e-6, 105e-6, 1, 60e6) == ""
    assert "exits early" in explain(k("attention", 1e8), 400e-6, 2e-6, 0, 60e6)
    assert "L2" in explain(k("reduction", 34e6), 26e-6, 22e-6, 1, 60e6)
    assert "power cap" in explain(k("gemm", 1e8), 300e-6, 350e-6, 1, 60e6)
    assert "short kernel" in explain(k("elementwise", 1e3), 3e-6, 5e-6, 1, 60e6)
    assert explain(k("attention", 1e8), 430e-6, 384e-6, 1, 60e6, kernels_back=1).startswith("needed the memset")
    assert "unexplained" in explain(k("elementwise", 1e9), 100e-6, 130e-6, 0, 60e6)


def test_summarize():
    checks = [
        IsolationCheck(0, "a", "gemm", 100e-6, 110e-6, 1.1, 1, 6),
        IsolationCheck(1, "b", "norm", 50e-6, 40e-6, 0.8, 0, 50, 1, "note"),
    ]
    s = summarize(checks)
    assert s["ratio_of_sums"] == pytest.approx(150 / 150) and s["outliers"] == 1
    assert s["widened_memset_search"] == 1 and s["min_ratio"] == 0.8


def test_cuda_driver_missing_is_a_clean_error(monkeypatch):
    import ctypes

    from rlclock.gpu import cuda_graph

    real = ctypes.CDLL

    def no_libcuda(name, *a, **kw):
        if name == "libcuda.so.1":
            raise OSError("not found")
        return real(name, *a, **kw)

    monkeypatch.setattr(ctypes, "CDLL", no_libcuda)
    cuda_graph.driver.cache_clear()
    try:
        with pytest.raises(GpuUnavailableError, match="libcuda"):
            cuda_graph.driver()
    finally:
        cuda_graph.driver.cache_clear()


def test_demangle():
    from rlclock.gpu.cuda_graph import demangle

    assert demangle("_ZN2at6native13reduce_kernelEv") == "at::native::reduce_kernel()"
    assert demangle("nvjet_sm90_tst_256x128") == "nvjet_sm90_tst_256x128"
    assert demangle("_Znot_valid") == "_Znot_valid"


def test_doctor_without_a_gpu_says_so(monkeypatch, capsys):
    monkeypatch.setenv(nvml.MODULE_ENV, "no_such_nvml_bindings")
    nvml.use_module(None)
    try:
        assert main(["doctor", "--period", "0"]) == 0
    finally:
        nvml.use_module(None)
    out = capsys.readouterr().out
    assert "no NVIDIA GPU/NVML" in out and "[yes] simulate" in out and "[no ] lock clocks" in out


def test_doctor_with_the_fake_gpu(fake_nvml, capsys):
    assert main(["doctor", "--period", "0.6"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200 (preset h200-sxm)" in out and "preset_clock_table" in out and "matches" in out
    # The fake counter steps every 0.1 s of wall time; a loaded machine may miss a step or two.
    period = re.search(r"energy_counter_period_s\s+([0-9.]+)", out)
    assert period is not None and 0.05 <= float(period.group(1)) <= 0.25, out
    assert "345–1980 MHz (110 values, step 15)" in out
    assert "power_limit_range_w" in out and "200–700" in out and "default_power_limit_w" in out
    assert main(["doctor", "--period", "0", "--json"]) == 0
    assert '"capabilities"' in capsys.readouterr().out


def test_doctor_reports_the_power_limit_and_who_may_change_it(fake_nvml, capsys, monkeypatch):
    import os

    fake_nvml.set_device(power_limit_w=650.0)
    assert main(["doctor", "--period", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    facts = {
        line.split()[0]: line.split(None, 1)[1]
        for line in lines
        if line.startswith("  power_limit") or line.startswith("  default_power")
    }
    assert facts == {"power_limit_w": "650", "default_power_limit_w": "700", "power_limit_range_w": "200–700"}
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["doctor", "--period", "0"]) == 0
    assert "[no ] set a whole-job power limit (--control-clocks; read back after the change) — needs root" in (
        capsys.readouterr().out
    )
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert main(["doctor", "--period", "0"]) == 0
    assert "[yes] set a whole-job power limit" in capsys.readouterr().out
    fake_nvml.set_device(power_limit_supported=False)  # unsupported reads are lines, not a crash
    assert main(["doctor", "--period", "0"]) == 0
    out = capsys.readouterr().out
    assert out.count("not supported by GPU 0") == 3 and "[yes] lock clocks" in out
    assert "[no ] set a whole-job power limit (--control-clocks; read back after the change) — GPU(s) 0 report" in out
    assert fake_nvml.calls() == []  # doctor only reads


def test_reset_clocks_command(fake_nvml, capsys):
    fake_nvml.set_device(locked_core=[900, 900])
    assert main(["reset-clocks", "--dry-run"]) == 0
    assert "would reset" in capsys.readouterr().out and fake_nvml.device()["locked_core"] == [900, 900]
    fake_nvml.set_device(power_limit_w=650.0)
    assert main(["reset-clocks", "--device", "0"]) == 0
    assert fake_nvml.device()["locked_core"] is None and fake_nvml.device()["power_limit_w"] == 700
    assert "power limit 650 W -> 700 W (default)" in capsys.readouterr().out
    fake_nvml.set_device(locked_core=[900, 900])
    fake_nvml.update(root=False)
    assert main(["reset-clocks"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "root" in err


def test_profile_and_measure_need_a_gpu(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["profile", "--hidden", "64", "--heads", "4", "--out", str(tmp_path / "t.json")]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err
    monkeypatch.setenv(nvml.MODULE_ENV, "no_such_nvml_bindings")
    nvml.use_module(None)
    try:
        assert main(["measure", "data/gpt3xl-h200-layer.trace.json", "--out", str(tmp_path / "m.json")]) == 2
    finally:
        nvml.use_module(None)
    assert "NVML" in capsys.readouterr().err


def test_profile_layer_shape_from_an_env_spec():
    import argparse

    from rlclock.commands.profile import layer_config

    cfg = layer_config(argparse.Namespace(env="llama-1b-h200"))
    assert (cfg.style, cfg.kv_heads, cfg.layers, cfg.head) == ("llama", 8, 1, False)
    from rlclock.errors import SpecError

    with pytest.raises(SpecError, match="no transformer workload"):
        layer_config(argparse.Namespace(env="gpt3xl-rtx3080ti"))


def test_doctor_builds_a_spec_for_a_gpu_without_a_preset(l40s, capsys, tmp_path):
    from rlclock.dvfs.spec import get_spec
    from rlclock.gpu.describe import spec_for_device

    out_file = tmp_path / "l40s.yaml"
    assert main(["doctor", "--period", "0", "--spec-out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA L40S (preset none)" in out
    assert "derived_spec" in out and "nvidia-l40s: 142 SMs" in out and "384-bit memory" in out
    assert "generic (the rtx3080ti preset's fit, scaled to this GPU): calibrate with rlclock calibrate" in out
    assert f"wrote {out_file}" in out
    spec = get_spec(str(out_file))
    assert (spec.sm_count, spec.memory_locks, spec.power_limit_w, spec.generic) == (142, "none", 350.0, True)
    assert spec_for_device(0) == (spec, "derived")
    assert spec_for_device(0, "h200-sxm")[1] == "given"
    assert l40s.calls() == []  # reads only


def test_a_gpu_that_cannot_be_described_is_one_line(l40s, capsys):
    from rlclock.errors import SpecError
    from rlclock.gpu.describe import spec_for_device

    l40s.set_device(cuda_cores=0)  # an old driver: no core count, and no PyTorch CUDA to ask
    with pytest.raises(SpecError) as e:
        spec_for_device(0)
    assert "GPU 0 (NVIDIA L40S) has no preset" in str(e.value) and "--gpu my-gpu.yaml" in str(e.value)
    assert main(["doctor", "--period", "0"]) == 0  # doctor still reports, with the reason
    assert "derived_spec" in capsys.readouterr().out
