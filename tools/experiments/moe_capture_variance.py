"""Experiment: is the MoE layer's fused-vs-unfused gap at decode larger than the spread between
captures of the same variant? And does the fused op's PDL launch change it?

The published timing captures each layer variant once and replays that graph over interleaved
passes: the spread is pass-to-pass, not capture-to-capture. Here each of fp8_fused,
fp8_unfused and fp8_fused without PDL is captured CAPTURES times (fresh graphs, fresh
allocations), and every graph is timed in the same interleaved passes. Writes
OUT/moe_capture_variance_<gpu>.json. GPU only; ~1-2 minutes on an H200.

    python tools/experiments/moe_capture_variance.py OUT [--ms 16,256]
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import torch
from tqdm import tqdm

from inkling_workbook.measure import provenance, timing
from inkling_workbook.moe import layer as ml

CAPTURES = 3


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--ms", default="16,256")
    args = p.parse_args()
    timing.require_gpu()
    layer = ml.make_layer(**ml.GPU_SHAPE, device="cuda", seed=0)
    doc = {"provenance": provenance.collect(), "shape": ml.GPU_SHAPE, "captures": CAPTURES, "rows": []}
    fused = ml.silu_and_mul_fp8_group_quant
    for M in tqdm([int(m) for m in args.ms.split(",")], desc="M"):
        for layout in ml.LAYOUTS:
            x = ml.make_tokens(M, layer.H, "cuda", seed=M)
            ids, w = ml.route(x, layer)
            plan = ml.make_plan(ids, layer.E)
            timers = {}
            for name, variant, pdl in (("fp8_fused", "fp8_fused", None), ("fp8_unfused", "fp8_unfused", None),
                                       ("fp8_fused_no_pdl", "fp8_fused", False)):  # fmt: skip
                ml.silu_and_mul_fp8_group_quant = fused if pdl is None else functools.partial(fused, enable_pdl=pdl)
                try:
                    for c in range(CAPTURES):

                        def call(v=variant, x=x, layout=layout, plan=plan):
                            ids_, w_ = ml.route(x, layer)
                            return ml.experts(x, ids_, w_, layer, plan, layout, v)

                        timers[f"{name}#{c}"] = timing.GraphTimer([call])
                finally:
                    ml.silu_and_mul_fp8_group_quant = fused
            t = timing.time_interleaved(timers, 5)
            for key, tm in t.items():
                name, c = key.split("#")
                doc["rows"].append({"M": M, "layout": layout, "variant": name, "capture": int(c), **tm.columns(0, 3)})
            for tm in timers.values():
                tm.close()
            torch.cuda.empty_cache()
    out = Path(args.out) / f"moe_capture_variance_{provenance.device_slug()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for r in doc["rows"]:
        print(r["M"], r["layout"], r["variant"], r["capture"], r["median_us"], r["lo_us"], r["hi_us"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
