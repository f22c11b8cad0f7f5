"""FP fusion pinned on every launch: no Triton default (``TRITON_DEFAULT_FP_FUSION``) moves a bit.

On the CPU the package's kernels are compiled for sm_90 in two fresh processes, one per setting,
and their PTX compared; on the H200 every op's outputs are compared over a case matrix."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HAS_CUDA, gpu_only

from inkling_kernels import _backend
from inkling_workbook.proofs import fp_fusion

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_KERNELS = {
    "silu_and_mul_interleaved_kernel",
    "silu_and_mul_non_interleaved_kernel",
    "nvfp4_quant_kernel",
    "_fp8_group_kernel",
}


def test_launch_passes_the_compile_options_to_the_compiled_kernel():
    """The compiled branch of ``_backend.launch`` hands ``COMPILE_OPTIONS`` to ``kernel[grid]``;
    a caller's own value of an option wins."""
    calls = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((grid, args, kwargs))

    _backend.launch(Kernel(), (2,), torch.device("cuda"), 1, 2, BLOCK=8, num_warps=4)
    assert calls == [((2,), (1, 2), {"enable_fp_fusion": True, "BLOCK": 8, "num_warps": 4})]
    assert _backend.COMPILE_OPTIONS == {"enable_fp_fusion": True}


def test_thin_launcher_first_launch_passes_the_compile_options(monkeypatch):
    """``CudaLauncher``'s first launch of a key goes through ``kernel[grid]`` with the options too."""
    seen = {}

    class Compiled:
        run = type("Run", (), {"global_scratch_size": 1})()  # scratch: keeps the slow path, caches nothing

    class Kernel:
        arg_names = ["x", "BLOCK"]
        fn = None

        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.update(grid=grid, args=args, kwargs=kwargs) or Compiled()

    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    launcher = _backend.CudaLauncher(Kernel(), ("BLOCK",))
    launcher("key", 3, 0, (7, 16), 4, False)
    assert seen["args"] == (7,)
    assert seen["kwargs"] == {"BLOCK": 16, "num_warps": 4, "launch_pdl": False, "enable_fp_fusion": True}


def test_captured_launches_cover_every_kernel_with_the_options():
    launches = fp_fusion.captured_launches()
    assert {k.fn.__name__ for k, _, _ in launches} == PACKAGE_KERNELS
    assert all(kwargs.get("enable_fp_fusion") is True for _, _, kwargs in launches)


def test_ptx_is_identical_under_both_fusion_defaults():
    """Every launch the package's ops make on a few shapes, compiled for sm_90 under
    TRITON_DEFAULT_FP_FUSION=0 and =1 (fresh processes and caches): the same PTX. The control
    kernel ``a * b + c`` shows the test can fail: compiled without the option its PTX follows the
    setting (an fma under 1, none under 0); with the package's options it is an fma under both."""
    result = fp_fusion.run_ptx()
    assert {k.split()[1] for k in result["kernels"]} == PACKAGE_KERNELS and len(result["kernels"]) >= 9
    assert result["differ"] == []
    off, on = (result["runs"][s] for s in ("0", "1"))
    assert off["control_pinned"] == on["control_pinned"] and on["control_pinned"]["fma"]
    assert on["control_default"]["fma"] and not off["control_default"]["fma"]
    assert off["control_default"]["sha"] != on["control_default"]["sha"]


def test_outputs_check_plumbing_on_cpu(tmp_path):
    """The outputs check on the interpreter: every package case identical under both settings (the
    interpreter has no fusion to pin; this checks the two-process plumbing and the record)."""
    doc = fp_fusion.run_outputs("cpu", "cpu")
    pkg = doc["summary"]["package"]
    assert pkg["cases"] > 40 and pkg["differ"] == [] and doc["ok"]
    assert pkg["fused_equals_unfused_0"] == pkg["fused_equals_unfused_1"]
    assert int(pkg["fused_equals_unfused_1"].split("/")[1]) >= 20


def test_compare_reports_a_moved_bit():
    rows = {"a": {"digests": ["00", "11"], "fused_equals_unfused": True}}
    moved = {"a": {"digests": ["00", "12"], "fused_equals_unfused": True}}
    docs = {"0": {"package": rows}, "1": {"package": moved}}
    assert fp_fusion.compare(docs)["package"]["differ"] == ["a"]
    assert fp_fusion.compare({"0": {"package": rows}, "1": {"package": rows}})["package"]["differ"] == []


