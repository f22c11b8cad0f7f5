"""The exhaustive checks behind the package's exactness and compile claims, each runnable alone.

* :mod:`.fp8_proofs`: the FP8 kernel's fast paths against the plain ones (GPU, exhaustive).
* :mod:`.nvfp4_proofs`: the NVFP4 kernels' e4m3 scale rounding and e2m1 packing, for the tests.
* :mod:`.nvfp4_bitwise`: the NVFP4 matrix, fused == unfused == reference (``wb check --nvfp4``).
* :mod:`.e2m1_proof`: the software e2m1 rounding against the PTX instruction over all 2^32 fp32
  inputs (``python -m inkling_workbook.proofs.e2m1_proof``).
* :mod:`.blackwell`: every kernel compiled for sm_90a, sm_100a and sm_120a on the CPU
  (``python -m inkling_workbook.proofs.blackwell data``).
* :mod:`.fp_fusion`: the package's bits under ``TRITON_DEFAULT_FP_FUSION=0`` and ``=1``
  (``wb fusion``).
"""
