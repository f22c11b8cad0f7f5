"""Benchmark cases for the fused SiLU-and-mul + FP8 per-token-group quantization (issue 12).

Data, not timing: :func:`fp8_cases` lists the cases, :func:`fp8_impls` builds, for one case, the
calls to time (each with its preallocated CUDA buffers) and the bytes the op must move. The
timer (CUDA-graph replay, the fixed-count method of :mod:`inkling_workbook.measure.timing`) is the
caller's.

Bytes moved, per row present (the same count for every implementation, so their effective
bandwidths compare): read ``4N`` (bf16 gate and up), write ``N`` (e4m3) and ``4 N / group_size``
(fp32 scales). Masked cases count only the rows present (``sum(masked_m)``); the unfused path and
torch.compile have no masked variant and process every row of ``[E, T]``.

The masked layout's target is a time that follows the rows present, not E x T. Two sets of cases
test it: the same ragged counts in buffers of T = 256 to 2048 (E x T grows 8x, the rows present
do not), and at T = 2048 the counts scaled 8x (the time a row present adds, against the same rows
as one 2-D call). Past T = 256 only the fused op and its 2-D yardstick are timed
(:data:`SWEEP_TIMED`): the unfused pair and torch.compile process every row of ``[E, T]`` and say
nothing about the masked launch.
"""

from __future__ import annotations

from collections.abc import Callable

GROUP_SIZE = 128
MS = (16, 1024, 8192, 49152)
NS = (1536, 3072)
MASKED_E, MASKED_T = 8, 256
#: rows present per expert in the ragged masked case (0 and T included): 921 of 2048 rows
MASKED_COUNTS = (256, 0, 17, 128, 255, 64, 1, 200)
#: the buffers the same counts are timed in (E x T = 2048 to 16384 rows, 921 present in each)
MASKED_TS = (256, 512, 1024, 2048)
#: at the largest T the counts are also timed scaled by this (7368 rows present)
MASKED_SCALE = 8
#: what the cases past T = 256 time (the rest is built only for the check before timing)
SWEEP_TIMED = ("fused", "fused_no_pdl", "fused_2d_present")


def _case(name, M, N, interleaved, column_major=False, ue8m0=False, E=None, T=None, masked_m=None, timed=None) -> dict:
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
        "timed": None if timed is None else list(timed),  # None: every implementation
    }


def is_timed(case: dict, impl: str) -> bool:
    """Whether the benchmark times ``impl`` on ``case`` (every implementation unless the case names them)."""
    return case.get("timed") is None or impl in case["timed"]


def fp8_cases() -> list[dict]:
    """Every benchmark case, as plain dicts (M = rows present, E/T/masked_m for the masked layout).

    * M in {16, 1024, 8192, 49152} x N in {1536, 3072}, gate || up and interleaved, row-major scales;
    * at M = 49152 also column-major scales, UE8M0 scales, and both (the DeepGEMM layout);
    * masked 3-D layout, E = 8 experts x T = 256 padded rows: ragged ``masked_m`` (921 rows) and
      the same E, T with every row present;
    * the same ragged counts at T = 512, 1024, 2048, and at T = 2048 scaled 8x: fused and its 2-D
      yardstick only (the time should follow the rows present, not E x T).
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
        big_t = MASKED_TS[-1]
        sweep = [("ragged", T, MASKED_COUNTS) for T in MASKED_TS if T != MASKED_T]
        sweep.append((f"raggedx{MASKED_SCALE}", big_t, tuple(MASKED_SCALE * c for c in MASKED_COUNTS)))
        for label, T, counts in sweep:
            name = f"masked_{label}_E{MASKED_E}_T{T}_N{N}"
            cases.append(_case(name, sum(counts), N, False, E=MASKED_E, T=T, masked_m=counts, timed=SWEEP_TIMED))
    return cases


def fp8_bytes(case: dict) -> int:
    """Bytes the fused op must move for ``case``: per row present 4N read, N + 4N/group written."""
    N, g = case["N"], case["group_size"]
    return case["M"] * (4 * N + N + 4 * N // g)


_compiled: dict = {}

#: at decode, torch.compile static is compiled this many times, each time afresh, and the fastest
#: draw is timed: inductor's runtime autotuner picks a reduction config by timing its candidates
#: once, and at M = 16 it drew a config 2-3x slower than the others in 4 of 12 fresh compilations
#: (experiment S). The strongest baseline is the best draw.
COMPILE_DRAWS = 4


def compile_draws(case: dict) -> int:
    """How many fresh compilations of torch.compile static the benchmark tries on ``case``."""
    decode = case["M"] <= 16 and case["masked_m"] is None
    return COMPILE_DRAWS if decode and is_timed(case, "torch_compile_static") else 1


#: the cases that also time torch.compile in max-autotune-no-cudagraphs (15-40 s of compile each,
#: more with the group reduction): three of the README's headline rows, gate || up, row-major
#: scales (decode, and the two sizes where experiment H found max-autotune 26-27% faster at 49152)
MAX_AUTOTUNE_CASES = ("M16_N3072_nil", "M8192_N3072_nil", "M49152_N3072_nil")


def has_max_autotune(case: dict) -> bool:
    """Whether the benchmark times torch.compile max-autotune-no-cudagraphs on ``case``: a named
    case, unless the sweep marked it ``max_autotune_skipped`` (past the GPU job's budget,
    ``compile_baselines.max_autotune_allowed``)."""
    named = case["name"] in MAX_AUTOTUNE_CASES and not case.get("max_autotune_skipped")
    return named and is_timed(case, "torch_compile_static")


def new_compile_state() -> None:
    """Before a case's compile columns: dynamo reset (``compile_baselines.new_state``) and this
    module's compile objects dropped, so each case compiles from a fresh state with new objects."""
    from inkling_workbook.measure import compile_baselines

    compile_baselines.new_state()
    _compiled.clear()


