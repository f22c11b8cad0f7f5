"""Collect the reliability figures docs/results.md quotes into data/reliability.json, and rewrite
its reliability table (between ``<!-- reliability:start -->`` and ``<!-- reliability:end -->``)
from it.

Every number comes from a recorded file or from collecting this checkout's tests: GPU test and
sanitizer counts from the logs of the GPU job's calls on the H200 (data/logs/gpu_job_h200*.log,
one section per step), bitwise counts from the data/*bitwise*.json records, CPU test and
bad-input counts from ``pytest --collect-only`` here.

    python tools/reliability.py           # refresh data/reliability.json and the table in docs/results.md
    python tools/reliability.py --check   # exit 1 if that table differs from the JSON
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
LOG_DIR = DATA / "logs"  # the GPU job logs (data/README.md)
README = ROOT / "docs" / "results.md"  # the document holding the reliability table
# The GPU job logs the table reports, newest first: (file in data/logs/, what it was). Each is parsed
# the same way (its `=== <step>` sections and its summary); nothing in the table is typed by hand.
LOGS = [
    (
        "gpu_job_h200_c48987e_tests.log",
        "the GPU job's checks at c48987e, call 1: tests and bitwise, all green (the suite 1334 passed; "
        "bitwise 336/336, NVFP4 48/48, PTX 32 registers no spills; FP fusion off 443 passed)",
    ),
    (
        "gpu_job_h200_c48987e_sanitize.log",
        "the GPU job's checks at c48987e, call 2: memcheck, racecheck, initcheck (0 errors) and every "
        "notebook but 06 executed compiled, all green",
    ),
    (
        "gpu_job_h200_c48987e_smoke.log",
        "the GPU job's checks at c48987e, call 3: smoke red (the third port's sweep: 1 element of 1024 x "
        "2048 differs from the original, a config the GPU matrix lacks); notebook 06 cut by the call's limit",
    ),
    (
        "gpu_job_h200_6a21c5b_tests.log",
        "the GPU job's checks, call 1: tests and bitwise (bitwise, NVFP4, PTX green; 6 failures: the third "
        "port's NaN scale at H = 5120, its CPU-path tests under Triton 3.6, the digest under Python 3.12, "
        "a dynamo-config leak)",
    ),
    (
        "gpu_job_h200_cda9bde_smoke.log",
        "the GPU job's checks, call 2: timing tests, measurement smoke, notebook 06 (06 failed: its re-measurement "
        "has anchor columns the recorded sweep predates)",
    ),
    (
        "gpu_job_h200_cda9bde_call1.log",
        "the GPU job's checks, call 1: tests, bitwise, sanitizers, notebooks in one call, cut at its 585 s limit "
        "(unfinished: the fusion-off rerun at 97%, notebooks 05 and 07)",
    ),
    ("gpu_job_h200_ea4e66d_tests.log", "the GPU job's checks: tests and bitwise (6 failures: stale GPU-only tests)"),
    ("gpu_job_h200_403c0ab_smoke.log", "the GPU job's checks, call 3: timing tests, measurement smoke, notebook 06"),
    ("gpu_job_h200_403c0ab_sanitize.log", "the GPU job's checks, call 2: sanitizers over the whole kernel test files"),
    (
        "gpu_job_h200_ae739eb_call1.log",
        "the GPU job's checks, call 1: tests, bitwise, fusion (one failure: its own race)",
    ),
    ("gpu_job_h200_e8e64d1_tests.log", "the GPU job, tests and sanitizers after experiment AF (scale store, loads)"),
    ("gpu_job_h200_08c814b_tests.log", "the GPU job, tests and sanitizers after the shorter sigmoid (AC)"),
    ("gpu_job_h200_526be54_tests.log", "the GPU job, tests and sanitizers after the packed work-list lookup"),
    ("gpu_job_h200_8cf9692_tests.log", "the GPU job, tests after the FP8 hot path and strided-input fixes"),
    ("gpu_job_h200_f2abd4a_sanitize.log", "the GPU job, sanitizers after the FP8 thin launch path"),
    ("gpu_job_h200_dea7f6e.log", "the GPU job, tests and bitwise checks"),
    ("gpu_job_h200_525d6e9.log", "the GPU job, checks only (tests, sanitizers, bitwise)"),
    ("gpu_job_h200.log", "the publishing GPU job, call 1"),
    ("gpu_job_h200_call2.log", "the publishing GPU job, call 2"),
    ("gpu_job_h200_call3_notebooks.log", "the publishing GPU job, call 3"),
]
START, END = "<!-- reliability:start -->", "<!-- reliability:end -->"


def collected(*args: str) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, cwd=ROOT,
    ).stdout  # fmt: skip
    return sum(1 for line in out.splitlines() if "::" in line)


def log_sections(text: str) -> dict[str, str]:
    """The GPU job's log cut at its ``=== <step>`` headers; a call cut at its time limit has none,
    only the live lines each step prefixed with ``[<step>]`` (steps_live.log)."""
    parts = re.split(r"^=== (\w+)$", text, flags=re.M)
    sections = {name: body for name, body in zip(parts[1::2], parts[2::2])}
    if not sections:
        for name, line in re.findall(r"^\[(\w+)\] ?(.*)$", text, flags=re.M):
            sections[name] = sections.get(name, "") + line + "\n"
    return sections


def _count(pattern: str, text: str) -> int | None:
    """The sum over every match (a memcheck step runs several pytest processes, one summary each)."""
    found = re.findall(pattern, text, flags=re.M)
    return sum(int(x) for x in found) if found else None


def step_counts(body: str) -> dict:
    """pytest's passed/failed/skipped and compute-sanitizer's summary from one step's section."""
    return {
        "passed": _count(r"(\d+) passed", body),
        "failed": _count(r"(\d+) failed", body) or 0,
        "skipped": _count(r"(\d+) skipped", body) or 0,
        "exit": _count(r"exit (-?\d+) after", body),
        "sanitizer_errors": _count(r"ERROR SUMMARY: (\d+) error", body),
        "racecheck_hazards": _count(r"RACECHECK SUMMARY: (\d+) hazard", body),
    }


