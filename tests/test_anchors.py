"""The real anchors (sglang 0.5.23, vllm 0.34.0; :mod:`inkling_workbook.measure.anchors`) against our kernels.

On the CPU every kernel runs in Triton's interpreter with the GPU-faithful repairs (ours through
``inkling_kernels._backend``, the anchors through ``portcheck.interpret.cpu_mode``; the two
copies of the repairs are held equal by ``test_portcheck_cpu``). Bits are compared raw
(``.view(int)``). Where an anchor computes another formula than ours, the test states that
formula in torch and asserts the anchor's bits equal it, then asserts how far it is from ours:
a characterization, never a tolerance passed off as equality.

The anchors are fetched by ``make test`` (``make anchors``); run alone, the session fixture
fetches them (a few seconds); only without network and without a fetched copy do these skip.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from conftest import HAS_CUDA, gpu_only

import inkling_kernels as ik
from inkling_kernels import reference as R
from inkling_workbook.measure import anchors as A

E4M3 = torch.float8_e4m3fn
DEV = torch.device("cuda" if HAS_CUDA else "cpu")


@pytest.fixture(scope="session")
def fetched():
    """The pinned anchors, each fetched if absent: ``{dist: manifest, or the reason it is missing}``."""
    out = {}
    for dist in A.ANCHORS:
        if not A.is_fetched(dist):
            try:
                A.fetch([dist])
            except Exception as e:  # no network, no index: nothing to compare against
                out[dist] = f"anchor {dist}=={A.ANCHORS[dist]['version']} not fetched and fetching failed: {e}"
                continue
        out[dist] = A.manifest(dist)
    return out


def _need(fetched, *dists):
    for d in dists:
        if isinstance(fetched[d], str):
            pytest.skip(fetched[d])


@pytest.fixture
def sglang_anchor(fetched):
    _need(fetched, "sglang")


@pytest.fixture
def vllm_anchor(fetched):
    _need(fetched, "vllm")


@pytest.fixture
def both_anchors(fetched):
    _need(fetched, "sglang", "vllm")
    return fetched


def _rand(shape, dtype, gen, scale=2.0):
    return (torch.randn(shape, generator=gen) * scale).to(dtype).to(DEV)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]).cpu()


# ---- fetching and loading ----------------------------------------------------------------------


def test_manifest_matches_pins(both_anchors):
    for dist, m in both_anchors.items():
        pin = A.ANCHORS[dist]
        assert (m["version"], m["wheel"], m["wheel_sha256"]) == (pin["version"], pin["wheel"], pin["sha256"])
        assert sorted(m["files"]) == sorted(pin["members"])


def test_fetch_is_idempotent_and_detects_changes(both_anchors, tmp_path):
    """A fetched folder whose manifest matches is left alone; a changed file voids the manifest."""
    import shutil

    src = A.dist_dir("sglang")
    shutil.copytree(src, A.dist_dir("sglang", tmp_path))
    assert A.is_fetched("sglang", tmp_path)
    before = (A.dist_dir("sglang", tmp_path) / A.MANIFEST).stat().st_mtime_ns
    A.fetch(["sglang"], tmp_path)  # no download: the copy matches
    assert (A.dist_dir("sglang", tmp_path) / A.MANIFEST).stat().st_mtime_ns == before
    f = A.dist_dir("sglang", tmp_path) / A.ANCHORS["sglang"]["members"][0]
    f.write_text(f.read_text() + "\n# edited\n")
    assert not A.is_fetched("sglang", tmp_path)


def test_loading_leaves_sys_modules_clean(both_anchors, monkeypatch):
    """The stand-ins live in ``sys.modules`` during the import only; a module that was there
    before (a real sglang, here a marker) is put back."""
    import sys
    import types

    marker = types.ModuleType("sglang")
    monkeypatch.setitem(sys.modules, "sglang", marker)
    before = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("sglang", "vllm")}
    loads = (A.load_sglang_inkling_moe, A.load_sglang_fp8_kernel, A.load_sglang_ep_moe, A.load_vllm_fp8_utils,
             A.load_vllm_batched_deep_gemm)  # fmt: skip
    for load in loads:
        load.__wrapped__()  # uncached: really import
    after = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("sglang", "vllm")}
    assert after == before and sys.modules["sglang"] is marker


def test_every_anchor_is_labelled_with_its_version():
    for a in A.anchors():
        dist = a.key.split("_")[0]
        assert a.label.startswith(f"{dist} {A.ANCHORS[dist]['version']} ")


# ---- silu_and_mul: sglang's merged port is ours, bit for bit ---------------------------------

SILU_M = (1, 3, 16, 130)
SILU_N = (64, 768, 1536)


SILU_CASES = [(N, w) for N in SILU_N for w in (None, "fp32", "same") if not (w == "same" and N == 1536)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("interleaved", [True, False], ids=["inter", "gate_up"])
@pytest.mark.parametrize("N,weights", SILU_CASES)
def test_sglang_silu_and_mul_bitwise(sglang_anchor, N, weights, interleaved, dtype):
    """sglang 0.5.23 ``silu_and_mul`` (GB300 heuristic, no PDL) == ``inkling_kernels.silu_and_mul``
    on raw bits, for every M of ``SILU_M`` (fresh random data each). Weights in fp32, or in the
    activation dtype ("same"; not at N = 1536). M = 130 (our mid-size launch configuration; rows
    cost the interpreter most) with fp32 weights only."""
    gen = torch.Generator().manual_seed(zlib.crc32(repr((N, interleaved, weights, dtype)).encode()))
    for M in SILU_M if weights == "fp32" else SILU_M[:-1]:
        x = _rand((M, 2 * N), dtype, gen)
        w = None
        if weights is not None:
            w = torch.rand(M, generator=gen).to(torch.float32 if weights == "fp32" else dtype).to(DEV)
        theirs = A.sglang_silu_and_mul(x, w, interleaved=interleaved)
        ours = ik.silu_and_mul(x, w, interleaved=interleaved)
        assert theirs.dtype == ours.dtype == dtype and theirs.shape == ours.shape == (M, N)
        assert torch.equal(_bits(theirs), _bits(ours)), f"M={M}: {(_bits(theirs) != _bits(ours)).sum()} differ"


@gpu_only
@pytest.mark.parametrize("M", [1, 16, 130, 4097])
@pytest.mark.parametrize("N", [768, 1536, 2880])
def test_sglang_silu_and_mul_triton_bitwise_gpu(sglang_anchor, M, N):
    """sglang 0.5.23 ``silu_and_mul_triton`` (persistent grid, PDL on sm_90+; CUDA only) computes
    ``(g * sigmoid(g)) * u [* w]`` in fp32 with one rounding at the store, our operation order:
    expected bitwise equal to ours (with and without our PDL)."""
    gen = torch.Generator().manual_seed(M * 7919 + N)
    x = _rand((M, 2 * N), torch.bfloat16, gen)
    w = torch.rand(M, generator=gen).to(DEV)
    theirs = A.sglang_silu_and_mul_triton(x, w)
    for pdl in (False, True):
        assert torch.equal(_bits(theirs), _bits(ik.silu_and_mul(x, w, enable_pdl=pdl)))
    assert torch.equal(_bits(A.sglang_silu_and_mul(x, w)), _bits(ik.silu_and_mul(x, w)))


# ---- FP8: which formula each anchor computes, and how far that is from ours ------------------


def _recip_quant(y: torch.Tensor, s: torch.Tensor, group: int) -> torch.Tensor:
    """e4m3(clamp(y * fl(1/s), -448, 448)): quantizing by the product with the fp32 reciprocal."""
    yg = y.float().reshape(*y.shape[:-1], -1, group)
    t = (yg * (1.0 / s)[..., None]).clamp(-448.0, 448.0)
    return t.to(E4M3).reshape(y.shape)


def _div_quant(y: torch.Tensor, s: torch.Tensor, group: int) -> torch.Tensor:
    """e4m3(clamp(y / s, -448, 448)): quantizing by the IEEE quotient (ours)."""
    yg = y.float().reshape(*y.shape[:-1], -1, group)
    return (yg / s[..., None]).clamp(-448.0, 448.0).to(E4M3).reshape(y.shape)


def _amax(y: torch.Tensor, group: int) -> torch.Tensor:
    return y.float().reshape(*y.shape[:-1], -1, group).abs().amax(-1).clamp(min=R.FP8_EPS)


def _code_steps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many e4m3 codes apart (same sign assumed away: signed magnitude order)."""

    def order(q):
        v = q.contiguous().view(torch.uint8).cpu().to(torch.int32)
        mag = v & 0x7F
        return torch.where(v >= 0x80, -mag, mag)

    return (order(a) - order(b)).abs()


