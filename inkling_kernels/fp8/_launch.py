"""The FP8 ops' path from the call to the launch, shared by both (read after the op's module,
:mod:`.group_quant` or :mod:`.silu_and_mul_group_quant`, and before the kernel, :mod:`._kernel`).

In the order a call takes it: the eager entries (``_quant_eager``, ``_fused_eager``); the hot path
of a compiled call (``_fast_launch``: cheap checks, then a plan the general path recorded replayed
through the thin launcher, ``_backend.CudaLauncher``); the checks of each op (``_quant_checks``,
``_fused_checks``, which the fake implementations and ``torch.compile`` run too, and
``_via_ops``, the call as a registered op); the general launch (``_launch``) and its planning: tile
sizes, the kernel's constexpr flags for a device and dtype, the masked layout's work list, the
launch itself.

The hot path's checks and the general checks sit side by side on purpose: the hot path must
never accept a call that the general path refuses. The two ops share this module rather than
each holding a copy: they differ only in the activation (``act``), the weights and ``masked_m``.
What it reads besides the call is read once, where it is defined: the scale layouts and their
argument checks (:mod:`._layout`), the check primitives (``inkling_kernels._validate``) and the
launch on either backend (``inkling_kernels._backend``).
"""

from __future__ import annotations

import torch
import triton

from .. import _backend
from .._activation import ACT_INTERLEAVED, ACT_NON_INTERLEAVED, ACT_NONE
from .._backend import INT32_LIMIT
from .._validate import ELEMENT_SIZE, FLOAT_DTYPES, check_same_device, check_tensor
from ._kernel import _fp8_group_kernel
from ._layout import (
    _LAYOUT_CODE,
    FP8_DTYPE,
    GROUP_SIZES,
    _canonical_scales,
    _check_flag,
    _check_group_size,
    _check_inputs_no_grad,
    _check_out,
    _check_rows,
    _check_tensor_nd,
    _layout_name,
    _q_lead,
    _resolve_layout,
    _round_up,
    _row_multiple,
    _scale_shape,
    empty_scales,
)

_Tensor = torch.Tensor


def _quant_eager(x, group_size, scale_ue8m0, column_major_scales, out, enable_pdl, scale_layout):
    """:func:`~inkling_kernels.fp8.fp8_group_quant` outside ``torch.compile``: the hot path, else
    the checks and the general launch (which records the plan the hot path replays next time)."""
    layout = _resolve_layout(scale_layout, column_major_scales)
    plan_key = None
    if layout in ("row", "tma"):  # the compiled hot path knows these two
        fast = _fast_launch(x, ACT_NONE, None, None, group_size, scale_ue8m0, layout == "tma", out, enable_pdl)
        if fast is not None:
            if fast[0] is not None:
                return fast
            _, plan_key, out = fast  # no plan yet: the general path launches and records it
    lead, N, G, out = _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, out)
    pdl = _pdl_default(x.device, enable_pdl)
    return _launch(x, ACT_NONE, lead, N, G, group_size, None, None, scale_ue8m0, layout, out, pdl, plan_key)


