"""portcheck in a pytest suite: one test per case, named by the case::

    import portcheck
    import mypair

    @portcheck.pytest_cases(mypair.cases())
    def test_port_matches_original(case):
        portcheck.assert_case(mypair.original, mypair.port, case)

A failing case fails its test with the report's details (coordinates in hex, seed, reproducer
when ``names`` is given); a case whose callable raises fails with the error. Crash isolation is
pytest's business here (``pytest-forked``, ``pytest-xdist``); the command line isolates itself.
"""

from __future__ import annotations

import contextlib

import torch

from . import interpret
from .compare import BITS, Mode
from .report import details
from .runner import check_case, check_device, reproducer


def pytest_cases(cases, argname: str = "case"):
    """``pytest.mark.parametrize`` over ``cases``, each test id the case's name."""
    import pytest

    cases = list(cases)
    return pytest.mark.parametrize(argname, cases, ids=[c.name for c in cases])


def assert_case(original, port, case, device="cpu", reference=None, mode: Mode = BITS, reruns=2,
                names: tuple[str, str, str] | None = None, interpret_repairs: bool = True) -> dict:  # fmt: skip
    """Check one case (on ``device="cpu"`` in :func:`portcheck.interpret.cpu_mode`) and raise
    ``AssertionError`` with its details unless it is equal and deterministic; returns the row."""
    device = check_device(device)
    scope = interpret.cpu_mode(interpret_repairs) if device.type == "cpu" else contextlib.nullcontext()
    with scope:
        row = check_case(original, port, case, torch.device(device), reference, reruns, mode)
    if not row["ok"]:
        if names:
            row["reproduce"] = reproducer(*names, case.name, device)
        raise AssertionError("portcheck: " + row.get("status", "mismatch") + "\n" + "\n".join(details(row)))
    return row
