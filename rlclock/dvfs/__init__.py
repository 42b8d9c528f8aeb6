"""The DVFS model: a GPU's clock table, limits and physical parameters, and the time, power and energy of a kernel
at a core/memory clock pair under the power cap.

:mod:`~rlclock.dvfs.spec` holds :class:`GpuSpec` and the shipped presets (``presets/*.yaml``);
:mod:`~rlclock.dvfs.model` the equations; :mod:`~rlclock.dvfs.derive` a spec for a GPU without a preset, from what
it reports; :mod:`~rlclock.dvfs.variants` GPUs that differ from a preset within documented ranges;
:mod:`~rlclock.dvfs.timed` the work of kernels known only by their measured time. Equations and sources:
``docs/simulator.md``.
"""
