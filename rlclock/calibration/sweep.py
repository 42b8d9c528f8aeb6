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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlclock.calibration.fit import fit
from rlclock.dvfs import model
from rlclock.dvfs.spec import PARAMETER_RANGES, GpuSpec, out_of_range, spec_to_mapping, write_spec_file
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
    dram = 2.0**30  # 1 GiB each way
    return [
        Kernel(
            "fma_bound",
            "suite.fma",
            "elementwise",
            "forward",
            flops=2.0 * 2**34,
            dram_read_bytes=2**20,
            dram_write_bytes=2**20,
            dtype="fp32",
        ),
        Kernel(
            "gemm_large",
            "suite.gemm_large",
            "gemm",
            "forward",
            flops=2.0 * 8192**3,
            dram_read_bytes=2 * 2 * 8192**2,
            dram_write_bytes=2 * 8192**2,
            gemm_bmnk=(1, 8192, 8192, 8192),
        ),
        Kernel(
            "gemm_small",
            "suite.gemm_small",
            "gemm",
            "forward",
            flops=2.0 * n_big * n_big * 512,
            dram_read_bytes=2 * (2 * n_big * 512),
            dram_write_bytes=2 * n_big**2,
            gemm_bmnk=(1, n_big, n_big, 512),
        ),
        Kernel(
            "dram_stream",
            "suite.dram",
            "copy",
            "forward",
            flops=0.0,
            dram_read_bytes=dram,
            dram_write_bytes=dram,
            dtype="fp32",
        ),
        Kernel(
            "l2_stream",
            "suite.l2",
            "elementwise",
            "forward",
            flops=l2_half / 4,
            dram_read_bytes=l2_half / 2,
            dram_write_bytes=l2_half / 2,
            dtype="fp32",
        ),
        Kernel(
            "simt_stream",
            "suite.simt_stream",
            "elementwise",
            "forward",
            flops=SIMT_STREAM_FMAS * 2.0 * 2**26,
            dram_read_bytes=2**28,
            dram_write_bytes=2**28,
            dtype="fp32",
        ),
        Kernel(
            SMEM_KERNEL,
            "suite.smem",
            "other",
            "forward",
            flops=2.0 * 2**31,
            dram_read_bytes=2**24,
            dram_write_bytes=2**24,
            dtype="fp32",
            onchip_bytes=SMEM_BYTES_PER_FLOP * 2.0 * 2**31,
        ),
        Kernel(
            "reduction",
            "suite.reduce",
            "reduction",
            "forward",
            flops=2.0**28,
            dram_read_bytes=2.0**30,
            dram_write_bytes=2.0**14,
            dtype="fp32",
            access="reduce",
        ),
        # a reduction over few blocks (as the column sums of norm backward passes): its DRAM side, not its SIMT
        # work, sets its time even where SIMT work per byte is high
        Kernel(
            "reduction_narrow",
            "suite.reduce_narrow",
            "reduction",
            "forward",
            flops=2.0**26,
            dram_read_bytes=2.0**27,
            dram_write_bytes=2.0**12,
            dtype="fp32",
            access="reduce",
            launch_grid=(max(1, spec.sm_count // 4), 1, 1),
            launch_block=(min(1024, spec.threads_per_sm // 2), 1, 1),
        ),
        # a stream whose grid fills an eighth of the GPU's threads: bound by DRAM latency, not bandwidth
        Kernel(
            "latency_stream",
            "suite.latency",
            "copy",
            "forward",
            flops=0.0,
            dram_read_bytes=2.0**28,
            dram_write_bytes=2.0**28,
            dtype="fp32",
            launch_grid=(max(1, spec.sm_count // 4), 1, 1),
            launch_block=(min(1024, spec.threads_per_sm // 2), 1, 1),
        ),
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


def rows_from(
    kernels: Sequence[Kernel], configs: Sequence[ClockConfig], time_s: np.ndarray, energy_j: np.ndarray
) -> list[SweepRow]:
    """Rows of a measured ``(kernels, configs)`` table."""
    return [
        SweepRow(
            k.name,
            k.flops,
            k.dram_read_bytes,
            k.dram_write_bytes,
            k.category,
            k.dtype,
            int(c.core_mhz or 0),
            int(c.mem_mhz or 0),
            float(time_s[i, j]),
            float(energy_j[i, j]),
            k.access,
            int(np.prod(k.launch_grid)) if k.launch_grid else 0,
            int(np.prod(k.launch_block)) if k.launch_block else 0,
            None if k.gemm_bmnk is None else (k.gemm_bmnk[1], k.gemm_bmnk[2], k.gemm_bmnk[3]),
            float(k.onchip_bytes or 0.0),
        )
        for i, k in enumerate(kernels)
        for j, c in enumerate(configs)
    ]


def kernel_of(row: SweepRow, index: int = 0) -> Kernel:
    """The kernel a row measured, for the model."""
    launch = row.blocks > 0 and row.threads_per_block > 0
    return Kernel(
        row.kernel,
        f"sweep.{index}",
        row.category,
        "forward",
        flops=row.flops,
        dram_read_bytes=row.read_bytes,
        dram_write_bytes=row.write_bytes,
        dtype=row.dtype,
        access=row.access,
        launch_grid=(row.blocks, 1, 1) if launch else None,
        launch_block=(row.threads_per_block, 1, 1) if launch else None,
        gemm_bmnk=None if row.gemm_mnk is None else (1, *row.gemm_mnk),
        onchip_bytes=row.onchip_bytes or None,
    )


# -- the fit --------------------------------------------------------------------------------------------------

TIME_FIT_NAMES: tuple[str, ...] = (
    "eta_gemm",
    "eta_stream",
    "eta_reduce",
    "simt_ops_per_byte",
    "lat_core_cycles",
    "lat_mem_cycles",
    "smem_bytes_per_cycle",
)
"""Parameters of the model's time, fitted first to the sweep's times (time does not depend on power)."""
POWER_FIT_NAMES: tuple[str, ...] = (
    "v_min_v",
    "v_max_v",
    "f_ridge_mhz",
    "p_const_w",
    "k_leak_w_per_v",
    "c_clock_w",
    "c_tensor_w",
    "c_simt_w",
    "e_xbar_j_per_byte",
    "p_mem_bg_w",
    "e_dram_j_per_byte",
    "e_smem_j_per_byte",
)
"""Parameters of the model's power, fitted next to the sweep's energies and idle power."""
SWEEP_FIT_NAMES: tuple[str, ...] = TIME_FIT_NAMES + POWER_FIT_NAMES
"""Physical parameters a sweep of the suite fits (the per-class efficiencies the suite does not exercise —
attention, gathers, norms, launch overhead — stay as the base preset holds them)."""
SIMT_GEMM_FIT_NAMES: tuple[str, str] = ("eta_simt_gemm", "c_simt_gemm_w")
"""Fitted too when the rows hold a matrix product on the FP32 units (a table measured elsewhere, e.g. an SGEMM):
its achieved share of the FP32 peak (time) and its extra switching power (power)."""

_INFORMED_BY = {
    "eta_gemm": "tensor",
    "c_tensor_w": "tensor",
    "eta_stream": "stream",
    "eta_reduce": "reduce",
    "simt_ops_per_byte": "memory",
    "lat_core_cycles": "memory",
    "lat_mem_cycles": "memory",
    "e_xbar_j_per_byte": "memory",
    "e_dram_j_per_byte": "memory",
    "c_simt_w": "simt",
    "eta_simt_gemm": "simt_gemm",
    "c_simt_gemm_w": "simt_gemm",
    "smem_bytes_per_cycle": "onchip",
    "e_smem_j_per_byte": "onchip",
}
"""Which kind of row informs a parameter (the others — voltage curve, static, clock and memory background power —
every row does): a table of a few kernel classes fits only what they can show and keeps the rest as the base holds
it, rather than bending a parameter no row depends on to absorb another's misfit."""
PRIOR_SPREAD = 0.1
"""A parameter the rows inform only together with another (:func:`confounded`) is fitted against its base value with
a spread of this share of its range: where the rows are indifferent to the split it stays there, where they need the
sum to move (a floor far below the base's) it moves."""


def confounded(rows: Sequence[SweepRow]) -> tuple[str, ...]:
    """Parameters the rows inform only in a sum with another: the memory's background power, which scales with the
    memory clock, where every row is at one memory clock (there it adds to the constant power)."""
    return ("p_mem_bg_w",) if len({r.mem_mhz for r in rows}) < 2 else ()


def prior_residuals(spec: GpuSpec, base: GpuSpec, names: Sequence[str]) -> np.ndarray:
    """Residuals pulling ``names`` to ``base``'s values, each over :data:`PRIOR_SPREAD` of its range."""
    new, old = spec.model.as_dict(), base.model.as_dict()
    return np.array([(new[n] - old[n]) / (PRIOR_SPREAD * (_BOUNDS[n][1] - _BOUNDS[n][0])) for n in names])


def fit_names(rows: Sequence[SweepRow]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The time and the power parameters ``rows`` can inform, in the order of :data:`TIME_FIT_NAMES` and
    :data:`POWER_FIT_NAMES` (with :data:`SIMT_GEMM_FIT_NAMES` where a row is a matrix product on the FP32 units).
    The suite informs them all (the memory's background power, at one memory clock, only together with the constant
    power: :func:`confounded`); a table measured elsewhere may inform fewer (:data:`_INFORMED_BY`)."""
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


INFORMED_SHARE = 0.1
"""A parameter is fitted only where moving it by this share of its range (either way) …"""
INFORMED_CHANGE = 0.01
"""… moves some reading's predicted time or energy by at least this fraction (a reading's own scatter): else the rows
cannot place it (a compute kernel's megabyte of DRAM traffic does not tell the achieved bandwidth) and it stays."""


def informed(base: GpuSpec, rows: Sequence[SweepRow], names: Sequence[str], anchored: bool = False) -> tuple[str, ...]:
    """The parameters of ``names`` the rows can place: those whose move by :data:`INFORMED_SHARE` of their range, up or
    down from ``base``, changes some predicted reading (time, energy or idle power) by :data:`INFORMED_CHANGE`."""
    t0, e0, p0 = predictions(base, rows, anchored)
    ref = np.concatenate([t0, e0, p0])
    values = base.model.as_dict()
    out = []
    for n in names:
        lo, hi = _BOUNDS[n]
        step = INFORMED_SHARE * (hi - lo)
        moved = 0.0
        for v in (min(hi, values[n] + step), max(lo, values[n] - step)):
            if v == values[n]:
                continue
            got = np.concatenate(predictions(base.with_model(**{n: v}), rows, anchored))
            moved = max(moved, float(np.max(np.abs(np.log(got / ref)))) if ref.size else 0.0)
        if moved >= INFORMED_CHANGE:
            out.append(n)
    return tuple(out)


def fitted_names(
    base: GpuSpec, rows: Sequence[SweepRow], anchored: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The time and the power parameters a fit of ``base`` to ``rows`` adjusts: those the rows' kinds inform
    (:func:`fit_names`) and can place (:func:`informed`); every other parameter stays at the base's value."""
    time_names, power_names = fit_names(rows)
    return informed(base, rows, time_names, anchored), informed(base, rows, power_names, anchored)


CEILING_PROBES: dict[str, tuple[float, ...]] = {"xbar_bytes_per_cycle": (4.0, 8.0, 16.0, 32.0)}
"""Ceilings a base may hold off (0) that a sweep can switch on: where one of these values explains the sweep's times
better than none (:data:`CEILING_GAIN`), the fit starts from the best of them and fits it."""
CEILING_GAIN = 0.05
"""The share by which a probed ceiling must lower the sweep's time misfit (sum of squared log errors) to be fitted."""


def probe_ceilings(base: GpuSpec, rows: Sequence[SweepRow], anchored: bool = False) -> GpuSpec:
    """``base`` with each ceiling of :data:`CEILING_PROBES` it holds off set to the probe that best explains the
    sweep's times, where that lowers their misfit by :data:`CEILING_GAIN` (unchanged otherwise)."""

    def misfit(s: GpuSpec) -> float:
        return float(np.sum(sweep_residuals(s, rows, "time", anchored) ** 2))

    spec = base
    for name, probes in CEILING_PROBES.items():
        if getattr(spec.model, name) > 0:
            continue
        now = misfit(spec)
        best = min(probes, key=lambda v: misfit(spec.with_model(**{name: v})))
        if misfit(spec.with_model(**{name: best})) < (1 - CEILING_GAIN) * now:
            spec = spec.with_model(**{name: best})
    return spec


_BOUNDS = {n: (lo, hi) for n, (lo, hi, _unit) in PARAMETER_RANGES.items()} | {"smem_bytes_per_cycle": (1.0, 512.0)}
"""The sweep fit's bounds: the documented ranges (:data:`~rlclock.dvfs.spec.PARAMETER_RANGES`), wider than the preset
fits' (:data:`~rlclock.calibration.fit.BOUNDS`), so that another GPU of a kind is reachable (the RTX 3080 Ti preset's
latency in core cycles, 50.2, sits at those bounds' floor of 50: a hidden GPU 20 % below it was fitted at the floor,
5.3 % off in time); a fitted shared-memory rate is at least 1 byte per cycle (the term divides by it)."""

VOLTAGE_TOLERANCE_V = 1e-3
"""How far the fitted top voltage may sit below the bottom one before the fit is called unphysical (a falling V(f))."""
FLOOR_TOLERANCE = 0.02
"""How far above an idle reading the model's power floor may sit before the fit is called unphysical (the reading's
own scatter: two H200 idle windows three days apart differ by 8 %)."""
CONSTRAINT_WEIGHT = 30.0
"""Weight of the physical constraints' hinge residuals against one reading's log error."""


def idle_readings(rows: Sequence[SweepRow]) -> dict[int, float]:
    """The lowest idle power read at each memory clock of the rows (W; empty without ``idle`` rows)."""
    out: dict[int, float] = {}
    for r in rows:
        if r.is_idle:
            out[r.mem_mhz] = min(out.get(r.mem_mhz, np.inf), r.energy_j / r.time_s)
    return out


def power_floor_w(spec: GpuSpec, mem_mhz: float) -> float:
    """The model's power floor at a memory clock, W: its power with nothing running at the lowest core clock (static
    and leakage power at the lowest voltage, the clock tree, the memory's background)."""
    return model.gap_power_w(spec, float(spec.min_core_mhz), mem_mhz)


def constraint_residuals(spec: GpuSpec, idle: dict[int, float]) -> np.ndarray:
    """Hinge residuals of the physical constraints (0 where they hold): the voltage does not fall as the clock rises
    (``v_max_v >= v_min_v``), and the power floor is not above an idle reading at its memory clock (by more than half
    the reading's scatter, :data:`FLOOR_TOLERANCE`, so that the check after the fit has room)."""
    p = spec.model
    r = [CONSTRAINT_WEIGHT * max(0.0, (p.v_min_v - p.v_max_v) / 0.01)]
    slack = np.log1p(FLOOR_TOLERANCE / 2)  # the reading's scatter, half of what the check after the fit allows
    r += [CONSTRAINT_WEIGHT * max(0.0, float(np.log(power_floor_w(spec, m) / w)) - slack) for m, w in idle.items()]
    return np.array(r)


def violations(spec: GpuSpec, idle: dict[int, float], names: Sequence[str]) -> list[str]:
    """What makes a fitted spec unphysical, one phrase each: a voltage that falls as the clock rises, a power floor
    above an idle reading, a fitted parameter (``names``) outside its documented range."""
    p = spec.model
    out = []
    if p.v_max_v < p.v_min_v - VOLTAGE_TOLERANCE_V:
        out.append(
            f"the voltage falls as the clock rises ({p.v_min_v:.3f} V at the bottom, {p.v_max_v:.3f} V at the top)"
        )
    for m, w in sorted(idle.items()):
        floor = power_floor_w(spec, m)
        if floor > w * (1 + FLOOR_TOLERANCE):
            out.append(
                f"the power floor ({floor:.0f} W at {spec.min_core_mhz} MHz, memory {m} MHz) is above the idle "
                f"reading ({w:.0f} W)"
            )
    return out + out_of_range(p, names)


def at_bounds(spec: GpuSpec, names: Sequence[str], share: float = 1e-3) -> list[str]:
    """One warning per fitted parameter that ended at (within ``share`` of the width of) an end of its range: the rows
    pushed it there, so it may stand in for another term's misfit."""
    values = spec.model.as_dict()
    out = []
    for n in names:
        lo, hi = _BOUNDS[n]
        unit = PARAMETER_RANGES[n][2]
        near = share * (hi - lo)
        edge = "lower" if values[n] <= lo + near else "upper" if values[n] >= hi - near else ""
        if edge:
            out.append(
                f"{n} = {values[n]:.4g} {unit} sits at the {edge} end of its range {lo:g}-{hi:g}".replace("  ", " ")
            )
    return out


def _kernels_of(rows: Sequence[SweepRow]) -> tuple[list[Kernel], np.ndarray, list[ClockConfig], np.ndarray]:
    """The distinct kernels of the rows, each row's kernel index, the distinct clock pairs and each row's."""
    keys: dict[tuple[Any, ...], int] = {}
    kernels: list[Kernel] = []
    cfg_keys: dict[tuple[int, int], int] = {}
    ki, ci = [], []
    for r in rows:
        key = (
            r.kernel,
            r.flops,
            r.read_bytes,
            r.write_bytes,
            r.category,
            r.dtype,
            r.access,
            r.blocks,
            r.threads_per_block,
            r.gemm_mnk,
            r.onchip_bytes,
        )
        if key not in keys:
            keys[key] = len(kernels)
            kernels.append(kernel_of(r, len(kernels)))
        ki.append(keys[key])
        ci.append(cfg_keys.setdefault((r.core_mhz, r.mem_mhz), len(cfg_keys)))
    configs = [ClockConfig(f, m) for f, m in cfg_keys]
    return kernels, np.array(ki), configs, np.array(ci)


def sweep_residuals(
    spec: GpuSpec, rows: Sequence[SweepRow], parts: str = "time+energy", anchored: bool = False
) -> np.ndarray:
    """Log errors of the model's time and energy on every kernel row, and of its idle power on every idle row
    (``parts``: ``time``, ``energy`` — with the idle power — or both). The model runs each row under the board's
    power limit, as the GPU did: a locked clock that would draw more lands lower. ``anchored``: as
    :func:`predictions`."""
    work = [r for r in rows if not r.is_idle]
    idle = [r for r in rows if r.is_idle]
    t_pred, e_pred, p_pred = predictions(spec, rows, anchored)
    out = []
    if work:
        if "time" in parts:
            out.append(np.log(t_pred / np.array([r.time_s for r in work])))
        if "energy" in parts:
            out.append(np.log(e_pred / np.array([r.energy_j for r in work])))
    if idle and "energy" in parts:
        out.append(2 * np.log(p_pred / np.array([r.energy_j / r.time_s for r in idle])))
    return np.concatenate(out)


def predictions(
    spec: GpuSpec, rows: Sequence[SweepRow], anchored: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What ``spec`` predicts for the rows: time (s) and energy (J) of each kernel row, in order, and power (W) of
    each idle row. Each kernel row runs under the board's power limit, as on the GPU. ``anchored``: each kernel is
    anchored on its reading at its highest core clock (:func:`reference_rows`; the model reproduces that reading and
    predicts how the others move from it), as a profiled step's kernels are on their measured times."""
    work = [r for r in rows if not r.is_idle]
    t = e = np.zeros(0)
    if work:
        kernels, ki, configs, ci = _kernels_of(work)
        ka = model.kernel_arrays(kernels, spec)
        if anchored:
            ref = [work[i] for i in reference_rows(work, ki)]
            ka = model.anchor(
                ka,
                spec,
                np.array([r.time_s for r in ref]),
                np.array([r.energy_j for r in ref]),
                core_mhz=np.array([r.core_mhz for r in ref], float),
                mem_mhz=np.array([r.mem_mhz for r in ref], float),
            )
        pred = model.predict(ka, spec, configs)
        t, e = pred.time_s[ki, ci], pred.energy_j[ki, ci]
    p = np.array([model.gap_power_w(spec, r.core_mhz, r.mem_mhz) for r in rows if r.is_idle])
    return t, e, p


def reference_rows(work: Sequence[SweepRow], kernel_index: np.ndarray) -> list[int]:
    """Per distinct kernel (``kernel_index`` of each row, 0..K-1), the index of its reading at its highest core clock
    (at its highest memory clock there): the one an anchored prediction reproduces."""
    best: dict[int, int] = {}
    for i, (r, k) in enumerate(zip(work, kernel_index)):
        j = best.get(int(k))
        if j is None or (r.core_mhz, r.mem_mhz) > (work[j].core_mhz, work[j].mem_mhz):
            best[int(k)] = i
    return [best[k] for k in range(len(best))]


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
        raise SpecError(
            f"{where}: kernel(s) {single} measured at one core clock only, so their clock response cannot be fitted.",
            "measure every kernel at about ten core clocks per memory clock "
            "(rlclock calibrate --device N --control-clocks locks them).",
        )
    for r in rows:
        if r.mem_mhz not in spec.clocks or r.core_mhz not in spec.clocks[r.mem_mhz]:
            raise SpecError(
                f"{where}: {r.kernel} at {r.core_mhz}@{r.mem_mhz} MHz is not a clock pair of {spec.name}.",
                "give the base preset of this GPU (--gpu), or fix the row.",
            )


def plan_fit(
    base: GpuSpec, rows: Sequence[SweepRow], anchored: bool = False
) -> tuple[GpuSpec, tuple[str, ...], tuple[str, ...]]:
    """Where a fit of ``base`` to ``rows`` starts (:func:`probe_ceilings`) and the time and power parameters it adjusts
    (:func:`fitted_names`, plus the ceilings it switched on)."""
    start = probe_ceilings(base, rows, anchored)
    time_names, power_names = fitted_names(start, rows, anchored)
    time_names += tuple(n for n in CEILING_PROBES if getattr(start.model, n) != getattr(base.model, n))
    return start, time_names, power_names


def fit_sweep(
    base: GpuSpec,
    rows: Sequence[SweepRow],
    max_nfev: int = 300,
    names: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
    anchored: bool = False,
) -> tuple[GpuSpec, dict[str, float]]:
    """Fit ``base``'s physical parameters (:data:`SWEEP_FIT_NAMES`; ``names``: the time and the power parameters
    to fit, by default those the rows inform and can place, :func:`fitted_names`) to a sweep, each within its
    documented range, the voltage not falling as the clock rises and the power floor not above an idle reading of the
    rows (:func:`constraint_residuals`). A ceiling the base holds off is switched on where the times call for it
    (:func:`probe_ceilings`). ``anchored``: each kernel anchored on its reading at its highest core clock
    (:func:`predictions`) — for rows whose FLOPs and bytes tell only how a kernel splits between the SMs and memory.

    Returns:
        The fitted spec and the fit's figures: median and largest absolute time and energy error over the kernel
        rows, before and after (fractions).
    """
    check_rows(rows, base, "sweep")
    start, time_names, power_names = plan_fit(base, rows, anchored) if names is None else (base, *names)
    idle = idle_readings(rows)
    tied = [n for n in confounded(rows) if n in power_names]

    def constrained(parts: str) -> Callable[[GpuSpec], np.ndarray]:
        return lambda s: np.concatenate(
            [sweep_residuals(s, rows, parts, anchored), constraint_residuals(s, idle), prior_residuals(s, base, tied)]
        )

    timed, _ = fit(
        start, lambda s: sweep_residuals(s, rows, "time", anchored), time_names, max_nfev=max_nfev, bounds=_BOUNDS
    )
    powered, _ = fit(timed, constrained("energy"), power_names, max_nfev=max_nfev, bounds=_BOUNDS)
    fitted, _cost = fit(
        powered, constrained("time+energy"), time_names + power_names, max_nfev=max_nfev, bounds=_BOUNDS
    )
    figures = {}
    for label, s in (("before", base), ("after", fitted)):
        n = sum(not r.is_idle for r in rows)
        r = np.abs(np.expm1(sweep_residuals(s, rows, anchored=anchored)[: 2 * n]))
        figures[f"time_median_{label}"] = float(np.median(r[:n]))
        figures[f"time_max_{label}"] = float(r[:n].max())
        figures[f"energy_median_{label}"] = float(np.median(r[n:]))
        figures[f"energy_max_{label}"] = float(r[n:].max())
    return fitted, figures


def write_preset(spec: GpuSpec, path: Path, key: str, name: str | None, provenance: dict[str, Any]) -> Path:
    """Write ``spec`` as a GPU spec file (the preset format) with ``provenance`` under ``sources``."""
    data = spec_to_mapping(spec)
    data.update(
        key=key,
        name=name or spec.name,
        fitted_to=str(provenance.get("source", "a clock sweep")),
        model={k: float(f"{v:.6g}") for k, v in spec.model.as_dict().items()},
    )
    data["sources"] = {
        **dict(spec.sources),
        "model": "fitted by rlclock calibrate (see calibration)",
        "calibration": yaml.safe_dump(provenance, default_flow_style=True, width=10**6).strip(),
    }
    return write_spec_file(
        data,
        path,
        "GPU spec calibrated by rlclock calibrate on "
        f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
    )


def simulated_sweep(
    true_gpu: GpuSpec,
    per_memory: int = 10,
    noise_std: float = 0.01,
    repeats: int = 4,
    seed: int = 0,
    kernels: Sequence[Kernel] | None = None,
) -> list[SweepRow]:
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
    return Agreement(
        np.abs(pf.time_s / pt.time_s - 1),
        np.abs(pf.energy_j / pt.energy_j - 1),
        np.stack(steps, axis=1),
        np.stack(regret, axis=1),
        np.stack(tied, axis=1),
    )
