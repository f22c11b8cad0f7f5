"""Capture every compiled launch configuration of _fp8_group_kernel (sm_90, sm_89: the real launch
planner with ``_launch_kernel`` recorded and the device queries stubbed) plus fp_fusion's interpreter
launches of every kernel; compile each to PTX on the CPU and write its hash, raw and with line info
normalized. Run before and after a refactor, in two checkouts, and compare the JSON files
(``data/experiments/fp8_split_ptx_sm90.json``).

    PYTHONPATH=CHECKOUT python tools/experiments/fp8_split_ptx_capture.py OUT_JSON
"""

import hashlib
import importlib
import json
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import inkling_kernels as ik
from inkling_kernels import _backend
from inkling_workbook.proofs import fp_fusion

try:
    L = importlib.import_module("inkling_kernels.fp8._launch")
except ImportError:
    L = importlib.import_module("inkling_kernels.fp8")

_OPTIONS = fp_fusion._OPTIONS
_PTR = fp_fusion._PTR


def compile_for(fn, args, kwargs, cap):
    names = list(fn.arg_names)
    constexprs = set(_backend.kernel_constexprs(fn))
    signature, constants = {}, {}
    for name, value in zip(names, args):
        if isinstance(value, torch.Tensor):
            signature[name] = _PTR[value.dtype]
        elif name in constexprs or value is None:
            signature[name], constants[name] = "constexpr", value
        else:
            signature[name] = "i32" if -(2**31) <= int(value) < 2**31 else "i64"
    for name, value in kwargs.items():
        if name in _OPTIONS:
            continue
        signature[name], constants[name] = "constexpr", value
    options = {k: kwargs[k] for k in _OPTIONS if k in kwargs}
    return triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", cap, 32), options=options).asm[
        "ptx"
    ]


def normalize(ptx):
    ptx = ptx.split(".section\t.debug")[0].split(".section .debug")[0]
    lines = [ln for ln in ptx.splitlines() if not ln.strip().startswith((".loc", ".file", "$L__", "//"))]
    return "\n".join(lines)


def h(s):
    return hashlib.sha256(s.encode()).hexdigest()[:16]


def compiled_fp8_launches(cap, sms):
    seen = {}
    saved = (
        _backend.uses_interpreter,
        _backend.cuda_index,
        _backend.capability,
        _backend.sm_count,
        L._launch_kernel,
        L._programs_an_sm,
    )
    cur = {}

    def record(grid, device, interpreted, args, consts):
        seen.setdefault(cur["name"], (args, dict(consts)))
        return None

    _backend.uses_interpreter = lambda d: False
    _backend.cuda_index = lambda d: 0
    _backend.capability = lambda i: cap
    _backend.sm_count = lambda i: sms
    L._launch_kernel = record
    L._programs_an_sm = lambda *a: 8
    g = torch.Generator().manual_seed(0)
    try:
        for dt in (torch.bfloat16, torch.float16, torch.float32):
            for M in (1, 100):
                for gs in (128, 64):
                    N = 1024
                    for ue in (False, True):
                        for col in (False, True):
                            x = torch.randn(M, N, generator=g).to(dt)
                            cur["name"] = f"quant {dt} M={M} N={N} g={gs} ue8m0={ue} col={col}"
                            ik.fp8_group_quant(x, gs, scale_ue8m0=ue, column_major_scales=col, enable_pdl=None)
                            for il in ("il", "nil", "il-odd"):
                                for wt in (False, True):
                                    if il == "il-odd":
                                        big = torch.randn(M, 2 * N + 2, generator=g).to(dt)
                                        gu = big[:, 1 : 1 + 2 * N]
                                    else:
                                        gu = torch.randn(M, 2 * N, generator=g).to(dt)
                                    w = torch.rand(M, generator=g) if wt else None
                                    cur["name"] = f"fused {il} {dt} M={M} N={N} g={gs} w={wt} ue8m0={ue} col={col}"
                                    ik.silu_and_mul_fp8_group_quant(
                                        gu,
                                        w,
                                        interleaved=il != "nil",
                                        group_size=gs,
                                        scale_ue8m0=ue,
                                        column_major_scales=col,
                                        enable_pdl=None,
                                    )
            # masked 3-D: decode-sized and prefill-sized experts, work list or slots
            for E, T in ((4, 8), (4, 100)):
                for col in (False, True):
                    for wl_sms in (132, 1):
                        _backend.sm_count = lambda i, s=wl_sms: s
                        for il in (True, False):
                            gu = torch.randn(E, T, 2048, generator=g).to(dt)
                            mm = torch.tensor([0, 3, T, 1][:E], dtype=torch.int32)
                            cur["name"] = f"masked {dt} E={E} T={T} il={il} col={col} sms={wl_sms}"
                            ik.silu_and_mul_fp8_group_quant(
                                gu, interleaved=il, masked_m=mm, column_major_scales=col, enable_pdl=None
                            )
                        _backend.sm_count = lambda i: sms
        # pdl off once
        x = torch.randn(1, 1024, generator=g).bfloat16()
        cur["name"] = "quant bf16 M=1 pdl=off"
        ik.fp8_group_quant(x, 128, enable_pdl=False)
    finally:
        (
            _backend.uses_interpreter,
            _backend.cuda_index,
            _backend.capability,
            _backend.sm_count,
            L._launch_kernel,
            L._programs_an_sm,
        ) = saved
    return seen


def main(out):
    doc = {}
    kernel = L._fp8_group_kernel
    for cap, label in ((90, "sm90"), (89, "sm89")):
        launches = compiled_fp8_launches((cap // 10, cap % 10), 132)
        # dedupe compiles by (signature, consts)
        cache = {}
        for name, (args, consts) in launches.items():
            k = (
                tuple(str(a.dtype) if isinstance(a, torch.Tensor) else "i" for a in args),
                tuple(sorted(consts.items())),
            )
            if k not in cache:
                ptx = compile_for(kernel, args, consts, cap)
                cache[k] = (h(ptx), h(normalize(ptx)))
            doc[f"{label} {name}"] = {
                "raw": cache[k][0],
                "norm": cache[k][1],
                "consts": {kk: v for kk, v in consts.items()},
            }
        print(label, len(launches), "launches", len(cache), "distinct", file=sys.stderr, flush=True)
    for i, (fn, args, kwargs) in enumerate(fp_fusion.captured_launches()):
        ptx = fp_fusion.compile_sm90(fn, args, kwargs).asm["ptx"]
        doc[f"interp {i} {fn.fn.__name__}"] = {
            "raw": h(ptx),
            "norm": h(normalize(ptx)),
            "consts": {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)},
        }
    json.dump(doc, open(out, "w"), indent=1, default=str)


if __name__ == "__main__":
    main(sys.argv[1])
