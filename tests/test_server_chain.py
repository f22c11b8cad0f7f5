"""The server chain (issue 40): the activation between two GEMMs launched without PDL. On the CPU:
the refusal without a GPU, the grid, the columns and their pairing, the skips, the chains' math in
Triton's interpreter against a reference written here, the rows (marginal cost, verdicts, the PDL
evidence) from fabricated timings, and the record end to end with the timer stubbed. On a GPU:
the checks and a CUDA-graph replay of every chain (PDL captured)."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from conftest import HAS_CUDA, gpu_only

import inkling_kernels as ik
from inkling_workbook import cli
from inkling_workbook.measure import anchors as A
from inkling_workbook.measure import fp8_anchors, kernel_digest, pairing, timing
from inkling_workbook.measure import server_chain as sc
from inkling_workbook.measure.timing import Timing

TINY = [sc.Case("A", 3, 128, 256, False), sc.Case("A", 3, 128, 256, True), sc.Case("B", 3, 256, 256, False)]


@pytest.fixture
def present(monkeypatch):
    """Every anchor present (a manifest matching its pin) and the device able to launch with PDL:
    the skips then come from the layouts and shapes alone."""
    pins = {d: {"dist": d, "version": p["version"], "wheel": p["wheel"], "wheel_sha256": p["sha256"]}
            for d, p in A.ANCHORS.items()}  # fmt: skip
    monkeypatch.setattr(A, "manifest", lambda dist, root=None: pins[dist])
    monkeypatch.setattr(A, "_is_arch_support_pdl", lambda: True)


def _interpreter_indexes_loaded_scalars() -> bool:
    """As in ``test_anchor_columns.py``: Triton 3.6's interpreter cannot loop to a loaded scalar,
    which the outside FP8 quantizers do; 3.9's can."""
    import inspect

    from triton.runtime import interpreter

    return "int(self.handle.data.squeeze())" in inspect.getsource(interpreter)


@pytest.fixture
def interpretable(monkeypatch):
    """Where this Triton's interpreter cannot run the outside FP8 quantizers (3.6, the GPU
    machine's), chain B's anchors are left out of the CPU runs, as skips with that reason."""
    if _interpreter_indexes_loaded_scalars():
        return
    skipped = sc.skipped

    def without_fp8_anchors(case, device="cuda"):
        out = skipped(case, device)
        if case.chain == "B" and torch.device(device).type == "cpu":
            out |= {k: "this Triton's interpreter cannot run it" for k, c in sc.CHAIN_B_COLUMNS.items() if c.anchor}
        return out

    monkeypatch.setattr(sc, "skipped", without_fp8_anchors)


# ---- the command --------------------------------------------------------------------------------


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA GPU is present: the command would measure")
def test_the_command_refuses_without_a_gpu(tmp_path, capsys):
    out = tmp_path / "server_chain_x.csv"
    with pytest.raises(SystemExit) as e:
        cli.main(["server-chain", "--quick", "--out", str(out)])
    assert "need a CUDA GPU" in str(e.value) and "Triton interpreter" in str(e.value)
    assert not out.exists() and not out.with_suffix(".json").exists()
    with pytest.raises(SystemExit, match="need a CUDA GPU"):  # the module refuses too, not only the CLI
        sc.run(out, quick=True)
    assert not out.exists()


def test_the_command_line_parses_its_options(monkeypatch, tmp_path):
    seen = {}

    def fake(args):
        seen.update(vars(args))
        return 0

    monkeypatch.setattr(cli, "_server_chain", fake)  # main builds its parser on each call: it takes the fake
    assert cli.main(["server-chain", "--quick", "--out", str(tmp_path / "a.csv"), "--budget-s", "30",
                        "--no-progress"]) == 0  # fmt: skip
    assert seen["quick"] and seen["no_progress"] and seen["budget_s"] == 30.0 and seen["out"].endswith("a.csv")
    assert cli.main(["server-chain"]) == 0 and seen["budget_s"] == sc.BUDGET_S and not seen["quick"]


