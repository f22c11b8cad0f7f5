import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
gpu_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (runs compiled kernels on the H200 job)")


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture
def gen():
    """A fresh seeded generator per test: fresh random data, reproducible failures."""
    return torch.Generator().manual_seed(1234)


def randn(shape, dtype, gen, device, scale=1.0):
    return (torch.randn(shape, generator=gen) * scale).to(dtype).to(device)


def poisoned(shape, dtype, device):
    """An output buffer full of NaN (or 0xFF bytes): any element a kernel leaves unwritten shows."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.full(shape, 0xFF, dtype=dtype, device=device)
