"""How every number is measured, and where it came from (``wb`` is ``python -m inkling_workbook``).

* :mod:`.timing`: the timing method (CUDA-graph replay of a fixed count of calls, interleaved
  passes, warm and cold L2; its docstring is the specification), the ceilings, how every record
  states the method.
* :mod:`.bench`: the silu_and_mul sweep with its baselines, the NVFP4 part and the tile sweep
  (``wb bench``); :mod:`.fp8_sweep`: the FP8 part, over the cases of :mod:`.fp8_cases`.
* :mod:`.decode_baselines`: decode and mid sizes against the sglang config and the launch floor
  (``wb decode``).
* :mod:`.serving_bench`: PDL in a decode chain, host time, compile counts (``wb serving``);
  :mod:`.hostbench`: host time per call.
* :mod:`.anchors`: the other projects' kernels (sglang's merged port and FP8 kernels, vLLM's FP8
  kernels), fetched by name and version and loaded unmodified (``docs/anchors.md``);
  :mod:`.pairing`: the one rule pairing each baseline with the port (PDL with PDL, no PDL with
  no PDL) and the columns' names; :mod:`.fp8_anchors`: the FP8 anchors' cases and bounds.
* :mod:`.provenance`: the device, versions, commit and command of every record.
"""
