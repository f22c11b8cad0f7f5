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
  The patches that do this (``JITFunction.__call__`` and the interpreter's fp32 -> bf16 cast)
  are installed by the outermost :func:`interpreting` block and removed when it ends: importing
  the package patches nothing, and outside an interpreted launch Triton is as shipped.
* On CUDA, :class:`CudaLauncher` is the thin launch path: the ``CompiledKernel`` of each launch
  key is cached after its first launch, later launches call its C launcher directly with the
  current stream. :func:`resolve_pdl` decides programmatic dependent launch (``enable_pdl``).

Both paths execute the same source lines, so the code the CPU tests check is the code the GPU
runs. Triton's interpreter is not bit-faithful in one place: it converts fp32 -> bf16 by
truncating the mantissa, where the GPU rounds to nearest even. By default this module makes the
interpreter round to nearest even too (:func:`set_interpreter_bf16_rounding`), so CPU results
follow the GPU's rounding; ``"truncate"`` restores Triton's own behaviour (notebook 04 shows both).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading

import numpy as np
import torch
import triton.language as tl
from triton import knobs
from triton._C.libtriton import ir as _ir
from triton.language.extra import libdevice
from triton.runtime.interpreter import InterpretedFunction, TensorHandle, interpreter_builder
from triton.runtime.jit import JITFunction

_state = threading.local()
_ABSENT = object()
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


_BF16_ROUNDING = {"mode": "rne"}
_original_cast_impl = interpreter_builder.cast_impl


def set_interpreter_bf16_rounding(mode: str) -> str:
    """Choose how interpreted kernels convert fp32 -> bf16: ``"rne"`` (round to nearest even,
    as the GPU does; the default) or ``"truncate"`` (Triton's interpreter as shipped). ``"rne"``
    also turns on the interpreter's other repairs (bf16 -> fp32 widening exact on subnormals too,
    bf16 arithmetic and the fp32 -> e4m3 conversion as the GPU rounds them); ``"truncate"``
    leaves all of them as Triton ships them.
    Returns the previous mode."""
    if mode not in ("rne", "truncate"):
        raise ValueError(f"mode must be 'rne' or 'truncate', got {mode!r}")
    previous, _BF16_ROUNDING["mode"] = _BF16_ROUNDING["mode"], mode
    return previous


def interpreter_bf16_rounding() -> str:
    return _BF16_ROUNDING["mode"]


def _cast_impl(src, dst_type):
    if getattr(_state, "depth", 0) > 0 and _BF16_ROUNDING["mode"] == "rne":
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            # rounded to nearest even, a NaN to the canonical 0x7FFF, as cvt.rn.bf16.f32
            return TensorHandle(_f32_as_bf16_bits(src.data), dst_type.scalar)
        if src.dtype.scalar == tl.bfloat16 and dst_type.scalar == tl.float32:
            # bf16 -> fp32 is exact: the 16 bits moved to the top of the word. Triton 3.9's
            # interpreter goes through a float conversion that reads the 127 bf16 subnormals wrong.
            return TensorHandle(_bf16_as_f32(src.data).reshape(np.shape(src.data)), dst_type.scalar)
    return _original_cast_impl(src, dst_type)


def _bf16_as_f32(bits) -> np.ndarray:
    """bf16 bit patterns (the interpreter stores bf16 as uint16) widened exactly to fp32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _f32_as_bf16_bits(x) -> np.ndarray:
    """fp32 values rounded to bf16 bit patterns as ``cvt.rn.bf16.f32`` rounds them: to nearest
    even (torch's conversion), and every NaN, whatever its sign and payload, to the canonical
    0x7FFF (torch's CPU conversion keeps the sign: 0xFFFF)."""
    flat = np.array(x, dtype=np.float32, copy=True).reshape(-1)
    bits = torch.from_numpy(flat).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return np.where(np.isnan(flat), np.uint16(0x7FFF), bits).reshape(np.shape(x))


_original_binary_op = interpreter_builder.binary_op
_BF16_ARITHMETIC = (np.add, np.subtract, np.multiply, np.divide)


def _binary_op(lhs, rhs, op):
    """bf16 arithmetic in the interpreter. Triton 3.9's interpreter applies numpy's operator to
    the uint16 bit patterns it stores bf16 in (``bf16 * bf16`` multiplies two integers). The GPU
    rounds the exact result once to bf16 (``mul.rn.bf16``); so does this: the operands widened
    exactly to fp32, the fp32 operation (correctly rounded, and 24 >= 2 * 8 + 2 bits make the
    second rounding to bf16 innocuous for + - * /), then round to nearest even."""
    if (
        getattr(_state, "depth", 0) > 0
        and _BF16_ROUNDING["mode"] == "rne"
        and lhs.dtype.scalar == tl.bfloat16
        and rhs.dtype.scalar == tl.bfloat16
        and any(op is f for f in _BF16_ARITHMETIC)
    ):
        with np.errstate(all="ignore"):
            result = op(_bf16_as_f32(lhs.data), _bf16_as_f32(rhs.data))
        return TensorHandle(_f32_as_bf16_bits(result), tl.bfloat16)
    return _original_binary_op(lhs, rhs, op)


_original_fp_to_fp = interpreter_builder.create_fp_to_fp
E4M3_MAX = 448.0


def _fp_to_fp(src, dst_type, rounding_mode):
    """fp32 -> fp8 e4m3fn in the interpreter as the GPU converts it (``cvt.rn.satfinite.e4m3x2.f32``
    on sm_89+): round to nearest even, +-Inf and everything beyond +-448 saturate to +-448, every
    NaN becomes 0x7F. Triton 3.9's interpreter truncates the exponent instead (1000.0 -> 256.0,
    NaN -> 0x7C, 464.0 -> NaN)."""
    if (
        getattr(_state, "depth", 0) > 0
        and _BF16_ROUNDING["mode"] == "rne"
        and src.dtype.scalar == tl.float32
        and dst_type.scalar == tl.float8e4nv
        and rounding_mode == _ir.ROUNDING_MODE.RTNE
    ):
        x = np.asarray(src.data, dtype=np.float32)
        t = torch.from_numpy(np.array(x, copy=True).reshape(-1)).clamp(-E4M3_MAX, E4M3_MAX)  # NaN stays NaN
        byte = t.to(torch.float8_e4m3fn).view(torch.uint8).numpy().reshape(np.shape(x))
        return TensorHandle(np.where(np.isnan(x), np.uint8(0x7F), byte).astype(np.uint8), tl.float8e4nv)
    return _original_fp_to_fp(src, dst_type, rounding_mode)


def _libdevice_exp(arg0, _semantic=None):
    """``libdevice.exp`` in the interpreter: Triton 3.9's interpreter leaves the libdevice stubs
    unbound (a call returns None), so this runs ``tl.exp`` (numpy's ``exp``) instead. On the GPU
    the same line calls ``__nv_expf``; the bits of the two differ, each backend is consistent."""
    return tl.math.exp(arg0)


# The patches an interpreted launch needs, applied by the outermost :func:`interpreting` block
# only and taken back when it ends: importing the package changes nothing in Triton.
_SCOPED_PATCHES = (
    (JITFunction, "__call__", _jit_call),
    (interpreter_builder, "cast_impl", _cast_impl),
    (interpreter_builder, "binary_op", _binary_op),
    (interpreter_builder, "create_fp_to_fp", _fp_to_fp),
    (libdevice, "exp", _libdevice_exp),
)


def _apply_scoped_patches() -> list[tuple[object, str, object]]:
    saved = []
    for obj, name, value in _SCOPED_PATCHES:
        saved.append((obj, name, vars(obj).get(name, _ABSENT)))
        setattr(obj, name, value)
    return saved


def _undo_scoped_patches(saved) -> None:
    for obj, name, value in reversed(saved):
        if value is _ABSENT:
            delattr(obj, name)
        else:
            setattr(obj, name, value)


# What Triton's interpreter patches while it runs: the language modules, the tensor and dtype
# classes. A kernel launch restores its own patches, but a device-function call inside it
# (``InterpretedFunction.__call__``: a helper, ``tl.sigmoid``, helion's generated helpers)
# patches ``triton.language.core`` and never restores it; later compilations in the same process
# then fail ("'ir.value' object has no attribute 'dtype'"). :func:`interpreting` snapshots these
# objects on entry and puts back every attribute on exit.
# Which classes it patches moves between Triton releases (3.9 added ``condition.__bool__``), so
# every class that ``triton.language.core`` defines is snapshotted, not a list of today's.
def _patched_by_interpreter() -> tuple[object, ...]:
    classes = [v for v in vars(tl.core).values() if isinstance(v, type) and v.__module__.startswith("triton.language")]
    return tuple(dict.fromkeys([tl, tl.core, tl.math, *classes]))


_PATCHED_BY_INTERPRETER = _patched_by_interpreter()


def _snapshot() -> list[tuple[object, dict]]:
    return [(obj, dict(vars(obj))) for obj in _PATCHED_BY_INTERPRETER]


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
    kernels still build in the same process.

    The package's own patches (``JITFunction.__call__``; in the interpreter the fp32 -> bf16
    cast, bf16 arithmetic, the fp32 -> e4m3 conversion and ``libdevice.exp``) are installed by
    the outermost block and removed when it ends. The outermost block holds a process-wide lock,
    so interpreted launches of different threads run one at a time;
    a compiled-kernel call from another thread meanwhile sees Triton's behaviour (the patched
    ``__call__`` defers to the original outside an interpreted run of its own thread)."""
    depth = getattr(_state, "depth", 0)
    if depth == 0:
        _lock.acquire()
        try:
            snapshot = _snapshot()
            patches = _apply_scoped_patches()
        except BaseException:
            _lock.release()
            raise
    _state.depth = depth + 1
    try:
        yield
    finally:
        _state.depth = depth
        if depth == 0:
            try:
                _undo_scoped_patches(patches)
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


#: Compile options every launch of the package passes explicitly, so no Triton default can move a
#: bit: FP fusion (the compiler contracting ``a * b + c`` into one fma, LLVM and ptxas alike) stays
#: on, the value every published result was made with. Triton 3.9 warns that its default turns to
#: off in 3.10 (``TRITON_DEFAULT_FP_FUSION``); an explicit option is not subject to that default.
#: The interpreter ignores the option (it runs the source lines in numpy).
COMPILE_OPTIONS = {"enable_fp_fusion": True}

#: element offsets at or past this need the kernels' int64 index arithmetic (their ``INT64`` switch)
INT32_LIMIT = 2**31


def kernel_constexprs(kernel) -> tuple[str, ...]:
    """The names of ``kernel``'s ``tl.constexpr`` parameters, in order, from its Python signature:
    the same for a ``JITFunction`` and for the ``InterpretedFunction`` that ``@triton.jit``
    returns under ``TRITON_INTERPRET=1``."""
    fn = kernel.fn
    hints = inspect.get_annotations(fn)
    return tuple(name for name in inspect.signature(fn).parameters if _is_constexpr(hints.get(name)))


def _is_constexpr(hint) -> bool:
    # a class, or its name as a string under ``from __future__ import annotations``
    return hint is tl.constexpr or (isinstance(hint, str) and hint.rsplit(".", 1)[-1] == "constexpr")


def launch(kernel, grid, device: torch.device, *args, **kwargs):
    """``kernel[grid](*args, **kwargs, **COMPILE_OPTIONS)``, compiled for CUDA tensors,
    interpreted for CPU ones."""
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"unsupported device {device}: expected a CUDA or CPU tensor")
    kwargs = {**COMPILE_OPTIONS, **kwargs}
    if not uses_interpreter(device):
        return kernel[grid](*args, **kwargs)
    if isinstance(kernel, JITFunction):
        kernel = _as_interpreted(kernel)
    with interpreting():
        return kernel[grid](*args, **kwargs)


# ---- CUDA: PDL default and the thin launch path -----------------------------------------------

_CAPABILITY: dict[int, tuple[int, int]] = {}


def capability(index: int) -> tuple[int, int]:
    """The compute capability of CUDA device ``index``, read once and cached."""
    cap = _CAPABILITY.get(index)
    if cap is None:
        cap = _CAPABILITY[index] = torch.cuda.get_device_capability(index)
    return cap


_SM_COUNT: dict[int, int] = {}


def sm_count(index: int) -> int:
    """The streaming multiprocessors of CUDA device ``index``, read once and cached."""
    n = _SM_COUNT.get(index)
    if n is None:
        n = _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return n


def cuda_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def pdl_default(device: torch.device) -> bool:
    """Whether ``enable_pdl=None`` turns programmatic dependent launch on for tensors on
    ``device``: CUDA tensors on compute capability >= 9.0 (Hopper and newer), compiled (not
    interpreted). The capability is read once per device and cached."""
    if uses_interpreter(device):
        return False
    return capability(cuda_index(device)) >= (9, 0)


def pdl_default_index(index: int) -> bool:
    """:func:`pdl_default` for a CUDA device index (compiled launches only)."""
    return capability(index) >= (9, 0)


def interpret_env() -> bool:
    """``TRITON_INTERPRET=1``: the user forces the interpreter for CUDA tensors too."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def resolve_pdl(enable_pdl, device: torch.device) -> bool:
    """``enable_pdl`` as given (a bool) or its default (:func:`pdl_default`); never on under the
    interpreter, which has no grid dependency control."""
    if enable_pdl is None:
        return pdl_default(device)
    if not isinstance(enable_pdl, bool):
        raise TypeError(f"enable_pdl must be a bool or None, got {type(enable_pdl).__name__}")
    return enable_pdl and not uses_interpreter(device)


_I32_MIN, _I32_MAX, _I64_MAX = -(2**31), 2**31 - 1, 2**63 - 1


def arg_spec(value, specialize: bool = True):
    """What Triton's ``specialize_impl`` keeps of a runtime argument, as a small hashable value:
    for a tensor its dtype and whether its address is 16-byte aligned; for an int its width class
    (i32, i64, u64) and, unless the parameter is in ``do_not_specialize``, whether it equals 1
    (Triton turns it into a constant) or is divisible by 16. ``tests/test_ops.py`` checks that
    equal specs imply equal Triton specializations over many values."""
    if isinstance(value, torch.Tensor):
        return value.dtype, value.data_ptr() & 15 == 0
    if value.__class__ is int:
        width = 0 if _I32_MIN <= value <= _I32_MAX else (1 if value <= _I64_MAX and value >= -(2**63) else 2)
        if not specialize:
            return width
        return width, value == 1, value & 15 == 0
    raise TypeError(f"unsupported kernel argument {value!r}")


class CudaLauncher:
    """Launches one ``@triton.jit`` kernel on CUDA tensors, compiled once per launch key and
    afterwards straight through the compiled kernel's C launcher (no re-binding of arguments,
    no specialization of every argument by Triton's ``JITFunction.run``).

    The caller passes ``key``, which must determine everything Triton specializes on: the
    constexpr values, the launch options (``num_warps``, ``launch_pdl``), and :func:`arg_spec` of
    every runtime argument (dtypes, 16-byte alignment of pointers, int width and the ==1 / %16
    properties of specialized ints). ``args`` are all of the kernel's parameters in order
    (constexprs included, as Triton's own launcher passes them). The first launch of a key goes
    through ``kernel[grid](...)``, which compiles (or loads from Triton's cache) and runs; its
    ``CompiledKernel`` is kept. When a Triton launch hook is installed (a profiler), every
    launch goes through ``kernel[grid]`` so the hooks see it. The grid is ``(grid0, grid1)``.
    """

    def __init__(self, kernel: JITFunction, constexpr_names: tuple[str, ...]):
        self.kernel = kernel
        names = kernel.arg_names
        self.n_runtime = len(names) - len(constexpr_names)
        assert tuple(names[self.n_runtime :]) == tuple(constexpr_names), "constexprs must come last, in order"
        self.constexpr_names = constexpr_names
        self._cache: dict = {}
        self._lock = threading.Lock()

    def __call__(
        self, key, grid0: int, device_index: int, args: tuple, num_warps: int, launch_pdl: bool, grid1: int = 1
    ):
        entry = self._cache.get(key)
        if entry is not None and _no_launch_hooks() and _get_device() == device_index:
            launch, function, packed_metadata, coop = entry
            stream = _get_raw_stream(device_index)
            launch(
                grid0, grid1, 1, stream, function, coop, launch_pdl,
                None, None, packed_metadata, None, None, None, *args,
            )  # fmt: skip
            return
        self._first_launch(key, grid0, grid1, device_index, args, num_warps, launch_pdl)

    def _first_launch(self, key, grid0, grid1, device_index, args, num_warps, launch_pdl):
        n = self.n_runtime
        constexprs = dict(zip(self.constexpr_names, args[n:]))
        with torch.cuda.device(device_index):
            compiled = self.kernel[(grid0, grid1)](
                *args[:n], **constexprs, num_warps=num_warps, launch_pdl=launch_pdl, **COMPILE_OPTIONS
            )
            launcher = compiled.run  # loads the module on this device
        if not _no_launch_hooks():
            return
        if device_index != torch.cuda.current_device():
            return  # the fast path launches on the current device, as Triton does: keep the slow path
        if launcher.global_scratch_size or launcher.profile_scratch_size or launcher.num_ctas != 1:
            return  # needs Triton's scratch allocation: keep the slow path for this key
        if bool(launcher.launch_pdl) != launch_pdl:
            raise RuntimeError("launch_pdl did not reach the compiled kernel's metadata")
        with self._lock:
            coop = launcher.launch_cooperative_grid
            self._cache[key] = (launcher.launch, compiled.function, compiled.packed_metadata, coop)

    def launch_cached(self, key, grid0: int, device_index: int, args: tuple, launch_pdl: bool, grid1: int = 1) -> bool:
        """The launch of ``__call__`` for a key already compiled and cached, else nothing: True
        once launched; False (nothing launched, nothing compiled) when ``key`` has no cached
        launcher, a launch hook is set or ``device_index`` is not the current device. Its
        ``args`` reach only the C launcher, which reads a tensor's ``data_ptr()``: a caller may
        pass a tensor of another dtype at the same address than the one the key was compiled for."""
        entry = self._cache.get(key)
        if entry is None or not _no_launch_hooks() or _get_device() != device_index:
            return False
        launch, function, packed_metadata, coop = entry
        launch(
            grid0, grid1, 1, _get_raw_stream(device_index), function, coop, launch_pdl,
            None, None, packed_metadata, None, None, None, *args,
        )  # fmt: skip
        return True

    def cached_keys(self) -> list:
        return list(self._cache)


def _no_launch_hooks() -> bool:
    """No launch enter/exit hook is installed (Triton 3.6 keeps an empty ``HookChain`` there by
    default; a profiler adds to it or replaces it)."""
    runtime = knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and (hook.__class__ is not _HookChain or hook.calls):
            return False
    return True


_HookChain = getattr(knobs, "HookChain", type(None))


def _get_raw_stream(device_index: int) -> int:
    return torch._C._cuda_getCurrentRawStream(device_index)


def _get_device() -> int:
    return torch._C._cuda_getDevice()
