from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlclock.errors import TraceError
from rlclock.workload.trace import CATEGORIES, PHASES, Kernel, KernelTrace, Measurement, replace_kernel


def _kernel(**kw) -> Kernel:
    base = dict(
        name="k", op="op", category="gemm", phase="forward", flops=1e9, dram_read_bytes=1e6, dram_write_bytes=5e5
    )
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
    flops=_finite,
    rd=_finite,
    wr=_finite,
    cat=st.sampled_from(CATEGORIES),
    phase=st.sampled_from(PHASES),
    name=st.text(min_size=1, max_size=20),
)
def test_any_valid_kernel_roundtrips(tmp_path_factory, flops, rd, wr, cat, phase, name):
    if flops == 0 and rd + wr == 0:
        flops = 1.0
    tr = KernelTrace(
        "h", [_kernel(name=name, category=cat, phase=phase, flops=flops, dram_read_bytes=rd, dram_write_bytes=wr)]
    )
    back = KernelTrace.from_dict(json.loads(json.dumps(tr.to_dict())))
    assert back == tr


@settings(max_examples=40, deadline=None)
@given(
    bad=st.one_of(
        st.just(float("inf")),
        st.just(float("nan")),
        st.floats(max_value=-1e-9, allow_nan=False),
        st.text(max_size=3),
        st.none(),
    )
)
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


def _text(trace: KernelTrace, spaces: bool) -> str:
    return json.dumps(trace.to_dict(), indent=1 if spaces else None)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=st.integers(1, 300), spaces=st.booleans(), cut=st.integers(0, 10**6))
def test_the_streaming_reader_reads_what_was_written_at_any_chunk_size(
    tmp_path_factory, monkeypatch, chunk, spaces, cut
):
    """Kernel by kernel, chunk by chunk, the file reads as the trace; cut short anywhere it is one clear error."""
    import rlclock.workload.trace as tr

    monkeypatch.setattr(tr, "_READ_BYTES", chunk)  # the same each time: set for every example
    k = _kernel(measured=(Measurement(gpu="h200-sxm", time_s=1e-4, energy_j=0.07),), gemm_bmnk=(1, 64, 64, 64))
    trace = KernelTrace("x", [k, _kernel(name="k2", flops=123456789.25, layer=3), k], {"note": [1, {"a": 2}]})
    path = tmp_path_factory.mktemp("t") / "t.json"
    text = _text(trace, spaces)
    path.write_text(text)
    assert KernelTrace.load(path) == trace
    path.write_text(text[: cut % len(text)])
    with pytest.raises(TraceError, match=r"not a readable JSON trace|must be a non-empty list"):
        KernelTrace.load(path)


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda s: s.replace('"op": "op"', '"op": "op", "op": "other"', 1), "key 'op' appears twice"),
        (lambda s: s.replace('"flops": 1000000000.0', '"flops": NaN', 1), "NaN is not a number JSON allows"),
        (lambda s: s.replace('"format"', '"format":"rlclock.trace","format"', 1), "key 'format' appears twice"),
        (lambda s: s + " {}", "extra data"),
        (lambda s: s.replace("{", "[", 1), "expected '{'"),
        (lambda s: s.replace('"version": 2', '"version": 7', 1), "version 7"),
        (lambda s: s.replace('"kernels": [', '"kernels": {', 1), "not a readable JSON trace"),
    ],
)
def test_bad_trace_text_is_one_clear_error(tmp_path, mutate, needle):
    path = tmp_path / "t.json"
    path.write_text(mutate(_text(KernelTrace("x", [_kernel(), _kernel()]), False)))
    with pytest.raises(TraceError, match=needle) as err:
        KernelTrace.load(path)
    assert "\n" not in str(err.value)


