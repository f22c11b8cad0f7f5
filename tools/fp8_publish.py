"""The FP8 part of the benchmark alone (``bench.run_fp8``, as ``python -m inkling_workbook bench``
runs it: the FP8-pattern ceilings at M = 49152, then the cases), for a GPU
session without the time for the whole sweep. Writes the rows as ``bench`` does and a JSON with
the provenance, the timing method and the ceilings of this run (the plots read it in place of
the sweep's record when it sits beside the FP8 CSV, ``data/fp8_bench_<gpu>.json``):

    python tools/fp8_publish.py OUT_CSV OUT_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from inkling_workbook import bench, provenance

#: where the FP8 sweep's method differs from the silu sweep's (``bench.bench_fp8``)
FP8_TIMING = {
    "decode_passes": bench.OTHER_PASSES,  # every FP8 case, M = 16 included
    "output_policy": "fused and unfused write into preallocated outputs; torch.compile allocates its own",
    "pdl": "fused and unfused launch with PDL (the package default on sm_90); torch.compile and the "
    "ceiling kernel do not",
    "l2": "warm only: at M = 1024 the working set fits in L2, at M = 8192 part of it can",
}


def main(argv: list[str]) -> int:
    csv_path, json_path = Path(argv[0]), Path(argv[1])
    bench.require_gpu()
    meta = provenance.collect(["tools/fp8_publish.py", *argv])
    meta["clock_warmup"] = bench.warm_clocks()
    meta["timing"] = {**bench.timing_meta(), **FP8_TIMING}
    rows = bench.run_fp8(meta, csv_path)
    json_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {csv_path} ({len(rows)} rows) and {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
