"""The one rule that pairs the columns of a sweep, and the columns themselves as data (issue 40).

The rule, written once (:func:`paired_port`, :func:`pairs`):

* every implementation runs with PDL where it supports it (sglang's ``silu_and_mul_triton``: on
  sm_90+; our kernels: ``enable_pdl=True``); the port is also timed without PDL;
* a speedup is only ever the port against a baseline in the same PDL state and of the same op:
  the port with PDL against the baselines with PDL, the port without PDL against the baselines
  without (:data:`RULE`);
* every column is a :class:`Column`: project, version, function and configuration, whose
  :attr:`Column.label` is what a table or figure prints (e.g. "sglang 0.5.23 silu_and_mul
  (merged port, GB300 heuristic, no PDL)"); an anchor's column also names its wheel and the
  wheel's sha256 from the fetched manifest (:func:`row_fields`), so a number never floats free
  of its source.

The sweeps (:mod:`~inkling_workbook.measure.bench`, :mod:`~inkling_workbook.measure.decode_baselines`,
:mod:`~inkling_workbook.measure.fp8_sweep`) declare their columns here and read the pairing,
the labels and the provenance from these records; an anchor that is not fetched, or that does
not support a shape, is skipped with a reason the record keeps (:func:`anchor_available`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from inkling_workbook.measure import anchors as A

#: the rule, as data: a baseline is compared with the port column of the same op whose PDL state
#: is its own. Roles: "port" (ours, the column speedups are taken of), "baseline" (paired),
#: "ours" (our other variants: unfused pairs, yardsticks; never paired), "floor" (empty kernels).
RULE = {
    "pair_on": ("op", "pdl"),
    "port(PDL)": "baselines with PDL",
    "port(no PDL)": "baselines without PDL",
    "speedup": "baseline median_us / paired port median_us (> 1: the port is faster); "
    "ties: the pass-median ranges overlap",
}
ROLES = ("port", "baseline", "ours", "floor")


@dataclass(frozen=True)
class Column:
    """One implementation of a sweep, as every record names it."""

    key: str
    project: str  # "inkling", "sglang", "vllm", "helion", "torch"
    version: str  # "" for this repository (its commit is in the record's provenance)
    function: str
    config: str  # the configuration in words, without the PDL state
    pdl: bool
    role: str
    op: str = "silu_and_mul"  # what is compared like for like: "silu_and_mul", "fp8_fused", "fp8_quant"
    anchor: str | None = None  # the key of an :func:`anchors.anchors` record
    dist: str | None = None  # its pinned distribution in :data:`anchors.ANCHORS`

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"{self.key}: role {self.role!r} not in {ROLES}")

    @property
    def label(self) -> str:
        head = " ".join(p for p in (self.project, self.version, self.function) if p)
        return f"{head} ({self.config}, {'PDL' if self.pdl else 'no PDL'})"


def paired_port(columns: dict[str, Column], key: str) -> str | None:
    """The port column a baseline is compared with: the port of the same op and PDL state (the
    rule). ``None`` for ports, our other variants and floors. Raises when the sweep declares no
    such port, or two."""
    col = columns[key]
    if col.role != "baseline":
        return None
    ports = [k for k, c in columns.items() if c.role == "port" and (c.op, c.pdl) == (col.op, col.pdl)]
    if len(ports) != 1:
        raise LookupError(f"{key}: {len(ports)} port columns of op {col.op!r} with pdl={col.pdl} (need one)")
    return ports[0]


def pairs(columns: dict[str, Column]) -> dict[str, str]:
    """baseline key -> its port key, for every baseline of ``columns``."""
    return {k: paired_port(columns, k) for k, c in columns.items() if c.role == "baseline"}


# ---- anchor columns: provenance and support -----------------------------------------------------


def anchor_provenance(dist: str) -> dict:
    """Version, wheel and wheel sha256 of a fetched anchor, from its manifest (``None`` when it is
    not fetched or does not match its pin)."""
    m = A.manifest(dist)
    if m is None:
        return None
    return {"version": m["version"], "wheel": m["wheel"], "wheel_sha256": m["wheel_sha256"]}


def row_fields(columns: dict[str, Column], key: str) -> dict:
    """The columns every CSV row of ``key`` carries: the label, project, version, PDL state, role,
    the paired port, and for an anchor its wheel and sha256 (empty for the others)."""
    col = columns[key]
    prov = anchor_provenance(col.dist) if col.dist else None
    if col.dist and prov is None:
        raise FileNotFoundError(f"{key}: anchor {col.dist} is not fetched; the sweep must skip it")
    return {
        "column": col.label,
        "project": col.project,
        "version": col.version,
        "pdl": col.pdl,
        "role": col.role,
        "paired_port": paired_port(columns, key) or "",
        "wheel": prov["wheel"] if prov else "",
        "wheel_sha256": prov["wheel_sha256"] if prov else "",
    }


def speedup_fields(columns: dict[str, Column], key: str, timings: dict) -> dict:
    """``speedup_of_paired_port`` (this baseline's median / its port's) and whether the two tie,
    for a baseline whose port was timed in the same passes; empty otherwise."""
    port = paired_port(columns, key)
    if port is None or port not in timings or key not in timings:
        return {"speedup_of_paired_port": "", "ties_paired_port": ""}
    from inkling_workbook.measure.timing import ties

    t, p = timings[key], timings[port]
    return {
        "speedup_of_paired_port": round(t.median_us / p.median_us, 4),
        "ties_paired_port": ties(t.lo_us, t.hi_us, p.lo_us, p.hi_us),
    }


def describe(columns: dict[str, Column]) -> dict:
    """The columns and the rule for a record's JSON."""
    return {"rule": RULE, "columns": {k: {**asdict(c), "label": c.label} for k, c in columns.items()},
            "pairs": pairs(columns)}  # fmt: skip


