"""A seeded fuzz of valid and invalid calls over every op and option, every output inside a
guarded buffer (``conftest.guarded``: sentinel bytes before, after and between strided rows,
checked after each test). Valid calls must give the reference's bytes (silu_and_mul: within the
harness's ulp budget); invalid ones a ValueError/TypeError before any launch, their outputs
still poisoned. CPU in CI (Triton's interpreter); the same test runs compiled on the GPU job."""

import pytest
import torch
from conftest import DEVICE, guarded

import inkling_kernels as ik
from inkling_kernels import reference
from inkling_kernels.fp8._layout import empty_scales
from inkling_workbook.ports.silu_and_mul import harness

U8, F8 = torch.uint8, torch.float8_e4m3fn
ULP_BUDGET = {getattr(torch, k): v for k, v in harness.ULP_BUDGET.items()}


def _ri(g, lo, hi):
    return int(torch.randint(lo, hi, (1,), generator=g))


def _pick(g, seq):
    return seq[_ri(g, 0, len(seq))]


def _data(g, shape, dtype=torch.bfloat16, scale=3.0):
    return (torch.randn(shape, generator=g) * scale).to(dtype).to(DEVICE)


def _expect_refusal(call, outs):
    with pytest.raises((ValueError, TypeError)):
        call()
    for t in outs:  # refused before any launch: the outputs are still poison
        if t.dtype.is_floating_point and t.dtype.itemsize > 1:
            assert bool(t.isnan().all())
        else:
            assert bool((t.view(U8) == 0xFF).all())


# ---- silu_and_mul ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_guarded_silu_and_mul(seed):
    g = torch.Generator().manual_seed(7000 + seed)
    for _ in range(4):
        M, N = _ri(g, 1, 40), _ri(g, 1, 300)
        dtype = _pick(g, (torch.bfloat16, torch.float16, torch.float32))
        out_dtype = _pick(g, (torch.bfloat16, torch.float16, torch.float32))
        il = bool(_ri(g, 0, 2))
        x = _data(g, (M, 2 * N), dtype)
        w = _data(g, (M,), torch.float32, 1.0) if _ri(g, 0, 2) else None
        stride = N + _ri(g, 0, 3) * _ri(g, 1, 9)
        out = guarded((M, N), out_dtype, DEVICE, strides=(stride, 1), name="silu out")
        via_op = bool(_ri(g, 0, 2))
        if via_op:
            torch.ops.inkling.silu_and_mul_out(x, w, il, None, out=out)
        else:
            ik.silu_and_mul(x, w, interleaved=il, out=out)
        want = reference.silu_and_mul_ref(x, w, out_dtype, interleaved=il)
        dist = int(reference.ulp_distance(out, want).max())
        assert dist <= ULP_BUDGET[out_dtype], (M, N, dtype, out_dtype, il, via_op, dist)
        # the same output buffer, now refused: a shape off by one, a wrong dtype, an overlap
        bad = guarded((M, N), out_dtype, DEVICE, name="refused silu out")
        other = torch.float16 if out_dtype != torch.float16 else torch.float32
        _expect_refusal(lambda: ik.silu_and_mul(x, w, other, interleaved=il, out=bad), [bad])
        _expect_refusal(lambda: ik.silu_and_mul(x[:, : 2 * N - 2] if N > 1 else x[:0], w, out=bad), [bad])
        if dtype == out_dtype:  # an output over the input's own bytes
            _expect_refusal(lambda: ik.silu_and_mul(x, w, interleaved=il, out=x[:, :N]), [])


