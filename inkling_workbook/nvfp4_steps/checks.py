"""The NVFP4 steps of :mod:`inkling_workbook.nvfp4_steps.kernels` checked, compiled and timed
(notebook 05, ``python -m inkling_workbook nvfp4-steps``): every step's raw output bits against
the package's (packed values and the whole scale buffer, poisoned first, padding rows included),
each step compiled for sm_90 on the CPU (SASS instructions an element), then every step timed on
a GPU with the workbook's method -> ``data/nvfp4_steps_<gpu>.csv`` and ``.json``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inkling_kernels.nvfp4 import _scale_cols, max_blockscale_rows, silu_and_mul_nvfp4_quant
from inkling_kernels.reference import join_gateup, nvfp4_quant_experts_ref, padded_blockscale_offsets
from inkling_kernels.silu_and_mul import silu_and_mul
from inkling_workbook.measure import provenance
from inkling_workbook.nvfp4_steps.kernels import STEP_NAMES, STEPS, _resolve, plan_step, run_step, two_kernels
from inkling_workbook.proofs.nvfp4_bitwise import NVFP4_DISTRIBUTIONS, nvfp4_case_matrix

# ---- the bitwise check -----------------------------------------------------------------------

POISON = 0xA5  # every output byte before a run: a byte left unwritten shows as this


@dataclass(frozen=True)
class Case:
    name: str
    N: int
    counts: tuple  # token rows per expert (empty experts allowed)
    interleaved: bool = False
    weighted: bool = False
    swizzle: bool = True
    dtype: torch.dtype = torch.bfloat16
    edges: bool = False  # a zero block, a NaN block and an Inf block planted in the first rows
    bad_gs: bool = False  # expert 1's global scale NaN, passed unchecked (validate=False)

    def kwargs(self) -> dict:
        return dict(interleaved=self.interleaved, swizzle=self.swizzle, validate=False if self.bad_gs else None)


_QUARTER = {k: tuple(c // 4 for c in v) for k, v in NVFP4_DISTRIBUTIONS.items()}  # the CPU matrix's rows
#: small enough for the interpreter (under a second a step each): both layouts, weights, uniform and
#: ragged experts (empty ones, rows not a multiple of 128) from the CPU matrix of
#: ``proofs.nvfp4_bitwise``, several tiles along N, scale columns padded to 4, linear scales,
#: fp16, zero / NaN / Inf blocks and an invalid global scale
CPU_CASES = [
    Case("N128_uniform_nil_w", 128, _QUARTER["uniform"], weighted=True),
    Case("N128_nonuniform_il", 128, _QUARTER["nonuniform"], interleaved=True),
    Case("N1536_ragged_il_w", 1536, (5, 0, 12), interleaved=True, weighted=True),
    Case("N80_padded_cols_nil", 80, (3, 5)),
    Case("N256_linear_il_w", 256, (7, 0, 6), interleaved=True, weighted=True, swizzle=False),
    Case("N256_fp16_edges_nil_w", 256, (6, 4), weighted=True, dtype=torch.float16, edges=True),
    Case("N128_bad_gs_il", 128, (4, 4, 4), interleaved=True, bad_gs=True),
]
#: checked compiled: the NVFP4 matrix at the benchmark's two widths (N = 1536, 3072: uniform and
#: ragged experts, both layouts, weights; 16 cases, each width a compile of every step) and the CPU
#: cases (N = 80 to 1536, the other tiles)
GPU_CASES = [
    Case(f"N{c['N']}_{c['experts']}_{'il' if c['interleaved'] else 'nil'}{'_w' if c['weighted'] else ''}", c["N"],
         tuple(c["counts"]), interleaved=c["interleaved"], weighted=c["weighted"])
    for c in nvfp4_case_matrix("gpu") if c["N"] in (1536, 3072)
] + CPU_CASES  # fmt: skip


def _uniform(M: int, E: int = 8) -> tuple:
    return tuple(M // E + (e < M % E) for e in range(E))


#: timed on the GPU: the NVFP4 sweep's shapes at N = 3072 (8 experts, gate || up) and one interleaved
TIMED_CASES = [
    Case("M128_N3072_nil", 3072, _uniform(128)),
    Case("M8192_N3072_nil", 3072, _uniform(8192)),
    Case("M8192_N3072_il", 3072, _uniform(8192), interleaved=True),
    Case("M49152_N3072_nil", 3072, _uniform(49152)),
]


@dataclass
class Inputs:
    gateup: torch.Tensor
    gs: torch.Tensor
    eo: torch.Tensor  # expert offsets, int32 [E+1]
    bo: torch.Tensor | None  # blockscale offsets, int64 [E+1] (None: linear scales)
    w: torch.Tensor | None


def make_inputs(case: Case, device, seed: int = 0) -> Inputs:
    """Fresh random ``gateup`` (scale 2, as the NVFP4 matrix) with its experts' offsets, weights and
    global scales ``448 * 6 / amax`` of each expert's finite activations; edge blocks planted
    where ``case.edges``: row 0 block 0 all zero, row 1 block 1 a NaN, row 2 block 2 an Inf."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.tensor(case.counts, dtype=torch.int64)
    eo = torch.cat((torch.zeros(1, dtype=torch.int64), counts.cumsum(0))).to(torch.int32)
    bo = padded_blockscale_offsets(eo)
    M, N = int(eo[-1]), case.N
    gate = torch.randn(M, N, generator=gen) * 2
    up = torch.randn(M, N, generator=gen) * 2
    if case.edges and M >= 3 and N >= 48:
        gate[0, :16] = 0.0
        gate[1, 20] = float("nan")
        up[2, 40] = float("inf")
    w = torch.rand(M, generator=gen) if case.weighted else None
    gate, up = gate.to(case.dtype), up.to(case.dtype)
    g = gate.float()
    y = (g * torch.sigmoid(g) * up.float()).abs()
    y = torch.where(torch.isfinite(y), y, 0.0) * (w[:, None] if w is not None else 1.0)
    amax = [float(y[int(eo[e]) : int(eo[e + 1])].max()) if counts[e] else 0.0 for e in range(len(counts))]
    gs = torch.tensor([448 * 6 / a if a > 0 else 1.0 for a in amax], dtype=torch.float32)
    if case.bad_gs and len(amax) > 1:
        gs[1] = float("nan")
    gateup = join_gateup(gate, up, case.interleaved)
    bo = bo.to(device) if case.swizzle else None
    return Inputs(gateup.to(device), gs.to(device), eo.to(device), bo, None if w is None else w.to(device))


