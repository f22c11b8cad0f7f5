"""The CPU mode: Triton's interpreter with the repairs that make it compute what the GPU does.

``portcheck --device cpu`` (and :func:`portcheck.run` on ``device="cpu"``) runs the checks inside
:func:`cpu_mode`. Nothing needs ``TRITON_INTERPRET=1``: within the block

* a launch of a compiled-mode kernel (``kernel[grid](...)`` of a ``@triton.jit`` function, a
  ``JITFunction``) whose tensors are all on the CPU runs in Triton's interpreter
  (``InterpretedFunction`` of the same Python function); a ``@triton.jit`` helper called from
  interpreted code (yours, or Triton's ``tl.sigmoid``) runs through the interpreter too. The
  kernels stay ``JITFunction`` objects, so the generated-code table compiles them for sm_90.
* the interpreter gets these repairs (Triton 3.9 as shipped gets each of them wrong):

  ========================  ======================================================  ===========================
  repair                    the GPU                                                 Triton's interpreter
  ========================  ======================================================  ===========================
  ``fp32->bf16``            round to nearest even (``cvt.rn.bf16.f32``)             truncates the mantissa
  ``bf16->fp32``            exact widening, subnormals included                     reads bf16 subnormals wrong
  ``bf16<->fp16/fp64``      through fp32: exact widening, then one rounding         as above, twice
  ``bf16 arithmetic``       ``+ - * /`` on bf16 rounded once to bf16                numpy's operator on the
                                                                                    uint16 bit patterns
  ``bf16 compare, min/max,  on the values                                           on the bit patterns
  negation``                                                                        (-1.0 > 0 is True)
  ``fp32->e4m3``            round to nearest even, saturate at +-448, NaN -> 0x7F   truncates the exponent
  ``libdevice`` functions   ``__nv_expf``, ``__nv_rsqrtf``, ...                     unbound stubs (None);
                                                                                    bound to ``tl.math``'s
  ``bf16 constants``        the fp32 constant rounded to nearest even               truncates; Triton 3.6 has
                                                                                    no ``get_bf16`` at all
  ========================  ======================================================  ===========================

  (:data:`LIBDEVICE` lists the functions bound and their ``tl.math`` counterparts, which the
  interpreter runs as numpy's: ``exp``, ``rsqrt``, ``sin`` and the other transcendental ones can
  differ from libdevice's in the last place; ``sqrt_rn``, ``div_rn``, ``floor``, ``ceil``
  and ``abs`` are exact on both; ``fma`` rounds once under Triton 3.9's interpreter, twice
  under 3.6's. Each side of a check sees the same repairs, so a check compares like with like.)
* on leaving, everything the interpreter patched in ``triton.language`` is put back (its
  device-function calls leave the language patched, after which a compile in the same process
  fails with ``'value' object has no attribute 'dtype'``): compiled kernels still build.

:data:`REPAIRS` lists the repairs by name; the report's provenance names them.

**One implementation or two.** The package ``inkling_kernels`` keeps the same repairs privately
(``inkling_kernels._backend``) for its own CPU path. The library may depend on torch, Triton
and numpy only, and portcheck must not depend on the library (it is a tool for anyone's
kernels), so neither can import the other and the repairs live twice. ``tests/test_portcheck_cpu.py``
runs both over the same conversions and bf16 operations and asserts the same bits, so the two
copies cannot drift apart unnoticed; a repair of an operation both have must be made in both (the
test's list of operations names each). The library binds only the libdevice function its kernels
call (``exp``).
"""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np
import torch

#: libdevice function -> the ``tl.math`` function the CPU mode binds it to (the interpreter leaves
#: every libdevice function an unbound stub returning None).
LIBDEVICE = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt", "sqrt_rn": "sqrt_rn",
             "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "erf": "erf", "floor": "floor", "ceil": "ceil",
             "abs": "abs", "div_rn": "div_rn", "fma": "fma"}  # fmt: skip
REPAIRS = ("fp32->bf16 RNE", "bf16->fp32 exact (subnormals)", "bf16<->fp16/fp64 via fp32", "bf16 arithmetic RNE",
           "bf16 comparisons, min/max, negation", "fp32->e4m3 RNE saturating",
           "libdevice " + ", ".join(LIBDEVICE) + " as tl.math", "bf16 constants")  # fmt: skip
E4M3_MAX = 448.0
_ABSENT = object()
_state = threading.local()


