"""Fit a GPU preset to a trace measured on that GPU (per-kernel auto time, energy and SM clock).

Used for the H200: the GPT-3 XL layer profiled and measured in a dry run (``data/``). The model predicts
every kernel from its shapes alone (no anchoring) and the fit adjusts the physical parameters so that the
predicted auto-clock time, energy and power-capped SM clock match the isolated measurements. A dry run
measures only the driver's own clocks, so how a kernel responds to *other* clocks comes from the model's
physics with the fitted parameters and weak priors (stated in :data:`PRIORS`), not from measurements. Beside
the trace, single elementwise kernels timed on the same GPU (:data:`LOOP_MEASUREMENTS`) fix what the layer's
kernels do not exercise: PyTorch's generic and unrolled loops, and large streams with and without their input in L2;
fp32 products on the SIMT units (:data:`SIMT_GEMMS`) fix their rate and switching power, and idle readings with the
clocks up (:data:`IDLE_MEASUREMENTS`) the power floor.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from rlclock import resources
from rlclock.calibration.fit import BOUNDS, fit
from rlclock.calibration.sweep import SweepRow, sweep_residuals
from rlclock.calibration.table import read_table
from rlclock.dvfs import model
from rlclock.dvfs.spec import GpuSpec
from rlclock.errors import SpecError
from rlclock.schedule import AUTO
from rlclock.workload.op_costs import refresh_costs
from rlclock.workload.trace import Kernel, KernelTrace

MEASURED_TRACES: dict[str, str] = {"h200-sxm": "gpt3xl-h200-layer.trace.json"}
"""Per preset, the shipped measured trace (``rlclock/data/measurements/``) its parameters are fitted to."""
LOOP_MEASUREMENTS: dict[str, str] = {"h200-sxm": "h200-l2-reuse.json"}
"""Per preset, shipped single-kernel timings of elementwise loops (casts, adds, a broadcast multiply, a transposing
copy at 4-512 MiB, after an L2 flush and after a producer rewrote the input) fitted beside the trace: they carry
what the layer's kernels cannot show — the DRAM rate of large streams, the L2's reach, the per-element work of
PyTorch's generic and unrolled loops."""
NARROW_GEMMS: dict[str, tuple[str, ...]] = {"h200-sxm": ("corpus-h200/gpt2-medium/step.trace.json.gz",)}
"""Per preset, shipped profiled steps whose GEMMs with narrow operand loads (CUTLASS ``_alignN`` kernels: GPT-2's
50 257-word head, forward and both gradients) are fitted beside the trace at their in-sequence times; no other corpus
kernel is, so the corpus's other steps (BERT's 30 522-word head among them) judge the fit."""
SIMT_GEMMS: dict[str, str] = {"h200-sxm": "h200-simt-gemm.json"}
"""Per preset, shipped timings of fp32 matrix products on the SIMT units (cuBLAS FFMA kernels, TF32 off;
``benchmarks/simt_gemm.py``) fitted beside the trace: the layer's GEMMs all run on tensor cores, so these alone carry
``eta_simt_gemm``; T5's fp32 attention products in the corpus judge it."""
SIMT_GEMM_POWER: dict[str, str] = {"h200-sxm": "h200-simt-gemm-power.json"}
"""Per preset, the same products run back to back over NVML energy windows (``benchmarks/simt_gemm.py --power``): the
board's power and SM clock while each ran, which fix their switching power (``c_simt_gemm_w``)."""
IDLE_MEASUREMENTS: dict[str, tuple[str, ...]] = {"h200-sxm": ("h200-suite-observe.csv", "h200-suite-observe-rest.csv")}
"""Per preset, shipped sweep tables (``rlclock calibrate --device`` in a dry run) whose ``idle`` rows — the board
with no work, clocks up — fix the model's power floor (its power between kernels,
:func:`rlclock.dvfs.model.gap_power_w`): the layer's kernels alone cannot tell constant power from power that scales
with activity. Two sweeps three days apart read 128.9 and 119.0 W (and 118.4 W after 2 s more without work, the
clocks still up)."""
IDLE_WEIGHT = 10.0
"""Weight of the idle power's log error (one reading against the layer's hundreds; as the step sums' weight)."""
LOOP_WEIGHT = 0.25
"""Weight of each loop timing's log error against the trace's kernels (whose targets stay first)."""

