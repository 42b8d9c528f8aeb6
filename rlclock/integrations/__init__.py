"""Callbacks that run a clock deployment inside the training frameworks people use.

A plain PyTorch loop opens :func:`rlclock.deploy.clocked` itself and marks each step. A loop that a framework
runs gets the same deployment from a callback, which does those three things at the framework's own events:

* :class:`~rlclock.integrations.hf.RlclockTrainerCallback` — a Hugging Face ``transformers``
  ``TrainerCallback`` (``pip install 'rlclock[hf]'``);
* :class:`~rlclock.integrations.lightning.RlclockLightningCallback` — a Lightning ``Callback`` for
  ``lightning.pytorch`` and ``pytorch_lightning`` 2.x (``pip install 'rlclock[lightning]'``).

Each opens ``clocked(**options)`` when training begins, marks one step per optimizer step (gradient accumulation
counted as the framework counts it), and closes the deployment — clocks restored, report in ``callback.report``
— when training ends or fails. The options are :func:`~rlclock.deploy.clocked`'s; under ``rlclock apply`` the
command's options override them, as they override a script's ``clocked()``. The shared part is
:class:`~rlclock.integrations.session.TrainingSession`; ``docs/integrations.md`` is the user's page.

Importing this package imports neither torch nor a framework; each callback's module imports its framework, and
says how to install it when it is missing.
"""

from __future__ import annotations

from rlclock.lazy import lazy_exports

_EXPORTS = {
    "RlclockTrainerCallback": "rlclock.integrations.hf",
    "RlclockLightningCallback": "rlclock.integrations.lightning",
    "TrainingSession": "rlclock.integrations.session",
    "MissingFrameworkError": "rlclock.integrations.session",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("rlclock.integrations", globals(), _EXPORTS)
