"""Argument checks of the NVFP4 ops (:mod:`inkling_kernels.nvfp4`): the global scales, the offsets'
values (one host read) and the fused op's ``gateup`` and weights."""

from __future__ import annotations

import torch

from ._validate import ACT_DTYPES_FP4, FLOAT_DTYPES, check_row_major, check_same_device, check_tensor
from .reference import NVFP4_BLOCK


def _check_global_scale(global_scale, E: int, device) -> torch.Tensor:
    check_tensor("global_scale", global_scale, dtypes=(torch.float32,))
    if global_scale.numel() != E:
        raise ValueError(
            f"global_scale must hold one fp32 value per expert ({E}), got shape {tuple(global_scale.shape)}"
        )
    if global_scale.device != device:
        raise ValueError(f"global_scale is on {global_scale.device}, expected {device}")
    if global_scale.dim() == 1 and global_scale.is_contiguous():
        return global_scale  # the common case, without two dispatcher calls
    return global_scale.reshape(E).contiguous()


def _check_values(
    global_scale, expert_offsets, blockscale_offsets, M: int, swizzle: bool, scale_rows, bound=None
) -> int:
    """The value checks of device-resident arguments: one host read (a synchronization).
    Returns the scale rows the offsets need (``blockscale_offsets[-1]``, or M when linear).
    ``bound``: the most scale rows the op may allocate (``max_blockscale_rows``), when it allocates."""
    gs = global_scale.detach().cpu()
    if not bool(torch.isfinite(gs).all()) or bool((gs < 0).any()):
        raise ValueError(f"global_scale must be finite and >= 0, got {gs.tolist()[:8]}")
    eo = expert_offsets.cpu().long()
    if int(eo[0]) != 0:
        raise ValueError(f"expert_offsets must start at 0, got {int(eo[0])}")
    if bool((eo[1:] < eo[:-1]).any()):
        raise ValueError("expert_offsets must be non-decreasing")
    if int(eo[-1]) != M:
        raise ValueError(f"expert_offsets must end at M={M}, got {int(eo[-1])}")
    if not swizzle:
        return M
    bo = blockscale_offsets.cpu().long()
    if int(bo[0]) != 0:
        raise ValueError(f"blockscale_offsets must start at 0, got {int(bo[0])}")
    if bool((bo % 128 != 0).any()):
        raise ValueError("blockscale_offsets must be multiples of 128 (each expert's scale rows are padded to 128)")
    counts = eo[1:] - eo[:-1]
    room = bo[1:] - bo[:-1]
    if bool((room < counts).any()):
        bad = int(torch.nonzero(room < counts)[0])
        raise ValueError(
            f"blockscale_offsets inconsistent with expert_offsets: expert {bad} has {int(counts[bad])} rows "
            f"but {int(room[bad])} scale rows"
        )
    if bound is not None and int(bo[-1]) > bound:
        raise ValueError(
            f"blockscale_offsets end at {int(bo[-1])} scale rows, more than any split of M={M} rows over "
            f"{bo.numel() - 1} experts needs ({bound}, max_blockscale_rows): pass out= for a layout with gaps"
        )
    if scale_rows is not None and int(bo[-1]) > scale_rows:
        raise ValueError(
            f"blockscale_offsets end at {int(bo[-1])} scale rows but the scales output has {scale_rows} rows"
        )
    return int(bo[-1])


def _check_fused_args(gateup, interleaved, topk_weights) -> int:
    check_tensor("gateup", gateup, ndim=2, dtypes=ACT_DTYPES_FP4)
    check_row_major("gateup", gateup)
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {type(interleaved).__name__}")
    if gateup.shape[1] % 2:
        raise ValueError(f"gateup's last dimension must be even, got {gateup.shape[1]}")
    N = gateup.shape[1] // 2
    if N == 0 or N % NVFP4_BLOCK:
        raise ValueError(f"gateup's last dimension must be 2N with N a positive multiple of {NVFP4_BLOCK}, got {2 * N}")
    if topk_weights is not None:
        check_tensor("topk_weights", topk_weights, ndim=1, dtypes=FLOAT_DTYPES)
        check_same_device("gateup", gateup, "topk_weights", topk_weights)
        if topk_weights.shape[0] != gateup.shape[0]:
            raise ValueError(f"topk_weights must have shape ({gateup.shape[0]},), got {tuple(topk_weights.shape)}")
    return N