FIT_NAMES: tuple[str, ...] = (
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
    "eta_gemm",
    "eta_attention",
    "eta_stream",
    "eta_reduce",
    "simt_ops_per_byte",
    "launch_s",
    "reduce_overhead_cycles",
    "l2_hit_fraction",
    "l2_resident_bytes",
    "l2_bytes_per_cycle",
    "norm_ops_per_written_byte",
    "loop_ops_per_element",
    "narrow_load_ops",
    "eta_simt_gemm",
    "c_simt_gemm_w",
)
"""Parameters the measured fit adjusts. The DRAM latency (``lat_core_cycles``, ``lat_mem_cycles``) is left as the
preset holds it: dry run measures every kernel at one clock pair, where no kernel is latency-bound, so the
data cannot tell its core- and memory-clock parts apart (a free fit drifts to an implausible ~0.26 µs)."""

PRIORS: dict[str, tuple[float, float]] = {
    # name: (centre, spread); residual (value - centre) / spread
    "v_min_v": (0.70, 0.05),  # GH100 low-clock voltage (Hopper V-f curves: ~0.7 V)
    "v_max_v": (1.00, 0.06),  # GH100 top-bin voltage
    "f_ridge_mhz": (1100.0, 300.0),
    "p_mem_bg_w": (42.0, 10.0),  # ~42 W of the H200's 76 W idle is memory at 3201 MHz (REFERENCE §2)
    # Per DRAM byte (a byte the L2 does not serve): the HBM access itself, ~4 pJ/bit (O'Connor et al., MICRO'17:
    # 3.9 pJ/bit HBM2), plus the memory controller, PHY and the L2 fill / write-back it causes; loose prior.
    "e_dram_j_per_byte": (6.0e-11, 4.0e-11),
    "simt_ops_per_byte": (4.0, 3.0),  # load/store, conversion and address instructions per byte of a stream
}

_BOUNDS = {
    **BOUNDS,
    "v_min_v": (0.55, 0.85),
    "v_max_v": (0.85, 1.15),
    "eta_attention": (0.3, 1.0),
    # L2 residency: at most the whole 60 MB L2, hits at most all of it; L2 bandwidth up to 10 kB per core
    # cycle (~20 TB/s at 1980 MHz); norm kernels up to 50 extra SIMT operations per byte written.
    "l2_hit_fraction": (0.0, 1.0),
    "l2_resident_bytes": (0.0, 60e6),
    "l2_bytes_per_cycle": (0.0, 1e4),
    "norm_ops_per_written_byte": (0.0, 50.0),
    "loop_ops_per_element": (0.0, 1000.0),
    "narrow_load_ops": (0.0, 1000.0),
    "c_simt_gemm_w": (0.0, 400.0),
    # with the power floor fixed by the idle reading, the GEMMs' power is tensor activity: up to 800 W
    "c_tensor_w": (10.0, 800.0),
}


def measured_trace(spec: GpuSpec) -> KernelTrace:
    """The measured trace the preset is fitted to."""
    rel = MEASURED_TRACES.get(spec.key)
    if rel is None:
        raise SpecError(
            f"no measured trace is registered for {spec.key!r}.",
            f"measure one with `rlclock profile` / `rlclock measure` (known: {sorted(MEASURED_TRACES)}).",
        )
    return KernelTrace.load(resources.measurement(rel))


