"""The real anchors in the FP8 sweep (issue 40): sglang 0.5.23's and vllm 0.34.0's Triton FP8
group quantizers and fused silu*mul + quant kernels, beside ours, where their layout is a case's.

* Quantizers (sglang ``_per_token_group_quant_8bit_raw``, vllm ``per_token_group_quant_fp8``'s
  Triton path) read a bf16 activation ``[M, N]``: they are compared with our ``fp8_group_quant``
  on the same activation (columns "quant" with PDL and "quant_no_pdl"), on the gate||up 2-D cases
  (the activation does not depend on the input layout), row- or column-major fp32 scales (not
  UE8M0: not on sglang's Triton path).
* Fused kernels: sglang ``silu_and_mul_masked_post_quant_fwd`` on the masked ``[E, T, 2N]``
  cases (row-major fp32 scales), vllm ``silu_mul_per_token_group_quant_fp8_colmajor`` on the
  gate||up column-major cases; against our fused op ("fused", "fused_no_pdl"). vllm's masked
  kernel writes column-major scales within an expert, which no masked case times: skipped, with
  that reason.

Their formulas differ slightly from ours (``docs/anchors.md``): they are checked before timing
against the bounds characterised there (:func:`within_bounds`), not for bit equality, and the
rows say so (``anchor_check``). Every anchor column carries its version and wheel sha256
(:func:`pairing.row_fields`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from inkling_workbook.measure import anchors as A
from inkling_workbook.measure import pairing
from inkling_workbook.measure.pairing import SV, VV, Column

_ROW, _COL = "fp32 row-major scales", "fp32 column-major scales"

#: every column of the FP8 sweep: the port is the fused op (op "fp8_fused") and, for the
#: quantizers, our fp8_group_quant (op "fp8_quant"), each with and without PDL
FP8_COLUMNS: dict[str, Column] = {
    "fused": Column("fused", "inkling", "", "silu_and_mul_fp8_group_quant", "outputs preallocated", True, "port",
                    op="fp8_fused"),
    "fused_no_pdl": Column("fused_no_pdl", "inkling", "", "silu_and_mul_fp8_group_quant", "outputs preallocated",
                           False, "port", op="fp8_fused"),
    "unfused": Column("unfused", "inkling", "", "silu_and_mul then fp8_group_quant", "outputs preallocated", True,
                      "ours", op="fp8_fused"),
    **pairing.FP8_COMPILE_COLUMNS,
    "fused_2d_present": Column("fused_2d_present", "inkling", "", "silu_and_mul_fp8_group_quant",
                               "the rows present as one 2-D input", True, "ours", op="fp8_fused"),
    "silu_and_mul_alone": Column("silu_and_mul_alone", "inkling", "", "silu_and_mul", "bf16 out preallocated",
                                 True, "ours", op="silu_and_mul"),
    "quant": Column("quant", "inkling", "", "fp8_group_quant", "bf16 activation in, outputs preallocated", True,
                    "port", op="fp8_quant"),
    "quant_no_pdl": Column("quant_no_pdl", "inkling", "", "fp8_group_quant", "bf16 activation in, outputs "
                           "preallocated", False, "port", op="fp8_quant"),
    "sglang_fp8_group_quant": Column("sglang_fp8_group_quant", "sglang", SV, "_per_token_group_quant_8bit_raw",
                                     "Triton path, not the kernel sglang calls on CUDA; allocates its "
                                     "outputs", False, "baseline", op="fp8_quant",
                                     anchor="sglang_fp8_group_quant", dist="sglang"),
    "vllm_fp8_group_quant": Column("vllm_fp8_group_quant", "vllm", VV, "per_token_group_quant_fp8",
                                   "Triton fallback, not the C++ op vLLM runs on CUDA; allocates its "
                                   "outputs", False, "baseline", op="fp8_quant",
                                   anchor="vllm_fp8_group_quant", dist="vllm"),
    "sglang_silu_and_mul_fp8_masked": Column("sglang_silu_and_mul_fp8_masked", "sglang", SV,
                                             "silu_and_mul_masked_post_quant_fwd",
                                             f"Triton, gate||up, {_ROW}, outputs preallocated", False, "baseline",
                                             op="fp8_fused",
                                             anchor="sglang_silu_and_mul_fp8_masked", dist="sglang"),
    "vllm_silu_mul_fp8_colmajor": Column("vllm_silu_mul_fp8_colmajor", "vllm", VV,
                                         "silu_mul_per_token_group_quant_fp8_colmajor", f"Triton, gate||up, {_COL}",
                                         False, "baseline", op="fp8_fused", anchor="vllm_silu_mul_fp8_colmajor",
                                         dist="vllm"),
    "vllm_silu_mul_fp8_masked": Column("vllm_silu_mul_fp8_masked", "vllm", VV, "persistent_masked_m_silu_mul_quant",
                                       f"Triton path, gate||up, {_COL} within an expert", False, "baseline",
                                       op="fp8_fused", anchor="vllm_silu_mul_fp8_masked", dist="vllm"),
}  # fmt: skip
ANCHOR_KEYS = tuple(k for k, c in FP8_COLUMNS.items() if c.anchor)
QUANT_PORTS = ("quant", "quant_no_pdl")
#: descriptions of the columns this module adds (the record's ``fp8_anchor_impls``)
FP8_ANCHOR_IMPLS = {k: FP8_COLUMNS[k].label for k in (*QUANT_PORTS, *ANCHOR_KEYS)}

#: what each anchor is checked against before timing (its formula differs from ours: bounds, not bits)
ANCHOR_CHECK = {
    "sglang_fp8_group_quant": "vs quant: scales max(amax,1e-10)/448 as ours; q by the reciprocal product "
    "(codes one e4m3 step from ours at most): within bounds, not bits",
    "vllm_fp8_group_quant": "vs quant: scale amax*fl(1/448) (1 fp32 ulp from ours), codes one e4m3 step at "
    "most: within bounds, not bits",
    "sglang_silu_and_mul_fp8_masked": "vs fused: activation rounded twice (2 ulps of bf16 from ours), reciprocal "
    "product: within bounds on the rows present, not bits",
    "vllm_silu_mul_fp8_colmajor": "vs fused: activation rounded twice, scale amax*fl(1/448): within bounds, not bits",
}
#: relative scale tolerance: quantizers a few fp32 ulps (compiled '/' is approximate); fused kernels
#: two ulps of bf16 from the double rounding, one more for the GPU's approximate exp
QUANT_SCALE_REL = 2**-20
FUSED_SCALE_REL = 3 * 2**-7 + 2**-20
BOUND_FORMULA = ("|dequant(theirs) - dequant(ours)| <= (2^-3 + tol_s) * max(|d_theirs|, |d_ours|) "
                 "+ 2^-9 * (s + s_ours) "
                 "(one e4m3 step and the scales' difference; subnormal codes absolutely); "
                 f"tol_s = {QUANT_SCALE_REL:.3g} (quantizers), {FUSED_SCALE_REL:.3g} (fused)")  # fmt: skip


def _quant_case(case: dict) -> bool:
    return case["masked_m"] is None and not case["interleaved"]


def skipped(case: dict) -> dict[str, str]:
    """anchor (or quant port) key -> why it is not built on ``case`` (plain data, no GPU)."""
    out = {}
    for key in ANCHOR_KEYS:
        col = FP8_COLUMNS[key]
        reason = pairing.anchor_available(
            col, interleaved=case["interleaved"], masked=case["masked_m"] is not None,
            column_major=case["column_major_scales"], ue8m0=case["scale_ue8m0"], M=case["M"],
        )  # fmt: skip
        if reason is None and col.op == "fp8_quant" and case["interleaved"]:
            reason = "the quantizers read the activation, the same for both layouts: timed on the gate||up cases"
        if reason is None and case.get("timed") is not None and key not in case["timed"]:
            reason = f"this case times {', '.join(case['timed'])} only"
        if reason is not None:
            out[key] = reason
    return out


def built(case: dict) -> list[str]:
    """The keys :func:`anchor_impls` builds on ``case``: the anchors not skipped, and our quantizer
    ports where a quantizer anchor is built."""
    keys = [k for k in ANCHOR_KEYS if k not in skipped(case)]
    if any(FP8_COLUMNS[k].op == "fp8_quant" for k in keys):
        keys = [*QUANT_PORTS, *keys]
    return keys


def quant_bytes(case: dict) -> int:
    """A quantizer's bytes: per row read 2N (bf16), write N (e4m3) and 4N/group (fp32 scales)."""
    N, g = case["N"], case["group_size"]
    return case["M"] * (2 * N + N + 4 * N // g)


def anchor_impls(
    case: dict, gateup: torch.Tensor, masked_m, nbytes: int
) -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (call, bytes) of the columns :func:`built` names, on ``gateup`` (the case's input;
    the fused anchors count ``nbytes``, the fused op's); the quantizers on the activation of
    ``gateup`` (our ``silu_and_mul``, computed here once) with :func:`quant_bytes`."""
    from inkling_kernels import fp8_group_quant, silu_and_mul
    from inkling_kernels.fp8 import empty_scales

    keys = built(case)
    if not keys:
        return {}
    fns = {a.key: a.fn for a in A.anchors()}
    N, g, cm = case["N"], case["group_size"], case["column_major_scales"]
    out: dict[str, tuple[Callable[[], object], int]] = {}
    if "quant" in keys:
        act = silu_and_mul(gateup, interleaved=False)
        qout = (torch.empty_like(act, dtype=torch.float8_e4m3fn), empty_scales((case["M"],), N // g, cm, act.device))
        qb = quant_bytes(case)
        out["quant"] = (lambda: fp8_group_quant(act, g, column_major_scales=cm, out=qout, enable_pdl=True), qb)
        out["quant_no_pdl"] = (lambda: fp8_group_quant(act, g, column_major_scales=cm, out=qout, enable_pdl=False), qb)
        for k in ("sglang_fp8_group_quant", "vllm_fp8_group_quant"):
            if k in keys:
                out[k] = (lambda fn=fns[k]: fn(act, g, column_major_scales=cm), qb)
    if "sglang_silu_and_mul_fp8_masked" in keys:
        # sglang's API writes preallocated outputs, as ours (the anchors.py wrapper allocates zeros
        # each call: a memset that would be timed): called here with buffers of its own
        E, T = case["E"], case["T"]
        mq = torch.zeros((E, T, N), dtype=torch.float8_e4m3fn, device=gateup.device)
        ms = torch.zeros((E, T, N // g), dtype=torch.float32, device=gateup.device)
        fwd = A.load_sglang_ep_moe().silu_and_mul_masked_post_quant_fwd

        def sglang_masked():
            with A._cpu_mode_for(gateup):
                fwd(gateup, mq, ms, g, masked_m, False)
            return mq, ms

        out["sglang_silu_and_mul_fp8_masked"] = (sglang_masked, nbytes)
    if "vllm_silu_mul_fp8_colmajor" in keys:
        out["vllm_silu_mul_fp8_colmajor"] = (lambda fn=fns["vllm_silu_mul_fp8_colmajor"]: fn(gateup, g), nbytes)
    return out


def within_bounds(q, s, q_ours, s_ours, group: int, fused: bool) -> dict:
    """An anchor's ``(q, s)`` against ours (logical ``[..., N]`` codes and ``[..., G]`` scales, any
    strides) by :data:`BOUND_FORMULA`: ``{"within_bounds", "codes_differing", "scale_max_rel"}``."""
    tol = FUSED_SCALE_REL if fused else QUANT_SCALE_REL
    st, so = (x.float().repeat_interleave(group, -1) for x in (s, s_ours))
    dt, do = q.float() * st, q_ours.float() * so
    big = torch.maximum(dt.abs(), do.abs())
    bound = (2**-3 + tol) * big + 2**-9 * (st + so)
    rel = float(((s.float() - s_ours.float()).abs() / s_ours.float()).max()) if s.numel() else 0.0
    ok = bool(((dt - do).abs() <= bound).all()) and rel <= tol
    differ = float((q.view(torch.uint8) != q_ours.view(torch.uint8)).float().mean()) if q.numel() else 0.0
    return {"within_bounds": ok, "codes_differing": round(differ, 6), "scale_max_rel": float(f"{rel:.4g}")}


def check_anchors(case: dict, impls: dict, present_rows: Callable) -> dict[str, dict]:
    """Each anchor of ``impls`` run once against its port (PDL) on the same inputs, before timing:
    name -> :func:`within_bounds` (on ``present_rows(case, ...)``: the rows present of a masked
    case, ``fp8_cases.present_rows``)."""
    out = {}
    for key in ANCHOR_KEYS:
        if key not in impls:
            continue
        col = FP8_COLUMNS[key]
        port = "quant" if col.op == "fp8_quant" else "fused"
        qo, so = (t.clone() for t in impls[port][0]())
        q, s = impls[key][0]()
        qo, so, q, s = present_rows(case, qo, so, q, s)
        out[key] = {**within_bounds(q, s, qo, so, case["group_size"], col.op == "fp8_fused"), "vs": port}
    return out


def row_fields(name: str, checks: dict) -> dict:
    """What an FP8 row carries from this module: the column (label, project, version, PDL, paired
    port, wheel and sha256) and, for an anchor, its check before timing."""
    c = checks.get(name)
    return {
        **pairing.row_fields(FP8_COLUMNS, name),
        "anchor_check": ANCHOR_CHECK.get(name, "") if c else "",
        "anchor_within_bounds": c["within_bounds"] if c else "",
        "anchor_codes_differing": c["codes_differing"] if c else "",
        "anchor_scale_max_rel": c["scale_max_rel"] if c else "",
    }
