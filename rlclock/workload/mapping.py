"""Map profiled kernels onto the analytic kernels of :mod:`rlclock.workload.transformer`.

A profiled layer launches more kernels than the generator counts (copies for layouts, gradient
accumulation, cuBLAS / cuDNN helpers) and sometimes fewer (fused attention backward). The mapping
aligns the two sequences, per pass, in order: a profiled kernel may take an analytic kernel's FLOPs,
bytes and GEMM shape when their categories agree (or are compatible: a copy for an elementwise kernel)
and, for GEMMs whose launching operator gave its shapes, when the shapes agree. GEMMs left over (e.g.
weight- before input-gradient) are paired by shape afterwards.

What cannot be mapped gets its cost from its operator's shapes (:mod:`rlclock.workload.op_costs`), and
failing that only its measured time (FLOPs and bytes 0). Nothing is ever NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from rlclock.workload.op_costs import Cost, Launch, costs, gemm_bmnk, kernel_fields
from rlclock.workload.trace import Kernel, LaunchOp, Measurement
from rlclock.workload.transformer import TransformerConfig, layer_kernels

_COMPATIBLE = {
    frozenset({"elementwise", "copy"}),
    frozenset({"reduction", "copy"}),
    frozenset({"reduction", "elementwise"}),
}
_NEG = -1e9


@dataclass(frozen=True)
class ProfiledEntry:
    """One kernel (or memcpy) of the captured step, as profiled.

    Attributes:
        name: Kernel name (demangled), or ``"memcpy"``.
        category: Category from name and operator.
        phase: ``"forward"`` or ``"backward"``.
        time_s: In-sequence duration, seconds (median over replays).
        grid: Launch grid.
        block: Launch block.
        op: Launching operator (from the eager profile), if known.
        nbytes: Bytes of a memcpy, if known.
    """

    name: str
    category: str
    phase: str
    time_s: float
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    op: LaunchOp | None = None
    nbytes: int | None = None

    @property
    def bmnk(self) -> tuple[int, int, int, int] | None:
        """GEMM ``(batch, m, n, k)`` from the operator's input shapes, when it is a matrix product."""
        return gemm_bmnk(self.op) if self.category == "gemm" else None


