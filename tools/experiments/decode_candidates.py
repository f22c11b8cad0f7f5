"""Issue 32: why the port loses to the sglang-config launch at decode, one switch at a time.

A copy of the port's kernel body (``inkling_kernels.silu_and_mul._silu_and_mul_tile``, the same
``_silu_mul``) with a constexpr switch for each thing the issue names:

* ``WAIT_AT``: 0 = where the port has the grid dependency wait (after the index and mask math,
  before the first load); 1 = right after the program id is read, before any index math (the
  public kernel's place).
* ``TRIGGER_AT``: 0 = ``gdc_launch_dependents`` after the store (the port until issue 32, and the public kernel);
  1 = right after the wait (the next kernel may launch while this one loads; its own wait still
  waits for this grid to complete and flush); 2 = no explicit trigger (implicit at exit).
* ``MASKS``: 0 = the port's static masks (``EVEN_M`` and ``EVEN_N`` remove theirs); 1 = the row
  mask always, ``EVEN_N`` switching the column mask only (the public kernel's).
* ``GRID2D``: 0 = the port's flat grid (``pid // N_TILES``, ``pid % N_TILES``); 1 = a 2-D grid
  (row tiles, column tiles), no division.
* ``W_HINT``: 0 = the port's ``evict_last`` on the per-row weights; 1 = no hint.
* the tile and warps: the port's heuristic, the sglang table's (``decode_baselines.sglang_config``)
  and fixed 1x512/4w, 1x1024/4w, 1x1024/8w, and 1x256/1w (the port's grid, 8 elements a thread).

Every variant writes the port's bits: ``tests/test_decode_candidates.py`` on the CPU (the
interpreter: tiles, masks, grid; the wait and trigger are PDL-only instructions that move no
value) and, on the GPU, this script on the timed inputs before it times them.

    python tools/experiments/decode_candidates.py --out DIR      # GPU: DIR/data/experiments/decode_candidates_<gpu>.csv
    python tools/experiments/decode_candidates.py --ptx          # CPU: where griddepcontrol sits in the PTX (sm_90)
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from inkling_kernels import _backend  # noqa: E402
from inkling_kernels._activation import _silu_mul  # noqa: E402
from inkling_kernels._backend import INT32_LIMIT  # noqa: E402
from inkling_kernels.silu_and_mul import launch_config, silu_and_mul  # noqa: E402


@triton.jit(do_not_specialize=["M"])
def _variant_kernel(
    gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, INT64: tl.constexpr, USE_PDL: tl.constexpr, INTERLEAVED: tl.constexpr,
    WAIT_AT: tl.constexpr, TRIGGER_AT: tl.constexpr, MASKS: tl.constexpr, GRID2D: tl.constexpr,
    W_HINT: tl.constexpr = 0,
):  # fmt: skip
    N_TILES: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    if GRID2D:
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
    else:
        pid = tl.program_id(0)
    if USE_PDL:
        if WAIT_AT == 1:
            tl.extra.cuda.gdc_wait()
            if TRIGGER_AT == 1:
                tl.extra.cuda.gdc_launch_dependents()
    if not GRID2D:
        pid_m = pid // N_TILES
        pid_n = pid % N_TILES
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:
        rows = rows.to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if INTERLEAVED:
        cols2 = pid_n * (2 * BLOCK_N) + tl.arange(0, 2 * BLOCK_N)
    in_mask = None
    out_mask = None
    if not EVEN_N:
        if INTERLEAVED:
            in_mask = (cols2 < 2 * N)[None, :]
        out_mask = (cols < N)[None, :]
    if MASKS == 1 or not EVEN_M:
        row_ok = (rows < M)[:, None]
        if INTERLEAVED:
            in_mask = row_ok if EVEN_N else row_ok & in_mask
        out_mask = row_ok if EVEN_N else row_ok & out_mask
    if USE_PDL:
        if WAIT_AT == 0:
            tl.extra.cuda.gdc_wait()
            if TRIGGER_AT == 1:
                tl.extra.cuda.gdc_launch_dependents()
    if INTERLEAVED:
        x = tl.load(gateup_ptr + rows[:, None] * stride_in + cols2[None, :], mask=in_mask)
        gate, up = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_N, 2)))
    else:
        g_ptrs = gateup_ptr + rows[:, None] * stride_in + cols[None, :]
        gate = tl.load(g_ptrs, mask=out_mask)
        up = tl.load(g_ptrs + N, mask=out_mask)
    y = _silu_mul(gate, up)
    if HAS_WEIGHT:
        w_mask = None
        if not EVEN_M or MASKS == 1:
            w_mask = rows < M
        if W_HINT == 0:
            w = tl.load(weight_ptr + rows, mask=w_mask, eviction_policy="evict_last")
        else:
            w = tl.load(weight_ptr + rows, mask=w_mask)
        y = y * w.to(tl.float32)[:, None]
    tl.store(out_ptr + rows[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=out_mask)
    if USE_PDL:
        if TRIGGER_AT == 0:
            tl.extra.cuda.gdc_launch_dependents()


@dataclass(frozen=True)
class Variant:
    tile: str  # "port", "sglang" or "BMxBN/Ww"
    wait_at: int = 0
    trigger_at: int = 0
    masks: int = 0
    grid2d: int = 0
    w_hint: int = 0  # 0: the port's evict_last on the per-row weights; 1: no hint


#: the candidates: one switch at a time from the port, the public kernel's whole recipe, two pairs
CANDIDATES = {
    "v_port": Variant("port"),
    "wait_top": Variant("port", wait_at=1),
    "trigger_early": Variant("port", trigger_at=1),
    "trigger_none": Variant("port", trigger_at=2),
    "rowmask": Variant("port", masks=1),
    "grid2d": Variant("port", grid2d=1),
    "tile_sglang": Variant("sglang"),
    "sglang_recipe": Variant("sglang", wait_at=1, masks=1, grid2d=1),
    "tile_1x512_4w": Variant("1x512/4w"),
    "tile_1x1024_4w": Variant("1x1024/4w"),
    "tile_1x1024_8w": Variant("1x1024/8w"),
    # the port's grid with the public tile's per-thread width (8 bf16, 128-bit loads): grid size
    # and vector width told apart
    "tile_1x256_1w": Variant("1x256/1w"),
    "tile_sglang_trigger_early": Variant("sglang", trigger_at=1),
    "wait_top_trigger_early": Variant("port", wait_at=1, trigger_at=1),
    "weight_nohint": Variant("port", w_hint=1),  # weighted shapes only
}


def candidates_for(weighted: bool) -> dict[str, Variant]:
    return {k: v for k, v in CANDIDATES.items() if weighted or v.w_hint == 0}


def tile_of(v: Variant, M: int, N: int, interleaved: bool) -> tuple[int, int, int]:
    if v.tile == "port":
        c = launch_config(M, N)
        return c.BLOCK_M, c.BLOCK_N, c.num_warps
    if v.tile == "sglang":
        from inkling_workbook.measure.decode_baselines import sglang_config

        c = sglang_config(N, interleaved)
        return c.BLOCK_M, c.BLOCK_N, c.num_warps
    m = re.fullmatch(r"(\d+)x(\d+)/(\d+)w", v.tile)
    return int(m[1]), int(m[2]), int(m[3])


def run_variant(v: Variant, x, w, interleaved: bool, pdl: bool, out=None):
    M, N = x.shape[0], x.shape[1] // 2
    bm, bn, warps = tile_of(v, M, N, interleaved)
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    compiled = not _backend.uses_interpreter(x.device)
    pdl = pdl and compiled
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn)) if v.grid2d else (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    extra = {"launch_pdl": pdl} if compiled else {}
    int64 = max(M * x.stride(0), M * out.stride(0)) >= INT32_LIMIT
    _backend.launch(
        _variant_kernel, grid, x.device, x, w if w is not None else x, out, M, x.stride(0), out.stride(0),
        N=N, BLOCK_M=bm, BLOCK_N=bn, EVEN_M=M % bm == 0, EVEN_N=N % bn == 0, HAS_WEIGHT=w is not None,
        INT64=int64, USE_PDL=pdl, INTERLEAVED=interleaved, WAIT_AT=v.wait_at, TRIGGER_AT=v.trigger_at,
        MASKS=v.masks, GRID2D=v.grid2d, W_HINT=v.w_hint, num_warps=warps, **extra,
    )  # fmt: skip
    return out


# ---- PTX (CPU, no GPU): where griddepcontrol sits -------------------------------------------


def _compile(kernel, consts: dict, ptrs: dict, warps: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in kernel.arg_names}
    # what a launch specializes: 16-byte pointers and strides divisible by 16 (M is not specialized)
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 4, 5)}
    src = ASTSource(kernel, sig, consts, attrs)
    return triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, **_backend.COMPILE_OPTIONS}
    )


def positions(compiled) -> dict:
    """:func:`ptx_positions` of the PTX and the same for the SASS (opcodes up to the first EXIT)."""
    out = {"ptx": ptx_positions(compiled.asm["ptx"])}
    try:
        from portcheck.code import sass_opcodes

        ops = sass_opcodes(compiled)
    except Exception as e:  # no cuobjdump in this Triton: PTX only
        out["sass_error"] = f"{type(e).__name__}: {e}"
        return out

    def first(pred):
        return next((i for i, op in enumerate(ops) if pred(op)), None)

    # griddepcontrol.wait is ACQBULK on sm_90, launch_dependents PREEXIT
    out["sass"] = {
        "to_exit": len(ops),
        "wait_index": first(lambda op: op.startswith("ACQBULK")),
        "trigger_index": first(lambda op: op.startswith("PREEXIT")),
        "first_global_load": first(lambda op: op.startswith("LDG")),
        "first_global_store": first(lambda op: op.startswith("STG")),
    }
    out["sass"]["memory_and_sync_ops"] = {
        op: ops.count(op) for op in sorted(set(ops)) if op.startswith(("LDG", "STG", "BAR", "SHFL", "LDS", "STS"))
    }
    w = out["sass"]["wait_index"]
    if w is not None:
        out["sass"]["ops_before_wait"] = " ".join(ops[:w])
    out["_sass_ops"] = ops
    return out


def ptx_positions(ptx: str) -> dict:
    """Instruction lines (PTX body, no labels/directives) and where ``griddepcontrol.wait`` and
    ``.launch_dependents`` sit: index of the line, instructions before it, how many of those are
    integer/address arithmetic, and the first global load's and store's index."""
    body = [ln.strip() for ln in ptx.splitlines()]
    ins = [ln for ln in body if re.match(r"^(@%p\d+\s+)?[a-z]", ln) and not ln.startswith((".", "//"))]

    def first(pat):
        return next((i for i, ln in enumerate(ins) if re.search(pat, ln)), None)

    wait, trig = first(r"griddepcontrol\.wait"), first(r"griddepcontrol\.launch_dependents")
    ld, st = first(r"ld\.global"), first(r"st\.global")
    arith = r"^(@%p\d+\s+)?(mul|mad|add|sub|shl|shr|and|or|setp|selp|cvt|div|rem|mov\.u32\s+%r\d+,\s*%ctaid)"
    return {
        "instructions": len(ins),
        "wait_index": wait,
        "trigger_index": trig,
        "first_global_load": ld,
        "first_global_store": st,
        "int_arith_before_wait": None if wait is None else sum(bool(re.match(arith, x)) for x in ins[:wait]),
        "ctaid_reads_before_wait": None if wait is None else sum("%ctaid" in x for x in ins[:wait]),
    }


def ptx_report() -> dict:
    """The port's kernel, the variant with each wait position, and the sglang-config baseline,
    compiled for sm_90 at M=1 N=768 gate||up and M=1 N=768 interleaved, PDL on."""
    from inkling_kernels.silu_and_mul import silu_and_mul_interleaved_kernel, silu_and_mul_non_interleaved_kernel
    from inkling_workbook.measure.decode_baselines import _sglang_config_kernel, sglang_config

    ptrs = {"gateup_ptr": "*bf16", "weight_ptr": "*bf16", "out_ptr": "*bf16"}
    report = {}
    for il in (False, True):
        N = 768
        c = launch_config(1, N)
        base = dict(N=N, BLOCK_M=1, BLOCK_N=c.BLOCK_N, EVEN_M=True, EVEN_N=N % c.BLOCK_N == 0, HAS_WEIGHT=False)
        base.update(INT64=False, USE_PDL=True)
        lay = "il" if il else "nil"
        port_k = silu_and_mul_interleaved_kernel if il else silu_and_mul_non_interleaved_kernel
        report[f"port {lay} 1x{c.BLOCK_N}"] = positions(
            _compile(port_k, {**base, "STREAM_POLICY": ""}, ptrs, c.num_warps)
        )
        for wait_at, trigger_at in ((0, 0), (1, 0), (0, 1)):
            consts = {**base, "INTERLEAVED": il, "WAIT_AT": wait_at, "TRIGGER_AT": trigger_at, "MASKS": 0}
            name = f"variant {lay} 1x{c.BLOCK_N} WAIT_AT={wait_at}" + (
                f" TRIGGER_AT={trigger_at}" if trigger_at else ""
            )
            report[name] = positions(_compile(_variant_kernel, {**consts, "GRID2D": 0}, ptrs, c.num_warps))
        s = sglang_config(N, il)
        consts = dict(N=N, BLOCK_M=s.BLOCK_M, BLOCK_N=s.BLOCK_N, EVEN_N=N % s.BLOCK_N == 0, HAS_WEIGHT=False)
        consts.update(INTERLEAVED=il, USE_PDL=True)
        report[f"sglang-config {lay} {s.label}"] = positions(_compile(_sglang_config_kernel, consts, ptrs, s.num_warps))
        a, b = (report[f"variant {lay} 1x{c.BLOCK_N} WAIT_AT={k}"].get("_sass_ops") for k in (0, 1))
        report[f"{lay}: SASS of WAIT_AT=0 and WAIT_AT=1 identical"] = a is not None and a == b
    for v in report.values():
        if isinstance(v, dict):
            v.pop("_sass_ops", None)
    return report


# ---- GPU timing ----------------------------------------------------------------------------

#: (M, N, interleaved, weighted): issue 32's seven losing rows, then three interleaved decode
#: shapes the port wins (not to regress them)
SHAPES = [
    (1, 768, False, False), (1, 1536, False, False), (1, 3072, False, False), (4, 768, False, False),
    (16, 768, False, False), (96, 1536, True, False), (384, 1024, True, True),
    (1, 768, True, False), (4, 1536, True, False), (16, 3072, True, False),
]  # fmt: skip
DEVICE = "cuda"  # the timing device (a CPU smoke test of the whole path sets "cpu")
TOP_NO_PDL = 4
SWITCHES = (
    "wait_at",
    "trigger_at",
    "masks",
    "grid2d",
    "w_hint",
)  # fastest candidates per shape (PDL on) timed again without PDL, beside the port's


def _label(M, N, il, wt):
    return f"M={M} N={N} {'il' if il else 'nil'}{' +w' if wt else ''}"


def time_gpu(out_dir: Path, budget_s: float = 210.0) -> Path:
    from tqdm.auto import tqdm

    from inkling_workbook.measure import bench, provenance, timing
    from inkling_workbook.measure.decode_baselines import empty_pdl_call, silu_and_mul_sglang_config

    timing.require_gpu()
    t0 = time.perf_counter()
    meta = provenance.collect()
    meta["clock_warmup"] = timing.warm_clocks()
    meta["timing"] = {**timing.timing_meta(), "passes": timing.DECODE_PASSES, "l2": "warm"}
    meta["candidates"] = {k: vars(v) for k, v in CANDIDATES.items()}
    meta["switches"] = __doc__.split("\n\n")[1]
    try:  # where this machine's Triton and ptxas put the wait and the trigger (compile only, ~5 s)
        meta["ptx_sass_positions"] = ptx_report()
    except Exception as e:
        meta["ptx_sass_positions"] = f"{type(e).__name__}: {e}"
    rows, skipped = [], []
    for M, N, il, wt in tqdm(SHAPES, desc="shapes"):
        if time.perf_counter() - t0 > budget_s:
            skipped.append(_label(M, N, il, wt))
            continue
        torch.manual_seed(M * 7919 + N)
        x = torch.randn((M, 2 * N), device=DEVICE, dtype=torch.bfloat16) * 4
        w = torch.rand(M, device=DEVICE) if wt else None
        want = silu_and_mul(x, w, interleaved=il)
        bits = {}
        cands = candidates_for(wt)
        for name, v in cands.items():
            got = torch.full_like(want, float("nan"))
            run_variant(v, x, w, il, True, out=got)
            bits[name] = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
        got = silu_and_mul_sglang_config(x, w, interleaved=il, enable_pdl=True)
        bits["sglang_config_pdl"] = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
        e = torch.empty(1, device=DEVICE)
        calls = {"package_pdl": lambda x=x, w=w: silu_and_mul(x, w, interleaved=il, enable_pdl=True)}
        calls["sglang_config_pdl"] = lambda x=x, w=w: silu_and_mul_sglang_config(x, w, interleaved=il, enable_pdl=True)
        calls["empty_pdl"] = lambda: empty_pdl_call(e)
        for name, v in cands.items():
            calls[name] = lambda v=v, x=x, w=w: run_variant(v, x, w, il, True)
        timings = timing.time_calls(calls, timing.DECODE_PASSES)
        ranked = sorted(cands, key=lambda k: timings[k].median_us)[:TOP_NO_PDL]
        off = {"package": lambda x=x, w=w: silu_and_mul(x, w, interleaved=il, enable_pdl=False)}
        for name in ranked:
            off[f"{name}__nopdl"] = lambda v=CANDIDATES[name], x=x, w=w: run_variant(v, x, w, il, False)
            got = run_variant(CANDIDATES[name], x, w, il, False, out=torch.full_like(want, float("nan")))
            bits[f"{name}__nopdl"] = bool(torch.equal(got.view(torch.int16), want.view(torch.int16)))
        timings |= timing.time_calls(off, timing.DECODE_PASSES)
        floor, port = timings["empty_pdl"].median_us, timings["package_pdl"]
        for name, t in timings.items():
            base = name.removesuffix("__nopdl")
            v = CANDIDATES.get(base)
            tv = v or (CANDIDATES["v_port"] if base.startswith("package") else None)
            tile = "{}x{}/{}w".format(*tile_of(tv, M, N, il)) if tv else ""
            per_pass = [statistics.median(t.samples[i : i + t.rounds]) for i in range(0, len(t.samples), t.rounds)]
            rows.append(
                {
                    "M": M, "N": N, "layout": "il" if il else "nil", "weighted": wt,
                    "candidate": base, "pdl": not name.endswith("__nopdl") and name != "package",
                    "tile": tile, **({k: getattr(v, k) for k in SWITCHES} if v else {}),
                    **t.columns(bench.silu_bytes(M, N, wt) if not name.startswith("empty") else 0, 4),
                    "median_of_pass_medians_us": round(statistics.median(per_pass), 4),
                    "pass_medians_us": " ".join(f"{p:.4f}" for p in per_pass),
                    "above_empty_pdl_us": round(t.median_us - floor, 4),
                    "vs_package_pdl": round(port.median_us / t.median_us, 4),
                    "ties_package_pdl": timing.ties(t.lo_us, t.hi_us, port.lo_us, port.hi_us),
                    "bits_equal_package": bits.get(name, bits.get(base, "")),
                }
            )  # fmt: skip
        del x, w, want, got
    meta["skipped_for_time"] = skipped
    meta["bits_equal_all"] = all(r["bits_equal_package"] for r in rows if r["bits_equal_package"] != "")
    meta["seconds"] = round(time.perf_counter() - t0, 1)
    meta["gpu_state_after"] = provenance.gpu_state()
    path = Path(out_dir) / "data" / "experiments" / f"decode_candidates_{provenance.device_slug()}.csv"
    timing.write_csv(rows, path)
    provenance.write_record(path.with_suffix(".json"), json.dumps(meta, indent=1) + "\n")
    _print_table(rows)
    print(f"wrote {path} and {path.with_suffix('.json')} in {meta['seconds']} s; bits equal: {meta['bits_equal_all']}")
    return path


def _print_table(rows):
    shapes = list(dict.fromkeys((r["M"], r["N"], r["layout"], r["weighted"]) for r in rows))
    for s in shapes:
        rs = sorted(
            (r for r in rows if (r["M"], r["N"], r["layout"], r["weighted"]) == s), key=lambda r: r["median_us"]
        )
        print(_label(*[s[0], s[1], s[2] == "il", s[3]]))
        for r in rs:
            print(
                f"  {r['candidate']:28s} pdl={int(r['pdl'])} {r['tile']:10s} {r['median_us']:.4f} "
                f"[{r['lo_us']:.4f}, {r['hi_us']:.4f}] +{r['above_empty_pdl_us']:.3f} over empty "
                f"bits={r['bits_equal_package']}"
            )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="GPU: write OUT/data/experiments/decode_candidates_<gpu>.csv (+ .json)")
    p.add_argument("--ptx", action="store_true", help="CPU: print where griddepcontrol sits in the sm_90 PTX")
    p.add_argument("--budget-s", type=float, default=210.0, help="stop starting new shapes after this many seconds")
    args = p.parse_args(argv)
    if args.ptx:
        print(json.dumps(ptx_report(), indent=1))
    if args.out:
        time_gpu(Path(args.out), args.budget_s)
    if not (args.ptx or args.out):
        p.error("give --out DIR (GPU) or --ptx (CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
