"""Every step of the fused FP8 kernel (notebook 07) writes the package's bits: raw bytes of q and
every word of the scale storage (padding rows included), outputs poisoned before each run, fresh
random data with zeros, e4m3 ties, 448, NaN and Inf planted; the reference formula beside it."""

import json

import pytest
import torch
import triton
import triton.language as tl
from conftest import gpu_only

from inkling_kernels import fp8_group_quant, silu_and_mul, silu_and_mul_fp8_group_quant
from inkling_kernels.fp8 import ACT_NON_INTERLEAVED
from inkling_kernels.fp8 import _launch as _fp8_launch
from inkling_kernels.reference import fp8_group_quant_ref
from inkling_workbook.fp8_steps import checks as step_checks
from inkling_workbook.fp8_steps import kernels as fp8_steps
from inkling_workbook.fp8_steps.checks import CPU_CASES, GPU_CASES, Case


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.name)
def test_every_step_bitwise_equal_to_package_cpu(case):
    rows = step_checks.check_steps("cpu", cases=[case])
    assert len(rows) == len(fp8_steps.STEPS)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad


def test_edge_values_are_planted():
    """The check's data holds what it claims: ties (17, 432, 2**-10), 448, a zero group, NaN, Inf."""
    case = Case("probe", (4,), 256, interleaved=False)
    gateup = step_checks.make_gateup(case, "cpu")
    y = silu_and_mul(gateup, interleaved=False).float()
    assert (y != 0).float().mean() > 0.5  # random, never zeros
    assert torch.all(y[0, :128] == 0)
    assert y[1, :6].tolist() == [448.0, 432.0, 17.0, 2.0**-10, -3 * 2.0**-10, -424.0]
    assert torch.isnan(y[2, 0]) and torch.isinf(y[2, 127])
    q, s = fp8_group_quant_ref(y, 128)
    assert s[1, 0].item() == 1.0
    # RNE at the ties: 432 -> 448 (even), 17 -> 16, 2**-10 -> 0, -3 * 2**-10 -> -2**-8; NaN -> 0x7F
    assert q[1, :5].float().tolist() == [448.0, 448.0, 16.0, 0.0, -(2.0**-8)]
    assert q.view(torch.uint8)[2, 0].item() == 0x7F


@triton.jit
def _e4m3_half_up(t):
    """A deliberately wrong rounding: ties go up (away from zero) instead of to even."""
    bits = t.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = tl.minimum(bits & 0x7FFFFFFF, 0x43E00000)
    normal = ((mag + 0x80000) >> 20) - 960
    small = (mag.to(tl.float32, bitcast=True) * 512.0 + 8388608.0).to(tl.int32, bitcast=True) - 0x4B000000
    return tl.where(mag < 0x3C800000, small, normal) | sign


def test_planted_rounding_bug_is_caught(monkeypatch):
    """The check can fail: the naive step with ties rounded up must be reported, on q only."""
    monkeypatch.setattr(fp8_steps, "_e4m3_signed", _e4m3_half_up)
    rows = step_checks.check_steps("cpu", cases=[CPU_CASES[1]], steps=["naive"])
    assert len(rows) == 1 and not rows[0]["ok"]
    assert not rows[0]["q_equal_package"] and rows[0]["scales_equal_package"]
    assert not rows[0]["equal_reference"]
    assert rows[0]["q_bytes_differing"] >= 1


def test_unwritten_output_is_caught():
    """A runner that leaves the poisoned output as it is fails every comparison."""
    rows = step_checks.check_steps("cpu", cases=[CPU_CASES[0]], runners={"nothing": lambda x, out, **kw: out})
    assert not rows[0]["q_equal_package"] and not rows[0]["scales_equal_package"]


