"""Reference implementations in plain torch, written in the kernels' exact operation order.

Two kinds of reference live here:

* ``silu_and_mul_ref``: the activation in the kernels' order (fp32 math, weight last, one cast).
  It differs from the Triton kernels by at most one ulp of the output dtype, because
  ``torch.sigmoid`` and ``tl.sigmoid`` round their last fp32 bits differently.
* the NVFP4 format: e2m1 and e4m3 tables, ``nvfp4_quant_ref`` following the one formula of
  ``NVFP4_FORMULA`` (which the Triton kernels follow too, so they agree bit for bit),
  dequantization and the 128x4 scale swizzle.
"""

from __future__ import annotations

import torch

from ._validate import FLOAT_DTYPES, check_out_dtype, check_tensor

# ---------------------------------------------------------------------------------------------
# SiLU-and-mul


def split_gateup(gateup: torch.Tensor, interleaved: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the gate and up halves of ``gateup[M, 2N]`` for either layout."""
    M, two_n = gateup.shape
    if interleaved:
        pairs = gateup.reshape(M, two_n // 2, 2)
        return pairs[..., 0], pairs[..., 1]
    return gateup[:, : two_n // 2], gateup[:, two_n // 2 :]


def join_gateup(gate: torch.Tensor, up: torch.Tensor, interleaved: bool = True) -> torch.Tensor:
    """Inverse of :func:`split_gateup`: lay ``gate[M, N]`` and ``up[M, N]`` out as ``[M, 2N]``."""
    if interleaved:
        return torch.stack((gate, up), dim=-1).reshape(gate.shape[0], -1).contiguous()
    return torch.cat((gate, up), dim=1).contiguous()


def silu_and_mul_ref(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    interleaved: bool = True,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``silu(gate) * up [* w]`` in the kernels' order: upcast, ``g * sigmoid(g) * u``, weight
    last, one cast to ``out_dtype`` (default ``gateup.dtype``).

    ``compute_dtype=torch.float64`` gives the high-precision reference the notebooks measure
    ulp distances against.
    """
    check_tensor("gateup", gateup, ndim=2, dtypes=FLOAT_DTYPES)
    if gateup.shape[1] % 2:
        raise ValueError(f"gateup's last dimension must be even, got {gateup.shape[1]}")
    check_out_dtype(out_dtype)
    gate, up = split_gateup(gateup, interleaved)
    g = gate.to(compute_dtype)
    u = up.to(compute_dtype)
    y = g * torch.sigmoid(g) * u
    if topk_weights is not None:
        y = y * topk_weights.to(compute_dtype)[:, None]
    return y.to(out_dtype or gateup.dtype)


_INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _ordered_bits(x: torch.Tensor) -> torch.Tensor:
    """Map floats to integers whose order is the floats' order (-0 and +0 both map to 0)."""
    bits = x.view(_INT_VIEW[x.dtype]).to(torch.int64)
    sign_bit = 1 << (torch.finfo(x.dtype).bits - 1)
    # sign-magnitude -> two's complement: negative floats count down from zero
    magnitude = bits & (sign_bit - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance between ``a`` and ``b`` in units in the last place (int64).

    Both tensors must have the same shape and one of the dtypes bf16, fp16, fp32. The distance
    counts representable values between the two (so +0 and -0 are 0 apart, and the largest
    finite value is 1 ulp from inf). Where either element is NaN the result is -1, unless both
    are NaN, where it is 0: NaN positions are reported, never silently counted as small.
    """
    check_tensor("a", a, dtypes=tuple(_INT_VIEW))
    check_tensor("b", b, dtypes=tuple(_INT_VIEW))
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.contiguous(), b.contiguous()
    dist = (_ordered_bits(a) - _ordered_bits(b)).abs()
    a_nan, b_nan = torch.isnan(a), torch.isnan(b)
    dist = torch.where(a_nan & b_nan, 0, dist)
    return torch.where(a_nan ^ b_nan, -1, dist)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` have the same dtype, shape and raw bits (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    a, b = a.detach().contiguous().cpu(), b.detach().contiguous().cpu()
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
