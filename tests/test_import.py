"""What a server imports: ``import inkling_kernels`` in a fresh interpreter loads no workbook
tooling, patches nothing in Triton and writes no files."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PROBE = r"""
import json, sys
import torch, triton
from triton.runtime.jit import JITFunction
from triton.runtime.interpreter import interpreter_builder
before = set(sys.modules)
call_before = JITFunction.__dict__.get("__call__")
cast_before = interpreter_builder.cast_impl
cast_in_vars_before = "cast_impl" in vars(interpreter_builder)
import inkling_kernels
new = sorted(set(sys.modules) - before)
print(json.dumps({
    "new": new,
    "before": sorted(before),
    "call_same": JITFunction.__dict__.get("__call__") is call_before,
    "cast_same": interpreter_builder.cast_impl == cast_before
    and ("cast_impl" in vars(interpreter_builder)) == cast_in_vars_before,
    "ops": hasattr(torch.ops.inkling, "silu_and_mul_nvfp4_quant"),
}))
"""


def _snapshot(root: Path) -> dict[str, float]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                out[p] = os.stat(p).st_mtime_ns
            except FileNotFoundError:
                pass
    return out


def test_import_is_light_and_patches_nothing(tmp_path):
    home = tmp_path / "home"
    cache = tmp_path / "cache"
    home.mkdir()
    cache.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(home), XDG_CACHE_HOME=str(cache))
    env["TRITON_CACHE_DIR"] = str(cache / "triton")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("TRITON_INTERPRET", None)
    before_files = _snapshot(ROOT / "inkling_kernels")
    res = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    new = info["new"]
    for heavy in ("pandas", "matplotlib", "helion", "inkling_workbook", "tqdm"):
        already = any(m == heavy or m.startswith(heavy + ".") for m in info["before"])
        if not already:  # tqdm may come with torch itself: only what inkling_kernels adds counts
            assert not any(m == heavy or m.startswith(heavy + ".") for m in new), f"import pulled in {heavy}"
    assert "inkling_kernels" in new and "inkling_kernels.ops" in new
    assert info["call_same"], "JITFunction.__call__ was patched by the import"
    assert info["cast_same"], "the interpreter's cast_impl was patched by the import"
    assert info["ops"]
    # nothing written: no files in the scratch HOME/cache/cwd, none changed in the package
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == [], written
    assert _snapshot(ROOT / "inkling_kernels") == before_files
