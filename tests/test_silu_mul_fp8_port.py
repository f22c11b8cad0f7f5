"""The second port (issue 31, notebook 09): vLLM's helion ``silu_mul_fp8`` in plain Triton.

portcheck reports every CPU case bitwise equal (and every GPU case on a GPU); the naive step is
not (the catch is real); the interpreter patches the port needs do what the GPU does; the
arguments are checked; the GPU script's path runs on a CPU with its timer faked."""

import json
import math

import numpy
import pytest
import torch
import triton
import triton.language as tl
from conftest import gpu_only, poisoned, randn
from triton.language.extra import libdevice

import portcheck
from inkling_kernels import _backend
from inkling_workbook.ports.silu_mul_fp8 import helion as H
from inkling_workbook.ports.silu_mul_fp8 import port as P
from inkling_workbook.ports.silu_mul_fp8 import steps as S

needs_helion = pytest.mark.skipif(not H.available(), reason=H.INSTALL_HINT)
E4M3 = torch.float8_e4m3fn


def _bits(t):
    return t.contiguous().view(torch.uint8)


# ---- the tally ---------------------------------------------------------------------------------


@needs_helion
def test_portcheck_reports_every_cpu_case_equal():
    """The whole CPU matrix: raw bits equal, both sides deterministic, outputs poisoned first;
    and the original itself within one e4m3 value of the float64 result everywhere."""
    cases = P.cpu_cases()
    assert len(cases) == 48
    report = portcheck.run(H.silu_mul_fp8_helion, P.silu_mul_fp8, cases, reference=H.reference, code=False)
    assert report.ok, report.to_markdown()
    assert all(o["mismatches"] == 0 for r in report.cases for o in r["outputs"])
    for r in report.cases:
        hist = r["ulp"]["original"]
        assert sum(hist[b] for b in ("2", "3-4", "5-8", ">8", "nan")) == 0, (r["case"], hist)


@gpu_only
@needs_helion
def test_portcheck_reports_every_gpu_case_equal():
    """The GPU matrix in spawned processes: helion runs one backend a process, and on a GPU host
    this module's CPU tests run it interpreted in the test process itself."""
    names = (H.__name__ + ":silu_mul_fp8_helion", P.__name__ + ":silu_mul_fp8", P.__name__ + ":gpu_cases")
    report = portcheck.run_parallel(*names, device="cuda", jobs=4, code=False)
    assert len(report.cases) == len(P.gpu_cases()) and report.ok, report.to_markdown()


@needs_helion
def test_the_naive_step_is_not_bitwise_and_each_step_closes_its_gap():
    """Step 0 (the first port's arithmetic) differs on ordinary inputs; step 2 (bf16
    intermediates, still dividing by the scale) only on the result ties; step 3 nowhere."""
    picked = [c for c in P.cpu_cases() if " random contiguous" in c.name or "result_ties" in c.name]
    random_cases = [c for c in picked if "result_ties" not in c.name]
    ties = [c for c in picked if "result_ties" in c.name]
    naive = portcheck.run(H.silu_mul_fp8_helion, S.step_naive, random_cases, code=False)
    assert not naive.ok and sum(r["mismatches"] for r in naive.cases) > 0
    bf16 = portcheck.run(H.silu_mul_fp8_helion, S.step_bf16_intermediates, picked, code=False)
    assert all(r["ok"] for r in bf16.cases if r["case"] in {c.name for c in random_cases})
    assert all(not r["ok"] and r["mismatches"] > 0 for r in bf16.cases if "result_ties" in r["case"])
    final = portcheck.run(H.silu_mul_fp8_helion, S.step_reciprocal, ties, code=False)
    assert final.ok


