"""The third port (issue 42, notebook 10): vLLM's helion ``rms_norm_dynamic_per_token_quant`` in
plain Triton, a row reduction whose order decides the bits.

* :mod:`.helion` (with :mod:`._helion_kernels`): the original, run with vLLM's pre-tuned H200
  config; the float64 reference; the formula for ``torch.compile``.
* :mod:`.table` (with ``helion_h200_table.json``): vLLM's H200 config table as data, its picker;
  :mod:`.formats`: the e4m3 constants.
* :mod:`.interp`: the interpreter repair this kernel needs (``libdevice.rsqrt``).
* :mod:`.port`: the port (kernel, launcher, CPU and GPU case matrices).
* :mod:`.steps`: the port step by step, each step checked by portcheck against the original.
* :mod:`.sum_order`: rows on which the order of the sum of squares shows in the outputs on a CPU.
* :mod:`.layouts`: the tree ``tl.sum`` reduces in on the GPU, read from the sm_90 compile on a CPU.
* :mod:`.bench`: the GPU records (``wb rms-norm-quant``).
"""
