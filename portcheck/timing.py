"""Timing both sides on CUDA: each call captured in a CUDA graph of a fixed count of calls, the
graphs replayed in passes interleaved between the two sides; the median of the per-pass medians
and their range, in microseconds a call. (Not on a CPU: interpreter timings say nothing about
kernels.)"""

from __future__ import annotations

import statistics

import torch

REPS = 100  # calls a graph
PASSES = 3  # interleaved passes
ROUNDS = 5  # replays a pass


def _graph(call, reps: int):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up: compile, autotune, allocate outside the capture
            call()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            call()
    return graph


def time_calls(calls: dict, reps: int = REPS, passes: int = PASSES, rounds: int = ROUNDS) -> dict:
    """``{name: {"median_us", "lo_us", "hi_us", "reps", "passes"}}`` for each call of ``calls``."""
    graphs = {name: _graph(call, reps) for name, call in calls.items()}
    per_pass = {name: [] for name in calls}
    for _ in range(passes):
        for name, graph in graphs.items():
            times = []
            for _ in range(rounds):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1000 / reps)
            per_pass[name].append(statistics.median(times))
    return {
        name: {"median_us": statistics.median(m), "lo_us": min(m), "hi_us": max(m), "reps": reps, "passes": passes}
        for name, m in per_pass.items()
    }


def timings(original, port, cases, device, inputs) -> dict:
    """Both callables on each case's inputs (``inputs(case, device) -> (args, kwargs)``)."""
    out = {}
    for case in cases:
        calls = {}
        for side, fn in (("original", original), ("port", port)):
            args, kwargs = inputs(case, device)
            calls[side] = lambda fn=fn, args=args, kwargs=kwargs: fn(*args, **kwargs)
        out[case.name] = time_calls(calls)
    return out
