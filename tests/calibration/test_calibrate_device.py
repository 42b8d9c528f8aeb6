"""``rlclock calibrate --device``: the suite swept on a GPU through ClockControl and NVML energy windows — here a
fake NVML whose "kernels" take the time and draw the power a hidden simulated GPU predicts at the locked clocks."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from rlclock import resources
from rlclock.calibration.device import device_sweep, nearest_pair, planned_configs
from rlclock.calibration.sweep import agreement, fit_sweep, predictions, suite
from rlclock.calibration.table import read_table, write_table
from rlclock.dvfs import model
from rlclock.dvfs.spec import get_spec
from rlclock.dvfs.variants import hidden_gpu
from rlclock.errors import NvmlError
from rlclock.gpu import nvml
from rlclock.gpu.clocks import ClockControl
from rlclock.gpu.meter import EnergySampler, MeasureSettings
from rlclock.schedule import AUTO, ClockConfig
from rlclock.workload.trace import KernelTrace

FAST = MeasureSettings(window_s=0.15, warmup_s=0.05, repeats=1)
BASE = get_spec("h200-sxm")


class SimulatedKernel:
    """A suite kernel on the fake GPU: each launch sleeps ``copies`` times the true GPU's time at the clocks NVML
    reports, after setting the fake board's power to the true GPU's power there; its marks read a GPU clock that
    advances by the kernels' time (as CUDA events do), so host sleep overshoot shows as idle, not as time."""

    def __init__(self, fake, true_gpu, kernel, batch_s: float = 0.004, fail_at: int | None = None) -> None:
        self.fake, self.true_gpu, self.kernel = fake, true_gpu, kernel
        self.batch_s = batch_s
        self.units_per_launch = 1
        self.fail_at = fail_at
        self.launches = 0
        self.gpu_s = 0.0
        self.closed = False
        self._at: tuple[int, int] | None = None

    def _clocks(self) -> tuple[int, int]:
        d = self.fake.device()
        core = d["locked_core"][1] if d["locked_core"] else d["default_sm_mhz"]
        mem = d["locked_mem"][1] if d["locked_mem"] else d["default_mem_mhz"]
        return core, mem

    def launch(self) -> None:
        self.launches += 1
        at = self._clocks()
        if at[0] == self.fail_at:
            raise NvmlError("NVML call nvmlDeviceGetTotalEnergyConsumption failed on GPU 0: GPU is lost.")
        if at != self._at:
            pred = model.predict(model.kernel_arrays([self.kernel], self.true_gpu), self.true_gpu, [ClockConfig(*at)])
            self.time_s = float(pred.time_s[0, 0])
            self.units_per_launch = max(1, round(self.batch_s / self.time_s))
            self.fake.set_device(0, power_w=float(pred.energy_j[0, 0] / self.time_s))
            self._at = at
        self.gpu_s += self.units_per_launch * self.time_s
        time.sleep(self.units_per_launch * self.time_s)

    def mark(self) -> float:
        return self.gpu_s

    def wait(self, mark) -> None:
        pass

    def elapsed_s(self, start: float, end: float) -> float:
        return end - start

    def close(self) -> None:
        self.closed = True


class SimulatedIdle(SimulatedKernel):
    def __init__(self, fake, true_gpu) -> None:
        super().__init__(fake, true_gpu, None)

    def launch(self) -> None:
        core, mem = self._clocks()
        self.fake.set_device(0, power_w=float(model.gap_power_w(self.true_gpu, core, mem)))
        time.sleep(0.01)

    def mark(self) -> float:  # an idle window is timed on the host, as IdleRunner does
        return time.perf_counter()


def live() -> ClockControl:
    return ClockControl(0, control_clocks=True, watchdog=False, handle_signals=False)


def _sweep(fake, control, kernels, true_gpu, per_memory=3, base=BASE, **kw):
    made = []
    fail_at = kw.pop("fail_at", None)

    def realiser(k):
        made.append(SimulatedKernel(fake, true_gpu, k, fail_at=fail_at))
        return made[-1], k

    with EnergySampler(nvml.NvmlDevice(0), 0.0005, 0.01) as sampler:
        sweep = device_sweep(
            base,
            control,
            sampler,
            realiser,
            per_memory,
            FAST,
            kernels=kernels,
            idle_runner=SimulatedIdle(fake, true_gpu),
            **kw,
        )
    return sweep, made


