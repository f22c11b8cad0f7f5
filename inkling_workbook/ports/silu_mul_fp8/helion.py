"""The original of the second port: a helion kernel with the semantics of vLLM's helion
``silu_mul_fp8``, run as vLLM runs it (its pre-tuned config for the shape, never autotuned),
with a float64 reference and the formula in torch for ``torch.compile``.

**The facts, from vLLM's public source** (the code here is this workbook's own):

* ``vllm/kernels/helion/ops/silu_mul_fp8.py`` (vllm-project/vllm, commit
  ``deae5aaa49c3ab0bc928b7298b0c35871b31ba2d``; moved unchanged to
  ``vllm/backends/compute/kernels/helion/ops/silu_mul_fp8.py`` at ``f9b1d4440e11``): the input is
  ``[..., 2N]``, the first half is the gate (``input[:, :d]``), the second the up projection;
  ``hl.specialize`` bakes ``2N`` into the kernel; one ``hl.tile`` over (rows, N); per tile
  ``silu(gate)`` with ``torch.nn.functional.silu`` **on the input dtype**, times ``up`` **in the
  input dtype**, then ``.to(float32)``, times ``1.0 / scale`` (the scale a one-element fp32
  tensor read with ``hl.load(scale, [0])``), then ``.to(float8_e4m3fn)``: no clamp in the source.
  vLLM's inputs are bf16.
* What helion 1.4.0 generates from it (:func:`generated_triton`): ``silu`` as
  ``g / (libdevice.exp(-g) + 1)`` in fp32 then ``tl.cast(.., bfloat16)``; the product
  ``bf16 * bf16`` (rounded to bf16 on the GPU); ``1.0 / scale`` as an fp32 division (times a
  literal 1.0); the store ``tl.cast(.., tl.float8e4nv)``, which on sm_89+ is
  ``cvt.rn.satfinite``: nearest even, +-448 for everything beyond it, NaN -> 0x7F.
* The configs: ``vllm/kernels/helion/configs/silu_mul_fp8/nvidia_h100.json`` (commit
  ``5218728006e33957e03cf51d8e83c4467dfd8814``), keyed by (intermediate = N, numtokens = rows);
  the picker (``pick_silu_mul_fp8_config``) takes the intermediate size nearest N, then the
  smallest tuned numtokens >= M (512, the largest, above it). vLLM looks the file up by the GPU's
  name; it ships none for ``nvidia_h200`` (only ``nvidia_h100`` and ``nvidia_b200``), so on an
  H200 vLLM would disable the kernel. The H100 table is the one tuned for this GPU class (sm_90)
  and is what runs here. ``helion_h100_table.json`` holds its entries for the intermediate
  sizes 2048 and 2880 (every N from 1 to 3488 picks one of them) at the numtokens this
  workbook's shapes pick: M in 1..32, 57..64, 121..128, 241..256 and M > 496.

The tiles run with ``indexing``, ``pid_type``, eviction policies and stages as the table says on
CUDA; in the interpreter helion generates pointer loads (no tensor descriptors on a CPU).

Like :mod:`inkling_workbook.ports.silu_and_mul.helion_original`: helion imported lazily, one backend per process
(helion reuses its generated module across devices), on CPU tensors the generated Triton runs in
Triton's interpreter inside :func:`inkling_kernels._backend.interpreting` (which binds
``libdevice.exp``, rounds bf16 arithmetic and converts to e4m3 as the GPU does: see
``inkling_kernels/_backend.py``). One helion kernel object per picked config key, as vLLM's key
function gives each key its own compiled kernel.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

import torch

from inkling_kernels import _backend
from inkling_workbook.ports.common import HelionBackend
from inkling_workbook.ports.silu_mul_fp8.port import OUT_DTYPE, check_args

INSTALL_HINT = "the helion original needs helion 1.4.0: pip install 'inkling-kernels[helion]'"
_TABLE_PATH = Path(__file__).with_name("helion_h100_table.json")
E4M3_MAX = 448.0


def available() -> bool:
    return importlib.util.find_spec("helion") is not None


@functools.cache
def table() -> dict:
    return json.loads(_TABLE_PATH.read_text())


def pick_key(M: int, N: int) -> tuple[int, int]:
    """vLLM's rule: (intermediate size nearest N, smallest tuned numtokens >= M, else the largest)."""
    doc = table()
    best = min(doc["intermediates_in_file"], key=lambda s: abs(s - N))
    tuned = sorted(doc["numtokens_in_file"])
    return best, next((t for t in tuned if t >= M), tuned[-1])


