"""The real anchors as columns of the sweeps (issue 40), on the CPU: the pairing rule, the names
every anchor column carries, and each sweep's implementation table with the anchors present and
absent (then a recorded reason). Timers are stand-ins; kernels run in Triton's interpreter."""

from __future__ import annotations

import pytest
import torch
from conftest import gpu_only

from inkling_workbook.measure import anchors as A
from inkling_workbook.measure import bench, fp8_anchors, fp8_cases, pairing, provenance, timing
from inkling_workbook.measure import decode_baselines as db
from inkling_workbook.measure.pairing import Column

SWEEPS = {"bench": bench.COLUMNS, "decode": db.COLUMNS, "fp8": fp8_anchors.FP8_COLUMNS}


def _interpreter_indexes_loaded_scalars() -> bool:
    """Whether Triton's interpreter can use a loaded scalar as a loop bound (``range(n)``,
    ``tl.range(a, b)``): its ``__index__`` must squeeze the one-element array it holds, since NumPy
    refuses ``int()`` of one (Triton 3.9 squeezes; the GPU machine's 3.6 does not). The outside
    FP8 kernels loop to a row count loaded from memory."""
    import inspect

    from triton.runtime import interpreter

    return "int(self.handle.data.squeeze())" in inspect.getsource(interpreter)


needs_scalar_index = pytest.mark.skipif(
    not _interpreter_indexes_loaded_scalars(),
    reason="this Triton's interpreter cannot use a loaded scalar as a loop bound (int() of a "
    "one-element array), which the outside FP8 kernels' row loops need; the GPU sweeps check the same "
    "anchors compiled before timing them",
)


@pytest.fixture
def absent(monkeypatch):
    """Every anchor missing, as on a machine where `.anchors` was not carried."""
    monkeypatch.setattr(A, "manifest", lambda dist, root=None: None)


def _fake_time_calls(calls, passes, rounds=10, after_pass=None):
    """A stand-in timer: no call is made (the baselines need helion and CUDA); the ports with PDL
    1.0 us, without 1.1 us, every other column 2.0 us."""
    us = {k: 1.0 for k in ("triton_pdl", "port_pdl", "fused", "quant")}
    us |= {k: 1.1 for k in ("triton", "port", "fused_no_pdl", "quant_no_pdl")}
    return {n: timing.Timing.from_passes([[us.get(n, 2.0)] * rounds] * passes, 100) for n in calls}


def test_the_pairing_rule():
    """port(PDL) against the baselines with PDL, port(no PDL) against those without, op by op."""
    assert pairing.pairs(bench.COLUMNS) == {
        **{k: "triton" for k in ("helion_sm90", "helion_fixed", "compile_static", "compile_dynamic_m", "torch_eager")},
        "compile_static_max_autotune": "triton",
        "compile_static_pdl": "triton_pdl",  # inductor's PDL on: with the port with PDL
        "sglang_silu_and_mul": "triton",
        "sglang_silu_and_mul_triton": "triton_pdl",
    }
    assert pairing.pairs(db.COLUMNS) == {
        "sglang_config_pdl": "port_pdl",
        "sglang_config": "port",
        "sglang_silu_and_mul": "port",
        "sglang_silu_and_mul_triton": "port_pdl",
    }
    assert pairing.pairs(fp8_anchors.FP8_COLUMNS) == {
        "torch_compile_static": "fused_no_pdl",
        "torch_compile_static_max_autotune": "fused_no_pdl",
        "sglang_fp8_group_quant": "quant_no_pdl",
        "vllm_fp8_group_quant": "quant_no_pdl",
        "sglang_silu_and_mul_fp8_masked": "fused_no_pdl",
        "vllm_silu_mul_fp8_colmajor": "fused_no_pdl",
        "vllm_silu_mul_fp8_masked": "fused_no_pdl",
    }
    for cols in SWEEPS.values():  # ports, our variants and floors are never paired
        assert all(pairing.paired_port(cols, k) is None for k, c in cols.items() if c.role != "baseline")
        for base, port in pairing.pairs(cols).items():
            assert (cols[base].pdl, cols[base].op) == (cols[port].pdl, cols[port].op)
    # the rule refuses a sweep without exactly one port of a baseline's op and PDL state
    port = Column("p", "inkling", "", "f", "c", True, "port")
    with pytest.raises(LookupError):
        pairing.pairs({"p": port, "b": Column("b", "x", "1", "f", "c", False, "baseline")})
    with pytest.raises(LookupError):
        pairing.pairs({"p": port, "q": Column("q", "inkling", "", "f", "c", True, "port"),
                       "b": Column("b", "x", "1", "f", "c", True, "baseline")})  # fmt: skip
    # the speedup is the baseline's median over its paired port's
    t = {"p": timing.Timing(1.0, 0.9, 1.1, 0.9, 1.1, 1, 1, 2), "b": timing.Timing(2.0, 1.9, 2.1, 1.9, 2.1, 1, 1, 2)}
    cols = {"p": port, "b": Column("b", "x", "1", "f", "c", True, "baseline")}
    assert pairing.speedup_fields(cols, "b", t) == {"speedup_of_paired_port": 2.0, "ties_paired_port": False}
    assert pairing.speedup_fields(cols, "p", t) == {"speedup_of_paired_port": "", "ties_paired_port": ""}


