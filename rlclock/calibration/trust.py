"""A calibration a user can trust: the fit's held-out error, its warnings, and its refusal.

:func:`calibrate` fits a base spec to a sweep (:func:`~rlclock.calibration.sweep.fit_sweep`: only the parameters the
rows inform, each inside its documented range, the voltage not falling as the clock rises and the power floor not
above an idle reading), then judges it on kernels it was not fitted to: the sweep's kernels are split into ``folds``
groups, and each group is predicted by a fit to the others (k-fold over kernels). Where the fits predict the held-out
kernels worse than the spec they started from, or the fit breaks a physical constraint, the calibration is refused —
one line, nothing written (:class:`~rlclock.errors.SpecError`). Every fitted parameter that ended at an end of its
range is named in a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlclock.calibration.sweep import (
    SweepRow,
    at_bounds,
    check_rows,
    fit_sweep,
    idle_readings,
    plan_fit,
    predictions,
    reference_rows,
    violations,
)
from rlclock.dvfs.spec import GpuSpec, out_of_range
from rlclock.errors import SpecError

FOLDS = 5
"""Groups of kernels the held-out check splits a sweep into (fewer when it has fewer kernels)."""
TIME_TARGET = 0.10
"""A held-out kernel is predicted well when its time is within this fraction at every clock of the sweep …"""
ENERGY_TARGET = 0.15
"""… and its energy within this one."""


@dataclass(frozen=True)
class HeldOut:
    """Held-out errors of a k-fold over a sweep's kernels: each kernel predicted by a fit to the other folds and by the
    base spec, at every reading of it.

    Attributes:
        folds: Groups the kernels were split into.
        kernel: The kernel of each held-out reading.
        time_base: ``|t_pred / t - 1|`` of the base spec per reading.
        time_fit: The same for the fits that did not see the reading's kernel.
        energy_base: ``|e_pred / e - 1|`` of the base spec per reading.
        energy_fit: The same for the fits.
    """

    folds: int
    kernel: np.ndarray
    time_base: np.ndarray
    time_fit: np.ndarray
    energy_base: np.ndarray
    energy_fit: np.ndarray

    @property
    def kernels(self) -> list[str]:
        return list(dict.fromkeys(self.kernel.tolist()))

    def score(self, which: str) -> float:
        """Mean absolute log error of time plus that of energy over the held-out readings (``which``: ``base`` or
        ``fit``) — what the refusal compares."""
        t, e = (self.time_base, self.energy_base) if which == "base" else (self.time_fit, self.energy_fit)
        return float(np.mean(np.abs(np.log1p(t))) + np.mean(np.abs(np.log1p(e))))

    def within(self, which: str, time_tol: float = TIME_TARGET, energy_tol: float = ENERGY_TARGET) -> int:
        """Held-out kernels whose every reading is within ``time_tol`` in time and ``energy_tol`` in energy."""
        t, e = (self.time_base, self.energy_base) if which == "base" else (self.time_fit, self.energy_fit)
        return sum(
            bool(np.all(t[self.kernel == k] <= time_tol) and np.all(e[self.kernel == k] <= energy_tol))
            for k in self.kernels
        )

    def summary(self) -> str:
        """One line: median held-out errors, fitted against base, and kernels within the targets."""

        def pct(a: np.ndarray) -> str:
            return f"{100 * float(np.median(a)):.1f} %"

        n = len(self.kernels)
        return (
            f"held out ({self.folds}-fold over {n} kernels): time error median {pct(self.time_fit)} (base spec "
            f"{pct(self.time_base)}), energy {pct(self.energy_fit)} (base {pct(self.energy_base)}); within "
            f"{100 * TIME_TARGET:.0f} % in time and {100 * ENERGY_TARGET:.0f} % in energy at every clock: "
            f"{self.within('fit')} of {n} kernels (base {self.within('base')})"
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "folds": self.folds,
            "kernels": len(self.kernels),
            "time_median_fit": round(float(np.median(self.time_fit)), 5),
            "time_median_base": round(float(np.median(self.time_base)), 5),
            "energy_median_fit": round(float(np.median(self.energy_fit)), 5),
            "energy_median_base": round(float(np.median(self.energy_base)), 5),
            "within_fit": self.within("fit"),
            "within_base": self.within("base"),
        }


def fold_of(kernels: Sequence[str], folds: int) -> dict[str, int]:
    """Each kernel's fold: kernels dealt round-robin in the order they first appear (deterministic)."""
    return {k: i % folds for i, k in enumerate(dict.fromkeys(kernels))}


