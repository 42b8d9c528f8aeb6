"""A corpus of real training steps, profiled on this machine's GPU in a dry run (nothing is ever set).

Each model is a Hugging Face ``transformers`` architecture built from its config with random weights (nothing
is downloaded), trained on random tokens (or images) for a full step: forward, loss, backward and a fused
AdamW step, under bf16 autocast. For each:

1. the deployment's own profile of the step — what ``rlclock apply --save DIR`` writes: the kernel trace
   (FLOPs and bytes estimated from the operators' shapes), the step timeline, and the controller's dry-run
   report — taken through ``rlclock.deploy.clocked`` with an all-auto schedule;
2. the controller timing switches in the running loop (dry run, nothing set): a schedule alternating auto and
   a lower core clock every 12 ms of the profiled timeline, 30 steps, every step timed on the GPU
   (``switch_report.json``);
3. the bare step, without rlclock: per-step GPU time from CUDA events, and the NVML energy counter over
   ``--windows`` windows of at least ``--window-s`` seconds each, with the SM clock and power read beside it.

Plus ``examples/train_small_gpt.py``'s model. Writes ``OUT/<model>/{step.trace.json, step.timeline.json,
step.schedule.json, report.json, switch_report.json, summary.json}`` and ``OUT/corpus.json`` (every summary),
and packs the lot into ``OUT/corpus.tar.gz`` when ``--pack`` is given.

    python benchmarks/corpus_gpu.py --out data/corpus                  # every model
    python benchmarks/corpus_gpu.py --out /tmp/c --only llama --windows 1 --window-s 0.5
    python benchmarks/corpus_gpu.py --out /tmp/t --timing-only      # the controller's timing, both ways
    python benchmarks/corpus_gpu.py --out data/corpus-h200-heldout --set heldout --pack   # never fitted to
    python benchmarks/corpus_gpu.py --out data/corpus-h100-compiled --only bert --compile default,reduce-overhead

With ``--compile MODES`` each model is also (or only) trained through ``torch.compile`` in each mode given
(``default``; ``reduce-overhead``, which replays the step's graphs as CUDA graphs; ``eager`` for the plain
step), in ``OUT/<model>+<mode>/``; the deployment's ``--save`` folder then also keeps the profiler's own export
and the source TorchInductor generated (``step.profile.json.gz``, ``step.inductor.json.gz``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import statistics
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

Batch = Callable[[], dict[str, Any]]


def hf_models() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Name → (config, batch shape) of the Hugging Face models: decoders with MHA and GQA of several widths,
    FFN types and vocabularies, an encoder, an encoder-decoder and a vision transformer."""
    import transformers as tf

    return {
        "llama-0.5b-mha": (
            tf.LlamaConfig(
                hidden_size=1024,
                intermediate_size=2816,
                num_hidden_layers=24,
                num_attention_heads=16,
                num_key_value_heads=16,
                vocab_size=32000,
                max_position_embeddings=2048,
            ),
            {"batch": 8, "seq": 1024},
        ),
        "llama-1b-gqa": (
            tf.LlamaConfig(
                hidden_size=2048,
                intermediate_size=8192,
                num_hidden_layers=16,
                num_attention_heads=32,
                num_key_value_heads=8,
                vocab_size=128256,
                max_position_embeddings=4096,
            ),
            {"batch": 4, "seq": 2048},
        ),
        "qwen2-0.5b": (
            tf.Qwen2Config(
                hidden_size=896,
                intermediate_size=4864,
                num_hidden_layers=24,
                num_attention_heads=14,
                num_key_value_heads=2,
                vocab_size=151936,
                max_position_embeddings=2048,
            ),
            {"batch": 8, "seq": 1024},
        ),
        "mistral-1b": (
            tf.MistralConfig(
                hidden_size=2048,
                intermediate_size=5632,
                num_hidden_layers=16,
                num_attention_heads=16,
                num_key_value_heads=4,
                vocab_size=32000,
                max_position_embeddings=4096,
            ),
            {"batch": 4, "seq": 2048},
        ),
        "gpt2-medium": (
            tf.GPT2Config(n_embd=1024, n_layer=24, n_head=16, vocab_size=50257, n_positions=1024),
            {"batch": 8, "seq": 1024},
        ),
        "pythia-410m": (
            tf.GPTNeoXConfig(
                hidden_size=1024,
                intermediate_size=4096,
                num_hidden_layers=24,
                num_attention_heads=16,
                vocab_size=50304,
                max_position_embeddings=2048,
            ),
            {"batch": 8, "seq": 1024},
        ),
        "bert-base": (
            tf.BertConfig(
                hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, vocab_size=30522
            ),
            {"batch": 32, "seq": 512},
        ),
        "t5-base": (
            tf.T5Config(
                d_model=768,
                d_ff=3072,
                num_layers=12,
                num_decoder_layers=12,
                num_heads=12,
                vocab_size=32128,
                decoder_start_token_id=0,
            ),
            {"batch": 16, "seq": 512, "target": 128},
        ),
        "vit-base": (
            tf.ViTConfig(
                hidden_size=768,
                num_hidden_layers=12,
                num_attention_heads=12,
                intermediate_size=3072,
                image_size=224,
                patch_size=16,
                num_labels=1000,
            ),
            {"batch": 64},
        ),
    }


