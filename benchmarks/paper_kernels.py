"""The paper's physics, kernel by kernel: does the RTX 3080 Ti preset's per-kernel optimum of llm.c's GPT-3 XL step
change the clocks the paper found each kind of kernel changing, and by as much?

The paper's per-kernel findings (Spaan et al., REFERENCE §1, ``rlclock.paper``), as classes of the 46 kernel types:

* **large GEMMs** (the QKV, MLP and LM-head products and their gradients, 12 types): lower the *memory* clock
  (5001 MHz) with the core left to the driver — 2-3 % faster and 13-16 % cheaper;
* **memory-bound kernels** (layernorm, GELU, residual, bias and bias-gradient, softmax, permute, embedding, 25 types):
  keep the memory clock high and lower the *core* clock to about 630-1680 MHz — 25-33 % cheaper at ≤ 2.6 % slower;
* **attention's batched GEMMs** (Q·Kᵀ, att·V and their four gradients, 6 types): left at the driver's clocks (the
  paper's per-kernel findings as issue 43 reads them: "kernels the paper leaves at the driver's clocks");
* and a kernel lowers one clock domain, not both.

The attention output projection and its two gradients (3 types, 4.7 ms each) are GEMMs the findings do not place:
they are shown, not scored.

Each kernel type's optimum is read two ways on the paper's grid (core 210-2100 step 210 and auto × memory 405, 810,
5001, 9251, 9501): **local** — its least-energy clock pair at most 2.6 % slower than auto (the paper's per-kernel
bound); **global** — the clock pair the step's exact strict-budget optimum (Table 2's kernel-level global row) gives it
(every layer's invocation of a type gets the same). A choice *agrees in kind* when it changes the domain its class
changes (memory lowered: below 9251 MHz; core lowered: locked below 0.95 of the kernel's clock at auto; neither, for
the other GEMMs), and *in amount* when its clock and saving also sit in the class's range (large GEMMs: memory 5001
MHz, not slower than auto, saving 10-19 %; memory-bound: core 630-1680 MHz, saving 22-36 %; the published ranges ±3
pp). Printed for the preset as shipped and for the parameters before the boost-ceiling refit (commit 864f1a1's parent),
with the step's Table 2 figures beside.

    python benchmarks/paper_kernels.py [--spec FILE.yaml ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlclock import paper  # noqa: E402
from rlclock.calibration.paper import _BIG_GEMMS, paper_grid, paper_kernel_types, paper_metrics  # noqa: E402
from rlclock.dvfs import model  # noqa: E402
from rlclock.dvfs.spec import DvfsParams, GpuSpec, get_spec, load_spec_file  # noqa: E402
from rlclock.schedule import ClockConfig  # noqa: E402
from rlclock.solve.optimum import knapsack_optimum  # noqa: E402

BEFORE_REFIT = dict(
    v_min_v=0.71,
    v_max_v=1.08,
    f_ridge_mhz=1458.07,
    p_const_w=8.63442,
    k_leak_w_per_v=40.0195,
    c_clock_w=35.4832,
    c_tensor_w=67.8944,
    c_simt_w=24.4381,
    e_xbar_j_per_byte=1.36707e-11,
    p_mem_bg_w=131.362,
    e_dram_j_per_byte=3.78765e-11,
    eta_gemm=0.999121,
    eta_attention=0.6,
    eta_stream=0.960271,
    eta_gather=0.571678,
    eta_reduce=0.616972,
    simt_ops_per_byte=24.3094,
    lat_core_cycles=50.0366,
    lat_mem_cycles=4346.88,
    smooth_p=11.8081,
    launch_s=6.69603e-07,
)
"""The RTX 3080 Ti preset's model before the boost-ceiling refit (``git show 864f1a1^:rlclock/dvfs/presets/
rtx3080ti.yaml``; the terms added since default to off)."""

MEM_HIGH = 9251
"""A memory clock at or above this is "kept high" (the paper's 9251 and 9501 MHz)."""
CORE_LOWERED = 0.95
"""A locked core clock below this share of the kernel's clock at auto lowers the core."""
MARGIN_PP = 3.0
"""How far outside a published saving range an amount still agrees (points)."""


@dataclass(frozen=True)
class Choice:
    """One kernel type's optimum: the clock pair, its time and energy change against auto (%), kind and amount."""

    config: ClockConfig
    time_pct: float
    saving_pct: float
    kind: str  # "memory", "core", "both", "auto"
    agrees_kind: bool
    agrees_amount: bool


def kernel_class(i: int, k) -> str:
    """The paper's class of kernel type ``i``: ``large GEMM``, ``memory-bound``, ``attention GEMM`` or ``unplaced``
    (a GEMM the findings do not place)."""
    if k.uses_tensor_cores:
        return (
            "large GEMM"
            if i in _BIG_GEMMS
            else "attention GEMM"
            if k.category == "attention" or ".attn" in f".{k.op}"
            else "unplaced"
        )
    return "memory-bound"


def classify(config: ClockConfig, auto_core_mhz: float) -> str:
    """Which domains a clock pair lowers from auto."""
    mem = config.mem_mhz is not None and config.mem_mhz < MEM_HIGH
    core = config.core_mhz is not None and config.core_mhz < CORE_LOWERED * auto_core_mhz
    return "both" if mem and core else "memory" if mem else "core" if core else "auto"


def judge(cls: str, config: ClockConfig, kind: str, time_pct: float, saving_pct: float) -> tuple[bool, bool]:
    """Whether a choice agrees with its class in kind and in amount (module docstring)."""
    if cls == "unplaced":
        return False, False
    want = {"large GEMM": "memory", "memory-bound": "core", "attention GEMM": "auto"}[cls]
    if kind != want:
        return False, False
    if cls == "large GEMM":
        lo, hi = paper.GEMM_MEM5001_SAVING_PCT
        return True, config.mem_mhz == 5001 and time_pct <= 0.0 and lo - MARGIN_PP <= saving_pct <= hi + MARGIN_PP
    if cls == "memory-bound":
        f_lo, f_hi = paper.MEMBOUND_CORE_MHZ
        lo, hi = paper.MEMBOUND_SAVING_PCT
        core = config.core_mhz or 0
        return True, (
            f_lo <= core <= f_hi
            and time_pct <= paper.MEMBOUND_MAX_SLOWDOWN_PCT + 1e-9
            and lo - MARGIN_PP <= saving_pct <= hi + MARGIN_PP
        )
    return True, True


def optima(spec: GpuSpec) -> dict[str, list[Choice]]:
    """Each kernel type's local and global choice (module docstring)."""
    types, mult = paper_kernel_types()
    grid = list(paper_grid(spec))
    pred = model.predict(model.kernel_arrays(types, spec), spec, grid)
    t, e = pred.time_s, pred.energy_j
    auto_core = pred.core_mhz[:, 0]
    out: dict[str, list[Choice]] = {"local": [], "global": []}
    # global: the step's strict optimum, on the step's invocations (every layer the same), read per type
    reps = np.repeat(np.arange(len(types)), mult.astype(int))
    pick = knapsack_optimum(t[reps], e[reps], float((t[:, 0] * mult).sum())).requests
    for i, k in enumerate(types):
        cls = kernel_class(i, k)
        ok = t[i] <= t[i, 0] * (1 + paper.MEMBOUND_MAX_SLOWDOWN_PCT / 100)
        local = int(np.flatnonzero(ok)[np.argmin(e[i][ok])])
        common = Counter(int(j) for j in pick[reps == i]).most_common(1)[0][0]
        for which, j in (("local", local), ("global", common)):
            tp, sp = 100 * (t[i, j] / t[i, 0] - 1), 100 * (1 - e[i, j] / e[i, 0])
            kind = classify(grid[j], auto_core[i])
            out[which].append(Choice(grid[j], tp, sp, kind, *judge(cls, grid[j], kind, tp, sp)))
    return out


def score(spec: GpuSpec, label: str, detail: bool) -> None:
    types, mult = paper_kernel_types()
    got = optima(spec)
    m = paper_metrics(spec)
    share = np.array([mult[i] * m.time_s[i] for i in range(len(types))])
    share /= share.sum()
    print(f"\n## {label}")
    print(
        f"Table 2 on this model (LP relaxation, as the fit reads it): kernel-level global "
        f"{m.kernel_global_pct:+.2f} % (paper {paper.TABLE2['kernel-global'][1]:+.2f}), local "
        f"{m.kernel_local_pct[1]:+.2f} % at "
        f"{m.kernel_local_pct[0]:+.2f} % time (paper {paper.TABLE2['kernel-local'][1]:+.2f} / "
        f"{paper.TABLE2['kernel-local'][0]:+.2f}), pass-level {m.pass_local_pct[1]:+.2f} % (paper "
        f"{paper.TABLE2['pass-local'][1]:+.2f}), lowest energy {m.min_energy_pct[1]:+.2f} % at "
        f"{m.min_energy_pct[0]:+.1f} % time (paper {paper.TABLE2['kernel-min-energy'][1]:+.1f} / "
        f"{paper.TABLE2['kernel-min-energy'][0]:+.0f})"
    )
    classes = [kernel_class(i, k) for i, k in enumerate(types)]
    scored = [c != "unplaced" for c in classes]
    for which in ("local", "global"):
        ch = [c for c, s in zip(got[which], scored) if s]
        kind = sum(c.agrees_kind for c in ch)
        amount = sum(c.agrees_amount for c in ch)
        tw_kind = float(sum(s for s, c in zip(share[scored], ch) if c.agrees_kind) / share[scored].sum())
        both = sum(c.kind == "both" for c in ch)
        kept = [x for x in classes if x != "unplaced"]
        per = "; ".join(
            f"{cls} {sum(c.agrees_kind for c, x in zip(ch, kept) if x == cls)}/"
            f"{sum(x == cls for x in kept)} in kind, "
            f"{sum(c.agrees_amount for c, x in zip(ch, kept) if x == cls)} in amount"
            for cls in ("large GEMM", "memory-bound", "attention GEMM")
        )
        print(
            f"{which:6s}: agrees in kind on {kind}/{len(ch)} kernel types ({100 * tw_kind:.0f} % of the step's "
            f"time), in amount on {amount}/{len(ch)}; both domains lowered on {both} ({per})"
        )
    if detail:
        print(
            f"{'#':>3s} {'kernel':26s} {'class':12s} {'local choice':>14s} {'time':>7s} {'save':>6s} {'kind':7s} "
            f"{'global choice':>14s} {'time':>7s} {'save':>6s} {'kind':7s}"
        )
        for i, k in enumerate(types):
            cells = []
            for c in (got["local"][i], got["global"][i]):
                mark = (
                    "-" if classes[i] == "unplaced" else "ok" if c.agrees_amount else "kind" if c.agrees_kind else "NO"
                )
                cells.append(f"{c.config!s:>14s} {c.time_pct:+6.1f}% {c.saving_pct:5.1f}% {c.kind:4s} {mark:4s}")
            print(f"{i:3d} {k.op[:26]:26s} {classes[i]:12s} {cells[0]} {cells[1]}")


def before_refit() -> GpuSpec:
    spec = get_spec("rtx3080ti")
    defaults = DvfsParams(**BEFORE_REFIT)
    return replace(spec, model=defaults)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, action="append", default=[], help="also score this GPU spec file")
    parser.add_argument("--brief", action="store_true", help="summaries only, no per-kernel table")
    args = parser.parse_args(argv)
    score(before_refit(), "RTX 3080 Ti preset before the boost-ceiling refit (864f1a1^)", not args.brief)
    score(get_spec("rtx3080ti"), "RTX 3080 Ti preset as shipped", not args.brief)
    for path in args.spec:
        score(load_spec_file(path), f"spec file {path}", not args.brief)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
