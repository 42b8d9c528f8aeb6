"""Reading the YAML and JSON files rlclock is given (env specs, GPU presets, agent recipes, run folders,
checkpoint metadata, schedules, measurement tables), bounded.

A file a user names is read only if it is a regular file of at most a set size; YAML aliases (``*name``, which
let 359 bytes expand to billions of nodes) and nesting deeper than :data:`MAX_DEPTH` are refused, as are a key
given twice in one mapping; JSON's ``NaN`` and ``Infinity`` are refused too. Every refusal is one
:class:`~rlclock.errors.RlclockError` line naming the file and what to fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from rlclock.errors import RlclockError, SpecError

MAX_YAML_BYTES = 1 << 20
"""The largest YAML file rlclock reads, bytes (its env specs, recipes, GPU specs and run configs are kilobytes)."""
MAX_JSON_BYTES = 256 << 20
"""The largest JSON document rlclock reads whole, bytes (checkpoint metadata, schedules, measurement tables; a
kernel trace is read kernel by kernel instead, see :mod:`rlclock.workload.trace`)."""
MAX_DEPTH = 64
"""The deepest nesting of lists and mappings a YAML or JSON file may have."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing aliases, nesting deeper than :data:`MAX_DEPTH`, and a mapping that names a
    key twice (PyYAML keeps the last silently)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"alias *{getattr(event, 'anchor', '')} is not allowed (write the value out)",
                event.start_mark,
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: PyYAML's own error says so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, where: str, what: str) -> Any:
    """Parse YAML text; bad YAML, an alias, deep nesting, a key given twice or a document over
    :data:`MAX_YAML_BYTES` becomes one :class:`SpecError` naming ``what``."""
    if len(text) > MAX_YAML_BYTES:
        raise SpecError(
            f"{what} {where!r} is {len(text)} characters long; rlclock reads YAML files of at most "
            f"{MAX_YAML_BYTES} bytes.",
            f"give the {what} itself (a few kilobytes).",
        )
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).replace('in "<unicode string>", ', "").split())
        raise SpecError(f"cannot read {what} {where!r}: {detail}.", "fix the YAML there.") from None
    except RecursionError:
        raise SpecError(f"cannot read {what} {where!r}: nested too deeply.", "fix the YAML there.") from None


def read_text(
    path: str | Path, what: str, max_bytes: int, error: type[RlclockError] = SpecError, fix: str | None = None
) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` bytes; anything else is one ``error`` line.

    Args:
        path: The file.
        what: What it should be, for the message (``"env spec"``, ``"checkpoint metadata"`` …).
        max_bytes: The largest size accepted.
        error: The error class raised.
        fix: The fix to suggest when it is missing or not a regular file.
    """
    p = Path(path)
    try:
        if not p.exists():
            raise error(f"{what} {str(p)!r} does not exist.", fix or "check the path.")
        if not p.is_file():
            raise error(f"{what} {str(p)!r} is not a regular file.", fix or f"give the path of a {what} file.")
        with p.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}.") from None
    if len(data) > max_bytes:
        raise error(
            f"{what} {str(p)!r} is larger than {max_bytes} bytes, more than rlclock reads.",
            fix or f"give the {what} itself.",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"cannot read {what} {str(p)!r}: it is not UTF-8 text.", fix or f"give a {what} file.") from None


def read_yaml(path: str | Path, what: str) -> Any:
    """Parse ``path``; a missing, unreadable, binary or oversized file, bad YAML, an alias, deep nesting or a
    duplicate key becomes one :class:`SpecError` naming ``what``."""
    return parse_yaml(read_text(path, what, MAX_YAML_BYTES), str(path), what)


class _PlainDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, writing every value out (never an alias, which the readers here refuse)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any) -> str:
    """``data`` as YAML that :func:`parse_yaml` reads back: block style, keys in their order, no aliases."""
    return yaml.dump(data, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object from its pairs, refusing a key given twice (``json`` keeps the last silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


STRICT_JSON = json.JSONDecoder(object_pairs_hook=unique_pairs, parse_constant=_no_constant)
"""A JSON decoder refusing a key given twice in one object, and ``NaN``/``Infinity``."""


def parse_json(text: str, where: str, what: str, error: type[RlclockError] = SpecError, fix: str | None = None) -> Any:
    """Parse JSON text strictly (:data:`STRICT_JSON`); bad JSON, a duplicate key, ``NaN`` or nesting deeper
    than :data:`MAX_DEPTH` becomes one ``error`` line naming ``what``."""
    try:
        data = STRICT_JSON.decode(text)
    except (json.JSONDecodeError, ValueError) as exc:
        raise error(f"cannot read {what} {where!r}: {exc}.", fix or f"give a {what} written by rlclock.") from None
    except RecursionError:
        raise error(f"cannot read {what} {where!r}: nested too deeply.", fix) from None
    if _depth(data) > MAX_DEPTH:
        raise error(
            f"cannot read {what} {where!r}: nested deeper than {MAX_DEPTH} levels.",
            fix or f"give a {what} written by rlclock.",
        )
    return data


def read_json(
    path: str | Path,
    what: str,
    error: type[RlclockError] = SpecError,
    fix: str | None = None,
    max_bytes: int = MAX_JSON_BYTES,
) -> Any:
    """Parse the JSON file ``path`` strictly (:func:`parse_json`, :func:`read_text`)."""
    return parse_json(read_text(path, what, max_bytes, error, fix), str(path), what, error, fix)


def _depth(value: Any, limit: int = MAX_DEPTH + 1) -> int:
    """How deeply lists and objects nest in ``value`` (counted up to ``limit``)."""
    depth, level = 0, [value]
    while level and depth < limit:
        nxt: list[Any] = []
        for v in level:
            if isinstance(v, dict):
                nxt.extend(v.values())
            elif isinstance(v, list):
                nxt.extend(v)
        if not nxt:
            return depth
        depth += 1
        level = nxt
    return depth
