"""inkling-workbook: the tooling of the workbook, kept apart from the library a server imports.
One folder a subject:

* :mod:`.ports`: the two ports, one folder each (:mod:`.ports.silu_and_mul`,
  :mod:`.ports.silu_mul_fp8`): the helion originals, the port steps, the portcheck cases.
* :mod:`.fp8_steps`: the package's fused FP8 kernel built step by step (notebook 07).
* :mod:`.moe`: the MoE layer of notebook 08.
* :mod:`.measure`: the timing method, the baselines, the sweeps, provenance.
* :mod:`.proofs`: the exhaustive FP8, NVFP4 and e2m1 checks, the compile records, FP fusion.
* :mod:`.publish`: the figures and the generated tables, drawn only from ``data/``.
* :mod:`.cli`: ``python -m inkling_workbook {check,bench,figures,results,info,...}``.

Nothing here is imported by :mod:`inkling_kernels`.
"""
