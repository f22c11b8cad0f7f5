"""The sglang-config baseline of the decode sweep writes the port's bits (raw bits, both layouts,
with and without per-row weights), and its configuration is the published table (issue 32)."""

import pytest
import torch
from conftest import DEVICE, poisoned, randn

from inkling_kernels.silu_and_mul import silu_and_mul
from inkling_workbook.measure import decode_baselines as db


def test_sglang_table_and_its_rules():
    c = db.sglang_config
    assert (c(768, False).label, c(1024, False).label) == ("2x1024/8w", "1x1024/4w")
    assert c(1536, False).label == c(3072, False).label == "4x512/8w"
    assert c(1536, False).rule == "default rule"
    assert (c(768, True).label, c(1024, True).label, c(2048, True).label) == ("16x128/8w", "1x1024/4w", "1x1024/4w")
    assert c(1536, True).label == c(3072, True).label == "1x1024/4w"
    assert c(3072, True).rule == "not listed: nearest listed N=2048"
    assert c(1536, True).rule == "not listed: nearest listed N=1024"


def test_decode_shapes_hold_every_row_of_the_issue():
    keys = {(s.M, s.N, s.interleaved, s.weighted) for s in db.decode_shapes()}
    issue = [
        (1, 768, False, False), (1, 1536, False, False), (1, 3072, False, False), (4, 768, False, False),
        (16, 768, False, False), (96, 1536, True, False), (384, 1024, True, True), (6144, 768, False, True),
    ]  # fmt: skip
    assert set(issue) <= keys
    assert all(s.M <= 1024 or (s.M, s.N, s.interleaved, s.weighted) in db.EXTRA_SHAPES for s in db.decode_shapes())


# (M, N, interleaved): every table entry and rule, masked rows (M below BLOCK_M) and masked columns
CASES = [(1, 768, False), (3, 768, False), (2, 1024, False), (5, 1536, False), (1, 768, True), (17, 768, True),
         (3, 1024, True), (2, 1536, True)]  # fmt: skip


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("M,N,il", CASES)
def test_sglang_config_writes_the_ports_bits(M, N, il, weighted, gen):
    x = randn((M, 2 * N), torch.bfloat16, gen, DEVICE, scale=4.0)
    w = torch.rand(M, generator=gen).to(DEVICE) if weighted else None
    want = silu_and_mul(x, w, interleaved=il, out=poisoned((M, N), torch.bfloat16, DEVICE))
    got = db.silu_and_mul_sglang_config(x, w, interleaved=il, out=poisoned((M, N), torch.bfloat16, DEVICE))
    assert not torch.isnan(got.float()).any()
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_the_decode_sweep_runs_end_to_end_on_the_cpu(monkeypatch, tmp_path):
    """``run`` with the timer faked and the interpreter for the kernels: bits checked on the
    timed inputs, every implementation a row, the CSV and its provenance JSON written."""
    import json

    from test_decode_candidates import _fake_time_calls

    from inkling_workbook.measure import bench, provenance, timing

    def buffers(shape, sets):
        return [(torch.randn(shape.M, 2 * shape.N).bfloat16(), torch.rand(shape.M) if shape.weighted else None)]

    monkeypatch.setattr(timing, "require_gpu", lambda: None)
    monkeypatch.setattr(timing, "warm_clocks", lambda *a: {})
    monkeypatch.setattr(timing, "time_calls", _fake_time_calls)
    monkeypatch.setattr(bench, "_buffers", buffers)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    shapes = [bench.Shape(1, 768, False, False, "decode"), bench.Shape(5, 256, True, True, "mid")]
    monkeypatch.setattr(db, "decode_shapes", lambda: shapes)
    csv_path, json_path, rows = db.run(tmp_path)
    assert csv_path == tmp_path / "data" / f"decode_{provenance.device_slug()}.csv" and json_path.exists()
    meta = json.loads(json_path.read_text())
    assert meta["bits_equal_all"] is True and meta["skipped_for_time"] == []
    assert len(rows) == 2 * len(db.IMPLS) - len(meta["anchor_skipped"])  # each anchor a row, or a reason
    assert "| M=5 N=256 interleaved, weights |" in db.summary(rows)
    # a ratio against our kernel with sglang's config and PDL only on the rows with PDL (like for like)
    for r in rows:
        assert (r["vs_sglang_config_pdl"] != "") == bool(r["pdl"]), r["impl"]


def test_a_publishing_run_that_skips_shapes_for_time_fails(monkeypatch, tmp_path, capsys):
    """``decode`` exits 1 when its budget left shapes out (the record says which), unless
    ``--allow-skips`` (the GPU job's smoke, whose 5-second budget skips on purpose)."""
    import json

    from inkling_workbook import cli
    from inkling_workbook.measure import timing

    record = {"bits_equal_all": True, "skipped_for_time": []}

    def fake_run(out, budget_s):
        path = tmp_path / "decode.json"
        path.write_text(json.dumps(record))
        return tmp_path / "decode.csv", path, []

    monkeypatch.setattr(timing, "require_gpu", lambda: None)
    monkeypatch.setattr(db, "run", fake_run)
    monkeypatch.setattr(db, "summary", lambda rows: "")
    assert cli.main(["decode"]) == 0
    record["skipped_for_time"] = ["M=512 N=3072 gate||up"]
    assert cli.main(["decode"]) == 1 and "SKIPPED FOR TIME (1)" in capsys.readouterr().out
    assert cli.main(["decode", "--allow-skips"]) == 0
    record["bits_equal_all"] = False
    assert cli.main(["decode", "--allow-skips"]) == 1