# ---- the grid, the columns, the pairing, the skips ------------------------------------------------


def test_the_grid():
    full = sc.grid()
    want = {(ch, m, n, il) for m in (1, 4, 16, 64, 256) for n in (768, 1536, 3072)
            for ch, il in (("A", False), ("A", True), ("B", False))}  # fmt: skip
    assert {(c.chain, c.M, c.N, c.interleaved) for c in full} == want and len(full) == len(want) == 45
    assert {c.H for c in full} == {4096}
    # shape by shape (a time budget cuts whole shapes): each shape's three cases are consecutive, the
    # decode sizes first (a budget drops the largest M)
    shapes = [(c.M, c.N) for c in full]
    assert all(shapes[i] == shapes[i + 1] == shapes[i + 2] for i in range(0, 45, 3))
    assert [m for m, _ in shapes] == sorted(m for m, _ in shapes)
    quick = sc.grid(quick=True)
    assert [(c.M, c.N) for c in quick[::3]] == list(sc.QUICK) and len(quick) == 3 * len(sc.QUICK) == 6
    assert [c.label for c in quick[:3]] == [
        "A M=4 N=1536 H=4096 gate||up", "A M=4 N=1536 H=4096 interleaved", "B M=4 N=1536 H=4096 gate||up"
    ]  # fmt: skip


def test_the_pairing_of_the_columns():
    """Port with PDL against the baselines with PDL, port without against those without, op by op."""
    assert pairing.pairs(sc.CHAIN_A_COLUMNS) == {"sglang_silu_and_mul": "port",
                                                 "sglang_silu_and_mul_triton": "port_pdl"}  # fmt: skip
    assert pairing.pairs(sc.CHAIN_B_COLUMNS) == {
        "sglang_fp8_group_quant": "unfused",
        "vllm_fp8_group_quant": "unfused",
        "vllm_silu_mul_fp8_colmajor": "fused",
        "sglang_silu_and_mul_fp8_masked": "fused",
        "vllm_silu_mul_fp8_masked": "fused",
    }
    # every silu anchor in chain A, every FP8 anchor in chain B, each with its pinned version
    assert set(pairing.SILU_ANCHOR_COLUMNS) <= set(sc.CHAIN_A_COLUMNS)
    assert set(fp8_anchors.ANCHOR_KEYS) <= set(sc.CHAIN_B_COLUMNS)
    for cols in sc.COLUMNS.values():
        roles = [c.role for c in cols.values()]
        assert roles.count("floor") == 1 and cols["gemms_only"].role == "floor"
        for key, c in cols.items():
            assert c.key == key and c.label.endswith(", PDL)" if c.pdl else ", no PDL)")
            if c.anchor:
                assert c.version == A.ANCHORS[c.dist]["version"] and c.label.startswith(f"{c.dist} {c.version} ")
        for base, port in pairing.pairs(cols).items():
            assert (cols[base].op, cols[base].pdl) == (cols[port].op, cols[port].pdl)
    # the quantizer anchors say what runs before them and what GEMM2 reads
    assert "after silu_and_mul (ours, no PDL)" in sc.CHAIN_B_COLUMNS["vllm_fp8_group_quant"].label


def test_which_anchor_runs_which_case(present):
    def skips(case):
        return set(sc.skipped(case, "cuda"))

    assert skips(sc.Case("A", 4, 1536, 4096, False)) == {"sglang_silu_and_mul_triton"}  # interleaved only
    assert skips(sc.Case("A", 4, 1536, 4096, True)) == set()
    masked = {"sglang_silu_and_mul_fp8_masked", "vllm_silu_mul_fp8_masked"}
    assert skips(sc.Case("B", 64, 1536, 4096, False)) == masked | {"vllm_silu_mul_fp8_colmajor"}  # M % 128
    assert skips(sc.Case("B", 256, 1536, 4096, False)) == masked
    reasons = sc.skipped(sc.Case("B", 64, 768, 4096, False), "cuda")
    assert reasons["vllm_silu_mul_fp8_colmajor"] == "M = 64 is not a multiple of 128"
    assert "CUDA only" in sc.skipped(sc.Case("A", 4, 1536, 4096, True), "cpu")["sglang_silu_and_mul_triton"]


