"""Attach a deployment to a training script that never imports rlclock: ``rlclock apply -- python train.py``.

``rlclock apply`` starts the command with :data:`BOOT_DIR` first on ``PYTHONPATH``; every Python interpreter
the command starts (the script, ``torchrun``'s and ``accelerate launch``'s workers) then runs its
``sitecustomize``, which calls :func:`install` — the way instrumenting launchers hook a program they do not own.
Nothing else happens at start-up: the hooks go in only once the script imports ``torch``.

**The training step is one optimizer step.** PyTorch calls global hooks around every ``Optimizer.step``
(``torch.optim.optimizer.register_optimizer_step_post_hook``); :class:`StepFinder` turns them into step marks:

* gradient accumulation needs nothing: the optimizer steps once per training step, after the micro-batches;
* with several optimizers (a GAN's two, a critic stepped five times per generator step) the mark follows the one
  that steps least often (ties: the one that steps last in each round), so one mark falls in every training step
  at the same place; marks start after :data:`DISCOVERY_STEPS` steps of the first optimizer or once a second one
  appears, and when one appears that steps less often than the marking one, the deployment starts again on it;
* an AMP ``GradScaler`` that skips a step (inf/nan gradients) never calls the optimizer: its ``step`` is wrapped
  so that a skipped step is still marked, and counted.

Each mark is :meth:`rlclock.deploy.api.Clocked.step` on a deployment opened at the first mark with the options
``rlclock apply`` put in the environment — the same warm-up, profiling, planning and control as ``clocked()``. At
exit (normal or an exception; ``torchrun`` and ``accelerate launch`` end their workers the same way) the
deployment is closed — clocks restored, report written — and a small status file tells ``rlclock apply`` what this
process saw (:func:`read_statuses`). A script that opens ``clocked()`` itself, or trains through the Hugging Face
or Lightning callbacks, keeps control: the attachment stands down.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlclock.log import get_logger

_log = get_logger(__name__)
BOOT_DIR = Path(__file__).resolve().parent / "boot"
"""The folder ``rlclock apply`` puts first on ``PYTHONPATH``: its ``sitecustomize`` calls :func:`install`."""
ATTACH_ENV = "RLCLOCK_ATTACH_DIR"
"""The folder where each attached process writes its status (set by ``rlclock apply``)."""
DISCOVERY_STEPS = 3
"""Optimizer steps of the first optimizer seen before the marking optimizer is chosen."""
STATUS_PREFIX = "attach-"


@dataclass
class Status:
    """What one attached process saw, for ``rlclock apply``'s closing lines.

    Attributes:
        pid: The process.
        argv: Its command line.
        rank: Its rank under ``torch.distributed`` (``None`` when not distributed or never seen).
        torch: Whether it imported ``torch``.
        cuda: The CUDA device it trained on (``None``: none).
        optimizer_steps: Optimizer steps by optimizer class (``"AdamW": 120``).
        skipped_steps: Steps an AMP grad scaler skipped (inf/nan gradients).
        marks: Training steps marked.
        marking: The optimizer class whose steps mark the training steps.
        state: The deployment's state at the end (``control``, ``inactive`` …; ``""``: never opened).
        reason: Why it was inactive, or what failed.
        report: The controller's report file, if one was written.
        exit: ``"normal"`` or the exception that ended the script.
        failed_at: When that exception reached the top (``time.time()``; 0 if none): the first rank to fail is
            the cause, the others fail after it.
        stood_down: The script opened a deployment of its own (``clocked()``, a callback).
    """

    pid: int = field(default_factory=os.getpid)
    argv: list[str] = field(default_factory=lambda: list(sys.argv))
    rank: int | None = None
    torch: bool = False
    cuda: str | None = None
    optimizer_steps: dict[str, int] = field(default_factory=dict)
    skipped_steps: int = 0
    marks: int = 0
    marking: str | None = None
    state: str = ""
    reason: str = ""
    report: str | None = None
    exit: str = "normal"
    failed_at: float = 0.0
    stood_down: bool = False


class StepFinder:
    """Turns optimizer steps into training-step marks (module docstring).

    Args:
        mark: Called once per training step, at the marking optimizer's step.
        restart: Called when an optimizer appears that steps less often than the marking one: the marks so far
            were not training steps, so whatever was built on them starts again.
    """

    def __init__(self, mark: Callable[[], None], restart: Callable[[], None] | None = None) -> None:
        self._mark = mark
        self._restart = restart
        self.counts: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.order: list[int] = []
        self.lead: int | None = None

    def stepped(self, optimizer: Any) -> None:
        """``optimizer`` completed (or its grad scaler skipped) a step."""
        key = id(optimizer)
        if key not in self.counts:
            self.counts[key] = 0
            self.names[key] = type(optimizer).__name__
            self.order.append(key)
            if self.lead is not None and self._choose() != self.lead:
                self.lead = None
                if self._restart is not None:
                    self._restart()
        self.counts[key] += 1
        if self.lead is None:
            if self.counts[self.order[0]] < DISCOVERY_STEPS and len(self.order) == 1:
                return
            self.lead = self._choose()
        if key == self.lead:
            self._mark()

    def _choose(self) -> int:
        """The optimizer that steps least often (once per training step); of several, the last in each round."""
        fewest = min(self.counts.values())
        return [k for k in self.order if self.counts[k] == fewest][-1]

    @property
    def marking(self) -> str | None:
        """The class of the optimizer whose steps mark the training steps."""
        return None if self.lead is None else self.names[self.lead]

    def steps_by_class(self) -> dict[str, int]:
        """Optimizer steps seen, by optimizer class."""
        out: dict[str, int] = {}
        for key, n in self.counts.items():
            out[self.names[key]] = out.get(self.names[key], 0) + n
        return out


class Attachment:
    """The deployment of one attached process (module docstring); made by :func:`install`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.status = Status()
        self.finder = StepFinder(self._mark, self._restart)
        self.clocked: Any = None
        self.disabled = False
        self._lock = threading.Lock()
        self._stepped_in_scaler: set[int] = set()

    # -- hooks ---------------------------------------------------------------------------------------------
    def on_torch(self, torch: Any) -> None:
        """``torch`` was imported: hook the optimizer's steps and the grad scaler."""
        self.status.torch = True
        importlib.import_module("torch.optim.optimizer").register_optimizer_step_post_hook(self._after_step)
        for module_name in ("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler"):
            try:
                scaler = getattr(importlib.import_module(module_name), "GradScaler", None)
            except ImportError:
                continue
            if scaler is not None and not getattr(scaler.step, "_rlclock", False):
                scaler.step = self._scaler_step(scaler.step)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._stepped_in_scaler.add(id(optimizer))
        self._guarded(self.finder.stepped, optimizer)

    def _scaler_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        attachment = self

        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            attachment._stepped_in_scaler.discard(id(optimizer))
            out = original(scaler, optimizer, *args, **kwargs)
            if id(optimizer) not in attachment._stepped_in_scaler:  # skipped: inf/nan gradients
                attachment.status.skipped_steps += 1
                attachment._guarded(attachment.finder.stepped, optimizer)
            return out

        step._rlclock = True  # type: ignore[attr-defined]
        step.__wrapped__ = original  # type: ignore[attr-defined]
        return step

    def _guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn``; a failure ends the attachment (the training goes on) and is said once."""
        if self.disabled:
            return
        try:
            with self._lock:
                fn(*args)
        except Exception as exc:  # nothing the deployment does may stop a training run
            self.disabled = True
            self.status.reason = f"{type(exc).__name__}: {exc}"
            _log.warning("the deployment stopped (%s); training goes on without it", self.status.reason)
            self._close()

    # -- the deployment --------------------------------------------------------------------------------------
    def _mark(self) -> None:
        from rlclock.deploy import api

        if api.explicit_deployments() > 0:  # the script deploys itself: leave it alone
            if not self.status.stood_down:
                self.status.stood_down = True
                self._close()
            return
        if self.clocked is None:
            self.clocked = api.clocked(attached=True)
            self.clocked.start()
        self.status.marks += 1
        self.clocked.step()

    def _restart(self) -> None:
        """The marks so far were not training steps (a rarer optimizer appeared): start the deployment again (its
        clocks restored, its plan dropped: it was made for steps that were not the training steps)."""
        clk, self.clocked = self.clocked, None
        self.status.marks = 0
        if clk is not None:
            clk.close()

    def _close(self) -> None:
        """Close the deployment (clocks restored, report written), keeping what it ended in."""
        clk, self.clocked = self.clocked, None
        if clk is None:
            return
        self.status.state = clk.state
        self.status.rank = clk.rank.rank if clk.rank.distributed else None
        try:
            clk.close()
        finally:
            self.status.reason = self.status.reason or clk.reason
            if clk.report_path is not None:
                self.status.report = str(clk.report_path)

    def finish(self, exit_reason: str = "normal") -> None:
        """The process is ending: close the deployment (clocks restored, report written) and write the status."""
        self.status.exit = exit_reason
        self.status.optimizer_steps = self.finder.steps_by_class()
        self.status.marking = self.finder.marking
        self.status.cuda = _cuda_name()
        rank = os.environ.get("RANK", "")
        if self.status.rank is None and rank.isdigit():  # a torchrun or accelerate worker
            self.status.rank = int(rank)
        try:
            self._close()
        except Exception as exc:  # say so; the exit goes on
            self.status.reason = f"closing the deployment failed: {type(exc).__name__}: {exc}"
        if self.status.torch or self.finder.counts:
            self.write()

    def write(self) -> Path | None:
        """Write the status file (``attach-<pid>.json`` in the folder ``rlclock apply`` gave)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"{STATUS_PREFIX}{self.status.pid}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(asdict(self.status)))
            os.replace(tmp, path)
            return path
        except OSError:
            return None


