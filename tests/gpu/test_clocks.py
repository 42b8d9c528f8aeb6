"""ClockControl against the fake NVML: opt-in, dry-run, read-back, restore, errors, threads."""

from __future__ import annotations

import pytest
from concurrency import hammer

from rlclock.errors import (
    ClockControlDisabledError,
    ClockError,
    ClockPermissionError,
    GpuUnavailableError,
    NvmlNotSupportedError,
)
from rlclock.gpu.clocks import ClockControl, plan_calls, reset_clocks
from rlclock.schedule import AUTO, ClockConfig

pytestmark = pytest.mark.usefixtures("runtime_memory_locks")  # these lock memory; see test_memory_locks.py

SET_FUNCTIONS = {
    "nvmlDeviceSetGpuLockedClocks",
    "nvmlDeviceSetMemoryLockedClocks",
    "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceResetMemoryLockedClocks",
}


def live(**kw) -> ClockControl:
    return ClockControl(0, control_clocks=True, watchdog=False, handle_signals=False, **kw)


def test_plan_calls_touches_only_changed_domains():
    assert plan_calls(AUTO, ClockConfig(1500, 3201)) == [
        ("set_locked_core_clocks", (1500, 1500)),
        ("set_locked_mem_clocks", (3201, 3201)),
    ]
    assert plan_calls(ClockConfig(1500, 3201), ClockConfig(1500, None)) == [("reset_locked_mem_clocks", ())]
    assert plan_calls(ClockConfig(1500, 3201), ClockConfig(1500, 3201)) == []
    assert plan_calls(ClockConfig(None, 2201), AUTO) == [("reset_locked_mem_clocks", ())]


def test_observe_mode_is_the_default_and_calls_no_set_function(fake_nvml):
    with ClockControl(0) as clocks:
        assert clocks.dry_run
        rec = clocks.apply("1500@3201")
        assert rec.dry_run and not rec.applied
        assert rec.calls == ("set_locked_core_clocks(1500, 1500)", "set_locked_mem_clocks(3201, 3201)")
        assert rec.sm_clock_mhz == 1980  # nothing was set: the GPU still runs its own clocks
        assert clocks.current == ClockConfig(1500, 3201)
        assert clocks.watchdog_pid is None
        back = clocks.restore()
        assert back.calls == ("reset_locked_core_clocks()", "reset_locked_mem_clocks()") and not back.applied
    assert fake_nvml.calls() == []
    assert fake_nvml.device()["locked_core"] is None and fake_nvml.device()["locked_mem"] is None
    hist = clocks.history  # apply, restore, and the close's restore (nothing left to plan)
    assert [str(r.requested) for r in hist] == ["1500@3201", "auto", "auto"] and hist[-1].calls == ()


def test_setting_clocks_needs_the_opt_in(fake_nvml):
    with pytest.raises(ClockControlDisabledError, match="control_clocks"), pytest.warns(DeprecationWarning):
        ClockControl(0, dry_run=False)  # the deprecated spelling of the opt-in, still refused without it
    assert fake_nvml.calls() == []


def test_apply_locks_reads_back_and_restores(fake_nvml):
    with live() as clocks:
        assert not clocks.dry_run
        rec = clocks.apply("1500@3201")
        assert rec.applied and rec.core_matches
        assert (rec.sm_clock_mhz, rec.mem_clock_mhz) == (1500, 3201)
        assert "applications_clocks_setting" in rec.reasons
        assert fake_nvml.device()["locked_core"] == [1500, 1500]
        assert fake_nvml.device()["locked_mem"] == [3201, 3201]
        rec2 = clocks.apply("1500")  # memory back to auto, core unchanged
        assert rec2.calls == ("reset_locked_mem_clocks()",)
        assert fake_nvml.device()["locked_mem"] is None and fake_nvml.device()["locked_core"] == [1500, 1500]
        assert clocks.apply("1500").calls == ()  # already in effect: no NVML call
    assert fake_nvml.device()["locked_core"] is None
    fns = [c["fn"] for c in fake_nvml.calls()]
    assert fns[-2:] == ["nvmlDeviceResetGpuLockedClocks", "nvmlDeviceResetMemoryLockedClocks"]
    with pytest.raises(ClockError, match="closed"):
        clocks.apply("auto")


