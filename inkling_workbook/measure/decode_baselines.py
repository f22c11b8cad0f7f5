"""Decode and mid sizes against the best public configuration for this op, and the launch floor
(issue 32).

* ``sglang-config (ours)``: a Triton ``silu_and_mul`` written here, with the published launch
  configuration of the public tuned Triton kernel for this op (sglang PR #33224, "drop the Helion
  dependency, tune the Triton silu_and_mul") as issue 32 describes it: one kernel for both
  layouts, one tile a program, an ``EVEN_N`` switch (the row mask is always there), the grid
  dependency wait right after the program ids are read (before any index math) and the trigger
  for dependents after the store. Its H200 table (:func:`sglang_config`): gate||up N = 768 ->
  2 x 1024 tiles, 8 warps; N = 1024 -> 1 x 1024, 4 warps; any other N (the default rule) ->
  4 x 512, 8 warps. Interleaved N = 768 -> 16 x 128, 8 warps; N = 1024 and 2048 -> 1 x 1024,
  4 warps; the table lists no other interleaved width and no default rule for them is known to
  us, so other interleaved N take the nearest listed width's entry (N = 1536 and 3072: 1 x 1024,
  4 warps, whichever neighbour is taken). The body is ours, not theirs: the arithmetic is the
  package's ``_silu_mul`` in its one operation order (the per-row weight multiplied last in
  fp32, one rounding at the store), so it writes the port's bits (``tests/test_decode_baselines.py``).
* The floor: an empty kernel launched with PDL (its body only the grid dependency wait and the
  trigger, what every PDL kernel must do) and an empty kernel without, timed in the same
  back-to-back graph replay as the real calls: how far each call is from launch cost.

:func:`run` times every decode (M <= 16) and mid shape of ``bench.shapes()`` (plus 6144 x 768
gate||up with weights, a row of the issue's table) with the sweep's method and writes
``DIR/data/decode_<gpu>.csv`` and ``.json`` (``python -m inkling_workbook decode --out DIR``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from inkling_kernels import _backend
from inkling_kernels._activation import _silu_mul
from inkling_kernels.silu_and_mul import launch_config, silu_and_mul
from inkling_workbook.measure import anchors, pairing, provenance, timing
from inkling_workbook.measure.pairing import Column

SGLANG_NAME = "sglang-config (ours)"


@dataclass(frozen=True)
class TileConfig:
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    rule: str  # where the entry comes from, in words

    @property
    def label(self) -> str:
        return f"{self.BLOCK_M}x{self.BLOCK_N}/{self.num_warps}w"


#: the published H200 table as issue 32 reads it: (interleaved, N) -> (BLOCK_M, BLOCK_N, warps)
SGLANG_TABLE = {
    (False, 768): (2, 1024, 8),
    (False, 1024): (1, 1024, 4),
    (True, 768): (16, 128, 8),
    (True, 1024): (1, 1024, 4),
    (True, 2048): (1, 1024, 4),
}
SGLANG_DEFAULT_GATE_UP = (4, 512, 8)  # its default rule (seen at N = 1536 and 3072)


def sglang_config(N: int, interleaved: bool) -> TileConfig:
    """The tile of the public kernel's published H200 configuration for width ``N`` (see the
    module docstring): a table entry, the gate||up default rule, or for an interleaved width the
    table does not list, the nearest listed width's entry (the smaller on a tie)."""
    if (interleaved, N) in SGLANG_TABLE:
        return TileConfig(*SGLANG_TABLE[(interleaved, N)], "table")
    if not interleaved:
        return TileConfig(*SGLANG_DEFAULT_GATE_UP, "default rule")
    listed = sorted(n for il, n in SGLANG_TABLE if il)
    near = min(listed, key=lambda n: (abs(n - N), n))
    return TileConfig(*SGLANG_TABLE[(True, near)], f"not listed: nearest listed N={near}")


