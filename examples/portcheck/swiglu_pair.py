"""A SwiGLU forward in Triton, ``c = silu(a) * b`` row by row, in the manner of Liger-Kernel's
``swiglu`` forward (silu computed in fp32 from ``a``, rounded to ``b``'s dtype, then multiplied by
``b`` in that dtype; written here from scratch), against torch's ``F.silu(a) * b``.

    portcheck swiglu_pair:original swiglu_pair:port --cases swiglu_pair:cases \\
        --reference swiglu_pair:reference --no-code

``docs/portcheck.md`` gives the outcome, honestly: not bit for bit in bf16.
"""

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import portcheck


def original(a, b):
    return F.silu(a) * b


def reference(a, b):
    return F.silu(a.double()) * b.double()


@triton.jit
def _swiglu_rows(a_ptr, b_ptr, c_ptr, n_cols, a_stride, b_stride, c_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols
    a = tl.load(a_ptr + row * a_stride + cols, mask=keep, other=0).to(tl.float32)
    b = tl.load(b_ptr + row * b_stride + cols, mask=keep, other=0)
    silu = a * tl.sigmoid(a)
    tl.store(c_ptr + row * c_stride + cols, silu.to(b.dtype) * b, mask=keep)


def port(a, b):
    n = a.shape[-1]
    a2, b2 = a.reshape(-1, n), b.reshape(-1, n)
    c = torch.empty(a2.shape, dtype=b.dtype, device=a.device)
    _swiglu_rows[(a2.shape[0],)](a2, b2, c, n, a2.stride(0), b2.stride(0), c.stride(0), BLOCK=triton.next_power_of_2(n))
    return c.reshape(a.shape)


def cases():
    return portcheck.matrix(
        shapes=[((4, 100), (4, 100)), ((3, 781), (3, 781))],
        dtypes=[torch.float32, torch.bfloat16, torch.float16],
        value_classes=("random", "edges", ("nan_inf", "random")),
        strides=("contiguous", "row_padded"),
    )
