"""Experiment AG: the second port's prefill tile (issue 31). Does a larger tile than the one it
borrowed from ``silu_and_mul`` (about 2048 outputs a program, 8 warps) pay for a kernel whose
output is one byte an element?

The port's kernel (``inkling_workbook.ports.silu_mul_fp8.port.silu_mul_fp8_kernel``) with its column
tile kept (the widest power of two up to 1024 dividing N) and 2048, 4096, 8192 or 16384 outputs
a program at 8 warps, and 4096 at 4 warps, against the helion original with its production config
(vLLM's H100 table), at M = 2048, 8192 and 32768 rows, N = 768, 1536 and 3072, warm L2 and cold
(rotating buffer sets). All variants of a shape in the same interleaved passes
(``bench.time_calls``, 5 passes). Every variant's output is compared with the original's, bit for bit.

Writes OUT/silu_mul_fp8_tiles_<gpu>.json and .csv. GPU only; about 2-3 minutes on an H200,
most of it compiles.

Experiment AH (``--mid``): the shapes between decode and prefill where the full sweep at 442bc50
had the port slower than helion (M = 32 at N = 768 and 1536, 256 x 3072) and their neighbours,
the port's tile today against one-row tiles of 256-1024 columns at 4 and 8 warps and 2- and 4-row
tiles. Writes OUT/silu_mul_fp8_mid_tiles_<gpu>.json and .csv.

    python tools/experiments/silu_mul_fp8_tiles.py OUT [--mid]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from inkling_workbook.measure import bench, provenance
from inkling_workbook.ports.silu_mul_fp8 import bench as sweep
from inkling_workbook.ports.silu_mul_fp8 import helion as helion_side
from inkling_workbook.ports.silu_mul_fp8 import port as port_side

MS = (2048, 8192, 32768)
NS = (768, 1536, 3072)
VARIANTS = ((2048, 8), (4096, 8), (8192, 8), (16384, 8), (4096, 4))  # (outputs a program, warps)
PASSES = 5
MID_SHAPES = ((16, 768), (32, 768), (64, 768), (16, 1536), (32, 1536), (64, 1536), (256, 1536), (128, 3072),
              (256, 3072), (512, 3072))  # fmt: skip
MID_TILES = ((1, 256, 4), (1, 512, 4), (1, 1024, 4), (1, 1024, 8), (2, 256, 4), (2, 512, 4), (4, 256, 4),
             (2, 1024, 8))  # fmt: skip


def mid_configs(M: int, N: int) -> dict:
    """Today's tile and every MID_TILES tile whose columns divide N and whose rows divide M."""
    out = {"port today": port_side.launch_config(M, N)}
    for bm, bn, w in MID_TILES:
        c = port_side.LaunchConfig(bm, bn, w)
        if N % bn == 0 and M % bm == 0 and c != out["port today"]:
            out[f"port {c.label}"] = c
    return out


def config(N: int, outputs: int, warps: int) -> port_side.LaunchConfig:
    block_n = next(b for b in (1024, 512, 256, 128) if N % b == 0)
    return port_side.LaunchConfig(max(1, outputs // block_n), block_n, warps)


def time_shape(M: int, N: int, cold: bool, cfgs: dict | None = None) -> list[dict]:
    dev = torch.device("cuda")
    n_sets = bench.n_buffer_sets(sweep.nbytes(M, N), cold)
    gen = torch.Generator(device=dev).manual_seed(M * 31 + N)
    xs = [(torch.randn((M, 2 * N), generator=gen, device=dev) * 3).to(torch.bfloat16) for _ in range(n_sets)]
    scale = torch.tensor([sweep.SCALE], dtype=torch.float32, device=dev)
    if cfgs is None:
        cfgs = {f"port {o}/{w}w": config(N, o, w) for o, w in VARIANTS}
    outs = {k: [torch.empty((M, N), dtype=port_side.OUT_DTYPE, device=dev) for _ in xs] for k in ["helion", *cfgs]}
    calls = {
        "helion": [
            lambda x=x, o=o: helion_side.silu_mul_fp8_helion(x, scale, out=o) for x, o in zip(xs, outs["helion"])
        ]
    }
    for k, c in cfgs.items():
        calls[k] = [
            lambda x=x, o=o, c=c: port_side.silu_mul_fp8(x, scale, out=o, config=c) for x, o in zip(xs, outs[k])
        ]
    t0 = time.perf_counter()
    for fns in calls.values():
        fns[0]()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    for o in outs.values():
        for t in o:
            t.view(torch.uint8).fill_(0x7F)
    timed = bench.time_calls(calls, PASSES)
    torch.cuda.synchronize()
    ref = [t.view(torch.uint8) for t in outs["helion"]]
    rows = []
    for k, tm in timed.items():
        diff = sum(int((o.view(torch.uint8) != r).sum()) for o, r in zip(outs[k], ref))
        label = helion_side.config_label(M, N) if k == "helion" else cfgs[k].label
        rows.append({"M": M, "N": N, "l2": "cold" if cold else "warm", "buffer_sets": n_sets, "impl": k,
                     "config": label, "mismatches_vs_helion": diff, **tm.columns(sweep.nbytes(M, N))})  # fmt: skip
    best = min(rows, key=lambda r: r["median_us"])
    for r in rows:
        r["first_calls_s"] = round(first_s, 2)
        r["vs_helion"] = bench.verdict(r, next(x for x in rows if x["impl"] == "helion"))
        r["vs_best"] = "best" if r is best else bench.verdict(r, best)
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--mid", action="store_true", help="experiment AH: mid-size shapes, one-row and few-row tiles")
    args = p.parse_args()
    bench.require_gpu()
    t0 = time.perf_counter()
    doc = {"provenance": provenance.collect(["tools/experiments/silu_mul_fp8_tiles.py", *sys.argv[1:]])}
    doc["provenance"]["clock_warmup"] = bench.warm_clocks()
    doc["timing"] = {**bench.timing_meta(), "passes": PASSES}
    rows = []
    shapes = MID_SHAPES if args.mid else [(M, N) for M in MS for N in NS]
    for M, N in tqdm(shapes, desc="shapes"):
        for cold in (False, True):
            if cold and not bench.cold_feasible(sweep.nbytes(M, N)):
                continue
            rows += time_shape(M, N, cold, mid_configs(M, N) if args.mid else None)
            torch.cuda.empty_cache()
    doc["rows"] = rows
    doc["elapsed_s"] = round(time.perf_counter() - t0, 1)
    doc["gpu_state_after"] = provenance.gpu_state()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = provenance.device_slug()
    name = f"silu_mul_fp8_{'mid_' if args.mid else ''}tiles_{slug}"
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    bench.write_csv(rows, out / f"{name}.csv")
    for r in rows:
        print(f"{r['M']:>6} {r['N']:>5} {r['l2']:>4} {r['impl']:>16} {r['config'][:40]:>40} "
              f"{r['median_us']:9.2f} [{r['lo_us']:.2f}, {r['hi_us']:.2f}] {r['vs_helion']:>4} {r['vs_best']:>4} "
              f"diff={r['mismatches_vs_helion']}")  # fmt: skip
    print(f"elapsed {doc['elapsed_s']} s")
    return 0 if all(r["mismatches_vs_helion"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