_BF16_BINARY = {
    "round": (np.add, np.subtract, np.multiply, np.divide, np.fmod, np.minimum, np.maximum, np.fmin, np.fmax),
    "compare": (np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal),
}


def _depth() -> int:
    return getattr(_state, "depth", 0)


def _bf16_as_f32(bits) -> np.ndarray:
    """bf16 bit patterns (the interpreter stores bf16 as uint16) widened exactly to fp32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


CANONICAL_BF16_NAN = 0x7FFF  # what the GPU's cvt.rn.bf16 writes for any NaN


def _f32_as_bf16_bits(x) -> np.ndarray:
    """fp32 (or fp64) values rounded to bf16 bit patterns as ``cvt.rn.bf16`` rounds them: to
    nearest even, and every NaN, whatever its sign and payload, to the canonical 0x7FFF (torch's
    CPU conversion keeps the sign: 0xFFFF)."""
    x = np.asarray(x)
    x = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
    flat = np.array(x, copy=True).reshape(-1)
    bits = torch.from_numpy(flat).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return np.where(np.isnan(flat), np.uint16(CANONICAL_BF16_NAN), bits).reshape(np.shape(x))


class _Patches:
    """The repairs as functions over Triton's interpreter builder, built on first use (importing
    portcheck imports no Triton)."""

    def __init__(self):
        import triton.language as tl
        from triton._C.libtriton import ir
        from triton.language.extra import libdevice
        from triton.runtime.interpreter import InterpretedFunction, TensorHandle, interpreter_builder
        from triton.runtime.jit import JITFunction

        self.tl, self.TensorHandle, self.InterpretedFunction, self.JITFunction = (
            tl,
            TensorHandle,
            InterpretedFunction,
            JITFunction,
        )
        self.builder, self.libdevice, self.ir = interpreter_builder, libdevice, ir
        self.original = {
            "cast_impl": interpreter_builder.cast_impl,
            "binary_op": interpreter_builder.binary_op,
            "unary_op": interpreter_builder.unary_op,
            "create_fp_to_fp": interpreter_builder.create_fp_to_fp,
            "jit_call": JITFunction.__call__,
            "jit_run": JITFunction.run,
            "interp_run": InterpretedFunction.run,
        }
        # every libdevice stub (a function of the module's own: Triton compiles the calls to the
        # backend's library); the CPU mode binds LIBDEVICE's and makes the others raise by name
        self.libdevice_stubs = tuple(
            n for n, v in vars(libdevice).items()
            if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == libdevice.__name__
        )  # fmt: skip
        self.original |= {f"libdevice_{name}": getattr(libdevice, name) for name in self.libdevice_stubs}
        self.interpreted: dict[int, object] = {}
        classes = [
            v for v in vars(tl.core).values() if isinstance(v, type) and v.__module__.startswith("triton.language")
        ]
        self.snapshotted = tuple(dict.fromkeys([tl, tl.core, tl.math, *classes]))

    # -- the repairs ---------------------------------------------------------------------------

    def cast_impl(self, src, dst_type):
        tl = self.tl
        s, d = src.dtype.scalar, dst_type.scalar
        floats = {tl.float16: np.float16, tl.float32: np.float32, tl.float64: np.float64}
        if s == tl.bfloat16 and d in floats:  # exact widening (subnormals too), then one rounding
            return self.TensorHandle(_bf16_as_f32(src.data).astype(floats[d]), d)
        if d == tl.bfloat16 and s in floats:  # round to nearest even, as cvt.rn.bf16 does
            wide = np.asarray(src.data).astype(np.float64 if s == tl.float64 else np.float32)
            return self.TensorHandle(_f32_as_bf16_bits(wide), d)
        return self.original["cast_impl"](src, dst_type)

    def binary_op(self, lhs, rhs, op):
        """Two bf16 operands (the interpreter holds bf16 as uint16 bit patterns and applies numpy
        to those): widened exactly to fp32, then ``+ - * / fmod`` rounded once to bf16 (24 >= 2 *
        8 + 2 bits make the double rounding innocuous for + - * /), min/max selected exactly,
        comparisons as booleans."""
        tl = self.tl
        if lhs.dtype.scalar == tl.bfloat16 and rhs.dtype.scalar == tl.bfloat16:
            kind = next((k for k, ops in _BF16_BINARY.items() if any(op is f for f in ops)), None)
            if kind is not None:
                with np.errstate(all="ignore"):
                    result = op(_bf16_as_f32(lhs.data), _bf16_as_f32(rhs.data))
                if kind == "compare":
                    return self.TensorHandle(result, tl.int1)
                return self.TensorHandle(_f32_as_bf16_bits(result), tl.bfloat16)
        return self.original["binary_op"](lhs, rhs, op)

    def unary_op(self, arg, op):
        """A numpy function of one bf16 operand (negation, and math functions that reach the
        interpreter in bf16): on the exact fp32 value, rounded once to bf16."""
        if arg.dtype.scalar == self.tl.bfloat16:
            with np.errstate(all="ignore"):
                result = op(_bf16_as_f32(arg.data))
            return self.TensorHandle(_f32_as_bf16_bits(result), self.tl.bfloat16)
        return self.original["unary_op"](arg, op)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        tl = self.tl
        if (
            src.dtype.scalar == tl.float32
            and dst_type.scalar == tl.float8e4nv
            and rounding_mode == self.ir.ROUNDING_MODE.RTNE
        ):
            x = np.asarray(src.data, dtype=np.float32)
            t = torch.from_numpy(np.array(x, copy=True).reshape(-1)).clamp(-E4M3_MAX, E4M3_MAX)  # NaN stays NaN
            byte = t.to(torch.float8_e4m3fn).view(torch.uint8).numpy().reshape(np.shape(x))
            return self.TensorHandle(np.where(np.isnan(x), np.uint8(0x7F), byte).astype(np.uint8), tl.float8e4nv)
        if {src.dtype.scalar, dst_type.scalar} == {tl.bfloat16, tl.float16}:
            return self.cast_impl(self.cast_impl(src, tl.float32), dst_type)
        return self.original["create_fp_to_fp"](src, dst_type, rounding_mode)

    def get_bf16(self, value):
        """A bf16 constant (``0.5 * x`` with ``x`` bf16): the fp32 value rounded to nearest even.
        Triton 3.6's interpreter has no ``get_bf16`` at all (an AttributeError); 3.9's truncates."""
        return self.cast_impl(self.builder.get_fp32(value), self.tl.bfloat16)

    @staticmethod
    def libdevice_as_math(name: str):
        """``libdevice.<name>`` as ``tl.math.<LIBDEVICE[name]>`` (what the interpreter can run)."""
        import triton.language as tl

        def bound(*args, _semantic=None):  # looked up per call: the interpreter patches tl.math per launch
            return getattr(tl.math, LIBDEVICE[name])(*args)

        bound.__name__ = f"libdevice_{name}"
        return bound

    @staticmethod
    def libdevice_unsupported(name: str):
        """``libdevice.<name>`` with no repair: raises, naming it (as shipped it returns None and
        the kernel fails a line later on ``None``)."""

        def unsupported(*args, _semantic=None):
            raise NotImplementedError(
                f"libdevice.{name} has no CPU-mode repair: Triton's interpreter cannot run it (bound to "
                f"tl.math: {', '.join(LIBDEVICE)}); check this kernel on a GPU (--device cuda)"
            )

        unsupported.__name__ = f"libdevice_{name}"
        return unsupported

    # -- running compiled-mode kernels in the interpreter ----------------------------------------

    def as_interpreted(self, fn):
        key = id(fn.fn)
        if key not in self.interpreted:
            self.interpreted[key] = self.InterpretedFunction(fn.fn)
        return self.interpreted[key]

    def snapshot(self):
        return [(obj, dict(vars(obj))) for obj in self.snapshotted]

    @staticmethod
    def restore(snapshot) -> None:
        for obj, before in snapshot:
            now = dict(vars(obj))
            for name in before.keys() | now.keys():
                if before.get(name, _ABSENT) is not now.get(name, _ABSENT):
                    if name in before:
                        setattr(obj, name, before[name])
                    else:
                        delattr(obj, name)


_PATCHES: _Patches | None = None


def _patches() -> _Patches:
    global _PATCHES
    if _PATCHES is None:
        _PATCHES = _Patches()
    return _PATCHES


def _on_cuda(args, kwargs) -> bool:
    return any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in (*args, *kwargs.values()))


@contextlib.contextmanager
def cpu_mode(repairs: bool = True):
    """Within the block, kernels launched on CPU tensors run in Triton's interpreter (whether
    defined under ``TRITON_INTERPRET=1`` or not), with the :data:`REPAIRS` when ``repairs``
    (``False``: the interpreter as Triton ships it). Everything is put back on leaving. Not
    thread-safe: one block at a time in a process (portcheck runs its cases in one thread)."""
    p = _patches()
    if getattr(_state, "active", False):
        yield
        return

    def interp_run(self, *args, grid, warmup, **kwargs):
        snap = p.snapshot()
        _state.depth = _depth() + 1
        try:
            return p.original["interp_run"](self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _state.depth -= 1
            if _state.depth == 0:
                p.restore(snap)

    def jit_run(self, *args, grid, warmup, **kwargs):
        if warmup or _on_cuda(args, kwargs):
            return p.original["jit_run"](self, *args, grid=grid, warmup=warmup, **kwargs)
        return p.as_interpreted(self).run(*args, grid=grid, warmup=warmup, **kwargs)

    def jit_call(self, *args, **kwargs):
        if _depth() > 0:  # a compiled-mode helper called from interpreted code
            return p.as_interpreted(self)(*args, **kwargs)
        return p.original["jit_call"](self, *args, **kwargs)

    patches = [(p.JITFunction, "run", jit_run), (p.JITFunction, "__call__", jit_call),
               (p.InterpretedFunction, "run", interp_run)]  # fmt: skip
    if repairs:
        patches += [
            (p.builder, "cast_impl", p.cast_impl),
            (p.builder, "binary_op", p.binary_op),
            (p.builder, "unary_op", p.unary_op),
            (p.builder, "create_fp_to_fp", p.create_fp_to_fp),
            (p.builder, "get_bf16", p.get_bf16),
        ]
        patches += [
            (p.libdevice, name, p.libdevice_as_math(name) if name in LIBDEVICE else p.libdevice_unsupported(name))
            for name in p.libdevice_stubs
        ]
    snap = p.snapshot()
    saved = _apply(patches)
    _state.active, _state.patches = True, patches
    try:
        yield
    finally:
        _state.active, _state.patches = False, None
        _undo(saved)
        p.restore(snap)


def _apply(patches) -> list:
    saved = [(obj, name, vars(obj).get(name, _ABSENT)) for obj, name, _ in patches]
    for obj, name, value in patches:
        if value is not _ABSENT:
            setattr(obj, name, value)
        elif name in vars(obj):
            delattr(obj, name)
    return saved


def _undo(saved) -> None:
    for obj, name, value in reversed(saved):
        if value is not _ABSENT:
            setattr(obj, name, value)
        elif name in vars(obj):
            delattr(obj, name)


@contextlib.contextmanager
def paused():
    """Triton as shipped for the block, inside a :func:`cpu_mode` block (the generated-code table
    compiles there: a compile must not see the repairs); outside one, nothing changes."""
    patches = getattr(_state, "patches", None) if getattr(_state, "active", False) else None
    if not patches:
        yield
        return
    saved = _apply([(obj, name, saved_value) for (obj, name, saved_value) in _saved_values(patches)])
    try:
        yield
    finally:
        _undo(saved)


def _saved_values(patches):
    """The values the patched attributes had before :func:`cpu_mode` (kept on the patch functions'
    owners by ``_Patches.original`` and the class dictionaries)."""
    p = _patches()
    originals = {
        (p.JITFunction, "run"): p.original["jit_run"],
        (p.JITFunction, "__call__"): p.original["jit_call"],
        (p.InterpretedFunction, "run"): p.original["interp_run"],
        (p.builder, "cast_impl"): _ABSENT,
        (p.builder, "binary_op"): _ABSENT,
        (p.builder, "unary_op"): _ABSENT,
        (p.builder, "create_fp_to_fp"): _ABSENT,
        (p.builder, "get_bf16"): _ABSENT,
        **{(p.libdevice, name): p.original[f"libdevice_{name}"] for name in p.libdevice_stubs},
    }
    for obj, name, _ in patches:
        yield obj, name, originals[(obj, name)]


def provenance(repairs: bool = True) -> dict:
    """What the CPU mode was, for the report: the interpreter, the repairs applied."""
    import triton

    return {
        "interpreter": f"Triton {triton.__version__} interpreter, driven by portcheck.interpret.cpu_mode",
        "repairs": list(REPAIRS) if repairs else [],
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
    }
