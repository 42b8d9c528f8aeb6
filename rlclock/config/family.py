"""Families of training workloads: random decoder shapes, batches, sequences, latencies and budgets, or the
profiled steps of a corpus folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlclock.errors import SpecError

CORPUS_TRACE = "step.trace.json.gz"
"""The profiled step's trace in each model folder of a corpus (what ``benchmarks/corpus_gpu.py`` writes)."""


def random_family(base_raw: Mapping[str, Any], n: int, seed: int = 0) -> list[dict[str, Any]]:
    """The overrides of ``n`` env specs that share a base spec's GPU and action set (``base_raw``: the base
    spec as written) with randomly drawn workloads.

    Each draws: the generator (llm.c GPT, PyTorch GPT or Llama with grouped-query attention), the width
    (768–4096, heads of 64 or 128), batch and sequence (tokens per step 4 Ki–64 Ki), layers (4–10), the
    switching latency (log-uniform 5–80 ms) and the slowdown budget (0, 1 or 2 %, mostly 1 %).
    """
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        kind = rng.choice(["llmc", "gpt", "llama"], p=[0.4, 0.3, 0.3])
        hidden = int(rng.choice([768, 1024, 1280, 1536, 2048, 2560, 3072, 4096]))
        head_dim = int(rng.choice([64, 128])) if hidden >= 1024 else 64
        heads = max(1, hidden // head_dim)
        seq = int(rng.choice([512, 1024, 2048, 4096]))
        tokens = int(rng.choice([4096, 8192, 16384, 32768, 65536]))
        batch = max(1, tokens // seq)
        layers = int(rng.integers(4, 11))
        if kind == "llmc":
            workload = {
                "generator": "llmc",
                "batch": batch,
                "seq": seq,
                "hidden": hidden,
                "heads": heads,
                "layers": layers,
            }
        else:
            workload = {
                "generator": "transformer",
                "style": "gpt" if kind == "gpt" else "llama",
                "hidden": hidden,
                "heads": heads,
                "seq": seq,
                "batch": batch,
                "layers": layers,
            }
            if kind == "llama":
                kv = int(rng.choice([h for h in (1, 2, 4, 8) if heads % h == 0]))
                workload.update(kv_heads=kv, ffn=int(256 * round(hidden * 8 / 3 / 256)))
        latency = float(np.exp(rng.uniform(np.log(0.005), np.log(0.08))))
        budget = float(rng.choice([0.0, 0.01, 0.02], p=[0.15, 0.7, 0.15]))
        name = f"rand{seed}-{i}-{kind}-c{hidden}-t{seq}-b{batch}-l{layers}"
        out.append(
            {
                "name": name,
                "workload": workload,
                "switch_latency_s": round(latency, 4),
                "reward": {**dict(base_raw.get("reward", {})), "budget": budget},
            }
        )
    return out


MAX_FAMILY = 1000
"""The most env specs one family may hold (each is a step of its own to build and solve)."""


def corpus_family(folder: Path, refresh: bool = True) -> list[dict[str, Any]]:
    """The overrides of one env spec per profiled step in a corpus ``folder``: every ``*/step.trace.json.gz``
    (named after its model folder) and every ``*.trace.json`` / ``*.trace.json.gz`` directly inside it (named
    after the file), sorted by name; ``refresh``: their FLOPs and bytes derived again by this version's rules.

    Raises:
        SpecError: The folder does not exist or holds no trace.
    """
    if not folder.is_dir():
        raise SpecError(
            f"corpus folder {str(folder)!r} not found.",
            "give a folder of profiled steps (one folder per model with step.trace.json.gz, or "
            "*.trace.json files), relative to the family file, or a shipped corpus (corpus-h200).",
        )
    found = {p.parent.name: p for p in folder.glob(f"*/{CORPUS_TRACE}")}
    for p in [*folder.glob("*.trace.json"), *folder.glob("*.trace.json.gz")]:
        found.setdefault(p.name.split(".trace.json")[0], p)
    if not found:
        raise SpecError(
            f"corpus folder {str(folder)!r} holds no trace.",
            f"put one folder per model with {CORPUS_TRACE} in it, or *.trace.json files.",
        )
    if len(found) > MAX_FAMILY:
        raise SpecError(
            f"corpus folder {str(folder)!r} holds {len(found)} traces, more than a family takes ({MAX_FAMILY}).",
            "split it into several corpus folders.",
        )
    return [
        {
            "name": name,
            "description": f"{name}: a profiled training step of the corpus {folder.name!r}",
            "workload": {"trace": _trace_path(found[name]), "refresh_costs": refresh},
        }
        for name in sorted(found)
    ]


def _trace_path(path: Path) -> str:
    """How a member spec names its trace: relative to the shipped measurements where it is one of them (so a
    checkpoint's spec finds it in any install), else the absolute path."""
    from rlclock.resources import data_dir

    full = path.resolve()
    shipped = (data_dir() / "measurements").resolve()
    return str(full.relative_to(shipped)) if full.is_relative_to(shipped) else str(full)
