"""Cases and their inputs: :class:`Case`, the value classes, layouts, :func:`matrix`, digests.

A case is one input configuration: ``make(seed, device) -> (args, kwargs)``, or fields that
describe the inputs (``shapes``, ``dtype``, ``value_class``, ``stride``, ``kwargs``), each input
with its own dtype and value class when those are tuples. The same seed gives the same tensors in
every process. :func:`matrix` builds the product of shapes x dtypes x value classes x strides x
keyword variants x seeds; a case's name says what it is (never its position in the matrix), and its
seed is drawn from its name, so adding or removing entries renames no other case.
"""

from __future__ import annotations

import dataclasses
import hashlib
import zlib
from collections.abc import Callable, Iterable

import torch

VALUE_CLASSES = ("random", "edges", "nan_inf", "subnormal", "ties")
STRIDES = ("contiguous", "row_padded")
ROW_PAD = 16
INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_MANTISSA = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}  # the classes built from bits


def _per_input(value, n: int, what: str) -> tuple:
    """``value`` for each of ``n`` inputs: a tuple of ``n`` entries as given, one entry for all."""
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ValueError(f"{what} gives {len(value)} entries for {n} inputs")
        return tuple(value)
    return (value,) * n


def _label(value) -> str:
    """``bfloat16`` for a dtype, ``bfloat16+float32`` for one dtype per input (value classes alike)."""
    if isinstance(value, (tuple, list)):
        return "+".join(_label(v) for v in value)
    return str(value).removeprefix("torch.")


@dataclasses.dataclass
class Case:
    """One input configuration. Either ``make(seed, device) -> (args, kwargs)`` or the fields
    ``shapes``/``dtype``/``value_class``/``stride``/``kwargs`` describe the inputs (``dtype`` and
    ``value_class`` may be tuples: one entry per input); ``out`` (optional) allocates output
    buffers ``(args, kwargs) -> tensor or tuple`` for ``out=``; ``meta`` (optional): fields of your
    own, copied into the case's row (``row["meta"]``)."""

    name: str
    make: Callable[[int, torch.device], tuple[tuple, dict]] | None = None
    shapes: tuple = ()
    dtype: torch.dtype | tuple = torch.bfloat16
    value_class: str | tuple = "random"
    stride: str = "contiguous"
    seed: int = 0
    kwargs: dict = dataclasses.field(default_factory=dict)
    out: Callable[[tuple, dict], object] | None = None
    meta: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Case.name must be a non-empty string, got {self.name!r}")
        if self.make is not None and not callable(self.make):
            raise TypeError(f"Case.make must be callable, got {type(self.make).__name__}")
        if self.make is None and not self.shapes:
            raise ValueError(f"case {self.name!r}: give either make or shapes")
        for vc in self.value_class if isinstance(self.value_class, (tuple, list)) else (self.value_class,):
            if vc not in VALUE_CLASSES:
                raise ValueError(f"Case.value_class must be one of {VALUE_CLASSES}, got {vc!r}")
        for dt in self.dtype if isinstance(self.dtype, (tuple, list)) else (self.dtype,):
            if not isinstance(dt, torch.dtype):
                raise TypeError(f"Case.dtype must be a torch dtype or a tuple of them, got {dt!r}")
        if self.stride not in STRIDES:
            raise ValueError(f"Case.stride must be one of {STRIDES}, got {self.stride!r}")
        if not isinstance(self.meta, dict):
            raise TypeError(f"Case.meta must be a dict, got {type(self.meta).__name__}")
        if self.make is None:
            n = len(self.input_shapes())
            _per_input(self.dtype, n, f"case {self.name!r}: dtype")
            _per_input(self.value_class, n, f"case {self.name!r}: value_class")

    def input_shapes(self) -> tuple:
        return tuple(self.shapes) if isinstance(self.shapes[0], (tuple, list)) else (tuple(self.shapes),)

    @property
    def dtype_label(self) -> str:
        return _label(self.dtype)

    @property
    def value_class_label(self) -> str:
        return _label(self.value_class)

    def build(self, device: torch.device | str = "cpu") -> tuple[tuple, dict]:
        """The case's inputs on ``device``: the same values on every call and in every process."""
        device = torch.device(device)
        if self.make is not None:
            args, kwargs = self.make(self.seed, device)
            return tuple(args), dict(kwargs)
        shapes = self.input_shapes()
        dtypes = _per_input(self.dtype, len(shapes), "dtype")
        classes = _per_input(self.value_class, len(shapes), "value_class")
        args = tuple(
            laid_out(values(tuple(s), dtypes[i], classes[i], self.seed * 1009 + i), self.stride, device)
            for i, s in enumerate(shapes)
        )
        return args, dict(self.kwargs)


