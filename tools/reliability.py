"""Collect the reliability figures the README quotes into data/reliability.json, and rewrite the
README's reliability table (between ``<!-- reliability:start -->`` and ``<!-- reliability:end -->``)
from it.

Every number comes from a recorded file or from collecting this checkout's tests: GPU test and
sanitizer counts from data/gpu_job_h200.log (the log of one run of tools/gpu_job.sh on the H200,
one section per step), bitwise counts from the data/*bitwise*.json records, CPU test and
bad-input counts from ``pytest --collect-only`` here.

    python tools/reliability.py           # refresh data/reliability.json and the README table
    python tools/reliability.py --check   # exit 1 if the README table differs from the JSON
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
README = ROOT / "README.md"
LOG = "gpu_job_h200.log"  # the last complete run of the GPU job
LATEST = "gpu_job_h200_2026-11-30_partial.log"  # the latest run, of this checkout's code, partial
START, END = "<!-- reliability:start -->", "<!-- reliability:end -->"


def collected(*args: str) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, cwd=ROOT,
    ).stdout  # fmt: skip
    return sum(1 for line in out.splitlines() if "::" in line)


def log_sections(text: str) -> dict[str, str]:
    """The GPU job's log cut at its ``=== <step>`` headers."""
    parts = re.split(r"^=== (\w+)$", text, flags=re.M)
    return {name: body for name, body in zip(parts[1::2], parts[2::2])}


def _count(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text, flags=re.M)
    return int(m.group(1)) if m else None


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


def collect() -> dict:
    log = (DATA / LOG).read_text()
    sections = log_sections(log)
    steps = {name: step_counts(sections[name]) for name in ("tests", "memcheck", "racecheck", "initcheck")}
    device = re.search(r'"device": "([^"]+)"', log)
    date = re.search(r'"date_utc": "([^"]+)"', log)
    summary = re.search(r"^=== summary \([\d:]+, (\d+) s after setup\)", log, flags=re.M)
    latest = None
    if (DATA / LATEST).exists():
        text = (DATA / LATEST).read_text()
        sec = log_sections(text)
        commit = re.search(r'"git_commit": "([^"]+)"', text)
        tally = re.search(r"^(\d+/\d+ bitwise identical; vs helion with the sm_90 table \d+/\d+)", text, flags=re.M)
        method = re.search(r"'ratio': ([\d.]+), 'within_3pct': (True|False)", text)
        latest = {
            "log": f"data/{LATEST}",
            "git_commit": commit.group(1) if commit else None,
            "steps": {name: step_counts(sec[name]) for name in ("tests", "memcheck", "racecheck", "initcheck")},
            "steps_failed": _count(r"^steps failed: (\d+)", text),
            "bitwise": tally.group(1) if tally else None,
            "method_check_ratio": float(method.group(1)) if method else None,
        }
    return {
        "latest_gpu_job": latest,
        "gpu_job": {
            "log": f"data/{LOG}",
            "device": device.group(1) if device else None,
            "date_utc": date.group(1) if date else None,
            "seconds": int(summary.group(1)) if summary else None,
            "steps_failed": _count(r"^steps failed: (\d+)", log),
            "steps": steps,
        },
        "bitwise": {
            name: json.loads((DATA / name).read_text())["tally"]
            for name in ("bitwise_h200.json", "bitwise_cpu.json", "nvfp4_bitwise_h200.json")
        },
        "cpu_tests_collected": collected("tests"),
        "bad_input_cases": collected("tests", "-k", "bad_input or device_mismatch or rejects or refused"),
        "sources": [f"data/{LOG}", "data/bitwise_h200.json", "data/bitwise_cpu.json",
                    "data/nvfp4_bitwise_h200.json", "pytest --collect-only tests"],
    }  # fmt: skip


def _lead(tally: str) -> str:
    return tally.split(";")[0].split(" (")[0]


