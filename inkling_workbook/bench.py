"""One timing method for every implementation, and the ceilings measured in the same run.

Method (per implementation and shape):

1. Warm up eagerly (compiles Triton, helion and torch.compile code) on a side stream.
2. Capture ``reps`` back-to-back calls in one CUDA graph. Warm L2: every call reads the same
   buffers. Cold L2: calls rotate over enough input/output buffer sets to move more than
   three times the L2 (60 MB on an H200) between two uses of a set.
3. Replay the graph ``rounds`` times, each timed with CUDA events; per-call time = replay time /
   reps. Report the median (and min, max) over rounds.
4. Effective bandwidth = bytes the op must move (reads + writes, counted, not measured) / time.

Ceilings in the same run: the best of a sweep of plain Triton streaming kernels with this op's
access pattern (read two streams, write one of half their size), torch's ``copy_``, and an empty
Triton kernel under graph replay (the launch floor).
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from inkling_kernels.nvfp4 import nvfp4_quant, silu_and_mul_nvfp4_quant
from inkling_kernels.reference import nvfp4_quant_ref, padded_blockscale_offsets, silu_and_mul_ref
from inkling_kernels.silu_and_mul import LaunchConfig, silu_and_mul

from . import helion_original, provenance

L2_BYTES = 60 * 2**20
COLD_FACTOR = 3


def require_gpu() -> None:
    if not torch.cuda.is_available():
        raise SystemExit(
            "benchmarks need a CUDA GPU: timings of the Triton interpreter say nothing about the kernels. "
            "On a CPU machine, notebook 06 draws the figures from the H200 data recorded in data/."
        )


@dataclass
class Timing:
    median_us: float
    min_us: float
    max_us: float
    reps: int
    rounds: int


def graph_time(calls: list[Callable[[], object]], target_us: float = 2000.0, rounds: int = 15) -> Timing:
    """Time ``calls`` (one call per buffer set, used in rotation) by CUDA-graph replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            for c in calls:
                c()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    # estimate one call to size the graph (eager, so an upper bound)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for c in calls:
        c()
    end.record()
    torch.cuda.synchronize()
    est = max(start.elapsed_time(end) * 1000 / len(calls), 0.5)
    reps = int(min(max(target_us / est, len(calls), 10), 2000))
    reps = max(len(calls), reps // len(calls) * len(calls))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(reps):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / reps)
    del graph
    return Timing(statistics.median(times), min(times), max(times), reps, rounds)


def n_buffer_sets(bytes_per_call: int, cold: bool) -> int:
    if not cold:
        return 1
    return int(min(64, max(2, math.ceil(COLD_FACTOR * L2_BYTES / max(bytes_per_call, 1)))))


# ---- ceilings --------------------------------------------------------------------------------


@triton.jit
def _stream_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr, EVICT: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if EVICT:
        a = tl.load(a_ptr + offs, mask=mask, eviction_policy="evict_first")
        b = tl.load(b_ptr + offs, mask=mask, eviction_policy="evict_first")
    else:
        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a + b, mask=mask)


@triton.jit
def _empty_kernel(x_ptr):
    pass


def stream_ceiling(numel_out: int, dtype=torch.bfloat16) -> dict:
    """Best TB/s of plain Triton kernels that read two ``numel_out`` streams and write one."""
    a = torch.randn(numel_out, device="cuda").to(dtype)
    b = torch.randn(numel_out, device="cuda").to(dtype)
    out = torch.empty_like(a)
    nbytes = 3 * numel_out * a.element_size()
    best = None
    for block in (1024, 2048, 4096, 8192):
        for warps in (4, 8):
            for evict in (False, True):
                grid = (triton.cdiv(numel_out, block),)

                def call(block=block, warps=warps, evict=evict, grid=grid):
                    _stream_kernel[grid](a, b, out, numel_out, BLOCK=block, EVICT=evict, num_warps=warps)

                t = graph_time([call], rounds=10)
                tbps = nbytes / t.median_us / 1e6
                if best is None or tbps > best["tbps"]:
                    best = {"tbps": tbps, "block": block, "warps": warps, "evict_first": evict, "us": t.median_us}
    src = torch.empty(numel_out * 2, device="cuda", dtype=dtype)
    dst = torch.empty_like(src)
    t_copy = graph_time([lambda: dst.copy_(src)], rounds=10)
    best["torch_copy_tbps"] = 2 * src.numel() * src.element_size() / t_copy.median_us / 1e6
    best["bytes"] = nbytes
    return best


