"""Offline probe (no GPU needed): does Triton's software pipeliner (``tl.range(..., num_stages=k)``)
issue the loads of a persistent loop ahead for a kernel like the masked work list? Two toy loops
over 4 x 256 tiles of gate and up (bf16), compiled for sm_90 at 1 and 3 stages: plain pointer
loads, and loads through a tensor descriptor (TMA). Counts in the PTX: ``cp.async`` (the
pipeliner's asynchronous copies for pointer loads), ``cp.async.bulk.tensor`` (TMA) and the
shared memory the program takes. The finding is recorded in data/tuning_log.md (after experiment P).

    python tools/pipeline_probe.py OUT_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def _pointer_loop(x_ptr, q_ptr, total, M, stride, NS: tl.constexpr):
    rows = tl.arange(0, 4)
    cols = tl.arange(0, 256)
    for t in tl.range(tl.program_id(0), total, tl.num_programs(0), num_stages=NS):
        off = (t * 4 + rows)[:, None] * stride + cols[None, :]
        g = tl.load(x_ptr + off).to(tl.float32)
        u = tl.load(x_ptr + off + 256).to(tl.float32)
        tl.store(q_ptr + off, (g / (1 + tl.exp(-g)) * u).to(tl.bfloat16))


@triton.jit
def _descriptor_loop(x_ptr, q_ptr, total, M, stride, NS: tl.constexpr):
    desc = tl.make_tensor_descriptor(x_ptr, shape=[M, 512], strides=[stride, 1], block_shape=[4, 256])
    rows = tl.arange(0, 4)
    cols = tl.arange(0, 256)
    for t in tl.range(tl.program_id(0), total, tl.num_programs(0), num_stages=NS):
        g = desc.load([t * 4, 0]).to(tl.float32)
        u = desc.load([t * 4, 256]).to(tl.float32)
        off = (t * 4 + rows)[:, None] * stride + cols[None, :]
        tl.store(q_ptr + off, (g / (1 + tl.exp(-g)) * u).to(tl.bfloat16))


def probe(kernel, stages: int) -> dict:
    sig = {"x_ptr": "*bf16", "q_ptr": "*bf16", "total": "i32", "M": "i32", "stride": "i32", "NS": "constexpr"}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]], (4,): [["tt.divisibility", 16]]}
    compiled = triton.compile(
        ASTSource(kernel, sig, {"NS": stages}, attrs), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}
    )
    ptx = compiled.asm["ptx"]
    return {
        "cp_async": ptx.count("cp.async.ca") + ptx.count("cp.async.cg"),
        "tma_loads": ptx.count("cp.async.bulk.tensor"),
        "ld_global": ptx.count("ld.global"),
        "shared_bytes": compiled.metadata.shared,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    record = {"triton": triton.__version__, "target": "sm_90", "tile": "4 x 256 bf16 gate and up, 4 warps"}
    for name, kernel in (("pointer loads", _pointer_loop), ("tensor descriptor (TMA)", _descriptor_loop)):
        for stages in (1, 3):
            record[f"{name}, {stages} stage(s)"] = row = probe(kernel, stages)
            print(f"{name:26} stages {stages}: {row}", flush=True)
    Path(argv[0]).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
