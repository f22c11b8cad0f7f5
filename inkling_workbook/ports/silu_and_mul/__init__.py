"""The first port: helion's ``silu_and_mul`` to :func:`inkling_kernels.silu_and_mul` (notebooks 02-04).

* :mod:`.helion_original` (with :mod:`._helion_kernels` and ``helion_sm90_table.json``): the helion
  kernels the port replaced (needs the ``[helion]`` extra).
* :mod:`.port_steps`: the port step by step, each step a real kernel (notebook 02).
* :mod:`.portcheck_cases`: this port's case matrices for ``portcheck``; :mod:`.harness`: the
  bitwise records built from its reports (``wb check``).
"""
