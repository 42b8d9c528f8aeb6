"""benchmarks/delivered.py's GPU mode, as far as it runs without a GPU: the loop that keeps to the time budget and
writes as it goes, and ``--from``, which turns a run's folder into the committed results."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import delivered  # noqa: E402
import results_page  # noqa: E402


def _summary(name: str, saving: float = 0.012, slowdown: float = 0.009) -> dict[str, Any]:
    return {
        "model": name,
        "gpu": "NVIDIA H100 80GB HBM3",
        "policy": "corpus-h100",
        "planned_saving": 0.013,
        "planned_slowdown": 0.0098,
        "saving": saving,
        "slowdown": slowdown,
        "worst_slowdown": slowdown + 0.002,
        "delivered_steps": 16,
        "switches": 4,
        "skipped": 0,
        "missed": 0,
        "late_fraction": 0.25,
        "jitter_p95_ms": 1.5,
        "overhead": {"overhead": 0.004},
    }


def test_run_models_writes_after_every_model_and_reports_failures(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def measure(name: str, make: Any, folder: Path, left_s: float) -> dict[str, Any]:
        seen.append(json.loads((tmp_path / "summary.json").read_text()) if seen or name != "a" else {})
        assert folder == tmp_path / name and left_s > 0
        return make()

    def boom() -> dict[str, Any]:
        raise RuntimeError("no controller ran")

    entries = [("a", lambda: _summary("a")), ("b", boom), ("c", lambda: _summary("c"))]
    got = delivered.run_models(tmp_path, entries, measure, budget_s=60, model_s=1, header={"gpu": "x"})
    assert list(got) == ["a", "b", "c"]
    assert "a" in seen[1]["models"] and "b" not in seen[1]["models"]  # written before the next model started
    assert got["b"]["error"] == "RuntimeError: no controller ran"
    final = json.loads((tmp_path / "summary.json").read_text())
    assert final["gpu"] == "x" and list(final["models"]) == ["a", "b", "c"]
    for name in "abc":
        assert json.loads((tmp_path / name / "summary.json").read_text())["model"] == name


def test_run_models_keeps_to_the_budget(tmp_path: Path) -> None:
    def measure(name: str, make: Any, folder: Path, left_s: float) -> dict[str, Any]:
        if name == "slow":
            end = time.perf_counter() + 5
            while time.perf_counter() < end:  # stopped by the alarm: budget 0.3 s + grace 0.2 s
                time.sleep(0.01)
        return _summary(name)

    entries = [(n, None) for n in ("slow", "eager", "bert+default")]
    t0 = time.perf_counter()
    got = delivered.run_models(tmp_path, entries, measure, budget_s=0.3, model_s=0.1, grace_s=0.2)
    assert time.perf_counter() - t0 < 2
    assert got["slow"]["error"].startswith("BudgetSpent")
    assert "skipped" in got["eager"] and "skipped" in got["bert+default"]
    assert delivered.needed_s("bert+default", 45) == 90 and delivered.needed_s("bert", 45) == 45
    only = delivered.run_models(
        tmp_path / "o",
        [("bert", lambda: 0), ("gpt2", lambda: 0)],
        lambda n, m, f, s: _summary(n),
        budget_s=60,
        model_s=1,
        only="gpt",
    )
    assert list(only) == ["gpt2"]


def _registry() -> str:
    return (
        "sections:\n  - title: Delivered, not planned\n    claims:\n"
        "      - claim: Nothing yet\n        target: —\n        kind: planned\n        machine: none\n"
        "        command: none\n        output: docs/results/none.txt\n        read:\n"
        "          regex: 'figure (?P<x>\\d+)'\n        show: '{x}'\n"
    )


def test_from_turns_a_gpu_run_into_committed_results(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    models = {
        "bert-base": {**_summary("bert-base"), "optimum_saving": 0.014},
        "gpt2-medium": {**_summary("gpt2-medium", 0.011, 0.0135), "optimum_saving": 0.0125},
        "vit-base+default": {"model": "vit-base+default", "skipped": "30 s of the time budget left"},
    }
    (run / "summary.json").write_text(
        json.dumps(
            {
                "gpu": "NVIDIA H100 80GB HBM3",
                "policy": "corpus-h100",
                "elapsed_s": 431.0,
                "budget_s": 420.0,
                "models": models,
            }
        )
    )
    root = tmp_path / "repo"
    (root / "docs" / "results").mkdir(parents=True)
    (root / "docs" / "results" / "none.txt").write_text("figure 7\n")
    (root / "docs" / "results.yaml").write_text(_registry())
    written = delivered.from_gpu_run(run, root=root, render=False)
    text = (root / "docs" / "results" / "delivered_h100.txt").read_text()
    assert written[0] == root / "docs" / "results" / "delivered_h100.txt"
    assert "models finished 2 of 3; delivered slowdown <= budget + 0.2 pp on 1 of 2" in text
    assert "delivered saving >= 80 % of the optimum's on 2 of 2" in text
    assert "targets (every model finished): MISSED" in text and "vit-base+default" in text
    kept = json.loads((root / "rlclock" / "data" / "measurements" / "delivered-h100" / "summary.json").read_text())
    assert kept["models"]["bert-base"]["optimum_saving"] == 0.014
    registry = yaml.safe_load((root / "docs" / "results.yaml").read_text())
    claim = registry["sections"][0]["claims"][-1]
    assert claim["output"] == "docs/results/delivered_h100.txt" and claim["kind"] == "planned"
    page = results_page.render(registry, root=root, repo_url="https://example.org/rlclock")
    assert "planned 1.30 %, would deliver 1.15 %; slowdown target on 1 of 2, saving target on 2; worst +1.35 %" in page
    delivered.from_gpu_run(run, root=root, render=False)  # again: the claim is not added twice
    again = yaml.safe_load((root / "docs" / "results.yaml").read_text())
    assert len(again["sections"][0]["claims"]) == 2


@pytest.mark.parametrize(
    ("name", "slug"),
    [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb")],
)
def test_gpu_slug(name: str, slug: str) -> None:
    assert delivered.gpu_slug(name) == slug


def test_gpu_lines_of_finished_skipped_and_failed_models() -> None:
    table = delivered.gpu_table(
        {
            "a": _summary("a"),
            "b": {"model": "b", "error": "RuntimeError: x"},
            "c": {"model": "c", "skipped": "3 s of the time budget left"},
        }
    )
    lines = table.splitlines()
    assert lines[0].startswith("model") and "+0.40 %" in lines[1]
    assert lines[2].endswith("RuntimeError: x") and lines[3].endswith("3 s of the time budget left")


def test_replay_tables_per_mode_and_per_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    def row(corpus: str, mode: str, saving: float, slowdown: float) -> dict[str, Any]:
        return {
            "model": "m",
            "corpus": corpus,
            "jitter": "measured",
            "mode": mode,
            "plan": "p",
            "planned_saving": 0.012,
            "planned_slowdown": 0.0095,
            "saving": saving,
            "slowdown": slowdown,
            "worst_slowdown": slowdown,
            "switches": 3,
            "skipped": 0,
            "late": 0.2,
            "jitter_p95_ms": 2.0,
            "changed": "",
            "optimum_saving": 0.0125,
            "optimum_s": 1.0,
            "plan_s": 0.1,
            "replayed": 21,
            "planner_said": None,
        }

    rows = [
        row("corpus-h200", "settled", 0.011, 0.0105),
        row("corpus-h100", "settled", 0.009, 0.0125),
        row("corpus-h100", "requests", 0.012, 0.025),
    ]
    delivered.table(rows)
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("measured  requests models  1: slowdown target  0, saving target  1, both  0")
    assert out[2].startswith(
        "measured  settled  models  2: slowdown target  1, saving target  1, both  1; mean "
        "planned 1.20 % at +0.95 %, delivered 1.00 % at +1.15 % (optimum 1.25 %)"
    )
    assert [ln.split()[0] for ln in out[-3:]] == ["h100", "h100", "h200"] and "MISS" in delivered.line(rows[2])
    back = delivered.parse_line(delivered.line({**rows[2], "planner_said": [0.0125, 0.0098]}))
    assert back is not None and delivered.parse_line("# CPU replay") is None
    assert {k: back[k] for k in ("corpus", "model", "mode", "switches", "skipped")} == {
        "corpus": "corpus-h100",
        "model": "m",
        "mode": "requests",
        "switches": 3,
        "skipped": 0,
    }
    assert back["slowdown"] == pytest.approx(0.025) and back["optimum_saving"] == pytest.approx(0.0125)


def test_summary_and_located_figures_of_a_dry_run() -> None:
    """The GPU mode's reading of a finished deployment, on a dry run of a step of sleeps (no GPU): the same
    attributes a GPU run reads, and each step priced where its kernels ran."""
    import numpy as np

    from rlclock.deploy.api import clocked
    from tests.deploy.test_deploy_delivered import COSTS, SCHEDULE, TIMELINE

    clk = clocked(SCHEDULE, timeline=TIMELINE, latency_s=0.006, lead_s=0.006, worker="thread", verbose=False)
    clk.costs = COSTS
    with clk:
        for _ in range(6):
            with clk.step():
                time.sleep(0.04)
    s = delivered.summary_of(clk, "m", "NVIDIA H100 80GB HBM3", "corpus-h100")
    assert s["switches"] == 2 and s["skipped"] == 0 and s["delivered_steps"] >= 4
    assert s["planned_saving"] == pytest.approx(0.1) and s["planned_slowdown"] == pytest.approx(0.05)
    assert s["jitter_p95_ms"] is None and delivered.gpu_line(s).startswith("m   ")
    starts = [list(np.asarray(TIMELINE.start_s) * 1e6)] * 6
    loc = delivered.located_delivered(clk, COSTS, starts, TIMELINE)
    assert loc["steps"] >= 4 and -0.01 <= loc["saving"] <= 0.2 and -0.01 <= loc["slowdown"] <= 0.05 + 1e-9
    with pytest.raises(RuntimeError, match="no controller ran"):
        delivered.summary_of(type("Idle", (), {"report": None, "reason": "no GPU", "state": "idle"})(), "m", "g", "p")