def test_masked_rows_untouched_and_padding_zeroed():
    case = CPU_CASES[6]  # masked (5, 0, 2), column-major: padding rows 5..7
    gateup = step_checks.make_gateup(case, "cpu")
    q, s = fp8_steps.run_step("work_list", gateup, out=step_checks._poisoned_out(case, "cpu"), **case.kwargs("cpu"))
    assert torch.all(q.view(torch.uint8)[1] == step_checks.Q_POISON)
    assert torch.all(q.view(torch.uint8)[2, 2:] == step_checks.Q_POISON)
    words = step_checks._storage_words(s).view(3, -1, 8)  # [E, G, Tp]
    assert torch.all(words[:, :, 5:] == 0)


@pytest.mark.parametrize(
    "kwargs,error",
    [
        (dict(step="nope"), ValueError),
        (dict(step=7), ValueError),
        (dict(step=True), ValueError),
        (dict(gateup=[1.0]), TypeError),
        (dict(gateup=torch.zeros(2, 8, dtype=torch.int32)), TypeError),
        (dict(gateup=torch.zeros(2, 255)), ValueError),
        (dict(group_size=96), ValueError),
        (dict(masked_m=torch.zeros(2, dtype=torch.int32)), ValueError),
    ],
)
def test_bad_arguments(kwargs, error):
    args = dict(step="naive", gateup=torch.randn(2, 256))
    args.update(kwargs)
    name = [k for k in kwargs][0]
    with pytest.raises(error, match=name):
        fp8_steps.run_step(args.pop("step"), args.pop("gateup"), **args)


def test_step_flags_interpreter_are_all_off():
    for i in range(len(fp8_steps.STEPS)):
        f = fp8_steps.step_flags(i, torch.device("cpu"), torch.bfloat16, interleaved_words=True, redux_ok=True,
                                 decode=True)  # fmt: skip
        assert f[:4] == (False, False, False, 0) and not f[5] and not f[6] and not f[7]
        assert f[4] == (i >= 3)  # pair words: the interpreter reads them too


@gpu_only
@pytest.mark.gpu
def test_every_step_bitwise_equal_to_package_gpu():
    rows = step_checks.check_steps("cuda", cases=GPU_CASES)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad


@gpu_only
@pytest.mark.gpu
def test_fp8_steps_cli_writes_records(tmp_path, monkeypatch):
    """The records' shape, on one small case (the real run is the GPU job's fp8steps step)."""
    from inkling_workbook import cli

    monkeypatch.setattr(step_checks, "GPU_CASES", CPU_CASES[:1])
    monkeypatch.setattr(step_checks, "TIMED_CASES", CPU_CASES[:1])
    assert cli.main(["fp8-steps", "--device", "cuda", "--out", str(tmp_path / "fp8_steps_x.csv")]) == 0
    meta = json.loads((tmp_path / "fp8_steps_x.json").read_text())
    assert meta["bitwise"]["all_ok"] and len(meta["steps"]) == len(fp8_steps.STEPS) + 1


# ---- the package at decode on unaligned memory (compiled only) --------------------------------
# ``_warp_redux_ok`` decides the one-warp-a-group redux from the group size and the tile alone;
# Triton lays out a load from the pointer's alignment too, so an unaligned input (odd element
# offset and row stride) and an unaligned caller-provided ``out`` may give a layout where a warp
# holds parts of several groups. Under the interpreter the redux is never taken: GPU only.


def _unaligned(t: torch.Tensor, offset: int = 1) -> torch.Tensor:
    """A copy of ``t`` [M, K] at an odd element offset with an odd row stride."""
    M, K = t.shape
    buf = torch.empty(M * (K + 1) + offset, dtype=t.dtype, device=t.device)
    view = buf[offset : offset + M * (K + 1)].view(M, K + 1)[:, :K]
    view.copy_(t)
    return view


def _unaligned_out(M, N, G, device):
    qb = torch.full((M * N + 1,), 0xA5, dtype=torch.uint8, device=device)
    sb = torch.full((M * G + 1,), float("nan"), dtype=torch.float32, device=device)
    return qb[1:].view(M, N).view(torch.float8_e4m3fn), sb[1:].view(M, G)


