"""Profiled kernels → analytic kernels; categories from names; the profiler's Chrome trace parsed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlclock.workload.kernel_names import classify, short_name
from rlclock.workload.mapping import ProfiledEntry, align, estimate, gemm_bmnk, map_to_kernels
from rlclock.workload.torch_profile import parse_chrome_trace
from rlclock.workload.trace import KernelTrace, LaunchOp
from rlclock.workload.transformer import TransformerConfig, layer_kernels

H200 = json.loads((Path(__file__).resolve().parents[1] / "data" / "h200_gpt3xl_layer_kernels.json").read_text())


def h200_entries() -> list[ProfiledEntry]:
    return [ProfiledEntry(e["name"], classify(e["name"]), e["phase"], e["time_s"]) for e in H200["entries"]]


def test_the_h200_layer_maps_onto_the_generator():
    cfg = TransformerConfig(**H200["config"])
    kernels, stats = map_to_kernels(h200_entries(), cfg, "NVIDIA H200")
    assert stats.mapped == 33 and stats.time_only == 0 and stats.unmatched_analytic == []
    ops = [k.op for k in kernels]
    assert ops[:3] == ["ln1.fwd", "qkv.fwd", "attn.fwd"]
    i = next(j for j, k in enumerate(kernels) if "convert_dq" in k.name)
    assert ops[i] == "attn.bwd.dq"  # the cuDNN dQ conversion, not the concatenation after it
    cat = next(j for j, k in enumerate(kernels) if "CatArrayBatchedCopy" in k.name)
    assert ops[cat] == "qkv.cat.bwd"  # the q/k/v gradient concatenation, with its analytic bytes
    assert kernels[cat].dram_bytes == pytest.approx(2 * 2 * 8192 * 3 * 2048) and kernels[cat].measured
    assert all(math.isfinite(k.flops) and math.isfinite(k.dram_bytes) for k in kernels)
    KernelTrace("h200", kernels)  # validates


def test_gemm_shapes_from_operators():
    assert gemm_bmnk(LaunchOp("aten::addmm", ((6144,), (8192, 2048), (2048, 6144)))) == (1, 8192, 6144, 2048)
    assert gemm_bmnk(LaunchOp("aten::mm", ((2048, 8192), (8192, 8192)))) == (1, 2048, 8192, 8192)
    assert gemm_bmnk(LaunchOp("aten::bmm", ((4, 8, 16), (4, 16, 32)))) == (4, 8, 32, 16)
    assert gemm_bmnk(LaunchOp("aten::mm", ((3, 4), (5, 6)))) is None
    assert gemm_bmnk(LaunchOp("aten::add", ((3, 4), (3, 4)))) is None


def test_gemms_out_of_order_are_paired_by_shape():
    cfg = TransformerConfig(hidden=64, heads=4, seq=16, batch=2, layers=1, head=False)
    m, h, f = cfg.tokens, cfg.hidden, cfg.ffn_dim
    # backward starts with proj's weight gradient before its input gradient (swapped against the generator)
    wgrad = ProfiledEntry(
        "nvjet_wgrad", "gemm", "backward", 1e-5, op=LaunchOp("aten::mm", ((h, m), (m, f)), ("c10::BFloat16",) * 2)
    )
    dgrad = ProfiledEntry(
        "nvjet_dgrad", "gemm", "backward", 1e-5, op=LaunchOp("aten::mm", ((m, h), (h, f)), ("c10::BFloat16",) * 2)
    )
    kernels, stats = map_to_kernels([wgrad, dgrad], cfg, "gpu")
    assert [k.op for k in kernels] == ["proj.wgrad", "proj.dgrad"]
    assert stats.mapped == 2


def test_unmapped_kernels_get_estimates_never_nan():
    add = ProfiledEntry(
        "vectorized_elementwise_kernel",
        "elementwise",
        "forward",
        2e-6,
        op=LaunchOp("aten::add", ((4, 8), (4, 8), ()), ("c10::BFloat16", "c10::BFloat16", "Scalar")),
    )
    copy = ProfiledEntry("memcpy", "copy", "forward", 1e-6, nbytes=4096)
    mystery = ProfiledEntry("mystery", "other", "forward", 1e-6)
    a, c, m = estimate([add, copy, mystery])
    assert (a.flops, a.read_bytes, a.write_bytes, a.category) == (32.0, 128.0, 64.0, "elementwise")
    assert (c.flops, c.read_bytes, c.write_bytes, c.category) == (0.0, 4096.0, 4096.0, "copy")
    assert not m.known and (m.flops, m.read_bytes, m.write_bytes) == (0.0, 0.0, 0.0)
    cfg = TransformerConfig(hidden=64, heads=4, seq=16, batch=2, layers=1, head=False)
    kernels, stats = map_to_kernels([add, ProfiledEntry("mystery", "other", "backward", 1e-6)], cfg, "gpu")
    assert stats.estimated + stats.time_only == 2 or stats.mapped >= 1
    for k in kernels:
        assert math.isfinite(k.flops) and k.measured[0].time_s > 0


def test_alignment_respects_passes_and_categories():
    cfg = TransformerConfig(hidden=64, heads=4, seq=16, batch=2, layers=1, head=False)
    analytic = [*layer_kernels(cfg)[0], *layer_kernels(cfg)[1]]
    entries = [
        ProfiledEntry("layer_norm", "norm", "forward", 1e-6),
        ProfiledEntry("gemm", "gemm", "backward", 1e-6),
        ProfiledEntry("layer_norm_grad", "norm", "backward", 1e-6),
    ]
    pairs = align(entries, analytic)
    assert analytic[pairs[0]].op == "ln1.fwd"
    assert analytic[pairs[1]].phase == "backward" and analytic[pairs[1]].category == "gemm"
    assert analytic[pairs[2]].op == "ln2.bwd.dx"  # a backward norm never takes a forward norm's numbers
    assert align([ProfiledEntry("x", "softmax", "forward", 1e-6)], analytic) == {}


@pytest.mark.parametrize(
    ("name", "op", "cat"),
    [
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", None, "gemm"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26", None, "attention"),
        ("void cudnn::fusion::compute_dot_do_o_specialized<true>(int)", None, "reduction"),
        ("void cudnn::fusion::convert_dq_to_16bits<true>(int)", None, "copy"),
        ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float>(int)", None, "norm"),
        ("void at::native::reduce_kernel<512, 1>(int)", "aten::sum", "reduction"),
        ("void at::native::vectorized_elementwise_kernel<4>(int)", "aten::add", "elementwise"),
        ("void at::native::elementwise_kernel<128, 4>(int)", "aten::copy_", "copy"),
        ("something_new", None, "other"),
    ],
)
def test_classify(name, op, cat):
    assert classify(name, op) == cat


def test_short_name_drops_templates_and_arguments():
    assert (
        short_name("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(int)")
        == "at::native::reduce_kernel"
    )


def test_chrome_trace_parsing_links_operators_and_passes():
    data = {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "rlclock.forward", "ts": 0.0, "dur": 50.0, "args": {}},
            {"ph": "X", "cat": "user_annotation", "name": "rlclock.backward", "ts": 100.0, "dur": 50.0, "args": {}},
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::addmm",
                "ts": 1.0,
                "dur": 5.0,
                "args": {
                    "External id": 7,
                    "Input Dims": [[8], [4, 2], [2, 8]],
                    "Input type": ["float", "float", "float"],
                },
            },
            {"ph": "X", "cat": "kernel", "name": "gemm_b", "ts": 120.0, "dur": 3.0, "args": {"External id": 9}},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "gemm_a",
                "ts": 10.0,
                "dur": 2.5,
                "args": {"External id": 7, "grid": [4, 1, 1], "block": [128, 1, 1]},
            },
            {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 9.0, "dur": 1.0, "args": {"bytes": 4}},
            {"ph": "i", "cat": "kernel", "name": "ignored", "ts": 11.0},
        ]
    }
    ev = parse_chrome_trace(data)
    assert [e.name for e in ev] == ["Memset", "gemm_a", "gemm_b"]
    assert ev[0].kind == "memset" and ev[0].nbytes == 4
    a = ev[1]
    assert a.op == LaunchOp("aten::addmm", ((8,), (4, 2), (2, 8)), ("float", "float", "float"), call=7)
    assert a.grid == (4, 1, 1) and a.phase == "forward" and a.dur_us == 2.5
    assert ev[2].phase == "backward" and ev[2].op is None
    assert parse_chrome_trace({}) == []
