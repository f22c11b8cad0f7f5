"""The silu_and_mul sweep (``python -m inkling_workbook bench``): the shapes, every implementation
and baseline of a shape (the torch.compile columns compiled fresh per shape, in default and
max-autotune-no-cudagraphs modes: :mod:`inkling_workbook.measure.compile_baselines`), the tile
sweep (tuning evidence), and the driver that writes the records, in two parts the GPU job runs
as two steps (:data:`PARTS`). Every timing is taken by the method of
:mod:`inkling_workbook.measure.timing`; the NVFP4 part is
:mod:`inkling_workbook.measure.nvfp4_sweep`, the FP8 part :mod:`inkling_workbook.measure.fp8_sweep`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from inkling_kernels.reference import silu_and_mul_ref
from inkling_kernels.silu_and_mul import LaunchConfig, launch_config, silu_and_mul
from inkling_workbook.measure import anchors, compile_baselines, nvfp4_sweep, pairing, provenance, timing
from inkling_workbook.measure.fp8_sweep import run_fp8
from inkling_workbook.measure.nvfp4_sweep import NVFP4_EAGER_MAX_M, NVFP4_IMPLS, bench_nvfp4  # noqa: F401 (moved there)
from inkling_workbook.measure.pairing import Column
from inkling_workbook.measure.timing import (
    COLD_FACTOR,
    DECODE_MAX_M,
    DECODE_PASSES,
    OTHER_PASSES,
    GraphTimer,
    Timing,
    cold_feasible,
    empty_kernel_us,
    graph_time,
    l2_bytes,
    n_buffer_sets,
    require_gpu,
    stream_ceiling,
    time_calls,
    time_interleaved,
    timing_meta,
    warm_clocks,
    write_csv,
)
from inkling_workbook.ports.silu_and_mul import helion_original

# ---- the silu_and_mul sweep ------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    M: int
    N: int
    interleaved: bool
    weighted: bool
    group: str

    @property
    def label(self) -> str:
        return f"M={self.M} N={self.N} {'il' if self.interleaved else 'nil'}{' +w' if self.weighted else ''}"


SOURCE_TABLE = [
    Shape(6, 1024, True, False, "source"),
    Shape(96, 1536, True, False, "source"),
    Shape(384, 1024, True, True, "source"),
    Shape(49152, 768, True, False, "source"),
    Shape(49152, 3072, True, False, "source"),
    Shape(6144, 768, False, True, "source"),
    Shape(49152, 768, False, True, "source"),
    Shape(49152, 3072, False, False, "source"),
]
#: sizes that leave masked tails: N not a multiple of 256 (2880: gpt-oss's expert width; 1408:
#: DeepSeek-V2-Lite's, neither in helion's sm_90 table, so helion runs its fixed tile only) and
#: M not a multiple of any tile
RAGGED = [
    Shape(4, 2880, True, False, "ragged"),
    Shape(333, 2880, False, False, "ragged"),
    Shape(4097, 2880, True, True, "ragged"),
    Shape(4097, 1408, False, False, "ragged"),
    Shape(4097, 1536, True, False, "ragged"),
    Shape(12289, 768, False, False, "ragged"),
]
SWEEP_N = (768, 1536, 3072)
DECODE_M = (1, 4, 8, 16)
PREFILL_M = (1536, 4096, 16384, 49152)


def shapes(quick: bool = False) -> list[Shape]:
    out = list(SOURCE_TABLE)
    # quick: a subset of the full sweep (notebook 06 compares the two timing by timing)
    decode_m, prefill_m, ns = ((1, 16), (4096,), (768, 3072)) if quick else (DECODE_M, PREFILL_M, SWEEP_N)
    for il in (True, False):
        out += [Shape(m, n, il, False, "decode") for m in decode_m for n in ns]
        out += [Shape(m, n, il, False, "prefill") for m in prefill_m for n in ns]
    if not quick:
        out += RAGGED
    seen, unique = set(), []
    for s in out:
        key = (s.M, s.N, s.interleaved, s.weighted)
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return unique


def silu_bytes(M: int, N: int, weighted: bool, elt: int = 2) -> int:
    return M * (2 * N * elt + N * elt) + (M * 4 if weighted else 0)


# torch.compile baselines: compiled fresh per shape (compile_baselines), each column from a
# function of its own (dynamo keeps its compiled code per code object): static, M dynamic (as a
# server with a fixed model width compiles it), static in max-autotune-no-cudagraphs on
# MAX_AUTOTUNE_SHAPES.
def _ref_for_static_compile(x, w, interleaved: bool):
    return silu_and_mul_ref(x, w, interleaved=interleaved)


def _ref_for_dynamic_m_compile(x, w, interleaved: bool):
    return silu_and_mul_ref(x, w, interleaved=interleaved)


#: the shapes (M, N, interleaved, weighted) that also get torch.compile in
#: max-autotune-no-cudagraphs (15-40 s of compile each): the README's three headline shapes (not
#: 96 x 1536 il, where a fresh default compile beats the port: experiment E found max-autotune
#: slower than default there, 1.65 against 1.29 us, and the bench step has no 40 s to spare)
MAX_AUTOTUNE_SHAPES = ((6, 1024, True, False), (384, 1024, True, True), (49152, 3072, False, False))
COMPILE_KEYS = tuple(pairing.SILU_COMPILE_COLUMNS)


def _shape_key(shape: Shape) -> tuple:
    return (shape.M, shape.N, shape.interleaved, shape.weighted)


def compile_implementations(shape: Shape, keys=COMPILE_KEYS, info: dict | None = None) -> dict:
    """The compile columns of ``shape`` among ``keys``, each compiled fresh for it
    (:mod:`compile_baselines`: one :func:`~compile_baselines.new_state` for the shape, a new
    compile object and empty inductor caches per column; max-autotune only on
    :data:`MAX_AUTOTUNE_SHAPES`): name -> (fn(x, w) -> out, configuration). ``info`` gets what
    each compile took and the configs inductor picked."""
    il = shape.interleaved
    if "compile_static_max_autotune" in keys and (
        _shape_key(shape) not in MAX_AUTOTUNE_SHAPES or not compile_baselines.max_autotune_allowed(shape.label)
    ):
        keys = [k for k in keys if k != "compile_static_max_autotune"]
    if _shape_key(shape) not in MAX_AUTOTUNE_SHAPES or compile_baselines.past_budget():
        keys = [k for k in keys if k != "compile_static_pdl"]  # torch.compile with PDL: the headline shapes only
    if not keys:
        return {}
    compile_baselines.new_state()
    (x, w), out = _buffers(shape, 1)[0], {}
    if "compile_static" in keys:
        c = compile_baselines.compile_fresh(_ref_for_static_compile, [((x, w, il), ())])
        out["compile_static"] = (lambda x, w, f=c.fn: f(x, w, il), c)
    if "compile_static_max_autotune" in keys:
        c = compile_baselines.compile_fresh(_ref_for_static_compile, [((x, w, il), ())], mode="max_autotune")
        out["compile_static_max_autotune"] = (lambda x, w, f=c.fn: f(x, w, il), c)
    if "compile_static_pdl" in keys:
        c = compile_baselines.compile_fresh(_ref_for_static_compile, [((x, w, il), ())], pdl=True)
        out["compile_static_pdl"] = (lambda x, w, f=c.fn: f(x, w, il), c)
    # last: its first calls mark the tensors they are given dynamic, and the timed calls mark the
    # sweep's buffers (the static columns are warmed up and captured before, in dict order)
    if "compile_dynamic_m" in keys:
        # compiled at a large M first, as a server compiles at its largest batch: inductor picks
        # tiles from the size hint of the first input (M = 1 is specialized by torch's 0/1 rule
        # whatever is marked, so it gets its own static graph, compiled here too)
        M = DYNAMIC_M_COMPILE_AT
        xb = torch.randn((M, 2 * shape.N), device=x.device, dtype=torch.bfloat16)
        wb = torch.rand(M, device=x.device) if shape.weighted else None

        def marked(a, b):
            for t in (a, b):
                if t is not None:
                    torch._dynamo.mark_dynamic(t, 0)
            return (a, b, il)

        first = [(marked(xb, wb), ()), (marked(x, w), ())]
        c = compile_baselines.compile_fresh(_ref_for_dynamic_m_compile, first, dynamic=None)

        def dyn(x, w, f=c.fn):
            return f(*marked(x, w))

        out["compile_dynamic_m"] = (dyn, c)
    if info is not None:
        info.update({k: c.summary() for k, (_, c) in out.items()})
    return {k: (fn, COLUMNS[k].config) for k, (fn, _c) in out.items()}


#: The implementations timed on every shape, in table order, and how each is configured.
IMPLS = {
    "triton": "the Triton port, launch_config heuristic, PDL off",
    "triton_pdl": "the Triton port, launch_config heuristic, PDL on (wait before the first load)",
    "helion_sm90": "helion 1.4.0 original, the production sm_90 table (interleaved table; non-interleaved uses it too)",
    "helion_fixed": "helion 1.4.0 original, the fixed 1x256 tile with 4 warps this workbook used before",
    "compile_static": "torch.compile(dynamic=False) of silu_and_mul_ref, mode default, compiled fresh per shape",
    "compile_dynamic_m": "torch.compile of silu_and_mul_ref with M marked dynamic, compiled fresh per shape at "
    "M = 8192 (one graph per N, layout, weights, as a server compiles it)",
    "compile_static_max_autotune": "torch.compile(dynamic=False, mode='max-autotune-no-cudagraphs') of "
    "silu_and_mul_ref, compiled fresh per shape; on MAX_AUTOTUNE_SHAPES only",
    "compile_static_pdl": "torch.compile(dynamic=False) of silu_and_mul_ref with inductor's triton.enable_pdl on, "
    "compiled fresh per shape; on MAX_AUTOTUNE_SHAPES only (paired with the port with PDL)",
    "torch_eager": "torch eager silu_and_mul_ref (fp32 math, several kernels)",
}
BASELINES = ("helion_sm90", "helion_fixed", *pairing.SILU_COMPILE_COLUMNS, "torch_eager")
IMPLS.update({k: c.label for k, c in pairing.SILU_ANCHOR_COLUMNS.items()})
#: the anchors, timed beside the others where fetched and where they support the shape
ANCHOR_KEYS = tuple(pairing.SILU_ANCHOR_COLUMNS)


def _torch_version() -> str:
    return torch.__version__.split("+")[0]


#: every column of the sweep as :mod:`~inkling_workbook.measure.pairing` reads it (the rule pairs
#: the baselines with "triton_pdl" or "triton" by their PDL state)
_PORT = "the port, launch_config heuristic"
#: helion 1.4.0's Triton backend has no PDL launch (its PDL is in the CuTe matmul path), so the
#: helion columns run without PDL as helion launches them; the torch.compile columns run
#: inductor's default, PDL off (:data:`pairing.INDUCTOR_PDL`), but ``compile_static_pdl``, compiled
#: with inductor's PDL on and paired with the port with PDL
COLUMNS: dict[str, Column] = {
    "triton": Column("triton", "inkling", "", "silu_and_mul", _PORT, False, "port"),
    "triton_pdl": Column("triton_pdl", "inkling", "", "silu_and_mul", _PORT, True, "port"),
    "helion_sm90": Column("helion_sm90", "helion", "1.4.0", "silu_and_mul original", "production sm_90 table",
                          False, "baseline"),
    "helion_fixed": Column("helion_fixed", "helion", "1.4.0", "silu_and_mul original", "fixed 1x256 tile, 4 warps",
                           False, "baseline"),
    **pairing.SILU_COMPILE_COLUMNS,
    "torch_eager": Column("torch_eager", "torch", _torch_version(), "silu_and_mul_ref", "eager, fp32 math", False,
                          "baseline"),
    **pairing.SILU_ANCHOR_COLUMNS,
}  # fmt: skip


DYNAMIC_M_COMPILE_AT = 8192


def anchor_implementations(shape: Shape, columns: dict[str, Column], device="cuda", skipped: dict | None = None):
    """The anchors of ``columns`` that run ``shape``: name -> (fn(x, w) -> out, configuration);
    each one that does not goes into ``skipped`` (name -> the reason), never silently."""
    fns = {a.key: a.fn for a in anchors.anchors()}
    il, out = shape.interleaved, {}
    for key, col in columns.items():
        if col.anchor is None:
            continue
        reason = pairing.anchor_available(col, interleaved=il, device=device)
        if reason is not None:
            if skipped is not None:
                skipped[key] = reason
            continue
        fn = fns[col.anchor]
        out[key] = (lambda x, w, fn=fn: fn(x, w, interleaved=il), col.label)
    return out


def check_anchor_bits(shape: Shape, impls: dict, x, w) -> dict[str, bool]:
    """Every implementation of ``impls`` but the port itself against the port on the timed inputs,
    before timing: raw bits equal. The port with PDL, helion and the merged port write ours bit for
    bit; torch.compile and eager need not (their rows record it either way, ``bits_equal_port``)."""
    want = silu_and_mul(x, w, interleaved=shape.interleaved)
    out = {}
    for key in impls:
        if key != "triton":
            # on copies: the M-dynamic column marks the tensors it is given dynamic, and a static
            # column later given a marked buffer would compile again (an M-dynamic graph, outside
            # its fresh cache, and without the settings it was compiled under)
            got = impls[key][0](x.clone(), None if w is None else w.clone())
            out[key] = got.shape == want.shape and torch.equal(got.view(torch.int16), want.view(torch.int16))
    return out


def implementations(
    shape: Shape, skipped: dict | None = None, keys=None, compile_info: dict | None = None
) -> dict[str, tuple[Callable, str]]:
    """name -> (fn(x, w) -> out, the configuration in words for this shape). The compile columns
    are compiled fresh for the shape (:func:`compile_implementations`; only those among ``keys``,
    all by default; what each took into ``compile_info``). The anchors come last
    (:func:`anchor_implementations`); those skipped on this shape go into ``skipped``."""
    il = shape.interleaved
    cfg = launch_config(shape.M, shape.N)
    tile = f"{cfg.BLOCK_M}x{cfg.BLOCK_N}/{cfg.num_warps}w"
    impls: dict[str, tuple[Callable, str]] = {
        "triton": (lambda x, w: silu_and_mul(x, w, interleaved=il, enable_pdl=False), f"port {tile}, PDL off"),
        "triton_pdl": (lambda x, w: silu_and_mul(x, w, interleaved=il, enable_pdl=True), f"port {tile}, PDL on"),
    }
    if not helion_original.available():
        raise SystemExit(f"the benchmark needs the helion originals: {helion_original.INSTALL_HINT}")
    two_n = 2 * shape.N
    if helion_original.sm90_config_index(two_n, shape.weighted) is not None:
        impls["helion_sm90"] = (
            lambda x, w: helion_original.silu_and_mul_helion(x, w, interleaved=il, config="sm90_table"),
            helion_original.config_label("sm90_table", two_n, shape.weighted) + ("" if il else " (interleaved table)"),
        )
    impls["helion_fixed"] = (
        lambda x, w: helion_original.silu_and_mul_helion(x, w, interleaved=il, config="fixed"),
        helion_original.config_label("fixed"),
    )
    compile_keys = [k for k in COMPILE_KEYS if keys is None or k in keys]
    if "compile_static_pdl" in compile_keys and not compile_baselines.inductor_has_pdl():
        compile_keys.remove("compile_static_pdl")
        if compile_info is not None and _shape_key(shape) in MAX_AUTOTUNE_SHAPES:
            compile_info["compile_static_pdl"] = {
                "skipped": f"torch {torch.__version__}: inductor has no triton.enable_pdl"
            }
    impls.update(compile_implementations(shape, compile_keys, compile_info))
    impls["torch_eager"] = (lambda x, w: silu_and_mul_ref(x, w, interleaved=il), "eager, fp32 math")
    impls.update(anchor_implementations(shape, COLUMNS, skipped=skipped))
    return impls


def _buffers(shape: Shape, sets: int):
    bufs = []
    for _ in range(sets):
        x = torch.randn((shape.M, 2 * shape.N), device="cuda", dtype=torch.bfloat16)
        w = torch.rand(shape.M, device="cuda") if shape.weighted else None
        bufs.append((x, w))
    return bufs


def _row(shape: Shape, name: str, config: str, mode: str, t: Timing, nbytes: int, ceiling_tbps: float) -> dict:
    return {
        "op": "silu_and_mul",
        "group": shape.group,
        "M": shape.M,
        "N": shape.N,
        "layout": "il" if shape.interleaved else "nil",
        "weighted": shape.weighted,
        "impl": name,
        "config": config,
        **pairing.row_fields(COLUMNS, name),
        "l2": mode,
        **t.columns(nbytes, 4),
        "fits_l2": nbytes <= l2_bytes(),
        "floor_us": round(nbytes / (ceiling_tbps * 1e6), 4),
    }


def bench_silu(
    shape_list: list[Shape],
    cold: bool,
    ceiling_tbps: float,
    progress: bool = True,
    impl_filter=None,
    skipped: list | None = None,
    max_autotune: bool = True,
    compile_info: dict | None = None,
) -> list[dict]:
    """Warm L2 on every shape; cold L2 (``cold``) where :func:`cold_feasible`. Decode shapes get
    :data:`DECODE_PASSES` interleaved passes, the others :data:`OTHER_PASSES`. The compile columns
    are compiled fresh per shape, once for both L2 modes (max-autotune on
    :data:`MAX_AUTOTUNE_SHAPES` when ``max_autotune``; what each compile took goes into
    ``compile_info``, by shape label, and the row's ``compile_s``). Every column is
    checked for bits against the port on the first buffer set before timing
    (``bits_equal_port``: the anchors, helion, torch.compile and eager); an anchor skipped on a
    shape goes into ``skipped`` with its reason.
    Baselines carry the speedup of the port paired with them by :mod:`pairing`'s rule."""
    from tqdm.auto import tqdm

    rows = []
    it = tqdm(shape_list, desc="silu_and_mul shapes", unit="shape", disable=not progress)
    for shape in it:
        it.set_postfix_str(shape.label)
        nbytes = silu_bytes(shape.M, shape.N, shape.weighted)
        modes = ["warm"] + (["cold"] if cold and cold_feasible(nbytes) else [])
        passes = DECODE_PASSES if shape.M <= DECODE_MAX_M else OTHER_PASSES
        skip: dict[str, str] = {}
        keys = [k for k in COMPILE_KEYS if (not impl_filter or k in impl_filter)
                and (max_autotune or k not in ("compile_static_max_autotune", "compile_static_pdl"))]  # fmt: skip
        info: dict = {}
        impls = {k: v for k, v in implementations(shape, skip, keys, info).items()
                 if not impl_filter or k in impl_filter}  # fmt: skip
        if compile_info is not None and info:
            compile_info[shape.label] = info
        if skipped is not None:
            skipped += [{"shape": shape.label, "impl": k, "column": COLUMNS[k].label, "reason": r}
                        for k, r in skip.items() if not impl_filter or k in impl_filter]  # fmt: skip
        for mode in modes:
            bufs = _buffers(shape, n_buffer_sets(nbytes, mode == "cold"))
            bits = check_anchor_bits(shape, impls, *bufs[0])
            timings = time_calls(
                {name: [lambda fn=fn, b=b: fn(*b) for b in bufs] for name, (fn, _) in impls.items()}, passes
            )
            clock = provenance.gpu_state().get("sm_clock_mhz")
            for name, t in timings.items():
                rows.append({**_row(shape, name, impls[name][1], mode, t, nbytes, ceiling_tbps), "sm_clock_mhz": clock,
                             **pairing.speedup_fields(COLUMNS, name, timings),
                             "bits_equal_port": bits.get(name, ""),
                             "compile_s": info.get(name, {}).get("compile_s", "")})  # fmt: skip
            del bufs
    return rows


def explore(shape: Shape, impls: list[str] | None = None):
    """Time ``impls`` (names of :func:`implementations`, all by default) on one shape now, warm L2,
    with the sweep's method (interleaved passes, fixed-count graph replay): notebook 06's
    exploration cell on a GPU. Returns a DataFrame, one row per implementation."""
    import pandas as pd

    require_gpu()
    known = implementations(shape, keys=impls)  # compiles only the compile columns asked for
    unknown = [i for i in (impls or []) if i not in known]
    if unknown:
        raise ValueError(f"impls: {unknown} not among {list(known)}")
    pick = {k: v for k, v in known.items() if impls is None or k in impls}
    (x, w), nbytes = _buffers(shape, 1)[0], silu_bytes(shape.M, shape.N, shape.weighted)
    calls = {name: (lambda fn=fn: fn(x, w)) for name, (fn, _) in pick.items()}
    timings = time_calls(calls, DECODE_PASSES if shape.M <= DECODE_MAX_M else OTHER_PASSES)
    rows = [
        {
            "source": "timed now",
            "impl": name,
            "config": pick[name][1],
            "M": shape.M,
            "N": shape.N,
            "layout": "il" if shape.interleaved else "nil",
            **t.columns(nbytes),
        }  # fmt: skip
        for name, t in timings.items()
    ]
    return pd.DataFrame(rows)[["source", "impl", "config", "M", "N", "layout", "median_us", "lo_us", "hi_us", "tbps"]]


def method_check(shape: Shape = Shape(1, 1024, True, False, "check"), factor: int = 4) -> dict:
    """The port on one decode shape timed with the graph size the method chooses and with
    ``factor`` times as many calls, each in three interleaved passes: the two medians must agree
    within 3% (a fixed per-replay cost would make the smaller graph slower)."""
    x, w = _buffers(shape, 1)[0]
    call = [lambda: silu_and_mul(x, w, interleaved=shape.interleaved)]
    warm_clocks(0.5)
    chosen = GraphTimer(call)
    bigger = GraphTimer(call, reps=factor * chosen.reps)
    t = time_interleaved({"chosen": chosen, "bigger": bigger}, DECODE_PASSES)
    ratio = t["chosen"].median_us / t["bigger"].median_us
    return {
        "shape": shape.label,
        "chosen_reps": chosen.reps,
        "chosen_us": round(t["chosen"].median_us, 4),
        "bigger_reps": bigger.reps,
        "bigger_us": round(t["bigger"].median_us, 4),
        "ratio": round(ratio, 4),
        "within_3pct": abs(ratio - 1) <= 0.03,
    }


# ---- tile sweep (tuning evidence) -------------------------------------------------------------

TUNE_SHAPES = [
    Shape(1, 1024, True, False, "tune"),
    Shape(1, 3072, True, False, "tune"),
    Shape(1, 1024, False, False, "tune"),
    Shape(6, 1024, True, False, "tune"),
    Shape(16, 768, True, True, "tune"),
    Shape(16, 3072, False, False, "tune"),
    Shape(384, 1024, True, True, "tune"),
    Shape(6144, 768, False, True, "tune"),
    Shape(49152, 768, True, False, "tune"),
    Shape(49152, 3072, True, False, "tune"),
    Shape(49152, 768, False, False, "tune"),
    Shape(49152, 3072, False, False, "tune"),
]


def _tune_configs(shape: Shape) -> list[LaunchConfig]:
    if shape.M <= 64:
        return [
            LaunchConfig(1, bn, w, pol)
            for bn in (256, 512, 1024)
            for w in (2, 4, 8)
            for pol in ("evict_first", "")
            if bn <= triton.next_power_of_2(shape.N) and bn // (32 * w) >= 1
        ]
    return [
        LaunchConfig(bm, bn, w, pol)
        for bm in (1, 2, 4)
        for bn in (512, 1024, 2048)
        for w in (4, 8)
        for pol in ("evict_first", "")
        if bm * bn <= 8192 and bn <= triton.next_power_of_2(shape.N)
    ]


def tile_sweep(progress: bool = True) -> list[dict]:
    """Every tile of :func:`_tune_configs` on :data:`TUNE_SHAPES`, beside the heuristic's."""
    from tqdm.auto import tqdm

    rows = []
    for shape in tqdm(TUNE_SHAPES, desc="tile sweep", disable=not progress):
        (x, w) = _buffers(shape, 1)[0]
        nbytes = silu_bytes(shape.M, shape.N, shape.weighted)
        for cfg in [None, *_tune_configs(shape)]:
            t = graph_time([lambda cfg=cfg: silu_and_mul(x, w, interleaved=shape.interleaved, config=cfg)])
            rows.append(
                {
                    "op": "silu_and_mul",
                    "M": shape.M,
                    "N": shape.N,
                    "layout": "il" if shape.interleaved else "nil",
                    "weighted": shape.weighted,
                    "config": "heuristic"
                    if cfg is None
                    else f"{cfg.BLOCK_M}x{cfg.BLOCK_N}/w{cfg.num_warps}/{cfg.stream_policy or 'nohint'}",
                    "median_us": round(t.median_us, 4),
                    "lo_us": round(t.lo_us, 4),
                    "hi_us": round(t.hi_us, 4),
                    "reps": t.reps,
                    "tbps": round(nbytes / t.median_us / 1e6, 4),
                }
            )
    return rows


# ---- driver ----------------------------------------------------------------------------------


def _has_fp8() -> bool:
    import importlib.util

    return importlib.util.find_spec("inkling_kernels.fp8") is not None


#: what ``run`` measures: "silu" (the silu_and_mul sweep, its record ``out`` and ``.json``),
#: "quant" (NVFP4 and FP8: ``nvfp4_`` and ``fp8_`` CSVs, each with its JSON); "all" both, in one
#: process. The GPU job runs the two as two steps (``bench``, ``bench_quant``), each within one call.
PARTS = ("all", "silu", "quant")


def _common_meta(command) -> dict:
    """Provenance, clocks, L2 and the method: what every record of the sweep starts with."""
    meta = provenance.collect(command)
    meta["clock_warmup"] = warm_clocks()
    meta["l2_bytes"] = l2_bytes()
    meta["cold_rotation"] = f">= {COLD_FACTOR} x L2 of input buffer sets between two uses of a set"
    meta["timing"] = timing_meta()
    meta["method"] = timing.__doc__.strip().split("\n\n", 1)[1]  # the method, as every record states it
    meta["ceiling_49152x3072"] = stream_ceiling(49152 * 3072)
    meta["ceiling_tbps_used_for_floors"] = meta["ceiling_49152x3072"]["tbps"]
    return meta


def run(out: str | Path, quick: bool = False, cold: bool = False, tune: bool = True, command=None,
        part: str = "all", max_autotune_budget_s: float | None = None) -> dict:  # fmt: skip
    """The sweep's ``part`` (:data:`PARTS`); writes ``out`` (silu CSV) and its companion files
    (NVFP4 CSV and JSON, FP8 CSV and JSON, tile sweeps unless ``tune=False``, the silu record's
    JSON). ``quick``: a subset, without max-autotune (notebook 06's re-measurement);
    ``max_autotune_budget_s``: start no max-autotune compile after that many seconds of the part
    (:func:`compile_baselines.set_budget`; the record lists what it skipped). Returns the
    provenance document of the last part written."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    require_gpu()
    out = Path(out)
    compile_baselines.set_budget(max_autotune_budget_s)
    meta = _common_meta(command)
    ceiling = meta["ceiling_tbps_used_for_floors"]
    if part in ("all", "silu"):
        meta["impls"] = IMPLS
        meta["columns"] = pairing.describe(COLUMNS)
        meta["anchors"] = {d: pairing.anchor_provenance(d) for d in anchors.ANCHORS}
        meta["sglang_is_arch_support_pdl"] = anchors._is_arch_support_pdl()
        meta["empty_kernel"] = empty_kernel_us()
        meta["empty_kernel_us"] = meta["empty_kernel"]["median_us"]
        meta["ceiling_49152x768"] = stream_ceiling(49152 * 768)
        meta["method_check"] = method_check()
        skipped: list[dict] = []
        compile_info: dict = {}
        rows = bench_silu(shapes(quick), cold, ceiling, skipped=skipped, max_autotune=not quick,
                          compile_info=compile_info)  # fmt: skip
        shapes_mat = [] if quick else [s.label for s in shapes() if _shape_key(s) in MAX_AUTOTUNE_SHAPES]
        meta["compile"] = {**compile_baselines.record_meta({"silu_and_mul": shapes_mat}), "per_shape": compile_info}
        meta["anchor_skipped"] = skipped
        meta["anchor_bits_equal_port"] = {k: all(r["bits_equal_port"] for r in rows if r["impl"] == k)
                                          for k in ANCHOR_KEYS if any(r["impl"] == k for r in rows)}  # fmt: skip
        # every column's bits against the port's, checked before each shape was timed
        meta["bits_equal_port"] = {k: all(r["bits_equal_port"] is True for r in rows if r["impl"] == k)
                                   for k in dict.fromkeys(r["impl"] for r in rows) if k != "triton"}  # fmt: skip
        write_csv(rows, out)
        if tune:
            write_csv(tile_sweep(), provenance.companion(out, "tune"))
        meta["gpu_state_after"] = provenance.gpu_state()
        provenance.write_record(provenance.companion(out, "meta"), json.dumps(meta, indent=1) + "\n")
    if part in ("all", "quant"):
        compile_baselines.set_budget(max_autotune_budget_s)
        info: dict = {}
        nv_path = provenance.companion(out, "nvfp4")
        nv = nvfp4_sweep.bench_nvfp4(ceiling, quick=quick, cold=cold, compile_info=info, max_autotune=not quick)
        write_csv(nv, nv_path)
        # each column's bytes checked before its shape was timed (nvfp4_sweep.check_bits)
        meta["nvfp4_bits_equal"] = {k: all(r["bits_equal"] for r in nv if r["impl"] == k)
                                    for k in dict.fromkeys(r["impl"] for r in nv)}  # fmt: skip
        nv_meta = {**meta, **nvfp4_sweep.meta(info), "gpu_state_after": provenance.gpu_state()}
        provenance.write_record(nv_path.with_suffix(".json"), json.dumps(nv_meta, indent=1) + "\n")
        if _has_fp8() and not quick:  # the quick re-measurement checks silu_and_mul and NVFP4 only
            run_fp8(dict(meta), provenance.companion(out, "fp8"))
    return meta
