"""The FP8 per-token-group kernel of :mod:`inkling_kernels.fp8`, read after :mod:`._launch`, top-down:
the kernel over the tiles (a program per tile slot, or the masked layout's work list), then one
tile (activation, group maximum, scale, e4m3 bytes, scales) and its load and store helpers. The
activation is ``_silu_mul`` (:mod:`inkling_kernels._activation`), the format's arithmetic the jit
helpers of :mod:`._format`."""

from __future__ import annotations

import triton
import triton.language as tl

from .._activation import _silu_mul
from ._format import _bf16_round, _div_by_scale, _e4m3_hw, _e4m3_signed, _group_scale, _warp_group_max


@triton.jit(do_not_specialize=["T", "T_PAD", "E"])
def _fp8_group_kernel(
    x_ptr,  # ACT_NONE: x[E, T, N]; otherwise gateup[E, T, 2N] in the layout ACT names
    w_ptr,  # [E, T] per-row weights (fused path only, HAS_WEIGHT)
    masked_m_ptr,  # [E] rows present per expert (HAS_MASK)
    q_ptr,  # [E, T, N] e4m3 bytes (a uint8 view of the float8_e4m3fn output)
    s_ptr,  # fp32 scales; element (e, t, g) at e * stride_se + t * stride_sm + g * stride_sg
    T,  # rows per expert (M for 2-D inputs)
    T_PAD,  # rows of the scale buffer per expert: T, or round_up(T, 4) for column-major scales
    stride_xe,
    stride_xm,
    stride_qe,
    stride_qm,
    stride_we,
    stride_wm,
    stride_se,
    stride_sm,
    stride_sg,
    E,  # experts (HAS_MASK; else 1)
    N: tl.constexpr,  # activation width, a multiple of GROUP
    GROUP: tl.constexpr,  # group size, a power of two
    ACT: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_MASK: tl.constexpr,
    UE8M0: tl.constexpr,
    BLOCK_M: tl.constexpr,  # rows a program
    BLOCK_G: tl.constexpr,  # groups a program
    E_POW2: tl.constexpr,  # HAS_MASK: next power of two >= E
    WORK_LIST: tl.constexpr,  # HAS_MASK: a grid-sized work list instead of a program per tile slot
    PACK_E_BITS: tl.constexpr,  # WORK_LIST, > 0: the lookup over packed words (``_pack_bits``)
    PACK_CNT_BITS: tl.constexpr,
    INT64: tl.constexpr,
    USE_PDL: tl.constexpr,
    HW: tl.constexpr,  # compiled on sm_89+: hardware e4m3 conversion and fp32 max; else integer ops
    SPLIT_DIV: tl.constexpr,  # compiled, 16-bit: y / s by the split reciprocal; else div_rn
    PAIR_WORDS: tl.constexpr,  # interleaved 16-bit pairs 4-byte aligned: read as 32-bit words
    FTZ_EXP: tl.constexpr,  # compiled: the sigmoid in fewer instructions, same bits (``_silu_mul``)
    BF16_BITS: tl.constexpr,  # compiled, bf16: widen and round on the bits (same values)
    FAST_SCALE: tl.constexpr,  # compiled, decode: scale and reciprocal without div_rn (same bits)
    WARP_REDUX: tl.constexpr,  # compiled, one warp a group of 128: the group max by redux.sync
    SCALE_ASM: tl.constexpr,  # compiled: the scales stored by inline PTX from their own layout
    PAD_ROWS: tl.constexpr,  # T_PAD > T: padding scale rows to zero (and masked loads)
    # 0: fp32 scales at the strides given (row / tma); 1 ("cublas"): also q's padding rows
    # [T, T_PAD) as zero bytes; 2 ("ue8m0_packed"): exponent bytes packed four to an int32 word
    SCALE_LAYOUT: tl.constexpr = 0,
):
    G: tl.constexpr = N // GROUP
    G_TILES: tl.constexpr = (G + BLOCK_G - 1) // BLOCK_G
    if USE_PDL:
        # everything below may read what the previous kernel wrote (masked_m included)
        tl.extra.cuda.gdc_wait()
    if HAS_MASK and WORK_LIST:
        # A work list over the tiles that hold a present row (or a padding scale row to zero),
        # expert after expert, shared out over a grid sized to the GPU: the time follows the
        # rows present, not E x T (an empty tile is never visited). Every program reads the E
        # counts itself, so nothing is read back on the host.
        eo, cnt, rt, tiles, ends, total = _work_counts(masked_m_ptr, E, T, T_PAD, BLOCK_M, G_TILES, E_POW2)
        pad_lo = T // BLOCK_M  # row tiles holding a padding row: [pad_lo, pad_hi)
        t = tl.program_id(0)
        if PACK_E_BITS > 0:
            # an expert's number, rows present and first item in one word: one reduction a lookup.
            # The item's expert is the last with its first item at or before t, the largest such
            # word (its first item in the top bits; an expert with no items shares its first item
            # with the next and, with no rows present, sorts below it)
            packed = ((ends - tiles) << (PACK_E_BITS + PACK_CNT_BITS)) | (cnt << PACK_E_BITS) | eo
        while t < total:  # a while loop: the interpreter cannot take tensor range bounds
            if PACK_E_BITS > 0:
                word = tl.max(tl.where((packed >> (PACK_E_BITS + PACK_CNT_BITS)) <= t, packed, 0), 0)
                e = word & ((1 << PACK_E_BITS) - 1)
                n_e = (word >> PACK_E_BITS) & ((1 << PACK_CNT_BITS) - 1)
                local = t - (word >> (PACK_E_BITS + PACK_CNT_BITS))
                rt_e = (n_e + BLOCK_M - 1) // BLOCK_M
            else:
                e = tl.sum((ends <= t).to(tl.int32), 0)
                sel = eo == e
                local = t - tl.sum(tl.where(sel, ends - tiles, 0), 0)
                rt_e = tl.sum(tl.where(sel, rt, 0), 0)
                n_e = tl.sum(tl.where(sel, cnt, 0), 0)
            j = local // G_TILES
            pid_m = j
            if PAD_ROWS:
                pid_m = tl.where(j < rt_e, j, tl.maximum(rt_e, pad_lo) + (j - rt_e))
            _fp8_group_tile(
                e, pid_m, local % G_TILES, n_e,
                x_ptr, w_ptr, q_ptr, s_ptr, T, T_PAD,
                stride_xe, stride_xm, stride_qe, stride_qm, stride_we, stride_wm, stride_se, stride_sm, stride_sg,
                N, GROUP, ACT, HAS_WEIGHT, UE8M0, BLOCK_M, BLOCK_G, INT64, HW, SPLIT_DIV, PAIR_WORDS, FTZ_EXP,
                BF16_BITS, FAST_SCALE, WARP_REDUX, SCALE_ASM, PAD_ROWS, SCALE_LAYOUT,
            )  # fmt: skip
            t += tl.num_programs(0)
    else:
        # one program per tile slot; masked, a program whose rows are all absent (and hold no
        # padding scale row) returns at once: cheaper than the work list until the slots are
        # several times what the GPU holds at once
        pid = tl.program_id(0)
        e = tl.program_id(1)
        n_rows = T
        run = True
        if HAS_MASK:
            n_rows = tl.minimum(tl.maximum(tl.load(masked_m_ptr + e), 0), T).to(tl.int32)
            first = (pid // G_TILES) * BLOCK_M
            run = first < n_rows
            if PAD_ROWS:
                # the last tile zeroes the padding scale rows [T, T_PAD) whatever the count (with
                # masked loads); without padding rows it would read a row of an expert with none
                run = run | ((first + BLOCK_M > T) & (first < T_PAD))
        if run:
            _fp8_group_tile(
                e, pid // G_TILES, pid % G_TILES, n_rows,
                x_ptr, w_ptr, q_ptr, s_ptr, T, T_PAD,
                stride_xe, stride_xm, stride_qe, stride_qm, stride_we, stride_wm, stride_se, stride_sm, stride_sg,
                N, GROUP, ACT, HAS_WEIGHT, UE8M0, BLOCK_M, BLOCK_G, INT64, HW, SPLIT_DIV, PAIR_WORDS, FTZ_EXP,
                BF16_BITS, FAST_SCALE, WARP_REDUX, SCALE_ASM, PAD_ROWS, SCALE_LAYOUT,
            )  # fmt: skip
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _work_counts(masked_m_ptr, E, T, T_PAD, BLOCK_M: tl.constexpr, G_TILES: tl.constexpr, E_POW2: tl.constexpr):
    """The masked work list over the experts' counts: each expert's rows present (clamped to
    [0, T]), row tiles holding a present row, items listed (those row tiles, and the tiles holding
    a padding scale row only, times the group tiles), the running end of the items and their total."""
    eo = tl.arange(0, E_POW2)
    # clamped in the counts' own width, then narrowed: an int64 count past 2**32 must not wrap
    cnt = tl.load(masked_m_ptr + eo, mask=eo < E, other=0)
    cnt = tl.minimum(tl.maximum(cnt, 0), T).to(tl.int32)
    rt = (cnt + BLOCK_M - 1) // BLOCK_M  # row tiles holding a present row
    pad_lo = T // BLOCK_M  # row tiles holding a padding row: [pad_lo, pad_hi)
    pad_hi = (T_PAD + BLOCK_M - 1) // BLOCK_M
    extra = tl.where((T_PAD > T) & (eo < E), tl.maximum(pad_hi - tl.maximum(rt, pad_lo), 0), 0)
    tiles = (rt + extra) * G_TILES
    return eo, cnt, rt, tiles, tl.cumsum(tiles, 0), tl.sum(tiles, 0)


@triton.jit
def _fp8_group_tile(
    e,  # expert (0 for 2-D inputs)
    pid_m,  # row tile: rows pid_m * BLOCK_M + [0, BLOCK_M)
    pid_g,  # group tile: groups pid_g * BLOCK_G + [0, BLOCK_G)
    n_rows,  # rows present in this expert (T unless masked)
    x_ptr,
    w_ptr,
    q_ptr,
    s_ptr,
    T,
    T_PAD,
    stride_xe,
    stride_xm,
    stride_qe,
    stride_qm,
    stride_we,
    stride_wm,
    stride_se,
    stride_sm,
    stride_sg,
    N: tl.constexpr,
    GROUP: tl.constexpr,
    ACT: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    UE8M0: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,
    INT64: tl.constexpr,
    HW: tl.constexpr,
    SPLIT_DIV: tl.constexpr,
    PAIR_WORDS: tl.constexpr,
    FTZ_EXP: tl.constexpr,
    BF16_BITS: tl.constexpr,
    FAST_SCALE: tl.constexpr,
    WARP_REDUX: tl.constexpr,
    SCALE_ASM: tl.constexpr,
    PAD_ROWS: tl.constexpr,
    SCALE_LAYOUT: tl.constexpr = 0,
):
    """One ``[BLOCK_M rows, BLOCK_G groups]`` tile of :func:`_fp8_group_kernel`."""
    G: tl.constexpr = N // GROUP
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:
        rows = rows.to(tl.int64)
        e = e.to(tl.int64)
    valid = rows < n_rows  # token rows that are read and written
    pad = (rows >= T) & (rows < T_PAD)  # padding rows of a column-major scale buffer: scale 0
    g = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)  # group index along N
    g_ok = g < G
    cols = g[None, :, None] * GROUP + tl.arange(0, GROUP)[None, None, :]  # [1, BLOCK_G, GROUP]
    mask = valid[:, None, None] & g_ok[None, :, None]
    if PAD_ROWS:
        # a tile may hold padding scale rows only, of an expert with no row present: masked loads
        rows_ld, g_ld, ld_mask = rows, g, mask
    else:
        # unmasked loads: rows past the present ones read the last present row again (never an
        # absent row; such a tile holds a present row), groups past G the last group. ptxas then
        # loads straight into the registers it computes on, where a masked load with a fill value
        # costs a move an element in the work list's loop; the stores stay masked
        rows_ld = tl.maximum(tl.minimum(rows, n_rows - 1), 0)
        g_ld = tl.minimum(g, G - 1)
        ld_mask = None
    cols_ld = g_ld[None, :, None] * GROUP + tl.arange(0, GROUP)[None, None, :]
    row_off = e * stride_xe + rows_ld[:, None, None] * stride_xm

    # 1. The activation as stored: x itself, or silu(gate) * up [* w] rounded to the storage dtype.
    if ACT == 0:
        y = _load(x_ptr + row_off + cols_ld, ld_mask, PAD_ROWS).to(tl.float32)
    else:
        if ACT == 1 and PAIR_WORDS:
            # 16-bit gate/up pairs read as one 32-bit word each (little-endian: gate in the low
            # half), in the output's own [rows, groups, GROUP] shape: no de-interleave in registers,
            # and the load, the group maximum and the byte store share one layout
            words = _load(
                x_ptr.to(tl.pointer_type(tl.uint32), bitcast=True)
                + (e * (stride_xe // 2) + rows_ld[:, None, None] * (stride_xm // 2))
                + cols_ld,
                ld_mask,
                PAD_ROWS,
            )
            if BF16_BITS:
                # a bf16 is the top half of the fp32 with the same value: one shift or one and
                gate = (words << 16).to(tl.float32, bitcast=True)
                up = (words & 0xFFFF0000).to(tl.float32, bitcast=True)
            else:
                gate = (words & 0xFFFF).to(tl.uint16).to(x_ptr.dtype.element_ty, bitcast=True)
                up = (words >> 16).to(tl.uint16).to(x_ptr.dtype.element_ty, bitcast=True)
        elif ACT == 1:
            cols2 = g_ld[None, :, None] * (2 * GROUP) + tl.arange(0, 2 * GROUP)[None, None, :]
            pairs = _load(x_ptr + row_off + cols2, ld_mask, PAD_ROWS)
            gate, up = tl.split(tl.reshape(pairs, (BLOCK_M, BLOCK_G, GROUP, 2)))
        else:
            gate = _load(x_ptr + row_off + cols_ld, ld_mask, PAD_ROWS)
            up = _load(x_ptr + row_off + N + cols_ld, ld_mask, PAD_ROWS)
        a = _silu_mul(gate, up, FTZ_EXP)
        if HAS_WEIGHT:
            w_off = e * stride_we + rows_ld * stride_wm
            if PAD_ROWS:
                w = tl.load(w_ptr + w_off, mask=valid, other=0.0, eviction_policy="evict_last")
            else:
                w = tl.load(w_ptr + w_off, eviction_policy="evict_last")
            a = a * w.to(tl.float32)[:, None, None]
        if BF16_BITS:
            y = _bf16_round(a)
        else:
            y = a.to(x_ptr.dtype.element_ty).to(tl.float32)

    # 2. One scale per group, the maximum of |y| over the non-NaN elements, +-Inf capped at the
    # largest finite float. Compiled: the fp32 max (max.f32 returns the non-NaN operand, so a NaN
    # only survives in a group of NaN, and max(NaN, eps) is eps, as max(0, eps) would be).
    # Interpreted (numpy's maximum propagates NaN): on the bits, where for non-negative floats the
    # integer order is the float order. WARP_REDUX (compiled decode programs with one warp a
    # group): a thread's four elements, then one redux.sync across the warp, the maximum left in
    # every element of y's shape (no butterfly of shuffles).
    if WARP_REDUX:
        amax = _warp_group_max(y).to(tl.float32, bitcast=True)
        amax = tl.minimum(tl.maximum(amax, 1e-10), 3.4028234663852886e38)
        s, r, r_lo = _group_scale(amax, UE8M0, SPLIT_DIV, FAST_SCALE)
        sb, rb, lb = s, r, r_lo
    else:
        if HW:
            amax = tl.max(tl.abs(y), axis=2)
            amax = tl.minimum(tl.maximum(amax, 1e-10), 3.4028234663852886e38)
        else:
            mag = y.to(tl.int32, bitcast=True) & 0x7FFFFFFF
            mag = tl.where(mag > 0x7F800000, 0, mag)
            amax = tl.minimum(tl.max(mag, axis=2), 0x7F7FFFFF).to(tl.float32, bitcast=True)
            amax = tl.maximum(amax, 1e-10)
        s, r, r_lo = _group_scale(amax, UE8M0, SPLIT_DIV, FAST_SCALE)  # once a group
        sb = tl.broadcast_to(s[:, :, None], y.shape)
        rb = tl.broadcast_to(r[:, :, None], y.shape)
        lb = tl.broadcast_to(r_lo[:, :, None], y.shape)
    if UE8M0:
        # dividing by a power of two is exact scaling, so the product with its exact reciprocal
        # (a power of two within range) equals the IEEE quotient bit for bit
        t = y * rb
    else:
        t = _div_by_scale(y, sb, rb, lb, SPLIT_DIV)

    # 3. e4m3 bytes and the scales.
    if HW:
        q = _e4m3_hw(t)
    else:
        q = _e4m3_signed(t).to(tl.uint8)
    q_off = e * stride_qe + rows[:, None, None] * stride_qm + cols
    if SCALE_LAYOUT == 1:
        # "cublas": q has the padding rows [T, T_PAD) too, written as zero bytes
        q_mask = (valid | pad)[:, None, None] & g_ok[None, :, None]
        tl.store(q_ptr + q_off, tl.where(valid[:, None, None], q, 0), mask=q_mask)
    else:
        tl.store(q_ptr + q_off, q, mask=mask)
    if WARP_REDUX:
        # every element holds its group's scale; back to one a group for the store (a butterfly
        # here, after the bytes' store, costs less than storing from this layout)
        s = tl.max(s, axis=2)
    s = tl.where(valid[:, None], s, 0.0)
    s_off = e * stride_se + rows[:, None] * stride_sm + g[None, :] * stride_sg
    s_mask = (valid | pad)[:, None] & g_ok[None, :]
    if SCALE_LAYOUT == 2:
        # "ue8m0_packed": the exponent byte of each (power-of-two) scale, byte g % 4 of the int32
        # word (row, g // 4) (little-endian), words at e * stride_se + row * stride_sm +
        # (g // 4) * stride_sg; the padding bytes of the last word (groups [G, round_up(G, 4)))
        # are written as zeros by the last group tile, padding rows as zero bytes (s = 0 there)
        sb_ptr = s_ptr.to(tl.pointer_type(tl.uint8), bitcast=True)
        byte = (s.to(tl.int32, bitcast=True) >> 23).to(tl.uint8)
        w_row = e * stride_se + rows[:, None] * stride_sm
        b_off = 4 * (w_row + (g[None, :] // 4) * stride_sg) + g[None, :] % 4
        tl.store(sb_ptr + b_off, byte, mask=s_mask)
        if G % 4 != 0:
            G_TILES: tl.constexpr = (G + BLOCK_G - 1) // BLOCK_G
            gp = G + tl.arange(0, 4)
            last = (pid_g + tl.zeros((4,), dtype=tl.int32)) == G_TILES - 1  # the last group tile
            gp_ok = (gp < (G + 3) // 4 * 4) & last
            p_off = 4 * (w_row + (gp[None, :] // 4) * stride_sg) + gp[None, :] % 4
            p_mask = (valid | pad)[:, None] & gp_ok[None, :]
            tl.store(sb_ptr + p_off, tl.zeros((BLOCK_M, 4), dtype=tl.uint8), mask=p_mask)
    elif SCALE_ASM:
        # stored from the layout the group maximum left it in (the threads holding a copy of a
        # scale all write the same word): tl.store would first move the scales through shared
        # memory into a layout of its own, with two barriers an item and two shared-memory
        # addresses that a work-list program keeps across its loop
        _store_b32(s_ptr + s_off, s.to(tl.int32, bitcast=True), s_mask)
    else:
        tl.store(s_ptr + s_off, s, mask=s_mask)


@triton.jit
def _load(ptr, mask, MASKED: tl.constexpr):
    """``tl.load(ptr, mask=mask, other=0)`` where ``MASKED``, else ``tl.load(ptr)``."""
    if MASKED:
        return tl.load(ptr, mask=mask, other=0)
    return tl.load(ptr)


@triton.jit
def _store_b32(ptr, bits, mask):
    """``tl.store(ptr, bits, mask=mask)`` of 32-bit words as one predicated ``st.global.b32`` an
    element, in the layout ``bits`` already has (compiled only: PTX)."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p st.global.b32 [$1], $3; mov.b32 $0, 0; }",
        "=r,l,r,r",
        [ptr, mask.to(tl.int32), bits],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )
