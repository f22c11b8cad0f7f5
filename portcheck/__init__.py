"""portcheck: check a port against its original, bit for bit, over a case matrix.

Copy the original's operation order, then check the port's raw output bits against the
original's on many inputs, compare the code each one generates, and time both the same way.
portcheck does the checking; the operation order is yours. It depends on torch, Triton and numpy
only. The manual is ``docs/portcheck.md``; in short::

    import portcheck

    cases = portcheck.matrix(shapes=[(2, 768)], dtypes=[torch.bfloat16])
    report = portcheck.run(original_op, port_op, cases, reference=op_in_float64)
    print(report.to_markdown())
    assert report.ok

or from a shell (``MODULE:NAME`` names an attribute of an importable module)::

    portcheck MOD:ORIGINAL MOD:PORT --cases MOD:CASES [--device cpu|cuda] [--reference MOD:REF]
        [--out DIR] [--junit FILE] [--dump DIR] [--only 'CASE NAME'] [--no-code] [--timing]
        [--jobs N] [--timeout S] [--nan-equal] [--zeros-equal] [--ulp DTYPE=N] [--no-farther]

Exit codes: 0 equal, 1 mismatch, 2 usage error, 3 a case errored, crashed or timed out.

Modules, by what a reader looks for:

* :mod:`portcheck.cases`: :class:`Case`, value classes, layouts, :func:`matrix`, input digests;
* :mod:`portcheck.compare`: bit comparison, :class:`Mode` (NaN, +-0, ulp budgets, no farther
  from the reference), ulp histograms;
* :mod:`portcheck.runner`: one case and a run in this process; :mod:`portcheck.isolate`: cases in
  worker processes (crashes and timeouts as rows, ``--jobs``);
* :mod:`portcheck.report`: :class:`Report` (markdown, JSON, JUnit XML), provenance, exit codes;
* :mod:`portcheck.interpret`: the CPU mode (Triton's interpreter with repairs);
* :mod:`portcheck.code`: the generated-code table (PTX/SASS for sm_90);
* :mod:`portcheck.timing`: CUDA-graph timing; :mod:`portcheck.testing`: pytest parametrisation;
  :mod:`portcheck.cli`: the command line; :mod:`portcheck.names`: ``MODULE:NAME`` resolved.
"""

from ._version import __version__
from .cases import ROW_PAD, STRIDES, VALUE_CLASSES, Case, digest, fingerprint, laid_out, matrix, name_seed, values
from .code import CLASSES, Launch, capture_launches, compile_launch, generated_code, opcode_mix
from .compare import (
    BITS,
    MAX_COORDS,
    ULP_BUCKETS,
    ULP_DTYPES,
    Mode,
    compare_outputs,
    e4m3_ulp_distance,
    ulp_distance,
    ulp_histogram,
)
from .interpret import REPAIRS, cpu_mode
from .isolate import CHUNK, Pending, pool, run_isolated, run_parallel, submit
from .names import UsageError, load_cases, resolve
from .report import EXIT_EQUAL, EXIT_ERROR, EXIT_MISMATCH, EXIT_USAGE, Report, details, provenance
from .runner import check_case, label, reproducer, run
from .testing import assert_case, pytest_cases

__all__ = [
    "BITS", "CHUNK", "CLASSES", "Case", "EXIT_EQUAL", "EXIT_ERROR", "EXIT_MISMATCH", "EXIT_USAGE", "Launch",
    "MAX_COORDS", "Mode", "Pending", "REPAIRS", "ROW_PAD", "Report", "STRIDES", "ULP_BUCKETS", "ULP_DTYPES",
    "UsageError", "VALUE_CLASSES", "assert_case", "capture_launches", "check_case", "compare_outputs",
    "compile_launch", "cpu_mode", "details", "digest", "e4m3_ulp_distance", "fingerprint", "generated_code",
    "label", "laid_out", "load_cases", "matrix", "name_seed", "opcode_mix", "pool", "provenance", "pytest_cases",
    "reproducer", "resolve", "run", "run_isolated", "run_parallel", "submit", "ulp_distance", "ulp_histogram",
    "values", "__version__",
]  # fmt: skip
