"""Every step of the port (notebook 02) is bitwise equal to the package kernel: the techniques
change the speed, never the bits."""

import csv
import json

import pytest
import torch
from conftest import gpu_only, poisoned, randn

from inkling_kernels import silu_and_mul
from inkling_workbook.measure import timing
from inkling_workbook.measure.timing import Timing
from inkling_workbook.ports.silu_and_mul import port_steps

# (M, N, weighted): decode rows, odd widths (column tails), row tails, M above the one-row limit
# (steps 3-5 go back to 8-row tiles there, the heuristic to its prefill tile) and fp32 weights.
CPU_CASES = [(1, 64, False), (3, 37, True), (9, 256, False), (5, 300, True), (1030, 24, True)]


def _check_all_steps(M, N, weighted, dtype, gen, device):
    x = randn((M, 2 * N), dtype, gen, device, scale=3.0)
    w = torch.rand(M, generator=gen).to(device) if weighted else None
    ref = silu_and_mul(x, w)
    assert not torch.isnan(ref).any()
    bits = torch.int16 if dtype != torch.float32 else torch.int32
    for name in port_steps.STEP_NAMES:
        out = poisoned((M, N), dtype, device)
        port_steps.run_step(name, x, w, out=out)
        assert torch.equal(out.view(bits), ref.view(bits)), f"step {name} differs from the package at {M}x{N}"


@pytest.mark.parametrize("M,N,weighted", CPU_CASES)
def test_every_step_bitwise_equal_to_package_cpu(M, N, weighted, gen):
    _check_all_steps(M, N, weighted, torch.bfloat16, gen, torch.device("cpu"))


def test_every_step_bitwise_fp16_cpu(gen):
    _check_all_steps(4, 100, True, torch.float16, gen, torch.device("cpu"))


def test_run_step_allocates_and_rejects_unknown(gen):
    x = randn((2, 16), torch.bfloat16, gen, "cpu")
    assert port_steps.run_step("slab", x).shape == (2, 8)
    with pytest.raises(ValueError, match="name must be one of"):
        port_steps.run_step("fastest", x)


def test_steps_are_cumulative_and_end_at_the_package_tile():
    # the tile of the last step is the package heuristic's on every size class
    for M, N in [(1, 3072), (16, 3072), (384, 1024), (49152, 768)]:
        cfg = port_steps.launch_config(M, N)
        assert port_steps.config_label("heuristic", M, N) == f"{cfg.BLOCK_M}x{cfg.BLOCK_N}/{cfg.num_warps}w"
    # BLOCK_M == 1 starts at step 3 and stops above the one-row limit
    assert port_steps.config_label("static_masks", 16, 3072).startswith("8x")
    assert port_steps.config_label("block_m_1", 16, 3072).startswith("1x")
    assert port_steps.config_label("int64_switch", 4096, 3072).startswith("8x")


@gpu_only
@pytest.mark.parametrize("M,N,weighted", [(1, 3072, False), (16, 768, True), (37, 1537, False), (4096, 3072, True)])
def test_every_step_bitwise_equal_to_package_gpu(M, N, weighted, gen):
    _check_all_steps(M, N, weighted, torch.bfloat16, gen, torch.device("cuda"))


def test_record_writer(tmp_path):
    t = Timing.from_passes([[1.0, 1.2, 1.1], [1.3, 1.25, 1.15]], reps=200)
    t_helion = Timing.from_passes([[1.6, 1.7, 1.65], [1.62, 1.68, 1.66]], reps=200)
    names = [port_steps.HELION, *port_steps.STEP_NAMES, "package"]
    rows = [
        port_steps.row(name, 16, 3072, t_helion if name == port_steps.HELION else t, "1980", t_helion.median_us)
        for name in names
    ]
    meta = {"device": "fake", "steps": [s.__dict__ for s in port_steps.STEPS]}
    csv_path, meta_path = timing.write_records(rows, meta, tmp_path / "port_steps_fake.csv")
    assert meta_path.name == "port_steps_fake.json"
    back = list(csv.DictReader(csv_path.open()))
    assert [r["impl"] for r in back] == names
    assert [int(r["step"]) for r in back] == [port_steps.HELION_STEP, *range(len(port_steps.STEPS) + 1)]
    assert float(back[1]["median_us"]) == pytest.approx(t.median_us, abs=1e-4)
    assert float(back[1]["lo_us"]) < float(back[1]["hi_us"])
    assert back[-1]["config"] == "package 1x1024/8w"  # 16 x 3072 is in the wide decode bucket
    # the original's row: its config named, its time; every row read against it (above 1: faster)
    assert back[0]["config"] == "helion sm90 table cfg 3"
    assert float(back[0]["median_us"]) == pytest.approx(t_helion.median_us, abs=1e-4)
    assert float(back[0]["vs_helion"]) == 1.0
    assert float(back[1]["vs_helion"]) == pytest.approx(t_helion.median_us / t.median_us, abs=1e-4)
    assert json.loads(meta_path.read_text())["device"] == "fake"


def test_record_without_helion_leaves_vs_helion_empty(tmp_path):
    t = Timing.from_passes([[1.0, 1.2, 1.1], [1.3, 1.25, 1.15]], reps=200)
    rows = [port_steps.row(name, 1, 3072, t) for name in [*port_steps.STEP_NAMES, "package"]]
    csv_path, _ = timing.write_records(rows, {"device": "fake"}, tmp_path / "port_steps_fake.csv")
    assert {r["vs_helion"] for r in csv.DictReader(csv_path.open())} == {""}
    assert list(port_steps.implementations(helion=False))[0] == "naive"
    assert list(port_steps.implementations(helion=True))[:2] == [port_steps.HELION, "naive"]


