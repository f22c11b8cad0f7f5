"""The MoE layer of notebook 08 (issue 30): a compact MoE block as a server runs it, the fused
activation between the two expert GEMMs, its GPU record (``wb moe-layer``) and its tables."""