def test_every_anchor_column_names_its_project_version_and_configuration(monkeypatch):
    records = {a.key: a for a in A.anchors()}
    seen = set()
    for cols in SWEEPS.values():
        for c in cols.values():
            assert c.label.startswith(f"{c.project} {c.version} " if c.version else f"{c.project} ")
            assert c.function in c.label and c.config in c.label
            assert c.label.endswith(", PDL)" if c.pdl else ", no PDL)")
            if c.anchor is None:
                continue
            seen.add(c.anchor)
            assert c.anchor in records and c.version == A.ANCHORS[c.dist]["version"]
            assert c.label.startswith(f"{c.dist} {A.ANCHORS[c.dist]['version']} {c.function} (")
            assert c.function in records[c.anchor].fn.__doc__ or c.function in records[c.anchor].label
    assert seen == set(records)  # every anchor is a column of some sweep
    assert bench.COLUMNS["sglang_silu_and_mul"].label == (
        "sglang 0.5.23 silu_and_mul (merged port, GB300 heuristic, no PDL)"
    )
    # each row names the anchor's wheel and sha256 from the manifest
    pins = {
        d: {"version": p["version"], "wheel": p["wheel"], "wheel_sha256": p["sha256"]} for d, p in A.ANCHORS.items()
    }
    monkeypatch.setattr(A, "manifest", lambda dist, root=None: {"dist": dist, **pins[dist]})
    for cols in SWEEPS.values():
        for key, c in cols.items():
            f = pairing.row_fields(cols, key)
            assert (
                f["column"] == c.label
                and f["pdl"] == c.pdl
                and f["paired_port"] == (pairing.paired_port(cols, key) or "")
            )
            if c.dist:
                assert (f["version"], f["wheel"], f["wheel_sha256"]) == (
                    A.ANCHORS[c.dist]["version"], A.ANCHORS[c.dist]["wheel"], A.ANCHORS[c.dist]["sha256"]
                )  # fmt: skip
            else:
                assert f["wheel"] == f["wheel_sha256"] == ""
    monkeypatch.setattr(A, "manifest", lambda dist, root=None: None)
    with pytest.raises(FileNotFoundError):  # a number of an absent anchor cannot be written
        pairing.row_fields(bench.COLUMNS, "sglang_silu_and_mul")


