"""A row softmax in Triton (one program a row, the row in registers: the shape of the Triton
tutorial's fused softmax, written here from scratch) against ``torch.softmax``.

    portcheck softmax_pair:original softmax_pair:port --cases softmax_pair:cases \\
        --reference softmax_pair:reference --no-code

``docs/portcheck.md`` gives the outcome, honestly: not bit for bit.
"""

import torch
import triton
import triton.language as tl

import portcheck


def original(x):
    return torch.softmax(x, dim=-1)


def reference(x):
    return torch.softmax(x.double(), dim=-1)


@triton.jit
def _softmax_rows(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=keep, other=-float("inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    num = tl.exp(shifted)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=keep)


def port(x):
    rows, n = x.reshape(-1, x.shape[-1]).shape
    x2 = x.reshape(rows, n)
    out = torch.empty_like(x2, memory_format=torch.contiguous_format)
    _softmax_rows[(rows,)](x2, out, n, x2.stride(0), out.stride(0), BLOCK=triton.next_power_of_2(n))
    return out.reshape(x.shape)


def cases():
    return portcheck.matrix(
        shapes=[(4, 100), (3, 781)],
        dtypes=[torch.float32, torch.bfloat16, torch.float16],
        value_classes=("random", "edges", "nan_inf"),
        strides=("contiguous", "row_padded"),
    )
