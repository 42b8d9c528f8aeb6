"""Mutation score of the accounting core and the switching rule: the share of small code changes the tests catch.

    python benchmarks/mutation.py [--jobs N] [--only PATTERN] [--list [--diff]] [--min-score 0.95]
                                  [--runner fork|subprocess] [--timeout S] [--output docs/results/mutation.txt]

Every target file is parsed and each mutation point gets one mutant (mutmut's core operators): comparison swaps
(``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``is``/``is not``, ``in``/``not in``), arithmetic (``+``/``-``,
``*``/``/``, ``//`` to ``/``, ``%`` and ``**`` to ``*``, ``&``/``|`` on masks), the same in augmented
assignments, ``and``/``or``, dropping ``not``, ``~`` and unary minus, numbers (0 to 1, 1 to 0, other ints
n + 1, floats x + 1), ``True``/``False``, ``return x`` to ``return None`` (a lambda's body likewise) and
``break``/``continue``. Docstrings and other strings, f-strings, annotations, imports, decorators, ``__all__``,
``raise`` statements and ``if TYPE_CHECKING`` blocks are left alone.

A mutant's id survives line shifts: ``<file>::<qualname>::<node before> -> <node after>#<occurrence>``, the
occurrence counting the same (qualname, before, after) in the file from 0.

Each worker copies ``rlclock/`` once into a temporary folder; a mutant overwrites the one file it mutates there
(``ast.unparse`` of the mutated tree) and the tests run with ``PYTHONPATH=<copy>:<repo>`` from inside the copy,
with ``-o pythonpath=`` (the project's ``pythonpath = ["."]`` would put the repository, and its unmutated
package, first on ``sys.path``). ``--runner subprocess`` runs ``python -m pytest -x -q -p no:cacheprovider
<tests>`` per mutant; the default ``--runner fork`` runs the same pytest arguments in a forked child of a
per-worker server that has already imported the third-party modules the tests use (never ``rlclock``), which
is about five times faster. Before the mutants, the tests must pass on the unparsed unmutated targets and a
copy of each target that raises on import must be killed (the copy is what gets imported). A mutant is killed
when the tests fail, and counts as killed (reported as a timeout) when they run past ``--timeout``.

The score is ``killed / (mutants - equivalent)``, timeouts counted as killed; the equivalent mutants, which
cannot change any observable result, are listed with the reason in ``benchmarks/mutation_equivalent.yaml``.
Exit status 1 when the score is below ``--min-score``, 2 when the setup checks fail. Not part of CI's test run
(a few minutes on two cores).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import difflib
import fnmatch
import json
import os
import platform
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TARGETS = (
    "rlclock/backends/switching.py",
    "rlclock/backends/base.py",
    "rlclock/schedule.py",
    "rlclock/solve/evaluation.py",
)
TESTS = (
    "tests/backends/test_accounting_exact.py",
    "tests/backends/test_accounting_mutants.py",
    "tests/backends/test_backend.py",
    "tests/backends/test_switching_rule.py",
    "tests/env/test_env_exact.py",
)
EQUIVALENT = ROOT / "benchmarks" / "mutation_equivalent.yaml"
SENTINEL = "\nraise ImportError('mutation sentinel: this mutated copy is what the tests import')\n"

# -- mutation operators ---------------------------------------------------------------------------------------

CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
BIN_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Mult,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
}
UNARY_DROP = (ast.Not, ast.USub, ast.Invert)


@dataclass(frozen=True)
class Site:
    """A node of a file's tree that may be mutated, numbered in walk order."""

    index: int
    node: ast.AST
    parent: ast.AST
    field: str
    pos: int | None
    qualname: str


def _left_alone(node: ast.AST) -> bool:
    """Nodes whose whole subtree is never mutated: imports, raises, f-strings, ``__all__``."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.Raise, ast.JoinedStr)):
        return True
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _skipped_fields(node: ast.AST) -> set[str]:
    """Fields of a node never mutated: decorators, annotations, an ``if TYPE_CHECKING`` test and body."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {"decorator_list", "returns", "type_params", "type_comment"}
    if isinstance(node, ast.ClassDef):
        return {"decorator_list", "type_params"}
    if isinstance(node, ast.arg):
        return {"annotation", "type_comment"}
    if isinstance(node, ast.AnnAssign):
        return {"annotation", "target"}
    if _is_type_checking(node):
        return {"test", "body"}
    return set()


