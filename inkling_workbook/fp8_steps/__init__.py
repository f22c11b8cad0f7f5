"""The package's fused SiLU-and-mul + FP8 per-token-group kernel built step by step (notebook 07,
``wb fp8-steps``): every step a real kernel, bitwise equal to the package's."""