def held_out(
    base: GpuSpec, rows: Sequence[SweepRow], folds: int = FOLDS, max_nfev: int = 300, anchored: bool = False
) -> HeldOut | None:
    """k-fold over the rows' kernels (``idle`` rows stay in every training set); ``None`` with fewer than two kernels.
    ``anchored``: each held-out kernel is anchored on its reading at its highest core clock (the one reading of it
    the prediction takes), which is then left out of its errors."""
    names = [r.kernel for r in rows if not r.is_idle]
    distinct = list(dict.fromkeys(names))
    if len(distinct) < 2:
        return None
    k = min(folds, len(distinct))
    fold = fold_of(distinct, k)
    kernel, tb, tf, eb, ef = [], [], [], [], []
    for i in range(k):
        train = [r for r in rows if r.is_idle or fold[r.kernel] != i]
        test = [r for r in rows if not r.is_idle and fold[r.kernel] == i]
        fitted, _ = fit_sweep(base, train, max_nfev, anchored=anchored)
        t_meas = np.array([r.time_s for r in test])
        e_meas = np.array([r.energy_j for r in test])
        (t_b, e_b, _), (t_f, e_f, _) = predictions(base, test, anchored), predictions(fitted, test, anchored)
        keep = np.ones(len(test), bool)
        if anchored:
            keep[reference_rows(test, np.unique([r.kernel for r in test], return_inverse=True)[1])] = False
        kernel += [r.kernel for r, k in zip(test, keep) if k]
        tb.append(np.abs(t_b / t_meas - 1)[keep])
        tf.append(np.abs(t_f / t_meas - 1)[keep])
        eb.append(np.abs(e_b / e_meas - 1)[keep])
        ef.append(np.abs(e_f / e_meas - 1)[keep])
    return HeldOut(k, np.array(kernel), *(np.concatenate(a) for a in (tb, tf, eb, ef)))


@dataclass(frozen=True)
class Calibration:
    """A calibration that passed its checks.

    Attributes:
        spec: The fitted spec.
        figures: In-sample errors before and after (:func:`~rlclock.calibration.sweep.fit_sweep`).
        fitted: The parameters fitted (the others stay as the base holds them).
        held_out: The k-fold check (``None`` for a sweep of one kernel: nothing to hold out).
        warnings: Fitted parameters at an end of their range, and base parameters outside theirs.
    """

    spec: GpuSpec
    figures: dict[str, float]
    fitted: tuple[str, ...]
    held_out: HeldOut | None
    warnings: tuple[str, ...]


def calibrate(
    base: GpuSpec, rows: Sequence[SweepRow], folds: int = FOLDS, max_nfev: int = 300, anchored: bool = False
) -> Calibration:
    """Fit ``base`` to ``rows`` and check the fit (module docstring); ``anchored``: each kernel anchored on its reading
    at its highest core clock (:func:`~rlclock.calibration.sweep.predictions`).

    Raises:
        SpecError: The rows cannot calibrate ``base``; the fit is unphysical; or it predicts held-out kernels worse
            than ``base``.
    """
    if folds < 2:
        raise SpecError(f"the held-out check needs at least 2 folds, got {folds}.", "give --folds 2 or more.")
    check_rows(rows, base, "sweep")
    _start, time_names, power_names = plan_fit(base, rows, anchored)
    names = time_names + power_names
    fitted, figures = fit_sweep(base, rows, max_nfev, anchored=anchored)
    bad = violations(fitted, idle_readings(rows), names)
    if bad:
        raise SpecError(
            f"the fit of {base.key} to the sweep is unphysical: {'; '.join(bad)}; no spec was written.",
            "check the table's units and idle rows, or leave out the kernels the model cannot describe "
            "(--drop; the per-kernel errors of rlclock calibrate --check show which).",
        )
    check = held_out(base, rows, folds, max_nfev, anchored)
    if check is not None and check.score("fit") > check.score("base"):
        raise SpecError(
            f"the fitted model predicts kernels it was not fitted to worse than the {base.key} spec it "
            f"started from — {check.summary()}; no spec was written.",
            "measure more kinds of kernel (rlclock calibrate --suite lists them), leave out kernels the "
            "model cannot describe (--drop), or keep the base spec.",
        )
    warnings = [
        f"{w}: the rows pushed it there, so it may stand in for another term's misfit" for w in at_bounds(fitted, names)
    ]
    kept = [n for n in fitted.model.as_dict() if n not in names]
    warnings += [f"{w} (the base spec's, not fitted)" for w in out_of_range(fitted.model, kept)]
    return Calibration(fitted, figures, names, check, tuple(warnings))
