"""The silu_and_mul sweep (``python -m inkling_workbook bench``): the shapes, every implementation
and baseline of a shape, the NVFP4 part, the tile sweep (tuning evidence), and the driver that
writes the records. Every timing is taken by the method of :mod:`inkling_workbook.measure.timing`;
the FP8 part is :mod:`inkling_workbook.measure.fp8_sweep`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from inkling_kernels.nvfp4 import nvfp4_quant, silu_and_mul_nvfp4_quant
from inkling_kernels.reference import nvfp4_quant_ref, padded_blockscale_offsets, silu_and_mul_ref
from inkling_kernels.silu_and_mul import LaunchConfig, launch_config, silu_and_mul
from inkling_workbook.measure import anchors, pairing, provenance, timing
from inkling_workbook.measure.fp8_sweep import run_fp8
from inkling_workbook.measure.pairing import Column
from inkling_workbook.measure.timing import (
    COLD_FACTOR,
    DECODE_MAX_M,
    DECODE_PASSES,
    OTHER_PASSES,
    GraphTimer,
    Timing,
    _configure_dynamo,
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


# torch.compile baselines. Two distinct functions (dynamo keeps its compiled code per code
# object): one compiled static, one with only M dynamic, as a server with a fixed model width
# compiles it. Configured by :func:`_configure_dynamo`.
def _ref_for_static_compile(x, w, interleaved: bool):
    return silu_and_mul_ref(x, w, interleaved=interleaved)


def _ref_for_dynamic_m_compile(x, w, interleaved: bool):
    return silu_and_mul_ref(x, w, interleaved=interleaved)


_compiled: dict = {}


def compiled_ref(kind: str):
    """``"static"``: ``torch.compile(dynamic=False)``; ``"dynamic_m"``: M marked dynamic."""
    if kind not in _compiled:
        _configure_dynamo()
        if kind == "static":
            _compiled[kind] = torch.compile(_ref_for_static_compile, dynamic=False)
        elif kind == "dynamic_m":
            _compiled[kind] = torch.compile(_ref_for_dynamic_m_compile)
        else:
            raise ValueError(f"kind must be 'static' or 'dynamic_m', got {kind!r}")
    return _compiled[kind]


#: The implementations timed on every shape, in table order, and how each is configured.
IMPLS = {
    "triton": "the Triton port, launch_config heuristic, PDL off",
    "triton_pdl": "the Triton port, launch_config heuristic, PDL on (wait before the first load)",
    "helion_sm90": "helion 1.4.0 original, the production sm_90 table (interleaved table; non-interleaved uses it too)",
    "helion_fixed": "helion 1.4.0 original, the fixed 1x256 tile with 4 warps this workbook used before",
    "compile_static": "torch.compile(dynamic=False) of silu_and_mul_ref (one graph per shape)",
    "compile_dynamic_m": "torch.compile of silu_and_mul_ref with M marked dynamic (one graph per N, layout, weights)",
    "torch_eager": "torch eager silu_and_mul_ref (fp32 math, several kernels)",
}
BASELINES = ("helion_sm90", "helion_fixed", "compile_static", "compile_dynamic_m", "torch_eager")
IMPLS.update({k: c.label for k, c in pairing.SILU_ANCHOR_COLUMNS.items()})
#: the anchors, timed beside the others where fetched and where they support the shape
ANCHOR_KEYS = tuple(pairing.SILU_ANCHOR_COLUMNS)


def _torch_version() -> str:
    return torch.__version__.split("+")[0]


#: every column of the sweep as :mod:`~inkling_workbook.measure.pairing` reads it (the rule pairs
#: the baselines with "triton_pdl" or "triton" by their PDL state)
_PORT = "the port, launch_config heuristic"
#: inductor can generate PDL (``torch._inductor.config.triton.enable_pdl``, off by default); the
#: torch.compile columns run its default. helion 1.4.0's Triton backend has no PDL launch (its PDL
#: is in the CuTe matmul path), so the helion columns run without PDL as helion launches them
_INDUCTOR_PDL = "inductor default: triton.enable_pdl off"
COLUMNS: dict[str, Column] = {
    "triton": Column("triton", "inkling", "", "silu_and_mul", _PORT, False, "port"),
    "triton_pdl": Column("triton_pdl", "inkling", "", "silu_and_mul", _PORT, True, "port"),
    "helion_sm90": Column("helion_sm90", "helion", "1.4.0", "silu_and_mul original", "production sm_90 table",
                          False, "baseline"),
    "helion_fixed": Column("helion_fixed", "helion", "1.4.0", "silu_and_mul original", "fixed 1x256 tile, 4 warps",
                           False, "baseline"),
    "compile_static": Column("compile_static", "torch", _torch_version(), "torch.compile of silu_and_mul_ref",
                             "dynamic=False, " + _INDUCTOR_PDL, False, "baseline"),
    "compile_dynamic_m": Column("compile_dynamic_m", "torch", _torch_version(), "torch.compile of silu_and_mul_ref",
                                "M dynamic, compiled at M=8192, " + _INDUCTOR_PDL, False, "baseline"),
    "torch_eager": Column("torch_eager", "torch", _torch_version(), "silu_and_mul_ref", "eager, fp32 math", False,
                          "baseline"),
    **pairing.SILU_ANCHOR_COLUMNS,
}  # fmt: skip


DYNAMIC_M_COMPILE_AT = 8192
_dynamic_warmed: set = set()


def _warm_dynamic_m(shape: Shape) -> None:
    """Compile the M-dynamic baseline of this (N, layout, weights) at a large M first, as a server
    compiles at its largest batch: inductor picks tiles from the size hint of the first input, so
    a graph first compiled at M = 4 would be a decode-tuned kernel timed at M = 49152. (M = 1 is
    specialized by torch's 0/1 rule whatever is marked, so it gets its own static graph.)"""
    key = (shape.N, shape.interleaved, shape.weighted)
    if key in _dynamic_warmed:
        return
    M = DYNAMIC_M_COMPILE_AT
    x = torch.randn((M, 2 * shape.N), device="cuda", dtype=torch.bfloat16)
    w = torch.rand(M, device="cuda") if shape.weighted else None
    torch._dynamo.mark_dynamic(x, 0)
    if w is not None:
        torch._dynamo.mark_dynamic(w, 0)
    compiled_ref("dynamic_m")(x, w, shape.interleaved)
    _dynamic_warmed.add(key)


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
    """Each anchor of ``impls`` against the port on the timed inputs, before timing: raw bits equal
    (the merged port writes ours bit for bit)."""
    want = silu_and_mul(x, w, interleaved=shape.interleaved)
    out = {}
    for key in impls:
        if key in ANCHOR_KEYS:
            got = impls[key][0](x, w)
            out[key] = got.shape == want.shape and torch.equal(got.view(torch.int16), want.view(torch.int16))
    return out


def implementations(shape: Shape, skipped: dict | None = None) -> dict[str, tuple[Callable, str]]:
    """name -> (fn(x, w) -> out, the configuration in words for this shape). The anchors come last
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
    static, dynamic = compiled_ref("static"), compiled_ref("dynamic_m")
    impls["compile_static"] = (lambda x, w: static(x, w, il), "torch.compile dynamic=False")

    _warm_dynamic_m(shape)

    def dyn(x, w):
        torch._dynamo.mark_dynamic(x, 0)
        if w is not None:
            torch._dynamo.mark_dynamic(w, 0)
        return dynamic(x, w, il)

    impls["compile_dynamic_m"] = (dyn, "torch.compile, M dynamic (compiled at M=8192)")
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
) -> list[dict]:
    """Warm L2 on every shape; cold L2 (``cold``) where :func:`cold_feasible`. Decode shapes get
    :data:`DECODE_PASSES` interleaved passes, the others :data:`OTHER_PASSES`. The anchors are
    checked for bits against the port on the first buffer set before timing
    (``bits_equal_port``); an anchor skipped on a shape goes into ``skipped`` with its reason.
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
        impls = {k: v for k, v in implementations(shape, skip).items() if not impl_filter or k in impl_filter}
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
                             "bits_equal_port": bits.get(name, "")})  # fmt: skip
            del bufs
    return rows


