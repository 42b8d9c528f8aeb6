"""GpuSpec: a GPU's clock table, limits and DVFS-model parameters — one source of truth per constant.

Presets live in ``rlclock/dvfs/presets/<key>.yaml``, each value with its source. Clock tables use NVML's
shape: for every supported memory clock, the core clocks supported with it (so couplings such as the
RTX 3080 Ti's "405 MHz memory only with core ≤ 420 MHz" are part of the table).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rlclock.errors import ClockError, SpecError
from rlclock.schedule import AUTO, ClockConfig
from rlclock.yamlio import read_yaml

MEMORY_LOCKS: tuple[str, ...] = ("runtime", "deferred", "none")
"""How a GPU's memory clock can be locked: ``runtime`` — between kernels, like the core clock
(``nvmlDeviceSetMemoryLockedClocks``, documented for Ampere and newer); ``deferred`` — only from the next time
the GPU is initialised (``nvidia-smi --lock-memory-clocks-deferred``; Hopper data-centre GPUs answer a runtime
memory lock with "not supported"), so the memory clock is a choice for a whole job; ``none`` — one memory clock,
nothing to choose. ``docs/simulator.md`` ("Clock capabilities") gives the sources."""

DEFERRED_MEMORY_ARCHITECTURES: frozenset[str] = frozenset({"hopper"})
"""Architectures whose memory clock can be locked only deferred (lower case)."""


ARCHITECTURE_OF_MAJOR: dict[int, str] = {7: "Volta", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}
"""Architectures by CUDA compute capability major version (7.5 is Turing and 8.9 Ada: :func:`architecture_of`)."""


def architecture_of(compute_capability: tuple[int, int]) -> str:
    """The architecture of a CUDA compute capability (``""`` if unknown) — for GPUs whose NVML does not name it."""
    major, minor = compute_capability
    if (major, minor) == (7, 5):
        return "Turing"
    if (major, minor) == (8, 9):
        return "Ada"
    return ARCHITECTURE_OF_MAJOR.get(major, "")


def memory_locks_of(architecture: str, mem_clocks_mhz: Collection[int] | None) -> str:
    """The memory-lock capability (one of :data:`MEMORY_LOCKS`) of a GPU of ``architecture`` offering
    ``mem_clocks_mhz`` — the one rule the presets, the env specs and the clock control use.

    Args:
        architecture: ``"Ampere"``, ``"Hopper"`` … as a preset or NVML names it (case ignored; empty if unknown).
        mem_clocks_mhz: The supported memory clocks, MHz (``None`` when the GPU does not list them).
    """
    if mem_clocks_mhz is not None and len(set(mem_clocks_mhz)) <= 1:
        return "none"
    if architecture.strip().lower() in DEFERRED_MEMORY_ARCHITECTURES:
        return "deferred"
    return "runtime"


PARAMETER_RANGES: dict[str, tuple[float, float, str]] = {
    "v_min_v": (0.5, 0.9, "V"),
    "v_max_v": (0.8, 1.2, "V"),
    "f_ridge_mhz": (300.0, 2500.0, "MHz"),
    "p_const_w": (0.0, 300.0, "W"),
    "k_leak_w_per_v": (0.0, 300.0, "W/V"),
    "c_clock_w": (0.0, 300.0, "W/GHz at 1 V"),
    "c_tensor_w": (1.0, 800.0, "W/GHz at 1 V"),
    "c_simt_w": (0.0, 800.0, "W/GHz at 1 V"),
    "e_xbar_j_per_byte": (0.0, 3e-10, "J/B at 1 V"),
    "p_mem_bg_w": (0.0, 300.0, "W"),
    "e_dram_j_per_byte": (0.0, 3e-10, "J/B"),
    "eta_gemm": (0.5, 1.0, ""),
    "eta_attention": (0.3, 1.0, ""),
    "eta_stream": (0.5, 1.0, ""),
    "eta_gather": (0.3, 1.0, ""),
    "eta_reduce": (0.3, 1.0, ""),
    "simt_ops_per_byte": (0.0, 40.0, "ops/B"),
    "lat_core_cycles": (10.0, 2000.0, "core cycles"),
    "lat_mem_cycles": (500.0, 10000.0, "memory cycles"),
    "smooth_p": (1.5, 12.0, ""),
    "launch_s": (5e-7, 5e-6, "s"),
    "reduce_overhead_cycles": (0.0, 2e5, "core cycles"),
    "eta_simt_gemm": (0.2, 1.0, ""),
    "c_simt_gemm_w": (0.0, 800.0, "W/GHz at 1 V"),
    "memset_s": (0.0, 1e-5, "s"),
    "l2_hit_fraction": (0.0, 1.0, ""),
    "l2_resident_bytes": (0.0, 512e6, "B"),
    "l2_bytes_per_cycle": (0.0, 1e4, "B/cycle"),
    "norm_ops_per_written_byte": (0.0, 50.0, "ops/B"),
    "loop_ops_per_element": (0.0, 1000.0, "ops"),
    "narrow_load_ops": (0.0, 1000.0, "ops"),
    "boost_max_mhz": (0.0, 4000.0, "MHz"),
    "smem_bytes_per_cycle": (0.0, 512.0, "B/cycle per SM"),
    "e_smem_j_per_byte": (0.0, 3e-10, "J/B at 1 V"),
    "xbar_bytes_per_cycle": (0.0, 64.0, "B/cycle per SM"),
}
"""The documented range of every model parameter (low, high, unit): what a calibration may fit it to and what a
fitted spec is checked against (``docs/simulator.md``, "Calibrating a GPU"). Wide enough for every GPU of the kinds
rlclock models (Volta to Blackwell, GDDR and HBM boards of 70-1000 W); a value outside is a misfit, not a GPU."""


def out_of_range(params: DvfsParams, names: Iterable[str] | None = None) -> list[str]:
    """One phrase per parameter of ``params`` (or of ``names``) outside :data:`PARAMETER_RANGES`."""
    values = params.as_dict()
    out = []
    for n in values if names is None else names:
        lo, hi, unit = PARAMETER_RANGES[n]
        if not lo <= values[n] <= hi:
            out.append(f"{n} = {values[n]:.4g} {unit} outside {lo:g}-{hi:g}".replace("  ", " "))
    return out


@dataclass(frozen=True)
class DvfsParams:
    """Physical parameters of the simulator (see ``docs/simulator.md`` for the equations).

    Voltage: flat ``v_min_v`` up to ``f_ridge_mhz``, linear to ``v_max_v`` at the highest core clock reached.
    Power: ``p_const_w + k_leak_w_per_v·V + V²·f_GHz·(c_clock + c_tensor·u_tensor + c_simt·u_simt)
    + e_xbar_j_per_byte·V²·B/t + p_mem_bg_w·m/m_max + e_dram_j_per_byte·B/t``.
    Time: tensor / SIMT work over clock-scaled rates, DRAM bytes over bandwidth limited both by the
    memory clock and by memory-level parallelism over latency ``lat_core_cycles/f + lat_mem_cycles/m``;
    ``reduce`` kernels that sum across thread blocks (output far smaller than input: bias and γ/β
    gradients) add ``reduce_overhead_cycles`` core cycles (their final combine of partial sums through L2).
    Matrix products on the FP32 units (FFMA kernels: fp32 data with TF32 off) run at ``eta_simt_gemm`` of the
    FP32 peak (their operands' shared-memory loads and address math share the issue slots with the FMAs) and,
    like the tensor-core ones, write their results after the math. A driver memset activity (``Memset (Device)``:
    a few bytes of tile counters and flags) takes ``memset_s`` instead of a kernel's ``launch_s`` (0: as a kernel).

    Optional terms (default 0 = off, so presets that do not set them predict exactly as before):
    L2 residency — a SIMT kernel whose footprint fits in ``l2_resident_bytes`` finds part of its data still in
    L2, a share ``φ = h·max(0, 1 − (B_r+B_w)/C)`` (``h`` = ``l2_hit_fraction``) of its bytes skips DRAM
    (no ``e_dram`` energy) and moves at ``l2_bytes_per_cycle``·f instead of the DRAM bandwidth;
    ``norm_ops_per_written_byte`` — extra SIMT operations of ``norm`` kernels whose statistics take Welford's
    update per element (LayerNorm's mean and variance; not RMSNorm's sum of squares) per byte they write, i.e. per
    element they produce (fp32 statistics, normalisation and affine math), which add SM time and switching
    power; ``loop_ops_per_element`` — SIMT operations per element of PyTorch's generic (strided: offsets per
    operand and dimension) and unrolled (a dynamic cast per load and store) elementwise loops;
    ``narrow_load_ops`` — SIMT operations per operand load instruction of a GEMM whose tiles are fetched fewer than
    16 bytes at a time (a CUTLASS ``_alignN`` kernel chosen for a misaligned leading dimension);
    ``c_simt_gemm_w`` — switching power per issue-busy second of a SIMT matrix product on top of ``c_simt_w``
    (its FMAs take every operand from shared memory through the register file, which other SIMT work does not);
    ``boost_max_mhz`` — the highest core clock the GPU runs at, MHz, where that is below the top of NVML's table
    (a GeForce card lists clocks it never reaches at its voltage limit): "auto" boosts up to it, a higher locked
    clock lands on it, and the voltage reaches ``v_max_v`` there (0 = the top of the table);
    ``smem_bytes_per_cycle`` — bytes of shared-memory traffic an SM moves per core cycle: a kernel that counts its
    on-chip bytes (``Kernel.onchip_bytes``) spends at least ``B_onchip / (smem_bytes_per_cycle · N_sm · f)`` on the
    SMs (joined to its SIMT time by the smooth max), and ``e_smem_j_per_byte`` — energy per such byte at 1 V (the
    SIMT units switch only for the SIMT work itself). Launch
    occupancy (always on, when the trace records launch shapes): a SIMT kernel whose grid
    fills only a share of the GPU's resident-thread capacity keeps that share of the loads in flight.
    """

    v_min_v: float
    v_max_v: float
    f_ridge_mhz: float
    p_const_w: float
    k_leak_w_per_v: float
    c_clock_w: float
    c_tensor_w: float
    c_simt_w: float
    e_xbar_j_per_byte: float
    p_mem_bg_w: float
    e_dram_j_per_byte: float
    eta_gemm: float
    eta_attention: float
    eta_stream: float
    eta_gather: float
    eta_reduce: float
    simt_ops_per_byte: float
    lat_core_cycles: float
    lat_mem_cycles: float
    smooth_p: float
    launch_s: float
    reduce_overhead_cycles: float = 0.0
    eta_simt_gemm: float = 1.0
    c_simt_gemm_w: float = 0.0
    memset_s: float = 0.0
    l2_hit_fraction: float = 0.0
    l2_resident_bytes: float = 0.0
    l2_bytes_per_cycle: float = 0.0
    norm_ops_per_written_byte: float = 0.0
    loop_ops_per_element: float = 0.0
    narrow_load_ops: float = 0.0
    boost_max_mhz: float = 0.0
    smem_bytes_per_cycle: float = 0.0
    e_smem_j_per_byte: float = 0.0
    xbar_bytes_per_cycle: float = 0.0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str) -> DvfsParams:
        names = [f.name for f in fields(cls)]
        optional = {f.name for f in fields(cls) if f.default is not MISSING}
        missing = [n for n in names if n not in data and n not in optional]
        unknown = [k for k in data if k not in names]
        if missing or unknown:
            raise SpecError(f"{where}: model parameters missing {missing} / unknown {unknown}.")
        vals = {}
        for n in names:
            if n not in data:
                continue
            v = data[n]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise SpecError(f"{where}: model parameter {n!r} must be a finite number >= 0, found {v!r}.")
            vals[n] = float(v)
        return cls(**vals)

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class GpuSpec:
    """Everything rlclock knows about one GPU model.

    Attributes:
        key: Preset key, e.g. ``"rtx3080ti"``.
        name: Name as NVML reports it, e.g. ``"NVIDIA GeForce RTX 3080 Ti"``.
        architecture: Marketing architecture (``"Ampere"``, ``"Hopper"`` …).
        sm_count: Streaming multiprocessors.
        threads_per_sm: Maximum resident threads per SM.
        mem_bus_bits: Memory interface width in bits (bandwidth = 2 · mem clock · bits / 8).
        l2_bytes: L2 cache size in bytes.
        clocks: Supported core clocks (MHz, descending) for each supported memory clock (MHz).
        default_mem_mhz: Memory clock the driver runs compute work at ("auto").
        power_limit_w: Default board power limit; "auto" is the highest clock whose power fits under it.
        idle_power_w: Board power at idle clocks (for reference and checks).
        tensor_flops_per_cycle_per_sm: Dense tensor-core FLOP per cycle per SM, by dtype.
        simt_flops_per_cycle_per_sm: FP32 FLOP per cycle per SM (an FMA counts 2).
        switch_latency_s: Default time from a clock-change request to the new clocks, seconds.
        model: DVFS model parameters.
        sources: Where each group of values comes from.
        memory_locks: How the memory clock can be locked (:data:`MEMORY_LOCKS`); empty = by
            :func:`memory_locks_of` from the architecture and the clock table.
        fitted_to: What the model parameters were fitted to on this GPU (empty: a generic preset whose
            parameters were carried over from other GPUs — :attr:`generic`).
    """

    key: str
    name: str
    architecture: str
    sm_count: int
    threads_per_sm: int
    mem_bus_bits: int
    l2_bytes: float
    clocks: Mapping[int, tuple[int, ...]]
    default_mem_mhz: int
    power_limit_w: float
    idle_power_w: float
    tensor_flops_per_cycle_per_sm: Mapping[str, float]
    simt_flops_per_cycle_per_sm: float
    switch_latency_s: float
    model: DvfsParams
    sources: Mapping[str, str] = field(default_factory=dict)
    memory_locks: str = ""
    fitted_to: str = ""

    def __post_init__(self) -> None:
        if not self.memory_locks:
            object.__setattr__(self, "memory_locks", memory_locks_of(self.architecture, self.clocks))
        elif self.memory_locks not in MEMORY_LOCKS:
            raise SpecError(
                f"GPU spec {self.key}: memory_locks {self.memory_locks!r} is not one of {list(MEMORY_LOCKS)}."
            )

    # -- clock table -------------------------------------------------------------------------------
    @cached_property
    def mem_clocks_mhz(self) -> tuple[int, ...]:
        """Supported memory clocks, descending."""
        return tuple(sorted(self.clocks, reverse=True))

    @cached_property
    def max_mem_mhz(self) -> int:
        return max(self.clocks)

    def core_clocks_mhz(self, mem_mhz: int | None = None) -> tuple[int, ...]:
        """Supported core clocks (descending) at ``mem_mhz`` (default: the auto memory clock)."""
        mem = self.default_mem_mhz if mem_mhz is None else mem_mhz
        if mem not in self.clocks:
            raise ClockError(
                f"memory clock {mem} MHz is not supported by {self.name}.",
                f"use one of {list(self.mem_clocks_mhz)} MHz.",
            )
        return self.clocks[mem]

    def max_core_mhz(self, mem_mhz: int | None = None) -> int:
        """Highest supported core clock at ``mem_mhz``."""
        return max(self.core_clocks_mhz(mem_mhz))

    @cached_property
    def min_core_mhz(self) -> int:
        return min(min(v) for v in self.clocks.values())

    @cached_property
    def top_core_mhz(self) -> float:
        """The highest core clock the GPU reaches, MHz: its boost ceiling where the model sets one
        (``model.boost_max_mhz``: a card listing clocks above what its voltage limit lets it run), else the top
        of its clock table. A request above it — "auto" included — runs at it."""
        boost = self.model.boost_max_mhz
        return min(float(self.abs_max_core_mhz), boost) if boost > 0 else float(self.abs_max_core_mhz)

    @cached_property
    def abs_max_core_mhz(self) -> int:
        return max(max(v) for v in self.clocks.values())

    def validate(self, config: ClockConfig | str) -> ClockConfig:
        """Return the parsed configuration, or raise :class:`ClockError` if this GPU cannot run it."""
        c = ClockConfig.parse(config)
        mem = self.default_mem_mhz if c.mem_mhz is None else c.mem_mhz
        cores = self.core_clocks_mhz(mem)
        if c.core_mhz is not None and c.core_mhz not in cores:
            lo, hi = min(cores), max(cores)
            step = _step(cores)
            raise ClockError(
                f"core clock {c.core_mhz} MHz is not supported at memory {mem} MHz on {self.name}.",
                f"use {lo}–{hi} MHz in steps of {step} MHz"
                + ("" if mem == self.max_mem_mhz else f" (or another memory clock of {list(self.mem_clocks_mhz)})")
                + ".",
            )
        return c

    def effective_mem_mhz(self, config: ClockConfig) -> int:
        """The memory clock a configuration runs at (the default when memory is auto)."""
        return self.default_mem_mhz if config.mem_mhz is None else config.mem_mhz

    def requested_core_mhz(self, config: ClockConfig) -> int:
        """The core clock a configuration asks for (the maximum when auto); the clock it runs at before the
        power cap is :func:`rlclock.dvfs.model.reached_core_mhz` of it."""
        if config.core_mhz is not None:
            return config.core_mhz
        return self.max_core_mhz(self.effective_mem_mhz(config))

    @property
    def generic(self) -> bool:
        """Whether the model parameters were carried over from other GPUs rather than fitted to this one."""
        return not self.fitted_to

    def generic_note(self) -> str | None:
        """One line saying that the preset is generic and how to calibrate it (``None`` for a fitted one)."""
        if not self.generic:
            return None
        if "base" in self.sources:  # built from what the GPU reports (rlclock.dvfs.derive): no preset key to name
            return (
                f"note: {self.name} has no preset; its spec was built from what it reports, with the "
                f"{self.sources['base']} preset's model scaled to it — its figures are estimates. Calibrate it on "
                "the GPU: rlclock calibrate --device N --control-clocks --out my-gpu.yaml (no --gpu needed), or "
                "write the built spec with rlclock doctor --spec-out my-gpu.yaml and fit a sweep measured "
                "elsewhere: rlclock calibrate --table SWEEP.csv --gpu my-gpu.yaml --out my-gpu-fitted.yaml."
            )
        return (
            f"note: the {self.key} preset is generic — its model parameters were carried over from other GPUs, "
            f"not fitted to an {self.name}; its figures are estimates. Calibrate it on the GPU: rlclock calibrate "
            f"--device 0 --control-clocks --gpu {self.key} --out my-gpu.yaml, or from a sweep measured elsewhere: "
            f"rlclock calibrate --table SWEEP.csv --gpu {self.key} --out my-gpu.yaml (rlclock calibrate --help)."
        )

    @property
    def runtime_memory(self) -> bool:
        """Whether the memory clock can be switched between kernels (else it is fixed for a job)."""
        return self.memory_locks == "runtime"

    def check_runtime_configs(self, configs: Iterable[ClockConfig], where: str) -> None:
        """Raise :class:`SpecError` when ``configs`` (an action set or a schedule's configurations) lock more than
        one memory clock on a GPU whose memory clock cannot be switched at runtime (one is the job's: the default,
        or another locked deferred for the whole job)."""
        if self.runtime_memory:
            return
        locked = sorted({c.mem_mhz for c in configs if c.mem_mhz is not None})
        if len(locked) > 1:
            raise SpecError(
                f"{where}: {self.name} cannot switch its memory clock while a job runs ({self.memory_locks} memory "
                f"locks), but memory clocks {locked} MHz are asked for.",
                f"keep one memory clock, the job's (mem_mhz: [{self.default_mem_mhz}] by default); which one pays "
                f"for a whole job is the job-memory baseline of rlclock baselines.",
            )

    def bandwidth_bytes_per_s(self, mem_mhz: float) -> float:
        """Peak DRAM bandwidth at a memory clock (double data rate over the bus)."""
        return 2.0 * mem_mhz * 1e6 * self.mem_bus_bits / 8.0

    def config_grid(
        self,
        core_step_mhz: int | None = None,
        core_min_mhz: int | None = None,
        mem_mhz: Sequence[int] | None = None,
        auto: bool = True,
    ) -> tuple[ClockConfig, ...]:
        """A thinned grid of configurations: the learnable action set.

        Args:
            core_step_mhz: Keep core clocks ``core_min_mhz + j·step`` (default: every supported clock).
            core_min_mhz: Lowest core clock kept (default: the lowest supported).
            mem_mhz: Memory clocks to use (default: all supported where the memory clock can be switched at
                runtime, else the default one).
            auto: Include ``auto`` and ``auto@<mem>`` for every memory clock.

        Returns:
            ``AUTO`` first (when ``auto``), then for each memory clock (descending) its auto-core entry
            and its core clocks (descending). Only supported pairs appear, so no mask is needed.
        """
        if mem_mhz is None:
            mem_mhz = self.mem_clocks_mhz if self.runtime_memory else (self.default_mem_mhz,)
        mems = list(mem_mhz)
        for m in mems:
            self.core_clocks_mhz(m)  # raises on an unsupported memory clock
        lo = self.min_core_mhz if core_min_mhz is None else core_min_mhz
        out: list[ClockConfig] = [AUTO] if auto else []
        for m in sorted(mems, reverse=True):
            if auto:
                out.append(ClockConfig(None, m))
            for f in self.core_clocks_mhz(m):
                if f < lo:
                    continue
                if core_step_mhz is None or (f - lo) % core_step_mhz == 0:
                    out.append(ClockConfig(f, m))
        return tuple(out)

    def with_model(self, **changes: float) -> GpuSpec:
        """A copy with some model parameters changed."""
        return replace(self, model=replace(self.model, **changes))

    def with_(self, **changes: Any) -> GpuSpec:
        """A copy with some attributes changed (e.g. ``switch_latency_s``)."""
        return replace(self, **changes)


def _step(values: Iterable[int]) -> int:
    v = sorted(values)
    diffs = {b - a for a, b in itertools.pairwise(v)}
    return min(diffs) if diffs else 0


# -- presets --------------------------------------------------------------------------------------------


def _clock_table(raw: Any, where: str) -> dict[int, tuple[int, ...]]:
    if not isinstance(raw, dict) or not raw:
        raise SpecError(f"{where}: 'clocks' must map memory clocks to core clock ranges.")
    table: dict[int, tuple[int, ...]] = {}
    for mem, rng in raw.items():
        try:
            mem_i = int(mem)
            if isinstance(rng, dict):
                lo, hi, step = int(rng["min"]), int(rng["max"]), int(rng["step"])
                if not (0 < lo <= hi) or step <= 0:
                    raise ValueError("need 0 < min <= max and step > 0")
                cores = tuple(range(hi, lo - 1, -step))
            else:
                cores = tuple(sorted((int(x) for x in rng), reverse=True))
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(f"{where}: bad clock range for memory {mem!r}: {exc}.") from None
        table[mem_i] = cores
    return table


def spec_to_mapping(spec: GpuSpec) -> dict[str, Any]:
    """``spec`` in the preset format (what :func:`spec_from_mapping` reads back to an equal spec)."""

    def clock_range(cores: Sequence[int]) -> dict[str, int] | list[int]:
        v = sorted(cores)
        steps = {b - a for a, b in itertools.pairwise(v)}
        return {"min": v[0], "max": v[-1], "step": steps.pop()} if len(steps) == 1 else list(cores)

    return {
        "key": spec.key,
        "name": spec.name,
        "architecture": spec.architecture,
        "sm_count": spec.sm_count,
        "threads_per_sm": spec.threads_per_sm,
        "mem_bus_bits": spec.mem_bus_bits,
        "l2_bytes": spec.l2_bytes,
        "clocks": {int(m): clock_range(c) for m, c in spec.clocks.items()},
        "default_mem_mhz": spec.default_mem_mhz,
        "power_limit_w": spec.power_limit_w,
        "idle_power_w": spec.idle_power_w,
        "tensor_flops_per_cycle_per_sm": dict(spec.tensor_flops_per_cycle_per_sm),
        "simt_flops_per_cycle_per_sm": spec.simt_flops_per_cycle_per_sm,
        "switch_latency_s": spec.switch_latency_s,
        "memory_locks": spec.memory_locks,
        "fitted_to": spec.fitted_to,
        "model": spec.model.as_dict(),
        "sources": dict(spec.sources),
    }


def write_spec_file(data: Mapping[str, Any], path: str | Path, comment: str) -> Path:
    """Write a spec mapping (:func:`spec_to_mapping`, maybe amended) as a GPU spec file, headed by ``comment``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {comment}\n" + yaml.safe_dump(dict(data), sort_keys=False, width=120))
    return path


def load_spec_file(path: str | Path) -> GpuSpec:
    """Load a GPU spec from a YAML file (the preset format)."""
    return spec_from_mapping(read_yaml(path, "GPU spec"), str(path))


def spec_from_mapping(data: Any, where: str) -> GpuSpec:
    """Build and validate a :class:`GpuSpec` from its YAML mapping."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a GPU spec must be a mapping.")
    required = [
        "key",
        "name",
        "architecture",
        "sm_count",
        "threads_per_sm",
        "mem_bus_bits",
        "l2_bytes",
        "clocks",
        "default_mem_mhz",
        "power_limit_w",
        "idle_power_w",
        "tensor_flops_per_cycle_per_sm",
        "simt_flops_per_cycle_per_sm",
        "switch_latency_s",
        "model",
    ]
    missing = [r for r in required if r not in data]
    if missing:
        raise SpecError(f"{where}: GPU spec lacks {missing}.")
    clocks = _clock_table(data["clocks"], where)
    default_mem = int(data["default_mem_mhz"])
    if default_mem not in clocks:
        raise SpecError(f"{where}: default_mem_mhz {default_mem} is not among the memory clocks {sorted(clocks)}.")
    try:
        spec = GpuSpec(
            key=str(data["key"]),
            name=str(data["name"]),
            architecture=str(data["architecture"]),
            sm_count=int(data["sm_count"]),
            threads_per_sm=int(data["threads_per_sm"]),
            mem_bus_bits=int(data["mem_bus_bits"]),
            l2_bytes=float(data["l2_bytes"]),
            clocks=clocks,
            default_mem_mhz=default_mem,
            power_limit_w=float(data["power_limit_w"]),
            idle_power_w=float(data["idle_power_w"]),
            tensor_flops_per_cycle_per_sm={str(k): float(v) for k, v in data["tensor_flops_per_cycle_per_sm"].items()},
            simt_flops_per_cycle_per_sm=float(data["simt_flops_per_cycle_per_sm"]),
            switch_latency_s=float(data["switch_latency_s"]),
            model=DvfsParams.from_mapping(data["model"], where),
            sources={str(k): str(v) for k, v in (data.get("sources") or {}).items()},
            memory_locks=str(data.get("memory_locks") or ""),
            fitted_to=str(data.get("fitted_to") or ""),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise SpecError(f"{where}: malformed GPU spec: {exc}.") from None
    if spec.switch_latency_s < 0 or spec.power_limit_w <= 0 or spec.sm_count <= 0:
        raise SpecError(f"{where}: switch latency must be >= 0, power limit and SM count > 0.")
    boost = spec.model.boost_max_mhz
    if 0 < boost < spec.min_core_mhz:
        raise SpecError(
            f"{where}: model parameter boost_max_mhz {boost:g} is below the lowest core clock "
            f"{spec.min_core_mhz} MHz; give the highest clock the GPU runs at, or 0 for the top of its "
            "clock table."
        )
    return spec


def preset_keys() -> list[str]:
    """Keys of the GPU presets shipped with rlclock."""
    folder = resources.files("rlclock.dvfs").joinpath("presets")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


_ALIASES = {
    "3080ti": "rtx3080ti",
    "rtx-3080-ti": "rtx3080ti",
    "a100": "a100-sxm4-40gb",
    "h100": "h100-sxm",
    "h200": "h200-sxm",
}


def get_spec(key: str) -> GpuSpec:
    """A preset by key (``rtx3080ti``, ``a100-sxm4-40gb``, ``h100-sxm``, ``h200-sxm``) or NVML name, or a GPU spec
    file (a path ending in ``.yaml``/``.yml``, e.g. one written by ``rlclock calibrate``)."""
    if key.lower().endswith((".yaml", ".yml")):
        if not Path(key).is_file():
            raise SpecError(
                f"GPU spec file {key} does not exist.", "give the path of a GPU spec YAML, or a preset key."
            )
        return load_spec_file(key)
    k = _ALIASES.get(key.lower(), key.lower())
    keys = preset_keys()
    if k not in keys:
        for candidate in keys:
            if _preset(candidate).name.lower() == key.lower():
                return _preset(candidate)
        raise SpecError(f"unknown GPU {key!r}.", f"use one of {keys} (or a spec file with gpu_file:).")
    return _preset(k)


_CACHE: dict[str, GpuSpec] = {}


def _preset(key: str) -> GpuSpec:
    if key not in _CACHE:
        text = resources.files("rlclock.dvfs").joinpath(f"presets/{key}.yaml").read_text()
        _CACHE[key] = spec_from_mapping(yaml.safe_load(text), f"preset {key}")
    return _CACHE[key]