def sites(tree: ast.Module) -> list[Site]:
    """Every node outside the parts left alone, in a fixed depth-first order, with its enclosing qualname."""
    out: list[Site] = []

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = (*scope, node.name)
        skip = _skipped_fields(node)
        for name, value in ast.iter_fields(node):
            if name in skip:
                continue
            items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
            for pos, child in items:
                if isinstance(child, ast.AST) and not _left_alone(child):
                    out.append(Site(len(out), child, node, name, pos, ".".join(scope) or "<module>"))
                    visit(child, scope)

    visit(tree, ())
    return out


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


def mutations(node: ast.AST) -> list[int]:
    """The mutations of a node, as arguments to :func:`mutate` (an operator's position in a comparison, else 0)."""
    if isinstance(node, ast.Compare):
        return [i for i, op in enumerate(node.ops) if type(op) in CMP_SWAP]
    if isinstance(node, ast.BinOp):
        return [0] if type(node.op) in BIN_SWAP and not (_is_text(node.left) or _is_text(node.right)) else []
    if isinstance(node, ast.AugAssign):
        return [0] if type(node.op) in BIN_SWAP and not _is_text(node.value) else []
    if isinstance(node, ast.BoolOp):
        return [0]
    if isinstance(node, ast.UnaryOp):
        return [0] if isinstance(node.op, UNARY_DROP) else []
    if isinstance(node, ast.Constant):
        return [0] if isinstance(node.value, (bool, int, float)) else []
    if isinstance(node, ast.Return):
        return (
            [0]
            if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None)
            else []
        )
    if isinstance(node, ast.Lambda):
        return [] if isinstance(node.body, ast.Constant) and node.body.value is None else [0]
    if isinstance(node, (ast.Break, ast.Continue)):
        return [0]
    return []


def _number(value: bool | int | float) -> bool | int | float:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return {0: 1, 1: 0}.get(value, value + 1)
    return value + 1.0


def mutate(node: ast.AST, arg: int) -> ast.AST:
    """A mutated copy of ``node`` (the node itself is left as it is)."""
    new = copy.deepcopy(node)
    if isinstance(new, ast.Compare):
        new.ops[arg] = CMP_SWAP[type(new.ops[arg])]()
    elif isinstance(new, (ast.BinOp, ast.AugAssign)):
        new.op = BIN_SWAP[type(new.op)]()
    elif isinstance(new, ast.BoolOp):
        new.op = ast.Or() if isinstance(new.op, ast.And) else ast.And()
    elif isinstance(new, ast.UnaryOp):
        return new.operand
    elif isinstance(new, ast.Constant):
        new.value = _number(new.value)
    elif isinstance(new, ast.Return):
        new.value = ast.Constant(None)
    elif isinstance(new, ast.Lambda):
        new.body = ast.Constant(None)
    elif isinstance(new, ast.Break):
        return ast.Continue()
    elif isinstance(new, ast.Continue):
        return ast.Break()
    return new


@dataclass(frozen=True)
class Mutant:
    """One mutation of one target file."""

    file: str
    qualname: str
    before: str
    after: str
    occurrence: int
    line: int
    site: int
    arg: int

    @property
    def id(self) -> str:
        return f"{self.file}::{self.qualname}::{self.before} -> {self.after}#{self.occurrence}"


def generate(file: str, text: str) -> list[Mutant]:
    """All mutants of a file, in walk order."""
    seen: Counter[tuple[str, str, str]] = Counter()
    out: list[Mutant] = []
    for s in sites(ast.parse(text)):
        for arg in mutations(s.node):
            before, after = ast.unparse(s.node), ast.unparse(mutate(s.node, arg))
            key = (s.qualname, before, after)
            out.append(Mutant(file, s.qualname, before, after, seen[key], getattr(s.node, "lineno", 0), s.index, arg))
            seen[key] += 1
    return out