def _cpu_bench(monkeypatch):
    """``bench.bench_silu`` on the CPU: helion and torch.compile stubbed (never called by the
    stand-in timer), buffers on the CPU, the anchors' bits checked for real in the interpreter."""
    monkeypatch.setattr(bench.helion_original, "available", lambda: True)
    compiled = []

    def fake_compile(shape, keys=bench.COMPILE_KEYS, info=None):  # each shape's compile columns, once
        compiled.append((shape.label, tuple(keys)))

        def ref(x, w, il=shape.interleaved):  # what the compiled reference returns
            return bench.silu_and_mul_ref(x, w, interleaved=il)

        return {k: (ref, bench.COLUMNS[k].config) for k in keys if k != "compile_static_max_autotune"}

    monkeypatch.setattr(bench, "compile_implementations", fake_compile)
    monkeypatch.setattr(bench, "time_calls", _fake_time_calls)
    monkeypatch.setattr(bench, "l2_bytes", lambda: 50 * 2**20)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    # as on a machine without an sm_90 GPU, wherever it runs: the sweep's buffers are CPU tensors
    monkeypatch.setattr(A, "_is_arch_support_pdl", lambda: False)
    gen = torch.Generator().manual_seed(3)

    def buffers(shape, sets):
        x = torch.randn((shape.M, 2 * shape.N), generator=gen).bfloat16()
        return [(x, torch.rand(shape.M, generator=gen) if shape.weighted else None)]

    monkeypatch.setattr(bench, "_buffers", buffers)
    shapes = [bench.Shape(3, 128, True, True, "decode"), bench.Shape(2, 256, False, False, "decode")]
    skipped: list = []
    rows = bench.bench_silu(shapes, cold=False, ceiling_tbps=4.0, progress=False, skipped=skipped)
    assert compiled == [(s.label, bench.COMPILE_KEYS) for s in shapes]
    return rows, skipped


def test_bench_sweep_with_the_anchors_present(monkeypatch, fetched):
    rows, skipped = _cpu_bench(monkeypatch)
    sg = [r for r in rows if r["impl"] == "sglang_silu_and_mul"]
    assert len(sg) == 2 and all(r["bits_equal_port"] is True for r in sg)  # checked before timing
    m = A.manifest("sglang")
    assert all(r["wheel_sha256"] == m["wheel_sha256"] and r["version"] == "0.5.23" for r in sg)
    assert all(r["paired_port"] == "triton" and r["speedup_of_paired_port"] == round(2.0 / 1.1, 4) for r in sg)
    assert {r["impl"] for r in rows} >= {"triton", "triton_pdl", "helion_fixed", "compile_static", "torch_eager"}
    # every column's bits against the port, checked before timing: the port with PDL and helion equal
    assert all(r["bits_equal_port"] is True for r in rows if r["impl"] in ("triton_pdl", "helion_fixed"))
    assert all(r["bits_equal_port"] in (True, False) for r in rows if r["impl"] != "triton")
    # silu_and_mul_triton: interleaved only, and no PDL without an sm_90 GPU: skipped with its reason
    assert [(s["shape"], s["impl"]) for s in skipped] == [
        ("M=3 N=128 il +w", "sglang_silu_and_mul_triton"), ("M=2 N=256 nil", "sglang_silu_and_mul_triton")
    ]  # fmt: skip
    assert "below sm_90" in skipped[0]["reason"] and "interleaved layout only" in skipped[1]["reason"]
    assert skipped[0]["column"] == bench.COLUMNS["sglang_silu_and_mul_triton"].label
    # what a table reads: each baseline against its paired port, by label
    table = pairing.paired_rows(rows)
    assert len(table) == sum(r["role"] == "baseline" for r in rows) >= 2 * 5  # every baseline, paired
    sg = [t for t in table if t["baseline"] == bench.COLUMNS["sglang_silu_and_mul"].label]
    assert len(sg) == 2 and all(t["port"] == bench.COLUMNS["triton"].label and t["pdl"] is False for t in sg)
    assert all(t["wheel_sha256"] == A.ANCHORS["sglang"]["sha256"] for t in sg)


