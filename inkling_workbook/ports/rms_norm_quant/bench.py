"""The third port's GPU records (``python -m inkling_workbook rms-norm-quant``): portcheck over the
GPU matrix with every step's tally, and the timing sweep of the port against the helion original
with its production (H200) config and against ``torch.compile`` of the formula.

Writes, under ``data/`` (``<gpu>`` is ``h200`` on an NVIDIA H200):

* ``rms_norm_quant_portcheck_<gpu>.json`` / ``.md``: the portcheck report of the port against the
  original over :func:`inkling_workbook.ports.rms_norm_quant.port.gpu_cases` (raw bits of the
  e4m3 result, the fp32 scales and the written residual; the ulp histogram against the float64
  reference; the generated code), its provenance, and the tally of every step of
  :mod:`inkling_workbook.ports.rms_norm_quant.steps` over the same cases;
* ``rms_norm_quant_bench_<gpu>.csv`` and ``.json``: per shape of :func:`sweep_shapes` the median
  and spread of each implementation (``inkling_workbook.measure.timing.time_calls``: CUDA-graph
  replay, passes interleaved), the bits of the timed outputs against the original's, provenance.

The timed calls take a residual (production's fused add + norm) and write it: each call's inputs
are restored from a pristine copy inside the timed graph by neither side, so the residual drifts
from call to call alike on every side (the time does not depend on the values); the bits are
compared on one fresh call per side after the timing.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import torch

import portcheck
from inkling_workbook.measure import compile_baselines, provenance
from inkling_workbook.ports.common import compiled_per_shape, step_row
from inkling_workbook.ports.rms_norm_quant import helion as helion_side
from inkling_workbook.ports.rms_norm_quant import port as port_side
from inkling_workbook.ports.rms_norm_quant import steps

SWEEP_M = (1, 4, 16, 64, 256, 1024, 2048, 4096, 8192, 16384)
SWEEP_H = (2048, 4096)
QUICK_M = (1, 64, 1024, 4096)
IMPLS = ("port", "helion", "compile")
PASSES = 5
PARTS = ("check", "steps", "sweep")
NAMES = (
    f"{helion_side.__name__}:rms_norm_quant_helion",
    f"{port_side.__name__}:rms_norm_quant",
    f"{port_side.__name__}:gpu_cases",
)
REFERENCE = f"{helion_side.__name__}:reference"


def sweep_shapes(quick: bool = False) -> list[tuple[int, int]]:
    """(M, H), decode to prefill at the two hidden sizes of the recorded table."""
    return [(m, h) for h in SWEEP_H for m in (QUICK_M if quick else SWEEP_M)]


def nbytes(M: int, H: int) -> int:
    """What a call must move: x and the residual read, the residual written (bf16), the e4m3
    result and the fp32 scales written, the weight read once."""
    return M * H * (2 + 2 + 2 + 1) + M * 4 + H * 2


_compiled: dict = {}


def compiled_formula(key=None, first_args: tuple | None = None):
    """The original's formula under ``torch.compile(dynamic=False)``, compiled fresh for each shape
    ``key`` (:func:`inkling_workbook.ports.common.compiled_per_shape`)."""
    return compiled_per_shape(_compiled, helion_side.formula, key, first_args)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _inputs(M: int, H: int, device, seed: int):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = (torch.randn((M, H), generator=gen, device=device) * 3).to(torch.bfloat16)
    w = (1.0 + torch.randn(H, generator=gen, device=device)).to(torch.bfloat16)
    r = torch.randn((M, H), generator=gen, device=device).to(torch.bfloat16)
    return x, w, r


def time_shape(M: int, H: int, device: torch.device) -> list[dict]:
    """One shape at warm L2: the three implementations timed in the same interleaved passes; then
    one fresh call each on the same inputs, the port's and compile's bits against the original's
    (result, scale, residual). On CPU tensors every launch runs in portcheck's CPU mode, the
    interpreter with the repairs both sides of a check see (Triton 3.6's has no bf16 constant)."""
    cpu = contextlib.nullcontext() if device.type == "cuda" else portcheck.interpret.cpu_mode()
    with cpu:
        return _time_shape(M, H, device)


def _time_shape(M: int, H: int, device: torch.device) -> list[dict]:
    from inkling_workbook.measure import timing

    x, w, r0 = _inputs(M, H, device, M * 7919 + H)
    res = {k: r0.clone() for k in IMPLS}
    outs = {k: port_side.empty_outputs(M, H, device) for k in ("port", "helion")}
    compiled = compiled_formula((M, H), (x, w, None, res["compile"]))
    t0 = time.perf_counter()
    helion_side.rms_norm_quant_helion(x, w, residual=res["helion"], out=outs["helion"])
    port_side.rms_norm_quant(x, w, residual=res["port"], out=outs["port"])
    compiled(x, w, None, res["compile"])
    if device.type == "cuda":
        torch.cuda.synchronize()
    first_calls_s = time.perf_counter() - t0
    calls = {
        "port": lambda: port_side.rms_norm_quant(x, w, residual=res["port"], out=outs["port"]),
        "helion": lambda: helion_side.rms_norm_quant_helion(x, w, residual=res["helion"], out=outs["helion"]),
        "compile": lambda: compiled(x, w, None, res["compile"]),
    }
    timings = timing.time_calls(calls, PASSES)
    got = {}
    for k in IMPLS:  # one fresh call each on the pristine residual, outputs poisoned
        r = r0.clone()
        if k == "compile":
            got[k] = compiled(x, w, None, r)
            continue
        out = port_side.empty_outputs(M, H, device)
        for t in out:
            t.view(torch.uint8).fill_(0xFF)
        fn = port_side.rms_norm_quant if k == "port" else helion_side.rms_norm_quant_helion
        got[k] = fn(x, w, residual=r, out=out)
    if device.type == "cuda":
        torch.cuda.synchronize()
    mismatches = {k: sum(int((_bits(a) != _bits(b)).sum()) for a, b in zip(got[k], got["helion"])) for k in IMPLS}
    configs = {
        "port": port_side.launch_config(M, H).label,
        "helion": helion_side.config_label(M, H),
        "compile": "torch.compile(formula, dynamic=False), default mode, compiled fresh per shape",
    }
    rows = []
    for name in IMPLS:
        row = {
            "M": M,
            "H": H,
            "l2": "warm",
            "impl": name,
            "config": configs[name],
            **timings[name].columns(nbytes(M, H)),
        }
        row["mismatches_vs_original"] = mismatches[name]
        row["bits_equal_original"] = mismatches[name] == 0
        rows.append(row)
    by = {r["impl"]: r for r in rows}
    for r in rows:
        r["first_calls_s"] = round(first_calls_s, 3)
        r["speedup_vs_helion"] = round(by["helion"]["median_us"] / r["median_us"], 4)
        r["vs_helion"] = timing.verdict(r, by["helion"])
        r["vs_compile"] = timing.verdict(r, by["compile"])
    return rows


def step_spec(name: str) -> str:
    return f"{steps.__name__}:{steps.step_fn(name).__name__}"


def summary(rows: list[dict]) -> str:
    """A markdown table: per shape the three medians [ranges], the port's ratios and verdicts."""
    by = {}
    for r in rows:
        by.setdefault((r["M"], r["H"]), {})[r["impl"]] = r
    lines = [
        "| M | H | port, us [range] | helion (H200 table), us [range] | torch.compile, us [range] "
        "| port vs helion | port vs compile | bits |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for (M, H), d in by.items():
        p, h, c = d["port"], d["helion"], d["compile"]
        cell = lambda r: f"{r['median_us']:.2f} [{r['lo_us']:.2f}, {r['hi_us']:.2f}]"  # noqa: E731
        bits = "equal" if p["bits_equal_original"] else f"{p['mismatches_vs_original']} differ"
        lines.append(
            f"| {M} | {H} | {cell(p)} | {cell(h)} | {cell(c)} "
            f"| {h['median_us'] / p['median_us']:.2f}x ({p['vs_helion']}) "
            f"| {c['median_us'] / p['median_us']:.2f}x ({p['vs_compile']}) | {bits} |"
        )
    return "\n".join(lines)


def run(out=None, quick=False, progress=True, device="cuda", cases=None, shapes=None, command=None, parts=PARTS,
        jobs: int = 1) -> dict:  # fmt: skip
    """Some or all of the ``parts``: ``"check"`` portcheck over the cases (the portcheck record),
    ``"steps"`` every step's tally over the same cases (into that record), ``"sweep"`` the timing.
    ``cases``: a list of cases or their ``MODULE:NAME`` (default: the GPU matrix, ``quick``: its
    smoke-sized subset, no steps, fewer shapes); ``jobs`` > 1
    runs the check and the steps in that many spawned processes (``cases`` then a name). Writes
    under ``out/data`` (default: the repository's ``data/``)."""
    from inkling_workbook.measure import timing

    if set(parts) - set(PARTS) or not parts:
        raise ValueError(f"parts must be a non-empty subset of {PARTS}, got {parts!r}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    spec = (f"{port_side.__name__}:gpu_quick_cases" if quick else NAMES[2]) if cases is None else cases
    if jobs > 1 and not isinstance(spec, str):
        raise TypeError("jobs > 1 needs cases as a MODULE:NAME string (worker processes rebuild them)")
    device = torch.device(device)
    if device.type == "cuda":
        timing.require_gpu()
    data = (Path(out) if out else provenance.REPO_ROOT) / "data"
    slug = provenance.device_slug(device)
    t_start = time.perf_counter()
    meta = provenance.collect(command)
    case_list = portcheck.load_cases(spec) if isinstance(spec, str) else spec
    pc_json = data / f"rms_norm_quant_portcheck_{slug}.json"
    want_steps = "steps" in parts and not quick
    ok = True
    doc = json.loads(pc_json.read_text()) if pc_json.exists() and "check" not in parts else {"tally": None}
    if want_steps and "check" not in parts and doc.get("tally") is None:
        raise FileNotFoundError(f"{pc_json} is missing: run the 'check' part first")
    pending = {}
    if jobs > 1 and ("check" in parts or want_steps):
        executor = portcheck.pool(jobs)
        names = dict(original=NAMES[0], cases=spec, device=str(device), chunk=4)
        if "check" in parts:
            pending["check"] = portcheck.submit(executor, port=NAMES[1], reference=REFERENCE, code=True, **names)
        if want_steps:
            for s in steps.STEPS:
                pending[s.name] = portcheck.submit(executor, port=step_spec(s.name), code=False, reruns=1, **names)
    if "check" in parts:
        report = pending["check"].result() if pending else portcheck.run(
            helion_side.rms_norm_quant_helion, port_side.rms_norm_quant, case_list, device,
            reference=helion_side.reference, names=NAMES)  # fmt: skip
        doc = json.loads(report.to_json())
        doc["provenance"] = meta
        doc["tally"] = f"{sum(r['ok'] for r in report.cases)}/{len(report.cases)} cases equal and deterministic"
        doc["jobs"] = jobs
        doc["steps"] = []
        ok = report.ok
        provenance.write_record(pc_json.with_suffix(".md"), report.to_markdown())
    if want_steps:
        doc["steps"] = [
            step_row(s, pending[s.name].result() if pending else portcheck.run(
                helion_side.rms_norm_quant_helion, steps.step_fn(s.name), case_list, device, code=False, reruns=1))
            for s in steps.STEPS
        ]  # fmt: skip
        if "check" not in parts:
            doc["steps_provenance"] = meta
        ok = ok and doc["steps"][-1]["equal_cases"] == doc["steps"][-1]["cases"]
    if pending:
        executor.shutdown(wait=True)  # the workers leave the GPU before anything is timed
    if "check" in parts or want_steps:
        doc["portcheck_s"] = round(time.perf_counter() - t_start, 1)
        provenance.write_record(pc_json, json.dumps(doc, indent=1, default=str) + "\n")
        if progress:
            print(doc["tally"], flush=True)
    result = {"portcheck": pc_json, "bench_csv": None, "bench_json": None, "tally": doc.get("tally"),
              "steps": doc.get("steps", []), "rows": [], "meta": None, "ok": ok}  # fmt: skip
    if "sweep" not in parts:
        return result
    if device.type == "cuda":
        meta["clock_warmup"] = timing.warm_clocks()
    t_sweep = time.perf_counter()
    csv_path = data / f"rms_norm_quant_bench_{slug}.csv"
    rows = []
    for M, H in shapes if shapes is not None else sweep_shapes(quick):
        rows += time_shape(M, H, device)
        timing.write_csv(rows, csv_path)  # a run stopped half way keeps what it measured
        if progress:
            print(f"timed {M} x {H}", flush=True)
    ports = [r for r in rows if r["impl"] == "port"]
    bench_meta = {
        "provenance": meta,
        "timing": {
            **{k: v for k, v in timing.timing_meta().items() if k not in ("decode_passes", "other_passes")},
            "passes": PASSES,
            "l2": "warm (the same buffers every call)",
            "inputs": "x = randn * 3, residual = randn (bf16, written by every call), weight 1 + randn, no scale_ub",
            "verdicts": "win / loss where the [lo, hi] ranges are apart, tie where they overlap",
        },  # fmt: skip
        "impls": {
            "port": f"{port_side.__name__}.rms_norm_quant (launch_config: the config's reduction tile and warps)",
            "helion": f"{helion_side.__name__}.rms_norm_quant_helion: vLLM's H200 table entry per shape",
            "compile": f"torch.compile({helion_side.__name__}.formula, dynamic=False), default mode, "
            + compile_baselines.FRESH,
        },
        "shapes": sorted({(r["M"], r["H"]) for r in rows}),
        "portcheck_tally": doc.get("tally"),
        "port_bits_equal_all": all(r["bits_equal_original"] for r in ports),
        "compile_bits_equal_all": all(r["bits_equal_original"] for r in rows if r["impl"] == "compile"),
        "port_vs_helion": {v: sum(r["vs_helion"] == v for r in ports) for v in ("win", "tie", "loss")},
        "port_vs_compile": {v: sum(r["vs_compile"] == v for r in ports) for v in ("win", "tie", "loss")},
        "timings": len(ports),
        "sweep_s": round(time.perf_counter() - t_sweep, 1),
        "elapsed_s": round(time.perf_counter() - t_start, 1),
    }
    if device.type == "cuda":
        bench_meta["gpu_state_after"] = provenance.gpu_state()
    json_path = csv_path.with_suffix(".json")
    provenance.write_record(json_path, json.dumps(bench_meta, indent=1, default=str) + "\n")
    result.update(bench_csv=csv_path, bench_json=json_path, rows=rows, meta=bench_meta,
                  ok=ok and bench_meta["port_bits_equal_all"])  # fmt: skip
    return result
