"""One timing method for every implementation, and the ceilings measured in the same run.

Method (per implementation and shape):

1. Clocks: before the first timing the GPU runs about a second of bf16 matrix products, so the
   sweep starts at the clocks a busy GPU runs at; ``nvidia-smi`` clocks are recorded before and
   after the warm-up and after the sweep.
2. Warm up eagerly (compiles Triton, helion and torch.compile code) on a side stream.
3. Size the graph from a short in-graph measurement (a graph of 100 calls, replayed three
   times), never from eager timing: host launch time would dominate an eager estimate at decode
   sizes. The timed graph holds a fixed count of back-to-back calls: at least 100, and enough
   for a replay of at least 1 ms (a multiple of the buffer sets in rotation).
4. Warm L2: every call reads the same buffers. Cold L2: calls rotate over enough input buffer
   sets to move at least three times the L2 (read from the device) between two uses of a set,
   and each call's output stays alive for one rotation, so outputs rotate as well.
5. Replay the graph ``rounds`` (10) times, each timed with CUDA events; per-call time = replay
   time / calls. Every shape is timed in passes interleaved across the implementations (pass 1:
   every implementation, then pass 2, ..., the order rotated from pass to pass), three at
   decode sizes (M <= 16) and two otherwise; each pass replays every graph ``rounds`` times.
   The SM clock is read after each shape.
6. Report the median over all replays and the spread: ``lo_us``/``hi_us`` are the lowest and
   highest per-pass median (with a single pass, the replays' quartiles; ``min_us``/``max_us``
   keep the extremes). Two timings whose [lo, hi] ranges overlap are a tie. A difference
   outside the ranges but smaller than the run-to-run reproducibility that the publishing job
   measures (notebook 06 re-times a subset) is still a win or a loss, marked as one a second run
   could reverse (``plots.speedup_table``'s ``near_*``).
7. In the silu sweep every implementation allocates its output (inside a captured graph an allocation costs
   nothing at replay), so all follow the same output policy.
8. Effective bandwidth = bytes the op must move (reads + writes, counted, not measured) / time.

Ceilings in the same run: the best of a sweep of plain Triton streaming kernels with this op's
access pattern (read two streams, write one of half their size), torch's ``copy_``, and an empty
Triton kernel under graph replay (the launch floor).
"""

from __future__ import annotations

import collections
import contextlib
import csv
import io
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import triton
import triton.language as tl

from inkling_kernels.nvfp4 import nvfp4_quant, silu_and_mul_nvfp4_quant
from inkling_kernels.reference import nvfp4_quant_ref, padded_blockscale_offsets, silu_and_mul_ref
from inkling_kernels.silu_and_mul import LaunchConfig, launch_config, silu_and_mul
from inkling_workbook.measure import provenance
from inkling_workbook.measure.fp8_bench import COMPILE_DRAWS
from inkling_workbook.ports.silu_and_mul import helion_original

MIN_CALLS = 100  # calls in one timed graph, at least
MIN_REPLAY_US = 1000.0  # and enough of them for a replay of at least this long
MAX_CALLS = 20000
ROUNDS = 10  # timed replays per pass
DECODE_PASSES = 3
OTHER_PASSES = 2  # replays are cheap next to captures and compiles: every shape gets interleaved passes
DECODE_MAX_M = 16
COLD_FACTOR = 3  # cold L2: rotate over at least this many L2s of data
MAX_COLD_SETS = 4096


def require_gpu() -> None:
    if not torch.cuda.is_available():
        raise SystemExit(
            "benchmarks need a CUDA GPU: timings of the Triton interpreter say nothing about the kernels. "
            "On a CPU machine, notebook 06 draws the figures from the H200 data recorded in data/."
        )


def l2_bytes() -> int:
    """The L2 size the device reports (60 MiB on the H200), not a constant."""
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)


