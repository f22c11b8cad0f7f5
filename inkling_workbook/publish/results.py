"""The generated blocks of ``README.md`` and ``docs/results.md``, from the records in ``data/``.

``python -m inkling_workbook results`` rewrites every block between ``<!-- NAME:start -->`` and
``<!-- NAME:end -->`` in both files; ``--check`` only reports the stale ones (exit 1), and a test
runs the same comparison, so a table in the documents cannot drift from its record:

* ``headline`` (both files): the port against the strongest baseline at decode, mid and large
  sizes, and the fused FP8 and NVFP4 kernels against their unfused pair and torch.compile;
* ``summary``, ``serving`` (docs/results.md): the per-target tables (:func:`tables.summary_markdown`,
  :func:`tables.serving_markdown`);
* ``ledger`` (docs/results.md): each record's provenance (commit, GPU, versions, date).

Nothing here measures: every number is read from a record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from inkling_workbook.measure import provenance

ROOT = provenance.REPO_ROOT
#: the documents with generated blocks, and which blocks each holds
DOCUMENTS = {"README.md": ("headline",), "docs/results.md": ("headline", "summary", "serving", "ledger")}

#: the silu_and_mul shapes of the headline, one a size class (warm L2; the sweep's "source" shapes)
SILU_ROWS = [("decode", 6, 1024, "il", False), ("mid", 384, 1024, "il", True), ("large", 49152, 3072, "nil", False)]
#: the fused rows: (op, M, N), gate || up layout, row-major fp32 scales, warm L2
FP8_ROWS = [(16, 3072), (1024, 3072), (8192, 3072), (49152, 3072)]
NVFP4_ROWS = [(128, 3072), (8192, 3072), (49152, 3072)]


def _us(r) -> str:
    return f"{r.median_us:.2f} [{r.lo_us:.2f}, {r.hi_us:.2f}]"


#: the gate || up layout, escaped for a table cell
GATE_UP = "gate \\|\\| up"


def _ratio(base, port, tol: float = 0.0) -> str:
    """baseline / port with the verdict of the spreads (overlapping [lo, hi]: a tie); a win or loss
    within the run-to-run reproducibility ``tol`` is marked *rerun*, as in the per-target tables."""
    x = base.median_us / port.median_us
    tie = port.lo_us <= base.hi_us and base.lo_us <= port.hi_us
    verdict = " (tie)" if tie else "" if x > 1 else " (**slower**)"
    return f"{x:.2f}x{verdict}" + (" *rerun*" if not tie and abs(x - 1) <= tol else "")


def _plain_fp8(fp8):
    """The 2-D, row-major, fp32-scale, gate || up rows of an FP8 sweep, warm L2."""
    keep = (~fp8.masked) & (~fp8.column_major_scales) & (~fp8.scale_ue8m0) & (fp8.l2 == "warm")
    return fp8[keep & (fp8.layout == "nil")]


def _drift(again, rows, impls) -> float:
    """How far a repeat moved the medians of ``impls`` (largest |again / recorded - 1|): a verdict
    within it could reverse in another run. 0 where the repeat lacks a row."""
    moved = [abs(again.loc[i].median_us / rows.loc[i].median_us - 1) for i in impls if i in again.index]
    return max(moved) if len(moved) == len(impls) else 0.0


def _best_compile(rows):
    """The fastest torch.compile on one silu_and_mul shape: static, M-dynamic and, where the sweep
    timed it, max-autotune (``style.BEST["compile_best"]``)."""
    from inkling_workbook.publish import style

    comp = rows[rows.impl.isin(style.BEST["compile_best"])]
    return comp.loc[comp.median_us.idxmin()]


#: the seed's merged port (sglang's ``silu_and_mul``, no PDL): the headline's first baseline
MERGED_PORT = "sglang_silu_and_mul"
#: the merged port's cell on the fused ops' rows (it has no fused quantizing kernel)
NOT_SILU = "n/a (silu_and_mul only)"


def _merged_port_label(df) -> str:
    """How the headline's header names the merged port: its project and version from the record's
    rows, else from the pinned anchor (a record without it says so in each cell)."""
    from inkling_workbook.measure import anchors

    rows = df[df.impl == MERGED_PORT]
    version = str(rows.iloc[0].version) if len(rows) and "version" in rows else anchors.ANCHORS["sglang"]["version"]
    return f"sglang {version}, no PDL"


def _silu_pairs(rows) -> dict[str, str]:
    """baseline impl -> the port impl it is compared with, for one silu_and_mul shape: the record's
    own pairing (``paired_port``, written by the sweep) where it has one, else the rule for the
    columns older records hold (helion and torch.compile launch without PDL: the port without)."""
    from inkling_workbook.publish import style

    if "paired_port" in rows.columns:
        out = {i: str(p) for i, p in rows.paired_port.items() if isinstance(p, str) and p and p in rows.index}
        if out:
            return {i: p for i, p in out.items() if i != "torch_eager"}
    return {i: "triton" for i in ("helion_sm90", "helion_fixed", *style.BEST["compile_best"]) if i in rows.index}


def _strongest_silu(rows):
    """The baseline the port beats by the least on one shape (helion, torch.compile, the anchors:
    each against the port in its own PDL state), and that port's row."""
    pairs = _silu_pairs(rows)
    key = min(pairs, key=lambda i: rows.loc[i].median_us / rows.loc[pairs[i]].median_us)
    return rows.loc[key], rows.loc[pairs[key]]


