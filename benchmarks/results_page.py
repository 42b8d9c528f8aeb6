"""Render docs/results.md from docs/results.yaml: every figure read from its benchmark's committed output.

    python benchmarks/results_page.py            # write docs/results.md
    python benchmarks/results_page.py --check    # exit 1 when docs/results.md is not the page the outputs give

docs/results.yaml has one entry per claim (the file's own comment says how to add one): what is claimed, its
target, on which machine, whether the figure is planned, delivered or measured, the command that produces it, the
committed output it is read from, and how to read it there (``read``: a regex, a table's columns or a JSON path;
``show``: how the values read are printed; ``check`` or a captured ``verdict``: whether the target is met). A figure
that cannot be found in its file stops the rendering with the claim, the file and the pattern, so a benchmark
rerun whose output changed shape is noticed; a rerun that changed a figure changes the page, and
tests/test_results_page.py fails until the page is rendered again.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import operator
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlclock.errors import RlclockError

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "docs" / "results.yaml"
PAGE = ROOT / "docs" / "results.md"
KINDS = ("planned", "delivered", "measured")
NUMBER = re.compile(r"[-+]?(?:\d[\d,]*)?\.?\d+(?:[eE][-+]?\d+)?")
DEFAULT_ROW = r"^[A-Za-z][\w.+/-]*\s+[-+(]?\d"
"""A table row: a name (a model, a preset), then a number."""


class ResultsPageError(RlclockError):
    """A registry entry that cannot be read, or a figure that is not in its output file."""


@dataclass(frozen=True)
class Value:
    """One figure as its file prints it, and as a number."""

    text: str
    number: float


@dataclass
class Figures:
    """The values one claim's readers found, by field name (a field may hold several: one per table row)."""

    values: dict[str, list[Value]] = field(default_factory=dict)

    def add(self, name: str, text: str, where: str) -> None:
        match = NUMBER.search(text)
        if match is None:
            raise ResultsPageError(
                f"{where}: field {name!r} read {text!r}, which holds no number.",
                "point the reader at a number (a regex group, a table column).",
            )
        number_text = match.group(0)
        number = float(number_text.replace(",", ""))
        if number == 0.0:
            number_text = number_text.lstrip("+-")  # "-0.00" is 0.00
        self.values.setdefault(name, []).append(Value(number_text, number))

    def get(self, name: str, where: str) -> list[Value]:
        if name not in self.values:
            raise ResultsPageError(
                f"{where}: no field {name!r} was read (fields: {sorted(self.values)}).",
                "name a regex group, a column or a json field so.",
            )
        return self.values[name]


# ---------------------------------------------------------------------------------------------------- reading


def scoped(text: str, how: Mapping[str, Any], where: str) -> str:
    """The part of ``text`` a reader looks at: from the ``occurrence``-th match of ``section`` (1: the first, -1:
    the last) to the first match of ``end`` after it (default: the end of the file)."""
    start = how.get("section")
    if start is None:
        return text
    matches = list(re.finditer(start, text, flags=re.M))
    occurrence = int(how.get("occurrence", 1))
    if not matches or abs(occurrence) > len(matches) or occurrence == 0:
        raise ResultsPageError(
            f"{where}: section {start!r} (occurrence {occurrence}) is not in the file ({len(matches)} found).",
            "rerun the benchmark, or point section at its heading.",
        )
    chosen = matches[occurrence - 1 if occurrence > 0 else occurrence]
    body = text[chosen.start() :]
    end = how.get("end")
    if end is not None:
        stop = re.search(end, body[len(chosen.group(0)) :], flags=re.M)
        if stop is not None:
            body = body[: len(chosen.group(0)) + stop.start()]
    return body


