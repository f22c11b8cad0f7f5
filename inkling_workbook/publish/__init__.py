"""What is published from the records in ``data/``, one module a figure family.

* :mod:`.style`: what every figure shares (colours, labels, captions, footers, the PNG/SVG writer).
* :mod:`.speedup` (the silu_and_mul sweep, notebooks 02, 03, 06), :mod:`.nvfp4_figures`
  (notebook 05), :mod:`.fp8_figures` (notebooks 06, 07), :mod:`.moe_figures` (notebook 08),
  :mod:`.ulp_figures` (notebook 01); :mod:`.figures`: every figure of ``figures/``
  (``wb figures``).
* :mod:`.tables`: the per-target and serving tables; :mod:`.results`: the generated blocks of
  ``README.md`` and ``docs/results.md`` (``wb results``).
* :mod:`.show`: package source highlighted in the notebooks.
"""
