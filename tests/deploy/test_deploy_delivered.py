"""Delivered, beside planned: each timed step rebuilt from the switches' issue times and the step's own marks, priced
on the planning model by the same function as the plan; in the report, its JSON and rlclock apply's closing lines."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from rlclock.commands.apply import _delivered_lines
from rlclock.deploy.anchor import AnchorLog
from rlclock.deploy.controller import ClockController
from rlclock.deploy.delivered import PlanningCosts, deliver
from rlclock.deploy.plan import plan_switches
from rlclock.deploy.report import SwitchRecord
from rlclock.deploy.timeline import StepTimeline
from rlclock.deploy.worker import SwitchWorker
from rlclock.errors import DeployError
from rlclock.schedule import AUTO, ClockConfig, ClockSchedule
from tests.deploy.fakes import Clock, Recording

B = ClockConfig(1410, 3201)
TIMELINE = StepTimeline.from_durations(np.full(40, 1e-3))  # 40 kernels of 1 ms, a 40 ms step
SCHEDULE = ClockSchedule([AUTO, B], [0] * 10 + [1] * 20 + [0] * 10, "a-b-a")
T = np.full((40, 2), 1e-3)
T[10:20, 1] = 1.2e-3  # ten compute-bound kernels run 20 % longer at B
E = np.column_stack([np.full(40, 1.0), np.full(40, 0.8)])
COSTS = PlanningCosts(T, E, (AUTO, B), "by hand")
PLAN = plan_switches(SCHEDULE, TIMELINE, 0.006, 0.006)  # B issued at 4 ms lands at 10 ms; A at 24 ms lands at 30 ms


def worker_run(steps: int = 6, period_s: float = 0.04) -> tuple[list[SwitchRecord], list[float]]:
    clock = Clock()
    worker = SwitchWorker(PLAN, Recording(clock), read_back=False, clock=clock)
    anchors = []
    for k in range(steps):
        clock.t = 100.0 + period_s * k
        anchors.append(clock.t)
        worker.on_anchor(k, clock.t)
        end = clock.t + period_s - 1e-6
        while (due := worker.next_due()) is not None and due <= end:
            clock.t = max(clock.t, due)
            worker.run_due()
    return worker.records, anchors


def log_of(anchors: list[float], busy_s: float | None = 0.04) -> AnchorLog:
    log = AnchorLog("host")
    for k, a in enumerate(anchors):
        log.step.append(k)
        log.gpu_s.append(a)
        log.seen_s.append(a)
        log.anchor_s.append(a)
        log.busy_s.append(np.nan if busy_s is None else busy_s)
        log.sent.append(True)
    return log


def test_switches_on_time_deliver_the_plan():
    records, anchors = worker_run()
    got = deliver([PLAN], COSTS, TIMELINE.start_s, TIMELINE.duration_s, log_of(anchors), records, dry_run=True)
    assert got.planned_saving == pytest.approx(0.1) and got.planned_slowdown == pytest.approx(0.05)  # 36 J, 42 ms
    assert got.steps == 5 and got.saving == pytest.approx(0.1) and got.slowdown == pytest.approx(0.05)
    assert got.placed == "anchor and end mark" and got.verb == "would deliver"
    assert [row[0] for row in got.per_step] == [1, 2, 3, 4, 5]  # the first controlled step is not judged
    assert got.switches[2][:4] == [1, 0, 0, str(B)] and got.switches[2][4:] == pytest.approx([0.004, 0.010])
    assert "would deliver 10.00 % at +5.00 %" in got.line()


def test_a_late_switch_delivers_less_saving_and_less_slowdown():
    records, anchors = worker_run()
    late = [
        SwitchRecord(
            r.status, r.step, r.event, r.planned_s, r.issued_s + (0.002 if r.event == 0 else 0.0), r.call_s, r.estimated
        )
        for r in records
    ]
    got = deliver([PLAN], COSTS, TIMELINE.start_s, TIMELINE.duration_s, log_of(anchors), late, dry_run=False)
    # B lands at 12 ms: kernels 10 and 11 run at auto (1 ms, 1 J each instead of 1.2 ms, 0.8 J)
    assert got.saving == pytest.approx(1 - 36.4 / 40) and got.slowdown == pytest.approx(0.0416 / 0.04 - 1)
    assert got.verb == "delivered"


def test_a_slower_step_places_its_kernels_later_and_the_landings_split_them():
    records, anchors = worker_run(period_s=0.044)
    got = deliver([PLAN], COSTS, TIMELINE.start_s, TIMELINE.duration_s, log_of(anchors, 0.044), records, True)
    # kernel k starts at 1.1 k ms: B lands 0.1 ms into kernel 9 and A 0.3 ms into kernel 27
    energy = 9 * 1.0 + (0.1 * 1.0 + 0.9 * 0.8) + 17 * 0.8 + (0.3 * 0.8 + 0.7 * 1.0) + 12 * 1.0
    assert got.saving == pytest.approx(1 - energy / 40) and got.slowdown == pytest.approx(0.05)
    no_end = deliver([PLAN], COSTS, TIMELINE.start_s, TIMELINE.duration_s, log_of(anchors, None), records, True)
    assert no_end.placed == "anchors" and no_end.steps == 4  # the last step has no next anchor to end it
    assert no_end.saving == pytest.approx(got.saving)


def test_points_place_the_kernels_piecewise():
    records, anchors = worker_run()
    log = log_of(anchors)
    timeline = StepTimeline(TIMELINE.start_s, TIMELINE.duration_s, 0.04, points=(20,))
    plan = plan_switches(SCHEDULE, timeline, 0.006, 0.006)
    log.points += [(k, 0, a + 0.020) for k, a in enumerate(anchors)]
    got = deliver([plan], COSTS, timeline.start_s, timeline.duration_s, log, records, True)
    assert got.placed == "anchor and end mark and points" and got.saving == pytest.approx(0.1)


def test_nothing_to_judge_and_costs_of_another_step_are_said():
    records, anchors = worker_run(steps=1)
    got = deliver([PLAN], COSTS, TIMELINE.start_s, TIMELINE.duration_s, log_of(anchors), records, True)
    assert got.steps == 0 and "not judged" in got.line()
    with pytest.raises(DeployError, match="3 kernels, the timeline 40"):
        deliver(
            [PLAN],
            PlanningCosts(T[:3], E[:3], (AUTO, B)),
            TIMELINE.start_s,
            TIMELINE.duration_s,
            log_of(anchors),
            records,
            True,
        )
    with pytest.raises(DeployError, match="no costs for configuration"):
        COSTS.column(ClockConfig(900, 3201))
    with pytest.raises(DeployError, match="tables"):
        PlanningCosts(T, E[:, :1], (AUTO, B))


def test_the_controller_reports_what_it_delivered_in_its_json_and_apply_says_it(tmp_path):
    ctl = ClockController(
        SCHEDULE, TIMELINE, latency_s=0.006, lead_s=0.006, worker="thread", anchor="host", nvml=False, costs=COSTS
    )
    with ctl:
        for _ in range(8):
            with ctl.step():
                time.sleep(0.04)
    rep = ctl.report
    assert rep.delivered is not None and rep.delivered.steps >= 5 and rep.delivered.dry_run
    assert abs(rep.delivered.saving - 0.1) < 0.06  # host anchors on a loaded shared machine: near the plan
    assert "would deliver" in rep.text()
    data = json.loads(rep.save(tmp_path / "report.json").read_text())
    assert data["delivered"]["switches"] and data["delivered"]["per_step"] and data["delivered"]["anchors"]
    lines = _delivered_lines(data)
    assert len(lines) == 1 and lines[0].startswith("planned 10.00 % energy at +5.00 % time; would deliver")
    assert _delivered_lines({"delivered": None}) == []
    with pytest.raises(DeployError, match="planning costs have 3 kernels"):
        ClockController(
            SCHEDULE,
            TIMELINE,
            latency_s=0.006,
            worker="thread",
            anchor="host",
            nvml=False,
            costs=PlanningCosts(T[:3], E[:3], (AUTO, B)),
        )


def test_save_draws_a_step_with_its_landings(tmp_path):
    from rlclock.deploy.api import clocked
    from rlclock.deploy.plot import chosen_step

    clk = clocked(
        SCHEDULE, timeline=TIMELINE, latency_s=0.006, lead_s=0.006, worker="thread", verbose=False, save=str(tmp_path)
    )
    clk.costs = COSTS
    with clk:
        for _ in range(6):
            with clk.step():
                time.sleep(0.04)
    png = tmp_path / "step.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert chosen_step(clk.report.delivered) in {row[0] for row in clk.report.delivered.per_step}
    assert chosen_step(None) is None and not clk.report.notes