@dataclass
class Timing:
    """Per-call microseconds of one implementation on one shape."""

    median_us: float
    lo_us: float  # spread: lowest per-pass median (several passes), else the replays' 25th percentile
    hi_us: float  # highest per-pass median, else the replays' 75th percentile
    min_us: float  # over every replay
    max_us: float
    reps: int  # calls in one graph replay
    rounds: int  # timed replays per pass
    passes: int
    samples: list[float] = field(default_factory=list, repr=False)

    def columns(self, nbytes: int, digits: int = 4) -> dict:
        """The CSV columns of this timing and the effective bandwidth of ``nbytes`` moved."""
        out = {k: round(getattr(self, k), digits) for k in ("median_us", "lo_us", "hi_us", "min_us", "max_us")}
        out.update(reps=self.reps, rounds=self.rounds, passes=self.passes, bytes=nbytes)
        out["tbps"] = round(nbytes / self.median_us / 1e6, 4)
        return out

    @classmethod
    def from_passes(cls, passes: list[list[float]], reps: int) -> Timing:
        flat = [t for p in passes for t in p]
        if len(passes) > 1:
            medians = [statistics.median(p) for p in passes]
            lo, hi = min(medians), max(medians)
        else:
            q = statistics.quantiles(flat, n=4, method="inclusive")
            lo, hi = q[0], q[2]
        return cls(statistics.median(flat), lo, hi, min(flat), max(flat), reps, len(passes[0]), len(passes), flat)


def ties(a_lo: float, a_hi: float, b_lo: float, b_hi: float) -> bool:
    """Two measured ranges that overlap: the difference is inside the spread."""
    return a_lo <= b_hi and b_lo <= a_hi


def verdict(a: dict, b: dict) -> str:
    """Timing row ``a`` against ``b`` (``median_us``, ``lo_us``, ``hi_us``): ``"win"`` (a faster,
    ranges apart), ``"loss"``, or ``"tie"`` (the ranges overlap)."""
    if ties(a["lo_us"], a["hi_us"], b["lo_us"], b["hi_us"]):
        return "tie"
    return "win" if a["median_us"] < b["median_us"] else "loss"


