"""Which kernel a timing describes: a digest of each op's device code and launch heuristic.

A published number is current only while the kernel it timed is the one that ships. The commit a
record names is not enough to tell: most commits change no kernel, and a docstring or a moved
registration changes ``sources_sha256`` (every source file) without moving a nanosecond. The
kernel digest of an op covers what decides its time and nothing else:

* the Triton functions its entry kernels reach (every ``@triton.jit`` function called from them,
  by name, through the whole package), each as its syntax tree without its docstring (so
  comments, docstrings, formatting and the file a function lives in do not count, a changed
  expression, constant, cache hint or PDL call does);
* the Python functions that choose its launch (tile, warps, grid), the same way, less their
  argument checks (an ``if`` that only raises).

The digest is conservative: any other change to these functions counts, even one that moves no
time, so "stale" means "not measured on this code", not "slower".

:func:`digests` reads a working tree; :func:`digests_at` a commit's blobs (``git``), so a record
measured long ago can be dated without rerunning it. ``python -m inkling_workbook.measure.kernel_digest
data/kernel_digests.json COMMIT...`` writes the digests of the commits the published records name
(those records predate the digest in their provenance); :func:`record_digests` reads a record's
own (``provenance["kernel_digests"]``) or that file's.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "inkling_kernels"
DIGESTS_FILE = REPO_ROOT / "data" / "kernel_digests.json"

#: per op: its entry kernels, and its launch heuristic: the functions named ``launch`` in a file
#: whose name (without ``.py``) is one of ``files`` (the module that chose the launch has moved:
#: ``fp8.py``, then ``_fp8_launch.py``, now ``fp8/_launch.py``); at least one must be found
OPS: dict[str, dict] = {
    "silu_and_mul": {
        "kernels": ("silu_and_mul_interleaved_kernel", "silu_and_mul_non_interleaved_kernel"),
        "files": ("silu_and_mul",),
        "launch": ("launch_config", "_launch_config"),
    },
    "nvfp4": {"kernels": ("nvfp4_quant_kernel",), "files": ("nvfp4",), "launch": ("_quant_config",)},
    "fp8": {
        "kernels": ("_fp8_group_kernel",),
        "files": ("fp8", "_fp8_launch", "_launch"),
        "launch": ("_launch_config",),
    },
}


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


class _DropChecks(ast.NodeTransformer):
    """Removes argument checks: an ``if`` whose body only raises (and has no ``else``), and a loop
    left empty by that. They refuse bad input; they choose nothing."""

    def visit_If(self, node):
        self.generic_visit(node)
        if not node.orelse and all(isinstance(s, ast.Raise) for s in node.body):
            return None
        return node

    def visit_For(self, node):
        self.generic_visit(node)
        return node if node.body else None


def _normal_form(fn: ast.FunctionDef, drop_checks: bool = False) -> str:
    """The function's syntax tree without its docstring (no line numbers, no comments); with
    ``drop_checks``, without its argument checks either."""
    fn = ast.parse(ast.unparse(fn)).body[0]
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        if isinstance(body[0].value.value, str):
            fn.body = body[1:] or [ast.Pass()]
    if drop_checks:
        fn = _DropChecks().visit(fn)
        fn.body = fn.body or [ast.Pass()]
    return _canonical(fn)


def _canonical(node) -> str:
    """The tree as text, the same under every Python: ``ast.dump`` is not (3.12 added the field
    ``type_params`` to every function), so fields that are empty (``None`` or ``[]``) are left out
    and the rest are named."""
    if isinstance(node, ast.AST):
        fields = [(f, getattr(node, f, None)) for f in node._fields]
        inner = " ".join(f"{f}={_canonical(v)}" for f, v in fields if v is not None and v != [])
        return f"({type(node).__name__} {inner})"
    if isinstance(node, list):
        return "[" + ", ".join(_canonical(v) for v in node) + "]"
    return repr(node)


def _functions(sources: dict[str, str]):
    """``jit[name]``: (normal form, names it mentions) of every top-level ``@triton.jit`` function
    of that name; ``plain[(stem, name)]``: the normal form of every other top-level function."""
    jit: dict[str, list[tuple[str, frozenset]]] = {}
    plain: dict[tuple[str, str], str] = {}
    for path in sorted(sources):
        tree = ast.parse(sources[path])
        stem = Path(path).with_suffix("").name
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                if _is_jit(node):
                    names = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
                    jit.setdefault(node.name, []).append((_normal_form(node), names))
                else:
                    plain[(stem, node.name)] = _normal_form(node, drop_checks=True)
    return jit, plain


def _reachable(entries, jit) -> list[str]:
    """The jit functions the entries call, transitively, by name."""
    seen, todo = set(), [e for e in entries if e in jit]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [n for _, names in jit[name] for n in names if n in jit and n not in seen]
    return sorted(seen)


def digests_of(sources: dict[str, str]) -> dict[str, str]:
    """Each op's kernel digest (sha256, 16 hex digits) from ``{path: source}`` of the package."""
    jit, plain = _functions(sources)
    out = {}
    for op, spec in OPS.items():
        names = _reachable(spec["kernels"], jit)
        if not names:
            raise ValueError(f"{op}: none of its entry kernels {spec['kernels']} is in the sources")
        h = hashlib.sha256()
        for name in names:
            for form in sorted(f for f, _ in jit[name]):
                h.update(name.encode() + b"\0" + form.encode() + b"\0")
        launch = [(name, plain[(f, name)]) for name in spec["launch"] for f in spec["files"] if (f, name) in plain]
        if not launch:
            raise ValueError(f"{op}: no launch heuristic {spec['launch']} in a file named {spec['files']}")
        for name, form in launch:
            h.update(name.encode() + b"\0" + form.encode() + b"\0")
        out[op] = h.hexdigest()[:16]
    return out


