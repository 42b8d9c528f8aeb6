"""Typed settings models (pydantic) whose validation errors read as rlclock's one-line errors, and the ranges
every command shares.

Env specs, agent recipes and deploy settings are :class:`Settings` models: unknown fields are refused, values
are checked against their types and ranges, and :func:`validate` turns pydantic's report into one
:class:`~rlclock.errors.RlclockError` line naming the file, the field, what was found and what is allowed.

One rule each, used wherever the value enters (env specs, checkpoints, the command line, deploy settings):
the slowdown budget's range (:data:`MAX_BUDGET`, :data:`Budget`, :func:`check_budget`) and the most kernels a
step may have (:data:`MAX_KERNELS`, :func:`check_kernels`).
"""

from __future__ import annotations

import math
import numbers
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import AllowInfNan, BaseModel, BeforeValidator, ConfigDict, ValidationError

from rlclock.errors import RlclockError, SpecError


class Settings(BaseModel):
    """A frozen settings model that refuses unknown fields.

    ``union_tags``: the tags of the tagged unions among its fields (e.g. a backend's ``kind``), which pydantic
    puts into error locations and :func:`describe` leaves out.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    union_tags: ClassVar[frozenset[str]] = frozenset()


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, found the boolean {value}")
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]
"""A whole number (``2.0`` is taken, ``2.7`` and booleans are not)."""
Float = Annotated[float, BeforeValidator(_not_bool), AllowInfNan(False)]
"""A finite number (not a boolean, NaN or infinity)."""

MAX_BUDGET = 0.5
"""The largest slowdown budget rlclock plans for, a fraction of the auto step's time (0.5: 50 % slower). Beyond
it no clock plan saves energy worth the time; one rule for every command, spec, checkpoint and deploy setting."""

BUDGET_FIX = f"give a slowdown budget as a fraction from 0 to {MAX_BUDGET:g} (0.01 for 1 %)."
"""The fix line of every refused budget."""


def _budget(value: Any) -> float:
    problem = budget_problem(value)
    if problem is not None:
        raise ValueError(f"{problem}; {BUDGET_FIX}")
    return float(value)


Budget = Annotated[float, BeforeValidator(_budget)]
"""A slowdown budget in a settings model: a fraction from 0 to :data:`MAX_BUDGET` (0.01 for 1 %), by
:func:`budget_problem`, its error carrying :data:`BUDGET_FIX`."""


def budget_problem(value: Any) -> str | None:
    """Why ``value`` is not a slowdown budget (None when it is one)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"a budget must be a number, found {value!r}"
    if not math.isfinite(float(value)) or not 0.0 <= float(value) <= MAX_BUDGET:
        return f"a budget must lie from 0 to {MAX_BUDGET:g}, found {value!r}"
    return None


def check_budget(value: Any, where: str, error: type[RlclockError] = SpecError) -> float:
    """``value`` as a slowdown budget, or one ``error`` line naming ``where`` with :data:`BUDGET_FIX`."""
    problem = budget_problem(value)
    if problem is not None:
        raise error(f"{where}: {problem}.", BUDGET_FIX)
    return float(value)


MAX_KERNELS = 1 << 20
"""The most kernel invocations one step may have (1 048 576). A real training step has thousands to tens of
thousands; beyond this the tables of the optima and the env no longer fit a workstation's memory."""


def check_kernels(count: int, where: str, error: type[RlclockError] = SpecError, fix: str | None = None) -> int:
    """``count`` if a step may have that many kernels (at most :data:`MAX_KERNELS`), else one ``error`` line."""
    if count > MAX_KERNELS:
        raise error(
            f"{where}: a step of {count} kernels is more than rlclock plans ({MAX_KERNELS} at most).",
            fix or "give a smaller step: fewer layers or a smaller batch of steps.",
        )
    return count


M = TypeVar("M", bound=BaseModel)


def _where(loc: tuple[Any, ...], tags: frozenset[str] = frozenset()) -> str:
    """The field path of an error location, without the tags pydantic adds for the members of a union."""
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and (p in _TYPE_TAGS or p in tags or "[" in p)))


_TYPE_TAGS = {"int", "float", "str", "bool", "tuple", "list", "dict", "none"}