def read_regex(text: str, how: Mapping[str, Any], figures: Figures, where: str) -> None:
    """``regex``: its named groups are fields; ``all: true`` reads every match (e.g. one per table row),
    otherwise the first (``pick: -1``: the last)."""
    pattern = re.compile(how["regex"], flags=re.M)
    matches = list(pattern.finditer(text))
    if not matches:
        raise ResultsPageError(
            f"{where}: pattern {how['regex']!r} is not in the file.",
            "rerun the benchmark, or fix the pattern to what its output prints now.",
        )
    if not pattern.groupindex:
        raise ResultsPageError(f"{where}: pattern {how['regex']!r} names no group.", "name the figures: (?P<name>...).")
    chosen = (
        matches
        if how.get("all")
        else [matches[int(how.get("pick", 1)) - 1 if int(how.get("pick", 1)) > 0 else int(how["pick"])]]
    )
    for match in chosen:
        for name, value in match.groupdict().items():
            if value is not None:
                figures.add(name, value, where)


def read_columns(text: str, how: Mapping[str, Any], figures: Figures, where: str) -> None:
    """``columns: {name: index}``: whitespace-separated fields of each row of the first table in the section
    (rows: consecutive lines matching ``row``)."""
    row = re.compile(how.get("row", DEFAULT_ROW))
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if row.search(line)), None)
    if first is None:
        raise ResultsPageError(
            f"{where}: no table row ({row.pattern!r}) in the section.", "point section at the line above the table."
        )
    rows = []
    for line in lines[first:]:
        if not row.search(line):
            break
        rows.append(line.split())
    for name, index in how["columns"].items():
        for cells in rows:
            if not -len(cells) <= int(index) < len(cells):
                raise ResultsPageError(
                    f"{where}: column {index} ({name}) is past the end of row {' '.join(cells)!r}.",
                    "count the columns again (from 0, split on spaces).",
                )
            figures.add(name, cells[int(index)], where)


def _holds(node: Any, key: Any) -> bool:
    """Whether ``node[key]`` is there: a key of a mapping, or an index of a list."""
    if isinstance(node, Mapping):
        return key in node
    return isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node)


def read_json(path: Path, how: Mapping[str, Any], figures: Figures, where: str) -> None:
    """``json: {name: [key, …]}``: a path into a JSON file; a key ``{field: value}`` picks the list item whose
    field has that value."""
    data = json.loads(path.read_text())
    for name, keys in how["json"].items():
        node: Any = data
        for key in keys:
            if isinstance(key, Mapping):
                ((k, v),) = key.items()
                items = [item for item in node if isinstance(item, Mapping) and item.get(k) == v]
                if len(items) != 1:
                    raise ResultsPageError(
                        f"{where}: {len(items)} items with {k} = {v!r} on the path to {name}.",
                        "pick one item: name a field that is unique.",
                    )
                node = items[0]
            elif _holds(node, key):
                node = node[key]
            else:
                raise ResultsPageError(
                    f"{where}: key {key!r} on the path to {name} is not in the file.",
                    "rerun the benchmark, or fix the path.",
                )
        if isinstance(node, bool) or not isinstance(node, (int, float)):
            raise ResultsPageError(f"{where}: {name} is {node!r}, not a number.", "point the path at a number.")
        figures.add(name, repr(node), where)


def read_figures(claim: Mapping[str, Any], root: Path) -> Figures:
    """Every field the claim's readers find in its output file."""
    where = f"claim {claim['claim']!r} ({claim['output']})"
    path = root / claim["output"]
    if not path.is_file():
        raise ResultsPageError(
            f"{where}: the output file is missing.",
            f"run `{claim['command']}` and commit its output as {claim['output']}.",
        )
    readers = claim["read"] if isinstance(claim["read"], list) else [claim["read"]]
    figures = Figures()
    for how in readers:
        if "json" in how:
            read_json(path, how, figures, where)
            continue
        text = scoped(path.read_text(), how, where)
        if "regex" in how:
            read_regex(text, how, figures, where)
        elif "columns" in how:
            read_columns(text, how, figures, where)
        else:
            raise ResultsPageError(
                f"{where}: a reader needs regex, columns or json; got {sorted(how)}.",
                "see the comment at the top of docs/results.yaml.",
            )
    return figures


# ---------------------------------------------------------------------------------------------------- showing