def test_a_step_past_the_kernel_limit_is_refused_while_it_is_read(tmp_path, monkeypatch):
    import rlclock.workload.trace as tr

    monkeypatch.setattr(tr, "MAX_KERNELS", 5)
    path = KernelTrace("x", [_kernel()] * 5).save(tmp_path / "ok.json")
    assert len(KernelTrace.load(path)) == 5
    path = tmp_path / "big.json"
    data = KernelTrace("x", [_kernel()] * 5).to_dict()
    path.write_text(json.dumps({**data, "kernels": data["kernels"] * 2}))
    with pytest.raises(TraceError, match="more than 5 kernels"):
        KernelTrace.load(path)
    with pytest.raises(TraceError, match="more than rlclock plans"):
        KernelTrace("x", [_kernel()] * 6)


def test_a_folder_or_a_device_is_not_a_trace(tmp_path):
    with pytest.raises(TraceError, match="not a regular file"):
        KernelTrace.load(tmp_path)


def test_equal_values_are_shared_but_never_across_types(tmp_path):
    a = _kernel(name="same", gemm_bmnk=(1, 2, 3, 4), layer=1)
    b = _kernel(name="same", gemm_bmnk=(1, 2, 3, 4), layer=2, flops=1.0)
    back = KernelTrace.load(KernelTrace("x", [a, b]).save(tmp_path / "t.json"))
    assert back[0].name is back[1].name and back[0].gemm_bmnk is back[1].gemm_bmnk
    assert type(back[1].flops) is float and type(back[0].layer) is int and back == KernelTrace("x", [a, b])


def _code_kernel() -> Kernel:
    from rlclock.workload.kernel_code import Access, KernelCode
    from rlclock.workload.trace import LaunchOp

    code = KernelCode(
        "triton_poi_fused_add_0",
        "pointwise",
        (("x", 4096.0),),
        (Access("in_ptr0", False, 4096.0, 2, 0, False), Access("out_ptr0", True, 4096.0, 2, 0, False)),
        1.0,
        ("in_ptr0", "out_ptr0", "xnumel"),
    )
    return _kernel(
        name="triton_poi_fused_add_0",
        category="elementwise",
        launch_op=LaunchOp("aten::add", ((4096,), (4096,)), ("c10::BFloat16",) * 2, ("", ""), 3, code),
    )


@pytest.mark.parametrize("gz", [False, True])
def test_the_streaming_reader_keeps_version_2_fields_and_reads_version_1_files(tmp_path, gz):
    """A kernel's generated code and its cost source survive a save and a load; a version-1 file's measured kernels
    with no work are read as kernels planned from their time, exactly as from_dict reads them."""
    from rlclock.workload.trace import TRACE_VERSION

    timed = _kernel(
        name="some_kernel",
        flops=0.0,
        dram_read_bytes=0.0,
        dram_write_bytes=0.0,
        measured=(Measurement(gpu="h200-sxm", time_s=2e-4),),
    )
    trace = KernelTrace("v2", [_code_kernel(), timed, replace_kernel(timed, cost_from="time")])
    path = trace.save(tmp_path / ("t.json.gz" if gz else "t.json"))
    back = KernelTrace.load(path)
    assert back == trace and back[0].launch_op is not None and back[0].launch_op.code == trace[0].launch_op.code
    assert TRACE_VERSION == 2 and [k.cost_from for k in back] == ["rules", "rules", "time"]
    old = {**trace.to_dict(), "version": 1}
    for d in old["kernels"]:
        d.pop("cost_from", None)
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps(old))
    assert [k.cost_from for k in KernelTrace.load(v1)] == ["rules", "time", "time"]
    assert KernelTrace.load(v1) == KernelTrace.from_dict(json.loads(json.dumps(old)))


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda c: c.update(numels=[["x", "nan"]]), "not a finite number >= 0"),
        (lambda c: c.update(ops_per_element=-1), "not a finite number >= 0"),
        (lambda c: c.update(accesses="x"), "malformed"),
        (lambda c: c.pop("kind"), "malformed"),
    ],
)
def test_bad_generated_code_in_a_trace_is_one_clear_error(tmp_path, change, needle):
    data = KernelTrace("x", [_code_kernel()]).to_dict()
    change(data["kernels"][0]["launch_op"]["code"])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TraceError, match=needle) as err:
        KernelTrace.load(path)
    assert "\n" not in str(err.value) and "Fix:" in str(err.value)
