"""A smoke run of the FP8 sweep's ceiling copy timed in the same passes (``bench.bench_fp8`` with
``ceiling_configs``), on the four plain M = 49152 cases (N in {1536, 3072}, both layouts, row-major
scales), warm L2 only. Writes the rows and the run's ceilings, with provenance:

    python tools/fp8_same_pass_smoke.py OUT_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from inkling_workbook.measure import bench, fp8_bench, provenance


def main(argv: list[str]) -> int:
    bench.require_gpu()
    doc = {"provenance": provenance.collect(["tools/fp8_same_pass_smoke.py", *argv])}
    doc["clock_warmup"] = bench.warm_clocks()
    ceilings = {n: bench.stream_ceiling(49152 * n, out_dtype=torch.uint8) for n in (1536, 3072)}
    doc["ceilings"] = ceilings
    cases = [
        c
        for c in fp8_bench.fp8_cases()
        if c["M"] == 49152 and c["masked_m"] is None and not (c["column_major_scales"] or c["scale_ue8m0"])
    ]
    fp8_bench.fp8_cases = lambda: cases
    rows = bench.bench_fp8(
        {n: c["tbps"] for n, c in ceilings.items()}, cold=False, ceiling_configs=ceilings, progress=False
    )
    doc["rows"] = [r for r in rows if r["impl"] in ("fused", "fused_no_pdl")]
    Path(argv[0]).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    for r in doc["rows"]:
        start, same = r["tbps"] / r["ceiling_tbps"], r["tbps"] / r["ceiling_same_passes_tbps"]
        print(r["case"], r["impl"], r["median_us"], f"{start:.4f} {same:.4f}", r["sm_clock_min"], r["throttle_reasons"])
        print("   lowest SM clock sampled in each pass (MHz):", r["pass_clock_sampled_min_mhz"])
        print("   readings a pass:", r["pass_clock_samples"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