def heldout_models() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Name → (config, batch shape, with its task) of architectures the cost rules were never fitted to (``--set
    heldout``): Gemma (GeGLU, head dim 256, multi-query, a 256 k vocabulary), Phi (partial rotary, parallel
    attention and MLP), OPT-350m (post-norm, ReLU, projected embeddings), Falcon (multi-query, parallel blocks),
    Qwen3 (per-head q/k RMSNorm), a Mixtral-style mixture of experts, BART, DeBERTa-v3 (disentangled relative
    attention) and Swin (shifted-window attention)."""
    import transformers as tf

    lm, mlm, s2s, img = "causal-lm", "masked-lm", "seq2seq", "image-classification"
    return {
        "gemma-1b": (
            tf.GemmaConfig(
                hidden_size=1536,
                intermediate_size=6144,
                num_hidden_layers=12,
                num_attention_heads=8,
                num_key_value_heads=1,
                head_dim=256,
                vocab_size=256000,
                max_position_embeddings=2048,
            ),
            {"task": lm, "batch": 4, "seq": 1024},
        ),
        "phi-1b": (
            tf.PhiConfig(
                hidden_size=2048,
                intermediate_size=8192,
                num_hidden_layers=12,
                num_attention_heads=32,
                partial_rotary_factor=0.5,
                vocab_size=51200,
                max_position_embeddings=2048,
            ),
            {"task": lm, "batch": 4, "seq": 2048},
        ),
        "opt-350m": (
            tf.OPTConfig(
                hidden_size=1024,
                ffn_dim=4096,
                num_hidden_layers=24,
                num_attention_heads=16,
                word_embed_proj_dim=512,
                do_layer_norm_before=False,
                vocab_size=50272,
                max_position_embeddings=2048,
            ),
            {"task": lm, "batch": 8, "seq": 1024},
        ),
        "falcon-1b-mqa": (
            tf.FalconConfig(
                hidden_size=2048,
                num_hidden_layers=16,
                num_attention_heads=32,
                multi_query=True,
                parallel_attn=True,
                new_decoder_architecture=False,
                alibi=False,
                vocab_size=65024,
            ),
            {"task": lm, "batch": 4, "seq": 2048},
        ),
        "qwen3-0.6b": (
            tf.Qwen3Config(
                hidden_size=1024,
                intermediate_size=3072,
                num_hidden_layers=28,
                num_attention_heads=16,
                num_key_value_heads=8,
                head_dim=128,
                vocab_size=151936,
                max_position_embeddings=2048,
            ),
            {"task": lm, "batch": 8, "seq": 1024},
        ),
        "mixtral-moe": (
            tf.MixtralConfig(
                hidden_size=1024,
                intermediate_size=2048,
                num_hidden_layers=8,
                num_attention_heads=16,
                num_key_value_heads=4,
                num_local_experts=8,
                num_experts_per_tok=2,
                vocab_size=32000,
                max_position_embeddings=2048,
            ),
            {"task": lm, "batch": 8, "seq": 1024},
        ),
        "bart-base": (
            tf.BartConfig(
                d_model=768,
                encoder_layers=6,
                decoder_layers=6,
                encoder_attention_heads=12,
                decoder_attention_heads=12,
                encoder_ffn_dim=3072,
                decoder_ffn_dim=3072,
                vocab_size=50265,
            ),
            {"task": s2s, "batch": 16, "seq": 512, "target": 128},
        ),
        "deberta-v3-base": (
            tf.DebertaV2Config(
                hidden_size=768,
                num_hidden_layers=12,
                num_attention_heads=12,
                intermediate_size=3072,
                vocab_size=128100,
                relative_attention=True,
                position_buckets=256,
                pos_att_type=["p2c", "c2p"],
                max_relative_positions=-1,
                norm_rel_ebd="layer_norm",
                share_att_key=True,
                position_biased_input=False,
            ),
            {"task": mlm, "batch": 16, "seq": 512},
        ),
        "swin-tiny": (
            tf.SwinConfig(
                image_size=224,
                patch_size=4,
                embed_dim=96,
                depths=[2, 2, 6, 2],
                num_heads=[3, 6, 12, 24],
                window_size=7,
                num_labels=1000,
            ),
            {"task": img, "batch": 64},
        ),
    }


MODEL_SETS = {"corpus": hf_models, "heldout": heldout_models}
"""``--set``: the corpus the cost rules were fitted to, or architectures they never saw."""


def build(name: str, config: Any, shape: dict[str, Any], device: str = "cuda") -> tuple[Any, Batch, str]:
    """The model on ``device``, a batch maker, and the task (causal LM, masked LM, seq2seq, image classes): the
    shape's ``task`` where it names one, else from the config's kind. Attention through SDPA where the
    architecture has it, else its own."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    task = shape.get("task") or (
        "masked-lm"
        if isinstance(config, tf.BertConfig)
        else "seq2seq"
        if isinstance(config, tf.T5Config)
        else "image-classification"
        if isinstance(config, tf.ViTConfig)
        else "causal-lm"
    )
    auto = {
        "causal-lm": tf.AutoModelForCausalLM,
        "masked-lm": tf.AutoModelForMaskedLM,
        "seq2seq": tf.AutoModelForSeq2SeqLM,
        "image-classification": tf.AutoModelForImageClassification,
    }[task]
    try:
        model = auto.from_config(config, attn_implementation="sdpa")
    except ValueError:  # the architecture has no SDPA path
        model = auto.from_config(config, attn_implementation="eager")
    model = model.to(device).train()
    b = shape["batch"]

    def batch() -> dict[str, Any]:
        if task == "image-classification":
            return {
                "pixel_values": torch.randn(b, 3, 224, 224, device=device),
                "labels": torch.randint(0, 1000, (b,), device=device),
            }
        ids = torch.randint(0, config.vocab_size, (b, shape["seq"]), device=device)
        if task == "seq2seq":
            return {
                "input_ids": ids,
                "labels": torch.randint(0, config.vocab_size, (b, shape["target"]), device=device),
            }
        return {"input_ids": ids, "labels": ids}

    return model, batch, task


