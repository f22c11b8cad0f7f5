"""The helion kernel of :mod:`inkling_workbook.ports.rms_norm_quant.helion` (helion needs it at module
level: no closures). Imported only through that module, which checks that helion is installed.
Loop-local names are distinct from every module global: helion treats module-level names used
in a kernel as host variables.
"""

from __future__ import annotations

import helion
import helion.language as hl
import torch

#: e4m3fn's largest finite value and the floor of the scale (vLLM's ``1 / (448 * 512)``)
FP8_MAX = 448.0
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)


def rms_norm_quant_helion_kernel(
    result: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    epsilon: float,
    scale_ub: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
) -> None:
    """RMS norm, then dynamic per-token e4m3 quantization, in three passes over each row (one row
    a program): (1) ``h = fp32(x) [+ residual]``, the sum of ``h * h`` tile by tile; (2)
    ``n = bf16(h * rsqrt(sum * (1 / H) + eps)) * weight`` (a bf16 product), its largest magnitude
    tile by tile; the scale ``max(min(amax, scale_ub) * (1 / 448), 1 / (448 * 512))``; (3) ``n`` again,
    ``result = e4m3(clamp(n / scale, -448, 448))``, ``residual = bf16(h)`` written back."""
    n_rows, hidden = x.shape
    hl.specialize(hidden)  # the width is baked into the generated code
    for t_row in hl.tile(n_rows, block_size=1):
        sq_sum = hl.zeros([t_row], dtype=torch.float32)
        for t_a in hl.tile(hidden):
            h_a = x[t_row, t_a].to(torch.float32)
            if residual is not None:
                h_a = h_a + residual[t_row, t_a]
            sq_sum = sq_sum + h_a.pow(2).sum(dim=-1)
        inv_rms = torch.rsqrt(sq_sum * (1.0 / hidden) + epsilon)
        amax = hl.zeros([t_row], dtype=torch.float32)
        for t_b in hl.tile(hidden):
            h_b = x[t_row, t_b].to(torch.float32)
            if residual is not None:
                h_b = h_b + residual[t_row, t_b]
            n_b = (h_b * inv_rms[:, None]).to(x.dtype) * weight[None, t_b]
            amax = torch.maximum(amax, torch.amax(torch.abs(n_b), dim=-1).to(torch.float32))
        if scale_ub is not None:
            amax = amax.clamp(max=hl.load(scale_ub, []))
        row_scale = (amax * (1.0 / FP8_MAX)).clamp(min=MIN_SCALE)
        scale[t_row, 0] = row_scale
        for t_c in hl.tile(hidden):
            h_c = x[t_row, t_c].to(torch.float32)
            if residual is not None:
                h_c = h_c + residual[t_row, t_c]
                residual[t_row, t_c] = h_c.to(residual.dtype)
            n_c = (h_c * inv_rms[:, None]).to(x.dtype) * weight[None, t_c]
            result[t_row, t_c] = (n_c / row_scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(result.dtype)


def make(config: helion.Config):
    """A fresh helion kernel object (its own cache of bound kernels), fixed to ``config``: no
    autotuning at run time, as vLLM runs it (its config picker hands helion the table entry)."""
    return helion.kernel(config=config, static_shapes=False)(rms_norm_quant_helion_kernel)
