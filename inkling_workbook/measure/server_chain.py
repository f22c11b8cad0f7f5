"""The server chain (issue 40, "like for like"): the activation between two GEMMs launched without
PDL, as a server runs it, not launched back to back with itself.

The decode claims of the sweeps time the activation in a self-chain: a graph of the same kernel
back to back, where PDL lets each copy launch while the one before it drains. In a server the
activation sits between cuBLAS GEMMs that launch without PDL. This module times that chain, one
CUDA graph per implementation, with the method of :mod:`.timing` (fixed-count graph replay, at
least 100 calls and about 1 ms a replay, interleaved passes, median and the pass-median range):

* **Chain A** (bf16): ``torch.mm`` ``[M, H] x [H, 2N]`` -> activation -> ``torch.mm``
  ``[M, N] x [N, H]``, gate || up and interleaved. Columns (:data:`CHAIN_A_COLUMNS`): the port
  (``inkling_kernels.silu_and_mul``) with PDL and without, the silu anchors
  (:data:`pairing.SILU_ANCHOR_COLUMNS`: sglang 0.5.23's merged port, no PDL; its
  ``silu_and_mul_triton``, interleaved only, PDL on sm_90+) and the GEMMs alone (the floor;
  GEMM2 on a fixed activation).
* **Chain B** (FP8, gate || up): ``torch.mm`` -> activation fused with FP8 per-token-group
  quantization -> FP8 GEMM2 (:func:`fp8_gemm2_mode`: blockwise ``torch._scaled_mm``, 1x128
  activation and 128x128 weight scales, where torch runs it correctly at this N; else a bf16
  ``torch.mm`` on the activation dequantized once before timing, and the record says which).
  Columns (:data:`CHAIN_B_COLUMNS`): the fused op with and without PDL; our two-kernel path
  (``silu_and_mul`` then ``fp8_group_quant``) without PDL, the port the quantizer anchors (no
  PDL) pair with; the FP8 anchors of :mod:`.fp8_anchors` where their layout is this chain's (sglang's and
  vLLM's Triton quantizers after our ``silu_and_mul`` without PDL; vLLM's fused column-major
  kernel at M a multiple of 128; the masked ``[E, T, 2N]`` anchors are skipped with their reason);
  the GEMMs alone. Our ports write the ``"cublas"`` scale layout into buffers that GEMM2 reads;
  an anchor writes its own outputs in its own layout (what its server's GEMM reads) and GEMM2
  reads our buffers of the same shape: the neighbour's launch and stream dependency are the real
  ones, its input values are not the anchor's (checked against ours before timing instead).

Each row (:func:`case_rows`) carries the chain's median and range, the activation's marginal cost
(chain minus the GEMMs alone, :data:`MARGINAL`), the pairing of :mod:`.pairing` (port with PDL
against the baselines with PDL, port without PDL against those without: speedup and
:func:`timing.verdict`, ties = overlapping ranges), the anchors' versions and wheels
(:func:`pairing.row_fields`), the checks made before timing, and on each port with PDL its verdict
against the same port without PDL: the evidence for the PDL default in this chain
(:func:`pdl_evidence`, one summary line in the record).

``python -m inkling_workbook server-chain [--quick]`` writes ``data/server_chain_<gpu>.csv`` and
``.json`` (:func:`run`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from inkling_workbook.measure import anchors as A
from inkling_workbook.measure import fp8_anchors, pairing, provenance, timing
from inkling_workbook.measure.pairing import Column

HIDDEN = 4096
GRID_M = (1, 4, 16, 64, 256)
GRID_N = (768, 1536, 3072)
#: the GPU job's smoke grid: (M, N), each in chain A (both layouts) and chain B
QUICK = ((4, 1536), (64, 3072))
GROUP = 128
PASSES = max(3, timing.DECODE_PASSES)  # every shape here is decode or mid: three interleaved passes
BUDGET_S = 150.0  # no new case starts after this many seconds (the full grid: about 100-130 s)
#: a chain's output against the torch reference (relative error of the [M, H] product, Frobenius):
#: bf16 rounding alone is ~2^-9; FP8 (same quantization in the reference) a code step at most
CHAIN_TOLERANCE = {"A": 2**-7, "B": 2**-6}
MARGINAL = (
    "activation_us = chain median - GEMMs-only median, both from the same interleaved passes; "
    "activation_lo_us/hi_us = chain lo - floor hi / chain hi - floor lo (the widest difference the two "
    "pass-median ranges allow); activation_pass_diffs_us: the per-pass differences (chain pass median - "
    "floor pass median, pass by pass)"
)

_TORCH = torch.__version__.split("+")[0]
_PORT_CFG = "launch_config heuristic, allocates its output"
_CUBLAS = "scale_layout='cublas', writes the buffers GEMM2 reads"
_AFTER = "after silu_and_mul (ours, no PDL), column-major scales; GEMM2 reads our buffers"
_FP8 = fp8_anchors.FP8_COLUMNS

CHAIN_A_COLUMNS: dict[str, Column] = {
    "port_pdl": Column("port_pdl", "inkling", "", "silu_and_mul", _PORT_CFG, True, "port"),
    "port": Column("port", "inkling", "", "silu_and_mul", _PORT_CFG, False, "port"),
    **pairing.SILU_ANCHOR_COLUMNS,
    "gemms_only": Column("gemms_only", "torch", _TORCH, "torch.mm, torch.mm",
                         "the chain's two cuBLAS bf16 GEMMs, no activation: the floor", False, "floor"),
}  # fmt: skip

CHAIN_B_COLUMNS: dict[str, Column] = {
    "fused_pdl": Column("fused_pdl", "inkling", "", "silu_and_mul_fp8_group_quant", _CUBLAS, True, "port",
                        op="fp8_fused"),
    "fused": Column("fused", "inkling", "", "silu_and_mul_fp8_group_quant", _CUBLAS, False, "port", op="fp8_fused"),
    "unfused": Column("unfused", "inkling", "", "silu_and_mul then fp8_group_quant", _CUBLAS, False, "port",
                      op="fp8_quant"),
    **{k: dataclasses.replace(_FP8[k], config=f"{_FP8[k].config}, {_AFTER}")
       for k in ("sglang_fp8_group_quant", "vllm_fp8_group_quant")},
    "vllm_silu_mul_fp8_colmajor": dataclasses.replace(
        _FP8["vllm_silu_mul_fp8_colmajor"], config=f"{_FP8['vllm_silu_mul_fp8_colmajor'].config}; GEMM2 reads our "
        "buffers"),
    "sglang_silu_and_mul_fp8_masked": _FP8["sglang_silu_and_mul_fp8_masked"],
    "vllm_silu_mul_fp8_masked": _FP8["vllm_silu_mul_fp8_masked"],
    "gemms_only": Column("gemms_only", "torch", _TORCH, "torch.mm, FP8 GEMM2",
                         "GEMM1 and the chain's GEMM2 (fp8_gemm2_mode), no activation: the floor", False, "floor"),
}  # fmt: skip

COLUMNS = {"A": CHAIN_A_COLUMNS, "B": CHAIN_B_COLUMNS}


@dataclass(frozen=True)
class Case:
    """One chain on one shape: ``[M, H] x [H, 2N]`` -> activation -> ``[M, N] x [N, H]``."""

    chain: str  # "A" (bf16 chain) or "B" (FP8 chain)
    M: int
    N: int
    H: int
    interleaved: bool

    @property
    def layout(self) -> str:
        return "il" if self.interleaved else "nil"

    @property
    def label(self) -> str:
        return f"{self.chain} M={self.M} N={self.N} H={self.H} {'interleaved' if self.interleaved else 'gate||up'}"


def grid(quick: bool = False, ms=GRID_M, ns=GRID_N, hidden: int = HIDDEN) -> list[Case]:
    """Every case, shape by shape, M ascending (a time budget drops the largest M first; the
    decode sizes come first): chain A gate || up, chain A interleaved, chain B (gate || up, the FP8
    GEMM's layout). ``quick``: the shapes of :data:`QUICK`."""
    shapes = QUICK if quick else [(m, n) for m in sorted(ms) for n in ns]
    out = []
    for m, n in shapes:
        out += [Case("A", m, n, hidden, False), Case("A", m, n, hidden, True), Case("B", m, n, hidden, False)]
    return out


def skipped(case: Case, device="cuda") -> dict[str, str]:
    """anchor key -> why it does not run ``case`` like for like (plain data; :func:`pairing.anchor_available`)."""
    out = {}
    for key, col in COLUMNS[case.chain].items():
        if col.anchor is None:
            continue
        if case.chain == "A":
            reason = pairing.anchor_available(col, interleaved=case.interleaved, device=device)
        else:
            reason = pairing.anchor_available(col, interleaved=case.interleaved, device=device, column_major=True,
                                              M=case.M)  # fmt: skip
        if reason is not None:
            out[key] = reason
    return out


# ---- the chains --------------------------------------------------------------------------------


def fp8_gemm2_mode(device, N: int, H: int = HIDDEN) -> tuple[str, str]:
    """How chain B's GEMM2 ``[M, N] x [N, H]`` runs on ``device``: ``("scaled_mm", why)`` (blockwise FP8
    ``torch._scaled_mm``, probed once here against the dequantized product), ``("bf16_dequant",
    why)`` (torch refuses or misreads these scales: a bf16 ``torch.mm`` on the activation
    dequantized once before timing, the neighbour's launch without its FP8 math) or on the CPU
    ``("standin", why)`` (:func:`inkling_workbook.moe.layer.scaled_mm_standin`: the math, untimed)."""
    from inkling_kernels import fp8_group_quant
    from inkling_workbook.moe import layer

    device = torch.device(device)
    if device.type != "cuda":
        return "standin", "no blockwise FP8 torch._scaled_mm on the CPU: both operands dequantized, fp32 product"
    fallback = "GEMM2 is a bf16 torch.mm on the activation dequantized once before timing"
    if not layer.scaled_mm_available(device):
        return "bf16_dequant", f"no blockwise FP8 torch._scaled_mm below sm_90: {fallback}"
    g = torch.Generator(device=device).manual_seed(5)
    q, s = fp8_group_quant(torch.randn((16, N), device=device, generator=g).bfloat16(), GROUP, scale_layout="cublas")
    wq, ws = layer.quantize_weight_blockwise(torch.randn((H, N), device=device, generator=g) * 0.05)
    want = layer.scaled_mm_standin(q, s, wq, ws).float()
    try:
        got = torch._scaled_mm(q, wq.t(), scale_a=s, scale_b=layer._scale_b(ws), out_dtype=torch.bfloat16).float()
    except (RuntimeError, ValueError) as e:  # TORCH_CHECK / TORCH_CHECK_VALUE
        why = str(e).strip().splitlines()[0][:160]
        return "bf16_dequant", (f"torch {_TORCH} refuses blockwise torch._scaled_mm at N / 128 = {N // GROUP} "
                                f"with the weight-scale stride cuBLAS reads ({why}): {fallback}")  # fmt: skip
    err = float((got - want).norm() / want.norm())
    if err > 2**-6:
        return "bf16_dequant", f"blockwise torch._scaled_mm is wrong at N = {N} (relative error {err:.3g}): {fallback}"
    return "scaled_mm", f"blockwise torch._scaled_mm (1x128 / 128x128 fp32 scales), probed: relative error {err:.2g}"


@dataclass
class Built:
    """A case's buffers and callables: ``acts[key](gateup)`` (the activation alone), ``calls[key]()``
    (the whole chain, or the floor, as timed), ``gemm2`` (mode, why) for chain B."""

    case: Case
    bufs: dict
    acts: dict[str, Callable]
    calls: dict[str, Callable[[], torch.Tensor]]
    skipped: dict[str, str]
    gemm2: tuple[str, str] = ("torch.mm", "cuBLAS bf16")
    fp8_out: tuple | None = None  # chain B: the (q, s) buffers our ports write and GEMM2 reads


def make_buffers(case: Case, device, seed: int = 0) -> dict:
    """Random bf16 ``x [M, H]``, ``w1 [H, 2N]``, ``w2 [N, H]`` (scaled so the activations stay
    O(1)), a fixed activation ``act [M, N]`` for the floor; chain B: ``w2`` quantized in 128x128
    blocks as ``w2q [H, N]`` e4m3, ``w2s [H/128, N/128]``."""
    device = torch.device(device)
    g = torch.Generator(device=device).manual_seed(seed)
    M, N, H = case.M, case.N, case.H
    bufs = {
        "x": torch.randn((M, H), device=device, generator=g).bfloat16(),
        "w1": (torch.randn((H, 2 * N), device=device, generator=g) * (1.5 / H**0.5)).bfloat16(),
        "w2": (torch.randn((N, H), device=device, generator=g) / N**0.5).bfloat16(),
        "act": torch.randn((M, N), device=device, generator=g).bfloat16(),
    }
    if case.chain == "B":
        from inkling_workbook.moe import layer

        bufs["w2q"], bufs["w2s"] = layer.quantize_weight_blockwise(bufs["w2"].t().contiguous())
    return bufs


def _fp8_gemm2(mode: str, bufs: dict, q0, s0) -> Callable:
    """GEMM2 of chain B as ``fn(q, s) -> [Mp, H]`` (see :func:`fp8_gemm2_mode`); ``bf16_dequant``
    multiplies the dequantization of ``(q0, s0)`` (taken now, once)."""
    from inkling_kernels.reference import fp8_group_dequant_ref
    from inkling_workbook.moe import layer

    wq, ws = bufs["w2q"], bufs["w2s"]
    if mode == "scaled_mm":
        sb = layer._scale_b(ws)
        return lambda q, s: torch._scaled_mm(q, wq.t(), scale_a=s, scale_b=sb, out_dtype=torch.bfloat16)
    if mode == "standin":
        return lambda q, s: layer.scaled_mm_standin(q, s, wq, ws)
    if mode == "bf16_dequant":
        deq = fp8_group_dequant_ref(q0, s0, GROUP).bfloat16()
        wd = layer.dequantize_weight_blockwise(wq, ws).t().contiguous().bfloat16()
        return lambda q, s: torch.mm(deq, wd)
    raise ValueError(f"unknown GEMM2 mode {mode!r}")


def build(case: Case, device="cuda", bufs: dict | None = None, gemm2_mode: tuple[str, str] | None = None) -> Built:
    """The case's callables on ``device`` (CUDA: what is timed; CPU: the same math in Triton's
    interpreter). Anchors that do not run the case are left out, with their reason in ``skipped``."""
    from inkling_kernels import fp8_group_quant, silu_and_mul, silu_and_mul_fp8_group_quant

    bufs = bufs if bufs is not None else make_buffers(case, device)
    skip = skipped(case, device)
    x, w1, w2 = bufs["x"], bufs["w1"], bufs["w2"]
    il = case.interleaved
    fns = {a.key: a.fn for a in A.anchors()}
    cols = COLUMNS[case.chain]
    keys = [k for k, c in cols.items() if c.role != "floor" and k not in skip]
    if case.chain == "A":
        acts = {
            "port_pdl": lambda g: silu_and_mul(g, interleaved=il, enable_pdl=True),
            "port": lambda g: silu_and_mul(g, interleaved=il, enable_pdl=False),
            **{k: (lambda g, fn=fns[cols[k].anchor]: fn(g, None, interleaved=il)) for k in keys if cols[k].anchor},
        }
        act0 = bufs["act"]
        calls = {k: (lambda f=f: torch.mm(f(torch.mm(x, w1)), w2)) for k, f in acts.items()}
        calls["gemms_only"] = lambda: (torch.mm(x, w1), torch.mm(act0, w2))[1]
        return Built(case, bufs, acts, calls, skip)
    # chain B: our ports write (q, s) in the "cublas" layout, the buffers GEMM2 reads
    out = silu_and_mul_fp8_group_quant(torch.mm(x, w1), interleaved=False, scale_layout="cublas")
    q, s = out

    def unfused(g, pdl):
        return fp8_group_quant(silu_and_mul(g, interleaved=False, enable_pdl=pdl), GROUP, scale_layout="cublas",
                               out=out, enable_pdl=pdl)  # fmt: skip

    acts = {
        "fused_pdl": lambda g: silu_and_mul_fp8_group_quant(g, interleaved=False, scale_layout="cublas", out=out,
                                                            enable_pdl=True),
        "fused": lambda g: silu_and_mul_fp8_group_quant(g, interleaved=False, scale_layout="cublas", out=out,
                                                        enable_pdl=False),
        "unfused": lambda g: unfused(g, False),
    }  # fmt: skip
    for k in ("sglang_fp8_group_quant", "vllm_fp8_group_quant"):
        if k in keys:
            acts[k] = lambda g, fn=fns[k]: fn(silu_and_mul(g, interleaved=False, enable_pdl=False), GROUP,
                                              column_major_scales=True)  # fmt: skip
    if "vllm_silu_mul_fp8_colmajor" in keys:
        acts["vllm_silu_mul_fp8_colmajor"] = lambda g, fn=fns["vllm_silu_mul_fp8_colmajor"]: fn(g, GROUP)
    mode = gemm2_mode or fp8_gemm2_mode(device, case.N, case.H)
    gemm2 = _fp8_gemm2(mode[0], bufs, q, s)
    calls = {k: (lambda f=f: (f(torch.mm(x, w1)), gemm2(q, s))[1]) for k, f in acts.items()}
    calls["gemms_only"] = lambda: (torch.mm(x, w1), gemm2(q, s))[1]
    return Built(case, bufs, acts, calls, skip, gemm2=mode, fp8_out=out)


def reference(built: Built) -> torch.Tensor:
    """The chain's product in fp32 with torch's reference activation: chain A
    ``silu_and_mul_ref(x @ w1) @ w2``; chain B the reference quantization of that activation,
    dequantized, times the dequantized FP8 weight (the quantization the chain applies, so the
    difference is rounding, not FP8 error)."""
    from inkling_kernels.reference import fp8_group_dequant_ref, silu_and_mul_fp8_group_quant_ref, silu_and_mul_ref
    from inkling_workbook.moe import layer

    b, case = built.bufs, built.case
    gateup = torch.mm(b["x"], b["w1"])
    if case.chain == "A":
        return silu_and_mul_ref(gateup, interleaved=case.interleaved).float() @ b["w2"].float()
    q, s = silu_and_mul_fp8_group_quant_ref(gateup, interleaved=False, group_size=GROUP)
    return fp8_group_dequant_ref(q, s, GROUP) @ layer.dequantize_weight_blockwise(b["w2q"], b["w2s"]).t()


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want).norm() / want.norm().clamp(min=1e-30))


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    from inkling_kernels.reference import bits_equal

    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype and bits_equal(a, b)