def small_gpt() -> tuple[Any, Batch, Callable[[Any, dict[str, Any]], Any]]:
    """examples/train_small_gpt.py's model and loss (byte-level GPT, width 768, 8 layers, batch 16 x 512)."""
    import torch
    import torch.nn.functional as F
    from train_small_gpt import SmallGpt

    torch.manual_seed(0)
    model = SmallGpt(256, 768, 12, 8, 512).cuda().train()

    def batch() -> dict[str, Any]:
        x = torch.randint(0, 256, (16, 513), device="cuda")
        return {"x": x[:, :-1], "y": x[:, 1:]}

    def loss(m: Any, b: dict[str, Any]) -> Any:
        return F.cross_entropy(m(b["x"]).float().view(-1, 256), b["y"].reshape(-1))

    return model, batch, loss


def trainer(
    model: Any, batch: Batch, loss_of: Callable[[Any, dict[str, Any]], Any] | None = None, params: Any = None
) -> Callable[[], None]:
    """One full training step: forward and loss under bf16 autocast, backward, fused AdamW, zero grads.
    ``params``: the module whose parameters the optimizer updates (default ``model``; the plain model where
    ``model`` is its compiled form)."""
    import torch

    opt = torch.optim.AdamW((params if params is not None else model).parameters(), lr=1e-4, fused=True)
    batches = [batch() for _ in range(4)]
    k = [0]

    def step() -> None:
        b = batches[k[0] % len(batches)]
        k[0] += 1
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**b).loss if loss_of is None else loss_of(model, b)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