@gpu_only
@pytest.mark.gpu
@pytest.mark.parametrize("unaligned", ["input", "out", "both"])
@pytest.mark.parametrize("op", ["fused_nil", "quant"])
def test_unaligned_decode_warp_redux_gpu(op, unaligned):
    gen = torch.Generator().manual_seed(7)
    M, N, G = 16, 1536, 12
    x = torch.randn(M, 2 * N if op == "fused_nil" else N, generator=gen).mul(3)
    x[:, :128] *= 64  # group 0 (gate of group 0) far larger: a group max mixed across groups shows
    x = x.bfloat16().cuda()
    y = silu_and_mul(x, interleaved=False) if op == "fused_nil" else x
    ref_q, ref_s = (t.cuda() for t in fp8_group_quant_ref(y.cpu(), 128))  # the formula on the CPU (IEEE /)
    xin = _unaligned(x) if unaligned in ("input", "both") else x
    out = _unaligned_out(M, N, G, "cuda") if unaligned in ("out", "both") else None
    if op == "fused_nil":
        q, s = silu_and_mul_fp8_group_quant(xin, interleaved=False, out=out)
    else:
        q, s = fp8_group_quant(xin, out=out)
    assert torch.equal(s.view(torch.int32), ref_s.view(torch.int32)), "scales differ from the reference"
    assert torch.equal(q.view(torch.uint8), ref_q.view(torch.uint8)), "q differs from the reference"


def _package_redux_layout(unaligned: str) -> str:
    """The layout of the redux's operand in the package's decode program (non-interleaved bf16,
    N = 1536, WARP_REDUX on), compiled for sm_90 on the CPU (no GPU needed); ``unaligned`` names
    the pointers ("x", "q") launched without 16-byte alignment (a real launch then gets no
    divisibility specialization for them, as here)."""
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from inkling_kernels import fp8
    from inkling_kernels.fp8 import _kernel as _fp8_kernel
    from inkling_kernels.fp8 import _launch as _fp8_launch

    jit = _fp8_kernel._fp8_group_kernel
    consts = dict(N=1536, GROUP=128, ACT=fp8.ACT_NON_INTERLEAVED, HAS_WEIGHT=False, HAS_MASK=False, UE8M0=False,
                  BLOCK_M=1, BLOCK_G=4, E_POW2=1, WORK_LIST=False, PACK_E_BITS=0, PACK_CNT_BITS=0, INT64=False,
                  USE_PDL=False, HW=True, SPLIT_DIV=True, PAIR_WORDS=False, FTZ_EXP=2, BF16_BITS=True, FAST_SCALE=True,
                  WARP_REDUX=True, SCALE_ASM=True, PAD_ROWS=False)  # fmt: skip
    assert _fp8_launch._warp_redux_ok(fp8.ACT_NON_INTERLEAVED, False, 128, 512, 4, 16, True)  # aligned: the redux
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*bf16", "masked_m_ptr": "*bf16", "q_ptr": "*u8", "s_ptr": "*fp32"}
    sig, attrs = {}, {}
    for i, n in enumerate(jit.arg_names):
        if n in consts:
            sig[n] = "constexpr"
            continue
        sig[n] = ptrs.get(n, "i32")
        bad = any(n in (f"{p}_ptr", f"stride_{p}m", f"stride_{p}e") for p in unaligned)
        if not bad and (n in ptrs or n.startswith("stride")):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(jit, sig, consts, attrs)
    ttgir = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ttgir"]
    defs = dict(re.findall(r"(#blocked\d*) = #ttg\.blocked<\{([^}]*)\}>", ttgir))
    redux = next(line for line in ttgir.splitlines() if "inline_asm" in line and "redux.sync" in line)
    return defs[re.findall(r"tensor<[^>]*(#blocked\d*)>", redux)[-1]]


