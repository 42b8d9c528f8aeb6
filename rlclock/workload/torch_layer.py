"""A transformer decoder layer in PyTorch, built from a :class:`~rlclock.workload.transformer.TransformerConfig`.

The layer is what the analytic generator counts: GPT style (LayerNorm, biased linears, causal SDPA, tanh
GELU) or Llama style (RMSNorm, rotary embeddings, grouped-query SDPA, SwiGLU, no biases). Parameters and
activations are stored in the config's dtype (no autocast, so no casts of fp32 master weights), as the
generator assumes. :class:`LayerStep` runs forward and backward from static tensors, ready for CUDA-graph
capture: the layer's input requires a gradient, as for any layer but the first.
"""

from __future__ import annotations

from typing import Any

from rlclock.errors import SpecError
from rlclock.workload.transformer import TransformerConfig

_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}


def torch_dtype(name: str) -> Any:
    """The ``torch.dtype`` of a trace dtype name (``fp8`` is not supported for training here)."""
    import torch

    if name not in _TORCH_DTYPES:
        raise SpecError(f"dtype {name!r} cannot be profiled in PyTorch.", f"use one of {sorted(_TORCH_DTYPES)}.")
    return getattr(torch, _TORCH_DTYPES[name])


def build_layer(cfg: TransformerConfig, device: str = "cuda", seed: int = 0) -> Any:
    """One decoder layer as a ``torch.nn.Module`` on ``device`` in the config's dtype."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(seed)
    h, f, heads, kvh, d = cfg.hidden, cfg.ffn_dim, cfg.heads, cfg.n_kv_heads, cfg.head_dim
    kv = kvh * d

    class GptLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(h)
            self.qkv = nn.Linear(h, h + 2 * kv)
            self.proj = nn.Linear(h, h)
            self.ln2 = nn.LayerNorm(h)
            self.fc = nn.Linear(h, f)
            self.fcproj = nn.Linear(f, h)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split([h, kv, kv], dim=-1)
            q = q.view(b, t, heads, d).transpose(1, 2)
            k = k.view(b, t, kvh, d).transpose(1, 2)
            v = v.view(b, t, kvh, d).transpose(1, 2)
            y = _attention(q, k, v, cfg.causal, heads != kvh)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, h))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class LlamaLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.RMSNorm(h)
            self.qkv = nn.Linear(h, h + 2 * kv, bias=False)
            self.o = nn.Linear(h, h, bias=False)
            self.norm2 = nn.RMSNorm(h)
            self.gate_up = nn.Linear(h, 2 * f, bias=False)
            self.down = nn.Linear(f, h, bias=False)
            pos = torch.arange(cfg.seq, dtype=torch.float32)
            inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            ang = torch.outer(pos, inv)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def rope(self, x: torch.Tensor) -> torch.Tensor:
            x1, x2 = x[..., : d // 2], x[..., d // 2 :]
            cos, sin = torch.as_tensor(self.cos).to(x.dtype), torch.as_tensor(self.sin).to(x.dtype)
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split([h, kv, kv], dim=-1)
            q = self.rope(q.view(b, t, heads, d).transpose(1, 2))
            k = self.rope(k.view(b, t, kvh, d).transpose(1, 2))
            v = v.view(b, t, kvh, d).transpose(1, 2)
            y = _attention(q, k, v, cfg.causal, heads != kvh)
            x = x + self.o(y.transpose(1, 2).reshape(b, t, h))
            g, u = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(g) * u)

    layer = GptLayer() if cfg.style == "gpt" else LlamaLayer()
    return layer.to(device=device, dtype=torch_dtype(cfg.dtype))


def _attention(q: Any, k: Any, v: Any, causal: bool, gqa: bool) -> Any:
    import torch.nn.functional as F

    if gqa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


class LayerStep:
    """Forward and backward of one layer from static input and output-gradient tensors.

    Args:
        cfg: The layer's shape (``batch × seq`` tokens of width ``hidden``).
        device: Torch device.
        seed: Seed of weights and data (random normal data: never zeros, which run faster).
    """

    def __init__(self, cfg: TransformerConfig, device: str = "cuda", seed: int = 0) -> None:
        import torch

        self.cfg = cfg
        self.layer = build_layer(cfg, device, seed)
        dt = torch_dtype(cfg.dtype)
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        self.x = torch.randn(cfg.batch, cfg.seq, cfg.hidden, device=device, dtype=dt, generator=gen)
        self.x.requires_grad_(True)
        self.dy = torch.randn(cfg.batch, cfg.seq, cfg.hidden, device=device, dtype=dt, generator=gen) * 1e-2

    def zero_grad(self) -> None:
        """Drop all gradients (``None``), so a captured backward allocates them from the graph's pool."""
        self.x.grad = None
        for p in self.layer.parameters():
            p.grad = None

    def forward(self) -> Any:
        """The layer's output."""
        return self.layer(self.x)

    def __call__(self) -> None:
        """One forward and backward."""
        self.forward().backward(self.dy)
