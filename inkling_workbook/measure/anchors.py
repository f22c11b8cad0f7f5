"""The real anchors: other projects' kernels of our ops, fetched by name and version, never vendored.

The baselines a published number is compared with come from released wheels on the package
index, pinned here (:data:`ANCHORS`) and nowhere else:

* ``sglang==0.5.23``: ``sglang/kernels/ops/moe/inkling_moe.py`` (``silu_and_mul``: the merged
  helion -> Triton port of our op, GB300 launch heuristic, no PDL; ``silu_and_mul_triton``: the
  older persistent-grid kernel, PDL on sm_90+), ``sglang/kernels/ops/moe/ep_moe_kernels.py``
  (``silu_and_mul_masked_post_quant_fwd``) and ``sglang/kernels/ops/quantization/fp8_kernel.py``
  (the Triton per-token-group FP8 quantizer ``_per_token_group_quant_8bit_raw``).
* ``vllm==0.34.0``: ``vllm/model_executor/layers/quantization/utils/fp8_utils.py``
  (``per_token_group_quant_fp8``'s Triton path, ``silu_mul_per_token_group_quant_fp8_colmajor``)
  and ``vllm/model_executor/layers/fused_moe/experts/batched_deep_gemm_moe.py``
  (``persistent_masked_m_silu_mul_quant``'s Triton path).

:func:`fetch` runs ``pip download --no-deps`` for each pinned wheel, checks its sha256 against
the pin, extracts only :data:`ANCHORS`' member files into ``.anchors/<dist>-<version>/`` (an
ignored folder, small enough to carry to the GPU machine, which has no package index) and writes
``manifest.json`` there (wheel name and sha256, each member's path and sha256, the date). It is
idempotent: a folder whose manifest and files match the pin is left alone.

The loaders run the fetched source text unmodified, after checking each file's sha256 against
the manifest:

* :func:`load_sglang_inkling_moe` imports ``inkling_moe.py`` whole, under a private module name,
  with two stand-in modules in ``sys.modules`` for the duration of the import only (see
  :data:`SGLANG_STANDINS`); the kernels of ``silu_and_mul`` use neither.
* the FP8 modules import half of their project at the top (environment registries, custom ops,
  platform probes). :func:`_exec_functions` takes only the named top-level functions out of the
  fetched file with :mod:`ast` (their exact source segments, decorators included) and executes
  them in a namespace holding ``torch``, ``triton``, ``tl`` and the documented stand-ins of each
  loader.

:func:`anchors` returns :class:`Anchor` records (a label naming project, version, function and
configuration; a callable with our op's signature) next to which the benchmark can put ours.
On CPU tensors the callables run in Triton's interpreter with the repairs of
:func:`portcheck.interpret.cpu_mode` (the same repairs the library's own CPU path applies).
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import enum
import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from inkling_workbook.measure import provenance

# ---- the pins: the one place the anchors' versions are named ----------------------------------

ANCHORS: dict[str, dict] = {
    "sglang": {
        "version": "0.5.23",
        "wheel": "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sha256": "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
        # the tags the pinned wheel carries, so pip finds it whatever the Python running pip
        "pip_target": "--python-version 3.11 --implementation cp --abi cp311 --platform manylinux_2_34_x86_64",
        "members": (
            "sglang/kernels/ops/moe/inkling_moe.py",
            "sglang/kernels/ops/moe/ep_moe_kernels.py",
            "sglang/kernels/ops/quantization/fp8_kernel.py",
        ),
    },
    "vllm": {
        "version": "0.34.0",
        "wheel": "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "sha256": "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2",
        "pip_target": "--python-version 3.12 --implementation cp --abi abi3 --platform manylinux_2_28_x86_64",
        "members": (
            "vllm/model_executor/layers/quantization/utils/fp8_utils.py",
            "vllm/model_executor/layers/fused_moe/experts/batched_deep_gemm_moe.py",
        ),
    },
}
MANIFEST = "manifest.json"


def anchors_dir() -> Path:
    """``$INKLING_ANCHORS``, or ``.anchors/`` at the repository root (ignored by git)."""
    env = os.environ.get("INKLING_ANCHORS")
    return Path(env) if env else provenance.REPO_ROOT / ".anchors"


def dist_dir(dist: str, root: Path | None = None) -> Path:
    return (root or anchors_dir()) / f"{dist}-{ANCHORS[dist]['version']}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest(dist: str, root: Path | None = None) -> dict | None:
    """The manifest of a fetched anchor when it matches the pin and every extracted file its
    recorded sha256; ``None`` otherwise (not fetched, another version, or a file changed)."""
    d = dist_dir(dist, root)
    try:
        m = json.loads((d / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    pin = ANCHORS[dist]
    if (m.get("dist"), m.get("version"), m.get("wheel"), m.get("wheel_sha256")) != (
        dist, pin["version"], pin["wheel"], pin["sha256"],
    ) or sorted(m.get("files", {})) != sorted(pin["members"]):  # fmt: skip
        return None
    for rel, digest in m["files"].items():
        p = d / rel
        if not p.is_file() or _sha256(p) != digest:
            return None
    return m


def is_fetched(dist: str, root: Path | None = None) -> bool:
    return manifest(dist, root) is not None


def _download(dist: str, dest: Path, find_links: str | None) -> Path:
    pin = ANCHORS[dist]
    wheel = dest / pin["wheel"]
    if not (wheel.is_file() and _sha256(wheel) == pin["sha256"]):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *pin["pip_target"].split(),
               "-d", str(dest), f"{dist}=={pin['version']}"]  # fmt: skip
        if find_links:
            cmd[4:4] = ["--find-links", find_links]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            tail = " | ".join(line for line in done.stderr.strip().splitlines()[-2:])
            raise RuntimeError(f"pip download {dist}=={pin['version']} failed (no package index reachable?): {tail}")
    if not wheel.is_file():
        raise RuntimeError(f"pip did not download {pin['wheel']} into {dest}")
    digest = _sha256(wheel)
    if digest != pin["sha256"]:
        raise RuntimeError(f"{pin['wheel']}: sha256 {digest}, pinned {pin['sha256']}")
    return wheel


def fetch(dists=tuple(ANCHORS), root: Path | None = None, find_links: str | None = None, keep_wheels=None) -> dict:
    """Fetch the pinned anchors ``dists`` into ``root`` (default :func:`anchors_dir`): download each
    wheel (``pip download --no-deps``, into ``root/wheels`` when ``keep_wheels`` else a temporary
    folder), check its sha256, extract the pinned members and write the manifest. Skips an anchor
    whose manifest already matches. ``find_links``: a folder of wheels pip may take them from.
    Returns ``{dist: manifest}``."""
    root = Path(root or anchors_dir())
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one fetch at a time (pytest-xdist workers, make -j)
        return _fetch_locked(dists, root, find_links, keep_wheels)


def _fetch_locked(dists, root: Path, find_links, keep_wheels) -> dict:
    out = {}
    for dist in dists:
        if dist not in ANCHORS:
            raise ValueError(f"unknown anchor {dist!r}; known: {', '.join(ANCHORS)}")
        m = manifest(dist, root)
        if m is not None:
            out[dist] = m
            continue
        pin = ANCHORS[dist]
        with contextlib.ExitStack() as stack:
            if keep_wheels:
                wheels = root / "wheels"
                wheels.mkdir(exist_ok=True)
            else:
                wheels = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=root)))
            wheel = _download(dist, wheels, find_links)
            stage = Path(tempfile.mkdtemp(dir=root, prefix=f".{dist}-"))
            files = {}
            with zipfile.ZipFile(wheel) as z:
                for rel in pin["members"]:
                    target = stage / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(rel))
                    files[rel] = _sha256(target)
            m = {
                "dist": dist,
                "version": pin["version"],
                "wheel": pin["wheel"],
                "wheel_sha256": pin["sha256"],
                "wheel_bytes": wheel.stat().st_size,
                "files": files,
                "fetched": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "how": f"pip download --no-deps {dist}=={pin['version']}; members extracted unmodified",
            }
            (stage / MANIFEST).write_text(json.dumps(m, indent=1) + "\n")
            final = dist_dir(dist, root)
            if final.exists():  # a stale or changed copy (the manifest did not match)
                shutil.rmtree(final)
            os.replace(stage, final)
        out[dist] = manifest(dist, root)
    return out


def _source(dist: str, rel: str, root: Path | None = None) -> tuple[Path, str]:
    """The fetched file and its text, after checking it against the manifest."""
    m = manifest(dist, root)
    if m is None:
        raise FileNotFoundError(
            f"anchor {dist}=={ANCHORS[dist]['version']} is not fetched (or does not match its manifest) "
            f"under {dist_dir(dist, root)}: run `make anchors` or `python tools/fetch_anchors.py {dist}`"
        )
    path = dist_dir(dist, root) / rel
    return path, path.read_text()


# ---- loading: the fetched text, unmodified, with documented stand-ins ---------------------------


def _cuda_capability_major() -> int:
    return torch.cuda.get_device_capability()[0] if torch.cuda.is_available() else 0


def _is_arch_support_pdl() -> bool:
    """Stand-in for ``sglang.kernels.jit.utils.is_arch_support_pdl`` (``arch.py`` of the same
    wheel: ``False`` on ROCm/MUSA, else ``get_jit_cuda_arch().major >= 9``): the capability major of
    the current CUDA device is >= 9. On a machine without CUDA it says ``False``."""
    return _cuda_capability_major() >= 9


def _is_sm121() -> bool:
    """Stand-in for ``sglang.srt.utils.common.is_sm121`` (``is_cuda() and
    torch.cuda.get_device_capability() == (12, 1)``): the same expression."""
    return torch.cuda.is_available() and torch.version.hip is None and torch.cuda.get_device_capability() == (12, 1)


#: What ``inkling_moe.py`` imports from sglang, and what stands in for it while it is imported.
#: Neither is used by ``silu_and_mul`` or its kernels: ``is_arch_support_pdl`` decides PDL in
#: ``silu_and_mul_triton``'s launch, ``is_sm121`` a ``num_stages`` of a grouped GEMM launcher.
#: Both stand-ins compute what the real functions compute on a CUDA device (see their
#: docstrings), so the launches that do use them are as sglang makes them.
SGLANG_STANDINS = {
    "sglang.kernels.jit.utils": {"is_arch_support_pdl": _is_arch_support_pdl},
    "sglang.srt.utils.common": {"is_sm121": _is_sm121},
}


@contextlib.contextmanager
def _standin_modules(standins: dict[str, dict]):
    """Put stand-in modules (and their parent packages) into ``sys.modules`` for the block only;
    whatever was there before (a real sglang, say) is restored afterwards."""
    names = set()
    for full in standins:
        parts = full.split(".")
        names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    saved = {n: sys.modules.get(n) for n in names}
    try:
        for n in sorted(names):
            mod = types.ModuleType(n, "inkling_workbook.measure.anchors stand-in")
            mod.__path__ = []  # a package, so the submodule import resolves
            mod.__dict__.update(standins.get(n, {}))
            sys.modules[n] = mod
        yield
    finally:
        for n, mod in saved.items():
            if mod is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = mod


def _import_file(name: str, path: Path, standins: dict[str, dict]) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit reads the source through inspect: keep it findable
    try:
        with _standin_modules(standins):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@functools.cache
def load_sglang_inkling_moe(root: Path | None = None) -> types.ModuleType:
    """``sglang/kernels/ops/moe/inkling_moe.py`` of sglang 0.5.23, imported whole (private name
    ``_inkling_anchor_sglang_inkling_moe``) with :data:`SGLANG_STANDINS`."""
    path, _ = _source("sglang", "sglang/kernels/ops/moe/inkling_moe.py", root)
    return _import_file("_inkling_anchor_sglang_inkling_moe", path, SGLANG_STANDINS)


def _exec_functions(name: str, path: Path, text: str, functions: tuple[str, ...], namespace: dict):
    """Execute only the top-level ``functions`` of the fetched ``text`` (their exact source,
    decorators included, at their own line numbers: tracebacks and Triton's source reading point
    into the fetched file) in a module named ``name`` seeded with ``namespace``."""
    tree = ast.parse(text)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = [f for f in functions if f not in defs]
    if missing:
        raise LookupError(f"{path}: no top-level function {', '.join(missing)}")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__dict__.update(namespace)
    sys.modules[name] = module  # triton.jit resolves the function's globals and source by module
    for f in functions:
        node = ast.Module(body=[defs[f]], type_ignores=[])
        exec(compile(node, str(path), "exec"), module.__dict__)
    return module


def _triton_namespace() -> dict:
    import typing

    import triton
    import triton.language as tl

    # the fetched annotations name typing.Optional and typing.Tuple (evaluated when defined)
    return {"torch": torch, "triton": triton, "tl": tl, "Optional": vars(typing)["Optional"],
            "Tuple": vars(typing)["Tuple"]}  # fmt: skip


#: Stand-ins of ``fp8_kernel.py``'s module globals that ``_per_token_group_quant_8bit_raw`` reads
#: (the module computes them at import from ``sglang.srt.utils``): on CUDA (not ROCm) ``_is_hip``
#: is ``False`` and ``fp8_dtype`` is ``torch.float8_e4m3fn`` (``is_fp8_fnuz()`` is ROCm only);
#: ``ceil_align`` is ``sglang.srt.utils.ceil_align``, used only by the ue8m0 scale allocation.
SGLANG_FP8_STANDINS = {
    "_is_hip": False,
    "fp8_dtype": torch.float8_e4m3fn,
    "fp8_max": float(torch.finfo(torch.float8_e4m3fn).max),
    "fp8_min": -float(torch.finfo(torch.float8_e4m3fn).max),
    "ceil_align": lambda x, y: (x + y - 1) // y * y,
}


@functools.cache
def load_sglang_fp8_kernel(root: Path | None = None) -> types.ModuleType:
    """The Triton per-token-group quantizer of sglang 0.5.23's ``fp8_kernel.py``:
    ``_per_token_group_quant_8bit``, ``_per_token_group_quant_8bit_colmajor``, the launcher
    ``_per_token_group_quant_8bit_raw`` and its ``create_per_token_group_quant_fp8_output_scale``,
    with :data:`SGLANG_FP8_STANDINS`."""
    path, text = _source("sglang", "sglang/kernels/ops/quantization/fp8_kernel.py", root)
    fns = ("_per_token_group_quant_8bit", "_per_token_group_quant_8bit_colmajor",
           "_per_token_group_quant_8bit_raw", "create_per_token_group_quant_fp8_output_scale")  # fmt: skip
    return _exec_functions(
        "_inkling_anchor_sglang_fp8_kernel", path, text, fns, {**_triton_namespace(), **SGLANG_FP8_STANDINS}
    )


@functools.cache
def load_sglang_ep_moe(root: Path | None = None) -> types.ModuleType:
    """``silu_and_mul_masked_post_quant_fwd`` of sglang 0.5.23's ``ep_moe_kernels.py`` and its two
    kernels (``_silu_and_mul_post_quant_kernel``; ``_silu_and_mul_post_quant_packed_kernel`` for
    int32 packed UE8M0 scales). No stand-ins: the three read only torch, triton and tl."""
    path, text = _source("sglang", "sglang/kernels/ops/moe/ep_moe_kernels.py", root)
    fns = ("_silu_and_mul_post_quant_kernel", "_silu_and_mul_post_quant_packed_kernel",
           "silu_and_mul_masked_post_quant_fwd")  # fmt: skip
    return _exec_functions("_inkling_anchor_sglang_ep_moe", path, text, fns, _triton_namespace())


class _VllmPlatformStandin:
    """Stand-in for ``vllm.platforms.current_platform`` as the loaded functions read it: on an
    NVIDIA GPU ``fp8_dtype()`` is ``torch.float8_e4m3fn`` and ``is_fp8_fnuz()`` is ``False``.
    ``is_cuda_alike()`` and ``is_xpu()`` say ``False``: that routes ``per_token_group_quant_fp8``
    to its Triton path (on CUDA vllm takes its C++ op ``torch.ops._C.per_token_group_fp8_quant``,
    which this fetch of Python files cannot run); the benchmark names that configuration."""

    @staticmethod
    def fp8_dtype():
        return torch.float8_e4m3fn

    @staticmethod
    def is_fp8_fnuz():
        return False

    @staticmethod
    def is_cuda_alike():
        return False

    @staticmethod
    def is_xpu():
        return False


def _vllm_get_fp8_min_max():
    """Stand-in for ``vllm...quant_utils.get_fp8_min_max``: (-448.0, 448.0) for e4m3fn (not fnuz)."""
    m = float(torch.finfo(torch.float8_e4m3fn).max)
    return -m, m


def _vllm_get_tma_aligned_size(x: int, element_size: int) -> int:
    """Stand-in for ``vllm.utils.deep_gemm.get_tma_aligned_size``: ``x`` rounded up to 16 bytes."""
    alignment = 16 // element_size
    return (x + alignment - 1) // alignment * alignment


#: The names the loaded vllm functions read from their module, and what stands in for them.
#: ``is_deep_gemm_e8m0_used`` only fills a ``use_ue8m0=None`` default: the callables always pass it.
VLLM_FP8_STANDINS = {
    "current_platform": _VllmPlatformStandin(),
    "get_fp8_min_max": _vllm_get_fp8_min_max,
    "get_tma_aligned_size": _vllm_get_tma_aligned_size,
    "is_deep_gemm_e8m0_used": lambda: False,
}


@functools.cache
def load_vllm_fp8_utils(root: Path | None = None) -> types.ModuleType:
    """vllm 0.34.0's Triton FP8 group quantizers from ``fp8_utils.py``: ``per_token_group_quant_fp8``
    (Triton path; kernels ``_per_token_group_quant_fp8`` and ``_per_token_group_quant_fp8_colmajor``)
    and ``silu_mul_per_token_group_quant_fp8_colmajor`` (its kernel), with :data:`VLLM_FP8_STANDINS`."""
    path, text = _source("vllm", "vllm/model_executor/layers/quantization/utils/fp8_utils.py", root)
    fns = ("_per_token_group_quant_fp8", "_per_token_group_quant_fp8_colmajor", "per_token_group_quant_fp8",
           "_silu_mul_per_token_group_quant_fp8_colmajor", "silu_mul_per_token_group_quant_fp8_colmajor")  # fmt: skip
    return _exec_functions(
        "_inkling_anchor_vllm_fp8_utils", path, text, fns, {**_triton_namespace(), **VLLM_FP8_STANDINS}
    )


class _DeepGemmQuantScaleFMT(enum.Enum):
    """Stand-in for ``vllm.utils.deep_gemm.DeepGemmQuantScaleFMT``: the same members and values
    (its oracle class methods, which probe the GPU, are left out)."""

    FLOAT32 = 0
    FLOAT32_CEIL_UE8M0 = 1
    UE8M0 = 2


class _VllmMaskedPlatformStandin(_VllmPlatformStandin):
    """``current_platform`` for ``persistent_masked_m_silu_mul_quant``: ``is_cuda()`` says
    ``False``, which routes it to its Triton kernel ``_silu_mul_fp8_quant_deep_gemm`` (on CUDA
    sm_80+ vllm runs its C++ op ``torch.ops._C.persistent_masked_m_silu_mul_quant`` instead)."""

    @staticmethod
    def is_cuda():
        return False

    @staticmethod
    def has_device_capability(capability):
        return False


#: The names ``persistent_masked_m_silu_mul_quant`` and ``scales_shape_stride_dtype`` read from
#: their module (``cdiv`` and ``round_up`` as ``vllm.utils.math_utils`` defines them).
VLLM_MASKED_STANDINS = {
    "current_platform": _VllmMaskedPlatformStandin(),
    "get_fp8_min_max": _vllm_get_fp8_min_max,
    "DeepGemmQuantScaleFMT": _DeepGemmQuantScaleFMT,
    "cdiv": lambda a, b: -(a // -b),
    "round_up": lambda x, y: ((x + y - 1) // y) * y,
}


@functools.cache
def load_vllm_batched_deep_gemm(root: Path | None = None) -> types.ModuleType:
    """vllm 0.34.0's masked silu*mul + FP8 group quant from ``batched_deep_gemm_moe.py``:
    ``persistent_masked_m_silu_mul_quant`` (its Triton path), ``scales_shape_stride_dtype`` and
    the kernel ``_silu_mul_fp8_quant_deep_gemm``, with :data:`VLLM_MASKED_STANDINS`."""
    path, text = _source("vllm", "vllm/model_executor/layers/fused_moe/experts/batched_deep_gemm_moe.py", root)
    fns = ("scales_shape_stride_dtype", "_silu_mul_fp8_quant_deep_gemm", "persistent_masked_m_silu_mul_quant")
    return _exec_functions(
        "_inkling_anchor_vllm_batched_deep_gemm", path, text, fns, {**_triton_namespace(), **VLLM_MASKED_STANDINS}
    )


# ---- the callables, next to ours --------------------------------------------------------------


@contextlib.contextmanager
def _cpu_mode_for(*tensors):
    """Triton's interpreter with the GPU-faithful repairs when the tensors are on the CPU."""
    if any(t is not None and t.device.type == "cpu" for t in tensors):
        from portcheck.interpret import cpu_mode

        with cpu_mode():
            yield
    else:
        yield


