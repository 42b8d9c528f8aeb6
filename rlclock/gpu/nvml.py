"""The one place rlclock talks to NVML: devices, energy, clocks, clock-event reasons, locked clocks, power limits.

Only this module imports ``pynvml`` (the official ``nvidia-ml-py`` bindings), lazily, so rlclock imports
and runs its simulated parts on machines without an NVIDIA driver. Raw NVML integers — MHz, mW, mJ —
are converted here, once: everything that leaves this module carries its unit in its name
(``total_energy_j``, ``power_w``, ``sm_clock_mhz``).

NVML failures become :class:`~rlclock.errors.RlclockError` subclasses through one table of return codes
(:data:`_ERRORS`): missing permission is a :class:`~rlclock.errors.ClockPermissionError`, an unsupported
function a :class:`~rlclock.errors.NvmlNotSupportedError`, a missing driver or library a
:class:`~rlclock.errors.GpuUnavailableError` — each a one-line message with the fix.

The bindings module can be replaced by another with the same functions (a fake for tests) through the
environment variable ``RLCLOCK_NVML_MODULE`` (a module name), which child processes such as the clock
watchdog inherit, or by calling :func:`use_module`.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from rlclock.errors import (
    ClockError,
    ClockPermissionError,
    GpuUnavailableError,
    NvmlError,
    NvmlNotSupportedError,
    RlclockError,
)

MODULE_ENV = "RLCLOCK_NVML_MODULE"
"""Environment variable naming the NVML bindings module to import (default ``pynvml``)."""

# NVML return codes (nvml.h; stable across driver versions).
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_FREQ_NOT_SUPPORTED = 24

# nvmlClockType_t
_CLOCK_GRAPHICS = 0
_CLOCK_SM = 1
_CLOCK_MEM = 2
ARCHITECTURES: dict[int, str] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
"""NVML's ``nvmlDeviceArchitecture_t`` values → architecture names."""
_TEMPERATURE_GPU = 0
_GEFORCE_BRANDS = frozenset({5, 15})
"""NVML's ``nvmlBrandType_t`` values of GeForce cards (GEFORCE, GEFORCE_RTX)."""

CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""Clock-event ("throttle") reason bits of ``nvmlDeviceGetCurrentClocksEventReasons`` and their names."""

_NO_GPU_FIX = "run on a machine with an NVIDIA GPU and driver (rlclock doctor says what is missing)."

_ERRORS: dict[int, tuple[type[RlclockError], str, str]] = {
    NVML_ERROR_NO_PERMISSION: (
        ClockPermissionError,
        "{what} on GPU {index} needs root/administrator rights (NVML: insufficient permissions).",
        "run as root or with sudo, or ask an administrator to lock the clocks or set the power limit; observe "
        "mode (--dry-run, the default) needs no privileges.",
    ),
    NVML_ERROR_NOT_SUPPORTED: (
        NvmlNotSupportedError,
        "{what} is not supported by GPU {index} ({name}) or its driver (NVML: not supported).",
        "locked clocks need Volta or newer for the core clock and Ampere or newer for the memory clock; "
        "energy counters need Volta or newer; whether the power limit can be set depends on the board. "
        "rlclock doctor lists what this GPU supports.",
    ),
    NVML_ERROR_FUNCTION_NOT_FOUND: (
        NvmlNotSupportedError,
        "{what} is not available in this NVIDIA driver (NVML: function not found).",
        "update the NVIDIA driver.",
    ),
    NVML_ERROR_INVALID_ARGUMENT: (
        ClockError,
        "{what} on GPU {index} was refused as invalid (NVML: invalid argument).",
        "use clocks from the supported table (rlclock doctor --clocks) and power limits within the range "
        "rlclock doctor shows.",
    ),
    NVML_ERROR_FREQ_NOT_SUPPORTED: (
        ClockError,
        "{what} on GPU {index}: the frequency is not supported (NVML: frequency not supported).",
        "use clocks from the supported table (rlclock doctor --clocks).",
    ),
    NVML_ERROR_LIBRARY_NOT_FOUND: (
        GpuUnavailableError,
        "no NVIDIA GPU/NVML on this machine: the NVML library (libnvidia-ml.so) was not found.",
        _NO_GPU_FIX,
    ),
    NVML_ERROR_DRIVER_NOT_LOADED: (
        GpuUnavailableError,
        "no NVIDIA GPU/NVML on this machine: the NVIDIA driver is not loaded.",
        _NO_GPU_FIX,
    ),
    NVML_ERROR_NOT_FOUND: (
        GpuUnavailableError,
        "GPU {index} was not found by NVML.",
        "pick an existing GPU index (rlclock doctor lists them).",
    ),
    NVML_ERROR_GPU_IS_LOST: (
        NvmlError,
        "GPU {index} is lost (fell off the bus or stopped responding) during {what}.",
        "check the machine's GPU health (nvidia-smi, kernel log); a reboot is usually needed.",
    ),
    NVML_ERROR_RESET_REQUIRED: (
        NvmlError,
        "GPU {index} needs a reset before {what} can work.",
        "reset the GPU or reboot the machine.",
    ),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        GpuUnavailableError,
        "the NVML library and the loaded NVIDIA kernel driver have different versions.",
        "reboot after a driver update (or reload the nvidia kernel modules).",
    ),
}

_lock = threading.Lock()
_module: ModuleType | None = None
_initialised = False

T = TypeVar("T")


def use_module(module: ModuleType | None) -> None:
    """Use ``module`` as the NVML bindings (``None``: back to ``pynvml`` / ``$RLCLOCK_NVML_MODULE``).

    Resets the initialisation state, so the next call initialises the new module.
    """
    global _module, _initialised
    with _lock:
        _module = module
        _initialised = False


def _bindings() -> ModuleType:
    global _module
    if _module is None:
        name = os.environ.get(MODULE_ENV) or "pynvml"
        try:
            _module = importlib.import_module(name)
        except ImportError:
            raise GpuUnavailableError(
                f"no NVIDIA GPU/NVML support: the Python module {name!r} cannot be imported.",
                "pip install nvidia-ml-py (the official NVML bindings).",
            ) from None
    return _module


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _translate(exc: BaseException, what: str, index: int | str = "?", name: str = "?") -> RlclockError:
    code = _code(exc)
    cls, msg, fix = _ERRORS.get(
        code if code is not None else -1,
        (NvmlError, "NVML failed during {what} on GPU {index}: {exc}.", "run rlclock doctor to see the GPU's state."),
    )
    return cls(msg.format(what=what, index=index, name=name, exc=exc), fix)


def _is_nvml_error(exc: BaseException, module: ModuleType) -> bool:
    base = getattr(module, "NVMLError", None)
    return isinstance(base, type) and isinstance(exc, base)


def _call(what: str, fn: Callable[..., T], *args: Any, index: int | str = "?", name: str = "?") -> T:
    module = _bindings()
    try:
        return fn(*args)
    except Exception as exc:
        if _is_nvml_error(exc, module):
            raise _translate(exc, what, index, name) from None
        raise


def init() -> ModuleType:
    """Initialise NVML once per process; returns the bindings module.

    Raises:
        GpuUnavailableError: No NVIDIA driver, library or bindings on this machine.
    """
    global _initialised
    module = _bindings()
    with _lock:
        if not _initialised:
            _call("initialising NVML", module.nvmlInit)
            _initialised = True
    return module


def available() -> bool:
    """True when NVML initialises and sees at least one GPU."""
    try:
        return device_count() > 0
    except RlclockError:
        return False


def device_count() -> int:
    """Number of GPUs NVML sees."""
    module = init()
    return int(_call("counting GPUs", module.nvmlDeviceGetCount))


def driver_version() -> str:
    """The NVIDIA driver version, e.g. ``"580.159.04"``."""
    module = init()
    return _text(_call("reading the driver version", module.nvmlSystemGetDriverVersion))


def cuda_driver_version() -> str:
    """The CUDA version the driver supports, e.g. ``"13.0"``."""
    module = init()
    v = int(_call("reading the CUDA driver version", module.nvmlSystemGetCudaDriverVersion))
    return f"{v // 1000}.{(v % 1000) // 10}"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def reasons_from_mask(mask: int) -> tuple[str, ...]:
    """Names of the clock-event reason bits set in ``mask`` (unknown bits as ``"bit_0x..."``)."""
    out = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    known = 0
    for bit in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            out.append(f"bit_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return tuple(out)


@dataclass(frozen=True)
class ClockSample:
    """The clocks and clock-event reasons at one moment.

    Attributes:
        sm_clock_mhz: Current SM clock, MHz.
        mem_clock_mhz: Current memory clock, MHz.
        reasons: Active clock-event reasons (names from :data:`CLOCK_EVENT_REASONS`).
        reason_mask: The raw reason bit mask.
    """

    sm_clock_mhz: int
    mem_clock_mhz: int
    reasons: tuple[str, ...]
    reason_mask: int


class NvmlDevice:
    """One GPU as NVML sees it, with every quantity in named units.

    Args:
        index: NVML device index.

    Raises:
        GpuUnavailableError: NVML or the GPU is missing.
    """

    def __init__(self, index: int = 0) -> None:
        self._nvml = init()
        self.index = int(index)
        n = device_count()
        if not 0 <= self.index < n:
            raise GpuUnavailableError(
                f"GPU {self.index} does not exist; NVML sees {n} GPU(s).", "pick an index from rlclock doctor."
            )
        self._handle = self._do("opening the device", self._nvml.nvmlDeviceGetHandleByIndex, self.index)
        self.name: str = _text(self._do("reading the name", self._nvml.nvmlDeviceGetName, self._handle))

    def __repr__(self) -> str:
        return f"NvmlDevice({self.index}, {self.name!r})"

    def _do(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        return _call(what, fn, *args, index=self.index, name=getattr(self, "name", "?"))

    # -- identity ---------------------------------------------------------------------------------
    @property
    def uuid(self) -> str:
        """The GPU's UUID."""
        return _text(self._do("reading the UUID", self._nvml.nvmlDeviceGetUUID, self._handle))

    def architecture(self) -> str:
        """The GPU's architecture (``"Hopper"`` …); where NVML does not name it (old bindings or driver), the one of
        its compute capability (:func:`rlclock.dvfs.spec.architecture_of`), else ``""``."""
        from rlclock.dvfs.spec import architecture_of

        fn = getattr(self._nvml, "nvmlDeviceGetArchitecture", None)
        try:
            code = int(self._do("reading the architecture", fn, self._handle)) if fn is not None else -1
        except RlclockError:
            code = -1
        if code in ARCHITECTURES:
            return ARCHITECTURES[code]
        try:
            return architecture_of(self.compute_capability())
        except (RlclockError, AttributeError):
            return ""

    def compute_capability(self) -> tuple[int, int]:
        """The CUDA compute capability ``(major, minor)``."""
        major, minor = self._do(
            "reading the compute capability", self._nvml.nvmlDeviceGetCudaComputeCapability, self._handle
        )
        return int(major), int(minor)

    def cuda_cores(self) -> int:
        """The GPU's FP32 lanes (NVML's "GPU cores"; drivers 520 and newer), or 0 when NVML does not say."""
        return self._optional_count("nvmlDeviceGetNumGpuCores", "reading the core count")

    def memory_bus_bits(self) -> int:
        """The memory interface width, bits, or 0 when NVML does not say."""
        return self._optional_count("nvmlDeviceGetMemoryBusWidth", "reading the memory bus width")

    def is_geforce(self) -> bool:
        """Whether NVML's brand is GeForce (or, without a brand, the name says so)."""
        fn = getattr(self._nvml, "nvmlDeviceGetBrand", None)
        try:
            brand = int(self._do("reading the brand", fn, self._handle)) if fn is not None else None
        except RlclockError:
            brand = None
        if not brand:  # not read, or NVML_BRAND_UNKNOWN
            return "geforce" in self.name.lower()
        return brand in _GEFORCE_BRANDS

    def _optional_count(self, function: str, what: str) -> int:
        fn = getattr(self._nvml, function, None)
        if fn is None:
            return 0
        try:
            return int(self._do(what, fn, self._handle))
        except RlclockError:
            return 0

    # -- energy and power -------------------------------------------------------------------------
    def total_energy_j(self) -> float:
        """Energy used since the driver was loaded, joules (NVML's counter is in mJ; Volta and newer)."""
        mj = self._do("reading the energy counter", self._nvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)
        return float(mj) / 1e3

    def power_w(self) -> float:
        """Board power, watts (NVML reports mW; averaged over the driver's own sampling period)."""
        return float(self._do("reading the power", self._nvml.nvmlDeviceGetPowerUsage, self._handle)) / 1e3

    def power_limit_w(self) -> float:
        """The power limit in effect, watts."""
        mw = self._do("reading the power limit", self._nvml.nvmlDeviceGetPowerManagementLimit, self._handle)
        return float(mw) / 1e3

    def default_power_limit_w(self) -> float:
        """The power limit the driver uses when none is set (its default), watts."""
        mw = self._do(
            "reading the default power limit", self._nvml.nvmlDeviceGetPowerManagementDefaultLimit, self._handle
        )
        return float(mw) / 1e3

    def power_limit_range_w(self) -> tuple[float, float]:
        """The lowest and highest power limit that can be set, watts."""
        min_mw, max_mw = self._do(
            "reading the power limit range", self._nvml.nvmlDeviceGetPowerManagementLimitConstraints, self._handle
        )
        return float(min_mw) / 1e3, float(max_mw) / 1e3

    def temperature_c(self) -> float:
        """GPU core temperature, °C."""
        return float(
            self._do("reading the temperature", self._nvml.nvmlDeviceGetTemperature, self._handle, _TEMPERATURE_GPU)
        )

    # -- clocks -----------------------------------------------------------------------------------
    def sm_clock_mhz(self) -> int:
        """Current SM clock, MHz."""
        return int(self._do("reading the SM clock", self._nvml.nvmlDeviceGetClockInfo, self._handle, _CLOCK_SM))

    def mem_clock_mhz(self) -> int:
        """Current memory clock, MHz."""
        return int(self._do("reading the memory clock", self._nvml.nvmlDeviceGetClockInfo, self._handle, _CLOCK_MEM))

    def max_sm_clock_mhz(self) -> int:
        """Highest SM clock, MHz."""
        return int(
            self._do("reading the maximum SM clock", self._nvml.nvmlDeviceGetMaxClockInfo, self._handle, _CLOCK_SM)
        )

    def clock_event_mask(self) -> int:
        """The raw clock-event reason bit mask (see :data:`CLOCK_EVENT_REASONS`)."""
        fn = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is None:  # bindings older than the "clocks event" rename
            fn = self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(self._do("reading the clock-event reasons", fn, self._handle))

    def clock_event_reasons(self) -> tuple[str, ...]:
        """Names of the active clock-event reasons, e.g. ``("sw_power_cap",)``."""
        return reasons_from_mask(self.clock_event_mask())

    def clocks(self) -> ClockSample:
        """SM clock, memory clock and clock-event reasons, read together."""
        mask = self.clock_event_mask()
        return ClockSample(self.sm_clock_mhz(), self.mem_clock_mhz(), reasons_from_mask(mask), mask)

    def supported_mem_clocks_mhz(self) -> tuple[int, ...]:
        """Supported memory clocks, MHz, descending."""
        v = self._do("reading the supported memory clocks", self._nvml.nvmlDeviceGetSupportedMemoryClocks, self._handle)
        return tuple(sorted((int(x) for x in v), reverse=True))

    def supported_core_clocks_mhz(self, mem_mhz: int) -> tuple[int, ...]:
        """Supported core (graphics) clocks at memory clock ``mem_mhz``, MHz, descending."""
        v = self._do(
            f"reading the supported core clocks at memory {mem_mhz} MHz",
            self._nvml.nvmlDeviceGetSupportedGraphicsClocks,
            self._handle,
            int(mem_mhz),
        )
        return tuple(sorted((int(x) for x in v), reverse=True))

    def supported_clocks(self) -> dict[int, tuple[int, ...]]:
        """The clock table: for every supported memory clock (MHz), its supported core clocks (MHz)."""
        return {m: self.supported_core_clocks_mhz(m) for m in self.supported_mem_clocks_mhz()}

    # -- clock and power limit control (privileged) -----------------------------------------------
    def set_locked_core_clocks(self, min_mhz: int, max_mhz: int) -> None:
        """Lock the core clock into ``[min_mhz, max_mhz]`` (root; Volta and newer)."""
        self._do(
            f"locking the core clock to {min_mhz}-{max_mhz} MHz",
            self._nvml.nvmlDeviceSetGpuLockedClocks,
            self._handle,
            int(min_mhz),
            int(max_mhz),
        )

    def set_locked_mem_clocks(self, min_mhz: int, max_mhz: int) -> None:
        """Lock the memory clock into ``[min_mhz, max_mhz]`` (root; Ampere and newer)."""
        self._do(
            f"locking the memory clock to {min_mhz}-{max_mhz} MHz",
            self._nvml.nvmlDeviceSetMemoryLockedClocks,
            self._handle,
            int(min_mhz),
            int(max_mhz),
        )

    def reset_locked_core_clocks(self) -> None:
        """Give the core clock back to the driver (root)."""
        self._do("resetting the locked core clock", self._nvml.nvmlDeviceResetGpuLockedClocks, self._handle)

    def reset_locked_mem_clocks(self) -> None:
        """Give the memory clock back to the driver (root)."""
        self._do("resetting the locked memory clock", self._nvml.nvmlDeviceResetMemoryLockedClocks, self._handle)

    def set_power_limit_w(self, power_limit_w: float) -> None:
        """Set the board power limit, watts (root; NVML takes whole milliwatts, so it is rounded to one)."""
        mw = round(float(power_limit_w) * 1e3)
        self._do(
            f"setting the power limit to {mw / 1e3:g} W", self._nvml.nvmlDeviceSetPowerManagementLimit, self._handle, mw
        )


def try_read(fn: Callable[[], T]) -> T | str:
    """Call ``fn``; on an :class:`RlclockError` return its one-line message instead (for reports)."""
    try:
        return fn()
    except RlclockError as exc:
        return f"unavailable ({exc})"
