"""Where a measurement came from: device, driver, versions, date, commit, command."""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import torch
import triton


def _is_checkout(path: Path) -> bool:
    pyproject = path / "pyproject.toml"
    return pyproject.is_file() and 'name = "inkling-kernels"' in pyproject.read_text()


def find_checkout(start: str | Path | None = None) -> Path:
    """The working checkout records are read from and written to: ``$INKLING_REPO`` where set,
    else the first folder from ``start`` (default: the working directory) upwards that holds this
    project's ``pyproject.toml``, else the folder above this package when it runs from a checkout
    (an editable install), else the working directory. Never the installed package's folder."""
    import os

    if os.environ.get("INKLING_REPO"):
        return Path(os.environ["INKLING_REPO"]).resolve()
    here = Path(start or Path.cwd()).resolve()
    for path in (here, *here.parents):
        if _is_checkout(path):
            return path
    source = Path(__file__).resolve().parents[2]  # inkling_workbook/measure/provenance.py
    return source if _is_checkout(source) else here


REPO_ROOT = find_checkout()


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def nvidia_smi(fields: str) -> list[str] | None:
    """Values of ``nvidia-smi --query-gpu=FIELDS`` for GPU 0, or None without nvidia-smi."""
    out = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"])
    return [v.strip() for v in out.split(",")] if out else None


def gpu_state() -> dict:
    """SM and memory clocks (MHz), temperature (C) and power (W) now, to show throttling."""
    vals = nvidia_smi("clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active")
    keys = ["sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "throttle_reasons"]
    return dict(zip(keys, vals)) if vals else {}


class ClockSampler:
    """The SM clock sampled in the background (``nvidia-smi --loop-ms``) while GPU work runs, cut
    into windows: ``mark()`` closes one (a timing pass), ``windows`` holds each window's readings
    in MHz. Without nvidia-smi every window is empty. A reading is stamped when it is read, so a
    window may hold one reading from either side of its edges."""

    def __init__(self, period_ms: int = 20):
        self.period_ms = period_ms
        self.windows: list[list[float]] = []
        self._now: list[float] = []
        self._lock = threading.Lock()
        self._proc = None
        self._thread = None

    def __enter__(self) -> ClockSampler:
        cmd = ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"]
        try:
            self._proc = subprocess.Popen(
                [*cmd, f"--loop-ms={self.period_ms}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
        except OSError:
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                mhz = float(line.strip())
            except ValueError:
                continue
            with self._lock:
                self._now.append(mhz)

    def mark(self) -> None:
        with self._lock:
            self.windows.append(self._now)
            self._now = []

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)


def device_label(device: torch.device | None = None) -> str:
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.machine()}), Triton interpreter"


def device_slug(device: torch.device | None = None) -> str:
    """A short name for file names: ``h200`` for an NVIDIA H200, ``cpu`` without a GPU."""
    label = device_label(device).lower()
    if label.startswith("cpu"):
        return "cpu"
    for word in label.replace("nvidia", "").split():
        if any(c.isdigit() for c in word):
            return "".join(c for c in word if c.isalnum())
    return "gpu"


def git_commit() -> str | None:
    """``$INKLING_GIT_COMMIT`` where set (a tree copied to a GPU machine may carry a stale .git),
    else the checkout's commit."""
    import os

    env = os.environ.get("INKLING_GIT_COMMIT")
    return env or _run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"])


#: the source trees whose Python files :func:`sources_digest` covers: what a GPU run executes
SOURCE_DIRS = ("inkling_kernels", "inkling_workbook", "tools")