def test_helion_row_names_the_production_config():
    """The sm_90 table's config where the table has the width 2N, else the fixed tile."""
    # table shapes: 2N = 6144 -> cfg 3, 2N = 1536 -> cfg 2 (the shapes of SHAPES)
    assert port_steps.helion_config(3072) == "sm90_table"
    assert port_steps.config_label(port_steps.HELION, 16, 3072) == "helion sm90 table cfg 3"
    assert port_steps.config_label(port_steps.HELION, 49152, 768) == "helion sm90 table cfg 2"
    # 2N = 512: the table picks by weights
    assert port_steps.config_label(port_steps.HELION, 4, 256) == "helion sm90 table cfg 0"
    assert port_steps.config_label(port_steps.HELION, 4, 256, weighted=True) == "helion sm90 table cfg 1"
    # not in the table (N = 2880, 37): the fixed tile
    for N in (2880, 37):
        assert port_steps.helion_config(N) == "fixed"
        assert port_steps.config_label(port_steps.HELION, 4, N) == "helion fixed 1x256/4w"
    assert all(port_steps.helion_config(N) == "sm90_table" for _, N in port_steps.SHAPES)


@pytest.mark.skipif(not port_steps.helion_original.available(), reason=port_steps.helion_original.INSTALL_HINT)
@pytest.mark.parametrize("M,N,weighted", [(3, 768, False), (2, 96, True)])  # a table width, a width it lacks
def test_helion_row_runs_the_original_bitwise_equal_to_package(M, N, weighted, gen, device):
    x = randn((M, 2 * N), torch.bfloat16, gen, device, scale=3.0)
    w = torch.rand(M, generator=gen).to(device) if weighted else None
    out = poisoned((M, N), torch.bfloat16, device)
    port_steps.run_helion(x, w, out=out)
    assert torch.equal(out.view(torch.int16), silu_and_mul(x, w).view(torch.int16))


def _ptx(kernel, runtime: dict, constants: dict) -> str:
    """Compile a step kernel for sm_90 (Triton builds PTX without a GPU)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"gateup_ptr": "*bf16", "weight_ptr": "*fp32", "out_ptr": "*bf16", "M": "i32"} | runtime
    sig |= dict.fromkeys(constants, "constexpr")
    return triton.compile(ASTSource(kernel, sig, constants), target=GPUTarget("cuda", 90, 32)).asm["ptx"]


def test_step_kernels_compile_for_sm90_and_static_masks_remove_predicates():
    """The interpreter accepts code the compiler refuses (a jit helper returning None masks did
    once): every step kernel is compiled here, and the static-mask flags must remove the compare
    instructions of the masks from the code."""
    i32 = {"stride_in": "i32", "stride_out": "i32"}
    tile = {"BLOCK_M": 8, "BLOCK_N": 256, "HAS_WEIGHT": True}
    for kernel in (port_steps.step0_naive_kernel, port_steps.step1_slab_kernel):
        ptx = _ptx(kernel, i32 | {"N": "i32"}, tile)
        assert "ld.global" in ptx and "st.global" in ptx
    setp = {}
    for even in (False, True):
        flags = {"N": 3072, "EVEN_M": even, "EVEN_N": even} | tile
        setp[even] = _ptx(port_steps.step2_static_masks_kernel, i32, flags).count("setp")
        ptx = _ptx(port_steps.step4_flat_kernel, i32, flags | {"BLOCK_M": 1, "INT64": not even})
        assert "ld.global" in ptx and "st.global" in ptx
    assert setp[True] < setp[False]


@pytest.mark.parametrize("helion", [True, False])
def test_measure_steps_record_starts_from_helion(tmp_path, monkeypatch, helion):
    """The record ``steps`` writes: helion's row first where helion is installed, its config policy in
    the metadata, and a note where it is not (the timing itself is faked: no GPU here)."""
    t = Timing.from_passes([[1.0, 1.2, 1.1], [1.3, 1.25, 1.15]], reps=200)
    timed = {}

    def fake_time_steps(shapes, names=None, passes=None):
        timed["names"] = names
        return [port_steps.row(k, M, N, t, None, t.median_us if helion else None) for M, N in shapes for k in names]

    monkeypatch.setattr(port_steps.helion_original, "available", lambda: helion)
    monkeypatch.setattr(port_steps, "time_steps", fake_time_steps)
    monkeypatch.setattr(timing, "require_gpu", lambda: None)
    monkeypatch.setattr(timing, "warm_clocks", lambda seconds=1.0: {})
    monkeypatch.setattr(port_steps.provenance, "collect", lambda command=None: {"device": "fake"})
    monkeypatch.setattr(port_steps.provenance, "gpu_state", lambda: {})
    csv_path, meta_path = port_steps.measure_steps(tmp_path / "port_steps_fake.csv", shapes=[(16, 3072)])
    first = [port_steps.HELION] if helion else []
    assert timed["names"] == [*first, *port_steps.STEP_NAMES, "package", port_steps.CONTROL]
    meta = json.loads(meta_path.read_text())
    assert meta["helion"]["timed"] is helion and ("why_not" in meta["helion"]) is not helion
    assert [s["name"] for s in meta["steps"]] == [*first, *port_steps.STEP_NAMES, "package", port_steps.CONTROL]
    back = list(csv.DictReader(csv_path.open()))
    assert [r["impl"] for r in back] == timed["names"]
    if helion:
        assert back[0]["config"] == "helion sm90 table cfg 3" and back[0]["step"] == "-1"
    assert [int(r["step"]) for r in back[-2:]] == [len(port_steps.STEPS), len(port_steps.STEPS) + 1]
    assert back[-1]["config"] == back[-2]["config"]  # the control runs the package's launch
