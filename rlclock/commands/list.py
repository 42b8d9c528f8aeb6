"""``rlclock list``: the shipped env specs, agent recipes, policy checkpoints and GPU presets."""

from __future__ import annotations

import argparse
import json
from typing import Any

WHAT = ("envs", "agents", "checkpoints", "gpus")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "list",
        help="the shipped env specs, agent recipes, checkpoints and GPU presets",
        description="List what ships with rlclock, by name — the names every command takes where it asks for an ENV, "
        "a recipe (--agent), a CHECKPOINT or a GPU (--gpu), from any folder.",
        epilog="examples:\n  rlclock list                 everything\n  rlclock list checkpoints     the policies\n"
        "  rlclock list gpus --json     the GPU presets, as JSON",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "what", nargs="*", choices=[[], *WHAT], metavar="WHAT", help=f"what to list: {', '.join(WHAT)} (default: all)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run)


def rows(what: str) -> list[dict[str, Any]]:
    """One row per shipped thing of a kind (``envs``, ``agents``, ``checkpoints``, ``gpus``)."""
    from rlclock.resources import data_dir, shipped

    if what == "gpus":
        from rlclock.dvfs.spec import get_spec, preset_keys

        out = []
        for key in preset_keys():
            spec = get_spec(key)
            out.append(
                {
                    "name": key,
                    "gpu": spec.name,
                    "latency_ms": spec.switch_latency_s * 1e3,
                    "power_limit_w": spec.power_limit_w,
                    "memory_locks": spec.memory_locks,
                    "model": "generic (calibrate it)" if spec.generic else "fitted",
                }
            )
        return out
    if what == "checkpoints":
        out = []
        for name in shipped("checkpoints"):
            meta = json.loads((data_dir() / "checkpoints" / name / "meta.json").read_text())
            envs = (meta.get("training") or {}).get("envs") or []
            out.append(
                {
                    "name": name,
                    "gpu": meta.get("gpu_name"),
                    "latency_ms": float(meta.get("latency_s", 0)) * 1e3,
                    "budget": meta.get("budget"),
                    "trained_on": ", ".join(envs[:3]) + (f" (+{len(envs) - 3})" if len(envs) > 3 else ""),
                }
            )
        return out
    if what == "envs":
        from rlclock.config import load_env_specs

        out = []
        for name in shipped("envs"):
            specs = load_env_specs([name])
            first = specs[0]
            out.append(
                {
                    "name": name,
                    "specs": len(specs),
                    "gpu": first.gpu_key,
                    "latency_ms": first.switch_latency_s * 1e3 if first.switch_latency_s is not None else "GPU's",
                    "description": " ".join(str(first.description or "").split())[:80],
                }
            )
        return out
    from rlclock.config.recipe import load_agent_config

    out = []
    for name in shipped("agents"):
        agent = load_agent_config(name)
        text = (data_dir() / "agents" / f"{name}.yaml").read_text().splitlines()
        about = " ".join(line.lstrip("# ").strip() for line in text if line.startswith("#"))
        out.append({"name": name, "timesteps": agent.timesteps, "about": about[:90]})
    return out


def run(args: argparse.Namespace) -> int:
    kinds = list(args.what) or list(WHAT)
    tables = {kind: rows(kind) for kind in kinds}
    if args.json:
        print(json.dumps(tables, indent=1))
        return 0
    for kind, table in tables.items():
        print(f"{kind} ({len(table)})")
        if not table:
            continue
        keys = list(table[0])
        width = {k: max(len(k), *(len(_cell(r[k])) for r in table)) for k in keys}
        print("  " + "  ".join(k.ljust(width[k]) for k in keys).rstrip())
        for r in table:
            print("  " + "  ".join(_cell(r[k]).ljust(width[k]) for k in keys).rstrip())
        print()
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
