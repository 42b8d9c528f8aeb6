"""DeploySettings: the options of a deployment — the one definition behind ``clocked(**options)``, the
``rlclock apply`` flags and the environment variables that carry them from one to the other.

``rlclock apply [options] -- python train.py`` runs the script with these variables set; the user API
(:func:`rlclock.deploy.clocked`) reads them. Under ``rlclock apply`` its options override the arguments the
script passes to ``clocked`` (the command line is the user's choice for this run); outside it, the script's
arguments and the defaults apply. Each field's description is its ``--help`` line; its ``cli`` entry names
the flag where that differs from the field (``--latency`` for ``latency_s``), and says when the flag sets a
constant instead of taking a value (``--control-clocks`` sets ``control_clocks``, ``--quiet`` sets
``verbose: false``).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from rlclock.deprecation import renamed_keyword
from rlclock.errors import DeployError
from rlclock.resources import looks_like_path
from rlclock.validation import Float, Int, Settings, describe

ENV_PREFIX = "RLCLOCK_DEPLOY_"
ACTIVE_ENV = "RLCLOCK_DEPLOY"
"""Set to ``1`` by ``rlclock apply``: the settings in the environment are in force."""
DEPRECATED = {"control": "control_clocks", "lookahead_s": "lead_s"}
"""Options renamed in 0.2.0: old name → new name (the old one still works, with a ``DeprecationWarning``)."""
SOURCES = ("checkpoint", "schedule")
"""The fields that name where the schedule comes from (``rlclock apply`` takes at most one; with neither, the shipped
policy for the GPU found plans)."""


def _cli(
    flag: str | None = None,
    const: Any = None,
    metavar: str | None = None,
    path: bool = False,
    choices: tuple[str, ...] | None = None,
    help: str | None = None,
) -> dict[str, Any]:
    """A field's command-line form (``json_schema_extra["cli"]``; ``help`` replaces the description there)."""
    return {"cli": {"flag": flag, "const": const, "metavar": metavar, "path": path, "choices": choices, "help": help}}


Seconds = Annotated[Float, Field(ge=0.0)]