@triton.jit(do_not_specialize=["M"])  # as the port: one compilation per N, not per batch size
def _sglang_config_kernel(
    gateup_ptr, weight_ptr, out_ptr, M, stride_in, stride_out,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr,
    HAS_WEIGHT: tl.constexpr, INTERLEAVED: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    """One ``[BLOCK_M, BLOCK_N]`` output tile a program, grid (row tiles, column tiles)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # before any index math
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    rows64 = rows.to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if EVEN_N:
        mask = row_ok[:, None]
    else:
        mask = row_ok[:, None] & (cols < N)[None, :]
    if INTERLEAVED:
        cols2 = pid_n * (2 * BLOCK_N) + tl.arange(0, 2 * BLOCK_N)
        if EVEN_N:
            in_mask = row_ok[:, None]
        else:
            in_mask = row_ok[:, None] & (cols2 < 2 * N)[None, :]
        x = tl.load(gateup_ptr + rows64[:, None] * stride_in + cols2[None, :], mask=in_mask)
        gate, up = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_N, 2)))
    else:
        g_ptrs = gateup_ptr + rows64[:, None] * stride_in + cols[None, :]
        gate = tl.load(g_ptrs, mask=mask)
        up = tl.load(g_ptrs + N, mask=mask)
    y = _silu_mul(gate, up)
    if HAS_WEIGHT:
        w = tl.load(weight_ptr + rows64, mask=row_ok)
        y = y * w.to(tl.float32)[:, None]
    tl.store(out_ptr + rows64[:, None] * stride_out + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()  # after the store


def silu_and_mul_sglang_config(
    gateup: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    *,
    interleaved: bool,
    enable_pdl: bool = False,
    out: torch.Tensor | None = None,
    config: TileConfig | None = None,
) -> torch.Tensor:
    """``silu(gate) * up [* w]`` with the public kernel's configuration (:func:`sglang_config`);
    the port's bits. ``gateup`` ``[M, 2N]`` with unit stride within a row (CUDA: compiled; CPU:
    the Triton interpreter, where PDL is off). Allocates ``out`` unless given."""
    if not isinstance(gateup, torch.Tensor) or gateup.ndim != 2 or gateup.shape[1] % 2:
        raise ValueError("gateup must be a [M, 2N] tensor")
    if gateup.stride(1) != 1:
        raise ValueError("gateup must have unit stride within a row")
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {type(interleaved).__name__}")
    M, N = gateup.shape[0], gateup.shape[1] // 2
    if topk_weights is not None and (topk_weights.ndim != 1 or topk_weights.shape[0] != M):
        raise ValueError(f"topk_weights must have shape ({M},)")
    if out is None:
        out = torch.empty((M, N), dtype=gateup.dtype, device=gateup.device)
    if M == 0:
        return out
    cfg = config or sglang_config(N, interleaved)
    w = topk_weights.contiguous() if topk_weights is not None else gateup
    pdl = bool(enable_pdl) and not _backend.uses_interpreter(gateup.device)
    grid = (triton.cdiv(M, cfg.BLOCK_M), triton.cdiv(N, cfg.BLOCK_N))
    extra = {"launch_pdl": pdl} if gateup.is_cuda and not _backend.uses_interpreter(gateup.device) else {}
    _backend.launch(
        _sglang_config_kernel, grid, gateup.device, gateup, w, out, M, gateup.stride(0), out.stride(0),
        N=N, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, EVEN_N=N % cfg.BLOCK_N == 0,
        HAS_WEIGHT=topk_weights is not None, INTERLEAVED=interleaved, USE_PDL=pdl, num_warps=cfg.num_warps, **extra,
    )  # fmt: skip
    return out


# ---- the floor -----------------------------------------------------------------------------


@triton.jit
def _empty_pdl_kernel(x_ptr):
    """What an empty kernel launched with PDL must do: wait on the grid dependency, then trigger."""
    tl.extra.cuda.gdc_wait()
    tl.extra.cuda.gdc_launch_dependents()


def empty_pdl_call(x: torch.Tensor):
    return _empty_pdl_kernel[(1,)](x, launch_pdl=True, **_backend.COMPILE_OPTIONS)


def empty_call(x: torch.Tensor):
    from inkling_workbook.measure.timing import _empty_kernel

    return _empty_kernel[(1,)](x, **_backend.COMPILE_OPTIONS)


# ---- the sweep -----------------------------------------------------------------------------

MID_MAX_M = 1024
#: rows of issue 32's table that the sweep's own decode/mid selection does not hold
EXTRA_SHAPES = ((6144, 768, False, True),)

IMPLS = {
    "port_pdl": "the Triton port, launch_config heuristic, PDL on",
    "port": "the Triton port, launch_config heuristic, PDL off",
    "sglang_config_pdl": f"{SGLANG_NAME}: the public kernel's published H200 configuration, our body, PDL on",
    "sglang_config": f"{SGLANG_NAME}, PDL off",
    "empty_pdl": "empty kernel (grid dependency wait + trigger), launched with PDL: the floor",
    "empty": "empty kernel, no PDL",
    **{k: c.label for k, c in pairing.SILU_ANCHOR_COLUMNS.items()},
}
_SG = "silu_and_mul with sglang's published H200 configuration, our body"
#: every column as :mod:`~inkling_workbook.measure.pairing` reads it: the baselines with PDL are
#: paired with "port_pdl", those without with "port"
COLUMNS: dict[str, Column] = {
    "port_pdl": Column("port_pdl", "inkling", "", "silu_and_mul", "the port, launch_config heuristic", True, "port"),
    "port": Column("port", "inkling", "", "silu_and_mul", "the port, launch_config heuristic", False, "port"),
    "sglang_config_pdl": Column("sglang_config_pdl", "inkling", "", SGLANG_NAME, _SG, True, "baseline"),
    "sglang_config": Column("sglang_config", "inkling", "", SGLANG_NAME, _SG, False, "baseline"),
    "empty_pdl": Column("empty_pdl", "inkling", "", "empty kernel", "grid dependency wait + trigger: the floor",
                        True, "floor"),
    "empty": Column("empty", "inkling", "", "empty kernel", "the floor without PDL", False, "floor"),
    **pairing.SILU_ANCHOR_COLUMNS,
}  # fmt: skip


def decode_shapes():
    """The decode (M <= 16) and mid (16 < M <= 1024) shapes of ``bench.shapes()``, then
    :data:`EXTRA_SHAPES`."""
    from inkling_workbook.measure import bench

    out = [s for s in bench.shapes() if s.M <= MID_MAX_M]
    keys = {(s.M, s.N, s.interleaved, s.weighted) for s in out}
    out += [bench.Shape(*k, "issue32") for k in EXTRA_SHAPES if k not in keys]
    return out


def _shape_calls(shape, x, w, skipped: dict | None = None):
    """name -> call of every column that runs ``shape`` (an anchor that does not goes into
    ``skipped`` with its reason)."""
    from inkling_workbook.measure import bench

    il = shape.interleaved
    e = torch.empty(1, device=x.device)
    extra = bench.anchor_implementations(shape, COLUMNS, device=x.device, skipped=skipped)
    return {
        "port_pdl": lambda: silu_and_mul(x, w, interleaved=il, enable_pdl=True),
        "port": lambda: silu_and_mul(x, w, interleaved=il, enable_pdl=False),
        "sglang_config_pdl": lambda: silu_and_mul_sglang_config(x, w, interleaved=il, enable_pdl=True),
        "sglang_config": lambda: silu_and_mul_sglang_config(x, w, interleaved=il, enable_pdl=False),
        "empty_pdl": lambda: empty_pdl_call(e),
        "empty": lambda: empty_call(e),
        **{k: (lambda fn=fn: fn(x, w)) for k, (fn, _) in extra.items()},
    }


def port_config_label(M: int, N: int) -> str:
    cfg = launch_config(M, N)
    return f"{cfg.BLOCK_M}x{cfg.BLOCK_N}/{cfg.num_warps}w"


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.int16), b.view(torch.int16))


def bench_decode(
    progress: bool = True, budget_s: float | None = None, skipped: list | None = None,
    anchor_skipped: list | None = None,
) -> list[dict]:  # fmt: skip
    """Every shape of :func:`decode_shapes`; past ``budget_s`` seconds no new shape is started
    (its label goes to ``skipped``). The anchors run beside the others where they support the
    shape (else ``anchor_skipped`` gets the reason); every anchor's bits are compared with the
    port's before timing, and each baseline carries the speedup of its paired port
    (:mod:`pairing`)."""
    import time

    from tqdm.auto import tqdm

    from inkling_workbook.measure import bench

    rows = []
    t0 = time.perf_counter()
    it = tqdm(decode_shapes(), desc="decode/mid shapes", unit="shape", disable=not progress)
    for shape in it:
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            if skipped is not None:
                skipped.append(shape.label)
            continue
        it.set_postfix_str(shape.label)
        (x, w), nbytes = bench._buffers(shape, 1)[0], bench.silu_bytes(shape.M, shape.N, shape.weighted)
        skip: dict[str, str] = {}
        calls = _shape_calls(shape, x, w, skip)
        if anchor_skipped is not None:
            anchor_skipped += [{"shape": shape.label, "impl": k, "column": COLUMNS[k].label, "reason": r}
                               for k, r in skip.items()]  # fmt: skip
        # bits on the timed inputs, outputs poisoned first
        ref = torch.full((shape.M, shape.N), float("nan"), dtype=x.dtype, device=x.device)
        got = torch.full_like(ref, float("nan"))
        silu_and_mul(x, w, interleaved=shape.interleaved, out=ref)
        silu_and_mul_sglang_config(x, w, interleaved=shape.interleaved, enable_pdl=True, out=got)
        torch.cuda.synchronize()
        equal = {"sglang_config_pdl": _bits_equal(ref, got), "sglang_config": _bits_equal(ref, got)}
        for key in calls:
            if key in pairing.SILU_ANCHOR_COLUMNS:
                equal[key] = _bits_equal(ref, calls[key]())
        passes = max(3, timing.DECODE_PASSES)
        timings = timing.time_calls(calls, passes)
        floor = timings["empty_pdl"]
        sg = sglang_config(shape.N, shape.interleaved)
        config = {
            "port_pdl": port_config_label(shape.M, shape.N),
            "port": port_config_label(shape.M, shape.N),
            "sglang_config_pdl": f"{sg.label} ({sg.rule})",
            "sglang_config": f"{sg.label} ({sg.rule})",
            "empty_pdl": "1 program",
            "empty": "1 program",
            **{k: c.config for k, c in pairing.SILU_ANCHOR_COLUMNS.items()},
        }
        clock = provenance.gpu_state().get("sm_clock_mhz")
        base = timings["sglang_config_pdl"]
        for name, t in timings.items():
            per_pass = [statistics.median(t.samples[i : i + t.rounds]) for i in range(0, len(t.samples), t.rounds)]
            rows.append(
                {
                    "group": shape.group,
                    "M": shape.M,
                    "N": shape.N,
                    "layout": "il" if shape.interleaved else "nil",
                    "weighted": shape.weighted,
                    "impl": name,
                    "config": config[name],
                    **pairing.row_fields(COLUMNS, name),
                    **t.columns(nbytes if not name.startswith("empty") else 0, 4),
                    "median_of_pass_medians_us": round(statistics.median(per_pass), 4),
                    "pass_medians_us": " ".join(f"{p:.4f}" for p in per_pass),
                    "above_empty_pdl_us": round(t.median_us - floor.median_us, 4),
                    # against our kernel with sglang's config, with PDL: for the rows with PDL only
                    # (like for like; the rows without PDL pair by ``speedup_fields``)
                    **(
                        {
                            "vs_sglang_config_pdl": round(base.median_us / t.median_us, 4),
                            "ties_sglang_config_pdl": timing.ties(t.lo_us, t.hi_us, base.lo_us, base.hi_us),
                        }
                        if COLUMNS[name].pdl
                        else {"vs_sglang_config_pdl": "", "ties_sglang_config_pdl": ""}
                    ),  # fmt: skip
                    **pairing.speedup_fields(COLUMNS, name, timings),
                    "bits_equal_port": equal.get(name, ""),
                    "sm_clock_mhz": clock,
                }
            )
        del x, w, ref, got
    return rows


def run(out_dir: str | Path, command=None, budget_s: float | None = 200.0) -> tuple[Path, Path, list[dict]]:
    """The decode/mid sweep; writes ``out_dir/data/decode_<gpu>.csv`` and ``.json`` (shapes not
    started within ``budget_s`` seconds are listed in the JSON's ``skipped_for_time``)."""

    timing.require_gpu()
    meta = provenance.collect(command)
    meta["clock_warmup"] = timing.warm_clocks()
    meta["timing"] = {**timing.timing_meta(), "passes": max(3, timing.DECODE_PASSES), "l2": "warm"}
    meta["impls"] = IMPLS
    meta["columns"] = pairing.describe(COLUMNS)
    meta["anchors"] = {d: pairing.anchor_provenance(d) for d in anchors.ANCHORS}
    meta["sglang_is_arch_support_pdl"] = anchors._is_arch_support_pdl()
    meta["sglang_table"] = {f"{'il' if il else 'nil'} N={n}": TileConfig(*v, "table").label
                            for (il, n), v in SGLANG_TABLE.items()}  # fmt: skip
    meta["sglang_default_gate_up"] = TileConfig(*SGLANG_DEFAULT_GATE_UP, "").label
    meta["sglang_interleaved_unlisted"] = "nearest listed interleaved width's entry (smaller on a tie)"
    skipped: list[str] = []
    anchor_skipped: list[dict] = []
    rows = bench_decode(budget_s=budget_s, skipped=skipped, anchor_skipped=anchor_skipped)
    meta["skipped_for_time"] = skipped
    meta["anchor_skipped"] = anchor_skipped
    meta["bits_equal_all"] = all(r["bits_equal_port"] for r in rows if r["impl"].startswith("sglang"))
    checked = [r for r in rows if r["bits_equal_port"] != ""]
    meta["bits_equal_port"] = {k: all(r["bits_equal_port"] for r in checked if r["impl"] == k)
                               for k in COLUMNS if any(r["impl"] == k for r in checked)}  # fmt: skip
    meta["gpu_state_after"] = provenance.gpu_state()
    slug = provenance.device_slug()
    csv_path = Path(out_dir) / "data" / f"decode_{slug}.csv"
    timing.write_csv(rows, csv_path)
    json_path = provenance.write_record(csv_path.with_suffix(".json"), json.dumps(meta, indent=1) + "\n")
    return csv_path, json_path, rows


def summary(rows: list[dict]) -> str:
    """A markdown table: per shape the median of the pass medians [lowest, highest pass median]
    of the port and the baseline with PDL, the floor, and the port's distance above it; then per
    anchor (labelled by its column) its time and the speedup of the port paired with it by the
    rule ("-" where the anchor was skipped on the shape)."""
    by: dict = {}
    for r in rows:
        by.setdefault((r["M"], r["N"], r["layout"], r["weighted"]), {})[r["impl"]] = r
    present = [k for k in pairing.SILU_ANCHOR_COLUMNS if any(k in d for d in by.values())]
    heads = "".join(f" {COLUMNS[k].label} / vs {pairing.paired_port(COLUMNS, k)} |" for k in present)
    lines = [
        "| shape | port (PDL) | sglang-config (ours, PDL) | port - empty PDL | empty PDL | port no PDL | bits |"
        + heads,
        "|---|---|---|---|---|---|---|" + "---|" * len(present),
    ]
    for (M, N, lay, wt), d in by.items():
        p, s, e, q = d["port_pdl"], d["sglang_config_pdl"], d["empty_pdl"], d["port"]

        def f(r):
            return f"{r['median_of_pass_medians_us']:.3f} [{r['lo_us']:.3f}, {r['hi_us']:.3f}]"

        def a(k, d=d):
            if k not in d:
                return " - |"
            r = d[k]
            bits = "" if r["bits_equal_port"] else " DIFFER"
            return f" {f(r)} x{r['speedup_of_paired_port']:.3f}{bits} |"

        shape = f"M={M} N={N} {'interleaved' if lay == 'il' else 'gate||up'}{', weights' if wt else ''}"
        lines.append(
            f"| {shape} | {f(p)} | {f(s)} | {p['above_empty_pdl_us']:+.3f} | {f(e)} | {f(q)} | "
            f"{'equal' if s['bits_equal_port'] else 'DIFFER'} |" + "".join(a(k) for k in present)
        )
    return "\n".join(lines)
