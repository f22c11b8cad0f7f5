"""Blackwell without one: the package's kernels compiled for sm_100a and sm_120a (and sm_90a, the
H200's, as the baseline) on the CPU with Triton's bundled ptxas, as a GPU of that capability
launches them (``inkling_workbook.proofs.blackwell``). Fails when a kernel stops compiling for a target
or uses local memory (spills); checks that the NVFP4 kernel takes the hardware e2m1 conversion on
Blackwell only, and that the committed records cover every case without spills."""

import functools
import json
from pathlib import Path

import pytest
import torch
from conftest import HAS_CUDA, gpu_only

from inkling_kernels import _backend, nvfp4
from inkling_workbook.proofs import blackwell

ROOT = Path(__file__).resolve().parent.parent
CASES = {c.name: c for c in blackwell.all_cases()}


@functools.cache
def compiled(name: str, target: str) -> dict:
    """One compile per (case, target) in the session, inspected."""
    comp, elements, straight, kwargs = blackwell.compile_case(CASES[name], target)
    return blackwell.inspect_compiled(comp, elements, straight, kwargs["num_warps"]) | {"plan": kwargs}


@pytest.mark.parametrize("target", ["sm_100a", "sm_120a"])
@pytest.mark.parametrize("name", blackwell.REPRESENTATIVE)
def test_compiles_without_local_memory(name, target):
    r = compiled(name, target)
    assert r["local_bytes"] == 0 and r["stack_bytes"] == 0, f"{name} spills on {target}"
    assert 0 < r["registers"] <= 255 and r["sass_to_exit"] > 0
    assert r["ptx_griddepcontrol"] == (2 if r["plan"]["USE_PDL"] else 0)


@pytest.mark.parametrize("name", [n for n in blackwell.REPRESENTATIVE if "nvfp4" in n])
def test_nvfp4_takes_the_hardware_conversion_on_blackwell_only(name):
    """One ``cvt.rn.satfinite.e2m1x2.f32`` (SASS ``F2FP...E2M1``) per two elements of a thread on
    sm_100a and sm_120a; none on sm_90a, whose ptxas refuses the instruction. Fewer SASS
    instructions per element on sm_100a than on sm_90a."""
    base = compiled(name, "sm_90a")
    assert base["plan"]["HW_E2M1"] is False and base["ptx_e2m1_cvt"] == 0 and base["sass_e2m1"] == 0
    for target in ("sm_100a", "sm_120a"):
        r = compiled(name, target)
        assert r["plan"]["HW_E2M1"] is True
        assert r["sass_e2m1"] == r["elements_per_thread"] // 2
        assert r["sass_per_element"] < base["sass_per_element"]


def test_sm90a_refuses_the_hardware_conversion():
    """Why the switch exists: the same launch with ``HW_E2M1`` forced on does not assemble for sm_90a."""
    from triton.backends.compiler import GPUTarget

    from portcheck import code as portcheck

    kernel, args, kwargs, _, _ = blackwell.plan(CASES["nvfp4_quant swizzled 8 experts 8192x3072"], 90)
    kwargs["HW_E2M1"] = True
    with pytest.raises(Exception, match="e2m1x2"):
        portcheck.compile_launch(portcheck.Launch(kernel, args, kwargs, (1,)), GPUTarget("cuda", 90, 32))


def test_plans_follow_the_capability():
    """The FP8 switches of sm_90 (the flushing sigmoid, the fast decode scale) stay on sm_90."""
    name = "silu_and_mul_fp8_group_quant il row decode 16x3072"
    p90 = blackwell.plan(CASES[name], 90)[2]
    p100 = blackwell.plan(CASES[name], 100)[2]
    assert (p90["FTZ_EXP"], p90["FAST_SCALE"]) == (2, True)
    assert (p100["FTZ_EXP"], p100["FAST_SCALE"], p100["HW"]) == (1, False, True)
    packed = blackwell.plan(CASES["silu_and_mul_fp8_group_quant nil ue8m0_packed prefill 8192x3072"], 100)[2]
    assert packed["UE8M0"] is True and packed["SCALE_LAYOUT"] == 2
    with pytest.raises(ValueError, match="target must be one of"):
        blackwell.compile_case(CASES[name], "sm_80")


