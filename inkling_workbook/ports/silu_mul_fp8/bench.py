"""The second port's GPU records (``python -m inkling_workbook silu-mul-fp8``): portcheck over the
GPU matrix, the port's steps, and the timing sweep of the port against the helion original with
its production config and against ``torch.compile`` of the formula.

Writes, under ``data/`` (``<gpu>`` is ``h200`` on an NVIDIA H200):

* ``silu_mul_fp8_portcheck_<gpu>.json`` / ``.md``: the portcheck report of the port against the
  original over :func:`inkling_workbook.ports.silu_mul_fp8.port.gpu_cases` (raw bits, the ulp
  histogram against the float64 reference, the generated code), with provenance and the tally of
  every step of :mod:`inkling_workbook.ports.silu_mul_fp8.steps` over the same cases;
* ``silu_mul_fp8_bench_<gpu>.csv`` and ``.json``: per shape of :func:`sweep_shapes` the median and
  spread of each implementation (``inkling_workbook.measure.timing.time_calls``: CUDA-graph replay of a
  fixed count of calls, passes interleaved), the bits of the timed outputs compared with the
  original's, and the provenance.

In one process most of its time is building large cases' inputs on the CPU and compiles; on a
fresh H200 it outlasted 10 minutes. With ``jobs=12`` the check and the steps (91 s) and the
sweep's port and helion compiles run in worker processes, then the timing alone: 156 s in all
at 7f31113. ``--quick`` (the GPU job's smoke) checks
:func:`~inkling_workbook.ports.silu_mul_fp8.port.gpu_quick_cases` and times a third of the
shapes, no steps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

import portcheck
from inkling_workbook.measure import compile_baselines, provenance
from inkling_workbook.ports.common import compiled_per_shape, step_row
from inkling_workbook.ports.silu_mul_fp8 import helion as helion_side
from inkling_workbook.ports.silu_mul_fp8 import port as port_side
from inkling_workbook.ports.silu_mul_fp8 import steps as steps

SWEEP_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048, 8192, 32768)
SWEEP_N = (768, 1536, 3072)
QUICK_M = (1, 16, 128, 2048, 32768)
SCALE = 0.37  # one fp32 scale for the sweep (its value does not change the work)
IMPLS = ("port", "helion", "compile")


def sweep_shapes(quick: bool = False) -> list[tuple[int, int]]:
    """(M, N), decode to prefill: every M picks a config of the recorded H100 table."""
    return [(m, n) for n in SWEEP_N for m in (QUICK_M if quick else SWEEP_M)]


def nbytes(M: int, N: int) -> int:
    """The bytes a call must move: ``[M, 2N]`` bf16 in, ``[M, N]`` e4m3 out, the scale."""
    return M * 2 * N * 2 + M * N + 4


_compiled: dict = {}


def compiled_formula(key=None, first_args: tuple | None = None):
    """The original's formula under ``torch.compile(dynamic=False)``, compiled fresh for each shape
    ``key`` (:func:`inkling_workbook.ports.common.compiled_per_shape`)."""
    return compiled_per_shape(_compiled, helion_side.formula, key, first_args)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


PASSES = 5  # interleaved passes for every shape (replays are cheap next to the captures)
#: the bytes the two timed sides are poisoned with before timing (both e4m3fn NaNs, different bytes,
#: so that a region neither side writes cannot compare equal)
POISON = {"port": 0x7F, "helion": 0xFF}


def verdict(a: dict, b: dict) -> str:
    """``a`` against ``b`` by their [lo, hi] ranges: ``"win"``, ``"tie"`` or ``"loss"``
    (:func:`inkling_workbook.measure.timing.verdict`)."""
    from inkling_workbook.measure.timing import verdict as by_ranges

    return by_ranges(a, b)


def time_shape(M: int, N: int, device: torch.device, cold: bool = False) -> list[dict]:
    """One shape at warm L2 (the same buffers every call) or cold (``cold``: buffer sets rotated
    over three L2s of data): the three implementations timed in the same interleaved passes, then
    the bits of every output the timed graphs wrote compared with the original's (port and helion
    write preallocated outputs, poisoned with different bytes before timing; torch.compile
    allocates its own inside the graph, its bits checked on an eager call of the compiled graph)."""
    from inkling_workbook.measure import timing

    n_sets = timing.n_buffer_sets(nbytes(M, N), cold)
    gen = torch.Generator(device=device).manual_seed(M * 7919 + N)
    xs = [(torch.randn((M, 2 * N), generator=gen, device=device) * 3).to(torch.bfloat16) for _ in range(n_sets)]
    scale = torch.tensor([SCALE], dtype=torch.float32, device=device)

    def poisoned(byte):
        return [torch.full((M, N), byte, dtype=torch.uint8, device=device).view(port_side.OUT_DTYPE) for _ in xs]

    outs = {k: poisoned(POISON[k]) for k in ("port", "helion")}
    compiled = compiled_formula((M, N), (xs[0], scale))
    t0 = time.perf_counter()
    for i, x in enumerate(xs):  # first calls: compile every side before any capture
        helion_side.silu_mul_fp8_helion(x, scale, out=outs["helion"][i])
        port_side.silu_mul_fp8(x, scale, out=outs["port"][i])
    comp = compiled(xs[0], scale)
    if device.type == "cuda":
        torch.cuda.synchronize()
    first_calls_s = time.perf_counter() - t0
    compile_mismatch = int((_bits(comp) != _bits(outs["helion"][0])).sum())
    for k in outs:  # the timed graphs must write every byte again
        for o in outs[k]:
            o.view(torch.uint8).fill_(POISON[k])
    calls = {
        "port": [lambda x=x, o=o: port_side.silu_mul_fp8(x, scale, out=o) for x, o in zip(xs, outs["port"])],
        "helion": [
            lambda x=x, o=o: helion_side.silu_mul_fp8_helion(x, scale, out=o) for x, o in zip(xs, outs["helion"])
        ],  # fmt: skip
        "compile": [lambda x=x: compiled(x, scale) for x in xs],
    }
    timings = timing.time_calls(calls, PASSES)
    if device.type == "cuda":
        torch.cuda.synchronize()
    port_mismatch = sum(int((_bits(p) != _bits(h)).sum()) for p, h in zip(outs["port"], outs["helion"]))
    unwritten = sum(int((o.view(torch.uint8) == POISON[k]).all(dim=1).sum()) for k in outs for o in outs[k])
    mismatches = {"port": port_mismatch, "helion": 0, "compile": compile_mismatch}
    configs = {
        "port": port_side.launch_config(M, N).label,
        "helion": helion_side.config_label(M, N),
        "compile": "torch.compile(formula, dynamic=False), default mode, compiled fresh per shape",
    }
    rows = []
    for name in IMPLS:
        row = {"M": M, "N": N, "l2": "cold" if cold else "warm", "buffer_sets": n_sets, "impl": name,
               "config": configs[name], **timings[name].columns(nbytes(M, N))}  # fmt: skip
        row["mismatches_vs_original"] = mismatches[name]
        row["bits_equal_original"] = mismatches[name] == 0
        row["rows_left_unwritten"] = unwritten  # rows still all poison after the timed replays (both sides)
        rows.append(row)
    by = {r["impl"]: r for r in rows}
    for r in rows:
        r["first_calls_s"] = round(first_calls_s, 3)
        r["speedup_vs_helion"] = round(by["helion"]["median_us"] / r["median_us"], 4)
        r["vs_helion"] = verdict(r, by["helion"])
        r["vs_compile"] = verdict(r, by["compile"])
    return rows


def run_sweep(shapes, device: torch.device, progress: bool = True, csv_path: Path | None = None) -> list[dict]:
    """Every shape at warm L2, and cold where the rotation fits (``timing.cold_feasible``); the CSV
    rewritten after each shape, so a run stopped half way keeps what it measured."""
    from inkling_workbook.measure import timing

    rows = []
    for M, N in _progress(shapes, "timing sweep", progress):
        for cold in (False, True):
            if cold and (device.type != "cuda" or not timing.cold_feasible(nbytes(M, N))):
                continue
            rows += time_shape(M, N, device, cold)
        if csv_path is not None:
            timing.write_csv(rows, csv_path)
    return rows


def _progress(items, desc: str, on: bool, total: int | None = None):
    if not on:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, total=total)


def step_tallies(cases, device: torch.device, progress: bool = True) -> list[dict]:
    """Every step of the port against the original over ``cases``: equal cases, differing elements."""
    reports = [
        portcheck.run(helion_side.silu_mul_fp8_helion, steps.step_fn(s.name), cases, device, code=False)
        for s in _progress(steps.STEPS, "port steps", progress)
    ]
    return [step_row(s, rep) for s, rep in zip(steps.STEPS, reports)]


def step_spec(name: str) -> str:
    """The ``MODULE:NAME`` of a step, for a worker process."""
    return f"{steps.__name__}:{steps.step_fn(name).__name__}"


def warm_shape(M: int, N: int) -> float:
    """One call of the port and of the helion original at ``(M, N)`` on CUDA: a worker of the
    parallel run compiles their kernels (fixed configs, nothing tuned at run time) into Triton's
    on-disk cache, which the timing process then reads. Not torch.compile: Inductor benchmarks
    candidate configs of its kernels at the first call and caches the pick, and a pick made while
    eleven other processes share the GPU is not one to time (seen: its times moved up to 22%
    between two runs that did that); the timing process compiles each graph alone. Returns the
    seconds it took."""
    t0 = time.perf_counter()
    dev = torch.device("cuda")
    x = torch.randn((M, 2 * N), device=dev).to(torch.bfloat16)
    scale = torch.tensor([SCALE], dtype=torch.float32, device=dev)
    helion_side.silu_mul_fp8_helion(x, scale)
    port_side.silu_mul_fp8(x, scale)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def summary(rows: list[dict]) -> str:
    """A markdown table: per shape and L2 state the three medians [ranges], the port's speedups
    and the verdicts by ranges (win / tie / loss)."""
    by = {}
    for r in rows:
        by.setdefault((r["M"], r["N"], r.get("l2", "warm")), {})[r["impl"]] = r
    lines = [
        "| M | N | L2 | port, us [range] | helion (its config), us [range] | torch.compile, us [range] "
        "| port vs helion | port vs compile | bits |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for (M, N, l2), d in by.items():
        p, h, c = d["port"], d["helion"], d["compile"]
        cell = lambda r: f"{r['median_us']:.2f} [{r['lo_us']:.2f}, {r['hi_us']:.2f}]"  # noqa: E731
        bits = "equal" if p["bits_equal_original"] else f"{p['mismatches_vs_original']} differ"
        lines.append(
            f"| {M} | {N} | {l2} | {cell(p)} | {cell(h)} | {cell(c)} "
            f"| {h['median_us'] / p['median_us']:.2f}x ({p.get('vs_helion', '?')}) "
            f"| {c['median_us'] / p['median_us']:.2f}x ({p.get('vs_compile', '?')}) | {bits} |"
        )
    return "\n".join(lines)


NAMES = (
    "inkling_workbook.ports.silu_mul_fp8.helion:silu_mul_fp8_helion",
    "inkling_workbook.ports.silu_mul_fp8.port:silu_mul_fp8",
    "inkling_workbook.ports.silu_mul_fp8.port:gpu_cases",
)
REFERENCE = "inkling_workbook.ports.silu_mul_fp8.helion:reference"
CHUNK = 16


def check(cases, device: torch.device, progress: bool = True) -> portcheck.Report:
    """portcheck of the port against the original over ``cases`` with the float64 reference, in
    chunks of :data:`CHUNK` cases (a progress bar over them); the generated code from the first."""
    chunks = [cases[i : i + CHUNK] for i in range(0, len(cases), CHUNK)]
    report = None
    for i, chunk in enumerate(_progress(chunks, "portcheck", progress)):
        part = portcheck.run(
            helion_side.silu_mul_fp8_helion, port_side.silu_mul_fp8, chunk, device,
            reference=helion_side.reference, code=i == 0, names=NAMES,
        )  # fmt: skip
        if report is None:
            report = part
        else:
            report.cases += part.cases
    return report


PARTS = ("check", "steps", "sweep")
PARALLEL_CHUNK = 4  # cases a worker's task (the largest build their inputs for seconds on the CPU)


def _submit_parallel(parts, want_steps, cases_spec: str, device, shapes, jobs: int, progress: bool) -> dict:
    """Every task of the parallel run on one pool, check first, then the steps, then the sweep's
    first calls; a progress bar over all of them (waited for here)."""
    import concurrent.futures

    executor = portcheck.pool(jobs)
    names = dict(original=NAMES[0], cases=cases_spec, device=str(device), chunk=PARALLEL_CHUNK)
    pending = {"pool": executor, "check": None, "steps": {}, "warm": []}
    if "check" in parts:
        pending["check"] = portcheck.submit(executor, port=NAMES[1], reference=REFERENCE, code=True, **names)
    if want_steps:
        for s in steps.STEPS:
            pending["steps"][s.name] = portcheck.submit(executor, port=step_spec(s.name), code=False, **names)
    if "sweep" in parts and device.type == "cuda":
        pending["warm"] = [executor.submit(warm_shape, M, N) for M, N in shapes]
    futures = [f for p in ([pending["check"]] if pending["check"] else []) + list(pending["steps"].values())
               for f in p.futures] + pending["warm"]  # fmt: skip
    for _ in _progress(concurrent.futures.as_completed(futures), f"{jobs} processes", progress, total=len(futures)):
        pass
    return pending


def run(
    out: str | Path | None = None,
    quick: bool = False,
    progress: bool = True,
    device: str | torch.device = "cuda",
    cases=None,
    shapes=None,
    command=None,
    parts=PARTS,
    jobs: int = 1,
) -> dict:
    """The whole GPU job, or some of its ``parts``: ``"check"`` portcheck over the cases (writes the
    portcheck record), ``"steps"`` every step's tally over the same cases (into that record; alone,
    it adds them to the record already there), ``"sweep"`` the timing sweep. ``quick``: the
    smoke-sized matrix (``port.gpu_quick_cases``), no steps, fewer shapes. ``cases``: a list of
    cases, or their ``MODULE:NAME`` (default: the GPU matrix, or the quick one).

    ``jobs`` > 1: the check and the steps run in that many worker processes
    (:func:`portcheck.submit`; ``cases`` must then be a name), and on CUDA the
    same workers make the sweep's first call of the port and of helion at every shape
    (:func:`warm_shape`), filling Triton's on-disk cache; torch.compile's graphs are compiled and
    the timing runs afterwards in this process alone, the workers gone. Writes the records under ``out/data``
    (default: the repository's ``data/``)."""
    from inkling_workbook.measure import timing

    unknown = set(parts) - set(PARTS)
    if unknown or not parts:
        raise ValueError(f"parts must be a non-empty subset of {PARTS}, got {parts!r}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    cases_spec = (f"{port_side.__name__}:gpu_quick_cases" if quick else NAMES[2]) if cases is None else cases
    if jobs > 1 and not isinstance(cases_spec, str):
        raise TypeError("jobs > 1 needs cases as a MODULE:NAME string (worker processes rebuild them)")
    device = torch.device(device)
    if device.type == "cuda":
        timing.require_gpu()
    root = Path(out) if out else provenance.REPO_ROOT
    data = root / "data"
    slug = provenance.device_slug(device)
    t_start = time.perf_counter()
    meta = provenance.collect(command)
    cases = portcheck.load_cases(cases_spec) if isinstance(cases_spec, str) else cases_spec
    sweep_list = shapes if shapes is not None else sweep_shapes(quick)
    pc_json = data / f"silu_mul_fp8_portcheck_{slug}.json"
    want_steps = "steps" in parts and not quick
    pending = _submit_parallel(parts, want_steps, cases_spec, device, sweep_list, jobs, progress) if jobs > 1 else None
    ok = True
    if "check" in parts:
        report = pending["check"].result() if pending else check(cases, device, progress)
        doc = json.loads(report.to_json())
        doc["provenance"] = meta
        doc["tally"] = f"{sum(r['ok'] for r in report.cases)}/{len(report.cases)} cases equal and deterministic"
        doc["jobs"] = jobs
        ok = report.ok
        provenance.write_record(pc_json.with_suffix(".md"), report.to_markdown())
    elif want_steps:
        if not pc_json.exists():
            raise FileNotFoundError(f"{pc_json} is missing: run the 'check' part first")
        doc = json.loads(pc_json.read_text())
    else:
        doc = json.loads(pc_json.read_text()) if pc_json.exists() else {"tally": None}
    if want_steps:
        if pending:
            doc["steps"] = [step_row(s, pending["steps"][s.name].result()) for s in steps.STEPS]
        else:
            doc["steps"] = step_tallies(cases, device, progress)
        if "check" not in parts:
            doc["steps_provenance"] = meta
        ok = ok and all(st["equal_cases"] == st["cases"] for st in doc["steps"][-1:])  # the last step is the port
    elif "check" in parts:
        doc["steps"] = []
    if "check" in parts or want_steps:
        doc["portcheck_s"] = round(time.perf_counter() - t_start, 1)
        provenance.write_record(pc_json, json.dumps(doc, indent=1, default=str) + "\n")
        if progress:
            print(doc["tally"], flush=True)
    warm_s = None
    if pending:
        warm_s = round(sum(f.result() for f in pending["warm"]), 1)
        pending["pool"].shutdown(wait=True)  # the workers leave the GPU before anything is timed
    result = {"portcheck": pc_json, "bench_csv": None, "bench_json": None, "tally": doc.get("tally"),
              "steps": doc.get("steps", []), "rows": [], "meta": None}  # fmt: skip
    if "sweep" not in parts:
        result["ok"] = ok
        return result
    if device.type == "cuda":
        meta["clock_warmup"] = timing.warm_clocks()
    t_sweep = time.perf_counter()
    csv_path = data / f"silu_mul_fp8_bench_{slug}.csv"
    rows = run_sweep(sweep_list, device, progress, csv_path)
    timing.write_csv(rows, csv_path)
    ports = [r for r in rows if r["impl"] == "port"]
    bench_meta = {
        "provenance": meta,
        "timing": {
            **{k: v for k, v in timing.timing_meta().items() if k not in ("decode_passes", "other_passes")},
            "passes": PASSES,
            "l2": "warm (the same buffers every call) and, where the rotation fits, cold (buffer sets over "
            "three L2s of data)",
            "output_policy": "port and helion write preallocated outputs (poisoned with different bytes before "
            "timing, compared after); torch.compile allocates its output inside the graph",
            "verdicts": "win / loss where the [lo, hi] ranges are apart, tie where they overlap",
            "scale": SCALE,
        },
        "impls": {
            "port": "inkling_workbook.ports.silu_mul_fp8.port.silu_mul_fp8 (launch_config), no PDL",
            "helion": (
                "inkling_workbook.ports.silu_mul_fp8.helion.silu_mul_fp8_helion: vLLM's H100 table entry per shape"
            ),
            "compile": "torch.compile(ports.silu_mul_fp8.helion.formula, dynamic=False), default mode, "
            + compile_baselines.FRESH,
        },
        "shapes": [list(s) for s in sweep_list],
        "compile_caches": (
            f"port and helion compiled by {jobs} worker processes before timing ({warm_s} s of first calls, "
            "summed over them); torch.compile's graphs compiled (and their kernels' configs picked) in the timing "
            "process alone"
            if warm_s is not None
            else "filled by this process's first calls"
        ),
        "portcheck_tally": doc.get("tally"),
        "port_bits_equal_all": all(r["bits_equal_original"] for r in ports),
        "outputs_all_written": all(r["rows_left_unwritten"] == 0 for r in ports),
        "compile_bits_equal_all": all(r["bits_equal_original"] for r in rows if r["impl"] == "compile"),
        "port_vs_helion": {v: sum(r["vs_helion"] == v for r in ports) for v in ("win", "tie", "loss")},
        "port_loses_to_helion": [(r["M"], r["N"], r["l2"]) for r in ports if r["vs_helion"] == "loss"],
        "port_vs_compile": {v: sum(r["vs_compile"] == v for r in ports) for v in ("win", "tie", "loss")},
        "port_loses_to_compile": [(r["M"], r["N"], r["l2"]) for r in ports if r["vs_compile"] == "loss"],
        "shapes_timed": len({(r["M"], r["N"]) for r in ports}),
        "timings": len(ports),
        "sweep_s": round(time.perf_counter() - t_sweep, 1),
        "elapsed_s": round(time.perf_counter() - t_start, 1),
    }
    if device.type == "cuda":
        bench_meta["gpu_state_after"] = provenance.gpu_state()
    json_path = csv_path.with_suffix(".json")
    provenance.write_record(json_path, json.dumps(bench_meta, indent=1, default=str) + "\n")
    ok = ok and bench_meta["port_bits_equal_all"] and bench_meta["outputs_all_written"]
    result.update(bench_csv=csv_path, bench_json=json_path, rows=rows, meta=bench_meta, ok=ok)
    return result
