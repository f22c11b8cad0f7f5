"""The per-target and serving tables of ``docs/results.md`` (markdown, from the records in ``data/``:
:mod:`inkling_workbook.publish.results` places them), and the figure block of ``README.md``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from inkling_workbook.measure.provenance import companion
from inkling_workbook.publish import fp8_figures, speedup, style


def _cell(r, base: str) -> str:
    ratio, tie, near = getattr(r, f"vs_{base}"), getattr(r, f"tie_{base}"), getattr(r, f"near_{base}")
    cell = f"{ratio:.3f}x" + {"tie": " (tie)", "loss": " (**slower**)", "win": ""}[speedup.verdict(ratio, tie)]
    return cell + (" *rerun*" if near else "")


def targets_markdown_rows(targets: list[dict]) -> str:
    """Targets as a markdown table; a row whose ``met`` is None is a report, not a target; one met
    in a single run whose rule asks for a repeat (``unverified``) says so."""
    lines = ["| target | measured | met |", "|---|---|---|"]
    for r in targets:
        met = "report" if pd.isna(r["met"]) else "yes" if r["met"] else "**no**"
        met = "met once, not yet repeated" if r.get("unverified") and r["met"] else met
        lines.append(f"| {r['target']} | {r['measured']} | {met} |")
    return "\n".join(lines) + "\n"


def summary_markdown(data_dir: Path, gpu: str = "h200") -> str:
    """The README's tables, generated from the recorded CSVs."""
    csv_path = data_dir / f"bench_{gpu}.csv"
    df, meta = style.load_bench(csv_path)
    tol = speedup.rerun_tolerance(csv_path)
    nv_path, fp8_path = companion(csv_path, "nvfp4"), companion(csv_path, "fp8")
    nv = pd.read_csv(nv_path) if nv_path.exists() else None
    fp8 = pd.read_csv(fp8_path) if fp8_path.exists() else None
    impls = [i for i in ("triton", "triton_pdl", *style.BASELINES) if i in set(df.impl)]
    versus = (*style.HEADLINE, *style.BEST)
    head = ["M", "N", "layout", "w", "L2", *[style.SHORT[i] for i in impls], *[f"vs {style.SHORT[b]}" for b in versus]]
    lines = [
        f"Measured on {meta.get('device')} (driver {meta.get('driver')}, torch {meta.get('torch')}, "
        f"triton {meta.get('triton')}, helion {meta.get('helion')}, {meta.get('date_utc', '')[:10]}, "
        f"commit {meta.get('git_commit')}). Median us per call over CUDA-graph replays of >= 100 calls and "
        f">= 1 ms, {style.passes_text(meta)}; warm L2 and cold L2 "
        "(inputs rotated over >= 3x the "
        f"{meta.get('l2_bytes', 0) / 2**20:.0f} MiB L2) side by side; every implementation allocates its "
        "output. Ratios are baseline / port; a ratio whose measured [lo, hi] ranges overlap is a tie; a "
        "win or loss smaller than the run-to-run reproducibility measured in the same job ("
        + (", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(tol.items())) if tol else "not measured")
        + ", the 90th percentile of |rerun / run - 1|) is marked *rerun*: a second run could reverse it. "
        f"Source: `data/bench_{gpu}.csv`. Baselines: "
        + "; ".join(f"**{style.SHORT[b]}** = {style.LABELS[b]}" for b in style.BASELINES if b in impls)
        + ".",
        "",
        "| " + " | ".join(head) + " |",
        "|"
        + "|".join("---:" if h in ("M", "N") or h in {style.SHORT[i] for i in impls} else "---" for h in head)
        + "|",
    ]
    tables = [speedup.speedup_table(df, l2, tol) for l2 in ("warm", "cold") if (df.l2 == l2).any()]
    both = pd.concat(tables)
    src = both[both.group == "source"].sort_values(["layout", "M", "N", "l2"], ascending=[True, True, True, False])
    for r in src.itertuples():
        cells = [str(r.M), str(r.N), r.layout, "w" if r.weighted else "-", r.l2]
        cells += [f"{getattr(r, i):.2f}" if pd.notna(getattr(r, i, np.nan)) else "-" for i in impls]
        cells += [_cell(r, b) if pd.notna(getattr(r, f"vs_{b}", np.nan)) else "-" for b in versus]
        lines.append("| " + " | ".join(cells) + " |")
    repeat = fp8_figures.fp8_repeat(fp8_path) if fp8 is not None else None
    lines += ["", targets_markdown_rows(speedup.targets_table(df, meta, nv, fp8, tol, repeat).to_dict("records"))]
    return "\n".join(lines)


def serving_markdown(data_dir: Path, gpu: str = "h200") -> str:
    """The README's serving tables, from ``data/serving_<gpu>.json``."""
    doc = json.loads((data_dir / f"serving_{gpu}.json").read_text())
    prov = doc["provenance"]
    lines = [
        f"Measured on {prov.get('device')} ({prov.get('date_utc', '')[:10]}, torch {prov.get('torch')}, triton "
        f"{prov.get('triton')}, commit {prov.get('git_commit')}). Source: `data/serving_{gpu}.json`.",
        "",
        "Decode chain in one CUDA graph: bf16 GEMM `[M, 4096] x [4096, 3072]` -> `silu_and_mul` "
        "(non-interleaved, N = 1536) -> GEMM `[M, 1536] x [1536, 4096]`; median us per chain, "
        "[lo, hi] over three interleaved passes:",
        "",
        "| M | the two GEMMs alone | with the activation, PDL off | with the activation, PDL on | activation adds, "
        "PDL off | activation adds, PDL on | PDL output bitwise equal |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in doc["decode_chain"]:
        cells = [str(r["M"])]
        for k in ("gemms_only", "chain_no_pdl", "chain_pdl"):
            lo, hi = r[f"{k}_lo_hi"]
            cells.append(f"{r[f'{k}_us']:.2f} [{lo:.2f}, {hi:.2f}]")
        cells += [f"{r['activation_adds_no_pdl_us']:.2f}", f"{r['activation_adds_pdl_us']:.2f}"]
        cells.append("yes" if r["pdl_output_bitwise_equal"] else "**no**")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Host time per call (M = 4, N = 1536; the median of 7 interleaved rounds of 2000 calls each, no GPU wait):",
        "",
    ]
    lines += ["| call | PDL off (us) | PDL on (us) |", "|---|---:|---:|"]
    off, on = doc["host_overhead"]["pdl_off"], doc["host_overhead"]["pdl_on"]
    for key, label in HOST_ROWS:
        if key in off:
            fmt = "{:.2f}x" if key.endswith("ratio") else "{:.1f}"
            lines.append(f"| {label} | {fmt.format(off[key])} | {fmt.format(on[key])} |")
    c = doc["compile"]
    lines += [
        "",
        f"`torch.compile(fullgraph=True, dynamic=True)` of a GEMM -> `silu_and_mul` -> GEMM module over "
        f"{len(c['batch_sizes'])} batch sizes ({', '.join(map(str, c['batch_sizes']))}): "
        f"{c['unique_graphs']} graph(s) compiled, {c['graph_breaks']} graph breaks, "
        f"{c['bitwise_equal_to_eager']}/{len(c['batch_sizes'])} outputs bitwise equal to eager.",
    ]
    return "\n".join(lines) + "\n"


HOST_ROWS = [
    ("bare_silu_kernel_us", "bare `silu_and_mul_interleaved_kernel[grid](...)` (Triton's launcher)"),
    ("silu_and_mul_out_us", "`ik.silu_and_mul(gateup, out=out)`"),
    ("op_silu_and_mul_out_us", "`torch.ops.inkling.silu_and_mul_out(...)`"),
    ("op_silu_and_mul_us", "`torch.ops.inkling.silu_and_mul(...)` (allocates)"),
    ("bare_nvfp4_kernel_us", "bare `nvfp4_quant_kernel[grid](...)`"),
    ("fused_nvfp4_out_us", "`ik.silu_and_mul_nvfp4_quant(..., out=(packed, scales))`"),
    ("fused_nvfp4_defaults_us", "`ik.silu_and_mul_nvfp4_quant(gateup, gs, eo)` (defaults: value checks, host read)"),
    ("bare_fp8_kernel_us", "bare `_fp8_group_kernel[grid](...)` (the fused FP8 call's launch)"),
    ("thin_fp8_launch_us", "the same FP8 launch, cached C launcher, arguments pre-built (the floor)"),
    ("fused_fp8_out_us", "`ik.silu_and_mul_fp8_group_quant(gateup, out=(q, s))` (the hot path)"),
    ("fused_fp8_out_general_us", "the same, `out` as a list (the general path on every call)"),
    ("fused_fp8_us", "`ik.silu_and_mul_fp8_group_quant(gateup)` (allocates)"),
    ("op_fused_fp8_out_us", "`torch.ops.inkling.silu_and_mul_fp8_group_quant_out(...)`"),
    ("fused_fp8_masked_out_us", "`ik.silu_and_mul_fp8_group_quant(g3, masked_m=m, out=(q, s))`, E = 8"),
    ("silu_ratio", "`silu_and_mul(out=)` / bare launch (target <= 1.3)"),
    ("fused_vs_bare_nvfp4_ratio", "fused NVFP4 with `out` / bare NVFP4 launch (target <= 1.5)"),
    ("fused_ratio", "fused NVFP4 with `out` / bare silu launch"),
    ("fused_vs_bare_fp8_ratio", "fused FP8 with `out` / bare FP8 launch (target <= 1.5)"),
    ("fused_fp8_over_thin_launch_us", "fused FP8 with `out` minus the floor (us)"),
]


def _replace_block(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        return text
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}{end}{tail}"


def update_readme(readme: Path, data_dir: Path) -> bool:
    """Rewrite the generated blocks of the README (summary, serving); True if it changed."""
    text = readme.read_text()
    new = text
    if (data_dir / "bench_h200.csv").exists():
        new = _replace_block(new, "summary", summary_markdown(data_dir))
    if (data_dir / "serving_h200.json").exists():
        new = _replace_block(new, "serving", serving_markdown(data_dir))
    if new != text:
        readme.write_text(new)
    return new != text