def digests(root: Path | None = None) -> dict[str, str]:
    """The kernel digests of the package in a working tree (default: this checkout)."""
    root = Path(root or REPO_ROOT)
    return digests_of({str(f.relative_to(root)): f.read_text() for f in sorted((root / PACKAGE).rglob("*.py"))})


def digests_at(commit: str, root: Path | None = None) -> dict[str, str]:
    """The kernel digests of the package at ``commit`` (read from git, nothing checked out)."""
    root = str(root or REPO_ROOT)
    names = subprocess.run(
        ["git", "-C", root, "ls-tree", "-r", "--name-only", commit, "--", PACKAGE],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    show = ["git", "-C", root, "show"]
    sources = {
        n: subprocess.run([*show, f"{commit}:{n}"], capture_output=True, text=True, check=True).stdout
        for n in names
        if n.endswith(".py")
    }
    return digests_of(sources)


def record_digests(provenance: dict, table: Path = DIGESTS_FILE) -> dict[str, str] | None:
    """The kernel digests of the code a record timed: its own provenance's, else those
    :data:`DIGESTS_FILE` holds for its commit (matched on the commit's first 7 characters)."""
    if provenance.get("kernel_digests"):
        return provenance["kernel_digests"]
    commit = str(provenance.get("git_commit") or "")[:7]
    known = json.loads(table.read_text()).get("commits", {}) if table.exists() else {}
    return known.get(commit)


def stale_ops(provenance: dict, ops, head: dict[str, str] | None = None, table: Path = DIGESTS_FILE) -> list[str]:
    """The ops among ``ops`` whose kernel differs between a record and the checkout (an op whose
    record digest is unknown counts as stale: a number that cannot be dated is not current)."""
    head = head or digests()
    rec = record_digests(provenance, table) or {}
    return [op for op in ops if rec.get(op) != head[op]]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m inkling_workbook.measure.kernel_digest OUT.json COMMIT...", file=sys.stderr)
        return 2
    out = Path(argv[0])
    doc = {
        "what": "kernel digests (inkling_workbook.measure.kernel_digest) of the commits the published records name",
        "commits": {c[:7]: digests_at(c) for c in argv[1:]},
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
