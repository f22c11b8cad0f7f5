"""The kernel digest (which kernel a timing describes) and the staleness marks it puts on the
published numbers: CI refuses a number that describes an older kernel unless it says so."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from inkling_workbook.measure import kernel_digest as K

ROOT = Path(__file__).resolve().parents[1]


def _package_sources() -> dict[str, str]:
    return {str(f.relative_to(ROOT)): f.read_text() for f in sorted((ROOT / "inkling_kernels").rglob("*.py"))}


def _edit(sources: dict[str, str], path: str, old: str, new: str) -> dict[str, str]:
    assert sources[path].count(old) == 1, (path, old)
    return {**sources, path: sources[path].replace(old, new)}


def test_the_working_tree_digest_is_the_sources_digest():
    assert K.digests() == K.digests_of(_package_sources())
    assert set(K.digests()) == set(K.OPS) and all(len(v) == 16 for v in K.digests().values())


def test_comments_docstrings_and_argument_checks_do_not_count():
    src = _package_sources()
    base = K.digests_of(src)
    path = "inkling_kernels/silu_and_mul.py"
    # a comment and a docstring inside a kernel, and an argument check in the launch heuristic
    edited = _edit(
        src, path, "def silu_and_mul_interleaved_kernel(", "# a comment\ndef silu_and_mul_interleaved_kernel("
    )
    check = '    for name, v in (("M", M), ("N", N)):\n'
    edited = _edit(edited, path, check, "    if M == -7:\n        raise ValueError('M')\n" + check)
    assert K.digests_of(edited) == base


def test_a_changed_kernel_or_launch_choice_counts_for_its_op_only():
    src = _package_sources()
    base = K.digests_of(src)
    # the activation every kernel calls: all three ops change
    line = "ACT_NONE, ACT_INTERLEAVED, ACT_NON_INTERLEAVED = 0, 1, 2"
    act = _edit(src, "inkling_kernels/_activation.py", line, line + "\n\n\n@triton.jit\ndef _unused(x):\n    return x")
    assert K.digests_of(act) == base  # a jit function no kernel reaches does not count
    body = src["inkling_kernels/_activation.py"]
    start = body.index("def _silu_mul(")
    tail = body[start:]
    ret = tail.index("return ")
    changed = {**src, "inkling_kernels/_activation.py": body[: start + ret] + "x = 0\n    " + tail[ret:]}
    assert all(K.digests_of(changed)[op] != base[op] for op in K.OPS)
    # the NVFP4 launch heuristic: only nvfp4 changes
    q = src["inkling_kernels/nvfp4.py"]
    start = q.index("def _quant_config(")
    ret = q.index("return ", start)
    nv = {**src, "inkling_kernels/nvfp4.py": q[:ret] + "N = N + 0\n    " + q[ret:]}
    d = K.digests_of(nv)
    assert d["nvfp4"] != base["nvfp4"] and d["silu_and_mul"] == base["silu_and_mul"] and d["fp8"] == base["fp8"]


def test_a_missing_kernel_or_heuristic_is_an_error_not_an_empty_digest():
    src = _package_sources()
    gone = _edit(src, "inkling_kernels/nvfp4.py", "def _quant_config(", "def _renamed_config(")
    with pytest.raises(ValueError, match="nvfp4: no launch heuristic"):
        K.digests_of(gone)
    with pytest.raises(ValueError, match="entry kernels"):
        K.digests_of({p: s for p, s in src.items() if "_nvfp4_kernel" not in p})


def _in_history(commit: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
                          capture_output=True).returncode == 0  # fmt: skip


def test_the_recorded_digests_are_those_of_their_commits():
    table = json.loads(K.DIGESTS_FILE.read_text())["commits"]
    present = [c for c in table if _in_history(c)]
    if not present:
        pytest.skip("this clone has none of the recorded commits (a shallow clone)")
    for commit in present:
        assert K.digests_at(commit) == table[commit], commit


def test_a_record_with_its_own_digests_needs_no_table(tmp_path):
    head = K.digests()
    prov = {"git_commit": "0000000", "kernel_digests": dict(head)}
    assert K.stale_ops(prov, K.OPS, head, table=tmp_path / "none.json") == []
    prov["kernel_digests"]["fp8"] = "0" * 16
    assert K.stale_ops(prov, K.OPS, head, table=tmp_path / "none.json") == ["fp8"]
    # a record that cannot be dated is stale
    assert K.stale_ops({"git_commit": "abcdef0"}, ("nvfp4",), head, table=tmp_path / "none.json") == ["nvfp4"]


def test_the_headline_marks_exactly_the_rows_whose_kernel_changed():
    from inkling_workbook.publish import results

    data = ROOT / "data"
    md = results.headline_markdown(data)
    head = K.digests()
    provs = {
        "silu_and_mul": json.loads((data / "bench_h200.json").read_text()),
        # the NVFP4 sweep's own record (the sweep in two steps), else the silu sweep's that wrote it
        "nvfp4": json.loads(
            next(p for p in (data / "nvfp4_bench_h200.json", data / "bench_h200.json") if p.exists()).read_text()
        ),
        "fp8": json.loads((data / "fp8_bench_h200.json").read_text()),
    }
    provs = {op: p.get("provenance", p) for op, p in provs.items()}
    rows = [r for r in md.splitlines() if r.startswith("| `")]
    by_op = {
        "silu_and_mul": "`silu_and_mul`,",
        "fp8": "`silu_and_mul_fp8_group_quant`",
        "nvfp4": "`silu_and_mul_nvfp4_quant`",
    }
    for op, prefix in by_op.items():
        mine = [r for r in rows if r.startswith(f"| {prefix}")]
        assert mine, op
        stale = K.stale_ops(provs[op], (op,), head) == [op]
        assert all(r.rstrip(" |").endswith("**stale**") == stale for r in mine), (op, stale)


def test_the_digest_does_not_depend_on_the_python_version():
    """``ast.dump`` changed with Python 3.12 (every function gained ``type_params``): a record
    measured under one Python must date the same under another. The normal form leaves empty
    fields out, so a field a newer Python adds empty does not move the digest; a changed
    expression does."""
    import ast

    src = "def f(x):\n    return x * 2\n"
    fn = ast.parse(src).body[0]
    before = K._canonical(fn)
    fn.type_params = []
    fn._fields = (*fn._fields, "type_params") if "type_params" not in fn._fields else fn._fields
    assert K._canonical(fn) == before
    assert K._canonical(ast.parse(src.replace("2", "3")).body[0]) != before
