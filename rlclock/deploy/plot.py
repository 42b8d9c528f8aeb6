"""One controlled step, drawn: its kernels on the GPU's timeline, the clocks they asked for, and where each switch
landed — as planned and as the step ran (``rlclock apply --save DIR`` writes ``DIR/step.png``).

matplotlib with the non-interactive Agg backend, as :mod:`rlclock.plots`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlclock.deploy.plan import SwitchPlan
from rlclock.deploy.timeline import StepTimeline
from rlclock.schedule import ClockSchedule


def _core_mhz(config: Any, auto_mhz: float) -> float:
    return float(auto_mhz if config.core_mhz is None else config.core_mhz)


def chosen_step(delivered: Any) -> int | None:
    """The judged step to draw: the one whose delivered slowdown is the median's (``None`` without one)."""
    rows = [r for r in getattr(delivered, "per_step", []) if int(r[1]) == 0]
    if not rows:
        return None
    times = np.array([r[2] for r in rows])
    return int(rows[int(np.argsort(times)[len(times) // 2])][0])


def plot_step(
    path: str | Path,
    schedule: ClockSchedule,
    timeline: StepTimeline,
    plan: SwitchPlan,
    delivered: Any = None,
    step: int | None = None,
    auto_mhz: float | None = None,
) -> Path:
    """Write a PNG of one step (module docstring).

    Args:
        path: The PNG to write.
        schedule: The deployed schedule (the configuration each kernel asks for).
        timeline: Where the kernels run, seconds after the step's anchor.
        plan: The controller's switches (planned landings).
        delivered: The report's :class:`~rlclock.deploy.delivered.Delivered` (its per-switch record places the
            landings of ``step`` as it ran); ``None``: the plan alone.
        step: The step to draw the landings of (default: :func:`chosen_step`).
        auto_mhz: The core clock drawn for the driver's own (default: 1980 MHz, the H100's and H200's highest, or
            the highest the schedule names if higher).
    """
    from rlclock.plots import _plt, _save

    plt = _plt()
    locked = [c.core_mhz for c in schedule.configs if c.core_mhz is not None]
    auto = float(auto_mhz if auto_mhz is not None else max([1980, *locked]))
    start_ms, dur_ms = timeline.start_s * 1e3, timeline.duration_s * 1e3
    asked = np.array([_core_mhz(schedule[i], auto) for i in range(len(schedule))])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5.2), sharex=True, height_ratios=[3, 1])
    top.step(
        np.append(start_ms, start_ms[-1] + dur_ms[-1]),
        np.append(asked, asked[-1]),
        where="post",
        lw=1.2,
        color="tab:blue",
        label="requested core clock (the driver's drawn at its highest)",
    )
    lo, hi = min(asked.min(), auto) - 60, max(asked.max(), auto) + 60
    for i, e in enumerate(plan.events):
        top.axvline(e.land_s * 1e3, color="tab:green", ls="--", lw=0.9, label="planned landing" if i == 0 else None)
    if step is None:
        step = chosen_step(delivered)
    title = f"{schedule.name}: {len(schedule)} kernels, {plan.n_switches} switches per step"
    if delivered is not None and step is not None:
        ran = [s for s in delivered.switches if int(s[0]) == step and np.isfinite(s[5])]
        for i, s in enumerate(ran):
            top.plot(
                [s[5] * 1e3],
                [hi - 35],
                marker="v",
                color="tab:red",
                ms=8,
                label=f"landed, step {step}" if i == 0 else None,
            )
        row = next((r for r in delivered.per_step if int(r[0]) == step), None)
        if row is not None and np.isfinite(delivered.auto_time_s):
            title += (
                f"; step {step} {delivered.verb} {100 * (1 - row[3] / delivered.auto_energy_j):.2f} % energy at "
                f"{100 * (row[2] / delivered.auto_time_s - 1):+.2f} % time (planned "
                f"{100 * delivered.planned_saving:.2f} % at {100 * delivered.planned_slowdown:+.2f} %)"
            )
    top.set_ylim(lo, hi)
    top.set_ylabel("core clock (MHz)")
    top.legend(loc="lower right", fontsize=8)
    top.set_title(title, fontsize=9)
    cmap = plt.get_cmap("viridis")
    norm = (asked - asked.min()) / max(1.0, float(np.ptp(asked)))
    bottom.broken_barh(
        list(zip(start_ms, np.maximum(dur_ms, 1e-3), strict=True)),
        (0, 1),
        facecolors=[cmap(x) for x in norm],
        linewidth=0,
    )
    bottom.set_yticks([])
    bottom.set_ylabel("kernels")
    bottom.set_xlabel("time after the step's anchor (ms; kernels where the timeline places them)")
    fig.tight_layout()
    return _save(plt, fig, path)
