"""Calibrating a GPU from a clock sweep: the microbenchmark suite, the sweep table, and its fit.

A sweep runs each kernel of :func:`suite` at about ten core clocks per memory clock (:func:`sweep_configs`) and
records its time and energy, plus the idle power; its rows (:class:`SweepRow`) are the CSV a user can also bring
from elsewhere (:mod:`rlclock.calibration.table`). :func:`fit_sweep` fits the GPU's physical DVFS parameters
(:data:`SWEEP_FIT_NAMES`) to the rows, starting from a base preset, and :func:`write_preset` stores the result as
a GPU spec file with its provenance, which every command accepts (``--gpu my-gpu.yaml``, ``gpu_file:``).

Without hardware, :func:`rlclock.dvfs.variants.hidden_gpu` draws a "true" GPU whose parameters differ from a
preset within documented ranges, and :func:`simulated_sweep` measures the suite on it (with noise) — the proof that
the fit recovers a GPU it was not given (``tests/calibration/test_calibrate.py``, ``benchmarks/calibrate_hidden.py``).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlclock.calibration.fit import BOUNDS, fit
from rlclock.dvfs import model
from rlclock.dvfs.spec import GpuSpec, spec_to_mapping, write_spec_file
from rlclock.errors import SpecError
from rlclock.schedule import ClockConfig
from rlclock.workload.trace import TENSOR_CATEGORIES, Kernel

IDLE = "idle"
"""The row name of an idle-power reading (no kernel; ``time_s`` the window, ``energy_j`` its energy)."""
SIMT_STREAM_FMAS = 32
"""Dependent multiply-adds per element of the suite's SIMT stream (8 FLOPs per byte moved: SIMT-bound below about
1.4 GHz on an H200, with the instructions per byte a third of its SIMT work)."""
SMEM_KERNEL = "smem_bound"
"""The suite's on-chip loop: the one kernel of the suite that counts its shared-memory bytes."""
SMEM_BYTES_PER_FLOP = 2.0
"""Shared-memory bytes the suite's on-chip loop counts per FLOP: every iteration each element takes a multiply-add
and its share of a column sum and a multiply (4 FLOPs) and passes through shared memory once each way (8 bytes)."""


@dataclass(frozen=True)
class SweepRow:
    """One measurement of a sweep: a kernel (or ``idle``) at a clock pair.

    Attributes:
        kernel: The kernel's name (``idle`` for an idle-power window).
        flops: Its floating-point operations (an FMA counts 2).
        read_bytes: Bytes it reads from device memory.
        write_bytes: Bytes it writes.
        category: Its category (``gemm``, ``elementwise`` … :data:`rlclock.workload.trace.CATEGORIES`).
        dtype: Its arithmetic type (``bf16`` …).
        core_mhz: The locked core clock, MHz.
        mem_mhz: The memory clock, MHz.
        time_s: Its measured time, seconds (the window, for ``idle``).
        energy_j: Its measured energy, joules.
        access: How it touches DRAM (``stream``, ``gather``, ``reduce``).
        blocks: Thread blocks of its launch (0: unknown; the GPU taken as full).
        threads_per_block: Threads per block of its launch (0: unknown).
        gemm_mnk: ``(m, n, k)`` of a matrix product, when it is one.
        onchip_bytes: Bytes it moves through shared memory, when it counts them (0: none).
    """

    kernel: str
    flops: float
    read_bytes: float
    write_bytes: float
    category: str
    dtype: str
    core_mhz: int
    mem_mhz: int
    time_s: float
    energy_j: float
    access: str = "stream"
    blocks: int = 0
    threads_per_block: int = 0
    gemm_mnk: tuple[int, int, int] | None = None
    onchip_bytes: float = 0.0

    @property
    def is_idle(self) -> bool:
        return self.kernel == IDLE


