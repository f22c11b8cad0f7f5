"""Seeded fuzzing of the public ops on the CPU (Triton interpreter) against the references:
random M, N (odd too), row strides, dtypes, weights, NaN/Inf inputs. silu_and_mul within the ulp
budget of the harness (1 ulp bf16/fp16, NaN positions equal); NVFP4 bit for bit."""

import pytest
import torch
from conftest import DEVICE

from inkling_kernels import max_blockscale_rows, nvfp4_quant, silu_and_mul, silu_and_mul_nvfp4_quant
from inkling_kernels.reference import nvfp4_quant_experts_ref, padded_blockscale_offsets, silu_and_mul_ref, ulp_distance
from inkling_workbook.ports.silu_and_mul import harness

ULP_BUDGET = {getattr(torch, k): v for k, v in harness.ULP_BUDGET.items()}
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _inject_specials(x: torch.Tensor, g: torch.Generator, frac: float) -> torch.Tensor:
    k = int(x.numel() * frac)
    if k:
        rows = torch.randint(0, x.shape[0], (k,), generator=g)
        cols = torch.randint(0, x.shape[1], (k,), generator=g)
        vals = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0])
        x[rows, cols] = vals[torch.randint(0, len(vals), (k,), generator=g)].to(x.dtype)
    return x


def _strided(M, width, dtype, g, scale=3.0):
    """[M, width] with a row stride >= width (a column slice of a wider buffer) or contiguous."""
    extra = int(torch.randint(0, 3, (1,), generator=g)) * int(torch.randint(1, 9, (1,), generator=g))
    buf = (torch.randn(M, width + extra, generator=g) * scale).to(dtype)
    return buf[:, :width]


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_silu_and_mul(seed):
    g = torch.Generator().manual_seed(1000 + seed)
    for _ in range(6):
        M = int(torch.randint(1, 70, (1,), generator=g))
        N = int(torch.randint(1, 600, (1,), generator=g))
        dtype = DTYPES[int(torch.randint(0, 3, (1,), generator=g))]
        out_dtype = DTYPES[int(torch.randint(0, 3, (1,), generator=g))]
        interleaved = bool(torch.randint(0, 2, (1,), generator=g))
        x = _inject_specials(_strided(M, 2 * N, dtype, g), g, 0.01 if seed % 2 else 0.0)
        w = None
        if torch.randint(0, 2, (1,), generator=g):
            w = torch.rand(M, generator=g).to(DTYPES[int(torch.randint(0, 3, (1,), generator=g))])
        x, w = x.to(DEVICE), (w.to(DEVICE) if w is not None else None)
        give_out = bool(torch.randint(0, 2, (1,), generator=g))
        out = torch.full((M, N), float("nan"), dtype=out_dtype, device=DEVICE) if give_out else None
        got = silu_and_mul(x, w, out_dtype, interleaved=interleaved, out=out)
        ref = silu_and_mul_ref(x, w, out_dtype, interleaved=interleaved)
        case = (M, N, dtype, out_dtype, interleaved, w is not None, x.stride(0))
        assert got.shape == ref.shape and got.dtype == ref.dtype, case
        assert torch.equal(torch.isnan(got), torch.isnan(ref)), case
        dist = ulp_distance(got, ref)
        assert int(dist.min()) >= 0 and int(dist.max()) <= ULP_BUDGET[out_dtype], (case, int(dist.max()))


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_nvfp4(seed):
    g = torch.Generator().manual_seed(2000 + seed)
    for _ in range(3):
        M = int(torch.randint(1, 150, (1,), generator=g))
        N = 16 * int(torch.randint(1, 24, (1,), generator=g))
        E = int(torch.randint(1, 6, (1,), generator=g))
        dtype = (torch.bfloat16, torch.float16)[int(torch.randint(0, 2, (1,), generator=g))]
        interleaved = bool(torch.randint(0, 2, (1,), generator=g))
        swizzle = bool(torch.randint(0, 4, (1,), generator=g))  # mostly swizzled
        cuts = torch.sort(torch.randint(0, M + 1, (E - 1,), generator=g)).values
        eo = torch.cat([torch.tensor([0]), cuts, torch.tensor([M])]).to(torch.int32)
        gateup = _inject_specials(_strided(M, 2 * N, dtype, g, scale=2.0), g, 0.002 if seed % 2 else 0.0)
        w = torch.rand(M, generator=g) if torch.randint(0, 2, (1,), generator=g) else None
        gs = torch.rand(E, generator=g) * 500 + 1
        gateup, eo_d, gs_d = gateup.to(DEVICE), eo.to(DEVICE), gs.to(DEVICE)
        w_d = w.to(DEVICE) if w is not None else None
        act = silu_and_mul(gateup, w_d, interleaved=interleaved)
        case = (M, N, E, dtype, interleaved, swizzle, w is not None, eo.tolist())
        fused = silu_and_mul_nvfp4_quant(gateup, gs_d, eo_d, interleaved=interleaved, topk_weights=w_d, swizzle=swizzle)
        unfused = nvfp4_quant(act, gs_d, expert_offsets=eo_d, swizzle=swizzle)
        ref = nvfp4_quant_experts_ref(act.cpu(), gs, eo, swizzle=swizzle)
        rows = int(padded_blockscale_offsets(eo)[-1]) if swizzle else M
        for res in (fused, unfused):
            packed, scales = res[0].cpu(), res[1].cpu()
            assert torch.equal(packed, ref[0]), case
            assert scales.shape[0] == rows, case  # checked calls: exact rows
            assert torch.equal(scales, ref[1]), case
        if swizzle:  # unchecked: the static bound, zero past the experts' rows
            p2, s2 = silu_and_mul_nvfp4_quant(
                gateup, gs_d, eo_d, interleaved=interleaved, topk_weights=w_d, validate=False
            )
            assert s2.shape[0] == max_blockscale_rows(M, E), case
            assert torch.equal(p2.cpu(), ref[0]) and torch.equal(s2[:rows].cpu(), ref[1]), case
            assert int(s2[rows:].to(torch.int32).sum()) == 0, case
