"""Calibration: fitting a GPU preset's DVFS parameters to measurements, so the simulator predicts that GPU.

Three sources, one fit (:mod:`~rlclock.calibration.fit`): a clock sweep of microbenchmarks run on the user's GPU
(:mod:`~rlclock.calibration.device`, :mod:`~rlclock.calibration.sweep`) or read from a CSV table
(:mod:`~rlclock.calibration.table`); a profiled trace measured kernel by kernel on that GPU
(:mod:`~rlclock.calibration.measured`); and the paper's RTX 3080 Ti readings (:mod:`~rlclock.calibration.paper`).
``rlclock calibrate`` is the command; ``python -m rlclock.calibration GPU`` refits a shipped preset. The equations
and sources are in ``docs/simulator.md``.
"""
