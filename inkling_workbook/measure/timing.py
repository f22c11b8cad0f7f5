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
   every size (decode, M <= 16, and above; the FP8 sweep five past decode); each pass replays
   every graph ``rounds`` times.
   The SM clock is read after each shape.
6. Report the median over all replays and the spread: ``lo_us``/``hi_us`` are the lowest and
   highest per-pass median (with a single pass, the replays' quartiles; ``min_us``/``max_us``
   keep the extremes). Two timings whose [lo, hi] ranges overlap are a tie. A difference
   outside the ranges but smaller than the run-to-run reproducibility that the publishing job
   measures (notebook 06 re-times a subset) is still a win or a loss, marked as one a second run
   could reverse (``speedup.speedup_table``'s ``near_*``).
7. In the silu sweep every implementation allocates its output (inside a captured graph an allocation costs
   nothing at replay), so all follow the same output policy.
8. Effective bandwidth = bytes the op must move (reads + writes, counted, not measured) / time.

Ceilings in the same run: the best of a sweep of plain Triton streaming kernels with this op's
access pattern (read two streams, write one of half their size), torch's ``copy_``, and an empty
Triton kernel under graph replay (the launch floor).
"""

from __future__ import annotations

import collections
import csv
import io
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import triton
import triton.language as tl

from inkling_workbook.measure import provenance

MIN_CALLS = 100  # calls in one timed graph, at least
MIN_REPLAY_US = 1000.0  # and enough of them for a replay of at least this long
MAX_CALLS = 20000
REPLAY_MARGIN = 1.2  # a graph is sized for 1.2 x MIN_REPLAY_US, so the timed replays stay above it
ACCEPT_MARGIN = 1.1  # a graph measured at >= 1.1 x MIN_REPLAY_US a replay is kept as it is
SIZE_TRIES = 3  # resizes of a graph before it is timed
ROUNDS = 10  # timed replays per pass
DECODE_PASSES = 3
OTHER_PASSES = 3  # replays are cheap next to captures and compiles: three interleaved passes at every size
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
        if reps is None:  # sized by measurement; the last graph measured is the one timed
            size_graph(self._measure, len(calls), min_calls, min_replay_us)
        else:
            self._capture(self._round(reps))
        self.reps = self.graph_calls

    def _round(self, count: int) -> int:
        return round_to_sets(count, len(self.calls))

    def _measure(self, count: int) -> float:
        """Capture ``count`` calls (a multiple of the buffer sets) and return the per-call us of
        the median of three replays (:func:`size_graph`'s measurement)."""
        self._capture(count)
        return statistics.median(self.replay(3))

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


def round_to_sets(count: int, n_sets: int) -> int:
    """``count`` rounded up to a whole number of rotations over ``n_sets`` buffer sets."""
    return max(n_sets, math.ceil(count / n_sets) * n_sets)


def planned_reps(per_call_us: float, n_sets: int = 1, min_calls: int = MIN_CALLS,
                 min_replay_us: float = MIN_REPLAY_US) -> int:  # fmt: skip
    """The calls one timed graph holds for a call of ``per_call_us``: at least ``min_calls``, and
    enough for a replay of ``REPLAY_MARGIN`` x ``min_replay_us`` (the timed replays can run faster
    than the measurement that sized them: clocks boost, the capture's ramp is gone), a whole number
    of rotations over ``n_sets``; at most :data:`MAX_CALLS` rounded up to the sets."""
    want = max(min_calls, math.ceil(REPLAY_MARGIN * min_replay_us / max(per_call_us, 1e-3)))
    return round_to_sets(min(want, MAX_CALLS), n_sets)


def meets_replay_rule(reps: int, per_call_us: float, min_calls: int = MIN_CALLS,
                      min_replay_us: float = MIN_REPLAY_US) -> bool:  # fmt: skip
    """The method's rule for one timed graph: at least ``min_calls`` calls and a replay of at
    least ``min_replay_us`` at the per-call time measured."""
    return reps >= min_calls and reps * per_call_us >= min_replay_us


def size_graph(measure: Callable[[int], float], n_sets: int, min_calls: int = MIN_CALLS,
               min_replay_us: float = MIN_REPLAY_US, tries: int = SIZE_TRIES) -> int:  # fmt: skip
    """The call count of a timed graph: ``measure(count)`` captures ``count`` calls and returns
    the per-call us of a replay. A probe of ``min_calls`` calls gives the first estimate; a graph
    whose replay falls short of ``ACCEPT_MARGIN`` x ``min_replay_us`` is resized from its own
    measurement (:func:`planned_reps`, sized for ``REPLAY_MARGIN`` x) and measured again, up to
    ``tries`` times: a probe's per-call time includes its capture's ramp (seen: 922 us for a 1 ms
    target with one resize). Returns the count of the last graph ``measure`` captured."""
    count = round_to_sets(min_calls, n_sets)
    per_call = measure(count)
    for _ in range(tries):
        if meets_replay_rule(count, per_call, min_calls, ACCEPT_MARGIN * min_replay_us):
            break
        want = planned_reps(per_call, n_sets, min_calls, min_replay_us)
        if want <= count:  # at the cap
            break
        count = want
        per_call = measure(count)
    return count


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


# ---- the torch.compile baselines' settings and the records ----------------------------------


def _configure_dynamo() -> None:
    """The benchmark compiles one static graph per shape (about 90): raise dynamo's recompile
    limits so it never falls back to eager, and turn off automatic dynamic shapes so only the
    dimension marked dynamic is symbolic."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 1024
    torch._dynamo.config.accumulated_cache_size_limit = 8192
    torch._dynamo.config.automatic_dynamic_shapes = False


def timing_meta() -> dict:
    """The timing method's constants, as every record of a sweep states them."""
    return {
        "min_calls": MIN_CALLS,
        "min_replay_us": MIN_REPLAY_US,
        "graph_sizing": f"planned for {REPLAY_MARGIN} x min_replay_us; a graph measured below {ACCEPT_MARGIN} x "
        f"is resized from its own measurement, up to {SIZE_TRIES} times (size_graph)",
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


def write_records(rows: list[dict], meta: dict, out: str | Path) -> tuple[Path, Path]:
    """The CSV ``out`` and its provenance JSON beside it, each written atomically."""
    import json

    out = Path(out)
    write_csv(rows, out)
    meta_path = provenance.companion(out, "meta")
    provenance.write_record(meta_path, json.dumps(meta, indent=1) + "\n")
    return out, meta_path
