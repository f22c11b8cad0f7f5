"""inkling-workbook: the tooling of the workbook, kept apart from the library a server imports.

* :mod:`.portcheck_cases`: the silu port's case matrices for ``portcheck`` (the top-level tool, a
  port against its original bit for bit); :mod:`.harness`: the bitwise records built from its
  reports, the NVFP4 matrix.
* :mod:`.helion_original`: the helion kernels the port replaced (needs the ``[helion]`` extra).
* :mod:`.bench`: the timing method, the baselines and the sweeps; :mod:`.plots`: the figures.
* :mod:`.provenance`: where a record came from; records live in the working checkout's ``data/``.
* :mod:`.cli`: ``python -m inkling_workbook {check,bench,figures,info}``.

Nothing here is imported by :mod:`inkling_kernels`.
"""