class GraphTimer:
    """``calls`` (one call per buffer set, used in rotation) captured ``reps`` times back to back
    in one CUDA graph; :meth:`replay` times the graph. ``reps=None`` sizes the graph from a short
    in-graph measurement (see the module docstring); an explicit ``reps`` fixes it."""

    def __init__(
        self,
        calls: list[Callable[[], object]],
        reps: int | None = None,
        min_calls: int = MIN_CALLS,
        min_replay_us: float = MIN_REPLAY_US,
    ):
        self.calls = calls
        self.stream = torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for _ in range(2):
                for c in calls:
                    c()
        torch.cuda.current_stream().wait_stream(self.stream)
        torch.cuda.synchronize()
        n = len(calls)
        if reps is None:
            probe = self._round(max(min_calls, n))
            self._capture(probe)
            per_call = statistics.median(self.replay(3))
            reps = self._round(max(min_calls, math.ceil(min_replay_us / max(per_call, 1e-3))))
            reps = min(reps, max(self._round(MAX_CALLS), probe))
            if reps != probe:
                self._capture(reps)
            # the probe's per-call time includes its capture's ramp, so the count can fall short of
            # the replay length (seen: 922 us for a 1 ms target): measured once more, and scaled up
            cap = max(self._round(MAX_CALLS), probe)
            replay = statistics.median(self.replay(3)) * self.graph_calls  # the whole replay, us
            if replay < min_replay_us and reps < cap:
                reps = min(cap, self._round(math.ceil(reps * 1.1 * min_replay_us / max(replay, 1e-3))))
                self._capture(reps)
        else:
            self._capture(self._round(reps))
        self.reps = self.graph_calls

    def _round(self, count: int) -> int:
        n = len(self.calls)
        return max(n, math.ceil(count / n) * n)

    def _capture(self, count: int) -> None:
        self.graph = None
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        keep = collections.deque(maxlen=len(self.calls))  # each output lives for one rotation
        with torch.cuda.graph(graph, stream=self.stream):
            for i in range(count):
                keep.append(self.calls[i % len(self.calls)]())
        keep.clear()
        graph.replay()  # the first replay uploads the graph: untimed
        torch.cuda.synchronize()
        self.graph, self.graph_calls = graph, count

    def replay(self, rounds: int) -> list[float]:
        """Per-call microseconds of ``rounds`` timed replays."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        out = []
        for _ in range(rounds):
            start.record()
            self.graph.replay()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1000 / self.graph_calls)
        return out

    def close(self) -> None:
        self.graph = None


def graph_time(calls: list[Callable[[], object]], rounds: int = ROUNDS, reps: int | None = None) -> Timing:
    """Time ``calls`` by graph replay (one pass; see :class:`GraphTimer`)."""
    timer = GraphTimer(calls, reps=reps)
    try:
        return Timing.from_passes([timer.replay(rounds)], timer.reps)
    finally:
        timer.close()


def time_interleaved(
    timers: dict[str, GraphTimer], passes: int, rounds: int = ROUNDS, after_pass: Callable[[], object] | None = None
) -> dict[str, Timing]:
    """Replay every timer ``rounds`` times per pass, the implementations interleaved within each
    pass (and their order rotated from pass to pass), so a drift in clocks or a neighbour's load
    lands on all of them alike. ``after_pass`` (e.g. a clock reading) runs after each pass."""
    names = list(timers)
    samples: dict[str, list[list[float]]] = {k: [] for k in names}
    for p in range(passes):
        order = names[p % len(names) :] + names[: p % len(names)]
        for name in order:
            samples[name].append(timers[name].replay(rounds))
        if after_pass is not None:
            after_pass()
    return {k: Timing.from_passes(v, timers[k].reps) for k, v in samples.items()}


def time_calls(
    calls: dict[str, Callable[[], object] | list[Callable[[], object]]],
    passes: int,
    rounds: int = ROUNDS,
    after_pass: Callable[[], object] | None = None,
) -> dict[str, Timing]:
    """One graph per name (:class:`GraphTimer`; a list of calls is one call per buffer set, used
    in rotation), timed in interleaved passes (:func:`time_interleaved`), the graphs released
    afterwards."""
    timers = {name: GraphTimer(fn if isinstance(fn, list) else [fn]) for name, fn in calls.items()}
    try:
        return time_interleaved(timers, passes, rounds, after_pass)
    finally:
        for timer in timers.values():
            timer.close()


def n_buffer_sets(bytes_per_call: int, cold: bool) -> int:
    """1 for warm L2; for cold L2 enough sets to move ``COLD_FACTOR`` L2s between two uses of
    one set (at least 2, so no call follows its own buffers)."""
    if not cold:
        return 1
    return int(max(2, math.ceil(COLD_FACTOR * l2_bytes() / max(bytes_per_call, 1))))


def cold_feasible(bytes_per_call: int) -> bool:
    """Cold L2 is measured where the rotation needs at most ``MAX_COLD_SETS`` buffer sets."""
    return n_buffer_sets(bytes_per_call, True) <= MAX_COLD_SETS


def warm_clocks(seconds: float = 1.0) -> dict:
    """Run bf16 matrix products for about ``seconds`` so the GPU leaves its idle clocks; returns
    the ``nvidia-smi`` state before and after."""
    before = provenance.gpu_state()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
    return {"before": before, "after": provenance.gpu_state(), "seconds": round(time.perf_counter() - t0, 2)}


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
    tl.store(out_ptr + offs, (a + b).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _empty_kernel(x_ptr):
    pass


def stream_ceiling(numel_out: int, dtype=torch.bfloat16, out_dtype=None) -> dict:
    """Best TB/s of plain Triton kernels that read two ``numel_out`` streams and write one (of
    ``out_dtype``, default ``dtype``: one byte an element is the FP8 op's pattern), with the
    cold-L2 rotation of the sweep (two buffer sets at these sizes)."""
    out_dtype = out_dtype or dtype
    out = torch.empty(numel_out, device="cuda", dtype=out_dtype)
    nbytes = numel_out * (2 * torch.finfo(dtype).bits // 8 + out.element_size())
    sets = [
        (torch.randn(numel_out, device="cuda").to(dtype), torch.randn(numel_out, device="cuda").to(dtype))
        for _ in range(n_buffer_sets(nbytes, True))
    ]
    best = None
    for block in (1024, 2048, 4096, 8192):
        for warps in (4, 8):
            for evict in (False, True):
                grid = (triton.cdiv(numel_out, block),)
                calls = [
                    lambda a=a, b=b, block=block, warps=warps, evict=evict, grid=grid: _stream_kernel[grid](
                        a, b, out, numel_out, BLOCK=block, EVICT=evict, num_warps=warps
                    )
                    for a, b in sets
                ]
                t = graph_time(calls)
                tbps = nbytes / t.median_us / 1e6
                if best is None or tbps > best["tbps"]:
                    best = {"tbps": tbps, "block": block, "warps": warps, "evict_first": evict, "us": t.median_us}
                    best.update(lo_us=t.lo_us, hi_us=t.hi_us, reps=t.reps)
    if out_dtype == dtype:
        src = torch.empty(numel_out * 2, device="cuda", dtype=dtype)
        dst = torch.empty_like(src)
        t_copy = graph_time([lambda: dst.copy_(src)])
        best["torch_copy_tbps"] = 2 * src.numel() * src.element_size() / t_copy.median_us / 1e6
    best["bytes"] = nbytes
    return best


def empty_kernel_us() -> dict:
    x = torch.empty(1, device="cuda")
    t = graph_time([lambda: _empty_kernel[(1,)](x)])
    return {"median_us": round(t.median_us, 4), "lo_us": round(t.lo_us, 4), "hi_us": round(t.hi_us, 4), "reps": t.reps}


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


def _configure_dynamo() -> None:
    """The benchmark compiles one static graph per shape (about 90): raise dynamo's recompile
    limits so it never falls back to eager, and turn off automatic dynamic shapes so only the
    dimension marked dynamic is symbolic."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 1024
    torch._dynamo.config.accumulated_cache_size_limit = 8192
    torch._dynamo.config.automatic_dynamic_shapes = False


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


def implementations(shape: Shape) -> dict[str, tuple[Callable, str]]:
    """name -> (fn(x, w) -> out, the configuration in words for this shape)."""
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
        "l2": mode,
        **t.columns(nbytes, 4),
        "fits_l2": nbytes <= l2_bytes(),
        "floor_us": round(nbytes / (ceiling_tbps * 1e6), 4),
    }


