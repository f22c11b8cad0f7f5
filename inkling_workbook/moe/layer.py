"""A compact MoE block as a server runs it: the fused activation between the two expert GEMMs.

One layer, ``M`` tokens of hidden size ``H``, ``E`` experts of intermediate size ``N``, top-``k``:

1. **Routing**: ``logits = x @ Wr`` (bf16 GEMM), softmax over the ``E`` experts in fp32, the
   top ``k``, their weights renormalized to sum to 1.
2. **Grouping** by expert, two layouts (both hold the same rows):

   * *contiguous*: the ``M * k`` (token, expert) rows sorted by expert, each expert's segment
     padded to a multiple of :data:`ALIGN` rows with zero rows (what the FP8 GEMM's scale layout
     needs, below), ``offsets`` the int32 cumulative segment ends;
   * *masked*: ``[E, T, H]``, expert ``e``'s rows at ``t < masked_m[e]``, zero rows after.

3. **GEMM1** ``gateup = x_e @ W1[e]^T`` in bf16, ``2N`` columns, gate || up (``interleaved=False``):
   ``torch._grouped_mm`` with the offsets on the device where torch has it for the device
   (:func:`grouped_mm_ok` probes it once), else one ``mm`` per expert; ``torch.bmm`` in the masked
   layout.
4. **Activation**, three variants (:data:`VARIANTS`):

   * ``"bf16"``: ``silu_and_mul`` (bf16 out), GEMM2 in bf16;
   * ``"fp8_unfused"``: ``silu_and_mul`` then ``fp8_group_quant(scale_layout="cublas")``;
   * ``"fp8_fused"``: ``silu_and_mul_fp8_group_quant(scale_layout="cublas")``, one kernel, the same
     bits as the unfused pair.

5. **GEMM2** ``y = a_e @ W2[e]^T`` to ``H``: bf16 (``_grouped_mm`` / ``bmm``), or FP8 blockwise
   (DeepSeek style: activations 1x128, weights 128x128, fp32 scales) with one
   ``torch._scaled_mm`` per expert on CUDA. On a CPU torch has no blockwise ``_scaled_mm``: the
   stand-in (:func:`scaled_mm_standin`) dequantizes both operands to fp32 and multiplies, the
   same math up to the order of the fp32 accumulation, so that the notebook and the tests run.
6. **Combine**: each token's output is the sum of its ``k`` expert outputs weighted by the
   routing weights, in fp32, rounded to bf16 once (one small Triton kernel, :func:`combine`).
   The weights are applied here, not in the activation (``silu_and_mul``'s ``topk_weights``):
   the way servers run a top-k > 1 layer, where GEMM2 is linear and the weight can come after
   it; it keeps the FP8 activation's scales independent of the router.

The cuBLAS per-expert FP8 call wants each expert's activation scales with strides exactly
``(1, rows)``: in the masked layout ``scale_layout="cublas"`` gives that per expert directly (a
``[Tp, G]`` slice of ``[E, Tp, G]`` with strides ``(1, Tp)``, ``Tp = round_up(T, 16)``); in the contiguous layout one
quantization covers every expert, so each expert's ``[rows, G]`` slice is copied into its own
``(1, rows)`` buffer (``E`` small copies: a grouped FP8 GEMM reading offsets on the device, such
as DeepGEMM's contiguous one, would read the scales in place). ``rows`` a multiple of 4
(:data:`ALIGN`) keeps the copy's column stride 16-byte aligned.

The per-expert GEMMs need the per-expert row counts on the host (a :class:`Plan`); a server's
grouped GEMM reads them on the device. The benchmark reads them once, before capture, for the
fixed routing of its inputs (the graph replays the same routing).

The reference (:func:`reference_layer`) is the exact layer in float64 on the same bf16-valued
weights and the same experts (a discrete choice; a near-tie flipped by rounding would otherwise
dominate the comparison), its routing weights recomputed in float64.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend, fp8_group_quant, silu_and_mul, silu_and_mul_fp8_group_quant

VARIANTS = ("bf16", "fp8_unfused", "fp8_fused")
LAYOUTS = ("contiguous", "masked")
ALIGN = 4  # rows of an expert's segment (contiguous) / of T (masked) are a multiple of this
GROUP = 128  # FP8 activation group (1x128) and weight block (128x128)
E4M3_MAX = 448.0

#: the model the CPU tests and the notebook build live (the Triton interpreter runs the kernels)
CPU_SHAPE = {"E": 4, "k": 2, "H": 256, "N": 256}
#: the model timed on the H200: one expert shard of a DeepSeek/Qwen3-MoE-sized layer, the
#: issue's chain per expert ([M, 4096] x [4096, 3072], then N = 1536 -> 4096), 8 experts, top-2
GPU_SHAPE = {"E": 8, "k": 2, "H": 4096, "N": 1536}
GPU_MS = (16, 256, 4096, 16384)


def demo_shape(device) -> dict:
    """The small layer of notebook 08's walk-through: :data:`CPU_SHAPE`, with N (GEMM2's K) 512 on
    CUDA, where blockwise ``torch._scaled_mm`` needs K / 128 to be a multiple of 4 (torch 2.11
    refuses or misreads other widths: :func:`_fp8_mm_into`)."""
    return dict(CPU_SHAPE, N=512) if torch.device(device).type == "cuda" else dict(CPU_SHAPE)


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


# ---- the layer's weights --------------------------------------------------------------------


@dataclass
class Layer:
    """Weights of one MoE layer. ``w1 [E, 2N, H]`` (rows: gate then up), ``w2 [E, H, N]`` and the
    router ``wr [H, E]``, bf16; ``w2_q [E, H, N]`` e4m3 and ``w2_s [E, H/128, N/128]`` fp32: W2
    quantized in 128x128 blocks (``w2 ~= w2_q * w2_s`` per block)."""

    wr: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    w2_q: torch.Tensor
    w2_s: torch.Tensor
    k: int

    @property
    def E(self) -> int:
        return self.w1.shape[0]

    @property
    def H(self) -> int:
        return self.w1.shape[2]

    @property
    def N(self) -> int:
        return self.w2.shape[2]


def quantize_weight_blockwise(w: torch.Tensor, block: int = GROUP) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [..., R, C]`` -> (e4m3 ``[..., R, C]``, fp32 scales ``[..., R/block, C/block]``): one
    scale per ``block x block`` tile, ``amax / 448`` (amax floored at 1e-10)."""
    *lead, R, C = w.shape
    if R % block or C % block:
        raise ValueError(f"w's last two dimensions must be multiples of {block}, got {tuple(w.shape)}")
    t = w.float().reshape(*lead, R // block, block, C // block, block)
    s = t.abs().amax(dim=(-3, -1)).clamp(min=1e-10) / E4M3_MAX
    q = (t / s[..., :, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).reshape(w.shape).to(torch.float8_e4m3fn)
    return q, s.contiguous()


def dequantize_weight_blockwise(q: torch.Tensor, s: torch.Tensor, block: int = GROUP) -> torch.Tensor:
    *lead, R, C = q.shape
    t = q.float().reshape(*lead, R // block, block, C // block, block) * s[..., :, None, :, None]
    return t.reshape(q.shape)


def make_layer(E: int, k: int, H: int, N: int, device="cpu", seed: int = 0) -> Layer:
    """Fresh random weights (bf16-valued), scaled so that activations stay O(1) through the layer."""
    for name, v in (("H", H), ("N", N)):
        if not isinstance(v, int) or v <= 0 or v % GROUP:
            raise ValueError(f"{name} must be a positive multiple of {GROUP}, got {v!r}")
    if not isinstance(k, int) or not 1 <= k <= E:
        raise ValueError(f"k must be an int in [1, E={E}], got {k!r}")
    g = torch.Generator().manual_seed(seed)
    wr = torch.randn((H, E), generator=g) / math.sqrt(H)
    w1 = torch.randn((E, 2 * N, H), generator=g) * (1.5 / math.sqrt(H))
    w2 = torch.randn((E, H, N), generator=g) / math.sqrt(N)
    wr, w1, w2 = (t.to(torch.bfloat16).to(device) for t in (wr, w1, w2))
    w2_q, w2_s = quantize_weight_blockwise(w2)
    return Layer(wr, w1.contiguous(), w2.contiguous(), w2_q, w2_s, k)


def make_tokens(M: int, H: int, device="cpu", seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((M, H), generator=g).to(torch.bfloat16).to(device)


# ---- routing and grouping -------------------------------------------------------------------


def route(x: torch.Tensor, layer: Layer) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert ids ``[M, k]`` int64, weights ``[M, k]`` fp32): softmax in fp32 over the bf16
    router logits, top k, renormalized."""
    probs = torch.softmax((x @ layer.wr).float(), dim=-1)
    w, ids = torch.topk(probs, layer.k, dim=-1)
    return ids, w / w.sum(dim=-1, keepdim=True)


@dataclass
class Plan:
    """The per-expert row counts on the host, what the per-expert GEMMs need (read once)."""

    counts: list[int]
    align: int = ALIGN
    padded: list[int] = field(init=False)
    starts: list[int] = field(init=False)
    rows: int = field(init=False)  # contiguous layout: sum of the padded segments
    T: int = field(init=False)  # masked layout: rows per expert

    def __post_init__(self):
        self.padded = [_round_up(c, self.align) for c in self.counts]
        self.starts = [sum(self.padded[:e]) for e in range(len(self.counts))]
        self.rows = sum(self.padded)
        self.T = max(self.align, _round_up(max(self.counts), self.align))


def make_plan(ids: torch.Tensor, E: int, align: int = ALIGN) -> Plan:
    """Read the per-expert counts of a routing (one host synchronization)."""
    return Plan(torch.bincount(ids.flatten(), minlength=E).tolist(), align)


@dataclass
class Grouping:
    """Where each (token, slot) assignment ``j = token * k + slot`` went. ``expert[j]``,
    ``rank[j]`` (its row within the expert), ``row[j]`` (its row in the contiguous layout)."""

    expert: torch.Tensor
    rank: torch.Tensor
    row: torch.Tensor
    offsets: torch.Tensor  # int32 [E], cumulative ends of the padded segments (torch._grouped_mm's offs)
    masked_m: torch.Tensor  # int32 [E]


def group(ids: torch.Tensor, E: int, align: int = ALIGN) -> Grouping:
    """Device-side grouping (no host synchronization): a stable sort of the assignments by
    expert, each one's rank within its expert, and its row in the padded contiguous layout."""
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(E, dtype=torch.int64, device=ids.device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + align - 1) // align * align
    first = torch.cumsum(counts, 0) - counts  # the sorted position of each expert's first row
    pstart = torch.cumsum(padded, 0) - padded
    e_sorted = flat[order]
    rank_sorted = torch.arange(flat.numel(), device=ids.device) - first[e_sorted]
    rank = torch.empty_like(flat).scatter_(0, order, rank_sorted)
    row = pstart[flat] + rank
    return Grouping(flat, rank, row, torch.cumsum(padded, 0).to(torch.int32), counts.to(torch.int32))


def dispatch_contiguous(x: torch.Tensor, g: Grouping, plan: Plan, k: int) -> torch.Tensor:
    """``[plan.rows, H]``: assignment j's token at row ``g.row[j]``, zero padding rows."""
    xs = torch.zeros((plan.rows, x.shape[1]), dtype=x.dtype, device=x.device)
    xs[g.row] = x.repeat_interleave(k, dim=0)
    return xs


def dispatch_masked(x: torch.Tensor, g: Grouping, plan: Plan, k: int) -> torch.Tensor:
    """``[E, T, H]``: assignment j's token at ``[g.expert[j], g.rank[j]]``, zero rows after."""
    E = len(plan.counts)
    xm = torch.zeros((E, plan.T, x.shape[1]), dtype=x.dtype, device=x.device)
    xm[g.expert, g.rank] = x.repeat_interleave(k, dim=0)
    return xm


# ---- GEMM1 ------------------------------------------------------------------------------------

_GROUPED_MM: dict[tuple, tuple[bool, str]] = {}


def grouped_mm_ok(device) -> tuple[bool, str]:
    """Whether ``torch._grouped_mm`` runs bf16 on ``device`` (probed once on a small case against
    per-expert ``mm``; call it outside graph capture and compilation), and why not."""
    device = torch.device(device)
    key = (device.type, device.index)
    if key not in _GROUPED_MM:
        if not hasattr(torch, "_grouped_mm"):
            _GROUPED_MM[key] = (False, f"torch {torch.__version__} has no torch._grouped_mm")
        else:
            try:
                g = torch.Generator().manual_seed(7)
                a = torch.randn((48, 64), generator=g).to(torch.bfloat16).to(device)
                b = torch.randn((3, 32, 64), generator=g).to(torch.bfloat16).to(device)
                offs = torch.tensor([16, 16, 48], dtype=torch.int32, device=device)
                got = torch._grouped_mm(a, b.transpose(1, 2), offs=offs).float()
                want = torch.cat([a[:16] @ b[0].t(), a[16:48] @ b[2].t()]).float()
                err = ((got - want).norm() / want.norm()).item()
                ok = err < 2**-7
                _GROUPED_MM[key] = (ok, "ok" if ok else f"wrong result (relative error {err:.3g})")
            except Exception as e:  # noqa: BLE001 - any refusal means: use the loop
                _GROUPED_MM[key] = (False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return _GROUPED_MM[key]


def _grouped(a: torch.Tensor, w: torch.Tensor, g: Grouping, plan: Plan) -> torch.Tensor:
    """``a [rows, K]`` (segments of ``plan``) times ``w[e]^T`` (``w [E, Nout, K]``) per segment."""
    if grouped_mm_ok(a.device)[0] and (a.shape[1] * a.element_size()) % 16 == 0:
        # is_compiling first: dynamo cannot trace is_current_stream_capturing (a non-Tensor result)
        if torch.compiler.is_compiling() or (a.is_cuda and torch.cuda.is_current_stream_capturing()):
            return torch._grouped_mm(a, w.transpose(1, 2), offs=g.offsets)
        try:  # eager: a refusal of this shape switches the device to the loop, and says why
            return torch._grouped_mm(a, w.transpose(1, 2), offs=g.offsets)
        except RuntimeError as e:
            why = f"refused {tuple(a.shape)} x {tuple(w.shape)}: {str(e).strip().splitlines()[0][:200]}"
            _GROUPED_MM[(a.device.type, a.device.index)] = (False, why)
    out = torch.zeros((a.shape[0], w.shape[1]), dtype=a.dtype, device=a.device)
    for e, (s, n) in enumerate(zip(plan.starts, plan.padded, strict=True)):
        if n:
            out[s : s + n] = a[s : s + n] @ w[e].t()
    return out


def gemm1(xs: torch.Tensor, layer: Layer, g: Grouping, plan: Plan, layout: str) -> torch.Tensor:
    if layout == "masked":
        return torch.bmm(xs, layer.w1.transpose(1, 2))
    return _grouped(xs, layer.w1, g, plan)


# ---- the activation ---------------------------------------------------------------------------


def activation(gateup: torch.Tensor, variant: str, masked_m: torch.Tensor | None = None, out=None):
    """The variant's activation of GEMM1's output: bf16 ``[..., N]`` for ``"bf16"``, else
    ``(q, scales)`` in the ``"cublas"`` layout (rows padded to a multiple of 16; in the masked layout
    the fused op skips rows ``t >= masked_m[e]``, the unfused pair computes them). ``out``: the
    ``(q, scales)`` to write (FP8 variants)."""
    if variant == "fp8_fused":
        return silu_and_mul_fp8_group_quant(
            gateup, interleaved=False, scale_layout="cublas", masked_m=masked_m, out=out
        )
    flat = gateup.reshape(-1, gateup.shape[-1])
    y = silu_and_mul(flat, interleaved=False).view(*gateup.shape[:-1], gateup.shape[-1] // 2)
    if variant == "bf16":
        return y
    if variant == "fp8_unfused":
        return fp8_group_quant(y, scale_layout="cublas", out=out)
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


# ---- GEMM2 ------------------------------------------------------------------------------------


_SCALED_MM: dict[tuple, bool] = {}


def scaled_mm_available(device) -> bool:
    """FP8 blockwise ``torch._scaled_mm``: CUDA, sm_90 or newer (cuBLASLt 1x128 / 128x128);
    cached per device, so that a compiled layer reads a constant."""
    device = torch.device(device)
    key = (device.type, device.index)
    if key not in _SCALED_MM:
        _SCALED_MM[key] = (
            device.type == "cuda"
            and hasattr(torch, "_scaled_mm")
            and torch.cuda.get_device_capability(device) >= (9, 0)
        )
    return _SCALED_MM[key]


def scaled_mm_standin(q, s, wq, ws) -> torch.Tensor:
    """CPU stand-in for the blockwise ``torch._scaled_mm(q, wq.t(), s, ws.t())``: both operands
    dequantized to fp32 (activation scales per 1x128 group, weight scales per 128x128 block),
    multiplied in fp32, rounded to bf16 once."""
    a = (q.float().reshape(q.shape[0], -1, GROUP) * s[:, :, None]).reshape(q.shape)
    return (a @ dequantize_weight_blockwise(wq, ws).t()).to(torch.bfloat16)


def _scale_b(ws: torch.Tensor) -> torch.Tensor:
    """``ws [H / 128, K / 128]`` as cuBLAS reads the weight scales: ``ws.t()`` with a column stride
    of ``round_up(K / 128, 4)``."""
    kb = ws.shape[-1]
    if kb % 4:
        padded = ws.new_zeros((*ws.shape[:-1], _round_up(kb, 4)))
        padded[..., :kb] = ws
        ws = padded[..., :kb]
    return ws.t()


def _fp8_mm_into(out, q, s, wq, ws) -> None:
    """``out = q x wq^T`` blockwise (``q [rows, K]`` e4m3 with ``s [rows, K / 128]``, ``wq [H, K]``
    with ``ws [H / 128, K / 128]``), bf16.

    Where ``K / 128`` is not a multiple of 4, cuBLAS reads the weight scales at a column stride of
    ``round_up(K / 128, 4)``. Newer torch asks for that stride; torch 2.11 asks for ``K / 128``
    exactly, accepts it, and the result is wrong (8.5% off at ``K / 128 = 2`` on the H200,
    2026-12-02). So the scales go in at the padded stride, and a torch that refuses it gets a
    ``ValueError`` instead of a wrong product."""
    if s.stride() != (1, s.shape[0]):  # cuBLAS wants the activation scales' strides exactly (1, rows)
        s = s.t().contiguous().t()
    if not scaled_mm_available(q.device):
        out.copy_(scaled_mm_standin(q, s, wq, ws))
        return
    try:
        torch._scaled_mm(q, wq.t(), scale_a=s, scale_b=_scale_b(ws), out_dtype=torch.bfloat16, out=out)
    except RuntimeError as e:
        if ws.shape[-1] % 4 == 0 or "Invalid scaling configuration" not in str(e):
            raise
        raise ValueError(
            f"K (wq's last dimension, {wq.shape[-1]}) must be a multiple of 512 for blockwise torch._scaled_mm "
            f"with torch {torch.__version__}: it refuses the weight-scale stride cuBLAS reads at K / 128 = "
            f"{ws.shape[-1]} and misreads the one it accepts"
        ) from e


@torch.library.custom_op("inkling_workbook::fp8_blockwise_grouped_mm", mutates_args=())
def fp8_blockwise_grouped_mm(
    q: torch.Tensor, s: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor, starts: list[int], rows: list[int]
) -> torch.Tensor:
    """GEMM2 in FP8, DeepSeek-style blockwise: expert ``e``'s rows times ``wq[e]^T`` (``wq [E, H, K]``
    e4m3, ``ws [E, H / 128, K / 128]`` fp32), bf16 out, each expert written in place into one output.

    * contiguous: ``q [R, K]``, ``s [R, K / 128]`` (rows padded past ``R`` allowed); expert ``e``
      owns rows ``starts[e] : starts[e] + rows[e]``; out ``[sum(rows), H]``;
    * masked (``starts == rows == []``): ``q [E, T, K]``, ``s [E, T, K / 128]``; out ``[E, T, H]``.

    One blockwise ``torch._scaled_mm`` per expert on CUDA (sm_90+), :func:`scaled_mm_standin`
    elsewhere. Registered as an op so that ``torch.compile`` keeps the calls as they are: Inductor
    has no lowering for blockwise scales (it asserts on ``scale_a [rows, K / 128]``)."""
    E, H = wq.shape[0], wq.shape[1]
    if not starts:
        out = torch.empty((E, q.shape[1], H), dtype=torch.bfloat16, device=q.device)
        for e in range(E):
            _fp8_mm_into(out[e], q[e], s[e], wq[e], ws[e])
        return out
    out = torch.empty((sum(rows), H), dtype=torch.bfloat16, device=q.device)
    for e, (st, n) in enumerate(zip(starts, rows, strict=True)):
        if n:
            _fp8_mm_into(out[st : st + n], q[st : st + n], s[st : st + n], wq[e], ws[e])
    return out


@fp8_blockwise_grouped_mm.register_fake
def _(q, s, wq, ws, starts, rows):
    if not starts:
        return q.new_empty((wq.shape[0], q.shape[1], wq.shape[1]), dtype=torch.bfloat16)
    return q.new_empty((sum(rows), wq.shape[1]), dtype=torch.bfloat16)


def fp8_blockwise_mm(q, s, wq, ws) -> torch.Tensor:
    """One expert: ``q [rows, K]`` e4m3 x ``wq [H, K]`` -> ``[rows, H]`` bf16 (the grouped op with one
    segment)."""
    return fp8_blockwise_grouped_mm(q, s, wq[None], ws[None], [0], [q.shape[0]])


def gemm2(act, layer: Layer, g: Grouping, plan: Plan, layout: str, variant: str) -> torch.Tensor:
    """``[rows, H]`` (contiguous) or ``[E, T, H]`` (masked), bf16."""
    if variant == "bf16":
        if layout == "masked":
            return torch.bmm(act, layer.w2.transpose(1, 2))
        return _grouped(act, layer.w2, g, plan)
    q, s = act
    if layout == "masked":  # q [E, Tp, N], s [E, Tp, G] strides (G Tp, 1, Tp): each expert (1, Tp)
        return fp8_blockwise_grouped_mm(q, s, layer.w2_q, layer.w2_s, [], [])
    # the op copies each expert's scales into a (1, n) buffer: cuBLAS wants that stride exactly
    return fp8_blockwise_grouped_mm(q, s, layer.w2_q, layer.w2_s, plan.starts, plan.padded)


# ---- combine and the whole layer --------------------------------------------------------------


@triton.jit
def _combine_kernel(y_ptr, row_ptr, w_ptr, out_ptr, M, H, stride_y, stride_o,
                    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr):  # fmt: skip
    """``out[m, h] = sum_j w[m, j] * y[row[m K + j], h]``: fp32 sum in slot order, one rounding."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    in_m = offs_m < M
    mask = in_m[:, None] & (offs_h < H)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.float32)
    for j in tl.static_range(K):
        r = tl.load(row_ptr + offs_m * K + j, mask=in_m, other=0)
        w = tl.load(w_ptr + offs_m * K + j, mask=in_m, other=0.0)
        y = tl.load(y_ptr + r[:, None] * stride_y + offs_h[None, :], mask=mask, other=0.0)
        acc += w[:, None] * y.to(tl.float32)
    tl.store(out_ptr + offs_m[:, None] * stride_o + offs_h[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


COMBINE_BLOCK_M, COMBINE_BLOCK_H = 8, 512


def combine(y: torch.Tensor, g: Grouping, weights: torch.Tensor, layout: str, out=None) -> torch.Tensor:
    """``out[i] = sum_slot weights[i, slot] * y(assignment i * k + slot)`` in fp32, rounded to bf16
    once: one Triton kernel reading each expert output row once (the gather and the weighted sum
    fused, as a server's combine is); inside ``torch.compile`` the same formula in torch ops,
    which inductor fuses."""
    M, k = weights.shape
    H = y.shape[-1]
    if layout == "masked":
        T = y.shape[1]
        y = y.reshape(-1, H)
        rows = g.expert * T + g.rank
    else:
        rows = g.row
    if out is None:
        out = torch.empty((M, H), dtype=torch.bfloat16, device=y.device)
    if torch.compiler.is_compiling():
        acc = (y[rows].view(M, k, H).float() * weights[:, :, None]).sum(dim=1)
        return out.copy_(acc)
    if y.stride(1) != 1:
        y = y.contiguous()
    w = weights.float().contiguous()
    grid = (triton.cdiv(M, COMBINE_BLOCK_M), triton.cdiv(H, COMBINE_BLOCK_H))
    _backend.launch(_combine_kernel, grid, y.device, y, rows.contiguous(), w, out, M, H, y.stride(0), out.stride(0),
                    K=k, BLOCK_M=COMBINE_BLOCK_M, BLOCK_H=COMBINE_BLOCK_H, num_warps=4)  # fmt: skip
    return out


def experts(x, ids, weights, layer: Layer, plan: Plan, layout: str, variant: str, out=None) -> torch.Tensor:
    """Everything after the router: grouping, GEMM1, activation, GEMM2, combine (graph-safe
    given ``plan``)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    g = group(ids, layer.E, plan.align)
    if layout == "masked":
        xs = dispatch_masked(x, g, plan, layer.k)
    else:
        xs = dispatch_contiguous(x, g, plan, layer.k)
    gateup = gemm1(xs, layer, g, plan, layout)
    act = activation(gateup, variant, g.masked_m if layout == "masked" else None)
    y = gemm2(act, layer, g, plan, layout, variant)
    return combine(y, g, weights, layout, out)


def moe_layer(x, layer: Layer, layout: str = "contiguous", variant: str = "fp8_fused", plan: Plan | None = None):
    """The whole layer: route, then :func:`experts`. Without ``plan`` the counts are read here."""
    ids, weights = route(x, layer)
    if plan is None:
        plan = make_plan(ids, layer.E)
    return experts(x, ids, weights, layer, plan, layout, variant)


def reference_layer(x: torch.Tensor, layer: Layer, ids: torch.Tensor) -> torch.Tensor:
    """The exact layer in float64 on the same bf16-valued weights and the same experts ``ids``
    (routing weights recomputed from float64 logits)."""
    x64 = x.double()
    probs = torch.softmax(x64 @ layer.wr.double(), dim=-1)
    w = torch.gather(probs, 1, ids)
    w = w / w.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x64)
    N = layer.N
    for e in range(layer.E):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        h = x64[tok] @ layer.w1[e].double().t()
        a = torch.nn.functional.silu(h[:, :N]) * h[:, N:]
        y = a @ layer.w2[e].double().t()
        out.index_add_(0, tok, y * w[tok, slot][:, None])
    return out


def tail_reference(x, ids, weights, layer: Layer, plan: Plan, layout: str, variant: str) -> torch.Tensor:
    """The layer's last two steps in float64 on the operands the layer itself computed: GEMM2 on
    the variant's activation exactly as the kernels wrote it (FP8 codes times their scales, or
    the bf16 values) and the weights GEMM2 reads (dequantized blockwise for FP8), then the
    combine with the same routing weights. Against it, the layer may differ only by GEMM2's and
    the combine's bf16 roundings (:data:`TAIL_BOUND`): a GEMM2 that misreads a scale does not."""
    g = group(ids, layer.E, plan.align)
    xs = (dispatch_masked if layout == "masked" else dispatch_contiguous)(x, g, plan, layer.k)
    act = activation(gemm1(xs, layer, g, plan, layout), variant, g.masked_m if layout == "masked" else None)
    if variant == "bf16":
        a, w2 = act.double(), layer.w2.double()
    else:
        q, sc = act
        a = (q.double().reshape(*q.shape[:-1], -1, GROUP) * sc.double()[..., None]).reshape(q.shape)
        w2 = dequantize_weight_blockwise(layer.w2_q, layer.w2_s).double()
    if layout == "masked":
        y = torch.stack([a[e] @ w2[e].t() for e in range(layer.E)]).reshape(-1, layer.H)
        rows = g.expert * a.shape[1] + g.rank
    else:
        y = torch.zeros((plan.rows, layer.H), dtype=torch.float64, device=x.device)
        for e, (st, n) in enumerate(zip(plan.starts, plan.padded, strict=True)):
            if n:
                y[st : st + n] = a[st : st + n] @ w2[e].t()
        rows = g.row
    M, k = weights.shape
    return (y[rows].view(M, k, layer.H) * weights.double()[:, :, None]).sum(dim=1)


#: the bound of the layer against :func:`tail_reference`: GEMM2's output and the combine's
#: output, each rounded to bf16 once (``2 * U_BF16``)
TAIL_BOUND = 2 * 2.0**-8


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error ``||got - ref|| / ||ref||`` in float64."""
    return ((got.double() - ref).norm() / ref.norm()).item()


#: unit roundoffs: bf16 (8 significand bits) and e4m3 (4)
U_BF16 = 2.0**-8
U_E4M3 = 2.0**-4


def error_bound(variant: str) -> float:
    """A worst-case bound on the relative error of :func:`moe_layer` against the float64 layer,
    from the formats alone: each rounding contributes at most its unit roundoff ``u`` (relative,
    element by element; products and sums of O(1) random data carry it through unchanged in
    norm), times 2 for SiLU's relative condition number, which is <= 2 where the activation is
    not small. Roundings to bf16 (``U_BF16`` each): GEMM1's output, the activation, GEMM2's
    output, the combine's output, and the routing weights (from bf16 router logits; the experts
    are the same); the FP8 variants add the e4m3 activation and the e4m3 weights (``U_E4M3``
    each)."""
    bf16_steps = 5 * U_BF16
    if variant == "bf16":
        return 2 * bf16_steps
    if variant in ("fp8_unfused", "fp8_fused"):
        return 2 * (bf16_steps + 2 * U_E4M3)
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


# ---- checks and the benchmark -----------------------------------------------------------------


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32)


def _scale_storage(s: torch.Tensor) -> torch.Tensor:
    """The whole storage under a column-major scale view, as raw int32 words."""
    return torch.as_strided(s.view(torch.int32), (s.untyped_storage().nbytes() // 4,), (1,), 0).clone()


def _poisoned_like(q: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs in ``(q, s)``'s exact layout, every byte 0xFF (NaN)."""
    q2 = torch.empty_strided(q.shape, q.stride(), dtype=q.dtype, device=q.device)
    q2.view(torch.uint8).fill_(0xFF)
    st = torch.empty(s.untyped_storage().nbytes() // 4, dtype=torch.int32, device=s.device).fill_(-1)
    s2 = torch.as_strided(st.view(torch.float32), s.shape, s.stride(), 0)
    return q2, s2


def fused_equals_unfused(gateup: torch.Tensor, masked_m: torch.Tensor | None = None) -> dict:
    """Both FP8 activations of ``gateup`` into poisoned outputs, compared on raw bits: q bytes and
    scale words of every row present (with ``masked_m``, rows ``t < masked_m[e]``; the padding
    rows of the "cublas" layout too in the 2-D case)."""
    q0, s0 = activation(gateup, "fp8_unfused")
    outs = {v: _poisoned_like(q0, s0) for v in ("fp8_unfused", "fp8_fused")}
    got = {v: activation(gateup, v, masked_m, out=outs[v]) for v in outs}
    (qu, su), (qf, sf) = got["fp8_unfused"], got["fp8_fused"]
    if masked_m is None:
        q_eq = torch.equal(_bits(qu), _bits(qf))
        s_eq = torch.equal(_scale_storage(su), _scale_storage(sf))
        n_q, n_s = qu.numel(), su.untyped_storage().nbytes() // 4
    else:
        present = torch.arange(gateup.shape[1], device=gateup.device)[None, :] < masked_m.long()[:, None]
        q_eq = torch.equal(_bits(qu[:, : gateup.shape[1]])[present], _bits(qf[:, : gateup.shape[1]])[present])
        s_eq = torch.equal(_bits(su[:, : gateup.shape[1]])[present], _bits(sf[:, : gateup.shape[1]])[present])
        n_q, n_s = int(present.sum()) * qu.shape[-1], int(present.sum()) * su.shape[-1]
    return {"equal": bool(q_eq and s_eq), "q_bytes_compared": n_q, "scale_words_compared": n_s}


def accuracy(x: torch.Tensor, layer: Layer, layouts=LAYOUTS, variants=VARIANTS) -> list[dict]:
    """Each (layout, variant)'s relative error against :func:`reference_layer`, and whether the
    fused and unfused FP8 layers give the same output bits."""
    ids, weights = route(x, layer)
    plan = make_plan(ids, layer.E)
    ref = reference_layer(x, layer, ids)
    rows = []
    for layout in layouts:
        outs = {}
        for v in variants:
            out = torch.full(x.shape, float("nan"), dtype=torch.bfloat16, device=x.device)  # poisoned
            outs[v] = experts(x, ids, weights, layer, plan, layout, v, out=out)
            tail = rel_error(outs[v], tail_reference(x, ids, weights, layer, plan, layout, v))
            rows.append({"layout": layout, "variant": v, "rel_err": rel_error(outs[v], ref), "bound": error_bound(v),
                         "tail_rel_err": tail, "tail_bound": TAIL_BOUND})  # fmt: skip
        if "fp8_fused" in outs and "fp8_unfused" in outs:
            same = torch.equal(_bits(outs["fp8_fused"].view(torch.int16)), _bits(outs["fp8_unfused"].view(torch.int16)))
            for r in rows[-len(variants) :]:
                r["layer_fused_equals_unfused"] = bool(same)
    return rows


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"


def run(
    out_dir,
    Ms=GPU_MS,
    shape: dict | None = None,
    device=None,
    compile_variants=("bf16", "fp8_fused"),
    compile_layouts=("contiguous",),
    compile_Ms=(16, 4096),
    compile_budget_s: float = 100.0,
    progress: bool = True,
    command=None,
    timer=None,
    compile_backend: str = "inductor",
) -> dict:
    """The benchmark (CUDA) or its CPU dry run: for each M and layout, accuracy against float64,
    fused == unfused on the timed inputs' activations (raw bits), then (CUDA only) the whole layer
    of each variant and the activation alone timed in CUDA graphs, interleaved; the layer under
    ``torch.compile(fullgraph=True, dynamic=True)`` captured in a graph for ``compile_variants`` in
    ``compile_layouts`` at ``compile_Ms`` (a decode and a prefill size: each compile takes tens of
    seconds) while the compile budget lasts (where fullgraph fails, the error is kept
    and ``fullgraph=False`` is compiled and timed instead). A failing variant records its error string. Writes
    ``out_dir/data/moe_layer_<device>.json`` and ``.csv``. ``timer`` (default
    :mod:`inkling_workbook.measure.bench`: ``GraphTimer``, ``time_interleaved``, ``warm_clocks``) and
    ``compile_backend`` let a CPU test run the timing code with a stand-in timer."""
    import json
    from pathlib import Path

    from tqdm import tqdm

    from inkling_workbook.measure import bench, provenance

    t0 = time.perf_counter()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    timed = cuda or timer is not None
    timer = timer or bench
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    shape = dict(shape or (GPU_SHAPE if cuda else CPU_SHAPE))
    layer = make_layer(**shape, device=device)
    doc = {
        "provenance": provenance.collect(command),
        "shape": shape,
        "Ms": list(Ms),
        "layouts": list(LAYOUTS),
        "variants": list(VARIANTS),
        "grouped_mm": dict(zip(("ok", "why"), grouped_mm_ok(device), strict=True)),
        "gemm2_fp8": "torch._scaled_mm blockwise (1x128 / 128x128), one call per expert"
        if scaled_mm_available(device)
        else "CPU stand-in: dequantize both operands to fp32 and multiply (scaled_mm_standin)",
        "topk_weights": "applied in the combine (fp32 weighted sum of the k expert outputs), not in the activation",
        "timing": {
            "method": "inkling_workbook.measure.bench: GraphTimer (>= 100 calls, >= 1 ms a replay), time_interleaved",
            "rounds": bench.ROUNDS,
            "decode_passes": bench.DECODE_PASSES,
            "other_passes": bench.OTHER_PASSES,
            "spread": "lowest and highest pass median",
            "timed": "the whole layer: router GEMM, softmax/top-k, grouping, GEMM1, activation, GEMM2, combine; "
            "per-expert counts read once before capture (fixed routing of the timed inputs)",
            "activation": "the activation alone on the same layout's GEMM1 output, in its own graph",
            "l2": "warm (the same buffers every call)",
        }
        if timed
        else "not timed: a CPU dry run (Triton interpreter)",
        "accuracy": [],
        "bitwise": [],
        "rows": [],
        "compile": [],
        "errors": [],
        "plans": [],  # per M: the tokens each expert got, the contiguous rows (padded), the masked T
        "compile_scope": {
            "variants": list(compile_variants),
            "layouts": list(compile_layouts),
            "Ms": list(compile_Ms),
            "budget_s": compile_budget_s,
        },
    }
    if timed:
        from torch import _dynamo  # noqa: F401 - loaded before the compile steps reset it

        doc["clock_warmup"] = timer.warm_clocks()
    steps = [(M, layout) for M in Ms for layout in LAYOUTS]
    compile_s = 0.0
    for M, layout in tqdm(steps, desc="moe layer", disable=not progress):
        x = make_tokens(M, layer.H, device, seed=M)
        ids, weights = route(x, layer)
        plan = make_plan(ids, layer.E)
        base = {"M": M, "layout": layout, "rows": plan.rows if layout == "contiguous" else layer.E * plan.T}
        if layout == LAYOUTS[0]:
            doc["plans"].append({"M": M, "counts": plan.counts, "contiguous_rows": plan.rows, "masked_T": plan.T})
        try:
            ref = reference_layer(x, layer, ids)
        except Exception as e:  # noqa: BLE001
            ref = None
            doc["errors"].append({**base, "what": "reference", "error": _err(e)})
        outs = {}
        for v in VARIANTS:
            try:
                out = torch.full(x.shape, float("nan"), dtype=torch.bfloat16, device=device)
                outs[v] = experts(x, ids, weights, layer, plan, layout, v, out=out)
                tail = tail_reference(x, ids, weights, layer, plan, layout, v)
                doc["accuracy"].append(
                    {
                        **base,
                        "variant": v,
                        "rel_err": rel_error(outs[v], ref) if ref is not None else None,
                        "bound": error_bound(v),
                        "tail_rel_err": rel_error(outs[v], tail),
                        "tail_bound": TAIL_BOUND,
                    }
                )
            except Exception as e:  # noqa: BLE001
                doc["accuracy"].append({**base, "variant": v, "rel_err": None, "error": _err(e)})
        # the activation's input, as the layer computes it
        g = group(ids, layer.E, plan.align)
        xs = (dispatch_masked if layout == "masked" else dispatch_contiguous)(x, g, plan, layer.k)
        gateup = gemm1(xs, layer, g, plan, layout)
        mm = g.masked_m if layout == "masked" else None
        try:
            bw = fused_equals_unfused(gateup, mm)
            if "fp8_fused" in outs and "fp8_unfused" in outs:
                same = torch.equal(outs["fp8_fused"].view(torch.int16), outs["fp8_unfused"].view(torch.int16))
                bw["layer_output_equal"] = bool(same)
            doc["bitwise"].append({**base, **bw})
        except Exception as e:  # noqa: BLE001
            doc["bitwise"].append({**base, "equal": None, "error": _err(e)})
        if not timed:
            continue
        passes = bench.DECODE_PASSES if M <= bench.DECODE_MAX_M else bench.OTHER_PASSES

        def layer_call(v, x=x, layout=layout, plan=plan):
            ids_, w_ = route(x, layer)
            return experts(x, ids_, w_, layer, plan, layout, v)

        calls = {f"layer/{v}": (lambda v=v: layer_call(v)) for v in VARIANTS if v in outs}
        calls.update({f"activation/{v}": (lambda v=v: activation(gateup, v, mm)) for v in VARIANTS})
        # the stages around the activation, each alone (its inputs made once, outside the graph)
        acts = {v: activation(gateup, v, mm) for v in VARIANTS if v in outs}
        calls["gemm1/bf16"] = lambda xs=xs, g=g, plan=plan, layout=layout: gemm1(xs, layer, g, plan, layout)
        calls.update(
            {
                f"gemm2/{v}": (lambda v=v, g=g, plan=plan, layout=layout: gemm2(acts[v], layer, g, plan, layout, v))
                for v in acts
            }
        )
        if layout in compile_layouts and M in compile_Ms:
            torch._dynamo.reset()  # each step's layers compile afresh: no recompile limit reached across M
            for v in compile_variants:
                if v not in outs:
                    continue
                if compile_s >= compile_budget_s:
                    why = f"skipped: the compile budget ({compile_budget_s} s) is spent"
                    doc["compile"].append({**base, "variant": v, "ok": None, "error": why})
                    continue
                tc = time.perf_counter()
                rec = {**base, "variant": v}
                for fullgraph in (True, False):  # fullgraph first; where it breaks, what works instead
                    mode = f"torch.compile(fullgraph={fullgraph}, dynamic=True)"
                    try:
                        fn = torch.compile(
                            lambda x, v=v, layout=layout, plan=plan: layer_call(v, x, layout, plan),
                            fullgraph=fullgraph,
                            dynamic=True,
                            backend=compile_backend,
                        )
                        got = fn(x)
                        sync()
                        same = bool(torch.equal(got.view(torch.int16), outs[v].view(torch.int16)))
                        err = rel_error(got, ref) if ref is not None else None
                        rec.update(ok=True, mode=mode, rel_err=err, equal_to_eager=same)
                        calls[f"compiled/{v}"] = lambda fn=fn, x=x: fn(x)
                        break
                    except Exception as e:  # noqa: BLE001
                        rec.update(ok=False, mode=mode)
                        rec["error" if fullgraph else "fallback_error"] = _err(e)
                rec["compile_s"] = round(time.perf_counter() - tc, 2)
                compile_s += rec["compile_s"]
                doc["compile"].append(rec)
        timers = {}
        for name, fn in calls.items():
            try:
                timers[name] = timer.GraphTimer([fn])
            except Exception as e:  # noqa: BLE001
                doc["errors"].append({**base, "what": name, "error": _err(e)})
                sync()
        try:
            timings = timer.time_interleaved(timers, passes)
        except Exception as e:  # noqa: BLE001
            timings = {}
            doc["errors"].append({**base, "what": "time_interleaved", "error": _err(e)})
        finally:
            for t in timers.values():
                t.close()
        clock = provenance.gpu_state().get("sm_clock_mhz")
        for name, t in timings.items():
            kind, v = name.split("/")
            doc["rows"].append({**base, "kind": kind, "variant": v, **t.columns(0, 3), "sm_clock_mhz": clock})
        del timers
        if cuda:
            torch.cuda.empty_cache()
    for r in doc["rows"]:
        r.pop("bytes", None)
        r.pop("tbps", None)
    doc["grouped_mm_after"] = dict(zip(("ok", "why"), grouped_mm_ok(device), strict=True))  # a refusal mid-run
    doc["compile_s_total"] = round(compile_s, 1)
    doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
    if cuda:
        doc["gpu_state_after"] = provenance.gpu_state()
    doc["all_bitwise_equal"] = all(b.get("equal") is True for b in doc["bitwise"])
    doc["all_within_bound"] = all(
        a.get("rel_err") is not None and a["rel_err"] <= a["bound"] and a["tail_rel_err"] <= a["tail_bound"]
        for a in doc["accuracy"]
    )
    slug = provenance.device_slug(device)
    data = Path(out_dir) / "data"
    path = data / f"moe_layer_{slug}.json"
    provenance.write_record(path, json.dumps(doc, indent=1) + "\n")
    if doc["rows"]:
        bench.write_csv(doc["rows"], path.with_suffix(".csv"))
    return doc


# ---- reading the record (notebook 08) ---------------------------------------------------------


def load_record(path) -> dict | None:
    """The benchmark's JSON record, or None where it is absent."""
    import json
    from pathlib import Path

    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def _fmt(r: dict) -> str:
    return f"{r['median_us']:.1f} [{r['lo_us']:.1f}, {r['hi_us']:.1f}]"


def timing_table(doc: dict):
    """One row per (layout, M): each variant's layer time (median [lo, hi] us), the compiled
    layers, the activation alone and its share of the layer, and the verdicts: fused vs
    unfused (a tie where the ranges overlap), FP8 fused vs bf16."""
    import pandas as pd

    from inkling_workbook.measure.bench import ties

    t = {(r["layout"], r["M"], r["kind"], r["variant"]): r for r in doc["rows"]}
    out = []
    for layout in doc["layouts"]:
        for M in doc["Ms"]:
            row = {"layout": layout, "M": M}
            for v in doc["variants"]:
                lay, act = t.get((layout, M, "layer", v)), t.get((layout, M, "activation", v))
                row[f"{v} us"] = _fmt(lay) if lay else "-"
                row[f"{v} act share"] = f"{act['median_us'] / lay['median_us']:.1%}" if lay and act else "-"
            for v in ("bf16", "fp8_fused"):
                c = t.get((layout, M, "compiled", v))
                if c:
                    row[f"compiled {v} us"] = _fmt(c)
            f, u, b = (t.get((layout, M, "layer", v)) for v in ("fp8_fused", "fp8_unfused", "bf16"))
            if f and u:
                tie = ties(f["lo_us"], f["hi_us"], u["lo_us"], u["hi_us"])
                row["fused / unfused"] = f"{f['median_us'] / u['median_us']:.3f}" + (" (tie)" if tie else "")
            if f and b:
                tie = ties(f["lo_us"], f["hi_us"], b["lo_us"], b["hi_us"])
                row["fp8 fused / bf16"] = f"{f['median_us'] / b['median_us']:.3f}" + (" (tie)" if tie else "")
            out.append(row)
    return pd.DataFrame(out).fillna("-")  # a column only some rows have (the compiled layers): "-" elsewhere


def stage_table(doc: dict):
    """Where the layer's time goes, per (layout, M, variant): GEMM1, the activation and GEMM2 each
    timed alone in its own graph, the whole layer, and the rest (routing, grouping, dispatch,
    combine: the layer less the three stages). Medians, us; a stage alone is not its cost inside
    the layer to the last microsecond (caches and overlap differ), so the rest is approximate."""
    import pandas as pd

    t = {(r["layout"], r["M"], r["kind"], r["variant"]): r["median_us"] for r in doc["rows"]}
    out = []
    for layout in doc["layouts"]:
        for M in doc["Ms"]:
            for v in doc["variants"]:
                g1, a, g2, lay = (t.get((layout, M, k, vv)) for k, vv in
                                  (("gemm1", "bf16"), ("activation", v), ("gemm2", v), ("layer", v)))  # fmt: skip
                if None in (g1, a, g2, lay):
                    continue
                out.append({"layout": layout, "M": M, "variant": v, "gemm1 us": round(g1, 1),
                            "activation us": round(a, 2), "gemm2 us": round(g2, 1), "layer us": round(lay, 1),
                            "rest us": round(lay - g1 - a - g2, 1)})  # fmt: skip
    return pd.DataFrame(out)


def _by_key(doc: dict) -> dict:
    return {(r["layout"], r["M"], r["kind"], r["variant"]): r for r in doc["rows"]}


def _delta(t: dict, layout: str, M: int, kind: str, a: str, b: str) -> float | None:
    """Median of ``(kind, a)`` less median of ``(kind, b)``, us (None where either is missing)."""
    ra, rb = t.get((layout, M, kind, a)), t.get((layout, M, kind, b))
    return None if ra is None or rb is None else ra["median_us"] - rb["median_us"]


def _verdict(f: dict, u: dict, faster: str, slower: str) -> str:
    from inkling_workbook.measure.bench import verdict

    return {"tie": "tie (ranges overlap)", "win": faster, "loss": slower}[verdict(f, u)]


def activation_rows(doc: dict, layout: str, M: int) -> dict[str, int]:
    """The rows each variant's activation computes at ``M``: contiguous, every row of the padded
    segments (both FP8 variants alike); masked, the unfused pair (and the bf16 ``silu_and_mul``)
    all ``E * T`` rows, the fused op only the ``M * k`` rows present (it skips ``t >= masked_m``)."""
    plan = next(p for p in doc["plans"] if p["M"] == M)
    if layout == "contiguous":
        return {v: plan["contiguous_rows"] for v in doc["variants"]}
    all_rows = doc["shape"]["E"] * plan["masked_T"]
    return {v: (M * doc["shape"]["k"] if v == "fp8_fused" else all_rows) for v in doc["variants"]}


def fusion_table(doc: dict):
    """Fused against unfused FP8, per (layout, M): the rows each activation computes (masked: the
    fused op skips the padding rows, so its saving there includes skipped work), the whole
    layer's time saved (unfused less fused, medians, us and % of the unfused layer) with the
    verdict of one capture's ranges, and beside it the same difference for the activation timed
    alone and for GEMM2 timed alone on each variant's output. In the contiguous layout the two
    GEMM2s read the same bits: their difference is how far a stage timed alone moves between
    graphs."""
    import pandas as pd

    t = _by_key(doc)
    out = []
    for layout in doc["layouts"]:
        for M in doc["Ms"]:
            f, u = t.get((layout, M, "layer", "fp8_fused")), t.get((layout, M, "layer", "fp8_unfused"))
            if not (f and u):
                continue
            rows = activation_rows(doc, layout, M)
            d_act = _delta(t, layout, M, "activation", "fp8_unfused", "fp8_fused")
            d_g2 = _delta(t, layout, M, "gemm2", "fp8_unfused", "fp8_fused")
            out.append(
                {
                    "layout": layout,
                    "M": M,
                    "rows fused": rows["fp8_fused"],
                    "rows unfused": rows["fp8_unfused"],
                    "layer saved us": round(u["median_us"] - f["median_us"], 1),
                    "layer saved": f"{1 - f['median_us'] / u['median_us']:+.1%}",
                    "one capture": _verdict(f, u, "fused faster", "unfused faster"),
                    "activation alone saved us": "-" if d_act is None else round(d_act, 1),
                    "GEMM2 alone, unfused - fused us": "-" if d_g2 is None else round(d_g2, 1),
                }
            )
    return pd.DataFrame(out)


def capture_table(cap: dict):
    """The capture-variance experiment (``tools/experiments/moe_capture_variance.py``): each FP8
    layer captured several times and every graph timed in the same interleaved passes. Per
    (M, layout): each variant's capture medians (us), the widest distance between two captures
    of one variant, and fused against unfused across captures: a tie where the two sets of
    capture medians overlap ([lowest, highest] of each), else who is faster and by how much (the
    nearest and the farthest pair of captures)."""
    import pandas as pd

    from inkling_workbook.measure.bench import ties

    df = pd.DataFrame(cap["rows"])
    variants = list(dict.fromkeys(df.variant))
    out = []
    for (M, layout), g in df.groupby(["M", "layout"], sort=False):
        row = {"M": M, "layout": layout}
        med = {v: sorted(g[g.variant == v].sort_values("capture").median_us) for v in variants}
        for v in variants:
            row[f"{v} us"] = ", ".join(f"{m:.1f}" for m in med[v])
        row["widest capture spread us"] = round(max(max(m) - min(m) for m in med.values() if m), 1)
        f, u = med["fp8_fused"], med["fp8_unfused"]
        if ties(min(f), max(f), min(u), max(u)):
            row["fused vs unfused across captures"] = "tie (capture medians overlap)"
        else:
            first, second = ("fused", "unfused") if max(f) < min(u) else ("unfused", "fused")
            a, b = (f, u) if first == "fused" else (u, f)
            row["fused vs unfused across captures"] = (
                f"{first} faster by {min(b) - max(a):.1f}-{max(b) - min(a):.1f} us"
            )
        out.append(row)
    return pd.DataFrame(out)


def fp8_table(doc: dict):
    """FP8 fused against bf16, per (layout, M): the layer time ratio (fp8 fused / bf16, medians;
    < 1: FP8 takes less time), its verdict, and where the difference is (fp8 fused less bf16, us):
    the whole layer, GEMM2 and the activation each timed alone, and the rest (the layer's
    difference less those two; GEMM1 is the same bf16 GEMM in both): where the stages timed alone
    do not add up to the layer's difference, the rest says by how much."""
    import pandas as pd

    t = _by_key(doc)
    out = []
    for layout in doc["layouts"]:
        for M in doc["Ms"]:
            f, b = t.get((layout, M, "layer", "fp8_fused")), t.get((layout, M, "layer", "bf16"))
            if not (f and b):
                continue
            ratio = f["median_us"] / b["median_us"]
            word = _verdict(f, b, f"FP8 wins, {1 - ratio:.1%} less time", f"FP8 loses, {ratio - 1:.1%} more time")
            d_g2 = _delta(t, layout, M, "gemm2", "fp8_fused", "bf16")
            d_act = _delta(t, layout, M, "activation", "fp8_fused", "bf16")
            out.append(
                {
                    "layout": layout,
                    "M": M,
                    "fp8 fused / bf16": round(ratio, 3),
                    "verdict": word,
                    "layer: fp8 - bf16 us": round(f["median_us"] - b["median_us"], 1),
                    "GEMM2: fp8 - bf16 us": "-" if d_g2 is None else round(d_g2, 1),
                    "activation: fp8 - bf16 us": "-" if d_act is None else round(d_act, 1),
                    "rest: fp8 - bf16 us": "-"
                    if None in (d_g2, d_act)
                    else round(f["median_us"] - b["median_us"] - d_g2 - d_act, 1),
                }
            )
    return pd.DataFrame(out)


def compile_table(doc: dict):
    """The compiled layers against eager, per compiled (layout, M, variant): how it compiled, the
    compiled and the eager layer (median [lo, hi] us), the ratio compiled / eager, its verdict,
    the compile time, the error against float64 and whether its output bits equal eager's. Error
    strings, where a compile failed, are in the record (``compile``), whole."""
    import pandas as pd

    t = _by_key(doc)
    out = []
    for c in doc.get("compile", []):
        row = {"layout": c["layout"], "M": c["M"], "variant": c["variant"], "mode": c.get("mode", "-")}
        row["compiled"] = "yes" if c.get("ok") else ("skipped" if c.get("ok") is None else "failed")
        comp, eager = (
            t.get((c["layout"], c["M"], "compiled", c["variant"])),
            t.get((c["layout"], c["M"], "layer", c["variant"])),
        )
        row["compiled us"] = _fmt(comp) if comp else "-"
        row["eager us"] = _fmt(eager) if eager else "-"
        if comp and eager:
            ratio = comp["median_us"] / eager["median_us"]
            row["compiled / eager"] = round(ratio, 3)
            row["verdict"] = _verdict(
                comp, eager, f"compiled {1 - ratio:.1%} less time", f"compiled {ratio - 1:.1%} more time"
            )
        row["compile s"] = c.get("compile_s", "-")
        row["rel_err"] = f"{c['rel_err']:.3%}" if c.get("rel_err") is not None else "-"
        row["bits = eager"] = c.get("equal_to_eager", "-")
        out.append(row)
    return pd.DataFrame(out).fillna("-")


def accuracy_table(doc: dict):
    """Relative Frobenius error against float64 by (layout, M) and variant, and the bound."""
    import pandas as pd

    df = pd.DataFrame(doc["accuracy"])
    return df.pivot_table(index=["layout", "M"], columns="variant", values="rel_err")[list(doc["variants"])]


def accuracy_bounds(doc: dict):
    """Per variant, over every M and layout: the error against float64 and the format bound
    (:func:`error_bound`, loose: every rounding at its worst), and the error against the float64
    tail on the layer's own operands and :data:`TAIL_BOUND` (two bf16 roundings: the tight check,
    the one a misread scale fails), with how many times each error fits in its bound."""
    import pandas as pd

    df = pd.DataFrame([a for a in doc["accuracy"] if a.get("rel_err") is not None])
    out = []
    for v in doc["variants"]:
        d = df[df.variant == v]
        if d.empty:
            continue
        row = {
            "variant": v,
            "vs float64": f"{d.rel_err.min():.2%}-{d.rel_err.max():.2%}",
            "format bound": f"{d.bound.max():.2%}",
            "bound / error": f"{d.bound.max() / d.rel_err.max():.1f}x",
        }
        if "tail_rel_err" in d:
            row["vs the float64 tail"] = f"{d.tail_rel_err.min():.2%}-{d.tail_rel_err.max():.2%}"
            row["tail bound"] = f"{d.tail_bound.max():.2%}"
            row["tail bound / error"] = f"{d.tail_bound.max() / d.tail_rel_err.max():.1f}x"
        out.append(row)
    return pd.DataFrame(out)


def conclusions(doc: dict, captures: dict | None = None) -> list[str]:
    """What the record says, as sentences computed from it: what the fusion saves in the whole
    layer (one capture's verdict, and with ``captures``, the capture-variance experiment's,
    which decides where it covers the M), what the masked comparison includes, where FP8 beats
    bf16 (the layer time ratio fp8 fused / bf16) and where not, the fused activation's share,
    the compiled layers against eager, and the errors."""
    from inkling_workbook.measure.bench import ties

    t = _by_key(doc)
    across = {}
    if captures is not None:
        ct = capture_table(captures)
        across = {(r["layout"], r["M"]): r["fused vs unfused across captures"] for _, r in ct.iterrows()}
    lines = []
    for layout in doc["layouts"]:
        fusion, fp8, share, no_fusion, no_fp8, skipped, cap = [], [], [], [], [], [], []
        for M in doc["Ms"]:
            f, u, b = (t.get((layout, M, "layer", v)) for v in ("fp8_fused", "fp8_unfused", "bf16"))
            a = t.get((layout, M, "activation", "fp8_fused"))
            if f and u:
                saved = 1 - f["median_us"] / u["median_us"]
                tie = ties(f["lo_us"], f["hi_us"], u["lo_us"], u["hi_us"])
                us = u["median_us"] - f["median_us"]
                fusion.append(f"M={M}: {us:+.1f} us ({saved:+.1%})" + (" (tie: ranges overlap)" if tie else ""))
                verdict = across.get((layout, M))
                if verdict is not None:
                    cap.append(f"M={M}: {verdict}")
                if (verdict is not None and not verdict.startswith("fused faster")) or (
                    verdict is None and (tie or saved <= 0)
                ):
                    no_fusion.append(M)
                if layout == "masked" and doc.get("plans"):
                    rows = activation_rows(doc, layout, M)
                    skipped.append(f"M={M}: {rows['fp8_unfused'] - rows['fp8_fused']} of {rows['fp8_unfused']}")
            if f and b:  # the table's ratio, fp8 fused / bf16, in words
                ratio = f["median_us"] / b["median_us"]
                tie = ties(f["lo_us"], f["hi_us"], b["lo_us"], b["hi_us"])
                if tie:
                    word = f"tie ({ratio:.3f}, ranges overlap)"
                elif ratio < 1:
                    word = f"FP8 wins, {1 - ratio:.1%} less time"
                else:
                    word = f"FP8 loses, {ratio - 1:.1%} more time"
                fp8.append(f"M={M}: {word}")
                if tie or ratio >= 1:
                    no_fp8.append(M)
            if a and f:
                share.append(f"M={M}: {a['median_us'] / f['median_us']:.1%}")
        if fusion:
            lines.append(f"{layout}: time the fusion saves in the whole FP8 layer (one capture): " + "; ".join(fusion))
            if cap:
                lines.append(f"{layout}: fused against unfused across captures: " + "; ".join(cap))
            if skipped:
                lines.append(
                    f"{layout}: the saving includes skipped work: rows the unfused pair computes and the fused op "
                    "skips (padding, t >= masked_m): " + "; ".join(skipped)
                )
            lines.append(
                f"{layout}: the fusion does not pay (tie or loss) at M = {no_fusion}"
                if no_fusion
                else f"{layout}: the fused layer is faster than the unfused one at every M measured"
            )
        if fp8:
            lines.append(f"{layout}: the FP8 fused layer against the bf16 layer: " + "; ".join(fp8))
            lines.append(
                f"{layout}: FP8 does not pay (tie or loss) at M = {no_fp8}"
                if no_fp8
                else f"{layout}: FP8 beats bf16 at every M measured"
            )
        if share:
            lines.append(
                f"{layout}: the fused activation's share (timed alone, over the FP8 fused layer): " + "; ".join(share)
            )
    comp = []
    for c in doc.get("compile", []):
        tc, te = (
            t.get((c["layout"], c["M"], "compiled", c["variant"])),
            t.get((c["layout"], c["M"], "layer", c["variant"])),
        )
        if tc and te:
            r = tc["median_us"] / te["median_us"]
            word = f"{1 - r:.1%} less time" if r < 1 else f"{r - 1:.1%} more time"
            comp.append(f"{c['layout']} M={c['M']} {c['variant']}: {word}")
        elif c.get("ok") is False:
            comp.append(f"{c['layout']} M={c['M']} {c['variant']}: did not compile")
    if comp:
        modes = sorted({c["mode"] for c in doc["compile"] if c.get("ok")})
        lines.append(f"compiled ({', '.join(modes) or 'none'}) against eager: " + "; ".join(comp))
    errs, tails = {}, []
    for a in doc["accuracy"]:
        if a.get("rel_err") is not None:
            errs.setdefault(a["variant"], []).append(a["rel_err"])
        if a.get("tail_rel_err") is not None:
            tails.append(a["tail_rel_err"])
    if errs:
        lines.append(
            "error against float64 (relative Frobenius, over every M and layout): "
            + "; ".join(f"{v} {min(e):.2%}-{max(e):.2%}" for v, e in errs.items())
        )
    if tails:
        lines.append(
            f"error against the float64 tail on the layer's own operands: {min(tails):.2%}-{max(tails):.2%} "
            f"(bound {TAIL_BOUND:.2%}, two bf16 roundings)"
        )
    bits = doc.get("bitwise", [])
    if bits:
        n_eq = sum(b.get("equal") is True for b in bits)
        lines.append(f"fused == unfused activation, raw bits, on the timed inputs: {n_eq}/{len(bits)} cases")
    return lines
