"""A spec for a GPU without a preset, built from what it reports (rlclock.dvfs.derive)."""

from __future__ import annotations

import pytest

from rlclock.dvfs.derive import RATES, DeviceFacts, rates_for, spec_from_facts
from rlclock.dvfs.spec import get_spec, load_spec_file, spec_to_mapping, write_spec_file
from rlclock.errors import SpecError

L40S_CLOCKS = {9001: tuple(range(2520, 209, -15))}


def facts_of(key: str, cc: tuple[int, int], lanes_per_sm: int, geforce: bool = False, **over) -> DeviceFacts:
    """What a GPU of preset ``key`` reports (CUDA's figures unread, as on a machine without PyTorch)."""
    s = get_spec(key)
    base = dict(
        name=s.name,
        architecture=s.architecture,
        compute_capability=cc,
        cuda_cores=s.sm_count * lanes_per_sm,
        sm_count=0,
        threads_per_sm=0,
        l2_bytes=s.l2_bytes,
        mem_bus_bits=s.mem_bus_bits,
        clocks=dict(s.clocks),
        default_mem_mhz=s.default_mem_mhz,
        power_limit_w=s.power_limit_w,
        geforce=geforce,
    )
    return DeviceFacts(**{**base, **over})


@pytest.mark.parametrize(
    "key, cc, lanes, geforce",
    [
        ("h200-sxm", (9, 0), 128, False),
        ("h100-sxm", (9, 0), 128, False),
        ("a100-sxm4-40gb", (8, 0), 64, False),
        ("rtx3080ti", (8, 6), 128, True),
    ],
)
def test_the_facts_of_a_preset_gpu_give_its_hardware(key, cc, lanes, geforce):
    preset = get_spec(key)
    got = spec_from_facts(facts_of(key, cc, lanes, geforce))
    assert (
        got.sm_count,
        got.threads_per_sm,
        got.mem_bus_bits,
        got.l2_bytes,
        dict(got.clocks),
        got.memory_locks,
        got.simt_flops_per_cycle_per_sm,
    ) == (
        preset.sm_count,
        preset.threads_per_sm,
        preset.mem_bus_bits,
        preset.l2_bytes,
        dict(preset.clocks),
        preset.memory_locks,
        preset.simt_flops_per_cycle_per_sm,
    )
    for dt in ("fp16", "bf16", "tf32"):
        assert got.tensor_flops_per_cycle_per_sm[dt] == preset.tensor_flops_per_cycle_per_sm[dt], dt
    assert got.generic and got.key == preset.name.lower().replace(" ", "-").replace("_", "-")


def test_a_gpu_like_a_fitted_preset_starts_from_that_fit():
    """Same size, clocks and memory as the H200 (or the RTX 3080 Ti): the carried-over model is the fit itself."""
    assert spec_from_facts(facts_of("h200-sxm", (9, 0), 128)).model == get_spec("h200-sxm").model
    assert spec_from_facts(facts_of("rtx3080ti", (8, 6), 128, True)).model == get_spec("rtx3080ti").model
    # a data-centre GDDR card runs its whole table: no GeForce boost ceiling
    assert spec_from_facts(facts_of("rtx3080ti", (8, 6), 128, False)).model.boost_max_mhz == 0


def test_an_l40s_is_built_from_its_own_facts(tmp_path):
    facts = DeviceFacts("NVIDIA L40S", "Ada", (8, 9), 18176, 142, 1536, 96 * 2**20, 384, L40S_CLOCKS, 9001, 350.0)
    s = spec_from_facts(facts)
    rtx = get_spec("rtx3080ti")
    assert (s.key, s.sm_count, s.memory_locks, s.tensor_flops_per_cycle_per_sm["bf16"]) == (
        "nvidia-l40s",
        142,
        "none",
        1024,
    )
    assert s.bandwidth_bytes_per_s(9001) == pytest.approx(864e9, rel=1e-3)  # its datasheet's 864 GB/s
    assert s.model.c_tensor_w == pytest.approx(rtx.model.c_tensor_w * 142 / 80)
    assert s.model.f_ridge_mhz == pytest.approx(rtx.model.f_ridge_mhz * 2520 / 2100)
    assert "GDDR" in s.sources["model"] and "generic" in s.sources["model"] and s.generic
    again = load_spec_file(write_spec_file(spec_to_mapping(s), tmp_path / "l40s.yaml", "test"))
    assert again == s


def test_a_geforce_card_gets_half_the_tensor_rate():
    facts = DeviceFacts(
        "NVIDIA GeForce RTX 4090",
        "Ada",
        (8, 9),
        16384,
        0,
        0,
        72 * 2**20,
        384,
        {10501: tuple(range(3105, 209, -15))},
        10501,
        450.0,
        geforce=True,
    )
    s = spec_from_facts(facts)
    assert s.sm_count == 128 and s.tensor_flops_per_cycle_per_sm["bf16"] == 512
    assert 0 < s.model.boost_max_mhz < 3105  # lists clocks it does not reach


def test_capabilities_not_listed_take_the_nearest_lower():
    assert rates_for((8, 9))[0] == (8, 9)
    assert rates_for((9, 2))[0] == (9, 0)
    assert rates_for((11, 0))[0] == (10, 0)
    assert rates_for((13, 1))[0] == max(RATES)
    with pytest.raises(SpecError, match=r"compute capability 6.1 is older than Volta"):
        rates_for((6, 1))


def test_types_a_generation_lacks_run_on_its_fp32_units():
    v100 = DeviceFacts(
        "Tesla V100-SXM2-16GB", "Volta", (7, 0), 5120, 0, 0, 0.0, 4096, {877: (1530, 1312, 135)}, 877, 300.0
    )
    s = spec_from_facts(v100)
    assert s.sm_count == 80 and s.tensor_flops_per_cycle_per_sm["fp16"] == 1024
    assert s.tensor_flops_per_cycle_per_sm["bf16"] == s.tensor_flops_per_cycle_per_sm["tf32"] == 128
    assert (
        s.l2_bytes == pytest.approx(6e6) and "by compute capability (CUDA not asked): SM count" in s.sources["hardware"]
    )


@pytest.mark.parametrize(
    "change, says",
    [
        ({"clocks": {}}, "lists no supported clocks"),
        ({"cuda_cores": 0}, "did not report its SM count"),
        ({"mem_bus_bits": 0}, "memory bus width"),
        ({"power_limit_w": 0.0}, "power limit"),
    ],
)
def test_missing_facts_are_one_line(change, says):
    with pytest.raises(SpecError) as e:
        spec_from_facts(facts_of("h200-sxm", (9, 0), 128, **change))
    assert says in str(e.value) and "\n" not in str(e.value) and "Fix:" in str(e.value)
