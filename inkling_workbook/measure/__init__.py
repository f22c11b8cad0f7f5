"""How every number is measured, and where it came from.

* :mod:`.timing`: the timing method (CUDA-graph replay of a fixed count of calls, interleaved
  passes, warm and cold L2; its docstring is the specification), the ceilings, how every record
  states the method.
* :mod:`.bench`: the silu_and_mul sweep with its baselines, the NVFP4 part and the tile sweep
  (``wb bench``); :mod:`.fp8_sweep`: the FP8 part, over the cases of :mod:`.fp8_cases`.
* :mod:`.decode_baselines`: decode and mid sizes against the sglang config and the launch floor
  (``wb decode``).
* :mod:`.serving_bench`: PDL in a decode chain, host time, compile counts (``wb serving``);
  :mod:`.hostbench`: host time per call.
* :mod:`.provenance`: the device, versions, commit and command of every record.
"""