SV, VV = A.ANCHORS["sglang"]["version"], A.ANCHORS["vllm"]["version"]

#: the silu_and_mul anchors (sweep columns of ``bench`` and ``decode_baselines``)
SILU_ANCHOR_COLUMNS = {
    "sglang_silu_and_mul": Column(
        "sglang_silu_and_mul", "sglang", SV, "silu_and_mul", "merged port, GB300 heuristic", False, "baseline",
        anchor="sglang_silu_and_mul", dist="sglang",
    ),
    "sglang_silu_and_mul_triton": Column(
        "sglang_silu_and_mul_triton", "sglang", SV, "silu_and_mul_triton",
        "persistent grid of <= 4 x SMs 32x128 tiles, interleaved only, sm_90+",
        True, "baseline", anchor="sglang_silu_and_mul_triton", dist="sglang",
    ),
}  # fmt: skip


# ---- the torch.compile columns: default and max-autotune, each compiled fresh per shape ---------

#: inductor can generate PDL (``torch._inductor.config.triton.enable_pdl``, off by default); the
#: torch.compile columns run its default, so they pair with the port without PDL; the ``_pdl``
#: column compiles with it on and pairs with the port with PDL
INDUCTOR_PDL = "inductor default: triton.enable_pdl off"
INDUCTOR_PDL_ON = "inductor triton.enable_pdl on"


def compile_column(key: str, function: str, mode: str, shape_words: str, op: str = "silu_and_mul",
                   pdl: bool = False) -> Column:  # fmt: skip
    """A torch.compile baseline column: torch's version, ``torch.compile of <function>``, and its
    configuration: ``shape_words`` (dynamic=False, M dynamic...), the mode and what fresh means
    (:func:`compile_baselines.mode_config`), inductor's PDL setting (``pdl``: on, paired with the
    port with PDL; else inductor's default, off)."""
    from inkling_workbook.measure.compile_baselines import mode_config

    return Column(key, "torch", torch.__version__.split("+")[0], f"torch.compile of {function}",
                  f"{shape_words}, {mode_config(mode)}, {INDUCTOR_PDL_ON if pdl else INDUCTOR_PDL}", pdl,
                  "baseline", op=op)  # fmt: skip


