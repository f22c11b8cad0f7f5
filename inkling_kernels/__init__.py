"""inkling-kernels: the Inkling MoE activation kernels ported from helion to plain Triton.

Public API (one function per op; kernels are private to their modules):

* :func:`silu_and_mul`: ``silu(gate) * up [* w]`` for interleaved and non-interleaved layouts.
* :func:`nvfp4_quant`: NVFP4 quantization per expert, 128x4-swizzled scales.
* :func:`silu_and_mul_nvfp4_quant`: both in one kernel, bit-identical to the two-kernel path.
* :func:`max_blockscale_rows`: the static bound on swizzled scale rows (CUDA graphs, compile).
* :func:`fp8_group_quant`, :func:`silu_and_mul_fp8_group_quant`: FP8 (e4m3) per-token-group
  quantization with fp32 scales, alone and fused with the activation (bit-identical).

Importing the package registers ``torch.ops.inkling.*`` (:mod:`inkling_kernels.ops`); it
patches nothing in Triton and writes no files.
"""

from . import ops  # noqa: F401  (registers torch.ops.inkling.*)
from ._backend import interpreter_bf16_rounding, set_interpreter_bf16_rounding
from .fp8 import fp8_group_quant, silu_and_mul_fp8_group_quant
from .nvfp4 import default_blockscale_offsets, max_blockscale_rows, nvfp4_quant, silu_and_mul_nvfp4_quant
from .silu_and_mul import LaunchConfig, launch_config, silu_and_mul

__version__ = "0.1.0"

__all__ = [
    "LaunchConfig",
    "launch_config",
    "silu_and_mul",
    "nvfp4_quant",
    "silu_and_mul_nvfp4_quant",
    "fp8_group_quant",
    "silu_and_mul_fp8_group_quant",
    "max_blockscale_rows",
    "default_blockscale_offsets",
    "set_interpreter_bf16_rounding",
    "interpreter_bf16_rounding",
    "__version__",
]
