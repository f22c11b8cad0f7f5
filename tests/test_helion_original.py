"""The helion originals: the size-1 kernel-reuse hazard of helion 1.4.0 and the dispatcher's fix."""

import pytest
import torch
from conftest import DEVICE, HAS_CUDA, randn

from inkling_kernels import silu_and_mul
from inkling_kernels.reference import bits_equal
from inkling_workbook.ports.silu_and_mul import helion_original

pytestmark = pytest.mark.skipif(not helion_original.available(), reason=helion_original.INSTALL_HINT)


def _run_raw(kernel, x, n):
    out = torch.full((x.shape[0], n), float("nan"), dtype=x.dtype, device=x.device)
    from inkling_kernels import _backend

    if _backend.uses_interpreter(x.device):
        with _backend.triton_interpret_env(), _backend.interpreting():
            kernel(x, out, None)
    else:
        kernel(x, out, None)
    return out


def test_one_raw_helion_kernel_reuses_the_m1_code(gen):
    """One helion kernel object, called with M == 1 then M == 4: rows 1..3 are never written."""
    from inkling_workbook.ports.silu_and_mul import _helion_kernels

    raw = _helion_kernels.make(_helion_kernels.silu_and_mul_helion_interleaved)
    _run_raw(raw, randn((1, 512), torch.bfloat16, gen, DEVICE), 256)
    out = _run_raw(raw, randn((4, 512), torch.bfloat16, gen, DEVICE), 256)
    unwritten = torch.isnan(out).all(dim=1).tolist()
    assert unwritten == [False, True, True, True]


@pytest.mark.parametrize("interleaved", [True, False])
def test_dispatcher_keys_size_one_and_matches_port(interleaved, gen, device):
    for M in (1, 4, 1, 2, 16):
        x = randn((M, 2 * 384), torch.bfloat16, gen, device)
        w = torch.rand(M, generator=gen).to(device)
        out = torch.full((M, 384), float("nan"), dtype=torch.bfloat16, device=device)
        h = helion_original.silu_and_mul_helion(x, w, interleaved=interleaved, out=out)
        assert not torch.isnan(h).any()
        assert bits_equal(h, silu_and_mul(x, w, interleaved=interleaved))


def test_generated_code_is_triton(device):
    code = helion_original.generated_triton(torch.randn(4, 512).to(torch.bfloat16).to(device), interleaved=True)
    assert "@triton.jit" in code and "tl.sigmoid" in code


def test_rejects_strided_rows():
    x = torch.randn(4, 600).to(torch.bfloat16).to(DEVICE)[:, :512]
    with pytest.raises(ValueError, match="contiguous"):
        helion_original.silu_and_mul_helion(x)


@pytest.mark.skipif(
    HAS_CUDA, reason="helion runs one backend per process, compiled on a GPU machine; this checks the interpreted one"
)
def test_interpreted_helion_leaves_triton_language_as_found(gen):
    """helion's generated code, interpreted, patched ``triton.language.core`` for good (Triton's
    interpreter does not restore what device-function calls patch), and compiled kernels then
    failed to build in the same process; found by the H200 test run. See
    ``test_harness_cli.test_interpreted_runs_leave_triton_language_as_found``."""
    from inkling_kernels import _backend

    before = _backend._snapshot()
    x = randn((2, 2 * 64), torch.bfloat16, gen, "cpu")
    helion_original.silu_and_mul_helion(x, None, interleaved=True)
    assert _backend._changed_since(before) == []
