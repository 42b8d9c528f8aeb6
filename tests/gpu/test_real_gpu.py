"""On a real NVIDIA GPU (skipped elsewhere): NVML readings, capture + isolation, energy windows, observe mode.

Nothing here sets a clock: clock control runs in dry-run mode, and every set/reset function is replaced by
one that fails the test.
"""

from __future__ import annotations

import pytest

from rlclock.workload.transformer import TransformerConfig

pytestmark = pytest.mark.gpu

SMALL = TransformerConfig(hidden=512, heads=8, seq=512, batch=2, layers=1, head=False, dtype="bf16")


@pytest.fixture(scope="module")
def captured():
    from rlclock.gpu.profile import capture_step

    step, _ = capture_step(SMALL)
    return step


@pytest.fixture
def no_clock_setting(monkeypatch):
    from rlclock.gpu.nvml import NvmlDevice

    def forbidden(*args, **kwargs):
        raise AssertionError("a clock- or power-setting NVML function was called on a real GPU")

    for name in (
        "set_locked_core_clocks",
        "set_locked_mem_clocks",
        "reset_locked_core_clocks",
        "reset_locked_mem_clocks",
        "set_power_limit_w",
    ):
        monkeypatch.setattr(NvmlDevice, name, forbidden)


def test_nvml_readings_have_sane_units():
    import time

    from rlclock.gpu.nvml import NvmlDevice

    dev = NvmlDevice(0)
    e0 = dev.total_energy_j()
    time.sleep(0.35)
    e1 = dev.total_energy_j()
    assert 0 < e1 - e0 < 0.35 * 2000  # joules over 0.35 s at < 2 kW
    assert 10 < dev.power_w() < 2000
    s = dev.clocks()
    assert 100 < s.sm_clock_mhz < 5000 and 100 < s.mem_clock_mhz < 30000
    table = dev.supported_clocks()
    assert table and all(len(v) > 0 for v in table.values())


