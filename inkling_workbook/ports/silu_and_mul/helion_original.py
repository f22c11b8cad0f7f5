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
import json
from pathlib import Path

import torch

from inkling_kernels import _backend
from inkling_kernels.silu_and_mul import _check_args
from inkling_workbook.ports.common import HelionBackend

INSTALL_HINT = (
    "the helion originals need helion 1.4.0: pip install 'inkling-kernels[helion]' (or pip install helion==1.4.0)"
)
HELION_VERSION = "1.4.0"


def available() -> bool:
    return importlib.util.find_spec("helion") is not None


#: The two configurations the originals run with. ``"fixed"``: one row by 256 columns, 4 warps,
#: the tile this workbook used before the production table was recovered. ``"sm90_table"``: the
#: config the original AOT wrapper picked on sm_90 for the gateup width 2N
#: (``helion_sm90_table.json``; interleaved table, applied to both layouts).
CONFIGS = ("fixed", "sm90_table")
_TABLE_PATH = Path(__file__).with_name("helion_sm90_table.json")


@functools.cache
def sm90_table() -> dict:
    return json.loads(_TABLE_PATH.read_text())


def sm90_config_index(two_n: int, weighted: bool) -> int | None:
    """Index into the table's configs for a gateup width ``2N``, or None where the table has no key."""
    entry = sm90_table()["key_2n"].get(str(two_n))
    if isinstance(entry, dict):
        entry = entry["weights" if weighted else "no_weights"]
    return entry


def config_label(config: str, two_n: int | None = None, weighted: bool = False) -> str:
    """How tables and legends name a configuration, e.g. ``helion sm90 table cfg 3``."""
    if config == "fixed":
        return "helion fixed 1x256/4w"
    idx = None if two_n is None else sm90_config_index(two_n, weighted)
    return "helion sm90 table" + ("" if idx is None else f" cfg {idx}")


def _helion_config(config: str, two_n: int, weighted: bool):
    from inkling_workbook.ports.silu_and_mul import _helion_kernels

    if config == "fixed":
        return _helion_kernels.CONFIG
    if config != "sm90_table":
        raise ValueError(f"config must be one of {CONFIGS}, got {config!r}")
    idx = sm90_config_index(two_n, weighted)
    if idx is None:
        raise ValueError(
            f"the sm_90 table has no config for 2N = {two_n} (keys: {sorted(sm90_table()['key_2n'], key=int)})"
        )
    import helion

    table = sm90_table()
    return helion.Config(**table["configs"][idx], **table["common"])


@functools.cache
def helion_kernel(
    interleaved: bool,
    m_is_one: bool = False,
    n_is_one: bool = False,
    config: str = "fixed",
    two_n: int = 0,
    weighted: bool = False,
):
    """The helion kernel object for one layout, size-1 pattern and config (one compiled-code
    cache each). ``two_n`` and ``weighted`` select the table entry when ``config="sm90_table"``."""
    if not available():
        raise ImportError(INSTALL_HINT)
    from inkling_workbook.ports.silu_and_mul import _helion_kernels

    fn = (
        _helion_kernels.silu_and_mul_helion_interleaved
        if interleaved
        else _helion_kernels.silu_and_mul_helion_non_interleaved
    )
    return _helion_kernels.make(fn, _helion_config(config, two_n, weighted))


_claim_backend = HelionBackend("the helion originals").claim  # one backend a process (see HelionBackend)


def silu_and_mul_helion(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    interleaved: bool = True,
    out: torch.Tensor | None = None,
    config: str = "fixed",
) -> torch.Tensor:
    """The helion original, with the signature and checks of :func:`inkling_kernels.silu_and_mul`.

    ``config``: ``"fixed"`` (1x256 tile, 4 warps) or ``"sm90_table"`` (what production ran on
    sm_90, see :data:`CONFIGS`). ``gateup`` rows must be contiguous (the original kernels take a
    ``view``). In one process the originals run on one backend only, compiled (CUDA) or
    interpreted (CPU); see :class:`inkling_workbook.ports.common.HelionBackend`.
    """
    M, N = _check_args(gateup, topk_weights, out_dtype, out, interleaved)
    if not gateup.is_contiguous():
        raise ValueError("gateup must be contiguous for the helion originals")
    key = (2 * N, topk_weights is not None) if config == "sm90_table" else (0, False)
    kernel = helion_kernel(interleaved, M == 1, N == 1, config, *key)
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
    from inkling_workbook.ports.silu_and_mul._helion_kernels import CONFIG

    return bound.to_triton_code(CONFIG)
