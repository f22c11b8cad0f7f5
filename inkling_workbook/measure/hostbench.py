"""Host time per call of the public ops against a bare Triton launch (CUDA only).

Usage on a GPU machine::

    from inkling_workbook.measure.hostbench import measure_host_overhead
    print(measure_host_overhead())

Each entry is the median over ``rounds`` of (wall time of ``calls`` back-to-back calls) / calls,
in microseconds, all in this process, the entries interleaved round by round. The GPU work is
tiny (``M`` rows), so the host, not the GPU, sets the pace: what is measured is the Python +
launch cost of one call.
"""

from __future__ import annotations

import importlib
import statistics
import time

import torch
import triton

from inkling_kernels.fp8 import empty_scales, silu_and_mul_fp8_group_quant
from inkling_kernels.nvfp4 import default_blockscale_offsets, silu_and_mul_nvfp4_quant

# The modules, not the functions of the same name that the package exports.
_nvfp4 = importlib.import_module("inkling_kernels.nvfp4")
_silu = importlib.import_module("inkling_kernels.silu_and_mul")
_fp8 = importlib.import_module("inkling_kernels.fp8._launch")


def _per_call_us(fn, calls: int, rounds: int) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def _interleaved_us(fns: dict, rounds: int) -> dict:
    """``name -> (fn, calls)``: each ``fn`` warmed, then ``rounds`` rounds in which every ``fn`` in
    turn makes ``calls`` back-to-back calls; per name the median over the rounds of (wall time /
    calls), in us. Interleaved, so that a slow stretch of the host falls on every entry alike."""
    for fn, _ in fns.values():
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    samples: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, (fn, calls) in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in samples.items()}


