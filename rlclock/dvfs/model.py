"""The DVFS model: time, power and energy of a kernel at a core/memory clock pair, under a power cap.

All functions are vectorised: kernels along axis 0, clock configurations along axis 1. Equations, their
sources and the fitted parameters are documented in ``docs/simulator.md``; the parameters live in the
GPU's preset (:class:`~rlclock.dvfs.spec.DvfsParams`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from rlclock.dvfs.spec import GpuSpec
from rlclock.schedule import ClockConfig
from rlclock.workload.kernel_names import activity_kind, elements_per_thread, gemm_narrow_loads, rms_norm_forward
from rlclock.workload.trace import ACCESS_CLASSES, Kernel

CAPPED_FRACTION = 0.93
"""A measured auto-clock power at or above this fraction of the limit means the kernel was power-capped."""

CROSS_BLOCK_OUTPUT_FRACTION = 0.1
"""A ``reduce`` kernel writing less than this fraction of the bytes it reads reduces across thread blocks."""

_ELEM_BYTES = {"fp8": 1.0, "fp16": 2.0, "bf16": 2.0, "tf32": 4.0, "fp32": 4.0}  # per operand element, by dtype
_TILE = 128  # output tile edge of the library GEMM kernels, for wave quantisation
_BISECT_STEPS = 40


@dataclass(frozen=True)
class KernelArrays:
    """Model inputs of a list of kernels, as column vectors ``(K, 1)``.

    ``work_scale`` and ``activity_scale`` are 1 for a kernel predicted from its shapes alone; anchoring on
    a measured reference point sets them so that the model reproduces the measurement there.
    """

    tensor_flops: np.ndarray
    simt_flops: np.ndarray
    read_bytes: np.ndarray
    write_bytes: np.ndarray
    tensor_rate: np.ndarray  # tensor FLOP per cycle per SM for the kernel's dtype (0 for SIMT kernels)
    is_tensor: np.ndarray
    is_attention: np.ndarray
    is_simt_gemm: np.ndarray  # a matrix product on the FP32 units (FFMA kernels), not the tensor cores
    is_memset: np.ndarray  # a driver memset activity (a few bytes; not a kernel grid)
    is_norm: np.ndarray  # a norm kernel with per-element statistics work: LayerNorm's, or a norm's backward
    access: np.ndarray  # index into ACCESS_CLASSES
    wave_eff: np.ndarray
    mlp_bytes: np.ndarray
    occupancy: np.ndarray  # threads the launch keeps resident over the GPU's capacity, at most 1 (1 if unknown)
    loop_elements: np.ndarray  # elements a generic (strided) or unrolled (casting) loop handles (0 if none/unknown)
    narrow_loads: np.ndarray  # operand load instructions of a GEMM whose tiles load fewer than 16 bytes at a time
    onchip_bytes: np.ndarray  # bytes moved through shared memory (0 if none counted)
    work_scale: np.ndarray
    activity_scale: np.ndarray
    cap_scale: np.ndarray  # per-kernel power cap relative to the GPU's (above 1 where a measurement exceeded it)

    def __len__(self) -> int:
        return int(self.tensor_flops.shape[0])

    def take(self, idx: np.ndarray | Sequence[int]) -> KernelArrays:
        """The rows ``idx``."""
        i = np.asarray(idx)
        return KernelArrays(**{k: getattr(self, k)[i] for k in self.__dataclass_fields__})

    def scaled(self, work: np.ndarray, activity: np.ndarray, cap: np.ndarray | None = None) -> KernelArrays:
        return replace(
            self,
            work_scale=np.asarray(work, float).reshape(-1, 1),
            activity_scale=np.asarray(activity, float).reshape(-1, 1),
            cap_scale=self.cap_scale if cap is None else np.asarray(cap, float).reshape(-1, 1),
        )


def kernel_arrays(kernels: Sequence[Kernel], spec: GpuSpec) -> KernelArrays:
    """Gather the model inputs of ``kernels`` for ``spec``."""
    n = len(kernels)
    col = lambda xs, dt=float: np.asarray(xs, dtype=dt).reshape(n, 1)  # noqa: E731
    is_tensor = [k.uses_tensor_cores for k in kernels]
    rates = [spec.tensor_flops_per_cycle_per_sm.get(k.dtype, 0.0) if t else 0.0 for k, t in zip(kernels, is_tensor)]
    return KernelArrays(
        tensor_flops=col([k.flops if t else 0.0 for k, t in zip(kernels, is_tensor)]),
        simt_flops=col([0.0 if t else k.flops for k, t in zip(kernels, is_tensor)]),
        read_bytes=col([gemm_read_traffic(k, spec) for k in kernels]),
        write_bytes=col([k.dram_write_bytes for k in kernels]),
        tensor_rate=col(rates),
        is_tensor=col(is_tensor, bool),
        is_attention=col([k.category == "attention" for k in kernels], bool),
        is_simt_gemm=col([k.category == "gemm" and not t for k, t in zip(kernels, is_tensor)], bool),
        is_memset=col([activity_kind(k.name) == "memset" for k in kernels], bool),
        is_norm=col(
            [
                k.category == "norm"
                and not t
                and not rms_norm_forward(k.name, k.launch_op.name if k.launch_op else None)
                for k, t in zip(kernels, is_tensor)
            ],
            bool,
        ),
        access=col([ACCESS_CLASSES.index(k.access) for k in kernels], int),
        wave_eff=col([_wave_efficiency(k, spec.sm_count) for k in kernels]),
        mlp_bytes=col([16.0 if k.mlp_bytes is None else k.mlp_bytes for k in kernels]),
        occupancy=col([launch_occupancy(k, spec) for k in kernels]),
        loop_elements=col([loop_elements(k) for k in kernels]),
        narrow_loads=col([narrow_gemm_loads(k) for k in kernels]),
        onchip_bytes=col([k.onchip_bytes or 0.0 for k in kernels]),
        work_scale=np.ones((n, 1)),
        activity_scale=np.ones((n, 1)),
        cap_scale=np.ones((n, 1)),
    )


def launch_occupancy(k: Kernel, spec: GpuSpec) -> float:
    """Share of the GPU's resident-thread capacity (``sm_count · threads_per_sm``) a SIMT kernel's launch fills.

    A grid smaller than the GPU (PyTorch's LayerNorm gamma/beta gradient: 64 blocks of 1024 threads on 132 SMs)
    keeps fewer loads in flight, so its latency-bound bandwidth (Little's law) falls in proportion. 1 when the
    launch shape is unknown (generated traces) and for tensor-core kernels (their efficiency is ``wave_eff``).
    """
    if k.launch_grid is None or k.launch_block is None or k.uses_tensor_cores:
        return 1.0
    threads = float(np.prod(k.launch_grid)) * float(np.prod(k.launch_block))
    return float(min(1.0, threads / (spec.sm_count * spec.threads_per_sm)))


def loop_elements(k: Kernel) -> float:
    """Elements a SIMT kernel running PyTorch's generic (strided) or unrolled (casting) elementwise loop handles:
    its launch's threads times the elements each handles (:func:`~rlclock.workload.kernel_names.
    elements_per_thread`); 0 for other kernels and when the launch shape is unknown (generated traces)."""
    if k.launch_grid is None or k.launch_block is None or k.uses_tensor_cores:
        return 0.0
    per_thread = elements_per_thread(k.name)
    if per_thread is None:
        return 0.0
    return float(np.prod(k.launch_grid)) * float(np.prod(k.launch_block)) * per_thread


def narrow_gemm_loads(k: Kernel) -> float:
    """Load instructions a tensor-core GEMM issues for its operand tiles when its name gives an alignment below
    16 bytes (:func:`~rlclock.workload.kernel_names.gemm_narrow_loads`): A is read once per column of ``TN``-wide
    tiles and B once per row of ``TM``-high tiles, ``b·m·n·k·(1/TM + 1/TN)`` elements, ``align`` per instruction;
    0 for other kernels."""
    narrow = gemm_narrow_loads(k.name) if k.uses_tensor_cores and k.gemm_bmnk is not None else None
    if narrow is None or k.gemm_bmnk is None:
        return 0.0
    tm, tn, align = narrow
    if align * _ELEM_BYTES.get(k.dtype, 2.0) >= 16:  # a full 16-byte vector per load: the usual case
        return 0.0
    b, m, n, kk = k.gemm_bmnk
    return float(b) * m * n * kk * (1.0 / tm + 1.0 / tn) / align


def gemm_read_traffic(k: Kernel, spec: GpuSpec) -> float:
    """DRAM bytes a kernel reads; for a GEMM, its operands re-read once per wave that needs them.

    A wave of ``sm_count`` output tiles covers about ``sqrt(sm_count)`` tiles along each output edge, so
    A (``m × k``) is streamed ``ceil(n / wave_edge)`` times and B (``k × n``) ``ceil(m / wave_edge)`` times —
    unless the operand fits in half the L2 cache, when it is read from DRAM once. Other kernels read their
    minimum (``dram_read_bytes``).
    """
    if k.gemm_bmnk is None or not k.uses_tensor_cores:
        return k.dram_read_bytes
    b, m, n, kk = k.gemm_bmnk
    elem = _ELEM_BYTES.get(k.dtype, 2.0)
    edge = _TILE * max(1.0, spec.sm_count**0.5)
    a_bytes, b_bytes = elem * m * kk, elem * kk * n
    a_reads = 1.0 if a_bytes <= spec.l2_bytes / 2 else -(-n // edge)
    b_reads = 1.0 if b_bytes <= spec.l2_bytes / 2 else -(-m // edge)
    extra = b * (a_bytes * (a_reads - 1) + b_bytes * (b_reads - 1))
    return k.dram_read_bytes + extra


def _wave_efficiency(k: Kernel, sm_count: int) -> float:
    """Fraction of SM slots doing useful work when a GEMM's output tiles run in whole waves.

    Libraries split the reduction dimension of GEMMs with few output tiles and a long ``k`` (split-K), so
    such GEMMs get up to 8 waves of work units.
    """
    if k.gemm_bmnk is None:
        return 1.0
    b, m, n, kk = k.gemm_bmnk
    tiles = b * -(-m // _TILE) * -(-n // _TILE)
    splits = max(1, min(kk // (2 * _TILE), -(-8 * sm_count // tiles)))
    units = tiles * splits
    waves = -(-units // sm_count)
    return units / (waves * sm_count)


def reached_core_mhz(spec: GpuSpec, request_mhz: np.ndarray | float) -> np.ndarray:
    """The core clock a request (MHz) runs at before the power cap: the request, at most the GPU's
    :attr:`~rlclock.dvfs.spec.GpuSpec.top_core_mhz` (its boost ceiling, where it has one)."""
    return np.minimum(request_mhz, spec.top_core_mhz)


def voltage_v(spec: GpuSpec, core_mhz: np.ndarray) -> np.ndarray:
    """Core voltage: flat up to the ridge clock, then linear to ``v_max`` at the highest clock reached."""
    p = spec.model
    top = spec.top_core_mhz
    slope = (p.v_max_v - p.v_min_v) / max(top - p.f_ridge_mhz, 1.0)
    return p.v_min_v + slope * np.maximum(core_mhz - p.f_ridge_mhz, 0.0)


def _smax(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    """Smooth maximum ``(a^p + b^p)^(1/p)`` (overlap of two pipelined activities)."""
    hi = np.maximum(np.maximum(a, b), 1e-30)
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


@dataclass(frozen=True)
class Components:
    """Time components of kernels at clocks (all seconds, arrays broadcast to ``(K, C)``)."""

    t_tensor: np.ndarray
    t_simt: np.ndarray
    t_dram: np.ndarray
    time_s: np.ndarray
    dram_share: np.ndarray | float = 1.0  # share of the kernel's bytes that reach DRAM (the rest hit in L2)


def components(ka: KernelArrays, spec: GpuSpec, core_mhz: np.ndarray, mem_mhz: np.ndarray) -> Components:
    """Time of each kernel at effective clocks ``core_mhz`` / ``mem_mhz`` (broadcastable to ``(K, C)``)."""
    p = spec.model
    f_hz = core_mhz * 1e6
    m_hz = mem_mhz * 1e6
    eta_tensor = np.where(ka.is_attention, p.eta_attention, p.eta_gemm) * ka.wave_eff
    tensor_rate = np.maximum(ka.tensor_rate * spec.sm_count * eta_tensor, 1.0) * f_hz
    t_tensor = ka.work_scale * ka.tensor_flops / tensor_rate
    # A SIMT GEMM's operand loads and address math are what keeps it below the FP32 peak (``eta_simt_gemm``);
    # other SIMT kernels pay ``simt_ops_per_byte`` for theirs.
    simt_ops = np.where(
        ka.is_simt_gemm,
        ka.simt_flops / p.eta_simt_gemm,
        ka.simt_flops + p.simt_ops_per_byte * (ka.read_bytes + ka.write_bytes) * ~ka.is_tensor,
    )
    if p.norm_ops_per_written_byte > 0:
        simt_ops = simt_ops + p.norm_ops_per_written_byte * ka.write_bytes * ka.is_norm  # per element produced
    if p.loop_ops_per_element > 0:
        simt_ops = simt_ops + p.loop_ops_per_element * ka.loop_elements  # offsets / casts per element
    if p.narrow_load_ops > 0:
        simt_ops = simt_ops + p.narrow_load_ops * ka.narrow_loads  # operand tiles fetched a few bytes at a time
    t_simt = ka.work_scale * simt_ops / (spec.simt_flops_per_cycle_per_sm * spec.sm_count * f_hz)
    t_core = t_simt  # the SMs' time: SIMT issue, or shared-memory round trips on the core clock where longer
    if p.smem_bytes_per_cycle > 0:
        t_onchip = ka.work_scale * ka.onchip_bytes / (p.smem_bytes_per_cycle * spec.sm_count * f_hz)
        t_core = np.where(ka.onchip_bytes > 0, _smax(t_simt, t_onchip, p.smooth_p), t_simt)
    eta_bw = np.array([p.eta_stream, p.eta_gather, p.eta_reduce])[ka.access]
    bw_peak = 2.0 * m_hz * spec.mem_bus_bits / 8.0
    latency_s = p.lat_core_cycles / f_hz + p.lat_mem_cycles / m_hz
    bw_mlp = ka.occupancy * spec.sm_count * spec.threads_per_sm * ka.mlp_bytes / latency_s
    dram_s_per_byte = _smax(1.0 / bw_peak, 1.0 / bw_mlp, p.smooth_p)
    if p.xbar_bytes_per_cycle > 0:  # the SMs' side of the memory system, on the core clock
        dram_s_per_byte = _smax(dram_s_per_byte, 1.0 / (p.xbar_bytes_per_cycle * spec.sm_count * f_hz), p.smooth_p)
    bw = eta_bw / dram_s_per_byte
    dram_share: np.ndarray | float = 1.0
    if p.l2_hit_fraction > 0:
        served = l2_served_fraction(ka, spec)
        dram_share = 1.0 - served
        bw_l2 = p.l2_bytes_per_cycle * f_hz if p.l2_bytes_per_cycle > 0 else bw
        s_per_byte = dram_share / bw + served / bw_l2
        t_rd = ka.work_scale * ka.read_bytes * s_per_byte
        t_wr = ka.work_scale * ka.write_bytes * s_per_byte
    else:
        t_rd = ka.work_scale * ka.read_bytes / bw
        t_wr = ka.work_scale * ka.write_bytes / bw
    # Matrix products (tensor-core and SIMT) stream their inputs under the math but write results in an epilogue
    # after it.
    t_tc = _smax(_smax(t_tensor, t_core, p.smooth_p), t_rd, p.smooth_p) + t_wr
    t_sm = _smax(t_core, t_rd + t_wr, p.smooth_p)
    # The final combine of a cross-block reduction runs through L2 and the SMs: core cycles.
    reduce_tail = np.where(cross_block_reduction(ka), p.reduce_overhead_cycles / f_hz, 0.0)
    fixed_s = np.where(ka.is_memset & (p.memset_s > 0), p.memset_s, p.launch_s)  # a memset is no kernel grid
    time_s = np.where(ka.is_tensor | ka.is_simt_gemm, t_tc, t_sm) + fixed_s + ka.work_scale * reduce_tail
    return Components(t_tensor, t_simt, t_rd + t_wr, time_s, dram_share)


def cross_block_reduction(ka: KernelArrays) -> np.ndarray:
    """Kernels that pay the ``reduce_overhead_cycles`` tail: reductions whose partial sums span thread blocks,
    ``(K, 1)``.

    A ``reduce`` kernel whose output is an order of magnitude smaller than its input (less than
    :data:`CROSS_BLOCK_OUTPUT_FRACTION` of its bytes read) sums over the token rows, which many blocks share:
    bias and γ/β gradients combine per-block partial sums in a final pass (semaphores, last-block combine).
    Row-wise reductions — LayerNorm forward and backward-dx, attention's ``dot_do_o`` — keep one row inside
    one block and write an output about as large as their input; they have no such tail. The tail — the last
    block's wait on the blocks' semaphore and its sum over their partials, which the L2 holds — runs in the core
    clock domain (the L2 and the SMs), so it is counted in core cycles: measured on the H200, a column sum of 67 MB
    takes x1.13 the time at a power-capped SM clock x0.77 (``data/h200-response.json``), where its DRAM traffic
    alone would not move.
    """
    is_reduce = ka.access == ACCESS_CLASSES.index("reduce")
    return is_reduce & (ka.write_bytes < CROSS_BLOCK_OUTPUT_FRACTION * ka.read_bytes)


def l2_served_fraction(ka: KernelArrays, spec: GpuSpec) -> np.ndarray:
    """Share of each SIMT kernel's DRAM-level traffic that the L2 cache serves instead, ``(K, 1)``.

    A kernel whose data were just touched (its producer in a step, its own previous launch in an isolated
    replay) finds them in L2 only while its whole footprint fits: reading through the data in the order they
    were written, a footprint larger than the cache evicts the rest before it is reached (least recently used
    streaming). So ``φ = h · max(0, 1 − (B_r + B_w) / C)`` with ``C`` = ``l2_resident_bytes`` (at most the L2)
    and ``h`` = ``l2_hit_fraction``: a small kernel is served mostly by L2, one of ``C`` or more not at all
    (measured on the H200: at inputs of 32 MiB and more a rewritten input is read no faster than a flushed one,
    ``data/h200-l2-reuse.json``). Tensor-core kernels are left out: their operand reuse is modelled by
    :func:`gemm_read_traffic`.
    """
    p = spec.model
    footprint = ka.read_bytes + ka.write_bytes
    resident = max(min(p.l2_resident_bytes, spec.l2_bytes), 1.0)
    return np.where(ka.is_tensor, 0.0, p.l2_hit_fraction * np.clip(1.0 - footprint / resident, 0.0, 1.0))


def power_w(ka: KernelArrays, spec: GpuSpec, core_mhz: np.ndarray, mem_mhz: np.ndarray, comp: Components) -> np.ndarray:
    """Board power of each kernel at effective clocks (W)."""
    p = spec.model
    v = voltage_v(spec, core_mhz)
    t = comp.time_s
    bytes_rate = ka.work_scale * (ka.read_bytes + ka.write_bytes) / t
    # A SIMT GEMM's FMAs take their operands from shared memory through the register file: more switching per
    # issue-busy second than other SIMT work (``c_simt_gemm_w`` on top of ``c_simt_w``).
    c_simt = p.c_simt_w + p.c_simt_gemm_w * ka.is_simt_gemm
    activity = p.c_tensor_w * comp.t_tensor / t + c_simt * comp.t_simt / t
    core_dyn = (
        v
        * v
        * (
            core_mhz * 1e-3 * (p.c_clock_w + ka.activity_scale * activity)
            + ka.activity_scale * p.e_xbar_j_per_byte * bytes_rate
        )
    )
    if p.e_smem_j_per_byte > 0:  # shared-memory accesses (kernels that count them)
        onchip_rate = ka.work_scale * ka.onchip_bytes / t
        core_dyn = core_dyn + v * v * ka.activity_scale * p.e_smem_j_per_byte * onchip_rate
    static = p.p_const_w + p.k_leak_w_per_v * v
    memory = p.p_mem_bg_w * mem_mhz / spec.max_mem_mhz + p.e_dram_j_per_byte * bytes_rate * comp.dram_share
    return static + core_dyn + memory


def gap_power_w(spec: GpuSpec, core_mhz: float, mem_mhz: float) -> float:
    """Board power while no kernel runs but the clocks stay up (launch gaps inside a step), W: the model's
    power with no activity — static and leakage power, the clock tree, the memory's background."""
    p = spec.model
    core_mhz = float(reached_core_mhz(spec, core_mhz))
    v = float(voltage_v(spec, np.array([core_mhz]))[0])
    return (
        p.p_const_w
        + p.k_leak_w_per_v * v
        + v * v * core_mhz * 1e-3 * p.c_clock_w
        + p.p_mem_bg_w * mem_mhz / spec.max_mem_mhz
    )


@dataclass(frozen=True)
class Prediction:
    """Model output for kernels × configurations (arrays of shape ``(K, C)``)."""

    time_s: np.ndarray
    power_w: np.ndarray
    energy_j: np.ndarray
    core_mhz: np.ndarray  # effective core clock after the power cap
    mem_mhz: np.ndarray
    capped: np.ndarray  # True where the power cap lowered the requested core clock


def config_arrays(spec: GpuSpec, configs: Sequence[ClockConfig]) -> tuple[np.ndarray, np.ndarray]:
    """Core clock each configuration runs at before the power cap (its request — the maximum when auto — up to
    the GPU's :attr:`~rlclock.dvfs.spec.GpuSpec.top_core_mhz`) and its memory clock, ``(1, C)``."""
    core = reached_core_mhz(spec, np.array([spec.requested_core_mhz(c) for c in configs], dtype=float)).reshape(1, -1)
    mem = np.array([spec.effective_mem_mhz(c) for c in configs], dtype=float).reshape(1, -1)
    return core, mem


def predict(
    ka: KernelArrays, spec: GpuSpec, configs: Sequence[ClockConfig], power_limit_w: float | None = None
) -> Prediction:
    """Time, power and energy of every kernel at every configuration, the power cap applied.

    The GPU runs a kernel at the requested core clock unless its power would exceed the limit; then at the
    highest clock whose power fits (found by bisection; power rises monotonically with the clock). "Auto"
    requests the highest supported clock, so it lands on the cap for power-hungry kernels.
    """
    req_core, mem = config_arrays(spec, configs)
    return predict_clocks(ka, spec, req_core, mem, power_limit_w)


def predict_clocks(
    ka: KernelArrays, spec: GpuSpec, req_core_mhz: np.ndarray, mem_mhz: np.ndarray, power_limit_w: float | None = None
) -> Prediction:
    """:func:`predict` for explicit requested-clock arrays ``(1, C)``."""
    cap = (spec.power_limit_w if power_limit_w is None else power_limit_w) * ka.cap_scale
    shape = np.broadcast_shapes((len(ka), 1), req_core_mhz.shape)
    core = np.broadcast_to(req_core_mhz, shape).astype(float)
    mem = np.broadcast_to(mem_mhz, shape).astype(float)
    comp = components(ka, spec, core, mem)
    pw = power_w(ka, spec, core, mem, comp)
    over = pw > cap
    if np.any(over):
        lo = np.full(shape, float(spec.min_core_mhz))
        hi = core.copy()
        for _ in range(_BISECT_STEPS):
            mid = 0.5 * (lo + hi)
            c_mid = components(ka, spec, mid, mem)
            fits = power_w(ka, spec, mid, mem, c_mid) <= cap
            lo = np.where(fits, mid, lo)
            hi = np.where(fits, hi, mid)
        core = np.where(over, lo, core)
        comp = components(ka, spec, core, mem)
        pw = power_w(ka, spec, core, mem, comp)
    t = comp.time_s
    return Prediction(time_s=t, power_w=pw, energy_j=pw * t, core_mhz=core, mem_mhz=mem, capped=over)


def anchor(
    ka: KernelArrays,
    spec: GpuSpec,
    time_s: np.ndarray,
    energy_j: np.ndarray,
    iterations: int = 30,
    core_mhz: np.ndarray | None = None,
    mem_mhz: np.ndarray | None = None,
) -> KernelArrays:
    """Scale each kernel's work (and switching activity) so that the model reproduces measured auto points.

    Args:
        ka: Kernels (all rows are anchored; rows with ``NaN`` time keep scale 1, rows with ``NaN`` energy
            keep activity scale 1).
        spec: The GPU.
        time_s: Measured time at auto clocks per kernel.
        energy_j: Measured energy at auto clocks per kernel.
        iterations: Fixed-point iterations (the power cap couples time and power).
        core_mhz: The core clock each kernel was measured at, MHz, ``(K,)`` (default: auto, as a profiled step's
            kernels are).
        mem_mhz: The memory clock each was measured at (default: the auto memory clock).

    Returns:
        ``ka`` with ``work_scale`` / ``activity_scale`` set; the model then predicts how the measured point
        moves with the clocks. A kernel measured within ``1 - CAPPED_FRACTION`` of the power limit (or above
        it) ran power-capped: the driver regulates to a little below the nominal limit and readings scatter,
        so its own cap becomes the measured power. Power cannot be anchored below the model's static and
        memory-background floor; such kernels (a few microseconds long) keep the floor.
    """
    t_meas = np.asarray(time_s, float).reshape(-1, 1)
    e_meas = np.asarray(energy_j, float).reshape(-1, 1)
    has_t = np.isfinite(t_meas) & (t_meas > 0)
    has_e = has_t & np.isfinite(e_meas) & (e_meas > 0)
    work = np.ones_like(t_meas)
    act = np.ones_like(t_meas)
    auto_core, auto_mem = config_arrays(spec, [ClockConfig()])
    if core_mhz is not None:
        auto_core = reached_core_mhz(spec, np.asarray(core_mhz, float).reshape(-1, 1))
    if mem_mhz is not None:
        auto_mem = np.asarray(mem_mhz, float).reshape(-1, 1)
    p_target = np.where(has_e, e_meas / np.where(has_t, t_meas, 1.0), np.nan)
    at_cap = has_e & (p_target >= CAPPED_FRACTION * spec.power_limit_w)
    cap = np.where(at_cap, p_target / spec.power_limit_w, 1.0)
    out = ka
    for _ in range(iterations):
        out = ka.scaled(work, act, cap)
        pred = predict_clocks(out, spec, auto_core, auto_mem)
        work = np.where(has_t, work * t_meas / pred.time_s, work)
        idle_part = _static_power(out, spec, pred)
        dyn_pred = np.maximum(pred.power_w - idle_part, 1e-6)
        ratio = np.where(has_e, np.clip((p_target - idle_part) / dyn_pred, 0.05, 20.0), 1.0)
        act = np.clip(act * ratio, 1e-3, 50.0)
    return ka.scaled(work, act, cap)


def _static_power(ka: KernelArrays, spec: GpuSpec, pred: Prediction) -> np.ndarray:
    """The part of the power that activity scaling does not touch (static, clock tree, memory background)."""
    p = spec.model
    v = voltage_v(spec, pred.core_mhz)
    bytes_rate = ka.work_scale * (ka.read_bytes + ka.write_bytes) / pred.time_s
    dram_share = 1.0 - l2_served_fraction(ka, spec) if p.l2_hit_fraction > 0 else 1.0
    return (
        p.p_const_w
        + p.k_leak_w_per_v * v
        + v * v * pred.core_mhz * 1e-3 * p.c_clock_w
        + p.p_mem_bg_w * pred.mem_mhz / spec.max_mem_mhz
        + p.e_dram_j_per_byte * bytes_rate * dram_share
    )
