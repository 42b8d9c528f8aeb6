"""The spec of a live GPU: its preset when one matches its NVML name, else one built from what it reports.

:func:`device_facts` reads the hardware facts (NVML; CUDA through PyTorch, when present, for the SM count, threads
per SM and L2 size — NVML does not give the L2); :func:`spec_for_device` is what every command that works on a
live GPU uses to know it. Nothing here sets anything.
"""

from __future__ import annotations

from rlclock.dvfs.derive import DeviceFacts, spec_from_facts
from rlclock.dvfs.spec import GpuSpec, get_spec
from rlclock.errors import RlclockError, SpecError
from rlclock.gpu import nvml


def _cuda_properties(uuid: str) -> tuple[int, int, float]:
    """SM count, threads per SM and L2 bytes of the CUDA device with NVML UUID ``uuid``; zeros when PyTorch has no
    CUDA or none matches (CUDA may order and hide devices differently from NVML, so they are matched by UUID)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return 0, 0, 0.0
        want = uuid.lower().removeprefix("gpu-")
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            if str(getattr(props, "uuid", "")).lower().removeprefix("gpu-") == want:
                return (
                    int(props.multi_processor_count),
                    int(getattr(props, "max_threads_per_multi_processor", 0)),
                    float(getattr(props, "L2_cache_size", 0)),
                )
    except (ImportError, OSError, RuntimeError, AttributeError):  # no PyTorch, broken CUDA libraries, no device
        pass
    return 0, 0, 0.0


def device_facts(index: int) -> DeviceFacts:
    """What GPU ``index`` (NVML's numbering) reports about itself.

    Raises:
        GpuUnavailableError: NVML or the GPU is missing.
        NvmlError: NVML fails to give the compute capability, clock table or power limit.
    """
    dev = nvml.NvmlDevice(index)
    try:
        sm, threads, l2 = _cuda_properties(dev.uuid)
    except RlclockError:  # no UUID: CUDA's device cannot be matched, the figures come by compute capability
        sm, threads, l2 = 0, 0, 0.0
    clocks = dev.supported_clocks()
    return DeviceFacts(
        name=dev.name,
        architecture=dev.architecture(),
        compute_capability=dev.compute_capability(),
        cuda_cores=dev.cuda_cores(),
        sm_count=sm,
        threads_per_sm=threads,
        l2_bytes=l2,
        mem_bus_bits=dev.memory_bus_bits(),
        clocks=clocks,
        default_mem_mhz=max(clocks) if clocks else 0,
        power_limit_w=dev.default_power_limit_w(),
        geforce=dev.is_geforce(),
    )


def spec_for_device(index: int, gpu: str | None = None) -> tuple[GpuSpec, str]:
    """The spec of GPU ``index`` and where it came from.

    Args:
        index: NVML device index.
        gpu: A preset key, NVML name or spec file to use instead (``--gpu``).

    Returns:
        The spec, and ``"given"`` (``gpu``), ``"preset"`` (its NVML name matched one) or ``"derived"`` (built from
        :func:`device_facts` by :func:`rlclock.dvfs.derive.spec_from_facts`: generic, its figures estimates until
        calibrated).
    """
    if gpu:
        return get_spec(gpu), "given"
    name = nvml.NvmlDevice(index).name
    try:
        return get_spec(name), "preset"
    except SpecError:
        pass
    try:
        return spec_from_facts(device_facts(index)), "derived"
    except RlclockError as exc:
        raise SpecError(
            f"GPU {index} ({name}) has no preset, and a spec could not be built from what it reports: {exc.message}",
            exc.fix or "write a GPU spec file for it (the preset format) and pass --gpu FILE.",
        ) from None