def empty_kernel_us() -> float:
    x = torch.empty(1, device="cuda")
    return graph_time([lambda: _empty_kernel[(1,)](x)], rounds=10).median_us


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
SWEEP_N = (768, 1024, 1536, 2048, 3072)
DECODE_M = (1, 2, 4, 8, 16)
PREFILL_M = (1536, 4096, 6144, 16384)


def shapes(quick: bool = False) -> list[Shape]:
    out = list(SOURCE_TABLE)
    # quick: a subset of the full sweep (notebook 06 compares the two timing by timing)
    decode_m, prefill_m, ns = ((1, 8, 16), (4096,), (768, 3072)) if quick else (DECODE_M, PREFILL_M, SWEEP_N)
    for il in (True, False):
        out += [Shape(m, n, il, False, "decode") for m in decode_m for n in ns]
        out += [Shape(m, n, il, False, "prefill") for m in prefill_m for n in ns]
    seen, unique = set(), []
    for s in out:
        key = (s.M, s.N, s.interleaved, s.weighted)
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return unique


def silu_bytes(M: int, N: int, weighted: bool, elt: int = 2) -> int:
    return M * (2 * N * elt + N * elt) + (M * 4 if weighted else 0)


_compiled: dict = {}


def _compiled_ref(interleaved: bool, weighted: bool):
    """One torch.compile'd function per variant (layout x weights), so no variant's guards evict
    another's code. Default dynamic-shape policy: the first shape compiles static, the second
    recompiles with the changed dimensions symbolic, then no more compiles (as a server with
    varying batch sizes would run it)."""
    key = (interleaved, weighted)
    if key not in _compiled:
        if weighted:

            def fn(x, w):
                return silu_and_mul_ref(x, w, interleaved=interleaved)
        else:

            def fn(x, w):
                return silu_and_mul_ref(x, None, interleaved=interleaved)

        _compiled[key] = torch.compile(fn)
    return _compiled[key]


def implementations(shape: Shape) -> dict[str, Callable]:
    il = shape.interleaved
    impls = {
        "triton": lambda x, w, out: silu_and_mul(x, w, interleaved=il, out=out),
        "torch_eager": lambda x, w, out: silu_and_mul_ref(x, w, interleaved=il),
    }
    compiled = _compiled_ref(il, shape.weighted)
    impls["torch_compile"] = lambda x, w, out: compiled(x, w)
    if helion_original.available():
        impls["helion"] = lambda x, w, out: helion_original.silu_and_mul_helion(x, w, interleaved=il, out=out)
    return impls


def _buffers(shape: Shape, sets: int):
    bufs = []
    for _ in range(sets):
        x = torch.randn((shape.M, 2 * shape.N), device="cuda", dtype=torch.bfloat16)
        w = torch.rand(shape.M, device="cuda") if shape.weighted else None
        out = torch.empty((shape.M, shape.N), device="cuda", dtype=torch.bfloat16)
        bufs.append((x, w, out))
    return bufs


