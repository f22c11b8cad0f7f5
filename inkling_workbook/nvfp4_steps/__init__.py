"""The package's fused SiLU-and-mul + NVFP4 kernel built step by step (notebook 05): every step a
real kernel with the package's arguments, bitwise equal to the package's.

* :mod:`.kernels`: the steps' kernels, their launcher, the sources the notebook shows.
* :mod:`.checks`: every step checked bit for bit against the package, compiled for sm_90 here
  (SASS instructions an element), then timed on a GPU (``wb nvfp4-steps``).
"""
