from __future__ import annotations

from pathlib import Path

import pytest

from rlclock.errors import SpecError, TraceError
from rlclock.workload import build_workload
from rlclock.workload.llmc import LlmcConfig, gpt3xl_step, kernel_types, paper_index, paper_table
from rlclock.workload.transformer import TransformerConfig, transformer_step


def test_llmc_step_structure(paper_trace):
    assert len(paper_trace) == 2 + 24 * 12 + 5 + 24 * 25 + 2 == 897
    # layers forward in order, then the head, then layers backward in reverse order
    fwd_layers = [k.layer for k in paper_trace[2:290]]
    assert fwd_layers[0] == 0 and fwd_layers[-1] == 23
    assert [k.op for k in paper_trace[290:295]] == [
        "lm_head.fwd",
        "classifier",
        "lm_head.dinp",
        "lm_head.dweight",
        "lnf.bwd",
    ]
    assert paper_trace[295].layer == 23 and paper_trace[-3].layer == 0
    assert {k.phase for k in paper_trace[:292]} == {"forward"}


def test_llmc_types_follow_the_papers_table():
    types = kernel_types(LlmcConfig())
    table = paper_table()
    assert len(types) == len(table) == 46
    gemm_rows = {r.idx for r in table if r.kernel == "GEMM"}
    assert {i for i, k in enumerate(types) if k.category == "gemm"} == gemm_rows


def test_llmc_gemm_flops_from_shapes():
    k = kernel_types(LlmcConfig())[2]  # QKV projection: M=40960, K=2048, N=6144
    assert k.gemm_bmnk == (1, 40960, 6144, 2048)
    assert k.flops == pytest.approx(2 * 40960 * 6144 * 2048, rel=1e-3)


def test_paper_measurements_are_attached_to_the_right_kernels():
    tr = gpt3xl_step(paper_measurements=True)
    idx = paper_index(tr)
    table = paper_table()
    for k, j in zip(tr, idx):
        assert k.measured[0].time_s == table[j].t_auto_s


def test_paper_measurements_only_for_the_papers_shape():
    with pytest.raises(SpecError, match="only for its shape"):
        gpt3xl_step(LlmcConfig(batch=8), paper_measurements=True)


def test_transformer_gpt_and_llama():
    gpt = transformer_step(TransformerConfig(layers=2))
    llama = transformer_step(TransformerConfig(style="llama", heads=32, kv_heads=8, layers=2))
    assert any(k.category == "attention" for k in gpt)
    assert any(k.op == "swiglu.fwd" for k in llama) and not any(k.op == "gelu.fwd" for k in llama)
    qkv_gpt = next(k for k in gpt if k.op == "qkv.fwd")
    qkv_llama = next(k for k in llama if k.op == "qkv.fwd")
    assert qkv_gpt.gemm_bmnk[2] == 3 * 2048  # MHA: q, k, v full width
    assert qkv_llama.gemm_bmnk[2] == 2048 + 2 * 8 * 64  # GQA: 8 kv heads of 64


def test_attention_backward_preprocessing_writes_the_dq_accumulator():
    """dot_do_o writes the fp32 row sums and zeroes the fp32 dQ accumulator (4 bytes per query element)."""
    cfg = TransformerConfig(style="llama", heads=32, kv_heads=8, layers=1, head=False)
    ks = {k.op: k for k in transformer_step(cfg)}
    q_elems = cfg.batch * cfg.seq * cfg.hidden
    assert ks["attn.bwd.pre"].dram_write_bytes == 4 * q_elems + 4 * cfg.batch * cfg.heads * cfg.seq
    assert ks["attn.bwd.pre"].dram_read_bytes == 2 * 2 * q_elems  # dO and O, bf16
    assert ks["attn.bwd.dq"].dram_read_bytes == 4 * q_elems  # the accumulator it converts


def test_attention_flops_scale_with_sequence_squared():
    a = next(k for k in transformer_step(TransformerConfig(seq=1024, layers=1)) if k.op == "attn.fwd")
    b = next(k for k in transformer_step(TransformerConfig(seq=2048, layers=1, batch=2)) if k.op == "attn.fwd")
    assert b.flops / a.flops == pytest.approx(2.0, rel=0.01)  # same tokens, twice the sequence


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(hidden=100, heads=16), "divisible"),
        (dict(kv_heads=5), "kv_heads"),
        (dict(style="bert"), "style"),
        (dict(dtype="int4"), "dtype"),
        (dict(batch=0), "'batch'"),
    ],
)
def test_bad_transformer_configs(kw, needle):
    with pytest.raises(SpecError, match=needle):
        TransformerConfig(**kw)


def test_build_workload_forms(tmp_path):
    tr = build_workload({"generator": "transformer", "layers": 1, "head": False})
    path = tr.save(tmp_path / "t.json")
    assert build_workload({"trace": str(path)}) == tr
    with pytest.raises(SpecError, match="only 'refresh_costs'"):
        build_workload({"trace": str(path), "batch": 2})
    with pytest.raises(SpecError, match="true or false"):
        build_workload({"trace": str(path), "refresh_costs": "yes"})
    with pytest.raises(SpecError, match="unknown"):
        build_workload({"generator": "resnet"})
    with pytest.raises(SpecError):
        build_workload({"generator": "llmc", "bogus": 1})


