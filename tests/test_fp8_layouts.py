"""The FP8 ops' scale layouts (``scale_layout=``): "row", "tma", "cublas", "ue8m0_packed".

For every layout: the fused op == the unfused one (``fp8_group_quant(silu_and_mul(...))``) bit for
bit, and both == :func:`~inkling_kernels.reference.fp8_scales_in_layout_ref` /
:func:`~inkling_kernels.reference.fp8_q_in_layout_ref` of the reference's row-major result, padding
storage included (outputs poisoned first); the packed UE8M0 words against a packing written
independently here (a Python loop over bytes); bad arguments; torch.compile; on a GPU, the
"cublas" layout fed to ``torch._scaled_mm``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, gpu_only, guarded, poisoned, randn

from inkling_kernels import fp8_group_quant, silu_and_mul, silu_and_mul_fp8_group_quant
from inkling_kernels.fp8 import SCALE_LAYOUTS, empty_scales
from inkling_kernels.fp8 import _launch as fp8_launch
from inkling_kernels.reference import (
    FP8_SCALE_LAYOUT_FORMULA,
    FP8_SCALE_LAYOUTS,
    fp8_group_dequant_ref,
    fp8_group_quant_ref,
    fp8_q_in_layout_ref,
    fp8_scales_in_layout_ref,
)

LAYOUTS = ("row", "tma", "cublas", "ue8m0_packed")
MS = (1, 3, 4, 5, 16, 257)
GROUPS = ((128, 384), (64, 320))  # (group_size, N): G = 3 and 5, neither a multiple of 4


def _rp(m: int, layout: str = "tma") -> int:
    """The padded row count of the column-major layouts: a multiple of 4, of 16 for "cublas"."""
    k = 16 if layout == "cublas" else 4
    return (m + k - 1) // k * k


def _words(layout: str, G: int) -> int:
    return -(-G // 4) if layout == "ue8m0_packed" else G


def _storage(s: torch.Tensor, layout: str, lead: tuple, G: int) -> torch.Tensor:
    """The whole buffer under a scale tensor, padding included, as raw 32-bit words: ``s`` itself
    (row-major) or the ``[E, cols, Mp]`` buffer of a column-major layout."""
    s = s.view(torch.int32)
    if layout == "row":
        return s.contiguous()
    cols, rp = _words(layout, G), _rp(lead[-1], layout)
    E = lead[0] if len(lead) == 2 else 1
    return torch.as_strided(s, (E, cols, rp), (cols * rp, rp, 1)).clone()


def _poisoned_out(lead: tuple, N: int, G: int, layout: str, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs in exactly the op's layout, every byte (padding storage included) 0xFF / NaN."""
    q_lead = (*lead[:-1], _rp(lead[-1], layout)) if layout == "cublas" else lead
    q = poisoned((*q_lead, N), torch.uint8, device).view(torch.float8_e4m3fn)
    like = empty_scales(lead, G, layout, "meta")
    if layout == "row":
        s = guarded(tuple(like.shape), like.dtype, device, name="scales")
        s.view(torch.int32).fill_(-1)
    else:  # the whole padded [(E,) cols, Tp] buffer guarded, viewed as the op returns it
        buf = guarded((*lead[:-1], like.shape[-1], like.stride(-1)), like.dtype, device, name="scales")
        buf.view(torch.int32).fill_(-1)
        s = buf.transpose(-1, -2)[..., : like.shape[-2], :]
    return q, s


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32)


def _check_layout(q, s, ref_q, ref_s, layout, lead, N, G):
    """q and s (the op's) == the reference layout's, shapes, strides and padding storage included."""
    assert s.dtype == (torch.int32 if layout == "ue8m0_packed" else torch.float32)
    assert tuple(q.shape) == tuple(ref_q.shape) and tuple(s.shape) == tuple(ref_s.shape)
    assert s.stride() == ref_s.stride(), (s.stride(), ref_s.stride())
    assert torch.equal(_bits(q).cpu(), _bits(ref_q).cpu())
    assert torch.equal(_storage(s, layout, lead, G).cpu(), _storage(ref_s, layout, lead, G).cpu())


