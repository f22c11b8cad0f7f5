"""Every kernel of the package compiled for Blackwell (sm_100a, sm_120a) and Hopper (sm_90a) on the
CPU, no GPU needed: registers, local memory (spills), shared memory, the PTX and SASS instruction
mix and SASS instructions per element, per launch plan a server hits.

A case is one launch of an op as the package makes it on a GPU of that capability: the op is
called on CPU tensors of the case's shape, its launch is captured at ``_backend.launch`` without
running (so server-sized shapes cost nothing), and the launch's plan-dependent constexprs are
replaced by what the compiled path chooses on that GPU, through the package's own planning
functions (tiles, FP8 switches for the capability, the NVFP4 hardware conversion, PDL). The
launch is then compiled with ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))``,
specialized as Triton specializes it (16-byte divisibility of pointers and ints), with the
package's compile options; Triton's bundled ptxas and cuobjdump produce and read the cubin.

Instructions per element: SASS instructions up to the first ``EXIT`` (NOPs left out; the never-taken
slow paths of ``div_rn`` follow it) divided by the elements one thread handles. It is a static
count of a straight-line program, so it is given only for programs without a loop or an early
exit (not for the masked FP8 programs).

    python -m inkling_workbook.proofs.blackwell OUT_DIR [--targets sm_100a,sm_120a,sm_90a]

writes ``OUT_DIR/compile_<target>.json`` per target.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

import torch

#: target name -> compute capability as Triton's GPUTarget takes it
TARGETS = {"sm_90a": 90, "sm_100a": 100, "sm_120a": 120}


@dataclasses.dataclass
class Case:
    name: str
    op: str
    call: object  # () -> None: the op on CPU tensors (its launch is captured, not run)
    pdl: bool = True
    masked_work_list: bool | None = None  # masked FP8: the work list (True) or a program per slot


def _t(shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype)


def _silu_cases() -> list[Case]:
    import inkling_kernels as ik

    cases = []
    plans = {"decode": (4, 1536), "decode wide": (16, 3072), "mid": (384, 1024), "ragged mid": (333, 2880)}
    plans["prefill"] = (8192, 3072)
    for plan, (M, N) in plans.items():
        for il in (True, False):
            for w in (False, True):
                name = f"silu_and_mul {'il' if il else 'nil'}{' w' if w else ''} bf16 {plan} {M}x{N}"
                cases.append(
                    Case(
                        name,
                        "silu_and_mul",
                        lambda M=M, N=N, il=il, w=w: ik.silu_and_mul(
                            _t((M, 2 * N)), _t((M,), torch.float32) if w else None, interleaved=il
                        ),
                    )
                )
    for out in (torch.float16, torch.float32):
        for il in (True, False):
            tag = f"silu_and_mul {'il' if il else 'nil'} w bf16->{str(out)[6:]} decode 4x1536"
            cases.append(
                Case(
                    tag,
                    "silu_and_mul",
                    lambda il=il, out=out: ik.silu_and_mul(
                        _t((4, 3072)), _t((4,), torch.float32), out_dtype=out, interleaved=il
                    ),
                )
            )
    for dt in (torch.float16, torch.float32):
        cases.append(
            Case(
                f"silu_and_mul il {str(dt)[6:]} prefill 8192x3072",
                "silu_and_mul",
                lambda dt=dt: ik.silu_and_mul(_t((8192, 6144), dt)),
            )
        )
    for plan, (M, N) in (("decode", (4, 1536)), ("prefill", (8192, 3072))):
        cases.append(
            Case(
                f"silu_and_mul il bf16 {plan} {M}x{N} no PDL",
                "silu_and_mul",
                lambda M=M, N=N: ik.silu_and_mul(_t((M, 2 * N))),
                pdl=False,
            )
        )
    return cases


def _nvfp4_cases() -> list[Case]:
    import inkling_kernels as ik

    def offsets(M, E=8):
        return torch.arange(E + 1, dtype=torch.int32) * (M // E)

    def gs(E=8):
        return torch.ones(E)

    cases = []
    for N in (3072, 1536):
        cases.append(
            Case(
                f"nvfp4_quant swizzled 8 experts 8192x{N}",
                "nvfp4_quant",
                lambda N=N: ik.nvfp4_quant(_t((8192, N)), gs(), expert_offsets=offsets(8192), validate=False),
            )
        )
    cases.append(
        Case(
            "nvfp4_quant linear 1 expert 8192x3072",
            "nvfp4_quant",
            lambda: ik.nvfp4_quant(_t((8192, 3072)), torch.ones(1), swizzle=False, validate=False),
        )
    )
    for il in (False, True):
        for w in (False, True):
            name = f"silu_and_mul_nvfp4_quant {'il' if il else 'nil'}{' w' if w else ''} swizzled 8 experts 8192x3072"
            cases.append(
                Case(
                    name,
                    "silu_and_mul_nvfp4_quant",
                    lambda il=il, w=w: ik.silu_and_mul_nvfp4_quant(
                        _t((8192, 6144)),
                        gs(),
                        offsets(8192),
                        interleaved=il,
                        topk_weights=_t((8192,), torch.float32) if w else None,
                        validate=False,
                    ),  # fmt: skip
                )
            )
    cases.append(
        Case(
            "silu_and_mul_nvfp4_quant nil linear 1 expert 128x3072",
            "silu_and_mul_nvfp4_quant",
            lambda: ik.silu_and_mul_nvfp4_quant(_t((128, 6144)), torch.ones(1), swizzle=False, validate=False),
        )
    )
    cases.append(
        Case(
            "silu_and_mul_nvfp4_quant nil swizzled 8 experts 8192x1536",
            "silu_and_mul_nvfp4_quant",
            lambda: ik.silu_and_mul_nvfp4_quant(_t((8192, 3072)), gs(), offsets(8192), validate=False),
        )
    )
    cases.append(
        Case(
            "silu_and_mul_nvfp4_quant nil fp16 swizzled 8 experts 8192x3072",
            "silu_and_mul_nvfp4_quant",
            lambda: ik.silu_and_mul_nvfp4_quant(_t((8192, 6144), torch.float16), gs(), offsets(8192), validate=False),
        )
    )
    cases.append(
        Case(
            "silu_and_mul_nvfp4_quant nil swizzled 8 experts 8192x3072 no PDL",
            "silu_and_mul_nvfp4_quant",
            lambda: ik.silu_and_mul_nvfp4_quant(_t((8192, 6144)), gs(), offsets(8192), validate=False),
            pdl=False,
        )
    )
    return cases


def _fp8_cases() -> list[Case]:
    import inkling_kernels as ik

    cases = []
    for plan, M in (("decode", 16), ("prefill", 8192)):
        cases.append(
            Case(
                f"fp8_group_quant row {plan} {M}x3072",
                "fp8_group_quant",
                lambda M=M: ik.fp8_group_quant(_t((M, 3072))),
            )
        )
        cases.append(
            Case(
                f"fp8_group_quant ue8m0_packed {plan} {M}x3072",
                "fp8_group_quant",
                lambda M=M: ik.fp8_group_quant(_t((M, 3072)), scale_layout="ue8m0_packed"),
            )
        )
    for layout in ("tma", "cublas"):
        cases.append(
            Case(
                f"fp8_group_quant {layout} prefill 8192x3072",
                "fp8_group_quant",
                lambda layout=layout: ik.fp8_group_quant(_t((8192, 3072)), scale_layout=layout),
            )
        )
    cases.append(
        Case(
            "fp8_group_quant row ue8m0 scales prefill 8192x3072",
            "fp8_group_quant",
            lambda: ik.fp8_group_quant(_t((8192, 3072)), scale_ue8m0=True),
        )
    )
    for plan, M in (("decode", 16), ("prefill", 8192)):
        for il in (True, False):
            cases.append(
                Case(
                    f"silu_and_mul_fp8_group_quant {'il' if il else 'nil'} row {plan} {M}x3072",
                    "silu_and_mul_fp8_group_quant",
                    lambda M=M, il=il: ik.silu_and_mul_fp8_group_quant(_t((M, 6144)), interleaved=il),
                )
            )
        cases.append(
            Case(
                f"silu_and_mul_fp8_group_quant nil ue8m0_packed {plan} {M}x3072",
                "silu_and_mul_fp8_group_quant",
                lambda M=M: ik.silu_and_mul_fp8_group_quant(
                    _t((M, 6144)), interleaved=False, scale_layout="ue8m0_packed"
                ),
            )
        )
    cases.append(
        Case(
            "silu_and_mul_fp8_group_quant nil w row prefill 8192x3072",
            "silu_and_mul_fp8_group_quant",
            lambda: ik.silu_and_mul_fp8_group_quant(_t((8192, 6144)), _t((8192,), torch.float32), interleaved=False),
        )
    )
    cases.append(
        Case(
            "silu_and_mul_fp8_group_quant nil cublas prefill 8192x3072",
            "silu_and_mul_fp8_group_quant",
            lambda: ik.silu_and_mul_fp8_group_quant(_t((8192, 6144)), interleaved=False, scale_layout="cublas"),
        )
    )

    def masked(il, layout=None):
        counts = torch.tensor([256, 0, 17, 200, 256, 1, 64, 129], dtype=torch.int32)
        return ik.silu_and_mul_fp8_group_quant(_t((8, 256, 6144)), interleaved=il, masked_m=counts, scale_layout=layout)

    for il in (True, False):
        for wl in (False, True):
            cases.append(
                Case(
                    f"silu_and_mul_fp8_group_quant masked {'il' if il else 'nil'} tma "
                    f"{'work list' if wl else 'slots'} 8x256x3072",
                    "silu_and_mul_fp8_group_quant",
                    lambda il=il: masked(il, "tma"),
                    masked_work_list=wl,
                )
            )
    cases.append(
        Case(
            "silu_and_mul_fp8_group_quant masked nil ue8m0_packed work list 8x256x3072",
            "silu_and_mul_fp8_group_quant",
            lambda: masked(False, "ue8m0_packed"),
            masked_work_list=True,
        )
    )
    cases.append(
        Case(
            "silu_and_mul_fp8_group_quant nil row prefill 8192x3072 no PDL",
            "silu_and_mul_fp8_group_quant",
            lambda: ik.silu_and_mul_fp8_group_quant(_t((8192, 6144)), interleaved=False),
            pdl=False,
        )
    )
    return cases


def all_cases() -> list[Case]:
    return _silu_cases() + _nvfp4_cases() + _fp8_cases()


#: the CI test's selection: one case per kernel family and switch that changes the code
REPRESENTATIVE = (
    "silu_and_mul il w bf16 decode 4x1536",
    "silu_and_mul nil bf16 prefill 8192x3072",
    "nvfp4_quant swizzled 8 experts 8192x3072",
    "silu_and_mul_nvfp4_quant nil w swizzled 8 experts 8192x3072",
    "silu_and_mul_nvfp4_quant il swizzled 8 experts 8192x3072",
    "silu_and_mul_fp8_group_quant il row decode 16x3072",
    "silu_and_mul_fp8_group_quant nil ue8m0_packed prefill 8192x3072",
    "silu_and_mul_fp8_group_quant masked nil tma work list 8x256x3072",
)


# ---- capture and plan ------------------------------------------------------------------------


def capture(call) -> tuple[object, tuple, dict]:
    """The one ``(kernel, args, kwargs)`` an op hands to ``_backend.launch`` on CPU tensors; the
    kernel is not run."""
    from inkling_kernels import _backend

    seen, original = [], _backend.launch

    def record(kernel, grid, device, *args, **kwargs):
        seen.append((kernel, args, kwargs))

    _backend.launch = record
    try:
        call()
    finally:
        _backend.launch = original
    if len(seen) != 1:
        raise ValueError(f"expected one launch, got {len(seen)}")
    return seen[0]


@contextlib.contextmanager
def _as_capability(cc: int):
    """A CUDA device index whose cached capability (``_backend.capability``) reads ``cc``, for the
    package's planning functions; removed afterwards."""
    from inkling_kernels import _backend

    index = 127
    saved = _backend._CAPABILITY.get(index)
    _backend._CAPABILITY[index] = divmod(cc, 10)
    try:
        yield torch.device("cuda", index)
    finally:
        if saved is None:
            _backend._CAPABILITY.pop(index, None)
        else:
            _backend._CAPABILITY[index] = saved