def test_inputs_are_the_same_in_every_process():
    """Both settings' runs must draw the same inputs: a large case drawn first and after other draws,
    in two fresh processes, has one digest (repeated edge positions once made it differ)."""
    script = (
        "from inkling_workbook.proofs.fp_fusion import _values, _gen, digest\n"
        "a = digest(_values((96, 3072), _gen('c')))\n"
        "[_values((1024, 1536), _gen(str(k))) for k in range(2)]\n"
        "print(a, digest(_values((96, 3072), _gen('c'))), digest(_values((2048, 3072), _gen('d'))))\n"
    )
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]  # fmt: skip
    first, again, big = runs[0].split()
    assert first == again and runs[0] == runs[1], runs


def test_compare_sets_aside_cases_whose_inputs_differ():
    rows = {"a": {"digests": ["00"], "inputs": ["x"], "fused_equals_unfused": True}}
    other = {"a": {"digests": ["01"], "inputs": ["y"], "fused_equals_unfused": True}}
    entry = fp_fusion.compare({"0": {"package": rows}, "1": {"package": other}})["package"]
    assert entry["inputs_differ"] == ["a"] and entry["differ"] == [] and entry["identical"] == 0


@pytest.mark.skipif(HAS_CUDA, reason="checks the interpreter import on a machine without a GPU")
def test_import_and_every_op_under_triton_interpret(tmp_path):
    """``TRITON_INTERPRET=1`` set before Python starts (Triton's way to debug on CPU): the package
    imports and every public op and registered op runs on CPU tensors, equal to the references."""
    script = r"""
import torch, inkling_kernels as ik
from inkling_kernels import reference as ref
g = torch.Generator().manual_seed(3)
x = (torch.randn(6, 512, generator=g) * 3).bfloat16()
w = torch.rand(6, generator=g)
eo = torch.tensor([0, 4, 6], dtype=torch.int32)
for il in (True, False):
    y = ik.silu_and_mul(x, w, interleaved=il)
    assert ref.bits_equal(y, ref.silu_and_mul_ref(x, w, interleaved=il)), il
    q, s = ik.silu_and_mul_fp8_group_quant(x, w, interleaved=il)
    q2, s2 = ik.fp8_group_quant(y)
    assert torch.equal(q.view(torch.uint8), q2.view(torch.uint8)) and torch.equal(s, s2)
    p, sc = ik.silu_and_mul_nvfp4_quant(x, torch.ones(2), eo, interleaved=il, topk_weights=w)
    p2, sc2 = ik.nvfp4_quant(y, torch.ones(2), expert_offsets=eo)
    assert torch.equal(p, p2) and torch.equal(sc, sc2)
assert ref.bits_equal(torch.ops.inkling.silu_and_mul(x), ik.silu_and_mul(x))
q, s = torch.ops.inkling.fp8_group_quant(x, 128)
qm, sm = ik.silu_and_mul_fp8_group_quant(x.view(2, 3, 512), masked_m=torch.tensor([1, 3], dtype=torch.int32))
assert ik.max_blockscale_rows(6, 2) > 0
import importlib
from triton.runtime.interpreter import InterpretedFunction
mod = importlib.import_module("inkling_kernels.silu_and_mul")
assert isinstance(mod.silu_and_mul_interleaved_kernel, InterpretedFunction)
print("ok")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


@pytest.mark.skipif(HAS_CUDA, reason="checks the interpreter import on a machine without a GPU")
def test_a_notebooks_first_cells_under_triton_interpret(tmp_path):
    """A user who sets TRITON_INTERPRET=1 before opening a notebook: notebook 01's first code cells
    (imports, the op on a small input) run in a fresh kernel."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "notebooks" / "01_reference_math.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"][:3]
    assert code, "notebook 01 has code cells"
    small = nbformat.v4.new_notebook(cells=code)
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"  # the kernel process inherits it
    try:
        NotebookClient(
            small, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
        ).execute()
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET")
        else:
            os.environ["TRITON_INTERPRET"] = old
    errors = [o for c in small.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []


@gpu_only
def test_every_op_bitwise_the_same_under_both_settings_gpu():
    """On the GPU (quick matrix): every output of the package byte-identical under
    TRITON_DEFAULT_FP_FUSION=0 and =1, fused == unfused in both (the published record, with the
    helion and torch.compile rows, is data/fp_fusion_h200.json from the GPU job)."""
    doc = fp_fusion.run_outputs("cuda", "quick")
    pkg = doc["summary"]["package"]
    assert pkg["cases"] > 100 and pkg["differ"] == [] and doc["ok"], pkg
