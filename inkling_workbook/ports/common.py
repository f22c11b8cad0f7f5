"""What every port folder shares: the guard on helion's backend, one step's tally row, and the
timed torch.compile column compiled fresh per shape."""

from __future__ import annotations


class HelionBackend:
    """helion caches the Triton module it generates by its source text, and the source is the same
    for CUDA and CPU tensors: a process that ran an original compiled would hand a CPU tensor to
    the compiled kernel (and the reverse). So one process uses one backend for each original; a
    port's helion module holds one of these and calls :meth:`claim` before each run."""

    def __init__(self, what: str = "the helion original") -> None:
        self.what = what
        self.kind: str | None = None

    def claim(self, kind: str) -> None:
        if self.kind is None:
            self.kind = kind
        elif self.kind != kind:
            raise RuntimeError(
                f"{self.what} already ran {self.kind} in this process; helion reuses its generated module across "
                f"devices, so it cannot also run {kind} here: use a separate process"
            )


def step_row(step, report) -> dict:
    """One step of a port against its original: the portcheck ``report`` over the step's cases
    folded into a row (equal cases, elements compared, mismatching elements, the first failing case)."""
    elements = sum(o.get("elements", 0) for r in report.cases for o in r.get("outputs", []))
    return {
        "step": step.index, "name": step.name, "change": step.change, "cases": len(report.cases),
        "equal_cases": sum(r["ok"] for r in report.cases), "elements": elements,
        "mismatching_elements": sum(r.get("mismatches", 0) for r in report.cases),
        "first_mismatch": next((r["case"] for r in report.cases if not r["ok"]), None),
    }  # fmt: skip


def compiled_per_shape(cache: dict, fn, key, first_args: tuple | None = None):
    """``torch.compile(fn, dynamic=False)`` compiled fresh for each shape ``key``, as the
    workbook's other torch.compile columns are (:mod:`inkling_workbook.measure.compile_baselines`:
    a fresh dynamo state, a new compile object, its first call ``fn(*first_args)`` inside empty
    inductor and Triton caches); ``cache`` keeps the current shape's, so its warm and cold timings
    share it. A compile object carried across shapes had moved the silu sweep's compile timings by
    25-42%."""
    from inkling_workbook.measure import compile_baselines

    if "fn" not in cache or cache.get("key") != key:
        compile_baselines.new_state()
        c = compile_baselines.compile_fresh(fn, [(first_args, ())] if first_args else [])
        cache.update(key=key, fn=c.fn)
    return cache["fn"]
