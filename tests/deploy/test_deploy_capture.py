"""Profiling the loop's own steps, from a synthetic profiler export: steps by launch, anchors, medians,
phases, FLOPs/bytes from operator shapes, and the majority kernel sequence."""

from __future__ import annotations

import numpy as np
import pytest

from rlclock.deploy.capture import MARKER_KERNEL, STEP_RANGE, profile_from_chrome, timeline_from_markers
from rlclock.deploy.timeline import StepTimeline
from rlclock.errors import DeployError
from rlclock.workload.op_costs import GELU_FLOPS_PER_ELEMENT


class Export:
    """Builds a Chrome trace like torch.profiler's: step ranges, CPU ops, launches and device activity (µs)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 0

    def step(self, t0: float, t1: float) -> None:
        self.events.append(
            {"ph": "X", "cat": "user_annotation", "name": STEP_RANGE, "ts": t0, "dur": t1 - t0, "tid": 1}
        )

    def launch(
        self,
        name: str,
        at: float,
        ts: float,
        dur: float,
        tid: int = 1,
        op: str | None = None,
        dims=None,
        types=None,
        cat: str = "kernel",
        nbytes: int | None = None,
    ) -> None:
        self.corr += 1
        ext = 1000 + self.corr
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": at,
                "dur": 3,
                "tid": tid,
                "args": {"correlation": self.corr},
            }
        )
        if op:
            self.events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": op,
                    "ts": at - 1,
                    "dur": 5,
                    "tid": tid,
                    "args": {"External id": ext, "Input Dims": dims or [], "Input type": types or []},
                }
            )
        args = {"correlation": self.corr, "External id": ext, "grid": [8, 1, 1], "block": [128, 1, 1]}
        if nbytes is not None:
            args["bytes"] = nbytes
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": 7, "args": args})

    def data(self) -> dict:
        return {"traceEvents": list(self.events)}


def normal_step(x: Export, t0: float, late: float = 0.0) -> None:
    """A 1000 µs step marked at t0; the GPU runs its kernels from t0 + 50 + late on (launches run ahead)."""
    x.step(t0, t0 + 1000)
    g = t0 + 50 + late
    x.launch(
        "nvjet_gemm_fwd",
        t0 + 10,
        g,
        400,
        op="aten::mm",
        dims=[[64, 128], [128, 32]],
        types=["c10::BFloat16", "c10::BFloat16"],
    )
    x.launch(
        "vectorized_elementwise_kernel<gelu>",
        t0 + 20,
        g + 410,
        100,
        op="aten::gelu",
        dims=[[64, 32]],
        types=["c10::BFloat16"],
    )
    x.launch(
        "nvjet_gemm_bwd",
        t0 + 30,
        g + 520,
        300,
        tid=2,
        op="aten::mm",
        dims=[[32, 64], [64, 128]],
        types=["c10::BFloat16", "c10::BFloat16"],
    )
    x.launch("Memset (Device)", t0 + 40, g + 830, 2, cat="gpu_memset", nbytes=4096)


def test_steps_anchors_and_medians():
    x = Export()
    for k in range(4):
        normal_step(x, 1000.0 * k, late=[0, 0, 8, 0][k])
    prof = profile_from_chrome(x.data(), "NVIDIA H200", name="t")
    assert prof.steps_profiled == 4 and prof.steps_used == 3  # the first profiled step is left out
    assert len(prof.trace) == 4 and prof.timeline.names[0] == "nvjet_gemm_fwd"
    # offsets from the anchor (the step mark: the GPU was idle), medians over steps 1-3 (8 µs late in one)
    assert np.allclose(prof.timeline.start_s * 1e6, [50, 460, 570, 880])
    assert np.allclose(prof.timeline.duration_s * 1e6, [400, 100, 300, 2])
    assert prof.timeline.period_s == pytest.approx(1000e-6)
    k0, k1, k2, k3 = prof.trace
    assert (k0.category, k0.phase, k0.dtype) == ("gemm", "forward", "bf16")
    assert k0.flops == 2 * 64 * 32 * 128 and k0.gemm_bmnk == (1, 64, 32, 128)
    assert k0.dram_read_bytes == 2 * (64 * 128 + 128 * 32) and k0.dram_write_bytes == 2 * 64 * 32
    assert k1.category == "elementwise" and k1.flops == GELU_FLOPS_PER_ELEMENT[("none", False)] * 64 * 32  # erff's math
    assert k2.phase == "backward" and k2.gemm_bmnk == (1, 32, 128, 64)  # launched from another thread
    assert k3.category == "memset" and k3.dram_write_bytes == 4096
    assert k0.measured[0].source == "in-sequence" and k0.measured[0].time_s == pytest.approx(400e-6)
    assert prof.trace.meta["steps_used"] == 3


def test_a_busy_gpu_moves_the_anchor_to_the_end_of_the_previous_step():
    x = Export()
    # the host marks every step 600 µs after the previous one, but each step keeps the GPU busy ~880 µs
    for k in range(4):
        t0 = 600.0 * k
        x.step(t0, t0 + 600)
        g = max(t0 + 5, 880.0 * k + 5)
        x.launch("kernel_a_elementwise", t0 + 1, g, 500)
        x.launch("kernel_b_elementwise", t0 + 2, g + 505, 370)
    prof = profile_from_chrome(x.data(), "GPU")
    # anchor = end of the previous step's last kernel (not the host mark): offsets 5 and 510 µs
    assert np.allclose(prof.timeline.start_s * 1e6, [5, 510])
    assert prof.timeline.period_s == pytest.approx(880e-6)


def test_the_majority_kernel_sequence_wins():
    x = Export()
    for k in range(5):
        normal_step(x, 1000.0 * k)
    x.launch("extra_kernel_elementwise", 3000 + 900, 3000 + 950, 10)  # step 3 launches one more kernel
    prof = profile_from_chrome(x.data(), "GPU")
    assert prof.steps_used == 3 and len(prof.trace) == 4
    assert prof.notes and "different kernel sequence" in prof.notes[0]


def test_without_step_ranges_or_gpu_work_it_says_so():
    with pytest.raises(DeployError, match=r"no 'rlclock\.deploy\.step' ranges"):
        profile_from_chrome({"traceEvents": []}, "GPU")
    x = Export()
    x.step(0, 100)
    with pytest.raises(DeployError, match="launched no GPU work"):
        profile_from_chrome(x.data(), "GPU")


def test_each_kernel_keeps_the_operator_call_that_launched_it():
    x = Export()
    for s in range(3):
        normal_step(x, 1000.0 * s * 2)
    prof = profile_from_chrome(x.data(), "GPU")
    gemm, gelu, gemm_bwd, memset = prof.trace
    assert gemm.launch_op.name == "aten::mm" and gemm.launch_op.input_dims == ((64, 128), (128, 32))
    assert gemm.flops == 2 * 64 * 128 * 32 and gemm.gemm_bmnk == (1, 64, 32, 128)
    assert [k.launch_op.call for k in (gemm, gelu, gemm_bwd)] == [0, 1, 2]  # renumbered in launch order
    assert memset.launch_op is None and memset.dram_write_bytes == 4096 and memset.dram_read_bytes == 0
    assert prof.trace.with_kernels(prof.trace.kernels) == prof.trace


def test_steps_located_by_marker_kernels_give_the_running_timeline():
    def kernel(name: str, ts: float, dur: float) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {}}

    events = []
    for s, jitter in enumerate((0.0, 30.0, 10.0, 500.0)):  # µs; the last step launched another sequence
        t0 = 10_000.0 * s
        events.append(kernel(f"void at::cuda::{MARKER_KERNEL}(long)", t0, 1.0))
        events += [kernel("gemm", t0 + 11.0 + jitter, 4000.0), kernel("gelu", t0 + 4021.0 + jitter, 1000.0)]
        if s == 3:
            events.append(kernel("extra", t0 + 6000.0, 10.0))
    events.append(kernel(f"void at::cuda::{MARKER_KERNEL}(long)", 40_000.0, 1.0))
    tl = timeline_from_markers({"traceEvents": events}, ("gemm", "gelu"))
    assert tl is not None and tl.start_s.tolist() == pytest.approx([10e-6 + 10e-6, 4020e-6 + 10e-6])
    assert tl.duration_s.tolist() == pytest.approx([4000e-6, 1000e-6]) and tl.period_s == pytest.approx(0.010)
    assert "3 steps located" in tl.source
    assert timeline_from_markers({"traceEvents": events}, ("other",)) is None


def test_points_inside_located_steps_are_placed_before_the_kernel_that_follows_them():
    def kernel(name: str, ts: float, dur: float) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {}}

    marker = f"void at::cuda::{MARKER_KERNEL}(long)"
    events = []
    for s in range(3):  # each step: its marker, gemm, a point's marker, gelu, another point's marker, add
        t0 = 10_000.0 * s
        events += [
            kernel(marker, t0, 1.0),
            kernel("gemm", t0 + 10.0, 4000.0),
            kernel(marker, t0 + 4011.0, 1.0),
            kernel("gelu", t0 + 4020.0, 1000.0),
            kernel(marker, t0 + 5021.0, 1.0),
            kernel("add", t0 + 5030.0, 100.0),
        ]
    events.append(kernel(marker, 30_000.0, 1.0))
    tl = timeline_from_markers({"traceEvents": events}, ("gemm", "gelu", "add"), points=[2, 2, 2])
    assert tl is not None and tl.points == (1, 2)  # before gelu, before add
    assert tl.points_s.tolist() == pytest.approx([4019e-6, 5029e-6]) and tl.period_s == pytest.approx(0.010)
    # without the count of points per step every marker would start a step: no step has the whole sequence
    assert timeline_from_markers({"traceEvents": events}, ("gemm", "gelu", "add")) is None
    # a timeline keeps its points through a fit, a save and a load
    again = StepTimeline.from_dict(tl.fitted(0.012).to_dict())
    assert again.points == (1, 2)
    with pytest.raises(DeployError, match="points"):
        StepTimeline(tl.start_s, tl.duration_s, tl.period_s, points=(2, 1))
