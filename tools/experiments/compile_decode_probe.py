"""Experiment S: why torch.compile(dynamic=False) of the FP8 reference is bimodal at decode (M = 16,
non-interleaved: 1.6-2.1 us in some sweeps, 4.5-4.8 us in others; ``data/tuning_log.md``). Each of
several fresh processes compiles the reference as the sweep does (``fp8_bench.fp8_impls``) at
M = 16, N in {1536, 3072}, with its own inductor cache directory, times it with the sweep's method
next to the fused op, and records the configs inductor's runtime autotuner chose (the
``.best_config`` files it leaves in its cache). If the times split with the chosen configs, the
bimodality is inductor picking among its candidate configs by timing them, a choice that noise
decides at this size.

    python tools/compile_decode_probe.py OUT_JSON [PROCESSES]
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def child(out: str) -> None:
    from inkling_workbook.measure import bench, fp8_bench

    bench.warm_clocks()
    res = {}
    for n in (1536, 3072):
        case = fp8_bench._case(f"M16_N{n}_nil", 16, n, False)
        impls = fp8_bench.fp8_impls(case)
        t = bench.time_calls({k: impls[k][0] for k in ("torch_compile_static", "fused")}, 3)
        res[n] = {k: {"median_us": round(v.median_us, 4), "lo_us": round(v.lo_us, 4), "hi_us": round(v.hi_us, 4)}
                  for k, v in t.items()}  # fmt: skip
    cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    configs = {}
    for path in sorted(glob.glob(f"{cache}/**/*.best_config", recursive=True)):
        configs[Path(path).name] = json.loads(Path(path).read_text())
    res["best_configs"] = configs
    Path(out).write_text(json.dumps(res))


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        child(argv[1])
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    from tqdm.auto import tqdm

    from inkling_workbook.measure import provenance

    doc = {"provenance": provenance.collect(["tools/compile_decode_probe.py", *argv]), "processes": []}
    for _ in tqdm(range(int(argv[1]) if len(argv) > 1 else 6), desc="fresh processes"):
        with tempfile.TemporaryDirectory() as cache:
            out = os.path.join(cache, "res.json")
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": os.path.join(cache, "triton")}
            subprocess.run([sys.executable, __file__, "--child", out], env=env, check=True)
            doc["processes"].append(json.loads(Path(out).read_text()))
        Path(argv[0]).write_text(json.dumps(doc, indent=1) + "\n")
    for p in doc["processes"]:
        print({n: p[str(n)]["torch_compile_static"]["median_us"] for n in (1536, 3072)}, len(p["best_configs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
