"""``rlclock doctor``: what this machine has — GPU, driver, clocks, power limits, permissions, energy counter —
and what rlclock can do here.

Every probe reads only (nothing is set); a missing piece becomes a line saying so, never a traceback.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import platform
from dataclasses import dataclass, field
from typing import Any

from rlclock.errors import RlclockError
from rlclock.gpu import nvml
from rlclock.version import __version__

_GRAPH_FUNCTIONS = (
    "cuGraphClone",
    "cuGraphNodeFindInClone",
    "cuGraphDestroyNode",
    "cuGraphKernelNodeGetParams_v2",
    "cuGraphInstantiateWithFlags",
    "cuGraphAddChildGraphNode",
    "cuFuncGetName",
)


@dataclass
class DoctorReport:
    """Findings and capabilities.

    Attributes:
        facts: ``(label, value)`` lines, in order.
        capabilities: ``(what, possible, why)`` per thing rlclock can do.
        gpus: Per-GPU details (JSON-friendly).
    """

    facts: list[tuple[str, str]] = field(default_factory=list)
    capabilities: list[tuple[str, bool, str]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)

    def text(self) -> str:
        """The report as aligned plain text."""
        w = max((len(k) for k, _ in self.facts), default=0)
        out = [f"{k.ljust(w)}  {v}" for k, v in self.facts]
        out.append("")
        out.append("what rlclock can do here:")
        for what, ok, why in self.capabilities:
            out.append(f"  [{'yes' if ok else 'no '}] {what}" + (f" — {why}" if why else ""))
        return "\n".join(out)

    def as_dict(self) -> dict[str, Any]:
        return {
            "facts": dict(self.facts),
            "gpus": self.gpus,
            "capabilities": [{"what": w, "possible": ok, "why": why} for w, ok, why in self.capabilities],
        }


MEMORY_LOCK_MEANING = {
    "runtime": "the memory clock can be switched between kernels, like the core clock",
    "deferred": "the memory clock is locked only for a whole job (nvidia-smi --lock-memory-clocks-deferred, applied "
    "when the GPU is next initialised); plans switch the core clock at the memory clock in effect",
    "none": "one memory clock: plans switch the core clock only",
}
"""What each memory-lock capability (:data:`rlclock.dvfs.spec.MEMORY_LOCKS`) means for a plan."""


def _range(values: tuple[int, ...]) -> str:
    if not values:
        return "none"
    v = sorted(values)
    steps = {b - a for a, b in itertools.pairwise(v)}
    step = f", step {min(steps)}" if len(steps) == 1 else ""
    return f"{v[0]}–{v[-1]} MHz ({len(v)} values{step})"


def _gpu_details(index: int, period_s: float) -> dict[str, Any]:
    from rlclock.dvfs.spec import memory_locks_of
    from rlclock.gpu.describe import spec_for_device
    from rlclock.gpu.meter import counter_period_s

    dev = nvml.NvmlDevice(index)
    d: dict[str, Any] = {"index": index, "name": dev.name, "uuid": nvml.try_read(lambda: dev.uuid)}
    d["power_limit_w"] = nvml.try_read(dev.power_limit_w)
    d["default_power_limit_w"] = nvml.try_read(dev.default_power_limit_w)
    rng = nvml.try_read(dev.power_limit_range_w)
    d["power_limit_range_w"] = rng if isinstance(rng, str) else list(rng)
    d["power_w"] = nvml.try_read(dev.power_w)
    d["temperature_c"] = nvml.try_read(dev.temperature_c)
    s = nvml.try_read(dev.clocks)
    d["clocks_now"] = (
        s if isinstance(s, str) else {"sm_mhz": s.sm_clock_mhz, "mem_mhz": s.mem_clock_mhz, "reasons": list(s.reasons)}
    )
    table = nvml.try_read(dev.supported_clocks)
    d["supported_clocks"] = table if isinstance(table, str) else {str(m): _range(c) for m, c in table.items()}
    locks = memory_locks_of(dev.architecture(), None if isinstance(table, str) else tuple(table))
    d["memory_locks"] = f"{locks} — {MEMORY_LOCK_MEANING[locks]}"
    try:
        spec, origin = spec_for_device(index)
        d["preset"] = spec.key if origin == "preset" else None
        if origin == "derived":
            d["derived_spec"] = (
                f"{spec.key}: {spec.sm_count} SMs, {spec.threads_per_sm} threads/SM, L2 "
                f"{spec.l2_bytes / 2**20:.0f} MiB, {spec.mem_bus_bits}-bit memory, bf16 "
                f"{spec.tensor_flops_per_cycle_per_sm.get('bf16', 0):g} FLOP/cycle/SM — built from "
                "what the GPU reports (rlclock doctor --spec-out FILE writes it)"
            )
        carried = (
            f"the {spec.sources['base']} preset's fit, scaled to this GPU"
            if origin == "derived"
            else "carried over from other GPUs"
        )
        d["preset_model"] = (
            f"fitted to {spec.fitted_to}"
            if not spec.generic
            else f"generic ({carried}): calibrate with rlclock calibrate --device {index} --control-clocks"
        )
        if not isinstance(table, str) and origin == "preset":
            same = {int(m): tuple(sorted(c)) for m, c in table.items()} == {
                m: tuple(sorted(c)) for m, c in spec.clocks.items()
            }
            d["preset_clock_table"] = "matches" if same else "differs from the GPU's (update the preset)"
    except RlclockError as exc:
        d["preset"] = None
        d["derived_spec"] = f"unavailable ({exc})"
    e = nvml.try_read(dev.total_energy_j)
    d["energy_counter_j"] = e
    if not isinstance(e, str) and period_s > 0:
        p = counter_period_s(dev, period_s)
        d["energy_counter_period_s"] = p if p is not None else "did not step during the probe"
    return d


def diagnose(period_s: float = 1.0) -> DoctorReport:
    """Probe the machine.

    Args:
        period_s: How long to watch GPU 0's energy counter to find its update period, seconds (0: skip).
    """
    r = DoctorReport()
    r.facts.append(("rlclock", __version__))
    r.facts.append(("python", f"{platform.python_version()} ({platform.machine()})"))
    torch_cuda = False
    try:
        import torch

        torch_cuda = bool(torch.cuda.is_available())
        seen = f"sees {torch.cuda.device_count()} GPU(s)" if torch_cuda else "no GPU"
        seen = f"sees {torch.cuda.device_count()} GPU(s)" if torch_cuda else "no GPU"
        r.facts.append(("torch", f"{torch.__version__} (CUDA {torch.version.cuda or 'none'}; {seen})"))
    except ImportError:
        r.facts.append(("torch", "not installed"))
    bindings = [m for m in ("cuda.bindings", "cuda") if _has_module(m)]
    r.facts.append(("CUDA Python bindings", ", ".join(bindings) if bindings else "none (rlclock uses ctypes)"))
    graph_ok, graph_why = _graph_api()
    r.facts.append(("CUDA driver graph API", "complete" if graph_ok else graph_why))
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    r.facts.append(("privileges", "root" if root else "not root"))
    n = 0
    try:
        n = nvml.device_count()
        r.facts.append(("NVIDIA driver", f"{nvml.driver_version()} (CUDA {nvml.cuda_driver_version()})"))
        r.facts.append(("GPUs (NVML)", str(n)))
    except RlclockError as exc:
        r.facts.append(("NVML", str(exc)))
    for i in range(n):
        d = _gpu_details(i, period_s if i == 0 else 0.0)
        r.gpus.append(d)
        r.facts.append((f"GPU {i}", f"{d['name']} (preset {d.get('preset') or 'none'})"))
        for key in (
            "derived_spec",
            "power_limit_w",
            "default_power_limit_w",
            "power_limit_range_w",
            "power_w",
            "temperature_c",
            "clocks_now",
            "energy_counter_period_s",
            "preset_clock_table",
            "preset_model",
            "memory_locks",
        ):
            if key in d:
                v = d[key]
                if key == "power_limit_range_w" and isinstance(v, list):
                    v = f"{_fmt(v[0])}–{_fmt(v[1])}"
                r.facts.append((f"  {key}", _fmt(v)))
        sc = d["supported_clocks"]
        if isinstance(sc, dict):
            for m, rng in sc.items():
                r.facts.append((f"  core clocks at memory {m} MHz", rng))
        else:
            r.facts.append(("  supported clocks", sc))
    has_gpu = n > 0
    energy = has_gpu and not isinstance(r.gpus[0].get("energy_counter_j"), str)
    r.capabilities.append(("simulate, train, evaluate on simulated or recorded GPUs", True, ""))
    r.capabilities.append(
        (
            "profile a layer into a trace (rlclock profile)",
            torch_cuda and graph_ok,
            "" if torch_cuda and graph_ok else ("PyTorch sees no CUDA GPU" if not torch_cuda else graph_why),
        )
    )
    r.capabilities.append(
        (
            "measure kernels at auto clocks (rlclock measure, dry run)",
            torch_cuda and graph_ok and energy,
            "" if energy else "no NVIDIA GPU/NVML energy counter",
        )
    )
    ctl_why = (
        ""
        if has_gpu and root
        else ("no NVIDIA GPU/NVML" if not has_gpu else "needs root; observe (dry-run) mode works without it")
    )
    r.capabilities.append(
        (
            "lock clocks (--control-clocks; read back after every change)",
            has_gpu and root,
            ctl_why or "opt-in only; restored on exit, signals and by a watchdog process",
        )
    )
    unsettable = [str(g["index"]) for g in r.gpus if isinstance(g["power_limit_range_w"], str)]
    power_why = ctl_why or (
        f"GPU(s) {', '.join(unsettable)} report no settable power limit range" if unsettable else ""
    )
    r.capabilities.append(
        (
            "set a whole-job power limit (--control-clocks; read back after the change)",
            has_gpu and root and not unsettable,
            power_why or "opt-in only; set back on exit, signals and by a watchdog process",
        )
    )
    r.capabilities.append(
        ("reset clocks left locked and power limits left changed (rlclock reset-clocks)", has_gpu and root, ctl_why)
    )
    return r


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _graph_api() -> tuple[bool, str]:
    try:
        from rlclock.gpu.cuda_graph import driver

        drv = driver()
    except RlclockError as exc:
        return False, str(exc)
    missing = [f for f in _GRAPH_FUNCTIONS if not drv.has(f)]
    return (not missing, "" if not missing else f"driver lacks {', '.join(missing)}")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "none"
    return str(v)