WARMUP, PROFILED, TIMED, CONTROLLED = 3, 5, 8, 8
SWITCH_STEPS = 30
SWITCH_FIELDS = (
    "steps",
    "issued",
    "missed",
    "late",
    "late_fraction",
    "issue_error",
    "switch_error",
    "step_time_s",
    "excluded",
    "pace",
    "points",
)
SEGMENT_S = 0.012
"""Switch test: segments of at least this long (two switching latencies of the H200) alternate configurations."""

WATCH_EVERY = 1
"""Points at every ``WATCH_EVERY``-th layer where layers are watched (``clk.watch(model, every=...)``; ``--every``)."""


def profile(step: Callable[[], None], out: Path, model: Any = None) -> None:
    """The deployment's profile of the step, as ``rlclock apply --save`` takes it (an all-auto schedule: the
    controller issues nothing; dry run): warm-up, profiled and timed steps, then controlled ones. With
    ``model``, points at every ``WATCH_EVERY``-th layer (``clk.watch``) are located in the timeline too."""
    import rlclock.deploy
    from rlclock.schedule import AUTO, ClockSchedule

    def all_auto(trace: Any, auto_time_s: Any, latency_s: float) -> ClockSchedule:
        return ClockSchedule.constant(AUTO, len(trace), name="auto")

    with rlclock.deploy.clocked(
        all_auto,
        save=str(out),
        report=str(out / "report.json"),
        warmup_steps=WARMUP,
        profile_steps=PROFILED,
        timing_steps=TIMED,
        verbose=False,
    ) as clk:
        remove = clk.watch(model, every=WATCH_EVERY) if model is not None else None
        for _ in range(WARMUP + PROFILED + TIMED + CONTROLLED):
            with clk.step():
                step()
        if remove is not None:
            remove()


