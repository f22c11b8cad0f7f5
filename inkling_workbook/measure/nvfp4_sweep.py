"""The NVFP4 part of the sweep (``python -m inkling_workbook bench``): the fused
``silu_and_mul_nvfp4_quant`` against its two-kernel path, torch.compile of its torch reference
(default mode on every shape, max-autotune-no-cudagraphs on :data:`NVFP4_MAX_AUTOTUNE`, each
compiled fresh per shape: :mod:`~inkling_workbook.measure.compile_baselines`) and torch eager;
warm L2 on every shape and cold L2 (``cold``) where :func:`timing.cold_feasible`, with the method
of :mod:`~inkling_workbook.measure.timing` (interleaved passes, graphs of >= 100 calls and
>= 1 ms)."""

from __future__ import annotations

import torch

from inkling_kernels.nvfp4 import nvfp4_quant, silu_and_mul_nvfp4_quant
from inkling_kernels.reference import nvfp4_quant_ref, padded_blockscale_offsets, silu_and_mul_ref
from inkling_kernels.silu_and_mul import silu_and_mul
from inkling_workbook.measure import compile_baselines, pairing, provenance, timing
from inkling_workbook.measure.pairing import Column

NVFP4_M = (128, 1024, 8192, 49152)
NVFP4_N = (1536, 3072)
NVFP4_EXPERTS = 8
NVFP4_EAGER_MAX_M = 1024
#: the shapes (M, N) that also get torch.compile max-autotune-no-cudagraphs (15-40 s of compile
#: each, more with the NVFP4 reference's block reductions): two of the README's headline rows, the
#: one where the fused kernel loses to the unfused pair and the largest
NVFP4_MAX_AUTOTUNE = ((128, 3072), (49152, 3072))


