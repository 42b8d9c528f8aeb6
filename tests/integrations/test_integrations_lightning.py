"""The Lightning callback against the real Lightning Trainer (``lightning.pytorch`` and ``pytorch_lightning``), on
a CPU: a dry run without NVML (schedule and timeline given) whose steps are Lightning's optimizer steps, with
gradient accumulation (also over an epoch's last, shorter, accumulation and a scheduled change of it), max_steps
and manual optimization; an exception in the middle of ``fit()`` closes the deployment and restores the clocks
of a (fake) GPU; two ranks under ``ddp_fork`` each apply rank 0's plan."""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from rlclock.integrations.lightning import RlclockLightningCallback  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec:FutureWarning"),  # Lightning's, under a newer torch
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
]


class RegressionSteps:
    """A two-layer model on random data; its training step takes at least ``batch_s`` seconds and raises at the
    ``fail_at``-th batch (0: never). Mixed into the LightningModule of either package."""

    def __init__(self, fail_at: int = 0, batch_s: float = 0.0) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)])
        self.fail_at = fail_at
        self.batch_s = batch_s
        self.batches = 0

    def training_step(self, batch, batch_idx):
        self.batches += 1
        time.sleep(self.batch_s)
        if self.batches == self.fail_at:
            raise RuntimeError("boom in the middle of training")
        x, y = batch
        return torch.nn.functional.mse_loss(self.layers[1](torch.relu(self.layers[0](x))), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Regression(RegressionSteps, pl.LightningModule):
    pass


class Manual(Regression):
    """Manual optimization: the step steps the optimizer itself."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        loss = super().training_step(batch, batch_idx)
        self.manual_backward(loss)
        opt.step()
        return loss


def loader(batches: int = 10) -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(batches * 2, 4, generator=g), torch.randn(batches * 2, 1, generator=g)
    )
    return torch.utils.data.DataLoader(data, batch_size=2)


def make_trainer(package, callback, **kwargs):
    args = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "max_epochs": 1,
        **kwargs,
    }
    return package.Trainer(callbacks=[callback, *args.pop("more_callbacks", [])], **args)


class OptimizerSteps(pl.Callback):
    """Counts the optimizer steps Lightning takes, and the marked steps of the rlclock callback at each."""

    def __init__(self, clock: RlclockLightningCallback) -> None:
        self.clock = clock
        self.seen: list[int] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.seen.append(self.clock.steps)


@pytest.mark.parametrize(
    "kwargs, optimizer_steps",
    [
        ({"accumulate_grad_batches": 3, "max_epochs": 2}, 8),  # 10 batches an epoch: 3 + 3 + 3 + 1, twice
        ({"accumulate_grad_batches": 2, "max_steps": 3}, 3),
        ({"max_steps": 4}, 4),
        ({"more_callbacks": [pl.callbacks.GradientAccumulationScheduler({0: 4, 1: 2})], "max_epochs": 2}, 3 + 5),
    ],
)
def test_a_step_is_an_optimizer_step(no_nvml, plan_options, tmp_path, kwargs, optimizer_steps):
    report = tmp_path / "report.json"
    cb = RlclockLightningCallback(**plan_options, report=report)
    spy = OptimizerSteps(cb)
    kwargs = {**kwargs, "more_callbacks": [*kwargs.get("more_callbacks", []), spy]}
    trainer = make_trainer(pl, cb, **kwargs)
    trainer.fit(Regression(), loader())
    assert trainer.global_step == optimizer_steps == cb.steps
    assert spy.seen == list(range(1, optimizer_steps + 1))  # each optimizer step inside its own marked step
    assert cb.clocked.state == "closed" and cb.report is not None and cb.report.mode == "plan-only"
    assert cb.report.steps == optimizer_steps == cb.report.anchored == json.loads(report.read_text())["steps"]


def test_manual_optimization_marks_every_batch(no_nvml, plan_options):
    cb = RlclockLightningCallback(**plan_options)
    trainer = make_trainer(pl, cb, max_steps=5)
    trainer.fit(Manual(), loader())
    assert trainer.global_step == 5 == cb.steps == cb.report.steps


@pytest.mark.parametrize(
    "batch_idx, every, automatic, begins",
    [
        (0, 1, True, True),
        (1, 1, True, True),
        (0, 4, True, True),
        (3, 4, True, False),
        (4, 4, True, True),
        (6, 3, True, True),
        (7, 3, True, False),
        (3, 4, False, True),
    ],
)
def test_which_batch_begins_a_step(batch_idx, every, automatic, begins):
    trainer = type("T", (), {"accumulate_grad_batches": every})()
    module = type("M", (), {"automatic_optimization": automatic})()
    assert RlclockLightningCallback.begins_step(trainer, module, batch_idx) is begins


@pytest.mark.parametrize("package_name", ["lightning.pytorch", "pytorch_lightning"])
def test_an_exception_in_fit_closes_the_deployment_and_restores_the_clocks(fake_gpu, plan_options, package_name):
    package = pytest.importorskip(package_name)
    cb = RlclockLightningCallback(**{**plan_options, "control_clocks": True})
    trainer = make_trainer(package, cb, accumulate_grad_batches=2, max_steps=10)

    # a step of two batches of 10 ms: about the plan's 40 ms step less the switches' lead, so that they are issued
    module = type("Failing", (RegressionSteps, package.LightningModule), {})(fail_at=6, batch_s=0.01)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(module, loader())
    assert cb.clocked.state == "closed" and cb.steps == 3  # steps 1 and 2 done, the 6th batch in the 3rd
    assert cb.report is not None and cb.report.mode == "live" and cb.report.steps == 3
    state = fake_gpu()
    assert any(c["fn"].startswith("nvmlDeviceSetGpuLockedClocks") for c in state["calls"])  # they were set
    d = state["devices"][0]
    assert d["locked_core"] is None and d["locked_mem"] is None  # and are restored


def test_a_profile_based_deployment_on_a_cpu_says_it_is_inactive(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    cb = RlclockLightningCallback(checkpoint="gpt3xl-h200")
    trainer = make_trainer(pl, cb, max_steps=2)
    trainer.fit(Regression(), loader())
    assert cb.steps == 2 and cb.report is None and "no CUDA GPU" in cb.clocked.reason
    assert "no CUDA GPU" in capsys.readouterr().err


def test_two_ranks_under_ddp_fork_each_apply_rank_0s_plan(no_nvml, plan_options, tmp_path):
    """Two gloo ranks on a CPU: each rank's callback opens the deployment and applies the plan rank 0 sends (rank
    1 is given another one, which it must not apply), and each writes its own report."""
    from rlclock.schedule import ClockSchedule

    report = tmp_path / "report.json"
    cb = RlclockLightningCallback(**plan_options, report=report)

    class OtherPlanOnRank1(pl.Callback):
        def setup(self, trainer, pl_module, stage):
            if trainer.global_rank == 1:
                cb.session._schedule = ClockSchedule.constant("1410@3201", 40)

    trainer = make_trainer(
        pl,
        cb,
        devices=2,
        strategy="ddp_fork",
        accumulate_grad_batches=2,
        max_steps=3,
        more_callbacks=[OtherPlanOnRank1()],
    )
    trainer.fit(Regression(), loader())
    reports = sorted(p.name for p in tmp_path.glob("report*.json"))
    assert reports == ["report.rank0.json", "report.rank1.json"]
    rank0, rank1 = (json.loads((tmp_path / name).read_text()) for name in reports)
    for data in (rank0, rank1):
        assert data["steps"] == 3 and data["mode"] == "plan-only"
    assert [seg[2] for seg in rank1["plan"]["segments"]] == ["1980@3201", "1410@3201"] * 2  # rank 0's plan
    assert rank1["plan"] == rank0["plan"]
