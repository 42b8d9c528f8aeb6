"""FLOPs and bytes of profiled kernels from their operator calls (rlclock.workload.op_costs), on the shapes
that real Hugging Face training steps launch (the committed H200 corpus), and the traces that carry them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlclock.errors import TraceError
from rlclock.workload.op_costs import (
    ATTENTION_BACKWARD_FLOPS,
    MULTI_TENSOR_CHUNK,
    Launch,
    call_costs,
    costs,
    launch_of,
    refresh_costs,
)
from rlclock.workload.trace import Kernel, KernelTrace, LaunchOp, Measurement

BF16, F32, I64 = "c10::BFloat16", "float", "long int"
CORPUS = Path(__file__).resolve().parents[2] / "rlclock" / "data" / "measurements" / "corpus-h200"
VEC = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float>>(int)"
GENERIC = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<>>(int)"


def one(op: LaunchOp, name: str = VEC, grid=(8192, 1, 1), block=(128, 1, 1)):
    (c,) = call_costs(op, [Launch(name, "kernel", grid, block)], strict=True)
    return c


def test_a_matrix_product_counts_2mnk_and_each_operand_once():
    c = one(
        LaunchOp("aten::addmm", ((6144,), (8192, 2048), (2048, 6144)), (BF16,) * 3),
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT",
    )
    assert c.category == "gemm" and c.dtype == "bf16" and c.gemm_bmnk == (1, 8192, 6144, 2048)
    assert c.flops == 2 * 8192 * 6144 * 2048
    assert c.read_bytes == 2 * (8192 * 2048 + 2048 * 6144 + 6144) and c.write_bytes == 2 * 8192 * 6144


def test_fp32_products_run_on_simt_units_or_as_tf32_on_tensor_cores():
    op = LaunchOp("aten::bmm", ((12, 512, 64), (12, 64, 512)), (F32, F32))
    simt = one(op, "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(Params)")
    tensor = one(op, "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT")
    assert simt.dtype == "fp32" and tensor.dtype == "tf32"
    k = Kernel("sgemm", "x", "gemm", "forward", simt.flops, 1.0, 1.0, dtype="fp32")
    assert not k.uses_tensor_cores and Kernel("g", "x", "gemm", "forward", 1.0, 1.0, 1.0, "tf32").uses_tensor_cores


def test_causal_attention_does_half_the_work_and_its_backward_two_and_a_half_times_that():
    q, kv = (8, 16, 1024, 64), (8, 4, 1024, 64)  # grouped-query: 4 key/value heads
    causal = ("",) * 6 + ("True",)
    fwd = one(
        LaunchOp("aten::_scaled_dot_product_cudnn_attention", (q, kv, kv), (BF16,) * 3, causal),
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7",
    )
    full = 2 * 8 * 16 * 1024 * 1024 * (64 + 64)
    assert fwd.category == "attention" and fwd.flops == pytest.approx(full * (1024 + 1) / (2 * 1024))
    assert fwd.read_bytes == 2 * (8 * 16 * 1024 * 64 + 2 * 8 * 4 * 1024 * 64)  # K and V at their own heads
    dims = ((8, 16, 1024, 64), q, kv, kv, q, (8, 16, 1024))
    names = [
        "Memset (Device)",
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*)",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26",
        "void cudnn::fusion::convert_dq_to_16bits<true>(void const*)",
    ]
    launches = [Launch(names[0], "memset", nbytes=4096)] + [Launch(n) for n in names[1:]]
    bwd_op = LaunchOp(
        "aten::_scaled_dot_product_cudnn_attention_backward", dims, (BF16,) * 5 + (F32,), ("",) * 14 + ("True",)
    )
    memset, pre, main, convert = call_costs(bwd_op, launches, strict=True)
    assert memset.write_bytes == 4096 and memset.read_bytes == 0
    assert pre.rule == "attention.dot_do_o" and convert.rule == "attention.convert_dq"
    assert main.flops == pytest.approx(ATTENTION_BACKWARD_FLOPS * fwd.flops)


def test_an_embedding_reads_the_rows_it_gathers_not_the_table():
    c = one(
        LaunchOp("aten::embedding", ((128256, 2048), (4, 2048)), (F32, I64)),
        "void at::native::vectorized_gather_kernel<16, long>(char*)",
    )
    tokens = 4 * 2048
    assert c.category == "embedding" and c.access == "gather"
    assert c.read_bytes == tokens * (2048 * 4 + 8) and c.write_bytes == tokens * 2048 * 4


def test_the_embedding_backward_sorts_indices_and_sums_rows():
    op = LaunchOp(
        "aten::embedding_dense_backward", ((4, 2048, 2048), (4, 2048)), (F32, I64, "Scalar"), ("", "", "128256")
    )
    names = [
        "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<>(long*)",
        "void at::native::(anonymous namespace)::compute_grad_weight<float, long>(long const*)",
        "void at::native::(anonymous namespace)::sum_and_scatter<float, long>(long const*)",
    ]
    sort, partial, scatter = call_costs(op, [Launch(n) for n in names], strict=True)
    n = 4 * 2048
    assert sort.read_bytes == 16 * n and sort.write_bytes == 16 * n  # keys and values, one pass
    assert partial.read_bytes >= n * 2048 * 4 and scatter.write_bytes == n * 2048 * 4
    assert {c.category for c in (sort, partial, scatter)} == {"embedding"}


def test_nll_loss_reads_one_value_per_row_and_softmax_every_element():
    rows, vocab = 8192, 151936
    nll = one(
        LaunchOp("aten::nll_loss_forward", ((rows, vocab), (rows,)), (F32, I64)),
        "void at::native::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*)",
        (1, 1, 1),
    )
    assert nll.read_bytes == rows * (8 + 4) and nll.write_bytes < 16
    soft = one(
        LaunchOp("aten::_log_softmax", ((rows, vocab), (), ()), (F32, "Scalar", "Scalar"), ("", "1", "False")),
        "void at::native::cunn_SoftMaxForward<4, float, float, float>(float*)",
    )
    assert soft.read_bytes == 2 * rows * vocab * 4 and soft.write_bytes == rows * vocab * 4  # long rows: 2 reads
    short = one(LaunchOp("aten::_softmax", ((64, 12, 512, 512), (), ()), (F32, "Scalar", "Scalar")))
    assert short.read_bytes == 64 * 12 * 512 * 512 * 4


def test_a_fused_adamw_whose_lists_were_not_recorded_counts_its_chunks():
    name = (
        "void at::native::multi_tensor_apply_kernel<at::native::FusedOptimizerTensorListMetadata<4>, "
        "at::native::FusedAdamMathFunctor<float, 4, 1, false>>(double, double)"
    )
    op = LaunchOp("aten::_fused_adamw_", ((),) * 6, ("TensorList",) * 6 + ("Scalar",))
    a, b = call_costs(
        op,
        [Launch(name, grid=(320, 1, 1), block=(512, 1, 1)), Launch(name, grid=(10, 1, 1), block=(512, 1, 1))],
        strict=True,
    )
    n = 320 * MULTI_TENSOR_CHUNK
    assert a.rule == "optimizer" and a.read_bytes == 4 * 4 * n and a.write_bytes == 3 * 4 * n  # fp32, not double
    assert b.read_bytes == a.read_bytes * 10 / 320


def test_a_foreach_op_with_recorded_lists_shares_them_among_its_kernels():
    shapes = ((1000, 128), (128,))
    op = LaunchOp("aten::_foreach_mul_", (shapes, ()), ("TensorList", "Scalar"))
    name = "multi_tensor_apply_kernel<at::native::TensorListMetadata<1>, BinaryOpScalarFunctor<float>>"
    cs = call_costs(
        op,
        [Launch(name, grid=(2, 1, 1), block=(512, 1, 1)), Launch(name, grid=(1, 1, 1), block=(512, 1, 1))],
        strict=True,
    )
    assert sum(c.read_bytes for c in cs) == pytest.approx(4 * (128000 + 128))
    assert cs[0].read_bytes == pytest.approx(2 * cs[1].read_bytes)


def test_copies_read_the_source_type_and_write_the_destination_type():
    cast = one(
        LaunchOp("aten::copy_", ((8, 1024, 896), (8, 1024, 896), ()), (F32, BF16, "Scalar")),
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>(int)",
        (14336, 1, 1),
        (128, 1, 1),
    )
    n = 8 * 1024 * 896
    assert cast.read_bytes == 2 * n and cast.write_bytes == 4 * n and cast.category == "copy"
    assert cast.mlp_bytes == 4 * 2  # four bf16 elements per thread loaded before computing


def test_an_operator_split_over_several_kernels_is_done_once():
    op = LaunchOp("aten::copy_", ((8, 1024, 151936), (8, 1024, 151936), ()), (F32, BF16, "Scalar"))
    name = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>(int)"
    parts = call_costs(op, [Launch(name, grid=(607744, 1, 1), block=(128, 1, 1))] * 4, strict=True)
    whole = one(op, name, (607744 * 4, 1, 1))
    assert sum(c.write_bytes for c in parts) == pytest.approx(whole.write_bytes)


def test_fills_and_memsets_write_only():
    fill = one(LaunchOp("aten::fill_", ((8192, 32000), ()), (F32, "Scalar")))
    assert fill.read_bytes == 0 and fill.write_bytes == 8192 * 32000 * 4 and fill.category == "memset"
    (memset,) = call_costs(None, [Launch("Memset (Device)", "memset", nbytes=1 << 20)])
    assert memset.read_bytes == 0 and memset.write_bytes == 1 << 20
    (copy,) = call_costs(None, [Launch("Memcpy DtoD (Device -> Device)", "memcpy", nbytes=1 << 20)])
    assert copy.read_bytes == copy.write_bytes == 1 << 20


def test_reductions_write_what_remains_and_column_sums_pay_the_cross_block_tail():
    rows = one(
        LaunchOp(
            "aten::mean", ((8, 1024, 1024), (), (), ()), (F32, "ScalarList", "Scalar", ""), ("", "[-1]", "True", "")
        )
    )
    cols = one(
        LaunchOp("aten::sum", ((8192, 3072), (), (), ()), (BF16, "ScalarList", "Scalar", ""), ("", "[0]", "False", ""))
    )
    assert rows.write_bytes == 8 * 1024 * 4 and rows.access == "stream"
    assert cols.write_bytes == 3072 * 2 and cols.access == "reduce"


def test_elementwise_results_take_the_promoted_type_and_broadcast_inputs_stream_once():
    rotary = one(LaunchOp("aten::mul", ((8, 16, 1024, 64), (1, 1, 1024, 64)), (BF16, F32)), GENERIC)
    n = 8 * 16 * 1024 * 64
    assert rotary.write_bytes == 4 * n  # bf16 x fp32 -> fp32
    # the generic loop is bound by its per-element work (the GPU preset's loop_ops_per_element), not by loads in flight
    assert rotary.read_bytes == 2 * n + 4 * 1024 * 64 and rotary.mlp_bytes == 16
    scaled = one(LaunchOp("aten::mul", ((8, 1024, 1024), ()), (F32, "double")))
    assert scaled.write_bytes == 4 * 8 * 1024 * 1024  # a 0-d double is a scalar: no promotion
    mask = one(LaunchOp("aten::native_dropout", ((8, 1024, 1024), (), ()), (BF16, "Scalar", "")))
    assert mask.write_bytes == 3 * 8 * 1024 * 1024  # output and the keep mask
    eq = one(LaunchOp("aten::eq", ((8, 1024), ()), (I64, "Scalar")))
    assert eq.write_bytes == 8 * 1024


def test_an_out_tensor_is_written_not_read():
    pytest.importorskip("torch")  # the position of ``out`` comes from the operator's schema
    x = (2048, 1024)
    added = one(LaunchOp("aten::add", (x, x, (), x), (BF16, BF16, "Scalar", BF16)))
    assert added.read_bytes == 2 * 2 * 2048 * 1024 and added.write_bytes == 2 * 2048 * 1024
    plain = one(LaunchOp("aten::add", (x, x, ()), (BF16, BF16, "Scalar")))
    assert (plain.read_bytes, plain.write_bytes) == (added.read_bytes, added.write_bytes)


def test_norms_split_input_and_weight_gradients():
    x = (8, 1024, 1024)
    op = LaunchOp(
        "aten::native_layer_norm_backward",
        (x, x, (), (8, 1024, 1), (8, 1024, 1), (1024,), (1024,)),
        (F32, F32, "ScalarList", F32, F32, F32, F32),
    )
    grad_in, gamma = call_costs(
        op,
        [
            Launch("void at::native::layer_norm_grad_input_kernel_vectorized<float>()"),
            Launch("void at::native::GammaBetaBackwardCUDAKernelTemplate<float>()", grid=(32, 1, 1), block=(32, 32, 1)),
        ],
        strict=True,
    )
    assert grad_in.write_bytes == 4 * 8 * 1024 * 1024 and gamma.write_bytes == 2 * 1024 * 4
    assert gamma.access == "reduce"


def test_a_layernorm_row_narrower_than_its_block_keeps_only_the_rows_bytes_in_flight():
    """One block of 128 threads per row (PyTorch's vectorized LayerNorm): a 96-channel fp32 row is 384 bytes, so the
    block's threads average 3 bytes in flight, not a 16-byte vector; a 4096-channel row fills every thread."""
    fwd = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>()"

    def forward(rows: int, hidden: int, grid: tuple[int, int, int]):
        x = (rows, hidden)
        op = LaunchOp("aten::native_layer_norm", (x, (), (hidden,), (hidden,), ()), (F32, "ScalarList", F32, F32, ""))
        return one(op, fwd, grid=grid, block=(32, 4, 1))

    assert forward(4096, 96, (4096, 1, 1)).mlp_bytes == pytest.approx(96 * 4 / 128)
    assert forward(4096, 4096, (4096, 1, 1)).mlp_bytes == 16.0
    assert forward(4096, 96, (1024, 1, 1)).mlp_bytes == 16.0  # several rows per block: not this loop
    x = (4096, 192)  # the input gradient reads two rows (the output's gradient and the input) per block
    op = LaunchOp(
        "aten::native_layer_norm_backward",
        (x, x, (), (4096, 1), (4096, 1), (192,), (192,)),
        (F32, F32, "ScalarList", F32, F32, F32, F32),
    )
    (grad_in,) = call_costs(
        op,
        [
            Launch(
                "void at::native::layer_norm_grad_input_kernel_vectorized<float>()",
                grid=(4096, 1, 1),
                block=(128, 1, 1),
            )
        ],
        strict=True,
    )
    assert grad_in.mlp_bytes == pytest.approx(2 * 192 * 4 / 128)


def test_costs_group_activities_by_call_and_unknown_ones_have_only_their_time():
    a = LaunchOp("aten::fill_", ((1024,), ()), (F32, "Scalar"), call=0)
    out = costs([a, None, a], [Launch(VEC), Launch("mystery"), Launch(VEC)], strict=True)
    assert out[0].write_bytes + out[2].write_bytes == pytest.approx(4096)  # one call, two kernels
    assert not out[1].known and out[1].flops == out[1].read_bytes == out[1].write_bytes == 0
    with pytest.raises(ValueError):
        costs([a], [])


def test_a_trace_keeps_its_operator_calls_and_refresh_derives_the_same_costs():
    op = LaunchOp(
        "aten::_foreach_add_",
        (((3, 4), (5,)), ((3, 4), (5,)), ()),
        ("TensorList", "TensorList", "Scalar"),
        ("", "", "1"),
        3,
    )
    k = Kernel(
        "multi_tensor_apply_kernel<TensorListMetadata<2>, BinaryOpListAlphaFunctor<float>>",
        "opt.add.0",
        "elementwise",
        "optimizer",
        1.0,
        1.0,
        1.0,
        launch_op=op,
        measured=(Measurement("g", 1e-6),),
    )
    trace = KernelTrace("t", [k])
    again = KernelTrace.from_dict(trace.to_dict())
    assert again == trace and again[0].launch_op == op
    fresh = refresh_costs(again, strict=True)[0]
    assert (fresh.dram_read_bytes, fresh.dram_write_bytes) == (4 * 34, 4 * 17) and fresh.measured == k.measured
    assert launch_of(Kernel("Memset (Device)", "x", "memset", "forward", 0, 0, 64)).nbytes == 64


@pytest.mark.parametrize(
    "bad",
    [
        {"name": 3},
        {"name": "aten::mm", "input_dims": [[1, "a"]]},
        {"name": "aten::mm", "input_types": [1]},
        {"name": "aten::mm", "call": -2},
        {"name": "aten::mm", "shapes": []},
    ],
)
def test_a_malformed_operator_call_in_a_trace_is_one_clear_error(bad):
    d = KernelTrace("t", [Kernel("k", "x", "copy", "forward", 0, 1, 1)]).to_dict()
    d["kernels"][0]["launch_op"] = bad
    with pytest.raises(TraceError, match="launch_op"):
        KernelTrace.from_dict(d)


def test_every_committed_real_step_is_costed_by_a_rule():
    for path in sorted(CORPUS.glob("*/step.trace.json.gz")):
        trace = KernelTrace.load(path)
        found = costs([k.launch_op for k in trace], [launch_of(k) for k in trace], strict=True)
        unknown = [k.name for k, c in zip(trace, found, strict=True) if not c.known]
        assert not unknown, f"{path.parent.name}: no rule for {unknown[:3]}"
        assert sum(c.flops for c in found if c.category == "gemm") > 0


def test_loop_kinds_and_narrow_gemms_read_from_kernel_names():
    from rlclock.workload.kernel_names import elements_per_thread, gemm_narrow_loads, loop_kind

    assert loop_kind(VEC) == "vectorized" and elements_per_thread(VEC) is None
    assert loop_kind(GENERIC) == "generic" and elements_per_thread(GENERIC) == 4
    unrolled = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>(int)"
    assert loop_kind(unrolled) == "unrolled" and elements_per_thread(unrolled) == 4
    cat = "void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<OpaqueType<2u>, unsigned int, 3>"
    assert loop_kind(cat) == "vectorized" and loop_kind(cat.replace("_vectorized", "")) == "generic"
    roll = "void at::native::roll_cuda_kernel<c10::BFloat16>(const T*, T*, long, long, long, long, long, long)"
    assert loop_kind(roll) == "generic" and elements_per_thread(roll) == 1  # a thread per element, offsets per element
    assert gemm_narrow_loads("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x256_nt_align1>") == (
        128,
        256,
        1,
    )
    assert gemm_narrow_loads("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") is None


def test_layernorm_gamma_beta_gradient_keeps_eight_rows_of_two_operands_in_flight():
    from rlclock.workload.op_costs import gamma_beta_loads

    name = "void at::native::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u, 32u, 256u, false, true, false>"
    assert gamma_beta_loads(4, name) == 8 * 2 * 4
    assert gamma_beta_loads(2) == 8 * 2 * 2  # the generator's default: PyTorch's 32 x 32 threads over 256 rows


def test_gelu_counts_its_math_per_element_by_form_and_direction():
    from rlclock.workload.op_costs import GELU_FLOPS_PER_ELEMENT

    n = 8192 * 4096
    x = (8192, 4096)
    exact = one(LaunchOp("aten::gelu", (x, ()), (BF16, ""), ("", "")))
    tanh = one(LaunchOp("aten::gelu", (x, ()), (BF16, ""), ("", "'tanh'")))
    grad = one(LaunchOp("aten::gelu_backward", (x, x, ()), (BF16, BF16, ""), ("", "", "")))
    assert exact.flops == GELU_FLOPS_PER_ELEMENT[("none", False)] * n
    assert tanh.flops == GELU_FLOPS_PER_ELEMENT[("tanh", False)] * n
    assert grad.flops == GELU_FLOPS_PER_ELEMENT[("none", True)] * n
    assert exact.flops > tanh.flops > 10 * n and grad.flops > exact.flops  # erff is dearer than tanhf
    assert (exact.read_bytes, exact.write_bytes) == (2 * n, 2 * n)  # the bytes are those of any unary op
    plain = one(LaunchOp("aten::add", (x, x, ()), (BF16, BF16, "Scalar")))
    assert plain.flops == n


def test_the_generator_takes_the_tanh_gelu_counts():
    from rlclock.workload.op_costs import GELU_FLOPS_PER_ELEMENT
    from rlclock.workload.transformer import TransformerConfig, transformer_step

    step = transformer_step(TransformerConfig(hidden=256, heads=4, seq=128, batch=2, layers=1, head=False))
    gelu = {k.op: k for k in step if k.op.startswith("gelu")}
    elems = gelu["gelu.fwd"].dram_write_bytes / 2
    assert gelu["gelu.fwd"].flops == GELU_FLOPS_PER_ELEMENT[("tanh", False)] * elems
    assert gelu["gelu.bwd"].flops == GELU_FLOPS_PER_ELEMENT[("tanh", True)] * elems


def test_a_row_reduction_keeps_one_vector_of_four_elements_in_flight():
    row = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool, at::native::func_wrapper_t<bool>>>()"
    col = "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t>>()"
    x = (16, 12, 512, 512)
    mask = one(LaunchOp("aten::all", (x, (), ()), ("bool", "Scalar", "Scalar"), ("", "-1", "True")), row)
    rows32 = one(
        LaunchOp("aten::sum", (x, (), (), ()), (F32, "ScalarList", "Scalar", ""), ("", "[3]", "True", "")), row
    )
    cols = one(
        LaunchOp("aten::sum", ((8192, 3072), (), (), ()), (BF16, "ScalarList", "Scalar", ""), ("", "[0]", "False", "")),
        col,
    )
    assert mask.mlp_bytes == 4 * 1 and rows32.mlp_bytes == 4 * 4  # one byte per bool, four per float
    assert cols.mlp_bytes == 16  # a column sum's unrolled loads: the default


def test_grouped_query_heads_write_dk_dv_per_query_head_and_reduce_them_once():
    b, h, hk, s, d = 4, 16, 4, 2048, 128
    q, kv = (b, h, s, d), (b, hk, s, d)
    op = LaunchOp("aten::_cudnn_attention_backward", (q, q, kv, kv, q, (b, h, s, 1)), (BF16,) * 5 + (F32,))
    names = [
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 128>()",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
        "void cudnn::fusion::convert_dq_to_16bits<true>()",
        "void cudnn::fusion::fmha_reduce_head<true>()",
        "void cudnn::fusion::fmha_reduce_head<true>()",
    ]
    _, main, _, rk, rv = call_costs(op, [Launch(n, grid=(132, 1, 1), block=(384, 1, 1)) for n in names], strict=True)
    per_q = b * h * s * 2 * d * 2  # dK and dV of every query head, bf16
    kv_bytes = b * hk * s * 2 * d * 2
    assert main.write_bytes == b * h * s * d * 4 + per_q  # the fp32 dQ accumulator and the per-head dK/dV
    assert rk.read_bytes + rv.read_bytes == per_q and rk.write_bytes + rv.write_bytes == kv_bytes


def test_profiler_activities_are_told_apart_by_name():
    from rlclock.workload.kernel_names import activity_kind

    assert activity_kind("Memset (Device)") == "memset" and activity_kind("Memcpy DtoD (Device -> Device)") == "memcpy"
    assert activity_kind(VEC) == "kernel"
