"""The NVFP4 figures (notebook 05): the fused kernel against the unfused pair, its floors (issue
rate, clock, instructions an element), the error of each quantization step, the scale swizzle."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from inkling_workbook.publish import style  # noqa: E402


def _warm(df: pd.DataFrame) -> pd.DataFrame:
    """The warm-L2 rows (the NVFP4 sweep has cold-L2 rows too from the sweep with fresh compiles)."""
    return df[df.l2 == "warm"] if "l2" in df else df


def draw_nvfp4(df: pd.DataFrame, meta: dict, out_stem: Path) -> list[Path]:
    df = _warm(df)
    wide = df.pivot_table(index=["M", "N"], columns="impl", values="median_us").reset_index()
    wide = wide.sort_values(["N", "M"]).reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    x = np.arange(len(wide))
    impls = [i for i in ("fused", "unfused", "compile_static", "torch_eager") if i in wide]
    w = 0.8 / len(impls)
    for i, impl in enumerate(impls):
        ax.bar(
            x + (i - (len(impls) - 1) / 2) * w, wide[impl], width=w, label=style.LABELS[impl], color=style.COLORS[impl]
        )
    for xi, r in zip(x, wide.itertuples()):
        ax.text(xi, r.unfused * 1.25, f"{r.unfused / r.fused:.2f}x", ha="center", fontsize=9)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"M={int(r.M)}\nN={int(r.N)}" for r in wide.itertuples()], fontsize=9)
    ax.tick_params(axis="y", labelsize=9)
    ax.set_ylabel("median time per call (us, log)", fontsize=9)
    ax.set_title(
        f"{meta.get('device', '?')}: SiLU-and-mul + NVFP4 quant, 8 experts, warm L2 (label: unfused / fused)",
        fontsize=9,
    )
    foot = style._footer(fig, meta, "warm")
    fig.legend(*ax.get_legend_handles_labels(), fontsize=9, loc="lower center", ncol=2, bbox_to_anchor=(0.5, foot))
    fig.tight_layout(rect=(0, foot + 0.5 / fig.get_figheight(), 1, 1))
    return style._save(fig, out_stem)


def issue_floor_us(
    instr_per_element: float, elements: int, sm_count: int, clock_mhz: float, warp_issue_per_clk: int = 4
) -> float:
    """The instruction-issue floor: ``instr_per_element x elements / (SMs x issue rate x clock)``,
    the issue rate in thread-instructions a clock (``warp_issue_per_clk`` warp instructions of 32
    threads: 4 schedulers an SM on Hopper). In us."""
    return instr_per_element * elements / (sm_count * warp_issue_per_clk * 32 * clock_mhz)


def nvfp4_kernel_record(ptx: dict | None) -> dict | None:
    """The NVFP4 kernel's entry in a PTX record (``data/ptx_<gpu>.json``), if it holds one."""
    for name, k in ((ptx or {}).get("kernels") or {}).items():
        if "nvfp4" in name:
            return k
    return None


def recorded_clock_mhz(meta: dict) -> float | None:
    """The SM clock the record saw after its sweep (``gpu_state_after``), in MHz."""
    v = (meta.get("gpu_state_after") or {}).get("sm_clock_mhz")
    return float(v) if v not in (None, "", "?") else None


#: the compile record's case for the fused NVFP4 kernel as the benchmark runs it: gate || up
#: ("nil"), swizzled scales, 8 experts, bf16, PDL on; its launch plan at M = 8192, per N
COMPILED_FUSED_CASE = "silu_and_mul_nvfp4_quant nil swizzled 8 experts 8192x{n}"


def compiled_nvfp4_instr_per_element(data_dir: Path, target: str = "sm90a") -> tuple[dict[int, float], str]:
    """The fused NVFP4 kernel's SASS instructions per output element, per N, read from the
    compile record ``data/compile_<target>.json`` (``python -m inkling_workbook.proofs.blackwell``:
    Triton and its bundled ptxas on the CPU, SASS counted up to the first ``EXIT``, divided by the
    elements one thread handles), and a description of where they come from. A static count of
    the current kernel compiled by the record's Triton, not a hardware counter and not the binary
    a GPU record timed. Empty when the record is missing."""
    import json

    path = Path(data_dir) / f"compile_{target}.json"
    if not path.exists():
        return {}, ""
    rec = json.loads(path.read_text())
    counts = {}
    for name, case in rec["cases"].items():
        for n in (1536, 3072):
            if name == COMPILED_FUSED_CASE.format(n=n) and case.get("sass_per_element") is not None:
                counts[n] = float(case["sass_per_element"])
    source = f"data/compile_{target}.json (static SASS count, triton {rec.get('triton', '?')})"
    return counts, source


