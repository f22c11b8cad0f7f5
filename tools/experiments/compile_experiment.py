"""Experiment E: does torch.compile of the reference pick a different kernel in different processes?

The publishing run at 72ae121 timed ``compile_static`` at 49152x768 nil (weighted) at 69.2 us in
the full sweep and 51.5-51.6 us in two later re-measurements (fresh machines), and
``compile_dynamic_m`` the other way round; 384x1024 il (weighted) 2.18 against 1.56-1.57 us.
Suspected: inductor benchmarks a few configs of its pointwise kernel at the first call and keeps
the fastest of that quick measurement, so a fresh process (fresh inductor cache) can keep a slower
one. This script compiles the same shapes in fresh processes, each with its own empty inductor
cache, times them with the benchmark's method (CUDA-graph replay, ``bench.time_calls``, warm L2,
with the port in the same passes) and records the configs inductor kept (its ``*.best_config``
files).

    python tools/compile_experiment.py OUT_JSONL [--reps 4] [--max-autotune-reps 1]

Each process appends one JSON line (so a stopped run keeps what finished).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: (M, N, interleaved, weighted): the shapes whose compile baseline moved between runs, and one
#: large unweighted shape where it did not (a control)
SHAPES = [(49152, 768, False, True), (384, 1024, True, True), (96, 1536, True, False), (49152, 3072, False, False)]


def child(mode: str) -> dict:
    import torch

    from inkling_kernels import silu_and_mul
    from inkling_workbook.measure import bench, provenance

    bench._configure_dynamo()
    kw = {"dynamic": False}
    if mode == "max-autotune":
        kw["mode"] = "max-autotune-no-cudagraphs"
    compiled = torch.compile(bench._ref_for_static_compile, **kw)
    bench.warm_clocks(0.5)
    out = {"mode": mode, "cases": []}
    for M, N, il, weighted in SHAPES:
        x = torch.randn((M, 2 * N), device="cuda", dtype=torch.bfloat16)
        w = torch.rand(M, device="cuda") if weighted else None
        t = bench.time_calls(
            {
                "compile": lambda: compiled(x, w, il),
                "port": lambda: silu_and_mul(x, w, interleaved=il, enable_pdl=False),
            },
            passes=2,
        )
        out["cases"].append(
            {
                "M": M,
                "N": N,
                "layout": "il" if il else "nil",
                "weighted": weighted,
                **{f"{k}_median_us": round(v.median_us, 4) for k, v in t.items()},
                **{f"{k}_lo_us": round(v.lo_us, 4) for k, v in t.items()},
                **{f"{k}_hi_us": round(v.hi_us, 4) for k, v in t.items()},
            }
        )
    cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    out["best_configs"] = sorted(p.read_text() for p in cache.rglob("*.best_config"))
    out["gpu_state"] = provenance.gpu_state()
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--max-autotune-reps", type=int, default=1)
    ap.add_argument("--child", choices=["default", "max-autotune"])
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    from inkling_workbook.measure import provenance

    out = Path(args.out)
    with out.open("a") as f:
        f.write(json.dumps({"provenance": provenance.collect(["tools/compile_experiment.py", *argv])}) + "\n")
    runs = ["default"] * args.reps + ["max-autotune"] * args.max_autotune_reps
    for i, mode in enumerate(runs):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": cache + "/triton"}
            p = subprocess.run(
                [sys.executable, __file__, args.out, "--child", mode], env=env, capture_output=True, text=True
            )
        line = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else None
        rec = json.loads(line) if line else {"mode": mode, "error": p.stderr[-2000:]}
        rec["process"] = i
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        print(mode, i, [(c["M"], c["N"], c["compile_median_us"], c["port_median_us"]) for c in rec.get("cases", [])])
        print(rec.get("error", "")[-500:], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
