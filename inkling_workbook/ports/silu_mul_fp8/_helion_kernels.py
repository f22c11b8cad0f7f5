"""The helion kernel of :mod:`inkling_workbook.ports.silu_mul_fp8.helion` (helion needs it at module
level: no closures). Imported only through that module, which checks that helion is installed.
Loop-local names are distinct from every module global: helion treats module-level names used
in a kernel as host variables.
"""

from __future__ import annotations

import helion
import helion.language as hl
import torch


def silu_mul_fp8_helion_kernel(x: torch.Tensor, scale: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out[m, j] = e4m3(fp32(silu(gate) * up) * (1 / scale))`` with ``gate = x[m, :N]``,
    ``up = x[m, N:]``: silu and the product in ``x``'s dtype (each rounded to it), the scale
    applied as its reciprocal. ``x`` is ``[..., 2N]``, ``out`` ``[rows, N]`` e4m3fn."""
    two_n = hl.specialize(x.shape[-1])  # the width is baked into the generated code
    n_half = two_n // 2
    rows2d = x.view(-1, x.shape[-1])
    n_rows = rows2d.shape[0]
    gate_half = rows2d[:, :n_half]
    up_half = rows2d[:, n_half:]
    for t_m, t_n in hl.tile([n_rows, n_half]):
        g_vals = gate_half[t_m, t_n]
        s_vals = torch.nn.functional.silu(g_vals)  # computed in fp32, rounded to x's dtype
        u_vals = up_half[t_m, t_n]
        p_vals = s_vals * u_vals  # in x's dtype: a second rounding
        p_f32 = p_vals.to(torch.float32)
        sc_val = hl.load(scale, [0])
        inv_sc = 1.0 / sc_val
        out[t_m, t_n] = (p_f32 * inv_sc).to(out.dtype)
    return out


def make(config: helion.Config):
    """A fresh helion kernel object (its own cache of bound kernels), fixed to ``config``: no
    autotuning at run time, as vLLM runs it (its preset-config autotuner returns the table entry)."""
    return helion.kernel(config=config, static_shapes=False)(silu_mul_fp8_helion_kernel)
