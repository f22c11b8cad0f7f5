"""The source document's test family for the Triton port, on CPU (interpreter) and CUDA."""

import pytest
import torch
from conftest import DEVICE, gpu_only, poisoned, randn

from inkling_kernels import LaunchConfig, launch_config, silu_and_mul
from inkling_kernels.reference import bits_equal, join_gateup, silu_and_mul_ref, split_gateup, ulp_distance
from inkling_workbook.ports.silu_and_mul import harness

# ulp budget against the same-order torch reference (shared with the harness): tl.sigmoid and
# torch.sigmoid differ in the last fp32 bits, which moves a bf16/fp16 result by at most one ulp;
# in fp32 output the difference is not hidden by a rounding step (11 ulp seen on the H200).
ULP_BUDGET = {getattr(torch, k): v for k, v in harness.ULP_BUDGET.items()}


def _check_against_reference(gateup, w=None, out_dtype=None, interleaved=True):
    out = silu_and_mul(gateup, w, out_dtype, interleaved=interleaved)
    ref = silu_and_mul_ref(gateup, w, out_dtype, interleaved=interleaved)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.isfinite(out).all(), "kernel produced non-finite values on finite input"
    dist = ulp_distance(out, ref)
    assert int(dist.min()) >= 0, "NaN in one of kernel/reference only"
    assert int(dist.max()) <= ULP_BUDGET[out.dtype], f"max ulp {int(dist.max())}"
    return out


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("with_weight", [False, True])
def test_matches_reference(interleaved, dtype, with_weight, gen, device):
    M, N = 37, 768
    x = randn((M, 2 * N), dtype, gen, device, scale=3.0)
    w = torch.rand(M, generator=gen).to(device) if with_weight else None
    _check_against_reference(x, w, interleaved=interleaved)


@pytest.mark.parametrize(
    "M,N", [(1, 1), (3, 7), (5, 300), (2, 1000), (9, 1537), (24, 1025), (130, 96), (65, 2048), (67, 2880)]
)
@pytest.mark.parametrize("interleaved", [True, False])
def test_odd_widths_and_masked_tails(M, N, interleaved, gen, device):
    x = randn((M, 2 * N), torch.bfloat16, gen, device)
    ref = silu_and_mul_ref(x, interleaved=interleaved)
    # the heuristic's tile, then tiles forced to leave both a row and a column tail
    for cfg in (launch_config(M, N), LaunchConfig(BLOCK_M=4, BLOCK_N=64, num_warps=2)):
        out = poisoned((M, N), torch.bfloat16, device)
        silu_and_mul(x, interleaved=interleaved, out=out, config=cfg)
        assert not torch.isnan(out).any(), f"unwritten output elements with {cfg}"
        assert int(ulp_distance(out, ref).max()) <= 1


def test_decode_heuristic_widens_from_24576_outputs():
    """Decode tiles: 1x256 / 4 warps below 24576 outputs (or N < 1024), 1x1024 / 8 warps from
    there up to M = 64 (experiment B); one row a program either way."""
    assert launch_config(8, 1536) == LaunchConfig(1, 256, 4) and launch_config(64, 768) == LaunchConfig(1, 256, 4)
    assert launch_config(8, 3072) == LaunchConfig(1, 1024, 8) and launch_config(16, 1536) == LaunchConfig(1, 1024, 8)
    assert launch_config(24, 1025) == LaunchConfig(1, 1024, 8) and launch_config(64, 3072) == LaunchConfig(1, 1024, 8)
    assert launch_config(65, 3072).BLOCK_M == 1 and launch_config(65, 3072).num_warps == 4


def test_mid_size_heuristic_masks_a_1024_column_tile_when_no_power_of_two_divides_n():
    """Experiment D: 333 x 2880 (no power of two from 128 to 1024 divides 2880) runs 1x1024 / 8
    warps with a column mask, not 1x256; prefill and narrower N keep their tiles."""
    assert launch_config(333, 2880) == LaunchConfig(1, 1024, 8)
    assert launch_config(333, 1408) == LaunchConfig(1, 128, 4)  # 1408 = 11 x 128: no mask
    assert launch_config(333, 1000).BLOCK_N == 256
    assert launch_config(4097, 2880) == LaunchConfig(8, 256, 8)


