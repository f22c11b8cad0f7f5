"""Every step of the fused NVFP4 kernel (notebook 05) writes the package's bits: the packed bytes and
every byte of the scale buffer (padding rows and columns included), outputs poisoned before each
run; the steps take the package's arguments and refuse what it refuses; each compiles for sm_90."""

import csv
import json

import pytest
import torch
import triton
import triton.language as tl
from conftest import gpu_only

from inkling_kernels import _backend, silu_and_mul_nvfp4_quant
from inkling_kernels.nvfp4 import _quant_config
from inkling_workbook.measure import timing
from inkling_workbook.measure.timing import Timing
from inkling_workbook.nvfp4_steps import checks as step_checks
from inkling_workbook.nvfp4_steps import kernels as nvfp4_steps
from inkling_workbook.nvfp4_steps.checks import CPU_CASES, GPU_CASES, Case


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.name)
def test_every_step_bitwise_equal_to_package_cpu(case):
    rows = step_checks.check_steps("cpu", cases=[case])
    assert [r["step"] for r in rows] == nvfp4_steps.STEP_NAMES
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad


def test_edge_values_are_planted():
    """The check's data holds what it claims: a NaN block (scale 0x7F), a block saturating at 448
    (0x7E, the Inf), a zero block; an invalid global scale gives its expert's rows 0x7F."""
    case = next(c for c in CPU_CASES if c.edges)
    x = step_checks.make_inputs(case, "cpu")
    packed, scales = step_checks.run_package(case, x, step_checks._poisoned_out(case, "cpu"))
    assert (scales == 0x7F).sum() == 1 and (scales == 0x7E).sum() >= 1
    assert torch.all(packed[0, :8] & 0x77 == 0)  # the zero block: codes +-0 (silu(0) * up keeps up's sign)
    assert torch.all(packed[1, 8:16] == 0)  # the NaN block: codes +0
    case = next(c for c in CPU_CASES if c.bad_gs)
    x = step_checks.make_inputs(case, "cpu")
    assert torch.isnan(x.gs[1])
    _, scales = step_checks.run_package(case, x, step_checks._poisoned_out(case, "cpu"))
    assert (scales == 0x7F).sum() == case.counts[1] * case.N // 16


@triton.jit
def _e2m1_truncated(t):
    """A deliberately wrong rounding: below 1.0, truncated instead of rounded to nearest."""
    bits = t.to(tl.int32, bitcast=True)
    sign = (bits >> 28) & 8
    a_bits = bits & 0x7FFFFFFF
    normal = tl.minimum(((a_bits + 0x1FFFFF + ((a_bits >> 22) & 1)) >> 22) - 252, 7)
    small = (a_bits.to(tl.float32, bitcast=True) * 2.0).to(tl.int32)
    return tl.where(a_bits >= 0x3F800000, normal, small) | sign


def test_planted_rounding_bug_is_caught(monkeypatch):
    """The check can fail: the naive step with a wrong rounding is reported, on the packed bytes only."""
    monkeypatch.setattr(nvfp4_steps, "_e2m1_code", _e2m1_truncated)
    rows = step_checks.check_steps("cpu", cases=[CPU_CASES[0]], steps=["naive_fused"])
    assert len(rows) == 1 and not rows[0]["ok"]
    assert not rows[0]["packed_equal_package"] and rows[0]["scales_equal_package"]
    assert rows[0]["packed_bytes_differing"] >= 1


def test_unwritten_output_is_caught():
    """A runner that leaves the poisoned output as it is fails both comparisons."""
    rows = step_checks.check_steps("cpu", cases=[CPU_CASES[3]], runners={"nothing": lambda x, case, out: out})
    assert not rows[0]["packed_equal_package"] and not rows[0]["scales_equal_package"]
    assert rows[0]["packed_bytes_differing"] > 0 and rows[0]["scale_bytes_differing"] > 0


def _args():
    gen = torch.Generator().manual_seed(3)
    gateup = torch.randn(6, 256, generator=gen).bfloat16()
    return dict(gateup=gateup, global_scale=torch.ones(2), expert_offsets=torch.tensor([0, 2, 6], dtype=torch.int32))


@pytest.mark.parametrize(
    "change,error",
    [
        (dict(gateup=torch.zeros(6, 256, dtype=torch.int32)), TypeError),
        (dict(gateup=torch.zeros(6, 250, dtype=torch.bfloat16)), ValueError),
        (dict(global_scale=torch.ones(3)), ValueError),
        (dict(global_scale=torch.tensor([1.0, float("nan")])), ValueError),
        (dict(expert_offsets=torch.tensor([0, 4, 2], dtype=torch.int32)), ValueError),
        (dict(topk_weights=torch.ones(5)), ValueError),
        (dict(interleaved=1), TypeError),
        (dict(swizzle=False, blockscale_offsets=torch.tensor([0, 128, 256])), ValueError),
        (dict(config=(3, 64, 4)), ValueError),
        (dict(scale_rows=100), ValueError),
        (dict(enable_pdl="yes"), TypeError),
    ],
)
@pytest.mark.parametrize("step", ["two_kernels", "naive_fused", "block_halves"])
def test_steps_refuse_what_the_package_refuses(step, change, error):
    """Drop-in: a step raises the package's own error, message and all, for the same arguments."""
    args = _args() | change
    with pytest.raises(error) as want:
        silu_and_mul_nvfp4_quant(**args)
    with pytest.raises(error) as got:
        nvfp4_steps.run_step(step, **args)
    if step != "two_kernels":  # step 0 is the unfused pair: its first kernel may name its own argument
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("step", ["nope", 4, True, -1])
def test_unknown_step_is_refused(step):
    with pytest.raises(ValueError, match="step must be one of"):
        nvfp4_steps.run_step(step, **_args())
    with pytest.raises(ValueError, match="two launches"):
        nvfp4_steps.plan_step("two_kernels", **_args())


