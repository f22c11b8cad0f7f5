"""The helion kernels that the Triton port replaces, kept as the other side of the bitwise harness.

Written for helion 1.4.0 (``pip install 'inkling-kernels[helion]'``), in the original operation
order: load gate/up, convert to fp32, ``gate * sigmoid(gate) * up``, the optional per-row weight
multiplied last, one cast at the store. They run with one fixed config each (no autotuning at
run time), so a run is reproducible and takes no tuning time.

On CUDA tensors helion generates Triton and compiles it. On CPU tensors helion generates the same
Triton and the Triton interpreter runs it (``TRITON_INTERPRET=1`` is set while helion generates
code), so the CPU harness compares two real kernel executions, not a kernel with torch.

This module imports helion lazily: ``import inkling_kernels`` works without it, and
:func:`available` says whether these kernels can run.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from . import _backend
from .silu_and_mul import _check_args

INSTALL_HINT = "the helion originals need helion 1.4.0: pip install 'inkling-kernels[helion]' (or pip install helion==1.4.0)"
HELION_VERSION = "1.4.0"


def available() -> bool:
    return importlib.util.find_spec("helion") is not None


def helion_version() -> str | None:
    if not available():
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("helion")
    except PackageNotFoundError:
        return "unknown (no package metadata)"


@functools.cache
def _kernels():
    if not available():
        raise ImportError(INSTALL_HINT)
    from . import _helion_kernels

    return _helion_kernels.silu_and_mul_helion_interleaved, _helion_kernels.silu_and_mul_helion_non_interleaved


def helion_kernel(interleaved: bool):
    """The helion kernel object for one layout (to inspect its generated code)."""
    interleaved_k, non_interleaved_k = _kernels()
    return interleaved_k if interleaved else non_interleaved_k


def silu_and_mul_helion(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    interleaved: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The helion original, with the signature and checks of :func:`inkling_kernels.silu_and_mul`.

    ``gateup`` rows must be contiguous (the original kernels take a ``view``).
    """
    M, N = _check_args(gateup, topk_weights, out_dtype, out, interleaved)
    if not gateup.is_contiguous():
        raise ValueError("gateup must be contiguous for the helion originals")
    kernel = helion_kernel(interleaved)
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or gateup.dtype, device=gateup.device)
    if M == 0:
        return out
    if _backend.uses_interpreter(gateup.device):
        with _backend.triton_interpret_env(), _backend.interpreting():
            kernel(gateup, out, topk_weights)
    else:
        kernel(gateup, out, topk_weights)
    return out


def generated_triton(gateup: torch.Tensor, topk_weights: torch.Tensor | None = None, *, interleaved: bool = True) -> str:
    """The Triton source helion generates for these arguments (shown in notebook 04)."""
    M, N = gateup.shape[0], gateup.shape[1] // 2
    out = torch.empty((M, N), dtype=gateup.dtype, device=gateup.device)
    kernel = helion_kernel(interleaved)
    bound = kernel.bind((gateup, out, topk_weights))
    from ._helion_kernels import CONFIG

    return bound.to_triton_code(CONFIG)
