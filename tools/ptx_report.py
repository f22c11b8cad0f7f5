"""Registers, spills and the PTX instruction mix of the port's kernel and helion's, for one case.

Run on a GPU with a fresh TRITON_CACHE_DIR (tools/gpu_job.sh does): it launches both kernels once,
then reads the PTX Triton left in the cache, assembles each with ``ptxas -v`` for the GPU's own
target (``sm_90a`` on the H200, ``sm_100a`` on a B200: Triton writes PTX for the arch-specific target
from compute capability 9.0 up) to get registers and spills, and counts PTX opcodes. ``ptxas`` is the
one on PATH, else Triton's bundled one. Writes one JSON file (argument 1).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from inkling_kernels import silu_and_mul
from inkling_workbook.measure import provenance
from inkling_workbook.ports.silu_and_mul.helion_original import silu_and_mul_helion
from portcheck.code import opcode_mix

CASE = {"M": 384, "N": 1024, "interleaved": True, "weighted": True}


def gpu_arch() -> str:
    """The ptxas target of the current GPU as Triton compiles for it (``sm_90a``, ``sm_100a``, ...)."""
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def ptxas_tool() -> str:
    if shutil.which("ptxas"):
        return "ptxas"
    import triton

    return str(Path(triton.__file__).parent / "backends/nvidia/bin/ptxas-blackwell")


def ptxas(ptx_path: Path, arch: str) -> dict:
    res = subprocess.run(
        [ptxas_tool(), f"-arch={arch}", "-v", str(ptx_path), "-o", "/dev/null"], capture_output=True, text=True
    )
    text = res.stderr + res.stdout
    regs = re.findall(r"Used (\d+) registers", text)
    spills = re.findall(r"(\d+) bytes spill stores", text)
    return {
        "registers": int(regs[-1]) if regs else None,
        "spill_store_bytes": int(spills[-1]) if spills else None,
        "ptxas": text.strip(),
    }


def main(out_path: str) -> None:
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    M, N = CASE["M"], CASE["N"]
    x = torch.randn(M, 2 * N, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(M, device="cuda")
    silu_and_mul(x, w, interleaved=True)
    silu_and_mul_helion(x, w, interleaved=True)
    torch.cuda.synchronize()
    report = {"case": CASE, "arch": gpu_arch(), "kernels": {}}
    for ptx_path in sorted(cache.rglob("*.ptx")):
        name = ptx_path.stem
        if "silu_and_mul" not in name:
            continue
        ptx = ptx_path.read_text()
        report["kernels"][name] = {
            **ptxas(ptx_path, report["arch"]),
            "ptx_lines": len(ptx.splitlines()),
            "opcodes": opcode_mix(ptx),
        }
    provenance.write_record(out_path, json.dumps(report, indent=1) + "\n")
    for name, k in report["kernels"].items():
        print(name, "registers", k["registers"], "spills", k["spill_store_bytes"])


if __name__ == "__main__":
    main(sys.argv[1])
