"""Memory safety and argument checking: every reproducer of the adversarial review, each raising a
ValueError/TypeError that names the argument (eager, registered and compiled alike) or giving the
right bytes; no write outside a caller's buffer, whatever the arguments (outputs guarded, see
``conftest.guarded``); the NVFP4 kernel's own store mask at the scale buffer's real extent."""

import pytest
import torch
from conftest import DEVICE, guarded

import inkling_kernels as ik
from inkling_kernels import _backend, reference
from inkling_kernels._nvfp4_kernel import nvfp4_quant_kernel
from inkling_kernels.nvfp4 import ACT_NONE

U8 = torch.uint8


def _x(M=4, N=64, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(M, N, generator=g) * 3).to(dtype).to(DEVICE)


def _gs(v=100.0, E=1):
    return torch.full((E,), v, dtype=torch.float32, device=DEVICE)


def _nv_out(M=4, N=64, rows=128):
    return guarded((M, N // 2), U8, DEVICE, name="packed"), guarded((rows, (N // 16 + 3) // 4 * 4), U8, DEVICE)


# ---- the NVFP4 scales overrun: refused in every form of the call ------------------------------

NVFP4_CALLS = {
    "nvfp4_quant": lambda x, gs, **kw: ik.nvfp4_quant(x, gs, **kw),
    "fused": lambda x, gs, **kw: ik.silu_and_mul_nvfp4_quant(torch.cat([x, x], 1), gs, **kw),
}


@pytest.mark.parametrize("rows", [4, 130, 127, 0])
@pytest.mark.parametrize("op", sorted(NVFP4_CALLS))
def test_nvfp4_partial_block_scales_refused(op, rows):
    x, gs = _x(), _gs()
    packed, scales = _nv_out(rows=rows)
    with pytest.raises(ValueError, match=r"out\[1\]'s rows must be a multiple of 128"):
        NVFP4_CALLS[op](x, gs, out=(packed, scales))
    with pytest.raises(ValueError, match=r"out\[1\]'s rows must be a multiple of 128"):
        NVFP4_CALLS[op](x, gs, out=(packed, scales), validate=False)
    assert bool((packed == 0xFF).all())  # refused before any launch


@pytest.mark.parametrize("scale_rows", [130, 200, 0, 4])
@pytest.mark.parametrize("validate", [None, False])
def test_nvfp4_scale_rows_whole_blocks(scale_rows, validate):
    with pytest.raises(ValueError, match="scale_rows must be a multiple of 128"):
        ik.nvfp4_quant(_x(), _gs(), scale_rows=scale_rows, validate=validate)
    with pytest.raises(ValueError, match="scale_rows must be a multiple of 128"):
        torch.ops.inkling.nvfp4_quant(_x(), _gs(), None, None, True, scale_rows, validate)


def test_nvfp4_scale_rows_type_and_bound():
    with pytest.raises(TypeError, match="scale_rows must be an int"):
        ik.nvfp4_quant(_x(), _gs(), scale_rows=True)
    with pytest.raises(ValueError, match="scale_rows=256 is more than"):
        ik.nvfp4_quant(_x(), _gs(), scale_rows=256)
    packed, scales = ik.nvfp4_quant(_x(M=0), _gs(), scale_rows=0)
    assert packed.shape == (0, 32) and scales.shape == (0, 4)


def test_nvfp4_registered_out_ops_refuse_partial_blocks():
    x, gs = _x(), _gs()
    packed, scales = _nv_out(rows=4)
    with pytest.raises(ValueError, match=r"out\[1\]'s rows"):
        torch.ops.inkling.nvfp4_quant_out(x, gs, None, None, True, None, None, packed=packed, scales=scales)
    with pytest.raises(ValueError, match=r"out\[1\]'s rows"):
        torch.ops.inkling.silu_and_mul_nvfp4_quant_out(
            torch.cat([x, x], 1), gs, None, None, False, None, True, None, None, packed=packed, scales=scales
        )


def test_nvfp4_kernel_store_stays_inside_a_partial_scale_buffer():
    """A direct launch, past every check: 4 scale rows (a partial swizzled block) and 300 scale
    rows (two whole blocks and a partial one). The kernel's store mask is the buffer's extent."""
    M, N = 4, 64
    x = _x(M, N)
    for rows in (4, 300):
        packed = guarded((M, N // 2), U8, DEVICE, name="packed")
        scales = guarded((rows, 4), U8, DEVICE, name=f"scales[{rows}]")
        eo = torch.tensor([0, M], dtype=torch.int64, device=DEVICE)
        bo = torch.tensor([0, 128], dtype=torch.int64, device=DEVICE)
        gs = _gs()
        _backend.launch(
            nvfp4_quant_kernel, (triton_cdiv(rows, 16),), DEVICE, x, gs, gs, eo, bo, packed, scales,
            x.stride(0), M, 1, rows, N=N, SCALE_COLS=4, ACT=ACT_NONE, HAS_WEIGHT=False, SWIZZLE=True,
            BLOCK_M=16, BLOCK_K=64, SEARCH_STEPS=1, INT64=False, USE_PDL=False, num_warps=4,
        )  # fmt: skip
    # the autouse guard check fails the test on any byte written past either buffer


def triton_cdiv(a, b):
    return -(-a // b)


def test_nvfp4_unchecked_out_scales_written_in_bounds_and_correct():
    """validate=False with whole blocks: the bytes equal the checked call's, guards untouched."""
    x, gs = _x(M=130), _gs()
    want = ik.nvfp4_quant(x, gs, scale_rows=256)
    packed, scales = _nv_out(M=130, rows=256)
    ik.nvfp4_quant(x, gs, out=(packed, scales), validate=False)
    assert torch.equal(packed, want[0]) and torch.equal(scales, want[1])


# ---- global scales, offsets ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_invalid_global_scale_refused_with_out(bad):
    packed, scales = _nv_out()
    with pytest.raises(ValueError, match="global_scale must be finite and >= 0"):
        ik.nvfp4_quant(_x(), _gs(bad), out=(packed, scales), validate=True)
    if DEVICE.type == "cpu":  # the CPU reads it for free: checked by default with out too
        with pytest.raises(ValueError, match="global_scale must be finite and >= 0"):
            ik.nvfp4_quant(_x(), _gs(bad), out=(packed, scales))


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_unchecked_invalid_global_scale_poisons_its_expert(bad):
    """validate=False: an invalid global scale gives NaN scales (0x7F) and codes +0 in every block
    of its expert, the other expert's bytes as with a valid scale (kernel and reference agree)."""
    M, N = 6, 64
    x = _x(M, N)
    eo = torch.tensor([0, 3, 6], dtype=torch.int32, device=DEVICE)
    gs = torch.tensor([bad, 50.0], device=DEVICE)
    packed, scales = ik.nvfp4_quant(x, gs, expert_offsets=eo, swizzle=False, validate=False)
    assert bool((scales[:3] == 0x7F).all()) and bool((packed[:3] == 0).all())
    ref_p, ref_s = reference.nvfp4_quant_ref(x[3:].cpu(), 50.0)
    assert torch.equal(packed[3:].cpu(), ref_p) and torch.equal(scales[3:].cpu(), ref_s)
    bad_p, bad_s = reference.nvfp4_quant_ref(x[:3].cpu(), bad)
    assert torch.equal(packed[:3].cpu(), bad_p) and torch.equal(scales[:3].cpu(), bad_s)


def test_blockscale_offsets_bounded_when_the_op_allocates():
    x, gs2 = _x(), _gs(E=2)
    eo = torch.tensor([0, 2, 4], device=DEVICE)
    with pytest.raises(ValueError, match="blockscale_offsets end at 2199023255552 scale rows, more than"):
        ik.nvfp4_quant(x, gs2, expert_offsets=eo, blockscale_offsets=torch.tensor([0, 2**40, 2**41], device=DEVICE))
    with pytest.raises(ValueError, match="blockscale_offsets end at 131072"):
        ik.nvfp4_quant(x, _gs(), blockscale_offsets=torch.tensor([0, 131072], device=DEVICE))
    # a layout with gaps is still taken into a buffer the caller gives
    packed, scales = _nv_out(rows=384)
    ik.nvfp4_quant(x, gs2, expert_offsets=eo, blockscale_offsets=torch.tensor([0, 128, 384], device=DEVICE),
                   out=(packed, scales), validate=True)  # fmt: skip


def test_default_blockscale_offsets_checked():
    with pytest.raises(ValueError, match="non-decreasing"):
        ik.default_blockscale_offsets(torch.tensor([0, 300, 5]))
    with pytest.raises(TypeError, match="expert_offsets must have dtype"):
        ik.default_blockscale_offsets(torch.tensor([0.0, 3.0]))
    assert ik.default_blockscale_offsets(torch.tensor([0, 300, 305])).tolist() == [0, 384, 512]


def test_masked_m_past_2_to_32_clamps_not_wraps():
    g = torch.Generator().manual_seed(3)
    gateup = torch.randn(2, 8, 256, generator=g).bfloat16().to(DEVICE)
    big = torch.tensor([2**32 + 1, 3], dtype=torch.int64, device=DEVICE)
    q, s = ik.silu_and_mul_fp8_group_quant(gateup, masked_m=big, interleaved=False)
    want_q, want_s = ik.silu_and_mul_fp8_group_quant(
        gateup, masked_m=torch.tensor([8, 3], device=DEVICE), interleaved=False
    )
    assert torch.equal(q[0].view(U8), want_q[0].view(U8)) and torch.equal(s[0], want_s[0])


# ---- types of every option ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: ik.nvfp4_quant(_x(), _gs(), swizzle="no"), TypeError, "swizzle"),
        (lambda: ik.nvfp4_quant(_x(), _gs(), swizzle=None), TypeError, "swizzle"),
        (lambda: ik.nvfp4_quant(_x(), _gs(), config="fast"), ValueError, "config"),
        (lambda: ik.nvfp4_quant(_x(), _gs(), config=(0, 64, 4)), ValueError, "config"),
        (lambda: ik.silu_and_mul(_x(), config="fast"), TypeError, "config"),
        (lambda: ik.LaunchConfig(0, 64, 4), ValueError, "BLOCK_M"),
        (lambda: ik.LaunchConfig(-1, 64, 4), ValueError, "BLOCK_M"),
        (lambda: ik.LaunchConfig(1, 96, 4), ValueError, "BLOCK_N"),
        (lambda: ik.LaunchConfig(1, 64, 3), ValueError, "num_warps"),
        (lambda: ik.LaunchConfig(1, 64, 4.0), TypeError, "num_warps"),
        (lambda: ik.LaunchConfig(1, 64, 4, "fast"), ValueError, "stream_policy"),
        (lambda: ik.max_blockscale_rows(4.5, 1), TypeError, "M"),
        (lambda: ik.max_blockscale_rows(4, True), TypeError, "E"),
        (lambda: ik.launch_config(-5, -5), ValueError, "M=-5"),
        (lambda: ik.launch_config(4, 0), ValueError, "N=0"),
        (lambda: ik.launch_config(4.0, 64), TypeError, "M"),
    ],
)
def test_option_types_and_values(call, exc, word):
    with pytest.raises(exc, match=word):
        call()


def test_out_requiring_grad_refused():
    """In grad mode an output that requires grad is refused, as torch's own out= ops do (the NVFP4
    outputs are uint8, which cannot require grad)."""
    x = _x()
    with torch.enable_grad():
        o = torch.empty(4, 32, dtype=torch.bfloat16, device=DEVICE, requires_grad=True)
        with pytest.raises(ValueError, match="out requires grad"):
            ik.silu_and_mul(x, out=o)
        q = torch.empty(4, 128, device=DEVICE).to(torch.float8_e4m3fn)
        s = torch.empty(4, 1, device=DEVICE).requires_grad_()
        with pytest.raises(ValueError, match=r"out\[1\] \(scales\) requires grad"):
            ik.fp8_group_quant(_x(N=128), out=(q, s))
    with torch.no_grad():  # outside grad mode accepted, as torch's out= ops
        ik.silu_and_mul(x, out=torch.empty(4, 32, dtype=torch.bfloat16, device=DEVICE, requires_grad=True))


def test_input_grad_error_names_the_argument():
    with torch.enable_grad():
        with pytest.raises(ValueError, match="^x requires grad"):
            ik.nvfp4_quant(_x().float().requires_grad_(), _gs())
        with pytest.raises(ValueError, match="^gateup requires grad"):
            ik.silu_and_mul_nvfp4_quant(_x(N=128).requires_grad_(), _gs())


# ---- registered ops: side tensors on meta, errors as in eager ----------------------------------


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: torch.ops.inkling.silu_and_mul(_x(), torch.empty(4, device="meta")), "topk_weights"),
        (lambda: torch.ops.inkling.nvfp4_quant(_x(), torch.empty(1, device="meta")), "global_scale"),
        (
            lambda: torch.ops.inkling.silu_and_mul_nvfp4_quant(
                _x(N=128), _gs(), torch.empty(2, dtype=torch.int32, device="meta")
            ),
            "expert_offsets",
        ),
        (
            lambda: torch.ops.inkling.silu_and_mul_fp8_group_quant(
                _x(N=512).reshape(2, 2, 512), None, False, 128, False, False, torch.empty(2, device="meta").int()
            ),
            "masked_m",
        ),
        (lambda: torch.ops.inkling.fp8_group_quant(_x(N=256), 0), "group_size"),
        (lambda: torch.ops.inkling.fp8_group_quant(_x(N=256).to("meta"), 0), "group_size"),
        (lambda: torch.ops.inkling.silu_and_mul(_x().to("meta"), None, torch.int8), "out_dtype"),
        (lambda: torch.ops.inkling.silu_and_mul(_x().to("meta"), torch.ones(4, device=DEVICE)), "topk_weights"),
    ],
)
def test_registered_ops_raise_the_eager_errors(call, word):
    with pytest.raises((ValueError, TypeError), match=word):
        call()


