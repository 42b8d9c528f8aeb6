"""The transformer generator's autocast step: what torch.autocast runs over fp32 parameters, checked against the
profiled train-small-gpt step (a model of the modules the generator expresses) on the simulated H200 and H100."""

from __future__ import annotations

from collections import Counter

import pytest

from rlclock import resources
from rlclock.dvfs import model
from rlclock.dvfs.spec import get_spec
from rlclock.errors import SpecError
from rlclock.schedule import AUTO
from rlclock.workload.op_costs import refresh_costs
from rlclock.workload.trace import KernelTrace
from rlclock.workload.transformer import TransformerConfig, layer_kernels, transformer_step

SMALL = dict(style="gpt", hidden=768, heads=12, seq=512, batch=16, layers=8, vocab=256, tied_head=True, optimizer=True)
"""examples/train_small_gpt.py's model (corpus-h200/train-small-gpt)."""


def _at_auto(trace, spec) -> tuple[float, float]:
    pred = model.predict(model.kernel_arrays(list(trace), spec), spec, [AUTO])
    return float(pred.time_s.sum()), float(pred.energy_j.sum())


def test_the_autocast_step_counts_the_parameters_pytorch_holds():
    """train-small-gpt's summary gives 57 294 336 parameters: tied head, learned positions, biases, norms."""
    assert TransformerConfig(**SMALL, autocast=True).n_params == 57294336
    pure = TransformerConfig(**SMALL)  # the pure graph's count is kept as it was
    assert pure.n_params == pure.layers * pure.params_per_layer + pure.vocab * pure.hidden + 2 * pure.hidden


def test_an_autocast_layer_casts_weights_runs_norms_and_the_residual_in_fp32():
    fwd, bwd = layer_kernels(TransformerConfig(**SMALL, autocast=True))
    ops = [k.op for k in fwd]
    for linear in ("qkv.fwd", "attnproj.fwd", "fc.fwd", "proj.fwd"):
        i = next(j for j, k in enumerate(fwd) if k.op == linear and k.category == "gemm")
        assert f"{linear}.weight_cast" in ops[:i] and ops[i - 1] == linear and fwd[i - 1].category == "memset"
    assert all(
        k.dtype == "fp32"
        for k in fwd + bwd
        if k.category == "norm" or (k.op.startswith("residual") and k.category == "elementwise")
    )
    kinds = Counter(k.category for k in fwd)
    assert kinds["copy"] == 10 and kinds["gemm"] == 4  # weight and bias casts of four layers, two input casts
    assert sum(k.op.endswith("wgrad_cast") for k in bwd) == 4
    step = transformer_step(TransformerConfig(**SMALL, autocast=True))
    adamw = next(k for k in step if k.phase == "optimizer")
    n = TransformerConfig(**SMALL, autocast=True).n_params
    assert adamw.dram_read_bytes == 16 * n and adamw.dram_write_bytes == 12 * n  # fp32 p, g, m, v in; p, m, v out


@pytest.mark.parametrize("gpu, corpus", [("h200-sxm", "corpus-h200"), ("h100-sxm", "corpus-h100")])
def test_the_generated_small_gpt_step_is_the_profiled_one_within_the_targets(gpu, corpus):
    """Both from shapes alone on the same simulated GPU at auto: time within 10 %, energy within 15 % (the pure bf16
    graph, without the casts, fp32 norms, loss and optimizer, is 28 % short)."""
    spec = get_spec(gpu)
    profiled = refresh_costs(KernelTrace.load(resources.measurement(f"{corpus}/train-small-gpt/step.trace.json.gz")))
    tp, ep = _at_auto(profiled, spec)
    tg, eg = _at_auto(transformer_step(TransformerConfig(**SMALL, autocast=True)), spec)
    assert abs(tg / tp - 1) <= 0.10 and abs(eg / ep - 1) <= 0.15
    t0, _ = _at_auto(transformer_step(TransformerConfig(**SMALL)), spec)
    assert t0 / tp - 1 < -0.2


@pytest.mark.parametrize(
    "change, match",
    [
        ({"dtype": "fp32"}, r"autocast runs in bf16 or fp16"),
        ({"tied_head": "yes"}, r"'tied_head' must be true or false"),
        ({"autocast": 1}, r"'autocast' must be true or false"),
    ],
)
def test_a_bad_autocast_config_gets_one_line(change, match):
    with pytest.raises(SpecError, match=match):
        TransformerConfig(**{**SMALL, "autocast": True, **change})
