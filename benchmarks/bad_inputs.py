"""A battery of bad inputs over every rlclock command and file type, each run as a process with a timeout.

Cases are generated per class of bad input (the classes of issue 41 and more: broken files, values of the wrong
type, out of range or absurd, sizes past every limit, tampered checkpoints and run folders, outputs that
cannot be written, budgets, the environment), each applied to every command and file type that reads it. Each
outcome is one of:

=============  ==============================================================================================
clear          a non-zero exit with one ``rlclock: error:`` line that names what was wrong (and no traceback)
traceback      a Python traceback, or an exit other than the error's
silent         exit 0 on a bad input
hang           still running at the timeout
misleading     a clear line about something else (or a good input refused: the last class holds inputs a
               careless check would refuse, and must run)
=============  ==============================================================================================

    python benchmarks/bad_inputs.py                      # every case (about 300; ~15 minutes on 2 cores)
    python benchmarks/bad_inputs.py --only budget        # the classes whose name contains "budget"
    python benchmarks/bad_inputs.py --jobs 2 --list      # list the cases only

No GPU is used: commands that need one are given bad inputs that must be refused before they look for it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

TIMEOUT_S = 90.0


@dataclass
class Case:
    """One bad input: the command line (``{d}`` is the case's folder), the files it writes first, what the error
    line must mention, and whether it is a good input that must be accepted."""

    klass: str
    name: str
    argv: list[str]
    files: dict[str, Any] = field(default_factory=dict)
    expect: str = ""
    env: dict[str, str] = field(default_factory=dict)
    good: bool = False
    setup: Callable[[Path], None] | None = None
    timeout_s: float = TIMEOUT_S


SMALL = {
    "name": "small",
    "gpu": "rtx3080ti",
    "workload": {"generator": "llmc", "batch": 8, "seq": 512, "hidden": 1024, "heads": 16, "layers": 2},
    "actions": {"core_step_mhz": 210, "core_min_mhz": 630, "mem_mhz": [5001, 9501], "auto": True},
    "observation": {"lookahead": 4},
    "reward": {"budget": 0.01, "time_price": "optimum", "price_spread": 0.5},
}
TINY = {
    "timesteps": 512,
    "n_envs": 2,
    "ppo": {"n_steps": 256, "batch_size": 256, "n_epochs": 1},
    "eval": {"every_steps": 512},
    "policy": {"net_arch": [16, 16]},
    "imitation": {"iterations": 1, "epochs": 1, "min_updates": 5},
}
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)
FIXTURES = Path(tempfile.gettempdir()) / "rlclock-bad-inputs"


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def _set(data: dict, path: str, value: Any) -> dict:
    """A deep copy of ``data`` with ``a.b.c`` set (``DELETE`` removes it)."""
    out = copy.deepcopy(data)
    node = out
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if value is DELETE:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    return out


DELETE = object()


def rl(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlclock", *args]


# -- the classes -------------------------------------------------------------------------------------------------


def broken_files() -> list[Case]:
    """Files that are not what they claim, for every YAML reader (env spec, family, recipe, GPU spec, run config)."""
    bodies: dict[str, tuple[str | bytes, str]] = {
        "alias bomb": (ALIAS_BOMB, "alias"),
        "deep nesting": ("a: " + "[" * 500 + "]" * 500 + "\n", "nested"),
        "duplicate key": ("name: a\nname: b\n", "twice"),
        "binary": (b"\xff\xfe\x00\x81\x00binary", "UTF-8"),
        "empty": ("", "mapping|empty|NoneType|found"),
        "a list": ("- 1\n- 2\n", "mapping|list"),
        "a scalar": ("just text\n", "mapping|str"),
        "python tag": ("!!python/object/apply:os.system ['touch pwned']\n", "cannot read|python"),
        "unclosed": ("gpu: [unclosed\n", "cannot read"),
        "huge": ("a: " + "x" * (2 << 20) + "\n", "larger than|characters long"),
        "tabs": ("name:\n\t- x\n", "cannot read"),
    }
    out = []
    for what, (body, expect) in bodies.items():
        out.append(Case("broken file", f"env spec: {what}", rl("simulate", "{d}/bad.yaml"), {"bad.yaml": body}, expect))
        out.append(
            Case(
                "broken file",
                f"recipe: {what}",
                rl("train", "{d}/small.yaml", "--agent", "{d}/bad.yaml", "--runs-dir", "{d}/runs", "--no-progress"),
                {"small.yaml": _yaml(SMALL), "bad.yaml": body},
                expect,
            )
        )
        out.append(
            Case(
                "broken file",
                f"GPU spec: {what}",
                rl("simulate", "{d}/env.yaml"),
                {
                    "env.yaml": _yaml({**{k: v for k, v in SMALL.items() if k != "gpu"}, "gpu_file": "bad.yaml"}),
                    "bad.yaml": body,
                },
                expect,
            )
        )
    out += [
        Case(
            "broken file",
            "env spec: a folder",
            rl("simulate", "{d}/folder.yaml"),
            {"folder.yaml/x": ""},
            "not a regular file",
        ),
        Case("broken file", "env spec: a device", rl("simulate", "/dev/zero"), {}, "not a regular file"),
        Case("broken file", "env spec: missing", rl("simulate", "{d}/nowhere/spec.yaml"), {}, "not found|exist"),
        Case(
            "broken file",
            "family: alias bomb",
            rl("train", "{d}/fam.yaml", "--runs-dir", "{d}/runs"),
            {"fam.yaml": "family: [small.yaml]\n" + ALIAS_BOMB, "small.yaml": _yaml(SMALL)},
            "alias",
        ),
        Case(
            "broken file",
            "run config: alias bomb",
            rl("train", "--resume", "{d}/run", "--no-progress"),
            {"run/config.yaml": ALIAS_BOMB, "run/summary.json": json.dumps({"status": "interrupted"})},
            "alias",
        ),
    ]
    return out


ENV_FIELDS: list[tuple[str, Any, str]] = [
    ("gpu", 42, "gpu"),
    ("gpu", "rtx9999", "unknown GPU"),
    ("gpu", DELETE, "gpu"),
    ("workload", DELETE, "workload"),
    ("workload", "llmc", "workload"),
    ("workload.generator", "gpt5", "generator"),
    ("workload.layers", "many", "layers"),
    ("workload.layers", -3, "layers"),
    ("workload.layers", 2.5, "layers"),
    ("workload.heads", 0, "heads"),
    ("workload.hidden", 1000, "divisible"),
    ("workload.colour", "red", "colour"),
    ("switch_latency_s", -0.01, "switch_latency_s"),
    ("switch_latency_s", ".nan", "switch_latency_s"),
    ("switch_latency_s", "fast", "switch_latency_s"),
    ("switch_latency_s", 1e300, "switch_latency_s"),
    ("actions.core_step_mhz", 0, "core_step_mhz"),
    ("actions.core_step_mhz", "x", "core_step_mhz"),
    ("actions.mem_mhz", [1234], "memory|mem"),
    ("actions.mem_mhz", 9501, "mem_mhz"),
    ("actions.configs", ["fast@9"], "not understood|configuration"),
    ("actions.configs", ["99999@9501"], "not supported"),
    ("observation.lookahead", 10**6, "lookahead"),
    ("observation.lookahead", -1, "lookahead"),
    ("observation.look_ahead", 4, "unknown field"),
    ("reward.scale", 0, "scale"),
    ("reward.scale", ".inf", "scale"),
    ("reward.overrun_penalty", -1, "overrun"),
    ("reward.time_price", "cheap", "time_price"),
    ("reward.price_spread", 99, "price_spread"),
    ("backend.kind", "cloud", "backend"),
    ("backend.noise_std", -1, "noise_std"),
    ("backend.noise_std", 1e9, "noise_std"),
    ("name", ["a"], "name"),
    ("max_episode_steps", 10, "unknown field"),
]


def env_values() -> list[Case]:
    """Every env spec field with a value of the wrong type, out of range, NaN, infinite or absurd."""
    out = []
    for path, value, expect in ENV_FIELDS:
        text = _yaml(_set(SMALL, path, value))
        if isinstance(value, str) and value.startswith("."):  # YAML's own NaN and infinity
            text = text.replace(f"'{value}'", value)
        out.append(
            Case(
                "env spec value",
                f"{path} = {value if value is not DELETE else '(missing)'}",
                rl("simulate", "{d}/bad.yaml"),
                {"bad.yaml": text},
                expect,
            )
        )
    return out


def sizes() -> list[Case]:
    """Steps, dimensions, families and schedules past every limit (each must be refused before it is built)."""
    big = [
        ("workload.layers", 10**6),
        ("workload.layers", 10**12),
        ("workload.hidden", 10**9),
        ("workload.batch", 10**9),
        ("workload.seq", 10**9),
        ("workload.vocab_padded", 10**12),
    ]
    out = [
        Case(
            "size",
            f"llmc {p.split('.')[-1]} = {v:g}",
            rl("simulate", "{d}/big.yaml"),
            {"big.yaml": _yaml(_set(SMALL, p, v))},
            "more than rlclock|at most",
        )
        for p, v in big
    ]
    tr = {**SMALL, "workload": {"generator": "transformer", "hidden": 1024, "heads": 16, "layers": 2}}
    for p, v in [
        ("workload.layers", 10**7),
        ("workload.ffn", 10**10),
        ("workload.vocab", 10**12),
        ("workload.kv_heads", 10**8),
    ]:
        out.append(
            Case(
                "size",
                f"transformer {p.split('.')[-1]} = {v:g}",
                rl("simulate", "{d}/big.yaml"),
                {"big.yaml": _yaml(_set(tr, p, v))},
                "more than rlclock|at most|kv_heads",
            )
        )
    out += [
        Case(
            "size",
            "family of 10^6 random specs",
            rl("train", "{d}/fam.yaml", "--runs-dir", "{d}/runs"),
            {"fam.yaml": _yaml({"family": {"random": 10**6, "base": "gpt3xl-rtx3080ti"}})},
            "random",
        ),
        Case(
            "size",
            "family of 2000 members",
            rl("train", "{d}/fam.yaml", "--runs-dir", "{d}/runs"),
            {"fam.yaml": _yaml({"family": ["gpt3xl-rtx3080ti"] * 2000})},
            "family of 2000",
        ),
        Case(
            "size",
            "family of 40 latency scales",
            rl("train", "{d}/fam.yaml", "--runs-dir", "{d}/runs"),
            {
                "fam.yaml": _yaml(
                    {"family": {"corpus": "corpus-h200", "latency_scales": [1 + k / 10 for k in range(40)]}}
                )
            },
            "latency_scales",
        ),
    ]
    return out


def _kernel(**kw: Any) -> dict[str, Any]:
    return {
        "name": "k",
        "op": "op",
        "category": "gemm",
        "phase": "forward",
        "flops": 1e9,
        "dram_read_bytes": 1e6,
        "dram_write_bytes": 1e6,
        **kw,
    }


def _trace(kernels: list[Any], **kw: Any) -> dict[str, Any]:
    return {"format": "rlclock.trace", "version": 1, "name": "t", "meta": {}, "kernels": kernels, **kw}


def traces() -> list[Case]:
    """Trace files (read through an env spec's ``workload: {trace: FILE}``) broken every way."""
    good = json.dumps(_trace([_kernel(), _kernel(name="k2")]))
    bodies: dict[str, tuple[str | bytes, str]] = {
        "truncated": (good[: len(good) // 2], "not a readable"),
        "duplicate key in a kernel": (good.replace('"op": "op"', '"op": "op", "op": "x"', 1), "twice"),
        "NaN flops": (json.dumps(_trace([_kernel(flops=float("nan"))])), "NaN"),
        "negative bytes": (json.dumps(_trace([_kernel(dram_read_bytes=-1.0)])), "dram_read_bytes"),
        "text flops": (json.dumps(_trace([_kernel(flops="many")])), "flops"),
        "unknown category": (json.dumps(_trace([_kernel(category="magic")])), "category"),
        "unknown field": (json.dumps(_trace([_kernel(colour="red")])), "colour"),
        "no kernels": (json.dumps(_trace([])), "non-empty"),
        "a kernel is a list": (json.dumps(_trace([[1, 2]])), "object"),
        "wrong format": (json.dumps(_trace([_kernel()], format="other")), "format"),
        "version 9": (json.dumps(_trace([_kernel()], version=9)), "version 9"),
        "measured 10^6 s at 0 J": (
            json.dumps(_trace([_kernel(measured=[{"gpu": "x", "time_s": 1e6, "energy_j": 0.0}])])),
            "time_s",
        ),
        "measured 1 ms at 0 J": (
            json.dumps(_trace([_kernel(measured=[{"gpu": "x", "time_s": 1e-3, "energy_j": 0.0}])])),
            "W",
        ),
        "measured text time": (json.dumps(_trace([_kernel(measured=[{"gpu": "x", "time_s": "1ms"}])])), "time_s"),
        "measured clock text": (
            json.dumps(_trace([_kernel(measured=[{"gpu": "x", "time_s": 1e-3, "core_mhz": "max"}])])),
            "core_mhz",
        ),
        "not JSON": ("<html>", "not a readable"),
        "extra data": (good + "{}", "extra data"),
        "deep meta": (
            json.dumps(_trace([_kernel()], meta={})).replace('"meta": {}', '"meta": ' + "[" * 5000 + "]" * 5000),
            "deep|nested|meta",
        ),
        "binary": (b"\x00\x01\x02\xff", "not a readable"),
    }
    out = []
    for what, (body, expect) in bodies.items():
        out.append(
            Case(
                "trace",
                what,
                rl("simulate", "{d}/env.yaml"),
                {"env.yaml": _yaml(_set(SMALL, "workload", {"trace": "t.json"})), "t.json": body},
                expect,
            )
        )
    out.append(
        Case(
            "trace",
            "gzip truncated",
            rl("simulate", "{d}/env.yaml"),
            {
                "env.yaml": _yaml(_set(SMALL, "workload", {"trace": "t.json.gz"})),
                "t.json.gz": gzip.compress(good.encode())[:40],
            },
            "not a readable",
        )
    )
    out.append(
        Case(
            "trace",
            "a folder",
            rl("simulate", "{d}/env.yaml"),
            {"env.yaml": _yaml(_set(SMALL, "workload", {"trace": "t.json"})), "t.json/x": ""},
            "not a regular file",
        )
    )
    return out


def _row(**kw: Any) -> dict[str, Any]:
    return {
        "kernel": 0,
        "op": "op",
        "name": "k",
        "config": "auto",
        "time_s": 1e-3,
        "energy_j": 0.3,
        "power_w": 300.0,
        "sm_clock_mhz": 1500.0,
        "mem_clock_mhz": 9501.0,
        **kw,
    }


def tables() -> list[Case]:
    """Measurement tables replayed by a recorded backend: text, NaN, clocks the GPU lacks, impossible powers."""

    def table(*rows: dict[str, Any], **kw: Any) -> str:
        return json.dumps(
            {
                "format": "rlclock.measurements",
                "version": 1,
                "meta": {"gpu": "NVIDIA GeForce RTX 3080 Ti"},
                "rows": list(rows),
                **kw,
            }
        )

    spec = {
        **SMALL,
        "workload": {"trace": "t.json"},
        "backend": {"kind": "recorded", "table": "m.json"},
        "actions": {"configs": ["auto"]},
    }
    trace = json.dumps(_trace([_kernel()]))
    bodies = {
        "text time": (table(_row(time_s="fast")), "time_s"),
        "text clock reading": (table(_row(sm_clock_mhz="high")), "sm_clock_mhz"),
        "10^6 s at 0 J": (table(_row(time_s=1e6, energy_j=0.0)), "time_s"),
        "0 J in 1 ms": (table(_row(energy_j=0.0)), "W"),
        "50 kW": (table(_row(energy_j=50.0)), "W"),
        "a clock the GPU lacks": (table(_row(), _row(config="1234@9501")), "cannot run"),
        "a memory clock the GPU lacks": (table(_row(), _row(config="auto@1234")), "cannot run"),
        "NaN energy": (table(_row()).replace('"energy_j": 0.3', '"energy_j": NaN'), "NaN"),
        "duplicate key": (table(_row()).replace('"op": "op"', '"op": "op", "op": "x"'), "twice"),
        "truncated": (table(_row())[:50], "cannot read"),
        "windows 0": (table(_row(windows=0)), "windows"),
        "wrong format": (table(_row(), format="csv"), "not an rlclock measurement table"),
    }
    return [
        Case(
            "measurements",
            what,
            rl("simulate", "{d}/env.yaml"),
            {"env.yaml": _yaml(spec), "t.json": trace, "m.json": body},
            expect,
        )
        for what, (body, expect) in bodies.items()
    ]


def schedules() -> list[Case]:
    """Schedule files (measure --schedule and apply --schedule)."""
    trace = json.dumps(_trace([_kernel(), _kernel()]))

    def sched(**kw: Any) -> str:
        return json.dumps(
            {"format": "rlclock.schedule", "version": 1, "name": "s", "configs": ["auto"], "runs": [[0, 2]], **kw}
        )

    bodies = {
        "a run of 10^12 kernels": (sched(runs=[[0, 10**12]]), "more than"),
        "a negative run": (sched(runs=[[0, -5]]), "whole number"),
        "an index past the configs": (sched(runs=[[3, 2]]), "refers to configuration 3"),
        "text run": (sched(runs=[["a", "b"]]), "malformed"),
        "runs not a list": (sched(runs="all"), "lists"),
        "duplicate key": (sched().replace('"name": "s"', '"name": "s", "name": "t"'), "twice"),
        "NaN power limit": (sched(power_limit_w=float("nan")), "NaN"),
        "bad clock": (sched(configs=["warp@9"]), "not understood"),
        "wrong length": (sched(runs=[[0, 5]]), "entries"),
    }
    out = [
        Case(
            "schedule",
            f"measure: {what}",
            rl("measure", "{d}/t.json", "--schedule", "{d}/s.json"),
            {"t.json": trace, "s.json": body},
            expect,
        )
        for what, (body, expect) in bodies.items()
    ]
    out += [
        Case(
            "schedule",
            f"apply: {what}",
            rl("apply", "--schedule", "{d}/s.json", "--", "true"),
            {"s.json": body},
            expect,
        )
        for what, (body, expect) in list(bodies.items())[:8]
    ]
    return out


def _checkpoint(d: Path) -> None:
    shutil.copytree(FIXTURES / "run" / "policy", d / "ck")


def _tamper_meta(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        _checkpoint(d)
        meta = json.loads((d / "ck" / "meta.json").read_text())
        change(meta)
        (d / "ck" / "meta.json").write_text(json.dumps(meta))

    return setup


def _tamper_text(old: str, new: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        _checkpoint(d)
        p = d / "ck" / "meta.json"
        p.write_text(p.read_text().replace(old, new, 1))

    return setup


def _truncate(path: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        _checkpoint(d)
        p = d / path
        p.write_bytes(p.read_bytes()[: max(1, p.stat().st_size // 3)])

    return setup


def checkpoints() -> list[Case]:
    """Checkpoint folders tampered with (read by evaluate and apply --checkpoint)."""
    changes: dict[str, tuple[Callable[[Path], None], str]] = {
        "latency as text": (_tamper_meta(lambda m: m.update(latency_s="fast")), "latency_s"),
        "negative latency": (_tamper_meta(lambda m: m.update(latency_s=-0.03)), "latency_s"),
        "NaN latency": (_tamper_text('"latency_s": ', '"latency_s": NaN, "x": '), "NaN"),
        "budget 500 %": (_tamper_meta(lambda m: m.update(budget=5.0)), "budget"),
        "lookahead as text": (_tamper_meta(lambda m: m.update(lookahead="eight")), "lookahead"),
        "lookahead 10^6": (_tamper_meta(lambda m: m.update(lookahead=10**6)), "lookahead"),
        "missing configs": (_tamper_meta(lambda m: m.pop("configs")), "configs"),
        "missing clock table": (_tamper_meta(lambda m: m.pop("clock_table")), "clock_table"),
        "configs a string": (_tamper_meta(lambda m: m.update(configs="auto")), "configs"),
        "a config the GPU lacks": (_tamper_meta(lambda m: m["configs"].append("1234@9501")), "1234@9501"),
        "unknown activation": (_tamper_meta(lambda m: m.update(activation="gelu")), "activation"),
        "price_rel negative": (_tamper_meta(lambda m: m.update(price_rel=-1)), "price_rel"),
        "obs_size 0": (_tamper_meta(lambda m: m.update(obs_size=0)), "obs_size"),
        "wrong format": (_tamper_meta(lambda m: m.update(format="torch")), "format"),
        "duplicate key": (_tamper_text('"gpu_key"', '"gpu_key": "x", "gpu_key"'), "twice"),
        "meta is a list": (lambda d: (_checkpoint(d), (d / "ck/meta.json").write_text("[1]")), "JSON object"),
        "meta truncated": (_truncate("ck/meta.json"), "cannot read"),
        "weights truncated": (_truncate("ck/policy.safetensors"), "weights"),
        "weights missing": (lambda d: (_checkpoint(d), (d / "ck/policy.safetensors").unlink()), "policy.safetensors"),
        "env_spec not a spec": (_tamper_meta(lambda m: m.update(env_spec={"gpu": 3})), "env_spec|gpu"),
        "training not a mapping": (_tamper_meta(lambda m: m.update(training="PPO")), "training"),
        "a pickle beside it": (
            lambda d: (
                _checkpoint(d),
                _pickle_bomb(d / "ck" / "sb3_model.zip", d / "ran"),
                (d / "ck" / "meta.json").write_text("{"),
            ),
            "cannot read",
        ),
    }
    return [
        Case(
            "checkpoint",
            what,
            rl("evaluate", "{d}/ck", "--out", "{d}/out", "--time-limit", "5"),
            {},
            expect,
            setup=setup,
        )
        for what, (setup, expect) in changes.items()
    ]


def _run(d: Path) -> None:
    shutil.copytree(FIXTURES / "run", d / "run")


def _state(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        _run(d)
        p = d / "run" / "state.json"
        data = json.loads(p.read_text())
        change(data)
        p.write_text(json.dumps(data))

    return setup


def _pickle_bomb(path: Path, marker: Path) -> None:
    import base64
    import pickle
    import zipfile

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    data = {
        "policy_class": {
            ":type:": "<class 'abc.ABCMeta'>",
            ":serialized:": base64.b64encode(pickle.dumps(Payload())).decode(),
        }
    }
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data", json.dumps(data))


def run_folders() -> list[Case]:
    """Run folders given to --resume: tampered states, truncated tensors, the wrong folder, old pickle-only ones."""

    def truncated(d: Path) -> None:
        _run(d)
        state = json.loads((d / "run" / "state.json").read_text())
        p = d / "run" / state["tensors"]
        p.write_bytes(p.read_bytes()[:100])

    def pickle_only(d: Path) -> None:
        _run(d)
        for f in list((d / "run").glob("state*")):
            f.unlink()
        _pickle_bomb(d / "run" / "sb3_model.zip", d / "ran")

    def truncated_zip(d: Path) -> None:
        _run(d)
        (d / "run" / "sb3_model.zip").write_bytes(b"PK\x03\x04broken")

    changes: dict[str, tuple[Callable[[Path], None], str]] = {
        "timesteps as text": (_state(lambda s: s.update(timesteps="many")), "timesteps"),
        "negative wall time": (_state(lambda s: s.update(wall_s=-1.0)), "wall_s"),
        "missing phase": (_state(lambda s: s.pop("phase")), "phase"),
        "tensor file elsewhere": (_state(lambda s: s.update(tensors="../../etc/passwd")), "tensor file"),
        "lr as text": (_state(lambda s: s["ppo_optimizer"][0].update(lr="fast")), "lr"),
        "truncated tensors": (truncated, "SHA-256"),
        "only a pickle (an older run)": (pickle_only, "no longer loads"),
        "not a folder": (lambda d: (d / "x").write_text(""), "not a folder"),
        "a checkpoint, not a run": (_checkpoint, "no config.yaml"),
        "config is a list": (lambda d: (_run(d), (d / "run/config.yaml").write_text("- 1\n")), "config"),
    }
    out = [
        Case(
            "run folder",
            what,
            rl(
                "train",
                "--resume",
                "{d}/" + ("x" if what == "not a folder" else "ck" if "checkpoint" in what else "run"),
                "--no-progress",
            ),
            {},
            expect,
            setup=setup,
        )
        for what, (setup, expect) in changes.items()
    ]
    out.append(
        Case(
            "run folder",
            "a truncated sb3_model.zip (never read)",
            rl("train", "--resume", "{d}/run", "--no-progress", "--timesteps", "1024"),
            {},
            good=True,
            setup=truncated_zip,
            timeout_s=300,
        )
    )
    return out


RECIPE_FIELDS: list[tuple[str, Any, str]] = [
    ("ppo.learning_rate", ".inf", "learning_rate"),
    ("ppo.learning_rate", 1e30, "learning_rate"),
    ("ppo.learning_rate", 0, "learning_rate"),
    ("ppo.learning_rate", ".nan", "learning_rate"),
    ("policy.net_arch", [100_000] * 4, "net_arch"),
    ("policy.net_arch", [4096] * 16, "net_arch"),
    ("policy.net_arch", [], "net_arch"),
    ("policy.net_arch", [-1], "net_arch"),
    ("n_envs", 10**6, "n_envs"),
    ("ppo.n_steps", 10**9, "n_steps"),
    ("ppo.n_steps", 65536, "rollout|n_steps"),
    ("timesteps", 10**15, "timesteps"),
    ("timesteps", -5, "timesteps"),
    ("timesteps", "lots", "timesteps"),
    ("ppo.batch_size", 7, "batch_size"),
    ("ppo.gamma", 1.5, "gamma"),
    ("ppo.clip_range", 1e9, "clip_range"),
    ("imitation.iterations", 10**9, "iterations"),
    ("imitation.learning_rate", 10.0, "learning_rate"),
    ("eval.every_steps", 0, "every_steps"),
    ("seed", -1, "seed"),
    ("seed", 2**40, "seed"),
    ("checkpoint_every", 0, "checkpoint_every"),
    ("algorithm", "dqn", "algorithm"),
    ("ppo.learning_rte", 1, "unknown"),
    ("policy.activation", "gelu", "activation"),
]


def recipes() -> list[Case]:
    """Agent recipes with values of the wrong type, out of range, or finite but absurd."""
    out = []
    for path, value, expect in RECIPE_FIELDS:
        text = _yaml(_set(TINY, path, value))
        if isinstance(value, str) and value.startswith("."):
            text = text.replace(f"'{value}'", value)
        out.append(
            Case(
                "recipe",
                f"{path} = {value}",
                rl("train", "{d}/small.yaml", "--agent", "{d}/agent.yaml", "--runs-dir", "{d}/runs", "--no-progress"),
                {"small.yaml": _yaml(SMALL), "agent.yaml": text},
                expect,
            )
        )
    return out


def budgets() -> list[Case]:
    """One budget rule everywhere: 500 %, negative, NaN, text — through every door a budget comes in."""
    out = []
    for value in ("5", "-0.01", "nan", "lots"):
        out += [
            Case(
                "budget",
                f"simulate --budget {value}",
                rl("simulate", "gpt3xl-rtx3080ti", "--budget", value),
                {},
                "budget|number",
            ),
            Case(
                "budget",
                f"baselines --budget {value}",
                rl("baselines", "gpt3xl-rtx3080ti", "--budget", value),
                {},
                "budget|number",
            ),
            Case(
                "budget",
                f"baselines --frontier {value}",
                rl("baselines", "gpt3xl-rtx3080ti", "--frontier", f"0,{value}"),
                {},
                "budget|fraction",
            ),
            Case(
                "budget",
                f"env spec reward.budget {value}",
                rl("simulate", "{d}/b.yaml"),
                {"b.yaml": _yaml(_set(SMALL, "reward.budget", float(value) if value != "lots" else value))},
                "budget",
            ),
            Case(
                "budget",
                f"apply --learn --budget {value}",
                rl("apply", "--checkpoint", "gpt3xl-h200", "--learn", "--budget", value, "--", "true"),
                {},
                "budget",
            ),
        ]
    out.append(
        Case(
            "budget",
            "checkpoint budget 5 (evaluate)",
            rl("evaluate", "{d}/ck", "--out", "{d}/o"),
            {},
            "budget",
            setup=_tamper_meta(lambda m: m.update(budget=5.0)),
        )
    )
    out.append(
        Case(
            "budget",
            "simulate --budget 0.5 (the top of the range)",
            rl("simulate", "{d}/small.yaml", "--budget", "0.5"),
            {"small.yaml": _yaml(SMALL)},
            good=True,
        )
    )
    return out


def outputs() -> list[Case]:
    """Outputs that cannot be written: a file where a folder belongs, a path under a file, a folder where a file
    belongs, a read-only folder — refused before the work (the cases give work that would take a while)."""

    def ro(d: Path) -> None:
        (d / "ro").mkdir()
        os.chmod(d / "ro", 0o555)

    unwritable = "/sys/rlclock-bad-inputs/sub" if os.geteuid() == 0 else "{d}/ro/sub"  # root writes anywhere else
    places = {
        "a file": ("{d}/file", "file"),
        "under a file": ("{d}/file/sub", "file"),
        "read-only": (unwritable, "write|create|denied|read-only|not permitted"),
    }
    out = []
    for what, (path, expect) in places.items():
        files = {"file": "", "small.yaml": _yaml(SMALL), "agent.yaml": _yaml(TINY)}
        setup = ro if what == "read-only" else None
        out += [
            Case(
                "output",
                f"baselines --out {what}",
                rl("baselines", "gpt3xl-rtx3080ti", "--out", path),
                files,
                expect,
                setup=setup,
            ),
            Case(
                "output",
                f"evaluate --out {what}",
                rl("evaluate", "gpt3xl-rtx3080ti", "--out", path),
                files,
                expect,
                setup=setup,
            ),
            Case(
                "output",
                f"train --save-checkpoint {what}",
                rl(
                    "train",
                    "{d}/small.yaml",
                    "--agent",
                    "{d}/agent.yaml",
                    "--runs-dir",
                    "{d}/runs",
                    "--save-checkpoint",
                    path,
                ),
                files,
                expect,
                setup=setup,
            ),
            Case(
                "output",
                f"train --runs-dir {what}",
                rl("train", "{d}/small.yaml", "--agent", "{d}/agent.yaml", "--runs-dir", path),
                files,
                expect,
                setup=setup,
            ),
            Case(
                "output",
                f"measure --out {what}",
                rl("measure", "{d}/t.json", "--out", path + "/m.json"),
                {**files, "t.json": json.dumps(_trace([_kernel()]))},
                expect,
                setup=setup,
            ),
            Case(
                "output", f"profile --out {what}", rl("profile", "--out", path + "/t.json"), files, expect, setup=setup
            ),
            Case(
                "output",
                f"doctor --spec-out {what}",
                rl("doctor", "--spec-out", path + "/g.yaml"),
                files,
                expect,
                setup=setup,
            ),
            Case(
                "output",
                f"calibrate --table-out {what}",
                rl("calibrate", "--simulated", "1", "--table-out", path + "/s.csv"),
                files,
                expect,
                setup=setup,
            ),
            Case(
                "output",
                f"calibrate --out {what}",
                rl("calibrate", "--simulated", "1", "--out", path + "/g.yaml"),
                files,
                expect,
                setup=setup,
            ),
            Case(
                "output",
                f"apply --report {what}",
                rl(
                    "apply",
                    "--checkpoint",
                    "gpt3xl-h200",
                    "--report",
                    path + "/r.json",
                    "--",
                    sys.executable,
                    "-c",
                    "pass",
                ),
                files,
                expect,
                setup=setup,
            ),
        ]
    out.append(
        Case(
            "output",
            "baselines --out a folder that is a file of the same name",
            rl("baselines", "gpt3xl-rtx3080ti", "--out", "{d}"),
            {"gpt3xl-rtx3080ti": ""},
            "file",
        )
    )
    return out


def command_lines() -> list[Case]:
    """Numbers and names on the command line: NaN, infinity, negative, huge, text."""
    cases = [
        (["baselines", "gpt3xl-rtx3080ti", "--latency", "nan"], "finite"),
        (["baselines", "gpt3xl-rtx3080ti", "--latency", "-1"], "latency"),
        (["baselines", "gpt3xl-rtx3080ti", "--latency", "1e9"], "latency"),
        (["baselines", "gpt3xl-rtx3080ti", "--time-limit", "0"], "time-limit"),
        (["baselines", "gpt3xl-rtx3080ti", "--time-limit", "inf"], "time-limit|finite"),
        (["train", "gpt3xl-rtx3080ti", "--timesteps", "-5"], "timesteps"),
        (["train", "gpt3xl-rtx3080ti", "--timesteps", "100000000000000000000"], "timesteps"),
        (["train", "gpt3xl-rtx3080ti", "--seed", "-1"], "seed"),
        (["train", "gpt3xl-rtx3080ti", "--seed", "x"], "seed"),
        (["simulate", "gpt3xl-rtx3080ti", "--clocks", "9999@9501"], "not supported"),
        (["simulate", "gpt3xl-rtx3080ti", "--clocks", "fast"], "not understood"),
        (["simulate", "no-such-spec"], "not found"),
        (["evaluate", "no-such-checkpoint"], "not found"),
        (["doctor", "--period", "-1"], "period"),
        (["doctor", "--device", "-3", "--spec-out", "{d}/g.yaml"], "device"),
        (["measure", "{d}/t.json", "--window", "-1"], "window"),
        (["measure", "{d}/t.json", "--kernels", "a,b"], "kernels|entry"),
        (["measure", "{d}/t.json", "--kernels", "7"], "entries|entry"),
        (["measure", "{d}/t.json", "--repeats", "0"], "repeats"),
        (["profile", "--replays", "0"], "replays"),
        (["profile", "--hidden", "-5"], "hidden"),
        (["reset-clocks", "--device", "x"], "device"),
        (["calibrate", "--simulated", "1", "--noise", "9"], "noise"),
        (["frobnicate"], "invalid choice"),
    ]
    return [Case("command line", " ".join(a), rl(*a), {"t.json": json.dumps(_trace([_kernel()]))}, e) for a, e in cases]


def environment() -> list[Case]:
    """Environment variables the commands read."""
    return [
        Case(
            "environment",
            f"WANDB_MODE={mode!r} with --track",
            rl(
                "train",
                "{d}/small.yaml",
                "--agent",
                "{d}/agent.yaml",
                "--runs-dir",
                "{d}/runs",
                "--track",
                "--no-progress",
            ),
            {"small.yaml": _yaml(SMALL), "agent.yaml": _yaml(TINY)},
            "WANDB_MODE",
            env={"WANDB_MODE": mode},
        )
        for mode in ("garbage", "on", "0")
    ]


APPLY_SCRIPT = "import rlclock.deploy as d\nwith d.clocked() as c:\n    for _ in range(40):\n        c.step()\n"
GPU_TESTS = Path(__file__).resolve().parents[1] / "tests" / "gpu"
FAKE_GPU_ENV = {
    "RLCLOCK_NVML_MODULE": "fake_pynvml",
    "FAKE_NVML_STATE": "{d}/nvml.json",
    "PYTHONPATH": str(GPU_TESTS),
    "RLCLOCK_LOCK_DIR": "{d}/locks",
}
"""The environment of a case run on the tests' fake NVML: one H200 at its driver defaults, nothing set for real."""


def _fake_gpu(d: Path) -> None:
    sys.path.insert(0, str(GPU_TESTS))
    import fake_pynvml

    fake_pynvml.write_state(d / "nvml.json", fake_pynvml.default_state())


def deploy() -> list[Case]:
    """``rlclock apply``, without a GPU and on the fake H200 of the tests: refused before the command starts."""

    def sched(**kw: Any) -> str:
        return json.dumps(
            {"format": "rlclock.schedule", "version": 1, "name": "s", "configs": ["auto"], "runs": [[0, 2]], **kw}
        )

    anywhere = [
        (["--checkpoint", "gpt3xl-h200", "--lead", "0.000001"], {}, "issue lead"),
        (["--latency", "0.01", "--lead", "0.005"], {}, "issue lead"),
        (["--checkpoint", "gpt3xl-h200", "--latency", "-1"], {}, "latency"),
        (["--checkpoint", "gpt3xl-h200", "--timeline", "{d}/tl.json"], {"tl.json": "{"}, "timeline"),
        (["--checkpoint", "{d}/ck"], {"ck/meta.json": "[]", "ck/policy.safetensors": ""}, "JSON object"),
        (["--checkpoint", "gpt3xl-h200", "--warmup-steps", "-1"], {}, "warmup"),
        (["--checkpoint", "gpt3xl-h200", "--save", "{d}/file"], {"file": ""}, "file"),
        (["--report", "{d}"], {}, "folder"),
    ]
    on_gpu = [
        (["--schedule", "{d}/s.json"], {"s.json": sched(configs=["1234@5678"])}, "1234|clock|not supported"),
        (["--schedule", "{d}/s.json"], {"s.json": sched(configs=["auto", "1000@3201"])}, "1000|clock|not supported"),
        (["--lead", "0.001"], {}, "issue lead"),
        (["--device", "7"], {}, "device"),
        (["--checkpoint", "gpt3xl-rtx3080ti"], {}, "trained for"),
    ]
    cases = [
        Case(
            "apply (deploy)",
            " ".join(a),
            rl("apply", *a, "--", sys.executable, "{d}/train.py"),
            {**f, "train.py": APPLY_SCRIPT},
            e,
        )
        for a, f, e in anywhere
    ]
    cases += [
        Case(
            "apply (deploy)",
            "fake H200: " + " ".join(a),
            rl("apply", *a, "--", sys.executable, "{d}/train.py"),
            {**f, "train.py": APPLY_SCRIPT},
            e,
            env=FAKE_GPU_ENV,
            setup=_fake_gpu,
        )
        for a, f, e in on_gpu + anywhere
    ]
    cases.append(
        Case(
            "apply (deploy)",
            "fake H200: a schedule of clocks it has",
            rl("apply", "--schedule", "{d}/s.json", "--", sys.executable, "-c", "pass"),
            {"s.json": sched(configs=["auto", "1980@3201", "1005@3201"])},
            env=FAKE_GPU_ENV,
            setup=_fake_gpu,
            good=True,
        )
    )
    return cases


def _sweep(change: Callable[[list[dict[str, str]]], None]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        import csv

        with (FIXTURES / "sweep.csv").open() as f:
            rows = list(csv.DictReader(f))
        change(rows)
        with (d / "sweep.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)

    return setup


def calibration_tables() -> list[Case]:
    """``rlclock calibrate --table``: values no GPU produced, refused by the table's reader before any fit."""
    changes: dict[str, tuple[Callable[[list[dict[str, str]]], None], str]] = {
        "conflicting duplicate rows": (
            lambda r: r.append({**r[0], "time_s": str(3 * float(r[0]["time_s"]))}),
            "twice|duplicate|conflict",
        ),
        "time 10^300": (lambda r: r[0].update(time_s="1e300"), "time_s"),
        "energy as text": (lambda r: r[0].update(energy_j="lots"), "energy_j"),
        "negative flops": (lambda r: r[0].update(flops="-5"), "flops"),
        "a clock the GPU lacks": (lambda r: r[0].update(core_mhz="1234"), "1234|clock"),
        "0 J": (lambda r: r[0].update(energy_j="0"), "energy_j"),
    }
    return [
        Case(
            "calibration table",
            what,
            rl("calibrate", "--table", "{d}/sweep.csv", "--gpu", "rtx3080ti"),
            {},
            expect,
            setup=_sweep(change),
        )
        for what, (change, expect) in changes.items()
    ]


def good_inputs() -> list[Case]:
    """Inputs a careless check would refuse (refusing them is misleading)."""
    return [
        Case(
            "good input",
            "evaluate a run folder",
            rl("evaluate", "{d}/run", "--out", "{d}/o", "--time-limit", "5"),
            {},
            good=True,
            setup=_run,
            timeout_s=300,
        ),
        Case(
            "good input",
            "evaluate a run folder's policy/",
            rl("evaluate", "{d}/run/policy", "--out", "{d}/o", "--time-limit", "5"),
            {},
            good=True,
            setup=_run,
            timeout_s=300,
        ),
        Case(
            "good input",
            "a YAML anchor without an alias",
            rl("simulate", "{d}/a.yaml"),
            {"a.yaml": _yaml(SMALL).replace("gpu: rtx3080ti", "gpu: &g rtx3080ti")},
            good=True,
        ),
        Case(
            "good input",
            "a gzip trace",
            rl("simulate", "{d}/env.yaml"),
            {
                "env.yaml": _yaml(_set(SMALL, "workload", {"trace": "t.json.gz"})),
                "t.json.gz": gzip.compress(json.dumps(_trace([_kernel()])).encode()),
            },
            good=True,
        ),
        Case(
            "good input",
            "a 25 000-layer step (under the kernel limit)",
            rl("simulate", "{d}/big.yaml"),
            {"big.yaml": _yaml(_set(SMALL, "workload.layers", 25_000))},
            good=True,
            timeout_s=300,
        ),
    ]


CLASSES = [
    broken_files,
    env_values,
    sizes,
    traces,
    tables,
    schedules,
    checkpoints,
    run_folders,
    recipes,
    budgets,
    outputs,
    command_lines,
    environment,
    good_inputs,
    deploy,
    calibration_tables,
]


# -- running and judging ---------------------------------------------------------------------------------------


def prepare_fixtures() -> None:
    """A small trained run folder (with its checkpoint) and a plausible sweep table, made once."""
    if (
        (FIXTURES / "run" / "state.json").is_file()
        and (FIXTURES / "run" / "policy" / "meta.json").is_file()
        and (FIXTURES / "sweep.csv").is_file()
    ):
        return
    shutil.rmtree(FIXTURES, ignore_errors=True)
    FIXTURES.mkdir(parents=True)
    (FIXTURES / "small.yaml").write_text(_yaml(SMALL))
    (FIXTURES / "agent.yaml").write_text(_yaml(TINY))
    subprocess.run(
        rl(
            "train",
            str(FIXTURES / "small.yaml"),
            "--agent",
            str(FIXTURES / "agent.yaml"),
            "--runs-dir",
            str(FIXTURES / "runs"),
            "--no-progress",
        ),
        check=True,
        capture_output=True,
        timeout=900,
    )
    run = next((FIXTURES / "runs").glob("*"))
    shutil.copytree(run, FIXTURES / "run")
    subprocess.run(
        rl("calibrate", "--suite", "--gpu", "rtx3080ti", "--table-out", str(FIXTURES / "suite.csv")),
        check=True,
        capture_output=True,
        timeout=300,
    )
    text = (FIXTURES / "suite.csv").read_text().splitlines()
    head = text[0].split(",")
    rows = []
    for line in text[1:]:
        cells = dict(zip(head, line.split(",")))
        cells.update(time_s="0.001", energy_j="0.3")
        rows.append(",".join(cells[h] for h in head))
    (FIXTURES / "sweep.csv").write_text("\n".join([text[0], *rows]) + "\n")


def run_case(case: Case, root: Path) -> dict[str, Any]:
    """Run one case in a folder of its own; its outcome and error line."""
    d = Path(tempfile.mkdtemp(dir=root))
    for name, body in case.files.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("/x") and body == "":
            continue  # a folder where a file belongs
        p.write_bytes(body if isinstance(body, bytes) else body.encode())
    if case.setup is not None:
        case.setup(d)
    argv = [a.replace("{d}", str(d)) for a in case.argv]
    env = {
        **os.environ,
        "WANDB_MODE": "disabled",
        "PYTHONWARNINGS": "ignore",
        **{k: v.replace("{d}", str(d)) for k, v in case.env.items()},
    }
    start = time.perf_counter()
    try:
        p = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=case.timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"outcome": "hang", "line": f"still running after {case.timeout_s:g} s", "wall_s": case.timeout_s}
    finally:
        for sub in d.rglob("*"):
            if sub.is_dir():
                os.chmod(sub, 0o755)
    wall = time.perf_counter() - start
    err = p.stderr.strip()
    lines = [ln for ln in err.splitlines() if ln.startswith("rlclock: error:")]
    line = lines[-1] if lines else (err.splitlines()[-1] if err else "")
    if (d / "ran").exists():
        outcome = "traceback"
        line = "a pickle payload ran"
    elif "Traceback" in err or p.returncode not in (0, 2):
        outcome = "traceback"
    elif case.good:
        outcome = "clear" if p.returncode == 0 else "misleading"
    elif p.returncode == 0:
        outcome = "silent"
    elif len(lines) != 1:
        outcome = "traceback"
    elif case.expect and not re.search(case.expect, line, re.IGNORECASE):
        outcome = "misleading"
    else:
        outcome = "clear"
    shutil.rmtree(d, ignore_errors=True)
    return {"outcome": outcome, "line": line, "wall_s": wall, "fix": "Fix:" in line}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run the classes whose name contains this")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once")
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument("--verbose", action="store_true", help="print every case's line, not only the others")
    args = parser.parse_args(argv)
    cases = [c for make in CLASSES for c in make() if args.only in c.klass]
    if args.list:
        for c in cases:
            print(f"{c.klass:16s} {c.name}")
        print(f"{len(cases)} cases")
        return 0
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{len(cases)} cases, {args.jobs} at a time, timeout {TIMEOUT_S:g} s each (a few 300 s)"
    )
    prepare_fixtures()
    root = Path(tempfile.mkdtemp(prefix="rlclock-bad-"))
    results: list[tuple[Case, dict[str, Any]]] = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_case, c, root): c for c in cases}
        for fut in concurrent.futures.as_completed(futures):
            results.append((futures[fut], fut.result()))
    by_class: dict[str, Counter] = {}
    for case, r in sorted(results, key=lambda r: (r[0].klass, r[0].name)):
        by_class.setdefault(case.klass, Counter())[r["outcome"]] += 1
        if r["outcome"] != "clear" or args.verbose:
            print(f"[{r['outcome']:10s}] {case.klass}: {case.name}: {r['line'][:300]}")
    outcomes = ("clear", "traceback", "silent", "hang", "misleading")
    print()
    print(f"{'class':16s} " + " ".join(f"{o:>10s}" for o in outcomes) + f" {'with a fix':>10s}")
    total: Counter = Counter()
    fixes = Counter(case.klass for case, r in results if r.get("fix"))
    for klass, counts in by_class.items():
        total.update(counts)
        print(f"{klass:16s} " + " ".join(f"{counts[o]:10d}" for o in outcomes) + f" {fixes[klass]:10d}")
    print(f"{'all':16s} " + " ".join(f"{total[o]:10d}" for o in outcomes) + f" {sum(fixes.values()):10d}")
    # the deployment (rlclock apply) and the calibration tables (calibrate --table), apart
    elsewhere = [r for c, r in results if "apply" in c.argv or "--table" in c.argv]
    here = Counter(r["outcome"] for c, r in results if not ("apply" in c.argv or "--table" in c.argv))
    print(f"{'without apply and calibrate --table':36s} " + ", ".join(f"{here[o]} {o}" for o in outcomes))
    print(
        f"{'apply and calibrate --table':36s} "
        + ", ".join(f"{sum(r['outcome'] == o for r in elsewhere)} {o}" for o in outcomes)
    )
    shutil.rmtree(root, ignore_errors=True)
    return 0 if total["clear"] == sum(total.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
