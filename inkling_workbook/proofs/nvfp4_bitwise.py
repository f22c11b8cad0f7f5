"""The NVFP4 matrix (``python -m inkling_workbook check --nvfp4``, notebook 05): on every width,
uniform and non-uniform expert row counts (empty experts, a total not a multiple of 128), both
layouts, with and without routing weights, the fused ``silu_and_mul_nvfp4_quant`` (into outputs
poisoned with 0xFF) equals the unfused pair, which equals the torch reference, bit for bit
(``data/nvfp4_bitwise_<gpu>.json``)."""

from __future__ import annotations

import torch

from inkling_kernels.silu_and_mul import silu_and_mul

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
