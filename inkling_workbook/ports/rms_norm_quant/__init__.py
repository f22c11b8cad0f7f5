"""The third port (issue 42, notebook 10): vLLM's helion ``rms_norm_dynamic_per_token_quant`` in
plain Triton, a row reduction whose order decides the bits.

* :mod:`.helion` (with :mod:`._helion_kernels` and ``helion_h200_table.json``): the original, run
  with vLLM's pre-tuned H200 config; the float64 reference; the formula for ``torch.compile``.
* :mod:`.interp`: the interpreter repair this kernel needs (``libdevice.rsqrt``).
* :mod:`.port`: the port (kernel, launcher, CPU and GPU case matrices).
* :mod:`.steps`: the port step by step, each step checked by portcheck against the original.
* :mod:`.bench`: the GPU records (``wb rms-norm-quant``).
"""