def test_steps_take_the_package_tile_and_allocate_as_it_does():
    """No config: the package's launch heuristic (compiled or interpreted); without out, outputs of
    the package's shapes (exact scale rows when the value checks run)."""
    x = _args()
    for compiled in (False, True):
        for N in (80, 1536, 3072):
            gateup = torch.empty(8, 2 * N, dtype=torch.bfloat16)
            _, _, launch = nvfp4_steps.plan_step(1, gateup, torch.ones(1), validate=False, compiled=compiled)
            kw = launch.kwargs
            assert (kw["BLOCK_M"], kw["BLOCK_K"], kw["num_warps"]) == _quant_config(N, not compiled, fused=True)
    want = silu_and_mul_nvfp4_quant(**x)
    got = nvfp4_steps.run_step("tile_3d", **x)
    assert [t.shape for t in got] == [t.shape for t in want]
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_block_scale_is_the_package_kernels_lines():
    """The steps' one piece of arithmetic not imported from the package, ``_block_scale``, is the
    package kernel's scale lines verbatim (a change there must reach the steps)."""
    import inspect

    from inkling_kernels._nvfp4_kernel import nvfp4_quant_kernel

    package = {line.strip() for line in inspect.getsource(nvfp4_quant_kernel.fn).splitlines()}
    body = nvfp4_steps._body(inspect.getsource(nvfp4_steps._block_scale.fn))
    lines = [line.strip() for line in body if line.strip() and not line.strip().startswith(('"""', "(a NaN", "return"))]
    assert len(lines) == 10 and all(line in package for line in lines), [x for x in lines if x not in package]


def test_step_diffs_show_each_technique():
    assert "silu_and_mul(" in nvfp4_steps.step_diff(0) and "nvfp4_quant(" in nvfp4_steps.step_diff(0)
    assert "tl.reshape(x, (BLOCK_M, NB, 16))" in nvfp4_steps.step_diff(1)
    d2, d3 = nvfp4_steps.step_diff(2), nvfp4_steps.step_diff(3)
    assert "+    cols = kb[None, :, None] * 16" in d2 and "-    xb = tl.reshape" in d2
    assert "+    lo = _activation_half" in d3 and "_pack_half" in d3


# ---- compiled for sm_90 on the CPU -----------------------------------------------------------


@pytest.mark.parametrize("step", [1, 2, 3])
def test_step_compiles_for_sm90(step):
    """Every branch of each step kernel passes Triton's compiler for sm_90 (the interpreter
    accepts code the compiler refuses): gate || up with swizzled scales, interleaved with weights
    and linear scales; no local memory (spills)."""
    from portcheck import code

    gateup = torch.empty(256, 2 * 3072, dtype=torch.bfloat16)
    eo = torch.tensor([0, 100, 256], dtype=torch.int32)
    for extra in (dict(), dict(interleaved=True, topk_weights=torch.ones(256), swizzle=False)):
        _, _, launch = nvfp4_steps.plan_step(step, gateup, torch.ones(2), eo, validate=False, compiled=True, **extra)
        kwargs = {**_backend.COMPILE_OPTIONS, **launch.kwargs}
        compiled, _ = code.compile_launch(code.Launch(launch.kernel, launch.args, kwargs, launch.grid))
        assert "st.global" in compiled.asm["ptx"]
        assert step_checks._inspect(compiled, kwargs["BLOCK_M"] * kwargs["BLOCK_K"], 4)["local_bytes"] == 0


def test_last_step_compiles_to_the_package_kernel_sm90():
    """Step 3 and the package (PDL off) compile to the same SASS count an element; step 2's block
    max needs shuffles, step 3's none (gate || up, the benchmark's plan)."""
    last, package = step_checks.sass_step(3), step_checks.sass_step("package")
    assert last == package
    assert last["shfl"] == 0 and step_checks.sass_step(2)["shfl"] > 0
    assert 20 < last["sass_per_element"] < 100


# ---- timing: GPU only; the record's shape with the timing faked ------------------------------


def test_timing_refuses_a_cpu_device():
    with pytest.raises(ValueError, match="CUDA GPU only"):
        step_checks.time_steps("cpu")
    with pytest.raises(ValueError, match="CUDA GPU only"):
        step_checks.measure_steps(device="cpu")


