"""Argument checks shared by the public functions. Every check runs before any launch and
names the offending argument in its message."""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
ACT_DTYPES_FP4 = (torch.bfloat16, torch.float16)


def check_tensor(name: str, t, *, ndim: int | None = None, dtypes=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name} must have dtype in ({names}), got {t.dtype}")
    if t.device.type not in ("cuda", "cpu"):
        raise ValueError(f"{name} is on {t.device}; only CUDA and CPU tensors are supported")


def check_same_device(ref_name: str, ref: torch.Tensor, name: str, t: torch.Tensor) -> None:
    if t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}")


def check_out_dtype(out_dtype) -> None:
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise TypeError(f"out_dtype must be one of bfloat16, float16, float32 or None, got {out_dtype!r}")


def check_row_major(name: str, t: torch.Tensor) -> None:
    """Rows may be strided (a slice of a wider buffer); elements within a row must be contiguous."""
    if t.dim() >= 1 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have unit stride in its last dimension, got strides {t.stride()}")
    if t.dim() == 2 and t.shape[0] > 1 and t.stride(0) < t.shape[1]:
        raise ValueError(f"{name} rows overlap: row stride {t.stride(0)} < row length {t.shape[1]}")


def check_offsets(name: str, offsets, device: torch.device) -> torch.Tensor:
    check_tensor(name, offsets, ndim=1, dtypes=(torch.int32, torch.int64))
    if offsets.device != device:
        raise ValueError(f"{name} is on {offsets.device}, expected {device}")
    if offsets.numel() < 2:
        raise ValueError(f"{name} must have E+1 >= 2 entries, got {offsets.numel()}")
    return offsets
