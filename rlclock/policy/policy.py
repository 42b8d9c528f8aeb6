"""ClockPolicy: a trained clock policy as plain weights, turning a kernel trace into a clock schedule.

A checkpoint is a folder::

    policy.safetensors   the policy network's weights (numpy arrays; nothing executes on load)
    meta.json            GPU, clock table, action set, feature schema, env spec, training figures
    sb3_model.zip        (optional) the stable-baselines3 model, only for resuming training

:meth:`ClockPolicy.schedule` rolls the step forward through the same switching rules as the environment
— numpy only, no torch — deciding a configuration at every kernel where a decision can take effect (while a
switch is in flight the driver call is busy and a request would be ignored, so none is computed).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlclock.backends.switching import fly
from rlclock.dvfs.spec import GpuSpec, get_spec
from rlclock.errors import CheckpointError
from rlclock.observation.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    N_KERNEL_INPUTS,
    PRICE_REL_MAX,
    PRICE_REL_MIN,
    distinct_kernels,
    kernel_window,
    latency_feature,
    price_feature,
    remaining_feature,
)
from rlclock.observation.lookahead import CURRENT_WIDTH, N_BINS, SLOT_WIDTH, StepLookahead, distinct, n_slots
from rlclock.schedule import ClockConfig, ClockSchedule
from rlclock.workload.trace import KernelTrace, Measurement

CHECKPOINT_FORMAT = "rlclock.policy"
CHECKPOINT_VERSION = 1
N_STATE = 13  # observation entries after the kernel window (rlclock.env)
DEFAULT_PRICE_REL = 1.15  # where plans start when a checkpoint does not say (exact optima price time at 1-1.5)


@dataclass
class PreparedStep:
    """What :meth:`ClockPolicy.rollout` reuses across prices for one step (see :meth:`ClockPolicy.prepare`)."""

    base: np.ndarray  # (situations, H) first-layer sum over the price- and state-independent inputs
    look: StepLookahead
    per_price: dict[float, PriceTables]  # ClockPolicy._price_tables
    situation: list[int]  # per kernel its row of `base` (see _situations)
    situation_context: np.ndarray  # (situations,) the look-ahead context of each
    # (context, configuration in effect, configuration requested) -> (kernels, seconds, joules) of the move
    moves: dict[tuple[int, int, int], tuple[int, float, float]] = field(default_factory=dict)


@dataclass
class PriceTables:
    """What a decision reads at one price of time, per look-ahead context ``u`` (``U`` of them).

    ``now[c]`` holds, for configuration ``c`` in effect, the first layer's sum over everything that depends
    on it — its gain, added time and energy per bin, its features, the in-effect flags of the slots holding
    it — in every context; :meth:`ClockPolicy._now_column` fills it the first time a rollout holds ``c``
    (a rollout holds a handful of the configurations)."""

    price_rel: float
    candidates: np.ndarray  # (U, S) configuration of every slot
    slot_part: np.ndarray  # (U, H) first-layer sum over the slots' features but their in-effect flags
    now: dict[int, np.ndarray]  # configuration -> (U, H)
    pre: np.ndarray  # (situations, H) the first layer's sum over everything but the configuration in effect
    slots: list[list[int]] = field(default_factory=list)  # `candidates` as lists (fast lookups)
    # (situation, configuration in effect) -> (the policy's action, its logits)
    decided: dict[tuple[int, int], tuple[int, np.ndarray]] = field(default_factory=dict)


def clock_table_digest(spec: GpuSpec) -> str:
    """A short digest of a GPU's clock table (memory clock → supported core clocks)."""
    text = json.dumps({str(m): list(spec.clocks[m]) for m in sorted(spec.clocks)})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PolicyWeights:
    """An MLP: hidden layers ``(W, b)`` with an activation, then the action head ``(W, b)``."""

    hidden: tuple[tuple[np.ndarray, np.ndarray], ...]
    head: tuple[np.ndarray, np.ndarray]
    activation: str = "tanh"

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic actions (argmax of the logits) for a batch of observations ``(N, obs)``."""
        h = np.asarray(obs, dtype=np.float64)
        for w, b in self.hidden:
            h = h @ w.T + b
            h = np.tanh(h) if self.activation == "tanh" else np.maximum(h, 0.0)
        return np.argmax(h @ self.head[0].T + self.head[1], axis=-1)

    def tensors(self) -> dict[str, np.ndarray]:
        out = {}
        for i, (w, b) in enumerate(self.hidden):
            out[f"hidden.{i}.weight"], out[f"hidden.{i}.bias"] = w, b
        out["head.weight"], out["head.bias"] = self.head
        return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}

    @classmethod
    def from_tensors(cls, t: dict[str, np.ndarray], activation: str) -> PolicyWeights:
        n = len([k for k in t if k.startswith("hidden.") and k.endswith(".weight")])
        hidden = tuple((t[f"hidden.{i}.weight"].astype(np.float64), t[f"hidden.{i}.bias"].astype(np.float64))
                       for i in range(n))
        return cls(hidden, (t["head.weight"].astype(np.float64), t["head.bias"].astype(np.float64)), activation)


def save_checkpoint(folder: str | Path, weights: PolicyWeights, meta: dict[str, Any]) -> Path:
    """Write ``policy.safetensors`` and ``meta.json`` into ``folder``."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(weights.tensors(), str(folder / "policy.safetensors"))
    full = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "activation": weights.activation, **meta}
    (folder / "meta.json").write_text(json.dumps(full, indent=1, default=float))
    return folder


