from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlclock.errors import TraceError
from rlclock.workload.trace import CATEGORIES, PHASES, Kernel, KernelTrace, Measurement


def _kernel(**kw) -> Kernel:
    base = dict(name="k", op="op", category="gemm", phase="forward", flops=1e9, dram_read_bytes=1e6,
                dram_write_bytes=5e5)
    base.update(kw)
    return Kernel(**base)


def test_roundtrip_json_and_gzip(tmp_path, paper_trace):
    for name in ("t.json", "t.json.gz"):
        path = paper_trace.save(tmp_path / name)
        back = KernelTrace.load(path)
        assert back == paper_trace
        assert len(back) == 897


def test_measurements_roundtrip(tmp_path):
    k = _kernel(measured=(Measurement(gpu="h200-sxm", time_s=1e-4, energy_j=0.07, sm_clock_mhz=1700.0),))
    tr = KernelTrace("x", [k], {"note": "n"})
    back = KernelTrace.load(tr.save(tmp_path / "m.json"))
    assert back[0].measured[0].energy_j == 0.07
    assert back[0].measurement("h200-sxm").sm_clock_mhz == 1700.0


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d.update(version=99), "version 99"),
        (lambda d: d.update(format="other"), "'format'"),
        (lambda d: d["kernels"][0].update(flops=-1.0), "'flops' is -1.0"),
        (lambda d: d["kernels"][0].update(flops=float("nan")), "NaN"),
        (lambda d: d["kernels"][0].update(category="matmul"), "category 'matmul'"),
        (lambda d: d["kernels"][0].update(phase="fwd"), "phase 'fwd'"),
        (lambda d: d["kernels"][0].pop("op"), "'op' is missing"),
        (lambda d: d["kernels"][0].update(colour="red"), "unknown field"),
        (lambda d: d["kernels"][0].update(gemm_bmnk=[1, 2]), "gemm_bmnk"),
        (lambda d: d["kernels"][0].update(measured=[{"gpu": "x", "time_s": -1}]), "measurement #0"),
        (lambda d: d.update(kernels=[]), "non-empty list"),
    ],
)
def test_malformed_traces_give_one_clear_error(tmp_path, mutate, needle):
    d = KernelTrace("x", [_kernel()]).to_dict()
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(TraceError) as info:
        KernelTrace.load(path)
    msg = str(info.value)
    assert needle in msg.replace("nan", "NaN") or needle in msg
    assert "\n" not in msg


def test_unreadable_files(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        KernelTrace.load(tmp_path / "missing.json")
    (tmp_path / "garbage.json").write_text("{not json")
    with pytest.raises(TraceError, match="not a readable JSON trace"):
        KernelTrace.load(tmp_path / "garbage.json")


def test_kernel_without_any_information_is_rejected():
    with pytest.raises(TraceError, match="neither FLOPs"):
        KernelTrace("x", [_kernel(flops=0.0, dram_read_bytes=0.0, dram_write_bytes=0.0)])


def test_unique_index_groups_repeated_layers(paper_trace):
    first, inverse = paper_trace.unique_index
    assert len({k.op for k in paper_trace}) == 46  # the paper's 46 kernel types
    assert len(first) <= 46  # physically identical types (e.g. GELU and its recompute) share a row
    assert inverse.shape == (897,)
    assert all(paper_trace[first[inverse[i]]].physical_key() == paper_trace[i].physical_key() for i in range(897))


_finite = st.floats(min_value=0, max_value=1e15, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    flops=_finite, rd=_finite, wr=_finite,
    cat=st.sampled_from(CATEGORIES), phase=st.sampled_from(PHASES),
    name=st.text(min_size=1, max_size=20),
)
def test_any_valid_kernel_roundtrips(tmp_path_factory, flops, rd, wr, cat, phase, name):
    if flops == 0 and rd + wr == 0:
        flops = 1.0
    tr = KernelTrace("h", [_kernel(name=name, category=cat, phase=phase, flops=flops, dram_read_bytes=rd,
                                   dram_write_bytes=wr)])
    back = KernelTrace.from_dict(json.loads(json.dumps(tr.to_dict())))
    assert back == tr


@settings(max_examples=40, deadline=None)
@given(bad=st.one_of(st.just(float("inf")), st.just(float("nan")), st.floats(max_value=-1e-9, allow_nan=False),
                     st.text(max_size=3), st.none()))
def test_any_invalid_number_is_rejected(bad):
    d = KernelTrace("x", [_kernel()]).to_dict()
    d["kernels"][0]["dram_read_bytes"] = bad
    with pytest.raises(TraceError):
        KernelTrace.from_dict(d)


def test_on_chip_bytes_roundtrip_and_bad_values_are_one_line(tmp_path):
    k = Kernel("onchip_reduce", "suite.smem", "other", "forward", 1e9, 1e6, 1e6, dtype="fp32", onchip_bytes=2e9)
    add = Kernel("add", "add", "elementwise", "forward", 1e6, 1e6, 1e6)
    path = KernelTrace("t", [k, add]).save(tmp_path / "t.json")
    back = KernelTrace.load(path)
    assert back[0].onchip_bytes == 2e9 and back[1].onchip_bytes is None
    assert "onchip_bytes" not in json.loads(path.read_text())["kernels"][1]  # none counted, none written
    with pytest.raises(TraceError, match=r"'onchip_bytes' must be a finite number >= 0, found -1"):
        KernelTrace("t", [Kernel("x", "x", "other", "forward", 1.0, 1.0, 1.0, onchip_bytes=-1.0)])
