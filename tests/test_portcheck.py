"""portcheck (the top-level package ``portcheck``): planted mismatches are caught and named, equal
callables pass, the CLI's exit codes, ulp histograms, the generated-code comparison and the
value-class generators."""

import json
import os
import subprocess
import sys
from pathlib import Path

import portcheck_plants as plants
import pytest
import torch

import inkling_kernels as ik
import portcheck
from inkling_workbook import cli
from inkling_workbook.ports.silu_and_mul import helion_original

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
CASES = "portcheck_plants:cases"


def check(port, value_classes=("random",), reference=None, **kw):
    cases = portcheck.matrix(shapes=[(2, 64)], value_classes=value_classes, strides=("contiguous",))
    return portcheck.run(plants.double, port, cases, reference=reference, code=False, **kw)


def test_one_flipped_bit_is_named_with_its_case_coordinate_and_both_values():
    report = check(plants.flip_one_bit)
    assert not report.ok
    (row,) = report.cases
    (out,) = row["outputs"]
    assert out["mismatches"] == 1 and [f["at"] for f in out["first"]] == [[0, 3]]
    (x,), _ = portcheck.Case("rebuilt", shapes=(2, 64), seed=row["seed"]).build()
    want = (x * 2).view(torch.int16)[0, 3].item() & 0xFFFF
    first = out["first"][0]
    assert first["original"] == f"0x{want:04x}" and first["port"] == f"0x{want ^ 1:04x}"
    md = report.to_markdown()
    assert row["case"] in md and "at (0, 3)" in md and first["original"] in md and first["port"] in md
    assert "MISMATCH" in md and f"--only '{row['case']}'" in md and f"seed {row['seed']}" in md


def test_a_moved_nan_is_reported_as_nan_positions():
    report = check(plants.move_nan, value_classes=("nan_inf",))
    (out,) = report.cases[0]["outputs"]
    assert not report.ok and out["nan_positions_differ"] == 2 and out["mismatches"] == 2
    assert "NaN positions differ at 2 elements" in report.to_markdown()


def test_nan_payloads_that_differ_are_reported_as_such():
    def other_payload(x):
        out = plants.double(x)
        out.view(torch.int16)[torch.isnan(out)] = 0x7FC1  # a NaN still, with another payload
        return out

    report = check(other_payload, value_classes=("nan_inf",))
    (out,) = report.cases[0]["outputs"]
    assert not report.ok and out["nan_positions_differ"] == 0 and out["nan_payloads_differ"] == out["nan"][0] > 0


def test_an_output_shape_off_by_one_is_reported_as_a_shape_mismatch():
    report = check(plants.shape_off_by_one)
    (out,) = report.cases[0]["outputs"]
    assert (
        not report.ok and out["problem"].startswith("shape differs: original (2, 64)") and "(2, 63)" in out["problem"]
    )
    assert "shape/dtype" in report.to_markdown()


def test_other_dtypes_and_output_counts_are_mismatches():
    assert "dtype differs" in check(lambda x: plants.double(x).half()).cases[0]["outputs"][0]["problem"]
    row = check(lambda x: (plants.double(x), x)).cases[0]
    assert not row["ok"] and "output count differs" in row["outputs"][0]["problem"]


def test_a_port_that_raises_is_a_failed_case_with_the_error():
    def raises(x):
        raise RuntimeError("no kernel for this shape")

    report = check(raises)
    row = report.cases[0]
    assert not report.ok and row["error"] == "port raised RuntimeError: no kernel for this shape"
    assert "| error |" in report.to_markdown() and "no kernel for this shape" in report.to_markdown()


def test_a_nondeterministic_port_is_caught_by_the_rerun():
    report = check(plants.flaky)
    row = report.cases[0]
    assert row["equal"] and row["original_deterministic"] and not row["port_deterministic"] and not report.ok
    assert "the port is not deterministic" in report.to_markdown()
    assert check(plants.flaky, reruns=1).ok  # one call each: nothing to compare a rerun with


