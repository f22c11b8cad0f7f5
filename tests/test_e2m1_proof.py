"""The NVFP4 kernel's software e2m1 rounding equals ``cvt.rn.satfinite.e2m1x2.f32`` (Blackwell's
hardware conversion) as the PTX ISA defines it: the exhaustive proof's record, the same proof on a
small domain every run, its numpy port against the Triton helper itself, and the nibble order."""

import inspect
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import HAS_CUDA, gpu_only

from inkling_kernels import _backend, _nvfp4_kernel, nvfp4
from inkling_workbook.proofs import e2m1_proof
from inkling_workbook.proofs.nvfp4_proofs import e2m1_pack

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def domain():
    d = e2m1_proof.domain_small()
    return d[: d.size // 2 * 2]


def test_software_equals_ptx_definition_on_the_ci_domain(domain):
    r = e2m1_proof.compare(domain)
    assert r["mismatches"] == 0, r["examples"]
    assert r["inputs"] > 300_000 and r["nan_inputs"] > 1000


def test_domain_holds_every_tie_and_boundary(domain):
    values = set(domain.view(np.float32)[np.isfinite(domain.view(np.float32))].tolist())
    grid = e2m1_proof.E2M1_VALUES
    for t in [*((grid[1:] + grid[:-1]) / 2), *grid, 7.0, 8.0]:
        for s in (1.0, -1.0):
            v = np.float32(s * t)
            up, down = np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))
            assert {float(v), float(up), float(down)} <= values


def test_ptx_model_rounds_ties_to_even_saturates_and_keeps_the_sign():
    x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.5, 7.0, 1e30, np.inf, -0.0, -0.2, -5.0, -np.inf, np.nan])
    codes = e2m1_proof.ptx_codes(x.astype(np.float32).view(np.uint32))
    assert codes.tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 7, 7, 7, 8, 8, 14, 15, e2m1_proof.PTX_NAN_CODE]


def test_a_wrong_rounding_is_caught(domain):
    """The comparison can fail: ties away from zero differ from the instruction on the domain."""
    bits = domain.astype(np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaN payloads widened
        a = np.abs(bits.view(np.float32).astype(np.float64))
    ok = np.isfinite(a) & (a < 6.0)
    grid = e2m1_proof.E2M1_VALUES
    away = np.searchsorted((grid[1:] + grid[:-1]) / 2, a[ok], side="right")  # ties go up
    assert (away != e2m1_proof.ptx_codes(bits[ok]) & 7).sum() == 8  # 0.25, 1.25, 2.5, 5 and their negatives


def test_numpy_port_equals_the_triton_helper(domain):
    """:func:`e2m1_proof.software_codes` is ``_e2m1_code`` (the helper run by the interpreter,
    NaN codes included), so the exhaustive proof is about the kernel's own rounding."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow warnings inside the interpreter
        got = e2m1_pack(torch.from_numpy(domain.view(np.float32).copy())).numpy()
    codes = e2m1_proof.software_codes(domain)
    assert np.array_equal(got, e2m1_proof.software_pack(codes[0::2], codes[1::2]))


def test_nibble_order_of_the_hardware_pair():
    """PTX packs operand ``a`` into the upper nibble: the kernel passes the odd element as ``a``
    (``$2``) and the even one as ``b`` (``$1``), so element 2i lands in the low nibble as in software."""
    src = inspect.getsource(_nvfp4_kernel._e2m1x2_hw.fn)
    assert "cvt.rn.satfinite.e2m1x2.f32 t, $2, $1;" in src and "[even, odd]" in src
    even, odd = np.meshgrid(np.arange(16), np.arange(16))
    assert np.array_equal(e2m1_proof.ptx_pack(odd, even), e2m1_proof.software_pack(even, odd))
    assert e2m1_proof.software_pack(np.array([1]), np.array([2])).tolist() == [0x21]


def test_hw_switch_by_capability():
    """The hardware conversion on compute capability 10.x-12.x only; the interpreter and sm_90 (the
    H200) take the software path."""
    assert nvfp4.HW_E2M1_MAJORS == (10, 11, 12)
    index = 126
    try:
        for cap, want in (((9, 0), False), ((8, 9), False), ((10, 0), True), ((10, 3), True), ((12, 0), True)):
            _backend._CAPABILITY[index] = cap
            assert nvfp4._hw_e2m1(torch.device("cuda", index)) is want
    finally:
        _backend._CAPABILITY.pop(index, None)
    with pytest.raises(ValueError, match="hw=True"):
        e2m1_pack(torch.zeros(4), hw=True)
    with pytest.raises(TypeError, match="hw must be a bool"):
        e2m1_pack(torch.zeros(4), hw=1)
    with pytest.raises(ValueError, match="even number"):
        e2m1_pack(torch.zeros(3))


def test_exhaustive_record():
    rec = json.loads((ROOT / "data/e2m1_proof_cpu.json").read_text())
    ex = rec["exhaustive"]
    assert rec["ok"] is True and ex["inputs"] == 2**32 and ex["mismatches"] == 0
    assert ex["nan_inputs"] == 2 * (2**23 - 1)  # every NaN pattern, both signs
    assert rec["provenance"]["git_commit"] and rec["provenance"]["triton"]


@gpu_only
def test_gpu_hardware_conversion_equals_software():
    """On compute capability 10.x-12.x: the instruction's bytes equal the software rounding's on
    the CI domain plus 2**24 random fp32 patterns, NaN inputs aside (the kernel zeroes them)."""
    dev = torch.device("cuda")
    if not nvfp4._hw_e2m1(dev):
        assert HAS_CUDA and _backend.capability(_backend.cuda_index(dev))[0] < 10
        pytest.skip("no hardware e2m1 conversion on this GPU (the software path is what runs)")
    rng = np.random.default_rng(1)
    bits = np.concatenate([e2m1_proof.domain_small(), rng.integers(0, 1 << 32, 1 << 24, dtype=np.uint32)])
    bits = bits[((bits & 0x7FFFFFFF) <= 0x7F800000)]
    bits = bits[: bits.size // 2 * 2]
    x = torch.from_numpy(bits.view(np.float32).copy()).to(dev)
    hw, sw = e2m1_pack(x, hw=True).cpu().numpy(), e2m1_pack(x).cpu().numpy()
    assert np.array_equal(hw, sw)
    codes = e2m1_proof.ptx_codes(bits)
    assert np.array_equal(hw, e2m1_proof.ptx_pack(codes[1::2], codes[0::2]))
