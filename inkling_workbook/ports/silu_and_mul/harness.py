"""The bitwise records of the silu port (``data/bitwise_<device>.json``), built from portcheck
reports (the NVFP4 matrix is :mod:`inkling_workbook.proofs.nvfp4_bitwise`).

:func:`bitwise_record` runs three portcheck comparisons over ``portcheck_cases.bitwise_cases``,
the package's ``silu_and_mul`` on the port side of each (:func:`comparisons`): the helion
original (fixed tile) with reruns and the same-order torch reference; the helion original with
the sm_90 table config, on the widths the table has; the port on the same gate/up data in the
other layout. It folds a case's three rows into one record row (``port_vs_helion``,
``port_vs_helion_sm90``, ``layouts_equal``, ``rerun_equal``, ``finite``, ``max_ulp_vs_ref``
within :data:`ULP_BUDGET`, ``ok``; portcheck's rows under ``mismatch`` for a failing case).
Without helion only the layouts comparison runs, with the reruns and the reference. See
docs/portcheck.md ("This port's bitwise records are produced by it").
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

import portcheck
from inkling_kernels.silu_and_mul import silu_and_mul
from inkling_workbook.measure import provenance
from inkling_workbook.ports.silu_and_mul import helion_original, portcheck_cases

# Largest ulp distance to the same-order torch reference that a case accepts, per output dtype.
# The kernels' sigmoid is 1 / (1 + exp2(-x * log2 e)) with ex2.approx and div.full on the GPU,
# torch's is expf-based: their fp32 results differ in the last few bits. A bf16/fp16 output
# hides that in its rounding (at most 1 ulp moves); an fp32 output shows it (11 ulp seen).
ULP_BUDGET = {"bfloat16": 1, "float16": 1, "float32": 16}

PORT = "inkling_kernels:silu_and_mul"
_PACKAGE_PORT = silu_and_mul
HELION = "inkling_workbook.ports.silu_and_mul.helion_original:silu_and_mul_helion"
HELION_SM90 = "inkling_workbook.ports.silu_and_mul.portcheck_cases:helion_sm90"
OTHER_LAYOUT = "inkling_workbook.ports.silu_and_mul.portcheck_cases:port_other_layout"
REFERENCE = "inkling_workbook.ports.silu_and_mul.portcheck_cases:same_order_reference"
#: the record's row fields, in the order of the printed table
COLUMNS = ("case", "port_vs_helion", "port_vs_helion_sm90", "layouts_equal", "rerun_equal", "finite", "max_ulp_vs_ref")


def comparisons(device: torch.device) -> list[dict]:
    """The portcheck comparisons of a record: name, original (callable and ``MODULE:NAME``), the
    case filter, reruns (original, port), whether the reference and the code report come with it."""
    full = (1, 2) if device.type == "cpu" else (2, 2)
    layouts = {"name": "layouts", "original": (portcheck_cases.port_other_layout, OTHER_LAYOUT), "only": None}
    if not helion_original.available():
        return [{**layouts, "reruns": (1, 2), "reference": True, "code": True}]
    return [
        {"name": "helion", "original": (helion_original.silu_and_mul_helion, HELION), "only": None,
         "reruns": full, "reference": True, "code": True},
        {"name": "helion_sm90", "original": (portcheck_cases.helion_sm90, HELION_SM90),
         "only": portcheck_cases.has_sm90_config, "reruns": (1, 1), "reference": False, "code": False},
        {**layouts, "reruns": (1, 1), "reference": False, "code": False},
    ]  # fmt: skip


def bitwise_record(
    kind: str, device: torch.device | str | None = None, progress: bool = True, port=None
) -> tuple[dict, dict[str, portcheck.Report]]:
    """Run the comparisons over ``portcheck_cases.bitwise_cases(kind)``; returns the record
    (provenance, matrix, tally, all_ok, cases, portcheck) and the reports by name.
    ``port``: the port side (default the package's ``silu_and_mul``; tests plant others)."""
    if kind not in portcheck_cases.MATRICES:
        raise ValueError(f"kind must be one of {portcheck_cases.MATRICES}, got {kind!r}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    cases = portcheck_cases.bitwise_cases(kind)
    port_fn = port or silu_and_mul  # looked up here: a test plants another port by monkeypatching
    port_name = PORT if port_fn is _PACKAGE_PORT else portcheck.label(port_fn)
    spec = f"inkling_workbook.ports.silu_and_mul.portcheck_cases:bitwise_{kind}_cases"
    reports, runs = {}, []
    for comp in comparisons(device):
        picked = [c for c in cases if comp["only"] is None or comp["only"](c)]
        if not picked:
            continue
        fn, name = comp["original"]
        t0 = time.perf_counter()
        reports[comp["name"]] = portcheck.run(
            fn,
            port_fn,
            picked,
            device,
            reference=portcheck_cases.same_order_reference if comp["reference"] else None,
            reruns=comp["reruns"],
            code=comp["code"],
            names=(name, port_name, spec),
        )
        seconds = time.perf_counter() - t0
        report = reports[comp["name"]]
        n_ok = sum(r["ok"] for r in report.cases)
        runs.append(
            {"name": comp["name"], "original": name, "port": port_name, "cases": spec, "n_cases": len(picked),
             "ok_cases": n_ok, "reruns": list(comp["reruns"]), "reference": REFERENCE if comp["reference"] else None,
             "seconds": round(seconds, 1)}
        )  # fmt: skip
        if progress:
            print(f"portcheck {comp['name']}: {n_ok}/{len(picked)} cases equal ({seconds:.0f} s)", flush=True)
    rows = merge(cases, reports)
    doc = {
        "provenance": provenance.collect(),
        "matrix": kind,
        "tally": tally(rows),
        "all_ok": all_ok(rows),
        "cases": rows,
        "portcheck": {"device": str(device), "comparisons": runs},
    }
    main = reports.get("helion") or reports.get("layouts")
    if main is not None and main.code is not None:
        doc["portcheck"]["code"] = main.code
    return doc, reports


def merge(cases: list[portcheck.Case], reports: dict[str, portcheck.Report]) -> list[dict]:
    """One record row a case from the comparisons' rows (see the module docstring)."""
    by_name = {name: {r["case"]: r for r in rep.cases} for name, rep in reports.items()}
    rows = []
    for case in cases:
        meta = case.meta
        helion = by_name.get("helion", {}).get(case.name)
        sm90 = by_name.get("helion_sm90", {}).get(case.name)
        layouts = by_name["layouts"][case.name]
        main = helion or layouts  # the comparison with the reruns and the reference
        row = {"case": case.name, **meta, "seed": case.seed}
        row["port_vs_helion"] = None if helion is None else _equal(helion)
        row["port_vs_helion_sm90"] = None if sm90 is None else _equal(sm90)
        row["layouts_equal"] = _equal(layouts)
        row["rerun_equal"] = all(main.get(f"{side}_deterministic") is not False for side in ("original", "port"))
        row["rerun_equal"] = row["rerun_equal"] and "error" not in main
        outs = main.get("outputs", [])
        row["finite"] = bool(outs) and all(o.get("nan", [0, 1])[1] == 0 and o.get("inf", [0, 1])[1] == 0 for o in outs)
        worst = (main.get("ulp_max") or {}).get("port")
        row["max_ulp_vs_ref"] = -1 if worst is None else worst
        row["ulp_vs_ref"] = (main.get("ulp") or {}).get("port")
        row["ok"] = bool(
            row["port_vs_helion"] is not False
            and row["port_vs_helion_sm90"] is not False
            and row["layouts_equal"]
            and row["rerun_equal"]
            and row["finite"]
            and 0 <= row["max_ulp_vs_ref"] <= ULP_BUDGET[meta["out_dtype"]]
        )
        failed = {name: r for name, r in (("helion", helion), ("helion_sm90", sm90), ("layouts", layouts))
                  if r is not None and not r["ok"]}  # fmt: skip
        if failed:
            row["mismatch"] = failed
        rows.append(row)
    return rows


def _equal(r: dict) -> bool:
    return bool(r.get("equal")) and "error" not in r


def tally(rows: list[dict]) -> str:
    """One line: ``88/88 bitwise identical`` (port vs helion), plus the other checks."""
    n = len(rows)
    if all(r["port_vs_helion"] is None for r in rows):
        head = f"helion not installed: port vs helion not run on {n} cases"
    else:
        same = sum(bool(r["port_vs_helion"]) for r in rows)
        head = f"{same}/{n} bitwise identical"
    table = [r for r in rows if r.get("port_vs_helion_sm90") is not None]
    if table:
        head += f"; vs helion with the sm_90 table {sum(r['port_vs_helion_sm90'] for r in table)}/{len(table)}"
    layouts = sum(r["layouts_equal"] for r in rows)
    reruns = sum(r["rerun_equal"] for r in rows)
    finite = sum(r["finite"] for r in rows)
    ulp = max((r["max_ulp_vs_ref"] for r in rows), default=0)
    return (
        f"{head}; layouts equal {layouts}/{n}; reruns equal {reruns}/{n}; finite {finite}/{n}; "
        f"max ulp vs reference {ulp}"
    )


def all_ok(rows: list[dict]) -> bool:
    return bool(rows) and all(r["ok"] for r in rows)


def format_table(rows: list[dict]) -> str:
    widths = [max(len(c), *(len(str(r.get(c))) for r in rows)) for c in COLUMNS]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths))]
    lines += ["  ".join(str(r.get(c)).ljust(w) for c, w in zip(COLUMNS, widths)) for r in rows]
    return "\n".join(lines)


def save(doc: dict, path: str | Path) -> None:
    provenance.write_record(path, json.dumps(doc, indent=1, default=str) + "\n")