def _poisoned_out(case: Case, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed, scales) as the package takes them, every byte poisoned; swizzled scales with
    ``max_blockscale_rows`` rows (more than the experts use: the rows past them must come back 0)."""
    M = sum(case.counts)
    rows = max_blockscale_rows(M, len(case.counts)) if case.swizzle else M
    packed = torch.full((M, case.N // 2), POISON, dtype=torch.uint8, device=device)
    return packed, torch.full((rows, _scale_cols(case.N, case.swizzle)), POISON, dtype=torch.uint8, device=device)


def _poison(out: tuple[torch.Tensor, torch.Tensor]) -> None:
    out[0].fill_(POISON)
    out[1].fill_(POISON)


def run_package(case: Case, x: Inputs, out):
    return silu_and_mul_nvfp4_quant(
        x.gateup, x.gs, x.eo, x.bo, topk_weights=x.w, out=out, enable_pdl=False, **case.kwargs()
    )


def reference_equal(case: Case, x: Inputs, packed: torch.Tensor, scales: torch.Tensor) -> bool:
    """The package's output against :func:`nvfp4_quant_experts_ref` of the package's own activation
    (``silu_and_mul``): packed bytes, the experts' scale rows, and zeros past them."""
    act = silu_and_mul(x.gateup, x.w, interleaved=case.interleaved).cpu()
    bo = x.bo.cpu() if x.bo is not None else None
    p, s = nvfp4_quant_experts_ref(act, x.gs.cpu(), x.eo.cpu(), bo, swizzle=case.swizzle)
    scales = scales.cpu()
    rest = scales[s.shape[0] :]
    return torch.equal(packed.cpu(), p) and torch.equal(scales[: s.shape[0]], s) and bool((rest == 0).all())


def step_runners(steps=None) -> dict:
    """name -> fn(inputs, case, out) for ``steps`` (default: all)."""
    names = [STEP_NAMES[_resolve(s)] for s in steps] if steps is not None else STEP_NAMES
    return {
        n: (
            lambda x, case, out, n=n: run_step(
                n, x.gateup, x.gs, x.eo, x.bo, topk_weights=x.w, out=out, enable_pdl=False, **case.kwargs()
            )
        )  # fmt: skip
        for n in names
    }


