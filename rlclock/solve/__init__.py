"""Baselines and exact optima of a step under a slowdown budget, all judged by one accounting.

:mod:`~rlclock.solve.evaluation` judges a schedule (its run beside the same backend's auto run);
:mod:`~rlclock.solve.baselines` the baselines (static, per pass, per kernel, the power limit) and the Pareto
frontiers; :mod:`~rlclock.solve.optimum` the latency-blind and latency-aware optima;
:mod:`~rlclock.solve.lagrangian` the array-level building blocks they share.
"""
