"""A fake of the ``pynvml`` functions rlclock uses, with its state in a JSON file.

The state lives in the file named by ``$FAKE_NVML_STATE`` so that several processes — a program that
locks clocks, the watchdog that must undo them when that program is killed — see the same GPU. Every call
that changes clocks or the power limit is logged with the calling process id. Select it with
``RLCLOCK_NVML_MODULE=fake_pynvml`` (with this folder on ``PYTHONPATH``) or ``rlclock.gpu.nvml.use_module``.

The energy counter ticks every ``tick_s`` (0.1 s, like an H200) at a constant ``power_w``. Each device's
``memory_locks`` says how its memory clock can be locked, as real GPUs differ: ``"runtime"`` (Ampere and newer,
e.g. an RTX 3080 Ti), ``"deferred"`` (Hopper, the default H200: a runtime memory lock or its reset answers
NOT_SUPPORTED) or ``"none"`` (one memory clock; the same answer).

Power limits are in watts in the state and in milliwatts through the functions, as NVML's: ``power_limit_w``
(in effect), ``default_power_limit_w`` and ``power_limit_range_w`` (``[min, max]``, an H200's). A device with
``power_limit_supported`` false answers every power-limit function with NOT_SUPPORTED.

Faults: ``faults`` (a list in the state; :func:`inject`) makes chosen calls fail with an NVML error, in chosen
processes — the owner, its watchdog, anyone — a given number of times or for good, after letting a given number of
matching calls through. A failed call that would change the GPU stays in the log with its ``error``.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_HOPPER = 9
NVML_DEVICE_ARCH_ADA = 8
NVML_BRAND_GEFORCE = 5
NVML_BRAND_NVIDIA = 14

STATE_ENV = "FAKE_NVML_STATE"


class NVMLError(Exception):
    """An NVML failure with its return code in ``value`` (as in pynvml)."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"fake NVML error {self.value}"


def default_state(n_devices: int = 1) -> dict[str, Any]:
    """A fresh fake machine: H200-like GPUs at driver defaults, run as root."""
    cores = list(range(1980, 344, -15))
    token = os.urandom(4).hex()  # each fake machine's GPUs have their own UUIDs, so their clock locks never meet
    return {
        "library_missing": False,
        "root": True,
        "locked_clocks_supported": True,
        "driver": "580.00.00",
        "cuda_driver": 13000,
        "t0": time.time(),
        "tick_s": 0.1,
        "energy0_j": 86400.0,  # energy used before the test (the counter counts since driver load)
        "calls": [],
        "faults": [],
        "devices": [
            {
                "name": "NVIDIA H200",
                "uuid": f"GPU-fake{token}-{i}",
                "power_w": 500.0,
                "power_limit_w": 700.0,
                "default_power_limit_w": 700.0,
                "power_limit_range_w": [200.0, 700.0],
                "power_limit_supported": True,
                "temperature_c": 45,
                "default_sm_mhz": 1980,
                "default_mem_mhz": 3201,
                "clocks": {"3201": cores, "2201": cores},
                "architecture": NVML_DEVICE_ARCH_HOPPER,
                "compute_capability": [9, 0],
                "cuda_cores": 16896,  # 132 SMs x 128 FP32 lanes
                "memory_bus_bits": 6144,
                "brand": NVML_BRAND_NVIDIA,
                "memory_locks": "deferred",
                "locked_core": None,
                "locked_mem": None,
            }
            for i in range(n_devices)
        ],
    }


def write_state(path: str | Path, state: dict[str, Any]) -> None:
    """Create a state file."""
    Path(path).write_text(json.dumps(state))


def read_state(path: str | Path | None = None) -> dict[str, Any]:
    """Read the state file (default ``$FAKE_NVML_STATE``) under the lock the fake's writers take."""
    with _state(path=path) as s:
        return s


@contextmanager
def state(path: str | Path | None = None):
    """The state, locked, written back when the block ends (for tests that change the fake GPU)."""
    with _state(write=True, path=path) as s:
        yield s


def inject(
    path: str | Path | None = None,
    fn: str = "*",
    *,
    code: int = NVML_ERROR_UNKNOWN,
    times: int | None = 1,
    after: int = 0,
    pid: int | None = None,
    not_pid: int | None = None,
    device: int | None = None,
) -> None:
    """Make calls of ``fn`` (a function name, or ``"*"`` for any) fail with NVML error ``code``.

    Args:
        path: The state file (default ``$FAKE_NVML_STATE``).
        fn: The function whose calls fail.
        code: The NVML return code raised (default NVML_ERROR_UNKNOWN).
        times: How many matching calls fail; ``None``: every one from then on.
        after: How many matching calls go through first.
        pid: Only calls from this process fail (default: any process).
        not_pid: Calls from this process never fail.
        device: Only calls on this device index fail (default: any).
    """
    with _state(write=True, path=path) as s:
        s.setdefault("faults", []).append(
            {
                "fn": fn,
                "code": int(code),
                "times": times,
                "after": int(after),
                "pid": pid,
                "not_pid": not_pid,
                "device": device,
            }
        )