def isolated_points(trace: KernelTrace, spec: GpuSpec) -> tuple[list[Kernel], np.ndarray, np.ndarray, np.ndarray]:
    """Kernels with an isolated auto measurement and shapes, with their time, energy and mean SM clock."""
    kernels, t, e, f = [], [], [], []
    for k in trace:
        if k.flops == 0 and k.dram_bytes == 0:
            continue
        m = next(
            (
                m
                for m in k.measured
                if m.is_auto and m.source == "isolated" and m.gpu in (spec.name, spec.key) and m.energy_j is not None
            ),
            None,
        )
        if m is None:
            continue
        kernels.append(k)
        t.append(m.time_s)
        e.append(m.energy_j)
        f.append(np.nan if m.sm_clock_mhz is None else m.sm_clock_mhz)
    if not kernels:
        raise SpecError(f"trace {trace.name!r} has no isolated auto measurements for {spec.name}.")
    return kernels, np.array(t), np.array(e), np.array(f)


def loop_points(spec: GpuSpec) -> tuple[list[Kernel], np.ndarray, np.ndarray]:
    """The shipped loop timings (:data:`LOOP_MEASUREMENTS`) as single kernels (FLOPs and bytes by the current
    rules), their measured times (medians) and whether each was taken cold (after an L2 flush: nothing of it in
    L2) or hot (right after a producer rewrote its input: the situation inside a step the model describes).
    Empty when the preset has none."""
    rel = LOOP_MEASUREMENTS.get(spec.key)
    if rel is None:
        return [], np.zeros(0), np.zeros(0, bool)
    kernels, t, cold = [], [], []
    for case in json.loads(resources.measurement(rel).read_text())["cases"].values():
        ks = [k for k in refresh_costs(KernelTrace.from_dict(case["trace"])) if k.dram_bytes > 0]
        if len(ks) != 1:
            continue
        for which in ("cold", "hot"):
            kernels.append(ks[0])
            t.append(float(np.median(case["time_s"][which])))
            cold.append(which == "cold")
    return kernels, np.array(t), np.array(cold)


def narrow_gemm_points(spec: GpuSpec) -> tuple[list[Kernel], np.ndarray]:
    """The GEMMs with narrow operand loads of :data:`NARROW_GEMMS` (FLOPs and bytes by the current rules) and their
    in-sequence times."""
    kernels, t = [], []
    for rel in NARROW_GEMMS.get(spec.key, ()):
        for k in refresh_costs(KernelTrace.load(resources.measurement(rel))):
            m = next((m for m in k.measured if m.source == "in-sequence"), None)
            if m is not None and model.narrow_gemm_loads(k) > 0:
                kernels.append(k)
                t.append(m.time_s)
    return kernels, np.array(t)


def simt_gemm_points(spec: GpuSpec) -> tuple[list[Kernel], np.ndarray]:
    """The fp32 SIMT matrix products of :data:`SIMT_GEMMS` (FLOPs and bytes by the current rules) and their measured
    times (medians of back-to-back launches). Empty when the preset has none."""
    kernels, entries, _ = _simt_products(spec)
    return kernels, np.array([float(np.median(e["time_s"])) for e in entries])


def simt_power_points(spec: GpuSpec) -> tuple[list[Kernel], np.ndarray, np.ndarray]:
    """The same products run back to back over NVML energy windows (:data:`SIMT_GEMM_POWER`): the kernels, the board's
    power (W) and the SM clock NVML read (MHz). Empty when the preset has none."""
    kernels, _, names = _simt_products(spec)
    rel = SIMT_GEMM_POWER.get(spec.key)
    if rel is None:
        return [], np.zeros(0), np.zeros(0)
    power = json.loads(resources.measurement(rel).read_text())["products"]
    keep = [i for i, n in enumerate(names) if n in power]
    return (
        [kernels[i] for i in keep],
        np.array([power[names[i]]["power_w"] for i in keep]),
        np.array([power[names[i]]["sm_clock_mhz"] for i in keep]),
    )


