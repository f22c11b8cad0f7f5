"""Planted ports for tests/test_portcheck.py: importable by name, so the CLI can run them in a
fresh process (``python -m portcheck portcheck_plants:double ...``)."""

import torch

import portcheck


def double(x):
    """The 'original': exact in bf16 (times 2), so a float64 reference rounds to the same bits."""
    return x * 2


def reference(x):
    return x.double() * 2


def flip_one_bit(x):
    """Differs from ``double`` in one bit of element (0, 3)."""
    out = double(x)
    out.view(torch.int16)[0, 3] ^= 1
    return out


def move_nan(x):
    """``double`` with its first NaN (if any) moved one element on (the element it leaves gets 0)."""
    out = double(x).reshape(-1)
    if not torch.isnan(out).any():
        return out.view(x.shape)
    at = int(torch.isnan(out).nonzero()[0])
    out[at], out[(at + 1) % out.numel()] = 0.0, float("nan")
    return out.view(x.shape)


def shape_off_by_one(x):
    return double(x)[:, :-1]


def plus_one_ulp(x):
    """Every element one representable value further from zero (bits + 1)."""
    return (double(x).view(torch.int16) + 1).view(torch.bfloat16)


_calls = [0]


def flaky(x):
    """Equal to ``double`` on odd calls; one bit flipped on every second call."""
    _calls[0] += 1
    out = double(x)
    if _calls[0] % 2 == 0:
        out.view(torch.int16)[0, 0] ^= 1
    return out


def cases():
    return portcheck.matrix(shapes=[(2, 64)], value_classes=("random", "nan_inf"), strides=("contiguous",))


def package_cases():
    """``gateup [2, 768]`` for the package's silu_and_mul, both layouts, contiguous and row-padded."""
    return portcheck.matrix(
        shapes=[(2, 768)], value_classes=("random", "edges"), kwargs=({"interleaved": True}, {"interleaved": False})
    )


_silu_calls = [0]


def flaky_silu(gateup, topk_weights=None, out_dtype=None, *, interleaved=True, out=None):
    """The package's silu_and_mul with output element (0, 0) flipped on every second call."""
    import inkling_kernels as ik

    _silu_calls[0] += 1
    result = ik.silu_and_mul(gateup, topk_weights, out_dtype, interleaved=interleaved, out=out)
    if _silu_calls[0] % 2 == 0:
        result.view({2: torch.int16, 4: torch.int32}[result.element_size()])[0, 0] ^= 1
    return result


def silu_flip_one_bit(gateup, topk_weights=None, out_dtype=None, *, interleaved=True, out=None):
    """The package's silu_and_mul with one bit of output element (0, 3) flipped: a port one ulp
    off in one place (the planted mismatch of ``check``'s test and notebook 04)."""
    import inkling_kernels as ik

    result = ik.silu_and_mul(gateup, topk_weights, out_dtype, interleaved=interleaved, out=out)
    result.view({2: torch.int16, 4: torch.int32}[result.element_size()])[0, 3] ^= 1
    return result


def silu_fp8_cases():
    """Three cases of the second port's CPU matrix (a row-padded edge case, a 3-D input and a
    result-ties case): small enough for worker processes in a test."""
    from inkling_workbook.ports.silu_mul_fp8 import port as silu_mul_fp8_port

    every = silu_mul_fp8_port.cpu_cases()
    return [every[3], every[-3], every[-1]]


#: Shapes where the second port takes its large-output tile and the rows leave a tail.
LARGE_TILE_SHAPES = ((4099, 1536), (2051, 3072), (8193, 768), (8193, 1000))


def large_tile_cases():
    """bf16 random ``x [M, 2N]`` at :data:`LARGE_TILE_SHAPES`, contiguous and row-padded."""
    from inkling_workbook.ports.silu_mul_fp8 import port as silu_mul_fp8_port

    return [
        silu_mul_fp8_port._case((M, 2 * N), torch.bfloat16, "random", stride, 0.37, seed)
        for seed, (M, N) in enumerate(LARGE_TILE_SHAPES)
        for stride in ("contiguous", "row_padded")
    ]


# ---- plants for the tool's robustness (tests/test_portcheck_tool.py) ---------------------------


def segfault_on_nan(x):
    """``double``, except that it dies on SIGSEGV on an input holding a NaN."""
    if torch.isnan(x).any():
        import ctypes

        ctypes.string_at(0)  # reads address 0: SIGSEGV
    return double(x)


def sleeps_on_nan(x):
    """``double``, except that it sleeps a minute on an input holding a NaN."""
    if torch.isnan(x).any():
        import time

        time.sleep(60)
    return double(x)


def lazy_import_on_nan(x):
    """``double``, except that it imports a missing module (lazily) on an input holding a NaN."""
    if torch.isnan(x).any():
        import a_module_that_is_not_installed  # noqa: F401
    return double(x)


def name_error(x):
    return undefined_name * x  # noqa: F821


def as_float(x):
    """A Python float and a numpy array: outputs that are not tensors."""
    return float(double(x).float().sum()), double(x).float().numpy()


def as_float_too(x):
    return float(double(x).float().sum()), double(x).float().numpy()


def broken_reference(x):
    return x.double()[:, :-1] * 2  # one column short


def negative_zero(x):
    """``double`` with every zero made -0."""
    out = double(x)
    out[out == 0] = -0.0
    return out


def canonical_nan(x):
    """``double`` with every NaN the canonical positive quiet NaN."""
    out = double(x)
    out[torch.isnan(out)] = float("nan")
    return out


def zero_cases():
    return portcheck.matrix(shapes=[(2, 64)], value_classes=("edges",), strides=("contiguous",))


def float32_cases():
    return portcheck.matrix(
        shapes=[(2, 64)], dtypes=[torch.float32], value_classes=("random",), strides=("contiguous",)
    )