@dataclass(frozen=True)
class Anchor:
    """One baseline: ``label`` names project, version, function and configuration wherever a
    number of it appears; ``fn`` has the signature of the op it stands next to."""

    key: str
    label: str
    op: str  # "silu_and_mul", "fp8_group_quant", "silu_and_mul_fp8_group_quant_masked"
    fn: Callable
    cpu: bool = True  # runs on CPU tensors (Triton's interpreter)


def sglang_silu_and_mul(gateup, topk_weights=None, out_dtype=None, *, interleaved=True):
    """sglang 0.5.23 ``silu_and_mul`` (the merged port; GB300 heuristic, no PDL) with our signature."""
    mod = load_sglang_inkling_moe()
    with _cpu_mode_for(gateup):
        return mod.silu_and_mul(gateup, topk_weights, out_dtype, use_interleaved=interleaved)


def sglang_silu_and_mul_triton(gateup, topk_weights=None, out_dtype=None, *, interleaved=True):
    """sglang 0.5.23 ``silu_and_mul_triton`` (persistent grid of 4 x SMs programs, interleaved
    only, PDL on sm_90+). CUDA only: its launcher reads ``torch.cuda.get_device_properties``."""
    if not interleaved:
        raise ValueError("sglang's silu_and_mul_triton reads the interleaved layout only")
    return load_sglang_inkling_moe().silu_and_mul_triton(gateup, topk_weights, out_dtype)


