"""The fused FP8 kernel's launches under Nsight Compute (experiment AA): one call of each case
below between ``cudaProfilerStart`` and ``cudaProfilerStop``, after an untimed call of each (the
compilation and the occupancy query outside the profiled range). Run under ncu, e.g.

    ncu --profile-from-start off --clock-control none --cache-control none --set full \\
        --csv --page details python3 tools/experiments/ncu_fp8.py CASES_JSON

``CASES_JSON`` gets the profiled calls, in their order (ncu's rows follow it), with provenance.
Cases (E = 8, N = 3072, gate || up, row-major scales, PDL off under the profiler):

- ``2d_2048``: 2048 rows as one 2-D call (the masked target's yardstick);
- ``masked_full``: every expert full at T = 256 (2048 rows), the work list as launched (an item's
  lookup in one reduction over packed words, ``fp8._pack_bits``), and ``masked_full_four_reductions``
  with the lookup it falls back to;
- ``masked_921`` / ``masked_921_four_reductions``: the benchmark's ragged counts (921 rows);
- ``2d_921``: those rows as one 2-D call.

The records of experiments AA and AB (``data/experiments/ncu_aa_h200.csv``, ``ncu_ab_h200.csv``)
came from this driver at a1c0c36 and 818b358, with the runs of consecutive items
(``WORK_LIST_CHUNKED``, since removed) and the packed lookup as a knob; their cases are named in
their ``ncu_*_cases.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from inkling_kernels import fp8 as fp8_mod
from inkling_kernels.fp8 import empty_scales
from inkling_workbook.measure import fp8_bench, provenance


def _four_reductions(*a):
    return {"PACK_E_BITS": 0, "PACK_CNT_BITS": 0}


def main(argv: list[str]) -> int:
    op = fp8_mod.silu_and_mul_fp8_group_quant
    E, T, N = 8, 256, 3072
    gateup = torch.randn((E, T, 2 * N), device="cuda").bfloat16()
    out = (
        torch.empty((E, T, N), dtype=torch.float8_e4m3fn, device="cuda"),
        empty_scales((E, T), N // 128, False, "cuda"),
    )
    calls = []

    def masked(counts, **knobs):
        m = torch.tensor(counts, dtype=torch.int32, device="cuda")

        def call():
            saved = {k: getattr(fp8_mod, k) for k in knobs}
            for k, v in knobs.items():
                setattr(fp8_mod, k, v)
            try:
                op(gateup, masked_m=m, out=out, interleaved=False, enable_pdl=False)
            finally:
                for k, v in saved.items():
                    setattr(fp8_mod, k, v)

        return call

    def flat(rows):
        x = torch.randn((rows, 2 * N), device="cuda").bfloat16()
        o = (
            torch.empty((rows, N), dtype=torch.float8_e4m3fn, device="cuda"),
            empty_scales((rows,), N // 128, False, "cuda"),
        )
        return lambda: op(x, out=o, interleaved=False, enable_pdl=False)

    ragged = tuple(fp8_bench.MASKED_COUNTS)
    cases = {
        "2d_2048": flat(2048),
        "masked_full": masked((T,) * E),
        "masked_full_four_reductions": masked((T,) * E, _pack_bits=_four_reductions),
        "masked_921": masked(ragged),
        "masked_921_four_reductions": masked(ragged, _pack_bits=_four_reductions),
        "2d_921": flat(sum(ragged)),
    }
    for fn in cases.values():  # compile and query occupancy outside the profiled range
        fn()
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, fn in cases.items():
        fn()
        calls.append(name)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    doc = {"provenance": provenance.collect(["tools/experiments/ncu_fp8.py", *argv]), "profiled_in_order": calls}
    Path(argv[0]).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