def mutant_source(text: str, m: Mutant) -> str:
    """The mutated file: ``ast.unparse`` of its tree with the one node replaced."""
    tree = ast.parse(text)
    s = sites(tree)[m.site]
    new = mutate(s.node, m.arg)
    if s.pos is None:
        setattr(s.parent, s.field, new)
    else:
        getattr(s.parent, s.field)[s.pos] = new
    return ast.unparse(tree)


# -- running the tests against a mutated copy -----------------------------------------------------------------


def pytest_args(tests: list[str]) -> list[str]:
    return ["-x", "-q", "-p", "no:cacheprovider", "-o", "pythonpath=", *(str(ROOT / t) for t in tests)]


def _child(args: list[str], log: str, modules_to: str | None) -> None:
    """In a forked child: run pytest quietly and exit with its status (never returns)."""
    rc = 3
    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        import pytest

        rc = int(pytest.main(args))
        if modules_to is not None:
            Path(modules_to).write_text(
                json.dumps([name for name, mod in list(sys.modules.items()) if mod is not None and _third_party(mod)])
            )
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(rc)


def _third_party(module: object) -> bool:
    """A module from outside the project: neither the package, its copy (the working folder) nor the tests."""
    name = getattr(module, "__name__", "")
    if name == "__main__" or name.split(".")[0] in ("rlclock", "tests", "conftest") or name.startswith("test_"):
        return False
    f = str(getattr(module, "__file__", None) or "")
    mine = (os.getcwd(), *(str(ROOT / d) for d in ("rlclock", "tests", "benchmarks")))
    return not f.startswith(tuple(d + os.sep for d in mine))


