"""FP fusion: the package's bits do not depend on Triton's default (``TRITON_DEFAULT_FP_FUSION``).

FP fusion lets the compiler contract ``a * b + c`` into one fused multiply-add (LLVM when it
emits PTX, ptxas when it assembles it), which rounds once instead of twice and so can move a bit.
Triton 3.9 warns that its default, on today, turns off in 3.10. Every launch of the package passes
the option explicitly (:data:`inkling_kernels._backend.COMPILE_OPTIONS`), so its kernels compile to
the same code whatever the default; the kernels of helion and of ``torch.compile`` follow the
default. Two checks, each running the same work in two fresh processes, one per setting, each with
caches of its own:

* ``ptx`` (CPU, compile-only): every kernel configuration the package's ops launch, captured at
  launch on CPU tensors and compiled for sm_90, gives the same PTX under both settings; a control
  kernel (``a * b + c``) compiled without the option shows that the setting does reach the compiler.
* ``outputs`` (CUDA, or the interpreter on CPU): a case matrix per op; the raw bytes of every
  output under both settings, FP8 and NVFP4 fused == unfused in each, the port against the helion
  originals in each, and ``torch.compile`` of the reference formulas (CUDA only).

``python -m inkling_workbook fusion [--device cuda] [--matrix gpu|quick|cpu] [--out FILE]`` runs
the outputs check and writes the record (``data/fp_fusion_<device>.json``); it exits non-zero when
any output of the package differs between the settings or a fused op differs from its unfused pair.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

SETTINGS = ("0", "1")
#: what every published record ran with: Triton 3.6 with the variable unset, its default on
PUBLISHED_SETTING = "unset (Triton 3.6.0: fusion on, as TRITON_DEFAULT_FP_FUSION=1)"


def digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's raw bytes (logical elements, row-major), 16 hex digits."""
    raw = t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()[:16]


def _gen(name: str) -> torch.Generator:
    """A generator seeded by the case's name: both processes draw the same inputs."""
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


_INPUTS: list[str] = []  # digests of the inputs drawn for the case being run (see child_outputs)


