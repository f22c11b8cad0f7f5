"""Running cases in other processes: each case isolated, a crash or a timeout that case's row.

:func:`run_isolated` checks cases named ``MODULE:NAME`` in ``jobs`` worker processes (``spawn``:
CUDA cannot be forked). A worker imports the callables and cases once, then checks one case at a
time as the parent hands them out; when a worker dies (a signal: a segfault, an abort) or a case
runs past ``timeout`` seconds (the worker is killed), that case's row says so (``crashed`` with the
signal, ``timeout`` with the time) and a fresh worker takes the remaining cases. The rows come back
in the cases' order: the report :func:`portcheck.run` would give, plus the crashed ones.

Cost: on a CPU the workers are forked from this process, which has imported torch, Triton and
your modules already: a worker starts in milliseconds. On CUDA they are spawned (CUDA cannot be
forked) and every worker pays the imports once, a few seconds of CPU. A case's clock (``timeout``)
starts when its worker is ready. Spawned workers were why ``--jobs 2`` used to be slower than
serial on a 2-core machine: each of two fresh processes imported torch, Triton and the workbook,
and the parent did too, where the cases themselves took less than a second each.

:func:`pool` and :func:`submit` put several checks on one pool of processes (the second port's GPU
job uses them); they do not isolate crashes.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import os
import signal
import time
from multiprocessing.connection import wait

import torch

from .compare import BITS, Mode
from .report import Report, provenance
from .runner import check_case, check_device, code_report, mode_flags, reproducer, reruns_pair, run

#: cases a task of :func:`submit` checks
CHUNK = 8


def quiet_warnings() -> None:
    """Silence two warnings every interpreted case would repeat: Triton 3.9's notice about its FP
    fusion default, and numpy's overflow in lanes the interpreter computes (masked-off lanes
    too: ``exp`` of a large value there is harmless)."""
    import warnings

    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")


def _threads(jobs: int) -> int:
    return max(1, (os.cpu_count() or 1) // jobs)


def _worker(conn, spec: dict) -> None:
    """A worker: resolve the names, then check the cases the parent sends until it sends None."""
    from . import interpret
    from .names import load_cases, resolve

    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    torch.set_num_threads(spec["threads"])
    quiet_warnings()
    try:
        original, port = resolve(spec["original"], "ORIGINAL"), resolve(spec["port"], "PORT")
        reference = resolve(spec["reference"], "--reference") if spec["reference"] else None
        cases = load_cases(spec["cases"])
    except BaseException as e:
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    device = torch.device(spec["device"])
    mode = Mode(**spec["mode"])
    scope = interpret.cpu_mode(spec["repairs"]) if device.type == "cpu" else None
    if scope is not None:
        scope.__enter__()
    conn.send(("ready", None))
    while True:
        task = conn.recv()
        if task is None:
            break
        kind, i = task
        if kind == "code":
            conn.send(("code", json.dumps(code_report(original, port, cases[i], device), default=str)))
            continue
        row = check_case(original, port, cases[i], device, reference, spec["reruns"], mode)
        if not row["ok"] and spec["dump"]:
            from .runner import dump_case

            row["dump"] = dump_case(spec["dump"], cases[i], device, original, port)
        conn.send(("row", json.dumps(row, default=str)))
    if scope is not None:
        scope.__exit__(None, None, None)


def _context(device: torch.device):
    """``fork`` for CPU checks where the platform has it: a worker starts with this process's
    imports (torch, Triton, your modules) in milliseconds instead of importing them again for
    seconds; ``spawn`` for CUDA, which cannot be forked."""
    if device.type == "cpu" and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


class _Worker:
    def __init__(self, ctx, spec):
        import sys

        sys.stdout.flush()  # a forked child would print what is still in the buffers again
        sys.stderr.flush()
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, spec), daemon=True)
        self.proc.start()
        child.close()
        self.ready, self.task, self.started = False, None, None

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


def _death(proc) -> str:
    proc.join(5)
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process died on {name} (signal {-code})"
    return f"the process exited with status {code}"


def run_isolated(
    original: str,
    port: str,
    cases: str,
    device: str = "cpu",
    reference: str | None = None,
    reruns=2,
    code: bool = True,
    mode: Mode = BITS,
    jobs: int = 1,
    timeout: float | None = None,
    indices: list[int] | None = None,
    progress=None,
    interpret_repairs: bool = True,
    dump: str | None = None,
    case_list: list | None = None,
) -> Report:
    """:func:`portcheck.run` over the cases named ``cases`` (``MODULE:NAME``, as ``original``,
    ``port`` and ``reference`` are), each case checked in a worker process (``jobs`` of them), a
    crash or a ``timeout`` (seconds a case) that case's row. ``indices``: only those cases.
    ``case_list``: the cases, when the caller has loaded them already (names, seeds)."""
    from .names import load_cases

    for what, spec in (("original", original), ("port", port), ("cases", cases), ("reference", reference)):
        if spec is not None and (not isinstance(spec, str) or ":" not in spec):
            raise TypeError(f"{what} must be a MODULE:NAME string for a worker process to resolve, got {spec!r}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    if not isinstance(mode, Mode):
        raise TypeError(f"mode must be a portcheck.Mode, got {type(mode).__name__}")
    if mode.no_farther and reference is None:
        raise ValueError("mode no_farther needs a reference")
    device = check_device(device)
    reruns = reruns_pair(reruns)
    every = case_list if case_list is not None else load_cases(cases)
    indices = list(range(len(every))) if indices is None else list(indices)
    if not indices:
        raise ValueError("indices must not be empty")
    spec = {"original": original, "port": port, "cases": cases, "reference": reference, "device": str(device),
            "reruns": reruns, "mode": {"nan": mode.nan, "zeros": mode.zeros, "ulp": mode.ulp,
            "no_farther": mode.no_farther}, "repairs": interpret_repairs, "dump": dump,
            "threads": _threads(jobs)}  # fmt: skip
    ctx = _context(device)
    todo = collections.deque(indices)
    if code:
        todo.appendleft(("code", indices[0]))
    rows: dict[int, dict] = {}
    code_doc = None
    extra = mode_flags(mode) + (["--reference", reference] if mode.no_farther else [])
    done = 0

    def finish(i: int, row: dict) -> None:
        nonlocal done
        if not row["ok"]:
            row["reproduce"] = reproducer(original, port, cases, every[i].name, device, extra)
        rows[i] = row
        done += 1
        if progress:
            progress(done, row)

    def failed_row(i: int, status: str, why: str) -> dict:
        c = every[i]
        row = {"case": c.name, "seed": c.seed, "dtype": c.dtype_label if c.make is None else "-",
               "value_class": c.value_class_label, "stride": c.stride, "ok": False,
               "status": status, "error": why, "error_type": status}  # fmt: skip
        if c.meta:
            row["meta"] = dict(c.meta)
        if dump:
            from .runner import dump_case

            row["dump"] = dump_case(dump, c, device)
        return row

    live = [_Worker(ctx, spec) for _ in range(min(jobs, len(todo)))]
    try:
        while todo or any(w.task is not None for w in live):
            if not live:
                live.append(_Worker(ctx, spec))
            for w in live:
                if w.ready and w.task is None and todo:
                    task = todo.popleft()
                    w.task, w.started = task, time.monotonic()
                    w.conn.send(task if isinstance(task, tuple) else ("case", task))
            busy = [w for w in live if w.task is not None]
            wait_s = None
            if timeout is not None and busy:
                wait_s = max(0.0, min(w.started + timeout for w in busy) - time.monotonic())
            ready = wait([w.conn for w in live] + [w.proc.sentinel for w in live], timeout=wait_s)
            for w in list(live):
                dead = False
                if w.conn in ready:
                    try:
                        kind, payload = w.conn.recv()
                    except (EOFError, OSError):
                        dead = True
                    else:
                        if kind == "ready":
                            w.ready = True
                        elif kind == "failed":
                            raise RuntimeError(f"a worker could not load the names: {payload}")
                        elif kind == "code":
                            code_doc, w.task = json.loads(payload), None
                        elif kind == "row":
                            finish(w.task, json.loads(payload))
                            w.task = None
                        continue
                if dead or w.proc.sentinel in ready:
                    why = _death(w.proc)
                    if isinstance(w.task, tuple):
                        code_doc = {"target": "sm_90", "original_error": f"the code comparison crashed: {why}"}
                    elif w.task is not None:
                        finish(w.task, failed_row(w.task, "crashed", f"crashed: {why} while checking this case"))
                    elif not w.ready:
                        raise RuntimeError(f"a worker died while importing the names: {why}")
                elif timeout is not None and w.task is not None and time.monotonic() - w.started >= timeout:
                    elapsed = time.monotonic() - w.started
                    if isinstance(w.task, tuple):
                        code_doc = {
                            "target": "sm_90",
                            "original_error": f"the code comparison timed out ({elapsed:.0f} s)",
                        }
                    else:
                        msg = f"timed out: still running after {elapsed:.1f} s (--timeout {timeout:g}), killed"
                        finish(w.task, failed_row(w.task, "timeout", msg))
                else:
                    continue
                live.remove(w)
                w.kill()
                if todo:
                    live.append(_Worker(ctx, spec))
    finally:
        for w in live:
            try:
                if w.proc.is_alive():
                    w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            w.proc.join(10)
            w.kill()
    report = Report(original, port, str(device), [rows[i] for i in indices], code=code_doc, reference=reference)
    report.mode = mode.to_dict()
    report.provenance = provenance(device, interpret_repairs)
    return report


# ---- several checks on one pool (no crash isolation) -----------------------------------------


def pool(jobs: int):
    """A pool of ``jobs`` fresh processes (``spawn``) for :func:`submit`."""
    import concurrent.futures

    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_pool_init,
        initargs=(_threads(jobs),),
    )  # fmt: skip


def _pool_init(threads: int) -> None:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile pool in every worker
    torch.set_num_threads(threads)


def _run_chunk(original: str, port: str, cases: str, indices: list[int], device: str, reference, reruns, code) -> str:
    from .names import load_cases, resolve

    picked = [load_cases(cases)[i] for i in indices]
    ref = resolve(reference, "--reference") if reference else None
    rep = run(resolve(original, "ORIGINAL"), resolve(port, "PORT"), picked, device, ref, reruns, code=code,
              names=(original, port, cases))  # fmt: skip
    return rep.to_json()


class Pending:
    """The tasks :func:`submit` handed to a pool; :meth:`result` waits for them and merges their
    rows, in the cases' order, into one :class:`Report`."""

    def __init__(self, futures: list, names: tuple[str, str, str], device: str, reference: str | None):
        self.futures, self.names, self.device, self.reference = futures, names, device, reference

    def result(self) -> Report:
        docs = [json.loads(f.result()) for f in self.futures]
        code = next((d["code"] for d in docs if d.get("code")), None)
        rows = [r for d in docs for r in d["cases"]]
        return Report(*self.names[:2], docs[0]["device"], rows, code=code, reference=docs[0]["reference"],
                      mode=docs[0].get("mode"), provenance=docs[0].get("provenance"))  # fmt: skip