def _simt_products(spec: GpuSpec) -> tuple[list[Kernel], list[dict[str, Any]], list[str]]:
    """The SIMT products of :data:`SIMT_GEMMS`: their kernels, their measurement entries and their names."""
    rel = SIMT_GEMMS.get(spec.key)
    if rel is None:
        return [], [], []
    kernels, entries, names = [], [], []
    for name, entry in json.loads(resources.measurement(rel).read_text())["products"].items():
        ks = [k for k in refresh_costs(KernelTrace.from_dict(entry["trace"])) if k.category == "gemm"]
        if len(ks) == 1 and not ks[0].uses_tensor_cores:
            kernels.append(ks[0])
            entries.append(entry)
            names.append(name)
    return kernels, entries, names


def idle_rows(spec: GpuSpec) -> list[SweepRow]:
    """The idle readings of :data:`IDLE_MEASUREMENTS` for this preset (empty when it has none)."""
    return [
        r for rel in IDLE_MEASUREMENTS.get(spec.key, ()) for r in read_table(resources.measurement(rel)) if r.is_idle
    ]


def simt_power_at_clock(spec: GpuSpec, kernels: list[Kernel], core_mhz: np.ndarray) -> np.ndarray:
    """The model's power of each kernel, W, at the core clock it was measured at (the memory clock at its top), with
    no power cap applied: what the fit sets to the board's measured power there (a smooth residual, where the capped
    clock itself is flat in the parameters while the model stays under the cap)."""
    ka = model.kernel_arrays(kernels, spec)
    f = np.asarray(core_mhz, float).reshape(-1, 1)
    m = np.full_like(f, float(spec.max_mem_mhz))
    return model.power_w(ka, spec, f, m, model.components(ka, spec, f, m))[:, 0]


def predict_loops(spec: GpuSpec, kernels: list[Kernel], cold: np.ndarray) -> np.ndarray:
    """Auto-clock times of :func:`loop_points`' kernels: the cold ones with no L2 residency."""
    hot = predict_auto(spec, kernels).time_s[:, 0]
    flushed = spec.with_model(l2_hit_fraction=0.0)
    return np.where(cold, predict_auto(flushed, kernels).time_s[:, 0], hot)


def predict_auto(spec: GpuSpec, kernels: list[Kernel]) -> model.Prediction:
    """The model's auto-clock prediction for ``kernels`` from their shapes alone."""
    return model.predict(model.kernel_arrays(kernels, spec), spec, [AUTO])


def _residuals(spec: GpuSpec, kernels: list[Kernel], t: np.ndarray, e: np.ndarray, f: np.ndarray) -> np.ndarray:
    pred = predict_auto(spec, kernels)
    tp, ep, fp = pred.time_s[:, 0], pred.energy_j[:, 0], pred.core_mhz[:, 0]
    r = [2 * np.log(tp / t), 2 * np.log(ep / e)]
    ok = np.isfinite(f)
    r.append((fp[ok] - f[ok]) / 100.0)
    r.append(np.array([10 * np.log(tp.sum() / t.sum()), 10 * np.log(ep.sum() / e.sum())]))
    p = spec.model.as_dict()
    r.append(np.array([(p[k] - c) / s for k, (c, s) in PRIORS.items()]))
    return np.concatenate(r)


def fit_measured(spec: GpuSpec, max_nfev: int = 400) -> tuple[GpuSpec, float]:
    """Fit ``spec``'s model to its measured trace, loop timings, SIMT products and idle power (module docstring)."""
    kernels, t, e, f = isolated_points(measured_trace(spec), spec)
    loops, t_loops, cold = loop_points(spec)
    gemms, t_gemms = narrow_gemm_points(spec)
    simt, t_simt = simt_gemm_points(spec)
    simt_p, p_simt, f_simt = simt_power_points(spec)
    idle = idle_rows(spec)

    def residuals(s: GpuSpec) -> np.ndarray:
        r = [_residuals(s, kernels, t, e, f)]
        if loops:
            r.append(LOOP_WEIGHT * 2 * np.log(predict_loops(s, loops, cold) / t_loops))
        if gemms:
            r.append(LOOP_WEIGHT * 2 * np.log(predict_auto(s, gemms).time_s[:, 0] / t_gemms))
        if simt:
            r.append(LOOP_WEIGHT * 2 * np.log(predict_auto(s, simt).time_s[:, 0] / t_simt))
        if simt_p:
            r.append(LOOP_WEIGHT * 2 * np.log(simt_power_at_clock(s, simt_p, f_simt) / p_simt))
        if idle:
            r.append(IDLE_WEIGHT * sweep_residuals(s, idle, parts="energy"))
        return np.concatenate(r)

    return fit(spec, residuals, FIT_NAMES, max_nfev=max_nfev, bounds=_BOUNDS)