def _silu_label(rows, impl: str) -> str:
    from inkling_workbook.publish import style

    if impl in style.LABELS:
        return style.LABELS[impl]
    return str(rows.loc[impl].column) if "column" in rows.columns else impl


#: how the headline names the fused ops' torch.compile columns
_COMPILE_LABELS = {
    "compile_static": "torch.compile (dynamic=False)",
    "torch_compile_static": "torch.compile (dynamic=False)",
    "compile_static_max_autotune": "torch.compile (max-autotune-no-cudagraphs)",
    "torch_compile_static_max_autotune": "torch.compile (max-autotune-no-cudagraphs)",
}


def headline_markdown(data_dir: Path, method_link: str = "docs/results.md#how-we-time") -> str:
    """One table: the port against the seed's merged port (sglang's ``silu_and_mul``, where the
    record timed it), then against the strongest baseline measured on each shape, the one the port
    beats by the least, each baseline against the port in its own PDL state (silu_and_mul: helion
    1.4 with the sm_90 table and its fixed tile, torch.compile static, M-dynamic and max-autotune,
    the sglang anchors; the fused quantizing kernels: their own two-kernel path, with PDL, and
    torch.compile, without), and beside it the port without PDL against the best torch.compile;
    *rerun* marks a verdict within the drift of the sweep's repeat."""
    import pandas as pd

    from inkling_workbook.publish import fp8_figures, speedup, style

    df, meta = style.load_bench(data_dir / "bench_h200.csv")
    fp8 = pd.read_csv(data_dir / "fp8_bench_h200.csv")
    fp8_meta = json.loads((data_dir / "fp8_bench_h200.json").read_text())
    nv = pd.read_csv(data_dir / "nvfp4_bench_h200.csv")
    # the NVFP4 record's own provenance (from the sweep in two steps), else the silu record's
    nv_json = data_dir / "nvfp4_bench_h200.json"
    nv_meta = json.loads(nv_json.read_text()) if nv_json.exists() else meta
    from inkling_workbook.measure import kernel_digest

    head = kernel_digest.digests()

    def measured_at(prov: dict, op: str) -> str:
        """The record's commit, and whether the op's kernel has changed since (``stale``)."""
        at = str(prov.get("git_commit"))[:7]
        return at if op not in kernel_digest.stale_ops(prov, (op,), head) else f"{at}, **stale**"

    merged_label = _merged_port_label(df)
    lines = [
        f"| kernel | shape (M x N, warm L2) | port, us [range] | vs the seed's merged port ({merged_label}) | "
        "strongest baseline | baseline, us [range] | speedup | vs torch.compile | measured at |",
        "|---|---|---:|---:|---|---:|---:|---:|---|",
    ]
    tol = speedup.rerun_tolerance(data_dir / "bench_h200.csv")
    silu = df[(df.op == "silu_and_mul") & (df.group == "source") & (df.l2 == "warm")]
    for size, M, N, layout, w in SILU_ROWS:
        rows = silu[(silu.M == M) & (silu.N == N) & (silu.layout == layout) & (silu.weighted == w)].set_index("impl")
        t = tol.get(size, 0.0)
        best, port = _strongest_silu(rows)
        vs_compile = _ratio(_best_compile(rows.reset_index()), rows.loc["triton"], t)
        merged = (
            f"{_ratio(rows.loc[MERGED_PORT], rows.loc['triton'], t)} ({_us(rows.loc[MERGED_PORT])})"
            if MERGED_PORT in rows.index
            else "not in this record"
        )
        shape = f"{M} x {N} {'interleaved' if layout == 'il' else GATE_UP}{', weights' if w else ''}"
        lines.append(
            f"| `silu_and_mul`, {size} | {shape} | {_us(port)} | {merged} | {_silu_label(rows, best.name)} | "
            f"{_us(best)} | {_ratio(best, port, t)} | {vs_compile} | {measured_at(meta, 'silu_and_mul')} |"
        )
    repeat = fp8_figures.fp8_repeat(data_dir / "fp8_bench_h200.csv")
    plain = _plain_fp8(fp8)
    again = _plain_fp8(repeat) if repeat is not None else None
    for M, N in FP8_ROWS:
        rows = plain[(plain.M == M) & (plain.N == N)].set_index("impl")
        # the two-kernel path launches with PDL as the fused kernel does; torch.compile's kernels
        # launch without it, so they meet the fused kernel launched without PDL
        port, two = rows.loc["fused"], rows.loc["unfused"]
        comp_impl = style.fastest(rows, style.COMPILE_BEST["fp8"])  # the strongest compile on this shape
        nopdl, comp = rows.loc["fused_no_pdl"], rows.loc[comp_impl]
        tol_two = tol_comp = 0.0
        if again is not None:
            rep = again[(again.M == M) & (again.N == N)].set_index("impl")
            tol_two = _drift(rep, rows, ("fused", "unfused"))
            tol_comp = _drift(rep, rows, ("fused_no_pdl", comp_impl))
        # the strongest baseline is the one the port beats by the least, each against the port in
        # its own PDL state (the two-kernel path with PDL: the fused kernel with PDL; compile: without)
        two_first = two.median_us / port.median_us <= comp.median_us / nopdl.median_us
        best, best_port, best_tol = (two, port, tol_two) if two_first else (comp, nopdl, tol_comp)
        label = "silu_and_mul + fp8_group_quant (PDL)" if best is two else _COMPILE_LABELS[comp_impl]
        lines.append(
            f"| `silu_and_mul_fp8_group_quant` | {M} x {N} {GATE_UP}, groups of 128 | {_us(best_port)} | "
            f"{NOT_SILU} | {label} | {_us(best)} | {_ratio(best, best_port, best_tol)} | "
            f"{_ratio(comp, nopdl, tol_comp)} | {measured_at(fp8_meta, 'fp8')} |"
        )
    nv = nv[nv.l2 == "warm"]
    nv_again = data_dir / "nvfp4_bench_quick_h200.csv"
    nv_again = pd.read_csv(nv_again) if nv_again.exists() else None
    for M, N in NVFP4_ROWS:
        rows = nv[(nv.M == M) & (nv.N == N)].set_index("impl")
        comp_impl = style.fastest(rows, style.COMPILE_BEST["nvfp4"])  # the strongest compile on this shape
        port, two, comp = rows.loc["fused"], rows.loc["unfused"], rows.loc[comp_impl]
        # torch.compile launches without PDL: it meets the fused kernel without PDL where the sweep
        # timed it (from the sweep with fresh compiles on), else the fused kernel as launched
        cport_impl = "fused_no_pdl" if "fused_no_pdl" in rows.index else "fused"
        cport = rows.loc[cport_impl]
        tol_two = tol_comp = 0.0
        if nv_again is not None:
            rep = nv_again[(nv_again.l2 == "warm") & (nv_again.M == M) & (nv_again.N == N)].set_index("impl")
            tol_two = _drift(rep, rows, ("fused", "unfused"))
            tol_comp = _drift(rep, rows, (cport_impl, comp_impl))
        two_first = two.median_us / port.median_us <= comp.median_us / cport.median_us
        best, best_port, best_tol = (two, port, tol_two) if two_first else (comp, cport, tol_comp)
        label = "silu_and_mul + nvfp4_quant" if best is two else _COMPILE_LABELS[comp_impl]
        lines.append(
            f"| `silu_and_mul_nvfp4_quant` | {M} x {N} {GATE_UP}, {int(port.experts)} experts | {_us(best_port)} | "
            f"{NOT_SILU} | {label} | {_us(best)} | {_ratio(best, best_port, best_tol)} | "
            f"{_ratio(comp, cport, tol_comp)} | {measured_at(nv_meta, 'nvfp4')} |"
        )
    both = pd.concat([speedup.speedup_table(df, l2) for l2 in ("warm", "cold") if (df.l2 == l2).any()])
    same = nv_meta is meta  # one process wrote both (before the sweep ran in two steps)
    nv_same = " and `data/nvfp4_bench_h200.csv`" if same else ""
    nv_own = "" if same else (f"`data/nvfp4_bench_h200.csv` ({str(nv_meta.get('date_utc', ''))[:10]}, commit "
                              f"{str(nv_meta.get('git_commit'))[:7]}), ")  # fmt: skip
    compile_words = (
        "the fastest torch.compile (static, M-dynamic, and max-autotune-no-cudagraphs where timed; each compiled "
        "fresh per shape)"
        if "compile_static_max_autotune" in set(df.impl)
        else "the faster torch.compile"
    )
    parts = []
    for size in ("decode", "mid", "large"):
        t = both[both.M.map(speedup.size_class) == size]
        slower = int(((t.vs_compile_best < 1) & ~t.tie_compile_best).sum())
        parts.append(
            f"{size} {speedup.geomean(t.vs_helion_best):.2f}x / {speedup.geomean(t.vs_compile_best):.2f}x "
            f"(slower than the best compile on {slower} of {len(t)})"
        )
    lines += [
        "",
        f"Over every `silu_and_mul` timing of the sweep (warm and cold L2, {len(both)} in all), geomean speedup "
        f"against the faster helion config / {compile_words} on each shape: " + "; ".join(parts) + ". "
        "The range is the lowest and highest pass median; overlapping ranges are a tie; *rerun*: within the "
        "run-to-run reproducibility, so a second run could reverse it. The first baseline is the seed's merged "
        "port, sglang's `silu_and_mul` (the helion -> Triton port merged into sglang, installed by name: "
        "`make anchors`), against the port without PDL; *not in this record* where the sweep predates it. The "
        "strongest baseline is the one the port beats by the least, each baseline against the port in its own "
        "PDL state: helion, torch.compile and the merged port launch without PDL and meet the port without it; "
        "sglang's `silu_and_mul_triton`, torch.compile with inductor's PDL (where timed) and the two-kernel paths "
        "launch with PDL and meet the port with it "
        "(the port column shows the port so paired). "
        f"Sources: `data/bench_h200.csv`{nv_same} ({meta.get('device')}, torch "
        f"{meta.get('torch')}, triton {meta.get('triton')}, helion {meta.get('helion')}, "
        f"{str(meta.get('date_utc', ''))[:10]}, commit {str(meta.get('git_commit'))[:7]}), {nv_own}"
        f"`data/fp8_bench_h200.csv` ({str(fp8_meta.get('date_utc', ''))[:10]}, commit "
        f"{str(fp8_meta.get('git_commit'))[:7]}). Method: [How we time]({method_link}). "
        "*Measured at*: the record's commit; **stale** where the op's kernel (its Triton functions and launch "
        "heuristic, `inkling_workbook/measure/kernel_digest.py`) has changed since: that row describes an "
        "older kernel than the one that ships, until the `publish` steps of the GPU job re-measure it.",
    ]
    return "\n".join(lines) + "\n"


