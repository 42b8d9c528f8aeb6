"""MkDocs hook: render the Sphinx roles of rlclock's docstrings (``:class:`~rlclock.x.Y```) as code, linked.

The docstrings name objects the Sphinx way; mkdocstrings renders Markdown, where such a role shows as
``:class:Y``. This hook turns each into ``<code>Y</code>`` (the last component where the target starts with ``~``, as
Sphinx shows it), linked through mkdocs-autorefs when the target is a full ``rlclock.…`` path that the API pages
render; other targets stay unlinked code.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj):<code>(~?)([\w.]+)</code>")


def _render(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    title = target.rsplit(".", 1)[-1] if short else target
    if target.startswith("rlclock."):
        return f'<autoref identifier="{target}" optional><code>{title}</code></autoref>'
    return f"<code>{title}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    """Rewrite the roles on every page; mkdocs-autorefs resolves the links after all pages are rendered."""
    return ROLE.sub(_render, html)