def production_config(M: int, N: int) -> dict:
    """The table entry vLLM picks for ``M`` rows of width ``N`` (the ``helion.Config`` fields)."""
    key = pick_key(M, N)
    for entry in table()["entries"]:
        if (entry["intermediate"], entry["numtokens"]) == key:
            return entry["config"]
    raise ValueError(
        f"vLLM picks intermediate={key[0]}, numtokens={key[1]} for M={M}, N={N}; that entry of "
        f"{table()['source']['path']} is not in {_TABLE_PATH.name} (add it from the source file)"
    )


def config_label(M: int, N: int) -> str:
    """How tables name the config, e.g. ``helion H100 table 2048/t16: 8x512/16w/2st xyz``."""
    key = pick_key(M, N)
    c = production_config(M, N)
    bm, bn = c["block_sizes"]
    return f"helion H100 table {key[0]}/t{key[1]}: {bm}x{bn}/{c['num_warps']}w/{c['num_stages']}st {c['pid_type']}"


@functools.cache
def helion_kernel(key: tuple[int, int]):
    """The helion kernel object for one config key (its own cache of compiled kernels)."""
    if not available():
        raise ImportError(INSTALL_HINT)
    import helion

    from inkling_workbook.ports.silu_mul_fp8 import _helion_kernels as _helion_silu_mul_fp8

    entry = next(e for e in table()["entries"] if (e["intermediate"], e["numtokens"]) == key)
    return _helion_silu_mul_fp8.make(helion.Config(**helion_fields(entry["config"])))


def helion_fields(config: dict) -> dict:
    """The table entry as ``helion.Config`` keywords for helion 1.4.0: the ``range_*`` lists (one
    entry each in vLLM's file, every one its default, 0 or null, or empty) are left out; helion
    1.4.0 refuses them for a kernel whose loop has no inner range ("Too many values for
    config['range_num_stages']"). Any non-default value there would be kept, and refused loudly."""

    def is_default(v):
        return all(x in (0, None) for x in v)

    return {k: v for k, v in config.items() if not (k.startswith("range_") and is_default(v))}


_claim_backend = HelionBackend("the helion original").claim  # one backend a process (see HelionBackend)


def silu_mul_fp8_helion(x: torch.Tensor, scale: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The helion original with :func:`inkling_workbook.ports.silu_mul_fp8.port.silu_mul_fp8`'s
    signature and checks. ``out`` (optional) is the buffer the kernel writes (vLLM's allocates
    its own; taking it lets portcheck poison it)."""
    M, N = check_args(x, scale, out)
    production_config(M, N)  # a key outside the recorded entries raises before any launch
    if out is None:
        out = torch.empty((*x.shape[:-1], N), dtype=OUT_DTYPE, device=x.device)
    if M == 0:
        return out
    kernel = helion_kernel(pick_key(M, N))
    out2d = out.view(-1, N)
    if _backend.uses_interpreter(x.device):
        _claim_backend("interpreted (CPU)")
        with _backend.triton_interpret_env(), _backend.interpreting():
            kernel(x, scale, out2d)
    else:
        _claim_backend("compiled (CUDA)")
        kernel(x, scale, out2d)
    return out


def generated_triton(x: torch.Tensor, scale: torch.Tensor) -> str:
    """The Triton source helion generates for these arguments with their production config."""
    M, N = check_args(x, scale, None)
    key = pick_key(M, N)
    out = torch.empty((M, N), dtype=OUT_DTYPE, device=x.device)
    kernel = helion_kernel(key)
    import helion

    with _backend.triton_interpret_env() if _backend.uses_interpreter(x.device) else _null():
        bound = kernel.bind((x, scale, out))
        return bound.to_triton_code(helion.Config(**helion_fields(production_config(M, N))))


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def reference(x: torch.Tensor, scale: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The exact value: ``silu(gate) * up / scale`` in float64 with no intermediate rounding,
    clamped to +-448 and rounded once to e4m3fn (NaN stays NaN). What the original would give
    without its two bf16 roundings and its fp32 steps; portcheck's ulp histogram measures both
    sides against it."""
    n = x.shape[-1] // 2
    g, u = x[..., :n].double(), x[..., n:].double()
    y = g / (1.0 + torch.exp(-g)) * u / scale.double().reshape(())
    return y.clamp(-E4M3_MAX, E4M3_MAX).to(OUT_DTYPE)


def formula(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The original's formula in torch ops, for ``torch.compile``: silu and the product in x's
    dtype, fp32 times ``1 / scale``, the saturation to +-448 written out (the original gets it
    from the hardware conversion), e4m3fn. Eager torch rounds every intermediate as the original
    does; Inductor may keep them in fp32 (``emulate_precision_casts`` off), so its bits can
    differ: the sweep counts how many."""
    n = x.shape[-1] // 2
    prod = torch.nn.functional.silu(x[..., :n]) * x[..., n:]
    y = prod.float() * (1.0 / scale)
    return y.clamp(-E4M3_MAX, E4M3_MAX).to(OUT_DTYPE)
