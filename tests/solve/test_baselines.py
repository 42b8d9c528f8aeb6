"""Baselines on the paper's setting (simulated RTX 3080 Ti, latency 0) and with switching latency."""

from __future__ import annotations

import itertools
import json

import pytest

from rlclock import paper
from rlclock.cli import main
from rlclock.config import load_env_spec
from rlclock.errors import ScheduleError
from rlclock.solve.baselines import BASELINES, kernel_edp, run_baselines
from rlclock.solve.evaluation import evaluate

SMALL = {
    "name": "small-latency",
    "gpu": "rtx3080ti",
    "workload": {"generator": "llmc", "batch": 8, "seq": 512, "hidden": 1024, "heads": 8, "layers": 2},
    "switch_latency_s": 0.002,
    "actions": {"core_step_mhz": 210, "core_min_mhz": 210},
    "reward": {"budget": 0.01},
}


@pytest.fixture(scope="module")
def paper_results():
    backend = load_env_spec("gpt3xl-rtx3080ti-paper").build_backend()
    return {r.name: r for r in run_baselines(backend, 0.0)}


def test_kernel_global_reproduces_table_2(paper_results):
    ev = paper_results["kernel-global"].evaluation
    assert abs(-100 * ev.saving - paper.TABLE2["kernel-global"][1]) <= 2.0
    assert 100 * ev.slowdown <= 0.6
    assert paper_results["kernel-global"].optimum.exact


def test_pass_level_reproduces_table_2(paper_results):
    for name in ("pass-local", "pass-global"):
        assert abs(-100 * paper_results[name].evaluation.saving - paper.TABLE2[name][1]) <= 1.5


def test_local_saves_less_than_global(paper_results):
    assert paper_results["kernel-local"].evaluation.saving < paper_results["kernel-global"].evaluation.saving
    assert paper_results["pass-global"].evaluation.saving <= paper_results["kernel-global"].evaluation.saving


def test_budget_respected_without_latency(paper_results):
    for name in ("static", "pass-local", "pass-global", "kernel-local", "kernel-global", "latency-aware"):
        assert paper_results[name].evaluation.slowdown <= 1e-9, name


def test_with_latency_the_aware_optimum_beats_every_schedule_that_fits():
    backend = load_env_spec(SMALL).build_backend()
    res = {r.name: r for r in run_baselines(backend, 0.01)}
    la = res["latency-aware"].evaluation
    assert la.slowdown <= 0.01 + 1e-9
    for r in res.values():
        if r.evaluation.slowdown <= 0.01 + 1e-9 and r.name != "power-limit":  # another action space (below)
            assert la.energy_j <= r.evaluation.energy_j * (1 + 1e-9), r.name
    assert res["kernel-global"].evaluation.off_plan_time_s > 0  # latency hurts the latency-blind plan


def test_edp_option_and_unknown_names():
    backend = load_env_spec(SMALL).with_overrides(switch_latency_s=0.0).build_backend()
    r = kernel_edp(backend, max_slowdown=0.3, steps=6)
    ev = r.evaluation
    auto = run_baselines(backend, 0.0, names=["auto"])[0].evaluation
    assert ev.time_s * ev.energy_j <= auto.time_s * auto.energy_j
    with pytest.raises(ScheduleError, match="unknown baseline"):
        run_baselines(backend, 0.0, names=["magic"])
    assert "latency-aware" in BASELINES