def sglang_fp8_group_quant(x, group_size=128, *, scale_ue8m0=False, column_major_scales=False):
    """sglang 0.5.23 ``_per_token_group_quant_8bit_raw`` (its Triton kernels; sglang's CUDA
    entry point ``sglang_per_token_group_quant_fp8`` runs a JIT-compiled CUDA kernel instead)."""
    mod = load_sglang_fp8_kernel()
    with _cpu_mode_for(x):
        return mod._per_token_group_quant_8bit_raw(
            x, group_size, column_major_scales=column_major_scales, scale_ue8m0=scale_ue8m0
        )


def sglang_silu_and_mul_fp8_masked(gateup, masked_m, group_size=128, *, scale_ue8m0=False):
    """sglang 0.5.23 ``silu_and_mul_masked_post_quant_fwd``: ``gateup[E, T, 2N]`` gate||up
    (non-interleaved), fp32 row-major scales ``[E, T, G]``; rows ``t >= masked_m[e]`` untouched
    (returned as zeros here)."""
    E, T, N2 = gateup.shape
    q = torch.zeros((E, T, N2 // 2), dtype=torch.float8_e4m3fn, device=gateup.device)
    s = torch.zeros((E, T, N2 // 2 // group_size), dtype=torch.float32, device=gateup.device)
    with _cpu_mode_for(gateup):
        load_sglang_ep_moe().silu_and_mul_masked_post_quant_fwd(gateup, q, s, group_size, masked_m, scale_ue8m0)
    return q, s


def vllm_fp8_group_quant(x, group_size=128, *, scale_ue8m0=False, column_major_scales=False):
    """vllm 0.34.0 ``per_token_group_quant_fp8``, its Triton path (on CUDA vllm runs the C++ op
    ``torch.ops._C.per_token_group_fp8_quant``, not in this fetch)."""
    mod = load_vllm_fp8_utils()
    with _cpu_mode_for(x):
        return mod.per_token_group_quant_fp8(
            x, group_size, column_major_scales=column_major_scales, use_ue8m0=scale_ue8m0
        )


def vllm_silu_mul_fp8_colmajor(gateup, group_size=128, *, scale_ue8m0=False):
    """vllm 0.34.0 ``silu_mul_per_token_group_quant_fp8_colmajor``: ``gateup[M, 2N]`` gate||up,
    M a multiple of 8; scales ``[M, G]`` column-major (strides ``(1, M)``)."""
    mod = load_vllm_fp8_utils()
    with _cpu_mode_for(gateup):
        return mod.silu_mul_per_token_group_quant_fp8_colmajor(gateup, use_ue8m0=scale_ue8m0, group_size=group_size)


def vllm_silu_mul_fp8_masked(gateup, masked_m, group_size=128, *, scale_ue8m0=False):
    """vllm 0.34.0 ``persistent_masked_m_silu_mul_quant``, its Triton path: ``gateup[E, T, 2N]``
    gate||up, group 128, fp32 scales ``[E, T, G]`` with strides ``(T * G, 1, T)`` (zeroed first;
    ``FLOAT32_CEIL_UE8M0`` with ``scale_ue8m0``); rows ``t >= masked_m[e]`` of q unwritten."""
    mod = load_vllm_batched_deep_gemm()
    fmt = _DeepGemmQuantScaleFMT.FLOAT32_CEIL_UE8M0 if scale_ue8m0 else _DeepGemmQuantScaleFMT.FLOAT32
    with _cpu_mode_for(gateup):
        return mod.persistent_masked_m_silu_mul_quant(gateup, masked_m, group_size=group_size, quant_scale_fmt=fmt)


def anchors() -> list[Anchor]:
    """Every anchor, labelled with project, version, function and configuration."""
    sv, vv = ANCHORS["sglang"]["version"], ANCHORS["vllm"]["version"]
    return [
        Anchor("sglang_silu_and_mul", f"sglang {sv} silu_and_mul (the merged port, GB300 heuristic, no PDL)",
               "silu_and_mul", sglang_silu_and_mul),
        Anchor("sglang_silu_and_mul_triton",
               f"sglang {sv} silu_and_mul_triton (persistent grid, interleaved only, PDL on sm_90+)",
               "silu_and_mul", sglang_silu_and_mul_triton, cpu=False),
        Anchor("sglang_fp8_group_quant", f"sglang {sv} _per_token_group_quant_8bit_raw (Triton, no PDL)",
               "fp8_group_quant", sglang_fp8_group_quant),
        Anchor("sglang_silu_and_mul_fp8_masked",
               f"sglang {sv} silu_and_mul_masked_post_quant_fwd (Triton, gate||up, fp32 scales, no PDL)",
               "silu_and_mul_fp8_group_quant_masked", sglang_silu_and_mul_fp8_masked),
        Anchor("vllm_fp8_group_quant", f"vllm {vv} per_token_group_quant_fp8 (Triton path, no PDL)",
               "fp8_group_quant", vllm_fp8_group_quant),
        Anchor("vllm_silu_mul_fp8_colmajor",
               f"vllm {vv} silu_mul_per_token_group_quant_fp8_colmajor (Triton, gate||up, column-major scales)",
               "silu_and_mul_fp8_group_quant", vllm_silu_mul_fp8_colmajor),
        Anchor("vllm_silu_mul_fp8_masked",
               f"vllm {vv} persistent_masked_m_silu_mul_quant (Triton path, gate||up, column-major fp32 scales)",
               "silu_and_mul_fp8_group_quant_masked", vllm_silu_mul_fp8_masked),
    ]  # fmt: skip


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m inkling_workbook.measure.anchors", description=__doc__.split("\n")[0])
    p.add_argument("dists", nargs="*", default=list(ANCHORS), help=f"which anchors (default: {' '.join(ANCHORS)})")
    p.add_argument("--root", type=Path, default=None, help="where to extract (default: .anchors/ or $INKLING_ANCHORS)")
    p.add_argument("--find-links", default=None, help="a folder of wheels pip may take the pinned wheels from")
    p.add_argument("--keep-wheels", action="store_true", help="keep the downloaded wheels under <root>/wheels")
    args = p.parse_args(argv)
    root = args.root or anchors_dir()
    for dist, m in fetch(args.dists, root, args.find_links, args.keep_wheels).items():
        d = dist_dir(dist, root)
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        wheel = f"{m['wheel']} ({m['wheel_bytes'] / 1e6:.1f} MB, sha256 {m['wheel_sha256'][:12]}...)"
        print(f"{dist}=={m['version']}: {wheel} -> {d} ({len(m['files'])} files, {size / 1e3:.0f} kB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