def explore(shape: Shape, impls: list[str] | None = None):
    """Time ``impls`` (names of :func:`implementations`, all by default) on one shape now, warm L2,
    with the sweep's method (interleaved passes, fixed-count graph replay): notebook 06's
    exploration cell on a GPU. Returns a DataFrame, one row per implementation."""
    import pandas as pd

    require_gpu()
    known = implementations(shape)
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


# ---- NVFP4 -------------------------------------------------------------------------------------

NVFP4_M = (128, 1024, 8192, 49152)
NVFP4_N = (1536, 3072)
NVFP4_EXPERTS = 8
NVFP4_EAGER_MAX_M = 1024


def nvfp4_bytes(M: int, N: int, fused: bool, scale_rows: int) -> int:
    scales = scale_rows * ((N // 16 + 3) // 4 * 4)
    quant = M * (N // 2) + scales
    if fused:
        return M * 4 * N + quant
    return M * (4 * N + 2 * N) + M * 2 * N + quant


def _nvfp4_fused_ref(gateup, row_gs):
    """The fused op in plain torch (linear scales, per-row global scale): what torch.compile gets."""
    return nvfp4_quant_ref(silu_and_mul_ref(gateup, interleaved=False), row_gs)


NVFP4_IMPLS = {
    "fused": "the fused Triton kernel, swizzled scales, outputs preallocated",
    "unfused": "silu_and_mul then nvfp4_quant (Triton), swizzled scales, outputs preallocated",
    "compile_static": "torch.compile(dynamic=False) of the torch reference (linear scales)",
    "torch_eager": "the torch reference, eager (linear scales); timed up to M = 1024 only",
}


def bench_nvfp4(ceiling_tbps: float, quick: bool = False, progress: bool = True) -> list[dict]:
    """Warm L2, 8 uniform experts, the implementations of a shape timed in interleaved passes
    (``OTHER_PASSES``). The Triton paths write preallocated outputs (the layout the grouped GEMM
    reads); the torch references allocate theirs."""
    from tqdm.auto import tqdm

    _configure_dynamo()
    compiled = torch.compile(_nvfp4_fused_ref, dynamic=False)
    rows = []
    ms = (1024, 49152) if quick else NVFP4_M
    combos = [(m, n) for m in ms for n in NVFP4_N]
    for M, N in tqdm(combos, desc="nvfp4 shapes", disable=not progress):
        counts = torch.full((NVFP4_EXPERTS,), M // NVFP4_EXPERTS)
        counts[: M % NVFP4_EXPERTS] += 1
        eo = torch.cat((torch.zeros(1, dtype=torch.int64), counts.cumsum(0))).to(torch.int32)
        bo = padded_blockscale_offsets(eo)
        rows_pad = int(bo[-1])
        eo, bo = eo.cuda(), bo.cuda()
        gateup = torch.randn((M, 2 * N), device="cuda", dtype=torch.bfloat16)
        act = silu_and_mul(gateup, interleaved=False)
        gs = torch.full((NVFP4_EXPERTS,), 448 * 6 / float(act.float().abs().max()), device="cuda")
        row_gs = gs.repeat_interleave(counts.cuda(), output_size=M)[:, None]
        packed = torch.empty((M, N // 2), dtype=torch.uint8, device="cuda")
        scales = torch.empty((rows_pad, (N // 16 + 3) // 4 * 4), dtype=torch.uint8, device="cuda")
        out = (packed, scales)

        def fused():
            silu_and_mul_nvfp4_quant(gateup, gs, eo, bo, out=out, validate=False)

        def unfused():
            silu_and_mul(gateup, interleaved=False, out=act)
            nvfp4_quant(act, gs, expert_offsets=eo, blockscale_offsets=bo, out=out, validate=False)

        # bytes: the unfused path's own traffic for "unfused"; what the fused op must move otherwise
        impls = {
            "fused": (fused, True),
            "unfused": (unfused, False),
            "compile_static": (lambda: compiled(gateup, row_gs), True),
        }
        if M <= NVFP4_EAGER_MAX_M:  # 45-90 ms a call at M = 49152: a strawman not worth the GPU time
            impls["torch_eager"] = (lambda: _nvfp4_fused_ref(gateup, row_gs), True)
        fused_bytes = nvfp4_bytes(M, N, True, rows_pad)
        timings = time_calls({name: fn for name, (fn, _) in impls.items()}, OTHER_PASSES)
        for name, (_fn, is_fused) in impls.items():
            nbytes = nvfp4_bytes(M, N, is_fused, rows_pad)
            t = timings[name]
            rows.append(
                {
                    "op": "silu_and_mul_nvfp4",
                    "M": M,
                    "N": N,
                    "experts": NVFP4_EXPERTS,
                    "impl": name,
                    "config": NVFP4_IMPLS[name],
                    "l2": "warm",
                    **t.columns(nbytes, 3),
                    "fused_floor_us": round(fused_bytes / (ceiling_tbps * 1e6), 3),
                }
            )
    return rows


# ---- driver ----------------------------------------------------------------------------------


def _has_fp8() -> bool:
    import importlib.util

    return importlib.util.find_spec("inkling_kernels.fp8") is not None


def run(out: str | Path, quick: bool = False, cold: bool = False, tune: bool = True, command=None) -> dict:
    """The whole sweep; writes ``out`` (silu CSV) and its companion files (NVFP4 CSV, tile sweeps
    unless ``tune=False``, provenance JSON). Returns the provenance document."""
    require_gpu()
    out = Path(out)
    meta = provenance.collect(command)
    meta["clock_warmup"] = warm_clocks()
    meta["l2_bytes"] = l2_bytes()
    meta["cold_rotation"] = f">= {COLD_FACTOR} x L2 of input buffer sets between two uses of a set"
    meta["timing"] = timing_meta()
    meta["impls"] = IMPLS
    meta["columns"] = pairing.describe(COLUMNS)
    meta["anchors"] = {d: pairing.anchor_provenance(d) for d in anchors.ANCHORS}
    meta["sglang_is_arch_support_pdl"] = anchors._is_arch_support_pdl()
    meta["empty_kernel"] = empty_kernel_us()
    meta["empty_kernel_us"] = meta["empty_kernel"]["median_us"]
    meta["ceiling_49152x768"] = stream_ceiling(49152 * 768)
    meta["ceiling_49152x3072"] = stream_ceiling(49152 * 3072)
    ceiling = meta["ceiling_49152x3072"]["tbps"]
    meta["ceiling_tbps_used_for_floors"] = ceiling
    meta["method"] = timing.__doc__.strip().split("\n\n", 1)[1]  # the method, as every record states it
    meta["method_check"] = method_check()
    skipped: list[dict] = []
    rows = bench_silu(shapes(quick), cold, ceiling, skipped=skipped)
    meta["anchor_skipped"] = skipped
    meta["anchor_bits_equal_port"] = {k: all(r["bits_equal_port"] for r in rows if r["impl"] == k)
                                      for k in ANCHOR_KEYS if any(r["impl"] == k for r in rows)}  # fmt: skip
    write_csv(rows, out)
    meta["nvfp4_impls"] = NVFP4_IMPLS
    nv = bench_nvfp4(ceiling, quick=quick)
    write_csv(nv, provenance.companion(out, "nvfp4"))
    if _has_fp8() and not quick:  # the quick re-measurement checks silu_and_mul and NVFP4 only
        run_fp8(meta, provenance.companion(out, "fp8"))
    if tune:
        write_csv(tile_sweep(), provenance.companion(out, "tune"))
    meta["gpu_state_after"] = provenance.gpu_state()
    provenance.write_record(provenance.companion(out, "meta"), json.dumps(meta, indent=1) + "\n")
    return meta