def suite(spec: GpuSpec) -> list[Kernel]:
    """The microbenchmark suite, sized for ``spec`` (each kernel runs long enough to time at any clock):
    an FMA-bound SIMT kernel, tensor-core GEMMs at two shapes, a DRAM stream, a DRAM stream with thirty-two
    multiply-adds per element (its SIMT time, known FLOPs plus the instructions per byte ``simt_ops_per_byte``,
    binds below a knee), an L2-resident stream (fits in half the L2), a shared-memory-bound kernel (data held on
    chip, reduced across threads every iteration: its shared-memory traffic, ``onchip_bytes``), a wide and a narrow
    reduction and a stream launched on too few threads to hide DRAM latency."""
    n_big = 4096 if spec.sm_count >= 100 else 2048
    l2_half = spec.l2_bytes / 2
    dram = 2.0 ** 30  # 1 GiB each way
    return [
        Kernel("fma_bound", "suite.fma", "elementwise", "forward", flops=2.0 * 2 ** 34, dram_read_bytes=2 ** 20,
               dram_write_bytes=2 ** 20, dtype="fp32"),
        Kernel("gemm_large", "suite.gemm_large", "gemm", "forward", flops=2.0 * 8192 ** 3,
               dram_read_bytes=2 * 2 * 8192 ** 2, dram_write_bytes=2 * 8192 ** 2, gemm_bmnk=(1, 8192, 8192, 8192)),
        Kernel("gemm_small", "suite.gemm_small", "gemm", "forward", flops=2.0 * n_big * n_big * 512,
               dram_read_bytes=2 * (2 * n_big * 512), dram_write_bytes=2 * n_big ** 2,
               gemm_bmnk=(1, n_big, n_big, 512)),
        Kernel("dram_stream", "suite.dram", "copy", "forward", flops=0.0, dram_read_bytes=dram,
               dram_write_bytes=dram, dtype="fp32"),
        Kernel("l2_stream", "suite.l2", "elementwise", "forward", flops=l2_half / 4, dram_read_bytes=l2_half / 2,
               dram_write_bytes=l2_half / 2, dtype="fp32"),
        Kernel("simt_stream", "suite.simt_stream", "elementwise", "forward", flops=SIMT_STREAM_FMAS * 2.0 * 2 ** 26,
               dram_read_bytes=2 ** 28, dram_write_bytes=2 ** 28, dtype="fp32"),
        Kernel(SMEM_KERNEL, "suite.smem", "other", "forward", flops=2.0 * 2 ** 31, dram_read_bytes=2 ** 24,
               dram_write_bytes=2 ** 24, dtype="fp32", onchip_bytes=SMEM_BYTES_PER_FLOP * 2.0 * 2 ** 31),
        Kernel("reduction", "suite.reduce", "reduction", "forward", flops=2.0 ** 28, dram_read_bytes=2.0 ** 30,
               dram_write_bytes=2.0 ** 14, dtype="fp32", access="reduce"),
        # a reduction over few blocks (as the column sums of norm backward passes): its DRAM side, not its SIMT
        # work, sets its time even where SIMT work per byte is high
        Kernel("reduction_narrow", "suite.reduce_narrow", "reduction", "forward", flops=2.0 ** 26,
               dram_read_bytes=2.0 ** 27, dram_write_bytes=2.0 ** 12, dtype="fp32", access="reduce",
               launch_grid=(max(1, spec.sm_count // 4), 1, 1),
               launch_block=(min(1024, spec.threads_per_sm // 2), 1, 1)),
        # a stream whose grid fills an eighth of the GPU's threads: bound by DRAM latency, not bandwidth
        Kernel("latency_stream", "suite.latency", "copy", "forward", flops=0.0, dram_read_bytes=2.0 ** 28,
               dram_write_bytes=2.0 ** 28, dtype="fp32", launch_grid=(max(1, spec.sm_count // 4), 1, 1),
               launch_block=(min(1024, spec.threads_per_sm // 2), 1, 1)),
    ]


def sweep_configs(spec: GpuSpec, per_memory: int = 10, mems: Sequence[int] | None = None) -> list[ClockConfig]:
    """About ``per_memory`` core clocks, evenly spread over the supported ones, at every lockable memory clock
    (the memory clock in effect only, where memory locks are not runtime) or at ``mems``."""
    if mems is None:
        mems = spec.mem_clocks_mhz if spec.runtime_memory else (spec.default_mem_mhz,)
    out: list[ClockConfig] = []
    for m in mems:
        cores = sorted(spec.core_clocks_mhz(m))
        picks = sorted({cores[round(i)] for i in np.linspace(0, len(cores) - 1, max(2, per_memory))})
        out.extend(ClockConfig(f, m) for f in picks)
    return out


def rows_from(kernels: Sequence[Kernel], configs: Sequence[ClockConfig], time_s: np.ndarray,
              energy_j: np.ndarray) -> list[SweepRow]:
    """Rows of a measured ``(kernels, configs)`` table."""
    return [SweepRow(k.name, k.flops, k.dram_read_bytes, k.dram_write_bytes, k.category, k.dtype,
                     int(c.core_mhz or 0), int(c.mem_mhz or 0), float(time_s[i, j]), float(energy_j[i, j]), k.access,
                     int(np.prod(k.launch_grid)) if k.launch_grid else 0,
                     int(np.prod(k.launch_block)) if k.launch_block else 0,
                     None if k.gemm_bmnk is None else (k.gemm_bmnk[1], k.gemm_bmnk[2], k.gemm_bmnk[3]),
                     float(k.onchip_bytes or 0.0))
            for i, k in enumerate(kernels) for j, c in enumerate(configs)]


def kernel_of(row: SweepRow, index: int = 0) -> Kernel:
    """The kernel a row measured, for the model."""
    launch = row.blocks > 0 and row.threads_per_block > 0
    return Kernel(row.kernel, f"sweep.{index}", row.category, "forward", flops=row.flops,
                  dram_read_bytes=row.read_bytes, dram_write_bytes=row.write_bytes, dtype=row.dtype,
                  access=row.access, launch_grid=(row.blocks, 1, 1) if launch else None,
                  launch_block=(row.threads_per_block, 1, 1) if launch else None,
                  gemm_bmnk=None if row.gemm_mnk is None else (1, *row.gemm_mnk),
                  onchip_bytes=row.onchip_bytes or None)


# -- the fit --------------------------------------------------------------------------------------------------

TIME_FIT_NAMES: tuple[str, ...] = ("eta_gemm", "eta_stream", "eta_reduce", "simt_ops_per_byte", "lat_core_cycles",
                                   "lat_mem_cycles", "smem_bytes_per_cycle")
"""Parameters of the model's time, fitted first to the sweep's times (time does not depend on power)."""
POWER_FIT_NAMES: tuple[str, ...] = ("v_min_v", "v_max_v", "f_ridge_mhz", "p_const_w", "k_leak_w_per_v", "c_clock_w",
                                    "c_tensor_w", "c_simt_w", "e_xbar_j_per_byte", "p_mem_bg_w", "e_dram_j_per_byte",
                                    "e_smem_j_per_byte")
"""Parameters of the model's power, fitted next to the sweep's energies and idle power."""
SWEEP_FIT_NAMES: tuple[str, ...] = TIME_FIT_NAMES + POWER_FIT_NAMES
"""Physical parameters a sweep of the suite fits (the per-class efficiencies the suite does not exercise —
attention, gathers, norms, launch overhead — stay as the base preset holds them)."""
SIMT_GEMM_FIT_NAMES: tuple[str, str] = ("eta_simt_gemm", "c_simt_gemm_w")
"""Fitted too when the rows hold a matrix product on the FP32 units (a table measured elsewhere, e.g. an SGEMM):
its achieved share of the FP32 peak (time) and its extra switching power (power)."""

_INFORMED_BY = {"eta_gemm": "tensor", "c_tensor_w": "tensor", "eta_stream": "stream", "eta_reduce": "reduce",
                "simt_ops_per_byte": "memory", "lat_core_cycles": "memory", "lat_mem_cycles": "memory",
                "e_xbar_j_per_byte": "memory", "e_dram_j_per_byte": "memory", "c_simt_w": "simt",
                "eta_simt_gemm": "simt_gemm", "c_simt_gemm_w": "simt_gemm", "smem_bytes_per_cycle": "onchip",
                "e_smem_j_per_byte": "onchip"}
"""Which kind of row informs a parameter (the others — voltage curve, static, clock and memory background power —
every row does): a table of a few kernel classes fits only what they can show and keeps the rest as the base holds
it, rather than bending a parameter no row depends on to absorb another's misfit."""


def fit_names(rows: Sequence[SweepRow]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The time and the power parameters ``rows`` can inform, in the order of :data:`TIME_FIT_NAMES` and
    :data:`POWER_FIT_NAMES` (with :data:`SIMT_GEMM_FIT_NAMES` where a row is a matrix product on the FP32 units).
    The suite informs them all; a table measured elsewhere may not (:data:`_INFORMED_BY`)."""
    kinds: set[str] = set()
    for r in rows:
        if r.is_idle:
            continue
        k = kernel_of(r)
        if k.uses_tensor_cores:
            kinds.add("tensor")
        elif k.category in TENSOR_CATEGORIES:  # a matrix product on the FP32 units: its own efficiency and power
            kinds.add("simt_gemm")
        else:
            kinds.add("simt")
            if k.dram_bytes > 0:
                kinds.update(("memory", k.access))  # stream, gather or reduce: the efficiency of its class
        if r.onchip_bytes > 0:
            kinds.add("onchip")
    def keep(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(n for n in names if n not in _INFORMED_BY or _INFORMED_BY[n] in kinds)

    extra = SIMT_GEMM_FIT_NAMES if "simt_gemm" in kinds else ()
    return keep(TIME_FIT_NAMES) + extra[:1], keep(POWER_FIT_NAMES) + extra[1:]


_BOUNDS = {**BOUNDS, "v_min_v": (0.5, 0.9), "v_max_v": (0.8, 1.2), "c_clock_w": (0.0, 300.0),
           "p_const_w": (0.0, 300.0), "k_leak_w_per_v": (0.0, 300.0), "c_tensor_w": (1.0, 800.0),
           "c_simt_w": (0.0, 800.0), "p_mem_bg_w": (0.0, 300.0), "f_ridge_mhz": (300.0, 2500.0),
           "lat_core_cycles": (10.0, 2000.0), "c_simt_gemm_w": (0.0, 800.0), "smem_bytes_per_cycle": (1.0, 512.0),
           "e_smem_j_per_byte": (0.0, 3e-10)}
"""The sweep fit's bounds: wider than the preset fits' (:data:`~rlclock.calibration.fit.BOUNDS`), so that another
GPU of a kind is reachable (the RTX 3080 Ti preset's latency in core cycles, 50.2, sits at those bounds' floor of 50:
a hidden GPU 20 % below it was fitted at the floor, 5.3 % off in time)."""


def _kernels_of(rows: Sequence[SweepRow]) -> tuple[list[Kernel], np.ndarray, list[ClockConfig], np.ndarray]:
    """The distinct kernels of the rows, each row's kernel index, the distinct clock pairs and each row's."""
    keys: dict[tuple[Any, ...], int] = {}
    kernels: list[Kernel] = []
    cfg_keys: dict[tuple[int, int], int] = {}
    ki, ci = [], []
    for r in rows:
        key = (r.kernel, r.flops, r.read_bytes, r.write_bytes, r.category, r.dtype, r.access, r.blocks,
               r.threads_per_block, r.gemm_mnk, r.onchip_bytes)
        if key not in keys:
            keys[key] = len(kernels)
            kernels.append(kernel_of(r, len(kernels)))
        ki.append(keys[key])
        ci.append(cfg_keys.setdefault((r.core_mhz, r.mem_mhz), len(cfg_keys)))
    configs = [ClockConfig(f, m) for f, m in cfg_keys]
    return kernels, np.array(ki), configs, np.array(ci)


def sweep_residuals(spec: GpuSpec, rows: Sequence[SweepRow], parts: str = "time+energy") -> np.ndarray:
    """Log errors of the model's time and energy on every kernel row, and of its idle power on every idle row
    (``parts``: ``time``, ``energy`` — with the idle power — or both). The model runs each row under the board's
    power limit, as the GPU did: a locked clock that would draw more lands lower."""
    work = [r for r in rows if not r.is_idle]
    idle = [r for r in rows if r.is_idle]
    t_pred, e_pred, p_pred = predictions(spec, rows)
    out = []
    if work:
        if "time" in parts:
            out.append(np.log(t_pred / np.array([r.time_s for r in work])))
        if "energy" in parts:
            out.append(np.log(e_pred / np.array([r.energy_j for r in work])))
    if idle and "energy" in parts:
        out.append(2 * np.log(p_pred / np.array([r.energy_j / r.time_s for r in idle])))
    return np.concatenate(out)


def predictions(spec: GpuSpec, rows: Sequence[SweepRow]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``spec`` predicts for the rows: time (s) and energy (J) of each kernel row, in order, and power (W) of
    each idle row. Each kernel row runs under the board's power limit, as on the GPU."""
    work = [r for r in rows if not r.is_idle]
    t = e = np.zeros(0)
    if work:
        kernels, ki, configs, ci = _kernels_of(work)
        pred = model.predict(model.kernel_arrays(kernels, spec), spec, configs)
        t, e = pred.time_s[ki, ci], pred.energy_j[ki, ci]
    p = np.array([model.gap_power_w(spec, r.core_mhz, r.mem_mhz) for r in rows if r.is_idle])
    return t, e, p


def check_rows(rows: Sequence[SweepRow], spec: GpuSpec, where: str) -> None:
    """Raise :class:`SpecError` unless the rows can calibrate ``spec``: every kernel at two or more core clocks,
    and every clock pair one the GPU supports."""
    work = [r for r in rows if not r.is_idle]
    if not work:
        raise SpecError(f"{where}: no kernel rows to fit.", "measure the suite (or your kernels) at several clocks.")
    clocks: dict[str, set[int]] = {}
    for r in work:
        clocks.setdefault(r.kernel, set()).add(r.core_mhz)
    single = sorted(k for k, c in clocks.items() if len(c) < 2)
    if single:
        raise SpecError(f"{where}: kernel(s) {single} measured at one core clock only, so their clock response "
                        "cannot be fitted.", "measure every kernel at about ten core clocks per memory clock "
                        "(rlclock calibrate --device N --control-clocks locks them).")
    for r in rows:
        if r.mem_mhz not in spec.clocks or r.core_mhz not in spec.clocks[r.mem_mhz]:
            raise SpecError(f"{where}: {r.kernel} at {r.core_mhz}@{r.mem_mhz} MHz is not a clock pair of "
                            f"{spec.name}.", "give the base preset of this GPU (--gpu), or fix the row.")


def fit_sweep(base: GpuSpec, rows: Sequence[SweepRow], max_nfev: int = 300,
              names: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> tuple[GpuSpec, dict[str, float]]:
    """Fit ``base``'s physical parameters (:data:`SWEEP_FIT_NAMES`; ``names``: the time and the power parameters
    to fit, by default those the rows inform, :func:`fit_names`) to a sweep.

    Returns:
        The fitted spec and the fit's figures: median and largest absolute time and energy error over the kernel
        rows, before and after (fractions).
    """
    check_rows(rows, base, "sweep")
    time_names, power_names = fit_names(rows) if names is None else names
    timed, _ = fit(base, lambda s: sweep_residuals(s, rows, "time"), time_names, max_nfev=max_nfev,
                   bounds=_BOUNDS)
    powered, _ = fit(timed, lambda s: sweep_residuals(s, rows, "energy"), power_names, max_nfev=max_nfev,
                     bounds=_BOUNDS)
    fitted, _cost = fit(powered, lambda s: sweep_residuals(s, rows), time_names + power_names, max_nfev=max_nfev,
                        bounds=_BOUNDS)
    figures = {}
    for label, s in (("before", base), ("after", fitted)):
        n = sum(not r.is_idle for r in rows)
        r = np.abs(np.expm1(sweep_residuals(s, rows)[:2 * n]))
        figures[f"time_median_{label}"] = float(np.median(r[:n]))
        figures[f"time_max_{label}"] = float(r[:n].max())
        figures[f"energy_median_{label}"] = float(np.median(r[n:]))
        figures[f"energy_max_{label}"] = float(r[n:].max())
    return fitted, figures


def write_preset(spec: GpuSpec, path: Path, key: str, name: str | None, provenance: dict[str, Any]) -> Path:
    """Write ``spec`` as a GPU spec file (the preset format) with ``provenance`` under ``sources``."""
    data = spec_to_mapping(spec)
    data.update(key=key, name=name or spec.name, fitted_to=str(provenance.get("source", "a clock sweep")),
                model={k: float(f"{v:.6g}") for k, v in spec.model.as_dict().items()})
    data["sources"] = {**dict(spec.sources), "model": "fitted by rlclock calibrate (see calibration)",
                       "calibration": yaml.safe_dump(provenance, default_flow_style=True, width=10 ** 6).strip()}
    return write_spec_file(data, path, "GPU spec calibrated by rlclock calibrate on "
                           f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}")


def simulated_sweep(true_gpu: GpuSpec, per_memory: int = 10, noise_std: float = 0.01, repeats: int = 4,
                    seed: int = 0, kernels: Sequence[Kernel] | None = None) -> list[SweepRow]:
    """The suite measured on a simulated GPU, plus idle power at each memory clock (core at its lowest): every
    value the median of ``repeats`` readings with log-normal noise of ``noise_std`` each (as a meter's windows)."""
    kernels = list(suite(true_gpu) if kernels is None else kernels)
    configs = sweep_configs(true_gpu, per_memory)
    pred = model.predict(model.kernel_arrays(kernels, true_gpu), true_gpu, configs)  # capped, as a real run
    rng = np.random.default_rng(seed)

    def noisy(a: np.ndarray) -> np.ndarray:
        return a * np.exp(np.median(rng.normal(0.0, noise_std, (max(1, repeats), *np.shape(a))), axis=0))

    rows = rows_from(kernels, configs, noisy(pred.time_s), noisy(pred.energy_j))
    for m in sorted({c.mem_mhz for c in configs if c.mem_mhz is not None}):
        f = min(true_gpu.core_clocks_mhz(m))
        w = float(noisy(np.array(model.gap_power_w(true_gpu, f, m))))
        rows.append(SweepRow(IDLE, 0.0, 0.0, 0.0, "other", "fp32", f, m, 1.0, w))
    return rows


@dataclass(frozen=True)
class Agreement:
    """How a fitted model predicts kernels against the GPU it was fitted to, at every clock pair.

    Attributes:
        time_err: ``|t_fit / t_true - 1|`` per (kernel, clock pair).
        energy_err: The same for energy.
        optimum_steps: Per kernel and memory clock, how many core-clock steps the fitted model's energy-optimal
            core clock lies from the true one.
        optimum_regret: Per kernel and memory clock, how much more energy (a fraction, on the true GPU) the fitted
            model's energy-optimal core clock costs than the true one.
        optimum_steps_tied: As ``optimum_steps``, but to the nearest core clock whose true energy is within
            ``tie`` of the true minimum: where a kernel's energy is flat over many clocks (memory-bound kernels
            below the voltage knee), any of them is an optimum and the strict argmin is set by differences no
            meter resolves.
    """

    time_err: np.ndarray
    energy_err: np.ndarray
    optimum_steps: np.ndarray
    optimum_regret: np.ndarray
    optimum_steps_tied: np.ndarray


TIE = 1e-3
"""Energy difference (a fraction of a kernel's least energy) below which two core clocks tie as its optimum in
:func:`agreement` — a tenth of one sweep reading's noise."""


def agreement(fitted: GpuSpec, true_gpu: GpuSpec, kernels: Sequence[Kernel], tie: float = TIE) -> Agreement:
    """Compare ``fitted`` with ``true_gpu`` on ``kernels`` (shapes alone) at every supported clock pair that can be
    locked for a job (:meth:`GpuSpec.config_grid`); optima within ``tie`` of the least energy count as tied."""
    configs = list(true_gpu.config_grid(auto=False))
    ka_f, ka_t = model.kernel_arrays(kernels, fitted), model.kernel_arrays(kernels, true_gpu)
    pf = model.predict(ka_f, fitted, configs)
    pt = model.predict(ka_t, true_gpu, configs)
    steps, regret, tied = [], [], []
    rows = np.arange(len(kernels))
    for m in sorted({true_gpu.effective_mem_mhz(c) for c in configs}):
        cols = [j for j, c in enumerate(configs) if true_gpu.effective_mem_mhz(c) == m]  # core clocks descending
        et = pt.energy_j[:, cols]
        best_f, best_t = np.argmin(pf.energy_j[:, cols], axis=1), np.argmin(et, axis=1)
        steps.append(np.abs(best_f - best_t))
        regret.append(et[rows, best_f] / et[rows, best_t] - 1)
        optimal = et <= et[rows, best_t][:, None] * (1.0 + tie)
        distance = np.abs(np.arange(len(cols))[None, :] - best_f[:, None])
        tied.append(np.where(optimal, distance, len(cols)).min(axis=1))
    return Agreement(np.abs(pf.time_s / pt.time_s - 1), np.abs(pf.energy_j / pt.energy_j - 1),
                     np.stack(steps, axis=1), np.stack(regret, axis=1), np.stack(tied, axis=1))
