"""One more repair of Triton's interpreter that this port needs, for both sides of a CPU check.

The helion original computes ``torch.rsqrt`` as ``libdevice.rsqrt``. Triton 3.9's interpreter
leaves the libdevice stubs unbound, and portcheck's CPU mode and the library's repairs
(``inkling_kernels._backend``) bind ``libdevice.exp`` only: the call returns ``None`` and the
kernel fails on its next line. Repaired as ``tl.math.rsqrt`` (numpy's ``1 / sqrt`` in fp32). On
the GPU the line calls ``__nv_rsqrtf``; the two can differ in the last place, each backend
consistent with itself, and both sides of a check call the same function.

(The row maximum over a **bf16** tile needs no repair: ``tl.max`` widens bf16 to fp32 before it
reduces, so the interpreter never compares bf16 bit patterns there.)

:func:`repairs` applies it for the block and puts it back after; it nests. Both sides of this
port's checks (:mod:`.helion`, :mod:`.port`, :mod:`.steps`) enter it around their interpreted
launches, so ``portcheck`` run on them from the command line sees the same arithmetic.
"""

from __future__ import annotations

import contextlib
import threading

import triton.language as tl
from triton.language.extra import libdevice

_state = threading.local()
_ABSENT = object()
NAMES = ("libdevice.rsqrt",)


def _libdevice_rsqrt(arg0, _semantic=None):
    return tl.math.rsqrt(arg0)


@contextlib.contextmanager
def repairs():
    """``libdevice.rsqrt`` bound to ``tl.math.rsqrt`` for the block."""
    if getattr(_state, "depth", 0):
        _state.depth += 1
        try:
            yield
        finally:
            _state.depth -= 1
        return
    saved = vars(libdevice).get("rsqrt", _ABSENT)
    libdevice.rsqrt = _libdevice_rsqrt
    _state.depth = 1
    try:
        yield
    finally:
        _state.depth = 0
        if saved is _ABSENT:
            del libdevice.rsqrt
        else:
            libdevice.rsqrt = saved
