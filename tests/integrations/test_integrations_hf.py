"""The Hugging Face Trainer callback against the real ``transformers`` Trainer, on a CPU: a dry run without NVML
(schedule and timeline given) whose steps are the Trainer's optimizer steps, with gradient accumulation and
max_steps; a failure inside ``train()`` closes the deployment and restores the clocks of a (fake) GPU;
``rlclock apply``'s environment overrides the callback's options."""

from __future__ import annotations

import json

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from rlclock.deploy.settings import DeploySettings  # noqa: E402
from rlclock.errors import DeployError  # noqa: E402
from rlclock.integrations.hf import RlclockTrainerCallback  # noqa: E402

VOCAB, SEQ = 64, 16


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
    )
    return transformers.LlamaForCausalLM(config)


class Tokens(torch.utils.data.Dataset):
    """``n`` random token sequences (input ids = labels)."""

    def __init__(self, n: int) -> None:
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def trainer(tmp_path, callback, samples: int = 20, model=None, **args) -> transformers.Trainer:
    args = {"per_device_train_batch_size": 2, "num_train_epochs": 1, **args}
    targs = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        **args,
    )
    return transformers.Trainer(
        model=model or tiny_model(), args=targs, train_dataset=Tokens(samples), callbacks=[callback]
    )


@pytest.mark.parametrize(
    "args, optimizer_steps",
    [
        ({"gradient_accumulation_steps": 3, "num_train_epochs": 2}, 8),  # 10 batches an epoch: 3 + 3 + 3 + 1
        ({"gradient_accumulation_steps": 2, "max_steps": 3}, 3),
        ({"max_steps": 4}, 4),
    ],
)
def test_a_step_is_an_optimizer_step(no_nvml, plan_options, tmp_path, args, optimizer_steps):
    report = tmp_path / "report.json"
    cb = RlclockTrainerCallback(**plan_options, report=report)
    opt_steps = []
    t = trainer(tmp_path, cb, **args)
    t.add_callback(
        type(
            "Spy",
            (transformers.TrainerCallback,),
            {"on_optimizer_step": lambda self, *a, **k: opt_steps.append(cb.steps)},
        )
    )
    t.train()
    assert t.state.global_step == optimizer_steps == len(opt_steps) == cb.steps
    assert opt_steps == list(range(1, optimizer_steps + 1))  # each optimizer step inside its own marked step
    assert cb.clocked.state == "closed" and not cb.session.active
    rep = cb.report
    assert rep is not None and rep.mode == "plan-only" and rep.steps == optimizer_steps == rep.anchored
    assert json.loads(report.read_text())["steps"] == optimizer_steps


class Failing(torch.nn.Module):
    """A model whose forward raises on its ``fail_at``-th call."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.inner = tiny_model()
        self.calls = 0
        self.fail_at = fail_at

    def forward(self, input_ids, labels=None):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("boom in the middle of training")
        return self.inner(input_ids=input_ids, labels=labels)


def test_a_failure_in_train_closes_the_deployment_and_restores_the_clocks(fake_gpu, plan_options, tmp_path):
    cb = RlclockTrainerCallback(**{**plan_options, "control_clocks": True})
    t = trainer(tmp_path, cb, model=Failing(fail_at=5), gradient_accumulation_steps=2, max_steps=10)
    with pytest.raises(RuntimeError, match="boom"), cb:
        t.train()
    assert cb.clocked.state == "closed" and cb.steps == 3  # steps 1 and 2 done, the 5th forward in the 3rd
    rep = cb.report
    assert rep is not None and rep.mode == "live" and rep.steps == 3
    d = fake_gpu()["devices"][0]
    assert any(c["fn"].startswith("nvmlDeviceSetGpuLockedClocks") for c in fake_gpu()["calls"])  # they were set
    assert d["locked_core"] is None and d["locked_mem"] is None  # and are restored


def test_without_a_with_block_the_next_train_or_the_exit_closes_it(no_nvml, plan_options, tmp_path, capsys):
    cb = RlclockTrainerCallback(**{**plan_options, "verbose": True})
    model = Failing(fail_at=3)
    t = trainer(tmp_path, cb, model=model, max_steps=6)
    with pytest.raises(RuntimeError, match="boom"):
        t.train()
    assert cb.session.active and cb.report is None  # no Trainer event said that training failed
    first = cb.clocked
    model.fail_at = 0
    t.train()  # the next on_train_begin closes the stale deployment before opening its own
    assert first.state == "closed" and first.report is not None and first.report.steps == 3
    assert cb.clocked is not first and cb.report.steps == 6
    assert "training began again before the last run was closed" in capsys.readouterr().err
    model.calls, model.fail_at = 0, 2
    with pytest.raises(RuntimeError, match="boom"):
        t.train()
    cb.session._close_at_exit()  # what the interpreter's exit runs (atexit)
    assert not cb.session.active and cb.report.steps == 2
    assert "the interpreter is exiting after 2 optimizer steps" in capsys.readouterr().err


def test_rlclock_apply_overrides_the_callbacks_options(no_nvml, plan, tmp_path, monkeypatch):
    schedule, timeline = plan
    schedule.save(tmp_path / "s.json")
    timeline.save(tmp_path / "t.json")
    env = DeploySettings(
        schedule=str(tmp_path / "s.json"),
        timeline=str(tmp_path / "t.json"),
        latency_s=0.006,
        worker="thread",
        verbose=False,
        report=str(tmp_path / "apply.json"),
    ).to_env()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cb = RlclockTrainerCallback(checkpoint="gpt3xl-h200", latency_s=0.5, worker="process")
    trainer(tmp_path, cb, max_steps=3).train()
    s = cb.clocked.settings
    assert s.checkpoint is None and s.latency_s == 0.006 and s.worker == "thread"
    assert cb.clocked.schedule.to_dict() == schedule.to_dict()
    assert json.loads((tmp_path / "apply.json").read_text())["steps"] == 3


def test_without_a_gpu_and_a_plan_the_training_runs_unchanged(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    cb = RlclockTrainerCallback(lambda trace, t, lat: None)
    t = trainer(tmp_path, cb, max_steps=2)
    t.train()
    assert t.state.global_step == 2 and cb.steps == 2 and cb.report is None
    assert cb.clocked.state == "closed" and "no CUDA GPU" in cb.clocked.reason
    assert "no CUDA GPU" in capsys.readouterr().err


def test_watch_marks_the_layers_and_unhooks_them(no_nvml, plan_options, tmp_path):
    from rlclock.deploy.timeline import StepTimeline

    tl = plan_options["timeline"]
    timeline = StepTimeline(tl.start_s, tl.duration_s, tl.period_s, points=(5, 10, 25, 30))  # 2 layers, fwd and bwd
    cb = RlclockTrainerCallback(**{**plan_options, "timeline": timeline}, watch=True)
    model = tiny_model()
    layers = model.model.layers
    trainer(tmp_path, cb, model=model, max_steps=2).train()
    points = [(s, j) for s, j, _ in cb.clocked.controller.anchor_log.points]
    assert cb.report.steps == 2 and points == [(s, j) for s in range(2) for j in range(4)]
    assert all(not layer._forward_pre_hooks and not layer._forward_hooks for layer in layers)  # unhooked


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"latency": 0.006}, "unknown option"),
        ({"watch": 0}, "watch"),
        ({"watch": "yes"}, "watch"),
    ],
)
def test_bad_arguments_fail_when_the_callback_is_made(kwargs, match):
    with pytest.raises(DeployError, match=match):
        RlclockTrainerCallback(**kwargs)
