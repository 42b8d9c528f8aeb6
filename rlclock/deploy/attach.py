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
STALE_STEPS = 25
"""Steps of another major optimizer with none of the marking one after which the marks move to it (a new phase)."""
MAJOR_SHARE = 0.1
"""An optimizer updating fewer parameters than this share of the largest one's never marks the training step."""
FOLLOWED = 64
"""Optimizers followed one by one at most (a script that makes one per batch keeps no more)."""
STATUS_EVERY_S = 1.0
"""While the script trains its status file is rewritten this often, seconds (so a killed process leaves one)."""
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
        exit: ``"normal"``, the exception that ended the script, or ``"running"`` — what a status written while
            the script trained says, and still says if the process ended without exiting through Python (a
            signal, ``os._exit``).
        failed_at: When that exception reached the top (``time.time()``; 0 if none): the first rank to fail is
            the cause, the others fail after it.
        stood_down: The script opened a deployment of its own (``clocked()``, a callback).
        restarts: How often the marks moved to another optimizer (the deployment started again each time).
        forked: A process forked from an attached one: its steps are counted, its clocks are not its own to control.
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
    exit: str = "running"
    failed_at: float = 0.0
    stood_down: bool = False
    restarts: int = 0
    forked: bool = False


class StepFinder:
    """Turns optimizer steps into training-step marks (module docstring).

    Args:
        mark: Called once per training step, at the marking optimizer's step.
        restart: Called when the marks move to another optimizer: the marks so far were not (or are no longer)
            the training steps, so whatever was built on them starts again.
    """

    def __init__(self, mark: Callable[[], None], restart: Callable[[], None] | None = None) -> None:
        self._mark = mark
        self._restart = restart
        self.counts: dict[int, int] = {}
        """Steps of each optimizer followed (by ``id``), at most :data:`FOLLOWED` of them."""
        self.names: dict[int, str] = {}
        self.sizes: dict[int, int | None] = {}
        self.order: list[int] = []
        self.marker: int | None = None
        self.restarts = 0
        self._by_class: dict[str, int] = {}
        self._marker_steps = 0
        self._marker_steps_at: dict[int, int] = {}  # the marking optimizer's steps when this one last stepped
        self._run: dict[int, int] = {}  # this one's steps since the marking optimizer last stepped
        self._longest_run: dict[int, int] = {}
        self._largest = 0

    def stepped(self, optimizer: Any) -> None:
        """``optimizer`` completed (or its grad scaler skipped) a step."""
        key = id(optimizer)
        name = type(optimizer).__name__
        self._by_class[name] = self._by_class.get(name, 0) + 1
        if key not in self.counts:
            self._follow(key, name, _parameter_count(optimizer))
            if (
                self.marker is not None
                and self.restarts == 0
                and self.counts[self.marker] <= 2 * DISCOVERY_STEPS
                and len(self._majors()) == 2
                and self._choose() == key
            ):
                self._move_to(key)  # the first round's second optimizer, rarer: a generator beside its critic
        self.counts[key] += 1
        if self.marker is None:
            majors = self._majors()
            if len(majors) == 1 and self.counts[majors[0]] < DISCOVERY_STEPS:
                return
            self.marker = self._choose()
        elif key != self.marker:
            self._other(key)
        if key == self.marker:
            self._marker_steps += 1
            self._mark()
        self._marker_steps_at[key] = self._marker_steps

    def _other(self, key: int) -> None:
        """An optimizer that is not the marking one stepped. The marks move to it when it is a major one that steps
        less often than the marking one, once per round of it, and recurs (a generator made after its critic: at
        its second step), or when it has stepped :data:`STALE_STEPS` times since the marking one last did (the
        training moved on to it). An optimizer that steps a few times now and then (an evaluation probe, a fresh
        one per batch) leaves them where they are."""
        run = self._run[key] = self._run.get(key, 0) + 1 if self._marker_steps_at.get(key) == self._marker_steps else 1
        self._longest_run[key] = max(self._longest_run.get(key, 0), run)
        if key not in self._majors():
            return
        before = self._marker_steps_at.get(key)
        rarer = before is not None and self._marker_steps - before >= 2 and self._longest_run[key] == 1
        if rarer or run >= STALE_STEPS:
            self._move_to(key)

    def _move_to(self, key: int) -> None:
        self.marker = key
        self.restarts += 1
        if self._restart is not None:
            self._restart()

    def _follow(self, key: int, name: str, size: int | None) -> None:
        if len(self.order) >= FOLLOWED:  # forget the optimizer that stepped longest ago (never the marking one)
            old = min((k for k in self.order if k != self.marker), key=lambda k: self._marker_steps_at.get(k, -1))
            self.order.remove(old)
            for table in (self.counts, self.names, self.sizes, self._marker_steps_at, self._run, self._longest_run):
                table.pop(old, None)
        self.counts[key] = 0
        self.names[key] = name
        self.sizes[key] = size
        self.order.append(key)
        self._largest = max(self._largest, size or 0)

    def _majors(self) -> list[int]:
        """The optimizers that may mark: those holding at least :data:`MAJOR_SHARE` of the parameters of the largest
        one seen (an optimizer whose parameters cannot be counted is one)."""
        floor = MAJOR_SHARE * self._largest
        return [k for k in self.order if (size := self.sizes[k]) is None or size >= floor]

    def _choose(self) -> int:
        """Of the major optimizers, the one that steps least often (once per training step); of several, the last
        in each round."""
        majors = self._majors()
        fewest = min(self.counts[k] for k in majors)
        return [k for k in majors if self.counts[k] == fewest][-1]

    @property
    def marking(self) -> str | None:
        """The class of the optimizer whose steps mark the training steps."""
        return None if self.marker is None else self.names[self.marker]

    def steps_by_class(self) -> dict[str, int]:
        """Optimizer steps seen, by optimizer class (every optimizer, also those no longer followed)."""
        return dict(self._by_class)


