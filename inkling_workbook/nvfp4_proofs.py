"""The NVFP4 format tests' helper: the kernels' fp32 -> e4m3 scale rounding
(``inkling_kernels.nvfp4._e4m3_round``) on any fp32 tensor, to check it against torch exhaustively."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend
from inkling_kernels._validate import check_tensor
from inkling_kernels.nvfp4 import _e4m3_round


@triton.jit
def e4m3_encode_kernel(s_ptr, byte_ptr, value_ptr, n, BLOCK: tl.constexpr):
    """Exposes ``_e4m3_round`` (plus the clamp of the formula) for the exhaustive format tests."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(s_ptr + offs, mask=mask, other=0.0)
    is_nan = s != s
    s = tl.where(is_nan, 0.0, tl.minimum(tl.maximum(s, 0.0), 448.0))
    byte, value = _e4m3_round(s)
    byte = tl.where(is_nan, 0x7F, byte)
    value = tl.where(is_nan, float("nan"), value)
    tl.store(byte_ptr + offs, byte.to(tl.uint8), mask=mask)
    tl.store(value_ptr + offs, value, mask=mask)


def e4m3_encode(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' fp32 -> e4m3 rounding (after the clamp to [0, 448]) on any fp32 tensor:
    returns (bytes uint8, values fp32). Used to check the kernels' rounding against torch."""
    check_tensor("s", s, dtypes=(torch.float32,))
    flat = s.contiguous().reshape(-1)
    byte = torch.empty(flat.shape, dtype=torch.uint8, device=s.device)
    value = torch.empty(flat.shape, dtype=torch.float32, device=s.device)
    if flat.numel():
        block = 1024
        _backend.launch(
            e4m3_encode_kernel,
            (triton.cdiv(flat.numel(), block),),
            s.device,
            flat,
            byte,
            value,
            flat.numel(),
            BLOCK=block,
        )
    return byte.reshape(s.shape), value.reshape(s.shape)