def _number_text(values: Sequence[Value], spec: str) -> list[str]:
    """As printed (or formatted by ``spec``), with a true minus sign."""
    texts = [format(v.number, spec) if spec else v.text for v in values]
    return [re.sub(r"^-", "\u2212", text) for text in texts]


AGGREGATES: dict[str, Callable[[Sequence[Value], str], str]] = {
    "min": lambda vs, spec: _number_text([min(vs, key=lambda v: v.number)], spec)[0],
    "max": lambda vs, spec: _number_text([max(vs, key=lambda v: v.number)], spec)[0],
    "range": lambda vs, spec: "–".join(
        dict.fromkeys(_number_text([min(vs, key=lambda v: v.number), max(vs, key=lambda v: v.number)], spec))
    ),
    "list": lambda vs, spec: " / ".join(_number_text(vs, spec)),
    "mean": lambda vs, spec: format(sum(v.number for v in vs) / len(vs), spec or "g"),
    "n": lambda vs, spec: str(len(vs)),
}
PLACE = re.compile(r"\{(\w+)(?:\|(\w+))?(?::([^}]*))?\}")


def show(template: str, figures: Figures, where: str) -> str:
    """``{name}`` (one value, as printed), ``{name:.1f}`` (formatted), ``{name|min}``, ``|max``, ``|range``,
    ``|list``, ``|mean``, ``|n`` (over every value read)."""

    def one(match: re.Match[str]) -> str:
        name, aggregate, spec = match.group(1), match.group(2), match.group(3) or ""
        values = figures.get(name, where)
        if aggregate is None:
            if len(values) != 1:
                raise ResultsPageError(
                    f"{where}: {{{name}}} has {len(values)} values.",
                    f"show them with {{{name}|range}}, |list, |min or |max.",
                )
            return _number_text(values, spec)[0]
        if aggregate not in AGGREGATES:
            raise ResultsPageError(f"{where}: unknown aggregate |{aggregate}.", f"use one of {sorted(AGGREGATES)}.")
        return AGGREGATES[aggregate](values, spec)

    return PLACE.sub(one, template)


COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
    "==": operator.eq,
}
RULE = re.compile(r"^\s*(abs\s+)?(<=|>=|<|>|==)\s*(\S+)\s*$")


def meets(check: Mapping[str, str], figures: Figures, where: str) -> bool:
    """``check: {name: "<= 5"}``: every value of the field meets the rule (``abs <= 5`` on its magnitude; the
    right side may name another field of one value, ``>= n``)."""
    ok = True
    for name, rule in check.items():
        parsed = RULE.match(str(rule))
        if parsed is None:
            raise ResultsPageError(
                f"{where}: check {name}: {rule!r} is not a rule.", 'write e.g. "<= 5", "abs <= 5" or ">= n".'
            )
        magnitude, op, bound_text = parsed.groups()
        try:
            bound = float(bound_text)
        except ValueError:
            (bound_value,) = figures.get(bound_text, where)
            bound = bound_value.number
        for value in figures.get(name, where):
            number = abs(value.number) if magnitude else value.number
            ok &= not math.isnan(number) and COMPARE[op](number, bound)
    return ok


VERDICTS = {"met": True, "ok": True, "yes": True, "missed": False, "miss": False, "no": False}


def verdict(claim: Mapping[str, Any], figures: Figures, root: Path, where: str) -> str:
    """ "met", "missed", or "—" for a claim without a target to check."""
    if "check" in claim and "verdict" in claim:
        raise ResultsPageError(f"{where}: both check and verdict.", "keep one: the file's verdict or a check.")
    if "check" in claim:
        return "met" if meets(claim["check"], figures, where) else "**missed**"
    if "verdict" in claim:
        text = scoped((root / claim["output"]).read_text(), claim["verdict"], where)
        match = re.search(claim["verdict"]["regex"], text, flags=re.M)
        if match is None or match.lastindex is None:
            raise ResultsPageError(
                f"{where}: verdict pattern {claim['verdict']['regex']!r} is not in the file.",
                "rerun the benchmark, or fix the pattern (its first group: met / MISSED).",
            )
        said = match.group(1).lower()
        if said not in VERDICTS:
            raise ResultsPageError(
                f"{where}: the file's verdict {match.group(1)!r} is not one of {sorted(VERDICTS)}.",
                "capture the word that says met or missed.",
            )
        return "met" if VERDICTS[said] else "**missed**"
    return "—"


