"""What tree ``tl.sum`` reduces in on the GPU, read from the compiled code on a CPU.

On the GPU a ``tl.sum`` over a tile adds the elements each thread holds in registers, then
across the lanes of a warp, then across warps: the order is fixed by the tile's shape and its
register layout (``sizePerThread``, ``threadsPerWarp``, ``warpsPerCTA``, ``order`` of the
``#ttg.blocked`` encoding in Triton's GPU IR). Two kernels whose sum reduces the same tile shape
in the same layout add in the same order. :func:`reductions` compiles the first kernel a call
launches for sm_90 (compile only, through portcheck's code report) and lists every ``tt.reduce``
in its TTGIR with the operand's type and layout.

Helion generates pointer loads for the interpreter. The H200 config asks for tensor-descriptor
loads in places, but helion 1.4 refuses every one of them for this kernel (a descriptor needs 16
bytes a row block, and a block is one bf16 row), so its GPU build is the same pointer code. What
this does not check: the order in which the compiler chains one thread's elements (the layout
fixes which elements a thread holds; the PTX of both kernels chains them in index order), and the
bits themselves, which only the GPU matrix checks.
"""

from __future__ import annotations

import re

_REDUCE = re.compile(r'"tt\.reduce"\(%\S+\) <\{axis = (\d+) : i32\}> \(\{.*?\}\) : \((tensor<[^>]*>)\)', re.S)
_LAYOUT = re.compile(r"^(#\w+) = (#ttg\.\w+<.*?>)$", re.M)


def reductions(call) -> list[dict]:
    """Every ``tt.reduce`` of the first kernel ``call()`` launches (run in portcheck's CPU mode),
    compiled for sm_90: ``{"axis", "type", "layout", "num_warps"}`` in program order; ``type`` is the
    operand's shape and element type, ``layout`` its resolved encoding."""
    from portcheck import interpret
    from portcheck.code import capture_launches, compile_launch

    with interpret.cpu_mode(), capture_launches() as seen:
        call()
    with interpret.paused():
        compiled, _ = compile_launch(seen[0])
    ttgir = compiled.asm["ttgir"]
    layouts = dict(_LAYOUT.findall(ttgir))
    out = []
    for axis, typ in _REDUCE.findall(ttgir):
        enc = re.search(r", (#\w+)>$", typ)
        layout = layouts.get(enc.group(1)) if enc else None
        shape = typ[: enc.start()] + ">" if enc else typ  # the alias's name (#blocked1) varies by Triton version
        out.append({"axis": int(axis), "type": shape, "layout": layout, "num_warps": compiled.metadata.num_warps})
    return out
