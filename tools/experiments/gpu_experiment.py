"""One-off GPU experiments, written before they ran (predictions in data/tuning_log.md), recorded
with provenance under data/experiments/.

    python tools/gpu_experiment.py OUT_DIR [pdl] [host] [bench]

* ``pdl``: a same-order interleaved kernel (1 row x 256 columns, 4 warps) with and without
  programmatic dependent launch (``gdc_wait`` before the first load, ``gdc_launch_dependents``
  after the store, launched with ``launch_pdl=True``), back to back in one graph; bitwise check.
* ``host``: host microseconds per call of a bare ``kernel[grid](...)`` launch, the public
  ``silu_and_mul(out=)``, and the same through ``torch.library.custom_op`` and through
  ``Library.define/impl``.
* ``bench``: the quick sweep of the new timing method (``inkling_workbook.measure.bench``), timed.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from inkling_kernels import silu_and_mul
from inkling_kernels.reference import bits_equal
from inkling_kernels.silu_and_mul import _silu_mul
from inkling_workbook.measure import bench, provenance


@triton.jit
def _pdl_probe_kernel(x_ptr, out_ptr, N: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr):
    N_TILES: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    pid = tl.program_id(0)
    row = pid // N_TILES
    cols = (pid % N_TILES) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols2 = (pid % N_TILES) * (2 * BLOCK_N) + tl.arange(0, 2 * BLOCK_N)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    x = tl.load(x_ptr + row * (2 * N) + cols2)
    gate, up = tl.split(tl.reshape(x, (BLOCK_N, 2)))
    tl.store(out_ptr + row * N + cols, _silu_mul(gate, up).to(out_ptr.dtype.element_ty))
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


def pdl() -> list[dict]:
    rows = []
    for M in (1, 4, 16):
        for N in (768, 3072):
            x = torch.randn((M, 2 * N), device="cuda", dtype=torch.bfloat16)
            outs = {}
            timers = {}
            for use in (False, True):
                out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                grid = (M * (N // 256),)

                def call(use=use, out=out, grid=grid):
                    _pdl_probe_kernel[grid](x, out, N=N, BLOCK_N=256, USE_PDL=use, launch_pdl=use, num_warps=4)

                call()
                torch.cuda.synchronize()
                outs[use] = out.clone()
                timers["pdl" if use else "no_pdl"] = bench.GraphTimer([call])
            port = silu_and_mul(x)
            timers["port"] = bench.GraphTimer([lambda: silu_and_mul(x)])
            t = bench.time_interleaved(timers, 3)
            rows.append(
                {
                    "M": M,
                    "N": N,
                    **{f"{k}_us": round(v.median_us, 4) for k, v in t.items()},
                    **{f"{k}_lo_hi": [round(v.lo_us, 4), round(v.hi_us, 4)] for k, v in t.items()},
                    "reps": {k: v.reps for k, v in t.items()},
                    "bitwise_pdl_eq_no_pdl": bits_equal(outs[True], outs[False]),
                    "bitwise_eq_port": bits_equal(outs[True], port),
                }
            )
            print(rows[-1], flush=True)
    return rows


def _host_us(fn, calls: int = 2000, repeats: int = 7) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return round(statistics.median(per), 2)


def host() -> dict:
    from torch.library import Library

    from inkling_kernels.silu_and_mul import launch_config, silu_and_mul_interleaved_kernel

    M, N = 4, 1536
    x = torch.randn((M, 2 * N), device="cuda", dtype=torch.bfloat16)
    out = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    cfg = launch_config(M, N)
    grid = cfg.grid(M, N)

    def bare():
        silu_and_mul_interleaved_kernel[grid](
            x, x, out, M, 2 * N, N, N=N, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, EVEN_M=True, EVEN_N=True,
            HAS_WEIGHT=False, INT64=False, STREAM_POLICY="", num_warps=cfg.num_warps,
        )  # fmt: skip

    @torch.library.custom_op("inkling_probe::silu_custom_op", mutates_args=("out",))
    def via_custom_op(x: torch.Tensor, out: torch.Tensor) -> None:
        silu_and_mul(x, out=out)

    lib = Library("inkling_probe2", "FRAGMENT")
    lib.define("silu_lib(Tensor x, Tensor(a!) out) -> ()")

    def silu_lib(x, out):
        silu_and_mul(x, out=out)

    lib.impl("silu_lib", silu_lib, "CUDA")
    op = torch.ops.inkling_probe2.silu_lib.default
    res = {
        "bare_launch_us": _host_us(bare),
        "silu_and_mul_out_us": _host_us(lambda: silu_and_mul(x, out=out)),
        "custom_op_us": _host_us(lambda: via_custom_op(x, out)),
        "library_define_impl_us": _host_us(lambda: op(x, out)),
        "empty_python_call_us": _host_us(lambda: None),
    }
    print(res, flush=True)
    return res


def run_bench(out_dir: Path) -> dict:
    t0 = time.time()
    meta = bench.run(out_dir / "bench_quick_a.csv", quick=True, cold=True, tune=False, command="gpu_experiment bench")
    return {"seconds": round(time.time() - t0, 1), "method_check": meta["method_check"]}


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    which = argv[1:] or ["pdl", "host", "bench"]
    doc = {"provenance": provenance.collect(["tools/gpu_experiment.py", *argv])}
    doc["clock_warmup"] = bench.warm_clocks()
    for name in which:
        t0 = time.time()
        try:
            doc[name] = {"pdl": pdl, "host": host}[name]() if name != "bench" else run_bench(out_dir)
        except Exception as exc:  # record and go on: one failed experiment must not lose the others
            doc[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(name, "FAILED", doc[name], flush=True)
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)
        (out_dir / "experiment.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