def clear_faults(path: str | Path | None = None) -> None:
    """Remove every injected fault."""
    with _state(write=True, path=path) as s:
        s["faults"] = []


def _matching(state: dict[str, Any], call: str, handle: Any) -> dict[str, Any] | None:
    """The first injected fault that applies to this call in this process, if any."""
    pid = os.getpid()
    for f in state.get("faults") or ():
        if f["fn"] not in (call, "*") or f.get("pid") not in (None, pid) or f.get("not_pid") == pid:
            continue
        if f.get("device") is not None and handle is not None and int(handle) != f["device"]:
            continue
        return f
    return None


def _fire(state: dict[str, Any], call: str, handle: Any = None) -> None:
    """Count this call against the fault that applies to it; raise its NVML error when it fails the call."""
    f = _matching(state, call, handle)
    if f is None:
        return
    if f["after"] > 0:
        f["after"] -= 1
        return
    if f["times"] is not None:
        f["times"] -= 1
        if f["times"] <= 0:
            state["faults"].remove(f)
    raise NVMLError(f["code"])


@contextmanager
def _state(write: bool = False, path: str | Path | None = None, call: str | None = None, handle: Any = None):
    path = path or os.environ.get(STATE_ENV)
    if not path:
        raise RuntimeError(f"set {STATE_ENV} to the fake NVML's state file")
    with open(path, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
        state = json.load(f)
        if call is not None and not write and _matching(state, call, handle) is not None:
            fcntl.flock(f, fcntl.LOCK_EX)  # a fault to count: read it again under the writers' lock
            f.seek(0)
            state = json.load(f)
            write = True
        try:
            if call is not None:
                _fire(state, call, handle)
            yield state
        finally:  # also when the call fails: a refused call stays in the log, with its error
            if write:
                f.seek(0)
                f.truncate()
                json.dump(state, f)
                f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)


def _dev(state: dict[str, Any], handle: Any) -> dict[str, Any]:
    i = int(handle)
    if not 0 <= i < len(state["devices"]):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return state["devices"][i]


# -- init / system -----------------------------------------------------------------------------------


def nvmlInit() -> None:
    with _state(call="nvmlInit") as s:
        if s["library_missing"]:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)


def nvmlShutdown() -> None:
    return None


def nvmlDeviceGetCount() -> int:
    with _state(call="nvmlDeviceGetCount") as s:
        return len(s["devices"])


def nvmlSystemGetDriverVersion() -> str:
    with _state(call="nvmlSystemGetDriverVersion") as s:
        return s["driver"]


def nvmlSystemGetCudaDriverVersion() -> int:
    with _state(call="nvmlSystemGetCudaDriverVersion") as s:
        return int(s["cuda_driver"])


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    with _state(call="nvmlDeviceGetHandleByIndex") as s:
        _dev(s, index)
    return int(index)


def nvmlDeviceGetName(handle: int) -> str:
    with _state(call="nvmlDeviceGetName") as s:
        return _dev(s, handle)["name"]


def nvmlDeviceGetArchitecture(handle: int) -> int:
    with _state(call="nvmlDeviceGetArchitecture") as s:
        return int(_dev(s, handle).get("architecture", NVML_DEVICE_ARCH_HOPPER))


def nvmlDeviceGetCudaComputeCapability(handle: int) -> tuple[int, int]:
    with _state(call="nvmlDeviceGetCudaComputeCapability") as s:
        major, minor = _dev(s, handle)["compute_capability"]
        return int(major), int(minor)


def nvmlDeviceGetNumGpuCores(handle: int) -> int:
    with _state(call="nvmlDeviceGetNumGpuCores") as s:
        return int(_dev(s, handle)["cuda_cores"])


def nvmlDeviceGetMemoryBusWidth(handle: int) -> int:
    with _state(call="nvmlDeviceGetMemoryBusWidth") as s:
        return int(_dev(s, handle)["memory_bus_bits"])


def nvmlDeviceGetBrand(handle: int) -> int:
    with _state(call="nvmlDeviceGetBrand") as s:
        return int(_dev(s, handle)["brand"])


def nvmlDeviceGetUUID(handle: int) -> str:
    with _state(call="nvmlDeviceGetUUID") as s:
        return _dev(s, handle)["uuid"]


# -- readings ----------------------------------------------------------------------------------------


def nvmlDeviceGetTotalEnergyConsumption(handle: int) -> int:
    with _state(call="nvmlDeviceGetTotalEnergyConsumption") as s:
        d = _dev(s, handle)
        ticks = math.floor((time.time() - s["t0"]) / s["tick_s"])
        return int((s["energy0_j"] + d["power_w"] * ticks * s["tick_s"]) * 1e3)  # mJ


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    with _state(call="nvmlDeviceGetPowerUsage") as s:
        return int(_dev(s, handle)["power_w"] * 1e3)  # mW


def _power_device(s: dict[str, Any], handle: int) -> dict[str, Any]:
    d = _dev(s, handle)
    if not d.get("power_limit_supported", True):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return d


def nvmlDeviceGetPowerManagementLimit(handle: int) -> int:
    with _state(call="nvmlDeviceGetPowerManagementLimit") as s:
        return round(_power_device(s, handle)["power_limit_w"] * 1e3)  # mW


