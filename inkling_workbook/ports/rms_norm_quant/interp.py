"""Two more repairs of Triton's interpreter that this port needs, for both sides of a CPU check.

The helion original computes ``torch.rsqrt`` as ``libdevice.rsqrt`` and the row maximum with
``tl.max`` over a **bf16** tile; Triton 3.9's interpreter, even with portcheck's CPU mode or the
library's repairs (``inkling_kernels._backend``), gets both wrong:

* ``libdevice.rsqrt`` is an unbound stub: the call returns ``None`` and the kernel fails on its
  next line. Repaired as ``tl.math.rsqrt`` (numpy's ``1 / sqrt`` in fp32). On the GPU the line
  calls ``__nv_rsqrtf``; the two can differ in the last place, each backend consistent with itself.
* ``tl.max`` / ``tl.min`` over bf16 reduce the **bit patterns** (numpy holds bf16 as uint16), so
  a negative value or the ``-inf`` helion fills masked lanes with (``0xff80``) is the largest.
  Repaired as the reduction of the values (widened exactly to fp32, NaN ignored as ``nanmax``
  does, the result narrowed back, exact).

:func:`repairs` applies both for the block and puts everything back after; it nests. Both sides of
this port's checks (:mod:`.helion` and :mod:`.port`) enter it around their interpreted launches,
so ``portcheck`` run on them from the command line sees the same arithmetic.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import triton.language as tl
from triton.language.extra import libdevice
from triton.runtime import interpreter

_state = threading.local()
_ABSENT = object()
NAMES = ("libdevice.rsqrt", "bf16 max/min reductions")


def _libdevice_rsqrt(arg0, _semantic=None):
    return tl.math.rsqrt(arg0)


def _bf16_values(data: np.ndarray) -> np.ndarray:
    return (np.asarray(data).astype(np.uint32) << 16).view(np.float32)


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """fp32 values that are bf16 values (a max or min of them) back to bf16 bit patterns (exact)."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _min_max(original):
    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        data = input[0] if isinstance(input, tuple) else input
        if data.dtype.scalar != tl.bfloat16 or idx_reduce_op is not None:
            return original(self, input, val_reduce_op, idx_reduce_op)
        with np.errstate(all="ignore"):
            vals = val_reduce_op(_bf16_values(data.handle.data), axis=self.axis, keepdims=self.keep_dims)
        return self.to_tensor(_bf16_bits(np.atleast_1d(vals)).reshape(np.shape(vals)), data.dtype)

    return min_max


@contextlib.contextmanager
def repairs():
    """``libdevice.rsqrt`` bound and bf16 max/min reductions on values, for the block."""
    if getattr(_state, "depth", 0):
        _state.depth += 1
        try:
            yield
        finally:
            _state.depth -= 1
        return
    saved_rsqrt = vars(libdevice).get("rsqrt", _ABSENT)
    saved_min_max = interpreter.ReduceOps.min_max
    libdevice.rsqrt = _libdevice_rsqrt
    interpreter.ReduceOps.min_max = _min_max(saved_min_max)
    _state.depth = 1
    try:
        yield
    finally:
        _state.depth = 0
        interpreter.ReduceOps.min_max = saved_min_max
        if saved_rsqrt is _ABSENT:
            del libdevice.rsqrt
        else:
            libdevice.rsqrt = saved_rsqrt
