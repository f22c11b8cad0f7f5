"""Offline instruction counts of the fused FP8 kernel (no GPU needed): compile one program of
``_fp8_group_kernel`` for sm_90 with Triton's own ptxas, disassemble it with its cuobjdump and count
the SASS instructions up to the first ``EXIT`` (the never-taken slow path of ``div_rn`` after it
is left out), for the kernel's switches (experiments D and F in ``data/tuning_log.md``).

    python tools/sass_count.py OUT_JSON

One program: 16 rows x 1 group of 128 (2048 elements, 4 warps: 16 a thread), N = 3072, bf16,
the 16-byte divisibility the launcher specializes, PDL on; and (experiment I) the decode program,
1 row x 4 groups (4 elements a thread), N = 1536, with its barrier count; and (experiments L-P)
the masked programs at N = 3072. Every program's registers (``cuobjdump -res-usage``) too. With
``PYTHONPATH`` at another checkout's tree it counts that checkout's kernel (experiment M's early
loads: ``data/experiments/registers_sm90_9a8b6ff.json``).
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from inkling_kernels.fp8 import _kernel as fp8_mod
from portcheck.code import registers, sass_opcodes

INTS = ["stride_xe", "stride_xm", "stride_qe", "stride_qm", "stride_we", "stride_wm", "stride_se", "stride_sm"]
INTS += ["stride_sg", "E"]

# name -> constexpr overrides ("new": the package's; the Markstein division of the kernel of 72ae121 is
# no longer in the kernel: its counts are in data/tuning_log.md)
VARIANTS = {
    "nil, split division": dict(SPLIT_DIV=True, FTZ_EXP=False, BF16_BITS=False),
    "nil, split + flushing exp": dict(SPLIT_DIV=True, FTZ_EXP=True, BF16_BITS=False),
    "nil, new": dict(SPLIT_DIV=True, FTZ_EXP=True, BF16_BITS=True),
    "nil UE8M0, new": dict(UE8M0=True, SPLIT_DIV=True, FTZ_EXP=True, BF16_BITS=True),
    "il, new": dict(ACT=1, PAIR_WORDS=True, SPLIT_DIV=True, FTZ_EXP=True, BF16_BITS=True),
    "quantizer alone, new": dict(ACT=0, SPLIT_DIV=True, FTZ_EXP=True, BF16_BITS=True),
    "nil, new + fast scale": dict(SPLIT_DIV=True, FTZ_EXP=True, BF16_BITS=True, FAST_SCALE=True),
    "il, new + fast scale": dict(ACT=1, PAIR_WORDS=True, SPLIT_DIV=True, FTZ_EXP=True, BF16_BITS=True, FAST_SCALE=True),
    "nil UE8M0, new + fast scale": dict(UE8M0=True, SPLIT_DIV=True, FTZ_EXP=True, BF16_BITS=True, FAST_SCALE=True),
    # experiment AC: the sigmoid's reciprocal always scaled (FTZ_EXP = 2, launched since)
    "nil, AC sigmoid": dict(SPLIT_DIV=True, FTZ_EXP=2, BF16_BITS=True),
    "il, AC sigmoid": dict(ACT=1, PAIR_WORDS=True, SPLIT_DIV=True, FTZ_EXP=2, BF16_BITS=True),
    "nil UE8M0, AC sigmoid": dict(UE8M0=True, SPLIT_DIV=True, FTZ_EXP=2, BF16_BITS=True),
}

# experiment I: the decode program (1 row x 4 groups of 128, 4 warps: 4 elements a thread), N = 1536
DECODE = dict(BLOCK_M=1, BLOCK_G=4, N=1536)
DECODE_VARIANTS = {
    "decode nil, published": {},
    "decode nil, fast scale": dict(FAST_SCALE=True),
    "decode il, published": dict(ACT=1, PAIR_WORDS=True),
    "decode il, fast scale": dict(ACT=1, PAIR_WORDS=True, FAST_SCALE=True),
    "decode nil UE8M0, published": dict(UE8M0=True),
    "decode nil UE8M0, fast scale": dict(UE8M0=True, FAST_SCALE=True),
    "decode nil, fast scale + warp redux": dict(FAST_SCALE=True, WARP_REDUX=True),
    "decode il, fast scale + warp redux": dict(ACT=1, PAIR_WORDS=True, FAST_SCALE=True, WARP_REDUX=True),
    "decode nil UE8M0, fast scale + warp redux": dict(UE8M0=True, FAST_SCALE=True, WARP_REDUX=True),
}


# experiments L-P: the masked programs at N = 3072 (E = 8, T = 256 launches them), their registers
MASKED = dict(N=3072, HAS_MASK=True, BLOCK_G=8)
MASKED_VARIANTS = {
    "masked one a slot, 2048 elements / 4 warps": dict(MASKED, BLOCK_M=2),
    "masked one a slot, 4096 elements / 8 warps (launched 976c5a2-0705326)": dict(MASKED, BLOCK_M=4, warps=8),
    "masked work list, 2048 elements / 4 warps (four-reduction lookup)": dict(
        MASKED, BLOCK_M=2, WORK_LIST=True, E_POW2=8
    ),
    "masked work list, 2048 elements / 4 warps (packed lookup, launched since 69dcc87)": dict(
        MASKED, BLOCK_M=2, WORK_LIST=True, E_POW2=8, PACK_E_BITS=3, PACK_CNT_BITS=9
    ),
}


def compile_program(warps=4, maxnreg=None, **over):
    sig = {"x_ptr": "*bf16", "w_ptr": "*fp32", "masked_m_ptr": "*i32", "q_ptr": "*u8", "s_ptr": "*fp32"}
    sig |= {"T": "i32", "T_PAD": "i32"} | dict.fromkeys(INTS, "i32")
    consts = dict(N=3072, GROUP=128, ACT=2, HAS_WEIGHT=False, HAS_MASK=False, UE8M0=False, BLOCK_M=16, BLOCK_G=1)
    consts |= dict(
        E_POW2=1,
        WORK_LIST=False,
        PACK_E_BITS=0,
        PACK_CNT_BITS=0,
        INT64=False,
        USE_PDL=True,
        HW=True,
        SPLIT_DIV=True,
        PAIR_WORDS=False,
    )
    # the decode and masked programs: the sigmoid launched on sm_90 (FTZ_EXP = 2)
    consts |= dict(FTZ_EXP=2, BF16_BITS=True, FAST_SCALE=False, WARP_REDUX=False)
    # the scale store by inline PTX (every compiled launch), no padding rows
    consts |= dict(SCALE_ASM=True, PAD_ROWS=False) | over
    options = {"num_warps": warps, "launch_pdl": True}
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    sig |= dict.fromkeys(consts, "constexpr")
    attrs = {(i,): [["tt.divisibility", 16]] for i in [0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15]}
    src = ASTSource(fp8_mod._fp8_group_kernel, sig, consts, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    record = {"program": "16 rows x 128 (2048 elements), 4 warps, N = 3072, bf16, sm_90", "triton": triton.__version__}
    record["counts"] = {}
    record["decode_program"] = "1 row x 4 groups of 128 (512 elements), 4 warps, N = 1536, bf16, sm_90"
    record["masked_programs"] = "N = 3072, bf16, sm_90, gate || up, masked; registers from cuobjdump -res-usage"
    todo = [(n, o) for n, o in VARIANTS.items()] + [(n, dict(DECODE, **o)) for n, o in DECODE_VARIANTS.items()]
    todo += list(MASKED_VARIANTS.items())
    for name, over in todo:
        compiled = compile_program(**over)
        ops = sass_opcodes(compiled)
        top = collections.Counter(op.split(".")[0] for op in ops).most_common(8)
        record["counts"][name] = {"instructions_to_exit": len(ops), "top_opcodes": dict(top)}
        record["counts"][name]["barriers"] = sum(op.startswith("BAR") for op in ops)
        record["counts"][name]["registers"] = registers(compiled)
        print(f"{name:40} {len(ops):4d} {record['counts'][name]['registers']:4d} registers", flush=True)
    Path(argv[0]).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