def test_clock_control_observe_mode_sets_nothing(no_clock_setting):
    from rlclock.gpu.clocks import ClockControl

    with ClockControl(0) as clocks:
        assert clocks.dry_run
        mem = max(clocks.supported)
        core = sorted(clocks.supported[mem])[len(clocks.supported[mem]) // 2]
        rec = clocks.apply(f"{core}@{mem}")
        assert not rec.applied and rec.calls and rec.sm_clock_mhz > 0
        clocks.restore()


def test_graph_nodes_and_isolation(captured):
    from rlclock.gpu.runners import isolated_runner

    view = captured.view
    kernels = view.positions("kernel")
    assert len(kernels) >= 10 and all(view.nodes[p].name for p in kernels)
    assert all(view.nodes[p].grid for p in kernels)
    # the longest GEMM alone must do real work: far more than a couple of microseconds
    gemms = [p for p in kernels if any(k in view.nodes[p].name.lower() for k in ("gemm", "nvjet", "cutlass"))]
    assert gemms
    runner, info = isolated_runner(view, gemms[0], target_batch_s=0.001)
    try:
        t = runner.time_per_unit_s(min_s=0.01)
    finally:
        runner.close()
    assert t > 3e-6 and info.copies >= 1
    captured.replay()  # the full step still runs after cloning and pruning


def test_profile_small_layer_maps_gemms():
    from rlclock.gpu.profile import profile_layer

    res = profile_layer(SMALL, replays=3)
    tr = res.trace
    assert len(tr) == len(res.captured.entries)
    assert res.mapping.mapped >= 8  # at least the eight GEMMs' worth of analytic kernels
    assert all(k.measured and k.measured[0].source == "in-sequence" for k in tr)
    ops = {k.op for k in tr}
    assert {"qkv.fwd", "fc.fwd"} <= ops


def test_energy_window_of_an_isolated_kernel(captured):
    from rlclock.gpu.meter import EnergySampler, MeasureSettings, measure
    from rlclock.gpu.nvml import NvmlDevice
    from rlclock.gpu.runners import isolated_runner

    view = captured.view
    pos = max(view.positions("kernel"), key=lambda p: (view.nodes[p].grid or (0,))[0])
    runner, _ = isolated_runner(view, pos)
    try:
        with EnergySampler(NvmlDevice(0)) as sampler:
            s = measure(runner, sampler, MeasureSettings(window_s=0.25, warmup_s=0.1, repeats=2))
    finally:
        runner.close()
    assert s.windows == 2 and s.time_s > 0 and s.energy_j > 0
    assert 30 < s.power_w < 2000
    assert s.busy_fraction > 0.5


def test_power_limit_observe_mode_reads_the_range_and_sets_nothing(no_clock_setting):
    from rlclock.errors import ClockError
    from rlclock.gpu.clocks import ClockControl
    from rlclock.gpu.nvml import NvmlDevice

    dev = NvmlDevice(0)
    before = dev.power_limit_w()
    lo, hi = dev.power_limit_range_w()
    assert 0 < lo < hi and lo <= before <= hi and 0 < dev.default_power_limit_w() <= hi
    with ClockControl(0) as clocks:
        rec = clocks.set_power_limit(round((lo + hi) / 2))
        assert rec.dry_run and not rec.applied and rec.calls and rec.found_w == pytest.approx(before)
        with pytest.raises(ClockError, match="outside the range"):
            clocks.set_power_limit(hi + 100)
    assert dev.power_limit_w() == before


def test_schedule_replay_in_observe_mode(captured, no_clock_setting):
    from rlclock.gpu.clocks import ClockControl
    from rlclock.gpu.meter import MeasureSettings
    from rlclock.gpu.nvml import NvmlDevice
    from rlclock.gpu.replay import replay_schedule
    from rlclock.schedule import AUTO, ClockConfig, ClockSchedule

    n = len(captured.entries)
    with ClockControl(0) as clocks:
        low = ClockConfig(sorted(clocks.supported[max(clocks.supported)])[10], max(clocks.supported))
        plain = ClockSchedule.from_configs([AUTO if i % 3 else low for i in range(n)], name="alternating")
        lo, hi = NvmlDevice(0).power_limit_range_w()
        sched = ClockSchedule(plain.configs, plain.index, plain.name, power_limit_w=round((lo + hi) / 2))
        rep = replay_schedule(
            captured, sched, clocks, NvmlDevice(0), MeasureSettings(window_s=0.2, warmup_s=0.05, repeats=2)
        )
        assert rep.dry_run and rep.segments > 2 and rep.switches_per_step == rep.segments - 1
        assert rep.stats.time_s > 0 and rep.stats.energy_j > 0
        assert not any(r.applied for r in clocks.history)
        assert [r.requested_w for r in clocks.power_limit_history][:1] == [sched.power_limit_w]
        assert not any(r.applied for r in clocks.power_limit_history)
    captured.replay()


def test_live_backend_and_cli_on_a_profiled_trace(tmp_path, no_clock_setting, capsys):
    from rlclock.cli import main
    from rlclock.config import parse_env_spec
    from rlclock.dvfs.spec import get_spec
    from rlclock.gpu.nvml import NvmlDevice
    from rlclock.schedule import AUTO, ClockSchedule

    name = NvmlDevice(0).name
    try:
        preset = get_spec(name).key
    except Exception:
        pytest.skip(f"no preset for {name}")
    trace_path = tmp_path / "small.trace.json"
    assert (
        main(
            [
                "profile",
                "--hidden",
                "512",
                "--heads",
                "8",
                "--seq",
                "512",
                "--batch",
                "2",
                "--replays",
                "3",
                "--out",
                str(trace_path),
            ]
        )
        == 0
    )
    env = parse_env_spec(
        {
            "gpu": preset,
            "workload": {"trace": str(trace_path)},
            "backend": {
                "kind": "nvml",
                "window_s": 0.2,
                "warmup_s": 0.05,
                "repeats": 2,
                "cache": str(tmp_path / "cache.json"),
            },
            "actions": {"configs": ["auto"]},
        }
    )
    backend = env.build_backend()
    try:
        t, e = backend.tables
        assert t.shape == (len(backend.trace), 1) and (t > 0).all() and (e > 0).all()
        assert backend.measured_now == len(backend.trace.unique_index[0])
    finally:
        backend.close()
    table = tmp_path / "m.json"
    assert (
        main(
            [
                "measure",
                str(trace_path),
                "--out",
                str(table),
                "--kernels",
                "0,1",
                "--window",
                "0.2",
                "--warmup",
                "0.05",
                "--repeats",
                "2",
                "--write-trace",
                str(tmp_path / "measured.json"),
            ]
        )
        == 0
    )
    assert "table written" in capsys.readouterr().out
    sched = tmp_path / "s.json"
    ClockSchedule.constant(AUTO, len(backend.trace), name="auto").save(sched)
    assert (
        main(
            [
                "measure",
                str(trace_path),
                "--schedule",
                str(sched),
                "--window",
                "0.2",
                "--warmup",
                "0.05",
                "--repeats",
                "2",
            ]
        )
        == 0
    )
    assert "segmented step" in capsys.readouterr().out


def test_calibration_suite_kernels_run_the_work_they_declare(no_clock_setting):
    """Each suite kernel runs on CUDA: its time per copy (from the CUDA graph of copies) is physical — a DRAM
    stream below the GPU's peak bandwidth, a GEMM below dense bf16 peak, every kernel above a microsecond — and
    one energy window of it reads a power above idle. Nothing is set."""
    from rlclock.calibration.sweep import suite
    from rlclock.dvfs.spec import get_spec
    from rlclock.errors import SpecError
    from rlclock.gpu.meter import EnergySampler, MeasureSettings, measure
    from rlclock.gpu.microbench import realise
    from rlclock.gpu.nvml import NvmlDevice

    dev = NvmlDevice(0)
    try:
        spec = get_spec(dev.name)
    except SpecError:
        spec = get_spec("h200-sxm")
    peak_bw = spec.bandwidth_bytes_per_s(max(spec.mem_clocks_mhz))
    times = {}
    with EnergySampler(dev) as sampler:
        for k in suite(spec):
            runner, done = realise(k, spec.threads_per_sm)
            try:
                a = runner.mark()
                runner.launch()
                b = runner.mark()
                b.synchronize()
                t = runner.elapsed_s(a, b) / runner.units_per_launch
                times[k.name] = t
                assert t > 1e-6, k.name
                moved = done.dram_read_bytes + done.dram_write_bytes
                if k.name in ("dram_stream", "reduction"):
                    assert 0.2 * peak_bw < moved / t < 1.05 * peak_bw, (k.name, moved / t / 1e9)
                if k.name.startswith("gemm"):
                    assert 50e12 < done.flops / t < 1.1e15, (k.name, done.flops / t / 1e12)
                if k.name == "simt_stream":  # its multiply-adds within the FP32 peak, its bytes within DRAM's
                    fp32_peak = spec.simt_flops_per_cycle_per_sm * spec.sm_count * spec.abs_max_core_mhz * 1e6
                    assert done.flops / t < 1.05 * fp32_peak and moved / t < 1.05 * peak_bw, (done.flops / t, moved / t)
                if k.name == "smem_bound":
                    assert done.onchip_bytes == pytest.approx(2.0 * done.flops)
                if k.name == "gemm_large":
                    stats = measure(runner, sampler, MeasureSettings(window_s=0.3, warmup_s=0.1, repeats=1))
                    assert stats.power_w > 150 and stats.busy_fraction > 0.8, stats
            finally:
                runner.close()
    # the under-occupied stream is slower per byte than the full-GPU one: latency, not bandwidth, bounds it
    assert times["latency_stream"] / 2**29 > times["dram_stream"] / 2**31


def test_the_spec_built_from_the_gpu_agrees_with_its_preset(no_clock_setting, capsys):
    """What this GPU reports (NVML, CUDA) builds the spec a GPU without a preset gets; where a preset exists, the
    hardware facts must agree with it."""
    from rlclock.dvfs.derive import spec_from_facts
    from rlclock.dvfs.spec import get_spec
    from rlclock.errors import SpecError
    from rlclock.gpu.describe import device_facts

    facts = device_facts(0)
    built = spec_from_facts(facts)
    print(
        f"\n{facts}\n-> {built.key}: {built.sm_count} SMs, {built.threads_per_sm} threads/SM, "
        f"L2 {built.l2_bytes:g} B, {built.mem_bus_bits}-bit, rates {built.tensor_flops_per_cycle_per_sm} / "
        f"{built.simt_flops_per_cycle_per_sm}"
    )
    assert facts.sm_count > 0 and facts.l2_bytes > 0 and facts.threads_per_sm > 0  # CUDA's figures were read
    try:
        preset = get_spec(facts.name)
    except SpecError:
        pytest.skip(f"no preset for {facts.name} to compare with")
    assert (built.sm_count, built.threads_per_sm, dict(built.clocks), built.memory_locks) == (
        preset.sm_count,
        preset.threads_per_sm,
        dict(preset.clocks),
        preset.memory_locks,
    )
    assert built.l2_bytes == pytest.approx(preset.l2_bytes, rel=0.1)  # presets give datasheet MB, CUDA bytes
    # NVML gives the enabled width: an H200 reports 6016 bits (its 141 GB of 144), the preset the full 6144
    assert built.mem_bus_bits == pytest.approx(preset.mem_bus_bits, rel=0.03)
    assert built.power_limit_w == pytest.approx(preset.power_limit_w)
    assert built.simt_flops_per_cycle_per_sm == preset.simt_flops_per_cycle_per_sm
    for dt in ("fp16", "bf16", "tf32"):
        assert built.tensor_flops_per_cycle_per_sm[dt] == preset.tensor_flops_per_cycle_per_sm[dt]
