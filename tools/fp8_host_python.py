"""The Python cost of one compiled FP8 call, measured on a machine without a GPU (the development
CPU): the general path and the hot path of ``silu_and_mul_fp8_group_quant``, M = 4, N = 1536,
non-interleaved, ``out`` given, with the device queries stubbed and the C launch replaced by a
no-op, so that only the package's Python is timed.

    python tools/fp8_host_python.py OUT_JSON

The general path runs its compiled branch (``_backend.uses_interpreter`` says no, the device is
an H200-like sm_90 with 132 SMs) on CPU tensors, and the launch is recorded instead of run. The
hot path is ``_fast_launch``'s body after its CUDA test (``_fast_checks``, the knobs, the plan
lookup, the arguments), with a plan made from the general path's launch; its ``launch_cached``
does nothing. Median of 7 rounds of 20,000 calls each.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time

import torch

from inkling_kernels import fp8 as fp8_ops
from inkling_kernels.fp8 import _launch as fp8_mod


def _per_call_us(fn, calls: int = 20000, rounds: int = 7) -> float:
    for _ in range(2000):
        fn()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def main(argv: list[str]) -> int:
    b = fp8_mod._backend
    b.uses_interpreter = lambda device: False
    b.cuda_index = lambda device: -1
    b._CAPABILITY[-1] = (9, 0)
    b._SM_COUNT[-1] = 132
    fp8_mod._programs_an_sm = lambda device, interpreted, args, consts: 10
    recorded = []
    fp8_mod._launch_kernel = lambda grid, device, interpreted, args, consts: recorded.append((grid, args, consts))
    M, N = 4, 1536
    x = torch.randn(M, 2 * N).bfloat16()
    q = torch.empty(M, N, dtype=torch.float8_e4m3fn)
    s = fp8_mod.empty_scales((M,), N // 128, False, "cpu")
    op = fp8_ops.silu_and_mul_fp8_group_quant
    general = _per_call_us(lambda: op(x, interleaved=False, out=(q, s), enable_pdl=True))

    grid, args, consts = recorded[-1]
    key0, _, _, _ = fp8_mod._fast_checks(x, fp8_ops.ACT_NON_INTERLEAVED, None, None, 128, False, False, (q, s), True)
    launcher_key, values = fp8_mod._launch_key(-1, args, consts, consts["num_warps"], True)
    fp8_mod._PLANS[(*key0, True)] = (launcher_key, values, grid[0], grid[1], fp8_mod._knobs())

    class _NoLaunch:
        def launch_cached(self, *a):
            return True

    fp8_mod._LAUNCHER = _NoLaunch()

    def hot():  # ``_fast_launch`` after its CUDA test, PDL given
        key, fargs, qq, ss = fp8_mod._fast_checks(
            x, fp8_ops.ACT_NON_INTERLEAVED, None, None, 128, False, False, (q, s), True
        )
        key = (*key, True)
        plan = fp8_mod._PLANS.get(key)
        if plan is None or plan[4] != fp8_mod._knobs():
            raise RuntimeError("no plan")
        lk, vals, g0, g1, _ = plan
        fp8_mod._LAUNCHER.launch_cached(lk, g0, key[0], (*fargs, *vals), True, g1)
        return qq, ss

    doc = {
        "what": "Python us per compiled FP8 call (M = 4, N = 1536, out given), device queries stubbed, no launch",
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "general_path_us": round(general, 2),
        "hot_path_us": round(_per_call_us(hot), 2),
        "fast_checks_us": round(
            _per_call_us(
                lambda: fp8_mod._fast_checks(
                    x, fp8_ops.ACT_NON_INTERLEAVED, None, None, 128, False, False, (q, s), True
                )
            ),
            2,
        ),
    }
    print(json.dumps(doc, indent=1))
    with open(argv[0], "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
