"""The helion kernels that the Triton port replaces, kept as the other side of the bitwise harness.

Written for helion 1.4.0 (``pip install 'inkling-kernels[helion]'``), in the original operation
order: load gate/up, convert to fp32, ``gate * sigmoid(gate) * up``, the optional per-row weight
multiplied last, one cast at the store. They run with one fixed config each (no autotuning at
run time), so a run is reproducible and takes no tuning time.

Kernel keys. helion 1.4.0 with ``static_shapes=False`` buckets each dimension as 0, 1 or "2 or
more" when it looks up a compiled kernel, yet bakes a dimension of size 1 into the code it
compiles; the bucket key keeps size 1 and size 2+ apart only on some paths. Seen here: the kernel
compiled for a call with M == 1 was reused for a later call with M == 4 and wrote row 0 only,
leaving rows 1..3 as they were (uninitialized memory in production: the small-batch NaNs the
source document reports). The original AOT wrapper compiled one variant per key (width, dtype,
size-1 pattern, int64); this dispatcher does the same by keeping one helion kernel object per
(layout, M == 1, N == 1). ``tests/test_helion_original.py`` shows both the hazard and the fix.

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

from inkling_kernels import _backend
from inkling_kernels.silu_and_mul import _check_args

INSTALL_HINT = (
    "the helion originals need helion 1.4.0: pip install 'inkling-kernels[helion]' (or pip install helion==1.4.0)"
)
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
def helion_kernel(interleaved: bool, m_is_one: bool = False, n_is_one: bool = False):
    """The helion kernel object for one layout and size-1 pattern (one compiled-code cache each)."""
    if not available():
        raise ImportError(INSTALL_HINT)
    from . import _helion_kernels

    fn = (
        _helion_kernels.silu_and_mul_helion_interleaved
        if interleaved
        else _helion_kernels.silu_and_mul_helion_non_interleaved
    )
    return _helion_kernels.make(fn)


_backend_in_use: list[str] = []


def _claim_backend(kind: str) -> None:
    """helion caches the Triton module it generates by its source text, and the source is the same
    for CUDA and CPU tensors: a process that ran the originals compiled would hand a CPU tensor
    to the compiled kernel (and the reverse). So one process uses one backend for them."""
    if not _backend_in_use:
        _backend_in_use.append(kind)
    elif _backend_in_use[0] != kind:
        raise RuntimeError(
            f"the helion originals already ran {_backend_in_use[0]} in this process; helion reuses its generated "
            f"module across devices, so they cannot also run {kind} here: use a separate process"
        )


def silu_and_mul_helion(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    interleaved: bool = True,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The helion original, with the signature and checks of :func:`inkling_kernels.silu_and_mul`.

    ``gateup`` rows must be contiguous (the original kernels take a ``view``). In one process
    the originals run on one backend only, compiled (CUDA) or interpreted (CPU); see
    :func:`_claim_backend`.
    """
    M, N = _check_args(gateup, topk_weights, out_dtype, out, interleaved)
    if not gateup.is_contiguous():
        raise ValueError("gateup must be contiguous for the helion originals")
    kernel = helion_kernel(interleaved, M == 1, N == 1)
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or gateup.dtype, device=gateup.device)
    if M == 0:
        return out
    if _backend.uses_interpreter(gateup.device):
        _claim_backend("interpreted (CPU)")
        with _backend.triton_interpret_env(), _backend.interpreting():
            kernel(gateup, out, topk_weights)
    else:
        _claim_backend("compiled (CUDA)")
        kernel(gateup, out, topk_weights)
    return out


def generated_triton(
    gateup: torch.Tensor, topk_weights: torch.Tensor | None = None, *, interleaved: bool = True
) -> str:
    """The Triton source helion generates for these arguments (shown in notebook 04)."""
    M, N = gateup.shape[0], gateup.shape[1] // 2
    out = torch.empty((M, N), dtype=gateup.dtype, device=gateup.device)
    kernel = helion_kernel(interleaved, M == 1, N == 1)
    bound = kernel.bind((gateup, out, topk_weights))
    from ._helion_kernels import CONFIG

    return bound.to_triton_code(CONFIG)
