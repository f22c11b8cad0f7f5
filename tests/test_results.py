"""The generated blocks of README.md and docs/results.md, and the index of data/ (CPU only: they
read the records, nothing is measured)."""

import fnmatch
import re
import shutil
from pathlib import Path

from inkling_workbook import cli
from inkling_workbook.publish import results

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"


def test_generated_blocks_equal_what_the_records_give():
    """The headline (README and docs/results.md), the per-target, serving and ledger tables are what
    ``python -m inkling_workbook results`` makes of data/: a table cannot go stale unnoticed."""
    assert results.stale(ROOT) == [], "run python -m inkling_workbook results"
    readme = (ROOT / "README.md").read_text()
    head = results.read_block(readme, "headline")
    assert head == results.headline_markdown(DATA)
    for row in ("`silu_and_mul`, decode", "`silu_and_mul`, large", "49152 x 3072", "`silu_and_mul_nvfp4_quant`"):
        assert row in head


def test_results_cli_rewrites_a_stale_block(tmp_path, capsys):
    for doc in results.DOCUMENTS:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    readme = tmp_path / "README.md"
    readme.write_text(results.rewrite(readme.read_text(), "headline", "| stale |\n"))
    args = ["results", "--root", str(tmp_path), "--data", str(DATA)]
    assert cli.main([*args, "--check"]) == 1
    assert "README.md:headline" in capsys.readouterr().out
    assert cli.main(args) == 0
    assert cli.main([*args, "--check"]) == 0
    assert readme.read_text() == (ROOT / "README.md").read_text()


def test_ledger_names_every_record_and_its_commit():
    rows = results.ledger_rows(DATA)
    names = {r["record"] for r in rows}
    assert {"data/bench_h200.csv", "data/fp8_bench_h200.json", "data/serving_h200.json"} <= names
    by = {r["record"]: r for r in rows}
    assert by["data/bench_h200.csv"]["commit"] == "72ae121" and by["data/bench_h200.csv"]["triton"] == "3.6.0"
    assert by["data/logs/gpu_job_h200_call2.log"]["commit"] == "78531ae"


def test_data_index_names_every_file_under_data():
    """data/README.md names each file under data/ (literally or by a backticked glob pattern)."""
    index = (DATA / "README.md").read_text()
    patterns = [p.removeprefix("data/") for p in re.findall(r"`([^`\s]+)`", index)]
    for path in sorted(p for p in DATA.rglob("*") if p.is_file()):
        rel = path.relative_to(DATA).as_posix()
        if rel == "README.md":
            continue
        assert any(fnmatch.fnmatchcase(rel, p) for p in patterns), f"data/README.md does not name {rel}"


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-") for h in heads}


def test_readme_is_short_and_its_links_resolve():
    """README at most 200 lines; every relative link of the documents names a file that exists,
    and every #anchor one of its headings (notebooks link to docs/results.md#how-we-time)."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
    assert "how-we-time" in _anchors((ROOT / "docs" / "results.md").read_text())
    for doc in ("README.md", "docs/results.md", "docs/workbook.md", "docs/porting.md", "data/README.md"):
        base = (ROOT / doc).parent
        text = re.sub(r"`[^`\n]*`", "", (ROOT / doc).read_text())  # code spans hold no links
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if "://" in target:
                continue
            path = base / target if target else ROOT / doc
            assert path.exists(), f"{doc} links to {target}, which does not exist"
            if anchor and path.suffix == ".md":
                assert anchor in _anchors(path.read_text()), f"{doc} links to {target}#{anchor}: no such heading"


def test_the_headline_pairs_by_pdl_state_and_leads_with_the_merged_port(tmp_path):
    """With the anchors in the record, the headline's first baseline is the seed's merged port
    (against the port without PDL), and the strongest baseline is the one the port beats by the
    least, each against the port in its own PDL state: here sglang's PDL kernel, which is slower
    than the PDL-off baselines in raw time but the closest to its own (PDL) port."""
    import shutil

    import pandas as pd

    data = tmp_path / "data"
    shutil.copytree(DATA, data, ignore=shutil.ignore_patterns("logs", "rerun", "*.png"))
    df = pd.read_csv(data / "bench_h200.csv")
    extra = []
    for _, g in df[(df.op == "silu_and_mul") & (df.group == "source")].groupby(["M", "N", "layout", "weighted", "l2"]):
        port, pdl = g[g.impl == "triton"].iloc[0], g[g.impl == "triton_pdl"].iloc[0]
        merged = port.copy()
        merged["impl"], merged["paired_port"], merged["version"] = "sglang_silu_and_mul", "triton", "0.5.23"
        merged["column"] = "sglang 0.5.23 silu_and_mul (merged port, GB300 heuristic, no PDL)"
        for k in ("median_us", "lo_us", "hi_us"):
            merged[k] = port[k] * 1.5  # well behind the port: never the strongest
        fast = pdl.copy()
        fast["impl"], fast["paired_port"], fast["version"] = "sglang_silu_and_mul_triton", "triton_pdl", "0.5.23"
        fast["column"] = "sglang 0.5.23 silu_and_mul_triton (persistent grid, PDL)"
        for k in ("median_us", "lo_us", "hi_us"):
            fast[k] = pdl[k] * 0.9  # faster than the port with PDL: the strongest on every shape
        extra += [merged, fast]
    others = df.impl != "triton_pdl"
    df.loc[others, "paired_port"] = df.loc[others, "impl"].map(
        lambda i: "triton" if i in ("helion_sm90", "helion_fixed", "compile_static", "compile_dynamic_m") else ""
    )
    pd.concat([df, pd.DataFrame(extra)]).to_csv(data / "bench_h200.csv", index=False)
    md = results.headline_markdown(data)
    silu = [line for line in md.splitlines() if line.startswith("| `silu_and_mul`,")]
    assert len(silu) == 3 and "vs the seed's merged port (sglang 0.5.23, no PDL)" in md.splitlines()[0]
    for line in silu:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]  # not the escaped "\|\|"
        assert cells[3].startswith("1.50x (")  # the merged port: 1.5x the port's time, no PDL on either side
        assert cells[4] == "sglang 0.5.23 silu_and_mul_triton (persistent grid, PDL)"
        assert cells[6].startswith("0.90x (**slower**)")  # against the port with PDL, its own pair
    fused = [line for line in md.splitlines() if line.startswith("| `silu_and_mul_fp8") or "nvfp4_quant` |" in line]
    assert fused and all("n/a (silu_and_mul only)" in line for line in fused)
    plain = results.headline_markdown(DATA)  # the record as it is: no anchors in it
    assert plain.count("| not in this record |") == 3
