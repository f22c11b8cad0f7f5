"""Benchmark cases for the fused SiLU-and-mul + FP8 per-token-group quantization (issue 12).

Data, not timing: :func:`fp8_cases` lists the cases, :func:`fp8_impls` builds, for one case, the
calls to time (each with its preallocated CUDA buffers) and the bytes the op must move. The
timer (CUDA-graph replay, the fixed-count method of :mod:`inkling_workbook.bench`) is the
caller's.

Bytes moved, per row present (the same count for every implementation, so their effective
bandwidths compare): read ``4N`` (bf16 gate and up), write ``N`` (e4m3) and ``4 N / group_size``
(fp32 scales). Masked cases count only the rows present (``sum(masked_m)``); the unfused path and
torch.compile have no masked variant and process every row of ``[E, T]``.
"""

from __future__ import annotations

from collections.abc import Callable

GROUP_SIZE = 128
MS = (16, 1024, 8192, 49152)
NS = (1536, 3072)
MASKED_E, MASKED_T = 8, 256
#: rows present per expert in the ragged masked case (0 and T included): 921 of 2048 rows
MASKED_COUNTS = (256, 0, 17, 128, 255, 64, 1, 200)


def _case(name, M, N, interleaved, column_major=False, ue8m0=False, E=None, T=None, masked_m=None) -> dict:
    return {
        "name": name,
        "M": M,
        "N": N,
        "group_size": GROUP_SIZE,
        "interleaved": interleaved,
        "column_major_scales": column_major,
        "scale_ue8m0": ue8m0,
        "E": E,
        "T": T,
        "masked_m": None if masked_m is None else list(masked_m),
    }


def fp8_cases() -> list[dict]:
    """Every benchmark case, as plain dicts (M = rows present, E/T/masked_m for the masked layout).

    * M in {16, 1024, 8192, 49152} x N in {1536, 3072}, gate || up and interleaved, row-major scales;
    * at M = 49152 also column-major scales, UE8M0 scales, and both (the DeepGEMM layout);
    * masked 3-D layout, E = 8 experts x T = 256 padded rows: ragged ``masked_m`` and the same
      E, T with every row present (time should scale with the rows present).
    """
    cases = []
    for N in NS:
        for M in MS:
            for il in (False, True):
                cases.append(_case(f"M{M}_N{N}_{'il' if il else 'nil'}", M, N, il))
        for il in (False, True):
            for cm, ue in ((True, False), (False, True), (True, True)):
                tag = "_".join(t for t, on in (("colmajor", cm), ("ue8m0", ue)) if on)
                cases.append(_case(f"M49152_N{N}_{'il' if il else 'nil'}_{tag}", 49152, N, il, cm, ue))
        for label, counts in (("ragged", MASKED_COUNTS), ("full", (MASKED_T,) * MASKED_E)):
            M = sum(counts)
            cases.append(
                _case(
                    f"masked_{label}_E{MASKED_E}_T{MASKED_T}_N{N}", M, N, False, E=MASKED_E, T=MASKED_T, masked_m=counts
                )
            )
    return cases