def submit(executor, original: str, port: str, cases: str, device: str = "cpu", reference: str | None = None,
           reruns=2, code: bool = True, indices: list[int] | None = None, chunk: int = CHUNK) -> Pending:  # fmt: skip
    """:func:`portcheck.run` over the cases named ``cases`` (``MODULE:NAME``, resolved in each
    worker, as ``original``, ``port`` and ``reference`` are) in tasks of ``chunk`` cases on
    ``executor`` (:func:`pool`), so that several checks can share one pool. ``indices``: only those
    cases. The result is the report :func:`portcheck.run` would give, rows in the same order."""
    from .names import load_cases

    for what, spec in (("original", original), ("port", port), ("cases", cases), ("reference", reference)):
        if spec is not None and (not isinstance(spec, str) or ":" not in spec):
            raise TypeError(f"{what} must be a MODULE:NAME string for a worker process to resolve, got {spec!r}")
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    device = check_device(device)
    reruns_pair(reruns)
    if indices is None:
        indices = list(range(len(load_cases(cases))))
    if not indices:
        raise ValueError("indices must not be empty")
    parts = [list(indices[i : i + chunk]) for i in range(0, len(indices), chunk)]
    futures = [
        executor.submit(_run_chunk, original, port, cases, part, str(device), reference, reruns, code and k == 0)
        for k, part in enumerate(parts)
    ]
    return Pending(futures, (original, port, cases), str(device), reference)


def run_parallel(original: str, port: str, cases: str, device: str = "cpu", reference: str | None = None,
                 jobs: int = 2, **kwargs) -> Report:  # fmt: skip
    """:func:`run_isolated` with ``jobs`` workers: the same report as :func:`portcheck.run` (the
    callables and cases named ``MODULE:NAME``), its cases checked in parallel. ``chunk`` (of
    :func:`submit`) is accepted and ignored: workers take one case at a time."""
    kwargs.pop("chunk", None)
    return run_isolated(original, port, cases, device, reference, jobs=jobs, **kwargs)
