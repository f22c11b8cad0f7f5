"""Running the checks in this process: one case (:func:`check_case`), a list of cases (:func:`run`).

Both sides see the same inputs, rebuilt from the case's seed for every call (so a callable that
writes its inputs cannot affect the other side). A callable that raises is that case's error
(any exception, an ``ImportError`` raised on the call included), never the end of the run.
Crashes (a signal) and timeouts need the case in another process: :mod:`portcheck.isolate`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable

import torch

from . import interpret
from .cases import Case, digest
from .compare import BITS, Mode, as_outputs, compare_outputs, reference_problem, ulp_histogram
from .report import Report, provenance

STATUSES = ("equal", "mismatch", "error", "crashed", "timeout")


def _poisoned_out(case: Case, args: tuple, kwargs: dict):
    bufs = case.out(args, kwargs)
    for t in as_outputs(bufs):
        if t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.view(torch.uint8).fill_(0xFF)  # NaN in every float format
    return bufs


def case_inputs(case: Case, device: torch.device) -> tuple[tuple, dict]:
    """The inputs one call gets: the case's build and, with ``case.out``, poisoned ``out=`` buffers."""
    args, kwargs = case.build(device)
    if case.out is not None:
        kwargs = {**kwargs, "out": _poisoned_out(case, args, kwargs)}
    return args, kwargs


def _call(fn, case: Case, device: torch.device):
    """Rebuild the case's inputs and call ``fn`` on them: (copies of the outputs on the device,
    input digest). The comparisons run where the outputs are (on a GPU, gigabyte outputs compare
    in milliseconds); the copies keep a buffer the callable reuses from changing under them."""
    args, kwargs = case.build(device)
    seen = digest((args, kwargs))
    if case.out is not None:
        kwargs = {**kwargs, "out": _poisoned_out(case, args, kwargs)}
    result = fn(*args, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    outs = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in as_outputs(result)]
    return outs, seen


def reruns_pair(reruns) -> tuple[int, int]:
    """``reruns`` as (original, port) call counts: an int for both, or a pair."""
    pair = reruns if isinstance(reruns, (tuple, list)) else (reruns, reruns)
    if len(pair) != 2 or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 1 for r in pair):
        raise ValueError(f"reruns must be an int >= 1 or a pair of them (original, port), got {reruns!r}")
    return tuple(pair)