def test_layout_names_agree():
    assert SCALE_LAYOUTS == FP8_SCALE_LAYOUTS == LAYOUTS
    for name in LAYOUTS:
        assert name in FP8_SCALE_LAYOUT_FORMULA


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("group,N", GROUPS)
def test_fused_equals_unfused_equals_reference_2d(layout, M, dtype, group, N, gen):
    G = N // group
    gu = randn((M, 2 * N), dtype, gen, DEVICE, scale=3.0)
    w = randn((M,), torch.float32, gen, DEVICE)
    y = silu_and_mul(gu, w, interleaved=True)  # the kernels' own activation
    rq, rs = fp8_group_quant_ref(y.cpu(), group, scale_ue8m0=layout == "ue8m0_packed")
    ref_q, ref_s = fp8_q_in_layout_ref(rq, layout), fp8_scales_in_layout_ref(rs, layout)

    fused = silu_and_mul_fp8_group_quant(
        gu, w, group_size=group, scale_layout=layout, out=_poisoned_out((M,), N, G, layout, DEVICE)
    )
    unfused = fp8_group_quant(y, group, scale_layout=layout, out=_poisoned_out((M,), N, G, layout, DEVICE))
    for q, s in (fused, unfused):
        _check_layout(q, s, ref_q, ref_s, layout, (M,), N, G)
    # freshly allocated outputs: the same layout and bits (padding storage written by the kernel)
    q, s = silu_and_mul_fp8_group_quant(gu, w, group_size=group, scale_layout=layout)
    _check_layout(q, s, ref_q, ref_s, layout, (M,), N, G)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("T", [1, 3, 5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_equals_unfused_equals_reference_3d(layout, T, dtype, gen):
    E, N, group = 3, 384, 128
    G = N // group
    gu = randn((E, T, 2 * N), dtype, gen, DEVICE, scale=2.0)
    y = silu_and_mul(gu.reshape(E * T, 2 * N), interleaved=False).reshape(E, T, N)
    rq, rs = fp8_group_quant_ref(y.cpu(), group, scale_ue8m0=layout == "ue8m0_packed")
    ref_q, ref_s = fp8_q_in_layout_ref(rq, layout), fp8_scales_in_layout_ref(rs, layout)
    lead = (E, T)
    fused = silu_and_mul_fp8_group_quant(
        gu, interleaved=False, scale_layout=layout, out=_poisoned_out(lead, N, G, layout, DEVICE)
    )
    unfused = fp8_group_quant(y, scale_layout=layout, out=_poisoned_out(lead, N, G, layout, DEVICE))
    for q, s in (fused, unfused):
        _check_layout(q, s, ref_q, ref_s, layout, lead, N, G)
    # per expert, each layout is the 2-D layout of that expert's rows
    for e in range(E):
        q2, s2 = fp8_group_quant(y[e], scale_layout=layout)
        assert torch.equal(_bits(q2).cpu(), _bits(fused[0][e]).cpu())
        if layout == "row":
            assert torch.equal(_bits(s2).cpu(), _bits(fused[1][e]).cpu())
        else:
            want = _storage(fused[1], layout, lead, G)[e : e + 1].cpu()
            assert torch.equal(_storage(s2, layout, (T,), G).cpu(), want)


TILES = (None, (1, 1, 4), (2, 2, 4))  # the interpreter's tile; the GPU's shapes (several group tiles)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("work_list", [False, True])
def test_masked_rows_untouched_padding_written(layout, tile, work_list, gen, monkeypatch):
    """With masked_m, rows t >= masked_m[e] keep what ``out`` held in every layout; the padding rows
    (t >= T) and padding bytes are written; present rows match the reference. On the interpreter's
    tiles and on the GPU's (``tile``: rows, groups, warps a program; several group tiles, only the
    last zeroes the packed padding bytes), one program a tile slot or the work list."""
    if tile is not None:
        monkeypatch.setattr(fp8_launch, "_launch_config", lambda rows, G, group, interpreted: tile)
    monkeypatch.setattr(fp8_launch, "_resident_programs", lambda device, interpreted: 0 if work_list else 10**6)
    seen = []
    launch = fp8_launch._launch_kernel
    monkeypatch.setattr(fp8_launch, "_launch_kernel", lambda g, d, i, a, kw: seen.append(kw) or launch(g, d, i, a, kw))
    E, T, N, group = 3, 5, 384, 128
    G = N // group
    gu = randn((E, T, 2 * N), torch.bfloat16, gen, DEVICE)
    mm = torch.tensor([5, 0, 2], dtype=torch.int32, device=DEVICE)
    y = silu_and_mul(gu.reshape(E * T, 2 * N)).reshape(E, T, N)
    rq, rs = fp8_group_quant_ref(y.cpu(), group, scale_ue8m0=layout == "ue8m0_packed")
    ref_q, ref_s = fp8_q_in_layout_ref(rq, layout), fp8_scales_in_layout_ref(rs, layout)
    q, s = silu_and_mul_fp8_group_quant(
        gu, masked_m=mm, scale_layout=layout, out=_poisoned_out((E, T), N, G, layout, DEVICE)
    )
    qb, rqb = _bits(q).cpu(), _bits(ref_q).cpu()
    st, rst = _storage(s, layout, (E, T), G).cpu(), _storage(ref_s, layout, (E, T), G).cpu()
    assert [kw["WORK_LIST"] for kw in seen] == [work_list]
    rows_q = qb.shape[1]
    for e, n in enumerate(mm.tolist()):
        assert torch.equal(qb[e, :n], rqb[e, :n])
        assert bool((qb[e, n:T] == 0xFF).all())  # absent rows: untouched
        assert bool((qb[e, T:rows_q] == 0).all())  # "cublas" padding rows: zero bytes
        if layout == "row":
            assert torch.equal(st[e, :n], rst[e, :n]) and bool((st[e, n:] == -1).all())
        else:
            assert torch.equal(st[e, :, :n], rst[e, :, :n])
            assert bool((st[e, :, n:T] == -1).all())
            assert bool((st[e, :, T:] == 0).all())


def _independent_packing(rs: torch.Tensor) -> list[list[int]]:
    """``W[k][m]`` of the packed UE8M0 layout from row-major power-of-two scales ``rs[M, G]``, by a
    Python loop over bytes (little-endian words, zero padding groups and rows)."""
    import struct

    M, G = rs.shape
    rp, gk = _rp(M), -(-G // 4)
    words = [[0] * rp for _ in range(gk)]
    for k in range(gk):
        for m in range(rp):
            raw = bytearray(4)
            for j in range(4):
                g = 4 * k + j
                if m < M and g < G:
                    (bits,) = struct.unpack("<I", struct.pack("<f", float(rs[m, g])))
                    assert bits & 0x807FFFFF == 0, "a ue8m0 scale is a positive power of two"
                    raw[j] = bits >> 23
            (words[k][m],) = struct.unpack("<i", bytes(raw))
    return words


@pytest.mark.parametrize("M", MS)
@pytest.mark.parametrize("group,N", [(128, 384), (64, 256), (64, 320), (32, 1024)])
@pytest.mark.parametrize("tile", TILES)
def test_packed_ue8m0_words_bit_by_bit(M, group, N, tile, gen, monkeypatch):
    G = N // group
    if tile is not None:
        if DEVICE.type == "cpu" and (M > 16 or G > 5):
            pytest.skip("the GPU's tiles on small shapes only (interpreter time: one program a tile)")
        monkeypatch.setattr(fp8_launch, "_launch_config", lambda rows, G, group, interpreted: tile)
    x = randn((M, N), torch.bfloat16, gen, DEVICE, scale=5.0)
    x[0, :group] = 0  # an all-zero group: the eps scale
    _, s = fp8_group_quant(x, group, scale_layout="ue8m0_packed", out=_poisoned_out((M,), N, G, "ue8m0_packed", DEVICE))
    _, rs = fp8_group_quant_ref(x.cpu(), group, scale_ue8m0=True)
    want = torch.tensor(_independent_packing(rs), dtype=torch.int32)
    got = _storage(s, "ue8m0_packed", (M,), G)[0].cpu()
    assert tuple(s.shape) == (M, -(-G // 4)) and s.stride() == (1, _rp(M)) and s.dtype == torch.int32
    assert torch.equal(got, want)
    # and scale_ue8m0 is implied: the same words whatever scale_ue8m0 says
    _, s2 = fp8_group_quant(x, group, scale_layout="ue8m0_packed", scale_ue8m0=True)
    assert torch.equal(_storage(s2, "ue8m0_packed", (M,), G).cpu(), want[None])


def test_tma_is_column_major_scales(gen):
    x = randn((5, 256), torch.bfloat16, gen, DEVICE)
    q, s = fp8_group_quant(x, column_major_scales=True)
    q2, s2 = fp8_group_quant(x, scale_layout="tma")
    q3, s3 = fp8_group_quant(x, scale_layout="tma", column_major_scales=True)
    for qq, ss in ((q2, s2), (q3, s3)):
        assert torch.equal(_bits(q), _bits(qq)) and ss.stride() == s.stride() == (1, 8)
        assert torch.equal(_storage(s, "tma", (5,), 2), _storage(ss, "tma", (5,), 2))


def test_cublas_shapes_and_what_the_caller_slices(gen):
    M, N = 3, 256
    x = randn((M, N), torch.bfloat16, gen, DEVICE)
    q, s = fp8_group_quant(x, scale_layout="cublas")
    assert tuple(q.shape) == (16, N) and tuple(s.shape) == (16, 2) and s.stride() == (1, 16)
    rq, rs = fp8_group_quant_ref(x.cpu())
    assert torch.equal(_bits(q[:M]).cpu(), _bits(rq)) and torch.equal(_bits(s[:M]).cpu(), _bits(rs))
    assert bool((_bits(q[M:]) == 0).all()) and bool((_bits(s[M:]) == 0).all())


def test_bad_arguments_name_the_argument(gen):
    x = randn((3, 256), torch.bfloat16, gen, DEVICE)
    gu = randn((3, 512), torch.bfloat16, gen, DEVICE)
    for fn, a in ((fp8_group_quant, x), (silu_and_mul_fp8_group_quant, gu)):
        with pytest.raises(ValueError, match="scale_layout"):
            fn(a, scale_layout="colmajor")
        with pytest.raises(TypeError, match="scale_layout"):
            fn(a, scale_layout=1)
        for lay in ("row", "cublas", "ue8m0_packed"):
            with pytest.raises(ValueError, match="column_major_scales.*scale_layout"):
                fn(a, column_major_scales=True, scale_layout=lay)
    G = 2
    # q of a "cublas" out must have the padded rows
    q, s = _poisoned_out((3,), 256, G, "cublas", DEVICE)
    with pytest.raises(ValueError, match=r"out\[0\] \(q\)"):
        fp8_group_quant(x, scale_layout="cublas", out=(q[:3], s))
    with pytest.raises(ValueError, match=r"out\[1\] \(scales\)"):
        fp8_group_quant(x, scale_layout="cublas", out=(q, s[:3]))
    with pytest.raises(ValueError, match=r"out\[1\] \(scales\) must be column-major"):
        fp8_group_quant(x, scale_layout="cublas", out=(q, s.contiguous()))
    # packed: int32 words, ceil(G / 4) of them a row
    q, s = _poisoned_out((3,), 256, G, "ue8m0_packed", DEVICE)
    with pytest.raises(TypeError, match=r"out\[1\] \(scales\) must have dtype int32"):
        fp8_group_quant(x, scale_layout="ue8m0_packed", out=(q, s.view(torch.float32)))
    with pytest.raises(ValueError, match=r"out\[1\] \(scales\) must have shape"):
        fp8_group_quant(x, scale_layout="ue8m0_packed", out=(q, empty_scales((3,), G, "tma", DEVICE).view(torch.int32)))
    with pytest.raises(TypeError, match=r"out\[1\] \(scales\) must have dtype float32"):
        fp8_group_quant(x, scale_layout="tma", out=(q, empty_scales((3,), G, "tma", DEVICE).view(torch.int32)))
    with pytest.raises(ValueError, match="layout"):
        fp8_scales_in_layout_ref(torch.ones(3, 2), "bogus")


def test_registered_ops_and_compile_fullgraph(gen):
    x = randn((5, 256), torch.bfloat16, gen, "cpu")
    gu = randn((2, 3, 512), torch.bfloat16, gen, "cpu")
    q, s = torch.ops.inkling.fp8_group_quant(x, 128, False, False, None, "cublas")
    assert tuple(q.shape) == (16, 256) and s.stride() == (1, 16)

    def f(x, gu, out):
        a = fp8_group_quant(x, scale_layout="cublas")
        b = silu_and_mul_fp8_group_quant(gu, scale_layout="ue8m0_packed")
        c = fp8_group_quant(x, scale_layout="ue8m0_packed", out=out)
        return a, b, c

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(
        x, gu, _poisoned_out((5,), 256, 2, "ue8m0_packed", "cpu")
    )
    want = f(x, gu, _poisoned_out((5,), 256, 2, "ue8m0_packed", "cpu"))
    for (q, s), (rq, rs) in zip(got, want, strict=True):
        assert tuple(q.shape) == tuple(rq.shape) and tuple(s.shape) == tuple(rs.shape) and s.dtype == rs.dtype
        assert torch.equal(_bits(q), _bits(rq)) and torch.equal(_bits(s), _bits(rs))
    assert got[0][1].stride() == (1, 16) and got[2][1].stride() == (1, 8)


# ---------------------------------------------------------------------------------------------
# GPU: the "cublas" layout through torch._scaled_mm (DeepSeek blockwise: 1x128 activation scales,
# 128x128 weight scales)


def _weight_blockwise(N: int, K: int, gen) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W e4m3 [N, K] row-major, its 128x128 block scales [N/128, K/128] fp32, W dequantized fp32)."""
    w = torch.randn((N, K), generator=gen) * 0.05
    blocks = w.reshape(N // 128, 128, K // 128, 128)
    sw = (blocks.abs().amax(dim=(1, 3)).clamp(min=1e-10) / 448.0).float()
    qw = (blocks / sw[:, None, :, None]).clamp(-448, 448).reshape(N, K).to(torch.float8_e4m3fn)
    deq = (qw.float().reshape(N // 128, 128, K // 128, 128) * sw[:, None, :, None]).reshape(N, K)
    return qw.cuda(), sw.cuda(), deq.cuda()


@gpu_only
@pytest.mark.parametrize("M", [1, 3, 4, 257, 4096])
@pytest.mark.parametrize("transposed", [False, True])
def test_gpu_cublas_layout_feeds_scaled_mm(M, transposed, gen):
    K, N = 1024, 256  # K / 128 = 8 (a multiple of 4: every torch version's weight-scale stride agrees)
    x = (torch.randn((M, K), generator=gen)).to(torch.bfloat16).cuda()
    q, s = fp8_group_quant(x, scale_layout="cublas")  # q [Mp, K], s [Mp, K/128] strides (1, Mp)
    Mp = q.shape[0]
    assert Mp == _rp(M, "cublas") and s.stride() == (1, Mp)
    qw, sw, w_deq = _weight_blockwise(N, K, gen)
    ref = fp8_group_dequant_ref(q[:M], s[:M]) @ w_deq.t()  # [M, N] fp32
    if not transposed:
        # out [Mp, N] = q [Mp, K] @ W^T [K, N] (column-major); scale_b [K/128, N/128] = sw^T
        out = torch._scaled_mm(q, qw.t(), scale_a=s, scale_b=sw.t(), out_dtype=torch.bfloat16)[:M]
    else:
        # out^T [N, Mp] = W [N, K] @ q^T [K, Mp] (column-major); scale_b = s^T, strides (Mp, 1)
        out = torch._scaled_mm(qw, q.t(), scale_a=sw, scale_b=s.t(), out_dtype=torch.bfloat16).t()[:M]
    err = (out.float() - ref).norm() / ref.norm()
    assert err < 1e-2, f"relative error {err:.3g}"


@pytest.mark.parametrize("layout", [1, 2])
@pytest.mark.parametrize("N,warp_redux", [(384, False), (512, True)])
def test_each_layout_compiles_for_sm90(layout, N, warp_redux):
    """The compiled program of the "cublas" (1) and "ue8m0_packed" (2) stores builds for sm_90 (on
    the CPU, no GPU needed), with the decode switches on, and stores bytes for the packed words."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from inkling_kernels.fp8 import ACT_INTERLEAVED
    from inkling_kernels.fp8 import _kernel as _fp8_kernel

    jit = _fp8_kernel._fp8_group_kernel
    consts = dict(
        N=N, GROUP=128, ACT=ACT_INTERLEAVED, HAS_WEIGHT=True, HAS_MASK=False, UE8M0=layout == 2, BLOCK_M=1,
        BLOCK_G=N // 128 if warp_redux else 1, E_POW2=1, WORK_LIST=False, PACK_E_BITS=0, PACK_CNT_BITS=0,
        INT64=False, USE_PDL=False, HW=True, SPLIT_DIV=True, PAIR_WORDS=True, FTZ_EXP=2, BF16_BITS=True,
        FAST_SCALE=True, WARP_REDUX=warp_redux, SCALE_ASM=True, PAD_ROWS=True, SCALE_LAYOUT=layout,
    )  # fmt: skip
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*fp32", "masked_m_ptr": "*bf16", "q_ptr": "*u8"}
    ptrs["s_ptr"] = "*i32" if layout == 2 else "*fp32"
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in jit.arg_names}
    ptx = triton.compile(ASTSource(jit, sig, consts, {}), target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    assert "st.global" in ptx
    if layout == 2:
        assert "st.global.b8" in ptx or "st.global.u8" in ptx
