"""The layout of the three packages (CPU only, source read, nothing imported): no import cycle
within ``inkling_workbook``, ``inkling_kernels`` or ``portcheck``; no module over
:data:`MAX_LINES` lines; ``portcheck`` imports neither of the others, and ``inkling_kernels``
(what a server imports) never imports the workbook.

Every import counts, the ones inside functions too: an import deferred into a function still
runs, and a cycle through one is still a cycle a reader has to untangle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("inkling_workbook", "inkling_kernels", "portcheck")
MAX_LINES = 700


def modules(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of ``packages`` under ``root``."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere in its source: ``import a.b``
    names ``a.b``; ``from a import b`` names ``a.b`` when that is a module, else ``a``; relative
    imports are resolved against the module's package."""
    is_pkg = path.name == "__init__.py"
    package = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for target in targets:
            # the longest known module that the target names (``a.b.c`` -> ``a.b`` if only that exists)
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts:
                found.add(".".join(parts))
    found.discard(name)
    return found


def graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    found = cycles(graph())
    assert found == [], f"import cycles: {found}"


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_at_most_max_lines(package):
    long = {
        str(path.relative_to(ROOT)): n
        for path in modules(packages=(package,)).values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines (split them by what a reader looks for): {long}"


def _imports_of(package: str) -> dict[str, set[str]]:
    """Top-level package names each module of ``package`` imports."""
    out = {}
    for name, path in modules(packages=(package,)).items():
        tops = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops.add(node.module.split(".")[0])
        out[name] = tops
    return out


def test_portcheck_imports_neither_package():
    bad = {m: sorted(t & {"inkling_workbook", "inkling_kernels"}) for m, t in _imports_of("portcheck").items()}
    assert {m: t for m, t in bad.items() if t} == {}


def test_kernels_do_not_import_workbook():
    bad = sorted(m for m, t in _imports_of("inkling_kernels").items() if "inkling_workbook" in t)
    assert bad == []


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """The check itself: a planted two-module cycle (one import deferred into a function) is found,
    and a chain without one is not."""
    pkg = tmp_path / "planted"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from planted import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import os\n")
    assert cycles(graph(tmp_path, ("planted",))) == []
    (pkg / "c.py").write_text("from .a import x\n")
    assert cycles(graph(tmp_path, ("planted",))) == [["planted.a", "planted.b", "planted.c"]]
