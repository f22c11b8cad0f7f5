"""TEMPORARY shim: the FP8 proof kernels' public names, re-exported from ``inkling_kernels.fp8``.

The library split moves the proofs into this module under the same names; whoever merges that
split replaces this file with the real one (nothing else imports ``inkling_kernels.fp8`` for them).
"""

from inkling_kernels.fp8 import (  # noqa: F401  (re-exports)
    division_mismatches,
    e4m3_paths_mismatches,
    e4m3_signed_encode,
    scale_paths_mismatches,
    sigmoid_paths_mismatches,
)

__all__ = [
    "division_mismatches",
    "e4m3_paths_mismatches",
    "e4m3_signed_encode",
    "scale_paths_mismatches",
    "sigmoid_paths_mismatches",
]
