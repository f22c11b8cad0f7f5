"""Where do the port and the helion original differ on the GPU? (diagnosis of a bitwise mismatch)"""

import json
import sys

import torch

from inkling_kernels import silu_and_mul
from inkling_kernels.helion_original import generated_triton, silu_and_mul_helion
from inkling_kernels.reference import silu_and_mul_ref, ulp_distance

report = {}
for M, N, il, od in [
    (1, 1024, True, torch.bfloat16),
    (2, 1024, True, torch.bfloat16),
    (6, 1024, False, torch.bfloat16),
    (384, 1024, True, torch.bfloat16),
    (384, 1024, True, torch.float32),
]:
    torch.manual_seed(0)
    x = (torch.randn(M, 2 * N) * 2).to(torch.bfloat16).cuda()
    p = silu_and_mul(x, None, od, interleaved=il)
    h = silu_and_mul_helion(x, None, od, interleaved=il, out=torch.full((M, N), float("nan"), dtype=od, device="cuda"))
    r64 = silu_and_mul_ref(x, None, torch.float64, interleaved=il, compute_dtype=torch.float64)
    r32 = silu_and_mul_ref(x, None, od, interleaved=il)
    comp = torch.compile(lambda t: silu_and_mul_ref(t, None, od, interleaved=il))(x)
    diff = p.view(torch.int16 if od != torch.float32 else torch.int32) != h.view(
        torch.int16 if od != torch.float32 else torch.int32
    )
    idx = diff.nonzero()[:8].tolist()
    key = f"M={M} N={N} il={il} out={od}"
    report[key] = {
        "n_diff": int(diff.sum()),
        "helion_nan": int(torch.isnan(h).sum()),
        "port_vs_compile_equal": bool(torch.equal(p, comp)),
        "helion_vs_compile_equal": bool(torch.equal(h, comp)),
        "port_ulp_vs_torch": int(ulp_distance(p, r32).max()),
        "helion_ulp_vs_torch": int(ulp_distance(h, r32).max()) if not torch.isnan(h).any() else -1,
        "examples": [
            {"at": i, "port": float(p[i[0], i[1]]), "helion": float(h[i[0], i[1]]), "fp64": float(r64[i[0], i[1]])}
            for i in idx
        ],
    }
    print(key, report[key]["n_diff"], report[key]["examples"][:2], flush=True)
x = torch.randn(4, 2048, dtype=torch.bfloat16, device="cuda")
report["helion_generated_gpu_il"] = generated_triton(x, None, interleaved=True)
json.dump(report, open(sys.argv[1], "w"), indent=1)
