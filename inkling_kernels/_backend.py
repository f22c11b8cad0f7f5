"""One kernel source, two backends: compiled on CUDA tensors, interpreted on CPU tensors.

Triton chooses its backend when ``@triton.jit`` runs: with ``TRITON_INTERPRET=1`` set at that
moment the decorator returns an ``InterpretedFunction`` (numpy on the CPU), otherwise a
``JITFunction`` compiled for the GPU. This module lets one process use both, with no flag for
the user to set:

* :func:`launch` runs a kernel compiled when its tensors are on CUDA, and otherwise wraps the
  same Python function in Triton's ``InterpretedFunction`` and runs that.
* Inside an interpreted run, a call to a compiled-mode ``@triton.jit`` helper (our own
  ``_silu_mul``, or Triton's standard library such as ``tl.sigmoid``, which Triton decorated at
  import time) would raise "Cannot call @triton.jit'd outside of the scope of a kernel". While
  :func:`interpreting` is active, such a call runs the helper through the interpreter instead.
  Outside it Triton's behaviour is unchanged.

Both paths execute the same source lines, so the code the CPU tests check is the code the GPU
runs. Triton's interpreter is not bit-faithful in one place: it converts fp32 -> bf16 by
truncating the mantissa, where the GPU rounds to nearest even. By default this module makes the
interpreter round to nearest even too (:func:`set_interpreter_bf16_rounding`), so CPU results
follow the GPU's rounding; ``"truncate"`` restores Triton's own behaviour (notebook 04 shows both).
"""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np
import torch
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction, TensorHandle, interpreter_builder
from triton.runtime.jit import JITFunction

_state = threading.local()
_lock = threading.RLock()
_interpreted: dict[int, InterpretedFunction] = {}
_original_jit_call = JITFunction.__call__


def _as_interpreted(fn: JITFunction) -> InterpretedFunction:
    with _lock:
        key = id(fn.fn)
        if key not in _interpreted:
            _interpreted[key] = InterpretedFunction(fn.fn)
        return _interpreted[key]


def _jit_call(self, *args, **kwargs):
    if getattr(_state, "depth", 0) > 0:
        return _as_interpreted(self)(*args, **kwargs)
    return _original_jit_call(self, *args, **kwargs)


JITFunction.__call__ = _jit_call


_BF16_ROUNDING = {"mode": "rne"}
_original_cast_impl = interpreter_builder.cast_impl


def set_interpreter_bf16_rounding(mode: str) -> str:
    """Choose how interpreted kernels convert fp32 -> bf16: ``"rne"`` (round to nearest even,
    as the GPU does; the default) or ``"truncate"`` (Triton's interpreter as shipped).
    Returns the previous mode."""
    if mode not in ("rne", "truncate"):
        raise ValueError(f"mode must be 'rne' or 'truncate', got {mode!r}")
    previous, _BF16_ROUNDING["mode"] = _BF16_ROUNDING["mode"], mode
    return previous


def interpreter_bf16_rounding() -> str:
    return _BF16_ROUNDING["mode"]


def _cast_impl(src, dst_type):
    if (
        getattr(_state, "depth", 0) > 0
        and _BF16_ROUNDING["mode"] == "rne"
        and src.dtype.scalar == tl.float32
        and dst_type.scalar == tl.bfloat16
    ):
        # torch's fp32 -> bf16 conversion rounds to nearest even (NaN stays NaN)
        x = torch.from_numpy(np.array(src.data, dtype=np.float32, copy=True))
        bits = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return TensorHandle(bits.reshape(np.shape(src.data)), dst_type.scalar)
    return _original_cast_impl(src, dst_type)


interpreter_builder.cast_impl = _cast_impl


# What Triton's interpreter patches while it runs: the language modules, the tensor and dtype
# classes. A kernel launch restores its own patches, but a device-function call inside it
# (``InterpretedFunction.__call__``: a helper, ``tl.sigmoid``, helion's generated helpers)
# patches ``triton.language.core`` and never restores it; later compilations in the same process
# then fail ("'ir.value' object has no attribute 'dtype'"). :func:`interpreting` snapshots these
# objects on entry and puts back every attribute on exit.
_PATCHED_BY_INTERPRETER = (tl, tl.core, tl.math, tl.core.tensor, tl.core.dtype, tl.core.tensor_descriptor_base)


def _snapshot() -> list[tuple[object, dict]]:
    return [(obj, dict(vars(obj))) for obj in _PATCHED_BY_INTERPRETER]


_ABSENT = object()


def _differences(snapshot: list[tuple[object, dict]]):
    """(object, attribute, value in the snapshot or ``_ABSENT``) for every attribute changed since."""
    for obj, before in snapshot:
        now = dict(vars(obj))
        for name in before.keys() | now.keys():
            if before.get(name, _ABSENT) is not now.get(name, _ABSENT):
                yield obj, name, before.get(name, _ABSENT)


def _restore(snapshot: list[tuple[object, dict]]) -> None:
    for obj, name, value in list(_differences(snapshot)):
        if value is _ABSENT:
            delattr(obj, name)
        else:
            setattr(obj, name, value)


def _changed_since(snapshot: list[tuple[object, dict]]) -> list[str]:
    """Attributes that differ from a :func:`_snapshot` (for tests)."""
    return sorted(f"{getattr(obj, '__name__', repr(obj))}.{name}" for obj, name, _ in _differences(snapshot))


@contextlib.contextmanager
def interpreting():
    """Within this block, compiled-mode ``@triton.jit`` helpers called from interpreted code run
    through the interpreter (also used by the helion originals on CPU). On leaving the outermost
    block, everything the interpreter patched in ``triton.language`` is put back, so compiled
    kernels still build in the same process."""
    depth = getattr(_state, "depth", 0)
    if depth == 0:
        _lock.acquire()
        snapshot = _snapshot()
    _state.depth = depth + 1
    try:
        yield
    finally:
        _state.depth = depth
        if depth == 0:
            try:
                _restore(snapshot)
            finally:
                _lock.release()


@contextlib.contextmanager
def triton_interpret_env():
    """Set ``TRITON_INTERPRET=1`` for the block: what helion checks when it generates code."""
    with _lock:
        old = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = old


def uses_interpreter(device: torch.device) -> bool:
    """CPU tensors always; CUDA tensors only when the user forced ``TRITON_INTERPRET=1``."""
    return device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def launch(kernel, grid, device: torch.device, *args, **kwargs):
    """``kernel[grid](*args, **kwargs)``, compiled for CUDA tensors, interpreted for CPU ones."""
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"unsupported device {device}: expected a CUDA or CPU tensor")
    if not uses_interpreter(device):
        return kernel[grid](*args, **kwargs)
    if isinstance(kernel, JITFunction):
        kernel = _as_interpreted(kernel)
    with interpreting():
        return kernel[grid](*args, **kwargs)