def test_result_ties_are_exact_ties_in_bf16():
    """The constructed inputs: gate 32, up = 7 t / 32 exact in bf16, t halfway between two e4m3
    values; fp32 ``y / 7`` is t itself, ``y * fp32(1/7)`` is not."""
    x = P.result_ties((2, 64), seed=3)
    n = 32
    tie_cols = (x[:, :n] == 32).all(dim=0)
    y = 32 * x[:, n:][:, tie_cols].float()
    t = y / 7
    assert tie_cols.sum() >= n // 2
    # e4m3 keeps 3 of fp32's 23 mantissa bits: a tie has the next bit set and none below it
    assert torch.all((t.view(torch.int32) & 0xFFFFF) == 0x80000)
    assert not torch.equal(y * torch.tensor(1 / 7, dtype=torch.float32), t)


# ---- the interpreter does what the GPU does -------------------------------------------------------


@triton.jit
def _probe_kernel(a_ptr, b_ptr, prod_ptr, e4m3_ptr, exp_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    a = tl.load(a_ptr + i, mask=m)
    b = tl.load(b_ptr + i, mask=m)
    tl.store(prod_ptr + i, a.to(tl.bfloat16) * b.to(tl.bfloat16), mask=m)
    tl.store(e4m3_ptr + i, (a * b).to(tl.float8e4nv), mask=m)
    tl.store(exp_ptr + i, libdevice.exp(a), mask=m)


def test_interpreter_rounds_bf16_products_and_saturates_e4m3_as_the_gpu(gen):
    n = 4096
    a = torch.randn(n, generator=gen) * 30
    b = torch.randn(n, generator=gen) * 30
    a[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1000.0, 464.0, -0.0])
    b[:6] = 1.0
    prod = poisoned((n,), torch.bfloat16, "cpu")
    e4m3 = torch.full((n,), 0x55, dtype=torch.uint8).view(E4M3)
    ex = poisoned((n,), torch.float32, "cpu")
    _backend.launch(_probe_kernel, (1,), a.device, a, b, prod, e4m3, ex, n, BLOCK=n)
    want_prod = (a.bfloat16().float() * b.bfloat16().float()).bfloat16().view(torch.int16)
    want_prod = torch.where(want_prod.view(torch.bfloat16).isnan(), 0x7FFF, want_prod)  # cvt.rn's canonical NaN
    assert torch.equal(prod.view(torch.int16), want_prod)
    assert prod.view(torch.int16)[0] == 0x7FFF  # NaN * 1: torch's CPU conversion would give 0xFFFF
    ab = a * b
    want = ab.clamp(-448, 448).to(E4M3).view(torch.uint8)
    want = torch.where(torch.isnan(ab), 0x7F, want.to(torch.int16)).to(torch.uint8)
    assert torch.equal(_bits(e4m3), want)
    assert _bits(e4m3)[:6].tolist() == [0x7F, 0x7E, 0xFE, 0x7E, 0x7E, 0x80]
    with numpy.errstate(over="ignore"):
        want_exp = torch.from_numpy(numpy.exp(a.numpy()))  # the interpreter's exp is numpy's
    assert torch.equal(ex.view(torch.int32), want_exp.view(torch.int32))


# ---- the argument checks -----------------------------------------------------------------------


def _x(m=2, n=64, dtype=torch.bfloat16):
    return torch.randn(m, 2 * n).to(dtype)