# ---- the provenance ledger -------------------------------------------------------------------

_LOG_FIELDS = {k: re.compile(rf'"{k}": "([^"]+)"') for k in ("git_commit", "device", "torch", "triton", "date_utc")}


def _provenance_of(path: Path) -> dict | None:
    """The provenance block a record carries: top-level fields, a ``provenance`` object, the first
    line of a JSON-lines file, the first provenance a log prints; for a CSV, its companion JSON."""
    try:
        if path.suffix == ".csv":
            # its own JSON beside it, else the sweep's (the silu sweep writes its nvfp4_ CSV beside it;
            # the tile sweep tune_bench_h200.csv is an older run's, so it has none: see data/README.md)
            stem = re.sub(r"^nvfp4_", "", path.stem)
            for meta in (path.with_suffix(".json"), path.with_name(f"{stem}.json")):
                if meta.exists():
                    found = _provenance_of(meta)
                    return {**found, "from": meta.name} if found else None
            return None
        text = path.read_text()
        if path.suffix == ".log":
            found = {k: m.group(1) for k, rx in _LOG_FIELDS.items() if (m := rx.search(text))}
            return found or None
        doc = json.loads(text.splitlines()[0]) if path.suffix == ".jsonl" else json.loads(text)
    except (OSError, ValueError, IndexError):
        return None
    if not isinstance(doc, dict):
        return None
    for block in (doc, doc.get("provenance")):
        if isinstance(block, dict) and "git_commit" in block:
            return block
    return None