def test_equal_callables_pass():
    report = check(plants.double, value_classes=portcheck.VALUE_CLASSES)
    assert report.ok and all(r["mismatches"] == 0 for r in report.cases) and "**OK**" in report.to_markdown()
    doc = json.loads(report.to_json())
    assert doc["ok"] is True and len(doc["cases"]) == len(portcheck.VALUE_CLASSES)


def test_the_package_op_against_itself_passes_with_poisoned_outputs_and_its_kernel_code():
    def out(args, kwargs):
        return torch.empty(args[0].shape[0], args[0].shape[1] // 2, dtype=args[0].dtype)

    cases = plants.package_cases()
    for c in cases:
        c.out = out
    report = portcheck.run(ik.silu_and_mul, ik.silu_and_mul, cases)
    assert report.ok and {c["stride"] for c in report.cases} == {"contiguous", "row_padded"}, report.to_markdown()
    kernels = report.code["port"]
    assert kernels and kernels[0]["kernel"] == "silu_and_mul_interleaved_kernel"
    classes = kernels[0]["classes"]
    assert classes["ld.global"] > 0 and classes["st.global"] > 0 and classes["MUFU (ex2/rcp/...)"] > 0
    assert kernels[0]["registers"] > 0 and kernels[0]["sass_to_exit"] > 0
    assert "silu_and_mul_interleaved_kernel" in report.to_markdown()


def test_an_unwritten_output_element_shows_through_the_poison():
    def skips_one(x, out):
        out[1:] = plants.double(x)[1:]  # row 0 never written
        return out

    def full(x, out):
        out.copy_(plants.double(x))
        return out

    cases = portcheck.matrix(shapes=[(2, 64)], value_classes=("random",), out=lambda a, k: torch.empty_like(a[0]))
    assert [c.stride for c in cases] == ["contiguous", "row_padded"]
    report = portcheck.run(full, skips_one, cases, code=False)
    assert not report.ok and [r["mismatches"] for r in report.cases] == [64, 64]


def test_ulp_histogram_of_one_ulp_everywhere():
    report = check(plants.plus_one_ulp, reference=plants.reference)
    ulp = report.cases[0]["ulp"]
    assert ulp["original"] == {**dict.fromkeys(portcheck.ULP_BUCKETS, 0), "0": 128}
    assert ulp["port"] == {**dict.fromkeys(portcheck.ULP_BUCKETS, 0), "1": 128}
    assert "128/0/0/0/0/0/0 | 0/128/0/0/0/0/0" in report.to_markdown()


def test_bad_arguments_name_the_argument():
    cases = plants.cases()
    with pytest.raises(TypeError, match="original"):
        portcheck.run(1, plants.double, cases)
    with pytest.raises(TypeError, match="port"):
        portcheck.run(plants.double, "x", cases)
    with pytest.raises(ValueError, match="cases"):
        portcheck.run(plants.double, plants.double, [])
    with pytest.raises(TypeError, match="cases"):
        portcheck.run(plants.double, plants.double, [(2, 3)])
    with pytest.raises(ValueError, match="device"):
        portcheck.run(plants.double, plants.double, cases, device="tpu")
    with pytest.raises(ValueError, match="reruns"):
        portcheck.run(plants.double, plants.double, cases, reruns=0)
    with pytest.raises(ValueError, match="shapes"):
        portcheck.matrix(shapes=[])
    with pytest.raises(ValueError, match="value_class"):
        portcheck.matrix(shapes=[(2, 2)], value_classes=("zeros",))
    with pytest.raises(ValueError, match="subnormal"):
        portcheck.values((4,), torch.float64, "subnormal")
    with pytest.raises(ValueError, match="stride"):
        portcheck.matrix(shapes=[(2, 2)], strides=("transposed",))


def _cli(*args):
    cmd = [sys.executable, "-m", "portcheck", *args]
    return subprocess.run(cmd, env=ENV, cwd=ROOT, capture_output=True, text=True)


def test_cli_exit_codes(tmp_path):
    equal = _cli("portcheck_plants:double", "portcheck_plants:double", "--cases", CASES, "--out", str(tmp_path))
    assert equal.returncode == 0, equal.stderr[-2000:]
    assert "2/2 cases equal" in equal.stdout and json.loads((tmp_path / "report.json").read_text())["ok"]
    assert (tmp_path / "report.md").read_text().startswith("# portcheck")
    bad = _cli("portcheck_plants:double", "portcheck_plants:flip_one_bit", "--cases", CASES, "--no-code")
    assert bad.returncode == 1 and "MISMATCH" in bad.stdout
    # the reproducer it prints reruns that one case
    repro = next(line for line in bad.stdout.splitlines() if "reproduce:" in line).split("`")[1]
    assert repro.startswith("python -m portcheck ")
    rerun = subprocess.run(
        repro.replace("python", sys.executable, 1), shell=True, env=ENV, cwd=ROOT, capture_output=True, text=True
    )
    assert rerun.returncode == 1 and "0/1 cases equal" in rerun.stdout
    usage = _cli("portcheck_plants:double", "portcheck_plants:nope", "--cases", CASES)
    assert usage.returncode == 2 and "no attribute 'nope'" in usage.stderr


def test_cli_usage_errors_in_process(capsys):
    args = ["portcheck", "portcheck_plants:double", "portcheck_plants:double", "--no-code"]
    assert cli.main([*args, "--cases", "portcheck_plants:nothing"]) == 2
    assert cli.main([*args, "--cases", CASES, "--only", "no such case"]) == 2
    assert cli.main([*args, "--cases", CASES, "--device", "tpu"]) == 2
    assert cli.main(["portcheck", "no_colon", "portcheck_plants:double", "--cases", CASES]) == 2
    assert "MODULE:NAME" in capsys.readouterr().err


def test_cli_without_helion_says_so_and_exits_2(monkeypatch, capsys):
    def no_helion(*a, **k):
        raise ImportError(helion_original.INSTALL_HINT)

    monkeypatch.setattr(helion_original, "helion_kernel", no_helion)
    argv = [
        "portcheck",
        "inkling_workbook.ports.silu_and_mul.helion_original:silu_and_mul_helion",
        "inkling_kernels:silu_and_mul",
    ]
    # in this process (--no-isolate): a worker process would not see the monkeypatch
    assert (
        cli.main(
            [
                *argv,
                "--cases",
                "inkling_workbook.ports.silu_and_mul.portcheck_cases:cpu_cases",
                "--no-code",
                "--no-isolate",
            ]
        )
        == 2
    )
    assert "helion" in capsys.readouterr().err


def test_value_classes_are_what_they_claim():
    n = 4096
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        fi = torch.finfo(dtype)
        for vc in portcheck.VALUE_CLASSES:
            x = portcheck.values((n,), dtype, vc, seed=7)
            assert x.dtype == dtype and (x != 0).sum() > n // 2, (dtype, vc)  # never zeros only
        sub = portcheck.values((n,), dtype, "subnormal", seed=7)
        assert int(((sub != 0) & (sub.abs() < fi.tiny)).sum()) == n // 4
        nan_inf = portcheck.values((n,), dtype, "nan_inf", seed=7)
        assert torch.isnan(nan_inf).any() and (nan_inf == float("inf")).any() and (nan_inf == -float("inf")).any()
        edges = portcheck.values((n,), dtype, "edges", seed=7)
        assert (edges == fi.max).any() and (edges == -fi.max).any() and (edges == fi.tiny).any()
        assert ((edges == 0) & torch.signbit(edges)).any()
        ties = portcheck.values((n,), dtype, "ties", seed=7).double()
        if dtype == torch.bfloat16:  # halfway between two e4m3 values
            lo = ties.abs().to(torch.float8_e4m3fn).double()
            step = 2.0 ** (torch.floor(torch.log2(ties.abs())) - 3)
        else:  # halfway between two bf16 values
            lo = ties.abs().float().view(torch.int32).bitwise_and(~0xFFFF).view(torch.float32).double()
            step = 2.0 ** (torch.floor(torch.log2(ties.abs())) - 7)
        halfway = (ties.abs() - lo).abs() == step / 2
        assert int(halfway.sum()) >= n // 2, dtype


def test_row_padded_layout_and_the_same_values():
    (x,), _ = portcheck.Case("p", shapes=(3, 8), stride="row_padded", seed=1).build()
    (y,), _ = portcheck.Case("c", shapes=(3, 8), seed=1).build()
    assert x.stride() == (8 + portcheck.ROW_PAD, 1) and torch.equal(x.view(torch.int16), y.view(torch.int16))


def test_generation_is_the_same_in_two_fresh_processes():
    script = (
        "import torch\nimport portcheck\n"
        "for c in portcheck.matrix(shapes=[(64, 96), ((8, 32), (8,))], dtypes=[torch.bfloat16, torch.float32]):\n"
        "    print(c.name, portcheck.digest(c.build()))\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and len(runs[0].splitlines()) == 40
    here = {c.name: portcheck.digest(c.build()) for c in portcheck.matrix(shapes=[(64, 96)])}
    assert all(f"{name} {d}" in runs[0] for name, d in here.items())


def test_capture_sees_interpreted_launches_sends_cuda_launchers_through_run_and_restores_triton():
    from triton import knobs
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from inkling_kernels import _backend

    runs = JITFunction.run, InterpretedFunction.run
    x = portcheck.values((2, 512), torch.bfloat16, seed=3)
    with portcheck.capture_launches() as seen:
        assert not _backend._no_launch_hooks()  # the CudaLauncher's cached path is off: launches reach run
        ik.silu_and_mul(x, interleaved=False)
    assert [launch.name for launch in seen] == ["silu_and_mul_non_interleaved_kernel"]
    assert seen[0].kwargs["N"] == 256 and seen[0].args[0] is x
    assert (JITFunction.run, InterpretedFunction.run) == runs and _backend._no_launch_hooks()
    assert not getattr(knobs.runtime.launch_enter_hook, "calls", [])


_TWO_CPU_CASES = """
import json
import inkling_kernels as ik
import portcheck
from inkling_workbook.ports.silu_and_mul import helion_original, portcheck_cases
cases = portcheck_cases.cpu_cases()
picked = [cases[0], next(c for c in cases if c.name.startswith("w 2x768+2 bfloat16 edges") and "False" in c.name)]
ref = portcheck_cases.reference
report = portcheck.run(helion_original.silu_and_mul_helion, ik.silu_and_mul, picked, reference=ref)
code = report.code["original"]
print(json.dumps({"ok": report.ok, "md": report.to_markdown(), "kernels": [k["kernel"] for k in code],
                  "ld": code[0]["classes"]["ld.global"]}))
"""


@pytest.mark.skipif(not helion_original.available(), reason=helion_original.INSTALL_HINT)
def test_the_port_against_its_helion_original_on_two_cpu_cases():
    """Two cases of ``portcheck_cases.cpu_cases`` (the CLI in docs/portcheck.md runs all 30):
    equal, the helion kernel's code beside the port's. In a fresh process: helion runs one backend
    a process, and on a GPU machine other tests run the originals compiled."""
    run = subprocess.run([sys.executable, "-c", _TWO_CPU_CASES], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout.strip().splitlines()[-1])
    assert doc["ok"], doc["md"]
    assert doc["kernels"] == ["_helion_silu_and_mul_helion_interleaved"]
    assert doc["ld"] > 0


def test_fingerprint_sees_one_flipped_bit_and_two_swapped_elements():
    """The inputs' digest of a CUDA tensor (computed on the GPU); the function is device-agnostic."""
    x = portcheck.values((3, 1000), torch.bfloat16, seed=5)
    assert portcheck.fingerprint(x) == portcheck.fingerprint(x.clone())
    flipped = x.clone()
    flipped.view(torch.int16)[2, 999] ^= 1 << 15
    swapped = x.clone().view(-1)
    swapped[[10, 2000]] = swapped[[2000, 10]]
    assert x.view(-1)[10] != x.view(-1)[2000]
    prints = {portcheck.fingerprint(t) for t in (x, flipped, swapped.view(3, 1000), x[:, :999], x.T)}
    assert len(prints) == 5
    # a tensor of more than one 2**24-byte chunk: a difference in the second chunk shows
    big = torch.zeros(2**23 + 5, dtype=torch.int32)
    other = big.clone()
    other[2**22 + 1] = 1
    assert portcheck.fingerprint(big) != portcheck.fingerprint(other)


def test_reruns_per_side_meta_ulp_max_and_inf_counts():
    cases = portcheck.matrix(shapes=[(2, 64)], value_classes=("nan_inf",), strides=("contiguous",))
    cases[0].meta = {"M": 2}
    report = portcheck.run(plants.double, plants.double, cases, reruns=(1, 2), code=False)
    (row,) = report.cases
    assert report.ok and row["meta"] == {"M": 2}
    assert row["original_deterministic"] is None and row["port_deterministic"] is True
    assert "| -/yes |" in report.to_markdown() and report.mismatches_markdown() == ""
    (out,) = row["outputs"]
    (x,), _ = cases[0].build()
    assert out["inf"] == [int(torch.isinf(x * 2).sum())] * 2 and out["inf"][0] > 0
    off = check(plants.plus_one_ulp, reference=plants.reference)
    assert off.cases[0]["ulp_max"] == {"original": 0, "port": 1}
    assert off.mismatches_markdown().startswith("## Mismatches") and "reproduce:" in off.mismatches_markdown()
    flaky = portcheck.run(plants.double, plants.flaky, cases, reruns=(1, 2), code=False)
    assert flaky.cases[0]["port_deterministic"] is False and not flaky.ok
    for bad in ((0, 2), (1, 2, 3), (1.0, 2), True):
        with pytest.raises(ValueError, match="reruns"):
            portcheck.run(plants.double, plants.double, cases, reruns=bad)
    with pytest.raises(TypeError, match="meta"):
        portcheck.Case("m", shapes=(2, 2), meta=[1])


def test_outputs_are_copied_so_a_reused_buffer_cannot_hide_a_difference():
    buf = torch.empty(2, 64, dtype=torch.bfloat16)
    calls = [0]

    def reuses_its_buffer(x):
        calls[0] += 1
        buf.copy_(plants.double(x) + (calls[0] - 1))  # another value on every call, same buffer
        return buf

    report = portcheck.run(plants.double, reuses_its_buffer, plants.cases()[:1], code=False)
    assert report.cases[0]["port_deterministic"] is False


def test_parallel_run_reports_what_the_serial_run_does():
    """``run_parallel`` (two spawned processes, callables and cases by name): the same rows in
    the same order as ``run``, a planted mismatch still reported with its reproducer."""
    names = ("portcheck_plants:double", "portcheck_plants:flip_one_bit", CASES)
    serial = portcheck.run(
        plants.double, plants.flip_one_bit, plants.cases(), reference=plants.reference, code=False, names=names
    )
    par = portcheck.run_parallel(*names, reference="portcheck_plants:reference", jobs=2, code=False, chunk=1)
    assert not par.ok and [r["case"] for r in par.cases] == [r["case"] for r in serial.cases]
    assert par.cases == serial.cases
    assert "--only" in par.cases[0]["reproduce"]
    with pytest.raises(TypeError, match="MODULE:NAME"):
        portcheck.run_parallel(plants.double, "portcheck_plants:double", CASES)
    with pytest.raises(ValueError, match="jobs"):
        portcheck.run_parallel("portcheck_plants:double", "portcheck_plants:double", CASES, jobs=0)


def test_cli_jobs(tmp_path):
    """--jobs 2: a mismatch exits 1 (an equal pair exiting 0 with --jobs 2: the outside-pair test
    below); with --timing it is a usage error."""
    bad = _cli("portcheck_plants:double", "portcheck_plants:flip_one_bit", "--cases", CASES, "--no-code", "--jobs", "2")
    assert bad.returncode == 1 and "MISMATCH" in bad.stdout
    timing = _cli("portcheck_plants:double", "portcheck_plants:double", "--cases", CASES, "--jobs", "2", "--timing")
    assert timing.returncode == 2 and "--timing" in timing.stderr