FP8_SHAPES = [(1, 128), (16, 512), (130, 256)]


def _cpu_only_formula():
    """The formula statements below are what the interpreter computes: IEEE fp32 ``/`` and numpy's
    ``exp``. Compiled on the GPU, Triton's ``/`` is ``div.full.f32`` (approximate) and ``exp``
    is ``ex2.approx``: the GPU tests check bounds against ours instead."""
    if HAS_CUDA:
        pytest.skip("formula statements hold for the interpreter (IEEE '/', numpy exp); GPU: see *_gpu tests")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", FP8_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_sglang_fp8_group_quant_formula(sglang_anchor, shape, dtype):
    """sglang 0.5.23 ``_per_token_group_quant_8bit_raw`` (Triton), group 128, fp32 scales:

    * scales: ``max(amax, 1e-10) / 448``, bit-identical to ours in both layouts;
    * column-major scales (kernel ``_per_token_group_quant_8bit_colmajor``): ``q = e4m3(clamp(y / s))``,
      bit-identical to ours;
    * row-major scales (kernel ``_per_token_group_quant_8bit``): ``q = e4m3(clamp(y * fl(1/s)))``, the
      product with the fp32 reciprocal: bit-identical to that statement, and each code differing
      from ours is one e4m3 step away (a fraction of about 1e-3 of the codes; their
      dequantized values differ by one e4m3 step times s).
    * ``scale_ue8m0`` is not available on this Triton path (row-major asserts it off, column-major
      needs ``deep_gemm`` to pack): not compared.
    """
    _cpu_only_formula()
    gen = torch.Generator().manual_seed(shape[0] * 31 + shape[1])
    x = _rand(shape, dtype, gen, scale=3.0)
    q_ours, s_ours = ik.fp8_group_quant(x, 128)
    q_row, s_row = A.sglang_fp8_group_quant(x, 128)
    q_col, s_col = A.sglang_fp8_group_quant(x, 128, column_major_scales=True)
    assert s_col.stride() == (1, shape[0])
    assert torch.equal(_bits(s_row), _bits(s_ours)) and torch.equal(_bits(s_col), _bits(s_ours))
    assert torch.equal(_bits(q_col), _bits(q_ours))
    assert torch.equal(_bits(q_row), _bits(_recip_quant(x, s_ours, 128)))
    steps = _code_steps(q_row, q_ours)
    assert int(steps.max()) <= 1
    assert float((steps > 0).float().mean()) < 5e-3