def _error_at(e: BaseException) -> str | None:
    """``file:line`` of the innermost frame of an exception's traceback."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else None


def _labels(case: Case, device) -> dict:
    """The case's dtype and value-class labels (a ``make`` case: the dtypes of its tensor inputs)."""
    if case.make is None:
        return {"dtype": case.dtype_label, "value_class": case.value_class_label}
    try:
        args, kwargs = case.build(device)
        dts = [str(a.dtype).removeprefix("torch.") for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        dtype = "+".join(dict.fromkeys(dts)) or "-"
    except Exception as e:  # the run reports the build's error itself
        dtype = f"? ({type(e).__name__})"
    return {"dtype": dtype, "value_class": case.value_class_label}


def check_case(original, port, case: Case, device, reference=None, reruns=2, mode: Mode = BITS) -> dict:
    """One case, both callables (``reruns`` calls each, or a pair: original, port): the row the
    report keeps. A side called once has ``<side>_deterministic`` None: not checked. ``status``:
    equal, mismatch or error (an exception from a callable, the reference or the case's build)."""
    device = torch.device(device)
    counts = dict(zip(("original", "port"), reruns_pair(reruns)))
    row = {"case": case.name, "seed": case.seed, **_labels(case, device), "stride": case.stride}
    if case.meta:
        row["meta"] = dict(case.meta)
    runs = {}
    for side, fn in (("original", original), ("port", port)):
        outs = []
        for _ in range(counts[side]):
            try:
                got, seen = _call(fn, case, device)
            except Exception as e:  # a callable that raises is a result of its own
                row.update(error=f"{side} raised {type(e).__name__}: {e}", error_type=type(e).__name__, ok=False)
                row["error_at"] = _error_at(e)
                row["status"] = "error"
                return row
            outs.append(got)
            row.setdefault("inputs", seen)
            if seen != row["inputs"]:
                row["error"] = (
                    f"the inputs differ between builds ({seen} vs {row['inputs']}): the case is not deterministic"
                )
                row.update(ok=False, status="error", error_type="NondeterministicCase")
                return row
        runs[side] = outs
        row[f"{side}_deterministic"] = (
            all(all(r["equal"] for r in compare_outputs(outs[0], again)) for again in outs[1:])
            if len(outs) > 1
            else None
        )
    refs = None
    if reference is not None:
        args, kwargs = case.build(device)
        try:
            refs = as_outputs(reference(*args, **kwargs))
            problem = reference_problem(runs["original"][0], refs)
            if problem:
                raise ValueError(problem)
            stats = {side: ulp_histogram(runs[side][0], refs, with_max=True) for side in runs}
            row["ulp"] = {side: hist for side, (hist, _) in stats.items()}
            row["ulp_max"] = {side: top for side, (_, top) in stats.items()}
        except Exception as e:  # a broken reference is an error of the case, never silence
            row["ulp_error"] = str(e) if isinstance(e, ValueError) else f"reference raised {type(e).__name__}: {e}"
            row["error_at"] = _error_at(e)
            refs = None
    row["outputs"] = compare_outputs(runs["original"][0], runs["port"][0], mode, refs)
    row["equal"] = all(o["equal"] for o in row["outputs"])
    row["mismatches"] = sum(o.get("mismatches", 0) for o in row["outputs"])
    if not mode.bits:
        row["accepted"] = sum(o.get("accepted", 0) for o in row["outputs"])
    row["ok"] = bool(
        row["equal"] and row["original_deterministic"] is not False and row["port_deterministic"] is not False
    )
    if "ulp_error" in row:
        row.update(ok=False, status="error", error=f"--reference: {row['ulp_error']}", error_type="ReferenceError")
    else:
        row["status"] = "equal" if row["ok"] else "mismatch"
    return row


def label(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def reproducer(original: str, port: str, cases: str | None, name: str, device, extra: list[str] = ()) -> str:
    """A shell command that rebuilds one case and reruns both callables."""
    import shlex

    device = torch.device(device)
    if cases is None:
        cases = "MODULE:CASES"  # the caller's cases: name them as the CLI takes them
    cmd = ["python", "-m", "portcheck", original, port, "--cases", cases, "--only", name, *extra, "--no-code"]
    cmd += ["--device", device.type] if device.type != "cpu" else []
    return " ".join(shlex.quote(c) for c in cmd)


def check_device(device) -> torch.device:
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}") from e
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is available")
    return device


def check_cases(cases) -> list[Case]:
    if isinstance(cases, Case):
        cases = [cases]
    cases = list(cases)
    if not cases:
        raise ValueError("cases must not be empty")
    for c in cases:
        if not isinstance(c, Case):
            raise TypeError(f"cases must hold portcheck.Case objects, got {type(c).__name__}")
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"two cases are named {dup!r}: --only and the reproducers need unique names")
    return cases


def progress_printer(total: int, stream=None) -> Callable[[int, dict], None]:
    """A ``progress`` callback: one line per case on stderr (``[3/150] NAME: equal (0.4 s)``)."""
    stream = stream or sys.stderr
    start = time.perf_counter()

    def show(done: int, row: dict) -> None:
        extra = f" ({row['error'][:160]})" if row.get("status") in ("error", "crashed", "timeout") else ""
        print(f"[{done}/{total}] {row['case']}: {row.get('status', '?')}{extra} ({time.perf_counter() - start:.1f} s)",
              file=stream, flush=True)  # fmt: skip

    return show


