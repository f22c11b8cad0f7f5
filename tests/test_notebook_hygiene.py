"""The stored notebooks: small, and free of stderr, warnings, progress bars and machine paths."""

import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
NOISE = re.compile(r'TqdmWarning|IProgress not found|"name": "stderr"|\d+%\|[^"]*\||(?<![\w.])/(home|root|opt|tmp)/')


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 7


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_notebook_is_small_and_clean(path):
    text = path.read_text()
    assert len(text.encode()) < 200 * 1024, f"{path.name} is {len(text.encode()) // 1024} KB"
    hits = sorted({m.group(0) for m in NOISE.finditer(text)})
    assert not hits, f"{path.name} stores {hits}"
