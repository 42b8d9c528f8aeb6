"""Plots people would rather look at than read: energy-versus-slowdown Pareto plots and clock timelines.

matplotlib with the non-interactive Agg backend; every function writes a PNG and returns its path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rlclock.backends.base import RunResult
from rlclock.dvfs.spec import GpuSpec


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def pareto_plot(
    path: str | Path,
    points: Mapping[str, tuple[float, float]],
    curves: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    cloud: Sequence[tuple[float, float]] | None = None,
    budget_pct: float | None = None,
    title: str = "",
) -> Path:
    """Energy change (%) against time change (%) versus auto.

    Args:
        path: Output PNG.
        points: Named schedules: ``{name: (time %, energy %)}``.
        curves: Named frontiers, each a list of ``(time %, energy %)``.
        cloud: Unnamed points drawn faintly (e.g. every static configuration).
        budget_pct: Draw the slowdown budget as a vertical line.
        title: Figure title.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 5.0), dpi=120)
    if cloud:
        c = np.asarray(cloud)
        ax.scatter(c[:, 0], c[:, 1], s=8, c="0.8", label="static configurations", zorder=1)
    for name, pts in (curves or {}).items():
        p = np.asarray(sorted(pts))
        if p.size:
            ax.plot(p[:, 0], p[:, 1], "-o", ms=3, lw=1.5, label=name, zorder=2)
    markers = "sD^v<>pPX*h"
    for k, (name, (t, e)) in enumerate(points.items()):
        ax.scatter(
            [t], [e], marker=markers[k % len(markers)], s=55, label=name, zorder=3, edgecolors="k", linewidths=0.5
        )
    if budget_pct is not None:
        ax.axvline(budget_pct, color="0.4", ls="--", lw=1, label=f"budget +{budget_pct:g} %")
    ax.axhline(0, color="0.6", lw=0.6)
    ax.axvline(0, color="0.6", lw=0.6)
    ax.set_xlabel("step time vs auto (%)")
    ax.set_ylabel("step energy vs auto (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _save(plt, fig, path)


def clock_timeline(
    path: str | Path, run: RunResult, spec: GpuSpec, title: str = "", max_kernels: int | None = None
) -> Path:
    """Core and memory clock requested and in effect over the step's time axis (one run)."""
    plt = _plt()
    n = len(run.kernel_time_s) if max_kernels is None else min(max_kernels, len(run.kernel_time_s))
    start = run.start_s[:n] * 1e3
    dur = run.kernel_time_s[:n] * 1e3
    cfgs = run.configs

    def clocks(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        core = np.array([spec.requested_core_mhz(cfgs[i]) for i in idx], float)
        mem = np.array([spec.effective_mem_mhz(cfgs[i]) for i in idx], float)
        return core, mem

    req_core, req_mem = clocks(run.requested_index[:n])
    eff_core, eff_mem = clocks(run.config_index[:n])
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 4.6), dpi=120, sharex=True)
    edges = np.append(start, start[-1] + dur[-1])
    for ax, req, eff, label in ((a1, req_core, eff_core, "core MHz"), (a2, req_mem, eff_mem, "memory MHz")):
        ax.stairs(req, edges, color="tab:orange", lw=1.0, label="requested", baseline=None)
        ax.stairs(eff, edges, color="tab:blue", lw=1.2, label="in effect at kernel start", baseline=None)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for s in run.switch_land_s:
        if np.isfinite(s) and s * 1e3 <= edges[-1]:
            a1.axvline(s * 1e3, color="0.7", lw=0.4)
    a1.legend(fontsize=7, loc="lower right")
    a2.set_xlabel("time in step (ms)")
    a1.set_title(title, fontsize=10)
    return _save(plt, fig, path)


def _save(plt, fig, path: str | Path) -> Path:
    """Lay out, write the PNG (creating its folder) and free the figure."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
