"""The FP8 part of the benchmark alone (``fp8_sweep.run_fp8``, as ``python -m inkling_workbook bench``
runs it: the FP8-pattern ceilings at M = 49152, then the cases), for a GPU session without the
time for the whole sweep. Writes the rows as ``bench`` does and, beside them, the JSON record with
the provenance, the timing method and the ceilings of this run (``data/fp8_bench_<gpu>.json``, the
record the plots read for the FP8 rows):

    python tools/fp8_publish.py OUT_CSV
"""

from __future__ import annotations

import sys
from pathlib import Path

from inkling_workbook.measure import fp8_sweep, provenance, timing


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    csv_path = Path(argv[0])
    timing.require_gpu()
    meta = provenance.collect(["tools/fp8_publish.py", *argv])
    meta["clock_warmup"] = timing.warm_clocks()
    meta["l2_bytes"] = timing.l2_bytes()
    meta["timing"] = timing.timing_meta()
    rows = fp8_sweep.run_fp8(meta, csv_path)
    print(f"wrote {csv_path} ({len(rows)} rows) and {provenance.companion(csv_path, 'meta')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