def values(shape: tuple, dtype: torch.dtype, value_class: str = "random", seed: int = 0) -> torch.Tensor:
    """A CPU tensor of ``value_class`` values, the same for a seed in every process: its own
    generator, special values at unique positions (``randperm``; an index assignment with repeated
    positions is nondeterministic in torch). All classes start from fresh ``randn * 3`` values:

    * ``random``: the normal values alone.
    * ``edges``: 1/8 of the elements set to 0, -0, +-max finite, +-min normal, +-1e4 and +-30.
    * ``nan_inf``: 1/16 of the elements NaN, +Inf or -Inf (at least one NaN).
    * ``subnormal``: 1/4 of the elements subnormal in the dtype (random sign and mantissa).
    * ``ties``: half the elements rounding ties: for fp32 and fp16, values exactly halfway between
      two adjacent bf16 values; for bf16 (which cannot hold a bf16 tie) values halfway between two
      adjacent fp8 e4m3 values.

    Integer dtypes get the normal values rounded and clamped to [-100, 100], whatever the class."""
    if value_class not in VALUE_CLASSES:
        raise ValueError(f"value_class must be one of {VALUE_CLASSES}, got {value_class!r}")
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=gen, dtype=torch.float64) * 3
    if not dtype.is_floating_point:
        return base.round().clamp(-100, 100).to(dtype)
    x = base.to(dtype)
    n = x.numel()
    if value_class == "random" or n == 0:
        return x
    if value_class in ("subnormal", "ties") and dtype not in _MANTISSA:
        raise ValueError(f"value class {value_class!r} is built for bfloat16, float16 and float32, not {dtype}")
    fraction = {"edges": 8, "nan_inf": 16, "subnormal": 4, "ties": 2}[value_class]
    picks = torch.randperm(n, generator=gen)[: max(1, n // fraction)]
    flat = x.view(-1)
    fi = torch.finfo(dtype)
    if value_class == "edges":
        edge = [0.0, -0.0, fi.max, -fi.max, fi.tiny, -fi.tiny, 1e4, -1e4, 30.0, -30.0]
        flat[picks] = torch.tensor(edge, dtype=torch.float64).to(dtype)[torch.arange(picks.numel()) % len(edge)]
    elif value_class == "nan_inf":
        special = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)
        flat[picks] = special[torch.arange(picks.numel()) % 3]
    else:
        flat[picks] = _special_bits(value_class, dtype, picks.numel(), gen)
    return x


def _special_bits(value_class: str, dtype: torch.dtype, k: int, gen: torch.Generator) -> torch.Tensor:
    """``k`` subnormals or ties of ``dtype``, built from their bit patterns."""
    width = torch.finfo(dtype).bits
    mant = _MANTISSA[dtype]
    sign = torch.randint(0, 2, (k,), generator=gen, dtype=torch.int64) << (width - 1)
    if value_class == "subnormal":
        bits = sign | torch.randint(1, 2**mant, (k,), generator=gen, dtype=torch.int64)
    else:
        # the dropped bits of the narrower format are 100...0: exactly halfway between two of its values
        dropped = mant - (7 if dtype != torch.bfloat16 else 3)
        # exponents well inside the normal range of both formats (2**-6 .. 2**5)
        bias = 2 ** (width - mant - 2) - 1
        exp = torch.randint(bias - 6, bias + 6, (k,), generator=gen, dtype=torch.int64) << mant
        kept = torch.randint(0, 2 ** (mant - dropped), (k,), generator=gen, dtype=torch.int64) << dropped
        bits = sign | exp | kept | (1 << (dropped - 1))
    # two's complement of the int dtype of this width
    bits = torch.where(bits >= 2 ** (width - 1), bits - 2**width, bits)
    return bits.to(INT_OF_WIDTH[width // 8]).view(dtype)


def laid_out(t: torch.Tensor, stride: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """``t`` on ``device`` with the layout ``stride`` names: ``contiguous``, or ``row_padded`` (rows
    of a wider NaN-filled buffer, 16 spare elements a row; tensors of fewer than 2 dims stay
    contiguous). The buffer is allocated on ``device``: ``.to(device)`` of a padded view would
    copy it to contiguous rows."""
    if stride == "contiguous" or t.dim() < 2:
        return t.contiguous().to(device)
    if stride != "row_padded":
        raise ValueError(f"stride must be one of {STRIDES}, got {stride!r}")
    fill = float("nan") if t.dtype.is_floating_point else 0
    wide = torch.full((*t.shape[:-1], t.shape[-1] + ROW_PAD), fill, dtype=t.dtype, device=device)
    view = wide[..., : t.shape[-1]]
    view.copy_(t)
    return view


def name_seed(name: str) -> int:
    """The seed :func:`matrix` gives the case called ``name``: its CRC-32, the same in every
    process and whatever else the matrix holds."""
    return zlib.crc32(name.encode())


def matrix(
    shapes: Iterable,
    dtypes: Iterable = (torch.bfloat16,),
    value_classes: Iterable = VALUE_CLASSES,
    strides: Iterable[str] = STRIDES,
    kwargs: Iterable[dict] = ({},),
    seeds: Iterable[int] = (0,),
    out: Callable[[tuple, dict], object] | None = None,
    prefix: str = "",
) -> list[Case]:
    """The product shapes x dtypes x value_classes x strides x kwargs x seeds as cases.

    A shape entry is one shape (one input tensor) or a tuple of shapes (one tensor each). A dtype
    or value-class entry is one value for every input, or a tuple with one per input (e.g.
    ``dtypes=[(torch.bfloat16, torch.float32)]``, ``value_classes=[("nan_inf", "random")]`` for
    data with NaNs and finite weights). ``kwargs``: keyword variants passed to both callables.
    ``out``: see :class:`Case`. The name is ``[prefix]SHAPE DTYPE CLASS STRIDE [k=v ...] seed=S``
    (``S`` the entry of ``seeds``) and the case's seed is :func:`name_seed` of it: a case keeps its
    name and its values when the matrix around it changes."""
    shapes, dtypes, value_classes = list(shapes), list(dtypes), list(value_classes)
    strides, kwargs, seeds = list(strides), list(kwargs), list(seeds)
    for arg, items in (("shapes", shapes), ("dtypes", dtypes), ("value_classes", value_classes)):
        if not items:
            raise ValueError(f"{arg} must not be empty")
    for arg, items in (("strides", strides), ("kwargs", kwargs), ("seeds", seeds)):
        if not items:
            raise ValueError(f"{arg} must not be empty")
    for dtype in dtypes:
        for dt in dtype if isinstance(dtype, (tuple, list)) else (dtype,):
            if not isinstance(dt, torch.dtype):
                raise TypeError(f"dtypes must hold torch dtypes (or tuples of them), got {dt!r}")
    cases, seen = [], set()
    for shape in shapes:
        for dtype in dtypes:
            for vc in value_classes:
                for stride in strides:
                    for kw in kwargs:
                        for seed in seeds:
                            label = " ".join(f"{k}={_label(v)}" for k, v in kw.items())
                            name = f"{prefix}{_shape_label(shape)} {_label(dtype)} {_label(vc)} {stride}"
                            name += f"{' ' + label if label else ''} seed={seed}"
                            if name in seen:
                                raise ValueError(f"matrix: two cases named {name!r} (a repeated entry?)")
                            seen.add(name)
                            cases.append(
                                Case(
                                    name,
                                    shapes=tuple(shape),
                                    dtype=tuple(dtype) if isinstance(dtype, list) else dtype,
                                    value_class=tuple(vc) if isinstance(vc, list) else vc,
                                    stride=stride,
                                    seed=name_seed(name),
                                    kwargs=dict(kw),
                                    out=out,
                                )
                            )
    return cases


def _shape_label(shape) -> str:
    if shape and isinstance(shape[0], (tuple, list)):
        return "+".join("x".join(map(str, s)) for s in shape)
    return "x".join(map(str, shape))


# ---- digests of inputs -----------------------------------------------------------------------


def tensor_digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's raw bytes (logical elements, row-major), 16 hex digits."""
    raw = t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()[:16]


def digest(obj) -> str:
    """sha256 (16 hex digits) over the shapes, dtypes and raw bytes of every tensor in ``obj``
    (args, kwargs), and the repr of everything else. A CUDA tensor's bytes enter through
    :func:`fingerprint`, computed where the tensor is (copying gigabytes of inputs to the host
    for every call would take seconds a call)."""
    h = hashlib.sha256()
    for t in _flatten(obj):
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            h.update(f"{tuple(t.shape)} {t.dtype} fingerprint {fingerprint(t)}".encode())
        elif isinstance(t, torch.Tensor):
            h.update(f"{tuple(t.shape)} {t.dtype} {tensor_digest(t)}".encode())
        else:
            h.update(repr(t).encode())
    return h.hexdigest()[:16]


_FP_CHUNK = 2**24  # bytes a chunk: 255 * (2**24 - 1) * 2**24 < 2**63, so no sum overflows


def fingerprint(t: torch.Tensor) -> str:
    """A position-sensitive checksum of ``t``'s raw bytes (logical elements, row-major), computed
    on ``t``'s device: for every chunk of 2**24 bytes, the sum of the bytes and two sums of the
    bytes weighted by position (a multiplicative hash and the square of the position, each
    modulo a prime below 2**24), in int64 without overflow; sha256 of those sums. Any accidental
    difference between two builds (another draw, one flipped bit, two swapped bytes) changes it;
    it is not meant to resist a deliberate collision. The same for a tensor on every device."""
    raw = t.detach().contiguous().view(-1).view(torch.uint8)
    n = raw.numel()
    pos = torch.arange(min(n, _FP_CHUNK), device=raw.device, dtype=torch.int64)
    w1 = (pos * 2654435761) % 16777213
    w2 = (pos * pos) % 16777199
    sums = []
    for start in range(0, n, _FP_CHUNK):
        b = raw[start : start + _FP_CHUNK].to(torch.int64)
        k = b.numel()
        sums.append(torch.stack((b.sum(), (b * w1[:k]).sum(), (b * w2[:k]).sum())))
    vals = torch.stack(sums).cpu().tolist() if sums else []
    return hashlib.sha256(repr((n, vals)).encode()).hexdigest()[:16]


def _flatten(obj):
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            yield k
            yield from _flatten(obj[k])
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _flatten(v)
    else:
        yield obj