def check_case(case: Case, device, runners: dict, seed: int = 0) -> list[dict]:
    """Every runner on one case against the package, raw bits of the packed values and of the
    whole scale buffer (both poisoned first), and the package against the reference."""
    device = torch.device(device)
    x = make_inputs(case, device, seed)
    pkg = run_package(case, x, _poisoned_out(case, device))
    ref_ok = reference_equal(case, x, *pkg)
    rows = []
    for name, fn in runners.items():
        packed, scales = fn(x, case, _poisoned_out(case, device))
        p_ok, s_ok = torch.equal(packed, pkg[0]), torch.equal(scales, pkg[1])
        rows.append({"step": name, "case": case.name, "device": device.type, "packed_equal_package": p_ok,
                     "scales_equal_package": s_ok, "package_equal_reference": ref_ok,
                     "packed_bytes_differing": int((packed != pkg[0]).sum()),
                     "scale_bytes_differing": int((scales != pkg[1]).sum()),
                     "ok": p_ok and s_ok and ref_ok})  # fmt: skip
    return rows


def check_steps(device="cpu", cases=None, steps=None, runners=None, seed: int = 0) -> list[dict]:
    """Every step (or ``runners``) bitwise against the package on ``cases`` (default:
    :data:`CPU_CASES` on CPU, :data:`GPU_CASES` on CUDA). One dict a step and case."""
    device = torch.device(device)
    if cases is None:
        cases = GPU_CASES if device.type == "cuda" else CPU_CASES
    runners = runners if runners is not None else step_runners(steps)
    rows = []
    for i, case in enumerate(cases):
        rows += check_case(case, device, runners, seed + i)
    return rows


def check_step(name, device="cpu", cases=None) -> list[dict]:
    """One step bitwise against the package on ``cases`` (see :func:`check_steps`)."""
    return check_steps(device, cases, steps=[name])


def summary(rows: list[dict]) -> list[dict]:
    """One row a step: cases checked and how many matched the package bit for bit."""
    out = {}
    for r in rows:
        d = out.setdefault(r["step"], {"step": r["step"], "cases": 0, "equal_package": 0, "package_equal_reference": 0})
        d["cases"] += 1
        d["equal_package"] += r["packed_equal_package"] and r["scales_equal_package"]
        d["package_equal_reference"] += r["package_equal_reference"]
    return list(out.values())


# ---- compiled for sm_90 on the CPU: SASS instructions an element -------------------------------

SASS_M, SASS_N, SASS_EXPERTS = 8192, 3072, 8  # the benchmark's plan (N = 3072, 8 experts)


def _inspect(compiled, elements: int, warps: int) -> dict:
    """SASS instructions to ``EXIT`` per element of a thread, the shuffles, registers, spills."""
    import re

    from portcheck import code

    ops = code.sass_opcodes(compiled)
    usage = code.cuobjdump(compiled, "-res-usage")
    local = re.search(r"LOCAL:(\d+)", usage)
    return {
        "sass_per_element": round(len(ops) / (elements / (32 * warps)), 2),
        "shfl": sum(op.startswith("SHFL") for op in ops),
        "registers": int(re.search(r"REG:(\d+)", usage).group(1)),
        "local_bytes": int(local.group(1)) if local else 0,
    }


def _package_case(kind: str, interleaved: bool):
    """The package's launch (as the sm_90 compile records build it: captured on CPU tensors, the
    compiled path's tile, PDL off) of ``silu_and_mul`` / ``nvfp4_quant`` / the fused op."""
    import inkling_kernels as ik
    from inkling_workbook.proofs import blackwell

    M, N = SASS_M, SASS_N
    eo = torch.tensor([0, *torch.tensor(_uniform(M, SASS_EXPERTS)).cumsum(0).tolist()], dtype=torch.int32)
    gs = torch.ones(SASS_EXPERTS)
    x = torch.empty((M, 2 * N), dtype=torch.bfloat16)
    calls = {
        "silu_and_mul": lambda: ik.silu_and_mul(x, interleaved=interleaved),
        "nvfp4_quant": lambda: ik.nvfp4_quant(
            torch.empty((M, N), dtype=x.dtype), gs, expert_offsets=eo, validate=False
        ),
        "fused": lambda: ik.silu_and_mul_nvfp4_quant(x, gs, eo, interleaved=interleaved, validate=False),
    }
    return blackwell.Case(f"{kind} {interleaved}", kind, calls[kind], pdl=False)