def measure_host_overhead(
    M: int = 4, N: int = 1536, calls: int = 2000, rounds: int = 7, enable_pdl: bool | None = None
) -> dict:
    """Host microseconds per call, same process, same arguments:

    * ``bare_silu_kernel_us``: ``silu_and_mul_interleaved_kernel[grid](...)`` (Triton's
      ``JITFunction.run``, the reference of the targets), with the same constexprs, warps and PDL
      setting as the public call;
    * ``silu_and_mul_out_us``: ``silu_and_mul(gateup, out=out)``;
    * ``op_silu_and_mul_out_us``: ``torch.ops.inkling.silu_and_mul_out(...)`` (dispatcher);
    * ``op_silu_and_mul_us``: ``torch.ops.inkling.silu_and_mul(...)`` (allocates the output);
    * ``bare_nvfp4_kernel_us``: ``nvfp4_quant_kernel[grid](...)`` as the fused call launches it;
    * ``fused_nvfp4_out_us``: ``silu_and_mul_nvfp4_quant(gateup, gs, eo, bo, out=(packed, scales))``;
    * ``fused_nvfp4_defaults_us``: the same without ``out`` and ``blockscale_offsets`` (value
      checks, a host read, included);
    * ``bare_fp8_kernel_us``: ``_fp8_group_kernel[grid](...)`` with the arguments, constexprs and
      launch options the fused FP8 call below launches (Triton's ``JITFunction.run``);
    * ``thin_fp8_launch_us``: the same launch through the package's cached C launcher
      (``fp8._LAUNCHER``) with its key and arguments built beforehand: the floor of any call;
    * ``fused_fp8_out_us``: ``silu_and_mul_fp8_group_quant(gateup, interleaved=False, out=(q, s))``
      (the hot path: every call after the first repeats a recorded launch);
    * ``fused_fp8_out_general_us``: the same with ``out`` as a list, which the hot path leaves to
      the general path (checks and launch decisions on every call);
    * ``fused_fp8_us``: the same without ``out`` (allocates q and the scales);
    * ``op_fused_fp8_out_us``: ``torch.ops.inkling.silu_and_mul_fp8_group_quant_out(...)``;
    * ``fused_fp8_masked_out_us``: the masked layout, ``[8, M, 2N]`` with ``masked_m``, ``out`` given;
    * ratios ``silu_ratio`` (silu_and_mul_out / bare silu kernel; target <= 1.3),
      ``fused_vs_bare_nvfp4_ratio`` (fused with out / bare NVFP4 kernel, the same kernel
      launched bare; target <= 1.5), ``fused_ratio`` (fused with out / bare silu kernel) and
      ``fused_vs_bare_fp8_ratio`` (fused FP8 with out / bare FP8 kernel; target <= 1.5, the NVFP4
      op's), and ``fused_fp8_over_thin_launch_us`` (what the fused FP8 call costs above the floor).

    Every entry is timed in the same rounds, interleaved (:func:`_interleaved_us`).
    """
    if not torch.cuda.is_available():
        raise RuntimeError("measure_host_overhead needs a CUDA GPU: it times CUDA launches (CPU runs are interpreted)")
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(0)
    gateup = torch.randn((M, 2 * N), generator=g, device=dev).to(torch.bfloat16)
    out = torch.empty((M, N), dtype=torch.bfloat16, device=dev)
    pdl = _silu._backend.resolve_pdl(enable_pdl, dev)
    cfg = _silu.launch_config(M, N)
    grid = (triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N),)
    kernel = _silu.silu_and_mul_interleaved_kernel
    stride = gateup.stride(0)
    consts = dict(
        N=N, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, EVEN_M=M % cfg.BLOCK_M == 0, EVEN_N=N % cfg.BLOCK_N == 0,
        HAS_WEIGHT=False, INT64=False, STREAM_POLICY=cfg.stream_policy, USE_PDL=pdl,
    )  # fmt: skip

    def bare_silu():
        kernel[grid](gateup, gateup, out, M, stride, N, **consts, num_warps=cfg.num_warps, launch_pdl=pdl)

    op_out = torch.ops.inkling.silu_and_mul_out.default
    op_fn = torch.ops.inkling.silu_and_mul.default
    E = 2
    eo = torch.tensor([0, M // 2, M], dtype=torch.int32, device=dev)
    bo = default_blockscale_offsets(eo).to(torch.int32)
    gs = torch.tensor([100.0, 200.0], device=dev)
    rows = _nvfp4.max_blockscale_rows(M, E)
    packed = torch.empty((M, N // 2), dtype=torch.uint8, device=dev)
    scales = torch.empty((rows, (N // 16 + 3) // 4 * 4), dtype=torch.uint8, device=dev)
    bm, bk, warps = _nvfp4._quant_config(N, False, fused=True)
    qgrid = (triton.cdiv(rows, bm) * triton.cdiv(scales.shape[1] * 16, bk),)
    qconsts = dict(
        N=N, SCALE_COLS=scales.shape[1], ACT=_nvfp4.ACT_NON_INTERLEAVED, HAS_WEIGHT=False, SWIZZLE=True,
        BLOCK_M=bm, BLOCK_K=bk, SEARCH_STEPS=max(1, (E - 1).bit_length()), INT64=False, USE_PDL=pdl,
        HW_E2M1=_nvfp4._hw_e2m1(dev),
    )  # fmt: skip

    def bare_nvfp4():
        _nvfp4.nvfp4_quant_kernel[qgrid](
            gateup, gs, gs, eo, bo, packed, scales, stride, M, E, rows, **qconsts, num_warps=warps, launch_pdl=pdl
        )

    G = N // 128
    fq = torch.empty((M, N), dtype=torch.float8_e4m3fn, device=dev)
    fs = empty_scales((M,), G, False, dev)
    seen = []
    real_launch = _fp8._launch_kernel
    _fp8._launch_kernel = lambda grid, device, interpreted, args, consts: seen.append((grid, args, consts))
    try:  # the fused call's own launch, recorded, not run
        silu_and_mul_fp8_group_quant(gateup, interleaved=False, out=(fq, fs), enable_pdl=enable_pdl)
    finally:
        _fp8._launch_kernel = real_launch
    fgrid, fargs, fconsts = seen[0]

    def bare_fp8():
        _fp8._fp8_group_kernel[fgrid](*fargs, **fconsts)

    E8 = 8
    g3 = torch.randn((E8, M, 2 * N), generator=g, device=dev).to(torch.bfloat16)
    masked = torch.tensor([M, 0, 1, M // 2, 0, 0, 1, 0], dtype=torch.int32, device=dev)
    mq = torch.empty((E8, M, N), dtype=torch.float8_e4m3fn, device=dev)
    ms = empty_scales((E8, M), G, False, dev)
    op_fp8_out = torch.ops.inkling.silu_and_mul_fp8_group_quant_out.default

    index = dev.index if dev.index is not None else torch.cuda.current_device()
    fwarps, fpdl = fconsts["num_warps"], fconsts["USE_PDL"]
    fkey, fvalues = _fp8._launch_key(index, fargs, fconsts, fwarps, fpdl)
    full_args = (*fargs, *fvalues)

    def thin_fp8():
        _fp8._LAUNCHER(fkey, fgrid[0], index, full_args, fwarps, fpdl, fgrid[1])

    fns = {
        "bare_silu_kernel_us": (bare_silu, calls),
        "silu_and_mul_out_us": (lambda: _silu.silu_and_mul(gateup, out=out, enable_pdl=enable_pdl), calls),
        "op_silu_and_mul_out_us": (lambda: op_out(gateup, None, True, enable_pdl, out=out), calls),
        "op_silu_and_mul_us": (lambda: op_fn(gateup, None, None, True, enable_pdl), calls),
        "bare_nvfp4_kernel_us": (bare_nvfp4, calls),
        "fused_nvfp4_out_us": (
            lambda: silu_and_mul_nvfp4_quant(gateup, gs, eo, bo, out=(packed, scales), enable_pdl=enable_pdl),
            calls,
        ),
        "fused_nvfp4_defaults_us": (
            lambda: silu_and_mul_nvfp4_quant(gateup, gs, eo, enable_pdl=enable_pdl),
            max(50, calls // 10),
        ),
        "bare_fp8_kernel_us": (bare_fp8, calls),
        "thin_fp8_launch_us": (thin_fp8, calls),
        "fused_fp8_out_us": (
            lambda: silu_and_mul_fp8_group_quant(gateup, interleaved=False, out=(fq, fs), enable_pdl=enable_pdl),
            calls,
        ),
        # ``out`` as a list: not the hot path's usual call, so every call takes the general path
        "fused_fp8_out_general_us": (
            lambda: silu_and_mul_fp8_group_quant(gateup, interleaved=False, out=[fq, fs], enable_pdl=enable_pdl),
            calls,
        ),
        "fused_fp8_us": (lambda: silu_and_mul_fp8_group_quant(gateup, interleaved=False, enable_pdl=enable_pdl), calls),
        "op_fused_fp8_out_us": (lambda: op_fp8_out(gateup, None, False, fq, fs, enable_pdl=enable_pdl), calls),
        "fused_fp8_masked_out_us": (
            lambda: silu_and_mul_fp8_group_quant(
                g3, masked_m=masked, interleaved=False, out=(mq, ms), enable_pdl=enable_pdl
            ),
            calls,
        ),
    }
    with torch.inference_mode():
        res = _interleaved_us(fns, rounds)
    res["silu_ratio"] = res["silu_and_mul_out_us"] / res["bare_silu_kernel_us"]
    res["fused_ratio"] = res["fused_nvfp4_out_us"] / res["bare_silu_kernel_us"]
    res["fused_vs_bare_nvfp4_ratio"] = res["fused_nvfp4_out_us"] / res["bare_nvfp4_kernel_us"]
    res["fused_vs_bare_fp8_ratio"] = res["fused_fp8_out_us"] / res["bare_fp8_kernel_us"]
    res["fused_fp8_over_thin_launch_us"] = res["fused_fp8_out_us"] - res["thin_fp8_launch_us"]
    res["config"] = {"M": M, "N": N, "calls": calls, "rounds": rounds, "enable_pdl": pdl, "interleaved": True}
    return res