class ClockPolicy:
    """A deployable clock policy (see the module docstring).

    Attributes:
        meta: The checkpoint's metadata.
        gpu: The GPU preset it was trained for.
        configs: Its action set (index = action).
        lookahead: Kernels after the current one it looks at.
        budget: Slowdown budget it was trained for.
    """

    def __init__(self, weights: PolicyWeights, meta: dict[str, Any]) -> None:
        self.weights = weights
        self.meta = meta
        self.gpu = get_spec(meta["gpu_key"])
        self.configs: tuple[ClockConfig, ...] = tuple(ClockConfig.parse(c) for c in meta["configs"])
        self.lookahead = int(meta["lookahead"])
        self.budget = float(meta.get("budget", 0.01))
        self._check_shapes()
        if not any(c.core_mhz is not None and c.mem_mhz is not None for c in self.configs):
            raise CheckpointError("the policy's action set has no locked core@memory pair; its kernel clock "
                                  "response needs at least one.", "retrain with locked pairs in the env's actions.")
        self._cache: dict[str, Any] = {}
        self.last_time_s = float("nan")
        self.last_energy_j = float("nan")
        self.last_computed = 0  # decisions the last rollout computed (the others reused a repeated layer's)

    @property
    def gpu_key(self) -> str:
        return self.gpu.key

    @property
    def gpu_name(self) -> str:
        return self.gpu.name

    # -- loading and compatibility ---------------------------------------------------------------------
    @classmethod
    def load(cls, folder: str | Path) -> ClockPolicy:
        """Load a checkpoint folder; refuses malformed or incompatible ones with a clear error."""
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        folder = Path(folder)
        meta_path, weights_path = folder / "meta.json", folder / "policy.safetensors"
        if not meta_path.is_file() or not weights_path.is_file():
            raise CheckpointError(f"{folder} is not an rlclock checkpoint (needs meta.json and policy.safetensors).",
                                  "give a folder written by `rlclock train` (e.g. checkpoints/gpt3xl-rtx3080ti).")
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{meta_path}: unreadable metadata ({exc}).") from None
        if meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(f"{meta_path}: format {meta.get('format')!r} v{meta.get('version')!r}, expected "
                                  f"{CHECKPOINT_FORMAT!r} v{CHECKPOINT_VERSION}.", "retrain or upgrade rlclock.")
        if meta.get("feature_schema_version") != FEATURE_SCHEMA_VERSION:
            raise CheckpointError(
                f"{folder}: feature schema v{meta.get('feature_schema_version')} does not match this rlclock's "
                f"v{FEATURE_SCHEMA_VERSION}.", "retrain the policy with this version of rlclock.")
        for key in ("gpu_key", "configs", "lookahead", "clock_table", "obs_size", "candidate_slots"):
            if key not in meta:
                raise CheckpointError(f"{meta_path}: missing {key!r}.")
        gpu = get_spec(meta["gpu_key"])
        if meta["clock_table"] != clock_table_digest(gpu):
            raise CheckpointError(f"{folder}: clock table of {gpu.name} differs from the one the policy was trained "
                                  "on.", "retrain the policy for this GPU preset.")
        try:
            tensors = load_file(str(weights_path))
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{weights_path}: unreadable weights ({exc}).") from None
        try:
            weights = PolicyWeights.from_tensors(tensors, meta.get("activation", "tanh"))
        except KeyError as exc:
            raise CheckpointError(f"{weights_path}: missing tensor {exc}.") from None
        return cls(weights, meta)

    def _check_shapes(self) -> None:
        if not self.weights.hidden:
            raise CheckpointError("the policy has no hidden layer; rlclock's policies have at least one.",
                                  "retrain the policy with this version of rlclock.")
        slots = n_slots(self.configs)
        if int(self.meta.get("candidate_slots", slots)) != slots:
            raise CheckpointError(f"the policy was trained with {self.meta['candidate_slots']} candidate slots; its "
                                  f"listed action set gives {slots}.", "retrain the policy for this action set.")
        expect = ((self.lookahead + 1) * N_KERNEL_INPUTS + slots * SLOT_WIDTH + CURRENT_WIDTH + N_BINS
                  + N_STATE)
        w0 = self.weights.hidden[0][0]
        if w0.shape[1] != expect or int(self.meta["obs_size"]) != expect:
            raise CheckpointError(f"policy expects {w0.shape[1]} observation entries, this rlclock builds {expect}.",
                                  "retrain the policy with this version of rlclock.")
        if self.weights.head[0].shape[0] != slots + 1:
            raise CheckpointError(f"policy has {self.weights.head[0].shape[0]} actions but its action set gives "
                                  f"{slots} candidate slots (+ keep).")

    def check_gpu(self, gpu: GpuSpec | str) -> None:
        """Raise :class:`CheckpointError` unless ``gpu`` (a spec, preset key or NVML name) is the policy's GPU."""
        spec = get_spec(gpu) if isinstance(gpu, str) else gpu
        if spec.key != self.gpu.key or clock_table_digest(spec) != self.meta["clock_table"]:
            raise CheckpointError(f"this policy was trained for {self.gpu.name}, not {spec.name}.",
                                  f"use a checkpoint trained for {spec.key}, or train one.")

    # -- inference ------------------------------------------------------------------------------------
    def backend_for(self, trace: KernelTrace, auto_time_s: np.ndarray | None = None,
                    auto_energy_j: np.ndarray | None = None, latency_s: float | None = None):
        """A simulated backend of the policy's GPU over ``trace``, anchored on measured auto points if given."""
        from dataclasses import replace

        from rlclock.backends.simulated import SimulatedGpu

        if auto_time_s is not None:
            t = np.asarray(auto_time_s, float)
            e = None if auto_energy_j is None else np.asarray(auto_energy_j, float)
            if t.shape != (len(trace),) or (e is not None and e.shape != t.shape):
                raise CheckpointError(f"need {len(trace)} auto times (and energies), found {t.shape}.")
            kernels = [replace(k, measured=(Measurement(gpu=self.gpu.key, time_s=float(t[i]),
                                                        energy_j=None if e is None else float(e[i]),
                                                        source="profile"),))
                       for i, k in enumerate(trace)]
            trace = trace.with_kernels(kernels)
        lat = self.meta.get("latency_s", self.gpu.switch_latency_s) if latency_s is None else latency_s
        return SimulatedGpu(self.gpu, trace, self.configs, lat, anchor=True)

    def schedule(self, trace: KernelTrace, auto_time_s: np.ndarray | None = None,
                 auto_energy_j: np.ndarray | None = None, latency_s: float | None = None, backend=None,
                 budget: float | None = None, calibrate: bool = True, search: bool = False) -> ClockSchedule:
        """The policy's clock schedule for one step of ``trace``.

        Args:
            trace: The step's kernels (from a generator or ``rlclock profile``).
            auto_time_s: Measured auto-clock duration per kernel (anchors the planning model), optional.
            auto_energy_j: Measured auto-clock energy per kernel, optional.
            latency_s: Switching latency to plan for (default: the one trained for).
            backend: Plan on this backend instead (its configurations must be the policy's).
            budget: Slowdown budget (default: the one trained for).
            calibrate: Choose the price of time the policy plans at so the plan fits the budget (see
                :meth:`plan`).
            search: Let the planner weigh the policy's second choices on the planning model (see :meth:`plan`;
                0.1-2 s instead of 0.05-0.2 s on the presets' steps).
        """
        if backend is None:
            backend = self.backend_for(trace, auto_time_s, auto_energy_j, latency_s)
        req = self.plan(backend, self.budget if budget is None else budget, calibrate, search=search)
        return ClockSchedule(self.configs, req, name="policy")

    def plan(self, backend, budget: float, calibrate: bool = True, prices: int = 24, pairs: int = 2,
             mix_tries: int = 8, search: bool = False) -> np.ndarray:
        """Requested configuration index per kernel, by rolling the step through the switching rules.

        The policy plans at a price of time (relative to the step's mean auto power; see
        :func:`~rlclock.observation.features.price_feature`). Without ``calibrate`` it uses the price it was
        trained around (``meta["price_rel"]``). With ``calibrate`` the planner meets the budget on the
        planning model in two stages:

        1. *Prices*: the step is planned at ``prices`` prices, log-spaced over the range the policy knows
           (0.25-4 × the mean auto power) — one Lagrangian plan each.
        2. *Time-sharing*: the best of those within the budget can leave much of it unused (the trade-off
           curve of a discrete schedule has gaps). For the ``pairs`` most promising pairs of a fitting and a
           missing plan (by the saving their straight-line mix would reach at the budget), the policy runs the
           first ``K`` kernels at one price and the rest at the other, both ways round, with ``K`` bisected
           (``mix_tries`` rollouts each) — which closes most of the gap to the exact optimum.

        With ``search``, then, at the prices of those pairs and of the best plan that fits on its own
        (:meth:`refine`): wherever the policy's second choice lowers the plan's ``energy + price·time`` on the
        planning model, it replaces the first, for every kernel that decides in the same situation; and the
        time-sharing again (without ``calibrate``: at the trained price only). Every request still comes from
        the policy (its first or its second choice), and the plan is never worse on the planning model than
        without the search — which is also where its gain is measured: on a real GPU it is worth what the
        planning model is. It takes 0.1-2 s where the rest takes 0.05-0.2 s on the presets' steps.

        The cheapest plan within the budget wins; if none fits or saves energy, the schedule leaves every
        kernel to the driver (auto).
        """
        self.check_gpu(backend.spec)
        if tuple(backend.configs) != self.configs:
            raise CheckpointError("the backend's configuration set differs from the policy's action set.",
                                  "build the backend with policy.configs (or use policy.schedule without one).")
        t_tab, e_tab = backend.tables
        auto = backend.auto_run()
        args = (backend.trace, t_tab, e_tab, auto.kernel_time_s, auto.kernel_energy_j, backend.latency_s)
        if not calibrate:
            start = float(np.clip(self.meta.get("price_rel", DEFAULT_PRICE_REL), PRICE_REL_MIN, PRICE_REL_MAX))
            if not search:
                return self.rollout(*args, start)
            prepared = self.prepare(*args)
            return self.rollout(*args, start, prepared=prepared,
                                overrides={start: self.refine(prepared, args, start)})
        n = t_tab.shape[0]
        limit = auto.time_s * (1.0 + budget) * (1 + 1e-12)
        best: list[Any] = [auto.energy_j, np.zeros(n, dtype=np.int64)]  # auto fits any budget
        prepared = self.prepare(*args)
        overrides: dict[float, dict[tuple[int, int], int]] = {}

        def attempt(price: float | np.ndarray) -> bool:
            req = self.rollout(*args, price, prepared=prepared, overrides=overrides)
            fits = self.last_time_s <= limit
            if fits and self.last_energy_j < best[0]:
                best[:] = [self.last_energy_j, req]
            return fits

        points: dict[float, tuple[float, float]] = {}  # (time, energy) of each one-price plan

        def mixes() -> list[tuple[float, float, float]]:
            """(estimated energy at the budget, fitting price, missing price) of every straddling pair."""
            out = []
            for pf, (tf, ef) in points.items():
                for pm, (tm, em) in points.items():
                    if tf <= limit < tm:
                        w = (limit - tf) / (tm - tf)
                        out.append(((1.0 - w) * ef + w * em, pf, pm))
            return sorted(out)

        def time_share() -> None:
            for estimate, p_fit, p_miss in mixes()[:pairs]:
                if estimate >= best[0]:
                    break
                for first, second in ((p_miss, p_fit), (p_fit, p_miss)):
                    lo, hi = 0, n
                    split = np.empty(n)
                    for _ in range(mix_tries):
                        k = (lo + hi) // 2
                        if k in (lo, hi):
                            break
                        split[:k], split[k:] = first, second
                        # more kernels at the missing price take longer: move K towards the fitting side
                        if attempt(split) == (first == p_miss):
                            lo = k
                        else:
                            hi = k

        for p in np.geomspace(PRICE_REL_MIN, PRICE_REL_MAX, max(2, prices)):
            attempt(float(p))
            points[float(p)] = (self.last_time_s, self.last_energy_j)
        time_share()
        if search:  # then again with the second choices that help at the prices that matter
            chosen = {p for _, pf, pm in mixes()[:pairs] for p in (pf, pm)}
            fitting = [p for p, (tp, _) in points.items() if tp <= limit]
            if fitting:  # and the best plan that fits on its own
                chosen.add(min(fitting, key=lambda p: points[p][1]))
            for p in sorted(chosen):
                overrides[p] = self.refine(prepared, args, p)
                attempt(p)
                points[p] = (self.last_time_s, self.last_energy_j)
            time_share()
        return best[1]

    def rollout(self, trace: KernelTrace, t_tab: np.ndarray, e_tab: np.ndarray, auto_t: np.ndarray,
                auto_e: np.ndarray, latency_s: float, price_rel: float | np.ndarray,
                timings: list[float] | None = None, first_layer: list[np.ndarray] | None = None,
                prepared: PreparedStep | None = None,
                overrides: dict[float, dict[tuple[int, int], int]] | None = None,
                choices: dict[tuple[int, int], tuple[float, int]] | None = None) -> np.ndarray:
        """The decision loop (numpy only) at a price of time ``price_rel`` (J/s per watt of mean auto power;
        one for the step or one per kernel).

        ``t_tab``/``e_tab`` are the planning model's ``(n, C)`` time and energy tables (they give the kernels'
        clock response, the look-ahead bins, the candidate slots and the plan's accounting). ``timings``
        receives the seconds spent per decision if given, ``first_layer`` the first layer's input-side sum
        ``W1 · obs + b1`` at each decision (for checking against the env's observations). ``prepared`` is
        :meth:`prepare` for these inputs, when the caller rolls the same step out at several prices (it
        keeps what each price needs). ``overrides`` maps a price to the actions that replace the policy's at
        some ``(situation, configuration in effect)`` states (:meth:`refine`); ``choices``, if given, receives
        at every state visited (in a rollout at a single price) the policy's logit margin between its first and
        its second choice, and that second action. Afterwards ``self.last_time_s`` and ``self.last_energy_j`` hold the
        planned step."""
        n = t_tab.shape[0]
        if prepared is None:
            prepared = self.prepare(trace, t_tab, e_tab, auto_t, auto_e, latency_s)
        price = np.asarray(price_rel, dtype=float)
        if price.shape not in ((), (n,)) or not np.all(np.isfinite(price)) or np.any(price < 0):
            raise CheckpointError(f"price of time {price_rel!r}: need one finite price >= 0 or one per kernel "
                                  f"({n}).")
        prices = np.broadcast_to(price, (n,))
        look = prepared.look
        context = look.context.tolist()
        levels, which = np.unique(prices, return_inverse=True)
        tables = [self._price_tables(prepared, float(p)) for p in levels]
        replaced = [(overrides or {}).get(float(p), {}) for p in levels]
        which = which.tolist()
        situation = prepared.situation
        # a decision depends on the kernel's inputs, the price and the configuration in effect only, and the
        # move it makes (the kernels it covers, their time and energy) on its context, the configuration in
        # effect and the one requested, while those kernels lie within the context's span: kernels of repeated
        # layers, and later rollouts of the step, reuse both (exact: the same inputs give the same numbers)
        # unless each decision is recorded
        reuse = first_layer is None and timings is None
        moves = prepared.moves if reuse else {}
        span = look.span.tolist()
        keep = look.n_slots  # the action that issues nothing
        t_at, e_at = t_tab.item, e_tab.item
        clock = time.perf_counter
        held: list[int] = []  # the configuration requested over each move, and the kernels it covers
        covers: list[int] = []
        cur, k, T, E, computed = 0, 0, 0.0, 0.0, 0
        while k < n:  # one pass per decision
            t0 = clock() if timings is not None else 0.0
            level = which[k]
            tab = tables[level]
            s, u = situation[k], context[k]
            key = (s, cur)
            got = tab.decided.get(key) if reuse else None
            if got is None:
                now = tab.now.get(cur)
                if now is None:
                    now = self._now_column(look, tab, cur)
                h = tab.pre[s] + now[u]
                if first_layer is not None:
                    first_layer.append(h.copy())
                z = self._logits(h)
                got = (int(z.argmax()), z)
                if reuse:
                    tab.decided[key] = got
                computed += 1
            if choices is not None and key not in choices:
                choices[key] = _runner_up(*got)
            a = replaced[level].get(key, got[0])
            a = cur if a >= keep else tab.slots[u][a]
            if timings is not None:
                timings.append(clock() - t0)
            move = moves.get((u, cur, a))
            if move is None:
                if a == cur or latency_s <= 0.0:  # nothing in flight: the kernel runs at what is in effect
                    j, dt, de = k + 1, t_at(k, a), e_at(k, a)
                else:
                    j, _, dt, de = fly(t_at, e_at, n, k, cur, a, latency_s)
                if reuse and j - k <= span[u]:
                    moves[(u, cur, a)] = (j - k, dt, de)
            else:
                j, dt, de = move
                j += k
            cur = a
            T += dt
            E += de
            held.append(cur)
            covers.append(j - k)
            k = j
        self.last_time_s = T
        self.last_energy_j = E
        self.last_computed = computed
        return np.repeat(np.asarray(held, dtype=np.int64), covers)

    def _logits(self, h: np.ndarray) -> np.ndarray:
        """The action logits of a decision from its first layer's pre-activation ``h`` (overwritten): the
        remaining layers and the head."""
        self._activate(h)
        for w, b in self.weights.hidden[1:]:
            h = w @ h
            h += b
            self._activate(h)
        z = self.weights.head[0] @ h
        z += self.weights.head[1]
        return z

    def refine(self, prepared: PreparedStep, args: tuple, price_rel: float, passes: int = 3
               ) -> dict[tuple[int, int], int]:
        """Search over the policy's second choices at one price: the ``(situation, configuration in effect)``
        states whose first choice the second replaces, because that lowers the planned step's
        ``energy + price·time`` (the objective the policy was trained on at this price).

        States are tried in order of the policy's margin between the two (least sure first), one rollout
        each, a replacement kept when it lowers the objective; ``passes`` rounds, stopping early when a round
        keeps none. Replacing a state's action changes it at every kernel that decides in that state — in
        every repeat of a layer at once. ``args``: :meth:`rollout`'s leading arguments.
        """
        price = float(price_rel)
        weight = price * float(args[4].sum() / max(args[3].sum(), 1e-12))  # J per s: price × mean auto power
        chosen: dict[tuple[int, int], int] = {}
        seen: dict[tuple[int, int], tuple[float, int]] = {}
        self.rollout(*args, price, prepared=prepared, choices=seen)
        best = self.last_energy_j + weight * self.last_time_s
        for _ in range(passes):
            kept = False
            for state, (_, second) in sorted(seen.items(), key=lambda kv: kv[1][0]):
                if state in chosen:
                    continue
                chosen[state] = second
                self.rollout(*args, price, prepared=prepared, overrides={price: chosen}, choices=seen)
                objective = self.last_energy_j + weight * self.last_time_s
                if objective < best * (1.0 - 1e-12):
                    best, kept = objective, True
                else:
                    del chosen[state]
            if not kept:
                break
        return chosen

    def _activate(self, h: np.ndarray) -> None:
        if self.weights.activation == "tanh":
            np.tanh(h, out=h)
        else:
            np.maximum(h, 0.0, out=h)

    def prepare(self, trace: KernelTrace, t_tab: np.ndarray, e_tab: np.ndarray, auto_t: np.ndarray,
                auto_e: np.ndarray, latency_s: float) -> PreparedStep:
        """What every rollout of one step shares: the step's :class:`StepLookahead`, its situations
        (:func:`_situations`) and per situation the first layer's sum over the parts of the observation that
        depend on neither the price nor the state (kernel window, occupancy of the bins ahead, time left,
        latency, bias)."""
        K = self.lookahead
        b1 = self.weights.hidden[0][1]
        look = StepLookahead(t_tab, e_tab, auto_t, auto_e, latency_s, self.configs, kernel_groups=trace.unique_index)
        width = (K + 1) * N_KERNEL_INPUTS
        kernels = distinct_kernels(trace, look.row_ids)
        window = kernel_window(trace, self.gpu, auto_t, auto_e, latency_s, t_tab, e_tab, self.configs, K, kernels)
        if "w1_window" not in self._cache:
            self._split_first_layer(width, look.n_slots)
        c = self._cache
        prefix = np.concatenate([[0.0], np.cumsum(auto_t)])
        remaining = remaining_feature(float(prefix[-1]) - prefix[:-1], latency_s)
        situation, first = _situations(kernels[0], look.context, remaining, K)
        # once per situation; the window product in float32, as the network was trained
        rows = window[first[:, None] + np.arange(K + 1)].reshape(len(first), width)
        base = (rows @ c["w1_window"]).astype(np.float64)
        base += b1 + look.occupancy_by_context[look.context[first]] @ c["w_occupancy"]
        base += np.outer(remaining[first], c["w_remaining"])
        base += latency_feature(latency_s) * c["w_latency"]
        return PreparedStep(base, look, {}, situation.tolist(), look.context[first])

    def _split_first_layer(self, width: int, slots: int) -> None:
        """Cache the first layer's columns per part of the observation (rlclock.env's layout)."""
        w1 = self.weights.hidden[0][0]
        c = self._cache
        c["w1_window"] = np.ascontiguousarray(w1[:, :width].T, dtype=np.float32)
        w_slot = w1[:, width : width + slots * SLOT_WIDTH].reshape(-1, slots, SLOT_WIDTH)
        c["w_slots"] = np.ascontiguousarray(w_slot.reshape(w1.shape[0], -1).T, dtype=np.float32)
        at = width + slots * SLOT_WIDTH
        # the configuration in effect: its gain, added time and energy per bin (tables in float32, as the
        # look-ahead), then the in-effect flags of the slots that hold it
        c["w_now"] = np.ascontiguousarray(np.vstack([w1[:, at : at + CURRENT_WIDTH].T, w_slot[:, :, -1].T]),
                                          dtype=np.float32)
        c["w_occupancy"] = np.ascontiguousarray(w1[:, at + CURRENT_WIDTH : at + CURRENT_WIDTH + N_BINS].T)
        ws = w1[:, at + CURRENT_WIDTH + N_BINS :]  # state columns (rlclock.env observation table)
        # (C, H): the configuration in effect's features
        c["now_config"] = (self._config_features() @ ws[:, 0:4].T).astype(np.float32)
        c["w_price"], c["w_remaining"], c["w_latency"] = ws[:, 10].copy(), ws[:, 11].copy(), ws[:, 12].copy()

    def _price_tables(self, prepared: PreparedStep, price_rel: float) -> PriceTables:
        """The :class:`PriceTables` of one price (computed once per price and step)."""
        got = prepared.per_price.get(price_rel)
        if got is None:
            look = prepared.look
            U, S = look.n_contexts, look.n_slots
            c = self._cache
            cand = look.context_candidates(price_rel)
            feats = np.empty((U, S, SLOT_WIDTH), dtype=np.float32)
            feats[..., :4] = c["cf32"][cand]
            feats[..., 4:-1] = look.bin_features(np.arange(U)[:, None], cand, price_rel)
            feats[..., -1] = 0.0  # no slot is flagged as in effect: that is in `now`
            slot_part = (feats.reshape(U, -1) @ c["w_slots"]).astype(np.float64)
            pre = prepared.base + slot_part[prepared.situation_context]
            pre += float(price_feature(price_rel)) * c["w_price"]
            got = PriceTables(price_rel, cand, slot_part, {}, pre, cand.tolist())
            if len(prepared.per_price) >= 32:
                prepared.per_price.clear()
            prepared.per_price[price_rel] = got
        return got

    def _now_column(self, look: StepLookahead, tables: PriceTables, config: int) -> np.ndarray:
        """``(U, H)``: the first layer's sum over everything that depends on configuration ``config`` in effect,
        in every context, at the tables' price — its bins, the in-effect flags of the slots holding it, its
        features (stored in ``tables.now``)."""
        S = look.n_slots
        bins = look.bin_features(np.arange(look.n_contexts), config, tables.price_rel, extra=S)
        bins[:, CURRENT_WIDTH:] = tables.candidates == config
        now = bins @ self._cache["w_now"]
        now += self._cache["now_config"][config]
        tables.now[config] = now
        return now

    def _config_features(self) -> np.ndarray:
        if "cf" not in self._cache:
            from rlclock.env import config_features

            self._cache["cf"] = config_features(self.gpu, self.configs).astype(np.float64)
            self._cache["cf32"] = self._cache["cf"].astype(np.float32)
        return self._cache["cf"]


