"""Reading the YAML files rlclock is configured with (env specs, GPU presets, agent recipes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlclock.errors import SpecError


def read_yaml(path: str | Path, what: str) -> Any:
    """Parse ``path``; an unreadable file or bad YAML becomes one :class:`SpecError` naming ``what``."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read {what} {str(path)!r}: {exc}.") from None