def test_absent_anchors_are_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(A, "manifest", lambda dist, root=None: None)
    for case in sc.grid(quick=True):
        reasons = sc.skipped(case, "cuda")
        assert set(reasons) == {k for k, c in sc.COLUMNS[case.chain].items() if c.anchor}
        assert all("not fetched" in r for r in reasons.values())


# ---- the chains' math, on the CPU -------------------------------------------------------------------


def _silu_mul_by_hand(gateup: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """silu(gate) * up in float64, rounded to bf16 once (written here, not the package's reference)."""
    h = gateup.double()
    g, u = (h[:, 0::2], h[:, 1::2]) if interleaved else h.chunk(2, dim=1)
    return (g / (1 + torch.exp(-g)) * u).bfloat16()


def _rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("case", TINY[:2], ids=lambda c: c.label)
def test_chain_a_computes_gemm_silu_and_mul_gemm_cpu(case):
    built = sc.build(case, "cpu")
    x, w1, w2 = built.bufs["x"], built.bufs["w1"], built.bufs["w2"]
    anchor = ["sglang_silu_and_mul"] if A.is_fetched("sglang") else []  # the merged port, where fetched
    assert set(built.calls) == {"port_pdl", "port", "gemms_only", *anchor}
    gateup = torch.mm(x, w1)
    want_bits = torch.mm(ik.silu_and_mul(gateup, interleaved=case.interleaved), w2)
    ref = _silu_mul_by_hand(gateup, case.interleaved).double() @ w2.double()
    wrong = _silu_mul_by_hand(gateup, not case.interleaved).double() @ w2.double()
    for key in ("port_pdl", "port", *anchor):
        got = built.calls[key]()
        assert got.shape == (case.M, case.H) and got.dtype == torch.bfloat16
        assert torch.equal(got.view(torch.int16), want_bits.view(torch.int16)), key
        assert _rel(got, ref) < 2**-7 and _rel(got, wrong) > 0.3, key  # the layout reaches the activation
    # the floor runs the same two GEMMs, GEMM2 on the fixed activation
    assert torch.equal(built.calls["gemms_only"](), torch.mm(built.bufs["act"], w2))
    checks = sc.check(built)
    assert all(c["act_bits_equal_port"] and c["chain_rel_err"] < 2**-7 for c in checks.values())
    assert sc.checks_ok(checks, "A")


def test_chain_b_computes_gemm_fp8_quant_gemm_cpu(interpretable):
    case = TINY[2]
    built = sc.build(case, "cpu")
    assert built.gemm2[0] == "standin"
    x, w1, w2 = built.bufs["x"], built.bufs["w1"], built.bufs["w2"]
    M, N, H = case.M, case.N, case.H
    gateup = torch.mm(x, w1)
    # by hand: the activation in bf16, quantized per 128 (amax / 448), dequantized; W2 dequantized per 128x128
    a = _silu_mul_by_hand(gateup, False).float().reshape(M, N // 128, 128)
    s = a.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
    deq = ((a / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s).reshape(M, N)
    wq, ws = built.bufs["w2q"], built.bufs["w2s"]
    assert wq.shape == (H, N) and ws.shape == (H // 128, N // 128)
    wdeq = (wq.float().reshape(H // 128, 128, N // 128, 128) * ws[:, None, :, None]).reshape(H, N)
    assert _rel(wdeq, w2.t().float()) < 0.1  # the FP8 weight is W2's
    ref = deq.double() @ wdeq.t().double()
    q, sb = built.fp8_out
    for key in ("fused_pdl", "fused", "unfused"):
        q.zero_()
        got = built.calls[key]()[:M]
        assert got.shape == (M, H) and _rel(got, ref) < 2**-6, key
        assert _rel(got, _silu_mul_by_hand(gateup, False).double() @ w2.double()) < 0.1, key  # FP8 error, bounded
        # the port wrote the buffers GEMM2 read: the kernel's own activation, quantized by the reference
        rq, rs = ik.reference.fp8_group_quant_ref(ik.silu_and_mul(gateup, interleaved=False))
        assert torch.equal(q[:M].view(torch.uint8), rq.view(torch.uint8)) and torch.equal(sb[:M], rs), key
    assert sb.stride() == (1, q.shape[0]) and q.shape[0] % 16 == 0  # the "cublas" layout
    checks = sc.check(built)
    assert sc.checks_ok(checks, "B") and all(checks[k]["fused_equals_unfused"] for k in ("fused_pdl", "unfused"))
    quantizers = ("sglang_fp8_group_quant", "vllm_fp8_group_quant")
    want = [k for k in quantizers if A.is_fetched(sc.CHAIN_B_COLUMNS[k].dist) and k not in built.skipped]
    assert [k for k in quantizers if k in checks] == want and all(checks[k]["within_bounds"] for k in want)


def test_checks_fail_on_a_wrong_chain():
    bad = {"port": {"chain_rel_err": 0.5, "act_bits_equal_port": True}, "port_pdl": {"chain_rel_err": 0.0}}
    assert not sc.checks_ok(bad, "A")
    bad = {"fused": {"chain_rel_err": 0.0, "fused_equals_unfused": True},
           "fused_pdl": {"chain_rel_err": 0.0, "fused_equals_unfused": False}}  # fmt: skip
    assert not sc.checks_ok(bad, "B")
    assert sc.checks_ok({"fused": {"chain_rel_err": 2**-7, "fused_equals_unfused": True}}, "B")


# ---- the rows from fabricated timings --------------------------------------------------------------


def _t(v: float, passes: int = 3, rounds: int = 10, step: float = 0.05) -> Timing:
    """Pass p's replays all at v + step * p: pass medians v, v + step, ...; lo = v, hi = v + 2 step."""
    return Timing.from_passes([[v + step * p] * rounds for p in range(passes)], reps=100)


def test_case_rows_marginal_pairing_and_pdl_verdicts(present):
    case = sc.Case("A", 4, 1536, 4096, True)
    timings = {"gemms_only": _t(10.0), "port_pdl": _t(11.0), "port": _t(11.5), "sglang_silu_and_mul": _t(11.55),
               "sglang_silu_and_mul_triton": _t(12.0)}  # fmt: skip
    checks = {k: {"act_bits_equal_port": True, "chain_rel_err": 0.001} for k in timings if k != "gemms_only"}
    rows = {r["impl"]: r for r in sc.case_rows(case, timings, checks, clock="1980")}
    p = rows["port_pdl"]
    assert (p["median_us"], p["lo_us"], p["hi_us"], p["floor_us"]) == (11.05, 11.0, 11.1, 10.05)
    assert p["activation_us"] == 1.0 and (p["activation_lo_us"], p["activation_hi_us"]) == (0.9, 1.1)
    assert p["activation_pass_diffs_us"] == "1.0000 1.0000 1.0000"
    assert p["pdl_verdict"] == "win" and p["pdl_speedup"] == round(11.55 / 11.05, 4) and p["port_verdict"] == ""
    assert rows["port"]["pdl_verdict"] == "" and rows["gemms_only"]["activation_us"] == ""
    s = rows["sglang_silu_and_mul"]  # no PDL: against the port without PDL, ranges overlap
    assert s["paired_port"] == "port" and s["port_verdict"] == "tie" and s["ties_paired_port"] is True
    assert s["speedup_of_paired_port"] == round(11.6 / 11.55, 4)
    assert s["activation_speedup_of_paired_port"] == round(1.55 / 1.5, 4)
    tr = rows["sglang_silu_and_mul_triton"]  # PDL: against the port with PDL, ranges apart
    assert tr["paired_port"] == "port_pdl" and tr["port_verdict"] == "win" and tr["ties_paired_port"] is False
    assert tr["version"] == "0.5.23" and tr["wheel_sha256"] == A.ANCHORS["sglang"]["sha256"]
    assert p["wheel"] == "" and s["act_bits_equal_port"] is True and s["chain_rel_err"] == 0.001
    assert all(r["sm_clock_mhz"] == "1980" and r["gemm2"] == "torch.mm" for r in rows.values())
    # PDL slower in chain B: the evidence says so
    case_b = sc.Case("B", 256, 1536, 4096, False)
    tb = {"gemms_only": _t(20.0), "fused_pdl": _t(22.0), "fused": _t(21.0), "unfused": _t(23.02),
          "vllm_silu_mul_fp8_colmajor": _t(20.5)}  # fmt: skip
    rows_b = {r["impl"]: r for r in sc.case_rows(case_b, tb, gemm2="scaled_mm")}
    assert rows_b["fused_pdl"]["pdl_verdict"] == "loss" and rows_b["unfused"]["pdl_verdict"] == ""
    assert rows_b["vllm_silu_mul_fp8_colmajor"]["port_verdict"] == "loss"  # the anchor is faster than the port
    assert rows_b["vllm_silu_mul_fp8_colmajor"]["paired_port"] == "fused" and rows_b["fused"]["gemm2"] == "scaled_mm"
    # and a shape where the two overlap: a tie
    tie = {"gemms_only": _t(10.0), "port_pdl": _t(11.0), "port": _t(11.02)}
    rows_tie = sc.case_rows(sc.Case("A", 1, 768, 4096, False), tie)
    ev = sc.pdl_evidence([*rows.values(), *rows_b.values(), *rows_tie])
    assert [(e["chain"], e["M"], e["op"], e["faster"]) for e in ev["per_shape"]] == [
        ("A", 4, "silu_and_mul", "PDL on"), ("B", 256, "fp8_fused", "PDL off"), ("A", 1, "silu_and_mul", "tie")
    ]  # fmt: skip
    assert ev["summary"] == (
        "server chain, the port with PDL vs without (ties: overlapping pass ranges): chain A silu_and_mul: PDL on "
        "faster on 1, off faster on 0, tie on 1 of 2 shapes; chain B fused FP8: PDL on faster on 0, off faster on "
        "1, tie on 0 of 1 shapes"
    )
    table = sc.summary([*rows.values(), *rows_b.values()])
    assert "| A M=4 N=1536 il | inkling silu_and_mul" in table and "(PDL on)" in table and "(PDL off)" in table
    assert "x1.004 (tie)" in table and "| floor |" in table


def test_the_record_end_to_end_cpu(monkeypatch, tmp_path, fetched, interpretable):
    """run() on tiny CPU cases, the timer stubbed (each chain is called once, then fabricated
    timings): the CSV and its JSON, with the kernel digests, the columns, the anchors' wheels."""
    called = []
    values = {"gemms_only": 10.0, "port_pdl": 11.0, "port": 11.2, "fused_pdl": 12.0, "fused": 12.5}

    def fake_time_calls(calls, passes, rounds=10, after_pass=None):
        for name, fn in calls.items():
            fn()
            called.append(name)
        return {n: _t(values.get(n, 13.0), passes, rounds) for n in calls}

    monkeypatch.setattr(timing, "time_calls", fake_time_calls)
    out = tmp_path / "server_chain_cpu.csv"
    csv_path, json_path, rows, meta = sc.run(out, cases=TINY, device="cpu", progress=False, command="test")
    assert (csv_path, json_path) == (out, out.with_suffix(".json"))
    back = list(csv.DictReader(csv_path.open()))
    doc = json.loads(json_path.read_text())
    assert len(back) == len(rows) == len(called) and {r["impl"] for r in back} >= {"port_pdl", "fused", "gemms_only"}
    assert doc["kernel_digests"] == kernel_digest.digests() and doc["command"] == "test"
    assert doc["checks_ok"] is True and doc["skipped_for_time"] == []
    assert doc["columns"]["A"]["pairs"] == pairing.pairs(sc.CHAIN_A_COLUMNS)
    assert doc["columns"]["B"]["pairs"] == pairing.pairs(sc.CHAIN_B_COLUMNS)
    assert doc["anchors"]["sglang"]["wheel_sha256"] == A.ANCHORS["sglang"]["sha256"]
    assert doc["gemm2"]["chain_B"]["N=256 H=256"]["mode"] == "standin"
    assert doc["timing"]["passes"] == sc.PASSES and "chain hi - floor lo" in doc["timing"]["marginal"]
    assert doc["pdl_default"]["summary"].startswith("server chain, the port with PDL vs without")
    skipped = {(s["case"], s["impl"]) for s in doc["anchor_skipped"]}
    assert ("A M=3 N=128 H=256 interleaved", "sglang_silu_and_mul_triton") in skipped
    assert ("B M=3 N=256 H=256 gate||up", "vllm_silu_mul_fp8_colmajor") in skipped
    by = {(r["chain"], r["layout"], r["impl"]): r for r in back}
    p = by[("A", "nil", "port_pdl")]
    assert float(p["activation_us"]) == pytest.approx(1.0) and p["pdl_verdict"] == "win"
    assert by[("B", "nil", "fused_pdl")]["pdl_verdict"] == "win" and by[("B", "nil", "fused")]["gemm2"] == "standin"
    sg = by[("A", "il", "sglang_silu_and_mul")]
    assert sg["wheel_sha256"] == A.ANCHORS["sglang"]["sha256"] and sg["paired_port"] == "port"
    assert sg["act_bits_equal_port"] == "True" and float(sg["speedup_of_paired_port"]) == pytest.approx(13.05 / 11.25)


def test_a_time_budget_skips_whole_cases(monkeypatch):
    monkeypatch.setattr(timing, "time_calls", lambda calls, passes: pytest.fail("nothing may be timed"))
    skipped: list = []
    rows, ok = sc.bench_cases(TINY, "cpu", budget_s=-1.0, progress=False, skipped_for_time=skipped)
    assert rows == [] and ok and skipped == [c.label for c in TINY]


def test_fp8_gemm2_mode_on_the_cpu():
    mode, why = sc.fp8_gemm2_mode("cpu", 768)
    assert mode == "standin" and "CPU" in why


# ---- on a GPU ------------------------------------------------------------------------------------


@gpu_only
@pytest.mark.parametrize("M,N", [(4, 768), (16, 1536)])
def test_gpu_chains_check_and_replay_in_a_graph(M, N):
    """Every chain (PDL launches captured) replayed from a CUDA graph gives its eager output, and
    the checks made before timing pass; GEMM2's FP8 mode is the blockwise torch._scaled_mm where
    K / 128 is a multiple of 4."""
    for case in (sc.Case("A", M, N, 512, False), sc.Case("A", M, N, 512, True), sc.Case("B", M, N, 512, False)):
        built = sc.build(case, "cuda")
        checks = sc.check(built)
        assert sc.checks_ok(checks, case.chain), checks
        if case.chain == "B" and (N // 128) % 4 == 0 and torch.cuda.get_device_capability() >= (9, 0):
            assert built.gemm2[0] == "scaled_mm", built.gemm2
        for key, fn in built.calls.items():
            eager = fn().clone()
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph, stream=stream):
                out = fn()
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out.view(torch.int16), eager.view(torch.int16)), (case.label, key)
