"""What a server sees: PDL in a decode chain, host time per call, compile counts.

* :func:`decode_chain`: one CUDA graph of bf16 GEMM ``[M, 4096] x [4096, 2N]`` -> activation
  (non-interleaved, N = 1536) -> GEMM ``[M, N] x [N, 4096]``, at decode sizes, replayed like the
  benchmark (fixed-count graphs, interleaved passes). Three variants: the two GEMMs alone, with
  the activation launched without PDL, and with PDL. "Back to back" timings of the activation
  alone (the main sweep's ``triton_pdl`` rows) measure PDL between copies of the same kernel;
  this chain measures what it saves between a GEMM and the activation and the next GEMM.
* :func:`.hostbench.measure_host_overhead`: host microseconds per call (no GPU wait), for a bare
  ``kernel[grid](...)`` launch and for each public entry point, same process, same shapes.

``python -m inkling_workbook serving`` runs both and writes ``data/serving_<gpu>.json``.
"""

from __future__ import annotations

import torch

from inkling_workbook.measure import timing

CHAIN_M = (1, 4, 16)
CHAIN_N = 1536
CHAIN_HIDDEN = 4096


def decode_chain(ms=CHAIN_M, n: int = CHAIN_N, hidden: int = CHAIN_HIDDEN) -> list[dict]:
    from inkling_kernels import silu_and_mul

    rows = []
    for M in ms:
        x = torch.randn((M, hidden), device="cuda", dtype=torch.bfloat16)
        w1 = torch.randn((hidden, 2 * n), device="cuda", dtype=torch.bfloat16) / hidden**0.5
        w2 = torch.randn((n, hidden), device="cuda", dtype=torch.bfloat16) / n**0.5
        act = torch.randn((M, n), device="cuda", dtype=torch.bfloat16)

        def gemms_only():
            torch.mm(x, w1)
            return torch.mm(act, w2)

        def chain(pdl: bool):
            return torch.mm(silu_and_mul(torch.mm(x, w1), interleaved=False, enable_pdl=pdl), w2)

        timers = {
            "gemms_only": timing.GraphTimer([gemms_only]),
            "chain_no_pdl": timing.GraphTimer([lambda: chain(False)]),
            "chain_pdl": timing.GraphTimer([lambda: chain(True)]),
        }
        t = timing.time_interleaved(timers, timing.DECODE_PASSES)
        ref = torch.mm(silu_and_mul(torch.mm(x, w1), interleaved=False, enable_pdl=False), w2)
        same = torch.equal(chain(True).view(torch.int16), ref.view(torch.int16))
        row = {"M": M, "N": n, "hidden": hidden, "pdl_output_bitwise_equal": same}
        for k, v in t.items():
            row[f"{k}_us"] = round(v.median_us, 4)
            row[f"{k}_lo_hi"] = [round(v.lo_us, 4), round(v.hi_us, 4)]
            row[f"{k}_reps"] = v.reps
        row["activation_adds_no_pdl_us"] = round(t["chain_no_pdl"].median_us - t["gemms_only"].median_us, 4)
        row["activation_adds_pdl_us"] = round(t["chain_pdl"].median_us - t["gemms_only"].median_us, 4)
        rows.append(row)
    return rows


def compile_count(sizes=(1, 2, 3, 4, 6, 8, 12, 16, 33, 64, 100, 257), hidden: int = 1024, n: int = 768) -> dict:
    """A small MoE-style module (GEMM -> silu_and_mul -> GEMM) compiled with ``fullgraph=True,
    dynamic=True`` and called with each batch size: how many graphs dynamo compiled, and whether
    every output is bitwise equal to the eager module's."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from inkling_kernels import silu_and_mul

    class MoEMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(hidden, 2 * n, bias=False, device="cuda", dtype=torch.bfloat16)
            self.down = torch.nn.Linear(n, hidden, bias=False, device="cuda", dtype=torch.bfloat16)

        def forward(self, x):
            return self.down(silu_and_mul(self.up(x), interleaved=False))

    torch._dynamo.reset()
    counters.clear()
    module = MoEMLP()
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    equal = []
    with torch.inference_mode():
        for m in sizes:
            x = torch.randn((m, hidden), device="cuda", dtype=torch.bfloat16)
            equal.append(torch.equal(compiled(x).view(torch.int16), module(x).view(torch.int16)))
    return {
        "batch_sizes": list(sizes),
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "bitwise_equal_to_eager": sum(equal),
    }


def run(out) -> dict:
    """Everything above, on this GPU, into ``out`` (JSON with provenance)."""
    import json

    from inkling_workbook.measure import hostbench, provenance

    doc = {"provenance": provenance.collect(), "clock_warmup": timing.warm_clocks()}
    doc["decode_chain"] = decode_chain()
    doc["host_overhead"] = {
        "pdl_off": hostbench.measure_host_overhead(enable_pdl=False),
        "pdl_on": hostbench.measure_host_overhead(enable_pdl=True),
    }
    doc["compile"] = compile_count()
    provenance.write_record(out, json.dumps(doc, indent=1) + "\n")
    return doc