def ledger_rows(data_dir: Path) -> list[dict]:
    """One row per record under ``data_dir`` (the index and the tuning log aside)."""
    rows = []
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(data_dir).as_posix()
        if path.suffix not in (".json", ".jsonl", ".csv", ".log") or path.name.startswith("."):
            continue
        prov = _provenance_of(path) or {}
        rows.append(
            {
                "record": f"data/{rel}",
                "commit": str(prov.get("git_commit") or "-")[:7],
                "device": prov.get("device") or "-",
                "torch": prov.get("torch") or "-",
                "triton": prov.get("triton") or "-",
                "date": str(prov.get("date_utc") or "-")[:10],
                "from": prov.get("from", ""),
            }
        )
    return rows


def ledger_markdown(data_dir: Path) -> str:
    rows = ledger_rows(data_dir)
    lines = [
        f"{len(rows)} records; {sum(r['commit'] == '-' for r in rows)} carry no provenance block of their own "
        "(see `data/README.md` for what made them). A CSV's provenance is its companion JSON's.",
        "",
        "| record | commit | device | torch | triton | date (UTC) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = f"`{r['record']}`" + (f" (via `{r['from']}`)" if r["from"] else "")
        lines.append(f"| {name} | {r['commit']} | {r['device']} | {r['torch']} | {r['triton']} | {r['date']} |")
    return "\n".join(lines) + "\n"


# ---- the blocks ------------------------------------------------------------------------------


def block(name: str, data_dir: Path, doc: str = "README.md") -> str:
    """The generated block ``name`` of document ``doc`` (links are relative to it)."""
    from inkling_workbook.publish import tables

    if name == "headline":
        return headline_markdown(data_dir, "docs/results.md#how-we-time" if doc == "README.md" else "#how-we-time")
    if name == "summary":
        return tables.summary_markdown(data_dir)
    if name == "serving":
        return tables.serving_markdown(data_dir)
    if name == "ledger":
        return ledger_markdown(data_dir)
    raise ValueError(f"no generated block named {name!r}")


def read_block(text: str, name: str) -> str | None:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        return None
    return text.split(start, 1)[1].split(end, 1)[0].lstrip("\n")


def rewrite(text: str, name: str, body: str) -> str:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{body}{end}{rest.split(end, 1)[1]}"


def stale(root: Path = ROOT, data_dir: Path | None = None) -> list[str]:
    """``file:block`` for every generated block that differs from what ``data_dir`` produces
    (a missing marker counts as stale)."""
    data_dir = data_dir or root / "data"
    out = []
    for doc, names in DOCUMENTS.items():
        text = (root / doc).read_text()
        out += [f"{doc}:{n}" for n in names if read_block(text, n) != block(n, data_dir, doc)]
    return out


def update(root: Path = ROOT, data_dir: Path | None = None) -> list[str]:
    """Rewrite every generated block; the documents that changed."""
    data_dir = data_dir or root / "data"
    changed = []
    for doc, names in DOCUMENTS.items():
        path = root / doc
        text = new = path.read_text()
        for n in names:
            if read_block(new, n) is None:
                raise SystemExit(f"{doc} has no <!-- {n}:start --> / <!-- {n}:end --> markers")
            new = rewrite(new, n, block(n, data_dir, doc))
        if new != text:
            path.write_text(new)
            changed.append(doc)
    return changed