def bench_silu(
    shape_list: list[Shape], cold: bool, ceiling_tbps: float, progress: bool = True, impl_filter=None
) -> list[dict]:
    """Warm L2 on every shape; cold L2 (``cold``) where :func:`cold_feasible`. Decode shapes get
    :data:`DECODE_PASSES` interleaved passes, the others :data:`OTHER_PASSES`."""
    from tqdm.auto import tqdm

    rows = []
    it = tqdm(shape_list, desc="silu_and_mul shapes", unit="shape", disable=not progress)
    for shape in it:
        it.set_postfix_str(shape.label)
        nbytes = silu_bytes(shape.M, shape.N, shape.weighted)
        modes = ["warm"] + (["cold"] if cold and cold_feasible(nbytes) else [])
        passes = DECODE_PASSES if shape.M <= DECODE_MAX_M else OTHER_PASSES
        impls = {k: v for k, v in implementations(shape).items() if not impl_filter or k in impl_filter}
        for mode in modes:
            bufs = _buffers(shape, n_buffer_sets(nbytes, mode == "cold"))
            timings = time_calls(
                {name: [lambda fn=fn, b=b: fn(*b) for b in bufs] for name, (fn, _) in impls.items()}, passes
            )
            clock = provenance.gpu_state().get("sm_clock_mhz")
            for name, t in timings.items():
                rows.append({**_row(shape, name, impls[name][1], mode, t, nbytes, ceiling_tbps), "sm_clock_mhz": clock})
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


# ---- FP8 per-token-group -----------------------------------------------------------------------

FP8_IMPLS = {
    "fused": "the fused Triton kernel (silu_and_mul_fp8_group_quant), outputs preallocated, PDL on (the sm_90 default)",
    "fused_no_pdl": "the same fused kernel launched with enable_pdl=False, outputs preallocated",
    "unfused": "silu_and_mul then fp8_group_quant (Triton), outputs preallocated, PDL on (the sm_90 default)",
    "torch_compile_static": "torch.compile(dynamic=False) of the torch reference of the fused op (all rows); "
    f"at decode (M = 16) the fastest of {COMPILE_DRAWS} fresh compilations (inductor's autotuner draws its "
    "reduction config once, at the first call: experiment S), every draw's median in compile_draws_us",
    "fused_2d_present": "masked cases: the fused kernel on the rows present as one contiguous 2-D input "
    "(fresh random data), outputs preallocated, PDL on",
    "silu_and_mul_alone": "decode cases: silu_and_mul alone (the Triton port, bf16 out preallocated, PDL on), "
    "timed in the same passes as the fused op (bytes: its own, 6N a row)",
}
FP8_PASSES = 5  # interleaved passes of every FP8 case: the M = 49152 medians moved with the clock
#: cold L2 where the working set of a call can sit in the 60 MiB L2: M = 1024 (8-16 MB a call),
#: M = 8192 (63-126 MB, part of it) and the masked cases (a call reads only the rows present: 7-14 MB
#: at 921 rows, 60-114 MB at 7368). Not at M = 16:
#: a decode step reads an activation its GEMM has just written, so it is L2-warm in a server.
FP8_COLD_MS = (1024, 8192)
#: the name the ceiling's copy is timed under, in the passes of an M = 49152 case (not a CSV row)
CEILING_COPY = "ceiling_copy_same_passes"