def sass_step(step, interleaved: bool = False) -> dict:
    """Step ``step`` (or ``"package"``) compiled for sm_90 on the CPU in the benchmark's plan
    (M = 8192, N = 3072, 8 experts, the compiled tile, PDL off, no weights): :func:`_inspect`'s
    counts; step 0 sums its two kernels' instructions an element (the activation's element is
    the quantizer's)."""
    from inkling_kernels import _backend
    from inkling_workbook.proofs import blackwell
    from portcheck import code

    if step == "package" or _resolve(step) == 0:
        kinds = ["fused"] if step == "package" else ["silu_and_mul", "nvfp4_quant"]
        parts = []
        for kind in kinds:
            compiled, elements, _, kwargs = blackwell.compile_case(_package_case(kind, interleaved), "sm_90a")
            parts.append(_inspect(compiled, elements, kwargs["num_warps"]))
        total = {k: sum(p[k] for p in parts) for k in ("sass_per_element", "shfl", "local_bytes")}
        total["sass_per_element"] = round(total["sass_per_element"], 2)
        regs = [p["registers"] for p in parts]
        return total | {"registers": regs[0] if len(regs) == 1 else "/".join(map(str, regs))}
    eo = torch.tensor([0, *torch.tensor(_uniform(SASS_M, SASS_EXPERTS)).cumsum(0).tolist()], dtype=torch.int32)
    x = torch.empty((SASS_M, 2 * SASS_N), dtype=torch.bfloat16)
    _, _, launch = plan_step(step, x, torch.ones(SASS_EXPERTS), eo, interleaved=interleaved, validate=False,
                             compiled=True)  # fmt: skip
    kwargs = {**_backend.COMPILE_OPTIONS, **launch.kwargs}
    compiled, _ = code.compile_launch(code.Launch(launch.kernel, launch.args, kwargs, launch.grid))
    return _inspect(compiled, kwargs["BLOCK_M"] * kwargs["BLOCK_K"], kwargs["num_warps"])


def sass_table(layouts=(False, True)) -> list[dict]:
    """Every step and the package compiled for sm_90 here, one row each: SASS instructions an
    element per layout (gate || up, interleaved), then the first layout's shuffles, registers
    (step 0: both kernels') and local (spill) bytes."""
    rows = []
    for name in [*STEP_NAMES, "package"]:
        counts = [sass_step(name, il) for il in layouts]
        row = {"step": name} | {f"instr/elem {'il' if il else 'gate||up'}": r["sass_per_element"]
                                for il, r in zip(layouts, counts)}  # fmt: skip
        first = counts[0]
        rows.append(row | {"SHFL": first["shfl"], "registers": first["registers"], "local bytes": first["local_bytes"]})
    return rows


# ---- timing (GPU only) -----------------------------------------------------------------------


def _require_cuda(device) -> torch.device:
    from inkling_workbook.measure import timing

    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"the NVFP4 steps are timed on a CUDA GPU only, got device {device} (the interpreter's "
                         "timings say nothing about the kernels)")  # fmt: skip
    timing.require_gpu()
    return device


def fused_bytes(case: Case) -> int:
    """Bytes the fused op must move: read 4N a row (bf16 gate and up), write N/2 packed and the
    scale buffer's bytes (``blockscale_offsets[-1]`` rows)."""
    from inkling_workbook.measure.nvfp4_sweep import nvfp4_bytes

    rows = int(padded_blockscale_offsets(torch.tensor([0, *torch.tensor(case.counts).cumsum(0).tolist()]))[-1])
    return nvfp4_bytes(sum(case.counts), case.N, True, rows)


