"""``python -m inkling_workbook {check,portcheck,bench,decode,serving,server-chain,steps,fp8-steps,nvfp4-steps,
fusion,moe-layer,silu-mul-fp8,rms-norm-quant,figures,results,info}``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from inkling_workbook.measure import provenance

DATA = provenance.REPO_ROOT / "data"
FIGURES = provenance.REPO_ROOT / "figures"


def _check(args) -> int:
    from inkling_workbook.ports.silu_and_mul import harness

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind = "quick" if args.quick else ("gpu" if device.type == "cuda" else "cpu")
    if args.matrix:
        kind = args.matrix
    if args.nvfp4:
        from inkling_workbook.proofs import nvfp4_bitwise

        rows = nvfp4_bitwise.run_nvfp4_matrix("gpu" if kind == "gpu" else "cpu", device, progress=not args.no_progress)
        line = nvfp4_bitwise.nvfp4_tally(rows)
        print(line)
        out = args.out or (DATA / f"nvfp4_bitwise_{provenance.device_slug(device)}.json")
        doc = {"provenance": provenance.collect(), "tally": line, "all_ok": all(r["ok"] for r in rows), "cases": rows}
        provenance.write_record(out, json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out}")
        return 0 if doc["all_ok"] else 1
    n = len(harness.portcheck_cases.bitwise_shapes(kind))
    print(f"{n} cases ({kind} matrix) on {provenance.device_label(device)}, through portcheck", flush=True)
    doc, reports = harness.bitwise_record(kind, device)
    print(harness.format_table(doc["cases"]))
    for name, report in reports.items():
        if not report.ok:
            print(f"\nportcheck {name}: {report.original} against {report.port}\n")
            print(report.mismatches_markdown())
    print(doc["tally"])
    out = args.out or (DATA / f"bitwise_{provenance.device_slug(device)}.json")
    harness.save(doc, out)
    print(f"wrote {out}")
    if not all(r["port_vs_helion"] is not None for r in doc["cases"]):
        print(
            "note: helion is not installed, so port vs helion was not compared (pip install 'inkling-kernels[helion]')"
        )
    return 0 if doc["all_ok"] else 1


def _bench(args) -> int:
    from inkling_workbook.measure import bench, timing

    timing.require_gpu()
    out = args.out or (DATA / f"bench_{provenance.device_slug()}.csv")
    meta = bench.run(out, quick=args.quick, cold=args.cold_l2, tune=not args.no_tune, part=args.part,
                     max_autotune_budget_s=args.max_autotune_budget_s)  # fmt: skip
    silu = [] if args.part == "quant" else ["", "meta"] + ([] if args.no_tune else ["tune"])
    extra = silu + ([] if args.part == "silu" else ["nvfp4"])
    print(f"wrote {', '.join(str(provenance.companion(out, k) if k else out) for k in extra)}")
    print(f"ceiling {meta['ceiling_tbps_used_for_floors']:.3f} TB/s")
    silu_bits = meta.get("bits_equal_port", {})
    if silu_bits:
        print(
            "silu_and_mul bits against the port, checked before timing: "
            + ", ".join(f"{k} {'equal' if v else 'DIFFER'}" for k, v in silu_bits.items())
        )
    bits = meta.get("nvfp4_bits_equal", {})
    if bits:
        print(
            "NVFP4 bytes checked before timing: "
            + ", ".join(f"{k} {'equal' if v else 'DIFFER'}" for k, v in bits.items())
        )
    # must hold: the port with PDL writes the port's bits, the fused NVFP4 kernel the unfused path's
    # bytes; helion, torch.compile, eager and the anchors are recorded either way (not fatal)
    must = [silu_bits.get("triton_pdl", True)]
    return 0 if all(must) and all(bits.get(k, True) for k in ("fused", "fused_no_pdl")) else 1


def _serving(args) -> int:
    from inkling_workbook.measure import serving_bench, timing

    timing.require_gpu()
    out = args.out or (DATA / f"serving_{provenance.device_slug()}.json")
    doc = serving_bench.run(out)
    print(json.dumps({k: v for k, v in doc.items() if k != "provenance"}, indent=1))
    print(f"wrote {out}")
    return 0


def _server_chain(args) -> int:
    from inkling_workbook.measure import server_chain, timing

    timing.require_gpu()
    csv_path, json_path, rows, meta = server_chain.run(
        args.out, quick=args.quick, budget_s=args.budget_s, progress=not args.no_progress
    )
    print(server_chain.summary(rows))
    print(meta["pdl_default"]["summary"])
    print(f"wrote {csv_path} and {json_path}")
    return 0 if meta["checks_ok"] and _no_skips(meta, args) else 1


def _no_skips(meta: dict, args) -> bool:
    """A publishing run that left cases out for time is a failed step (its record says which),
    unless ``--allow-skips`` (the GPU job's smoke, whose small budget skips on purpose)."""
    skipped = meta.get("skipped_for_time") or []
    if skipped and not args.allow_skips:
        print(f"SKIPPED FOR TIME ({len(skipped)}), a failed run: {', '.join(map(str, skipped))}")
        return False
    return True


def _steps(args) -> int:
    from inkling_workbook.measure import timing
    from inkling_workbook.ports.silu_and_mul import port_steps

    timing.require_gpu()
    csv_path, meta_path = port_steps.measure_steps(args.out)
    print(f"wrote {csv_path} and {meta_path}")
    return 0


def _step_ladder(args, module: str, command: str) -> int:
    """A fused kernel's step ladder (``inkling_workbook.<module>.checks``) on a CUDA GPU: each step
    checked bitwise against the package, then timed; exits 1 on a mismatch."""
    import importlib

    from inkling_workbook.measure import timing

    step_checks = importlib.import_module(f"inkling_workbook.{module}.checks")
    device = torch.device(args.device)
    if device.type != "cuda":
        raise SystemExit(f"{command} times the kernels: it needs --device cuda (a CUDA GPU)")
    timing.require_gpu()
    out = Path(args.out) if args.out else None
    csv_path, meta_path = step_checks.measure_steps(out, device)
    meta = json.loads(meta_path.read_text())
    print(json.dumps(meta["bitwise"]["summary"], indent=1))
    print(f"wrote {csv_path} and {meta_path}")
    return 0 if meta["bitwise"]["all_ok"] else 1


def _fp8_steps(args) -> int:
    return _step_ladder(args, "fp8_steps", "fp8-steps")


def _nvfp4_steps(args) -> int:
    return _step_ladder(args, "nvfp4_steps", "nvfp4-steps")


def _fusion(args) -> int:
    from inkling_workbook.proofs import fp_fusion

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    matrix = args.matrix or ("gpu" if device.type == "cuda" else "cpu")
    doc = {"provenance": provenance.collect(), **fp_fusion.run_outputs(device.type, matrix)}
    print(json.dumps(doc["summary"], indent=1))
    out = args.out or (DATA / f"fp_fusion_{provenance.device_slug(device)}.json")
    provenance.write_record(out, json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0 if doc["ok"] else 1


def _moe_layer(args) -> int:
    from inkling_workbook.moe import layer, record

    if args.cpu_smoke:
        doc = record.run(args.out, Ms=(8,), device="cpu", progress=not args.no_progress)
    else:
        from inkling_workbook.measure import timing

        timing.require_gpu()
        Ms = tuple(int(m) for m in args.ms.split(",")) if args.ms else layer.GPU_MS
        doc = record.run(args.out, Ms=Ms, progress=not args.no_progress)
    keep = ("all_bitwise_equal", "all_within_bound", "grouped_mm", "compile_s_total", "elapsed_s", "errors")
    print(json.dumps({k: doc[k] for k in keep}, indent=1))
    print(f"wrote {Path(args.out) / 'data'}/moe_layer_*.json")
    return 0 if doc["all_bitwise_equal"] and doc["all_within_bound"] else 1


def _figures(args) -> int:
    from inkling_workbook.publish import figures, tables

    written = figures.draw_all(Path(args.data), Path(args.out))
    for p in written:
        print(f"wrote {p}")
    readme = Path(args.readme) if args.readme else None
    if readme is not None and tables.update_readme(readme, Path(args.data)):
        print(f"updated the generated tables in {readme}")
    if not written:
        print(f"no benchmark CSV in {args.data}: run `python -m inkling_workbook bench` on a GPU first")
        return 1
    return 0


def _results(args) -> int:
    from inkling_workbook.publish import results

    root, data = Path(args.root), Path(args.data) if args.data else None
    if args.check:
        stale = results.stale(root, data)
        for name in stale:
            print(f"stale: {name} (run python -m inkling_workbook results)")
        return 1 if stale else 0
    for doc in results.update(root, data):
        print(f"updated the generated blocks in {doc}")
    return 0


def _decode(args) -> int:
    from inkling_workbook.measure import decode_baselines, timing

    timing.require_gpu()
    csv_path, json_path, rows = decode_baselines.run(args.out, budget_s=args.budget_s)
    print(decode_baselines.summary(rows))
    print(f"wrote {csv_path} and {json_path}")
    meta = json.loads(Path(json_path).read_text())
    return 0 if meta["bits_equal_all"] and _no_skips(meta, args) else 1


def _port_records(bench, args) -> int:
    """A port's GPU records (``bench``: its folder's ``bench`` module): portcheck, the steps, the sweep."""
    from inkling_workbook.measure import timing

    timing.require_gpu()
    parts = bench.PARTS if args.part == "all" else (args.part,)
    jobs = args.jobs if args.jobs is not None else max(1, min(12, (os.cpu_count() or 2) - 2))
    doc = bench.run(args.out, quick=args.quick, progress=not args.no_progress, parts=parts, jobs=jobs)
    print(doc["tally"])
    for step in doc.get("steps", []):
        print(f"step {step['step']} {step['name']}: {step['equal_cases']}/{step['cases']} cases equal")
    if doc["rows"]:
        print(bench.summary(doc["rows"]))
    print(f"wrote {doc['portcheck']}" + (f", {doc['bench_csv']} and {doc['bench_json']}" if doc["bench_csv"] else ""))
    return 0 if doc["ok"] else 1


def _silu_mul_fp8(args) -> int:
    from inkling_workbook.ports.silu_mul_fp8 import bench

    return _port_records(bench, args)


def _rms_norm_quant(args) -> int:
    from inkling_workbook.ports.rms_norm_quant import bench

    return _port_records(bench, args)


def _info(args) -> int:
    print(json.dumps(provenance.collect(), indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inkling_workbook", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check", help="the bitwise records: the Triton port vs the helion originals, through portcheck")
    p.add_argument("--quick", action="store_true", help="a small GPU matrix")
    p.add_argument(
        "--matrix", choices=["gpu", "quick", "cpu"], help="force a matrix (default: gpu on CUDA, cpu otherwise)"
    )
    p.add_argument("--nvfp4", action="store_true", help="check fused == unfused == reference for NVFP4 instead")
    p.add_argument("--out", help="JSON output (default data/bitwise_<device>.json)")
    p.add_argument("--no-progress", action="store_true", help="no NVFP4 progress bar")
    p.set_defaults(fn=_check)
    import portcheck.cli

    p = sub.add_parser("portcheck", help="portcheck (`python -m portcheck`): a port against its original, bit for bit")
    portcheck.cli.add_arguments(p)
    p.set_defaults(fn=portcheck.cli.run_args)
    p = sub.add_parser("bench", help="benchmark sweep (GPU only)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cold-l2", action="store_true", help="also time with rotating buffers (cold L2)")
    p.add_argument("--no-tune", action="store_true", help="skip the tile sweep")
    p.add_argument(
        "--part",
        choices=["all", "silu", "quant"],
        default="all",
        help="silu: the silu_and_mul sweep; quant: NVFP4 and FP8, each with its records; all: both",
    )
    p.add_argument("--max-autotune-budget-s", type=float,
                   help="start no max-autotune compile after this many seconds (the record lists them)")  # fmt: skip
    p.add_argument("--out", help="CSV output (default data/bench_<gpu>.csv)")
    p.set_defaults(fn=_bench)
    p = sub.add_parser("serving", help="PDL in a decode chain, host time per call (GPU only)")
    p.add_argument("--out", help="JSON output (default data/serving_<gpu>.json)")
    p.set_defaults(fn=_serving)
    p = sub.add_parser("server-chain", help="the activation between two GEMMs launched without PDL (GPU only)")
    p.add_argument("--quick", action="store_true", help="two shapes (the GPU job's smoke)")
    p.add_argument("--out", help="CSV output (default data/server_chain_<gpu>.csv; a .json beside it)")
    p.add_argument("--budget-s", type=float, default=150.0, help="start no new case after this many seconds")
    p.add_argument("--allow-skips", action="store_true", help="exit 0 even if cases were left out for time")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=_server_chain)
    p = sub.add_parser("steps", help="time helion's original, every step of the port and the package kernel (GPU only)")
    p.add_argument("--out", help="CSV output (default data/port_steps_<gpu>.csv; a .json beside it)")
    p.set_defaults(fn=_steps)
    p = sub.add_parser("fp8-steps", help="check and time every step of the fused FP8 kernel (notebook 07; GPU only)")
    p.add_argument("--device", default="cuda", help="default cuda (the only one it times on)")
    p.add_argument("--out", help="CSV file or folder (default data/fp8_steps_<gpu>.csv; a .json beside it)")
    p.set_defaults(fn=_fp8_steps)
    p = sub.add_parser("nvfp4-steps", help="check and time every step of the fused NVFP4 kernel (notebook 05, GPU)")
    p.add_argument("--device", default="cuda", help="default cuda (the only one it times on)")
    p.add_argument("--out", help="CSV file or folder (default data/nvfp4_steps_<gpu>.csv; a .json beside it)")
    p.set_defaults(fn=_nvfp4_steps)
    p = sub.add_parser(
        "fusion", help="every op's bits under TRITON_DEFAULT_FP_FUSION=0 and =1, helion and torch.compile beside them"
    )
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when there is one")
    p.add_argument("--matrix", choices=["gpu", "quick", "cpu"], help="default: gpu on CUDA, cpu otherwise")
    p.add_argument("--out", help="JSON output (default data/fp_fusion_<device>.json)")
    p.set_defaults(fn=_fusion)
    p = sub.add_parser("moe-layer", help="the MoE layer of notebook 08: accuracy, bitwise, timings (GPU)")
    p.add_argument("--out", default=str(provenance.REPO_ROOT), help="writes OUT/data/moe_layer_<device>.json/.csv")
    p.add_argument("--ms", help="comma-separated token counts (default 16,256,4096,16384)")
    p.add_argument("--cpu-smoke", action="store_true", help="a tiny untimed dry run on the CPU (the record's schema)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=_moe_layer)
    p = sub.add_parser("figures", help="draw figures/ from the CSVs in data/")
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--out", default=str(FIGURES))
    p.add_argument(
        "--readme",
        default=str(provenance.REPO_ROOT / "docs" / "results.md"),
        help="document whose summary and serving tables are rewritten from --data (default: the checkout's "
        "docs/results.md; '' for none); `results` rewrites every generated block",
    )
    p.set_defaults(fn=_figures)
    p = sub.add_parser("results", help="rewrite the generated tables of README.md and docs/results.md from data/")
    p.add_argument("--check", action="store_true", help="only report blocks that differ from data/ (exit 1)")
    p.add_argument("--root", default=str(provenance.REPO_ROOT), help="the checkout holding the documents")
    p.add_argument("--data", help="the records (default ROOT/data)")
    p.set_defaults(fn=_results)
    p = sub.add_parser(
        "decode", help="decode/mid shapes: port vs the sglang-config baseline and the empty-kernel floor (GPU only)"
    )
    p.add_argument("--out", default=str(provenance.REPO_ROOT), help="writes OUT/data/decode_<gpu>.csv and .json")
    p.add_argument("--budget-s", type=float, default=200.0, help="start no new shape after this many seconds")
    p.add_argument("--allow-skips", action="store_true", help="exit 0 even if shapes were left out for time")
    p.set_defaults(fn=_decode)
    p = sub.add_parser(
        "silu-mul-fp8",
        help="the second port (notebook 09): portcheck over the GPU matrix, then port vs helion vs compile (GPU)",
    )
    p.add_argument("--out", help="root for data/ (default: the repository)")
    p.add_argument("--quick", action="store_true", help="fewer shapes, no steps")
    p.add_argument(
        "--part",
        choices=["all", "check", "steps", "sweep"],
        default="all",
        help="one part (steps after check: they join its record)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        help="processes for the check, the steps and the sweep's compiles (default: the cores less 2, at most 12; "
        "the timing always runs alone)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=_silu_mul_fp8)
    p = sub.add_parser(
        "rms-norm-quant",
        help="the third port (notebook 10): portcheck and the steps over the GPU matrix, then port vs helion vs "
        "compile (GPU)",
    )
    p.add_argument("--out", help="root for data/ (default: the repository)")
    p.add_argument("--quick", action="store_true", help="fewer shapes, no steps")
    p.add_argument("--part", choices=["all", "check", "steps", "sweep"], default="all",
                   help="one part (steps after check: they join its record)")  # fmt: skip
    p.add_argument(
        "--jobs", type=int, help="processes for the check and the steps (default: the cores less 2, at most 12)"
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(fn=_rms_norm_quant)
    p = sub.add_parser("info", help="print device, versions and interpreter settings")
    p.set_defaults(fn=_info)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