def check(built: Built) -> dict[str, dict]:
    """Before timing, on the timed buffers: each chain's output against :func:`reference`
    (``chain_rel_err``; chain B: our ports only, since an anchor's GEMM2 reads our buffers), and
    each activation against the port's: chain A raw bits; chain B fused == unfused (bits) and each
    anchor within the bounds of :func:`fp8_anchors.within_bounds`."""
    case, M = built.case, built.case.M
    ref = reference(built)
    gateup = torch.mm(built.bufs["x"], built.bufs["w1"])
    out: dict[str, dict] = {k: {} for k in built.acts}
    if case.chain == "A":
        want = built.acts["port"](gateup)
        for k, f in built.acts.items():
            out[k]["act_bits_equal_port"] = _bits_equal(f(gateup), want)
            out[k]["chain_rel_err"] = _rel_err(built.calls[k]()[:M], ref)
        return out
    q, s = built.fp8_out
    fused = {}
    for k in ("fused_pdl", "fused", "unfused"):
        out[k]["chain_rel_err"] = _rel_err(built.calls[k]()[:M], ref)  # writes (q, s) then GEMM2 reads them
        fused[k] = (q.clone(), s.clone())
    for k in ("fused_pdl", "unfused"):
        out[k]["fused_equals_unfused"] = _bits_equal(fused[k][0], fused["fused"][0]) and _bits_equal(
            fused[k][1], fused["fused"][1]
        )
    out["fused"]["fused_equals_unfused"] = True
    qo, so = fused["fused"][0][:M], fused["fused"][1][:M]
    for k in built.acts:
        if CHAIN_B_COLUMNS[k].anchor:
            aq, a_s = built.acts[k](gateup)
            out[k].update(fp8_anchors.within_bounds(aq, a_s, qo, so, GROUP, CHAIN_B_COLUMNS[k].op == "fp8_fused"))
    return out


