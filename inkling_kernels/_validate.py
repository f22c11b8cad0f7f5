"""Argument checks shared by the public functions. Every check runs before any launch and
names the offending argument in its message."""

from __future__ import annotations

import contextlib
import threading

import torch

_META = threading.local()


@contextlib.contextmanager
def meta_allowed():
    """Within the block :func:`check_tensor` accepts ``meta`` tensors: the fake implementations
    run the checks on a call made on meta tensors (shape inference), where every tensor of the
    call must then be on ``meta`` (the device-consistency checks still apply)."""
    before = getattr(_META, "ok", False)
    _META.ok = True
    try:
        yield
    finally:
        _META.ok = before


FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: :data:`FLOAT_DTYPES` with their element sizes: the hot paths' dtype check, one dict lookup
ELEMENT_SIZE = {torch.bfloat16: 2, torch.float16: 2, torch.float32: 4}
ACT_DTYPES_FP4 = (torch.bfloat16, torch.float16)


def check_tensor(name: str, t, *, ndim: int | None = None, dtypes=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name} must have dtype in ({names}), got {t.dtype}")
    if t.device.type not in ("cuda", "cpu") and not (t.device.type == "meta" and getattr(_META, "ok", False)):
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
    """The offsets checked, at unit stride (the kernels read them so)."""
    check_tensor(name, offsets, ndim=1, dtypes=(torch.int32, torch.int64))
    if offsets.device != device:
        raise ValueError(f"{name} is on {offsets.device}, expected {device}")
    if offsets.numel() < 2:
        raise ValueError(f"{name} must have E+1 >= 2 entries, got {offsets.numel()}")
    # the kernels read the offsets at unit stride: a strided view (a slice) is copied first
    return offsets.contiguous()


def _byte_span(t: torch.Tensor) -> tuple[int, int, int, int]:
    """(first byte, one past the last byte, row stride in bytes, row width in bytes) of a 1-D or
    2-D tensor whose last dimension has unit stride (a 1-D tensor is one row)."""
    es = t.element_size()
    lo = t.data_ptr()
    if t.dim() == 1:
        n = t.shape[0]
        step = t.stride(0) if n > 1 else 1
        return lo, lo + ((n - 1) * step + 1) * es, 0, ((n - 1) * step + 1) * es
    rows, width = t.shape
    stride = t.stride(0)
    return lo, lo + ((rows - 1) * stride + width) * es, stride * es, width * es


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte) of ``t`` (empty for an empty tensor); the contiguous
    case, the common one on the launch path, in three cheap attribute reads."""
    lo = t.data_ptr()
    if t.is_contiguous():
        return lo, lo + t.nbytes
    if t.numel() == 0:
        return lo, lo
    return _byte_span(t)[:2]


def check_no_overlaps(outputs, inputs) -> None:
    """:func:`check_no_overlap` for every (output, input) pair and between the outputs, each byte
    range computed once; the exact check runs only for pairs whose ranges intersect.
    ``outputs`` and ``inputs``: sequences of (name, tensor or None)."""
    outs = [(n, t, _byte_range(t)) for n, t in outputs if t is not None]
    ins = [(n, t, _byte_range(t)) for n, t in inputs if t is not None]
    for i, (o_name, o, (a_lo, a_hi)) in enumerate(outs):
        for i_name, t, (b_lo, b_hi) in ins + outs[i + 1 :]:
            if a_lo < b_hi and b_lo < a_hi:
                check_no_overlap(o_name, o, i_name, t)


def check_no_overlap(name: str, out: torch.Tensor, other_name: str, other: torch.Tensor) -> None:
    """Refuse an output that shares memory with an input, as torch's own ``out=`` ops do: the
    kernels' programs would read elements that other programs have already overwritten. Exact
    for row slices of one buffer with the same row stride (e.g. ``buf[:, :2N]`` and ``buf[:, 2N:]``
    are accepted); otherwise any intersection of the two byte ranges is refused."""
    if out.numel() == 0 or other.numel() == 0:
        return
    a_lo, a_hi, a_stride, a_width = _byte_span(out)
    b_lo, b_hi, b_stride, b_width = _byte_span(other)
    if a_hi <= b_lo or b_hi <= a_lo:
        return
    if a_stride == b_stride and a_stride > 0 and a_width <= a_stride and b_width <= b_stride:
        # rows repeat every `stride` bytes in both: compare the two windows within one period
        d = (b_lo - a_lo) % a_stride
        if d >= a_width and d + b_width <= a_stride:
            return
    raise ValueError(f"{name} overlaps {other_name} in memory: give {name} its own buffer")


def check_no_grad(**tensors) -> None:
    """These are inference ops without a backward: refuse inputs that require grad in grad mode
    instead of returning an output silently detached from the graph."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if t is not None and t.requires_grad and name.startswith("out"):
            raise ValueError(
                f"{name} requires grad: an output written in place cannot be part of autograd's graph "
                "(as torch's own out= ops refuse it); pass a tensor that does not require grad"
            )
        if t is not None and t.requires_grad:
            raise ValueError(
                f"{name} requires grad: inkling ops are inference-only (no backward); "
                "call them under torch.no_grad() / torch.inference_mode() or pass a detached tensor"
            )
