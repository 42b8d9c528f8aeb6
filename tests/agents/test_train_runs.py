"""Run folders never clash and always end in a known state — also on SIGINT and SIGTERM, sent for real."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from rlclock.agents.runs import create_run_folder, folder_part, read_summary, write_summary
from rlclock.errors import SpecError

SMALL = {
    "name": "small",
    "gpu": "rtx3080ti",
    "workload": {"generator": "llmc", "batch": 8, "seq": 512, "hidden": 1024, "heads": 16, "layers": 2},
    "actions": {"core_step_mhz": 210, "core_min_mhz": 630, "mem_mhz": [5001, 9501], "auto": True},
    "observation": {"lookahead": 4},
    "reward": {"budget": 0.01, "time_price": "optimum", "price_spread": 0.5},
}
RECIPE = {
    "timesteps": 400_000,
    "n_envs": 4,
    "ppo": {"n_steps": 128, "batch_size": 256},
    "eval": {"every_steps": 2048},
    "policy": {"net_arch": [16, 16]},
    "imitation": {"iterations": 1, "epochs": 1, "min_updates": 10},
}


def test_run_folders_started_together_never_clash(tmp_path):
    made: list[Path] = []
    threads = [threading.Thread(target=lambda: made.append(create_run_folder(tmp_path, "x", 0))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 8 and len(set(made)) == 8 and all(p.is_dir() for p in made)
    assert folder_part("a/b\\c\n") == "a_b_c" and folder_part("  ") == "run"


def test_a_runs_folder_under_a_file_is_one_clear_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecError, match="is a file or lies under one"):
        create_run_folder(tmp_path / "file" / "runs", "x", 0)


def test_the_summary_is_merged_and_its_status_checked(tmp_path):
    write_summary(tmp_path, status="running", name="x")
    assert write_summary(tmp_path, status="finished", figures={}) == {"status": "finished", "name": "x", "figures": {}}
    with pytest.raises(ValueError):
        write_summary(tmp_path, status="half-done")
    assert read_summary(tmp_path)["status"] == "finished"


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen:
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(SMALL))
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(RECIPE))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlclock",
            "train",
            str(tmp_path / "small.yaml"),
            "--agent",
            str(tmp_path / "agent.yaml"),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--no-progress",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_phase(tmp_path: Path, phase: str, proc: subprocess.Popen, timeout_s: float = 240.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for run in (tmp_path / "runs").glob("*"):
            summary = read_summary(run)
            if summary.get("phase") == phase and (run / "progress.csv").is_file() and phase == "ppo":
                return run
            if summary.get("phase") == phase and phase != "ppo":
                return run
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the run never reached {phase}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_training_saves_the_best_policy_and_resume_continues(tmp_path, sig):
    proc = _start(tmp_path)
    run = _wait_for_phase(tmp_path, "ppo", proc)
    time.sleep(1.0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert signal.Signals(sig).name in err and "--resume" in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["figures"]  # evaluated at least once: the best kept
    meta = json.loads((run / "policy" / "meta.json").read_text())
    assert meta["training"]["status"] == "interrupted" and (run / "sb3_model.zip").is_file()
    if sig == signal.SIGTERM:
        return
    done_at = summary["timesteps"] + 1024
    resumed = subprocess.run(
        [sys.executable, "-m", "rlclock", "train", "--resume", str(run), "--timesteps", str(done_at), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads((run / "summary.json").read_text())
    assert after["status"] == "finished" and after["timesteps"] >= done_at
    assert (run / "progress.2.csv").is_file()  # the first segment's curves are kept


def test_a_second_signal_stops_at_once(tmp_path):
    proc = _start(tmp_path)
    _wait_for_phase(tmp_path, "ppo", proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "at once" in err


def test_a_signal_before_training_begins_leaves_a_marked_folder(tmp_path):
    proc = _start(tmp_path)
    run = None
    deadline = time.monotonic() + 60
    while run is None and time.monotonic() < deadline:
        found = [r for r in (tmp_path / "runs").glob("*") if read_summary(r).get("status") == "running"]
        run = found[0] if found else None
        time.sleep(0.05)
    assert run is not None
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # ended by the interrupt: status 130, or killed by SIGINT itself when Python re-raises it at shut-down
    # (both read as 130 in a shell)
    assert proc.returncode in (130, -signal.SIGINT) and "interrupted" in err + out, (proc.returncode, out, err)
    assert read_summary(run)["status"] == "interrupted", read_summary(run)


# -- killed, resumed, never from a pickle ---------------------------------------------------------------------

IMITATION_ONLY = {**RECIPE, "timesteps": 0, "imitation": {"iterations": 6, "epochs": 1, "min_updates": 200}}


def _train(tmp_path: Path, runs: str, recipe: dict, *extra: str) -> subprocess.Popen:
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(SMALL))
    (tmp_path / f"{runs}.yaml").write_text(yaml.safe_dump(recipe))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlclock",
            "train",
            str(tmp_path / "small.yaml"),
            "--agent",
            str(tmp_path / f"{runs}.yaml"),
            "--runs-dir",
            str(tmp_path / runs),
            "--no-progress",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _resume(run: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlclock", "train", "--resume", str(run), "--no-progress", *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _kill_when(tmp_path: Path, runs: str, proc: subprocess.Popen, ready) -> Path:
    """SIGKILL the run once ``ready(state)`` holds for its state.json."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for path in (tmp_path / runs).glob("*/state.json"):
            try:
                state = json.loads(path.read_text())
            except ValueError:
                continue
            if ready(state):
                proc.kill()
                proc.communicate()
                return path.parent
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the run never got there")


