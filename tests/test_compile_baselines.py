"""The torch.compile baselines compiled fresh (issue 40), on the CPU: the fresh-compile helper
really compiles again (dynamo's graph counter, inductor's FX graph cache), the compile columns
as the sweeps declare them, and the replay-count rule every planned row must meet."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from inkling_workbook.measure import compile_baselines as cb
from inkling_workbook.measure import timing


def _tiny(x):
    return torch.nn.functional.silu(x) * 2.0


def test_compile_fresh_compiles_again_after_a_reset():
    """Each fresh compile of the same function is a graph of its own; the same compile object
    called again is not (the control: a counter that could not move would fail the first part)."""
    x = torch.randn(8, 16)
    cb.new_state()
    before = counters["stats"]["unique_graphs"]
    first = cb.compile_fresh(_tiny, [((x,), ())], backend="eager")
    assert first.graphs == 1 and counters["stats"]["unique_graphs"] == before + 1
    first.fn(x)  # the same object, same shape: served by its guards, no graph
    assert counters["stats"]["unique_graphs"] == before + 1
    cb.new_state()
    second = cb.compile_fresh(_tiny, [((x,), ())], backend="eager")
    assert second.graphs == 1 and counters["stats"]["unique_graphs"] == before + 2
    assert second.cache_dir != first.cache_dir
    assert torch.equal(second.fn(x), _tiny(x))


def test_compile_fresh_marks_the_dynamic_dims_and_compiles_the_timed_shape_inside():
    """An M-dynamic column: compiled at its compile size with M marked, then called at the timed
    size inside the same fresh state: one graph serves both (no compile left for the timer)."""
    big, small = torch.randn(64, 16), torch.randn(5, 16)
    cb.new_state()
    c = cb.compile_fresh(_tiny, [((big,), (0,)), ((small,), (0,))], dynamic=None, backend="eager", tag="dyn")
    assert c.graphs == 1
    n = counters["stats"]["unique_graphs"]
    torch._dynamo.mark_dynamic(small, 0)
    c.fn(small)
    assert counters["stats"]["unique_graphs"] == n


def test_each_column_compiles_its_own_code_object():
    f1, f2 = cb.own_code(_tiny, "default"), cb.own_code(_tiny, "max_autotune")
    assert f1.__code__ is not f2.__code__ and f1.__code__.co_name == "_tiny_default"
    x = torch.randn(3, 4)
    assert torch.equal(f1(x), _tiny(x)) and torch.equal(f2(x), _tiny(x))


def test_compile_fresh_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        cb.compile_fresh(_tiny, [((torch.randn(2),), ())], mode="reduce-overhead", backend="eager")
    assert "CUDA graphs off" in cb.mode_config("max_autotune") and "fresh" in cb.mode_config("default")


def test_inductor_fresh_cache_misses_where_a_plain_recompile_hits():
    """With inductor on the CPU: after a reset, compiling the same graph again outside a fresh
    cache is served from inductor's FX graph cache (a hit); :func:`compile_fresh` misses it,
    so its kernels and their configs are made anew."""
    import torch._inductor.config as ic

    if not ic.fx_graph_cache:
        pytest.skip("this torch has inductor's FX graph cache off: nothing to miss")
    x = torch.randn(32, 64)

    def run_plain():
        torch._dynamo.reset()
        return torch.compile(_tiny)(x)

    from torch._inductor.utils import fresh_cache

    with fresh_cache():  # a private cache dir for the control, so the test leaves no files behind
        run_plain()
        hits = counters["inductor"]["fxgraph_cache_hit"]
        run_plain()
        assert counters["inductor"]["fxgraph_cache_hit"] == hits + 1  # the control: a plain recompile hits
        hits, misses = counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]
        cb.new_state()
        c = cb.compile_fresh(_tiny, [((x,), ())])
    assert counters["inductor"]["fxgraph_cache_hit"] == hits
    assert counters["inductor"]["fxgraph_cache_miss"] == misses + 1 and c.graphs == 1
    assert torch.allclose(c.fn(x), _tiny(x))


# ---- the replay-count rule -------------------------------------------------------------------


@pytest.mark.parametrize("per_call", [0.3, 0.55, 0.9, 1.0, 1.7, 9.99, 10.0, 11.0, 207.0, 450.0, 5000.0])
@pytest.mark.parametrize("sets", [1, 2, 7, 126, 4096])
def test_planned_reps_meet_the_rule(per_call, sets):
    reps = timing.planned_reps(per_call, sets)
    assert reps % sets == 0
    assert timing.meets_replay_rule(reps, per_call)
    assert reps * per_call >= timing.REPLAY_MARGIN * timing.MIN_REPLAY_US or reps >= timing.MAX_CALLS
    # not more than needed: one rotation fewer would miss the margin or the 100 calls
    fewer = reps - sets
    assert fewer < timing.MIN_CALLS or fewer * per_call < timing.REPLAY_MARGIN * timing.MIN_REPLAY_US


def test_meets_replay_rule_refuses_short_or_few():
    assert not timing.meets_replay_rule(99, 20.0)  # 1.98 ms but 99 calls
    assert not timing.meets_replay_rule(900, 1.0)  # 900 calls, 0.9 ms
    assert timing.meets_replay_rule(100, 10.0) and timing.meets_replay_rule(1000, 1.0)


def _fake_measure(true_us: float, probe_bias: float, log: list):
    """A graph of ``count`` calls: the probe (the first capture) reads ``probe_bias`` x slower
    per call, as the capture's ramp makes it on the GPU; later graphs read ``true_us``."""

    def measure(count):
        log.append(count)
        return true_us * (probe_bias if len(log) == 1 else 1.0)

    return measure


