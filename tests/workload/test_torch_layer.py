"""The PyTorch layer has the generator's parameters and runs forward + backward (on the CPU here)."""

from __future__ import annotations

import pytest
import torch

from rlclock.errors import SpecError
from rlclock.workload.torch_layer import LayerStep, torch_dtype
from rlclock.workload.transformer import TransformerConfig


@pytest.mark.parametrize("style,kv", [("gpt", None), ("llama", 2)])
def test_layer_matches_the_generator_and_trains(style, kv):
    cfg = TransformerConfig(
        hidden=64, heads=4, kv_heads=kv, seq=16, batch=2, layers=1, head=False, style=style, dtype="fp32"
    )
    step = LayerStep(cfg, device="cpu")
    assert sum(p.numel() for p in step.layer.parameters()) == cfg.params_per_layer
    step()
    assert step.x.grad is not None and step.x.grad.shape == (2, 16, 64)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in step.layer.parameters())
    step.zero_grad()
    assert step.x.grad is None and all(p.grad is None for p in step.layer.parameters())


def test_dtypes():
    assert torch_dtype("bf16") is torch.bfloat16 and torch_dtype("fp32") is torch.float32
    with pytest.raises(SpecError):
        torch_dtype("fp8")