def markdown(doc: dict) -> str:
    """The README's reliability table, from data/reliability.json."""
    job, bw = doc["gpu_job"], doc["bitwise"]
    t, mc, rc, ic = (job["steps"][k] for k in ("tests", "memcheck", "racecheck", "initcheck"))
    log = f"`{job['log']}`"
    rows = [
        ("port vs helion originals, compiled on the H200", f"**{_lead(bw['bitwise_h200.json'])}** (M 1..49152, "
         "N 1..3072, both layouts, weights, fp16/fp32, one case with numel > 2^31)", "`data/bitwise_h200.json`"),
        ("port vs helion originals, Triton interpreter", f"**{_lead(bw['bitwise_cpu.json'])}**",
         "`data/bitwise_cpu.json`"),
        ("NVFP4 fused == unfused == reference, H200", f"**{_lead(bw['nvfp4_bitwise_h200.json'])}** (6 widths, "
         "uniform and non-uniform experts incl. empty ones, both layouts, weights)", "`data/nvfp4_bitwise_h200.json`"),
        ("test suite on the H200 (commit 6b1b5e6)",
         f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped", log),
        (f"compute-sanitizer memcheck over {mc['passed']} kernel tests",
         f"**{mc['sanitizer_errors']} errors** (with `PYTORCH_NO_CUDA_MEMORY_CACHING=1`)", log),
        (f"compute-sanitizer racecheck / initcheck over {rc['passed']} kernel tests (shared-memory de-interleave, "
         "masked tails, fused NVFP4)", f"**{rc['racecheck_hazards']} hazards / {ic['sanitizer_errors']} errors**", log),
        ("the last complete GPU job (benchmark, tests, sanitizers, bitwise, notebooks), one run, commit 6b1b5e6",
         f"{job['seconds']} s on one {job['device']}, {job['steps_failed']} steps failed ({job['date_utc'][:10]})",
         log),
        ("tests in this checkout (CPU run: the GPU-only tests skip)", str(doc["cpu_tests_collected"]),
         "`pytest --collect-only`"),
        ("bad inputs tried (each must raise a `ValueError`/`TypeError` naming the argument)",
         str(doc["bad_input_cases"]), "`pytest --collect-only -k bad_input...`"),
    ]  # fmt: skip
    latest = doc.get("latest_gpu_job")
    if latest:
        lt, lm, lr, li = (latest["steps"][k] for k in ("tests", "memcheck", "racecheck", "initcheck"))
        src = f"`{latest['log']}`"
        rows += [
            (f"latest GPU job, commit {latest['git_commit']} (2026-11-30): port vs helion, fixed tile and production "
             "sm_90 table", f"**{latest['bitwise']}**", src),
            (f"latest GPU job, commit {latest['git_commit']}: test suite", f"{lt['passed']} passed, **{lt['failed']} "
             f"failed** ({lt['skipped']} skipped): two test bugs and one plotting bug, fixed since on the CPU, not yet "
             "re-run on a GPU", src),
            (f"latest GPU job, commit {latest['git_commit']}: sanitizers over {lm['passed']} / {lr['passed']} / "
             f"{li['passed']} kernel tests", f"memcheck **{lm['sanitizer_errors']} errors**, racecheck "
             f"**{lr['racecheck_hazards']} hazards**, initcheck **{li['sanitizer_errors']} errors**", src),
            (f"latest GPU job, commit {latest['git_commit']}: steps failed",
             f"{latest['steps_failed']} (its benchmark records were lost, see the README)", src),
        ]  # fmt: skip
    lines = ["| what | count | from |", "|---|---:|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


def readme_block(text: str) -> str:
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def main(argv: list[str]) -> int:
    if "--check" in argv:
        doc = json.loads((DATA / "reliability.json").read_text())
        if readme_block(README.read_text()) != markdown(doc):
            print("README's reliability table differs from data/reliability.json: run make reliability")
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
