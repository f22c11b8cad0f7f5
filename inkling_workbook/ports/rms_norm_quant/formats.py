"""The e4m3 output format of the port and its original (vLLM's ``get_fp8_min_max`` for e4m3fn on
CUDA: +-448; the floor of a row's scale, ``1 / (448 * 512)``)."""

import torch

OUT_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)  # vLLM's floor of the scale (a Python double, an fp32 argument)
