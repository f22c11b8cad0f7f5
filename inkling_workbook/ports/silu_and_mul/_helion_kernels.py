"""The helion kernels themselves (helion needs them at module level: no closures).

The functions are decorated by :func:`make`, once per key of the original AOT wrapper (see
:mod:`inkling_workbook.ports.silu_and_mul.helion_original`). Imported only through
:mod:`inkling_workbook.ports.silu_and_mul.helion_original`, which checks that helion is
installed first. Loop-local names (``t_m``, ``g_f32``, ...) are distinct from every module
global on purpose: helion treats module-level names used in a kernel as host variables.
"""

from __future__ import annotations

import helion
import helion.language as hl
import torch

BLOCK_N = 256  # the fixed tile the workbook used before the sm_90 table was recovered
NUM_WARPS = 4
CONFIG = helion.Config(block_sizes=[1, BLOCK_N], num_warps=NUM_WARPS, num_stages=1)


def silu_and_mul_helion_interleaved(
    gateup: torch.Tensor, out: torch.Tensor, topk_weights: torch.Tensor | None
) -> torch.Tensor:
    m, n = out.size()
    pairs = gateup.view(m, n, 2)  # [M, N, 2]: gate at [..., 0], up at [..., 1]
    for t_m, t_n in hl.tile([m, n]):
        g_f32 = pairs[t_m, t_n, 0].to(torch.float32)
        u_f32 = pairs[t_m, t_n, 1].to(torch.float32)
        y_f32 = g_f32 * torch.sigmoid(g_f32) * u_f32
        if topk_weights is not None:
            y_f32 = y_f32 * topk_weights[t_m].to(torch.float32)[:, None]
        out[t_m, t_n] = y_f32.to(out.dtype)
    return out


def silu_and_mul_helion_non_interleaved(
    gateup: torch.Tensor, out: torch.Tensor, topk_weights: torch.Tensor | None
) -> torch.Tensor:
    m, n = out.size()
    halves = gateup.view(m, 2, n)  # [M, 2, N]: gate at [:, 0], up at [:, 1]
    for t_m, t_n in hl.tile([m, n]):
        g_f32 = halves[t_m, 0, t_n].to(torch.float32)
        u_f32 = halves[t_m, 1, t_n].to(torch.float32)
        y_f32 = g_f32 * torch.sigmoid(g_f32) * u_f32
        if topk_weights is not None:
            y_f32 = y_f32 * topk_weights[t_m].to(torch.float32)[:, None]
        out[t_m, t_n] = y_f32.to(out.dtype)
    return out


def make(fn, config: helion.Config = CONFIG):
    """A fresh helion kernel object (with its own cache of bound kernels) for ``fn``, fixed to
    ``config`` (no autotuning at run time)."""
    return helion.kernel(config=config, static_shapes=False)(fn)