def draw_nvfp4_floors(
    nv: pd.DataFrame,
    meta: dict,
    ptx: dict | None,
    out_stem: Path,
    instr_per_element: float | dict[int, float] | None = None,
    instr_source: str = "",
) -> list[Path]:
    """The fused NVFP4 kernel's median time (bars: the recorded spread) against M per N, with its
    byte floor (the record's ``fused_floor_us``: bytes / the same-pattern ceiling) and its
    instruction-issue floor :func:`issue_floor_us` when an instruction count per element is known
    (the PTX record's NVFP4 kernel, else ``instr_per_element``, one count or one per N, with its
    source), at the record's SM count and its clock after the sweep."""
    f = _warm(nv)
    f = f[f.impl == "fused"].sort_values(["N", "M"])
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    ns = sorted(f.N.unique())
    rec = nvfp4_kernel_record(ptx)
    if rec is not None and "instructions_per_element" in rec:
        instr_per_element, instr_source = rec["instructions_per_element"], "the PTX record"
    clock, sms = recorded_clock_mhz(meta), meta.get("sm_count")
    per_n = instr_per_element if isinstance(instr_per_element, dict) else dict.fromkeys(ns, instr_per_element)
    issue = all(per_n.get(n) is not None for n in ns) and clock is not None and sms is not None
    for i, n in enumerate(ns):
        d = f[f.N == n]
        c = style._ncolor(i)
        ax.errorbar(
            d.M, d.median_us, yerr=[d.median_us - d.lo_us, d.hi_us - d.median_us], marker="o", ms=3, lw=1,
            capsize=2, color=c, label=f"fused, N={n}",
        )  # fmt: skip
        ax.plot(d.M, d.fused_floor_us, ls="--", lw=1, color=c, label=f"byte floor, N={n}")
        if issue:
            ax.plot(
                d.M, issue_floor_us(per_n[n], d.M * d.N, sms, clock), ls=":", lw=1.2, color=c,
                label=f"issue floor, N={n}",
            )  # fmt: skip
        last = d.iloc[-1]
        ax.annotate(
            f"{100 * last.fused_floor_us / last.median_us:.0f}% of byte floor", (last.M, last.median_us),
            textcoords="offset points", xytext=(-130, 8), fontsize=9, color=c,
        )  # fmt: skip
    if issue:
        counts = ", ".join(f"{per_n[n]:g} (N={n})" for n in ns)
        note = (
            f"issue floor = instr/element x M x N / ({sms} SMs x 4 x 32 threads x {clock:.0f} MHz)"
            f"\ninstr/element {counts}\nfrom {instr_source}; clock: the record's after the sweep"
        )
    else:
        note = "instruction-issue floor not drawn: no instruction count per element recorded for this kernel"
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(float(f.fused_floor_us.min()) / 2, float(f.median_us.max()) * 3)
    ax.set_xlabel("M (rows, 8 experts)", fontsize=9)
    ax.set_ylabel("us per call (log)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=9)
    ax.set_title(
        f"{meta.get('device', '?')}: fused SiLU-and-mul + NVFP4 against its byte and issue floors, warm L2\n{note}",
        fontsize=9,
    )
    foot = style._footer(fig, meta, "warm")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=9, loc="lower center", ncol=len(ns), bbox_to_anchor=(0.5, foot))
    fig.tight_layout(rect=(0, foot + 0.65 / fig.get_figheight(), 1, 1))
    return style._save(fig, out_stem)


def nvfp4_error_in_steps(M: int = 128, N: int = 512, seed: int = 5) -> dict[str, np.ndarray]:
    """Quantize a seeded bf16 tensor with the package's NVFP4 kernel and return, per element, the
    scaled value |x| / step and the error |x - dequant(q)| / step, where step = float(s8) / gs is
    the block's step (one e2m1 unit); rounding to nearest bounds the error by half the e2m1 grid
    spacing at the scaled value (0.25, 0.5, 1 below 2, 4, 6), saturation aside."""
    import torch

    import inkling_kernels as ik
    from inkling_kernels.reference import NVFP4_BLOCK, e4m3_decode_ref, nvfp4_dequant_ref

    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(M, N, generator=gen) * 2).to(torch.bfloat16)
    gs = 448 * 6 / float(x.float().abs().max())
    packed, scales = ik.nvfp4_quant(x, torch.tensor([gs]), swizzle=False)
    deq = nvfp4_dequant_ref(packed, scales, gs)
    step = (e4m3_decode_ref(scales) / gs).repeat_interleave(NVFP4_BLOCK, dim=1)
    xf = x.float()
    ok = step > 0
    return {
        "scaled": (xf.abs()[ok] / step[ok]).numpy(),
        "error": ((xf - deq).abs()[ok] / step[ok]).numpy(),
    }


