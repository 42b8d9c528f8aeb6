"""The house's layers: every module of rlclock imports only from its own layer or below, a few doors are kept
shut, and the import graph has no cycle. Every import counts — at module level, inside functions, and under
``TYPE_CHECKING``.

The layers, bottom to top (docs/architecture.md draws them):

=============  ==================================================================================
values         errors, schedule (ClockConfig, ClockSchedule), YAML reading, typed settings, shipped files
workload       kernel traces and generators, PyTorch profile mapping — no GPU code
gpu model      GPU specs and presets, the DVFS time/power model
hardware       NVML (the one door to pynvml), clock control and watchdog, CUDA graphs, measurement
backends       simulated / recorded / live backends over a trace, and the one switching rule
solve          exact optima, baselines, evaluation of a schedule, plots of results
config         env specs (and families) and agent recipes
calibration    fitting a GPU preset's parameters
observation    kernel features, the binned look-ahead and candidate slots, the observation layout
env            the Gymnasium environment
policy         the deployable policy: checkpoint, network, rollout, planner, search
agents         imitation, PPO (stable-baselines3), training, tracking (W&B)
deploy         clocked(), the controller and its worker, timelines, distributed runs
integrations   callbacks of the training frameworks (HF Trainer, Lightning) over clocked()
cli            the rlclock command
api            the package root: the public names, imported lazily
=============  ==================================================================================
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "rlclock"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "values",
        (
            "rlclock.version",
            "rlclock.lazy",
            "rlclock.errors",
            "rlclock.log",
            "rlclock.schedule",
            "rlclock.yamlio",
            "rlclock.validation",
            "rlclock.resources",
            "rlclock.paper",
            "rlclock.deprecation",
        ),
    ),
    ("workload", ("rlclock.workload",)),
    ("gpu model", ("rlclock.dvfs",)),
    ("hardware", ("rlclock.gpu",)),
    ("backends", ("rlclock.backends",)),
    ("solve", ("rlclock.solve", "rlclock.plots")),
    ("config", ("rlclock.config",)),
    ("calibration", ("rlclock.calibration",)),
    ("observation", ("rlclock.observation",)),
    ("env", ("rlclock.env",)),
    ("policy", ("rlclock.policy",)),
    ("agents", ("rlclock.agents",)),
    ("deploy", ("rlclock.deploy",)),
    ("integrations", ("rlclock.integrations",)),
    ("cli", ("rlclock.commands", "rlclock.cli", "rlclock.__main__")),
    ("api", ("rlclock",)),
)
"""Layer name → the modules (and packages, with everything under them) in it, bottom to top."""

FORBIDDEN: tuple[tuple[str, str, str], ...] = (
    ("rlclock.deploy", "rlclock.env", "deploy runs in the user's training script: no env"),
    ("rlclock.deploy", "rlclock.agents", "deploy never trains"),
    ("rlclock.deploy", "stable_baselines3", "deploy needs no RL library"),
    ("rlclock.integrations", "rlclock.env", "the callbacks run in the user's training: no env"),
    ("rlclock.integrations", "rlclock.agents", "the callbacks never train a policy"),
    ("rlclock.integrations", "stable_baselines3", "the callbacks need no RL library"),
    ("rlclock.policy", "torch", "the deployed policy is numpy only"),
    ("rlclock.policy", "stable_baselines3", "the deployed policy is numpy only"),
    ("rlclock.observation", "rlclock.backends", "the observation is built from tables, not from a backend"),
)
"""(importer, imported, why): doors kept shut beyond the layer order."""

ONLY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pynvml", ("rlclock.gpu.nvml",)),
    ("wandb", ("rlclock.agents.tracking",)),
    ("stable_baselines3", ("rlclock.agents",)),
    ("transformers", ("rlclock.integrations.hf",)),
    ("lightning", ("rlclock.integrations.lightning",)),
    ("pytorch_lightning", ("rlclock.integrations.lightning",)),
)
"""Third-party package → the only modules that may import it."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(module: str) -> int:
    """Index of the layer a module belongs to (the most specific prefix wins)."""
    best: tuple[int, int] | None = None
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            if _within(module, m) and (best is None or len(m) > best[1]):
                best = (i, len(m))
    if best is None:
        raise KeyError(module)
    return best[0]


