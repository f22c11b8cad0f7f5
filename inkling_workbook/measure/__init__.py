"""How every number is measured, and where it came from.

* :mod:`.bench`: the timing method (CUDA-graph replay of a fixed count of calls, interleaved
  passes, warm and cold L2), the ceilings, the baselines and the sweep (``wb bench``);
  :mod:`.fp8_bench`: the FP8 cases of that sweep.
* :mod:`.decode_baselines`: decode and mid sizes against the sglang config and the launch floor
  (``wb decode``).
* :mod:`.serving_bench`: PDL in a decode chain, host time, compile counts (``wb serving``);
  :mod:`.hostbench`: host time per call.
* :mod:`.provenance`: the device, versions, commit and command of every record.
"""