def checks_ok(built_checks: dict[str, dict], chain: str) -> bool:
    """Our ports' chains within :data:`CHAIN_TOLERANCE` of the reference, and (chain B) the fused
    op's bits equal to the two-kernel path's: what the command's exit status says. The anchors'
    results are recorded, not required."""
    ports = [k for k, c in COLUMNS[chain].items() if c.role == "port" and k in built_checks]
    return all(
        built_checks[k]["chain_rel_err"] <= CHAIN_TOLERANCE[chain] and built_checks[k].get("fused_equals_unfused", True)
        for k in ports
    )


# ---- the rows -----------------------------------------------------------------------------------


def pass_medians(t: timing.Timing) -> list[float]:
    return [statistics.median(t.samples[i : i + t.rounds]) for i in range(0, len(t.samples), t.rounds)]


def _r(v: float) -> float:
    return round(v, 4)


def _port_of_same_op(cols: dict[str, Column], key: str, pdl: bool) -> str | None:
    op = cols[key].op
    found = [k for k, c in cols.items() if c.role == "port" and c.op == op and c.pdl == pdl]
    return found[0] if len(found) == 1 else None


def case_rows(case: Case, timings: dict[str, timing.Timing], checks: dict | None = None, gemm2: str = "",
              clock=None) -> list[dict]:  # fmt: skip
    """One row per timed column of ``case`` (see the module docstring); ``timings`` from one set of
    interleaved passes, ``gemms_only`` among them."""
    cols, checks = COLUMNS[case.chain], checks or {}
    floor = timings["gemms_only"]
    floor_pm = pass_medians(floor)
    as_row = {k: {"median_us": t.median_us, "lo_us": t.lo_us, "hi_us": t.hi_us} for k, t in timings.items()}
    rows = []
    for key, t in timings.items():
        col, pm, c = cols[key], pass_medians(t), checks.get(key, {})
        row = {"chain": case.chain, "M": case.M, "N": case.N, "H": case.H, "layout": case.layout, "impl": key,
               "config": col.config, **pairing.row_fields(cols, key), "op": col.op}  # fmt: skip
        row.update({k: _r(getattr(t, k)) for k in ("median_us", "lo_us", "hi_us", "min_us", "max_us")})
        row.update(reps=t.reps, rounds=t.rounds, passes=t.passes, pass_medians_us=" ".join(f"{p:.4f}" for p in pm))
        row["floor_us"] = _r(floor.median_us)
        marginal = col.role != "floor"
        row["activation_us"] = _r(t.median_us - floor.median_us) if marginal else ""
        row["activation_lo_us"] = _r(t.lo_us - floor.hi_us) if marginal else ""
        row["activation_hi_us"] = _r(t.hi_us - floor.lo_us) if marginal else ""
        row["activation_pass_diffs_us"] = " ".join(f"{a - b:.4f}" for a, b in zip(pm, floor_pm)) if marginal else ""
        row.update(pairing.speedup_fields(cols, key, timings))
        port = pairing.paired_port(cols, key)
        paired = port is not None and port in timings
        # "win": the paired port is faster, the ranges apart; "loss": slower; "tie": the ranges overlap
        row["port_verdict"] = timing.verdict(as_row[port], as_row[key]) if paired else ""
        port_act = timings[port].median_us - floor.median_us if paired else 0.0
        row["activation_speedup_of_paired_port"] = (
            _r((t.median_us - floor.median_us) / port_act) if paired and port_act > 0 else ""
        )
        other = _port_of_same_op(cols, key, False) if col.role == "port" and col.pdl else None
        if other is not None and other in timings:
            # the PDL default: this port with PDL against itself without, in the same passes
            row["pdl_verdict"] = timing.verdict(as_row[key], as_row[other])
            row["pdl_speedup"] = _r(timings[other].median_us / t.median_us)
        else:
            row["pdl_verdict"], row["pdl_speedup"] = "", ""
        row["gemm2"] = gemm2 if case.chain == "B" else "torch.mm"
        row["chain_rel_err"] = float(f"{c['chain_rel_err']:.4g}") if "chain_rel_err" in c else ""
        for k in ("act_bits_equal_port", "fused_equals_unfused", "within_bounds", "codes_differing", "scale_max_rel"):
            row[k if k.startswith(("act", "fused")) else f"anchor_{k}"] = c.get(k, "")
        row["sm_clock_mhz"] = clock
        rows.append(row)
    return rows