class DeploySettings(Settings):
    """How to deploy a clock schedule in a training loop (each field's description is its ``--help``)."""

    checkpoint: str | None = Field(
        None,
        description="policy checkpoint (a folder, or a shipped name such as "
        "gpt3xl-h200) whose ClockPolicy builds the schedule",
        json_schema_extra=_cli(metavar="DIR|NAME", path=True),
    )
    schedule: str | None = Field(
        None,
        description="schedule file (JSON, ClockSchedule.save) to apply instead",
        json_schema_extra=_cli(metavar="FILE", path=True),
    )
    timeline: str | None = Field(
        None,
        description="step timeline file (JSON, StepTimeline.save) to use instead of profiling the first steps",
        json_schema_extra=_cli(metavar="FILE", path=True),
    )
    control_clocks: bool = Field(
        False,
        description="set the clocks, and the power limit where the plan names one "
        "(needs root; restored on exit, signals and by a watchdog); default: a dry run, "
        "nothing set",
    )
    device: Annotated[Int, Field(ge=0)] | None = Field(
        None,
        description="NVML index of the GPU (default: the one behind the script's CUDA device, per rank)",
        json_schema_extra=_cli(metavar="INDEX"),
    )
    latency_s: Seconds | None = Field(
        None,
        description="switching latency in seconds (default: the GPU preset's, e.g. 0.006 for an H200)",
        json_schema_extra=_cli("--latency", metavar="SECONDS"),
    )
    lead_s: Seconds | None = Field(
        None,
        description="the issue lead: issue each switch this long before its kernels, "
        "seconds (>= latency; default latency + 0.5 ms; --lookahead before 0.2.0)",
        json_schema_extra=_cli("--lead", metavar="SECONDS"),
    )
    min_dwell_s: Seconds = Field(
        0.0,
        description="a switch must land at least this long before its segment ends, seconds",
        json_schema_extra=_cli("--min-dwell", metavar="SECONDS"),
    )
    warmup_steps: Annotated[Int, Field(ge=0)] = Field(
        3,
        description="steps run untouched before profiling (compilation, allocator, autotuning)",
        json_schema_extra=_cli(metavar="STEPS"),
    )
    profile_steps: Annotated[Int, Field(ge=1)] = Field(
        5, description="steps profiled for the kernel sequence and timeline", json_schema_extra=_cli(metavar="STEPS")
    )
    timing_steps: Annotated[Int, Field(ge=0)] = Field(
        8,
        description="steps after profiling run without the "
        "operator profiler: the first half locate the kernels, "
        "the rest time the step, and the timeline is fitted to "
        "them (0: plan on the operator profile)",
        json_schema_extra=_cli(metavar="STEPS"),
    )
    worker: Literal["process", "thread"] = Field(
        "process", description="where switches are issued from", json_schema_extra=_cli(choices=("process", "thread"))
    )
    read_back: bool = Field(
        True,
        description="read the clocks back after each switch",
        json_schema_extra=_cli(help="do not read the clocks back after each switch"),
    )
    anchor_every: Annotated[Int, Field(ge=1)] | None = Field(
        None,
        description="anchor every this many steps on "
        "the GPU (default: every step when the plan has "
        "switches, every 40 ms when it has none)",
        json_schema_extra=_cli(metavar="STEPS"),
    )
    follow_pace: bool = Field(
        False,
        description="stretch the profiled timeline to the period the running steps "
        "take (default: the timeline as profiled)",
    )
    time_all_steps: bool = Field(
        False,
        description="time every step on the GPU for the report (measures the "
        "switch-time error of sparse anchors; a mark per step)",
    )
    search: bool = Field(
        True,
        description="plan the checkpoint's schedule with the search over the policy's best "
        "choices (the best plan; about twice the planning time, once)",
        json_schema_extra=_cli(
            help="plan from the policy's first choices alone (the fast path: "
            "about half the planning time, a plan worth less)"
        ),
    )
    power_limit: bool = Field(
        True,
        description="let the checkpoint's plan be the driver's clocks under a whole-job "
        "board power limit where that saves more than its clock plan within the budget",
        json_schema_extra=_cli(help="plan clocks only: never change the GPU's power limit"),
    )
    learn: bool = Field(
        False,
        description="learn the plan on the GPU: make candidate plans on the checkpoint's "
        "planning model (auto and the exact optima over a range of budgets) and choose every step's "
        "from the measured step times (paired against auto steps, every 100 steps kept within the "
        "budget + 0.5 pp); in a dry run it reads the loop's own noise, nothing is set",
    )
    budget: Annotated[Float, Field(ge=0.0, le=0.5)] | None = Field(
        None,
        description="slowdown budget of --learn, a fraction (default: the checkpoint's)",
        json_schema_extra=_cli(metavar="FRACTION"),
    )
    compare_blocks: Annotated[Int, Field(ge=0)] = Field(
        0,
        description="interleave blocks of this many steps of the plan and of the driver's clocks, and report the "
        "measured difference in energy (NVML) and step time with a 95 % confidence interval; in a dry run nothing "
        "differs, and the report gives the noise floor: how many steps would resolve the planned saving (0: off)",
        json_schema_extra=_cli(metavar="STEPS"),
    )
    report: str | None = Field(
        None,
        description="write the controller's report here (JSON; .rankN is added under torch.distributed)",
        json_schema_extra=_cli(metavar="FILE", path=True),
    )
    save: str | None = Field(
        None,
        description="write the profiled trace, the timeline and the schedule to this folder",
        json_schema_extra=_cli(metavar="DIR", path=True),
    )
    verbose: bool = Field(
        True,
        description="print what the deployment does, and the report at the end",
        json_schema_extra=_cli(
            "--quiet",
            const=False,
            help="print nothing from the deployment (it prints what it does and the report by default)",
        ),
    )

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise DeployError(
                f"deploy settings: {describe(exc)}.", "see `rlclock apply --help` for every option."
            ) from None

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """Options under their names before 0.2.0 (``control="on"``, ``lookahead_s``) still work, with a warning."""
        if isinstance(data, dict) and "lookahead_s" in data:
            data = dict(data)
            renamed_keyword("clocked", "lookahead_s", "lead_s", "0.2.0")
            data.setdefault("lead_s", data.pop("lookahead_s"))
        if isinstance(data, dict) and "control" in data:
            data = dict(data)
            value = data.pop("control")
            renamed_keyword("clocked", "control", "control_clocks", "0.2.0")
            if value not in ("on", "dry-run", True, False):
                raise ValueError(
                    f"control mode {value!r} is not known: use control_clocks=True to set clocks (root), "
                    "or leave it out for a dry run"
                )
            data.setdefault("control_clocks", value in ("on", True))
        return data

    @field_validator("latency_s", "lead_s", "min_dwell_s")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number of seconds")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> DeploySettings:
        if self.checkpoint and self.schedule:
            raise ValueError("both a policy checkpoint and a schedule file were given: pass only one of them")
        if self.learn and self.schedule:
            raise ValueError(
                "learn makes its candidate plans on a checkpoint's planning model, but a schedule file "
                "was given: pass a checkpoint instead"
            )
        if self.learn and self.compare_blocks:
            raise ValueError(
                "learn chooses every step's plan, so blocks of the plan and of the driver's clocks "
                "cannot be compared in the same run: pass one of learn and compare_blocks"
            )
        return self

    def with_(self, **changes: Any) -> DeploySettings:
        """A copy with the given fields changed (``None`` values are ignored), validated; the fields set stay the
        ones set (:meth:`to_env` carries only those)."""
        kept = {k: getattr(self, k) for k in self.model_fields_set}
        return DeploySettings(**{**kept, **{k: v for k, v in changes.items() if v is not None}})

    @classmethod
    def options(cls) -> tuple[str, ...]:
        """The option names (``clocked(**options)``, the environment variables, the ``apply`` flags)."""
        return tuple(cls.model_fields)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Raise :class:`DeployError` for an option ``clocked`` does not take."""
        unknown = sorted(set(options) - set(cls.model_fields) - set(DEPRECATED))
        if unknown:
            raise DeployError(f"clocked() got unknown option(s) {unknown}.", f"use {list(cls.model_fields)}.")

    def to_env(self) -> dict[str, str]:
        """The environment variables that carry the fields set (``rlclock apply``'s flags given): a field left at
        its default is not carried, so the script's own argument for it stays in force."""
        env = {ACTIVE_ENV: "1"}
        for name in type(self).model_fields:
            if name not in self.model_fields_set:
                continue
            v = getattr(self, name)
            if v is not None:
                env[ENV_PREFIX + name.upper()] = str(int(v)) if isinstance(v, bool) else str(v)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The fields set in the environment (empty unless ``RLCLOCK_DEPLOY=1``), parsed.

        Raises:
            DeployError: A variable cannot be parsed.
        """
        env = os.environ if environ is None else environ
        if env.get(ACTIVE_ENV) != "1":
            return {}
        raw = {
            name: env[ENV_PREFIX + name.upper()]
            for name in cls.model_fields
            if env.get(ENV_PREFIX + name.upper(), "") != ""
        }
        for name, value in raw.items():
            try:
                DeploySettings(**{name: value})
            except DeployError as exc:
                var = ENV_PREFIX + name.upper()
                raise DeployError(
                    f"environment variable {var}={value!r} is not a valid {name}: {exc.message}",
                    "fix or unset it (rlclock apply sets it).",
                ) from None
        parsed = DeploySettings(**raw)
        return {name: getattr(parsed, name) for name in raw}

    # -- the rlclock apply flags ---------------------------------------------------------------------------
    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The ``rlclock apply`` flags, one per field (the schedule's source as a choice of at most one)."""
        source = parser.add_mutually_exclusive_group()
        parser.add_argument("--lookahead", dest="lead_s", default=None, help=argparse.SUPPRESS)  # before 0.2.0
        for name, info in cls.model_fields.items():
            cli = _cli_of(name)
            flag = cli.get("flag") or "--" + name.replace("_", "-")
            target = source if name in SOURCES else parser
            kind = info.annotation
            if cli.get("const") is not None or kind is bool:
                if kind is bool and cli.get("const") is None:  # a switch: --x sets the opposite of the default
                    default = bool(info.default)
                    flag = f"--no-{flag[2:]}" if default else flag
                    target.add_argument(
                        flag,
                        dest=name,
                        action="store_const",
                        const=not default,
                        default=None,
                        help=_escaped(cli.get("help") or info.description),
                    )
                else:
                    target.add_argument(
                        flag,
                        dest=name,
                        action="store_const",
                        const=cli["const"],
                        default=None,
                        help=_escaped(cli.get("help") or info.description),
                    )
                continue
            # values stay text here: the settings model parses and checks them, with its one-line errors
            target.add_argument(
                flag,
                dest=name,
                default=None,
                metavar=cli.get("metavar"),
                choices=cli.get("choices"),
                help=_escaped(
                    f"{info.description} (default: {info.default})" if info.default is not None else info.description
                ),
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DeploySettings:
        """The settings the ``rlclock apply`` flags give (paths made absolute: the script may change folder)."""
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            v = getattr(args, name, None)
            if v is None:
                continue
            cli = _cli_of(name)
            if cli.get("path") and looks_like_path(v):
                values[name] = str(Path(v).resolve())
            else:
                values[name] = v  # a value to parse, or a shipped checkpoint's name
        return DeploySettings(**values)


def _cli_of(name: str) -> dict[str, Any]:
    """The command-line form of field ``name`` (:func:`_cli`; empty where the field has none)."""
    extra = DeploySettings.model_fields[name].json_schema_extra
    cli = extra.get("cli") if isinstance(extra, dict) else None
    return dict(cli) if isinstance(cli, dict) else {}


def _escaped(text: str | None) -> str | None:
    """A help text as argparse formats it: a literal ``%`` (``95 % confidence``) doubled."""
    return None if text is None else text.replace("%", "%%")
