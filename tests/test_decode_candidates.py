"""Every candidate of tools/experiments/decode_candidates.py (issue 32) writes the port's bits on
the CPU (raw bits; both layouts, with and without weights; masked rows and columns), and the
script's PTX report builds for sm_90 offline."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from conftest import DEVICE, poisoned, randn

from inkling_kernels.silu_and_mul import silu_and_mul

_PATH = Path(__file__).resolve().parent.parent / "tools" / "experiments" / "decode_candidates.py"
_spec = importlib.util.spec_from_file_location("decode_candidates", _PATH)
dc = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("decode_candidates", dc)  # dataclasses look their module up there
_spec.loader.exec_module(dc)

# (M, N, interleaved): the port's 1x256 decode tile, the sglang table's 2x1024 / 16x128 / 4x512
# tiles with masked rows and columns, the fixed 1x512 and 1x1024 tiles over N = 768 (masked)
CASES = [(3, 768, False), (5, 1536, False), (3, 768, True), (2, 1536, True)]


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("M,N,il", CASES)
def test_every_candidate_writes_the_ports_bits(M, N, il, weighted, gen):
    x = randn((M, 2 * N), torch.bfloat16, gen, DEVICE, scale=4.0)
    w = torch.rand(M, generator=gen).to(DEVICE) if weighted else None
    want = silu_and_mul(x, w, interleaved=il, out=poisoned((M, N), torch.bfloat16, DEVICE))
    seen = set()
    for name, v in dc.candidates_for(weighted).items():
        # the wait and trigger exist only with PDL (compiled): on the CPU they compile away, so a
        # candidate that differs from another only there is the same program here
        key = (dc.tile_of(v, M, N, il), v.masks, v.grid2d, v.w_hint)
        if key in seen:
            continue
        seen.add(key)
        got = dc.run_variant(v, x, w, il, True, out=poisoned((M, N), torch.bfloat16, DEVICE))
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), name
    assert len(seen) >= 7


def test_candidates_name_what_they_switch():
    c = dc.CANDIDATES
    assert c["v_port"] == dc.Variant("port")
    assert c["wait_top"].wait_at == 1 and c["trigger_early"].trigger_at == 1
    assert c["sglang_recipe"] == dc.Variant("sglang", wait_at=1, masks=1, grid2d=1)
    assert "weight_nohint" not in dc.candidates_for(False) and "weight_nohint" in dc.candidates_for(True)
    assert dc.tile_of(c["tile_sglang"], 1, 768, False) == (2, 1024, 8)
    assert dc.tile_of(c["v_port"], 1, 768, False) == (1, 256, 4)
    assert len(dc.SHAPES) == 10


def test_ptx_report_places_the_wait():
    """Compiled for sm_90 offline: in the PTX the port's wait follows its index math and
    WAIT_AT=1 moves it to the top; the SASS of both (ptxas) is reported and compared."""
    report = dc.ptx_report()
    port = report["port nil 1x256"]["ptx"]
    top = report["variant nil 1x256 WAIT_AT=1"]["ptx"]
    assert port["int_arith_before_wait"] > top["int_arith_before_wait"]
    assert top["wait_index"] < port["wait_index"] < port["first_global_load"]
    # the package now signals right after its wait (issue 32's outcome); TRIGGER_AT=0, the
    # variants' default, is where it signalled before: after the store
    assert port["trigger_index"] < port["first_global_load"]
    assert top["first_global_store"] < top["trigger_index"]
    early = report["variant nil 1x256 WAIT_AT=0 TRIGGER_AT=1"]["ptx"]
    assert early["trigger_index"] < early["first_global_load"]
    assert isinstance(report["nil: SASS of WAIT_AT=0 and WAIT_AT=1 identical"], bool)


def _fake_time_calls(calls, passes, rounds=10, after_pass=None):
    """The timing replaced by one interpreted call of each (the empty kernels are GPU-only)."""
    from inkling_workbook.measure.timing import Timing

    for name, fn in calls.items():
        if not name.startswith("empty"):
            fn()
    return {name: Timing.from_passes([[1.0 + 0.01 * i, 1.1], [1.02, 1.2], [1.05, 1.1]], 100) for i, name in
            enumerate(calls)}  # fmt: skip


def test_the_gpu_path_runs_end_to_end_on_the_cpu(monkeypatch, tmp_path, capsys):
    """The script's timing path with the timer faked and the interpreter for the kernels: it
    checks bits, ranks, times the PDL-off rows and writes its CSV and provenance JSON."""
    import json

    from inkling_workbook.measure import provenance, timing

    monkeypatch.setattr(timing, "require_gpu", lambda: None)
    monkeypatch.setattr(timing, "warm_clocks", lambda *a: {})
    monkeypatch.setattr(timing, "time_calls", _fake_time_calls)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    monkeypatch.setattr(dc, "ptx_report", lambda: {})
    monkeypatch.setattr(dc, "DEVICE", "cpu")
    monkeypatch.setattr(dc, "SHAPES", [(1, 768, False, False), (3, 256, True, True)])
    path = dc.time_gpu(tmp_path)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["bits_equal_all"] is True and meta["skipped_for_time"] == []
    rows = path.read_text().splitlines()
    assert len(rows) == 1 + (len(dc.candidates_for(False)) + 3 + 1 + dc.TOP_NO_PDL) + (
        len(dc.candidates_for(True)) + 3 + 1 + dc.TOP_NO_PDL
    )
    assert "bits=True" in capsys.readouterr().out
