"""What a run found: :class:`Report` (JSON, markdown that opens on the summary, JUnit XML) and the
provenance it records (torch, Triton, device, the CPU mode and its repairs)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
import sys

import torch

from ._version import __version__
from .compare import ULP_BUCKETS

#: exit codes of the command line (and :attr:`Report.exit_code`)
EXIT_EQUAL, EXIT_MISMATCH, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3
_FAILED = ("error", "crashed", "timeout")


def provenance(device, interpret_repairs: bool = True) -> dict:
    """Versions and machine: python, torch, Triton, numpy, the device, the CPU mode, the command."""
    import numpy
    import triton

    device = torch.device(device)
    doc = {
        "portcheck": __version__,
        "distribution": _version(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": triton.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "device": device.type,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(sys.argv) if sys.argv and sys.argv[0] else None,
    }
    if device.type == "cuda":
        doc["gpu"] = torch.cuda.get_device_name(device)
        doc["cuda"] = torch.version.cuda
        doc["cpu_mode"] = None
    else:
        from .interpret import provenance as cpu

        doc["gpu"] = None
        doc["cpu_mode"] = cpu(interpret_repairs)
    return doc


def _version() -> str:
    """The version of the distribution portcheck was installed from (``inkling-kernels``)."""
    try:
        from importlib.metadata import version

        return version("inkling-kernels")
    except Exception:
        return "unknown"


def status_of(row: dict) -> str:
    if "status" in row:
        return row["status"]
    return "error" if "error" in row else "equal" if row.get("ok") else "mismatch"


@dataclasses.dataclass
class Report:
    """What a run found. ``ok``: every case equal (under the mode) and both sides deterministic.
    :attr:`exit_code`: 0 equal, 1 a mismatch, 3 a case errored, crashed or timed out."""

    original: str
    port: str
    device: str
    cases: list[dict]
    code: dict | None = None
    timings: dict | None = None
    reference: str | None = None
    mode: dict | None = None
    provenance: dict | None = None

    @property
    def ok(self) -> bool:
        return bool(self.cases) and all(r["ok"] for r in self.cases)

    def counts(self) -> dict:
        out = dict.fromkeys(("equal", "mismatch", "error", "crashed", "timeout"), 0)
        for r in self.cases:
            out[status_of(r)] = out.get(status_of(r), 0) + 1
        return out

    @property
    def exit_code(self) -> int:
        counts = self.counts()
        if any(counts[s] for s in _FAILED):
            return EXIT_ERROR
        return EXIT_EQUAL if self.ok else EXIT_MISMATCH

    def verdict(self) -> str:
        return {EXIT_EQUAL: "OK", EXIT_MISMATCH: "MISMATCH", EXIT_ERROR: "ERROR"}[self.exit_code]

    def tally(self) -> str:
        n_ok = sum(r["ok"] for r in self.cases)
        line = f"{n_ok}/{len(self.cases)} cases equal and deterministic on {self.device}: **{self.verdict()}**"
        counts = self.counts()
        bad = [f"{counts[s]} {s}" for s in ("mismatch", *_FAILED) if counts[s]]
        return line + (f" ({', '.join(bad)})" if bad else "")

    def to_json(self) -> str:
        doc = dataclasses.asdict(self)
        doc["ok"] = self.ok
        doc["exit_code"] = self.exit_code
        doc["counts"] = self.counts()
        doc["summary"] = self.pivot()
        return json.dumps(doc, indent=1, default=str)

    def pivot(self) -> dict:
        """``{dtype: {value class: [equal, cases]}}`` over the cases."""
        out: dict = {}
        for r in self.cases:
            cell = out.setdefault(r.get("dtype", "-"), {}).setdefault(r.get("value_class", "-"), [0, 0])
            cell[0] += bool(r["ok"])
            cell[1] += 1
        return out

    def pivot_markdown(self) -> list[str]:
        piv = self.pivot()
        classes = list(dict.fromkeys(vc for row in piv.values() for vc in row))
        lines = ["| dtype \\ value class | " + " | ".join(classes) + " |", "|---|" + "---|" * len(classes)]
        for dtype, row in piv.items():
            cells = [f"{row[vc][0]}/{row[vc][1]}" + ("" if row[vc][0] == row[vc][1] else " **x**")
                     if vc in row else "-" for vc in classes]  # fmt: skip
            lines.append(f"| {dtype} | " + " | ".join(cells) + " |")
        return lines

    def mismatches_markdown(self) -> str:
        """The mismatch details alone (each failing case: what differs, where, both values in
        hex, its seed and reproducer); empty when every case passed."""
        bad = [r for r in self.cases if not r["ok"]]
        if not bad:
            return ""
        lines = ["## Mismatches", ""]
        for r in bad:
            lines += details(r)
        return "\n".join(lines).rstrip("\n") + "\n"

    def header_lines(self) -> list[str]:
        """The lines under the tally: how the outputs were compared and where they ran."""
        mode = (self.mode or {}).get("description", "bit equality")
        lines = [f"- compared by: {mode}"]
        prov = self.provenance or {}
        if prov:
            where = f"torch {prov.get('torch')}, Triton {prov.get('triton')}"
            cpu = prov.get("cpu_mode")
            if cpu:
                repairs = ", ".join(cpu["repairs"]) or "none (the interpreter as Triton ships it)"
                where += f"; CPU mode: Triton's interpreter, repairs: {repairs}"
            elif prov.get("gpu"):
                where += f"; {prov['gpu']}"
            lines.append(f"- ran on: {where}")
        if self.reference:
            lines.append(f"- reference: `{self.reference}` (ulp histograms against it)")
        return lines

    def to_markdown(self) -> str:
        lines = [f"# portcheck: `{self.port}` against `{self.original}`", "", self.tally(), ""]
        lines += self.header_lines() + [""]
        lines += ["## Summary (equal/cases by dtype and value class)", ""] + self.pivot_markdown() + [""]
        head = ["case", "outputs", "equal", "mismatching elements", "NaN/Inf", "deterministic (orig/port)"]
        if self.reference:
            head += ["ulp orig (0/1/2/3-4/5-8/>8/nan)", "ulp port"]
        lines += ["## Cases", ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.cases:
            lines.append("| " + " | ".join(_summary_cells(r, bool(self.reference))) + " |")
        if not self.ok:
            lines += ["", self.mismatches_markdown()]
        if self.timings:
            lines += [
                "",
                "## Timings (us per call: median [lo, hi])",
                "",
                "| case | original | port |",
                "|---|---|---|",
            ]
            for name, t in self.timings.items():
                cells = [f"{v['median_us']:.3f} [{v['lo_us']:.3f}, {v['hi_us']:.3f}]" for v in t.values()]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if self.code:
            from .code import code_table

            lines += ["", "## Generated code (first case, PTX for " + self.code.get("target", "sm_90") + ")", ""]
            lines += code_table(self.code)
        return "\n".join(lines) + "\n"

    def to_junit(self, suite: str = "portcheck") -> str:
        """JUnit XML: one ``testcase`` per case (a mismatch a ``failure``, an error, crash or
        timeout an ``error``), the provenance as ``properties``."""
        from xml.sax.saxutils import escape, quoteattr

        counts = self.counts()
        fails, errors = counts["mismatch"], sum(counts[s] for s in _FAILED)
        out = ['<?xml version="1.0" encoding="utf-8"?>', "<testsuites>",
               f"<testsuite name={quoteattr(suite)} tests=\"{len(self.cases)}\" failures=\"{fails}\" "
               f"errors=\"{errors}\" skipped=\"0\">", "<properties>"]  # fmt: skip
        props = {"original": self.original, "port": self.port, "device": self.device,
                 "mode": (self.mode or {}).get("description", "bit equality")}  # fmt: skip
        for k, v in (self.provenance or {}).items():
            props[k] = json.dumps(v) if isinstance(v, dict) else v
        for k, v in props.items():
            out.append(f"<property name={quoteattr(str(k))} value={quoteattr(str(v))}/>")
        out.append("</properties>")
        for r in self.cases:
            status = status_of(r)
            out.append(f"<testcase classname={quoteattr(self.port)} name={quoteattr(r['case'])}>")
            text = escape("\n".join(details(r)))
            if status == "mismatch":
                out.append(f"<failure message={quoteattr(_first_problem(r))}>{text}</failure>")
            elif status in _FAILED:
                out.append(
                    f"<error type={quoteattr(status)} message={quoteattr(r.get('error', status))}>{text}</error>"
                )
            out.append("</testcase>")
        out += ["</testsuite>", "</testsuites>"]
        return "\n".join(out) + "\n"


def _first_problem(r: dict) -> str:
    for side in ("original", "port"):
        if r.get(f"{side}_deterministic") is False:
            return f"the {side} is not deterministic"
    for o in r.get("outputs", []):
        if o.get("problem"):
            return f"output {o['output']}: {o['problem']}"
        if not o.get("equal"):
            return f"output {o['output']}: {o['mismatches'] - o.get('accepted', 0)} of {o['elements']} elements differ"
    return "mismatch"


def _summary_cells(r: dict, with_ulp: bool) -> list[str]:
    status = status_of(r)
    if status in _FAILED:
        word = "error" if status == "error" else status
        return [r["case"], "-", word, "-", "-", "-"] + (["-", "-"] if with_ulp else [])
    outs = r["outputs"]
    shapes = ", ".join(f"{tuple(o['shape'])} {o['dtype'].removeprefix('torch.')}" for o in outs if "shape" in o)
    nan = "; ".join(_nan_cell(o) for o in outs if "nan" in o) or "-"
    mism = "shape/dtype" if any(o.get("problem") for o in outs) else str(r["mismatches"])
    if r.get("accepted"):
        mism += f" ({r['accepted']} accepted)"
    det = "/".join(_det_cell(r[f"{side}_deterministic"]) for side in ("original", "port"))
    cells = [r["case"], shapes or "-", "yes" if r["equal"] else "NO", mism, nan, det]
    if with_ulp:
        for side in ("original", "port"):
            h = (r.get("ulp") or {}).get(side)
            cells.append("/".join(str(h[b]) for b in ULP_BUCKETS) if h else "-")
    return cells


def _det_cell(flag) -> str:
    return "-" if flag is None else "yes" if flag else "NO"


def _nan_cell(o: dict) -> str:
    keys = ("nan_positions_differ", "inf_positions_differ", "nan_payloads_differ")
    if not any(o.get(k) for k in keys):
        return "same"
    return "NaN pos {}, Inf pos {}, payload {}".format(*(o[k] for k in keys))


def details(r: dict) -> list[str]:
    """A failing case in markdown: what differs, where (hex and value), seed, reproducer."""
    lines = [f"### {r['case']}", "", f"- inputs: seed {r['seed']}, digest {r.get('inputs', '-')}"]
    if "error" in r:
        lines.append(f"- {status_of(r)}: {r['error']}" + (f" (at {r['error_at']})" if r.get("error_at") else ""))
    else:
        for side in ("original", "port"):
            if r[f"{side}_deterministic"] is False:
                lines.append(f"- the {side} is not deterministic: a rerun on the same inputs gave other bits")
        for o in r["outputs"]:
            if o.get("problem"):
                lines.append(f"- output {o['output']}: {o['problem']}")
            elif not o["equal"]:
                accepted = f" ({o['accepted']} more accepted by the mode)" if o.get("accepted") else ""
                n = o["mismatches"] - o.get("accepted", 0)
                lines.append(f"- output {o['output']}: {n} of {o['elements']} elements differ{accepted}")
                if o.get("nan_positions_differ") or o.get("inf_positions_differ"):
                    lines.append(
                        f"  - NaN positions differ at {o['nan_positions_differ']} elements, "
                        f"Inf positions at {o['inf_positions_differ']}"
                    )
                if o.get("nan_payloads_differ"):
                    lines.append(f"  - NaN payloads differ at {o['nan_payloads_differ']} elements (both NaN)")
                for f in o.get("first", []):
                    lines.append(
                        f"  - at {tuple(f['at'])}: original {f['original']} ({f['original_value']}), "
                        f"port {f['port']} ({f['port_value']})"
                    )
    if r.get("ulp_error") and "error" not in r:
        lines.append(f"- no ulp histogram: {r['ulp_error']}")
    if r.get("dump"):
        lines.append(f"- inputs and outputs: `{r['dump']}`")
    if r.get("reproduce"):
        lines.append(f"- reproduce: `{r['reproduce']}`")
    return lines + [""]
