"""The bitwise records (`check`, through portcheck), the CLI, the figures and the backend switch
(CPU-side behaviour)."""

import json
from pathlib import Path

import portcheck_plants as plants
import pytest
import torch
from conftest import HAS_CUDA

import inkling_kernels as ik
import portcheck
from inkling_kernels import _backend
from inkling_kernels.reference import silu_and_mul_ref
from inkling_workbook import cli
from inkling_workbook.ports.silu_and_mul import harness, helion_original, portcheck_cases
from inkling_workbook.publish import speedup, style, tables

DATA = Path(__file__).resolve().parent.parent / "data"


def test_gpu_matrix_covers_the_source_matrix():
    shapes = portcheck_cases.bitwise_shapes("gpu")
    assert len(shapes) == 336
    assert {c.M for c in shapes} >= {1, 2, 4, 6, 8, 16, 96, 384, 1536, 4096, 49152}
    assert {c.N for c in shapes} >= {384, 768, 960, 1024, 1536, 2048, 3072}
    assert any(c.M * 2 * c.N > 2**31 for c in shapes)
    assert any(c.out_dtype == "float32" for c in shapes) and any(c.N % 2 for c in shapes)
    assert {(c.interleaved, c.weighted) for c in shapes} == {(a, b) for a in (True, False) for b in (True, False)}
    with pytest.raises(ValueError, match="kind"):
        portcheck_cases.bitwise_shapes("huge")


def test_bitwise_cases_are_portcheck_cases_with_fresh_seeds_and_the_shape_in_meta():
    for kind, n in (("gpu", 336), ("quick", None), ("cpu", 56)):
        cases = portcheck_cases.bitwise_cases(kind)
        assert n is None or len(cases) == n
        assert len({c.name for c in cases}) == len({c.seed for c in cases}) == len(cases), kind
        assert all(isinstance(c, portcheck.Case) and c.out is not None for c in cases)
    big = [c for c in portcheck_cases.bitwise_cases("gpu") if c.meta["M"] * 2 * c.meta["N"] > 2**31]
    assert [c.meta["interleaved"] for c in big] == [True, False]  # not built here: 4 GiB of inputs
    case = next(c for c in portcheck_cases.bitwise_cases("cpu") if c.meta["weighted"] and c.meta["M"] == 6)
    (x, w), kwargs = case.build()
    assert x.shape == (6, 2 * case.meta["N"]) and w.shape == (6,) and x.dtype == torch.bfloat16
    assert kwargs == {"out_dtype": torch.bfloat16, "interleaved": case.meta["interleaved"]}
    assert portcheck.digest(case.build()) == portcheck.digest(case.build())
    other = portcheck_cases.bitwise_cases("cpu", seed=1)[0]
    assert portcheck.digest(other.build()) != portcheck.digest(portcheck_cases.bitwise_cases("cpu")[0].build())


def test_the_other_layout_callable_sees_the_same_gate_and_up():
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(4, 2 * 96, generator=gen) * 2).to(torch.bfloat16)
    for il in (True, False):
        ref = silu_and_mul_ref(x, interleaved=il)
        got = portcheck_cases.port_other_layout(x, interleaved=il)
        assert torch.equal(got.view(torch.int16), ik.silu_and_mul(x, interleaved=il).view(torch.int16))
        assert (got.float() - ref.float()).abs().max() <= ref.float().abs().max() * 2**-7


SMALL = [
    portcheck_cases.Shape(2, 256, True, True),
    portcheck_cases.Shape(3, 7, False, False),
    portcheck_cases.Shape(1, 300, True, False, out_dtype="float32"),
]