@pytest.mark.parametrize("with_weight", [False, True])
def test_layouts_bitwise_equal(with_weight, gen, device):
    M, N = 33, 1536
    gate = randn((M, N), torch.bfloat16, gen, device, scale=4.0)
    up = randn((M, N), torch.bfloat16, gen, device, scale=4.0)
    w = torch.rand(M, generator=gen).to(device) if with_weight else None
    a = silu_and_mul(join_gateup(gate, up, True), w, interleaved=True)
    b = silu_and_mul(join_gateup(gate, up, False), w, interleaved=False)
    assert bits_equal(a, b)


def test_split_join_roundtrip(gen):
    x = randn((4, 10), torch.float32, gen, "cpu")
    for layout in (True, False):
        g, u = split_gateup(x, layout)
        assert torch.equal(join_gateup(g, u, layout), x)


def test_deterministic(gen, device):
    x = randn((70, 2 * 1024), torch.bfloat16, gen, device)
    w = torch.rand(70, generator=gen).to(device)
    runs = [silu_and_mul(x, w) for _ in range(3)]
    assert all(bits_equal(runs[0], r) for r in runs[1:])


@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_out_dtype(in_dtype, out_dtype, gen, device):
    x = randn((6, 2 * 512), in_dtype, gen, device)
    out = _check_against_reference(x, out_dtype=out_dtype)
    assert out.dtype == out_dtype