def _parameter_count(optimizer: Any) -> int | None:
    """The number of parameters ``optimizer`` updates (``None`` when it has no ``param_groups`` to count)."""
    try:
        return int(sum(p.numel() for group in optimizer.param_groups for p in group["params"]))
    except Exception:  # not a torch optimizer (a wrapper, a test's stand-in)
        return None


class Attachment:
    """The deployment of one attached process (module docstring); made by :func:`install`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.status = Status()
        self.finder = StepFinder(self._mark, self._restart)
        self.clocked: Any = None
        self.disabled = False
        self.error: str | None = None
        self._lock = threading.Lock()
        self._steps_seen = 0  # optimizer steps completed, for the grad scaler's test of a skipped step
        self._dirty = False
        self._writing = False

    def forked(self) -> None:
        """This process was forked from the attached one (``os.fork``, a ``fork`` multiprocessing start): the
        deployment it inherited — its worker, its clocks — is the parent's, forgotten here without closing it;
        this process counts its own steps and controls nothing."""
        self.clocked = None
        self.status = Status(
            torch=self.status.torch,
            forked=True,
            reason="a forked process: clocks are controlled from the one it was forked from",
        )
        self.finder = StepFinder(self._mark, self._restart)
        self.disabled = False
        self.error = None
        self._lock = threading.Lock()
        self._steps_seen = 0
        self._dirty = False
        self._writing = False  # the writer thread stayed in the parent

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
        self._steps_seen += 1
        self._guarded(self.finder.stepped, optimizer)

    def _scaler_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        attachment = self

        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            before = attachment._steps_seen
            out = original(scaler, optimizer, *args, **kwargs)
            # no optimizer completed a step (the one given, or one a wrapper given instead steps): inf/nan gradients
            if attachment._steps_seen == before:
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
        # a process killed mid-run still leaves what it saw, at most a second old; a forked one (which leaves
        # through os._exit, as multiprocessing's children do) at every step
        self._dirty = True
        if self.status.forked:
            self.write()
        elif not self._writing:
            self._writing = True
            self.write()
            threading.Thread(target=self._keep_writing, name="rlclock-attach-status", daemon=True).start()

    def _keep_writing(self) -> None:
        while True:
            time.sleep(STATUS_EVERY_S)
            if self._dirty:
                self._dirty = False
                self.write()

    # -- the deployment --------------------------------------------------------------------------------------
    def _mark(self) -> None:
        from rlclock.deploy import api

        if api.explicit_deployments() > 0:  # the script deploys itself: leave it alone
            if not self.status.stood_down:
                self.status.stood_down = True
                self._close()
            return
        self.status.marks += 1
        if self.status.forked:
            return
        if self.clocked is None:
            self.clocked = api.clocked(attached=True)
            self.clocked.start()
        self.clocked.step()

    def _restart(self) -> None:
        """The marks so far were not training steps (a rarer optimizer appeared): start the deployment again (its
        clocks restored, its plan dropped: it was made for steps that were not the training steps)."""
        clk, self.clocked = self.clocked, None
        self.status.marks = 0
        self.status.restarts += 1
        _log.info("the training step is now %s's step: the deployment starts again", self.finder.marking)
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
        self.status.cuda = _cuda_name()
        try:
            self._close()
        except Exception as exc:  # say so; the exit goes on
            self.status.reason = f"closing the deployment failed: {type(exc).__name__}: {exc}"
        if self.status.torch or self.finder.counts:
            self.write()

    def write(self) -> Path | None:
        """Write the status file (``attach-<pid>.json`` in the folder ``rlclock apply`` gave), with the steps seen
        so far."""
        self.status.pid = os.getpid()
        self.status.optimizer_steps = self.finder.steps_by_class()
        self.status.marking = self.finder.marking
        rank = os.environ.get("RANK", "")
        if self.status.rank is None and rank.isdigit():  # a torchrun or accelerate worker
            self.status.rank = int(rank)
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
        attachment.error = f"{kind.__name__}: {value}" if str(value) else kind.__name__
        attachment.status.failed_at = time.time()
        previous(kind, value, tb)

    sys.excepthook = excepthook
    atexit.register(lambda: attachment.finish(attachment.error or "normal"))
    os.register_at_fork(after_in_child=attachment.forked)


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
