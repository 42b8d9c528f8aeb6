"""The repository keeps its promises: CI runs the README's test command; figures have benchmarks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = next(b for b in blocks if "tests/run" in b)
    assert test_cmd.strip() in ci


def test_the_test_command_runs_the_realtime_half_whatever_the_first_did():
    run = (ROOT / "tests" / "run").read_text()
    halves = [line for line in run.splitlines() if "-m pytest" in line]
    assert len(halves) == 2 and "not realtime" in halves[0] and "-m realtime" in halves[1]
    assert not any(line.rstrip().endswith("&&") for line in run.splitlines()), "a failed first half skips the second"
    assert run.rstrip().splitlines()[-1].count("-eq 0") == 2


def test_quick_start_is_two_commands():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)\n```", quick, flags=re.S)
    assert len(blocks) == 2 and all("\n" not in b.strip() for b in blocks)


def test_benchmarks_named_in_readme_exist():
    readme = (ROOT / "README.md").read_text()
    for name in set(re.findall(r"benchmarks/([\w_]+\.py)", readme)):
        assert (ROOT / "benchmarks" / name).is_file(), name


def test_pynvml_is_imported_only_under_rlclock_gpu():
    for path in (ROOT / "rlclock").rglob("*.py"):
        text = path.read_text()
        if re.search(r"^\s*(import pynvml|from pynvml)", text, flags=re.M):
            assert path.parent.name == "gpu" and path.name.startswith("nvml"), path


def test_every_package_says_what_it_is():
    import ast

    for init in (ROOT / "rlclock").rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "TODO" not in doc and len(doc) > 40, init


def test_renamed_names_still_work_with_a_warning():
    import warnings

    from rlclock.agents import vec_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert vec_env.KernelClockVecEnv is vec_env.KernelClockSB3VecEnv
    assert any(issubclass(w.category, DeprecationWarning) and "KernelClockSB3VecEnv" in str(w.message) for w in caught)
    with pytest.raises(AttributeError):
        vec_env.NoSuchName  # noqa: B018
