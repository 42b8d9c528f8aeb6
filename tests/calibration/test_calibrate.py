"""Calibrating a GPU from a clock sweep: the fit recovers GPUs with hidden parameters, sweep tables are read
(or refused in one line), and the written spec is a GPU spec every command takes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlclock.calibration.fit import BOUNDS
from rlclock.calibration.sweep import (
    IDLE,
    agreement,
    check_rows,
    fit_sweep,
    simulated_sweep,
    suite,
    sweep_configs,
    sweep_residuals,
)
from rlclock.calibration.table import read_table, write_table
from rlclock.cli import main
from rlclock.dvfs.spec import get_spec, load_spec_file
from rlclock.dvfs.variants import hidden_gpu
from rlclock.errors import SpecError
from rlclock.workload.trace import KernelTrace

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "data" / "corpus-h200"


@pytest.fixture(scope="module")
def corpus_kernels() -> list:
    """Distinct kernels of three real steps (H200-profiled shapes): outside the suite."""
    out = []
    for name in ("llama-1b-gqa", "bert-base", "t5-base"):
        t = KernelTrace.load(CORPUS / name / "step.trace.json.gz")
        out += t.distinct_with_work()
    return out


def test_the_sweep_covers_ten_core_clocks_per_lockable_memory_clock():
    h200, rtx = get_spec("h200-sxm"), get_spec("rtx3080ti")
    assert len(sweep_configs(h200)) == 10 and {c.mem_mhz for c in sweep_configs(h200)} == {3201}
    assert len(sweep_configs(rtx)) == 10 * len(rtx.mem_clocks_mhz)
    assert {k.name for k in suite(h200)} >= {
        "fma_bound",
        "gemm_large",
        "gemm_small",
        "dram_stream",
        "simt_stream",
        "l2_stream",
        "smem_bound",
    }


def test_the_true_gpu_explains_its_own_sweep_to_the_noise():
    true = hidden_gpu(get_spec("h200-sxm"), 7)
    exact = simulated_sweep(true, noise_std=0.0)
    assert np.abs(sweep_residuals(true, exact)).max() < 1e-9
    assert np.abs(sweep_residuals(get_spec("h200-sxm"), exact)).max() > 0.05  # the preset does not


@pytest.mark.parametrize("preset, seed", [("h200-sxm", 1), ("h200-sxm", 2), ("rtx3080ti", 1), ("a100-sxm4-40gb", 0)])
def test_the_fit_recovers_a_hidden_gpu_on_kernels_outside_the_suite(preset, seed, corpus_kernels):
    """benchmarks/calibrate_hidden.py runs this over 20 GPUs per preset and prints every miss; here: time within 5 %
    and energy within 8 % at every clock pair, and the fitted model's energy-optimal core clocks cost under 1 % more
    than the true ones."""
    base = get_spec(preset)
    true = hidden_gpu(base, seed)
    fitted, figures = fit_sweep(base, simulated_sweep(true, seed=seed))
    assert figures["time_max_after"] < figures["time_max_before"]
    got, was = agreement(fitted, true, corpus_kernels), agreement(base, true, corpus_kernels)
    assert got.time_err.max() <= 0.05 and got.energy_err.max() <= 0.08
    assert got.optimum_regret.max() <= 0.01
    assert was.energy_err.max() > 2 * got.energy_err.max()  # the fit did the work, not the preset


def test_the_sweep_fit_reaches_a_gpu_beyond_the_preset_fits_bounds(corpus_kernels):
    """The RTX 3080 Ti preset's latency in core cycles sits at the preset fits' floor; a GPU of that kind drawn
    below it is still fitted (the sweep's own bounds), within 5 % in time on every corpus kernel."""
    true = hidden_gpu(get_spec("rtx3080ti"), 0)
    assert true.model.lat_core_cycles < BOUNDS["lat_core_cycles"][0]
    fitted, _ = fit_sweep(get_spec("rtx3080ti"), simulated_sweep(true, seed=0))
    assert fitted.model.lat_core_cycles < BOUNDS["lat_core_cycles"][0]
    assert agreement(fitted, true, corpus_kernels).time_err.max() <= 0.05


def test_a_tied_optimum_counts_clocks_whose_energy_is_within_the_tie(corpus_kernels):
    """The strict optimum is one clock; the tied one any clock within ``tie`` of the least energy: never further,
    the same with no tie (where the argmin is unique), and at least as near as the tie grows."""
    base = get_spec("h200-sxm")
    true = hidden_gpu(base, 4)
    kernels = corpus_kernels[:400]
    strict, loose = agreement(base, true, kernels, tie=0.0), agreement(base, true, kernels, tie=0.01)
    assert np.array_equal(strict.optimum_steps_tied, strict.optimum_steps)
    assert np.all(loose.optimum_steps_tied <= strict.optimum_steps)
    assert np.any(loose.optimum_steps_tied < strict.optimum_steps)  # the preset picks within 1 % but not the argmin
    assert not np.any(agreement(true, true, kernels).optimum_steps_tied)


def test_a_table_round_trips_and_fits_as_the_rows_do(tmp_path):
    true = hidden_gpu(get_spec("h200-sxm"), 3)
    rows = simulated_sweep(true, seed=3)
    back = read_table(write_table(rows, tmp_path / "sweep.csv"))
    assert back == rows
    assert any(r.kernel == IDLE for r in back) and any(r.gemm_mnk for r in back) and any(r.blocks for r in back)


def _csv(tmp_path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


HEADER = "kernel,flops,bytes,core_mhz,mem_mhz,time_s,energy_j\n"


@pytest.mark.parametrize(
    "text, match",
    [
        ("kernel,flops,core_mhz,mem_mhz,time_s,energy_j\nk,1,1980,3201,1e-3,1\n", r"missing column.*bytes"),
        ("kernel,flops,bytes,core_mhz,time_s,energy_j\nk,1,1,1980,1e-3,1\n", r"missing column.*mem_mhz"),
        (HEADER + "k,1,1,1980,3201,1e-3,1,9\n", r"line 2: more fields than the header"),
        (HEADER.replace("energy_j", "energy_j,colour") + "k,1,1,1980,3201,1e-3,1,red\n", r"unknown column.*colour"),
        (HEADER + "k,lots,1,1980,3201,1e-3,1\n", r"line 2: flops 'lots' is not a number"),
        (HEADER + "k,1,1,1980,3201,0,1\n", r"line 2: time_s must be a finite number > 0"),
        (HEADER + "k,1,1,1980,3201,1e-3,-2\n", r"energy_j must be a finite number > 0"),
        (HEADER + "k,1,-5,1980,3201,1e-3,1\n", r"bytes must be a finite number >= 0"),
        (HEADER + "k,1,1,1980.5,3201,1e-3,1\n", r"core_mhz must be a whole number"),
        (HEADER + ",1,1,1980,3201,1e-3,1\n", r"column 'kernel' is empty"),
        (HEADER + "k,1,1,1980,3201,nan,1\n", r"time_s must be a finite number"),
        (HEADER, r"a header but no rows"),
        ("", r"missing column"),
        (HEADER.replace("energy_j", "energy_j,category") + "k,1,1,1980,3201,1e-3,1,matmul\n", r"category 'matmul'"),
    ],
)
def test_a_malformed_table_gets_one_line(tmp_path, text, match):
    with pytest.raises(SpecError, match=match) as e:
        read_table(_csv(tmp_path, text))
    assert "\n" not in str(e.value)


def test_unreadable_or_missing_tables_get_one_line(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        read_table(tmp_path / "nope.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(SpecError, match="cannot be read as text"):
        read_table(tmp_path / "bin.csv")


def test_a_sweep_that_cannot_calibrate_is_refused(tmp_path):
    h200 = get_spec("h200-sxm")
    rows = simulated_sweep(h200, seed=0)
    with pytest.raises(SpecError, match="one core clock"):
        check_rows([r for r in rows if r.core_mhz == rows[0].core_mhz], h200, "sweep")
    with pytest.raises(SpecError, match=r"not a clock pair of NVIDIA H200"):
        check_rows([*rows, rows[0].__class__(**{**rows[0].__dict__, "core_mhz": 1234})], h200, "sweep")
    with pytest.raises(SpecError, match="no kernel rows"):
        check_rows([r for r in rows if r.kernel == IDLE], h200, "sweep")


def test_rlclock_calibrate_writes_a_spec_that_env_specs_and_commands_take(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (
        main(
            [
                "calibrate",
                "--simulated",
                "2",
                "--gpu",
                "h200-sxm",
                "--out",
                "mine.yaml",
                "--table-out",
                "sweep.csv",
                "--key",
                "my-h200",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "fitted     : time error p95" in out and "wrote mine.yaml" in out
    spec = load_spec_file(tmp_path / "mine.yaml")
    assert spec.key == "my-h200" and not spec.generic and spec.memory_locks == "deferred"
    assert spec.clocks == get_spec("h200-sxm").clocks and get_spec(str(tmp_path / "mine.yaml")) == spec
    # the same fit from the table it wrote
    assert main(["calibrate", "--table", "sweep.csv", "--gpu", "h200-sxm", "--out", "again.yaml"]) == 0
    again = load_spec_file(tmp_path / "again.yaml")
    assert again.model.as_dict() == pytest.approx(spec.model.as_dict(), rel=1e-4)
    env = tmp_path / "env.yaml"
    env.write_text(
        "name: mine\ngpu_file: mine.yaml\nworkload: {generator: transformer, style: gpt, hidden: 512, "
        "heads: 8, seq: 256, batch: 2, layers: 2, vocab: 1024}\n"
    )
    assert main(["simulate", str(env)]) == 0
    assert "my-h200" in capsys.readouterr().out
    (tmp_path / "envs").mkdir()
    other = tmp_path / "envs" / "env2.yaml"  # gpu: PATH.yaml resolves against the env spec's folder, as gpu_file:
    other.write_text(env.read_text().replace("gpu_file: mine.yaml", "gpu: ../mine.yaml"))
    monkeypatch.chdir(tmp_path / "envs")
    assert main(["simulate", str(other)]) == 0
    assert "my-h200" in capsys.readouterr().out


def test_the_suite_template_lists_what_to_measure(tmp_path, capsys):
    out = tmp_path / "template.csv"
    assert main(["calibrate", "--suite", "--gpu", "rtx3080ti", "--table-out", str(out)]) == 0
    assert "clock pairs to measure" in capsys.readouterr().out
    with pytest.raises(SpecError, match="time_s must be a finite number > 0"):  # not yet measured
        read_table(out)


def test_generic_presets_say_so_and_how_to_calibrate(tmp_path, capsys):
    assert get_spec("h100-sxm").generic and get_spec("a100-sxm4-40gb").generic
    assert not get_spec("h200-sxm").generic and not get_spec("rtx3080ti").generic
    env = tmp_path / "env.yaml"
    env.write_text(
        "name: a100\ngpu: a100-sxm4-40gb\nworkload: {generator: transformer, style: gpt, hidden: 512, "
        "heads: 8, seq: 256, batch: 2, layers: 2, vocab: 1024}\n"
    )
    assert main(["simulate", str(env)]) == 0
    err = capsys.readouterr().err
    assert "a100-sxm4-40gb preset is generic" in err and "rlclock calibrate --table" in err
    assert main(["simulate", "gpt3xl-h200"]) == 0
    assert "generic" not in capsys.readouterr().err


def test_a_policy_trained_for_a_calibrated_gpu_carries_its_spec(tmp_path):
    """A checkpoint for a GPU that is not a shipped preset (a calibrated spec file) holds the spec itself, so it
    loads anywhere; a preset's checkpoint only names it."""
    from dataclasses import replace

    from rlclock.observation.layout import obs_size
    from rlclock.observation.lookahead import n_slots
    from rlclock.policy import ClockPolicy, PolicyWeights, policy_meta, save_checkpoint

    mine = replace(hidden_gpu(get_spec("h200-sxm"), 5), key="my-h200", fitted_to="a sweep")
    configs = list(mine.config_grid(core_step_mhz=315, core_min_mhz=345))
    slots, n = n_slots(configs), obs_size(4, n_slots(configs))
    weights = PolicyWeights(((np.zeros((8, n)), np.zeros(8)),), (np.zeros((slots + 1, 8)), np.zeros(slots + 1)), "tanh")
    save_checkpoint(tmp_path / "mine", weights, policy_meta(mine, configs, 4, n, 0.006, 0.01, {}))
    assert ClockPolicy.load(tmp_path / "mine").gpu == mine
    preset = get_spec("h200-sxm")
    assert "gpu_spec" not in policy_meta(preset, configs, 4, n, 0.006, 0.01, {})


def test_check_and_drop_on_a_table(tmp_path, capsys):
    """``--check`` prints the preset against every reading of a table (the shipped H200 suite readings, taken at
    the clocks in effect) without fitting; ``--drop`` leaves kernels out of a fit and names the ones it lacks."""
    from rlclock import resources

    table = resources.measurement("h200-suite-observe.csv")
    assert main(["calibrate", "--table", str(table), "--check"]) == 0
    out = capsys.readouterr().out
    assert "gemm_large" in out and "1485@3201" in out and "preset err %" in out and "idle" in out
    assert main(["calibrate", "--table", str(table)]) != 0  # one core clock per kernel: no fit
    assert "one core clock" in capsys.readouterr().err
    assert main(["calibrate", "--simulated", "1", "--drop", "no_such_kernel"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_kernel" in err[0] and "Fix:" in err[0]


def test_a_table_may_give_time_in_ms_and_power_instead_of_energy(tmp_path):
    from rlclock.calibration.table import read_table

    p = tmp_path / "public.csv"
    p.write_text(
        "kernel,flops,bytes,core_mhz,mem_mhz,time_ms,power_w\nk,1e9,1e6,1980,3201,2.5,400\nidle,0,0,1980,3201,20,120\n"
    )
    rows = read_table(p)
    assert rows[0].time_s == pytest.approx(2.5e-3) and rows[0].energy_j == pytest.approx(1.0)
    assert rows[1].is_idle and rows[1].energy_j / rows[1].time_s == pytest.approx(120)
    p.write_text("kernel,flops,bytes,core_mhz,mem_mhz,time_ms,power_w\nk,1e9,1e6,1980,3201,2.5,0\n")
    with pytest.raises(SpecError, match=r"line 2: power_w must be a finite number > 0"):
        read_table(p)


def test_the_on_chip_loop_is_bound_by_its_shared_memory_traffic():
    """The suite's on-chip loop counts its shared-memory bytes: its time is them over the SMs' shared-memory rate on
    the core clock (not its few FLOPs), its power the switching of those accesses; a kernel that counts none — every
    kernel of a training step — is predicted as without the term."""
    from dataclasses import replace

    from rlclock.dvfs import model
    from rlclock.schedule import ClockConfig

    h200 = get_spec("h200-sxm")
    loop = next(k for k in suite(h200) if k.name == "smem_bound")
    bare = replace(loop, onchip_bytes=None)
    configs = [ClockConfig(1980, 3201), ClockConfig(990, 3201)]
    got = model.predict(model.kernel_arrays([loop, bare], h200), h200, configs)
    p = h200.model
    t_onchip = loop.onchip_bytes / (p.smem_bytes_per_cycle * h200.sm_count * 1980e6)
    assert got.time_s[0, 0] == pytest.approx(t_onchip + p.launch_s, rel=1e-3)
    assert got.time_s[0, 1] / got.time_s[0, 0] == pytest.approx(2.0, rel=0.01)  # core clock domain
    assert got.time_s[1, 0] < 0.2 * got.time_s[0, 0]  # its SIMT work alone is an eighth of that
    off = h200.with_model(smem_bytes_per_cycle=0.0, e_smem_j_per_byte=0.0)
    same = model.predict(model.kernel_arrays(corpus_kernels_of_one_step(), h200), h200, configs)
    same_off = model.predict(model.kernel_arrays(corpus_kernels_of_one_step(), off), off, configs)
    assert np.array_equal(same.time_s, same_off.time_s) and np.array_equal(same.energy_j, same_off.energy_j)


def corpus_kernels_of_one_step() -> list:
    return KernelTrace.load(CORPUS / "bert-base" / "step.trace.json.gz").distinct_with_work()


def test_a_table_carries_on_chip_bytes(tmp_path):
    rows = simulated_sweep(get_spec("h200-sxm"), per_memory=2)
    back = read_table(write_table(rows, tmp_path / "s.csv"))
    loop = [r for r in back if r.kernel == "smem_bound"]
    assert loop and all(r.onchip_bytes == pytest.approx(2.0 * r.flops) for r in loop)
    assert all(r.onchip_bytes == 0 for r in back if r.kernel != "smem_bound")