#: where the FP8 sweep's method differs from the silu sweep's (recorded with its rows)
FP8_TIMING = {
    "passes": FP8_PASSES,
    "ceiling_same_passes": "at M = 49152 (warm) the FP8-pattern ceiling's copy, in the configuration the "
    "run's ceiling search found best, is timed in the same interleaved passes as the case's "
    "implementations: ceiling_same_passes_tbps, its pass medians in ceiling_same_passes_pass_us "
    "(from the sweep after 7192cb8); the 97% target then counts each case at the lower of its shares "
    "of the run-start ceiling and of this copy. In those cases the SM clock is also sampled every ~20 ms "
    "within each pass (nvidia-smi --loop-ms): pass_clock_sampled_min_mhz, pass_clock_samples; the first "
    "window also holds the readings taken while the case's graphs were captured",
    "output_policy": "fused and unfused write into preallocated outputs; torch.compile allocates its own",
    "pdl": "fused (and unfused) launch with PDL, the package default on sm_90: a graph of back-to-back "
    "calls lets each call's prologue overlap the previous call's tail. fused_no_pdl is the same kernel "
    "without it; torch.compile and the ceiling kernel launch without PDL",
    "l2": "warm for every case; cold as well at M in (1024, 8192) and for the masked cases, rotating over "
    f">= {COLD_FACTOR} x L2 of buffer sets; not at M = 16, where a server's input is L2-warm",
    "clocks": "SM clock, power and throttle reasons read after every pass: sm_clock_mhz is their median, "
    "sm_clock_min/max the extremes, throttle_reasons every reason seen; pass_medians_us and pass_clocks_mhz "
    "pass by pass (from the sweep after 72ae121)",
    "compile_at_decode": f"torch.compile static at M = 16: {COMPILE_DRAWS} fresh compilations (empty inductor "
    "caches, each autotuned at its first call), timed in the same passes; the fastest is the baseline "
    "(from the sweep after cf4b87e)",
    "masked_sweep": "past T = 256 (the same ragged counts at T = 512, 1024, 2048; the counts x 8 at T = 2048) "
    "only fused, fused_no_pdl and fused_2d_present are timed (from the sweep after cf4b87e)",
}


def _best_compile_draw(case: dict) -> tuple[int, list[float]]:
    """The fastest of :func:`fp8_bench.compile_draws` fresh compilations of torch.compile static on
    ``case`` (each compiled and autotuned in empty caches, then all timed in the same interleaved
    passes): ``(its index, every draw's median us)``; ``(0, [])`` where one draw is made."""
    from inkling_workbook.measure import fp8_bench

    n = fp8_bench.compile_draws(case)
    if n == 1:
        return 0, []
    calls = {}
    for draw in range(n):
        fn = fp8_bench.fp8_impls(case, draw=draw)["torch_compile_static"][0]
        with fp8_bench.fresh_compile():
            fn()  # compiled and autotuned here, afresh
        calls[draw] = fn
    t = time_calls(calls, DECODE_PASSES)
    medians = [t[draw].median_us for draw in range(n)]
    return medians.index(min(medians)), medians


def _fp8_cold(case: dict) -> bool:
    return case["M"] in FP8_COLD_MS or case["masked_m"] is not None


def _fp8_ceiling_copy(numel_out: int, cfg: dict) -> tuple[Callable[[], object], int]:
    """The FP8-pattern ceiling's copy in the configuration :func:`stream_ceiling` found best
    (``cfg``: block, warps, evict_first), on buffers of its own: (the call, bytes moved)."""
    a, b = (torch.randn(numel_out, device="cuda").bfloat16() for _ in range(2))
    out = torch.empty(numel_out, device="cuda", dtype=torch.uint8)
    grid = (triton.cdiv(numel_out, cfg["block"]),)

    def call():
        _stream_kernel[grid](a, b, out, numel_out, BLOCK=cfg["block"], EVICT=cfg["evict_first"], num_warps=cfg["warps"])

    return call, numel_out * 5


