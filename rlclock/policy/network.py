"""The policy network as plain numpy: an MLP of hidden layers and an action head (no torch at deployment)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ACTIVATIONS = ("tanh", "relu")


@dataclass(frozen=True)
class PolicyWeights:
    """An MLP: hidden layers ``(W, b)`` with an activation, then the action head ``(W, b)`` (float64)."""

    hidden: tuple[tuple[np.ndarray, np.ndarray], ...]
    head: tuple[np.ndarray, np.ndarray]
    activation: str = "tanh"

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic actions (argmax of the logits) for a batch of observations ``(N, obs)``."""
        h = np.asarray(obs, dtype=np.float64)
        for w, b in self.hidden:
            h = h @ w.T + b
            h = np.tanh(h) if self.activation == "tanh" else np.maximum(h, 0.0)
        return np.argmax(h @ self.head[0].T + self.head[1], axis=-1)

    def activate(self, h: np.ndarray) -> None:
        """Apply the activation to ``h`` in place."""
        if self.activation == "tanh":
            np.tanh(h, out=h)
        else:
            np.maximum(h, 0.0, out=h)

    def logits_from_first(self, h: np.ndarray) -> np.ndarray:
        """The action logits of one decision from its first layer's pre-activation ``h`` (overwritten): the
        remaining layers and the head."""
        self.activate(h)
        for w, b in self.hidden[1:]:
            h = w @ h
            h += b
            self.activate(h)
        z = self.head[0] @ h
        z += self.head[1]
        return z

    def logits_from_first_rows(self, h: np.ndarray) -> np.ndarray:
        """``(m, actions)`` logits of ``m`` decisions from their first layer's pre-activations ``(m, H)``
        (overwritten): :meth:`logits_from_first` row by row, as matrix products."""
        self.activate(h)
        for w, b in self.hidden[1:]:
            h = h @ w.T
            h += b
            self.activate(h)
        z = h @ self.head[0].T
        z += self.head[1]
        return z

    def tensors(self) -> dict[str, np.ndarray]:
        """The weights by name, float32 (the checkpoint's ``policy.safetensors``)."""
        out = {}
        for i, (w, b) in enumerate(self.hidden):
            out[f"hidden.{i}.weight"], out[f"hidden.{i}.bias"] = w, b
        out["head.weight"], out["head.bias"] = self.head
        return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}

    @classmethod
    def from_tensors(cls, t: dict[str, np.ndarray], activation: str) -> PolicyWeights:
        """Weights from :meth:`tensors` output (``KeyError`` for a missing tensor)."""
        n = len([k for k in t if k.startswith("hidden.") and k.endswith(".weight")])
        hidden = tuple(
            (t[f"hidden.{i}.weight"].astype(np.float64), t[f"hidden.{i}.bias"].astype(np.float64)) for i in range(n)
        )
        return cls(hidden, (t["head.weight"].astype(np.float64), t["head.bias"].astype(np.float64)), activation)