COMPILED_BAD = [
    (lambda a: ik.fp8_group_quant(a, 0), "group_size"),
    (lambda a: ik.silu_and_mul_fp8_group_quant(a, group_size=48), "group_size"),
    (lambda a: ik.nvfp4_quant(a, torch.tensor([100.0], device=a.device), scale_rows=130), "scale_rows"),
    (lambda a: ik.silu_and_mul_nvfp4_quant(a, torch.tensor([100.0], device=a.device), swizzle=1), "swizzle"),
    (lambda a: ik.silu_and_mul(a, out_dtype=torch.int8), "out_dtype"),
]


def test_ops_on_meta_tensors_infer_shapes():
    """All-meta calls (shape inference) still give the outputs' shapes."""
    out = torch.ops.inkling.silu_and_mul(_x().to("meta"), torch.ones(4, device="meta"))
    assert out.device.type == "meta" and out.shape == (4, 32)
    packed, scales = torch.ops.inkling.nvfp4_quant(_x().to("meta"), _gs().to("meta"))
    assert packed.shape == (4, 32) and scales.shape == (128, 4)


@pytest.mark.parametrize("case", range(len(COMPILED_BAD)))
def test_compiled_calls_raise_the_eager_errors(case):
    """Default torch.compile: the same ValueError/TypeError as eager (Dynamo falls back at the
    raise). Under fullgraph=True Dynamo may not fall back: its Unsupported error carries the same
    message naming the argument."""
    fn, word = COMPILED_BAD[case]
    a = _x(N=256)
    with pytest.raises((ValueError, TypeError), match=word) as eager:
        fn(a)
    torch._dynamo.reset()
    with pytest.raises(eager.type, match=word):
        torch.compile(fn, backend="eager")(a)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=word):
        torch.compile(fn, backend="eager", fullgraph=True)(a)