def _runner_up(action: int, logits: np.ndarray) -> tuple[float, int]:
    """The policy's margin between its choice ``action`` and its second choice, and that second action."""
    second = int(np.argmax(np.where(np.arange(len(logits)) == action, -np.inf, logits)))
    return float(logits[action] - logits[second]), second


_HASH_MULTIPLIERS = np.random.default_rng(0x51A7).integers(1, 2**63, size=64, dtype=np.uint64) | np.uint64(1)
"""Independent odd 64-bit multipliers for hashing situations (structured ones let small integer combinations
of the ids collide)."""


def _situations(kernel_ids: np.ndarray, context: np.ndarray, remaining: np.ndarray, lookahead: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(situation, first)``: per kernel a number shared by the kernels that see the same inputs but for the
    state and the price — the same kernel window (``kernel_ids``: equal numbers for equal rows of the window,
    :func:`~rlclock.observation.features.distinct_kernels`), look-ahead context and time left (which saturates
    eight latencies before the end) —, and the first kernel of each. Repeated layers share them, so their
    decisions are computed once per state (exact: the groups are checked element by element)."""
    n = len(context)
    padding = np.full(lookahead, int(kernel_ids.max()) + 1)  # the rows past the step's end: one more kind
    ids = np.concatenate([kernel_ids, padding]).astype(np.uint64)
    mults = _HASH_MULTIPLIERS[: lookahead + 3]
    with np.errstate(over="ignore"):
        key = context.astype(np.uint64) * mults[0] + remaining.view(np.uint64) * mults[1]
        for j in range(lookahead + 1):
            key += ids[j : j + n] * mults[j + 2]
    situation, first = distinct(key)
    same = [context, remaining, *(ids[j : j + n] for j in range(lookahead + 1))]
    if not all(np.array_equal(x[first[situation]], x) for x in same):
        return np.arange(n), np.arange(n)
    return situation, first


def policy_meta(gpu: GpuSpec, configs: Sequence[ClockConfig], lookahead: int, obs_size: int, latency_s: float,
                budget: float, extra: dict[str, Any]) -> dict[str, Any]:
    """The metadata a checkpoint carries (see the module docstring)."""
    return {
        "gpu_key": gpu.key,
        "gpu_name": gpu.name,
        "clock_table": clock_table_digest(gpu),
        "configs": [str(c) for c in configs],
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
        "feature_names": list(FEATURE_NAMES),
        "lookahead": lookahead,
        "candidate_slots": n_slots(configs),
        "obs_size": obs_size,
        "latency_s": latency_s,
        "budget": budget,
        **extra,
    }