def fp8_bytes(case: dict) -> int:
    """Bytes the fused op must move for ``case``: per row present 4N read, N + 4N/group written."""
    N, g = case["N"], case["group_size"]
    return case["M"] * (4 * N + N + 4 * N // g)


_compiled: dict = {}


def _compiled_reference(interleaved: bool, ue8m0: bool, column_major: bool):
    """torch.compile(dynamic=False) of the torch reference of the fused op, one per variant."""
    key = (interleaved, ue8m0, column_major)
    if key not in _compiled:
        import torch

        from inkling_kernels.reference import silu_and_mul_fp8_group_quant_ref

        def fn(gateup):
            q, s = silu_and_mul_fp8_group_quant_ref(
                gateup, interleaved=interleaved, group_size=GROUP_SIZE, scale_ue8m0=ue8m0
            )
            return q, (s.t().contiguous() if column_major else s)  # column-major: stored transposed

        _compiled[key] = torch.compile(fn, dynamic=False)
    return _compiled[key]


def fp8_impls(case: dict, seed: int = 0) -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (call with no arguments, bytes moved) for "fused" (PDL on, the sm_90 default),
    "fused_no_pdl" (the same kernel launched without PDL, as after a producer that does not
    trigger it), "unfused" (``silu_and_mul`` into a preallocated buffer, then ``fp8_group_quant``
    into preallocated outputs), "torch_compile_static" (torch.compile(dynamic=False) of the
    torch reference of the fused op) and, for a masked case, "fused_2d_present" (the fused op on
    as many rows as are present, as one contiguous 2-D input: the time proportional to the rows
    present that the masked call is held to) and, for a decode case (M <= 16, row-major scales,
    no UE8M0), "silu_and_mul_alone" (``silu_and_mul`` into a preallocated bf16 buffer, PDL on, its
    own bytes: 6N a row). Inputs are random normal bf16 (never zeros), created here
    on the GPU, once per call of this function (so calls of different seeds use different
    buffers: the cold-L2 rotation builds one set per seed). Needs a CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            "fp8_impls needs a CUDA GPU: timings of the Triton interpreter say nothing about the kernels "
            "(fp8_cases() is plain data and works anywhere)"
        )
    from inkling_kernels import fp8_group_quant, silu_and_mul, silu_and_mul_fp8_group_quant
    from inkling_kernels.fp8 import empty_scales

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(seed)
    N, g = case["N"], case["group_size"]
    il, cm, ue = case["interleaved"], case["column_major_scales"], case["scale_ue8m0"]
    masked = case["masked_m"] is not None
    lead = (case["E"], case["T"]) if masked else (case["M"],)
    gateup = torch.randn((*lead, 2 * N), generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
    masked_m = torch.tensor(case["masked_m"], dtype=torch.int32, device=dev) if masked else None
    out = (torch.empty((*lead, N), dtype=torch.float8_e4m3fn, device=dev), empty_scales(lead, N // g, cm, dev))
    act = torch.empty((*lead, N), dtype=torch.bfloat16, device=dev)
    uout = (torch.empty((*lead, N), dtype=torch.float8_e4m3fn, device=dev), empty_scales(lead, N // g, cm, dev))
    flat_gateup, flat_act = gateup.reshape(-1, 2 * N), act.reshape(-1, N)
    compiled = _compiled_reference(il, ue, cm)
    opts = {"group_size": g, "scale_ue8m0": ue, "column_major_scales": cm}

    def fused():
        return silu_and_mul_fp8_group_quant(gateup, interleaved=il, masked_m=masked_m, out=out, **opts)

    def fused_no_pdl():
        return silu_and_mul_fp8_group_quant(
            gateup, interleaved=il, masked_m=masked_m, out=out, enable_pdl=False, **opts
        )

    def unfused():
        silu_and_mul(flat_gateup, interleaved=il, out=flat_act)
        return fp8_group_quant(act, out=uout, **opts)

    def torch_compile_static():
        return compiled(flat_gateup)

    nbytes = fp8_bytes(case)
    impls = {
        "fused": (fused, nbytes),
        "fused_no_pdl": (fused_no_pdl, nbytes),
        "unfused": (unfused, nbytes),
        "torch_compile_static": (torch_compile_static, nbytes),
    }
    if case["M"] <= 16 and not (masked or cm or ue):
        # decode: silu_and_mul alone (bf16 out, preallocated, PDL on), timed in the same passes as
        # the fused op: the decode target compares the two
        silu_out = torch.empty((case["M"], N), dtype=torch.bfloat16, device=dev)

        def silu_and_mul_alone():
            return silu_and_mul(flat_gateup, interleaved=il, out=silu_out)

        impls["silu_and_mul_alone"] = (silu_and_mul_alone, case["M"] * 6 * N)
    if masked:
        # the rows present as one contiguous 2-D call: what they cost without the masked layout
        rows = sum(case["masked_m"])
        flat = torch.randn((rows, 2 * N), generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
        out2 = (torch.empty((rows, N), dtype=torch.float8_e4m3fn, device=dev), empty_scales((rows,), N // g, cm, dev))

        def fused_2d_present():
            return silu_and_mul_fp8_group_quant(flat, interleaved=il, out=out2, **opts)

        impls["fused_2d_present"] = (fused_2d_present, nbytes)
    return impls


def present_rows(case: dict, *tensors):
    """The rows of a case's outputs that the fused op writes: all of them, or for a masked case
    the first ``masked_m[e]`` rows of each expert (the rest of its buffers is never touched)."""
    if case["masked_m"] is None:
        return tensors
    import torch

    dev = tensors[0].device
    present = torch.arange(case["T"], device=dev)[None, :] < torch.tensor(case["masked_m"], device=dev)[:, None]
    return tuple(t[present] for t in tensors)


def check_fused_equals_unfused(case: dict, impls: dict) -> None:
    """Run the fused op and the unfused pair of a case once and require the same bits (e4m3 codes
    and scales) on the rows present. The benchmark calls it before timing a case."""
    from inkling_kernels.reference import bits_equal

    fq, fs = impls["fused"][0]()
    uq, us = impls["unfused"][0]()
    fq, fs, uq, us = present_rows(case, fq, fs, uq, us)
    if not (bits_equal(fq, uq) and bits_equal(fs, us)):
        raise AssertionError(f"{case['name']}: the fused op and the unfused pair differ")
