"""Measurement tables on disk, and RecordedGpu replaying one (the H200 data under data/ included)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlclock.backends.recorded import RecordedGpu
from rlclock.dvfs.spec import get_spec
from rlclock.errors import MeasurementError, ScheduleError, SpecError
from rlclock.gpu.measure import attach_measurements
from rlclock.gpu.table import MeasurementRow, MeasurementTable
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
from rlclock.solve.evaluation import evaluate
from rlclock.workload.trace import Kernel, KernelTrace

ROOT = Path(__file__).resolve().parents[2]
DATA_TRACE = ROOT / "data" / "gpt3xl-h200-layer.trace.json"
DATA_TABLE = ROOT / "data" / "gpt3xl-h200-layer.measurements.json"
LOW = ClockConfig(1410, 3201)


def kern(i: int) -> Kernel:
    return Kernel(
        name=f"k{i}",
        op=f"op{i}",
        category="gemm",
        phase="forward",
        flops=1e9,
        dram_read_bytes=1e6,
        dram_write_bytes=1e6,
    )


def row(i: int, config: str, t: float, e: float, **kw) -> MeasurementRow:
    return MeasurementRow(
        kernel=i,
        op=f"op{i}",
        name=f"k{i}",
        config=config,
        time_s=t,
        energy_j=e,
        power_w=e / t,
        sm_clock_mhz=1500.0,
        mem_clock_mhz=3201.0,
        **kw,
    )


def toy_table() -> MeasurementTable:
    rows = [
        row(0, "auto", 1e-3, 0.6),
        row(1, "auto", 2e-4, 0.1),
        row(0, "1410@3201", 1.2e-3, 0.5),
        row(1, "1410@3201", 2.1e-4, 0.08),
    ]
    return MeasurementTable({"gpu": "NVIDIA H200"}, rows)


def test_round_trip_csv_and_lookup(tmp_path):
    t = toy_table()
    path = t.save(tmp_path / "m.json")
    back = MeasurementTable.load(path)
    assert len(back) == 4 and back.configs() == ["1410@3201", "auto"]
    assert back.get(0, "1410@3201").energy_j == 0.5 and back.get(0, "1200@3201") is None
    assert back.by_key()[("op1", "k1", "auto")].time_s == 2e-4
    csv_text = t.save_csv(tmp_path / "m.csv").read_text().splitlines()
    assert csv_text[0].startswith("kernel,op,name,config") and len(csv_text) == 5


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.update(format="other"), "not an rlclock measurement table"),
        (lambda d: d.update(version=9), "version 9"),
        (lambda d: d["rows"][0].update(time_s=float("nan")), "NaN is not a number JSON allows"),
        (lambda d: d["rows"][0].update(time_s="slow"), "time_s is 'slow'"),
        (lambda d: d["rows"][0].update(time_s=1e6, energy_j=0.0), "not a time from 0 to 60 s"),
        (lambda d: d["rows"][0].update(time_s=1e-3, energy_j=0.0), "outside the 1-5000 W"),
        (lambda d: d["rows"][0].update(sm_clock_mhz="fast"), "sm_clock_mhz is 'fast'"),
        (lambda d: d["rows"][0].update(config="fast@9"), "not a clock configuration"),
        (lambda d: d["rows"][0].update(windows=0), "windows is 0"),
        (lambda d: d["rows"][0].update(energy_j=-1.0), "energy_j is -1"),
        (lambda d: d["rows"][0].pop("config"), "missing"),
        (lambda d: d["rows"][0].update(colour="red"), "unknown"),
    ],
)
def test_bad_tables_are_one_line_errors(tmp_path, mutate, match):
    d = toy_table().to_dict()
    mutate(d)
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(MeasurementError, match=match) as exc:
        MeasurementTable.load(tmp_path / "bad.json")
    assert "\n" not in str(exc.value)
    with pytest.raises(MeasurementError, match="does not exist"):
        MeasurementTable.load(tmp_path / "missing.json")


def test_recorded_gpu_replays_the_table_for_every_layer():
    spec = get_spec("h200-sxm")
    two_layers = KernelTrace("two", [kern(0), kern(1), kern(0), kern(1)])
    gpu = RecordedGpu(spec, two_layers, toy_table(), [AUTO, LOW], latency_s=0.0)
    t, e = gpu.tables
    assert np.allclose(t[:, 0], [1e-3, 2e-4, 1e-3, 2e-4]) and np.allclose(e[:, 1], [0.5, 0.08, 0.5, 0.08])
    ev = evaluate(ClockSchedule.constant(LOW, 4), gpu)
    assert ev.energy_j == pytest.approx(1.16) and ev.time_s == pytest.approx(2.82e-3)


def test_missing_pairs_are_an_error_or_simulated():
    spec = get_spec("h200-sxm")
    trace = KernelTrace("one", [kern(0), kern(1)])
    table = toy_table()
    other = ClockConfig(1005, 2201)
    with pytest.raises(ScheduleError, match="lacks 2 of 6") as exc:
        _ = RecordedGpu(spec, trace, table, [AUTO, LOW, other]).tables
    assert "rlclock measure" in str(exc.value)
    gpu = RecordedGpu(spec, trace, table, [AUTO, LOW, other], missing="simulated")
    t, _ = gpu.tables
    assert np.all(np.isfinite(t)) and t[0, 0] == 1e-3 and t[0, 2] > 0


def test_rows_flagged_invalid_count_as_missing():
    spec = get_spec("h200-sxm")
    table = MeasurementTable({"gpu": "NVIDIA H200"}, [row(0, "auto", 2e-6, 1e-4, extra={"valid": False})])
    with pytest.raises(ScheduleError, match="lacks 1"):
        _ = RecordedGpu(spec, KernelTrace("t", [kern(0)]), table, [AUTO]).tables


def test_a_table_from_another_gpu_is_refused():
    table = MeasurementTable({"gpu": "NVIDIA GeForce RTX 3080 Ti"}, [row(0, "auto", 1e-3, 0.3)])
    with pytest.raises(SpecError, match="RTX 3080 Ti"):
        RecordedGpu(get_spec("h200-sxm"), KernelTrace("t", [kern(0)]), table, [AUTO])


def test_attach_measurements_puts_valid_rows_first():
    trace = KernelTrace("t", [kern(0), kern(1)])
    table = MeasurementTable(
        {"gpu": "NVIDIA H200"}, [row(0, "auto", 1e-3, 0.6), row(1, "auto", 2e-6, 1e-4, extra={"valid": False})]
    )
    out = attach_measurements(trace, table)
    m = out[0].measured[0]
    assert (m.gpu, m.source, m.time_s, m.energy_j, m.core_mhz) == ("NVIDIA H200", "isolated", 1e-3, 0.6, None)
    assert out[1].measured == ()


def test_the_h200_data_is_consistent():
    trace = KernelTrace.load(DATA_TRACE)
    table = MeasurementTable.load(DATA_TABLE)
    assert trace.meta["gpu"] == "NVIDIA H200" and table.meta["clock_mode"] == "observe"
    assert len(table) == len(trace) == 33
    for k in trace:
        sources = [m.source for m in k.measured]
        assert sources == ["isolated", "in-sequence"] and all(m.gpu == "NVIDIA H200" for m in k.measured)
        iso, seq = k.measured
        assert 0.7 < iso.time_s / seq.time_s < 1.3 and iso.energy_j > 0 and 300 < iso.sm_clock_mhz <= 1980
    big = [r for r in table if r.time_s >= 20e-6]
    assert max(max(r.time_cv, r.energy_cv) for r in big) <= 0.02  # the repeatability target
    gpu = RecordedGpu.from_file(DATA_TABLE, get_spec("h200-sxm"), trace, [AUTO])
    run = gpu.auto_run()
    assert 4e-3 < run.time_s < 6e-3 and 2.5 < run.energy_j < 4.5


@pytest.mark.parametrize("config", ["1411@3201", "1410@9999", "99999@auto"])
def test_a_table_measured_at_clocks_the_gpu_lacks_is_refused(config):
    from rlclock.errors import MeasurementError

    table = toy_table()
    table.add(row(0, config, 1e-3, 0.5))
    with pytest.raises(MeasurementError, match="cannot run") as exc:
        RecordedGpu(get_spec("h200-sxm"), KernelTrace("t", [kern(0), kern(1)]), table, [AUTO, LOW], latency_s=0.0)
    assert "\n" not in str(exc.value) and "rlclock measure" in str(exc.value)