def test_cli_writes_table_plot_and_json(tmp_path, capsys):
    spec = tmp_path / "small.yaml"
    import yaml

    spec.write_text(yaml.safe_dump(SMALL))
    assert main(["baselines", str(spec), "--out", str(tmp_path), "--frontier", "0,0.05", "--latency", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "latency-aware" in out and "kernel-global" in out
    data = json.loads((tmp_path / "small-latency" / "baselines.json").read_text())
    assert data["latency_s"] == 0.001 and {r["name"] for r in data["baselines"]} >= {"auto", "latency-aware"}
    assert (tmp_path / "small-latency" / "pareto.png").stat().st_size > 10_000


def test_cli_bad_budget_is_one_line(tmp_path, capsys):
    assert main(["baselines", "gpt3xl-rtx3080ti-paper", "--budget", "-1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlclock: error:") and err.count("\n") == 1


def test_the_power_limit_baseline_picks_the_cheapest_whole_job_limit_within_the_budget():
    from rlclock.solve.baselines import POWER_LIMIT_STEP_W, power_limit, power_limits_w

    backend = load_env_spec(SMALL).build_backend()
    r = power_limit(backend, 0.01)
    ev = r.evaluation
    assert r.schedule.n_changes == 0 and ev.switches == 0 and ev.slowdown <= 0.01 + 1e-9
    assert ev.energy_j <= backend.auto_run().energy_j
    watts = float(ev.name.split()[1])
    assert watts <= backend.spec.power_limit_w and (backend.spec.power_limit_w - watts) % POWER_LIMIT_STEP_W == 0
    capped = backend.at_power_limit(watts).auto_run()
    assert capped.energy_j == pytest.approx(ev.energy_j)
    lower = backend.at_power_limit(watts - POWER_LIMIT_STEP_W).auto_run()  # the next limit down: too slow or dearer
    assert lower.time_s > backend.auto_run().time_s * 1.01 or lower.energy_j >= ev.energy_j
    free = power_limit(backend, 0.5).evaluation  # the widest budget there is
    assert free.energy_j <= ev.energy_j
    # the schedule names the limit it runs under, so the one accounting judges it as the baseline did
    assert r.schedule.power_limit_w == (None if watts == backend.spec.power_limit_w else watts)
    again = evaluate(r.schedule, backend)
    assert (again.time_s, again.energy_j) == (ev.time_s, ev.energy_j)
    # the scan stops at the first limit that misses the budget: a lower limit never runs the step faster
    times = [backend.at_power_limit(float(w)).auto_run().time_s for w in power_limits_w(backend.spec.power_limit_w)]
    assert all(b >= a for a, b in itertools.pairwise(times)) and times[-1] > times[0]


def test_job_memory_weighs_every_memory_clock_for_the_whole_job():
    """On a GPU whose memory clock is a whole-job choice (the H200: deferred memory locks), ``job-memory`` is the best
    single configuration at any of its memory clocks within the budget — never worse than ``static`` at the one in
    effect, and exactly the better of the per-memory-clock static choices."""
    from rlclock.config import load_env_spec
    from rlclock.schedule import AUTO, ClockConfig
    from rlclock.solve.baselines import job_memory, run_baselines, static

    spec = load_env_spec("gpt3xl-h200")
    backend = spec.build_backend()
    got = job_memory(backend, 0.01)
    assert got.evaluation.energy_j <= static(backend, 0.01).evaluation.energy_j + 1e-9
    cores = sorted({c.core_mhz for c in backend.configs}, key=lambda f: -1 if f is None else f)
    per_memory = []
    for m in backend.spec.mem_clocks_mhz:
        grid = [AUTO] + [ClockConfig(f, m) for f in cores if f is None or f in backend.spec.core_clocks_mhz(m)]
        per_memory.append(static(backend.with_configs(grid), 0.01).evaluation.energy_j)
    assert got.evaluation.energy_j == pytest.approx(min(per_memory))
    assert got.evaluation.slowdown <= 0.01 + 1e-12 and "MHz" in got.schedule.name
    names = [r.name for r in run_baselines(backend, 0.01, names=["static", "job-memory"])]
    assert names == ["static", "job-memory"]
    rtx = load_env_spec("gpt3xl-rtx3080ti").build_backend()  # runtime memory locks: not a whole-job question
    assert [r.name for r in run_baselines(rtx, 0.01, names=["job-memory"])] == []