@pytest.mark.parametrize("true_us", [0.6, 1.0, 1.15, 3.0, 50.0, 207.0])
@pytest.mark.parametrize("bias", [1.0, 1.3, 2.5])
@pytest.mark.parametrize("sets", [1, 3, 64])
def test_size_graph_ends_at_a_replay_of_at_least_1_ms(true_us, bias, sets):
    log: list = []
    reps = timing.size_graph(_fake_measure(true_us, bias, log), sets)
    assert reps == log[-1] and reps % sets == 0  # the last graph captured is the one timed
    assert timing.meets_replay_rule(reps, true_us), (reps, true_us)
    assert len(log) <= 1 + timing.SIZE_TRIES


def test_size_graph_resizes_when_the_replay_falls_short():
    """The graph sized from a probe that read 1.3x too slow holds too few calls: measured again,
    it is resized (the old method's single 1.1x correction let 894-999 us replays through)."""
    log: list = []
    calls = iter([1.3, 1.0, 0.8, 0.8])  # per call: probe, first graph, then faster still

    def measure(count):
        log.append(count)
        return next(calls)

    reps = timing.size_graph(measure, 1)
    assert log[0] == timing.MIN_CALLS and len(log) >= 3
    assert timing.meets_replay_rule(reps, 0.8)


def _predicted_us(nbytes: int, launch_us: float = 0.6, tbps: float = 4.0) -> float:
    """A per-call time for planning: the launch floor or the bytes at the streaming ceiling."""
    return max(launch_us, nbytes / (tbps * 1e6))


def test_every_planned_sweep_row_meets_the_rule():
    """Every silu shape (warm, and cold with its buffer sets) and every NVFP4 and FP8 case, at the
    time the bytes predict and at 3x it (a slower baseline): >= 100 calls and >= 1 ms a replay."""
    from inkling_workbook.measure import bench, fp8_cases, nvfp4_sweep

    l2 = 60 * 2**20
    rows = [(bench.silu_bytes(s.M, s.N, s.weighted)) for s in bench.shapes()]
    rows += [nvfp4_sweep.nvfp4_bytes(M, N, True, M + 128 * 8) for M in nvfp4_sweep.NVFP4_M for N in nvfp4_sweep.NVFP4_N]
    rows += [fp8_cases.fp8_bytes(c) for c in fp8_cases.fp8_cases()]
    checked = 0
    for nbytes in rows:
        for sets in (1, max(2, -(-timing.COLD_FACTOR * l2 // nbytes))):
            for slow in (1.0, 3.0):
                per_call = _predicted_us(nbytes) * slow
                reps = timing.planned_reps(per_call, sets)
                assert timing.meets_replay_rule(reps, per_call), (nbytes, sets, per_call, reps)
                checked += 1
    assert checked == 4 * len(rows) > 400
