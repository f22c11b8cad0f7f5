"""The FP8 steps of :mod:`inkling_workbook.fp8_steps.kernels` checked and timed (notebook 07,
``python -m inkling_workbook fp8-steps``): every step's raw output bits against the package's on
the CPU and GPU cases (poisoned outputs, edge values planted), then every step timed with the
workbook's method -> ``data/fp8_steps_<gpu>.csv`` and ``.json``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from inkling_kernels.fp8 import FP8_DTYPE, empty_scales, silu_and_mul_fp8_group_quant
from inkling_kernels.reference import fp8_group_quant_ref
from inkling_workbook.fp8_steps.kernels import STEP_NAMES, STEPS, _resolve, run_step
from inkling_workbook.measure import provenance

# ---- the bitwise check -----------------------------------------------------------------------

Q_POISON = 0xA5  # every output byte before a run: a byte left unwritten shows as this
S_POISON = 0x7FA5A5A5  # every scale word before a run (a NaN no kernel writes)


@dataclass(frozen=True)
class Case:
    name: str
    lead: tuple  # (M,) or (E, T)
    N: int
    dtype: torch.dtype = torch.bfloat16
    interleaved: bool = True
    group_size: int = 128
    scale_ue8m0: bool = False
    column_major_scales: bool = False
    masked: tuple | None = None  # rows present per expert (3-D only)

    def kwargs(self, device) -> dict:
        masked_m = None if self.masked is None else torch.tensor(self.masked, dtype=torch.int32, device=device)
        return dict(interleaved=self.interleaved, group_size=self.group_size, scale_ue8m0=self.scale_ue8m0,
                    column_major_scales=self.column_major_scales, masked_m=masked_m)  # fmt: skip


#: small enough for the interpreter: both layouts, 2-D and 3-D masked, groups of 64 and 128,
#: bf16/fp16/fp32, column-major and ue8m0 scales
CPU_CASES = [
    Case("il_bf16", (5,), 256),
    Case("nil_bf16", (5,), 256, interleaved=False),
    Case("il_fp16_g64", (4,), 256, torch.float16, group_size=64),
    Case("nil_fp16_colmajor", (5,), 256, torch.float16, interleaved=False, column_major_scales=True),
    Case("il_fp32_ue8m0", (3,), 128, torch.float32, scale_ue8m0=True),
    Case("il_bf16_3d", (2, 3), 256),
    Case("il_bf16_masked_colmajor", (3, 5), 256, masked=(5, 0, 2), column_major_scales=True),
    Case("nil_bf16_masked_g64_ue8m0", (3, 4), 128, interleaved=False, group_size=64, scale_ue8m0=True,
         masked=(1, 4, 0)),
]  # fmt: skip
#: timed on the GPU (bf16, groups of 128): decode, prefill, the masked layout on ragged counts
TIMED_CASES = [
    Case("M16_N3072_il", (16,), 3072),
    Case("M16_N3072_nil", (16,), 3072, interleaved=False),
    Case("M8192_N3072_il", (8192,), 3072),
    Case("M8192_N3072_nil", (8192,), 3072, interleaved=False),
    Case("masked_ragged_E8_T256_N3072", (8, 256), 3072, masked=(256, 0, 17, 128, 255, 64, 1, 200)),
]
#: checked compiled: the timed cases (their compiles serve the timing too), and fp16, fp32 with
#: ue8m0, column-major scales with padding rows, groups of 64 and a masked decode layout
GPU_CASES = TIMED_CASES + [
    Case("il_fp16_decode", (8,), 1536, torch.float16),
    Case("nil_bf16_colmajor", (1000,), 1536, interleaved=False, column_major_scales=True),
    Case("il_fp32_ue8m0", (3,), 128, torch.float32, scale_ue8m0=True),
    Case("il_bf16_masked_decode_g64", (8, 16), 1536, group_size=64, masked=(16, 0, 3, 9, 1, 16, 7, 2),
         column_major_scales=True),
]  # fmt: skip


def make_gateup(case: Case, device, seed: int = 0) -> torch.Tensor:
    """Fresh random ``gateup`` for ``case`` (never zeros) with edge values planted in the first
    rows of 16-bit inputs: a group of zeros, e4m3 ties (16 * up with the group max 448, so the
    scale is 1 and 17, 432 and 2**-10 are exact ties), a NaN and an Inf."""
    gen = torch.Generator().manual_seed(seed)
    rows = 1
    for d in case.lead:
        rows *= d
    gate = torch.randn(rows, case.N, generator=gen) * 3
    up = torch.randn(rows, case.N, generator=gen) * 3
    if case.dtype != torch.float32 and rows >= 3:
        k = case.group_size
        gate[0, :k] = 0.0  # a group of zeros: amax 0, the scale from eps
        gate[1, :k] = 16.0  # silu(16) rounds to 16 in bf16 and fp16: y = 16 * up exactly
        up[1, :k] = torch.randn(k, generator=gen).mul(4).round().div(4)
        up[1, :6] = torch.tensor([28.0, 27.0, 1.0625, 2.0**-14, -3 * 2.0**-14, -26.5])  # 448, ties
        gate[2, 0] = float("nan")
        gate[2, k - 1] = 16.0
        up[2, k - 1] = float("inf")
    from inkling_kernels.reference import join_gateup

    gateup = join_gateup(gate.to(case.dtype), up.to(case.dtype), case.interleaved)
    return gateup.reshape(*case.lead, 2 * case.N).to(device)


def _poisoned_out(case: Case, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scales) in the package's layout, every byte of their storage (padding too) poisoned."""
    G = case.N // case.group_size
    q = torch.full((*case.lead, case.N), Q_POISON, dtype=torch.uint8, device=device).view(FP8_DTYPE)
    scales = empty_scales(case.lead, G, case.column_major_scales, device)
    _storage_words(scales).fill_(S_POISON)
    return q, scales


