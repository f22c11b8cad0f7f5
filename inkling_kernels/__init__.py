"""inkling-kernels: the Inkling MoE activation kernels ported from helion to plain Triton."""

from .silu_and_mul import LaunchConfig, launch_config, silu_and_mul

__version__ = "0.1.0"

__all__ = ["LaunchConfig", "launch_config", "silu_and_mul", "__version__"]