# ---------------------------------------------------------------------------------------------------- the page

REQUIRED = ("claim", "target", "kind", "machine", "command", "output", "read", "show")


def link(output: str, repo_url: str) -> str:
    """A link to the output file from docs/results.md: within the site for docs/, else on the repository."""
    name = output.rsplit("/", 1)[-1]
    if output.startswith("docs/"):
        return f"[{name}]({output.removeprefix('docs/')})"
    return f"[{name}]({repo_url.rstrip('/')}/blob/main/{output})"


def cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def row(claim: Mapping[str, Any], root: Path, repo_url: str) -> str:
    where = f"claim {claim.get('claim', '?')!r}"
    missing = [key for key in REQUIRED if key not in claim]
    if missing:
        raise ResultsPageError(f"{where}: the registry entry lacks {missing}.", f"give every entry {list(REQUIRED)}.")
    if claim["kind"] not in KINDS:
        raise ResultsPageError(
            f"{where}: kind {claim['kind']!r} is not one of {KINDS}.",
            "planned: judged on a model; delivered: a run with clocks set; measured: a reading.",
        )
    figures = read_figures(claim, root)
    where = f"{where} ({claim['output']})"
    cells = [
        claim["claim"],
        claim["target"],
        show(claim["show"], figures, where),
        verdict(claim, figures, root, where),
        claim["kind"],
        claim["machine"],
        f"`{cell(claim['command'])}` → {link(claim['output'], repo_url)}",
    ]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


HEADER = """\
# Results

<!-- Generated by `python benchmarks/results_page.py` from docs/results.yaml and the benchmarks' committed outputs.
     Do not edit by hand: change the registry (or rerun the benchmark) and render the page again. -->

Every figure on this page is read from the committed output of a script in `benchmarks/` (the last column names
the command and links its output); `python benchmarks/results_page.py` renders this page from those files, and
the test suite checks that the page and the files agree. The changes behind the figures are in the changelog.

- **kind** — *planned*: a schedule judged on a model (the simulator, or a planning model anchored on kernel times
  measured on a real GPU); *delivered*: what a run on a GPU did with its clocks set; *measured*: a reading of a
  machine (a GPU, this project's CPU machine), or the model's error against such readings.
- **machine** — "simulated X" is the `X` preset predicting from kernel shapes; "real X, dry run" is a GPU on
  which nothing was set (clocks and power limit as the driver had them).
- **met** — the target checked against the figure (or the benchmark's own verdict); "—" where a figure has no
  target of its own.
"""


def render(registry: Mapping[str, Any], root: Path = ROOT, repo_url: str | None = None) -> str:
    """The page for a registry (the parsed docs/results.yaml)."""
    if repo_url is None:
        repo_url = yaml.safe_load((root / "mkdocs.yml").read_text())["repo_url"]
    parts = [HEADER]
    for section in registry["sections"]:
        parts.append(f"\n## {section['title']}\n")
        if section.get("about"):
            parts.append(f"\n{' '.join(section['about'].split())}\n")
        parts.append(
            "\n| claim | target | figure | met | kind | machine | command → output |\n|---|---|---|---|---|---|---|\n"
        )
        parts.extend(row(claim, root, repo_url) + "\n" for claim in section["claims"])
    return "".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/results.md instead of writing it")
    args = parser.parse_args(argv)
    try:
        page = render(yaml.safe_load(REGISTRY.read_text()))
    except ResultsPageError as exc:
        print(f"results_page: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = PAGE.read_text() if PAGE.is_file() else ""
        if current == page:
            print("docs/results.md is up to date")
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(current.splitlines(True), page.splitlines(True), "docs/results.md", "rendered")
        )
        print("docs/results.md differs from the rendered page: run python benchmarks/results_page.py")
        return 1
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