def describe(exc: ValidationError, tags: frozenset[str] = frozenset()) -> str:
    """One sentence from a pydantic error: each field with what was wrong and the value found (``tags``: see
    :class:`Settings`)."""
    by_field: dict[str, list[str]] = {}
    found: dict[str, Any] = {}
    for err in exc.errors():
        field = _where(tuple(err["loc"]), tags) or "(top level)"
        msg = str(err["msg"]).removeprefix("Value error, ").replace("a valid tuple", "a list")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        by_field.setdefault(field, [])
        if msg not in by_field[field]:
            by_field[field].append(msg)
        found.setdefault(field, err.get("input"))
    parts = []
    for field, msgs in by_field.items():
        shown = found[field]
        text = repr(shown) if not isinstance(shown, Mapping) else "a mapping"
        parts.append(f"{field!r}: {' or '.join(msgs)} (found {text[:60]})")
    return "; ".join(parts[:3]) + (f"; and {len(parts) - 3} more" if len(parts) > 3 else "")


def validate(model: type[M], data: Any, where: str, error: type[RlclockError] = SpecError, fix: str | None = None) -> M:
    """``model`` validated from ``data``; a validation error becomes one ``error`` line naming ``where``."""
    if not isinstance(data, Mapping):
        raise error(f"{where}: expected a mapping of fields, found {type(data).__name__}.", fix)
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        tags = model.union_tags if issubclass(model, Settings) else frozenset()
        raise error(f"{where}: {describe(exc, tags)}.", fix) from None


MAX_KERNEL_S = 60.0
"""The longest one kernel launch may plausibly take, seconds (a training step's kernels take microseconds to
milliseconds)."""
POWER_RANGE_W = (1.0, 5000.0)
"""The board power a measured kernel may plausibly draw, watts (a GPU idles at tens of watts; no board draws
kilowatts)."""


def measurement_problem(time_s: Any, energy_j: Any) -> str | None:
    """Why a measured (time, energy) of one kernel launch is not plausible (None when it is): the time must be a
    number above 0 and at most :data:`MAX_KERNEL_S`; the energy, if given, a number whose power (energy / time)
    lies in :data:`POWER_RANGE_W`."""

    def number(v: Any) -> bool:
        return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))

    if not number(time_s) or not 0.0 < float(time_s) <= MAX_KERNEL_S:
        return f"time_s {time_s!r} is not a time from 0 to {MAX_KERNEL_S:g} s"
    if energy_j is None:
        return None
    if not number(energy_j) or float(energy_j) < 0:
        return f"energy_j {energy_j!r} is not an energy >= 0"
    power = float(energy_j) / float(time_s)
    if not POWER_RANGE_W[0] <= power <= POWER_RANGE_W[1]:
        return (
            f"{float(energy_j):.4g} J in {float(time_s):.4g} s is {power:.4g} W, outside the "
            f"{POWER_RANGE_W[0]:g}-{POWER_RANGE_W[1]:g} W a GPU draws"
        )
    return None


def _probe(folder: Path) -> None:
    """Create and remove a file in ``folder`` (what ``os.access`` cannot tell: a read-only file system, root)."""
    probe = folder / f".rlclock-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    probe.write_bytes(b"")
    probe.unlink()


def check_output_folder(path: str | Path, option: str) -> Path:
    """``path`` as a folder rlclock can write into, checked before any work (created if missing).

    Raises:
        SpecError: It is a file, lies under one, cannot be created, or cannot be written into; the line names
            ``option`` (``--out``, ``--save-checkpoint`` …).
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise SpecError(
            f"{option} {str(folder)!r} is a file or lies under one.",
            f"give {option} a folder (it is created if missing).",
        ) from None
    except OSError as exc:
        raise SpecError(
            f"cannot create the {option} folder {str(folder)!r}: {exc.strerror or exc}.",
            f"give {option} a folder you can write to.",
        ) from None
    try:
        _probe(folder)
    except OSError as exc:
        raise SpecError(
            f"cannot write into the {option} folder {str(folder)!r}: {exc.strerror or exc}.",
            f"give {option} a folder you can write to.",
        ) from None
    return folder


def check_output_file(path: str | Path, option: str) -> Path:
    """``path`` as a file rlclock can write, checked before any work (its folder created if missing).

    Raises:
        SpecError: It is a folder, its folder cannot be created or written into, or it exists and cannot be
            replaced; the line names ``option``.
    """
    file = Path(path)
    if file.is_dir():
        raise SpecError(f"{option} {str(file)!r} is a folder.", f"give {option} a file name.")
    check_output_folder(file.parent if str(file.parent) else Path("."), f"{option} folder of")
    if file.exists() and not os.access(file, os.W_OK):
        raise SpecError(f"{option} {str(file)!r} exists and cannot be written.", f"give {option} another file.")
    return file