def run(
    original: Callable,
    port: Callable,
    cases: Iterable[Case],
    device: str | torch.device = "cpu",
    reference: Callable | None = None,
    reruns: int | tuple[int, int] = 2,
    timing: bool = False,
    code: bool = True,
    names: tuple[str, str, str | None] | None = None,
    mode: Mode = BITS,
    interpret_repairs: bool = True,
    progress: Callable[[int, dict], None] | bool | None = None,
) -> Report:
    """Check ``port`` against ``original`` on every case, in this process.

    ``device="cpu"`` runs both in :func:`portcheck.interpret.cpu_mode` (Triton kernels in the
    interpreter with the repairs; ``interpret_repairs=False``: the interpreter as shipped).
    ``mode``: what counts as equal (:class:`portcheck.Mode`; bits by default); ``no_farther`` needs
    ``reference``. ``names``: how reproducers name (original, port, cases) as ``MODULE:NAME`` (the
    CLI passes its arguments); by default the callables' own module and name, and
    ``MODULE:CASES`` for the cases. ``progress``: True for a line per case on stderr, or a
    callback ``(done, row)``."""
    for arg, fn in (("original", original), ("port", port)):
        if not callable(fn):
            raise TypeError(f"{arg} must be callable, got {type(fn).__name__}")
    if reference is not None and not callable(reference):
        raise TypeError(f"reference must be callable or None, got {type(reference).__name__}")
    if not isinstance(mode, Mode):
        raise TypeError(f"mode must be a portcheck.Mode, got {type(mode).__name__}")
    if mode.no_farther and reference is None:
        raise ValueError("mode no_farther needs a reference")
    cases = check_cases(cases)
    device = check_device(device)
    reruns_pair(reruns)
    if timing and device.type != "cuda":
        raise ValueError("timing=True needs device='cuda': interpreter timings say nothing about kernels")
    if progress is True:
        progress = progress_printer(len(cases))
    o_name, p_name, c_name = names or (label(original), label(port), None)
    rows = []
    scope = interpret.cpu_mode(interpret_repairs) if device.type == "cpu" else contextlib.nullcontext()
    with scope:
        for case in cases:
            row = check_case(original, port, case, device, reference, reruns, mode)
            if not row["ok"]:
                row["reproduce"] = reproducer(o_name, p_name, c_name, case.name, device, mode_flags(mode))
            rows.append(row)
            if progress:
                progress(len(rows), row)
        report = Report(o_name, p_name, str(device), rows, reference=label(reference) if reference else None)
        report.mode = mode.to_dict()
        report.provenance = provenance(device, interpret_repairs)
        if code:
            report.code = code_report(original, port, cases[0], device)
    if timing:
        from .timing import timings

        report.timings = timings(original, port, cases, device, case_inputs)
    return report


def code_report(original, port, case: Case, device: torch.device) -> dict:
    """The generated code of both sides on ``case`` (:func:`portcheck.code.generated_code`)."""
    from .code import generated_code

    code = {"target": "sm_90" if device.type == "cpu" else "this device"}
    for side, fn in (("original", original), ("port", port)):
        try:
            code[side] = generated_code(lambda fn=fn: _call(fn, case, device), device)
        except Exception as e:  # the comparison of bits stands without it
            code[f"{side}_error"] = f"{type(e).__name__}: {e}"[:600]
    return code


def mode_flags(mode: Mode) -> list[str]:
    """The CLI flags that select ``mode`` (for reproducers)."""
    flags = []
    if mode.nan:
        flags.append("--nan-equal")
    if mode.zeros:
        flags.append("--zeros-equal")
    for name, budget in mode.ulp:
        flags += ["--ulp", f"{name}={budget}"]
    if mode.no_farther:
        flags.append("--no-farther")
    return flags


def dump_case(directory, case: Case, device, original=None, port=None) -> str:
    """Save a case's inputs (and, given the callables, each side's outputs or its error) with
    ``torch.save`` to ``DIRECTORY/<case name>.pt``: ``{"case", "seed", "args", "kwargs",
    "original", "port"}``, tensors on the CPU. Returns the path (or why it could not be written)."""
    import re
    from pathlib import Path

    path = Path(directory) / (re.sub(r"[^\w.+=-]+", "_", case.name).strip("_")[:150] + ".pt")
    try:
        args, kwargs = case.build(device)
        doc = {"case": case.name, "seed": case.seed, "args": _cpu(args), "kwargs": _cpu(kwargs)}
        for side, fn in (("original", original), ("port", port)):
            if fn is None:
                continue
            try:
                doc[side] = _cpu(_call(fn, case, device)[0])
            except Exception as e:
                doc[side] = f"raised {type(e).__name__}: {e}"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(doc, path)
    except Exception as e:  # the report says so; the check itself stands
        return f"not written: {type(e).__name__}: {e}"
    return str(path)


def _cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_cpu(v) for v in obj)
    return obj
