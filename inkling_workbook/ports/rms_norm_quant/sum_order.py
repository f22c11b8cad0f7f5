"""Inputs on which the order of the sum of squares shows in the outputs, under the CPU's arithmetic.

The sum of squares is rounded in fp32 once a tile sum is added, so two orders give sums a last
place apart on many rows; the outputs hide most of that: a one-ulp change of ``inv_rms`` moves
``bf16(h * inv_rms)`` only where ``h * inv_rms`` lies within 2**-24 of a bf16 rounding boundary (about one
element in 65 000), and the e4m3 result only where that bf16 step crosses an e4m3 one. Random
rows at H = 4096 show it at about one row in a few hundred; the CPU matrix affords a few rows.

:func:`sum_order_rows` draws rows and keeps those on which the two orders give different result
bytes, computed here as Triton's interpreter computes them (numpy's ``sum`` over each tile: a
pairwise sum; the tile sums added to an fp32 accumulator in order; fp32 ``1 / sqrt``; bf16 rounded
to nearest even). :func:`cpu_outputs` is that emulation; a test holds it to the kernels' bits.
On the GPU the orders are other trees again (``tl.sum`` reduces in registers, across lanes, across
warps), and the prefill shapes there hold thousands of rows.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from inkling_workbook.ports.rms_norm_quant.formats import FP8_MAX, MIN_SCALE, OUT_DTYPE


def tile_sums(sq: np.ndarray, tile: int) -> np.ndarray:
    """``sum(sq, axis=1)`` as the kernels compute it in the interpreter: zero-padded to whole tiles,
    numpy's sum over each ``[1, tile]`` tile, the tile sums added to an fp32 zero in order."""
    rows, h = sq.shape
    padded = np.zeros((rows, -(-h // tile) * tile), dtype=np.float32)
    padded[:, :h] = sq
    acc = np.zeros(rows, dtype=np.float32)
    for k in range(padded.shape[1] // tile):
        acc = acc + np.sum(padded[:, k * tile : (k + 1) * tile], axis=1)  # per row as on a [1, tile] tile
    return acc


def cpu_outputs(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None, tile: int, eps: float = 1e-6):
    """(result e4m3 [R, H], scale fp32 [R]) of the original's arithmetic with the sum in ``tile``s,
    as the interpreter computes them (no ``scale_ub``)."""
    h = x.float() if residual is None else x.float() + residual.float()
    hn = h.numpy()
    acc = tile_sums(hn * hn, tile)
    mean = acc * np.float32(1.0 / x.shape[1]) + np.float32(eps)
    inv_rms = torch.from_numpy((1 / np.sqrt(mean)).astype(np.float32))[:, None]
    n = ((h * inv_rms).to(x.dtype).float() * weight.float()).to(x.dtype).float()
    inv = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(FP8_MAX, dtype=torch.float32)
    s = torch.clamp(n.abs().amax(dim=1) * inv, min=torch.tensor(MIN_SCALE, dtype=torch.float32).item())
    y = (n / s[:, None]).clamp(-FP8_MAX, FP8_MAX).to(OUT_DTYPE)
    return y, s


BATCH = 256

#: (rows, H, tile, other_tile, seed) -> the (batch, row) of each row :func:`find_rows` picks:
#: the search costs seconds, these picks milliseconds (each checked again when used)
KNOWN_PICKS: dict[tuple, tuple[tuple[int, int], ...]] = {
    (4, 4096, 1024, 4096, 4096): ((26, 158), (50, 44), (60, 14), (71, 53)),
    (4, 3200, 1024, 4096, 3200): ((50, 242), (92, 51), (104, 255), (112, 173)),
}  # about one candidate row in 4000 separates the orders


def _weight(H: int, seed: int, dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (1.0 + torch.randn(H, generator=gen, dtype=torch.float64)).to(dtype)


def _batch(H: int, seed: int, b: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate batch ``b``: ``x = randn * 3`` and ``residual = randn``, ``[256, H]``, own generator."""
    gen = torch.Generator().manual_seed(seed * 100_003 + b + 1)
    x = (torch.randn((BATCH, H), generator=gen, dtype=torch.float64) * 3).to(dtype)
    return x, torch.randn((BATCH, H), generator=gen, dtype=torch.float64).to(dtype)


def _differ(x, w, r, tile: int, other_tile: int) -> torch.Tensor:
    a, _ = cpu_outputs(x, w, r, tile)
    b, _ = cpu_outputs(x, w, r, other_tile)
    return (a.view(torch.uint8) != b.view(torch.uint8)).any(dim=1)


def find_rows(rows: int, H: int, tile: int, other_tile: int, seed: int, dtype=torch.bfloat16, max_batches=400):
    """The (batch, row) of the first ``rows`` candidate rows on which the two orders give different
    result bytes."""
    w, picks = _weight(H, seed, dtype), []
    for b in range(max_batches):
        x, r = _batch(H, seed, b, dtype)
        picks += [(b, int(i)) for i in torch.nonzero(_differ(x, w, r, tile, other_tile)).flatten()]
        if len(picks) >= rows:
            return tuple(picks[:rows])
    raise RuntimeError(f"found {len(picks)} < {rows} rows in {max_batches * BATCH} where the two orders differ")


@functools.cache
def sum_order_rows(rows: int, H: int, tile: int, other_tile: int, seed: int, dtype=torch.bfloat16):
    """``(x, weight, residual)``: ``rows`` rows (``x = randn * 3``, ``residual = randn``, weight
    ``1 + randn``) on which the sum in ``tile``s and in ``other_tile``s give different result bytes
    under the interpreter's arithmetic (:func:`find_rows`, or its :data:`KNOWN_PICKS`; the picks
    checked again). Cached: callers clone what they write."""
    key = (rows, H, tile, other_tile, seed)
    picks = KNOWN_PICKS.get(key) if dtype == torch.bfloat16 else None
    if picks is None:
        picks = find_rows(rows, H, tile, other_tile, seed, dtype)
    w = _weight(H, seed, dtype)
    xs, rs = [], []
    for b in sorted({b for b, _ in picks}):
        x, r = _batch(H, seed, b, dtype)
        idx = [i for bb, i in picks if bb == b]
        xs.append(x[idx])
        rs.append(r[idx])
    x, r = torch.cat(xs).contiguous(), torch.cat(rs).contiguous()
    if not bool(_differ(x, w, r, tile, other_tile).all()):
        raise RuntimeError(f"the recorded picks for {key} no longer separate the two orders (another numpy?)")
    return x, w, r


def order_effects(rows: int, H: int, tile: int, other_tile: int, seed: int, dtype=torch.bfloat16) -> dict:
    """On ``rows`` random rows (``randn * 3``, residual ``randn``, weight ``1 + randn``): how many
    rows the two orders give a different fp32 sum of squares, a different ``inv_rms``, a different
    bf16 ``n`` and different result bytes, under the interpreter's arithmetic."""
    gen = torch.Generator().manual_seed(seed)
    w = (1.0 + torch.randn(H, generator=gen, dtype=torch.float64)).to(dtype)
    x = (torch.randn((rows, H), generator=gen, dtype=torch.float64) * 3).to(dtype)
    r = torch.randn((rows, H), generator=gen, dtype=torch.float64).to(dtype)
    h = (x.float() + r.float()).numpy()
    out = {"rows": rows}
    sums = [tile_sums(h * h, t) for t in (tile, other_tile)]
    out["sum"] = int((sums[0] != sums[1]).sum())
    inv_rms = [(1 / np.sqrt(s * np.float32(1.0 / H) + np.float32(1e-6))).astype(np.float32) for s in sums]
    out["inv_rms"] = int((inv_rms[0] != inv_rms[1]).sum())
    ns = [(torch.from_numpy(h) * torch.from_numpy(q)[:, None]).to(dtype) for q in inv_rms]
    out["bf16(h * inv_rms)"] = int((ns[0].view(torch.int16) != ns[1].view(torch.int16)).any(dim=1).sum())
    res = [cpu_outputs(x, w, r, t)[0].view(torch.uint8) for t in (tile, other_tile)]
    out["result bytes"] = int((res[0] != res[1]).any(dim=1).sum())
    out["result elements"] = int((res[0] != res[1]).sum())
    return out
