"""The FP8 format's shapes and the argument checks built on them, shared by both FP8 ops and read
once (a leaf: it calls nothing of the ops' path, only ``inkling_kernels._validate``): the e4m3
dtype and group sizes, the scale layouts (names, shape, strides, storage, allocation), ``out``
validation and overlap checks."""

from __future__ import annotations

import torch

from .._validate import check_tensor

FP8_DTYPE = torch.float8_e4m3fn

GROUP_SIZES = (16, 32, 64, 128, 256, 512, 1024)

#: the scale layouts of the FP8 ops (``scale_layout=``), named by their consumer
#: (:data:`inkling_kernels.reference.FP8_SCALE_LAYOUT_FORMULA`)
SCALE_LAYOUTS = ("row", "tma", "cublas", "ue8m0_packed")


#: the kernel's ``SCALE_LAYOUT`` constexpr for each layout
_LAYOUT_CODE = {"row": 0, "tma": 0, "cublas": 1, "ue8m0_packed": 2}


def _layout_name(layout) -> str:
    """A layout name from a name or from the old ``column_major_scales`` bool."""
    if layout is True:
        return "tma"
    if layout is False:
        return "row"
    return layout


def _resolve_layout(scale_layout, column_major_scales) -> str:
    """The layout a call asks for: ``scale_layout`` if given, else ``"tma"`` for
    ``column_major_scales=True`` (its alias), else ``"row"``; both given and inconsistent: ValueError."""
    _check_flag("column_major_scales", column_major_scales)
    if scale_layout is None:
        return "tma" if column_major_scales else "row"
    if not isinstance(scale_layout, str):
        raise TypeError(f"scale_layout must be a str in {SCALE_LAYOUTS} or None, got {type(scale_layout).__name__}")
    if scale_layout not in SCALE_LAYOUTS:
        raise ValueError(f"scale_layout must be one of {SCALE_LAYOUTS} or None, got {scale_layout!r}")
    if column_major_scales and scale_layout != "tma":
        raise ValueError(
            f"column_major_scales=True (an alias of scale_layout='tma') conflicts with scale_layout={scale_layout!r}: "
            "pass only scale_layout"
        )
    return scale_layout


def _row_multiple(layout) -> int:
    """The column-major layouts' padded row count is a multiple of this: 4 (16-byte aligned fp32
    columns, what TMA reads), 16 for ``"cublas"`` (``torch._scaled_mm`` wants every dimension of
    its second operand divisible by 16, so q^T [K, Mp] passes in either operand order)."""
    return 16 if _layout_name(layout) == "cublas" else 4


def _round_up(v, m: int):
    return (v + m - 1) // m * m


def _q_lead(lead: tuple[int, ...], layout) -> tuple[int, ...]:
    """q's leading dims: ``lead``, or with its row count padded to a multiple of 16 (``"cublas"``)."""
    if _layout_name(layout) == "cublas":
        return (*lead[:-1], _round_up(lead[-1], 16))
    return tuple(lead)


def _scale_dtype(layout) -> torch.dtype:
    return torch.int32 if _layout_name(layout) == "ue8m0_packed" else torch.float32