def _weights(run: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(run / "policy" / "policy.safetensors"))


def test_killed_mid_imitation_the_resumed_run_ends_as_one_never_stopped(tmp_path):
    whole = _train(tmp_path, "whole", IMITATION_ONLY)
    assert whole.wait(timeout=600) == 0, whole.communicate()
    run = _kill_when(
        tmp_path,
        "killed",
        _train(tmp_path, "killed", IMITATION_ONLY),
        lambda s: s["phase"] == "imitation" and 2 <= s["imitation_rounds"] < 6,
    )
    assert read_summary(run)["status"] == "running"  # as a kill leaves it
    resumed = _resume(run)
    assert resumed.returncode == 0, resumed.stderr
    assert "was killed" in resumed.stdout and "imitation rounds" in resumed.stdout
    ref = _weights(next((tmp_path / "whole").glob("*")))
    got = _weights(run)
    assert ref.keys() == got.keys() and all((ref[k] == got[k]).all() for k in ref)  # the rounds not yet run, ran
    assert read_summary(run)["status"] == "finished"


def test_killed_mid_ppo_the_run_goes_on_from_its_last_checkpoint_and_counts_both_segments(tmp_path):
    recipe = {**RECIPE, "checkpoint_every": 2}
    run = _kill_when(
        tmp_path, "runs", _train(tmp_path, "runs", recipe), lambda s: s["phase"] == "ppo" and s["timesteps"] >= 4 * 512
    )
    saved = json.loads((run / "state.json").read_text())
    first_wall = max(saved["wall_s"], json.loads((run / "owner.json").read_text())["wall_s"])
    assert (run / "policy" / "meta.json").is_file() and (run / "metrics.csv").is_file()  # kept as it went
    target = saved["timesteps"] + 1024
    resumed = _resume(run, "--timesteps", str(target))
    assert resumed.returncode == 0, resumed.stderr
    summary = read_summary(run)
    assert summary["status"] == "finished" and summary["timesteps"] >= target
    assert summary["wall_s"] >= first_wall
    again = _resume(run, "--timesteps", str(target))  # nothing left to do: said, not redone
    assert again.returncode == 2 and "give --timesteps above" in again.stderr


def test_a_running_run_cannot_be_resumed_beside_itself(tmp_path):
    proc = _train(tmp_path, "runs", RECIPE)
    run = None
    deadline = time.monotonic() + 120
    while run is None and time.monotonic() < deadline:
        found = list((tmp_path / "runs").glob("*/owner.json"))
        run = found[0].parent if found else None
        time.sleep(0.05)
    assert run is not None
    try:
        second = _resume(run)
        assert second.returncode == 2 and "is still running" in second.stderr and "\n" not in second.stderr.strip()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)


@pytest.mark.realtime  # a signal at a set time after the start: run alone, not beside the parallel half
@pytest.mark.parametrize("delay_s", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("ignored", [False, True])
def test_ctrl_c_from_the_first_second_ends_the_run(tmp_path, delay_s, ignored):
    """Sent early — also to a process that inherits SIGINT ignored, as a shell's background job does — Ctrl-C
    ends the run (it is never trained to the end and reported as done)."""
    if ignored and delay_s < 0.5:
        pytest.skip("before the command starts, an inherited SIG_IGN is the parent's choice")
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(SMALL))
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(RECIPE))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlclock",
            "train",
            str(tmp_path / "small.yaml"),
            "--agent",
            str(tmp_path / "agent.yaml"),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None,
    )
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, out, err)
    for run in (tmp_path / "runs").glob("*"):
        assert read_summary(run).get("status") in ("interrupted", None)


def _pickle_bomb(path: Path, marker: Path) -> None:
    """A stable-baselines3 zip whose data run ``touch marker`` when SB3 loads it."""
    import base64
    import os
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
        z.writestr("_stable_baselines3_version", "2.0.0")


def test_the_crafted_payload_runs_when_sb3_loads_it(tmp_path):
    """The bomb the tests below plant is real: stable-baselines3's own loader runs it."""
    from stable_baselines3.common.save_util import load_from_zip_file

    marker = tmp_path / "ran"
    _pickle_bomb(tmp_path / "sb3_model.zip", marker)
    with contextlib.suppress(Exception):  # what happens after the payload ran does not matter
        load_from_zip_file(tmp_path / "sb3_model.zip")
    assert marker.exists()