@dataclass
class MappingStats:
    """How the profiled kernels were mapped.

    Attributes:
        mapped: Profiled entries that took an analytic kernel's FLOPs and bytes.
        estimated: Entries with an estimate from their operator's shapes.
        time_only: Entries with only their measured time.
        unmatched_analytic: Ops of analytic kernels without a profiled counterpart.
        pairs: ``(profiled index, analytic op)`` of every mapping.
    """

    mapped: int = 0
    estimated: int = 0
    time_only: int = 0
    unmatched_analytic: list[str] = field(default_factory=list)
    pairs: list[tuple[int, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "mapped": self.mapped,
            "estimated": self.estimated,
            "time_only": self.time_only,
            "unmatched_analytic": list(self.unmatched_analytic),
        }


def _same_gemm(a: tuple[int, int, int, int], b: tuple[int, int, int, int], exact: bool = False) -> bool:
    """Same product: equal ``(b, m, n, k)``, or (unless ``exact``) the transposed one ``(b, n, m, k)``."""
    if a == b:
        return True
    return not exact and a[0] == b[0] and a[3] == b[3] and (a[1], a[2]) == (b[2], b[1])


_GENERIC_TOKENS = {"kernel", "void", "native", "at", "bwd", "fwd", "cuda", "impl", "flash", "vectorized"}


def _tokens(name: str) -> set[str]:
    out = set()
    word = []
    for ch in name.lower() + " ":
        if ch.isalnum():
            word.append(ch)
        else:
            if len(word) >= 3:
                out.add("".join(word))
            word = []
    return out - _GENERIC_TOKENS


def _score(p: ProfiledEntry, k: Kernel) -> float:
    if p.phase != k.phase:
        return _NEG
    if p.category == k.category:
        s = 3.0 + 0.5 * len(_tokens(p.name) & _tokens(k.name))  # e.g. "convert_dq", "dot_do_o"
        bmnk = p.bmnk
        if bmnk is not None and k.gemm_bmnk is not None:
            if not _same_gemm(bmnk, k.gemm_bmnk):
                return _NEG
            s += 3.0 if _same_gemm(bmnk, k.gemm_bmnk, exact=True) else 1.0
        return s
    if frozenset({p.category, k.category}) in _COMPATIBLE:
        return 1.0
    return _NEG


def align(profiled: Sequence[ProfiledEntry], analytic: Sequence[Kernel]) -> dict[int, int]:
    """Order-preserving alignment maximising the total score (Needleman–Wunsch, gaps free).

    Returns:
        ``{profiled index: analytic index}``.
    """
    n, m = len(profiled), len(analytic)
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            s = _score(profiled[i - 1], analytic[j - 1])
            diag = best[i - 1][j - 1] + s if s > _NEG / 2 else _NEG
            best[i][j] = max(best[i - 1][j], best[i][j - 1], diag)
    out: dict[int, int] = {}
    i, j = n, m
    while i > 0 and j > 0:  # on ties, leave later analytic kernels unmatched: profiled kernels take the earliest
        s = _score(profiled[i - 1], analytic[j - 1])
        if math.isclose(best[i][j], best[i][j - 1]):
            j -= 1
        elif s > _NEG / 2 and math.isclose(best[i][j], best[i - 1][j - 1] + s):
            out[i - 1] = j - 1
            i, j = i - 1, j - 1
        else:
            i -= 1
    return out


def estimate(entries: Sequence[ProfiledEntry]) -> list[Cost]:
    """Each entry's cost from its operator call's shapes (:func:`rlclock.workload.op_costs.costs`)."""
    launches = [
        Launch(e.name, "memcpy" if e.name == "memcpy" else "kernel", e.grid, e.block, e.nbytes) for e in entries
    ]
    return costs([e.op for e in entries], launches)


def map_to_kernels(
    entries: Sequence[ProfiledEntry], cfg: TransformerConfig, gpu: str
) -> tuple[list[Kernel], MappingStats]:
    """Kernels of the trace: analytic FLOPs/bytes where mapped, estimates or measured time otherwise.

    Args:
        entries: The profiled kernels of one layer's forward and backward, in order.
        cfg: The layer's configuration (its analytic kernels are the reference).
        gpu: GPU name for the in-sequence measurements.

    Returns:
        One :class:`Kernel` per entry (each with its in-sequence :class:`Measurement`), and the statistics.
    """
    fwd, bwd = layer_kernels(cfg)
    analytic = [*fwd, *bwd]
    pairs = align(entries, analytic)
    taken = set(pairs.values())
    for exact in (True, False):  # GEMMs out of the generator's order, paired by shape (exact shapes first)
        for i, e in enumerate(entries):
            if i in pairs or e.bmnk is None:
                continue
            for j, k in enumerate(analytic):
                if (
                    j not in taken
                    and k.category == "gemm"
                    and k.phase == e.phase
                    and k.gemm_bmnk is not None
                    and _same_gemm(e.bmnk, k.gemm_bmnk, exact)
                ):
                    pairs[i] = j
                    taken.add(j)
                    break
    stats = MappingStats(unmatched_analytic=[k.op for j, k in enumerate(analytic) if j not in taken])
    kernels: list[Kernel] = []
    extra = 0
    estimates = estimate(entries)
    for i, e in enumerate(entries):
        meas = (Measurement(gpu=gpu, time_s=e.time_s, source="in-sequence"),)
        grid = e.grid if e.grid and all(x > 0 for x in e.grid) else None
        block = e.block if e.block and all(x > 0 for x in e.block) else None
        if i in pairs:
            a = analytic[pairs[i]]
            kernels.append(
                Kernel(
                    name=e.name,
                    op=a.op,
                    category=a.category,
                    phase=a.phase,
                    flops=a.flops,
                    dram_read_bytes=a.dram_read_bytes,
                    dram_write_bytes=a.dram_write_bytes,
                    dtype=a.dtype,
                    layer=0,
                    gemm_bmnk=a.gemm_bmnk,
                    mlp_bytes=a.mlp_bytes,
                    access=a.access,
                    launch_grid=grid,
                    launch_block=block,
                    measured=meas,
                )
            )
            stats.mapped += 1
            stats.pairs.append((i, a.op))
            continue
        extra += 1
        est = estimates[i]
        if est.known:
            stats.estimated += 1
        else:
            stats.time_only += 1
        opname = (e.op.name.split("::")[-1] if e.op else e.category).strip("_") or e.category
        kernels.append(
            Kernel(
                name=e.name,
                op=f"extra.{e.phase[:3]}.{opname}.{extra}",
                phase=e.phase,
                layer=0,
                launch_grid=grid,
                launch_block=block,
                measured=meas,
                launch_op=e.op,
                **kernel_fields(est),
            )
        )
    return kernels, stats


def refresh_analytic(trace_kernels: Sequence[Kernel], cfg: TransformerConfig) -> list[Kernel]:
    """Re-derive the analytic fields of mapped kernels from the current generator (measurements kept).

    A profiled trace stores the FLOPs, bytes, GEMM shape, access class and memory-level parallelism of the
    generator as it was when the trace was mapped. When the generator improves, this brings a committed
    trace up to date by operation name; kernels the generator does not know are left as they are.
    """
    from dataclasses import replace

    fwd, bwd = layer_kernels(cfg)
    by_op = {k.op: k for k in (*fwd, *bwd)}
    out = []
    for k in trace_kernels:
        a = by_op.get(k.op)
        if a is not None:
            k = replace(
                k,
                category=a.category,
                flops=a.flops,
                dram_read_bytes=a.dram_read_bytes,
                dram_write_bytes=a.dram_write_bytes,
                gemm_bmnk=a.gemm_bmnk,
                mlp_bytes=a.mlp_bytes,
                access=a.access,
            )
        out.append(k)
    return out