ONE_GROUP_A_WARP = "sizePerThread = [1, 1, 4], threadsPerWarp = [1, 1, 32], warpsPerCTA = [1, 4, 1]"


@pytest.mark.parametrize("unaligned", ["", "x", "q"])
def test_package_warp_redux_one_group_a_warp_sm90(unaligned):
    """Aligned, or one of input and output unaligned: each warp holds exactly one group of 128."""
    assert _package_redux_layout(unaligned).startswith(ONE_GROUP_A_WARP)


def test_package_warp_redux_unaligned_input_and_out_sm90():
    """With input and output both unaligned the decode program lays a thread's four elements over
    four groups (the redux would mix them), so the launcher does not take the redux there."""
    assert not _package_redux_layout("xq").startswith(ONE_GROUP_A_WARP)
    assert not _fp8_launch._warp_redux_ok(ACT_NON_INTERLEAVED, False, 128, 512, 4, 16, False)


def test_launcher_takes_the_redux_only_on_aligned_tensors(monkeypatch):
    """The general path's decision for real tensors (the compiled switches and tiles forced on, the
    launch captured): aligned input and output take the redux; an unaligned input or output does not."""
    seen = []
    flags = _fp8_launch._kernel_flags
    monkeypatch.setattr(_fp8_launch, "_kernel_flags", lambda d, t, i: {**flags(d, t, i), "WARP_REDUX": True})
    config = _fp8_launch._launch_config
    monkeypatch.setattr(_fp8_launch, "_launch_config", lambda rows, G, group, i: config(rows, G, group, False))
    monkeypatch.setattr(_fp8_launch, "_launch_kernel", lambda grid, d, i, args, consts: seen.append(consts))
    x = torch.randn(16, 2 * 1536).bfloat16()
    for xin, out in ((x, None), (_unaligned(x), None), (x, _unaligned_out(16, 1536, 12, "cpu"))):
        silu_and_mul_fp8_group_quant(xin, interleaved=False, out=out)
    assert [c["WARP_REDUX"] for c in seen] == [True, False, False]


def test_every_step_compiles_for_sm90_with_the_gpu_switches(monkeypatch):
    """The compiled-only paths (the interpreter never takes them) pass Triton's compiler: each step's
    launch on two cases, with every switch the H200 gets, compiled for sm_90 on the CPU."""
    from inkling_workbook.proofs import fp_fusion

    def sm90_flags(device, dtype, interpreted):
        sixteen = dtype in (torch.bfloat16, torch.float16)
        return {"HW": True, "SPLIT_DIV": sixteen, "FTZ_EXP": 2, "BF16_BITS": dtype == torch.bfloat16,
                "FAST_SCALE": True, "WARP_REDUX": True, "SCALE_ASM": True}  # fmt: skip

    seen = []
    monkeypatch.setattr(fp8_steps, "_kernel_flags", sm90_flags)
    monkeypatch.setattr(
        fp8_steps._backend, "launch", lambda kernel, grid, device, *a, **kw: seen.append((kernel, a, kw))
    )
    for case in (CPU_CASES[2], CPU_CASES[7]):  # fp16 interleaved; bf16 masked, ue8m0, groups of 64
        gateup = step_checks.make_gateup(case, "cpu")
        for step in fp8_steps.STEP_NAMES:
            fp8_steps.run_step(step, gateup, **case.kwargs("cpu"))
    assert len(seen) == 2 * len(fp8_steps.STEPS)
    assert all(kw["F"][0] for _, _, kw in seen[1:6])  # the hardware path from step 1 on
    for kernel, args, kw in seen:
        ptx = fp_fusion.compile_sm90(kernel, args, kw).asm["ptx"]
        assert ("cvt.rn.satfinite.e4m3x2.f32" in ptx) == kw["F"][0]