def time_steps(device="cuda", cases=TIMED_CASES, passes: int | None = None) -> list[dict]:
    """Every step and the package (PDL off, outputs preallocated, value checks off; step 0 with its
    activation buffer preallocated) on ``cases`` with the workbook's method
    (:mod:`inkling_workbook.measure.timing`: CUDA-graph replay, passes interleaved), each checked
    bit for bit against the package on the very inputs it is timed on. GPU only; call
    :func:`timing.warm_clocks` first."""
    from inkling_workbook.measure import timing

    device = _require_cuda(device)
    rows = []
    for case in cases:
        x = make_inputs(case, device)
        out = _poisoned_out(case, device)
        M = x.gateup.shape[0]
        act = torch.empty((M, case.N), dtype=x.gateup.dtype, device=device)
        kw = dict(interleaved=case.interleaved, topk_weights=x.w, swizzle=case.swizzle, out=out, validate=False,
                  enable_pdl=False)  # fmt: skip
        calls = {"two_kernels": lambda: two_kernels(x.gateup, x.gs, x.eo, x.bo, act=act, **kw)}
        for s in STEPS[1:]:
            calls[s.name] = lambda s=s.name: run_step(s, x.gateup, x.gs, x.eo, x.bo, **kw)
        calls["package"] = lambda: silu_and_mul_nvfp4_quant(x.gateup, x.gs, x.eo, x.bo, **kw)
        want = [t.clone() for t in calls["package"]()]
        for k, fn in calls.items():
            _poison(out)
            got = fn()
            if not (torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])):
                raise AssertionError(f"{k} on the timed inputs of {case.name}: bits differ from the package's")
        n_passes = passes or (timing.DECODE_PASSES if M <= timing.DECODE_MAX_M else timing.OTHER_PASSES)
        timings = timing.time_calls(calls, n_passes)
        clock = provenance.gpu_state().get("sm_clock_mhz")
        for i, k in enumerate(calls):
            rows.append({"step": i, "impl": k, "case": case.name, "M": M, "N": case.N, "experts": len(case.counts),
                         "layout": "il" if case.interleaved else "nil", "l2": "warm",
                         **timings[k].columns(fused_bytes(case), 4),
                         "vs_package": round(timings["package"].median_us / timings[k].median_us, 4),
                         "sm_clock_mhz": clock})  # fmt: skip
    return rows


def measure_steps(out: str | Path | None = None, device="cuda", cases=None, command=None) -> tuple[Path, Path]:
    """Check every step on :data:`GPU_CASES`, then time them on ``cases`` (default
    :data:`TIMED_CASES`) -> ``data/nvfp4_steps_<gpu>.csv`` and ``.json`` (provenance, method, steps,
    the bitwise summary). GPU only."""
    from inkling_workbook.measure import timing
    from inkling_workbook.measure.timing import write_records

    device = _require_cuda(device)
    cases = TIMED_CASES if cases is None else cases
    slug = provenance.device_slug()
    out = Path(out) if out else provenance.REPO_ROOT / "data" / f"nvfp4_steps_{slug}.csv"
    if out.suffix != ".csv":
        out = out / f"nvfp4_steps_{slug}.csv"
    meta = provenance.collect(command)
    checks = check_steps(device)
    meta["bitwise"] = {"cases": [c.name for c in GPU_CASES], "summary": summary(checks),
                       "all_ok": all(r["ok"] for r in checks),
                       "failures": [r for r in checks if not r["ok"]]}  # fmt: skip
    meta["clock_warmup"] = timing.warm_clocks()
    meta["timing"] = {
        "method": "inkling_workbook.measure.timing: GraphTimer (>= 100 calls, >= 1 ms a replay), time_interleaved",
        "rounds": timing.ROUNDS,
        "decode_passes": timing.DECODE_PASSES,
        "other_passes": timing.OTHER_PASSES,
        "l2": "warm (the same buffers every call)",
        "output_policy": "outputs preallocated (step 0's activation too), PDL off, value checks off",
        "spread": "lowest and highest pass median",
        "bytes": "what the fused op must move: read 4N a row, write N/2 and the scale buffer",
    }
    package = {"index": len(STEPS), "name": "package", "idea": "inkling_kernels.silu_and_mul_nvfp4_quant, PDL off"}
    meta["steps"] = [s.__dict__ for s in STEPS] + [package]
    meta["cases"] = [{"case": c.name, "M": sum(c.counts), "N": c.N, "counts": list(c.counts),
                      "interleaved": c.interleaved} for c in cases]  # fmt: skip
    rows = time_steps(device, cases)
    meta["gpu_state_after"] = provenance.gpu_state()
    return write_records(rows, meta, out)
