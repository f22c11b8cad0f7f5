"""``MODULE:NAME`` names resolved: the callables, cases and reference the command line and the
worker processes of :mod:`portcheck.isolate` are given by name, and the usage error (exit 2) a
name that does not resolve is."""

from __future__ import annotations

import importlib
import inspect
import traceback


class UsageError(Exception):
    """A command-line argument that does not resolve (exit 2)."""


def _where(e: BaseException) -> str:
    """``file:line`` of the innermost frame of ``e`` (a SyntaxError: its own file and line)."""
    if isinstance(e, SyntaxError) and e.filename:
        return f" ({e.filename}:{e.lineno})"
    frames = traceback.extract_tb(e.__traceback__)
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def resolve(spec: str, what: str):
    """``MODULE:NAME`` (dots in NAME walk attributes) to the object it names. A module that does
    not import (missing, a SyntaxError, a NameError at import, a missing dependency) is a
    :class:`UsageError` naming the file and line."""
    if not isinstance(spec, str) or ":" not in spec:
        raise UsageError(f"{what} must be MODULE:NAME, got {spec!r}")
    mod_name, attr = spec.split(":", 1)
    try:
        obj = importlib.import_module(mod_name)
    except ImportError as e:
        raise UsageError(f"{what}: cannot import {mod_name!r}: {e}{_where(e)}") from e
    except Exception as e:
        raise UsageError(f"{what}: importing {mod_name!r} raised {type(e).__name__}: {e}{_where(e)}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{what}: {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def load_cases(spec: str) -> list:
    """The cases ``MODULE:NAME`` names: a list of cases or a function of no arguments giving one."""
    from .cases import Case

    obj = resolve(spec, "--cases")
    if callable(obj) and not isinstance(obj, (list, tuple)):
        try:
            obj = obj()
        except Exception as e:
            raise UsageError(f"--cases {spec} raised {type(e).__name__}: {e}{_where(e)}") from e
    cases = list(obj) if isinstance(obj, (list, tuple)) or inspect.isgenerator(obj) else None
    if cases is None:
        raise UsageError(f"--cases {spec} must be a list of cases or a function returning one")
    if not cases:
        raise UsageError(f"--cases {spec} holds no cases")
    bad = next((c for c in cases if not isinstance(c, Case)), None)
    if bad is not None:
        raise UsageError(f"--cases {spec} must hold portcheck.Case objects, got {type(bad).__name__}")
    return cases