def _fused_eager(
    gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, out, enable_pdl,
    scale_layout,
):  # fmt: skip
    """:func:`~inkling_kernels.fp8.silu_and_mul_fp8_group_quant` outside ``torch.compile``, as
    :func:`_quant_eager`."""
    layout = _resolve_layout(scale_layout, column_major_scales)
    plan_key = None
    if (interleaved is True or interleaved is False) and layout in ("row", "tma"):
        act = ACT_INTERLEAVED if interleaved else ACT_NON_INTERLEAVED
        fast = _fast_launch(
            gateup, act, topk_weights, masked_m, group_size, scale_ue8m0, layout == "tma", out, enable_pdl
        )
        if fast is not None:
            if fast[0] is not None:
                return fast
            _, plan_key, out = fast  # no plan yet: the general path launches and records it
    lead, N, G, masked_m, out = _fused_checks(
        gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, scale_layout, out
    )
    pdl = _pdl_default(gateup.device, enable_pdl)
    act = ACT_INTERLEAVED if interleaved else ACT_NON_INTERLEAVED
    return _launch(
        gateup, act, lead, N, G, group_size, topk_weights, masked_m, scale_ue8m0, layout, out, pdl, plan_key,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the hot path of a CUDA call (as ``silu_and_mul``'s ``_fast_cuda``)

_COUNT_SIZE = {torch.int32: 4, torch.int64: 8}

#: plan key (``_fast_launch``) -> (thin launcher key, constexpr values, grid0, grid1, ``_knobs()``) of
#: the launch the general path made for a call with that metadata
_PLANS: dict = {}
_PLANS_MAX = 4096  # distinct call shapes kept (a server sees one per batch size); then cleared


def _knobs() -> tuple:
    """What the general path's launch decisions read besides the call: the module's launch
    functions, caches and constants, and the device queries of ``_backend`` (tests and tools replace
    them). A plan recorded under other knobs is not used, so a replaced heuristic always reaches
    the general path. The objects themselves are held (not their ids, which a freed object's
    successor could take)."""
    return (
        _launch_config, _kernel_flags, _hw_e4m3, _pair_words, _warp_redux_ok, _redux_aligned, _programs_an_sm,
        _PROGRAMS_AN_SM, _occupancy, _resident_programs, _launch_kernel, _launch_key, _canonical_scales,
        _scale_shape, empty_scales, WORK_LIST_PAST, WORK_LIST_PAST_DECODE, WORK_LIST_PER_SM, _pack_bits,
        DECODE_ROWS, INT32_LIMIT, _backend.uses_interpreter, _backend.cuda_index, _backend.capability,
        _backend.sm_count,
    )  # fmt: skip


def _fast_launch(src, act, w, masked_m, group_size, ue8m0, column_major, out, enable_pdl):
    """The hot path of a compiled call: :func:`_fast_checks` and, when the general path has already
    launched a call with the same metadata (``_PLANS``), the same launch straight through the thin
    launcher. Returns ``(q, scales)`` once launched; ``(None, plan key, out)`` when the call is
    usual but has no plan yet (the general path then launches it and records the plan; ``out``:
    the outputs allocated here, or the caller's); ``None`` when the checks say unusual or the
    interpreter is forced on CUDA."""
    if src.__class__ is not _Tensor or not src.is_cuda or _backend.interpret_env():
        return None
    checked = _fast_checks(src, act, w, masked_m, group_size, ue8m0, column_major, out, enable_pdl)
    if checked is None:
        return None
    key, args, q, scales = checked
    dev = key[0]
    pdl = _backend.pdl_default_index(dev) if enable_pdl is None else enable_pdl
    key = (*key, pdl)
    plan = _PLANS.get(key)
    if plan is None or plan[4] != _knobs():
        return None, key, (q, scales)
    launcher_key, values, grid0, grid1, _ = plan
    if not _LAUNCHER.launch_cached(launcher_key, grid0, dev, (*args, *values), pdl, grid1):
        return None, key, (q, scales)
    return q, scales


def _fast_checks(src, act, w, masked_m, group_size, ue8m0, column_major, out, enable_pdl):
    """The general path's checks on a usual call, with as few tensor attribute reads as possible:
    ``(plan key without PDL, the kernel's runtime arguments, q, scales)``, or ``None`` whenever
    anything is unusual (a failed check, a tensor subclass, an output layout other than the one the
    op allocates, overlapping buffers, a strided ``masked_m``, an empty tensor), so that the
    general path handles the call or raises its precise error. It never accepts a call that the
    general path refuses (``test_fp8_hot_path_checks_accept_only_what_the_general_path_accepts``),
    and the plan key holds all the metadata the launch depends on: shapes, strides, dtypes, the
    16-byte alignment class of every pointer, the options. The runtime arguments pass ``src`` and
    ``q`` where the general path passes ``src.unsqueeze(0)`` and ``q``'s uint8 view: the same
    addresses, which is all the C launcher reads of them. Any device: the caller checks CUDA."""
    if ue8m0.__class__ is not bool or column_major.__class__ is not bool or group_size.__class__ is not int:
        return None
    if enable_pdl is not None and enable_pdl.__class__ is not bool:
        return None
    dtype = src.dtype
    el = ELEMENT_SIZE.get(dtype)
    if el is None:
        return None
    shape = src.shape
    nd = len(shape)
    if nd == 2:
        T, width = shape
        E = 1
        sm, s1 = src.stride()
        se = T * sm  # what ``unsqueeze(0)`` gives the general path
    elif nd == 3:
        E, T, width = shape
        se, sm, s1 = src.stride()
    else:
        return None
    if E == 0 or T == 0:
        return None
    N = width >> 1 if act else width
    if (act and width & 1) or N == 0 or group_size not in GROUP_SIZES or N % group_size:
        return None
    if (width > 1 and s1 != 1) or (T > 1 and sm < width) or (E > 1 and se < T * sm):
        return None
    dev, cuda = src.get_device(), src.is_cuda  # every tensor: on src's device (type and index)
    grad = torch.is_grad_enabled()
    if grad and src.requires_grad:
        return None
    lo = src.data_ptr()
    spans = [(lo, lo + ((E - 1) * se + (T - 1) * sm + width) * el)]
    lead = shape[:-1]
    w_meta = None
    we, wm = 0, 0
    if w is not None:
        if w.__class__ is not _Tensor or w.is_cuda is not cuda or w.get_device() != dev or w.shape != lead:
            return None
        wel = ELEMENT_SIZE.get(w.dtype)
        if wel is None or (grad and w.requires_grad):
            return None
        if nd == 3:
            we, wm = w.stride()
        else:
            wm = w.stride(0)
        w_lo = w.data_ptr()
        spans.append((w_lo, w_lo + ((E - 1) * we + (T - 1) * wm + 1) * wel))
        w_meta = (w.dtype, w_lo & 15)
    m_meta = None
    if masked_m is not None:
        if nd != 3 or masked_m.__class__ is not _Tensor or masked_m.is_cuda is not cuda or masked_m.get_device() != dev:
            return None
        mel = _COUNT_SIZE.get(masked_m.dtype)
        if mel is None or masked_m.ndim != 1 or masked_m.shape[0] != E or (E > 1 and masked_m.stride(0) != 1):
            return None
        m_lo = masked_m.data_ptr()
        spans.append((m_lo, m_lo + E * mel))
        m_meta = (masked_m.dtype, m_lo & 15)
    G = N // group_size
    s_shape, s_strides, s_storage = _scale_shape(lead, G, column_major)
    if out is None:
        q = torch.empty((*lead, N), dtype=FP8_DTYPE, device=src.device)
        scales = empty_scales(lead, G, column_major, src.device)
        q_lo, s_lo = q.data_ptr(), scales.data_ptr()
    else:
        if out.__class__ is not tuple or len(out) != 2:
            return None
        q, scales = out
        if q.__class__ is not _Tensor or q.is_cuda is not cuda or q.get_device() != dev or q.dtype != FP8_DTYPE:
            return None
        if scales.__class__ is not _Tensor or scales.is_cuda is not cuda or scales.get_device() != dev:
            return None
        if scales.dtype != torch.float32 or q.shape != (*lead, N):
            return None
        if grad and (q.requires_grad or scales.requires_grad):
            return None
        if scales.shape != s_shape or q.stride() != ((T * N, N, 1) if nd == 3 else (N, 1)):
            return None
        if scales.stride() != s_strides:
            return None
        if column_major and scales.untyped_storage().nbytes() // 4 - scales.storage_offset() < s_storage:
            return None  # a column-major buffer without its padding rows: the general path decides
        q_lo, s_lo = q.data_ptr(), scales.data_ptr()
        q_hi, s_hi = q_lo + E * T * N, s_lo + 4 * s_storage  # the scales' padding rows included
        if q_lo < s_hi and s_lo < q_hi:
            return None
        for a, b in spans:
            if (a < q_hi and q_lo < b) or (a < s_hi and s_lo < b):
                return None
    t_pad = _round_up(T, 4) if column_major else T
    s0, s1_, s2 = s_strides if nd == 3 else (0, *s_strides)
    key = (
        dev, act, dtype, E, T, N, group_size, ue8m0, column_major, nd, lo & 15, se, sm, w_meta, we, wm, m_meta,
        q_lo & 15, s_lo & 15,
    )  # fmt: skip
    args = (
        src, src if w is None else w, src if masked_m is None else masked_m, q, scales, T, t_pad,
        se, sm, T * N, N, we, wm, s0, s1_, s2, E,
    )  # fmt: skip
    return key, args, q, scales


# ---------------------------------------------------------------------------------------------
# the checks of each op (the general path; the fakes and torch.compile run them on fake tensors)


def _quant_checks(x, group_size, scale_ue8m0, column_major_scales, scale_layout, out, memory=True):
    """The checks of :func:`~inkling_kernels.fp8.fp8_group_quant`: ``(lead, N, G, out)``.
    ``memory=False`` (fake tensors: the fake implementation, ``torch.compile``) leaves out the
    overlap checks, which read addresses."""
    layout = _resolve_layout(scale_layout, column_major_scales)
    _check_tensor_nd("x", x, FLOAT_DTYPES)
    _check_rows("x", x)
    _check_flag("scale_ue8m0", scale_ue8m0)
    N = x.shape[-1]
    G = _check_group_size(group_size, N, "x's last dimension")
    _check_inputs_no_grad(x=x)
    lead = tuple(x.shape[:-1])
    if out is not None:
        out = _check_out(out, lead, N, G, layout, x.device, {"x": x}, memory)
    return lead, N, G, out


def _fused_checks(
    gateup, topk_weights, interleaved, group_size, scale_ue8m0, column_major_scales, masked_m, scale_layout, out,
    memory=True,
):  # fmt: skip
    """The checks of :func:`~inkling_kernels.fp8.silu_and_mul_fp8_group_quant`: ``(lead, N, G, masked_m, out)``;
    ``memory`` as in :func:`_quant_checks`."""
    layout = _resolve_layout(scale_layout, column_major_scales)
    _check_tensor_nd("gateup", gateup, FLOAT_DTYPES)
    _check_rows("gateup", gateup)
    _check_flag("interleaved", interleaved)
    _check_flag("scale_ue8m0", scale_ue8m0)
    if gateup.shape[-1] % 2:
        raise ValueError(f"gateup's last dimension must be even (2N: gate and up halves), got {gateup.shape[-1]}")
    N = gateup.shape[-1] // 2
    G = _check_group_size(group_size, N, "N (half of gateup's last dimension)")
    lead = tuple(gateup.shape[:-1])
    if topk_weights is not None:
        check_tensor("topk_weights", topk_weights, dtypes=FLOAT_DTYPES)
        check_same_device("gateup", gateup, "topk_weights", topk_weights)
        if tuple(topk_weights.shape) != lead:
            raise ValueError(f"topk_weights must have shape {lead} (one weight a row), got {tuple(topk_weights.shape)}")
    if masked_m is not None:
        if gateup.dim() != 3:
            raise ValueError("masked_m applies to a 3-D gateup [E, T, 2N] only")
        check_tensor("masked_m", masked_m, ndim=1, dtypes=(torch.int32, torch.int64))
        check_same_device("gateup", gateup, "masked_m", masked_m)
        if masked_m.shape[0] != lead[0]:
            raise ValueError(
                f"masked_m must have shape ({lead[0]},) (one count per expert), got {tuple(masked_m.shape)}"
            )
        masked_m = masked_m.contiguous()  # the kernel reads the counts at unit stride: a slice is copied
    _check_inputs_no_grad(gateup=gateup, topk_weights=topk_weights)
    if out is not None:
        inputs = {"gateup": gateup, "topk_weights": topk_weights, "masked_m": masked_m}
        out = _check_out(out, lead, N, G, layout, gateup.device, inputs, memory)
    return lead, N, G, masked_m, out


#: the schema's options and tail, shared by the four ops (``_via_ops`` passes them in this order)
SCHEMA_OPTS = "int group_size=128, bool scale_ue8m0=False, bool column_major_scales=False"
SCHEMA_TAIL = "bool? enable_pdl=None, str? scale_layout=None"


def _via_ops(name, inputs, out, group_size, ue8m0, column_major, enable_pdl, masked_m=None, scale_layout=None):
    ops = torch.ops.inkling
    extra = (masked_m,) if masked_m is not None or name.startswith("silu") else ()
    if out is None:
        return getattr(ops, name)(*inputs, group_size, ue8m0, column_major, *extra, enable_pdl, scale_layout)
    getattr(ops, name + "_out")(
        *inputs, out[0], out[1], group_size, ue8m0, column_major, *extra, enable_pdl, scale_layout
    )
    return out[0], out[1]


# ---------------------------------------------------------------------------------------------
# the general launch and its planning


def _pdl_default(device: torch.device, enable_pdl):
    """One PDL rule for every op of the package: :func:`inkling_kernels._backend.resolve_pdl`."""
    return _backend.resolve_pdl(enable_pdl, device)


def _launch(src, act, lead, N, G, group_size, w, masked_m, ue8m0, layout, out, enable_pdl, plan_key=None):
    """``layout``: a name of ``SCALE_LAYOUTS`` (or the ``column_major_scales`` bool): ``"row"`` and
    ``"tma"`` are strides only; ``"cublas"`` also writes q's padding rows (zero bytes);
    ``"ue8m0_packed"`` stores exponent bytes four to an int32 word (ue8m0 scales implied)."""
    layout = _layout_name(layout)
    device = src.device
    E, T = (1, lead[0]) if len(lead) == 1 else lead
    if out is None:
        q = torch.empty((*_q_lead(lead, layout), N), dtype=FP8_DTYPE, device=device)
        scales = empty_scales(lead, G, layout, device)
    else:
        q, scales = out
    if E == 0 or T == 0:
        return q, scales
    column_major = layout != "row"
    ue8m0 = ue8m0 or layout == "ue8m0_packed"
    pad = layout == "cublas" or (column_major and (out is None or _canonical_scales(scales, lead, G, layout)))
    t_pad = _round_up(T, _row_multiple(layout)) if pad else T
    s_strides = tuple(scales.stride()) if scales.dim() == 3 else (0, *scales.stride())
    x3 = src if src.dim() == 3 else src.unsqueeze(0)
    q3 = q if q.dim() == 3 else q.unsqueeze(0)
    w_strides = (0, 0)
    if w is not None:
        w_strides = (w.stride(0), w.stride(1)) if w.dim() == 2 else (0, w.stride(0))
    interpreted = _backend.uses_interpreter(device)
    block_m, block_g, warps = _launch_config(T, G, group_size, interpreted)
    tiles = -(-t_pad // block_m) * -(-G // block_g)  # not triton.cdiv: a JIT-decorated call costs ~5 us
    resident = _resident_programs(device, interpreted) if masked_m is not None else 0
    past = WORK_LIST_PAST if T > DECODE_ROWS else WORK_LIST_PAST_DECODE
    work_list = masked_m is not None and E * tiles > past * resident
    grid = (tiles, E)
    s_extent = sum((n - 1) * st for n, st in zip((E, t_pad, scales.shape[-1]), s_strides, strict=True)) + 1
    if layout == "ue8m0_packed":
        s_extent *= 4  # the kernel addresses the words' bytes
    int64 = (
        max(E * max(x3.stride(0), 1), T * max(x3.stride(1), 1), E * q3.stride(0), q3.shape[1] * q3.stride(1), s_extent)
        >= INT32_LIMIT
    )
    # compiled: launch_pdl always named, as the thin launcher's first launch names it, so the
    # occupancy warmup (``_programs_an_sm``) and the launch share one compiled program
    kwargs = {} if interpreted else {"launch_pdl": enable_pdl}
    flags = _kernel_flags(device, src.dtype, interpreted)
    # the scale without divisions shortens the decode program's critical path (0.04 us at
    # M = 16); in the 2048-element programs ptxas then issues one of the four loads after
    # the first arithmetic, and M = 1024 to 49152 and the masked calls lost 2-5%
    flags["FAST_SCALE"] = flags["FAST_SCALE"] and T <= DECODE_ROWS
    pair_words = act == ACT_INTERLEAVED and _pair_words(x3)
    aligned = _redux_aligned(x3, q3)
    if not _warp_redux_ok(act, pair_words, group_size, block_m * block_g * group_size, warps, T, aligned):
        flags["WARP_REDUX"] = False
    args = (
        x3,
        w if w is not None else x3,
        masked_m if masked_m is not None else x3,
        q3.view(torch.uint8),
        scales,
        T,
        t_pad,
        x3.stride(0),
        x3.stride(1),
        q3.stride(0),
        q3.stride(1),
        w_strides[0],
        w_strides[1],
        *s_strides,
        E,
    )
    consts = dict(
        N=N,
        GROUP=group_size,
        ACT=act,
        HAS_WEIGHT=w is not None,
        HAS_MASK=masked_m is not None,
        UE8M0=ue8m0,
        BLOCK_M=block_m,
        BLOCK_G=block_g,
        E_POW2=1 << (E - 1).bit_length() if work_list else 1,
        WORK_LIST=work_list,
        **_pack_bits(work_list, E, T, t_pad, block_m, -(-(N // group_size) // block_g)),
        PAD_ROWS=t_pad > T,
        SCALE_LAYOUT=_LAYOUT_CODE[layout],
        INT64=int64,
        PAIR_WORDS=pair_words,
        USE_PDL=enable_pdl,
        **flags,
        num_warps=warps,
        **kwargs,
    )
    if work_list:
        # more tile slots than the GPU holds at once: a work list over the tiles present
        # (``_fp8_group_kernel``) on a grid of what the GPU holds of this program at once (at E = 8,
        # T = 2048 an empty call drops from 8.3 us, one program a slot, to 2.6)
        sms = max(1, resident // 16)
        grid = (max(1, sms * min(WORK_LIST_PER_SM, _programs_an_sm(device, interpreted, args, consts))), 1)
    knobs = _knobs() if plan_key is not None else None  # before the launch: what decided it
    launched = _launch_kernel(grid, device, interpreted, args, consts)
    if plan_key is not None and launched is not None:
        # the hot path's plan for this call's metadata (``_fast_launch``): the same launch
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[plan_key] = (*launched, grid[0], grid[1], knobs)
    return q, scales


DECODE_ROWS = 64  # rows (tokens, per expert when masked) up to which a launch is a decode launch


def _launch_config(rows: int, G: int, group: int, interpreted: bool) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_G, num_warps). Tiles never change a bit of the result (a group never spans
    two programs; masks cover every tail). On the GPU: the widest power-of-two count of groups
    dividing G with at most 1024 elements (512 at decode, rows <= 64) and, past decode, rows up to
    2048 elements a program with 4 warps (16 a thread; on the H200 2-10% faster than 4096 on four
    of six M = 49152 cases, 6% slower on one). In the interpreter each
    op costs the same Python overhead whatever its size, so tiles are much larger there."""
    if interpreted:
        block_g = triton.next_power_of_2(G)
        return max(1, min(256, 65536 // (block_g * group))), block_g, 4
    block_g = 1
    while block_g * 2 * group <= 1024 and G % (block_g * 2) == 0:
        block_g *= 2
    if rows <= DECODE_ROWS:
        # decode: at most 512 elements a program (4 groups of 128 beat 8 by 0.01-0.06 us at
        # N = 3072, M <= 16; one- and two-warp programs were slower everywhere)
        return 1, min(block_g, max(1, 512 // group)), 4
    return max(1, 2048 // (block_g * group)), block_g, 4


# The masked layout's work list is taken when the tile slots exceed WORK_LIST_PAST times the
# resident programs (else one program per slot, expert by expert), on as many programs a streaming
# multiprocessor as it holds at once (``_programs_an_sm``), at most WORK_LIST_PER_SM: past the
# resident programs its time follows the rows present, not E x T, and it beat the slots by up to a
# quarter on ragged counts on the H200 (full experts, a masked layout's rare worst case, lose
# 5-18%; the measurements and the alternatives that lost are in ``data/tuning_log.md``).
WORK_LIST_PAST = 1
WORK_LIST_PAST_DECODE = 4  # decode tiles (one row, <= 512 elements) are cheap to skip: a higher threshold
WORK_LIST_PER_SM = 16


def _resident_programs(device: torch.device, interpreted: bool) -> int:
    """The masked launch's yardstick for its tile slots: 16 programs a streaming multiprocessor (the
    thread limit of 4-warp programs; registers hold fewer, ``_programs_an_sm``); 64 in the
    interpreter, as if it had 4."""
    if interpreted:
        return 64
    return 16 * _backend.sm_count(_backend.cuda_index(device))


def _kernel_flags(device: torch.device, dtype: torch.dtype, interpreted: bool) -> dict:
    """The constexpr switches of ``_fp8_group_kernel`` for one launch (none changes a bit where
    the launcher leaves it on; ``WARP_REDUX`` would on a layout it is not meant for).

    Compiled with 16-bit activations, ``y / s`` takes the split reciprocal (``SPLIT_DIV``: the same
    e4m3 bytes as the IEEE division, by ``division_mismatches``). The sigmoid's compiled form
    (``_silu_mul``'s ``FTZ_EXP``, the same bits as ``tl.sigmoid`` by ``sigmoid_paths_mismatches``)
    is level 2 on sm_90, the flushing exponential and the always-scaled reciprocal, which rests on
    MUFU.RCP scaling exactly by powers of two, proved on the H200 only; other GPUs get level 1 (only
    results below 2**-126 flush), whose argument holds on any. The fast scale's reciprocal likewise
    rests on MUFU.RCP landing next to 1 / s, proved on sm_90 only (``scale_paths_mismatches``)."""
    hw = not interpreted and _hw_e4m3(device)
    sm90 = hw and _backend.capability(_backend.cuda_index(device)) == (9, 0)
    return {
        "HW": hw,
        "SPLIT_DIV": hw and dtype in (torch.bfloat16, torch.float16),
        "FTZ_EXP": (2 if sm90 else 1) if hw else 0,
        "BF16_BITS": hw and dtype == torch.bfloat16,
        "FAST_SCALE": sm90,  # decode launches only: the launcher turns it off past DECODE_ROWS
        "WARP_REDUX": hw,  # where a warp holds one group: the launcher decides
        # any compiled launch stores the scales by inline PTX from the group maximum's layout
        # (``_store_b32``: 3-8% faster below M = 49152 on the H200); the interpreter has no PTX
        "SCALE_ASM": not interpreted,
    }


def _hw_e4m3(device: torch.device) -> bool:
    """Whether compiled launches on ``device`` use the hardware e4m3 conversion (sm_89+)."""
    return _backend.capability(_backend.cuda_index(device)) >= (8, 9)


def _pair_words(x3: torch.Tensor) -> bool:
    """Whether the (gate, up) pairs of an interleaved ``[E, T, 2N]`` input can be read as aligned
    32-bit words: a 16-bit dtype, a 4-byte-aligned start and even strides (else the kernel
    de-interleaves a bf16 load in registers, same result)."""
    return x3.element_size() == 2 and x3.data_ptr() % 4 == 0 and x3.stride(0) % 2 == 0 and x3.stride(1) % 2 == 0


def _redux_aligned(*tensors: torch.Tensor) -> bool:
    """Whether every ``[E, T, K]`` tensor starts on 16 bytes and has row and expert strides Triton
    specializes as divisible by 16 (what keeps four elements a thread in one group)."""
    return all(t.data_ptr() % 16 == 0 and t.stride(0) % 16 == 0 and t.stride(1) % 16 == 0 for t in tensors)


def _warp_redux_ok(act: int, pair_words: bool, group: int, tile: int, warps: int, rows: int, aligned: bool) -> bool:
    """Whether a launch may take the group maximum with one ``redux.sync`` a warp (``WARP_REDUX``).
    It needs the layout where a warp holds exactly one group, four elements a thread: 128-element
    groups in programs of 128 elements a warp (the decode tiles), loaded as such. Triton lays the
    tile out from its loads and stores: a straight load of ``x`` or of the gate and up halves, or
    interleaved pairs read as 32-bit words, give it; interleaved pairs loaded element by element
    and split in registers (fp32, or an odd offset or row stride) spread a thread's registers over
    several groups, and so do input and output pointers or row strides without 16-byte
    divisibility, where Triton's analysis gives one element a thread; the redux then mixes groups.
    ``aligned``: :func:`_redux_aligned` of the input and of ``q``
    (``test_gpu_warp_redux_on_every_layout_it_is_allowed`` covers each allowed case)."""
    return (
        group == 128
        and tile == 128 * warps
        and rows <= DECODE_ROWS
        and aligned
        and (act != ACT_INTERLEAVED or pair_words)
    )


def _pack_bits(on: bool, E: int, T: int, t_pad: int, block_m: int, g_tiles: int) -> dict:
    """The work list's packed lookup (``PACK_E_BITS``, ``PACK_CNT_BITS``): an expert's number below
    its rows present (at most T) below its first item (under its items' total), when the three fit
    in 31 bits (a non-negative int32); else (0, 0), the lookup in four reductions over the counts.
    An item's lookup is then one reduction (3 shuffles a warp) instead of four (12): 2-4% faster
    where the work list is taken, never slower by more than the spread."""
    e_bits = max(1, (E - 1).bit_length())
    cnt_bits = T.bit_length()
    start_bits = (E * -(-t_pad // block_m) * g_tiles).bit_length()
    if not on or e_bits + cnt_bits + start_bits > 31:
        return {"PACK_E_BITS": 0, "PACK_CNT_BITS": 0}
    return {"PACK_E_BITS": e_bits, "PACK_CNT_BITS": cnt_bits}


_PROGRAMS_AN_SM: dict = {}


def _programs_an_sm(device: torch.device, interpreted: bool, args: tuple, consts: dict) -> int:
    """Programs of ``_fp8_group_kernel``, compiled for ``args`` and ``consts``, that one streaming
    multiprocessor of ``device`` holds at once (``_occupancy``). A key's first call compiles the
    program (Triton's cache: the launch that follows reuses it) without launching it, and loads it
    for its register count. The key is the device and the constexprs and launch options, the
    program's shape: not the arguments' alignment and integer specializations, which can move the
    register count by a few, so a grid may be a program an SM off for them, never wrong; building
    the full key (``_backend.arg_spec`` of 17 arguments) costs about 5 us of host time a call, this
    one under 1. The interpreter has no registers: 16."""
    if interpreted:
        return 16
    index = _backend.cuda_index(device)
    key = (index, *consts.values())  # consts: always the same names, in the same order
    fit = _PROGRAMS_AN_SM.get(key)
    if fit is None:
        with torch.cuda.device(index):
            compiled = _fp8_group_kernel.warmup(*args, grid=(1,), **consts)
            compiled._init_handles()  # loads the module: its register count
            props = torch.cuda.get_device_properties(index)
        fit = _PROGRAMS_AN_SM[key] = _occupancy(
            compiled.n_regs,
            compiled.metadata.shared,
            consts["num_warps"],
            getattr(props, "regs_per_multiprocessor", 65536),
            getattr(props, "max_threads_per_multi_processor", 2048),
            getattr(props, "shared_memory_per_multiprocessor", 228 * 1024),
        )
    return fit


def _occupancy(n_regs: int, shared: int, warps: int, regs_sm: int, threads_sm: int, shared_sm: int) -> int:
    """Programs of ``warps`` warps using ``n_regs`` registers a thread and ``shared`` bytes of shared
    memory that one streaming multiprocessor holds at once (what ``cudaOccupancyMaxActiveBlocksPer
    Multiprocessor`` computes on sm_80-sm_90): registers are allocated 256 at a time a warp, each
    program takes 1 KB of shared memory more than it asks for, at most 32 programs."""
    warp_regs = -(-max(n_regs, 1) * 32 // 256) * 256
    fit = min(regs_sm // warp_regs // warps, threads_sm // (32 * warps), shared_sm // (shared + 1024), 32)
    return max(1, fit)


def _launch_kernel(grid: tuple[int, int], device: torch.device, interpreted: bool, args: tuple, consts: dict):
    """One launch of ``_fp8_group_kernel``: interpreted on CPU tensors; compiled through the cached
    thin path (``_backend.CudaLauncher``: no ``JITFunction.run`` binding of 17 arguments and 19
    constexprs a call) on CUDA ones. ``consts``: the constexprs and the launch options. Returns
    (the thin launcher's key, the constexpr values) of a compiled launch, None interpreted."""
    if interpreted:
        _backend.launch(_fp8_group_kernel, grid, device, *args, **consts)
        return None
    index = _backend.cuda_index(device)
    warps, pdl = consts["num_warps"], consts["USE_PDL"]
    key, values = _launch_key(index, args, consts, warps, pdl)
    _LAUNCHER(key, grid[0], index, (*args, *values), warps, pdl, grid[1])
    return key, values


#: the constexprs of ``_fp8_group_kernel``, in its order
_CONSTEXPRS = _backend.kernel_constexprs(_fp8_group_kernel)
#: compiled launches: the cached thin path (``_backend.CudaLauncher``), not ``JITFunction.run``
_LAUNCHER = _backend.CudaLauncher(_fp8_group_kernel, _CONSTEXPRS)


def _launch_key(index: int, args: tuple, consts: dict, warps: int, pdl: bool) -> tuple[tuple, tuple]:
    """(the thin launcher's key, the constexpr values in the kernel's order): the key holds the
    device (a compiled program is loaded per device), every constexpr and launch option and, for
    the 17 runtime arguments, what Triton specializes on (:func:`_backend.arg_spec`: dtype and
    16-byte alignment of each pointer; width, == 1 and % 16 of each integer)."""
    values = tuple(consts[name] for name in _CONSTEXPRS)
    return (index, warps, pdl, values, *map(_backend.arg_spec, args)), values