def report(spec: GpuSpec) -> list[str]:
    """The lines of a report of the preset's per-kernel errors against its measured trace (benchmarks/calibration.py
    prints them)."""
    lines: list[str] = []
    say = lines.append
    trace = measured_trace(spec)
    kernels, t, e, f = isolated_points(trace, spec)
    pred = predict_auto(spec, kernels)
    tp, ep, fp = pred.time_s[:, 0], pred.energy_j[:, 0], pred.core_mhz[:, 0]
    say(
        f"Simulated {spec.name} ({spec.key} preset), predicted from shapes alone, vs {trace.name!r} measured on "
        f"{trace.meta.get('gpu', spec.name)} in a dry run (isolated kernels, auto clocks)"
    )
    say(
        f"{'op':16s} {'category':11s} {'t sim us':>9} {'t meas':>8} {'err':>7}   {'E sim mJ':>9} {'E meas':>8} "
        f"{'err':>7}   {'MHz sim':>7} {'meas':>5}"
    )
    worst_t = worst_e = 0.0
    for i, k in enumerate(kernels):
        et, ee = tp[i] / t[i] - 1, ep[i] / e[i] - 1
        if t[i] >= 20e-6:
            worst_t, worst_e = max(worst_t, abs(et)), max(worst_e, abs(ee))
        say(
            f"{k.op[:16]:16s} {k.category:11s} {tp[i] * 1e6:9.1f} {t[i] * 1e6:8.1f} {100 * et:+6.1f}%   "
            f"{ep[i] * 1e3:9.2f} {e[i] * 1e3:8.2f} {100 * ee:+6.1f}%   {fp[i]:7.0f} {f[i]:5.0f}"
        )
    say("")
    say(
        f"sum of kernels: time {tp.sum() * 1e3:.3f} ms vs measured {t.sum() * 1e3:.3f} ms "
        f"({100 * (tp.sum() / t.sum() - 1):+.2f} %), energy {ep.sum():.3f} J vs {e.sum():.3f} J "
        f"({100 * (ep.sum() / e.sum() - 1):+.2f} %)  (target within 5 %)"
    )
    summary = resources.measurement(MEASURED_TRACES[spec.key].replace(".trace.json", ".summary.json"))
    whole = json.loads(summary.read_text()).get("step")
    if isinstance(whole, dict) and "time_s" in whole and "energy_j" in whole:
        say(
            f"whole step back to back: {whole['time_s'] * 1e3:.3f} ms, {whole['energy_j']:.3f} J  "
            f"(model {100 * (tp.sum() / whole['time_s'] - 1):+.2f} % time, "
            f"{100 * (ep.sum() / whole['energy_j'] - 1):+.2f} % energy)"
        )
    say(
        f"largest per-kernel error (kernels >= 20 us): time {100 * worst_t:.1f} %, energy {100 * worst_e:.1f} % "
        "(target within 20 %)"
    )
    big = t >= 20e-6
    ok_t = np.abs(tp / t - 1) <= 0.2
    ok_e = np.abs(ep / e - 1) <= 0.2
    say(
        f"kernels >= 20 us within 20 %: {int((ok_t & big).sum())}/{int(big.sum())} in time, "
        f"{int((ok_t & ok_e & big).sum())}/{int(big.sum())} in time and energy"
    )
    return lines
