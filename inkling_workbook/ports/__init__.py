"""The workbook's ports of helion kernels to plain Triton, one folder each: the helion
original(s), the port's steps, the portcheck cases and the port's own records.

* :mod:`.silu_and_mul`: the first port (notebooks 02-04); the port itself is the library's
  :func:`inkling_kernels.silu_and_mul`.
* :mod:`.silu_mul_fp8`: the second port, vLLM's helion ``silu_mul_fp8`` (notebook 09); the port
  lives here, in :mod:`.silu_mul_fp8.port`.
* :mod:`.rms_norm_quant`: the third port, vLLM's helion ``rms_norm_dynamic_per_token_quant``
  (notebook 10), a reduction whose order decides the bits.
* :mod:`.common`: what they share (the guard on helion's backend, a step's tally row).
"""
