"""What is published from the records in ``data/``: the figures (``wb figures``), the generated
tables of ``README.md`` and ``docs/results.md`` (:mod:`.results`, ``wb results``), and
:mod:`.show`, package source highlighted in the notebooks."""