@pytest.mark.parametrize("target", ["sm_100a", "sm_120a", "sm_90a"])
def test_record_covers_every_case_without_spills(target):
    rec = json.loads((ROOT / f"data/compile_{target.replace('_', '')}.json").read_text())
    assert rec["target"] == target and rec["all_compiled"] and rec["no_local_memory"]
    assert set(rec["cases"]) == set(CASES), "rerun python -m inkling_workbook.proofs.blackwell data"
    assert rec["provenance"]["git_commit"] and rec["triton"]
    for name, row in rec["cases"].items():
        assert row["compiled"] and row["local_bytes"] == 0, name


def test_records_nvfp4_instructions_per_element():
    """The NVFP4 kernels need fewer SASS instructions per element on sm_100a than on sm_90a."""
    recs = {t: json.loads((ROOT / f"data/compile_{t}.json").read_text())["cases"] for t in ("sm90a", "sm100a")}
    nv = [n for n in CASES if "nvfp4" in n]
    assert nv
    for name in nv:
        assert recs["sm100a"][name]["sass_per_element"] < recs["sm90a"][name]["sass_per_element"], name


@gpu_only
def test_gpu_nvfp4_launch_key_holds_the_conversion_switch():
    """A compiled launch's key and constexprs carry ``HW_E2M1``, as the device's capability says:
    off on the H200 (sm_90), on on Blackwell."""
    dev = torch.device("cuda")
    x = torch.randn(64, 256, device=dev, dtype=torch.bfloat16)
    nvfp4.nvfp4_quant(x, torch.ones(1, device=dev))
    want = nvfp4._hw_e2m1(dev)
    assert want is (torch.cuda.get_device_capability()[0] in (10, 11, 12))
    if _backend._no_launch_hooks():  # a profiler's hook keeps launches off the cache
        keys = nvfp4._LAUNCHER.cached_keys()
        assert keys and all(k[2] in (True, False) for k in keys) and any(k[2] is want for k in keys)
    assert HAS_CUDA


@gpu_only
def test_gpu_nvfp4_hardware_path_gives_the_software_bytes(monkeypatch):
    """On compute capability 10.x-12.x: both NVFP4 ops with the hardware conversion and with it
    forced off give the same packed bytes and scales (both layouts, weights, experts with an empty
    one, a NaN and an infinity in the input)."""
    from inkling_kernels import nvfp4_quant, silu_and_mul_nvfp4_quant

    dev = torch.device("cuda")
    if not nvfp4._hw_e2m1(dev):
        pytest.skip("no hardware e2m1 conversion on this GPU (the software path is what runs)")
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(300, 3072, generator=gen) * 3).to(torch.bfloat16)
    x[5, 17], x[7, 3] = float("nan"), float("inf")
    x, w = x.to(dev), torch.rand(300, generator=gen).to(dev)
    eo = torch.tensor([0, 100, 100, 300], dtype=torch.int32, device=dev)
    gs = torch.tensor([50.0, 1.0, 200.0], device=dev)
    outs = {}
    for hw in (True, False):
        monkeypatch.setattr(nvfp4, "_hw_e2m1", lambda device, hw=hw: hw)
        outs[hw] = [silu_and_mul_nvfp4_quant(x, gs, eo, interleaved=il, topk_weights=w) for il in (False, True)]
        outs[hw].append(nvfp4_quant(x[:, :1536], gs, expert_offsets=eo))
    for (p_hw, s_hw), (p_sw, s_sw) in zip(outs[True], outs[False], strict=True):
        assert torch.equal(p_hw, p_sw) and torch.equal(s_hw, s_sw)