_FASTER = {"win": "PDL on", "loss": "PDL off", "tie": "tie"}


def pdl_evidence(rows: list[dict]) -> dict:
    """Per shape, whether the port with PDL or without is faster in the server chain (ties:
    overlapping ranges), and one summary line; read from :func:`case_rows`' rows."""
    per_shape = []
    for r in rows:
        if r["role"] == "port" and r["pdl"] is True and r["pdl_verdict"] != "":
            per_shape.append({"chain": r["chain"], "op": r["op"], "M": r["M"], "N": r["N"], "layout": r["layout"],
                              "pdl_us": r["median_us"], "pdl_range": [r["lo_us"], r["hi_us"]],
                              "no_pdl_over_pdl": r["pdl_speedup"], "faster": _FASTER[r["pdl_verdict"]]})  # fmt: skip
    parts = []
    for name, chain, op in (("chain A silu_and_mul", "A", "silu_and_mul"), ("chain B fused FP8", "B", "fp8_fused")):
        got = [p["faster"] for p in per_shape if p["chain"] == chain and p["op"] == op]
        if got:
            parts.append(f"{name}: PDL on faster on {got.count('PDL on')}, off faster on {got.count('PDL off')}, "
                         f"tie on {got.count('tie')} of {len(got)} shapes")  # fmt: skip
    summary = "server chain, the port with PDL vs without (ties: overlapping pass ranges): " + (
        "; ".join(parts) if parts else "no shape timed"
    )
    return {"per_shape": per_shape, "summary": summary}