def test_bench_sweep_with_the_anchors_absent(monkeypatch, absent):
    rows, skipped = _cpu_bench(monkeypatch)
    assert not any(r["impl"] in bench.ANCHOR_KEYS for r in rows)
    assert {(s["impl"]) for s in skipped} == set(bench.ANCHOR_KEYS) and len(skipped) == 4
    assert all("not fetched" in s["reason"] for s in skipped)


def _cpu_decode(monkeypatch, tmp_path):
    import json

    from test_decode_candidates import _fake_time_calls as run_each_once

    def buffers(shape, sets):
        return [(torch.randn(shape.M, 2 * shape.N).bfloat16(), torch.rand(shape.M) if shape.weighted else None)]

    monkeypatch.setattr(timing, "require_gpu", lambda: None)
    monkeypatch.setattr(timing, "warm_clocks", lambda *a: {})
    monkeypatch.setattr(timing, "time_calls", run_each_once)
    monkeypatch.setattr(bench, "_buffers", buffers)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(db, "decode_shapes", lambda: [bench.Shape(2, 256, True, True, "decode")])
    _, json_path, rows = db.run(tmp_path)
    return json.loads(json_path.read_text()), rows


def test_decode_sweep_with_the_anchors_present(monkeypatch, tmp_path, fetched):
    meta, rows = _cpu_decode(monkeypatch, tmp_path)
    impls = [r["impl"] for r in rows]
    assert "sglang_silu_and_mul" in impls and "sglang_silu_and_mul_triton" not in impls
    sg = next(r for r in rows if r["impl"] == "sglang_silu_and_mul")
    assert sg["bits_equal_port"] is True and sg["paired_port"] == "port"
    assert sg["wheel_sha256"] == A.ANCHORS["sglang"]["sha256"] and sg["column"] == db.COLUMNS[sg["impl"]].label
    assert meta["bits_equal_all"] is True and meta["anchors"]["sglang"]["version"] == "0.5.23"
    assert meta["bits_equal_port"] == {"sglang_config_pdl": True, "sglang_config": True, "sglang_silu_and_mul": True}
    assert [s["impl"] for s in meta["anchor_skipped"]] == ["sglang_silu_and_mul_triton"]
    assert meta["columns"]["pairs"]["sglang_silu_and_mul_triton"] == "port_pdl"
    assert "sglang 0.5.23 silu_and_mul (merged port, GB300 heuristic, no PDL) / vs port" in db.summary(rows)


def test_decode_sweep_with_the_anchors_absent(monkeypatch, tmp_path, absent):
    meta, rows = _cpu_decode(monkeypatch, tmp_path)
    assert {r["impl"] for r in rows} == {"port_pdl", "port", "sglang_config_pdl", "sglang_config", "empty_pdl", "empty"}
    assert sorted(s["impl"] for s in meta["anchor_skipped"]) == sorted(pairing.SILU_ANCHOR_COLUMNS)
    assert all("not fetched" in s["reason"] for s in meta["anchor_skipped"])
    assert meta["anchors"] == {"sglang": None, "vllm": None}