def nvmlDeviceGetPowerManagementDefaultLimit(handle: int) -> int:
    with _state(call="nvmlDeviceGetPowerManagementDefaultLimit") as s:
        return round(_power_device(s, handle)["default_power_limit_w"] * 1e3)  # mW


def nvmlDeviceGetPowerManagementLimitConstraints(handle: int) -> list[int]:
    with _state(call="nvmlDeviceGetPowerManagementLimitConstraints") as s:
        return [round(w * 1e3) for w in _power_device(s, handle)["power_limit_range_w"]]  # [min, max] mW


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    with _state(call="nvmlDeviceGetTemperature") as s:
        return int(_dev(s, handle)["temperature_c"])


def nvmlDeviceGetClockInfo(handle: int, clock_type: int) -> int:
    with _state(call="nvmlDeviceGetClockInfo") as s:
        d = _dev(s, handle)
        if clock_type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return d["locked_core"][1] if d["locked_core"] else d["default_sm_mhz"]
        if clock_type == NVML_CLOCK_MEM:
            return d["locked_mem"][1] if d["locked_mem"] else d["default_mem_mhz"]
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetMaxClockInfo(handle: int, clock_type: int) -> int:
    with _state(call="nvmlDeviceGetMaxClockInfo") as s:
        d = _dev(s, handle)
        return (
            max(max(v) for v in d["clocks"].values())
            if clock_type != NVML_CLOCK_MEM
            else max(int(m) for m in d["clocks"])
        )


def nvmlDeviceGetCurrentClocksEventReasons(handle: int) -> int:
    with _state(call="nvmlDeviceGetCurrentClocksEventReasons") as s:
        d = _dev(s, handle)
        return 0x2 if (d["locked_core"] or d["locked_mem"]) else 0x4


def nvmlDeviceGetSupportedMemoryClocks(handle: int) -> list[int]:
    with _state(call="nvmlDeviceGetSupportedMemoryClocks") as s:
        return [int(m) for m in _dev(s, handle)["clocks"]]


def nvmlDeviceGetSupportedGraphicsClocks(handle: int, mem_mhz: int) -> list[int]:
    with _state(call="nvmlDeviceGetSupportedGraphicsClocks") as s:
        table = _dev(s, handle)["clocks"]
        if str(mem_mhz) not in table:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return list(table[str(mem_mhz)])


# -- clock and power limit control -------------------------------------------------------------------


def _log(s: dict[str, Any], handle: int, fn: str, value: Any) -> dict[str, Any]:
    """Log a call that changes the GPU, fail it where a fault is injected, and check the caller is root; returns the
    device's state."""
    d = _dev(s, handle)
    s["calls"].append({"fn": fn, "device": int(handle), "value": value, "pid": os.getpid(), "t": time.time()})
    try:
        _fire(s, fn, handle)
    except NVMLError as exc:
        s["calls"][-1]["error"] = exc.value
        raise
    if not s["root"]:
        s["calls"][-1]["error"] = NVML_ERROR_NO_PERMISSION
        raise NVMLError(NVML_ERROR_NO_PERMISSION)
    return d


def _control(handle: int, fn: str, field: str, value: list[int] | None) -> None:
    with _state(write=True) as s:
        d = _log(s, handle, fn, value)
        if not s["locked_clocks_supported"] or (field == "locked_mem" and d.get("memory_locks") != "runtime"):
            s["calls"][-1]["error"] = NVML_ERROR_NOT_SUPPORTED
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if value is not None and value[0] > value[1]:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        d[field] = value


def nvmlDeviceSetGpuLockedClocks(handle: int, min_mhz: int, max_mhz: int) -> None:
    _control(handle, "nvmlDeviceSetGpuLockedClocks", "locked_core", [int(min_mhz), int(max_mhz)])


def nvmlDeviceSetMemoryLockedClocks(handle: int, min_mhz: int, max_mhz: int) -> None:
    _control(handle, "nvmlDeviceSetMemoryLockedClocks", "locked_mem", [int(min_mhz), int(max_mhz)])


def nvmlDeviceResetGpuLockedClocks(handle: int) -> None:
    _control(handle, "nvmlDeviceResetGpuLockedClocks", "locked_core", None)


def nvmlDeviceResetMemoryLockedClocks(handle: int) -> None:
    _control(handle, "nvmlDeviceResetMemoryLockedClocks", "locked_mem", None)


def nvmlDeviceSetPowerManagementLimit(handle: int, limit_mw: int) -> None:
    with _state(write=True) as s:
        d = _log(s, handle, "nvmlDeviceSetPowerManagementLimit", int(limit_mw))
        if not d.get("power_limit_supported", True):
            s["calls"][-1]["error"] = NVML_ERROR_NOT_SUPPORTED
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        lo, hi = (round(w * 1e3) for w in d["power_limit_range_w"])
        if not lo <= int(limit_mw) <= hi:
            s["calls"][-1]["error"] = NVML_ERROR_INVALID_ARGUMENT
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        d["power_limit_w"] = int(limit_mw) / 1e3