@pytest.mark.parametrize("w_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_weight_dtypes(w_dtype, gen, device):
    x = randn((12, 2 * 256), torch.bfloat16, gen, device)
    w = torch.rand(12, generator=gen).to(w_dtype).to(device)
    _check_against_reference(x, w)


@pytest.mark.parametrize("interleaved", [True, False])
def test_zero_rows(interleaved, device):
    x = torch.empty((0, 2 * 768), dtype=torch.bfloat16, device=device)
    out = silu_and_mul(x, torch.empty(0, device=device), interleaved=interleaved)
    assert out.shape == (0, 768) and out.dtype == torch.bfloat16
    assert silu_and_mul(x, out_dtype=torch.float32, interleaved=interleaved).dtype == torch.float32


@pytest.mark.parametrize("M", range(1, 17))
@pytest.mark.parametrize("N", [768, 1024, 1536])
def test_small_shared_expert_batches(M, N, gen, device):
    """The small-batch family where the helion AOT path was suspected of NaNs."""
    x = randn((M, 2 * N), torch.bfloat16, gen, device, scale=2.0)
    for interleaved in (True, False):
        out = poisoned((M, N), torch.bfloat16, device)
        silu_and_mul(x, interleaved=interleaved, out=out)
        assert torch.isfinite(out).all()
        assert int(ulp_distance(out, silu_and_mul_ref(x, interleaved=interleaved)).max()) <= 1


def test_strided_rows(gen, device):
    """gateup as a column slice of a wider buffer (row stride > 2N)."""
    M, N = 9, 256
    wide = randn((M, 2 * N + 64), torch.bfloat16, gen, device)
    x = wide[:, : 2 * N]
    assert not x.is_contiguous()
    out = silu_and_mul(x)
    assert bits_equal(out, silu_and_mul(x.contiguous()))


def test_strided_weights_read_as_their_own_values(gen, device):
    """Per-row weights that are a strided view (a slice of a wider tensor) give what their
    contiguous copy gives, with and without ``out``: the kernel reads them at unit stride, so the
    op copies a strided view first (before the fix it read the wider tensor's neighbours)."""
    M, N = 37, 256
    x = randn((M, 2 * N), torch.bfloat16, gen, device)
    w = torch.rand((M, 2), generator=gen).to(device)[:, 1]
    assert w.stride() == (2,)
    for interleaved in (True, False):
        want = silu_and_mul(x, w.contiguous(), interleaved=interleaved)
        assert bits_equal(silu_and_mul(x, w, interleaved=interleaved), want)
        out = poisoned((M, N), torch.bfloat16, device)
        silu_and_mul(x, w, interleaved=interleaved, out=out)
        assert bits_equal(out, want)


def test_nan_inf_propagate_like_reference(device):
    """NaN in gate or up gives NaN; silu(+inf)*up = inf*up; silu(-inf) = -inf*0 = NaN, as torch says."""
    g = torch.tensor([[float("nan"), 1.0, float("inf"), float("-inf"), 2.0, 0.0]], dtype=torch.bfloat16)
    u = torch.tensor([[1.0, float("nan"), 2.0, 1.0, float("inf"), float("inf")]], dtype=torch.bfloat16)
    for interleaved in (True, False):
        x = join_gateup(g, u, interleaved).to(device)
        out = silu_and_mul(x, interleaved=interleaved)
        ref = silu_and_mul_ref(x, interleaved=interleaved)
        assert torch.equal(torch.isnan(out), torch.isnan(ref))
        finite = ~torch.isnan(ref)
        assert torch.equal(out[finite], ref[finite])


def test_out_buffer_is_returned_and_written(gen, device):
    x = randn((5, 2 * 384), torch.bfloat16, gen, device)
    out = poisoned((5, 384), torch.float32, device)
    res = silu_and_mul(x, out_dtype=torch.float32, out=out)
    assert res.data_ptr() == out.data_ptr() and not torch.isnan(out).any()


# ---- bad input: a clear error naming the argument, before any launch -------------------------


def _x(M=4, N=64, dtype=torch.bfloat16):
    return torch.randn(M, 2 * N).to(dtype).to(DEVICE)


@pytest.mark.parametrize(
    "call,exc,word",
    [
        (lambda: silu_and_mul(_x()[0]), ValueError, "gateup"),
        (lambda: silu_and_mul(torch.ones(4, 7, device=DEVICE)), ValueError, "even"),
        (lambda: silu_and_mul(torch.ones(4, 0, device=DEVICE)), ValueError, "gateup"),
        (lambda: silu_and_mul(torch.ones(4, 8, dtype=torch.int32, device=DEVICE)), TypeError, "gateup"),
        (lambda: silu_and_mul(torch.ones(4, 8, dtype=torch.float64, device=DEVICE)), TypeError, "gateup"),
        (lambda: silu_and_mul([[1.0, 2.0]]), TypeError, "gateup"),
        (lambda: silu_and_mul(_x().t()), ValueError, "gateup"),
        (lambda: silu_and_mul(_x(), torch.ones(5, device=DEVICE)), ValueError, "topk_weights"),
        (lambda: silu_and_mul(_x(), torch.ones(4, 1, device=DEVICE)), ValueError, "topk_weights"),
        (lambda: silu_and_mul(_x(), torch.ones(4, dtype=torch.int64, device=DEVICE)), TypeError, "topk_weights"),
        (lambda: silu_and_mul(_x(), out_dtype=torch.int8), TypeError, "out_dtype"),
        (lambda: silu_and_mul(_x(), out=torch.empty(4, 65, device=DEVICE)), ValueError, "out"),
        (lambda: silu_and_mul(_x(), out=torch.empty(4, 64, dtype=torch.int32, device=DEVICE)), TypeError, "out"),
        (
            lambda: silu_and_mul(
                _x(), out_dtype=torch.float16, out=torch.empty(4, 64, dtype=torch.float32, device=DEVICE)
            ),
            TypeError,
            "out_dtype",
        ),
        (lambda: silu_and_mul(_x(), interleaved=1), TypeError, "interleaved"),
        (lambda: silu_and_mul(_x(), out=torch.empty(64, 4, device=DEVICE).t()), ValueError, "out"),
        # an out that overlaps gateup (the kernel would read what other programs already wrote)
        (lambda: (lambda x: silu_and_mul(x, out=x[:, :64]))(_x()), ValueError, "out overlaps gateup"),
        (lambda: (lambda x: silu_and_mul(x, out=x[:, 64:]))(_x()), ValueError, "out overlaps gateup"),
        (lambda: (lambda x: silu_and_mul(x[:5, :128], out=x[1:, 64:128]))(_x(6, 96)), ValueError, "out overlaps"),
        (
            lambda: (lambda b: silu_and_mul(b[:8].view(4, 2), out=b[:8].view(4, 2)[:, :1]))(torch.randn(32)),
            ValueError,
            "out overlaps gateup",
        ),
        # inference ops: no silent detach of an input that requires grad
        (lambda: silu_and_mul(_x().requires_grad_()), ValueError, "gateup requires grad"),
        (
            lambda: silu_and_mul(_x(), torch.ones(4, device=DEVICE, requires_grad=True)),
            ValueError,
            "topk_weights requires grad",
        ),
        (lambda: silu_and_mul(_x(), enable_pdl=1), TypeError, "enable_pdl"),
    ],
)
def test_bad_input_raises(call, exc, word):
    with pytest.raises(exc, match=word):
        call()


@gpu_only
def test_device_mismatch_raises():
    x = _x()
    with pytest.raises(ValueError, match="topk_weights"):
        silu_and_mul(x, torch.ones(4))
    with pytest.raises(ValueError, match="out"):
        silu_and_mul(x, out=torch.empty(4, 64, dtype=torch.bfloat16))


def test_device_mismatch_raises_cpu_meta():
    x = torch.randn(4, 128)
    with pytest.raises(ValueError, match="topk_weights"):
        silu_and_mul(x, torch.ones(4, device="meta"))


# ---- numel >= 2**31: int64 offsets -------------------------------------------------------------


@gpu_only
@pytest.mark.parametrize("interleaved", [True, False])
def test_numel_above_int32(interleaved):
    N = 1024
    M = (2**31 + 16384) // (2 * N) + 1  # gateup numel > 2**31 (4.3 GB of bf16)
    x = torch.empty((M, 2 * N), dtype=torch.bfloat16, device="cuda")
    x.normal_()
    out = poisoned((M, N), torch.bfloat16, "cuda")
    silu_and_mul(x, interleaved=interleaved, out=out)
    for rows in (slice(0, 64), slice(M // 2, M // 2 + 64), slice(M - 64, M)):  # the last rows need int64
        ref = silu_and_mul_ref(x[rows], interleaved=interleaved)
        assert int(ulp_distance(out[rows], ref).max()) <= 1
    assert not torch.isnan(out).any()
    del x, out
    torch.cuda.empty_cache()


@gpu_only
def test_compiled_matches_interpreter_up_to_rounding(gen):
    """The same source compiled and interpreted: equal to within the sigmoid's last fp32 bits."""
    x = randn((24, 2 * 512), torch.bfloat16, gen, "cpu")
    gpu = silu_and_mul(x.cuda()).cpu()
    cpu = silu_and_mul(x)
    assert int(ulp_distance(gpu, cpu).max()) <= 1


def test_out_sharing_a_buffer_without_overlap_is_accepted(gen, device):
    """Column slices of one buffer that do not share elements are fine (gateup | out side by side),
    and so is requires_grad under no_grad."""
    M, N = 6, 64
    buf = poisoned((M, 3 * N), torch.bfloat16, device)
    buf[:, : 2 * N] = randn((M, 2 * N), torch.bfloat16, gen, device)
    x, out = buf[:, : 2 * N], buf[:, 2 * N :]
    silu_and_mul(x, out=out)
    assert bits_equal(out, silu_and_mul(x.contiguous()))
    with torch.no_grad():
        y = silu_and_mul(x.clone().requires_grad_())
    assert bits_equal(y, out)