#: the silu_and_mul sweep's compile columns (``bench``)
SILU_COMPILE_COLUMNS = {
    "compile_static": compile_column("compile_static", "silu_and_mul_ref", "default", "dynamic=False"),
    "compile_dynamic_m": compile_column("compile_dynamic_m", "silu_and_mul_ref", "default",
                                        "M dynamic, compiled at M=8192, then called at the shape"),
    "compile_static_max_autotune": compile_column("compile_static_max_autotune", "silu_and_mul_ref", "max_autotune",
                                                  "dynamic=False"),
    # on the headline shapes only (bench.MAX_AUTOTUNE_SHAPES): paired with the port with PDL
    "compile_static_pdl": compile_column("compile_static_pdl", "silu_and_mul_ref", "default", "dynamic=False",
                                         pdl=True),
}  # fmt: skip
#: the NVFP4 sweep's (the fused op's torch reference, linear scales)
NVFP4_COMPILE_COLUMNS = {
    k: compile_column(k, "the fused NVFP4 reference (linear scales)", m, "dynamic=False", op="nvfp4_fused")
    for k, m in (("compile_static", "default"), ("compile_static_max_autotune", "max_autotune"))
}
#: the FP8 sweep's (the fused op's torch reference)
FP8_COMPILE_COLUMNS = {
    k: compile_column(k, "the fused reference", m, "dynamic=False", op="fp8_fused")
    for k, m in (("torch_compile_static", "default"), ("torch_compile_static_max_autotune", "max_autotune"))
}
#: per sweep, the compile columns that are the same baseline in its two modes: a table takes the
#: faster of them on each shape as the strongest torch.compile (``publish.speedup``)
COMPILE_FAMILIES = {
    "silu_and_mul": ("compile_static", "compile_dynamic_m", "compile_static_max_autotune"),
    "nvfp4": ("compile_static", "compile_static_max_autotune"),
    "fp8": ("torch_compile_static", "torch_compile_static_max_autotune"),
}


def _cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def anchor_available(col: Column, *, interleaved: bool, device="cuda", masked: bool = False,
                     column_major: bool = False, ue8m0: bool = False, M: int | None = None) -> str | None:  # fmt: skip
    """``None`` when ``col``'s anchor can run this shape like for like, else the reason it is
    skipped (recorded in the sweep's record, never dropped silently)."""
    if col.dist and anchor_provenance(col.dist) is None:
        return (f"{col.dist}=={A.ANCHORS[col.dist]['version']} not fetched under {A.dist_dir(col.dist)} "
                "(run `make anchors`, carry .anchors)")  # fmt: skip
    a = col.anchor
    if a == "sglang_silu_and_mul_triton":
        if not interleaved:
            return "silu_and_mul_triton reads the interleaved layout only"
        if not _cuda(device):
            return "silu_and_mul_triton is CUDA only (its launcher reads the SM count)"
        if not A._is_arch_support_pdl():
            return "silu_and_mul_triton launches without PDL below sm_90: its column (PDL) would be mislabelled"
    if a in ("sglang_fp8_group_quant", "vllm_fp8_group_quant"):
        if masked:
            return "a 2-D quantizer: no masked [E, T] layout"
        if ue8m0:
            return (
                "ue8m0 scales: not on sglang's Triton path (row-major asserts them off, column-major needs deep_gemm)"
            )
    if a == "sglang_silu_and_mul_fp8_masked":
        if not masked or interleaved or column_major or ue8m0:
            return "masked [E, T, 2N] gate||up with fp32 row-major scales only"
    if a == "vllm_silu_mul_fp8_colmajor":
        if masked or interleaved or not column_major or ue8m0:
            return "[M, 2N] gate||up with fp32 column-major scales only"
        if M is not None and M % 128:
            return f"M = {M} is not a multiple of 128"
    if a == "vllm_silu_mul_fp8_masked":
        return ("writes fp32 scales column-major within an expert (strides (T*G, 1, T)); the masked cases "
                "time row-major scales: not like for like")  # fmt: skip
    return None


def paired_rows(rows: list[dict], keys=("op", "case", "M", "N", "layout", "weighted", "l2")) -> list[dict]:
    """What a table or figure of speedups reads from a sweep's rows (CSV dicts), by the rule the
    rows carry (``paired_port``, ``speedup_of_paired_port``): one entry per baseline row whose
    port was timed in the same passes, naming both columns by their labels."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in keys), {})[r["impl"]] = r
    out = []
    for g, by in groups.items():
        for r in by.values():
            port = r.get("paired_port")
            if not port or port not in by or r.get("speedup_of_paired_port") in ("", None):
                continue
            out.append({**{k: v for k, v in zip(keys, g) if v is not None}, "baseline": r["column"],
                        "port": by[port]["column"], "pdl": r["pdl"], "baseline_us": r["median_us"],
                        "port_us": by[port]["median_us"], "speedup": r["speedup_of_paired_port"],
                        "ties": r["ties_paired_port"], "wheel_sha256": r.get("wheel_sha256", "")})  # fmt: skip
    return out
