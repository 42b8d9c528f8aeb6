"""Everything rlclock does on a real GPU, in a dry run (no clock is ever set), in one run.

Stages — each runs even if an earlier one failed, and reports its own error:

1. doctor: GPU, driver, clock table, energy-counter period, permissions.
2. profile: the GPT-3 XL layer (hidden 2048, 16 heads, sequence 2048, batch 4, bf16; forward + backward)
   captured as a CUDA graph, in-sequence kernel durations from profiled replays, mapped to the analytic
   kernels.
3. isolation: every kernel replayed alone (its dependency memsets kept), time against in-sequence time.
4. measure: every kernel at auto clocks, energy from NVML over tick-aligned windows, with repeatability.
5. step: the whole captured step back to back (time, energy, power, clocks).
6. schedule: a two-configuration schedule replayed segment by segment; clock changes recorded (dry run).
7. pytest -m gpu: the GPU-marked tests.

Writes to ``--out``: trace.json (the profiled trace with in-sequence and isolated measurements),
measurements.json / .csv (the per-kernel table), isolation.csv, doctor.txt, pytest.txt, summary.json.

    python benchmarks/h200_observe.py --out results/
    python benchmarks/h200_observe.py --out results/ --quick     # a few kernels, short windows
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlclock.gpu.meter import MeasureSettings  # noqa: E402
from rlclock.workload.transformer import TransformerConfig  # noqa: E402

GPT3XL_LAYER = TransformerConfig(
    hidden=2048, heads=16, seq=2048, batch=4, layers=1, head=False, style="gpt", dtype="bf16"
)
SUMMARY: dict[str, Any] = {}
OUT = Path(".")


def stage(name: str):
    """Run a stage, time it, keep going on failure."""

    def deco(fn):
        def run(*args, **kw):
            t0 = time.time()
            print(f"\n=== {name} ===", flush=True)
            try:
                out = fn(*args, **kw)
                SUMMARY.setdefault("stages", {})[name] = {"ok": True, "s": round(time.time() - t0, 1)}
                return out
            except Exception as exc:
                traceback.print_exc()
                SUMMARY.setdefault("stages", {})[name] = {
                    "ok": False,
                    "s": round(time.time() - t0, 1),
                    "error": f"{type(exc).__name__}: {exc}",
                }
                return None
            finally:
                (OUT / "summary.json").write_text(json.dumps(SUMMARY, indent=1, default=str))

        return run

    return deco


@stage("doctor")
def doctor(out: Path) -> None:
    from rlclock.gpu.doctor import diagnose

    rep = diagnose(period_s=1.5)
    text = rep.text()
    (out / "doctor.txt").write_text(text + "\n")
    print(text)
    SUMMARY["doctor"] = rep.as_dict()


@stage("profile")
def profile(replays: int):
    from rlclock.gpu.profile import profile_layer
    from rlclock.workload.kernel_names import short_name

    res = profile_layer(GPT3XL_LAYER, replays=replays, name="gpt3xl-h200-layer")
    tr = res.trace
    tr.save(OUT / "trace.json")  # the in-sequence trace, replaced by the measured one later
    print(
        f"graph nodes {res.graph_counts}; entries {len(tr)}; eager-matched {res.eager_matched}; "
        f"name mismatches {res.name_mismatches}; notes {res.notes}"
    )
    print(f"mapping {res.mapping.as_dict()}")
    print(
        f"in-sequence kernel sum {res.in_sequence_kernel_s * 1e3:.3f} ms, memsets {res.memset_s * 1e6:.1f} us, "
        f"step (events) {res.step_event_s * 1e3:.3f} ms"
    )
    for i, k in enumerate(tr):
        m = k.measured[0]
        print(
            f"  {i:3d} {k.phase[:3]} {k.category:11s} {k.op:28s} {m.time_s * 1e6:9.1f} us  "
            f"grid {k.launch_grid} {short_name(k.name, 70)}"
        )
    SUMMARY["profile"] = {
        "entries": len(tr),
        "graph_nodes": res.graph_counts,
        "mapping": res.mapping.as_dict(),
        "in_sequence_kernel_s": res.in_sequence_kernel_s,
        "memset_s": res.memset_s,
        "step_event_s": res.step_event_s,
        "eager_matched": res.eager_matched,
        "name_mismatches": res.name_mismatches,
    }
    return res


@stage("isolation")
def isolation(out: Path, res) -> list:
    from rlclock.gpu.isolation import check_isolation, summarize

    checks = check_isolation(res.captured, res.trace)
    with (out / "isolation.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "name", "category", "in_sequence_us", "isolated_us", "ratio", "memsets", "copies", "note"])
        for c in checks:
            w.writerow(
                [
                    c.index,
                    c.name,
                    c.category,
                    f"{c.in_sequence_s * 1e6:.2f}",
                    f"{c.isolated_s * 1e6:.2f}",
                    f"{c.ratio:.3f}",
                    c.memsets,
                    c.copies,
                    c.note,
                ]
            )
    s = summarize(checks)
    for c in checks:
        flag = " *" if c.note else ""
        print(
            f"  {c.index:3d} {c.category:11s} seq {c.in_sequence_s * 1e6:9.1f} iso {c.isolated_s * 1e6:9.1f} us "
            f"ratio {c.ratio:5.2f} memsets {c.memsets} x{c.copies}{flag} {c.note}"
        )
    print(f"summary {s}")
    SUMMARY["isolation"] = s
    return checks


@stage("measure")
def measure_kernels(out: Path, res, settings: MeasureSettings, limit: int | None):
    from rlclock.gpu.measure import KernelMeasurer, attach_measurements, measure_trace, table_meta
    from rlclock.gpu.nvml import NvmlDevice
    from rlclock.gpu.table import MeasurementTable

    dev = NvmlDevice(0)
    tr = res.trace
    indices = list(range(len(tr)))
    if limit is not None:  # the longest kernels and a few short ones
        by_time = sorted(indices, key=lambda i: -tr[i].measured[0].time_s)
        indices = sorted(set(by_time[: limit // 2] + by_time[-(limit - limit // 2) :]))
    table = MeasurementTable(table_meta(dev, tr, settings, "observe"))
    m = KernelMeasurer(res.captured, tr, dev, None, settings)
    t0 = time.time()
    try:

        def progress(r) -> None:
            seq = tr[r.kernel].measured[0].time_s
            print(
                f"  {r.kernel:3d} {r.time_s * 1e6:9.2f} us (seq {seq * 1e6:8.2f}) {r.energy_j * 1e3:9.4f} mJ "
                f"{r.power_w:6.1f} W SM {r.sm_clock_mhz:6.0f} MHz cv t {r.time_cv * 100:4.2f}% "
                f"E {r.energy_cv * 100:4.2f}% {'/'.join(r.reasons)} back {r.extra.get('kernels_back')} "
                f"valid {r.extra.get('valid')} [{time.time() - t0:5.1f} s]",
                flush=True,
            )

        measure_trace(
            m, tr, indices=indices, table=table, progress=progress, save=lambda t: t.save(out / "measurements.json")
        )
    finally:
        m.close()
    table.save(out / "measurements.json")
    table.save_csv(out / "measurements.csv")
    traced = attach_measurements(tr, table)
    traced.meta["measurements"] = {k: v for k, v in table.meta.items() if k != "trace"}
    traced.save(out / "trace.json")
    rows = list(table)
    big = [r for r in rows if r.time_s >= 20e-6]
    SUMMARY["measure"] = {
        "kernels": len(rows),
        "kernels_ge_20us": len(big),
        "max_time_cv_ge_20us": max((r.time_cv for r in big), default=None),
        "max_energy_cv_ge_20us": max((r.energy_cv for r in big), default=None),
        "median_energy_cv_ge_20us": sorted(r.energy_cv for r in big)[len(big) // 2] if big else None,
        "over_2pct_ge_20us": [r.kernel for r in big if max(r.time_cv, r.energy_cv) > 0.02],
        "sum_time_s": sum(r.time_s for r in rows),
        "sum_energy_j": sum(r.energy_j for r in rows),
    }
    print(f"summary {SUMMARY['measure']}")
    return table


@stage("step")
def step(res, settings: MeasureSettings):
    from rlclock.gpu.measure import measure_step
    from rlclock.gpu.nvml import NvmlDevice

    s = measure_step(res.captured, NvmlDevice(0), settings)
    SUMMARY["step"] = {
        "time_s": s.time_s,
        "energy_j": s.energy_j,
        "power_w": s.power_w,
        "sm_clock_mhz": s.sm_clock_mhz,
        "mem_clock_mhz": s.mem_clock_mhz,
        "reasons": list(s.reasons),
        "time_cv": s.time_cv,
        "energy_cv": s.energy_cv,
        "busy_fraction": s.busy_fraction,
    }
    print(SUMMARY["step"])
    return s


@stage("schedule")
def schedule(res, settings: MeasureSettings):
    from rlclock.gpu.clocks import ClockControl
    from rlclock.gpu.nvml import NvmlDevice
    from rlclock.gpu.replay import replay_schedule
    from rlclock.schedule import AUTO, ClockConfig, ClockSchedule

    tr = res.trace
    low = ClockConfig(1410, 3201)  # memory-bound kernels at a lower core clock, tensor-core kernels at auto
    sched = ClockSchedule.from_configs([AUTO if k.uses_tensor_cores else low for k in tr], name="tensor-auto/1410")
    with ClockControl(0) as control:  # dry run: nothing is set
        assert control.dry_run
        rep = replay_schedule(res.captured, sched, control, NvmlDevice(0), settings)
        applied = sum(1 for r in control.history if r.applied)
    SUMMARY["schedule"] = {
        "name": rep.name,
        "segments": rep.segments,
        "switches_per_step": rep.switches_per_step,
        "time_s": rep.stats.time_s,
        "energy_j": rep.stats.energy_j,
        "power_w": rep.stats.power_w,
        "time_cv": rep.stats.time_cv,
        "dry_run": rep.dry_run,
        "applied_changes": applied,
        "first_records": rep.records[:3],
    }
    print(SUMMARY["schedule"])


@stage("pytest")
def run_pytest(out: Path) -> None:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/gpu"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    (out / "pytest.txt").write_text(proc.stdout + proc.stderr)
    tail = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(proc.stdout[-3000:])
    SUMMARY["pytest"] = {"returncode": proc.returncode, "result": tail}
    if proc.returncode not in (0, 5):
        raise RuntimeError(f"gpu tests failed: {tail}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quick", action="store_true", help="a few kernels, short windows (a smoke test)")
    p.add_argument("--window", type=float, default=2.0, help="energy window, seconds")
    p.add_argument("--warmup", type=float, default=0.5, help="warm-up per kernel, seconds")
    p.add_argument("--repeats", type=int, default=3, help="windows per kernel")
    p.add_argument("--replays", type=int, default=20, help="profiled graph replays")
    p.add_argument("--kernels", type=int, default=None, help="measure only this many kernels")
    p.add_argument("--no-pytest", action="store_true")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    global OUT
    OUT = args.out
    if args.quick:
        args.kernels = args.kernels or 6
        args.window = min(args.window, 0.5)
        args.repeats = min(args.repeats, 2)
        args.replays = min(args.replays, 5)
    settings = MeasureSettings(window_s=args.window, warmup_s=args.warmup, repeats=args.repeats)
    t0 = time.time()
    doctor(args.out)
    res = profile(args.replays)
    if res is not None:
        isolation(args.out, res)
        measure_kernels(args.out, res, settings, args.kernels)
        step(res, settings)
        schedule(res, settings)
    if not args.no_pytest:
        run_pytest(args.out)
    SUMMARY["wall_s"] = round(time.time() - t0, 1)
    (args.out / "summary.json").write_text(json.dumps(SUMMARY, indent=1, default=str))
    print("\n=== summary ===")
    for name, st in SUMMARY.get("stages", {}).items():
        print(f"{name:10s} {'ok ' if st['ok'] else 'FAILED'} {st['s']:6.1f} s  {st.get('error', '')}")
    if "profile" in SUMMARY:
        pr = SUMMARY["profile"]
        print(
            f"profile   {pr['entries']} entries, nodes {pr['graph_nodes']}, "
            f"in-seq {pr['in_sequence_kernel_s'] * 1e3:.3f} ms, step {pr['step_event_s'] * 1e3:.3f} ms, "
            f"mapped {pr['mapping']['mapped']}"
        )
    if "isolation" in SUMMARY:
        s = SUMMARY["isolation"]
        print(
            f"isolation ratio of sums {s['ratio_of_sums']:.3f}, median ratio {s['median_ratio']:.3f}, "
            f"outliers {s['outliers']}/{s['kernels']}"
        )
    if "measure" in SUMMARY:
        s = SUMMARY["measure"]
        print(
            f"measure   {s['kernels']} kernels, >=20us: {s['kernels_ge_20us']}, max cv t "
            f"{(s['max_time_cv_ge_20us'] or 0) * 100:.2f}% E {(s['max_energy_cv_ge_20us'] or 0) * 100:.2f}%, "
            f"over 2%: {s['over_2pct_ge_20us']}"
        )
    if "step" in SUMMARY:
        s = SUMMARY["step"]
        print(
            f"step      {s['time_s'] * 1e3:.3f} ms {s['energy_j']:.3f} J {s['power_w']:.0f} W SM "
            f"{s['sm_clock_mhz']:.0f} MHz {s['reasons']} cv t {s['time_cv'] * 100:.2f}% "
            f"E {s['energy_cv'] * 100:.2f}%"
        )
    if "schedule" in SUMMARY:
        s = SUMMARY["schedule"]
        print(
            f"schedule  {s['segments']} segments, {s['switches_per_step']} changes/step recorded (applied "
            f"{s['applied_changes']}), {s['time_s'] * 1e3:.3f} ms {s['energy_j']:.3f} J"
        )
    if "pytest" in SUMMARY:
        print(f"pytest    {SUMMARY['pytest']['result']}")
    print(f"wall      {SUMMARY['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
