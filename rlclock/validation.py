"""Typed settings models (pydantic) whose validation errors read as rlclock's one-line errors.

Env specs, agent recipes and deploy settings are :class:`Settings` models: unknown fields are refused, values
are checked against their types and ranges, and :func:`validate` turns pydantic's report into one
:class:`~rlclock.errors.RlclockError` line naming the file, the field, what was found and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

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
Float = Annotated[float, BeforeValidator(_not_bool)]
"""A number (not a boolean)."""

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


def validate(model: type[M], data: Any, where: str, error: type[RlclockError] = SpecError,
             fix: str | None = None) -> M:
    """``model`` validated from ``data``; a validation error becomes one ``error`` line naming ``where``."""
    if not isinstance(data, Mapping):
        raise error(f"{where}: expected a mapping of fields, found {type(data).__name__}.", fix)
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        tags = model.union_tags if issubclass(model, Settings) else frozenset()
        raise error(f"{where}: {describe(exc, tags)}.", fix) from None
