"""Reading the YAML files rlclock is configured with (env specs, GPU presets, agent recipes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlclock.errors import SpecError


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, where: str, what: str) -> Any:
    """Parse YAML text; bad YAML or a key given twice becomes one :class:`SpecError` naming ``what``."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise SpecError(f"cannot read {what} {where!r}: {detail}.", "fix the YAML there.") from None


def read_yaml(path: str | Path, what: str) -> Any:
    """Parse ``path``; an unreadable or binary file, bad YAML or a duplicate key becomes one :class:`SpecError`
    naming ``what``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"cannot read {what} {str(path)!r}: it is not UTF-8 text.", "give a YAML file.") from None
    except OSError as exc:
        raise SpecError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}.") from None
    return parse_yaml(text, str(path), what)
