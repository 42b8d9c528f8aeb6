"""Workloads: kernel traces, their features, and generators (the paper's llm.c step, generic layers)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlclock.errors import SpecError
from rlclock.workload.trace import Kernel, KernelTrace, Measurement

__all__ = ["Kernel", "KernelTrace", "Measurement", "build_workload"]


def build_workload(spec: Mapping[str, Any], base_dir: Path | None = None) -> KernelTrace:
    """Build a trace from an env spec's ``workload`` mapping.

    Forms:
        ``{generator: llmc, batch, seq, hidden, heads, layers, vocab_padded, paper_measurements}``: the
        paper's llm.c GPT step; ``{generator: transformer, hidden, heads, kv_heads, ffn, seq, batch, layers,
        style, dtype, vocab, head, optimizer, autocast, tied_head}``: a generic decoder (``autocast``: the step
        ``torch.autocast`` runs over fp32 parameters); ``{trace: path, refresh_costs}``: a trace
        file (a relative path is taken from the working directory, the spec's folder or its parent, then the
        shipped measurements, e.g. ``corpus-h200/bert-base/step.trace.json.gz``); with
        ``refresh_costs: true`` the FLOPs and bytes of its profiled kernels are derived again by this version's
        rules (:func:`rlclock.workload.op_costs.refresh_costs`), measurements kept.
    """
    spec = dict(spec)
    if "trace" in spec:
        extra = set(spec) - {"trace", "refresh_costs"}
        if extra:
            raise SpecError(f"workload: a trace file takes only 'refresh_costs' besides, found {sorted(extra)}.")
        refresh = spec.get("refresh_costs", False)
        if not isinstance(refresh, bool):
            raise SpecError(f"workload: refresh_costs must be true or false, found {refresh!r}.")
        path = Path(spec["trace"])
        if not path.is_absolute() and not path.exists():
            from rlclock.resources import data_dir

            near = (base_dir / path, base_dir.parent / path) if base_dir is not None else ()
            for candidate in (*near, data_dir() / "measurements" / path):
                if candidate.exists():
                    path = candidate
                    break
        trace = KernelTrace.load(path)
        if refresh:
            from rlclock.workload.op_costs import refresh_costs

            trace = refresh_costs(trace)
        return trace
    gen = spec.pop("generator", None)
    try:
        if gen == "llmc":
            from rlclock.workload.llmc import LlmcConfig, gpt3xl_step

            pm = bool(spec.pop("paper_measurements", False))
            return gpt3xl_step(LlmcConfig(**spec), paper_measurements=pm)
        if gen == "transformer":
            from rlclock.workload.transformer import TransformerConfig, transformer_step

            return transformer_step(TransformerConfig(**spec))
    except TypeError as exc:
        raise SpecError(f"workload ({gen}): {exc}.") from None
    raise SpecError(f"workload: generator {gen!r} is unknown.", "use 'llmc', 'transformer', or give 'trace: FILE'.")