def job_record(name: str, what: str) -> dict:
    """What one GPU job log says: commit, device, date, seconds, each step's exit status and
    seconds (its summary), the test and sanitizer counts, the bitwise tally and method check."""
    text = (LOG_DIR / name).read_text()
    sec = log_sections(text)
    commit = re.search(r'"git_commit": "([^"]+)"', text)
    device = re.search(r'"device": "([^"]+)"', text)
    date = re.search(r'"date_utc": "([^"]+)"', text)
    summary = re.search(r"^=== summary \([\d:]+, (\d+) s after setup\)[^\n]*\n(.*?)^steps failed", text, re.M | re.S)
    steps = {}
    if summary:
        for line in summary.group(2).splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1].lstrip("-").isdigit():
                steps[parts[0]] = {"exit": int(parts[1]), "seconds": int(parts[2])}
    tally = re.search(
        r"^(?:\[\w+\] )?(\d+/\d+ bitwise identical; vs helion with the sm_90 table \d+/\d+)", text, flags=re.M
    )
    method = re.search(r"'ratio': ([\d.]+), 'within_3pct': (True|False)", text)
    return {
        "log": f"data/logs/{name}",
        "what": what,
        "git_commit": commit.group(1)[:12] if commit else None,
        "device": device.group(1) if device else None,
        "date_utc": date.group(1) if date else None,
        "seconds": int(summary.group(1)) if summary else None,
        "cut": summary is None,
        "steps": steps,
        "steps_failed": sorted(k for k, v in steps.items() if v["exit"] != 0),
        "counts": {
            k: step_counts(sec[k]) for k in ("tests", "timing", "memcheck", "racecheck", "initcheck") if k in sec
        },
        "bitwise": tally.group(1) if tally else None,
        "method_check_ratio": float(method.group(1)) if method else None,
    }


def collect() -> dict:
    return {
        "gpu_jobs": [job_record(name, what) for name, what in LOGS if (LOG_DIR / name).exists()],
        "bitwise": {
            name: json.loads((DATA / name).read_text())["tally"]
            for name in ("bitwise_h200.json", "bitwise_cpu.json", "nvfp4_bitwise_h200.json")
        },
        "cpu_tests_collected": collected("tests"),
        "bad_input_cases": collected("tests", "-k", "bad_input or device_mismatch or rejects or refused"),
        "sources": [*(f"data/logs/{n}" for n, _ in LOGS), "data/bitwise_h200.json", "data/bitwise_cpu.json",
                    "data/nvfp4_bitwise_h200.json", "pytest --collect-only tests"],
    }  # fmt: skip