@pytest.mark.skipif(not helion_original.available(), reason=helion_original.INSTALL_HINT)
def test_check_through_portcheck_writes_the_record_and_a_planted_port_fails_it(tmp_path, monkeypatch, capsys):
    """`check` on three small cases: the table and tally printed, the record written (the schema
    notebook 04 and tools/reliability.py read); a port one bit off in one element makes it exit 1
    and print where, in hex, with the reproducer."""
    monkeypatch.setattr(portcheck_cases, "bitwise_shapes", lambda kind: SMALL)
    out = tmp_path / "bitwise.json"
    assert cli.main(["check", "--matrix", "cpu", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "3 cases (cpu matrix)" in printed and "M=3 N=7 nil" in printed
    assert "3/3 bitwise identical; vs helion with the sm_90 table 1/1; layouts equal 3/3; reruns equal 3/3" in printed
    doc = json.loads(out.read_text())
    assert doc["all_ok"] and doc["matrix"] == "cpu" and doc["provenance"]["triton"] and doc["tally"] in printed
    rows = doc["cases"]
    assert [r["case"] for r in rows] == [s.name for s in SMALL]
    assert [r["port_vs_helion_sm90"] for r in rows] == [True, None, None]  # the sm_90 table has 2N = 512, not 14 or 600
    assert all(r["ok"] and r["port_vs_helion"] and r["layouts_equal"] and r["finite"] for r in rows)
    assert rows[2]["out_dtype"] == "float32" and 0 < rows[2]["max_ulp_vs_ref"] <= harness.ULP_BUDGET["float32"]
    assert sum(rows[0]["ulp_vs_ref"].values()) == 2 * 256
    comps = {c["name"]: c for c in doc["portcheck"]["comparisons"]}
    # the original is called twice on the GPU (its determinism checked too), once in the interpreter
    want_reruns = [2, 2] if torch.cuda.is_available() else [1, 2]
    assert set(comps) == {"helion", "helion_sm90", "layouts"} and comps["helion"]["reruns"] == want_reruns
    assert comps["helion_sm90"]["n_cases"] == 1 and doc["portcheck"]["code"]["port"]

    monkeypatch.setattr(harness, "silu_and_mul", plants.silu_flip_one_bit)
    assert cli.main(["check", "--matrix", "cpu", "--out", str(out), "--no-progress"]) == 1
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert (
        not doc["all_ok"] and doc["tally"].startswith("0/3 bitwise identical") and "layouts equal 0/3" in doc["tally"]
    )
    first = doc["cases"][0]["mismatch"]["helion"]["outputs"][0]["first"]
    assert [f["at"] for f in first] == [[0, 3]]
    assert int(first[0]["original"], 16) ^ int(first[0]["port"], 16) == 1
    assert f"at (0, 3): original {first[0]['original']}" in printed and "portcheck_plants:silu_flip_one_bit" in printed
    assert (
        "--cases inkling_workbook.ports.silu_and_mul.portcheck_cases:bitwise_cpu_cases --only 'M=2 N=256 il+w bfloat16'"
        in printed
    )


def test_check_without_helion_still_compares_layouts_and_reruns(monkeypatch):
    monkeypatch.setattr(helion_original, "available", lambda: False)
    monkeypatch.setattr(portcheck_cases, "bitwise_shapes", lambda kind: SMALL[1:2])
    doc, reports = harness.bitwise_record("cpu", "cpu", progress=False)
    assert list(reports) == ["layouts"] and doc["all_ok"]
    assert doc["tally"].startswith("helion not installed: port vs helion not run on 1 cases; layouts equal 1/1")
    monkeypatch.setattr(harness, "silu_and_mul", plants.flaky_silu)
    doc, _ = harness.bitwise_record("cpu", "cpu", progress=False)
    assert not doc["all_ok"] and "reruns equal 0/1" in doc["tally"]
    with pytest.raises(ValueError, match="kind"):
        harness.bitwise_record("huge", "cpu")


def test_tally_without_helion():
    rows = [{"port_vs_helion": None, "layouts_equal": True, "rerun_equal": True, "finite": True, "max_ulp_vs_ref": 0}]
    assert "helion not installed" in harness.tally(rows)


def test_recorded_bitwise_files_have_provenance():
    for name in ("bitwise_h200.json", "nvfp4_bitwise_h200.json", "bitwise_cpu.json"):
        doc = json.loads((DATA / name).read_text())
        prov = doc["provenance"]
        assert doc["all_ok"] is True and doc["cases"]
        for key in ("device", "date_utc", "command", "torch", "triton", "helion"):
            assert prov.get(key), (name, key)
    cpu = json.loads((DATA / "bitwise_cpu.json").read_text())
    assert {c["name"] for c in cpu["portcheck"]["comparisons"]} == {"helion", "helion_sm90", "layouts"}
    assert len(cpu["cases"]) == len(portcheck_cases.bitwise_shapes("cpu")) and cpu["matrix"] == "cpu"
    gpu = json.loads((DATA / "bitwise_h200.json").read_text())
    assert gpu["provenance"]["driver"] and len(gpu["cases"]) >= 88
    assert gpu["tally"].startswith(f"{len(gpu['cases'])}/{len(gpu['cases'])} bitwise identical")


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without a GPU")
def test_bench_refuses_without_gpu(capsys):
    with pytest.raises(SystemExit, match="CUDA GPU"):
        cli.main(["bench", "--quick"])


def test_info_prints_versions(capsys):
    assert cli.main(["info"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["triton"] and info["torch"]


def test_figures_and_summary_from_recorded_data(tmp_path, capsys):
    readme = tmp_path / "results.md"  # a copy of docs/results.md: tests never write into the checkout
    readme.write_text((DATA.parent / "docs" / "results.md").read_text())
    assert cli.main(["figures", "--data", str(DATA), "--out", str(tmp_path), "--readme", str(readme)]) == 0
    for stem in ("speedup_h200", "bandwidth_h200", "nvfp4_h200", "tile_sweep_h200"):
        for ext in (".png", ".svg"):
            assert (tmp_path / f"{stem}{ext}").stat().st_size > 5000
    assert readme.read_text() == (DATA.parent / "docs" / "results.md").read_text()  # its tables were current
    md = tables.summary_markdown(DATA)
    assert "| 49152 | 3072 | il |" in md and "NVFP4 fused" in md
    df, meta = style.load_bench(DATA / "bench_h200.csv")
    targets = speedup.targets_table(df, meta)
    assert len(targets) >= 6 and set(targets.met.unique()) <= {True, False}


def test_figures_without_data_says_so(tmp_path, capsys):
    assert cli.main(["figures", "--data", str(tmp_path), "--out", str(tmp_path / "f"), "--readme", ""]) == 1
    assert "no benchmark CSV" in capsys.readouterr().out


def test_interpreter_rounding_switch():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 512, generator=gen).to(torch.bfloat16)
    exact32 = silu_and_mul_ref(x, out_dtype=torch.float32)
    previous = ik.set_interpreter_bf16_rounding("truncate")
    try:
        truncated = ik.silu_and_mul(x)
    finally:
        ik.set_interpreter_bf16_rounding(previous)
    rounded = ik.silu_and_mul(x)
    # truncation never increases the magnitude; round-to-nearest is within half an ulp
    assert bool((truncated.float().abs() <= exact32.abs() * (1 + 2**-20)).all())
    assert not torch.equal(truncated, rounded)
    assert int((rounded.float() - exact32).abs().gt(exact32.abs() * 2**-8).sum()) == 0
    with pytest.raises(ValueError, match="mode"):
        ik.set_interpreter_bf16_rounding("nearest")
    assert _backend.interpreter_bf16_rounding() == previous


def test_unsupported_device_is_refused():
    with pytest.raises(ValueError, match="gateup"):
        ik.silu_and_mul(torch.ones(2, 4, device="meta"))


def test_companion_files_of_a_sweep(tmp_path):
    from inkling_workbook.measure import provenance

    out = tmp_path / "bench_h200.csv"
    assert provenance.companion(out, "nvfp4") == tmp_path / "nvfp4_bench_h200.csv"
    assert provenance.companion(out, "tune") == tmp_path / "tune_bench_h200.csv"
    assert provenance.companion(out, "meta") == tmp_path / "bench_h200.json"
    with pytest.raises(ValueError, match="kind"):
        provenance.companion(out, "figures")
    # the recorded run has all three
    for kind in ("nvfp4", "tune", "meta"):
        assert provenance.companion(DATA / "bench_h200.csv", kind).exists(), kind


def test_write_record_replaces_whole_file(tmp_path):
    from inkling_workbook.measure import provenance

    path = tmp_path / "sub" / "r.json"
    provenance.write_record(path, "old\n")
    provenance.write_record(path, "new\n")
    assert path.read_text() == "new\n" and sorted(p.name for p in path.parent.iterdir()) == ["r.json"]


def test_quick_sweep_is_a_subset_of_the_full_sweep():
    from inkling_workbook.measure import bench

    key = lambda s: (s.M, s.N, s.interleaved, s.weighted)
    full = {key(s) for s in bench.shapes()}
    quick = [key(s) for s in bench.shapes(quick=True)]
    assert len(quick) >= 20 and set(quick) <= full


def test_rerun_table_pairs_timings():
    import pandas as pd

    base = {"op": "silu_and_mul", "N": 768, "layout": "il", "weighted": False, "l2": "warm"}
    recorded = pd.DataFrame(
        [{**base, "M": m, "impl": i, "median_us": t} for m, i, t in [(1, "triton", 1.2), (49152, "triton", 54.0)]]
        + [{**base, "M": 8, "impl": "helion", "median_us": 2.0}]
    )
    again = pd.DataFrame([{**base, "M": m, "impl": "triton", "median_us": t} for m, t in [(1, 1.5), (49152, 54.0)]])
    table = speedup.rerun_table(again, recorded)
    assert len(table) == 2
    assert table.set_index("M").ratio.to_dict() == pytest.approx({1: 1.25, 49152: 1.0})
    summary = speedup.rerun_summary(table)
    assert set(summary["size"]) == {"decode (M <= 16)", "large (M >= 4096)"} and summary.timings.sum() == 2


def test_readme_reliability_table_matches_its_record():
    import importlib.util

    spec = importlib.util.spec_from_file_location("reliability", DATA.parent / "tools" / "reliability.py")
    reliability = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reliability)
    doc = json.loads((DATA / "reliability.json").read_text())
    assert reliability.main(["--check"]) == 0
    # what the table says of the GPU jobs it lists agrees with their logs: a test suite or sanitizer
    # that found anything is a failed step, named in the table's "failed" column (a failure is
    # shown, never a clean count next to it)
    assert doc["gpu_jobs"], "no GPU job log recorded"
    for job in doc["gpu_jobs"]:
        counts = job["counts"]
        if "tests" in counts:
            assert counts["tests"]["passed"] > 200, job["log"]
            assert counts["tests"]["failed"] == 0 or "tests" in job["steps_failed"], job["log"]
        for tool, key in (
            ("memcheck", "sanitizer_errors"),
            ("racecheck", "racecheck_hazards"),
            ("initcheck", "sanitizer_errors"),
        ):
            if tool in counts:
                assert counts[tool][key] == 0 or tool in job["steps_failed"], (job["log"], tool)
        assert set(job["steps_failed"]) <= set(job["steps"]), job["log"]


def test_interpreted_runs_leave_triton_language_as_found(gen):
    """Triton's interpreter patches ``triton.language`` while it runs and, for device-function
    calls, never puts it back; compiled kernels then fail to build in the same process.
    ``_backend.interpreting`` restores everything on exit. Checked on the objects, then by building
    a kernel for sm_90 right here (Triton compiles to PTX without a GPU)."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from inkling_kernels.silu_and_mul import silu_and_mul_interleaved_kernel

    before = _backend._snapshot()
    with _backend.interpreting():
        tl.core.program_id = "patched"
        tl.core.tensor.extra_attribute = 1
    assert tl.core.program_id != "patched" and not hasattr(tl.core.tensor, "extra_attribute")
    x = torch.randn((8, 2 * 64), generator=gen).to(torch.bfloat16)
    ik.silu_and_mul(x)
    ik.silu_and_mul_nvfp4_quant(x, torch.ones(1), torch.tensor([0, 8], dtype=torch.int32))
    assert _backend._changed_since(before) == []
    signature = {"gateup_ptr": "*bf16", "weight_ptr": "*fp32", "out_ptr": "*bf16", "M": "i32", "stride_in": "i32"}
    signature |= {"stride_out": "i32"}
    constants = {"N": 1024, "BLOCK_M": 1, "BLOCK_N": 1024, "EVEN_M": True, "EVEN_N": True, "HAS_WEIGHT": False}
    constants |= {"INT64": False, "STREAM_POLICY": "", "USE_PDL": False}
    signature |= dict.fromkeys(constants, "constexpr")
    compiled = triton.compile(
        ASTSource(silu_and_mul_interleaved_kernel, signature, constants), target=GPUTarget("cuda", 90, 32)
    )
    assert "ld.global" in compiled.asm["ptx"] and "st.global" in compiled.asm["ptx"]


def test_git_commit_prefers_the_environment(monkeypatch):
    from inkling_workbook.measure import provenance

    monkeypatch.setenv("INKLING_GIT_COMMIT", "0123456789ab")
    assert provenance.git_commit() == "0123456789ab"
    assert provenance.collect("x")["git_commit"] == "0123456789ab"


def test_sources_digest_names_the_code_on_disk_and_in_a_commit(tmp_path):
    """``provenance.sources_digest``: the same digest from the files on disk and from the commit
    that holds them; another byte in a source file, or another file, is another digest; files
    outside the source trees and non-Python files do not count."""
    import subprocess

    from inkling_workbook.measure import provenance

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    for name, text in {"inkling_kernels/a.py": "x = 1\n", "tools/t.py": "y = 2\n", "README.md": "z\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "tools" / "notes.txt").write_text("not python\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    disk = provenance.sources_digest(root=tmp_path)
    assert disk and len(disk) == 64
    assert provenance.sources_digest(commit="HEAD", root=tmp_path) == disk
    (tmp_path / "README.md").write_text("changed\n")
    (tmp_path / "tools" / "notes.txt").write_text("changed\n")
    assert provenance.sources_digest(root=tmp_path) == disk
    (tmp_path / "tools" / "t.py").write_text("y = 3\n")
    changed = provenance.sources_digest(root=tmp_path)
    assert changed != disk
    (tmp_path / "tools" / "t.py").write_text("y = 2\n")
    (tmp_path / "inkling_workbook").mkdir()
    (tmp_path / "inkling_workbook" / "b.py").write_text("")
    assert provenance.sources_digest(root=tmp_path) not in (disk, changed)
    assert provenance.sources_digest(commit="HEAD", root=tmp_path) == disk


def test_the_rerun_tolerance_comes_only_from_a_re_measurement_of_the_same_kernel(tmp_path):
    """The published sweep and its re-measurement (``bench_quick_``) give the *rerun* tolerance
    only when both records timed the same ``silu_and_mul`` kernel (equal kernel digests); a
    re-measurement of another kernel, or one that cannot be dated, gives none."""
    import shutil

    for name in ("bench_h200.csv", "bench_h200.json", "bench_quick_h200.csv", "bench_quick_h200.json"):
        shutil.copy(DATA / name, tmp_path / name)
    tol = speedup.rerun_tolerance(tmp_path / "bench_h200.csv")
    assert set(tol) == {"decode", "mid", "large"} and all(v >= 0 for v in tol.values())
    quick = json.loads((tmp_path / "bench_quick_h200.json").read_text())
    prov = quick.get("provenance", quick)
    prov["kernel_digests"] = {"silu_and_mul": "0" * 16, "nvfp4": "0" * 16, "fp8": "0" * 16}
    (tmp_path / "bench_quick_h200.json").write_text(json.dumps(quick))
    assert speedup.rerun_tolerance(tmp_path / "bench_h200.csv") == {}
    (tmp_path / "bench_quick_h200.json").unlink()
    assert speedup.rerun_tolerance(tmp_path / "bench_h200.csv") == {}