def imports(module: str) -> Iterator[tuple[str, int]]:
    """``(imported name, line)`` for every import in a module: rlclock modules resolved to the module imported
    (``from rlclock.x import y`` is ``rlclock.x.y`` when that is a module), third-party ones to their top name."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _resolve(alias.name), node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in MODULES else _resolve(base)), node.lineno


def _resolve(name: str) -> str:
    if not _within(name, "rlclock"):
        return name.split(".")[0]
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


def graph() -> dict[str, set[str]]:
    """rlclock's import graph (rlclock modules only)."""
    return {m: {name for name, _ in imports(m) if name in MODULES and name != m} for m in MODULES}


def test_every_module_has_a_layer():
    assert [m for m in MODULES if _safe_layer(m) is None] == []


def _safe_layer(module: str) -> int | None:
    try:
        return layer_of(module)
    except KeyError:
        return None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    here = layer_of(module)
    upward = [
        f"{name} (line {line}, layer {LAYERS[layer_of(name)][0]})"
        for name, line in imports(module)
        if name in MODULES and layer_of(name) > here
    ]
    assert not upward, f"{module} (layer {LAYERS[here][0]}) imports from above: {upward}"


@pytest.mark.parametrize("importer, imported, why", FORBIDDEN)
def test_shut_doors(importer, imported, why):
    found = [
        f"{m}:{line} imports {name}"
        for m in MODULES
        if _within(m, importer)
        for name, line in imports(m)
        if _within(name, imported)
    ]
    assert not found, f"{why}: {found}"


@pytest.mark.parametrize("package, allowed", ONLY)
def test_third_party_doors(package, allowed):
    found = [
        f"{m}:{line}"
        for m in MODULES
        for name, line in imports(m)
        if name == package and not any(_within(m, a) for a in allowed)
    ]
    assert not found, f"only {list(allowed)} may import {package}: {found}"


def test_the_import_graph_has_no_cycle():
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_check_sees_what_it_guards(tmp_path, monkeypatch):
    """The checker finds an upward import, a function-level one and one under TYPE_CHECKING."""
    fake = tmp_path / "rlclock"
    (fake / "workload").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "errors.py").write_text("")
    (fake / "workload" / "__init__.py").write_text("")
    (fake / "workload" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlclock.env import X\n"
        "def f():\n    from rlclock.errors import E\n    import pynvml\n"
    )
    (fake / "env.py").write_text("from rlclock.workload import bad\n")
    monkeypatch.setitem(globals(), "ROOT", fake)
    monkeypatch.setitem(globals(), "MODULES", {module_name(p): p for p in sorted(fake.rglob("*.py"))})
    found = {name for name, _ in imports("rlclock.workload.bad")}
    assert found == {"typing", "rlclock.env", "rlclock.errors", "pynvml"}
    assert {name for name, _ in imports("rlclock.env")} == {"rlclock.workload.bad"}
    assert layer_of("rlclock.env") > layer_of("rlclock.workload.bad")
    assert graph()["rlclock.env"] == {"rlclock.workload.bad"}


@pytest.mark.parametrize(
    "package",
    [
        "rlclock",
        "rlclock.deploy",
        "rlclock.policy",
        "rlclock.env",
        "rlclock.config",
        "rlclock.backends",
        "rlclock.integrations",
    ],
)
def test_every_public_name_resolves(package):
    import importlib

    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert not missing, f"{package}.__all__ names what it cannot give: {missing}"


def test_the_documented_entry_points():
    import rlclock
    from rlclock.deploy import ClockPolicy, ClockSchedule, clocked

    assert ClockPolicy is rlclock.ClockPolicy and ClockSchedule is rlclock.ClockSchedule and callable(clocked)
    assert rlclock.KernelClockEnv.__module__ == "rlclock.env.kernel_clock"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_import_names_something_that_exists(module):
    """Imports inside functions too — the GPU paths CI cannot run still import what exists."""
    import importlib

    path = MODULES[module]
    missing = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlclock") and not node.level:
            target = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(target, alias.name) and f"{node.module}.{alias.name}" not in MODULES:
                    missing.append(f"line {node.lineno}: {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rlclock") and alias.name not in MODULES:
                    missing.append(f"line {node.lineno}: {alias.name}")
    assert not missing, missing