def bench_fp8(
    ceilings: dict, quick: bool = False, progress: bool = True, cold: bool = True, ceiling_configs: dict | None = None
) -> list[dict]:
    """The cases of :mod:`inkling_workbook.measure.fp8_bench`, the implementations of a case timed in
    :data:`FP8_PASSES` interleaved passes, warm L2 and (``cold``) cold L2 where :func:`_fp8_cold`;
    ``ceilings`` maps N to the FP8-pattern streaming ceiling (TB/s) measured in this run at
    M = 49152. Before a case is timed, its fused and unfused outputs are compared bit for bit.
    ``ceiling_configs`` (N to the ceiling's best configuration): at M = 49152 the ceiling's copy is
    timed in the same passes as the case's implementations too, so that both see the same clocks
    and power state (``ceiling_same_passes_tbps``)."""
    from tqdm.auto import tqdm

    from inkling_workbook.measure import fp8_bench

    _configure_dynamo()
    cases = fp8_bench.fp8_cases()
    if quick:
        cases = [c for c in cases if c["M"] in (16, 49152) and not (c["column_major_scales"] or c["scale_ue8m0"])]
    rows = []
    it = tqdm(cases, desc="fp8 cases", disable=not progress)
    for case in it:
        it.set_postfix_str(case["name"])
        draw, draws_us = _best_compile_draw(case)
        for mode in ["warm"] + (["cold"] if cold and _fp8_cold(case) else []):
            first = fp8_bench.fp8_impls(case, draw=draw)
            fp8_bench.check_fused_equals_unfused(case, first)  # outputs checked before they are timed
            nsets = n_buffer_sets(fp8_bench.fp8_bytes(case), mode == "cold")
            sets = [first] + [fp8_bench.fp8_impls(case, seed=i, draw=draw) for i in range(1, nsets)]
            states: list[dict] = []
            timed = [name for name in first if fp8_bench.is_timed(case, name)]
            calls = {name: [s[name][0] for s in sets] for name in timed}
            cfg = (ceiling_configs or {}).get(case["N"])
            copy_bytes = None
            if cfg and case["M"] == 49152 and case["masked_m"] is None and mode == "warm":
                copy, copy_bytes = _fp8_ceiling_copy(case["M"] * case["N"], cfg)
                calls[CEILING_COPY] = [copy]
            sampler = provenance.ClockSampler() if copy_bytes else None  # M = 49152: the clock within each pass

            def after_pass(sampler=sampler):
                if sampler is not None:
                    sampler.mark()
                states.append(provenance.gpu_state())

            with sampler or contextlib.nullcontext():
                timings = time_calls(calls, FP8_PASSES, after_pass=after_pass)
            del sets, calls
            copy = None  # its buffers (up to 755 MB) freed before the next case
            same = {}
            if sampler is not None:
                same["pass_clock_sampled_min_mhz"] = " ".join(f"{min(w):.0f}" if w else "-" for w in sampler.windows)
                same["pass_clock_samples"] = " ".join(str(len(w)) for w in sampler.windows)
            if copy_bytes:
                tc = timings[CEILING_COPY]
                same |= {
                    "ceiling_same_passes_tbps": round(copy_bytes / tc.median_us / 1e6, 4),
                    "ceiling_same_passes_pass_us": " ".join(
                        f"{statistics.median(tc.samples[i : i + tc.rounds]):.4f}"
                        for i in range(0, len(tc.samples), tc.rounds)
                    ),
                }
            clocks = [float(st["sm_clock_mhz"]) for st in states if st.get("sm_clock_mhz")]
            reasons = sorted({st.get("throttle_reasons") for st in states if st.get("throttle_reasons")})
            for name in timed:
                nbytes, t = first[name][1], timings[name]
                per_pass = [t.samples[i : i + t.rounds] for i in range(0, len(t.samples), t.rounds)]
                ceiling = ceilings.get(case["N"])
                rows.append(
                    {
                        "op": "silu_and_mul_fp8",
                        "case": case["name"],
                        "M": case["M"],
                        "N": case["N"],
                        "layout": "il" if case["interleaved"] else "nil",
                        "column_major_scales": case["column_major_scales"],
                        "scale_ue8m0": case["scale_ue8m0"],
                        "masked": case["masked_m"] is not None,
                        "E": case["E"],
                        "T": case["T"],
                        "impl": name,
                        "config": FP8_IMPLS[name],
                        "l2": mode,
                        "buffer_sets": nsets,
                        **t.columns(nbytes, 4),
                        "ceiling_tbps": round(ceiling, 4) if ceiling else None,
                        "ceiling_same_passes_tbps": same.get("ceiling_same_passes_tbps"),
                        "ceiling_same_passes_pass_us": same.get("ceiling_same_passes_pass_us", ""),
                        # M = 49152 with the copy: the lowest SM clock sampled every ~20 ms within each pass
                        "pass_clock_sampled_min_mhz": same.get("pass_clock_sampled_min_mhz", ""),
                        "pass_clock_samples": same.get("pass_clock_samples", ""),
                        "sm_clock_mhz": statistics.median(clocks) if clocks else None,
                        "sm_clock_min": min(clocks) if clocks else None,
                        "sm_clock_max": max(clocks) if clocks else None,
                        "throttle_reasons": " ".join(reasons),
                        # pass by pass, in the order timed: a median that moves with the clock shows here
                        "pass_medians_us": " ".join(f"{statistics.median(p):.4f}" for p in per_pass),
                        "pass_clocks_mhz": " ".join(f"{c:.0f}" for c in clocks),
                        # torch.compile static at decode: every fresh compilation's median, the fastest timed
                        "compile_draws_us": " ".join(f"{d:.4f}" for d in draws_us)
                        if name == "torch_compile_static"
                        else "",
                    }
                )
            del first
    return rows