def test_a_locked_sweep_measures_each_pair_and_gives_the_gpu_back(fake_nvml, tmp_path):
    true_gpu = hidden_gpu(BASE, 3)
    kernels = [k for k in suite(BASE) if k.name in ("gemm_large", "dram_stream", "fma_bound")]
    saved = []
    with live() as control:
        configs = planned_configs(BASE, control, 3)
        sweep, made = _sweep(fake_nvml, control, kernels, true_gpu, save=lambda s: saved.append(len(s.readings)))
    # the fake H200 locks its memory only deferred: core clocks at the memory clock in effect
    assert [str(c) for c in configs] == ["345@3201", "1155@3201", "1980@3201"]
    assert fake_nvml.device()["locked_core"] is None and fake_nvml.device()["locked_mem"] is None
    fns = [c["fn"] for c in fake_nvml.calls()]
    assert "nvmlDeviceSetMemoryLockedClocks" not in fns and fns[-1] == "nvmlDeviceResetGpuLockedClocks"
    assert [c["value"] for c in fake_nvml.calls() if c["fn"] == "nvmlDeviceSetGpuLockedClocks"] == [
        [345, 345],
        [1155, 1155],
        [1980, 1980],
        [345, 345],
    ]
    assert all(m.closed for m in made) and saved == [3, 6, 10]
    rows = sweep.rows
    assert not sweep.observe and len(rows) == 10 and rows[-1].is_idle and rows[-1].core_mhz == 345
    assert {(r.core_mhz, r.mem_mhz) for r in rows if not r.is_idle} == {(1980, 3201), (1155, 3201), (345, 3201)}
    # what the windows read is what the hidden GPU did (time from the marks, energy from the counter)
    t, e, p = predictions(true_gpu, rows)
    work = [r for r in rows if not r.is_idle]
    assert np.median(np.abs(np.array([r.time_s for r in work]) / t - 1)) < 0.1
    assert np.median(np.abs(np.array([r.energy_j for r in work]) / e - 1)) < 0.15
    assert rows[-1].energy_j / rows[-1].time_s == pytest.approx(p[0], rel=0.15)
    # the table round-trips with what NVML read beside it
    path = write_table(
        rows, tmp_path / "sweep.csv", [{"requested": r.requested, "power_w": r.stats.power_w} for r in sweep.readings]
    )
    assert read_table(path) == rows
    assert "requested" in path.read_text().splitlines()[0]


def test_a_sweep_in_observe_mode_sets_nothing_and_places_rows_at_the_clocks_read(fake_nvml):
    true_gpu = hidden_gpu(BASE, 1)
    kernels = [k for k in suite(BASE) if k.name in ("gemm_small", "l2_stream")]
    fake_nvml.set_device(0, default_sm_mhz=1755)
    with ClockControl(0) as control:
        t0 = time.perf_counter()
        sweep, _ = _sweep(fake_nvml, control, kernels, true_gpu, rest_s=0.3)
        took_s = time.perf_counter() - t0
    assert fake_nvml.calls() == []
    # the kernels and an idle reading at the clocks in effect, then the same idle after a rest without work
    assert sweep.observe and [r.requested for r in sweep.readings] == ["auto"] * 3 + ["auto, at rest"]
    assert [r.is_idle for r in sweep.rows] == [False, False, True, True] and took_s >= 0.3
    assert {(r.row.core_mhz, r.row.mem_mhz) for r in sweep.readings} == {(1755, 3201)}
    with pytest.raises(Exception, match="one core clock"):
        fit_sweep(BASE, sweep.rows)


def test_an_nvml_error_mid_sweep_is_raised_with_the_clocks_given_back_and_the_rows_kept(fake_nvml):
    true_gpu = hidden_gpu(BASE, 2)
    kernels = [k for k in suite(BASE) if k.name == "dram_stream"]
    kept = []
    with pytest.raises(NvmlError, match="GPU is lost"), live() as control:
        _sweep(
            fake_nvml, control, kernels, true_gpu, per_memory=2, fail_at=1980, save=lambda s: kept.append(list(s.rows))
        )
    assert fake_nvml.device()["locked_core"] is None
    assert kept and all(not r.is_idle for r in kept[0])