def _values(shape, gen: torch.Generator, dtype=torch.bfloat16) -> torch.Tensor:
    """Fresh normal values times 3, with a sprinkle of edge values (zeros, +-large, tiny).

    The positions are made unique before the edge values are written: an index assignment with
    repeated positions leaves either value, and which one differed between processes (on the
    H200's host, 2026-12-02), so the two settings' runs compared different inputs."""
    x = torch.randn(shape, generator=gen) * 3
    flat = x.view(-1)
    picks = torch.unique(torch.randint(0, flat.numel(), (max(1, flat.numel() // 97),), generator=gen))
    edges = torch.tensor([0.0, -0.0, 1e4, -1e4, 1e-6, -1e-6, 30.0, -30.0])
    flat[picks] = edges[torch.arange(picks.numel()) % edges.numel()]
    x = x.to(dtype)
    _INPUTS.append(digest(x))
    return x


def _poisoned(shape, dtype, device) -> torch.Tensor:
    size = torch.empty((), dtype=dtype).element_size()
    return torch.full((*shape[:-1], shape[-1] * size), 0xFF, dtype=torch.uint8, device=device).view(dtype)


def package_cases(matrix: str, device: torch.device) -> Iterator[tuple[str, Callable[[], dict]]]:
    """(case name, a function returning ``{"outputs": [tensor, ...], "fused_equals_unfused": bool|None}``)
    for every op of the package."""
    import inkling_kernels as ik

    big = matrix == "gpu"
    ms = (1, 4, 16, 96, 1024, 4096) if big else ((1, 4, 96, 512) if matrix == "quick" else (1, 3, 16))
    ns = (768, 1536, 3072) if big else ((768, 1536) if matrix == "quick" else (256,))

    def dev(t):
        return t.to(device)

    for M in ms:
        for N in ns:
            for il in (True, False):
                for weighted in (False, True):
                    name = f"silu M={M} N={N} {'il' if il else 'nil'}{'+w' if weighted else ''}"

                    def silu(name=name, M=M, N=N, il=il, weighted=weighted):
                        g = _gen(name)
                        x, w = dev(_values((M, 2 * N), g)), dev(torch.rand(M, generator=g)) if weighted else None
                        out = ik.silu_and_mul(x, w, interleaved=il, out=_poisoned((M, N), torch.bfloat16, device))
                        out32 = ik.silu_and_mul(x, w, torch.float32, interleaved=il)
                        return {"outputs": [out, out32], "fused_equals_unfused": None}

                    yield name, silu
            for ue8m0 in (False, True):
                for col in (False, True):
                    name = f"fp8 M={M} N={N} ue8m0={int(ue8m0)} col={int(col)}"

                    def quant(name=name, M=M, N=N, ue8m0=ue8m0, col=col):
                        x = dev(_values((M, N), _gen(name)))
                        q, s = ik.fp8_group_quant(x, 128, scale_ue8m0=ue8m0, column_major_scales=col)
                        return {"outputs": [q, s], "fused_equals_unfused": None}

                    yield name, quant
                    for il in (True, False):
                        name = f"silu+fp8 M={M} N={N} {'il' if il else 'nil'}+w ue8m0={int(ue8m0)} col={int(col)}"

                        def fused(name=name, M=M, N=N, il=il, ue8m0=ue8m0, col=col):
                            g = _gen(name)
                            x, w = dev(_values((M, 2 * N), g)), dev(torch.rand(M, generator=g))
                            opts = {"group_size": 128, "scale_ue8m0": ue8m0, "column_major_scales": col}
                            q, s = ik.silu_and_mul_fp8_group_quant(x, w, interleaved=il, **opts)
                            q2, s2 = ik.fp8_group_quant(ik.silu_and_mul(x, w, interleaved=il), **opts)
                            same = digest(q) == digest(q2) and digest(s) == digest(s2)
                            return {"outputs": [q, s], "fused_equals_unfused": same}

                        yield name, fused
            name = f"nvfp4 M={M} N={N} 3 experts"

            def nvfp4(name=name, M=M, N=N):
                g = _gen(name)
                x = dev(_values((M, 2 * N), g))
                w = dev(torch.rand(M, generator=g))
                cuts = sorted(torch.randint(0, M + 1, (2,), generator=g).tolist())
                eo = dev(torch.tensor([0, *cuts, M], dtype=torch.int32))
                gs = dev(torch.rand(3, generator=g) * 100 + 1)
                outs = []
                same = True
                for il in (True, False):
                    p, s = ik.silu_and_mul_nvfp4_quant(x, gs, eo, interleaved=il, topk_weights=w)
                    p2, s2 = ik.nvfp4_quant(ik.silu_and_mul(x, w, interleaved=il), gs, expert_offsets=eo)
                    same = same and digest(p) == digest(p2) and digest(s) == digest(s2)
                    outs += [p, s]
                return {"outputs": outs, "fused_equals_unfused": same}

            yield name, nvfp4
    E, T, N = (8, 256, 1536) if big else (3, 16, 256)
    for il in (True, False):
        name = f"silu+fp8 masked E={E} T={T} N={N} {'il' if il else 'nil'}"

        def masked(name=name, il=il):
            g = _gen(name)
            x = dev(_values((E, T, 2 * N), g))
            counts = torch.randint(0, T + 1, (E,), generator=g)
            counts[0], counts[-1] = 0, T
            q, s = ik.silu_and_mul_fp8_group_quant(x, interleaved=il, masked_m=dev(counts.to(torch.int32)))
            outs, same = [], True
            for e, m in enumerate(counts.tolist()):  # rows past an expert's count are not written
                q2, s2 = ik.fp8_group_quant(ik.silu_and_mul(x[e, :m], interleaved=il))
                same = same and digest(q[e, :m]) == digest(q2) and digest(s[e, :m]) == digest(s2)
                outs += [q[e, :m], s[e, :m]]
            return {"outputs": outs, "fused_equals_unfused": same}

        yield name, masked


def helion_cases(matrix: str, device: torch.device) -> Iterator[tuple[str, Callable[[], dict]]]:
    """The port against the helion originals (the fixed tile, and production's sm_90 table where it
    has the width): digests of each and whether they are equal."""
    import inkling_kernels as ik
    from inkling_workbook.ports.silu_and_mul import helion_original, portcheck_cases

    if not helion_original.available():
        return
    cases = portcheck_cases.bitwise_shapes("quick" if matrix == "gpu" else "cpu")
    if matrix != "gpu":  # helion in the interpreter takes seconds a case
        cases = [c for c in cases if c.M <= 2 and c.N == 384]
    for case in cases:
        if case.dtype != "bfloat16" or case.out_dtype != "bfloat16":
            continue

        def run(case=case):
            g = _gen(case.name)
            x = _values((case.M, 2 * case.N), g).to(device)
            w = torch.rand(case.M, generator=g).to(device) if case.weighted else None
            port = ik.silu_and_mul(x, w, interleaved=case.interleaved)
            row = {"port": digest(port)}
            configs = ["fixed"]
            if device.type == "cuda" and helion_original.sm90_config_index(2 * case.N, case.weighted) is not None:
                configs.append("sm90_table")
            for config in configs:
                out = _poisoned((case.M, case.N), torch.bfloat16, device)
                helion_original.silu_and_mul_helion(x, w, interleaved=case.interleaved, out=out, config=config)
                row[f"helion_{config}"] = digest(out)
                row[f"port_vs_helion_{config}"] = row[f"helion_{config}"] == row["port"]
            return row

        yield case.name, run


def compile_cases(device: torch.device) -> Iterator[tuple[str, Callable[[], dict]]]:
    """``torch.compile`` (Inductor's Triton kernels, CUDA only) of the reference formulas."""
    if device.type != "cuda":
        return
    from inkling_kernels.reference import fp8_group_quant_ref, silu_and_mul_ref

    silu_c = torch.compile(silu_and_mul_ref, dynamic=False)
    quant_c = torch.compile(fp8_group_quant_ref, dynamic=False)
    for M, N in ((1, 1536), (96, 3072), (4096, 1536)):
        name = f"compile silu M={M} N={N} il"

        def run(name=name, M=M, N=N):
            x = _values((M, 2 * N), _gen(name)).to(device)
            y = silu_c(x, None, interleaved=True)
            q, s = quant_c(y, 128)
            return {"outputs": [y, q, s]}

        yield name, run


def child_outputs(matrix: str, device: torch.device) -> dict:
    """The outputs check in this process, under whatever setting its environment holds."""
    import triton
    from tqdm.auto import tqdm

    doc = {"setting": os.environ.get("TRITON_DEFAULT_FP_FUSION"), "triton": triton.__version__}
    for group, cases in (
        ("package", package_cases(matrix, device)),
        ("helion", helion_cases(matrix, device)),
        ("compile", compile_cases(device)),
    ):
        rows = {}
        for name, fn in tqdm(list(cases), desc=f"{group} cases", unit="case", file=sys.stderr):
            _INPUTS.clear()
            row = fn()
            row["inputs"] = list(_INPUTS)
            if "outputs" in row:
                row["digests"] = [digest(t) for t in row.pop("outputs")]
            rows[name] = row
        doc[group] = rows
    return doc


def _in_fresh_process(setting: str, argv: list[str]) -> dict:
    """``python -m inkling_workbook.proofs.fp_fusion ARGV`` under ``TRITON_DEFAULT_FP_FUSION=setting``, with
    Triton's and Inductor's caches empty, so nothing compiled under the other setting is reused."""
    with tempfile.TemporaryDirectory(prefix=f"fp_fusion_{setting}_") as tmp:
        env = {**os.environ, "TRITON_DEFAULT_FP_FUSION": setting}
        env |= {"TRITON_CACHE_DIR": str(Path(tmp) / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor")}
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "inkling_workbook.proofs.fp_fusion", *argv, "--result", str(out)]
        subprocess.run(cmd, env=env, check=True)
        return json.loads(out.read_text())


def compare(docs: dict[str, dict]) -> dict:
    """What differs between the settings, group by group."""
    a, b = (docs[s] for s in SETTINGS)
    summary = {}
    for group in ("package", "helion", "compile"):
        rows_a, rows_b = a.get(group, {}), b.get(group, {})
        differ, inputs_differ = [], []
        for name in rows_a:
            if rows_a[name].get("inputs") != rows_b.get(name, {}).get("inputs"):
                inputs_differ.append(name)  # not comparable: the two runs drew different inputs
                continue
            keys = [k for k in rows_a[name] if k == "digests" or k == "port" or k.startswith("helion_")]
            if any(rows_a[name][k] != rows_b[name].get(k) for k in keys):
                differ.append(name)
        entry = {
            "cases": len(rows_a),
            "identical": len(rows_a) - len(differ) - len(inputs_differ),
            "differ": differ,
            "inputs_differ": inputs_differ,
        }
        if group == "package":
            for s, doc in docs.items():
                fused = [
                    r["fused_equals_unfused"]
                    for r in doc.get(group, {}).values()
                    if r["fused_equals_unfused"] is not None
                ]
                entry[f"fused_equals_unfused_{s}"] = f"{sum(fused)}/{len(fused)}"
        if group == "helion":
            for s, doc in docs.items():
                for config in ("fixed", "sm90_table"):
                    flags = [
                        r[f"port_vs_helion_{config}"]
                        for r in doc.get(group, {}).values()
                        if f"port_vs_helion_{config}" in r
                    ]
                    if flags:
                        entry[f"port_vs_helion_{config}_{s}"] = f"{sum(flags)}/{len(flags)}"
        summary[group] = entry
    return summary


def run_outputs(device: str, matrix: str) -> dict:
    docs = {s: _in_fresh_process(s, ["outputs", "--device", device, "--matrix", matrix]) for s in SETTINGS}
    summary = compare(docs)
    pkg = summary["package"]
    fused = [pkg[f"fused_equals_unfused_{s}"].split("/") for s in SETTINGS]
    same_inputs = not any(summary[group]["inputs_differ"] for group in summary)
    ok = same_inputs and not pkg["differ"] and all(done == total for done, total in fused)
    return {"matrix": matrix, "published_setting": PUBLISHED_SETTING, "ok": ok, "summary": summary, "runs": docs}


# ---- the compile-only check (CPU) -----------------------------------------------------------


def captured_launches() -> list[tuple[object, tuple, dict]]:
    """Every ``(kernel, args, kwargs)`` the package's ops pass to ``_backend.launch`` on CPU tensors
    over a few shapes of each op, kwargs as the kernel receives them (constexprs and options)."""
    import inkling_kernels as ik
    from inkling_kernels import _backend

    seen, original = [], _backend.launch

    def record(kernel, grid, device, *args, **kwargs):
        captured = {}

        class Probe:  # stands in for the kernel: what ``launch`` hands to ``kernel[grid](...)``
            def __getitem__(self, grid):
                return lambda *a, **k: captured.update(args=a, kwargs=k)

        original(Probe(), grid, torch.device("cuda"), *args, **kwargs)  # the compiled branch, recorded
        seen.append((kernel, captured["args"], captured["kwargs"]))
        return original(kernel, grid, device, *args, **kwargs)

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(8, 512, generator=g) * 3).bfloat16()
    w = torch.rand(8, generator=g)
    eo = torch.tensor([0, 5, 8], dtype=torch.int32)
    _backend.launch = record
    try:
        for il in (True, False):
            ik.silu_and_mul(x, w, interleaved=il)
            ik.silu_and_mul_fp8_group_quant(x, w, interleaved=il, group_size=64)
            ik.silu_and_mul_nvfp4_quant(x, torch.ones(2), eo, interleaved=il, topk_weights=w)
        ik.fp8_group_quant(x, 128, scale_ue8m0=True, column_major_scales=True)
        ik.nvfp4_quant(x, torch.ones(2), expert_offsets=eo)
        ik.silu_and_mul_fp8_group_quant(x.view(2, 4, 512), masked_m=torch.tensor([3, 4], dtype=torch.int32))
    finally:
        _backend.launch = original
    return seen


_PTR = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32", torch.uint8: "*u8",
        torch.int8: "*i8", torch.int32: "*i32", torch.int64: "*i64", torch.float8_e4m3fn: "*fp8e4nv"}  # fmt: skip
_OPTIONS = ("num_warps", "num_stages", "launch_pdl", "enable_fp_fusion")


def compile_sm90(fn, args: tuple, kwargs: dict, shrink: bool = True):
    """Compile one captured launch for sm_90 (no GPU needed); ``shrink`` caps its row tile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from inkling_kernels import _backend

    jit = fn
    names = list(jit.arg_names)
    constexprs = set(_backend.kernel_constexprs(jit))
    signature, constants = {}, {}
    for name, value in zip(names, args):
        if isinstance(value, torch.Tensor):
            signature[name] = _PTR[value.dtype]
        elif name in constexprs or value is None:
            signature[name], constants[name] = "constexpr", value
        else:
            signature[name] = "i32" if -(2**31) <= int(value) < 2**31 else "i64"
    for name, value in kwargs.items():
        if name in _OPTIONS:
            continue
        signature[name], constants[name] = "constexpr", value
    if shrink and "BLOCK_M" in constants:
        # interpreter launches take tiles of up to 65536 elements, minutes to compile on a CPU; the
        # GPU's plans stay under 2048 (a tile size never changes a bit: masks cover every tail)
        constants["BLOCK_M"] = min(constants["BLOCK_M"], 4)
    options = {k: kwargs[k] for k in _OPTIONS if k in kwargs}
    return triton.compile(ASTSource(jit, signature, constants), target=GPUTarget("cuda", 90, 32), options=options)


def child_ptx() -> dict:
    """sha256 of the PTX of every captured launch, and of the control kernel with and without the
    package's options."""
    import triton
    import triton.language as tl

    from inkling_kernels import _backend

    doc = {"setting": os.environ.get("TRITON_DEFAULT_FP_FUSION"), "triton": triton.__version__, "kernels": {}}
    launches = captured_launches()
    doc["launches"] = len(launches)
    for i, (fn, args, kwargs) in enumerate(launches):
        ptx = compile_sm90(fn, args, kwargs).asm["ptx"]
        doc["kernels"][f"{i} {fn.fn.__name__}"] = hashlib.sha256(ptx.encode()).hexdigest()[:16]

    @triton.jit
    def _fma_probe(a_ptr, b_ptr, c_ptr, out_ptr, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(out_ptr + i, tl.load(a_ptr + i) * tl.load(b_ptr + i) + tl.load(c_ptr + i))

    t = torch.empty(4)
    for label, options in (("pinned", _backend.COMPILE_OPTIONS), ("default", {})):
        ptx = compile_sm90(_fma_probe, (t, t, t, t), {"BLOCK": 128, **options}).asm["ptx"]
        doc[f"control_{label}"] = {"sha": hashlib.sha256(ptx.encode()).hexdigest()[:16], "fma": "fma.rn.f32" in ptx}
    return doc


def run_ptx() -> dict:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(SETTINGS)) as pool:  # the two processes side by side
        docs = dict(zip(SETTINGS, pool.map(lambda s: _in_fresh_process(s, ["ptx"]), SETTINGS)))
    a, b = (docs[s] for s in SETTINGS)
    differ = [k for k in a["kernels"] if a["kernels"][k] != b["kernels"].get(k)]
    return {"kernels": sorted(a["kernels"]), "differ": differ, "runs": docs}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m inkling_workbook.proofs.fp_fusion")
    parser.add_argument("what", choices=["ptx", "outputs"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--matrix", default="cpu", choices=["gpu", "quick", "cpu"])
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    doc = child_ptx() if args.what == "ptx" else child_outputs(args.matrix, torch.device(args.device))
    Path(args.result).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