def nvfp4_bytes(M: int, N: int, fused: bool, scale_rows: int) -> int:
    scales = scale_rows * ((N // 16 + 3) // 4 * 4)
    quant = M * (N // 2) + scales
    if fused:
        return M * 4 * N + quant
    return M * (4 * N + 2 * N) + M * 2 * N + quant


def _nvfp4_fused_ref(gateup, row_gs):
    """The fused op in plain torch (linear scales, per-row global scale): what torch.compile gets."""
    return nvfp4_quant_ref(silu_and_mul_ref(gateup, interleaved=False), row_gs)


NVFP4_IMPLS = {
    "fused": "the fused Triton kernel, swizzled scales, outputs preallocated, PDL on (the sm_90 default)",
    "fused_no_pdl": "the same fused kernel launched with enable_pdl=False (the port torch.compile is paired with)",
    "unfused": "silu_and_mul then nvfp4_quant (Triton), swizzled scales, outputs preallocated",
    "compile_static": "torch.compile(dynamic=False) of the torch reference (linear scales), mode default, "
    "compiled fresh per shape",
    "compile_static_max_autotune": "torch.compile(dynamic=False, mode='max-autotune-no-cudagraphs') of the torch "
    "reference (linear scales), compiled fresh per shape; on NVFP4_MAX_AUTOTUNE only",
    "torch_eager": "the torch reference, eager (linear scales); timed up to M = 1024 only",
}
_PORT = "swizzled scales, outputs preallocated"
NVFP4_COLUMNS: dict[str, Column] = {
    "fused": Column("fused", "inkling", "", "silu_and_mul_nvfp4_quant", _PORT, True, "port", op="nvfp4_fused"),
    "fused_no_pdl": Column("fused_no_pdl", "inkling", "", "silu_and_mul_nvfp4_quant", _PORT, False, "port",
                           op="nvfp4_fused"),
    "unfused": Column("unfused", "inkling", "", "silu_and_mul then nvfp4_quant", _PORT, True, "ours",
                      op="nvfp4_fused"),
    **pairing.NVFP4_COMPILE_COLUMNS,
    "torch_eager": Column("torch_eager", "torch", torch.__version__.split("+")[0], "the fused NVFP4 reference",
                          "eager, linear scales", False, "baseline", op="nvfp4_fused"),
}  # fmt: skip


def _experts(M: int):
    counts = torch.full((NVFP4_EXPERTS,), M // NVFP4_EXPERTS)
    counts[: M % NVFP4_EXPERTS] += 1
    eo = torch.cat((torch.zeros(1, dtype=torch.int64), counts.cumsum(0))).to(torch.int32)
    return counts, eo, padded_blockscale_offsets(eo)


def _buffer_set(M: int, N: int, counts, eo, bo, gs=None):
    """One set of inputs and preallocated outputs (the cold-L2 rotation builds several). ``gs``:
    the global scales of the first set, shared by every set."""
    rows_pad = int(bo[-1])
    gateup = torch.randn((M, 2 * N), device="cuda", dtype=torch.bfloat16)
    act = silu_and_mul(gateup, interleaved=False)
    if gs is None:
        gs = torch.full((NVFP4_EXPERTS,), 448 * 6 / float(act.float().abs().max()), device="cuda")
    row_gs = gs.repeat_interleave(counts.cuda(), output_size=M)[:, None]
    packed = torch.empty((M, N // 2), dtype=torch.uint8, device="cuda")
    scales = torch.empty((rows_pad, (N // 16 + 3) // 4 * 4), dtype=torch.uint8, device="cuda")
    return {"gateup": gateup, "act": act, "gs": gs, "row_gs": row_gs, "out": (packed, scales)}


def _compile_columns(M: int, N: int, first: dict, info: dict, max_autotune: bool = True) -> dict:
    """The compile columns of shape (M, N), each compiled fresh (one :func:`new_state` for the
    shape): key -> compiled fn(gateup, row_gs). ``info`` gets what each compile took."""
    mat = max_autotune and (M, N) in NVFP4_MAX_AUTOTUNE and compile_baselines.max_autotune_allowed(f"M={M} N={N}")
    modes = ["default"] + (["max_autotune"] if mat else [])
    compile_baselines.new_state()
    out = {}
    for mode in modes:
        key = "compile_static" if mode == "default" else "compile_static_max_autotune"
        c = compile_baselines.compile_fresh(_nvfp4_fused_ref, [((first["gateup"], first["row_gs"]), ())], mode=mode)
        out[key] = c.fn
        info[key] = c.summary()
    return out


def check_bits(first: dict, eo, bo, compiled: dict) -> dict[str, bool]:
    """Before a shape is timed, on its first buffer set: the fused kernel with and without PDL
    writes the unfused path's bytes (packed values and the whole scale buffer, poisoned before
    each call), and each torch.compile column returns the bytes of the eager reference it
    compiles (linear scales). impl -> equal; a row's ``bits_equal`` column."""

    def written(call) -> tuple:
        for t in first["out"]:
            t.fill_(0xA5)
        call()
        return tuple(t.clone() for t in first["out"])

    def same(a, b) -> bool:
        return all(x.shape == y.shape and torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a, b))

    def unfused():
        silu_and_mul(first["gateup"], interleaved=False, out=first["act"])
        nvfp4_quant(first["act"], first["gs"], expert_offsets=eo, blockscale_offsets=bo, out=first["out"],
                    validate=False)  # fmt: skip

    want = written(unfused)
    out = {"unfused": True, "torch_eager": True}
    for name, pdl in (("fused", True), ("fused_no_pdl", False)):
        got = written(lambda pdl=pdl: silu_and_mul_nvfp4_quant(first["gateup"], first["gs"], eo, bo, out=first["out"],
                                                               validate=False, enable_pdl=pdl))  # fmt: skip
        out[name] = same(got, want)
    ref = _nvfp4_fused_ref(first["gateup"], first["row_gs"])
    for key, fn in compiled.items():
        out[key] = same(fn(first["gateup"], first["row_gs"]), ref)
    return out


def bench_nvfp4(ceiling_tbps: float, quick: bool = False, progress: bool = True, cold: bool = False,
                compile_info: dict | None = None, max_autotune: bool = True) -> list[dict]:  # fmt: skip
    """8 uniform experts; warm L2 on every shape, cold L2 (``cold``) where the rotation is
    feasible; the implementations of a shape timed in :data:`timing.OTHER_PASSES` interleaved
    passes. The Triton paths write preallocated outputs (the layout the grouped GEMM reads), one
    set per buffer set; the torch references allocate theirs. ``compile_info`` gets, per shape,
    what each fresh compile took and the configs inductor picked; ``max_autotune``: the
    max-autotune column on :data:`NVFP4_MAX_AUTOTUNE` (off in the quick re-measurement)."""
    from tqdm.auto import tqdm

    rows = []
    ms = (1024, 49152) if quick else NVFP4_M
    combos = [(m, n) for m in ms for n in NVFP4_N]
    for M, N in tqdm(combos, desc="nvfp4 shapes", disable=not progress):
        counts, eo_cpu, bo_cpu = _experts(M)
        rows_pad = int(bo_cpu[-1])
        eo, bo = eo_cpu.cuda(), bo_cpu.cuda()
        fused_bytes = nvfp4_bytes(M, N, True, rows_pad)
        first = _buffer_set(M, N, counts, eo, bo)
        info: dict = {}
        compiled = _compile_columns(M, N, first, info, max_autotune)
        bits = check_bits(first, eo, bo, compiled)
        if compile_info is not None:
            compile_info[f"M={M} N={N}"] = info
        modes = ["warm"] + (["cold"] if cold and timing.cold_feasible(fused_bytes) else [])
        for mode in modes:
            nsets = timing.n_buffer_sets(fused_bytes, mode == "cold")
            sets = [first] + [_buffer_set(M, N, counts, eo, bo, first["gs"]) for _ in range(nsets - 1)]

            def calls_of(b):
                def fused(b=b):
                    silu_and_mul_nvfp4_quant(b["gateup"], b["gs"], eo, bo, out=b["out"], validate=False)

                def fused_no_pdl(b=b):
                    silu_and_mul_nvfp4_quant(b["gateup"], b["gs"], eo, bo, out=b["out"], validate=False,
                                             enable_pdl=False)  # fmt: skip

                def unfused(b=b):
                    silu_and_mul(b["gateup"], interleaved=False, out=b["act"])
                    nvfp4_quant(b["act"], b["gs"], expert_offsets=eo, blockscale_offsets=bo, out=b["out"],
                                validate=False)  # fmt: skip

                c = {"fused": fused, "fused_no_pdl": fused_no_pdl, "unfused": unfused}
                for key, fn in compiled.items():
                    c[key] = lambda fn=fn, b=b: fn(b["gateup"], b["row_gs"])
                if M <= NVFP4_EAGER_MAX_M:  # 45-90 ms a call at M = 49152: a strawman not worth the GPU time
                    c["torch_eager"] = lambda b=b: _nvfp4_fused_ref(b["gateup"], b["row_gs"])
                return c

            per_set = [calls_of(b) for b in sets]
            calls = {name: [c[name] for c in per_set] for name in per_set[0]}
            timings = timing.time_calls(calls, timing.OTHER_PASSES)
            clock = provenance.gpu_state().get("sm_clock_mhz")
            for name, t in timings.items():
                # bytes: the unfused path's own traffic for "unfused"; what the fused op must move otherwise
                nbytes = nvfp4_bytes(M, N, name != "unfused", rows_pad)
                rows.append(
                    {
                        "op": "silu_and_mul_nvfp4",
                        "M": M,
                        "N": N,
                        "experts": NVFP4_EXPERTS,
                        "impl": name,
                        "config": NVFP4_IMPLS[name],
                        **pairing.row_fields(NVFP4_COLUMNS, name),
                        **pairing.speedup_fields(NVFP4_COLUMNS, name, timings),
                        "l2": mode,
                        "buffer_sets": nsets,
                        **t.columns(nbytes, 3),
                        "fused_floor_us": round(fused_bytes / (ceiling_tbps * 1e6), 3),
                        "sm_clock_mhz": clock,
                        "compile_s": info.get(name, {}).get("compile_s", ""),
                        # fused: the unfused path's bytes; compile: the eager reference's (check_bits)
                        "bits_equal": bits.get(name, ""),
                    }
                )
            del sets, per_set, calls
        del first
    return rows


def meta(compile_info: dict) -> dict:
    """The NVFP4 record's own part (``nvfp4_bench_<gpu>.json``)."""
    return {
        "nvfp4_impls": NVFP4_IMPLS,
        "nvfp4_columns": pairing.describe(NVFP4_COLUMNS),
        "nvfp4_compile": {  # the budget's skips too (record_meta reads them when called)
            **compile_baselines.record_meta({"nvfp4": [f"M={m} N={n}" for m, n in NVFP4_MAX_AUTOTUNE]}),
            "per_shape": compile_info,
        },
        "nvfp4_cold_rotation": f">= {timing.COLD_FACTOR} x L2 of buffer sets (inputs and preallocated outputs)",
    }