@pytest.mark.parametrize(
    "make, err, words",
    [
        (lambda: (_x().int(), torch.ones(1), None), TypeError, "x must have dtype"),
        (lambda: (torch.randn(2, 7).bfloat16(), torch.ones(1), None), ValueError, "even"),
        (lambda: (_x()[:, ::2], torch.ones(1), None), ValueError, "unit stride"),
        (lambda: (_x(), torch.ones(1, dtype=torch.float64), None), TypeError, "scale must have dtype"),
        (lambda: (_x(), torch.ones(2), None), ValueError, "scale must hold one element"),
        (lambda: (_x(), torch.ones(1), torch.empty(2, 64)), TypeError, "out must have dtype"),
        (lambda: (_x(), torch.ones(1), torch.empty(2, 63, dtype=E4M3)), ValueError, "out must have shape"),
        (lambda: ("x", torch.ones(1), None), TypeError, "x must be a torch.Tensor"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(make, err, words):
    x, scale, out = make()
    with pytest.raises(err, match=words):
        P.silu_mul_fp8(x, scale, out=out)


def test_out_overlapping_x_and_grad_are_refused():
    buf = torch.zeros(2, 256, dtype=torch.bfloat16)
    out = buf.view(torch.uint8)[:, :64].view(E4M3)  # the first bytes of x
    with pytest.raises(ValueError, match="out"):
        P.silu_mul_fp8(buf[:, :128], torch.ones(1), out=out)
    with pytest.raises(ValueError, match="x requires grad"):
        P.silu_mul_fp8(_x(dtype=torch.float32).requires_grad_(), torch.ones(1))
    with pytest.raises(TypeError, match="config"):
        P.silu_mul_fp8(_x(), torch.ones(1), config=(1, 64, 4))


def test_port_writes_every_element_of_a_3d_input(gen, device):
    x = randn((2, 3, 2 * 200), torch.bfloat16, gen, device, scale=3.0)
    out = torch.full((2, 3, 200), 0x7F, dtype=torch.uint8, device=device).view(E4M3)
    got = P.silu_mul_fp8(x, torch.tensor([0.5], device=device), out=out)
    assert got is out
    want = P.silu_mul_fp8(x.view(6, 400).clone(), torch.tensor([0.5], device=device))
    assert torch.equal(_bits(got).view(6, 200), _bits(want))
    assert not torch.isnan(got.float()).any()


# ---- the original's production config -----------------------------------------------------------


def test_vllm_picker_rule_and_the_recorded_entries():
    assert H.pick_key(1, 768) == (2048, 1)
    assert H.pick_key(3, 3072) == (2880, 4)
    assert H.pick_key(20, 1000) == (2048, 24)
    assert H.pick_key(100_000, 1536) == (2048, 512)
    assert H.pick_key(33, 768) == (2048, 40)
    assert H.production_config(16, 1536)["block_sizes"] == [8, 512]
    assert H.config_label(4096, 3072).startswith("helion H100 table 2880/t512: 8x2048/8w/1st")
    with pytest.raises(ValueError, match="numtokens=40"):
        H.production_config(33, 768)
    with pytest.raises(ValueError, match="intermediate=4096"):
        H.production_config(1, 4096)
    fields = H.helion_fields(H.production_config(1, 768))
    assert not any(k.startswith("range_") for k in fields) and fields["num_warps"] == 2


# ---- the GPU script's path, on a CPU -------------------------------------------------------------


def _fake_time_calls(calls, passes, rounds=10, after_pass=None):
    from inkling_workbook.measure.timing import Timing

    for fn in calls.values():
        for f in fn if isinstance(fn, list) else [fn]:
            f()
    return {k: Timing.from_passes([[1.0 + 0.1 * i, 1.1], [1.05, 1.2]], 100) for i, k in enumerate(calls)}


@needs_helion
def test_the_gpu_script_runs_end_to_end_on_the_cpu(monkeypatch, tmp_path):
    """``silu_mul_fp8_bench.run`` with the timer faked (and eager torch for torch.compile): the
    portcheck record, the steps, every implementation a row with its bits, the provenance."""
    from inkling_workbook.measure import provenance, timing
    from inkling_workbook.ports.silu_mul_fp8 import bench as B

    monkeypatch.setattr(timing, "time_calls", _fake_time_calls)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    monkeypatch.setattr(B, "compiled_formula", lambda *a: H.formula)
    cases = [c for c in P.cpu_cases() if "result_ties" in c.name or c.name.startswith("1x768 bfloat16 random contig")]
    doc = B.run(tmp_path, device="cpu", cases=cases, shapes=[(1, 384), (3, 200)], progress=False)
    assert doc["ok"] and doc["tally"] == "3/3 cases equal and deterministic"
    pc = json.loads(doc["portcheck"].read_text())
    assert pc["ok"] and pc["provenance"]["git_commit"] and doc["portcheck"].with_suffix(".md").exists()
    assert [s["equal_cases"] for s in pc["steps"]][-1] == 3 and pc["steps"][0]["equal_cases"] < 3
    rows = doc["rows"]
    assert len(rows) == 6 and {r["impl"] for r in rows} == set(B.IMPLS)
    assert all(r["bits_equal_original"] for r in rows if r["impl"] == "port")
    assert all(r["rows_left_unwritten"] == 0 and r["l2"] == "warm" for r in rows)
    meta = json.loads(doc["bench_json"].read_text())
    assert meta["port_bits_equal_all"] and meta["outputs_all_written"] and meta["shapes_timed"] == 2
    # the faked ranges overlap (port [1.05, 1.125], helion [1.1, 1.125]): ties, not wins
    assert meta["port_vs_helion"] == {"win": 0, "tie": 2, "loss": 0} and meta["port_loses_to_helion"] == []
    assert doc["bench_csv"].name == f"silu_mul_fp8_bench_{provenance.device_slug(torch.device('cpu'))}.csv"
    assert "| 3 | 200 | warm |" in B.summary(rows) and "(tie)" in B.summary(rows)


def test_verdicts_are_by_ranges():
    from inkling_workbook.ports.silu_mul_fp8 import bench as B

    r = lambda m, lo, hi: {"median_us": m, "lo_us": lo, "hi_us": hi}  # noqa: E731
    assert B.verdict(r(1.0, 0.99, 1.01), r(1.1, 1.09, 1.11)) == "win"
    assert B.verdict(r(1.2, 1.19, 1.21), r(1.1, 1.09, 1.11)) == "loss"
    assert B.verdict(r(1.0, 0.9, 1.1), r(1.05, 1.09, 1.11)) == "tie"


def test_sweep_shapes_pick_recorded_configs():
    from inkling_workbook.ports.silu_mul_fp8 import bench as B

    shapes = B.sweep_shapes()
    assert min(m for m, _ in shapes) == 1 and max(m for m, _ in shapes) >= 32768
    for M, N in shapes + B.sweep_shapes(quick=True):
        H.production_config(M, N)  # raises for an entry the table does not hold
    for case in P.gpu_cases():  # the input's shape from the case's name (building 248 inputs takes a minute)
        *lead, two_n = (int(d) for d in case.name.split()[0].split("x"))
        H.production_config(math.prod(lead), two_n // 2)
    x = P.gpu_cases()[-1].build("cpu")[0][0]
    assert P.gpu_cases()[-1].name.startswith("x".join(map(str, x.shape)) + " ")


def _picked_keys(matrix) -> set:
    """The table entries the cases' shapes pick (the input's shape read from the case's name)."""
    keys = set()
    for case in matrix:
        *lead, two_n = (int(d) for d in case.name.split()[0].split("x"))
        keys.add(H.pick_key(math.prod(lead), two_n // 2))
    return keys


def test_the_quick_matrix_checks_every_config_the_quick_sweep_times(monkeypatch):
    """The GPU job's smoke (``--quick``) checks :func:`port.gpu_quick_cases`, whose shapes pick
    every table entry the quick sweep's shapes pick, and the full run the GPU matrix."""
    from inkling_workbook.ports.silu_mul_fp8 import bench as B

    quick = P.gpu_quick_cases()
    assert {H.pick_key(M, N) for M, N in B.sweep_shapes(quick=True)} <= _picked_keys(quick)
    assert 0 < len(quick) < len(P.gpu_cases()) / 4
    assert len({c.name for c in quick}) == len(quick)
    seen = []

    def load(spec):
        seen.append(spec)
        raise RuntimeError("stop here")

    monkeypatch.setattr(B.portcheck, "load_cases", load)
    for quick_flag, want in ((True, "gpu_quick_cases"), (False, "gpu_cases")):
        with pytest.raises(RuntimeError, match="stop here"):
            B.run(None, quick=quick_flag, device="cpu", parts=("check",), progress=False)
        assert seen[-1] == f"inkling_workbook.ports.silu_mul_fp8.port:{want}"


@needs_helion
def test_the_gpu_script_runs_in_parts(monkeypatch, tmp_path):
    """Each part alone (one 10-minute call each on a fresh GPU): check writes the record without
    steps, steps joins it, sweep writes the timings; a part outside the list is refused."""
    from inkling_workbook.measure import provenance, timing
    from inkling_workbook.ports.silu_mul_fp8 import bench as B

    monkeypatch.setattr(timing, "time_calls", _fake_time_calls)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    monkeypatch.setattr(B, "compiled_formula", lambda *a: H.formula)
    cases = [c for c in P.cpu_cases() if "result_ties" in c.name][:1]
    with pytest.raises(ValueError, match="parts"):
        B.run(tmp_path, device="cpu", cases=cases, parts=("timing",))
    with pytest.raises(FileNotFoundError, match="check"):
        B.run(tmp_path, device="cpu", cases=cases, parts=("steps",), progress=False)
    first = B.run(tmp_path, device="cpu", cases=cases, parts=("check",), progress=False)
    assert first["ok"] and first["bench_csv"] is None and json.loads(first["portcheck"].read_text())["steps"] == []
    second = B.run(tmp_path, device="cpu", cases=cases, parts=("steps",), progress=False)
    record = json.loads(second["portcheck"].read_text())
    assert second["ok"] and record["tally"] == first["tally"] and len(record["steps"]) == len(B.steps.STEPS)
    assert record["steps"][-1]["equal_cases"] == 1 and "steps_provenance" in record
    third = B.run(tmp_path, device="cpu", cases=cases, parts=("sweep",), shapes=[(2, 256)], progress=False)
    assert third["ok"] and third["bench_csv"].exists() and len(third["rows"]) == len(B.IMPLS)


def test_launch_config_departs_from_the_borrowed_tile_where_measured():
    """The borrowed silu_and_mul tile except: up to 64 rows a dividing column tile (4 warps) where
    it takes a masked 1024; 65-256 rows 8 warps on a 1024 tile; from 4M outputs above 1024 rows
    4096 outputs a program with 4 warps, the column tile kept (experiments AG, AH)."""
    from inkling_kernels.silu_and_mul import launch_config as silu_config

    for M, N in [(1, 3072), (8, 3072), (64, 3072), (16, 2880), (512, 3072), (1024, 3072), (257, 3072),
                 (128, 1536), (2048, 768), (2048, 1536), (4096, 1000)]:  # fmt: skip
        want = silu_config(M, N)
        got = P.launch_config(M, N)
        assert (got.BLOCK_M, got.BLOCK_N, got.num_warps) == (want.BLOCK_M, want.BLOCK_N, want.num_warps), (M, N)
    for M, N, label in [(16, 1536, "1x512/4w"), (64, 1536, "1x512/4w"), (65, 3072, "1x1024/8w"),
                        (256, 2048, "1x1024/8w"), (2048, 3072, "4x1024/4w"), (4096, 1536, "8x512/4w"),
                        (8192, 768, "16x256/4w"), (32768, 3072, "4x1024/4w"), (8192, 1000, "16x256/4w")]:  # fmt: skip
        assert P.launch_config(M, N).label == label, (M, N)
        assert P.launch_config(M, N) != P.LaunchConfig(
            *(getattr(silu_config(M, N), k) for k in ("BLOCK_M", "BLOCK_N", "num_warps"))
        )


@pytest.mark.parametrize("rows", [37, 64])
def test_the_large_tile_writes_the_same_bits(gen, rows):
    """The large-output tile (many rows a program, a row tail at 37) gives the bits of the
    one-row tile and of the last step; every element written (outputs poisoned)."""
    N = 384
    x = randn((rows, 2 * N), torch.bfloat16, gen, "cpu", scale=3.0)
    scale = torch.tensor([0.37])
    big = P.LaunchConfig(4096 // 128, 128, 4)
    outs = {}
    for name, cfg in (("large", big), ("one_row", P.LaunchConfig(1, 128, 4))):
        outs[name] = poisoned((rows, N), torch.uint8, "cpu").view(E4M3)
        P.silu_mul_fp8(x, scale, out=outs[name], config=cfg)
    last = S.step_reciprocal(x, scale)
    assert torch.equal(_bits(outs["large"]), _bits(outs["one_row"]))
    assert torch.equal(_bits(outs["large"]), _bits(last))


@needs_helion
def test_the_gpu_script_in_worker_processes_gives_the_serial_record(tmp_path):
    """``jobs=2``: the check and the steps in two spawned processes, cases named by
    ``MODULE:NAME``: the same tally, rows and step counts as one process; a list of cases with
    jobs > 1 is refused (workers rebuild cases by name)."""
    from inkling_workbook.ports.silu_mul_fp8 import bench as B

    spec = "portcheck_plants:silu_fp8_cases"
    with pytest.raises(TypeError, match="MODULE:NAME"):
        B.run(tmp_path, device="cpu", cases=P.cpu_cases()[:1], parts=("check",), jobs=2)
    with pytest.raises(ValueError, match="jobs"):
        B.run(tmp_path, device="cpu", cases=spec, parts=("check",), jobs=0)
    par = B.run(tmp_path / "par", device="cpu", cases=spec, parts=("check", "steps"), progress=False, jobs=2)
    ser = B.run(tmp_path / "ser", device="cpu", cases=spec, parts=("check", "steps"), progress=False)
    a, b = (json.loads(d["portcheck"].read_text()) for d in (par, ser))
    assert par["ok"] and a["tally"] == b["tally"] == "3/3 cases equal and deterministic"
    assert a["jobs"] == 2 and b["jobs"] == 1
    drop = ("inputs",)  # equal too; compared below as a set of digests
    assert [{k: v for k, v in r.items() if k not in drop} for r in a["cases"]] == [
        {k: v for k, v in r.items() if k not in drop} for r in b["cases"]
    ]
    assert [r["inputs"] for r in a["cases"]] == [r["inputs"] for r in b["cases"]]
    assert a["steps"] == b["steps"] and a["steps"][0]["equal_cases"] < 3
    assert a["code"] and {k for k in a["code"]} == {k for k in b["code"]}


@gpu_only
@needs_helion
def test_the_large_tile_with_a_row_tail_equals_the_original_on_the_gpu():
    """The large-output tile where the rows do not divide (the row mask compiled in; the GPU
    matrix's 4096 rows divide every tile): bits equal to the original's, outputs poisoned first
    and no NaN among them (the inputs hold none, so none was left unwritten). In spawned
    processes, as the GPU matrix above."""
    from portcheck_plants import LARGE_TILE_SHAPES

    for M, N in LARGE_TILE_SHAPES:
        assert M * N >= P.LARGE_OUTPUTS and M % P.launch_config(M, N).BLOCK_M, (M, N)
    names = (H.__name__ + ":silu_mul_fp8_helion", P.__name__ + ":silu_mul_fp8", "portcheck_plants:large_tile_cases")
    report = portcheck.run_parallel(*names, device="cuda", jobs=2, code=False)
    assert len(report.cases) == 2 * len(LARGE_TILE_SHAPES) and report.ok, report.to_markdown()
    assert all(o["nan"] == [0, 0] for r in report.cases for o in r["outputs"])
