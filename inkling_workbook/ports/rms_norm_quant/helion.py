"""The original of the third port: a helion kernel with the semantics of vLLM's helion
``rms_norm_dynamic_per_token_quant`` (the e4m3 path), run as vLLM runs it (its pre-tuned config
for the shape, never autotuned), with a float64 reference and the formula in torch for
``torch.compile``.

**The facts, from vLLM's public source** (the code here is this workbook's own):

* ``vllm/backends/compute/kernels/helion/ops/rms_norm_dynamic_per_token_quant.py``
  (vllm-project/vllm, commit ``055e47c28003156421365af985d676fc921cb075``; the old path
  ``vllm/kernels/helion/ops/`` is a shim to it): ``input [num_tokens, hidden]`` (bf16 in
  production), ``weight [hidden]`` of the same dtype, ``result`` e4m3fn (or int8: not ported),
  ``scale [num_tokens, 1]`` fp32, ``epsilon``, optional ``scale_ub`` (a 0-d fp32 tensor) and
  ``residual`` (added in fp32 first, written back rounded). ``hl.specialize(hidden)``; one
  ``hl.tile(num_tokens, block_size=1)`` (a row a program) holding **three loops over
  ``hl.tile(hidden)``**, each with its own tile size: (1) ``rms += (fp32(x) [+ res]).pow(2).sum(-1)``
  tile by tile, then ``rsqrt(rms * (1.0 / hidden) + eps)``; (2) ``n = (h * rms).to(input dtype) *
  weight`` (bf16 times bf16), ``s = maximum(s, amax(abs(n)).to(fp32))``; then ``s.clamp(max=
  scale_ub)``, ``s * (1.0 / 448)``, ``clamp(min=1 / (448 * 512))``, stored to ``scale``; (3) ``n``
  recomputed, ``residual`` written (``bf16(h)``), ``result = (n / s).clamp(-448, 448).to(e4m3)``.
* What helion 1.4.0 generates from it (:func:`generated_triton`): the sum as ``tl.sum`` over a
  ``[1, BLOCK]`` tile added to an fp32 accumulator, tile after tile in order; ``1.0 / hidden`` as
  an fp32 constant; ``libdevice.rsqrt``; ``h * rms`` cast to bf16 and multiplied by the bf16
  weight in bf16; the row maximum ``tl.max`` over the **bf16** tile (masked lanes ``-inf``);
  ``1.0 / 448`` as an fp32 division in the kernel; ``n / s`` an fp32 division; the clamps as
  Inductor's NaN-propagating ``maximum``/``minimum``; the store ``tl.cast(.., tl.float8e4nv)``.
* The configs: ``vllm/kernels/helion/configs/rms_norm_dynamic_per_token_quant/nvidia_h200.json``
  (commit ``319ea8f537f7fea2672144c3b83b4590a02a8cab``): vLLM ships a table for the H200 itself.
  Keyed by (hidden_size, num_tokens); the picker (``pick_config``) takes the hidden size nearest
  H, then the smallest tuned num_tokens >= M (4096, the largest, above it). The **first block
  size is the reduction's tile**: the whole row for every entry of hidden 2048 and 4096 except
  (4096, 4096): 1024, so from 2049 rows at H = 3073..6143 the sum of squares is ceil(H / 1024)
  tile sums added in order (four at H = 4096, five at 5120), and its bits are not those of one
  sum over the row. ``helion_h200_table.json``
  holds the entries for hidden 2048 and 4096.

One backend per process (helion reuses its generated module across devices, as in
:mod:`inkling_workbook.ports.silu_mul_fp8.helion`); on CPU tensors the generated Triton runs in
Triton's interpreter inside :func:`inkling_kernels._backend.interpreting` and this port's
:func:`inkling_workbook.ports.rms_norm_quant.interp.repairs` (``libdevice.rsqrt`` bound).
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from inkling_kernels import _backend
from inkling_workbook.ports.common import HelionBackend
from inkling_workbook.ports.rms_norm_quant import interp
from inkling_workbook.ports.rms_norm_quant.formats import FP8_MAX, MIN_SCALE, OUT_DTYPE
from inkling_workbook.ports.rms_norm_quant.port import check_args, check_config_rows, empty_outputs
from inkling_workbook.ports.rms_norm_quant.table import (  # noqa: F401 (re-exported: the original's config)
    config_label,
    pick_key,
    production_config,
    reduction_tile,
    table,
)

INSTALL_HINT = "the helion original needs helion 1.4.0: pip install 'inkling-kernels[helion]'"
EPS = 1e-6


def available() -> bool:
    return importlib.util.find_spec("helion") is not None


@functools.cache
def helion_kernel(key: tuple[int, int]):
    """The helion kernel object for one config key (its own cache of compiled kernels)."""
    if not available():
        raise ImportError(INSTALL_HINT)
    import helion

    from inkling_workbook.ports.rms_norm_quant import _helion_kernels

    entry = next(e for e in table()["entries"] if (e["hidden_size"], e["num_tokens"]) == key)
    return _helion_kernels.make(helion.Config(**entry["config"]))


_claim_backend = HelionBackend("the helion original").claim  # one backend a process (see HelionBackend)


def rms_norm_quant_helion(x, weight, *, epsilon=EPS, scale_ub=None, residual=None, out=None, config_rows=None):
    """The helion original with :func:`inkling_workbook.ports.rms_norm_quant.port.rms_norm_quant`'s
    signature and checks: returns ``(result, scale)``, and ``residual`` (updated in place) when
    given. ``out`` (optional): the ``(result, scale)`` buffers the kernel writes (vLLM passes its
    own; taking them lets portcheck poison them). ``config_rows``: pick the config vLLM picks for
    that many rows (default: x's); every row is a program of its own, so a few rows with the
    prefill config compute what those rows would in a prefill batch (the CPU's way to afford it)."""
    M, H = check_args(x, weight, epsilon, scale_ub, residual, out)
    key_rows = check_config_rows(config_rows, M)
    production_config(key_rows, H)  # a key outside the recorded entries raises before any launch
    result, scale = out if out is not None else empty_outputs(M, H, x.device)
    if M:
        kernel = helion_kernel(pick_key(key_rows, H))
        args = (result, x, weight, scale, float(epsilon), scale_ub, residual)
        if _backend.uses_interpreter(x.device):
            _claim_backend("interpreted (CPU)")
            with _backend.triton_interpret_env(), _backend.interpreting(), interp.repairs():
                kernel(*args)
        else:
            _claim_backend("compiled (CUDA)")
            kernel(*args)
    return (result, scale) if residual is None else (result, scale, residual)


def generated_triton(x, weight, *, scale_ub=None, residual=None, config_rows=None) -> str:
    """The Triton source helion generates for these arguments with their production config (the
    config picked for ``config_rows`` rows, default x's)."""
    import helion

    M, H = check_args(x, weight, EPS, scale_ub, residual, None)
    rows = check_config_rows(config_rows, M)
    result, scale = empty_outputs(M, H, x.device)
    kernel = helion_kernel(pick_key(rows, H))
    env = _backend.triton_interpret_env() if _backend.uses_interpreter(x.device) else _null()
    with env:
        bound = kernel.bind((result, x, weight, scale, EPS, scale_ub, residual))
        return bound.to_triton_code(helion.Config(**production_config(rows, H)))


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def reference(x, weight, *, epsilon=EPS, scale_ub=None, residual=None, out=None, config_rows=None):
    """The exact values in float64, no intermediate rounding: ``h = x [+ residual]``,
    ``n = h / sqrt(mean(h^2) + eps) * weight``, the scale ``max(min(amax |n|, scale_ub) / 448,
    1 / (448 * 512))`` (returned in fp32), ``result = e4m3(clamp(n / scale, +-448))`` with that
    float64 scale, and ``residual`` ``bf16(h)``. What the original would give without its fp32
    sum, its bf16 roundings and its fp32 scale; portcheck's ulp histogram measures both sides
    against it."""
    h = x.double() if residual is None else x.double() + residual.double()
    n = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + epsilon) * weight.double()
    s = n.abs().amax(dim=-1, keepdim=True)
    if scale_ub is not None:
        s = s.clamp(max=float(scale_ub))
    s = (s / FP8_MAX).clamp(min=MIN_SCALE)
    result = (n / s).clamp(-FP8_MAX, FP8_MAX).to(OUT_DTYPE)
    outs = (result, s.float())
    return outs if residual is None else (*outs, h.to(residual.dtype))


def formula(x, weight, scale_ub=None, residual=None, epsilon: float = EPS):
    """The original's formula in torch ops, for ``torch.compile``: fp32 ``h``, the mean of squares,
    rsqrt, ``h * rms`` rounded to x's dtype times the weight in x's dtype, the scale, ``n / s``
    clamped, e4m3. Eager torch sums the squares in its own order, and Inductor may keep the bf16
    intermediates in fp32: its bits can differ from the original's (the sweep counts how many)."""
    h = x.float() if residual is None else x.float() + residual.float()
    rms = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + epsilon)
    n = (h * rms).to(x.dtype) * weight
    s = n.abs().amax(dim=-1, keepdim=True).float()
    if scale_ub is not None:
        s = s.clamp(max=scale_ub)
    s = (s * (1.0 / FP8_MAX)).clamp(min=MIN_SCALE)
    result = (n.float() / s).clamp(-FP8_MAX, FP8_MAX).to(OUT_DTYPE)
    return (result, s) if residual is None else (result, s, h.to(residual.dtype))