def sources_digest(commit: str | None = None, root: Path | None = None) -> str | None:
    """sha256 over the ``.py`` files under :data:`SOURCE_DIRS` (each file's path relative to the
    checkout, a NUL, its bytes, a NUL; in path order): of the files on disk, or with ``commit`` of
    that commit's blobs (``git``). A record's ``sources_sha256`` then names the code that ran even
    where the machine's ``.git`` was stale: the commit whose digest matches is the code
    (``git_commit`` alone came from that ``.git`` and could be wrong). None without the files."""
    import hashlib

    root = Path(root or REPO_ROOT)
    h = hashlib.sha256()
    if commit is None:
        files = sorted(
            str(f.relative_to(root)) for d in SOURCE_DIRS if (root / d).is_dir() for f in (root / d).rglob("*.py")
        )
        if not files:
            return None
        for name in files:
            h.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
        return h.hexdigest()
    listing = _run(["git", "-C", str(root), "ls-tree", "-r", "--name-only", commit, "--", *SOURCE_DIRS])
    if not listing:
        return None
    for name in sorted(n for n in listing.splitlines() if n.endswith(".py")):
        blob = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{name}"], capture_output=True, check=True)
        h.update(name.encode() + b"\0" + blob.stdout + b"\0")
    return h.hexdigest()


def _kernel_digests() -> dict | None:
    """Each op's kernel digest (:mod:`.kernel_digest`): which kernel a timing describes."""
    from . import kernel_digest

    try:
        return kernel_digest.digests()
    except (OSError, SyntaxError, ValueError):
        return None


def helion_version() -> str | None:
    """The installed helion's version (None without helion): a record names it whether or not it
    ran helion."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("helion") is None:
        return None
    try:
        return importlib.metadata.version("helion")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (no package metadata)"


def collect(command: str | list[str] | None = None) -> dict:
    """Everything a reader needs to know where a result file came from."""
    from inkling_kernels import _backend

    if command is None:
        command = [Path(sys.argv[0]).name, *sys.argv[1:]]
    if isinstance(command, list):
        command = shlex.join(command)
    cuda = torch.cuda.is_available()
    info = {
        "device": device_label(),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "git_commit": git_commit(),
        "sources_sha256": sources_digest(),
        "kernel_digests": _kernel_digests(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "helion": helion_version(),
        "cuda_runtime": torch.version.cuda,
    }
    if cuda:
        smi = nvidia_smi("driver_version,memory.total,uuid")
        props = torch.cuda.get_device_properties(0)
        info.update(
            driver=smi[0] if smi else None,
            gpu_memory_mib=smi[1] if smi else None,
            gpu_uuid=smi[2] if smi and len(smi) > 2 else None,  # tells one lease's GPU from another's
            sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}",
        )
    else:
        info["interpreter_bf16_rounding"] = _backend.interpreter_bf16_rounding()
    return info


def stamp() -> str:
    """One line for the first output of a notebook: where and with what it was executed."""
    info = collect("notebook")
    parts = [info["device"]]
    if info.get("driver"):
        parts.append(f"driver {info['driver']}")
    parts += [f"torch {info['torch']}", f"triton {info['triton']}", f"helion {info['helion']}", info["date_utc"]]
    return "executed on " + " | ".join(parts)


def companion(out: str | Path, kind: str) -> Path:
    """The files a sweep writes beside its silu_and_mul CSV ``out`` (e.g. ``data/bench_h200.csv``):
    ``"nvfp4"`` -> ``nvfp4_bench_h200.csv``, ``"tune"`` -> ``tune_bench_h200.csv`` (tile sweeps),
    ``"meta"`` -> ``bench_h200.json`` (provenance, ceilings, method)."""
    out = Path(out)
    if kind == "meta":
        return out.with_suffix(".json")
    if kind in ("nvfp4", "fp8", "tune"):
        return out.with_name(f"{kind}_{out.name}")
    raise ValueError(f"kind must be 'nvfp4', 'fp8', 'tune' or 'meta', got {kind!r}")


def write_record(path: str | Path, text: str) -> Path:
    """Write a record under ``data/`` atomically (a temporary file, then a rename), so a test or
    notebook reading it while a GPU job rewrites it sees the old file or the new one, whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