def _forked_run(args: list[str], timeout: float, log: str, modules_to: str | None = None) -> tuple[str, float]:
    """Run pytest in a forked child; ``("rc <status>" | "timeout", seconds)``."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(args, log, modules_to)
    with contextlib.suppress(OSError):  # the child got there first, or is gone already
        os.setpgid(pid, pid)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return f"rc {os.waitstatus_to_exitcode(status)}", time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.perf_counter() - start
        time.sleep(0.005)


def serve(tests: list[str]) -> int:
    """The fork runner's per-worker server (``--serve``), in the copy's folder: a baseline run that also names
    the third-party modules the tests import, those imported here once, then one forked run per stdin line."""
    args = pytest_args(tests)
    log = str(Path.cwd() / "pytest.log")
    modules = Path.cwd() / "modules.json"
    result, secs = _forked_run(args, 600.0, log, str(modules))
    names = json.loads(modules.read_text()) if modules.exists() else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            with contextlib.suppress(Exception):  # a module that only imports in its own context is not preloaded
                __import__(name)
    leaked = [
        n
        for n, mod in sys.modules.items()
        if mod is not None and not _third_party(mod) and getattr(mod, "__name__", "") != "__main__"
    ]
    if leaked:
        result = f"leak {leaked[0]}"
    print(f"ready {result.replace(' ', '=')} {secs:.3f}", flush=True)
    for line in sys.stdin:
        result, secs = _forked_run(args, float(line.split()[1]), log)
        print(f"done {result.replace(' ', '=')} {secs:.3f}", flush=True)
    return 0


class Worker:
    """A copy of the package and a way to run the tests against it."""

    def __init__(self, runner: str, tests: list[str], texts: dict[str, str]) -> None:
        self.runner, self.tests, self.texts = runner, tests, texts
        self.dir = Path(tempfile.mkdtemp(prefix="rlclock-mutation-"))
        shutil.copytree(ROOT / "rlclock", self.dir / "rlclock", ignore=shutil.ignore_patterns("__pycache__"))
        self.env = {**os.environ, "PYTHONPATH": f"{self.dir}{os.pathsep}{ROOT}", "PYTHONDONTWRITEBYTECODE": "1"}
        self.server: subprocess.Popen[str] | None = None

    def write(self, file: str, text: str) -> None:
        (self.dir / file).write_text(text)

    def start(self) -> float:
        """The baseline: the tests on the unparsed, unmutated targets. Returns its seconds; raises if it fails."""
        for f, text in self.texts.items():
            self.write(f, ast.unparse(ast.parse(text)))
        if self.runner == "fork":
            command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--tests", *self.tests]
            self.server = subprocess.Popen(
                command, cwd=self.dir, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
            )
            assert self.server.stdout is not None
            _, result, secs = self.server.stdout.readline().split()
        else:
            result, secs = self._subprocess(600.0)
        for f, text in self.texts.items():
            self.write(f, text)
        if result != "rc=0":
            raise RuntimeError(f"the tests do not pass on the unmutated targets ({result}); see {self.dir}/pytest.log")
        return float(secs)

    def _subprocess(self, timeout: float) -> tuple[str, float]:
        start = time.perf_counter()
        with (self.dir / "pytest.log").open("w") as log:
            p = subprocess.Popen(
                [sys.executable, "-m", "pytest", *pytest_args(self.tests)],
                cwd=self.dir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                rc = p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                return "timeout", time.perf_counter() - start
        return f"rc={rc}", time.perf_counter() - start

    def run(self, file: str, source: str, timeout: float) -> tuple[str, float]:
        """Test one mutated version of ``file``: ``("killed" | "survived" | "timeout", seconds)``."""
        self.write(file, source)
        try:
            if self.server is not None:
                assert self.server.stdin is not None and self.server.stdout is not None
                self.server.stdin.write(f"run {timeout}\n")
                self.server.stdin.flush()
                _, result, secs_text = self.server.stdout.readline().split()
                secs = float(secs_text)
            else:
                result, secs = self._subprocess(timeout)
        finally:
            self.write(file, self.texts[file])
        if result == "timeout":
            return "timeout", secs
        rc = int(result.removeprefix("rc="))
        if rc in (4, 5):  # usage error, no tests collected: a fault of this runner, not a kill
            raise RuntimeError(f"pytest exited with {rc} (see {self.dir}/pytest.log)")
        return ("survived" if rc == 0 else "killed"), secs

    def close(self) -> None:
        if self.server is not None:
            assert self.server.stdin is not None
            self.server.stdin.close()
            self.server.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    status: str
    seconds: float


def run_all(
    jobs: list[tuple[Mutant, str]], workers: list[Worker], timeout: float, progress: bool = True
) -> list[Outcome]:
    """Run ``(mutant, mutated source)`` pairs on the workers in parallel, with a progress line on stderr."""
    todo: queue.Queue[tuple[Mutant, str]] = queue.Queue()
    for job in jobs:
        todo.put(job)
    results: list[Outcome] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = time.perf_counter()
    tty = sys.stderr.isatty()
    every = max(1, len(jobs) // 20)

    def report(o: Outcome) -> None:
        results.append(o)
        if not progress:
            return
        n = len(results)
        c = Counter(r.status for r in results)
        el = time.perf_counter() - start
        line = (
            f"[{n:4d}/{len(jobs)}] killed {c['killed']}  timeout {c['timeout']}  survived {c['survived']}  "
            f"{el:5.0f} s, ~{el / n * (len(jobs) - n):4.0f} s left"
        )
        if o.status == "survived":
            print(
                ("\r" if tty else "") + f"survived: {o.mutant.id}  (line {o.mutant.line})" + " " * 20, file=sys.stderr
            )
        if tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif n % every == 0 or n == len(jobs):
            print(line, file=sys.stderr, flush=True)

    def work(w: Worker) -> None:
        while not errors:
            try:
                m, src = todo.get_nowait()
            except queue.Empty:
                return
            try:
                status, secs = w.run(m.file, src, timeout)
            except BaseException as exc:  # stop everything; re-raised in the main thread
                errors.append(exc)
                return
            with lock:
                report(Outcome(m, status, secs))

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if progress and tty:
        print(file=sys.stderr)
    if errors:
        raise errors[0]
    return results


# -- the report -----------------------------------------------------------------------------------------------


def load_equivalent(path: Path) -> dict[str, str]:
    """``{id: reason}`` from the equivalents file (empty if it is missing)."""
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise SystemExit(f"{path}: expected a mapping of mutant id to reason")
    return data


def report(
    outcomes: list[Outcome], files: list[str], equivalent: dict[str, str], stale: list[str], min_score: float
) -> tuple[str, float]:
    """The text report and the score."""
    eq = {o.mutant.id for o in outcomes if o.status == "survived" and o.mutant.id in equivalent}
    lines = [
        f"{'file':36s} {'mutants':>8s} {'killed':>7s} {'timeout':>8s} {'survived':>9s} {'equivalent':>11s} "
        f"{'score':>7s}"
    ]
    totals = Counter[str]()
    for f in [*files, "total"]:
        mine = [o for o in outcomes if f in (o.mutant.file, "total")]
        c = Counter(o.status for o in mine)
        n_eq = sum(o.mutant.id in eq for o in mine)
        n = len(mine)
        score = (c["killed"] + c["timeout"]) / (n - n_eq) if n > n_eq else 1.0
        if f != "total":
            totals.update(c)
        lines.append(
            f"{f:36s} {n:8d} {c['killed']:7d} {c['timeout']:8d} {c['survived'] - n_eq:9d} {n_eq:11d} "
            f"{100 * score:6.1f}%"
        )
    n_all, n_eq = len(outcomes), len(eq)
    dead = totals["killed"] + totals["timeout"]
    score = dead / (n_all - n_eq) if n_all > n_eq else 1.0
    verdict = "ok" if score >= min_score else "BELOW THE MINIMUM"
    lines += [
        "",
        f"score: killed (timeouts included) / (mutants - equivalent) = {dead} / ({n_all} - {n_eq}) = "
        f"{100 * score:.1f} %  (minimum {100 * min_score:.1f} %): {verdict}",
    ]
    alive = sorted(
        (o.mutant for o in outcomes if o.status == "survived" and o.mutant.id not in eq),
        key=lambda m: (m.file, m.line, m.id),
    )
    lines += ["", f"surviving mutants not listed as equivalent ({len(alive)}):"]
    lines += [f"  {m.id}  (line {m.line})" for m in alive] or ["  none"]
    slow = [o.mutant for o in outcomes if o.status == "timeout"]
    lines += ["", f"timeouts, counted as killed ({len(slow)}):", *(f"  {m.id}  (line {m.line})" for m in slow)]
    if not slow:
        lines.append("  none")
    wrong = sorted(o.mutant.id for o in outcomes if o.status != "survived" and o.mutant.id in equivalent)
    if wrong:
        lines += ["", f"listed as equivalent but killed, so not equivalent ({len(wrong)}):", *(f"  {i}" for i in wrong)]
    lines += ["", f"stale equivalents (listed, no longer generated) ({len(stale)}):", *(f"  {i}" for i in stale)]
    if not stale:
        lines.append("  none")
    lines += ["", f"equivalent mutants ({n_eq}), reasons in {EQUIVALENT.relative_to(ROOT)}:"]
    lines += [f"  {i}\n      {equivalent[i]}" for i in sorted(eq)] or ["  none"]
    return "\n".join(lines), score


def _duration(secs: float) -> str:
    return f"{int(secs // 60)} min {secs % 60:.0f} s" if secs >= 60 else f"{secs:.1f} s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", nargs="+", default=list(TARGETS), help="files to mutate (repository-relative)")
    p.add_argument("--tests", nargs="+", default=list(TESTS), help="test files run against every mutant")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel workers (default: all cores)")
    p.add_argument(
        "--only",
        metavar="PATTERN",
        action="append",
        help="only mutants whose id contains PATTERN or matches it as a glob (repeatable)",
    )
    p.add_argument("--list", action="store_true", help="list the mutants (line, id) without running them")
    p.add_argument("--diff", action="store_true", help="with --list: show each mutant's change as a diff")
    p.add_argument("--min-score", type=float, default=0.95, help="exit 1 below this score (default 0.95)")
    p.add_argument(
        "--runner",
        choices=("fork", "subprocess"),
        default="fork" if hasattr(os, "fork") else "subprocess",
        help="fork (default): pytest in a forked child of a preloaded server; subprocess: python -m pytest",
    )
    p.add_argument("--timeout", type=float, help="seconds per mutant (default: max(10, 5 x the baseline run))")
    p.add_argument("--equivalent", type=Path, default=EQUIVALENT, help="the {id: reason} file of equivalent mutants")
    p.add_argument("--output", type=Path, help="also write the report here, the command line on top")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        return serve(args.tests)

    texts = {f: (ROOT / f).read_text() for f in args.targets}
    generated = [m for f in args.targets for m in generate(f, texts[f])]
    equivalent = load_equivalent(args.equivalent)

    def chosen(mutant_id: str) -> bool:
        return not args.only or any(p in mutant_id or fnmatch.fnmatchcase(mutant_id, p) for p in args.only)

    mutants = [m for m in generated if chosen(m.id)]
    stale = sorted(set(equivalent) - {m.id for m in generated})
    stale = [i for i in stale if chosen(i)]
    per_file = Counter(m.file for m in mutants)

    if args.list:
        for m in mutants:
            mark = "  [equivalent]" if m.id in equivalent else ""
            print(f"{m.line:5d}  {m.id}{mark}")
            if args.diff:
                old = ast.unparse(ast.parse(texts[m.file])).splitlines()
                new = mutant_source(texts[m.file], m).splitlines()
                print("\n".join("         " + d for d in list(difflib.unified_diff(old, new, lineterm="", n=1))[2:]))
        print(f"\n{len(mutants)} mutants: " + ", ".join(f"{f} {per_file[f]}" for f in args.targets))
        return 0

    start = time.perf_counter()
    header = [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; runner {args.runner}, {args.jobs} jobs",
        f"targets: {' '.join(args.targets)}",
        f"tests:   {' '.join(args.tests)}",
    ]
    print("\n".join(header), flush=True)
    workers = [Worker(args.runner, args.tests, texts) for _ in range(max(1, min(args.jobs, len(mutants) or 1)))]
    try:
        threads_out: list[float | BaseException] = [0.0] * len(workers)

        def boot(i: int) -> None:
            try:
                threads_out[i] = workers[i].start()
            except BaseException as exc:
                threads_out[i] = exc

        boots = [threading.Thread(target=boot, args=(i,)) for i in range(len(workers))]
        for t in boots:
            t.start()
        for t in boots:
            t.join()
        for r in threads_out:
            if isinstance(r, BaseException):
                print(f"setup failed: {r}", file=sys.stderr)
                return 2
        baseline = max(float(r) for r in threads_out if not isinstance(r, BaseException))
        timeout = args.timeout or max(10.0, 5 * baseline)
        sentinels = [(Mutant(f, "<sentinel>", "", "", 0, 0, -1, 0), texts[f] + SENTINEL) for f in args.targets]
        missed = [o.mutant.file for o in run_all(sentinels, workers, timeout, progress=False) if o.status != "killed"]
        if missed:
            print(
                f"setup failed: a copy that raises on import was not killed for {missed}: the tests do not import "
                "the mutated copy",
                file=sys.stderr,
            )
            return 2
        header.append(
            f"baseline: the tests pass on the unparsed targets ({baseline:.1f} s); a copy of each target "
            f"that raises on import is killed; timeout {timeout:.0f} s per mutant"
        )
        print(header[-1], flush=True)
        outcomes = run_all([(m, mutant_source(texts[m.file], m)) for m in mutants], workers, timeout)
    finally:
        for w in workers:
            w.close()
    order = {m.id: i for i, m in enumerate(mutants)}
    outcomes.sort(key=lambda o: order[o.mutant.id])
    text, score = report(outcomes, args.targets, equivalent, stale, args.min_score)
    busy = sum(o.seconds for o in outcomes) / max(1, len(outcomes))
    wall = (
        f"{len(mutants)} mutants in {_duration(time.perf_counter() - start)} ({busy:.1f} s per mutant and worker)"
        + (f", only {', '.join(map(repr, args.only))}" if args.only else "")
    )
    print(wall + "\n\n" + text)
    if args.output:
        command = shlex.join(["python", "benchmarks/mutation.py", *(argv if argv is not None else sys.argv[1:])])
        args.output.write_text("\n".join([f"$ {command}", *header, wall, "", text]) + "\n")
    return 0 if score >= args.min_score else 1


if __name__ == "__main__":
    sys.exit(main())
