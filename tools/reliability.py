"""Collect the reliability figures the README quotes into data/reliability.json.

Every number comes from a recorded file or from collecting this checkout's tests:
GPU test and sanitizer counts from data/gpu_job_h200.log and data/gpu_job_sanitize_h200.log
(written by tools/gpu_job.sh on the H200), bitwise counts from the data/*bitwise*.json records,
CPU test and bad-input counts from ``pytest --collect-only`` here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"


def collected(*args: str) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, cwd=ROOT,
    ).stdout  # fmt: skip
    return sum(1 for line in out.splitlines() if "::" in line)


def main() -> None:
    log = (DATA / "gpu_job_h200.log").read_text()
    gpu_passed = [int(m) for m in re.findall(r"^(\d+) passed[ ,]", log, flags=re.M)]
    sanitizer = [int(m) for m in re.findall(r"ERROR SUMMARY: (\d+) errors", log)]
    san = (DATA / "gpu_job_sanitize_h200.log").read_text()
    racecheck = re.findall(r"RACECHECK SUMMARY: (\d+) hazards", san)
    initcheck = re.findall(r"ERROR SUMMARY: (\d+) errors", san)
    bitwise = {
        name: json.loads((DATA / name).read_text())["tally"]
        for name in ("bitwise_h200.json", "bitwise_cpu.json", "nvfp4_bitwise_h200.json")
    }
    doc = {
        "gpu_tests_passed_on_h200": gpu_passed[0] if gpu_passed else None,
        "gpu_sanitizer_tests_passed": gpu_passed[1] if len(gpu_passed) > 1 else None,
        "compute_sanitizer_memcheck_errors": sanitizer[0] if sanitizer else None,
        "compute_sanitizer_racecheck_hazards": int(racecheck[0]) if racecheck else None,
        "compute_sanitizer_initcheck_errors": int(initcheck[0]) if initcheck else None,
        "bitwise": bitwise,
        "cpu_tests_collected": collected("tests"),
        "bad_input_cases": collected("tests", "-k", "bad_input or device_mismatch or rejects or refused"),
        "sources": ["data/gpu_job_h200.log", "data/gpu_job_sanitize_h200.log", "data/bitwise_h200.json",
                    "data/bitwise_cpu.json", "data/nvfp4_bitwise_h200.json", "pytest --collect-only tests"],
    }  # fmt: skip
    (DATA / "reliability.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
