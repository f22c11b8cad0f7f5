"""docs/portcheck.md runs as written: the quick start's ``mypair.py`` and its command from a
directory outside the checkout, and the two outside pairs of ``examples/portcheck`` with the
tallies and exit codes the page gives."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "portcheck.md").read_text()


def _sessions(text: str) -> list[tuple[str, str, list[tuple[list[str], str | None, int | None]]]]:
    """Every ```console block: (the directory it cds to, its commands with the tally line printed
    after each and the exit code an ``echo $?`` after it gives)."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        lines = block.splitlines()
        cwd, steps = ".", []
        for i, line in enumerate(lines):
            if line.startswith("$ cd "):
                cwd = line[5:].strip()
            elif line.startswith("$ portcheck "):
                tally = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("$") else None
                steps.append([shlex.split(line[2:])[1:], tally, None])
            elif line.startswith("$ echo $?"):
                steps[-1][2] = int(lines[i + 1])
        out.append((cwd, text, [tuple(s) for s in steps]))
    return out


def _run(args, cwd, extra_path=()):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([*extra_path, str(ROOT)])
    return subprocess.run([sys.executable, "-m", "portcheck", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_the_quick_start_runs_as_written(tmp_path):
    source = DOC.split("```python\n# mypair.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "mypair.py").write_text(source)
    (cwd, _, steps), *_ = _sessions(DOC)
    (args, tally, code), *_ = steps
    ok = _run(args, tmp_path)
    assert ok.returncode == code == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert tally in ok.stdout and "| registers |" in ok.stdout
    (tmp_path / "mypair.py").write_text(source.replace("0.5 * x), mask", "0.25 * x), mask"))
    bad = _run(args, tmp_path)
    assert bad.returncode == 1 and "MISMATCH" in bad.stdout and "reproduce:" in bad.stdout


_PAIRS = [step for cwd, _, steps in _sessions(DOC)[1:] for step in steps]


@pytest.mark.parametrize("args, tally, code", _PAIRS, ids=[" ".join(a[:1] + a[4:]) for a, _, _ in _PAIRS])
def test_the_outside_pairs_give_the_documented_tallies(args, tally, code):
    r = _run(args, ROOT / "examples" / "portcheck")  # as written: the page's command, no flag added
    assert tally and tally in r.stdout, r.stdout[:3000] + r.stderr[-2000:]
    expected = 0 if tally.endswith("**OK**") else 1
    assert r.returncode == expected and (code is None or code == expected)
