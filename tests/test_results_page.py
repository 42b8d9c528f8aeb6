"""docs/results.md is what benchmarks/results_page.py renders from docs/results.yaml and the committed outputs, and the
renderer reads figures as the registry says — or stops, naming the claim, the file and what was not found."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.results_page import PAGE, REGISTRY, ROOT, ResultsPageError, render

REPO_URL = "https://github.com/example/repo"
OUTPUT = """\
== policy: corpus-x (GPU) on each step
model        optimum  policy of opt
alpha          1.00%   0.95%    95%
beta           2.00%   1.70%    85%
of opt: the policy's saving over the optimum's
targets met on 1 of 2 models
step time     5.290 s  (-0.64 %, target within 5 %)
== policy: corpus-y (GPU) on each step
model        optimum  policy of opt
gamma          3.00%   3.00%   100%
"""


def test_committed_page_is_the_rendered_one():
    rendered = render(yaml.safe_load(REGISTRY.read_text()))
    assert PAGE.read_text() == rendered, (
        "docs/results.md differs from what docs/results.yaml and the committed outputs give: "
        "run python benchmarks/results_page.py and commit docs/results.md"
    )


def test_every_claim_names_a_committed_output_and_an_existing_script():
    registry = yaml.safe_load(REGISTRY.read_text())
    claims = [claim for section in registry["sections"] for claim in section["claims"]]
    assert len(claims) >= 30
    for claim in claims:
        assert (ROOT / claim["output"]).is_file(), claim["output"]
        for script in re.findall(r"benchmarks/[\w_]+\.(?:py|sh)", claim["command"]):
            assert (ROOT / script).is_file(), (claim["claim"], script)


def _page(tmp_path: Path, claim: dict[str, Any], output: str = OUTPUT, name: str = "out.txt") -> str:
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(output)
    entry = {
        "claim": "a claim",
        "target": "≥ 90 %",
        "kind": "planned",
        "machine": "simulated X",
        "command": "python benchmarks/x.py",
        "output": name,
        **claim,
    }
    page = render({"sections": [{"title": "Section", "claims": [entry]}]}, root=tmp_path, repo_url=REPO_URL)
    (row,) = [line for line in page.splitlines() if line.startswith("| a claim")]
    return row


READS = [
    # (what, registry fields, figure shown, met)
    (
        "a regex, first match",
        {
            "read": {"regex": r"^step time .*\((?P<time>[-+][\d.]+) %"},
            "show": "{time} %",
            "check": {"time": "abs <= 5"},
        },
        "−0.64 %",
        "met",
    ),
    (
        "a table's column in a section, as a range",
        {
            "read": {"section": "^== policy: corpus-x", "columns": {"share": 3}},
            "show": "{share|range} %",
            "check": {"share": ">= 90"},
        },
        "85–95 %",
        "**missed**",
    ),
    (
        "the last section of that name",
        {
            "read": {"section": "^== policy: corpus-", "occurrence": -1, "columns": {"share": 3}},
            "show": "{share|list} %",
            "check": {"share": ">= 90"},
        },
        "100 %",
        "met",
    ),
    (
        "every match of a regex, its mean and count",
        {
            "read": {"regex": r"^\w+\s+[\d.]+%\s+[\d.]+%\s+(?P<share>\d+)%", "all": True},
            "show": "{share|mean:.1f} % over {share|n}",
        },
        "93.3 % over 3",
        "—",
    ),
    (
        "a field compared with another field",
        {
            "read": {"regex": r"targets met on (?P<met>\d+) of (?P<models>\d+)"},
            "show": "{met} of {models}",
            "check": {"met": ">= models"},
        },
        "1 of 2",
        "**missed**",
    ),
    (
        "the file's own verdict",
        {"read": {"regex": r"targets met on (?P<met>\d+)"}, "show": "{met}", "verdict": {"regex": r"targets (met) on"}},
        "1",
        "met",
    ),
    (
        "two readers, formatted",
        {
            "read": [
                {"section": "^== policy: corpus-y", "columns": {"optimum": 1}},
                {"regex": r"step time\s+(?P<t>[\d.]+) s"},
            ],
            "show": "{optimum:.1f} % in {t:.2f} s",
        },
        "3.0 % in 5.29 s",
        "—",
    ),
]


@pytest.mark.parametrize(("what", "claim", "figure", "met"), READS, ids=[r[0] for r in READS])
def test_figures_are_read_as_the_registry_says(tmp_path, what, claim, figure, met):
    cells = [c.strip() for c in _page(tmp_path, claim).strip("|").split(" | ")]
    assert cells[2] == figure and cells[3] == met, what


def test_a_json_path_and_a_link_outside_the_site(tmp_path):
    data = {"results": [{"case": "a", "pct": 0.31}, {"case": "b", "pct": -0.2}]}
    row = _page(
        tmp_path,
        {
            "read": {"json": {"a": ["results", {"case": "a"}, "pct"], "b": ["results", {"case": "b"}, "pct"]}},
            "show": "{a:+.2f} %; {b:+.2f} %",
            "check": {"a": "<= 1", "b": "<= 1"},
        },
        output=json.dumps(data),
        name="data/x.json",
    )
    assert "+0.31 %; −0.20 % | met" in row
    assert f"]({REPO_URL}/blob/main/data/x.json)" in row


def test_an_output_under_docs_is_linked_within_the_site(tmp_path):
    row = _page(tmp_path, {"read": {"regex": r"(?P<n>\d+) of"}, "show": "{n}"}, name="docs/results/out.txt")
    assert "→ [out.txt](results/out.txt) |" in row


BROKEN = [
    # (what is wrong, registry fields, words the error says)
    (
        "a pattern the file does not print",
        {"read": {"regex": r"speed (?P<v>\d+) steps/s"}, "show": "{v}"},
        "pattern 'speed",
    ),
    (
        "a section that is not there",
        {"read": {"section": "^== costs", "columns": {"v": 1}}, "show": "{v}"},
        "section '^== costs'",
    ),
    (
        "a column past the end of a row",
        {"read": {"section": "^== policy", "columns": {"v": 9}}, "show": "{v}"},
        "column 9",
    ),
    ("a group with no number", {"read": {"regex": r"^model\s+(?P<v>\w+)"}, "show": "{v}"}, "holds no number"),
    ("a pattern without named groups", {"read": {"regex": r"targets met"}, "show": "x"}, "names no group"),
    ("a field the readers did not read", {"read": {"regex": r"(?P<v>\d+) of"}, "show": "{w}"}, "no field 'w'"),
    ("several values shown as one", {"read": {"regex": r"(?P<v>\d+)%$", "all": True}, "show": "{v}"}, "has 3 values"),
    ("an unknown aggregate", {"read": {"regex": r"(?P<v>\d+) of"}, "show": "{v|median}"}, "unknown aggregate"),
    (
        "a rule that is not one",
        {"read": {"regex": r"(?P<v>\d+) of"}, "show": "{v}", "check": {"v": "about 5"}},
        "is not a rule",
    ),
    (
        "both a check and a verdict",
        {"read": {"regex": r"(?P<v>\d+) of"}, "show": "{v}", "check": {"v": "> 0"}, "verdict": {"regex": "(met)"}},
        "both check and verdict",
    ),
    (
        "a verdict word that says neither",
        {"read": {"regex": r"(?P<v>\d+) of"}, "show": "{v}", "verdict": {"regex": r"^(alpha)"}},
        "is not one of",
    ),
    (
        "a verdict the file does not print",
        {"read": {"regex": r"(?P<v>\d+) of"}, "show": "{v}", "verdict": {"regex": r"target: (\w+)"}},
        "verdict pattern",
    ),
    ("an unknown kind", {"kind": "guessed", "read": {"regex": r"(?P<v>\d+) of"}, "show": "{v}"}, "kind 'guessed'"),
    (
        "a missing output file",
        {"output": "gone.txt", "read": {"regex": r"(?P<v>\d+)"}, "show": "{v}"},
        "output file is missing",
    ),
    ("a reader of no known kind", {"read": {"grep": "x"}, "show": "x"}, "needs regex, columns or json"),
    (
        "a json key that is not there",
        {"output": "x.json", "read": {"json": {"v": ["nope"]}}, "show": "{v}"},
        "key 'nope'",
    ),
]


@pytest.mark.parametrize(("what", "claim", "says"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_figure_that_cannot_be_read_stops_the_page_with_its_claim_and_file(tmp_path, what, claim, says):
    (tmp_path / "x.json").write_text(json.dumps({"results": []}))
    with pytest.raises(ResultsPageError) as info:
        _page(tmp_path, claim)
    message = str(info.value)
    assert says in message, (what, message)
    assert "a claim" in message and "Fix:" in message, message


def test_a_registry_entry_without_a_required_field_is_refused(tmp_path):
    with pytest.raises(ResultsPageError, match=r"lacks \['read', 'show'\]"):
        render(
            {
                "sections": [
                    {
                        "title": "S",
                        "claims": [
                            {
                                "claim": "c",
                                "target": "t",
                                "kind": "planned",
                                "machine": "m",
                                "command": "c",
                                "output": "o",
                            }
                        ],
                    }
                ]
            },
            root=tmp_path,
            repo_url=REPO_URL,
        )


def test_check_mode_reports_a_stale_page(tmp_path, monkeypatch, capsys):
    import benchmarks.results_page as results_page

    stale = tmp_path / "results.md"
    stale.write_text(PAGE.read_text().replace("| met |", "| ? |", 1))
    monkeypatch.setattr(results_page, "PAGE", stale)
    assert results_page.main(["--check"]) == 1
    assert "run python benchmarks/results_page.py" in capsys.readouterr().out
    stale.write_text(PAGE.read_text())
    assert results_page.main(["--check"]) == 0


def test_commands_in_the_registry_are_shell_words():
    for section in yaml.safe_load(REGISTRY.read_text())["sections"]:
        for claim in section["claims"]:
            shlex.split(claim["command"])  # a stray quote would make a command no one can paste
