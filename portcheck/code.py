"""The generated-code table: every Triton launch of each side captured while it runs a case, each
distinct kernel compiled for sm_90 (compile only; on CUDA for the device's own target) with the
specialization Triton applies, and its PTX opcode mix, registers, spills and SASS count.

Triton ships ``ptxas`` and ``cuobjdump``, so this works on a machine without a GPU. Kernels run in
the interpreter by :mod:`portcheck.interpret` stay ``JITFunction`` objects and compile as they are;
a kernel defined under ``TRITON_INTERPRET=1`` (an ``InterpretedFunction``) is compiled from the
same Python function, which works unless it calls other ``@triton.jit`` functions that were also
defined under that variable (then the table says so: run without ``TRITON_INTERPRET``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import os
import re
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

#: the instruction classes of the side-by-side table: (label, opcode prefixes)
CLASSES = (
    ("ld.global", ("ld.global",)),
    ("st.global", ("st.global",)),
    ("fma", ("fma",)),
    ("mul", ("mul",)),
    ("add/sub", ("add", "sub")),
    ("cvt", ("cvt",)),
    ("MUFU (ex2/rcp/...)", ("ex2", "rcp", "rsqrt", "sqrt.approx", "lg2", "sin", "cos", "tanh")),
    ("div", ("div",)),
    ("shfl", ("shfl",)),
    ("bar", ("bar",)),
    ("setp/selp", ("setp", "selp")),
)


@dataclasses.dataclass
class Launch:
    """One Triton launch as the kernel received it."""

    kernel: object  # the JITFunction or InterpretedFunction
    args: tuple
    kwargs: dict
    grid: object

    @property
    def name(self) -> str:
        return self.kernel.fn.__name__


_capture = threading.local()


@contextlib.contextmanager
def capture_launches():
    """Record every Triton kernel launch inside the block (a list of :class:`Launch`), whoever
    makes it: ``JITFunction.run`` (compiled) and ``InterpretedFunction.run`` (interpreter) are
    wrapped (a launch that one hands to the other is recorded once), and an empty launch hook makes
    launchers that bypass ``run`` once a kernel is cached (``inkling_kernels``' ``CudaLauncher``)
    take it. The kernels still run."""
    from triton import knobs
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    seen: list[Launch] = []
    saved = {cls: vars(cls)["run"] if "run" in vars(cls) else cls.run for cls in (JITFunction, InterpretedFunction)}

    def wrap(original):
        def run(self, *args, grid, warmup, **kwargs):
            outer = not getattr(_capture, "inside", False)
            if outer and not warmup:
                seen.append(Launch(self, args, dict(kwargs), grid))
            _capture.inside = True
            try:
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                if outer:
                    _capture.inside = False

        return run

    def no_op(*args, **kwargs):
        return None

    hook = knobs.runtime.launch_enter_hook
    chain = hasattr(hook, "add") and hasattr(hook, "remove")  # Triton's HookChain (3.5 on)
    for cls, original in saved.items():
        cls.run = wrap(original)
    if chain:
        hook.add(no_op)
    else:
        knobs.runtime.launch_enter_hook = no_op
    try:
        yield seen
    finally:
        for cls, original in saved.items():
            cls.run = original
        if chain:
            hook.remove(no_op)
        else:
            knobs.runtime.launch_enter_hook = hook


def _options() -> set[str]:
    from triton.backends.nvidia.compiler import CUDAOptions

    return {f.name for f in dataclasses.fields(CUDAOptions)}


def kernel_constexprs(kernel) -> tuple[str, ...]:
    """The names of ``kernel``'s ``tl.constexpr`` parameters, in order, from its Python signature
    (the same for a ``JITFunction`` and an ``InterpretedFunction``)."""
    import triton.language as tl

    fn = kernel.fn
    hints = inspect.get_annotations(fn)

    def is_constexpr(hint):
        return hint is tl.constexpr or (isinstance(hint, str) and hint.rsplit(".", 1)[-1] == "constexpr")

    return tuple(name for name in inspect.signature(fn).parameters if is_constexpr(hints.get(name)))


def compile_launch(launch: Launch, target=None):
    """Compile ``launch``'s kernel as Triton would specialize it for these arguments (constexprs,
    16-byte divisibility of pointers and ints, ints equal to 1), compile only; ``target``
    defaults to sm_90 (``GPUTarget("cuda", 90, 32)``). Returns ``(compiled, key)``."""
    import triton
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction, native_specialize_impl

    kernel = launch.kernel
    if not isinstance(kernel, JITFunction):  # an InterpretedFunction: the same Python function
        keep = ("do_not_specialize", "do_not_specialize_on_alignment", "noinline")
        kernel = JITFunction(kernel.fn, **{k: v for k, v in getattr(kernel, "kwargs", {}).items() if k in keep})
    params = inspect.signature(kernel.fn).parameters
    bound = inspect.signature(kernel.fn).bind_partial(
        *launch.args, **{k: v for k, v in launch.kwargs.items() if k in params}
    )
    bound.apply_defaults()
    constexprs = set(kernel_constexprs(kernel))
    signature, constants, attrs = {}, {}, {}
    for i, p in enumerate(kernel.params):
        value = bound.arguments.get(p.name)
        if p.name in constexprs or value is None:
            signature[p.name], constants[p.name] = "constexpr", value
            continue
        ty, spec = native_specialize_impl(
            BaseBackend, value, False, not p.do_not_specialize, not p.do_not_specialize_on_alignment
        )
        signature[p.name] = ty
        if ty == "constexpr":
            constants[p.name] = value
        elif isinstance(spec, str) and spec:
            attrs[(i,)] = BaseBackend.parse_attr(spec)
    allowed = _options()
    options = {k: v for k, v in launch.kwargs.items() if k in allowed}
    target = target or GPUTarget("cuda", 90, 32)
    key = repr((launch.name, sorted(signature.items()), sorted(constants.items(), key=str), attrs, options))
    return triton.compile(ASTSource(kernel, signature, constants, attrs), target=target, options=options), key


def opcode_mix(ptx: str) -> dict:
    """Counts of PTX opcodes (``ld.global.v4.b32`` and the like), most frequent first."""
    counts = collections.Counter()
    for line in ptx.splitlines():
        line = line.strip()
        if not line or line.startswith(("//", ".", "{", "}", "$", "@$")) and not line.startswith("@"):
            continue
        m = re.match(r"(?:@!?%p\d+\s+)?([a-z][\w.]*)", line)
        if m:
            counts[m.group(1)] += 1
    return dict(counts.most_common())


def instruction_classes(mix: dict) -> dict:
    """``opcode_mix`` grouped into :data:`CLASSES`, the rest as ``other``."""
    out = dict.fromkeys([label for label, _ in CLASSES] + ["other"], 0)
    for op, n in mix.items():
        label = next((lab for lab, prefixes in CLASSES if op.startswith(prefixes)), "other")
        out[label] += n
    return out


def cuobjdump(compiled, flag: str) -> str:
    """Triton's own cuobjdump run with ``flag`` over a compiled program's cubin."""
    import triton

    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        Path(path).write_bytes(compiled.asm["cubin"])
        return subprocess.run([str(tool), flag, path], capture_output=True, text=True, check=True).stdout


def registers(compiled) -> int:
    return int(re.search(r"REG:(\d+)", cuobjdump(compiled, "-res-usage")).group(1))


def sass_opcodes(compiled) -> list[str]:
    """The SASS opcodes of a compiled program up to its first ``EXIT`` (NOPs left out)."""
    out = cuobjdump(compiled, "-sass")
    lines = [line for line in out.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
    ops = [re.sub(r"^\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?", "", line).split()[0].rstrip(";") for line in lines]
    ops = [op for op in ops if op != "NOP"]
    return ops[: ops.index("EXIT") + 1] if "EXIT" in ops else ops


def kernel_stats(compiled, device: torch.device) -> dict:
    """PTX lines and opcode mix; registers, local (spill) bytes and SASS count from the cubin;
    on CUDA ``n_regs``/``n_spills`` of the loaded kernel."""
    ptx = compiled.asm["ptx"]
    mix = opcode_mix(ptx)
    stats = {"ptx_lines": len(ptx.splitlines()), "classes": instruction_classes(mix), "opcodes": mix}
    try:
        usage = cuobjdump(compiled, "-res-usage")
        stats["registers"] = int(re.search(r"REG:(\d+)", usage).group(1))
        local = re.search(r"LOCAL:(\d+)", usage)
        stats["local_bytes"] = int(local.group(1)) if local else None
        ops = sass_opcodes(compiled)
        stats["sass_to_exit"] = len(ops)
        stats["sass_top"] = dict(collections.Counter(op.split(".")[0] for op in ops).most_common(8))
    except (OSError, subprocess.CalledProcessError, KeyError, AttributeError) as e:
        stats["sass_error"] = f"{type(e).__name__}: {e}"
    if device.type == "cuda":
        compiled._init_handles()
        stats["n_regs"], stats["n_spills"] = compiled.n_regs, compiled.n_spills
    return stats


def compile_error(launch: Launch, e: Exception) -> str:
    """A compile error in one line (the first line of Triton's message, which is the one that says
    what failed), with a hint where the kernel was defined under ``TRITON_INTERPRET=1``."""
    text = f"{type(e).__name__}: {e}".strip()
    first = next((ln for ln in text.splitlines() if ln.strip()), text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    detail = lines[-1] if len(lines) > 1 else ""
    msg = first if not detail or detail == first else f"{first} ... {detail}"
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(launch.kernel, InterpretedFunction) or "InterpretedFunction" in text:
        msg += (" (the kernel was defined under TRITON_INTERPRET=1, so the functions it calls are interpreter"
                " objects: run portcheck without that variable; --device cpu interprets by itself)")  # fmt: skip
    return msg[:600]


def generated_code(call, device) -> list[dict]:
    """Every distinct kernel ``call()`` launches: name, launches, grid, stats."""
    device = torch.device(device)
    target = None
    if device.type == "cuda":
        from triton.runtime import driver

        target = driver.active.get_current_target()
    from .interpret import paused

    with capture_launches() as seen:
        call()
    kernels: dict[str, dict] = {}
    for launch in seen:
        try:
            with paused():  # compiled as Triton ships, not with the interpreter's repairs
                compiled, key = compile_launch(launch, target)
        except Exception as e:  # e.g. an argument type the sm_90 compiler does not take
            entry = kernels.setdefault(f"error {launch.name}", {"kernel": launch.name, "launches": 0})
            entry["error"] = compile_error(launch, e)
            entry["launches"] += 1
            continue
        if key in kernels:
            kernels[key]["launches"] += 1
            continue
        grid = launch.grid if not callable(launch.grid) else "callable"
        kernels[key] = {"kernel": launch.name, "launches": 1, "grid": repr(grid), **kernel_stats(compiled, device)}
    return list(kernels.values())


def code_table(code: dict) -> list[str]:
    """The side-by-side markdown table of a report's ``code``."""
    lines = [
        f"- {side}: could not capture or compile: {code[side + '_error']}"
        for side in ("original", "port")
        if side + "_error" in code
    ]
    for side in ("original", "port"):
        lines += [
            f"- {side}: `{k['kernel']}` did not compile: {k['error']}" for k in code.get(side, []) if "error" in k
        ]
    kernels = [(side, k) for side in ("original", "port") for k in code.get(side, []) if "error" not in k]
    if not kernels:
        if any("error" in k for side in ("original", "port") for k in code.get(side, [])):
            return lines + ["no kernel compiled (see above)"]
        return lines + ["no Triton kernel launches to compare (a torch op launches none)"]
    lines += [""] if lines else []
    head = ["", *(f"{side}: `{k['kernel']}`" for side, k in kernels)]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [
        ("launches", "launches"),
        ("PTX lines", "ptx_lines"),
        ("registers", "registers"),
        ("local (spill) bytes", "local_bytes"),
        ("n_regs (CUDA)", "n_regs"),
        ("n_spills (CUDA)", "n_spills"),
        ("SASS to EXIT", "sass_to_exit"),
    ]
    for label, key in rows:
        if any(key in k for _, k in kernels):
            lines.append(f"| {label} | " + " | ".join(str(k.get(key, "-")) for _, k in kernels) + " |")
    for label, _ in (*CLASSES, ("other", ())):
        lines.append(f"| {label} | " + " | ".join(str(k["classes"].get(label, 0)) for _, k in kernels) + " |")
    return lines
