"""The second port (issue 31, notebook 09): vLLM's helion ``silu_mul_fp8`` in plain Triton.

* :mod:`.helion` (with :mod:`._helion_kernels` and ``helion_h100_table.json``): the original, run
  with vLLM's pre-tuned config; the float64 reference; the formula for ``torch.compile``.
* :mod:`.port`: the port (kernel, launcher, CPU and GPU case matrices).
* :mod:`.steps`: the port step by step, each step checked by portcheck against the original.
* :mod:`.bench`: the GPU records (``wb silu-mul-fp8``): portcheck over the GPU matrix, the steps'
  tallies, the timing sweep against helion and ``torch.compile``.
"""