def _lead(tally: str) -> str:
    return tally.split(";")[0].split(" (")[0]


def _job_rows(job: dict) -> list[tuple[str, str, str]]:
    src, head = f"`{job['log']}`", f"{job['what']} (commit {job['git_commit']}, {(job['date_utc'] or '')[:10]})"
    failed = ", ".join(job["steps_failed"]) or "none"
    if job.get("cut"):
        rows = [(f"{head}: steps", "cut at the call's time limit, no summary: **not a green job**", src)]
    else:
        rows = [
            (f"{head}: steps", f"{', '.join(job['steps'])}: {job['seconds']} s on one {job['device']}; "
             f"failed: **{failed}**", src),
        ]  # fmt: skip
    c = job["counts"]
    if "tests" in c:
        t = c["tests"]
        rows.append((f"{head}: test suite on the GPU", f"{t['passed']} passed, **{t['failed']} failed**, "
                     f"{t['skipped']} skipped", src))  # fmt: skip
    if "memcheck" in c:
        m, r, i = c["memcheck"], c.get("racecheck", {}), c.get("initcheck", {})
        rows.append((f"{head}: compute-sanitizer over {m['passed']} / {r.get('passed')} / {i.get('passed')} kernel "
                     "tests (memcheck with `PYTORCH_NO_CUDA_MEMORY_CACHING=1` / racecheck / initcheck)",
                     f"**{m['sanitizer_errors']} errors / {r.get('racecheck_hazards')} hazards / "
                     f"{i.get('sanitizer_errors')} errors**", src))  # fmt: skip
    if job["bitwise"]:
        rows.append((f"{head}: port vs helion originals", f"**{job['bitwise']}**", src))
    if job["method_check_ratio"] is not None:
        rows.append((f"{head}: timing method check (one decode shape, the chosen call count vs 4x it)",
                     f"ratio {job['method_check_ratio']:.4f} (must be within 3%)", src))  # fmt: skip
    return rows


def markdown(doc: dict) -> str:
    """The reliability table of docs/results.md, from data/reliability.json."""
    bw = doc["bitwise"]
    rows = [
        ("port vs helion originals, compiled on the H200", f"**{_lead(bw['bitwise_h200.json'])}** (M 1..49152, "
         "N 1..3072, both layouts, weights, fp16/fp32, one case with numel > 2^31)", "`data/bitwise_h200.json`"),
        ("port vs helion originals, Triton interpreter", f"**{_lead(bw['bitwise_cpu.json'])}**",
         "`data/bitwise_cpu.json`"),
        ("NVFP4 fused == unfused == reference, H200", f"**{_lead(bw['nvfp4_bitwise_h200.json'])}** (6 widths, "
         "uniform and non-uniform experts incl. empty ones, both layouts, weights)", "`data/nvfp4_bitwise_h200.json`"),
    ]  # fmt: skip
    for job in doc["gpu_jobs"]:
        rows += _job_rows(job)
    rows += [
        ("tests in this checkout (CPU run: the GPU-only tests skip)", str(doc["cpu_tests_collected"]),
         "`pytest --collect-only`"),
        ("bad inputs tried (each must raise a `ValueError`/`TypeError` naming the argument)",
         str(doc["bad_input_cases"]), "`pytest --collect-only -k bad_input...`"),
    ]  # fmt: skip
    lines = ["| what | count | from |", "|---|---:|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


def readme_block(text: str) -> str:
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv: list[str]) -> int:
    if "--check" in argv:
        doc = json.loads((DATA / "reliability.json").read_text())
        if readme_block(README.read_text()) != markdown(doc):
            print("the reliability table in docs/results.md differs from data/reliability.json: run make reliability")
            return 1
        return 0
    doc = collect()
    (DATA / "reliability.json").write_text(json.dumps(doc, indent=1) + "\n")
    text = README.read_text()
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    README.write_text(f"{head}{START}\n{markdown(doc)}{END}{tail}")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