def test_fp8_anchor_table_over_the_cases(monkeypatch):
    """Which anchor each FP8 case builds (plain data): the quantizers on the gate||up 2-D cases
    without UE8M0, sglang's masked kernel on the masked cases the sweep times fully, vllm's
    colmajor kernel on the gate||up column-major cases; vllm's masked kernel nowhere (its scale
    layout is no case's), and every anchor not built has a reason."""
    pins = {
        d: {"version": p["version"], "wheel": p["wheel"], "wheel_sha256": p["sha256"]} for d, p in A.ANCHORS.items()
    }
    monkeypatch.setattr(A, "manifest", lambda dist, root=None: {"dist": dist, **pins[dist]})
    for case in fp8_cases.fp8_cases():
        built, skipped = fp8_anchors.built(case), fp8_anchors.skipped(case)
        assert set(built) | set(skipped) >= set(fp8_anchors.ANCHOR_KEYS) and not set(built) & set(skipped)
        masked, il, cm, ue = case["masked_m"] is not None, case["interleaved"], case["column_major_scales"], case[
            "scale_ue8m0"]  # fmt: skip
        quant = not masked and not il and not ue
        assert ("sglang_fp8_group_quant" in built) == quant == ("vllm_fp8_group_quant" in built) == ("quant" in built)
        assert ("sglang_silu_and_mul_fp8_masked" in built) == (masked and case["timed"] is None)
        assert ("vllm_silu_mul_fp8_colmajor" in built) == (not masked and not il and cm and not ue)
        assert "vllm_silu_mul_fp8_masked" in skipped and all(len(r) > 20 for r in skipped.values())
    monkeypatch.setattr(A, "manifest", lambda dist, root=None: None)
    assert all(fp8_anchors.built(c) == [] for c in fp8_cases.fp8_cases())
    assert all("not fetched" in r for c in fp8_cases.fp8_cases() for r in fp8_anchors.skipped(c).values())


def test_fp8_bounds_accept_one_step_and_refuse_more():
    g = 4
    s = torch.tensor([[1.0, 2.0]])
    q = torch.tensor([[1.0, 2.0, 3.0, 4.0, 8.0, 10.0, 12.0, 16.0]]).to(torch.float8_e4m3fn)
    one_step = q.float().clone()
    one_step[0, 3] = 4.5  # e4m3's next code above 4
    ok = fp8_anchors.within_bounds(one_step.to(torch.float8_e4m3fn), s, q, s, g, fused=False)
    assert ok["within_bounds"] and ok["codes_differing"] == 1 / 8 and ok["scale_max_rel"] == 0.0
    far = q.float().clone()
    far[0, 3] = 6.0
    assert not fp8_anchors.within_bounds(far.to(torch.float8_e4m3fn), s, q, s, g, fused=False)["within_bounds"]
    s2 = s * (1 + 2**-8)  # a scale 1/2 ulp of bf16 off: a fused anchor's, not a quantizer's
    assert fp8_anchors.within_bounds(q, s2, q, s, g, fused=True)["within_bounds"]
    assert not fp8_anchors.within_bounds(q, s2, q, s, g, fused=False)["within_bounds"]


@needs_scalar_index
def test_fp8_anchors_checked_against_their_bounds_in_the_interpreter(fetched):
    """The FP8 sweep's check before timing, on small CPU inputs: the quantizers against our
    fp8_group_quant, sglang's masked kernel against our fused op (rows present only)."""
    from inkling_kernels import silu_and_mul_fp8_group_quant

    gen = torch.Generator().manual_seed(5)
    case = fp8_cases._case("q", 8, 256, False)
    x = (torch.randn((8, 512), generator=gen) * 3).bfloat16()
    impls = fp8_anchors.anchor_impls(case, x, None, 0)
    assert set(impls) == {"quant", "quant_no_pdl", "sglang_fp8_group_quant", "vllm_fp8_group_quant"}
    checks = fp8_anchors.check_anchors(case, impls, fp8_cases.present_rows)
    assert all(c["within_bounds"] and c["vs"] == "quant" for c in checks.values()) and len(checks) == 2
    mcase = fp8_cases._case("m", 5, 256, False, E=2, T=4, masked_m=(4, 1))
    xm = (torch.randn((2, 4, 512), generator=gen) * 3).bfloat16()
    mm = torch.tensor([4, 1], dtype=torch.int32)
    impls = fp8_anchors.anchor_impls(mcase, xm, mm, 0)
    assert set(impls) == {"sglang_silu_and_mul_fp8_masked"}
    impls["fused"] = (lambda: silu_and_mul_fp8_group_quant(xm, interleaved=False, masked_m=mm), 0)
    (c,) = fp8_anchors.check_anchors(mcase, impls, fp8_cases.present_rows).values()
    assert c["within_bounds"] and c["vs"] == "fused"
    f = fp8_anchors.row_fields("sglang_silu_and_mul_fp8_masked", {"sglang_silu_and_mul_fp8_masked": c})
    assert f["anchor_within_bounds"] is True and "not bits" in f["anchor_check"]
    assert f["wheel_sha256"] == A.ANCHORS["sglang"]["sha256"] and f["paired_port"] == "fused_no_pdl"