def _fake_timing(monkeypatch):
    t = Timing.from_passes([[1.0, 1.2, 1.1], [1.3, 1.25, 1.15]], reps=200)
    monkeypatch.setattr(timing, "require_gpu", lambda: None)
    monkeypatch.setattr(timing, "warm_clocks", lambda seconds=1.0: {})
    monkeypatch.setattr(timing, "time_calls", lambda calls, passes, *a, **k: dict.fromkeys(calls, t))
    monkeypatch.setattr(step_checks.provenance, "collect", lambda command=None: {"device": "fake"})
    monkeypatch.setattr(step_checks.provenance, "gpu_state", lambda: {})
    return t


def test_time_steps_checks_then_times_every_step(monkeypatch):
    """time_steps' rows (run in the interpreter, the timing faked): every step and the package,
    each first checked bit for bit on the timed inputs."""
    t = _fake_timing(monkeypatch)
    monkeypatch.setattr(step_checks, "_require_cuda", torch.device)
    rows = step_checks.time_steps("cpu", cases=[Case("tiny", 128, (3, 0, 5), interleaved=True)])
    assert [r["impl"] for r in rows] == [*nvfp4_steps.STEP_NAMES, "package"]
    assert [r["step"] for r in rows] == list(range(len(nvfp4_steps.STEPS) + 1))
    assert rows[0]["median_us"] == round(t.median_us, 4) and rows[0]["vs_package"] == 1.0
    assert rows[0]["bytes"] == 8 * (4 * 128 + 64) + 256 * 8  # read 4N, write N/2 a row, the scale buffer


def test_time_steps_refuses_a_step_with_other_bits(monkeypatch):
    _fake_timing(monkeypatch)
    monkeypatch.setattr(step_checks, "_require_cuda", torch.device)
    monkeypatch.setattr(nvfp4_steps, "_e2m1_code", _e2m1_truncated)
    with pytest.raises(AssertionError, match="naive_fused on the timed inputs"):
        step_checks.time_steps("cpu", cases=[Case("tiny", 128, (8,))])


def test_measure_steps_record(tmp_path, monkeypatch):
    """The record ``nvfp4-steps`` writes: provenance, the bitwise summary of the GPU cases, every
    step and the package in the metadata and the CSV, in order (the timing faked: no GPU here)."""
    t = _fake_timing(monkeypatch)
    names = [*nvfp4_steps.STEP_NAMES, "package"]
    checked = {}

    def fake_check_steps(device):
        checked["device"] = device
        return [{"step": s, "case": "c", "packed_equal_package": True, "scales_equal_package": True,
                 "package_equal_reference": True, "ok": True} for s in nvfp4_steps.STEP_NAMES]  # fmt: skip

    def fake_time_steps(device, cases):
        return [{"step": i, "impl": k, "case": c.name, **t.columns(100)} for c in cases for i, k in enumerate(names)]

    monkeypatch.setattr(step_checks, "check_steps", fake_check_steps)
    monkeypatch.setattr(step_checks, "time_steps", fake_time_steps)
    csv_path, meta_path = step_checks.measure_steps(tmp_path / "nvfp4_steps_fake.csv", "cuda", cases=CPU_CASES[:1])
    assert checked["device"] == torch.device("cuda") and meta_path.name == "nvfp4_steps_fake.json"
    meta = json.loads(meta_path.read_text())
    assert meta["device"] == "fake" and meta["bitwise"]["all_ok"]
    assert meta["bitwise"]["cases"] == [c.name for c in GPU_CASES]
    assert [s["name"] for s in meta["steps"]] == names
    assert meta["timing"]["output_policy"].startswith("outputs preallocated")
    back = list(csv.DictReader(csv_path.open()))
    assert [r["impl"] for r in back] == names and [int(r["step"]) for r in back] == list(range(len(names)))


def test_cli_refuses_a_cpu_device():
    from inkling_workbook import cli

    with pytest.raises(SystemExit, match="needs --device cuda"):
        cli.main(["nvfp4-steps", "--device", "cpu"])


@gpu_only
@pytest.mark.gpu
def test_every_step_bitwise_equal_to_package_gpu():
    rows = step_checks.check_steps("cuda", cases=GPU_CASES)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad


@gpu_only
@pytest.mark.gpu
def test_nvfp4_steps_cli_writes_records(tmp_path, monkeypatch):
    """The records' shape, on one small case (the real run is the GPU job's)."""
    from inkling_workbook import cli

    monkeypatch.setattr(step_checks, "GPU_CASES", CPU_CASES[:1])
    monkeypatch.setattr(step_checks, "TIMED_CASES", CPU_CASES[:1])
    assert cli.main(["nvfp4-steps", "--device", "cuda", "--out", str(tmp_path / "nvfp4_steps_x.csv")]) == 0
    meta = json.loads((tmp_path / "nvfp4_steps_x.json").read_text())
    assert meta["bitwise"]["all_ok"] and len(meta["steps"]) == len(nvfp4_steps.STEPS) + 1
    rows = list(csv.DictReader((tmp_path / "nvfp4_steps_x.csv").open()))
    assert {r["impl"] for r in rows} == {*nvfp4_steps.STEP_NAMES, "package"}
