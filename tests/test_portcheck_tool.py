"""portcheck as a tool of its own: no workbook dependency, its command line (exit codes 0/1/2/3,
crashes and timeouts as rows, errors in the user's modules, outputs that are not tensors, an
unwritable --out), the comparison modes, the reports (JUnit, pivot, provenance, --dump), stable
case names, per-input dtypes and the pytest helper."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import portcheck_plants as plants
import pytest
import torch

import portcheck

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
CASES = "portcheck_plants:cases"


def _cli(*args, cwd=ROOT, env=ENV):
    cmd = [sys.executable, "-m", "portcheck", *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)


def test_the_package_imports_nothing_of_the_workbook_or_the_library():
    for path in (ROOT / "portcheck").glob("*.py"):
        text = path.read_text()
        assert "import inkling" not in text and "from inkling" not in text, path
    script = (
        "import sys, torch, portcheck\n"
        "cases = portcheck.matrix(shapes=[(2, 8)], value_classes=('random',), strides=('contiguous',))\n"
        "assert portcheck.run(torch.neg, torch.neg, cases).ok\n"
        "print(sorted(m for m in sys.modules if m.startswith('inkling')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd="/", capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


def test_module_and_console_script_and_help():
    helped = _cli("--help")
    assert helped.returncode == 0 and "exit codes: 0 equal, 1 mismatch, 2 usage error, 3" in helped.stdout
    script = Path(sys.executable).parent / "portcheck"
    if script.exists():  # installed by pip install -e . (the console script of pyproject.toml)
        args = [str(script), "portcheck_plants:double", "portcheck_plants:double", "--cases", CASES, "--no-code"]
        ok = subprocess.run(args, env=ENV, cwd=ROOT / "tests", capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr[-2000:]


def test_a_segfault_and_a_timeout_are_that_cases_rows_and_exit_3(tmp_path):
    crash = _cli("portcheck_plants:double", "portcheck_plants:segfault_on_nan", "--cases", CASES, "--no-code",
                 "--out", str(tmp_path))  # fmt: skip
    assert crash.returncode == 3, crash.stderr[-2000:]
    doc = json.loads((tmp_path / "report.json").read_text())
    random_row, nan_row = doc["cases"]
    assert random_row["status"] == "equal" and nan_row["status"] == "crashed"
    assert "SIGSEGV" in nan_row["error"] and "ERROR" in crash.stdout and "1 crashed" in crash.stdout
    assert "[2/2]" in crash.stderr  # a progress line per case
    slow = _cli("portcheck_plants:double", "portcheck_plants:sleeps_on_nan", "--cases", CASES, "--no-code",
                "--timeout", "3", "--jobs", "2")  # fmt: skip
    assert slow.returncode == 3 and "timed out: still running after 3" in slow.stdout
    assert "| 2x64 bfloat16 random contiguous seed=0 | (2, 64) bfloat16 | yes |" in slow.stdout


def test_errors_in_the_users_modules(tmp_path):
    (tmp_path / "syntax_bad.py").write_text("def port(x):\n    return x +\n")
    (tmp_path / "name_bad.py").write_text("import torch\n\nMISSING_NAME\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]])}
    for mod, what in (("syntax_bad", "SyntaxError"), ("name_bad", "NameError")):
        r = _cli("portcheck_plants:double", f"{mod}:port", "--cases", CASES, env=env)
        assert r.returncode == 2 and what in r.stderr and f"{mod}.py:" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    lazy = _cli("portcheck_plants:double", "portcheck_plants:lazy_import_on_nan", "--cases", CASES, "--no-code")
    assert lazy.returncode == 3 and "ModuleNotFoundError" in lazy.stdout and "1/2 cases equal" in lazy.stdout
    named = _cli("portcheck_plants:double", "portcheck_plants:name_error", "--cases", CASES, "--no-code")
    assert named.returncode == 3 and "NameError" in named.stdout and "portcheck_plants.py:" in named.stdout


def test_outputs_that_are_not_tensors_and_a_broken_reference(tmp_path):
    ok = _cli("portcheck_plants:as_float", "portcheck_plants:as_float_too", "--cases", CASES, "--no-code")
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    rep = portcheck.run(plants.as_float, lambda x: plants.as_float(x)[0], plants.cases(), code=False)
    assert not rep.ok and "output count differs" in rep.cases[0]["outputs"][0]["problem"]
    rep = portcheck.run(plants.as_float, lambda x: (plants.as_float(x)[0] + 1, plants.as_float(x)[1]),
                        plants.cases()[:1], code=False)  # fmt: skip
    assert rep.cases[0]["outputs"][0]["mismatches"] == 1
    broken = _cli("portcheck_plants:double", "portcheck_plants:double", "--cases", CASES, "--no-code",
                  "--reference", "portcheck_plants:broken_reference")  # fmt: skip
    assert broken.returncode == 3 and "reference output 0 has shape (2, 63)" in broken.stdout


def test_an_unwritable_out_is_a_usage_error_before_the_run(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    r = _cli("portcheck_plants:double", "portcheck_plants:double", "--cases", CASES, "--out", str(blocker / "sub"))
    assert r.returncode == 2 and "--out" in r.stderr and "Traceback" not in r.stderr and "cases equal" not in r.stdout


def test_modes_beyond_bits_are_explicit():
    cases = plants.cases()
    payload = portcheck.run(plants.double, plants.canonical_nan, cases, code=False)
    assert not payload.ok and payload.to_markdown().count("compared by: bit equality") == 1
    nan_ok = portcheck.run(plants.double, plants.canonical_nan, cases, code=False, mode=portcheck.Mode.make(nan=True))
    assert nan_ok.ok and "NaN canonicalised" in nan_ok.to_markdown() and nan_ok.cases[1]["accepted"] > 0
    zeros = plants.zero_cases()
    assert not portcheck.run(plants.double, plants.negative_zero, zeros, code=False).ok
    assert portcheck.run(plants.double, plants.negative_zero, zeros, code=False,
                         mode=portcheck.Mode.make(zeros=True)).ok  # fmt: skip
    one_ulp = {"bfloat16": 1}
    assert portcheck.run(plants.double, plants.plus_one_ulp, cases[:1], code=False,
                         mode=portcheck.Mode.make(ulp=one_ulp)).ok  # fmt: skip
    assert not portcheck.run(plants.double, plants.plus_one_ulp, cases[:1], code=False,
                             mode=portcheck.Mode.make(ulp={"float32": 1})).ok  # fmt: skip
    # no farther from the reference: the port one ulp off where the original is exact fails; the
    # other way round (the original off, the port exact) passes
    farther = portcheck.Mode.make(no_farther=True)
    assert not portcheck.run(plants.double, plants.plus_one_ulp, cases[:1], reference=plants.reference,
                             code=False, mode=farther).ok  # fmt: skip
    closer = portcheck.run(plants.plus_one_ulp, plants.double, cases[:1], reference=plants.reference, code=False,
                           mode=farther)  # fmt: skip
    assert closer.ok and "no farther from the reference" in closer.to_markdown()
    with pytest.raises(ValueError, match="reference"):
        portcheck.run(plants.double, plants.double, cases, mode=farther)
    with pytest.raises(ValueError, match="ulp budget"):
        portcheck.Mode.make(ulp={"int8": 1})
    only = "2x64 bfloat16 random contiguous seed=0"  # (Inf one bit on is a NaN, no ulp away)
    cli = _cli("portcheck_plants:double", "portcheck_plants:plus_one_ulp", "--cases", CASES, "--only", only,
               "--no-code", "--ulp", "bfloat16=1")  # fmt: skip
    assert cli.returncode == 0 and "ulp budget bfloat16 1" in cli.stdout


def test_reports_junit_pivot_provenance_and_dump(tmp_path):
    outs = ["--out", str(tmp_path / "out"), "--junit", str(tmp_path / "j.xml"), "--dump", str(tmp_path / "d")]
    r = _cli("portcheck_plants:double", "portcheck_plants:flip_one_bit", "--cases", CASES, "--no-code", *outs)
    assert r.returncode == 1
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite.get("tests") == "2" and suite.get("failures") == "2" and suite.get("errors") == "0"
    assert {p.get("name") for p in suite.find("properties")} >= {"torch", "triton", "cpu_mode", "mode"}
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["summary"] == {"bfloat16": {"random": [0, 1], "nan_inf": [0, 1]}} and doc["exit_code"] == 1
    prov = doc["provenance"]
    assert (
        prov["torch"] == torch.__version__
        and prov["device"] == "cpu"
        and "fp32->bf16 RNE" in prov["cpu_mode"]["repairs"]
        and prov["portcheck"] == portcheck.__version__
        and "distribution" in prov
    )
    version = _cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"portcheck {portcheck.__version__}"
    md = (tmp_path / "out" / "report.md").read_text()
    assert md.index("## Summary") < md.index("## Cases") < md.index("## Mismatches")
    dumped = torch.load(doc["cases"][0]["dump"])
    (x,), _ = portcheck.Case("x", shapes=(2, 64), seed=doc["cases"][0]["seed"]).build()
    assert torch.equal(dumped["args"][0].view(torch.int16), x.view(torch.int16))
    assert (dumped["original"][0].view(torch.int16) != dumped["port"][0].view(torch.int16)).sum() == 1


def test_case_names_are_stable_and_inputs_have_their_own_dtypes_and_classes():
    small = portcheck.matrix(shapes=[(2, 8)], value_classes=("random",))
    more = portcheck.matrix(shapes=[(1, 4), (2, 8)], value_classes=("edges", "random"))
    for c in small:
        twin = next(m for m in more if m.name == c.name)
        assert twin.seed == c.seed == portcheck.name_seed(c.name)
        assert portcheck.digest(twin.build()) == portcheck.digest(c.build())
    (case,) = portcheck.matrix(shapes=[((4, 16), (4,))], dtypes=[(torch.bfloat16, torch.float32)],
                               value_classes=[("nan_inf", "random")], strides=("contiguous",))  # fmt: skip
    (x, w), _ = case.build()
    assert case.name == "4x16+4 bfloat16+float32 nan_inf+random contiguous seed=0"
    assert x.dtype == torch.bfloat16 and torch.isnan(x).any() and w.dtype == torch.float32 and w.isfinite().all()
    with pytest.raises(ValueError, match="two cases named"):
        portcheck.matrix(shapes=[(2, 2), (2, 2)])
    with pytest.raises(ValueError, match="2 inputs"):
        portcheck.Case("bad", shapes=((2, 2), (2,)), dtype=(torch.float32,))


@portcheck.pytest_cases(plants.cases())
def test_the_pytest_helper(case):
    portcheck.assert_case(plants.double, plants.double, case)
    with pytest.raises(AssertionError, match=r"at \(0, 3\)"):
        portcheck.assert_case(plants.double, plants.flip_one_bit, case)


def test_an_interrupted_run_exits_3_with_a_line(monkeypatch, capsys):
    from portcheck import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_args", interrupted)
    code = cli.main(["portcheck_plants:double", "portcheck_plants:double", "--cases", CASES])
    assert code == 3 == cli.EXIT_ERROR and capsys.readouterr().err == "portcheck: interrupted\n"