@needs_scalar_index
def test_fp8_column_major_anchors_in_the_interpreter(fetched):
    """Column-major scales: both quantizers and vllm's fused colmajor kernel (M a multiple of 128)
    against ours, within their bounds, scales in the same [M, G] column-major layout."""
    from inkling_kernels import silu_and_mul_fp8_group_quant

    gen = torch.Generator().manual_seed(6)
    case = fp8_cases._case("c", 128, 256, False, column_major=True)
    x = (torch.randn((128, 512), generator=gen) * 3).bfloat16()
    impls = fp8_anchors.anchor_impls(case, x, None, 7)
    assert set(impls) == {*fp8_anchors.QUANT_PORTS, "sglang_fp8_group_quant", "vllm_fp8_group_quant",
                          "vllm_silu_mul_fp8_colmajor"}  # fmt: skip
    assert impls["vllm_silu_mul_fp8_colmajor"][1] == 7 and impls["quant"][1] == fp8_anchors.quant_bytes(case)
    impls["fused"] = (lambda: silu_and_mul_fp8_group_quant(x, interleaved=False, column_major_scales=True), 0)
    checks = fp8_anchors.check_anchors(case, impls, fp8_cases.present_rows)
    assert len(checks) == 3 and all(c["within_bounds"] for c in checks.values())
    assert checks["vllm_silu_mul_fp8_colmajor"]["vs"] == "fused"
    assert impls["vllm_silu_mul_fp8_colmajor"][0]()[1].stride() == (1, 128)