def plan(case: Case, cc: int) -> tuple[object, tuple, dict, int, bool]:
    """``(kernel, args, kwargs, elements a program, straight-line)`` of ``case`` on a GPU of
    compute capability ``cc``: the captured launch with the compiled path's choices."""
    from inkling_kernels import _backend, nvfp4
    from inkling_kernels.fp8 import _launch as _fp8_launch

    kernel, args, kwargs = capture(case.call)
    kwargs = {**_backend.COMPILE_OPTIONS, **kwargs}
    name = kernel.fn.__name__
    kwargs["USE_PDL"] = case.pdl
    kwargs["launch_pdl"] = case.pdl
    straight = True
    if name.startswith("silu_and_mul"):
        elements = kwargs["BLOCK_M"] * kwargs["BLOCK_N"]
    elif name == "nvfp4_quant_kernel":
        block_m, block_k, warps = nvfp4._quant_config(kwargs["N"], False, fused=kwargs["ACT"] != nvfp4.ACT_NONE)
        kwargs |= {"BLOCK_M": block_m, "BLOCK_K": block_k, "num_warps": warps}
        kwargs["HW_E2M1"] = cc // 10 in nvfp4.HW_E2M1_MAJORS
        elements = block_m * block_k
    elif name == "_fp8_group_kernel":
        names = list(kernel.arg_names)
        arg = dict(zip(names, args))
        T, t_pad, E = arg["T"], arg["T_PAD"], arg["E"]
        group, N = kwargs["GROUP"], kwargs["N"]
        G = N // group
        block_m, block_g, warps = _fp8_launch._launch_config(T, G, group, False)
        with _as_capability(cc) as dev:
            flags = _fp8_launch._kernel_flags(dev, arg["x_ptr"].dtype, False)
        flags["FAST_SCALE"] = flags["FAST_SCALE"] and T <= _fp8_launch.DECODE_ROWS
        aligned = _fp8_launch._redux_aligned(arg["x_ptr"], arg["q_ptr"])
        tile = block_m * block_g * group
        if not _fp8_launch._warp_redux_ok(kwargs["ACT"], kwargs["PAIR_WORDS"], group, tile, warps, T, aligned):
            flags["WARP_REDUX"] = False
        kwargs |= flags | {"BLOCK_M": block_m, "BLOCK_G": block_g, "num_warps": warps}
        if kwargs["HAS_MASK"]:
            wl = bool(case.masked_work_list)
            g_tiles = -(-G // block_g)
            kwargs |= {"WORK_LIST": wl, "E_POW2": 1 << (E - 1).bit_length() if wl else 1}
            kwargs |= _fp8_launch._pack_bits(wl, E, T, t_pad, block_m, g_tiles)
            straight = False
        elements = tile
    else:
        raise ValueError(f"unknown kernel {name}")
    return kernel, args, kwargs, elements, straight


# ---- compile and inspect ---------------------------------------------------------------------


def compile_case(case: Case, target: str):
    """``(compiled, elements a program, straight-line, constexprs)`` of ``case`` for ``target``."""
    from triton.backends.compiler import GPUTarget

    from portcheck import code as portcheck

    if target not in TARGETS:
        raise ValueError(f"target must be one of {sorted(TARGETS)}, got {target!r}")
    cc = TARGETS[target]
    kernel, args, kwargs, elements, straight = plan(case, cc)
    launch = portcheck.Launch(kernel, args, kwargs, grid=(1,))
    compiled, _ = portcheck.compile_launch(launch, GPUTarget("cuda", cc, 32))
    return compiled, elements, straight, kwargs


def inspect_compiled(compiled, elements: int, straight: bool, num_warps: int) -> dict:
    """Registers, local (spill) and shared bytes from ``cuobjdump -res-usage``; the PTX classes;
    the SASS count to ``EXIT``, its top opcodes and, straight-line, per element of a thread."""
    from portcheck import code as portcheck

    usage = portcheck.cuobjdump(compiled, "-res-usage")
    field = {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", usage)}
    ptx = compiled.asm["ptx"]
    ops = portcheck.sass_opcodes(compiled)
    per_thread = elements / (32 * num_warps)
    full = collections.Counter(ops)
    return {
        "registers": field.get("REG"),
        "local_bytes": field.get("LOCAL", 0),
        "stack_bytes": field.get("STACK", 0),
        "shared_bytes": field.get("SHARED", 0),
        "triton_shared": compiled.metadata.shared,
        "num_warps": num_warps,
        "elements_per_thread": per_thread,
        "ptx_classes": portcheck.instruction_classes(portcheck.opcode_mix(ptx)),
        "ptx_e2m1_cvt": ptx.count("cvt.rn.satfinite.e2m1x2.f32"),
        "ptx_griddepcontrol": ptx.count("griddepcontrol."),
        "sass_to_exit": len(ops),
        "sass_top": dict(collections.Counter(op.split(".")[0] for op in ops).most_common(12)),
        "sass_e2m1": sum(n for op, n in full.items() if "E2M1" in op),
        "sass_per_element": round(len(ops) / per_thread, 2) if straight else None,
    }


def record_target(target: str, cases: list[Case] | None = None, progress=print) -> dict:
    """The record of one target: every case compiled and inspected (an error is recorded)."""
    cases = all_cases() if cases is None else cases
    out = {}
    for case in cases:
        t0 = time.time()
        try:
            compiled, elements, straight, kwargs = compile_case(case, target)
            row = inspect_compiled(compiled, elements, straight, kwargs["num_warps"])
            row["plan"] = {k: kwargs[k] for k in _PLAN_KEYS if k in kwargs}
            row["compiled"] = True
        except Exception as e:  # recorded: the test fails on it
            row = {"compiled": False, "error": f"{type(e).__name__}: {str(e)[-500:]}"}
        row["seconds"] = round(time.time() - t0, 2)
        out[case.name] = row
        if progress:
            regs = row.get("registers")
            progress(f"{target} {case.name:80} {'ok' if row['compiled'] else 'FAILED'} regs {regs} {row['seconds']} s")
    return out


_PLAN_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_G", "num_warps", "USE_PDL", "HW_E2M1", "HW", "FTZ_EXP")
_PLAN_KEYS += ("FAST_SCALE", "WARP_REDUX", "WORK_LIST", "SCALE_LAYOUT", "PAIR_WORDS")


def main(argv: list[str]) -> int:
    import argparse

    import triton

    from inkling_workbook.measure import provenance

    parser = argparse.ArgumentParser(
        prog="python -m inkling_workbook.proofs.blackwell", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir")
    parser.add_argument("--targets", default="sm_100a,sm_120a,sm_90a")
    opts = parser.parse_args(argv)
    for target in opts.targets.split(","):
        cases = record_target(target)
        prov = provenance.collect(["python", "-m", "inkling_workbook.proofs.blackwell", *argv])
        prov["device"] = f"{prov['device'].split(',')[0]}, compile only (no GPU)"
        prov.pop("interpreter_bf16_rounding", None)  # nothing ran in the interpreter
        doc = {
            "provenance": prov,
            "target": target,
            "gpu_target": f'GPUTarget("cuda", {TARGETS[target]}, 32)',
            "triton": triton.__version__,
            "ptxas": _tool_version("ptxas-blackwell"),
            "method": __doc__.split("\n\n")[2].replace("\n", " "),
            "all_compiled": all(r["compiled"] for r in cases.values()),
            "no_local_memory": all(r.get("local_bytes") == 0 for r in cases.values()),
            "cases": cases,
        }
        provenance.write_record(
            Path(opts.out_dir) / f"compile_{target.replace('_', '')}.json", json.dumps(doc, indent=1) + "\n"
        )
    return 0


def _tool_version(name: str) -> str | None:
    import subprocess

    import triton

    tool = Path(triton.__file__).parent / "backends/nvidia/bin" / name
    try:
        out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.strip().splitlines()[-1]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
