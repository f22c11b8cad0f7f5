"""The MoE layer of notebook 08 (issue 30): a compact MoE block as a server runs it, the fused
activation between the two expert GEMMs.

* :mod:`.layer`: the layer (routing, grouping, GEMMs, the three activation variants, the combine),
  its float64 reference, error bounds, fused == unfused.
* :mod:`.record`: its GPU benchmark (``wb moe-layer``), writing ``data/moe_layer_<gpu>.json``.
* :mod:`.tables`: the tables and conclusions read back from that record.
"""