@pytest.mark.parametrize("ue8m0", [False, True], ids=["fp32", "ue8m0"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("shape", FP8_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_vllm_fp8_group_quant_formula(vllm_anchor, shape, dtype, ue8m0):
    """vllm 0.34.0 ``per_token_group_quant_fp8``, its Triton path (kernels
    ``_per_token_group_quant_fp8`` / ``_colmajor``), group 128:

    * scale ``s' = max(amax, 1e-10) * fl(1/448)`` (the product with the fp32 reciprocal of 448, a
      deliberate choice in vllm's source), not ours ``amax / 448``: the two differ by at most
      one fp32 ulp (0 or 1 ulp, in a large share of the groups);
    * ``q = e4m3(clamp(y / s'))`` (IEEE quotient): bit-identical to that statement; codes differing
      from ours are one e4m3 step away;
    * with ``scale_ue8m0`` (``s = 2 ** ceil(log2(s'))``), bit-identical to ours on these data (the
      power of two absorbs the ulp, except where ``amax / 448`` is itself a power of two, which
      random data do not hit).
    """
    _cpu_only_formula()
    gen = torch.Generator().manual_seed(shape[0] * 37 + shape[1] + ue8m0)
    x = _rand(shape, dtype, gen, scale=3.0)
    q_ours, s_ours = ik.fp8_group_quant(x, 128, scale_ue8m0=ue8m0)
    s_stated = _amax(x, 128) * torch.tensor(1.0 / 448.0, dtype=torch.float32)
    if ue8m0:
        s_stated = R.ue8m0_ceil_ref(s_stated)
    for cm in (False, True):
        q, s = A.vllm_fp8_group_quant(x, 128, scale_ue8m0=ue8m0, column_major_scales=cm)
        assert torch.equal(_bits(s), _bits(s_stated))
        assert torch.equal(_bits(q), _bits(_div_quant(x, s_stated, 128)))
        if ue8m0:
            assert torch.equal(_bits(q), _bits(q_ours)) and torch.equal(_bits(s), _bits(s_ours))
        else:
            assert int(R.ulp_distance(s.contiguous(), s_ours).max()) <= 1
            assert int(_code_steps(q, q_ours).max()) <= 1


def _silu_double_rounded(gateup: torch.Tensor) -> torch.Tensor:
    """The activation both fused FP8 anchors compute, gate||up layout: ``bf16(u * bf16(g / (1 +
    exp(-g))))`` (silu in fp32 with numpy's exp as the interpreter has it, rounded to the input
    dtype, then the product in the input dtype: two roundings, where ours rounds
    ``g * sigmoid(g) * u`` once)."""
    dt = gateup.dtype
    N = gateup.shape[-1] // 2
    g, u = gateup[..., :N].float().cpu(), gateup[..., N:].cpu()
    e = torch.from_numpy(np.exp((-g).numpy()))
    silu = (g / (1.0 + e)).to(dt)
    return (u.float() * silu.float()).to(dt)  # exact fp32 product of two 8/11-bit mantissas, one rounding


def _fused_bounds(q, s, q_ours, s_ours, y_theirs, y_ours, group, extra_ulps=0):
    """How a fused anchor's output relates to ours: activations at most two ulps of the input
    dtype apart (the double rounding: on these data bf16 0/1 ulp, 28% of them 1; fp16 27% 1
    ulp, about 1 in 8000 2 ulps); scales at most as far apart relatively (2 ulps: ``2 * 2**-7``
    bf16, ``2 * 2**-10`` fp16), plus the fp32 ulp of vllm's reciprocal scale (the group max moved
    by those ulps, or not); each side's dequantized value within e4m3's rounding of its
    activation (relative ``2**-4`` for normal codes, absolute ``2**-10 * s`` for subnormal ones),
    so the two within the sum of both and the activations' own difference. Returns the fraction
    of codes that differ from ours. ``extra_ulps``: how far (in ulps of the input dtype) the
    anchor's own activation may be from ``y_theirs`` (compiled: its approximate ``exp``)."""
    assert int(R.ulp_distance(y_theirs, y_ours).max()) <= 2
    rel = ((s.float() - s_ours.float()).abs() / s_ours.float()).max()
    ulp = 2**-7 if y_ours.dtype == torch.bfloat16 else 2**-10
    assert float(rel) <= (2 + extra_ulps) * ulp + 2**-22
    d_theirs = R.fp8_group_dequant_ref(q, s.contiguous(), group)
    d_ours = R.fp8_group_dequant_ref(q_ours, s_ours.contiguous(), group)
    yt, yo = y_theirs.float(), y_ours.float()
    st = s.float().repeat_interleave(group, -1)
    so = s_ours.float().repeat_interleave(group, -1)
    bound = 2**-4 * (yt.abs() + yo.abs()) + 2**-10 * (st + so) + (yt - yo).abs() + extra_ulps * ulp * yt.abs()
    assert bool(((d_theirs - d_ours).abs() <= bound * (1 + 2**-20)).all())
    return float((_bits(q) != _bits(q_ours)).float().mean())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_sglang_silu_and_mul_masked_fp8_formula(sglang_anchor, dtype):
    """sglang 0.5.23 ``silu_and_mul_masked_post_quant_fwd`` (``gateup[E, T, 2N]`` gate||up, fp32
    scales, ``masked_m``):

    * activation ``y = bf16(u * bf16(g / (1 + exp(-g))))`` (:func:`_silu_double_rounded`: two
      roundings, ours one), then ``s = max(amax(y), 1e-10) / 448`` and
      ``q = e4m3(clamp(y * fl(1/s)))`` (reciprocal product): bit-identical to that statement on
      the live rows; rows ``t >= masked_m[e]`` are not written;
    * against ours (``silu_and_mul_fp8_group_quant(..., interleaved=False, masked_m=...)``): the
      activations differ by at most two ulps of the input dtype (about a quarter of them by
      one), hence the group max and the scale, and the codes follow (:func:`_fused_bounds`).
    """
    _cpu_only_formula()
    gen = torch.Generator().manual_seed(7 + (dtype == torch.float16))
    E, T, N = 3, 10, 256
    x = _rand((E, T, 2 * N), dtype, gen)
    mm = torch.tensor([10, 4, 0], dtype=torch.int32)
    q, s = A.sglang_silu_and_mul_fp8_masked(x, mm, 128)
    q_ours, s_ours = ik.silu_and_mul_fp8_group_quant(x, interleaved=False, masked_m=mm)
    live = torch.arange(T)[None, :] < mm[:, None]
    y = _silu_double_rounded(x)
    s_stated = _amax(y, 128) / 448.0
    assert torch.equal(_bits(s[live]), _bits(s_stated[live]))
    assert torch.equal(_bits(q[live]), _bits(_recip_quant(y, s_stated, 128)[live]))
    assert not bool(_bits(q[~live]).any()) and not bool(_bits(s[~live]).any())  # untouched (zeros)
    y_ours = ik.silu_and_mul(x.reshape(E * T, 2 * N), interleaved=False).reshape(E, T, N)
    _fused_bounds(q[live], s[live], q_ours[live], s_ours[live], y[live], y_ours[live], 128)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_vllm_silu_mul_fp8_colmajor_formula(vllm_anchor, dtype):
    """vllm 0.34.0 ``silu_mul_per_token_group_quant_fp8_colmajor`` (``gateup[M, 2N]`` gate||up,
    M a multiple of 128, column-major scales, fp32 scales here):

    * activation ``y = bf16(bf16(g / (1 + exp(-g))) * u)`` (as sglang's masked kernel:
      :func:`_silu_double_rounded`), ``s = max(amax(y), 1e-10) * fl(1/448)``,
      ``q = e4m3(clamp(y / s))``: bit-identical to that statement;
    * against ours: :func:`_fused_bounds`.
    """
    _cpu_only_formula()
    gen = torch.Generator().manual_seed(11 + (dtype == torch.float16))
    M, N = 128, 256
    x = _rand((M, 2 * N), dtype, gen)
    q, s = A.vllm_silu_mul_fp8_colmajor(x, 128)
    assert s.stride() == (1, M)
    q_ours, s_ours = ik.silu_and_mul_fp8_group_quant(x, interleaved=False)
    y = _silu_double_rounded(x)
    s_stated = _amax(y, 128) * torch.tensor(1.0 / 448.0, dtype=torch.float32)
    assert torch.equal(_bits(s), _bits(s_stated))
    assert torch.equal(_bits(q), _bits(_div_quant(y, s_stated, 128)))
    y_ours = ik.silu_and_mul(x, interleaved=False)
    _fused_bounds(q, s, q_ours, s_ours, y, y_ours, 128)


@gpu_only
@pytest.mark.parametrize("M", [1, 16, 128, 4096])
def test_fp8_anchors_close_to_ours_gpu(both_anchors, M):
    """Compiled, the anchors' ``/`` and ``exp`` are approximate: no formula statement, but the
    bounds of :func:`_fused_bounds` (fused, one more ulp of slack for their ``exp``) and one e4m3
    step (plain; scales within 2 fp32 ulps: ``div.full.f32`` is within 2 ulps of IEEE) against ours."""
    gen = torch.Generator().manual_seed(M)
    N = 1536
    x = _rand((M, N), torch.bfloat16, gen, scale=3.0)
    q_ours, s_ours = ik.fp8_group_quant(x, 128)
    for fn in (A.sglang_fp8_group_quant, A.vllm_fp8_group_quant):
        q, s = fn(x, 128)
        assert int(R.ulp_distance(s.contiguous(), s_ours).max()) <= 2
        assert int(_code_steps(q, q_ours).max()) <= 1
    g = _rand((M, 2 * N), torch.bfloat16, gen)
    q_ours, s_ours = ik.silu_and_mul_fp8_group_quant(g, interleaved=False)
    y_ours = ik.silu_and_mul(g, interleaved=False)
    if M % 128 == 0:
        q, s = A.vllm_silu_mul_fp8_colmajor(g, 128)
        _fused_bounds(q.cpu(), s.cpu(), q_ours.cpu(), s_ours.cpu(), _silu_double_rounded(g), y_ours.cpu(), 128, 1)
    mm = torch.tensor([M], dtype=torch.int32, device=DEV)
    q, s = A.sglang_silu_and_mul_fp8_masked(g[None], mm, 128)
    y = _silu_double_rounded(g)
    _fused_bounds(q[0].cpu(), s[0].cpu(), q_ours.cpu(), s_ours.cpu(), y, y_ours.cpu(), 128, 1)
    q, s = A.vllm_silu_mul_fp8_masked(g[None], mm, 128)  # its activation unrounded: half an ulp
    assert float(((s[0] - s_ours).abs() / s_ours).max()) <= 2**-8 + 2**-20
    assert int(_code_steps(q[0], q_ours).max()) <= 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_vllm_masked_silu_mul_fp8_formula(vllm_anchor, dtype):
    """vllm 0.34.0 ``persistent_masked_m_silu_mul_quant``, Triton path (kernel
    ``_silu_mul_fp8_quant_deep_gemm``; ``gateup[E, T, 2N]`` gate||up, group 128, fp32 scales):

    * activation ``y = (g * (1 / (1 + exp(-g)))) * u`` kept in fp32 (not rounded to the input
      dtype), ``s = max(amax(y), 1e-10) * fl(1/448)``, ``q = e4m3(clamp(y / s))``: bit-identical to
      that statement on the live rows; scales of masked rows stay zero;
    * ours rounds that very ``y`` to the input dtype first (asserted: our ``silu_and_mul`` is
      ``y.to(dtype)`` bit for bit), so the scales differ by at most half an ulp of the input dtype
      relatively (``2**-8`` bf16, ``2**-11`` fp16) plus vllm's reciprocal ulp, and every code is at
      most one e4m3 step from ours (bf16: 1.7% of them; fp16: 0.36%, on these data).
    """
    _cpu_only_formula()
    gen = torch.Generator().manual_seed(13 + (dtype == torch.float16))
    E, T, N = 3, 10, 256
    x = _rand((E, T, 2 * N), dtype, gen)
    mm = torch.tensor([10, 4, 0], dtype=torch.int32)
    q, s = A.vllm_silu_mul_fp8_masked(x, mm, 128)
    assert s.stride() == (T * 2, 1, T)
    live = torch.arange(T)[None, :] < mm[:, None]
    g, u = x[..., :N].float(), x[..., N:].float()
    y = (g * (1.0 / (1.0 + torch.from_numpy(np.exp((-g).numpy()))))) * u
    s_stated = _amax(y, 128) * torch.tensor(1.0 / 448.0, dtype=torch.float32)
    assert torch.equal(_bits(s[live]), _bits(s_stated[live]))
    assert torch.equal(_bits(q[live]), _bits(_div_quant(y, s_stated, 128)[live]))
    assert not bool(_bits(s[~live]).any())
    assert torch.equal(
        _bits(ik.silu_and_mul(x.reshape(E * T, 2 * N), interleaved=False)), _bits(y.to(dtype)).reshape(E * T, N)
    )
    q_ours, s_ours = ik.silu_and_mul_fp8_group_quant(x, interleaved=False, masked_m=mm)
    rel = ((s[live] - s_ours[live]).abs() / s_ours[live]).max()
    assert float(rel) <= (2**-8 if dtype == torch.bfloat16 else 2**-11) + 2**-22
    assert int(_code_steps(q[live], q_ours[live]).max()) <= 1
