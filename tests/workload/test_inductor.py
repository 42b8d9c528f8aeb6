"""Compiled steps: what TorchInductor's generated code says each kernel does (rlclock.workload.inductor), how the
cost rules turn it into work (op_costs), and kernels of a replayed CUDA graph found in the output code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlclock.workload.inductor import InductorCode, parse_kernel, parse_module
from rlclock.workload.kernel_code import InductorCodeError, KernelCode
from rlclock.workload.op_costs import Launch, call_costs
from rlclock.workload.trace import LaunchOp

DATA = Path(__file__).resolve().parents[1] / "data" / "inductor"


def _source(name: str) -> str:
    return (DATA / name).read_text()


def _bytes(code: KernelCode, store: bool) -> float:
    return sum(a.elements * a.elem_bytes for a in code.accesses if a.store == store)


def test_a_loss_kernel_reads_the_logits_not_the_whole_buffers_of_its_arguments():
    code = parse_kernel(_source("nll_backward_red.py"))  # generated for a Llama's loss backward (8192 x 32000)
    assert code.kind == "reduction" and dict(code.numels) == {"x": 8192.0, "r0_": 32000.0}
    big = [a for a in code.accesses if a.elements == 8192 * 32000]
    assert {a.arg for a in big} == {"in_ptr3", "in_ptr4", "out_ptr1"}  # two logits-sized reads, one write
    small = [a for a in code.accesses if a.elements <= 8192]  # targets and row statistics: one per row, or one
    assert small and all(a.elem_bytes in (4, 8) for a in small)
    assert 10 < code.ops_per_element < 60  # the exponential per element, not per row only


def test_a_fused_norm_gathers_the_embedding_rows_it_reads():
    code = parse_kernel(_source("embedding_rmsnorm_per.py"))
    gathered = [a for a in code.accesses if a.indirect]
    assert gathered and gathered[0].elements == 8192 * 1024  # one row per token, found by its id
    weight = [a for a in code.accesses if not a.indirect and a.elements == 1024]
    assert weight  # the norm's weight: one row, broadcast over the tokens


def test_a_cast_counts_its_arithmetic_per_element():
    code = parse_kernel(_source("cast_transpose_poi.py"))
    assert code.kind == "pointwise" and code.ops_per_element >= 1.0
    assert _bytes(code, False) == 1048576 * 4 and _bytes(code, True) == 1048576 * 2


def test_a_kernel_summary_round_trips_and_a_bad_one_is_refused():
    code = parse_kernel(_source("nll_backward_red.py"))
    assert KernelCode.from_dict(code.to_dict()) == code
    with pytest.raises(InductorCodeError, match="malformed"):
        KernelCode.from_dict({"name": "x"})


@pytest.mark.parametrize(
    "src, says",
    [
        ("def f(:", "not Python"),
        ("x = 1\n", "no triton_"),
        ("def triton_poi_x(in_ptr0, xnumel):\n    pass\n", "size xnumel"),
    ],
)
def test_code_it_cannot_follow_is_refused(src, says):
    with pytest.raises(InductorCodeError, match=says):
        parse_kernel(src)


def test_a_dynamic_size_is_taken_from_the_launch():
    src = _source("cast_transpose_poi.py").replace("xnumel = 1048576", "")
    with pytest.raises(InductorCodeError):
        parse_kernel(src)
    assert dict(parse_kernel(src, {"xnumel": 4096}).numels) == {"x": 4096.0}


def test_an_output_module_gives_its_launches_in_order_with_shapes():
    mod = parse_module(_source("graph_module.py"))
    names = [launch.name for launch in mod.launches]
    assert names == [
        "triton_poi_fused__to_copy_0",
        "aten::mm",
        "aten::addmm",
        "triton_per_fused_sum_1",
        "aten::sum",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::convolution",
    ]
    mm, addmm = mod.launches[1].op, mod.launches[2].op
    assert mm.input_dims[:2] == ((512, 256), (256, 256)) and set(mm.input_types) == {"c10::BFloat16"}
    assert addmm.input_dims[1:3] == ((512, 256), (256, 128)) and set(addmm.input_types[:3]) == {"float"}
    total = mod.launches[4].op
    assert total.input_dims[0] == (512, 64) and total.concrete_inputs[1] == "0"  # dim=0 at its schema place
    attention = mod.launches[5].op
    assert attention.input_dims[:4] == ((2, 4, 128, 64),) * 3 + ((2, 1, 128, 128),)
    assert attention.concrete_inputs[5] == "0.1"  # dropout
    conv = mod.launches[6].op
    assert conv.concrete_inputs[3] == "[16, 16]"  # stride=, by the operator's schema
    assert mod.launches[3].code is not None and dict(mod.launches[3].code.numels) == {"x": 512.0, "r0_": 128.0}


def test_the_rules_cost_a_generated_kernel_from_its_code_capped_by_its_buffers():
    code = parse_kernel(_source("cast_transpose_poi.py"))
    op = LaunchOp(
        code.name, ((1024, 1024), (1024, 1024), ()), ("float", "c10::BFloat16", "Scalar"), ("", "", "1048576"), 0, code
    )
    (cost,) = call_costs(op, [Launch(code.name, "kernel", (1024, 1, 1), (128, 1, 1))], strict=True)
    assert cost.rule == "inductor.pointwise" and cost.read_bytes == 1048576 * 4 and cost.write_bytes == 1048576 * 2
    assert cost.mlp_bytes == pytest.approx(32.0)  # a block's loads at once: 8 elements of 4 bytes per thread
    # a pointer read twice at other indices is capped by its buffer: a few more bytes, not twice as many
    twice = KernelCode(
        code.name, code.kind, code.numels, (*code.accesses, code.accesses[0]), code.ops_per_element, code.args
    )
    (capped,) = call_costs(
        LaunchOp(code.name, op.input_dims, op.input_types, op.concrete_inputs, 0, twice),
        [Launch(code.name)],
        strict=True,
    )
    assert capped.read_bytes == cost.read_bytes


def test_a_generated_kernel_without_its_code_is_planned_from_its_time():
    (cost,) = call_costs(LaunchOp("triton_poi_fused_add_0", ((8192, 32000),), ("c10::BFloat16",)), [Launch("k")])
    assert not cost.known and cost.read_bytes == cost.write_bytes == cost.flops == 0  # never the whole buffer


def _replay(module: str) -> InductorCode:
    return InductorCode.read({"/tmp/out.py": _source(module)})


def test_a_replayed_graphs_kernels_get_the_launches_of_its_output_code():
    from rlclock.workload.kernel_names import classify

    code = _replay("graph_module.py")
    names = [
        "triton_poi_fused__to_copy_0",
        "nvjet_sm90_tst_gemm",
        "sm90_xmma_gemm_splitKreduce_kernel",
        "cutlass_addmm_gemm",
        "triton_per_fused_sum_1",
        "void at::native::reduce_kernel<128>",
        "cudnn::fusion::compute_dot_do_o",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop",
        "cutlass_tensorop_fprop_conv_gemm",
        "Memset (Device)",
        "void multi_tensor_apply_kernel",
    ]
    kinds = ["kernel"] * 9 + ["memset", "kernel"]
    eager = LaunchOp("aten::_fused_adamw_")
    ops = code.align(names, kinds, [None] * 10 + [eager], classify)
    got = [op.name if op is not None else None for op in ops]
    assert got == [
        "triton_poi_fused__to_copy_0",
        "aten::mm",
        "aten::mm",
        "aten::addmm",
        "triton_per_fused_sum_1",
        "aten::sum",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::convolution",
        None,
        "aten::_fused_adamw_",
    ]
    assert ops[1].call == ops[2].call != ops[3].call  # the split-K reduction is the product's own kernel
    assert ops[6].call == ops[7].call  # attention's pre-pass and its main kernel: one call
    assert ops[0].code is not None and ops[1].code is None


def test_kernels_known_only_by_their_time_take_the_work_that_time_needs():
    from dataclasses import replace

    from rlclock.backends.simulated import SimulatedGpu
    from rlclock.dvfs.spec import get_spec
    from rlclock.schedule import AUTO
    from rlclock.workload.trace import Kernel, KernelTrace, Measurement

    spec = get_spec("h100-sxm")
    base = Kernel(
        "void some_library_kernel",
        "fwd.op.0",
        "other",
        "forward",
        0.0,
        0.0,
        0.0,
        cost_from="time",
        measured=(Measurement(gpu=spec.name, time_s=250e-6, source="in-sequence"),),
    )
    trace = KernelTrace("t", [base, replace(base, name="cutlass_gemm_kernel", op="fwd.op.1")])
    t, _ = SimulatedGpu(spec, trace, [AUTO], anchor=False).tables
    assert np.allclose(t[:, 0], 250e-6, rtol=0.02)  # unanchored, the model predicts the time it was given


def test_an_implausible_cost_is_planned_from_the_measured_time_with_a_word():
    from rlclock.deploy.capture import check_costs
    from rlclock.dvfs.spec import get_spec
    from rlclock.workload.trace import Kernel, KernelTrace, Measurement

    spec = get_spec("h100-sxm")
    ok = Kernel(
        "vectorized_elementwise_kernel",
        "fwd.add.0",
        "elementwise",
        "forward",
        0.0,
        1.5e8,
        1.5e8,
        measured=(Measurement(gpu=spec.name, time_s=100e-6, source="in-sequence"),),
    )
    wrong = Kernel(
        "triton_red_fused_nll_loss_0",
        "fwd.nll.1",
        "reduction",
        "forward",
        0.0,
        5e11,
        0.0,
        measured=(Measurement(gpu=spec.name, time_s=11e-6, source="in-sequence"),),
    )
    checked, notes = check_costs(KernelTrace("t", [ok, wrong]), spec)
    assert checked[0] == ok and checked[1].cost_from == "time" and checked[1].dram_read_bytes == 0
    assert len(notes) == 1 and "1 kernels" in notes[0] and "triton_red_fused_nll_loss_0" in notes[0]
    assert check_costs(KernelTrace("t", [ok]), spec)[1] == []


def test_an_old_trace_plans_its_unknown_kernels_from_their_time_and_says_when_it_cannot_be_refreshed(caplog):
    import json

    from rlclock.workload.op_costs import refresh_costs
    from rlclock.workload.trace import Kernel, KernelTrace, Measurement

    timed = Kernel(
        "some_kernel",
        "fwd.op.0",
        "other",
        "forward",
        0.0,
        0.0,
        0.0,
        measured=(Measurement(gpu="NVIDIA H100 80GB HBM3", time_s=2e-4, source="in-sequence"),),
    )
    data = KernelTrace("old", [timed]).to_dict()
    data["version"] = 1
    data["kernels"][0].pop("cost_from", None)
    old = KernelTrace.from_dict(json.loads(json.dumps(data)))
    assert old[0].cost_from == "time"  # version 1 had no word for it: a measured kernel with no work was one
    with caplog.at_level("WARNING"):
        refresh_costs(old)
    assert "carry no operator call" in caplog.text and "rlclock apply --save" in caplog.text