def _scale_shape(lead: tuple[int, ...], G: int, layout) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(shape, strides, storage elements) of the scales for leading dims ``(M,)`` or ``(E, T)``
    (``layout``: a name of :data:`SCALE_LAYOUTS` or the ``column_major_scales`` bool)."""
    layout = _layout_name(layout)
    rows = lead[-1]
    if layout == "row":
        strides = (rows * G, G, 1) if len(lead) == 2 else (G, 1)
        return (*lead, G), strides, max(1, lead[0] * G * (rows if len(lead) == 2 else 1))
    rp = _round_up(rows, _row_multiple(layout))
    cols = -(-G // 4) if layout == "ue8m0_packed" else G
    strides = (cols * rp, 1, rp) if len(lead) == 2 else (1, rp)
    shown = (*lead[:-1], rp) if layout == "cublas" else tuple(lead)
    return (*shown, cols), strides, max(1, (lead[0] if len(lead) == 2 else 1) * cols * rp)


def empty_scales(lead, G: int, layout, device) -> torch.Tensor:
    """An uninitialised scale tensor in the layout the ops write (works on fake tensors too);
    ``layout``: a name of :data:`SCALE_LAYOUTS`, or a bool (``column_major_scales``)."""
    layout = _layout_name(layout)
    if layout == "row":
        return torch.empty((*lead, G), dtype=torch.float32, device=device)
    rp = _round_up(lead[-1], _row_multiple(layout))
    cols = -(-G // 4) if layout == "ue8m0_packed" else G
    keep = rp if layout == "cublas" else lead[-1]
    dtype = _scale_dtype(layout)
    if len(lead) == 1:
        return torch.empty((cols, rp), dtype=dtype, device=device).t()[:keep]
    return torch.empty((lead[0], cols, rp), dtype=dtype, device=device).transpose(1, 2)[:, :keep]


def _fake_outputs(lead, N, group_size, column_major_scales, scale_layout, device):
    """Empty ``(q, scales)`` as an op returns them (the fake implementations: shapes only)."""
    layout = _resolve_layout(scale_layout, column_major_scales)
    q = torch.empty((*_q_lead(lead, layout), N), dtype=FP8_DTYPE, device=device)
    return q, empty_scales(lead, N // group_size, layout, device)


def _canonical_scales(scales: torch.Tensor, lead, G: int, layout) -> bool:
    """Whether ``scales`` is laid out exactly as the op allocates it, padding storage included:
    then (column-major layouts) the kernel also zero-fills the padding rows. Any other
    non-overlapping layout (e.g. a copy torch.compile made) gets the values only. ``layout``: a
    name of :data:`SCALE_LAYOUTS` (or a bool, ``column_major_scales``)."""
    shape, strides, storage = _scale_shape(tuple(lead), G, layout)
    if any(sz > 1 and st != want for sz, st, want in zip(shape, scales.stride(), strides, strict=True)):
        return False
    return scales.untyped_storage().nbytes() // scales.element_size() - scales.storage_offset() >= storage


def _check_tensor_nd(name: str, t, dtypes) -> None:
    check_tensor(name, t, dtypes=dtypes)
    if t.dim() not in (2, 3):
        raise ValueError(f"{name} must be 2-D [M, ...] or 3-D [E, T, ...], got shape {tuple(t.shape)}")


def _check_rows(name: str, t: torch.Tensor) -> None:
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name} must have unit stride in its last dimension, got strides {t.stride()}")
    if t.shape[-2] > 1 and t.stride(-2) < t.shape[-1]:
        raise ValueError(f"{name} rows overlap: row stride {t.stride(-2)} < row length {t.shape[-1]}")
    if t.dim() == 3 and t.shape[0] > 1 and t.stride(0) < t.shape[1] * t.stride(1):
        raise ValueError(f"{name} experts overlap: strides {t.stride()}")


def _check_flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _check_group_size(group_size, N: int, what: str) -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"group_size must be an int, got {type(group_size).__name__}")
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be a power of two in {GROUP_SIZES}, got {group_size}")
    if N == 0 or N % group_size:
        raise ValueError(
            f"{what} must be a positive multiple of group_size={group_size} (whole groups only), got N={N}"
        )
    return N // group_size


def _check_inputs_no_grad(**named) -> None:
    if not torch.is_grad_enabled():
        return
    for name, t in named.items():
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise ValueError(
                f"{name} requires grad: these ops have no backward; call them under torch.no_grad() "
                "or pass a detached tensor"
            )


def _check_out(out, lead, N: int, G: int, layout, device, inputs: dict, memory: bool = True):
    """``out`` checked against the layout: ``(q, scales)``. ``memory=False`` (fake tensors) leaves
    out the overlap checks, which read addresses."""
    layout = _layout_name(layout)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError("out must be a (q, scales) pair of tensors")
    q, scales = out
    for name, t in (("out[0] (q)", q), ("out[1] (scales)", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}, expected {device}")
        if t.requires_grad and torch.is_grad_enabled():
            raise ValueError(
                f"{name} requires grad: an output written in place cannot be part of autograd's graph "
                "(as torch's own out= ops refuse it); pass a tensor that does not require grad"
            )
    if q.dtype != FP8_DTYPE:
        raise TypeError(f"out[0] (q) must have dtype float8_e4m3fn, got {q.dtype}")
    q_shape = (*_q_lead(lead, layout), N)
    if tuple(q.shape) != q_shape:
        why = f" (scale_layout={layout!r}: rows padded to a multiple of 16)" if layout == "cublas" else ""
        raise ValueError(f"out[0] (q) must have shape {q_shape}{why}, got {tuple(q.shape)}")
    if q.stride(-1) != 1 or _self_overlapping(q):
        raise ValueError(f"out[0] (q) must have unit stride in its last dimension and no overlap, got {q.stride()}")
    dtype = _scale_dtype(layout)
    if scales.dtype != dtype:
        raise TypeError(
            f"out[1] (scales) must have dtype {str(dtype).removeprefix('torch.')} for scale_layout={layout!r}, "
            f"got {scales.dtype}"
        )
    shape, _, _ = _scale_shape(tuple(lead), G, layout)
    if tuple(scales.shape) != shape:
        raise ValueError(
            f"out[1] (scales) must have shape {shape} for scale_layout={layout!r}, got {tuple(scales.shape)}"
        )
    column_major = layout != "row"
    unit = -2 if column_major else -1  # the dimension that must be contiguous
    if scales.shape[unit] > 1 and scales.stride(unit) != 1:
        kind = "column-major (unit stride along rows)" if column_major else "row-major (unit stride along groups)"
        raise ValueError(
            f"out[1] (scales) must be {kind} for scale_layout={layout!r}, got strides {tuple(scales.stride())}"
        )
    if _self_overlapping(scales):
        raise ValueError(f"out[1] (scales) elements overlap: strides {tuple(scales.stride())}")
    if not memory:
        return q, scales
    q_span, s_span = _span(q), _span(scales)  # each span once: this check runs on every call
    if layout in ("tma", "ue8m0_packed") and _canonical_scales(scales, lead, G, layout):
        # the kernel also zero-fills the padding rows of such a buffer: they count as written
        s_span = (s_span[0], s_span[0] + 4 * _scale_shape(tuple(lead), G, layout)[2])
    if _meet(q_span, s_span):
        raise ValueError("out[0] (q) and out[1] (scales) overlap in memory")
    for name, t in inputs.items():
        if t is not None and t.device == device:
            t_span = _span(t)
            if _meet(q_span, t_span) or _meet(s_span, t_span):
                raise ValueError(f"out overlaps the input {name}")
    return q, scales


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) of the memory a tensor's elements occupy."""
    ptr = t.data_ptr()
    if t.numel() == 0:
        return (ptr, ptr)
    last = 0
    for size, stride in zip(t.shape, t.stride()):
        last += (size - 1) * stride
    size = t.element_size()
    return ptr + min(0, last) * size, ptr + (max(0, last) + 1) * size


def _meet(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two memory spans (``_span``, on one device) share a byte."""
    return a[0] < b[1] and b[0] < a[1]


def _self_overlapping(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` share memory (dims ordered by stride, each must clear the last)."""
    dims = sorted((st, sz) for sz, st in zip(t.shape, t.stride(), strict=True) if sz > 1)
    extent = 1
    for st, sz in dims:
        if st < extent:
            return True
        extent = st * sz
    return False