def draw_nvfp4_error(err: dict[str, np.ndarray], out_stem: Path, where: str | None = None) -> list[Path]:
    """NVFP4 error in units of the block step against the scaled value, with the rounding bound
    (half the e2m1 grid spacing)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.0, 3.6))
    ax1.scatter(err["scaled"], err["error"], s=2, alpha=0.3)
    edges = np.array([0, 2, 4, 6])
    for lo, hi, bound in zip(edges[:-1], edges[1:], (0.25, 0.5, 1.0)):
        ax1.hlines(bound, lo, hi, color="crimson", lw=1.2)
    ax1.plot([], [], color="crimson", label="half the e2m1 spacing (rounding bound)")
    ax1.set_xlabel("|x| / step (scaled value)", fontsize=9)
    ax1.set_ylabel("|x - dequant| / step", fontsize=9)
    ax1.legend(fontsize=9, loc="upper left")
    ax2.hist(err["error"], bins=60, color="C0")
    ax2.set_yscale("log")
    ax2.set_xlabel("|x - dequant| / step (block steps)", fontsize=9)
    ax2.set_ylabel("elements (count, log)", fontsize=9)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=9)
    fig.suptitle(
        f"{where or style.local_versions_text()}\nNVFP4 quantization error in units of the block step "
        f"(step = e4m3 scale / global scale; {len(err['error'])} elements)",
        fontsize=9,
    )
    fig.tight_layout()
    return style._save(fig, out_stem)


def swizzle_map(rows: int = 128, cols: int = 4) -> np.ndarray:
    """The byte offset of each scale (m, k) of one 128x4 tile, from the package's layout formula."""
    from inkling_kernels.reference import swizzled_offset

    return np.array([[swizzled_offset(m, k, cols) for k in range(cols)] for m in range(rows)])


def draw_swizzle(out_stem: Path) -> list[Path]:
    """The 128x4 scale swizzle: logical (row, scale column) coloured by byte offset, corners and
    the row-group boundaries annotated; beside it, memory order as a 32x16 grid of rows."""
    off = swizzle_map()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.5, 6.0), gridspec_kw={"width_ratios": [1, 1.7]})
    im = ax1.imshow(off, aspect="auto", cmap="viridis", interpolation="nearest")
    for m in (32, 64, 96):
        ax1.axhline(m - 0.5, color="white", lw=0.8)
    for (m, k), y in zip(((0, 0), (0, 3), (31, 3), (32, 0), (127, 3)), (0.98, 0.86, 0.74, 0.62, 0.02)):
        ax1.annotate(
            f"({m},{k}) -> byte {off[m, k]}", (k, m), xytext=(1.25, y), textcoords="axes fraction",
            fontsize=9, va="center", arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.3"},
        )  # fmt: skip
    ax1.set_xticks(range(4))
    ax1.set_xlabel("scale column k\n(one per 16 values)", fontsize=9)
    ax1.set_ylabel("row m of the tile", fontsize=9)
    cbar = fig.colorbar(im, ax=ax1, orientation="horizontal", fraction=0.05, pad=0.14)
    cbar.set_label("byte offset", fontsize=9)
    cbar.ax.tick_params(labelsize=9)
    # memory order: 32 lines of 16 bytes; byte b holds scale (m, k) with m = 32*((b%16)//4) + b//16
    rows_of = np.zeros((32, 16), dtype=int)
    for m in range(128):
        for k in range(4):
            b = off[m, k]
            rows_of[b // 16, b % 16] = m
    ax2.imshow(rows_of // 32, aspect="auto", cmap="tab10", vmin=0, vmax=9, interpolation="nearest")
    for b in (0, 4, 8, 12, 16, 511):  # labels m,k, a few cells apart so that they stay apart
        r, c = divmod(b, 16)
        m = rows_of[r, c]
        k = int(np.where(off[m] == b)[0][0])
        x, ha = (c + 0.45, "right") if c == 15 else (c - 0.45, "left")
        ax2.text(x, r, f"{m},{k}", ha=ha, va="center", fontsize=9, color="white")
    ax2.set_xlabel("byte within a 16-byte line\n(4 groups of 4: rows m, m+32, m+64, m+96)", fontsize=9)
    ax2.set_ylabel("16-byte line (row m mod 32)", fontsize=9)
    for ax in (ax1, ax2):
        ax.tick_params(labelsize=9)
    fig.suptitle(
        "NVFP4 128x4 scale swizzle, one tile (512 bytes; labels m,k; colour: m // 32)\n"
        "offset = (m%32)*16 + (m//32)*4 + k",
        fontsize=9,
    )
    fig.tight_layout()
    return style._save(fig, out_stem)