def bench_silu(
    shape_list: list[Shape], cold: bool, ceiling_tbps: float, progress: bool = True, impl_filter=None
) -> list[dict]:
    from tqdm.auto import tqdm

    rows = []
    modes = ["warm", "cold"] if cold else ["warm"]
    it = tqdm(shape_list, desc="silu_and_mul shapes", unit="shape", disable=not progress)
    for shape in it:
        it.set_postfix_str(shape.label)
        nbytes = silu_bytes(shape.M, shape.N, shape.weighted)
        for mode in modes:
            bufs = _buffers(shape, n_buffer_sets(nbytes, mode == "cold"))
            for name, fn in implementations(shape).items():
                if impl_filter and name not in impl_filter:
                    continue
                calls = [lambda fn=fn, b=b: fn(*b) for b in bufs]
                t = graph_time(calls)
                rows.append(
                    {
                        "op": "silu_and_mul",
                        "group": shape.group,
                        "M": shape.M,
                        "N": shape.N,
                        "layout": "il" if shape.interleaved else "nil",
                        "weighted": shape.weighted,
                        "impl": name,
                        "l2": mode,
                        "median_us": round(t.median_us, 4),
                        "min_us": round(t.min_us, 4),
                        "max_us": round(t.max_us, 4),
                        "reps": t.reps,
                        "bytes": nbytes,
                        "tbps": round(nbytes / t.median_us / 1e6, 4),
                        "floor_us": round(nbytes / (ceiling_tbps * 1e6), 4),
                    }
                )
            del bufs
    return rows


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
        (x, w, out) = _buffers(shape, 1)[0]
        nbytes = silu_bytes(shape.M, shape.N, shape.weighted)
        for cfg in [None, *_tune_configs(shape)]:
            t = graph_time([lambda cfg=cfg: silu_and_mul(x, w, interleaved=shape.interleaved, out=out, config=cfg)])
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
                    "tbps": round(nbytes / t.median_us / 1e6, 4),
                }
            )
    return rows


NVFP4_TUNE = [(49152, 3072), (8192, 1536)]
NVFP4_TUNE_CONFIGS = [
    (bm, bk, w) for bm in (2, 4, 8, 16, 32) for bk in (256, 512, 1024) for w in (4, 8) if 2048 <= bm * bk <= 8192
]