def test_fp8_sweep_rows_carry_the_anchors(monkeypatch):
    """``bench_fp8`` with a stand-in timer and the anchors' manifests present: an anchor row per
    built anchor, with its version, wheel sha256, paired port, speedup and check; the rest skipped
    with reasons."""
    from inkling_workbook.measure import fp8_sweep

    pins = {
        d: {"version": p["version"], "wheel": p["wheel"], "wheel_sha256": p["sha256"]} for d, p in A.ANCHORS.items()
    }
    monkeypatch.setattr(A, "manifest", lambda dist, root=None: {"dist": dist, **pins[dist]})
    cases = [
        c for c in fp8_cases.fp8_cases() if c["name"] in ("M49152_N1536_nil_colmajor", "masked_ragged_E8_T256_N1536")
    ]
    monkeypatch.setattr(fp8_cases, "fp8_cases", lambda: cases)

    def fake_impls(case, seed=0, draw=0):
        names = [*fp8_sweep.FP8_IMPLS, *fp8_anchors.built(case)]
        return {n: (lambda: None, fp8_cases.fp8_bytes(case)) for n in names}

    monkeypatch.setattr(fp8_cases, "fp8_impls", fake_impls)
    monkeypatch.setattr(fp8_cases, "check_fused_equals_unfused", lambda case, impls: None)
    monkeypatch.setattr(fp8_cases, "compile_bits_equal_fused", lambda case, impls: {})  # the stand-ins return None
    ok = {"within_bounds": True, "codes_differing": 0.01, "scale_max_rel": 0.005, "vs": "fused"}
    checked = lambda case, impls, present: {k: ok for k in impls if k in fp8_anchors.ANCHOR_KEYS}  # noqa: E731
    monkeypatch.setattr(fp8_anchors, "check_anchors", checked)
    monkeypatch.setattr(timing, "time_calls", _fake_time_calls)
    monkeypatch.setattr(timing, "_configure_dynamo", lambda: None)
    monkeypatch.setattr(timing, "l2_bytes", lambda: 50 * 2**20)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    skipped: list = []
    rows = fp8_sweep.bench_fp8({1536: 4.0}, progress=False, cold=False, skipped_out=skipped)
    anchor_rows = {(r["case"], r["impl"]): r for r in rows if r["wheel_sha256"]}
    assert set(anchor_rows) == {
        ("M49152_N1536_nil_colmajor", "sglang_fp8_group_quant"), ("M49152_N1536_nil_colmajor", "vllm_fp8_group_quant"),
        ("M49152_N1536_nil_colmajor", "vllm_silu_mul_fp8_colmajor"),
        ("masked_ragged_E8_T256_N1536", "sglang_silu_and_mul_fp8_masked"),
    }  # fmt: skip
    for (_, impl), r in anchor_rows.items():
        col = fp8_anchors.FP8_COLUMNS[impl]
        assert r["wheel_sha256"] == A.ANCHORS[col.dist]["sha256"] and r["version"] == col.version
        assert r["config"] == col.label and r["anchor_within_bounds"] is True and "not bits" in r["anchor_check"]
        assert r["paired_port"] == pairing.paired_port(fp8_anchors.FP8_COLUMNS, impl)
        assert r["speedup_of_paired_port"] == round(2.0 / 1.1, 4)  # each against its port without PDL
    assert {r["impl"] for r in rows if r["case"] == "M49152_N1536_nil_colmajor"} >= set(fp8_anchors.QUANT_PORTS)
    assert {(s["case"], s["impl"]) for s in skipped} == {
        ("M49152_N1536_nil_colmajor", "sglang_silu_and_mul_fp8_masked"),
        ("M49152_N1536_nil_colmajor", "vllm_silu_mul_fp8_masked"),
        ("masked_ragged_E8_T256_N1536", "sglang_fp8_group_quant"),
        ("masked_ragged_E8_T256_N1536", "vllm_fp8_group_quant"),
        ("masked_ragged_E8_T256_N1536", "vllm_silu_mul_fp8_colmajor"),
        ("masked_ragged_E8_T256_N1536", "vllm_silu_mul_fp8_masked"),
    }


@gpu_only
def test_gpu_anchor_columns_run_check_and_time(fetched):
    """On the GPU: both sglang silu anchors run on an interleaved shape and are checked for bits
    (the merged port equal), each FP8 anchor of a few cases within its bounds, and one shape's
    anchors are timed with the sweep's timer beside the ports."""
    shape = bench.Shape(16, 1536, True, True, "decode")
    skipped: dict = {}
    impls = bench.anchor_implementations(shape, bench.COLUMNS, skipped=skipped)
    assert set(impls) == set(bench.ANCHOR_KEYS) and skipped == {}  # sm_90+: silu_and_mul_triton with PDL
    (x, w) = bench._buffers(shape, 1)[0]
    bits = bench.check_anchor_bits(shape, impls, x, w)
    assert bits["sglang_silu_and_mul"] is True and set(bits) == set(bench.ANCHOR_KEYS)
    calls = {k: (lambda fn=fn: fn(x, w)) for k, (fn, _) in impls.items()}
    t = timing.time_calls(calls, 1)
    assert all(v.median_us > 0 for v in t.values())
    names = ("M1024_N1536_nil", "M49152_N1536_nil_colmajor", "masked_ragged_E8_T256_N1536")
    for case in [c for c in fp8_cases.fp8_cases() if c["name"] in names]:
        fimpls = fp8_cases.fp8_impls(case)
        checks = fp8_anchors.check_anchors(case, fimpls, fp8_cases.present_rows)
        assert set(checks) == set(fp8_anchors.built(case)) - set(fp8_anchors.QUANT_PORTS) != set()
        assert all(c["within_bounds"] for c in checks.values()), (case["name"], checks)
