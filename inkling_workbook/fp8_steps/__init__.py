"""The package's fused SiLU-and-mul + FP8 per-token-group kernel built step by step (notebook 07):
every step a real kernel, bitwise equal to the package's.

* :mod:`.kernels`: the steps' kernels, their launcher, the sources the notebook shows.
* :mod:`.checks`: every step checked bit for bit against the package, then timed
  (``wb fp8-steps``).
"""
