"""Public names that were renamed: the old name still works for one minor version, with a ``DeprecationWarning``.

A module that renamed ``Old`` to ``New`` ends with::

    __getattr__ = renamed(__name__, {"Old": "New"}, since="0.2.0")

and ``from module import Old`` returns ``New`` and warns once per use site. Keyword arguments that were renamed go
through :func:`renamed_keyword`.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any


def renamed(module: str, names: dict[str, str], since: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves each old name in ``names`` as its new one, warning that it was renamed.

    Args:
        module: The module's ``__name__``.
        names: ``{old name: new name}``; the new names are attributes of the module.
        since: The version that renamed them.
    """

    def __getattr__(name: str) -> Any:
        new = names.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} was renamed to {new} in rlclock {since}; the old name goes in the next minor version",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(sys.modules[module], new)

    return __getattr__


def renamed_keyword(owner: str, old: str, new: str, since: str) -> None:
    """Warn that ``owner`` took keyword ``old``, renamed to ``new`` in version ``since``."""
    warnings.warn(
        f"{owner}({old}=...) was renamed to {new}= in rlclock {since}; the old keyword goes in the next minor version",
        DeprecationWarning,
        stacklevel=3,
    )