def _poison(out: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Refill outputs from :func:`_poisoned_out` with the poison, padding included."""
    out[0].view(torch.uint8).fill_(Q_POISON)
    _storage_words(out[1]).fill_(S_POISON)


def _storage_words(scales: torch.Tensor) -> torch.Tensor:
    """Every 32-bit word of the storage under ``scales`` (padding rows included), as int32."""
    return torch.empty(0, dtype=torch.int32, device=scales.device).set_(scales.untyped_storage())


def _present(case: Case, device) -> torch.Tensor | None:
    """Boolean [E, T] of the rows present (masked cases), else None."""
    if case.masked is None:
        return None
    E, T = case.lead
    return torch.arange(T, device=device)[None, :] < torch.tensor(case.masked, device=device)[:, None]


def reference(case: Case, gateup: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch formula (:func:`inkling_kernels.reference.fp8_group_quant_ref`) on the kernels'
    own activation (``silu_and_mul``, rounded to gateup's dtype), row-major scales, all rows.
    The formula runs on the CPU: torch's CUDA division by a scalar multiplies by its reciprocal,
    which is not the formula's IEEE division (on the H200 it moved scales of 8 of 9 cases)."""
    from inkling_kernels import silu_and_mul

    y = silu_and_mul(gateup.reshape(-1, gateup.shape[-1]), interleaved=case.interleaved)
    q, s = fp8_group_quant_ref(y.cpu(), case.group_size, scale_ue8m0=case.scale_ue8m0)
    return q.reshape(*case.lead, case.N).to(gateup.device), s.reshape(*case.lead, -1).to(gateup.device)


def _run_package(case, gateup, out):
    return silu_and_mul_fp8_group_quant(gateup, out=out, enable_pdl=False, **case.kwargs(gateup.device))


def check_case(case: Case, device, runners: dict, seed: int = 0) -> list[dict]:
    """Every runner (name -> fn(gateup, out=..., **case kwargs)) on one case against the package
    (raw bits of q and of the whole scale storage, both poisoned first) and the reference (the
    rows present)."""
    device = torch.device(device)
    gateup = make_gateup(case, device, seed)
    pkg_out = _run_package(case, gateup, _poisoned_out(case, device))
    pkg_q, pkg_s = pkg_out[0].view(torch.uint8), _storage_words(pkg_out[1])
    ref_q, ref_s = reference(case, gateup)
    present = _present(case, device)
    rows = []
    for name, fn in runners.items():
        q, s = fn(gateup, out=_poisoned_out(case, device), **case.kwargs(device))
        qb, sw = q.view(torch.uint8), _storage_words(s)
        q_pkg = torch.equal(qb, pkg_q)
        s_pkg = torch.equal(sw, pkg_s)
        sel = (lambda t: t[present]) if present is not None else (lambda t: t)
        q_ref = torch.equal(sel(qb), sel(ref_q.view(torch.uint8)))
        s_ref = torch.equal(sel(s.contiguous().view(torch.int32)), sel(ref_s.view(torch.int32)))
        rows.append({"step": name, "case": case.name, "device": device.type, "q_equal_package": q_pkg,
                     "scales_equal_package": s_pkg, "equal_reference": q_ref and s_ref,
                     "q_bytes_differing": int((qb != pkg_q).sum()),
                     "ok": q_pkg and s_pkg and q_ref and s_ref})  # fmt: skip
    return rows


def step_runners(steps=None) -> dict:
    """name -> fn(gateup, **kwargs) for ``steps`` (default: all)."""
    names = [STEP_NAMES[_resolve(s)] for s in steps] if steps is not None else STEP_NAMES
    return {n: (lambda x, n=n, **kw: run_step(n, x, **kw)) for n in names}


def check_steps(device="cpu", cases=None, steps=None, runners=None, seed: int = 0) -> list[dict]:
    """Every step (or ``runners``) bitwise against the package and the reference on ``cases``
    (default: :data:`CPU_CASES` on CPU, :data:`GPU_CASES` on CUDA). One dict a step and case."""
    device = torch.device(device)
    if cases is None:
        cases = GPU_CASES if device.type == "cuda" else CPU_CASES
    runners = runners if runners is not None else step_runners(steps)
    rows = []
    for i, case in enumerate(cases):
        rows += check_case(case, device, runners, seed + i)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """One row a step: cases checked and how many matched the package and the reference."""
    out = {}
    for r in rows:
        d = out.setdefault(r["step"], {"step": r["step"], "cases": 0, "equal_package": 0, "equal_reference": 0})
        d["cases"] += 1
        d["equal_package"] += r["q_equal_package"] and r["scales_equal_package"]
        d["equal_reference"] += r["equal_reference"]
    return list(out.values())


# ---- timing (GPU only) -----------------------------------------------------------------------


def fp8_bytes(rows_present: int, N: int, group_size: int = 128) -> int:
    """Bytes the fused op must move: read 4N (bf16 gate and up), write N (e4m3) + 4N/group (fp32)."""
    return rows_present * (4 * N + N + 4 * N // group_size)


def time_steps(device="cuda", cases=TIMED_CASES, passes: int | None = None) -> list[dict]:
    """Every step and the package (PDL off, outputs preallocated) on ``cases`` with the workbook's
    method (:mod:`inkling_workbook.measure.timing`: CUDA-graph replay of a fixed call count, passes
    interleaved). GPU only; call :func:`timing.warm_clocks` first."""
    from inkling_workbook.measure import fp8_sweep, timing

    timing.require_gpu()
    device = torch.device(device)
    rows = []
    for case in cases:
        name, lead, N, masked = case.name, case.lead, case.N, case.masked
        gateup = make_gateup(case, device)
        out = _poisoned_out(case, device)
        kw = case.kwargs(device)
        calls = {s.name: (lambda s=s.name: run_step(s, gateup, out=out, **kw)) for s in STEPS}
        calls["package"] = lambda: silu_and_mul_fp8_group_quant(gateup, out=out, enable_pdl=False, **kw)
        # every implementation checked on the very inputs it is timed on: raw bits equal to the package's
        want = calls["package"]()
        want = (want[0].view(torch.uint8).clone(), _storage_words(want[1]).clone())
        for k, fn in calls.items():
            _poison(out)
            q, s = fn()
            if not (torch.equal(q.view(torch.uint8), want[0]) and torch.equal(_storage_words(s), want[1])):
                raise AssertionError(f"{k} on the timed inputs of {name}: bits differ from the package's")
        decode = lead[-1] <= timing.DECODE_MAX_M
        # five passes past decode, as the FP8 sweep (fp8_sweep.FP8_PASSES): two left medians of the same
        # kernel apart (step 5 launches step 4's kernel on 2-D inputs)
        n_passes = passes or (timing.DECODE_PASSES if decode else fp8_sweep.FP8_PASSES)
        timings = timing.time_calls(calls, n_passes)
        present = sum(masked) if masked is not None else lead[0] * (lead[1] if len(lead) == 2 else 1)
        clock = provenance.gpu_state().get("sm_clock_mhz")
        for i, k in enumerate(calls):
            rows.append({"step": i, "impl": k, "case": name, "rows_present": present, "N": N,
                         "layout": "il" if case.interleaved else "nil", "l2": "warm",
                         **timings[k].columns(fp8_bytes(present, N), 4), "sm_clock_mhz": clock})  # fmt: skip
    return rows


def measure_steps(out: str | Path | None = None, device="cuda", cases=None, command=None) -> tuple[Path, Path]:
    """Check every step on the GPU cases, then time them -> ``data/fp8_steps_<gpu>.csv`` and
    ``.json`` (provenance, method, steps, the bitwise summary). Under a minute on an H200."""
    from inkling_workbook.measure import fp8_sweep, timing
    from inkling_workbook.measure.timing import write_records

    timing.require_gpu()
    cases = TIMED_CASES if cases is None else cases
    out = Path(out) if out else provenance.REPO_ROOT / "data" / f"fp8_steps_{provenance.device_slug()}.csv"
    if out.suffix != ".csv":
        out = out / f"fp8_steps_{provenance.device_slug()}.csv"
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
        "other_passes": fp8_sweep.FP8_PASSES,
        "l2": "warm (the same buffers every call)",
        "output_policy": "outputs preallocated, PDL off",
        "spread": "lowest and highest pass median",
        "bytes": "read 4N, write N + 4N/128 a row present",
    }
    package = {"index": len(STEPS), "name": "package", "idea": "inkling_kernels.silu_and_mul_fp8_group_quant, PDL off"}
    meta["steps"] = [s.__dict__ for s in STEPS] + [package]
    meta["cases"] = [{"case": c.name, "lead": list(c.lead), "N": c.N, "interleaved": c.interleaved,
                      "masked_m": list(c.masked) if c.masked else None} for c in cases]  # fmt: skip
    rows = time_steps(device, cases)
    meta["gpu_state_after"] = provenance.gpu_state()
    return write_records(rows, meta, out)