def test_compiled_row_strided_out():
    x = _x()
    buf = guarded((4, 128), torch.bfloat16, DEVICE, name="strided out")
    out = buf[:, :32]
    got = torch.compile(lambda a, o: ik.silu_and_mul(a, out=o), backend="eager", fullgraph=True)(x, out)
    assert got.data_ptr() == out.data_ptr() and torch.equal(out, ik.silu_and_mul(x))
    assert bool(buf[:, 32:].isnan().all())


def test_join_gateup_zero_rows():
    for il in (True, False):
        assert reference.join_gateup(torch.empty(0, 8), torch.empty(0, 8), il).shape == (0, 16)


# ---- the interpreter: bf16 subnormals --------------------------------------------------------------


@pytest.mark.skipif(DEVICE.type != "cpu", reason="the interpreter's widening (the CPU path)")
def test_interpreter_reads_every_bf16_subnormal_exactly():
    sub = torch.arange(1, 128, dtype=torch.int16).view(torch.bfloat16)
    gateup = torch.stack([torch.full((127,), 2.0, dtype=torch.bfloat16), sub], 1)
    got = ik.silu_and_mul(gateup, out_dtype=torch.float32)
    want = reference.silu_and_mul_ref(gateup, out_dtype=torch.float32)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    assert bool((got != 0).all())