# ---- the measurement ------------------------------------------------------------------------------


def bench_cases(cases: list[Case], device="cuda", budget_s: float | None = BUDGET_S, progress: bool = True,
                skipped_for_time: list | None = None, anchor_skipped: list | None = None,
                gemm2_modes: dict | None = None) -> tuple[list[dict], bool]:  # fmt: skip
    """Every case: build, check, time (:func:`timing.time_calls`, :data:`PASSES` interleaved passes),
    rows. Past ``budget_s`` seconds no new case starts (its label goes to ``skipped_for_time``).
    Returns the rows and whether every case's checks passed (:func:`checks_ok`)."""
    from tqdm.auto import tqdm

    rows, ok, t0 = [], True, time.perf_counter()
    modes = gemm2_modes if gemm2_modes is not None else {}
    device = torch.device(device)
    it = tqdm(cases, desc="server chain", unit="case", disable=not progress)
    for case in it:
        if budget_s is not None and time.perf_counter() - t0 > budget_s:
            if skipped_for_time is not None:
                skipped_for_time.append(case.label)
            continue
        it.set_postfix_str(case.label)
        if case.chain == "B" and (case.N, case.H) not in modes:
            modes[(case.N, case.H)] = fp8_gemm2_mode(device, case.N, case.H)
        built = build(case, device, gemm2_mode=modes.get((case.N, case.H)) if case.chain == "B" else None)
        if anchor_skipped is not None:
            anchor_skipped += [{"case": case.label, "impl": k, "column": COLUMNS[case.chain][k].label, "reason": r}
                               for k, r in built.skipped.items()]  # fmt: skip
        checks = check(built)
        ok = ok and checks_ok(checks, case.chain)
        timings = timing.time_calls(built.calls, PASSES)
        clock = provenance.gpu_state().get("sm_clock_mhz") if device.type == "cuda" else None
        rows += case_rows(case, timings, checks, built.gemm2[0], clock)
        del built
    return rows, ok


