"""The NVFP4 format tests' helpers: the kernels' fp32 -> e4m3 scale rounding
(``inkling_kernels._nvfp4_kernel._e4m3_round``) on any fp32 tensor, to check it against torch exhaustively;
the kernels' e2m1 packing of fp32 pairs, in software (``_e2m1_code``) or by the hardware conversion
(``_e2m1x2_hw``, compiled on compute capability 10.x-12.x only), to check them against each other
and against :mod:`inkling_workbook.proofs.e2m1_proof`'s model of the PTX instruction."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend
from inkling_kernels._nvfp4_kernel import _e2m1_code, _e2m1x2_hw, _e4m3_round
from inkling_kernels._validate import check_tensor


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


@triton.jit
def e2m1_pack_kernel(x_ptr, byte_ptr, n_pairs, BLOCK: tl.constexpr, HW: tl.constexpr):
    """Bytes of fp32 pairs ``(x[2i], x[2i+1])``, element ``2i`` in the low nibble: the kernel's
    software rounding, or (``HW``) ``cvt.rn.satfinite.e2m1x2.f32`` as the NVFP4 kernel issues it."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_pairs
    even = tl.load(x_ptr + 2 * offs, mask=mask, other=0.0)
    odd = tl.load(x_ptr + 2 * offs + 1, mask=mask, other=0.0)
    if HW:
        byte = _e2m1x2_hw(even, odd)
    else:
        byte = (_e2m1_code(even) & 0xF) | ((_e2m1_code(odd) & 0xF) << 4)
    tl.store(byte_ptr + offs, byte.to(tl.uint8), mask=mask)


def e2m1_pack(x: torch.Tensor, hw: bool = False) -> torch.Tensor:
    """The kernel's e2m1 bytes of fp32 ``x`` (an even number of elements), software or (``hw``,
    compiled on compute capability 10.x-12.x) the hardware conversion. The raw codes of NaN inputs
    differ between the two; the NVFP4 kernel zeroes the bytes of NaN blocks on both paths."""
    check_tensor("x", x, dtypes=(torch.float32,))
    if x.numel() % 2:
        raise ValueError(f"x must have an even number of elements, got {x.numel()}")
    if not isinstance(hw, bool):
        raise TypeError(f"hw must be a bool, got {type(hw).__name__}")
    if hw and (_backend.uses_interpreter(x.device) or _backend.capability(_backend.cuda_index(x.device))[0] < 10):
        raise ValueError("hw=True needs CUDA tensors on compute capability 10.x or newer (the interpreter has no PTX)")
    flat = x.contiguous().reshape(-1)
    out = torch.empty(flat.numel() // 2, dtype=torch.uint8, device=x.device)
    if out.numel():
        block = 1024
        grid = (triton.cdiv(out.numel(), block),)
        _backend.launch(e2m1_pack_kernel, grid, x.device, flat, out, out.numel(), BLOCK=block, HW=hw)
    return out