# ---- NVFP4 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_guarded_nvfp4(seed):
    g = torch.Generator().manual_seed(8000 + seed)
    for _ in range(3):
        M, N, E = _ri(g, 1, 140), 16 * _ri(g, 1, 12), _ri(g, 1, 5)
        fused, swizzle, il = bool(_ri(g, 0, 2)), bool(_ri(g, 0, 4)), bool(_ri(g, 0, 2))
        cuts = torch.sort(torch.randint(0, M + 1, (E - 1,), generator=g)).values
        eo = torch.cat([torch.tensor([0]), cuts, torch.tensor([M])]).to(DEVICE)
        gs = (torch.rand(E, generator=g) * 400 + 1).to(DEVICE)
        src = _data(g, (M, 2 * N if fused else N))
        w = _data(g, (M,), torch.float32, 1.0) if fused and _ri(g, 0, 2) else None
        cols = (N // 16 + 3) // 4 * 4 if swizzle else N // 16
        rows = ik.max_blockscale_rows(M, E) + 128 * _ri(g, 0, 2) if swizzle else M
        packed = guarded((M, N // 2), U8, DEVICE, name="packed")
        scales = guarded((rows, cols), U8, DEVICE, name="scales")
        validate = _pick(g, (None, False, True))
        registered = bool(_ri(g, 0, 2))
        if fused and registered:
            torch.ops.inkling.silu_and_mul_nvfp4_quant_out(
                src, gs, eo, None, il, w, swizzle, validate, None, packed=packed, scales=scales
            )
        elif fused:
            ik.silu_and_mul_nvfp4_quant(src, gs, eo, interleaved=il, topk_weights=w, swizzle=swizzle,
                                        out=(packed, scales), validate=validate)  # fmt: skip
        elif registered:
            torch.ops.inkling.nvfp4_quant_out(src, gs, eo, None, swizzle, validate, None, packed=packed, scales=scales)
        else:
            ik.nvfp4_quant(src, gs, expert_offsets=eo, swizzle=swizzle, out=(packed, scales), validate=validate)
        act = ik.silu_and_mul(src, w, interleaved=il) if fused else src
        ref_p, ref_s = reference.nvfp4_quant_experts_ref(act.cpu(), gs.cpu(), eo.cpu(), swizzle=swizzle)
        case = (M, N, E, fused, swizzle, il, w is not None, validate, registered)
        assert torch.equal(packed.cpu(), ref_p), case
        assert torch.equal(scales[: ref_s.shape[0]].cpu(), ref_s) and bool((scales[ref_s.shape[0] :] == 0).all()), case
        # refused: a partial 128-row block, scale rows too few for linear scales, bad types
        p2 = guarded((M, N // 2), U8, DEVICE, name="refused packed")
        s2 = guarded((rows + _ri(g, 1, 127) if swizzle else M + 1, cols), U8, DEVICE, name="refused scales")
        fn = (lambda **kw: ik.silu_and_mul_nvfp4_quant(src, gs, eo, **kw)) if fused else (
            lambda **kw: ik.nvfp4_quant(src, gs, expert_offsets=eo, **kw))  # fmt: skip
        _expect_refusal(lambda: fn(swizzle=swizzle, out=(p2, s2), validate=False), [p2, s2])
        _expect_refusal(lambda: fn(swizzle=int(swizzle), out=(p2, scales)), [p2])
        _expect_refusal(lambda: fn(swizzle=swizzle, scale_rows=rows + 64, validate=validate), [])


# ---- FP8 ---------------------------------------------------------------------------------------


def _guarded_fp8_out(lead, N, G, layout):
    """(q, scales) in ``layout``, each inside a guarded buffer: the layouts that pad rows get their
    whole padded buffer guarded (the kernel writes its padding rows), viewed as the op returns it."""
    like = empty_scales(lead, G, layout, "meta")
    q_rows = ((lead[-1] + 15) // 16 * 16) if layout == "cublas" else lead[-1]
    q = guarded((*lead[:-1], q_rows, N), U8, DEVICE, name="q").view(F8)
    if layout == "row":
        return q, guarded(tuple(like.shape), like.dtype, DEVICE, name="scales")
    base_shape = (*lead[:-1], like.shape[-1], like.stride(-1))  # [(E,) cols, Mp]
    base = guarded(base_shape, like.dtype, DEVICE, name="scales")
    view = base.transpose(-1, -2)
    return q, view[..., : like.shape[-2], :]


@pytest.mark.parametrize("seed", range(4))
def test_guarded_fp8(seed):
    g = torch.Generator().manual_seed(9000 + seed)
    for _ in range(3):
        group = _pick(g, (32, 64, 128))
        N = group * _ri(g, 1, 4)
        G = N // group
        three_d = bool(_ri(g, 0, 2))
        lead = (_ri(g, 1, 4), _ri(g, 1, 20)) if three_d else (_ri(g, 1, 40),)
        fused = bool(_ri(g, 0, 2))
        layout = _pick(g, ("row", "tma", "cublas", "ue8m0_packed"))
        ue8m0 = bool(_ri(g, 0, 2))
        src = _data(g, (*lead, 2 * N if fused else N))
        masked = None
        if fused and three_d and _ri(g, 0, 2):
            masked = torch.randint(-2, lead[1] + 3, (lead[0],), generator=g).to(DEVICE)
        q, s = _guarded_fp8_out(lead, N, G, layout)
        if fused:
            ik.silu_and_mul_fp8_group_quant(src, interleaved=False, group_size=group, scale_ue8m0=ue8m0,
                                            masked_m=masked, out=(q, s), scale_layout=layout)  # fmt: skip
            act = ik.silu_and_mul(src.reshape(-1, 2 * N), interleaved=False).reshape(*lead, N)
        else:
            ik.fp8_group_quant(src, group, scale_ue8m0=ue8m0, out=(q, s), scale_layout=layout)
            act = src
        want_q, want_s = ik.fp8_group_quant(act, group, scale_ue8m0=ue8m0, scale_layout=layout)
        case = (lead, N, group, fused, layout, ue8m0, masked)
        if masked is None:
            assert torch.equal(q.view(U8), want_q.view(U8)), case
            assert torch.equal(s, want_s), case  # int32 words or fp32 scales, exact
        else:
            for e, c in enumerate(masked.clamp(0, lead[1]).tolist()):
                assert torch.equal(q[e, :c].view(U8), want_q[e, :c].view(U8)), case
        # refused: a wrong group size, q of the wrong shape, scales of the wrong dtype
        q2, s2 = _guarded_fp8_out(lead, N, G, layout)
        if fused:
            _expect_refusal(lambda: ik.silu_and_mul_fp8_group_quant(src, group_size=group + 1, out=(q2, s2),
                                                                   scale_layout=layout), [q2.view(U8)])  # fmt: skip
        else:
            _expect_refusal(lambda: ik.fp8_group_quant(src[..., : N - group] if N > group else src[..., :0], group,
                                                       out=(q2, s2), scale_layout=layout), [q2.view(U8)])  # fmt: skip