def profiled(
    step: Callable[[], None], folder: Path, model: Any = None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """:func:`profile` into ``folder``, and what it wrote: the trace, the timeline and the all-auto report."""
    folder.mkdir(parents=True, exist_ok=True)
    profile(step, folder, model)
    trace, timeline, report = (
        json.loads((folder / f).read_text()) for f in ("step.trace.json", "step.timeline.json", "report.json")
    )
    return trace, timeline, report


def alternating(timeline: Any, segment_s: float) -> Any:
    """A schedule that switches between auto and a lower core clock (1500 MHz, the memory clock left as it is, so it
    runs on any GPU) every ``segment_s`` of the timeline."""
    import numpy as np

    from rlclock.schedule import ClockSchedule

    index = (np.asarray(timeline.start_s) // segment_s).astype(int) % 2
    return ClockSchedule(["auto", "1500"], index.tolist(), name="switch-test")


def switching(
    step: Callable[[], None],
    out: Path,
    follow_pace: bool = False,
    report: str = "switch_report.json",
    kernel_times: bool = False,
    model: Any = None,
) -> dict[str, Any]:
    """The controller timing the switches of :func:`alternating` in the running loop, on the profiled
    (fitted) timeline, stretched to the running steps' pace or not (``follow_pace``); dry run — nothing is
    set. Its report goes to ``out/report``. With ``kernel_times`` the steps also run under a profile of CUDA
    activity alone, a marker kernel at each mark, and each switch is judged against the GPU start of its
    segment's first kernel (:func:`judged_on_kernels`: the report's ``kernel_judged``). With ``model`` the
    loop marks the timeline's points at every ``WATCH_EVERY``-th layer (``clk.watch``) and the controller
    re-times from them."""
    import torch

    import rlclock.deploy
    from rlclock.deploy.timeline import StepTimeline
    from rlclock.workload.torch_profile import export_chrome

    timeline = StepTimeline.load(out / "step.timeline.json")
    schedule = alternating(timeline, SEGMENT_S)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) if kernel_times else None
    with rlclock.deploy.clocked(
        schedule,
        timeline=timeline,
        report=str(out / report),
        verbose=False,
        time_all_steps=True,
        follow_pace=follow_pace,
    ) as clk:
        remove = clk.watch(model, every=WATCH_EVERY) if model is not None else None
        if prof is not None:
            prof.__enter__()
        for _ in range(SWITCH_STEPS):
            with clk.step():
                if prof is not None:
                    torch.cuda._sleep(1)  # the marker: right behind the mark's event on the stream
                step()
        if prof is not None:
            torch.cuda.synchronize()
            prof.__exit__(None, None, None)
        if remove is not None:
            remove()
    assert clk.report is not None and clk.controller is not None
    rep = clk.report.as_dict()
    if prof is not None:
        rep["kernel_judged"] = judged_on_kernels(export_chrome(prof), clk.controller, timeline)
        (out / report).write_text(json.dumps(rep, indent=1, default=str))
    return rep


def judged_on_kernels(data: dict[str, Any], ctl: Any, timeline: Any) -> dict[str, Any]:
    """Each issued switch against the GPU start of its segment's first kernel in its own step.

    A step's activities are those between two markers in GPU order (``rlclock.deploy.capture.marked_steps``);
    a step whose activities are not the timeline's (other names, count or order) is left out. GPU times map to
    the anchors' clock through the step's marker: the kernel's start after the marker's end, added to the step's
    anchor (``time.monotonic()``). Error = issued − (kernel start − lookahead); late = the switch would land
    (issued + latency) after the kernel started.
    """
    import numpy as np

    from rlclock.deploy.capture import marked_steps

    names = tuple(timeline.names)
    steps = [
        (anchor, [a[0] for a in body]) if tuple(a[2] for a in body) == names else None
        for anchor, body in marked_steps(data)
    ]
    steps = steps[max(0, len(steps) - ctl.steps) :]  # the controller's step 0 is the first step it marked
    plan, log = ctl.plan, ctl.anchor_log
    anchors = dict(zip(log.step, log.final_anchors_s(), strict=True))
    errors, late, skipped = [], 0, 0
    for status, k, event, _planned, issued, _call, _est in ctl.worker_result.get("records", []):
        if status != "switch":
            continue
        first = plan.segments[plan.events[int(event)].segment].first_kernel
        got = steps[k] if 0 <= k < len(steps) else None
        if got is None or k not in anchors:
            skipped += 1
            continue
        start = anchors[k] + (got[1][first] - got[0]) * 1e-6
        errors.append(issued - (start - plan.lead_s))
        late += int(issued + plan.latency_s > start)
    a = np.abs(np.array(errors)) if errors else np.array([np.nan])
    return {
        "judged": len(errors),
        "skipped": skipped,
        "steps_matched": sum(s is not None for s in steps),
        "steps": len(steps),
        "median_s": float(np.median(errors)) if errors else None,
        "p95_abs_s": float(np.percentile(a, 95)) if errors else None,
        "late": late,
        "late_fraction": late / len(errors) if errors else None,
    }


def bare(step: Callable[[], None], windows: int, window_s: float) -> dict[str, Any]:
    """Per-step GPU time (CUDA events) and energy (NVML counter over whole windows) of the bare step."""
    import torch

    from rlclock.gpu.nvml import NvmlDevice

    dev = NvmlDevice(torch.cuda.current_device())
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times: list[float] = []
    per_window: list[dict[str, float]] = []
    for _ in range(windows):
        e0, t0 = dev.total_energy_j(), time.perf_counter()
        clocks, powers, n = [], [], 0
        while time.perf_counter() - t0 < window_s or n < 3:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
            clocks.append(dev.sm_clock_mhz())
            powers.append(dev.power_w())
            n += 1
        wall = time.perf_counter() - t0
        energy = dev.total_energy_j() - e0
        per_window.append(
            {
                "steps": n,
                "wall_s": wall,
                "energy_j": energy,
                "energy_j_per_step": energy / n,
                "power_w": energy / wall,
                "sm_clock_mhz_median": statistics.median(clocks),
                "power_w_read_median": statistics.median(powers),
            }
        )
    return {
        "step_time_s_median": statistics.median(times),
        "step_time_s_p10": _pct(times, 10),
        "step_time_s_p90": _pct(times, 90),
        "steps": len(times),
        "energy_j_per_step": sum(w["energy_j"] for w in per_window) / sum(w["steps"] for w in per_window),
        "windows": per_window,
    }


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


COMPILE_MODES = ("eager", "default", "reduce-overhead")
"""``--compile``: the plain step, or ``torch.compile`` in its default mode or with CUDA graphs."""


def compiled(
    make: Callable[[], tuple[Any, Batch, Any, str, Any, dict[str, Any]]], mode: str
) -> tuple[Any, Callable[[], None], str, Any, dict[str, Any]]:
    """``make()``'s model, step, task, config and shape, the model compiled in ``mode`` (``eager``: as it is). The
    first step, which compiles, is run and timed here (``shape["compile_s"]``)."""
    import torch

    model, batch, loss_of, task, config, shape = make()
    if mode == "eager":
        return model, trainer(model, batch, loss_of), task, config, shape
    shape = {**shape, "compile": mode}
    fast = torch.compile(model, mode=None if mode == "default" else mode)
    model_step = trainer(fast, batch, loss_of, params=model)
    t0 = time.perf_counter()
    model_step()
    torch.cuda.synchronize()
    shape["compile_s"] = round(time.perf_counter() - t0, 1)
    return model, model_step, task, config, shape


def record(
    name: str,
    task: str,
    model: Any,
    shape: dict[str, Any],
    config: Any,
    step: Callable[[], None],
    out: Path,
    windows: int,
    window_s: float,
) -> dict[str, Any]:
    import torch
    import transformers

    folder = out / name
    started = time.perf_counter()
    trace, timeline, report = profiled(step, folder)
    switches = switching(step, folder)
    measured = bare(step, windows, window_s)
    summary = {
        "model": name,
        "task": task,
        "parameters": sum(p.numel() for p in model.parameters()),
        "shape": shape,
        "config": config.to_dict() if hasattr(config, "to_dict") else config,
        "kernels": len(trace["kernels"]),
        "profiled_period_s": trace["meta"].get("profiled_period_s"),
        "timeline_period_s": timeline.get("period_s"),
        "running_step_s": report.get("step_time_s"),
        "switch_test": {k: switches.get(k) for k in SWITCH_FIELDS},
        "bare": measured,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "how": "random init, random data; full step (forward, loss, backward, fused AdamW) under bf16 autocast; "
        "profile through rlclock.deploy.clocked (dry run, all-auto schedule); bare step timed with CUDA "
        "events, energy from NVML's counter over whole windows; dry run, nothing set",
        "wall_s": time.perf_counter() - started,
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def timing_only(
    name: str, step: Callable[[], None], out: Path, kernel_times: bool = False, model: Any = None
) -> dict[str, Any]:
    """The deployment's profile and timeline, then the switch test twice — on the timeline as profiled and
    stretched to the running pace, or (with ``model``) from the step's anchors alone and re-timed from points
    at the watched layers too — judged on the kernels' own GPU times too with ``kernel_times``; without the cost
    measurements; ``out/<name>/timing.json``."""
    import gzip
    import shutil

    folder = out / name
    started = time.perf_counter()
    trace, timeline, report = profiled(step, folder, model)
    runs = {}
    variants = (
        (("profiled", False, None), ("paced", True, None))
        if model is None
        else (("profiled", False, None), ("points", False, model))
    )
    for label, pace, watched in variants:
        sw = switching(
            step, folder, follow_pace=pace, report=f"switch_{label}.json", kernel_times=kernel_times, model=watched
        )
        runs[label] = {k: sw.get(k) for k in (*SWITCH_FIELDS, "kernel_judged")}
    summary = {
        "model": name,
        "kernels": len(trace["kernels"]),
        "profiled_period_s": trace["meta"].get("profiled_period_s"),
        "step_period_s": trace["meta"].get("step_period_s"),
        "timeline_period_s": timeline.get("period_s"),
        "running_step_s": report.get("step_time_s"),
        "switch_test": runs,
        "points": len(timeline.get("points", [])),
        "every": WATCH_EVERY,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "wall_s": time.perf_counter() - started,
    }
    (folder / "timing.json").write_text(json.dumps(summary, indent=1, default=str))
    with open(folder / "step.timeline.json", "rb") as src, gzip.open(folder / "step.timeline.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    for f in ("step.trace.json", "step.timeline.json", "step.schedule.json"):
        (folder / f).unlink(missing_ok=True)
    return summary


def points_overhead(
    name: str, step: Callable[[], None], out: Path, model: Any, rounds: int = 8, block: int = 5
) -> dict[str, Any]:
    """What points at the watched layers cost the running loop: the deployment's profile with points, then one
    controlled dry run of the switch test in which blocks of ``block`` steps with the hooks (``clk.watch``) and
    without them alternate, ``rounds`` times, the order reversed every other round; the step period is the GPU
    time between CUDA events recorded at consecutive step starts (nothing synchronises, so a host-bound loop
    shows the hooks' host time)."""
    import torch

    import rlclock.deploy
    from rlclock.deploy.timeline import StepTimeline

    folder = out / name
    profiled(step, folder, model)
    timeline = StepTimeline.load(folder / "step.timeline.json")
    marks: list[tuple[str, Any]] = []
    with rlclock.deploy.clocked(alternating(timeline, SEGMENT_S), timeline=timeline, verbose=False) as clk:
        for r in range(rounds):
            for on in (True, False) if r % 2 == 0 else (False, True):
                remove = clk.watch(model, every=WATCH_EVERY) if on else None
                for _ in range(block):
                    ev = torch.cuda.Event(enable_timing=True)
                    ev.record()
                    marks.append(("points" if on else "none", ev))
                    with clk.step():
                        step()
                if remove is not None:
                    remove()
        torch.cuda.synchronize()
    periods: dict[str, list[float]] = {"points": [], "none": []}
    for (label, a), (_, b) in itertools.pairwise(marks):
        periods[label].append(a.elapsed_time(b) * 1e-3)
    med = {k: statistics.median(v[1:]) for k, v in periods.items()}
    return {
        "model": name,
        "points": len(timeline.points),
        "every": WATCH_EVERY,
        "median_step_s": med,
        "overhead": med["points"] / med["none"] - 1,
        "steps": {k: len(v) for k, v in periods.items()},
    }


def _kernel_judged(k: dict[str, Any] | None) -> str:
    if not k or not k.get("judged"):
        return ""
    return (
        f"; on the kernels' GPU times ({k['judged']} judged, {k['steps_matched']} of {k['steps']} steps "
        f"matched): p95 {1e3 * k['p95_abs_s']:.2f} ms, late {k['late']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder to write the corpus to")
    parser.add_argument("--only", default="", help="models whose name contains this (or one of these, comma-separated)")
    parser.add_argument(
        "--set",
        choices=sorted(MODEL_SETS),
        default="corpus",
        help="corpus: the models the cost rules were fitted to, with examples/train_small_gpt.py's "
        "(default); heldout: architectures they never saw",
    )
    parser.add_argument("--windows", type=int, default=3, help="energy windows per model (default 3)")
    parser.add_argument("--window-s", type=float, default=2.0, help="seconds per window, at least (default 2)")
    parser.add_argument(
        "--compile",
        default="eager",
        metavar="MODES",
        help="comma-separated: eager (the plain step, default), default and reduce-overhead "
        "(torch.compile in that mode); each model is trained once per mode, in OUT/<model>+<mode>",
    )
    parser.add_argument(
        "--every",
        type=int,
        default=1,
        help="with --watch or --points-overhead: a point at every K-th layer only (default 1)",
    )
    for flag, text in (
        ("--pack", "also write OUT/corpus.tar.gz"),
        (
            "--timing-only",
            "only the profile, the timeline and the switch test on the timeline as profiled and "
            "stretched to the running pace (OUT/<model>/timing.json); no cost measurements",
        ),
        (
            "--kernel-times",
            "with --timing-only: run the switch tests under a CUDA-activity profile and judge "
            "each switch against its kernels' own GPU start",
        ),
        (
            "--watch",
            "with --timing-only: points at every layer, or every --every-th (clk.watch); the second "
            "switch test re-times from them instead of following the pace",
        ),
        (
            "--points-overhead",
            "only what points at the watched layers cost the running loop (blocks with and "
            "without the hooks, alternating, in one controlled dry run)",
        ),
    ):
        parser.add_argument(flag, action="store_true", help=text)
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every takes a whole number of layers >= 1, found {args.every}")
    if args.every > 1 and not (args.watch or args.points_overhead):
        parser.error("--every applies to the points of --watch or --points-overhead; give one of them")
    global WATCH_EVERY
    WATCH_EVERY = args.every
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    summaries: dict[str, Any] = {}
    models: list[tuple[str, Callable[[], tuple[Any, Batch, Any, str, Any, dict[str, Any]]]]] = []
    for name, (config, shape) in MODEL_SETS[args.set]().items():

        def make(name=name, config=config, shape=shape):
            model, batch, task = build(name, config, shape)
            return model, batch, None, task, config, shape

        models.append((name, make))

    def make_small():
        model, batch, loss = small_gpt()
        return model, batch, loss, "causal-lm", {"width": 768, "layers": 8, "heads": 12}, {"batch": 16, "seq": 512}

    if args.set == "corpus":
        models.append(("train-small-gpt", make_small))
    modes = [m for m in args.compile.split(",") if m]
    unknown = sorted(set(modes) - set(COMPILE_MODES))
    if unknown:
        parser.error(f"--compile takes {', '.join(COMPILE_MODES)} (comma-separated), found {', '.join(unknown)}")
    entries = [
        (
            name if mode == "eager" and args.compile == "eager" else f"{name}+{mode}",
            lambda make=make, mode=mode: compiled(make, mode),
        )
        for name, make in models
        for mode in modes
    ]
    for name, make in entries:
        if not any(part in name for part in args.only.split(",")):
            continue
        print(f"=== {name}", flush=True)
        try:
            model, step, task, config, shape = make()
            if args.points_overhead:
                summaries[name] = o = points_overhead(name, step, args.out, model)
                print(
                    f"{name}: {o['points']} points per step; median step {1e3 * o['median_step_s']['none']:.2f} ms "
                    f"without them, {1e3 * o['median_step_s']['points']:.2f} ms with them "
                    f"({100 * o['overhead']:+.2f} %)",
                    flush=True,
                )
                continue
            if args.timing_only:
                t = timing_only(name, step, args.out, args.kernel_times, model if args.watch else None)
                for label, sw in t["switch_test"].items():
                    print(
                        f"{name} ({label}): timeline {1e3 * t['timeline_period_s']:.1f} ms, running "
                        f"{1e3 * (t['running_step_s'] or float('nan')):.1f} ms, switch test step "
                        f"{1e3 * sw['step_time_s']:.1f} ms, pace x{sw['pace']:.3f}, points {sw.get('points', 0)}, "
                        f"{sw['issued']} issued, "
                        f"issue p95 {1e3 * sw['issue_error']['p95_abs_s']:.2f} ms, switch p95 "
                        f"{1e3 * sw['switch_error']['p95_abs_s']:.2f} ms, late {sw['late']}"
                        + _kernel_judged(sw.get("kernel_judged")),
                        flush=True,
                    )
                summaries[name] = t
                continue
            s = record(name, task, model, shape, config, step, args.out, args.windows, args.window_s)
            b = s["bare"]
            sw = s["switch_test"]
            print(
                f"{name}: {s['parameters'] / 1e6:.0f} M parameters, {s['kernels']} kernels, profiled period "
                f"{1e3 * (s['profiled_period_s'] or float('nan')):.1f} ms, timeline "
                f"{1e3 * s['timeline_period_s']:.1f} ms, running "
                f"{1e3 * (s['running_step_s'] or float('nan')):.1f} ms, bare step "
                f"{1e3 * b['step_time_s_median']:.1f} ms, {b['energy_j_per_step']:.1f} J per step; switch test: "
                f"{sw['issued']} issued, {sw['missed']} missed, late {sw['late']}, switch error p95 "
                f"{1e3 * sw['switch_error']['p95_abs_s']:.2f} ms, step {1e3 * sw['step_time_s']:.1f} ms",
                flush=True,
            )
            summaries[name] = s
        except Exception as exc:  # one model's failure is reported; the others still run
            traceback.print_exc()
            summaries[name] = {"model": name, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            model = step = None
            torch.cuda.empty_cache()
    (args.out / "corpus.json").write_text(json.dumps(summaries, indent=1, default=str))
    if args.pack:
        with tarfile.open(args.out / "corpus.tar.gz", "w:gz") as tar:
            for path in sorted(args.out.rglob("*")):
                if path.is_file() and path.name != "corpus.tar.gz":
                    tar.add(path, arcname=str(path.relative_to(args.out)))
    return 0 if all("error" not in s for s in summaries.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
