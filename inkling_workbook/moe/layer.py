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


# ---- checks ------------------------------------------------------------------------------------


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