def nvfp4_tile_sweep(progress: bool = True) -> list[dict]:
    """The fused kernel (gate || up) and the plain quant kernel under each tile."""
    from tqdm.auto import tqdm

    rows = []
    for M, N in NVFP4_TUNE:
        eo = torch.tensor([0, M], dtype=torch.int32, device="cuda")
        bo = padded_blockscale_offsets(eo.cpu()).cuda()
        gateup = torch.randn((M, 2 * N), device="cuda", dtype=torch.bfloat16)
        act = silu_and_mul(gateup, interleaved=False)
        gs = torch.full((1,), 448 * 6 / float(act.float().abs().max()), device="cuda")
        out = (
            torch.empty((M, N // 2), dtype=torch.uint8, device="cuda"),
            torch.empty((int(bo[-1]), (N // 16 + 3) // 4 * 4), dtype=torch.uint8, device="cuda"),
        )
        for cfg in tqdm([None, *NVFP4_TUNE_CONFIGS], desc=f"nvfp4 tiles {M}x{N}", disable=not progress):
            for kind in ("fused", "quant"):
                if kind == "fused":
                    fn = lambda cfg=cfg: silu_and_mul_nvfp4_quant(
                        gateup, gs, eo, bo, out=out, validate=False, config=cfg
                    )
                else:
                    fn = lambda cfg=cfg: nvfp4_quant(
                        act, gs, expert_offsets=eo, blockscale_offsets=bo, out=out, validate=False, config=cfg
                    )
                t = graph_time([fn], rounds=8)
                nbytes = (
                    nvfp4_bytes(M, N, True, int(bo[-1]))
                    - (M * 4 * N if kind == "quant" else 0)
                    + (M * 2 * N if kind == "quant" else 0)
                )
                rows.append(
                    {
                        "op": f"nvfp4_{kind}",
                        "M": M,
                        "N": N,
                        "layout": "nil",
                        "weighted": False,
                        "config": "heuristic" if cfg is None else f"{cfg[0]}x{cfg[1]}/w{cfg[2]}",
                        "median_us": round(t.median_us, 4),
                        "tbps": round(nbytes / t.median_us / 1e6, 4),
                    }
                )
    return rows


# ---- NVFP4 -------------------------------------------------------------------------------------

NVFP4_M = (128, 1024, 8192, 49152)
NVFP4_N = (1536, 3072)
NVFP4_EXPERTS = 8


def nvfp4_bytes(M: int, N: int, fused: bool, scale_rows: int) -> int:
    scales = scale_rows * ((N // 16 + 3) // 4 * 4)
    quant = M * (N // 2) + scales
    if fused:
        return M * 4 * N + quant
    return M * (4 * N + 2 * N) + M * 2 * N + quant


def bench_nvfp4(cold: bool, ceiling_tbps: float, quick: bool = False, progress: bool = True) -> list[dict]:
    from tqdm.auto import tqdm

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
        row_gs = gs.repeat_interleave(counts.cuda(), output_size=M)
        packed = torch.empty((M, N // 2), dtype=torch.uint8, device="cuda")
        scales = torch.empty((rows_pad, (N // 16 + 3) // 4 * 4), dtype=torch.uint8, device="cuda")
        out = (packed, scales)

        def fused():
            silu_and_mul_nvfp4_quant(gateup, gs, eo, bo, out=out, validate=False)

        def unfused():
            silu_and_mul(gateup, interleaved=False, out=act)
            nvfp4_quant(act, gs, expert_offsets=eo, blockscale_offsets=bo, out=out, validate=False)

        def torch_eager():
            a = silu_and_mul_ref(gateup, interleaved=False)
            return nvfp4_quant_ref(a, row_gs)

        impls = {"fused": (fused, True), "unfused": (unfused, False), "torch_eager": (torch_eager, False)}
        for name, (fn, is_fused) in impls.items():
            nbytes = nvfp4_bytes(M, N, is_fused, rows_pad)
            fused_bytes = nvfp4_bytes(M, N, True, rows_pad)
            t = graph_time([fn], rounds=10)
            rows.append(
                {
                    "op": "silu_and_mul_nvfp4",
                    "M": M,
                    "N": N,
                    "experts": NVFP4_EXPERTS,
                    "impl": name,
                    "l2": "warm",
                    "median_us": round(t.median_us, 3),
                    "min_us": round(t.min_us, 3),
                    "max_us": round(t.max_us, 3),
                    "bytes": nbytes,
                    "tbps": round(nbytes / t.median_us / 1e6, 4),
                    "fused_floor_us": round(fused_bytes / (ceiling_tbps * 1e6), 3),
                }
            )
    return rows


# ---- driver ----------------------------------------------------------------------------------


def write_csv(rows: list[dict], path: str | Path) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    provenance.write_record(path, buf.getvalue())


def run(out: str | Path, quick: bool = False, cold: bool = False, tune: bool = True, command=None) -> dict:
    """The whole sweep; writes ``out`` (silu CSV) and its :func:`companion` files (NVFP4 CSV,
    tile sweeps unless ``tune=False``, provenance JSON). Returns the provenance document."""
    require_gpu()
    out = Path(out)
    meta = provenance.collect(command)
    meta["gpu_state_before"] = provenance.gpu_state()
    meta["empty_kernel_us"] = round(empty_kernel_us(), 4)
    meta["ceiling_49152x768"] = stream_ceiling(49152 * 768)
    meta["ceiling_49152x3072"] = stream_ceiling(49152 * 3072)
    ceiling = meta["ceiling_49152x3072"]["tbps"]
    meta["ceiling_tbps_used_for_floors"] = ceiling
    meta["method"] = __doc__.strip().split("\n\n", 1)[1]
    rows = bench_silu(shapes(quick), cold, ceiling)
    write_csv(rows, out)
    nv = bench_nvfp4(cold, ceiling, quick=quick)
    write_csv(nv, provenance.companion(out, "nvfp4"))
    if tune:
        write_csv(tile_sweep() + nvfp4_tile_sweep(), provenance.companion(out, "tune"))
    meta["gpu_state_after"] = provenance.gpu_state()
    provenance.write_record(provenance.companion(out, "meta"), json.dumps(meta, indent=1) + "\n")
    return meta