def run_fp8(meta: dict, csv_path: str | Path) -> list[dict]:
    """The FP8 part of a sweep: the FP8-pattern ceilings at M = 49152 (into ``meta``), then the
    cases, written to ``csv_path``, and beside it the record the FP8 plots read
    (``provenance.companion(csv_path, "meta")``: ``meta`` with the FP8 method). Returns the rows."""
    for n in (1536, 3072):
        meta[f"ceiling_fp8_49152x{n}"] = stream_ceiling(49152 * n, out_dtype=torch.uint8)
    meta["fp8_impls"] = FP8_IMPLS
    meta["fp8_timing"] = FP8_TIMING
    rows = bench_fp8(
        {n: meta[f"ceiling_fp8_49152x{n}"]["tbps"] for n in (1536, 3072)},
        ceiling_configs={n: meta[f"ceiling_fp8_49152x{n}"] for n in (1536, 3072)},
    )
    write_csv(rows, csv_path)
    own = {
        **meta,
        "timing": {**meta.get("timing", timing_meta()), **FP8_TIMING},
        "gpu_state_after": provenance.gpu_state(),
    }
    provenance.write_record(provenance.companion(csv_path, "meta"), json.dumps(own, indent=1) + "\n")
    return rows


# ---- driver ----------------------------------------------------------------------------------


def timing_meta() -> dict:
    """The timing method's constants, as every record of a sweep states them."""
    return {
        "min_calls": MIN_CALLS,
        "min_replay_us": MIN_REPLAY_US,
        "rounds": ROUNDS,
        "decode_passes": DECODE_PASSES,
        "other_passes": OTHER_PASSES,
        "spread": "lowest and highest pass median; with one pass, the replays' 25th and 75th percentiles",
        "decode_max_m": DECODE_MAX_M,
        "output_policy": "every implementation allocates its output (free at graph replay)",
        "tie": "two timings whose [lo_us, hi_us] ranges overlap",
    }


def write_csv(rows: list[dict], path: str | Path) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    provenance.write_record(path, buf.getvalue())


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
    meta["empty_kernel"] = empty_kernel_us()
    meta["empty_kernel_us"] = meta["empty_kernel"]["median_us"]
    meta["ceiling_49152x768"] = stream_ceiling(49152 * 768)
    meta["ceiling_49152x3072"] = stream_ceiling(49152 * 3072)
    ceiling = meta["ceiling_49152x3072"]["tbps"]
    meta["ceiling_tbps_used_for_floors"] = ceiling
    meta["method"] = __doc__.strip().split("\n\n", 1)[1]
    meta["method_check"] = method_check()
    rows = bench_silu(shapes(quick), cold, ceiling)
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
