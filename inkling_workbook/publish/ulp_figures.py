"""The port's distance to eager torch in ulps, as a histogram (notebook 01)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from inkling_workbook.publish import style  # noqa: E402


def ulp_port_vs_eager(M: int = 256, N: int = 1024, seed: int = 0) -> dict[str, np.ndarray]:
    """bf16 ulp distance of the port to torch eager (the reference, fp32 math, one cast) on one
    seeded input, both layouts, computed where this process runs (CPU: the interpreter)."""
    import torch

    import inkling_kernels as ik
    from inkling_kernels.reference import join_gateup, silu_and_mul_ref, ulp_distance

    gen = torch.Generator().manual_seed(seed)
    gate = (torch.randn(M, N, generator=gen) * 4).to(torch.bfloat16)
    up = (torch.randn(M, N, generator=gen) * 4).to(torch.bfloat16)
    out = {}
    for interleaved in (True, False):
        x = join_gateup(gate, up, interleaved)
        port = ik.silu_and_mul(x, interleaved=interleaved)
        eager = silu_and_mul_ref(x, interleaved=interleaved)
        out["interleaved" if interleaved else "non-interleaved"] = ulp_distance(port, eager).flatten().numpy()
    return out


def draw_ulp_histogram(ulps: dict[str, np.ndarray], out_stem: Path, where: str | None = None) -> list[Path]:
    """How many outputs sit 0, 1, 2, ... bf16 ulps from torch eager, per layout (log counts)."""
    fig, ax = plt.subplots(figsize=(6.0, 3.2))
    top = int(max(int(v.max()) for v in ulps.values()))
    bins = np.arange(top + 2)
    w = 0.8 / len(ulps)
    for i, (name, v) in enumerate(ulps.items()):
        counts = np.bincount(v.astype(np.int64), minlength=top + 1)
        ax.bar(bins[:-1] + (i - (len(ulps) - 1) / 2) * w, counts, width=w, label=f"{name} ({len(v)} outputs)")
        for b, c in enumerate(counts):
            ax.text(b + (i - (len(ulps) - 1) / 2) * w, c * 1.1, f"{c}", ha="center", fontsize=6.5)
    ax.set_yscale("log")
    ax.set_xticks(bins[:-1])
    ax.set_xlabel("distance to torch eager (bf16 ulps)", fontsize=8)
    ax.set_ylabel("outputs (count, log)", fontsize=8)
    ax.legend(fontsize=7)
    ax.set_title(f"{where or style.local_versions_text()}\nsilu_and_mul: the port against torch eager", fontsize=8)
    fig.tight_layout()
    return style._save(fig, out_stem)
