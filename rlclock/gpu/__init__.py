"""The real GPU: NVML (:mod:`~rlclock.gpu.nvml`, the one module that imports ``pynvml``), safe clock control and
its owner lock and watchdog, energy metering, profiling and measuring kernels of a captured step, and ``rlclock
doctor``. Code here that sets clocks is tested against a fake NVML; nothing is set without ``--control-clocks``.
"""