def test_random_training_family_never_draws_a_held_out_workload():
    """Generalisation is judged on shapes the policy never saw: no random training workload may share its
    generator, style, width, sequence, batch and grouped-query layout with a held-out one."""
    from rlclock.config import load_env_specs

    def key(spec):
        w = spec.workload
        return (w.get("generator"), w.get("style"), w.get("hidden"), w.get("seq"), w.get("batch"), w.get("kv_heads"))

    held = {key(s) for s in load_env_specs("heldout-rtx3080ti")}
    train = load_env_specs(["family-rtx3080ti", "family-rtx3080ti-random"])
    assert len(train) > 100
    assert not held & {key(s) for s in train}


def test_trace_workloads_can_take_this_versions_costs(tmp_path):
    """A profiled step saved with stale FLOPs and bytes gets them derived again from its operator calls."""
    from dataclasses import replace

    from rlclock.resources import data_dir
    from rlclock.workload.trace import KernelTrace

    path = data_dir() / "measurements" / "corpus-h200" / "train-small-gpt" / "step.trace.json.gz"
    fresh = build_workload({"trace": str(path), "refresh_costs": True})
    stale = KernelTrace.load(path)
    stale = stale.with_kernels(
        [replace(k, flops=1.0, dram_read_bytes=1.0) if k.launch_op is not None else k for k in stale]
    )
    stale_path = stale.save(tmp_path / "stale.trace.json")
    assert build_workload({"trace": str(stale_path)}) == stale != fresh
    assert build_workload({"trace": str(stale_path), "refresh_costs": True}) == fresh


def test_a_corpus_family_takes_every_profiled_step(tmp_path):
    from rlclock.config import load_env_specs
    from rlclock.config.family import corpus_family

    specs = load_env_specs("corpus-h100")
    assert [s.name for s in specs] == sorted(s.name for s in specs) and len(specs) == 10
    assert {s.gpu.key for s in specs} == {"h100-sxm"} and all(s.workload["refresh_costs"] for s in specs)
    assert "bert-base" in {s.name for s in specs}
    with pytest.raises(SpecError, match="not found"):
        corpus_family(tmp_path / "nowhere")
    with pytest.raises(SpecError, match="holds no trace"):
        corpus_family(tmp_path)
    build_workload({"generator": "transformer", "layers": 1, "head": False}).save(tmp_path / "mine.trace.json")
    (tmp_path / "family.yaml").write_text("family: {corpus: ., base: gpt3xl-h200, refresh_costs: false}\n")
    (mine,) = load_env_specs(tmp_path / "family.yaml")
    assert mine.name == "mine" and mine.workload["refresh_costs"] is False and len(mine.build_trace()) > 0
    assert Path(mine.workload["trace"]).is_absolute()


def test_a_corpus_family_can_take_each_step_at_several_latencies(tmp_path):
    """``latency_scales`` adds a copy of every profiled step at the base's switching latency times each other
    scale (the step itself first); a scale that is not positive, or one given twice, is refused in one line naming
    the field."""
    from rlclock.config import load_env_specs

    build_workload({"generator": "transformer", "layers": 1, "head": False}).save(tmp_path / "mine.trace.json")
    (tmp_path / "family.yaml").write_text("family: {corpus: ., base: gpt3xl-h200, latency_scales: [1, 0.5, 2]}\n")
    specs = load_env_specs(tmp_path / "family.yaml")
    assert [s.name for s in specs] == ["mine", "mine-latency-x0.5", "mine-latency-x2"]
    base = specs[0].latency_s
    assert base == pytest.approx(specs[0].gpu.switch_latency_s)
    assert [s.latency_s for s in specs] == pytest.approx([base, 0.5 * base, 2 * base])
    assert len({s.workload["trace"] for s in specs}) == 1
    for bad in ("[1, 0]", "[1, 0.5, 1]"):
        (tmp_path / "bad.yaml").write_text(f"family: {{corpus: ., base: gpt3xl-h200, latency_scales: {bad}}}\n")
        with pytest.raises(SpecError, match="latency_scales"):
            load_env_specs(tmp_path / "bad.yaml")


def test_a_shipped_corpus_member_finds_its_trace_from_anywhere(tmp_path, monkeypatch):
    """A member of a shipped corpus names its trace relative to the shipped measurements, so the spec a checkpoint
    keeps (its first training spec) loads in any install and from any working directory."""
    from rlclock.config import load_env_spec, load_env_specs

    bert = next(s for s in load_env_specs("corpus-h200") if s.name == "bert-base")
    assert bert.workload["trace"] == "corpus-h200/bert-base/step.trace.json.gz"
    monkeypatch.chdir(tmp_path)
    again = load_env_spec(dict(bert.raw))
    assert again.build_trace() == bert.build_trace() and "bert-base" in again.raw["description"]
    with pytest.raises(TraceError, match="does not exist"):
        build_workload({"trace": "corpus-h200/no-such-model/step.trace.json.gz"})
