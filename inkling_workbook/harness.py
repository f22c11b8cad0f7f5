"""The bitwise port harness: the Triton port against the helion originals, case by case.

A port is trusted when, for every case of a matrix that covers decode and prefill sizes, both
layouts, weights, odd widths and output dtypes, the port's output has the same raw bits as the
original's. Each case also records the layout-vs-layout and rerun comparisons, the largest ulp
distance to the torch reference and whether the output is finite.

Bits are compared as bytes (NaN-aware: two NaNs with the same payload are equal, and a NaN never
hides behind a tolerance). Both sides run on the same backend: on CUDA both are compiled; on CPU
helion's generated Triton and the port both run in the Triton interpreter.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from inkling_kernels.reference import bits_equal, join_gateup, silu_and_mul_ref, ulp_distance
from inkling_kernels.silu_and_mul import silu_and_mul

from . import helion_original, provenance

DECODE_M = (1, 2, 4, 6, 8, 16)
PREFILL_M = (96, 384, 1536, 4096, 49152)
WIDTHS = (384, 768, 960, 1024, 1536, 2048, 3072)
ODD_WIDTHS = (1, 7, 300, 1000, 1537)
# Largest ulp distance to the same-order torch reference that a case accepts, per output dtype.
# The kernels' sigmoid is 1 / (1 + exp2(-x * log2 e)) with ex2.approx and div.full on the GPU,
# torch's is expf-based: their fp32 results differ in the last few bits. A bf16/fp16 output
# hides that in its rounding (at most 1 ulp moves); an fp32 output shows it (11 ulp seen).
ULP_BUDGET = {"bfloat16": 1, "float16": 1, "float32": 16}
BIG_N = 1024
BIG_M = (2**31 + 16384) // (2 * BIG_N)  # gateup numel = 2**31 + 16384, as in the source document


@dataclass(frozen=True)
class Case:
    M: int
    N: int
    interleaved: bool
    weighted: bool
    dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"

    @property
    def name(self) -> str:
        layout = "il" if self.interleaved else "nil"
        w = "+w" if self.weighted else ""
        od = "" if self.out_dtype == self.dtype else f"->{self.out_dtype}"
        return f"M={self.M} N={self.N} {layout}{w} {self.dtype}{od}"


def case_matrix(kind: str = "gpu") -> list[Case]:
    """``gpu``: the full matrix (about 320 cases, one with numel > 2**31); ``quick``: a GPU
    subset for a fast look; ``cpu``: the same structure at interpreter-friendly sizes."""
    if kind == "gpu":
        ms, ns, odd_m, big = DECODE_M + PREFILL_M, WIDTHS, (3, 1000), True
    elif kind == "quick":
        ms, ns, odd_m, big = (1, 6, 16, 384, 4096), (768, 1024, 3072), (3,), False
    elif kind == "cpu":
        ms, ns, odd_m, big = (1, 2, 6, 16, 96), (384, 1024), (3,), False
    else:
        raise ValueError(f"kind must be 'gpu', 'quick' or 'cpu', got {kind!r}")
    cases = [Case(m, n, il, w) for il in (True, False) for w in (False, True) for m in ms for n in ns]
    cases += [Case(m, n, il, False) for il in (True, False) for m in odd_m for n in ODD_WIDTHS]
    cases += [Case(ms[-1], 768, il, w, out_dtype="float32") for il in (True, False) for w in (False, True)]
    cases += [Case(ms[2], 1024, il, False, dtype="float16") for il in (True, False)]
    if big:
        cases += [Case(BIG_M, BIG_N, il, False) for il in (True, False)]
    return cases


def run_case(case: Case, device: torch.device, seed: int = 0) -> dict:
    """Run one case; returns a row of the table."""
    gen = torch.Generator(device="cpu").manual_seed(seed + case.M * 7919 + case.N)
    dtype, out_dtype = getattr(torch, case.dtype), getattr(torch, case.out_dtype)
    big = case.M * case.N > 2**28
    if big and device.type == "cuda":  # draw large inputs on the GPU (a CPU draw would take minutes)
        gen_dev = torch.Generator(device=device).manual_seed(seed + case.M)
        gate = torch.randn((case.M, case.N), generator=gen_dev, device=device, dtype=dtype).mul_(2)
        up = torch.randn((case.M, case.N), generator=gen_dev, device=device, dtype=dtype).mul_(2)
    else:
        gate = (torch.randn((case.M, case.N), generator=gen) * 2).to(dtype).to(device)
        up = (torch.randn((case.M, case.N), generator=gen) * 2).to(dtype).to(device)
    w = torch.rand(case.M, generator=gen).to(device) if case.weighted else None
    x = join_gateup(gate, up, case.interleaved)
    x_other = join_gateup(gate, up, not case.interleaved)
    del gate, up

    def poison():
        return torch.full((case.M, case.N), float("nan"), dtype=out_dtype, device=device)

    port = silu_and_mul(x, w, out_dtype, interleaved=case.interleaved, out=poison())
    rerun = silu_and_mul(x, w, out_dtype, interleaved=case.interleaved, out=poison())
    other_layout = silu_and_mul(x_other, w, out_dtype, interleaved=not case.interleaved, out=poison())
    del x_other
    row = {"case": case.name, **asdict(case)}
    row["port_vs_helion_sm90"] = None
    if helion_original.available():
        helion = helion_original.silu_and_mul_helion(x, w, out_dtype, interleaved=case.interleaved, out=poison())
        row["port_vs_helion"] = bits_equal(port, helion)
        del helion
        if helion_original.sm90_config_index(2 * case.N, case.weighted) is not None and x.is_contiguous():
            helion = helion_original.silu_and_mul_helion(
                x, w, out_dtype, interleaved=case.interleaved, out=poison(), config="sm90_table"
            )
            row["port_vs_helion_sm90"] = bits_equal(port, helion)
            del helion
    else:
        row["port_vs_helion"] = None
    row["layouts_equal"] = bits_equal(port, other_layout)
    row["rerun_equal"] = bits_equal(port, rerun)
    del other_layout, rerun
    row["finite"] = bool(torch.isfinite(port).all())
    # max ulp to the same-order torch reference, computed in row chunks to bound memory
    worst = 0
    chunk = max(1, 2**26 // max(case.N, 1))
    for start in range(0, case.M, chunk):
        rows = slice(start, start + chunk)
        ref = silu_and_mul_ref(x[rows], None if w is None else w[rows], out_dtype, interleaved=case.interleaved)
        worst = max(worst, int(ulp_distance(port[rows], ref).max()))
    row["max_ulp_vs_ref"] = worst
    row["ok"] = bool(
        (row["port_vs_helion"] is not False)
        and (row["port_vs_helion_sm90"] is not False)
        and row["layouts_equal"]
        and row["rerun_equal"]
        and row["finite"]
        and 0 <= worst <= ULP_BUDGET[case.out_dtype]
    )
    del x, port
    if device.type == "cuda" and big:
        torch.cuda.empty_cache()
    return row


def run_matrix(cases: list[Case], device: torch.device | str | None = None, progress: bool = True) -> list[dict]:
    device = (
        torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a declared dependency of the notebooks extra
        progress = False
    it = tqdm(cases, desc="bitwise cases", unit="case") if progress else cases
    rows = []
    for case in it:
        rows.append(run_case(case, device))
        if progress:
            it.set_postfix_str(case.name)
    return rows


def tally(rows: list[dict]) -> str:
    """One line: ``88/88 bitwise identical`` (port vs helion), plus the other checks."""
    n = len(rows)
    if all(r["port_vs_helion"] is None for r in rows):
        head = f"helion not installed: port vs helion not run on {n} cases"
    else:
        same = sum(bool(r["port_vs_helion"]) for r in rows)
        head = f"{same}/{n} bitwise identical"
    table = [r for r in rows if r.get("port_vs_helion_sm90") is not None]
    if table:
        head += f"; vs helion with the sm_90 table {sum(r['port_vs_helion_sm90'] for r in table)}/{len(table)}"
    layouts = sum(r["layouts_equal"] for r in rows)
    reruns = sum(r["rerun_equal"] for r in rows)
    finite = sum(r["finite"] for r in rows)
    ulp = max((r["max_ulp_vs_ref"] for r in rows), default=0)
    return (
        f"{head}; layouts equal {layouts}/{n}; reruns equal {reruns}/{n}; finite {finite}/{n}; "
        f"max ulp vs reference {ulp}"
    )


def all_ok(rows: list[dict]) -> bool:
    return all(r["ok"] for r in rows)


def format_table(rows: list[dict]) -> str:
    cols = ["case", "port_vs_helion", "port_vs_helion_sm90", "layouts_equal", "rerun_equal", "finite", "max_ulp_vs_ref"]
    widths = [max(len(c), *(len(str(r.get(c))) for r in rows)) for c in cols]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(str(r.get(c)).ljust(w) for c, w in zip(cols, widths)) for r in rows]
    return "\n".join(lines)


def save(rows: list[dict], path: str | Path, prov: dict, kind: str) -> None:
    doc = {"provenance": prov, "matrix": kind, "tally": tally(rows), "all_ok": all_ok(rows), "cases": rows}
    provenance.write_record(path, json.dumps(doc, indent=1) + "\n")


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


# ---- NVFP4: fused == unfused == reference --------------------------------------------------

NVFP4_WIDTHS = (128, 768, 1024, 1536, 3072, 4096)
NVFP4_DISTRIBUTIONS = {
    "uniform": (128, 128, 128, 128),
    "nonuniform": (37, 0, 300, 1, 0, 190, 129),  # empty experts; total 657 is not a multiple of 128
}


def nvfp4_case_matrix(kind: str = "gpu") -> list[dict]:
    scale = 1 if kind == "gpu" else 4  # the interpreter gets a quarter of the rows
    return [
        {"N": n, "experts": name, "counts": [c // scale for c in counts], "interleaved": il, "weighted": w}
        for n in NVFP4_WIDTHS
        for name, counts in NVFP4_DISTRIBUTIONS.items()
        for il in (False, True)
        for w in (False, True)
    ]


def run_nvfp4_case(case: dict, device: torch.device, seed: int = 0) -> dict:
    from inkling_kernels.nvfp4 import nvfp4_quant, silu_and_mul_nvfp4_quant
    from inkling_kernels.reference import nvfp4_quant_experts_ref, padded_blockscale_offsets

    gen = torch.Generator().manual_seed(seed + case["N"] + 31 * len(case["counts"]))
    counts = torch.tensor(case["counts"])
    eo = torch.cat((torch.zeros(1, dtype=torch.int64), counts.cumsum(0))).to(torch.int32)
    bo = padded_blockscale_offsets(eo)
    M, N = int(eo[-1]), case["N"]
    gateup = (torch.randn((M, 2 * N), generator=gen) * 2).to(torch.bfloat16).to(device)
    w = torch.rand(M, generator=gen).to(device) if case["weighted"] else None
    act = silu_and_mul(gateup, w, interleaved=case["interleaved"])
    amax = [
        float(act[int(eo[e]) : int(eo[e + 1])].float().abs().max()) if counts[e] else 1.0 for e in range(len(counts))
    ]
    gs = torch.tensor([448 * 6 / a for a in amax], dtype=torch.float32)
    poison = (
        torch.full((M, N // 2), 0xFF, dtype=torch.uint8, device=device),
        torch.full((int(bo[-1]), (N // 16 + 3) // 4 * 4), 0xFF, dtype=torch.uint8, device=device),
    )
    fused = silu_and_mul_nvfp4_quant(
        gateup, gs.to(device), eo.to(device), bo.to(device), interleaved=case["interleaved"], topk_weights=w, out=poison
    )
    unfused = nvfp4_quant(act, gs.to(device), expert_offsets=eo.to(device), blockscale_offsets=bo.to(device))
    ref = nvfp4_quant_experts_ref(act.cpu(), gs, eo, bo)
    fused = (fused[0].cpu(), fused[1].cpu())
    unfused = (unfused[0].cpu(), unfused[1].cpu())
    layout = "il" if case["interleaved"] else "nil"
    row = {
        "case": f"N={N} {case['experts']} M={M} {layout}{'+w' if case['weighted'] else ''}",
        "M": M,
        **case,
        "fused_eq_unfused": torch.equal(fused[0], unfused[0]) and torch.equal(fused[1], unfused[1]),
        "unfused_eq_ref": torch.equal(unfused[0], ref[0]) and torch.equal(unfused[1], ref[1]),
    }
    row["ok"] = row["fused_eq_unfused"] and row["unfused_eq_ref"]
    return row


def run_nvfp4_matrix(kind: str, device: torch.device, progress: bool = True) -> list[dict]:
    from tqdm.auto import tqdm

    cases = nvfp4_case_matrix(kind)
    return [run_nvfp4_case(c, device) for c in tqdm(cases, desc="nvfp4 cases", disable=not progress)]


def nvfp4_tally(rows: list[dict]) -> str:
    n = len(rows)
    fu = sum(r["fused_eq_unfused"] for r in rows)
    ur = sum(r["unfused_eq_ref"] for r in rows)
    ok = sum(r["ok"] for r in rows)
    return f"{ok}/{n} fused == unfused == reference (fused==unfused {fu}/{n}, unfused==reference {ur}/{n})"