def test_exception_inside_the_block_restores(fake_nvml):
    with pytest.raises(RuntimeError), live() as clocks:
        clocks.apply("1200@2201")
        assert fake_nvml.device()["locked_core"] == [1200, 1200]
        raise RuntimeError("training crashed")
    assert fake_nvml.device()["locked_core"] is None and fake_nvml.device()["locked_mem"] is None


def test_unsupported_clocks_are_refused_before_any_nvml_call(fake_nvml):
    with live() as clocks:
        with pytest.raises(ClockError, match="1501 MHz is not supported"):
            clocks.apply("1501@3201")
        with pytest.raises(ClockError, match="memory clock 5001"):
            clocks.apply("auto@5001")
        with pytest.raises(ClockError, match="not understood"):
            clocks.apply("fast")
    assert [c["fn"] for c in fake_nvml.calls() if c["fn"].startswith("nvmlDeviceSet")] == []


def test_permission_error_is_one_line_and_leaves_nothing_locked(fake_nvml):
    fake_nvml.update(root=False)
    clocks = live()
    with pytest.raises(ClockPermissionError) as exc:
        clocks.apply("1500@3201")
    msg = str(exc.value)
    assert "root" in msg and "\n" not in msg and "Fix:" in msg
    assert fake_nvml.device()["locked_core"] is None
    fake_nvml.update(root=True)
    clocks.close()
    assert fake_nvml.device()["locked_core"] is None


def test_unsupported_gpu_is_reported(fake_nvml):
    fake_nvml.update(locked_clocks_supported=False)
    with live() as clocks, pytest.raises(NvmlNotSupportedError, match="not supported"):
        clocks.apply("1500@3201")


def test_no_gpu(fake_nvml):
    fake_nvml.update(library_missing=True)
    with pytest.raises(GpuUnavailableError, match="no NVIDIA GPU/NVML"):
        ClockControl(0)


def test_partial_failure_keeps_track_of_what_was_applied(fake_nvml, monkeypatch):
    with live() as clocks:
        dev = clocks.device

        def refuse(lo, hi):
            raise ClockError("memory lock refused.")

        monkeypatch.setattr(dev, "set_locked_mem_clocks", refuse)
        with pytest.raises(ClockError):
            clocks.apply("1500@2201")
        assert clocks.current == ClockConfig(1500, None)
        assert fake_nvml.device()["locked_core"] == [1500, 1500]
    assert fake_nvml.device()["locked_core"] is None


def test_concurrent_applies_are_serialised(fake_nvml):
    configs = ["1500@3201", "1200@2201", "auto", "1980@3201", "auto@2201"]
    with live() as clocks:
        hammer(clocks.apply, configs)
        hist = clocks.history
        assert len(hist) == 20
        # replaying the records in order reproduces the GPU's state: no interleaved half-applied requests
        state = AUTO
        for rec in hist:
            assert rec.calls == tuple(f"{n}({', '.join(map(str, a))})" for n, a in plan_calls(state, rec.requested))
            state = rec.requested
        dev = fake_nvml.device()
        assert (dev["locked_core"] or [None])[0] == state.core_mhz
        assert (dev["locked_mem"] or [None])[0] == state.mem_mhz


def test_reset_clocks_undoes_locks_left_behind(fake_nvml):
    fake_nvml.set_device(locked_core=[900, 900], locked_mem=[2201, 2201])
    assert "would reset" in reset_clocks(dry_run=True)[0]
    assert fake_nvml.device()["locked_core"] == [900, 900]
    lines = reset_clocks()
    assert "core and memory" in lines[0] and "1980 MHz" in lines[0]
    assert fake_nvml.device()["locked_core"] is None and fake_nvml.device()["locked_mem"] is None
    fake_nvml.update(root=False)
    with pytest.raises(ClockPermissionError):
        reset_clocks([0])
