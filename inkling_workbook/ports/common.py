"""What every port folder shares: the guard on helion's backend, and one step's tally row."""

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
