"""A GPU spec for a GPU that has no preset, built from what the GPU itself reports.

A preset holds two kinds of values: hardware facts (SM count, clock table, memory bus, L2, power limit, the
peak rates of its units) and the model's physical parameters. The facts of any NVIDIA GPU can be read from NVML
and CUDA (:class:`DeviceFacts`, read by :func:`rlclock.gpu.describe.device_facts`); the peak rates per cycle follow
from its compute capability (:data:`RATES`). The model's parameters are carried over from the fitted preset of the
nearest kind (HBM data-centre GPUs from the H200's fit, GDDR cards from the RTX 3080 Ti's), scaled to the GPU's
size and clocks (:func:`spec_from_facts`). The result is a *generic* spec — usable at once by every command, with
its figures estimates until ``rlclock calibrate`` fits it on the GPU (``docs/simulator.md``, "A GPU without a
preset").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from rlclock.dvfs.spec import GpuSpec, architecture_of, get_spec
from rlclock.errors import SpecError


@dataclass(frozen=True)
class UnitRates:
    """Peak rates of one compute capability, per SM per core-clock cycle (dense; an FMA counts 2).

    Attributes:
        tensor: Tensor-core FLOP/cycle/SM by dtype, with fp32 accumulation, as a data-centre or workstation part
            runs it; a type the units lack (no TF32 or BF16 before compute capability 8.0) runs at ``simt_fp32``.
        simt_fp32: FP32 FLOP/cycle/SM on the SIMT units (twice the FP32 lanes).
        threads_per_sm: Most resident threads per SM.
        l2_bytes_per_sm: L2 cache per SM of the generation's parts, bytes (only used when CUDA cannot be asked).
        geforce_tensor_share: Share of ``tensor`` a GeForce card of this generation reaches with fp32 accumulation
            (NVIDIA halves it on GeForce parts since Turing).
        example: A GPU of the generation whose datasheet gives the rates (for the reader).
    """

    tensor: dict[str, float]
    simt_fp32: float
    threads_per_sm: int
    l2_bytes_per_sm: float
    geforce_tensor_share: float
    example: str


RATES: dict[tuple[int, int], UnitRates] = {
    (7, 0): UnitRates(
        {"fp16": 1024}, 128, 2048, 6e6 / 80, 1.0, "V100: 125 TFLOP/s fp16 = 1024 × 80 SMs × 1.53 GHz; 6 MB of L2"
    ),
    (7, 5): UnitRates(
        {"fp16": 1024}, 128, 1024, 4e6 / 40, 0.5, "T4: 65 TFLOP/s fp16 = 1024 × 40 SMs × 1.59 GHz; 4 MB of L2"
    ),
    (8, 0): UnitRates(
        {"fp16": 2048, "bf16": 2048, "tf32": 1024},
        128,
        2048,
        40e6 / 108,
        1.0,
        "A100: 312 TFLOP/s bf16 = 2048 × 108 SMs × 1.41 GHz; 40 MB of L2",
    ),
    (8, 6): UnitRates(
        {"fp16": 1024, "bf16": 1024, "tf32": 512},
        256,
        1536,
        6e6 / 84,
        0.5,
        "A40: 150 TFLOP/s fp16 = 1024 × 84 SMs × 1.74 GHz, 6 MB of L2; RTX 3080 Ti half the rate per SM",
    ),
    (8, 9): UnitRates(
        {"fp16": 1024, "bf16": 1024, "tf32": 512, "fp8": 2048},
        256,
        1536,
        96e6 / 142,
        0.5,
        "L40S: 362 TFLOP/s bf16 = 1024 × 142 SMs × 2.52 GHz, 96 MB of L2; RTX 4090 half the rate per SM",
    ),
    (9, 0): UnitRates(
        {"fp16": 4096, "bf16": 4096, "tf32": 2048, "fp8": 8192},
        256,
        2048,
        50e6 / 132,
        1.0,
        "H100 SXM: 989 TFLOP/s bf16 = 4096 × 132 SMs × 1.83 GHz; 50 MB of L2",
    ),
    (10, 0): UnitRates(
        {"fp16": 8192, "bf16": 8192, "tf32": 4096, "fp8": 16384},
        256,
        2048,
        126e6 / 148,
        1.0,
        "B200: 2.25 PFLOP/s bf16 dense over 148 SMs; 126 MB of L2",
    ),
    (12, 0): UnitRates(
        {"fp16": 1024, "bf16": 1024, "tf32": 512, "fp8": 2048},
        256,
        1536,
        96e6 / 170,
        0.5,
        "RTX PRO 6000 Blackwell; RTX 5090 (GeForce, 170 SMs, 96 MB of L2) half the rate per SM",
    ),
}
"""Peak unit rates by compute capability (datasheets; each entry's ``example`` shows the arithmetic). A capability
not listed takes the nearest lower one of the same major version, else the nearest lower listed; below 7.0 (no
tensor cores, and NVML locks no clocks there) there is none (:func:`rates_for`)."""

FP32_LANES_PER_SM_DIVISOR = 2
"""FP32 FLOP per lane per cycle (one FMA = 2): NVML's CUDA-core count over ``simt_fp32 / 2`` gives the SM count."""

HBM_BUS_BITS = 2048
"""A memory bus this wide or wider is HBM (data-centre parts): 4096–8192 bits, against 128–512 for GDDR."""

BASE_FOR_MEMORY: dict[str, str] = {"hbm": "h200-sxm", "gddr": "rtx3080ti"}
"""The fitted preset whose model parameters a GPU without a preset starts from, by its kind of memory."""

_CORE_POWER = ("p_const_w", "k_leak_w_per_v", "c_clock_w", "c_tensor_w", "c_simt_w", "c_simt_gemm_w")
_MEMORY_POWER = ("p_mem_bg_w",)


@dataclass(frozen=True)
class DeviceFacts:
    """What a GPU reports about itself (NVML, and CUDA for what NVML does not give).

    Attributes:
        name: NVML's name (``"NVIDIA L40S"``).
        architecture: NVML's architecture name (``"Ada"``; empty if not reported).
        compute_capability: CUDA compute capability ``(major, minor)``.
        cuda_cores: FP32 lanes of the whole GPU (NVML's GPU core count; 0 if not reported).
        sm_count: Streaming multiprocessors (from CUDA; 0 if not read — then ``cuda_cores`` gives it).
        threads_per_sm: Most resident threads per SM (from CUDA; 0 if not read).
        l2_bytes: L2 cache, bytes (from CUDA; 0 if not read).
        mem_bus_bits: Memory bus width, bits.
        clocks: The clock table: memory clock (MHz) → its supported core clocks (MHz).
        default_mem_mhz: The memory clock compute work runs at (the highest).
        power_limit_w: The default board power limit, watts.
        geforce: Whether NVML's brand is GeForce (tensor rate with fp32 accumulation halved).
    """

    name: str
    architecture: str
    compute_capability: tuple[int, int]
    cuda_cores: int
    sm_count: int
    threads_per_sm: int
    l2_bytes: float
    mem_bus_bits: int
    clocks: dict[int, tuple[int, ...]]
    default_mem_mhz: int
    power_limit_w: float
    geforce: bool = False


def rates_for(cc: tuple[int, int]) -> tuple[tuple[int, int], UnitRates]:
    """The listed capability whose rates ``cc`` takes, and the rates (see :data:`RATES`).

    Raises:
        SpecError: ``cc`` is below 7.0 (Pascal and older: no tensor cores, and no locked clocks through NVML).
    """
    if cc < min(RATES):
        raise SpecError(
            f"compute capability {cc[0]}.{cc[1]} is older than Volta (7.0): rlclock neither models such a "
            "GPU nor can lock its clocks through NVML.",
            "use a GPU of compute capability 7.0 or newer.",
        )
    same_major = [k for k in RATES if k[0] == cc[0] and k <= cc]
    key = max(same_major) if same_major else max(k for k in RATES if k <= cc)
    return key, RATES[key]


def key_of(name: str) -> str:
    """A preset key for a GPU name: lower case, words joined by ``-`` (``"NVIDIA L40S"`` → ``"nvidia-l40s"``)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def spec_from_facts(facts: DeviceFacts) -> GpuSpec:
    """A generic spec for the GPU ``facts`` describe: its own hardware facts, the model of the nearest fitted preset.

    Scaling of the carried-over model: core-side power (static, leakage, clock, tensor and SIMT switching) by the
    SM count, memory background power by the bus width, the voltage knee (and a GeForce card's boost ceiling) by
    the top core clock; per-byte energies, latencies in cycles and achieved fractions of peak are kept; the L2
    residency keeps the base's share of the L2.

    Raises:
        SpecError: The facts cannot make a spec (no clock table, no SM count, no bus width, no power limit).
    """
    where = f"GPU {facts.name!r}"
    if not facts.clocks or not any(facts.clocks.values()):
        raise SpecError(
            f"{where}: NVML lists no supported clocks, so rlclock cannot plan clocks for it.",
            "this GPU does not support clock control through NVML (GeForce cards before Volta do not); "
            "check with rlclock doctor.",
        )
    cc_key, rates = rates_for(facts.compute_capability)
    sm = facts.sm_count or (
        facts.cuda_cores // (int(rates.simt_fp32) // FP32_LANES_PER_SM_DIVISOR) if facts.cuda_cores else 0
    )
    if sm <= 0 or facts.mem_bus_bits <= 0 or facts.power_limit_w <= 0:
        raise SpecError(
            f"{where}: the GPU did not report its SM count, memory bus width or power limit "
            f"(SMs {sm}, bus {facts.mem_bus_bits} bits, limit {facts.power_limit_w:g} W).",
            "write a GPU spec file for it (the preset format; see docs/simulator.md) and pass it with "
            "--gpu my-gpu.yaml.",
        )
    memory = "hbm" if facts.mem_bus_bits >= HBM_BUS_BITS else "gddr"
    base = get_spec(BASE_FOR_MEMORY[memory])
    share = rates.geforce_tensor_share if facts.geforce else 1.0
    tensor = {
        dt: rates.tensor[dt] * share
        if dt in rates.tensor
        else rates.tensor["fp16"] * share
        if dt == "fp8" and cc_key >= (8, 0)
        # fp8 data on fp16 units
        else rates.simt_fp32
        for dt in ("fp16", "bf16", "tf32", "fp8")
    }  # a type the tensor cores lack: FP32 units
    tensor["fp32"] = tensor["tf32"]
    clocks = {int(m): tuple(sorted((int(c) for c in cs), reverse=True)) for m, cs in facts.clocks.items() if cs}
    default_mem = facts.default_mem_mhz if facts.default_mem_mhz in clocks else max(clocks)
    top = max(max(c) for c in clocks.values())
    core_scale = sm / base.sm_count
    mem_scale = facts.mem_bus_bits / base.mem_bus_bits
    clock_scale = top / base.abs_max_core_mhz
    p = base.model
    changes: dict[str, float] = {n: getattr(p, n) * core_scale for n in _CORE_POWER}
    changes.update({n: getattr(p, n) * mem_scale for n in _MEMORY_POWER})
    changes["f_ridge_mhz"] = min(p.f_ridge_mhz * clock_scale, 0.95 * top)
    # a GeForce card lists clocks above what its voltage limit lets it reach; a data-centre part runs its table
    changes["boost_max_mhz"] = min(top, p.boost_max_mhz * clock_scale) if facts.geforce else 0.0
    l2 = facts.l2_bytes if facts.l2_bytes > 0 else rates.l2_bytes_per_sm * sm
    if p.l2_resident_bytes > 0:  # the share of the L2 a kernel's data stay resident in, as on the base
        changes["l2_resident_bytes"] = p.l2_resident_bytes * l2 / base.l2_bytes
    threads = facts.threads_per_sm or rates.threads_per_sm
    cc = ".".join(map(str, facts.compute_capability))
    asked = {"SM count": facts.sm_count, "threads per SM": facts.threads_per_sm, "L2": facts.l2_bytes}
    from_cuda = [what for what, read in asked.items() if read]
    by_capability = [what for what, read in asked.items() if not read]
    sources = {
        "hardware": f"read from the GPU — NVML: name, clock table, memory bus, default power limit, compute capability "
        f"{cc}{', brand GeForce' if facts.geforce else ''}"
        + (f"; CUDA: {', '.join(from_cuda)}" if from_cuda else "")
        + (f"; by compute capability (CUDA not asked): {', '.join(by_capability)}" if by_capability else "")
        + (" (SM count from NVML's core count)" if not facts.sm_count else ""),
        "rates": f"by compute capability {'.'.join(map(str, cc_key))} (rlclock.dvfs.derive.RATES: {rates.example})"
        + (", tensor rate with fp32 accumulation halved on a GeForce card" if facts.geforce else ""),
        "model": f"generic: the {base.key} preset's fitted parameters ({memory.upper()} memory), core power scaled by "
        f"SM count ×{core_scale:.3g}, memory background power by bus width ×{mem_scale:.3g}, voltage knee by "
        f"top clock ×{clock_scale:.3g}; not fitted to this GPU (rlclock calibrate fits it)",
        "switch_latency_s": f"the {base.key} preset's (not measured on this GPU)",
        "base": base.key,
    }
    return GpuSpec(
        key=key_of(facts.name),
        name=facts.name,
        architecture=facts.architecture or architecture_of(facts.compute_capability) or base.architecture,
        sm_count=int(sm),
        threads_per_sm=int(threads),
        mem_bus_bits=int(facts.mem_bus_bits),
        l2_bytes=float(l2),
        clocks=clocks,
        default_mem_mhz=int(default_mem),
        power_limit_w=float(facts.power_limit_w),
        idle_power_w=base.idle_power_w * facts.power_limit_w / base.power_limit_w,
        tensor_flops_per_cycle_per_sm=tensor,
        simt_flops_per_cycle_per_sm=float(rates.simt_fp32),
        switch_latency_s=base.switch_latency_s,
        model=replace(p, **changes),
        sources=sources,
        fitted_to="",
    )