def test_resume_and_evaluate_never_load_a_pickle_from_the_run_folder(tmp_path):
    run = _kill_when(
        tmp_path, "runs", _train(tmp_path, "runs", RECIPE), lambda s: s["phase"] == "ppo" and s["timesteps"] >= 512
    )
    marker = tmp_path / "ran"
    _pickle_bomb(run / "sb3_model.zip", marker)
    _pickle_bomb(run / "policy" / "sb3_model.zip", marker)
    resumed = _resume(run, "--timesteps", str(json.loads((run / "state.json").read_text())["timesteps"] + 512))
    assert resumed.returncode == 0, resumed.stderr
    _pickle_bomb(run / "sb3_model.zip", marker)  # the run wrote its own at the end: plant it again
    ev = subprocess.run(
        [sys.executable, "-m", "rlclock", "evaluate", str(run), "--out", str(tmp_path / "ev"), "--time-limit", "5"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ev.returncode == 0, ev.stderr
    assert not marker.exists()


def test_a_run_folder_with_only_a_pickle_is_refused_without_opening_it(tmp_path):
    run = tmp_path / "old-run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"envs": [SMALL], "agent": RECIPE}))
    write_summary(run, status="interrupted")
    marker = tmp_path / "ran"
    _pickle_bomb(run / "sb3_model.zip", marker)
    out = _resume(run)
    assert out.returncode == 2 and "no longer loads" in out.stderr and not marker.exists()


def _state(run: Path) -> dict:
    return json.loads((run / "state.json").read_text())


def _with_state(run: Path, change) -> None:
    data = _state(run)
    change(data)
    (run / "state.json").write_text(json.dumps(data))


def _truncate_tensors(run: Path) -> None:
    path = run / _state(run)["tensors"]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _reshape_tensors(run: Path) -> None:
    """Other weights of the same names and sizes, written as the state names them (the digest updated)."""
    import hashlib

    from safetensors.numpy import load_file, save_file

    path = run / _state(run)["tensors"]
    tensors = load_file(str(path))
    name = next(k for k in tensors if k.startswith("policy.") and tensors[k].ndim == 2)
    tensors[name] = tensors[name].T.copy()
    save_file(tensors, str(path))
    _with_state(run, lambda d: d.update(sha256=hashlib.sha256(path.read_bytes()).hexdigest()))


TAMPERED = [
    (lambda r: _with_state(r, lambda d: d.update(timesteps="many")), "'timesteps'"),
    (
        lambda r: (r / "state.json").write_text(
            (r / "state.json").read_text().replace('"wall_s": ', '"wall_s": NaN, "x": ', 1)
        ),
        "NaN",
    ),
    (lambda r: _with_state(r, lambda d: d.update(wall_s=-4.0)), "'wall_s'"),
    (lambda r: _with_state(r, lambda d: d.pop("phase")), "'phase'"),
    (lambda r: _with_state(r, lambda d: d.update(extra=1)), "unknown field"),
    (lambda r: _with_state(r, lambda d: d.update(tensors="../../etc/passwd")), "not a state tensor file"),
    (lambda r: _with_state(r, lambda d: d["ppo_optimizer"][0].update(lr="fast")), "optimiser setting 'lr'"),
    (_truncate_tensors, "SHA-256 differs"),
    (_reshape_tensors, "shape"),
    (lambda r: (r / "state.json").write_text("{"), "cannot read training state"),
]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    """A run killed after its first PPO checkpoint (copied for each case)."""
    tmp_path = tmp_path_factory.mktemp("saved")
    return _kill_when(
        tmp_path, "runs", _train(tmp_path, "runs", RECIPE), lambda s: s["phase"] == "ppo" and s["timesteps"] >= 512
    )


@pytest.mark.parametrize("tamper, needle", TAMPERED)
def test_a_tampered_state_is_one_clear_line_before_any_work(tmp_path, saved_run, tamper, needle):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    tamper(run)
    out = _resume(run)
    err = out.stderr.strip()
    assert out.returncode == 2 and err.startswith("rlclock: error:") and "\n" not in err, err
    assert needle in err and "Fix: start a new run" in err, err
    assert "resuming" in out.stdout and "estimated" not in out.stdout  # refused before the work


def test_the_fix_of_a_tampered_state_works(tmp_path, saved_run):
    """ "start a new run": the env spec and recipe of the run's config.yaml train anew."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    _with_state(run, lambda d: d.update(timesteps="many"))
    config = yaml.safe_load((run / "config.yaml").read_text())
    (tmp_path / "env.yaml").write_text(yaml.safe_dump(config["envs"][0]))
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump({**config["agent"], "timesteps": 512}))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlclock",
            "train",
            str(tmp_path / "env.yaml"),
            "--agent",
            str(tmp_path / "agent.yaml"),
            "--runs-dir",
            str(tmp_path / "new"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