def run(out: str | Path | None = None, quick: bool = False, budget_s: float | None = BUDGET_S,
        progress: bool = True, command=None, cases: list[Case] | None = None,
        device="cuda") -> tuple[Path, Path, list[dict], dict]:  # fmt: skip
    """The server-chain measurement on this GPU; writes ``out`` (default
    ``data/server_chain_<gpu>.csv``) and its ``.json`` (:func:`timing.write_records`; provenance
    with the kernel digests, the columns and the rule, the anchors' versions, GEMM2's mode per N,
    the skips, the marginal's method and :func:`pdl_evidence`). ``cases``/``device``: a tiny CPU
    run in the tests (timing stubbed there)."""
    device = torch.device(device)
    if device.type == "cuda":
        timing.require_gpu()
    cases = cases if cases is not None else grid(quick)
    meta = provenance.collect(command)
    meta["what"] = "the activation between two GEMMs launched without PDL (issue 40): chains A (bf16) and B (FP8)"
    meta["clock_warmup"] = timing.warm_clocks() if device.type == "cuda" else None
    meta["timing"] = {**timing.timing_meta(), "passes": PASSES, "l2": "warm", "output_policy":
                      "chain A: every activation allocates its output; chain B: our ports write preallocated "
                      "buffers GEMM2 reads, the anchors allocate theirs", "marginal": MARGINAL}  # fmt: skip
    meta["grid"] = {"quick": quick, "M": sorted({c.M for c in cases}), "N": sorted({c.N for c in cases}),
                    "H": sorted({c.H for c in cases}), "cases": len(cases)}  # fmt: skip
    meta["columns"] = {"A": pairing.describe(CHAIN_A_COLUMNS), "B": pairing.describe(CHAIN_B_COLUMNS)}
    meta["anchors"] = {d: pairing.anchor_provenance(d) for d in A.ANCHORS}
    meta["sglang_is_arch_support_pdl"] = A._is_arch_support_pdl()
    meta["chain_tolerance"] = CHAIN_TOLERANCE
    skipped_for_time: list[str] = []
    anchor_skipped: list[dict] = []
    modes: dict[tuple[int, int], tuple[str, str]] = {}
    rows, ok = bench_cases(cases, device, budget_s, progress, skipped_for_time, anchor_skipped, modes)
    meta["gemm2"] = {
        "chain_A": "torch.mm (cuBLAS bf16), [M, N] x [N, H]",
        "chain_B": {f"N={n} H={h}": {"mode": m, "why": why} for (n, h), (m, why) in sorted(modes.items())},
        "chain_B_input": "our ports write the 'cublas' (q, s) GEMM2 reads; an anchor writes its own outputs and "
        "GEMM2 reads ours (same shape): its launch and stream dependency are real, its input values are not "
        "the anchor's",
    }
    meta["skipped_for_time"] = skipped_for_time
    meta["anchor_skipped"] = anchor_skipped
    meta["checks_ok"] = ok
    meta["pdl_default"] = pdl_evidence(rows)
    meta["gpu_state_after"] = provenance.gpu_state() if device.type == "cuda" else None
    out = Path(out) if out else provenance.REPO_ROOT / "data" / f"server_chain_{provenance.device_slug()}.csv"
    csv_path, json_path = timing.write_records(rows, meta, out)
    return csv_path, json_path, rows, meta


def summary(rows: list[dict]) -> str:
    """A markdown table: per case and column the chain's median [range], the activation's marginal
    cost [range], the paired port and speedup with the verdict, and on the ports with PDL the verdict
    against the same port without PDL."""
    lines = [
        "| case | column | chain us [range] | activation us [range] | vs paired port | PDL vs no PDL |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        case = f"{r['chain']} M={r['M']} N={r['N']} {r['layout']}"
        act = f"{r['activation_us']:+.3f} [{r['activation_lo_us']:+.3f}, {r['activation_hi_us']:+.3f}]" if (
            r["activation_us"] != "") else "floor"  # fmt: skip
        vs = f"{r['paired_port']} x{r['speedup_of_paired_port']:.3f} ({r['port_verdict']})" if r["port_verdict"] else ""
        pdl = f"x{r['pdl_speedup']:.3f} ({_FASTER[r['pdl_verdict']]})" if r["pdl_verdict"] else ""
        lines.append(f"| {case} | {r['column']} | {r['median_us']:.3f} [{r['lo_us']:.3f}, {r['hi_us']:.3f}] | {act} | "
                     f"{vs} | {pdl} |")  # fmt: skip
    return "\n".join(lines)