@pytest.mark.realtime  # sleeping fake kernels metered on the wall clock: a loaded machine skews them
def test_a_fit_from_a_locked_sweep_recovers_the_hidden_gpu(fake_nvml):
    """The whole loop — clock control, the fake board's energy counter, tick-aligned windows — then the fit: it
    predicts kernels outside the suite within the calibration issue's bounds, where the base preset does not."""
    true_gpu = hidden_gpu(BASE, 5)
    with live() as control:
        sweep, _ = _sweep(fake_nvml, control, None, true_gpu, per_memory=4)
    fitted, figures = fit_sweep(BASE, sweep.rows, max_nfev=100)
    assert figures["time_median_after"] < 0.05 and figures["energy_median_after"] < 0.08
    # kernels outside the suite (the shipped GPT-3 XL layer measured on an H200), at every clock pair
    kernels = KernelTrace.load(resources.measurement("gpt3xl-h200-layer.trace.json")).distinct_with_work()
    got, base_got = agreement(fitted, true_gpu, kernels), agreement(BASE, true_gpu, kernels)
    assert np.quantile(got.time_err, 0.95) < 0.05 and np.quantile(got.energy_err, 0.95) < 0.08
    assert np.all(got.optimum_steps <= 2) and not np.all(base_got.optimum_steps <= 2)


@pytest.mark.realtime  # sleeping fake kernels metered on the wall clock: a loaded machine skews them
def test_a_gpu_without_a_preset_is_calibrated_from_the_spec_built_from_it(l40s):
    """No preset matches the GPU: its spec is built from what it reports, the suite is swept on it (here a GPU drawn
    around that spec, hidden), and the fit predicts kernels outside the suite within the issue's bounds."""
    from rlclock.gpu.describe import spec_for_device

    base, origin = spec_for_device(0)
    assert origin == "derived" and base.memory_locks == "none"
    true_gpu = hidden_gpu(base, 3)
    with live() as control:
        sweep, _ = _sweep(l40s, control, None, true_gpu, per_memory=4, base=base)
    assert {r.mem_mhz for r in sweep.rows} == {9001}
    fitted, _ = fit_sweep(base, sweep.rows, max_nfev=100)
    kernels = KernelTrace.load(resources.measurement("gpt3xl-h200-layer.trace.json")).distinct_with_work()
    got = agreement(fitted, true_gpu, kernels)
    assert np.quantile(got.time_err, 0.95) < 0.05 and np.quantile(got.energy_err, 0.95) < 0.08
    assert l40s.device()["locked_core"] is None  # given back


def test_nearest_pair_snaps_what_nvml_read():
    assert nearest_pair(BASE, 1976.0, 3199.0) == (1980, 3201)
    assert nearest_pair(BASE, 351.0, 3201.0) == (345, 3201)


def test_the_command_without_cuda_says_so_in_one_line_and_sets_nothing(fake_nvml, capsys, monkeypatch):
    from rlclock.cli import main

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["calibrate", "--device", "0", "--table-out", "/dev/null"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert any("no CUDA device" in line and "Fix:" in line for line in err)
    assert fake_nvml.calls() == []
    assert main(["calibrate", "--simulated", "1", "--control-clocks"]) != 0
    assert "add --device" in capsys.readouterr().err


def test_planned_configs_in_observe_mode_are_auto_only(fake_nvml):
    with ClockControl(0) as control:
        assert planned_configs(BASE, control) == [AUTO]


def test_a_gpu_with_runtime_memory_locks_is_swept_at_every_memory_clock(runtime_memory_locks):
    fake = runtime_memory_locks
    spec = replace(BASE, memory_locks="runtime")
    true_gpu = hidden_gpu(spec, 4)
    kernels = [k for k in suite(spec) if k.name == "gemm_small"]
    with live() as control:
        configs = planned_configs(spec, control, 2)
        made = []

        def realiser(k):
            made.append(SimulatedKernel(fake, true_gpu, k))
            return made[-1], k

        with EnergySampler(nvml.NvmlDevice(0), 0.0005, 0.01) as sampler:
            sweep = device_sweep(
                spec, control, sampler, realiser, 2, FAST, kernels=kernels, idle_runner=SimulatedIdle(fake, true_gpu)
            )
    assert {c.mem_mhz for c in configs} == {2201, 3201}
    assert [(r.kernel, r.core_mhz, r.mem_mhz) for r in sweep.rows if r.is_idle] == [
        ("idle", 345, 3201),
        ("idle", 345, 2201),
    ]
    assert any(c["fn"] == "nvmlDeviceSetMemoryLockedClocks" for c in fake.calls())
    assert fake.device()["locked_core"] is None and fake.device()["locked_mem"] is None