def _compiled_reference(interleaved: bool, ue8m0: bool, column_major: bool, draw: int = 0, mode: str = "default"):
    """torch.compile(dynamic=False) of the torch reference of the fused op in ``mode`` (a key of
    ``compile_baselines.MODES``), one per variant, draw and mode (each under a code object of its
    own: dynamo caches compiled code on the code object, so the draws and modes coexist); the
    caller makes its first call inside :func:`fresh_compile` so inductor compiles and autotunes it
    afresh, after :func:`new_compile_state` for the case."""
    key = (interleaved, ue8m0, column_major, draw, mode)
    if key not in _compiled:
        import torch

        from inkling_kernels.reference import silu_and_mul_fp8_group_quant_ref
        from inkling_workbook.measure import compile_baselines

        def fn(gateup):
            q, s = silu_and_mul_fp8_group_quant_ref(
                gateup, interleaved=interleaved, group_size=GROUP_SIZE, scale_ue8m0=ue8m0
            )
            return q, (s.t().contiguous() if column_major else s)  # column-major: stored transposed

        fn = compile_baselines.own_code(fn, f"draw{draw}_{mode}")
        _compiled[key] = torch.compile(fn, dynamic=False, mode=compile_baselines.MODES[mode])
    return _compiled[key]


def fresh_compile():
    """A context in which inductor compiles with empty caches (in memory and on disk: a new cache
    directory): a compiled function first called inside it is generated and autotuned anew."""
    from torch._inductor.utils import fresh_cache

    return fresh_cache(delete=False)  # the loaded kernels outlive the context; their files stay


def fp8_impls(case: dict, seed: int = 0, draw: int = 0) -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (call with no arguments, bytes moved) for:

    * "fused" (PDL on, the sm_90 default) and "fused_no_pdl" (the same kernel launched without PDL,
      as after a producer that does not trigger it);
    * "unfused" (``silu_and_mul`` into a preallocated buffer, then ``fp8_group_quant`` into
      preallocated outputs);
    * "torch_compile_static" (torch.compile(dynamic=False) of the torch reference of the fused op;
      only where :func:`is_timed`; ``draw``: which fresh compilation, :func:`compile_draws`, draw 0
      the ordinary one), and on :data:`MAX_AUTOTUNE_CASES` "torch_compile_static_max_autotune"
      (the same in mode max-autotune-no-cudagraphs);
    * for a masked case, "fused_2d_present" (the fused op on as many rows as are present, as one
      contiguous 2-D input: what those rows cost without the masked layout);
    * for a decode case (M <= 16, row-major scales, no UE8M0), "silu_and_mul_alone"
      (``silu_and_mul`` into a preallocated bf16 buffer, PDL on, its own bytes: 6N a row);
    * the real anchors of :mod:`~inkling_workbook.measure.fp8_anchors` whose layout is the case's
      (and our ``fp8_group_quant`` with and without PDL beside the anchors' quantizers).

    Inputs are random normal bf16 (never zeros), created here on the GPU, once per call of this
    function (so calls of different seeds use different buffers: the cold-L2 rotation builds one
    set per seed). Needs a CUDA GPU."""
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
    compiled = _compiled_reference(il, ue, cm, draw) if is_timed(case, "torch_compile_static") else None
    autotuned = _compiled_reference(il, ue, cm, 0, "max_autotune") if has_max_autotune(case) else None
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
        "unfused": (unfused, nbytes),  # built for every case: the check before timing runs it
    }
    if compiled is not None:
        impls["torch_compile_static"] = (torch_compile_static, nbytes)
    if autotuned is not None:
        impls["torch_compile_static_max_autotune"] = (lambda: autotuned(flat_gateup), nbytes)
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
    from inkling_workbook.measure import fp8_anchors

    # the real anchors where their layout is the case's (fp8_anchors.skipped says why not elsewhere)
    impls.update(fp8_anchors.anchor_impls(case, gateup, masked_m, nbytes))
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


COMPILE_IMPLS = ("torch_compile_static", "torch_compile_static_max_autotune")


def compile_bits_equal_fused(case: dict, impls: dict) -> dict[str, bool]:
    """Each torch.compile column of a 2-D case against the fused op, once, before timing: the same
    e4m3 codes and scales (recorded, not required: inductor may order the reference's arithmetic
    its own way). Empty for a masked case (compile returns all E x T rows, flattened)."""
    if case["masked_m"] is not None:
        return {}
    from inkling_kernels.reference import bits_equal

    fq, fs = impls["fused"][0]()
    fq, fs = fq.clone(), fs.clone()
    out = {}
    for name in COMPILE_IMPLS:
        if name in impls:
            cq, cs = impls[name][0]()
            if case["column_major_scales"]:  # the reference returns its scales [G, M], the op a [M, G] view
                cs = cs.t()
            out[name] = cq.shape == fq.shape and bits_equal(cq, fq) and cs.shape == fs.shape and bits_equal(cs, fs)
    return out


def check_fused_equals_unfused(case: dict, impls: dict) -> None:
    """Run the fused op and the unfused pair of a case once and require the same bits (e4m3 codes
    and scales) on the rows present. The benchmark calls it before timing a case."""
    from inkling_kernels.reference import bits_equal

    fq, fs = impls["fused"][0]()
    uq, us = impls["unfused"][0]()
    fq, fs, uq, us = present_rows(case, fq, fs, uq, us)
    if not (bits_equal(fq, uq) and bits_equal(fs, us)):
        raise AssertionError(f"{case['name']}: the fused op and the unfused pair differ")