def _cuda_name() -> str | None:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    except Exception:  # a broken CUDA install: say nothing
        return None
    return None


# -- start-up ---------------------------------------------------------------------------------------------------

_ATTACHMENT: Attachment | None = None


class _TorchWatch(importlib.abc.MetaPathFinder):
    """Calls ``then(torch)`` once ``import torch`` has finished (a post-import hook)."""

    def __init__(self, then: Callable[[Any], None]) -> None:
        self.then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, path, target) if find is not None else None
                if spec is not None and spec.loader is not None:
                    break
            else:
                return None
        loader, then = spec.loader, self.then
        exec_module = loader.exec_module

        def exec_and_hook(module: Any) -> None:
            exec_module(module)
            then(module)

        spec.loader = _Loader(loader, exec_and_hook)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any, exec_module: Callable[[Any], None]) -> None:
        self._loader = loader
        self._exec = exec_module

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._exec(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def install(folder: str | os.PathLike[str] | None = None) -> Attachment | None:
    """Attach this process (module docstring): called by the ``sitecustomize`` of :data:`BOOT_DIR`.

    Args:
        folder: Where to write the status (default: ``$RLCLOCK_ATTACH_DIR``; without it nothing is attached).

    Returns:
        The attachment, or ``None`` when this process is not to be attached.
    """
    global _ATTACHMENT
    where = folder if folder is not None else os.environ.get(ATTACH_ENV)
    if not where or _ATTACHMENT is not None:
        return _ATTACHMENT
    attachment = Attachment(Path(where))

    def hook(torch: Any) -> None:
        try:
            attachment.on_torch(torch)
        except Exception as exc:  # a PyTorch without the hooks: train unchanged, say why
            attachment.disabled = True
            attachment.status.reason = f"cannot hook the optimizer steps of this PyTorch ({exc})"

    if "torch" in sys.modules:
        hook(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchWatch(hook))
    _install_exit(attachment)
    _ATTACHMENT = attachment
    return attachment


def _install_exit(attachment: Attachment) -> None:
    """Finish the attachment at exit, saying how the script ended (an uncaught exception is seen through
    ``sys.excepthook``, which runs before the exit handlers)."""
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        attachment.status.exit = f"{kind.__name__}: {value}"
        attachment.status.failed_at = time.time()
        previous(kind, value, tb)

    sys.excepthook = excepthook
    atexit.register(lambda: attachment.finish(attachment.status.exit))


def read_statuses(folder: str | os.PathLike[str]) -> list[Status]:
    """The statuses the attached processes wrote to ``folder`` (unreadable files are skipped)."""
    out: list[Status] = []
    known = set(Status.__dataclass_fields__)
    for path in sorted(Path(folder).glob(f"{STATUS_PREFIX}*.json")):
        try:
            data = json.loads(path.read_text())
            out.append(Status(**{k: v for k, v in data.items() if k in known}))
        except (OSError, ValueError, TypeError):
            continue
    return out
