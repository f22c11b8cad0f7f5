"""Serving: registered ops (opcheck, torch.compile), the thin CUDA launch path and its cache key,
PDL, CUDA graphs, scoped interpreter patches. CPU tests run everywhere; GPU tests skip on CPU."""

import itertools
import re
import threading

import pytest
import torch
import triton
from conftest import gpu_only, poisoned, randn
from torch.library import opcheck
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.interpreter import interpreter_builder
from triton.runtime.jit import JITFunction

import inkling_kernels as ik
from inkling_kernels import _backend, max_blockscale_rows
from inkling_kernels._nvfp4_kernel import nvfp4_quant_kernel
from inkling_kernels.nvfp4 import default_blockscale_offsets
from inkling_kernels.reference import bits_equal, padded_blockscale_offsets

SILU_MOD = __import__("importlib").import_module("inkling_kernels.silu_and_mul")
OPS = torch.ops.inkling


def _raw_equal(a, b):
    """Bitwise on raw bits (NaN payloads included)."""
    if a.dtype.is_floating_point:
        return bits_equal(a, b)
    return a.shape == b.shape and torch.equal(a, b)


def _same_scales(got, want):
    """``got`` (static-bound rows) holds ``want`` (exact rows) and zero padding after it."""
    rows = want.shape[0]
    return (
        got.shape[1:] == want.shape[1:]
        and got.shape[0] >= rows
        and torch.equal(got[:rows], want)
        and int(got[rows:].to(torch.int32).sum()) == 0
    )


# ---- registered ops: opcheck (CPU interpreter is enough) ----------------------------------------


def _opcheck_cases():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 64, generator=g).bfloat16()
    w = torch.rand(6, generator=g)
    eo = torch.tensor([0, 2, 6], dtype=torch.int32)
    gs = torch.tensor([30.0, 200.0])
    u8 = torch.uint8
    return [
        ("silu", OPS.silu_and_mul.default, (x, w, torch.float32, False, None), {}),
        ("silu_il", OPS.silu_and_mul.default, (x,), {}),
        ("silu_out", OPS.silu_and_mul_out.default, (x, w, True, None), {"out": torch.empty(6, 32).bfloat16()}),
        ("quant", OPS.nvfp4_quant.default, (x, gs, eo, None, True, None, None, None), {}),
        ("quant_linear", OPS.nvfp4_quant.default, (x, gs[:1], None, None, False, None, None, None), {}),
        (
            "quant_out",
            OPS.nvfp4_quant_out.default,
            (x, gs, eo, None, True, None, None),
            {"packed": torch.empty(6, 32, dtype=u8), "scales": torch.empty(256, 4, dtype=u8)},
        ),
        ("fused", OPS.silu_and_mul_nvfp4_quant.default, (x, gs, eo, None, True, w, True, None, None, None), {}),
        (
            "fused_out",
            OPS.silu_and_mul_nvfp4_quant_out.default,
            (x, gs, eo, None, False, w, True, None, None),
            {"packed": torch.empty(6, 16, dtype=u8), "scales": torch.empty(256, 4, dtype=u8)},
        ),
    ]


@pytest.mark.parametrize("case", _opcheck_cases(), ids=lambda c: c[0])
def test_opcheck(case):
    _, op, args, kwargs = case
    results = opcheck(op, args, kwargs)
    assert all(v == "SUCCESS" for v in results.values()), results


def test_ops_index_lists_every_registered_op():
    """``inkling_kernels.ops.ALL_OPS`` is the whole ``inkling`` namespace, each op once."""
    from inkling_kernels import _library, ops

    defined = sorted(name.split("::", 1)[1] for name in _library.LIB._op_defs)
    assert sorted(ops.OP_NAMES) == defined and len(defined) == 10
    assert len(set(ops.ALL_OPS)) == len(ops.ALL_OPS) == 10
    assert [op.name() for op in ops.ALL_OPS] == [f"inkling::{n}" for n in ops.OP_NAMES]


def test_ops_match_public_functions(gen):
    x = randn((9, 2 * 96), torch.bfloat16, gen, "cpu")
    w = torch.rand(9, generator=gen)
    assert bits_equal(OPS.silu_and_mul(x, w, None, False), ik.silu_and_mul(x, w, interleaved=False))
    out = poisoned((9, 96), torch.float32, "cpu")
    OPS.silu_and_mul_out(x, None, True, None, out=out)
    assert bits_equal(out, ik.silu_and_mul(x, out_dtype=torch.float32))
    eo = torch.tensor([0, 4, 9], dtype=torch.int32)
    gs = torch.tensor([40.0, 90.0])
    p, s = OPS.silu_and_mul_nvfp4_quant(x, gs, eo, None, True, w)
    rp, rs = ik.silu_and_mul_nvfp4_quant(x, gs, eo, interleaved=True, topk_weights=w)
    assert torch.equal(p, rp) and s.shape[0] == max_blockscale_rows(9, 2) and rs.shape[0] == 256
    assert _same_scales(s, rs)


def test_fake_shapes_use_the_static_bound():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(300, 2 * 128, dtype=torch.bfloat16)
        eo = torch.empty(5, dtype=torch.int32)
        p, s = OPS.silu_and_mul_nvfp4_quant(x, torch.empty(4), eo)
        assert p.shape == (300, 64) and s.shape == (max_blockscale_rows(300, 4), 8)
        p, s = OPS.nvfp4_quant(x, torch.empty(1), None, None, False)
        assert s.shape == (300, 16)
        assert OPS.silu_and_mul(x, None, torch.float16).shape == (300, 128)


def test_compile_routes_to_ops_without_guards_on_m():
    """torch.compile(fullgraph=True, dynamic=True) of the public functions (CPU, eager backend):
    at most 2 graphs over 12 batch sizes (M = 1 may specialize), bitwise equal to eager."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x, w, gs, eo):
        a = ik.silu_and_mul(x, w, interleaved=False)
        p, s = ik.silu_and_mul_nvfp4_quant(x, gs, eo)
        o = torch.empty_like(a)
        ik.silu_and_mul(x, out=o)
        q = ik.nvfp4_quant(a, gs, expert_offsets=eo)
        return a, p, s, o, q[0], q[1]

    torch._dynamo.reset()
    # torch's defaults, whatever an earlier test in this process set (the timing code turns
    # automatic dynamic shapes off for its sweeps: then every batch size recompiles)
    defaults = dict(automatic_dynamic_shapes=True, assume_static_by_default=True, cache_size_limit=8)
    cf = torch.compile(f, backend=backend, fullgraph=True, dynamic=True)
    g = torch.Generator().manual_seed(3)
    with torch._dynamo.config.patch(**defaults):
        for M in [1, 2, 3, 5, 8, 13, 16, 17, 31, 64, 65, 100]:
            x = torch.randn(M, 64, generator=g).bfloat16()
            w = torch.rand(M, generator=g)
            gs = torch.tensor([10.0, 20.0])
            eo = torch.tensor([0, M // 2, M], dtype=torch.int32)
            got, want = cf(x, w, gs, eo), f(x, w, gs, eo)
            for i, (a, b) in enumerate(zip(got, want)):
                # compiled: the registered ops' static-bound scale rows; eager: exact rows (checked)
                assert _same_scales(a, b) if i in (2, 5) else _raw_equal(a, b), (M, i)
    assert 1 <= len(graphs) <= 2
    assert any("inkling" in str(n.target) for gm in graphs for n in gm.graph.nodes)
    torch._dynamo.reset()


# ---- the thin launch path's cache key ----------------------------------------------------------


def test_arg_spec_determines_triton_specialization():
    """Equal :func:`arg_spec` must imply equal Triton specialization (else a cached kernel could
    run with a wrong divisibility or width assumption): checked against Triton's own
    ``native_specialize_impl`` on pointers at every alignment and ints around every boundary."""
    backend = make_backend(GPUTarget("cuda", 90, 32))
    base = torch.empty(64, dtype=torch.uint8)
    values = [base[i:] for i in range(0, 33)] + [base.view(torch.bfloat16)[i:] for i in range(9)]
    values += [base.view(torch.float32)[i:] for i in range(5)]
    ints = [0, 1, 2, 15, 16, 17, 31, 32, 48, -1, -16, -17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, 2**32, 2**63 - 1]
    ints += [2**63, 2**64 - 16, -(2**31), -(2**31) - 1, -(2**63)]
    for specialize in (True, False):
        seen = {}
        for v in values + ints:
            ours = _backend.arg_spec(v, specialize)
            theirs = native_specialize_impl(backend, v, False, specialize, True)
            assert seen.setdefault(ours, theirs) == theirs, (v, ours, theirs, seen[ours])


def test_launch_config_cache_by_bucket():
    for M, N in itertools.product([1, 7, 64, 65, 1000, 1024, 1025, 49152], [1, 7, 768, 1000, 1536, 3072]):
        cfg = ik.launch_config(M, N)
        assert cfg is ik.launch_config(M, N)
        assert cfg.grid(M, N)[0] * cfg.BLOCK_M * cfg.BLOCK_N >= M * N


def _ptx(kernel, signature, constants, options=None):
    src = ASTSource(kernel, signature | dict.fromkeys(constants, "constexpr"), constants)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    ptx = re.sub(r"^\s*//.*$|\.loc.*|\.file.*", "", compiled.asm["ptx"], flags=re.M).split(".section\t.debug")[0]
    ptx = re.sub(r"\$L__tmp\d+:?", "", ptx)
    return compiled, [line.strip() for line in ptx.splitlines() if line.strip()]


def _opcodes(lines, drop=None):
    keep = [line for line in lines if not line.startswith(".reg") and (drop is None or drop not in line)]
    return [re.sub(r"%[a-z]+\d+", "%R", line) for line in keep]


@pytest.mark.parametrize("interleaved", [True, False])
def test_pdl_adds_only_grid_dependency_control_sm90(interleaved):
    """Compiled for sm_90 here (no GPU needed): USE_PDL=True adds exactly one griddepcontrol.wait
    and one launch_dependents, the wait before the first global load and the signal right after
    the wait (before any load: the next kernel launches while this one streams; its own wait
    still holds it until this grid completes), and otherwise the same PTX as USE_PDL=False;
    launch_pdl reaches the kernel metadata the CUDA launcher reads
    (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)."""
    kernel = SILU_MOD.silu_and_mul_interleaved_kernel if interleaved else SILU_MOD.silu_and_mul_non_interleaved_kernel
    sig = {"gateup_ptr": "*bf16", "weight_ptr": "*fp32", "out_ptr": "*bf16", "M": "i32"}
    sig |= {"stride_in": "i32", "stride_out": "i32"}
    consts = {"N": 1000, "BLOCK_M": 4, "BLOCK_N": 256, "EVEN_M": False, "EVEN_N": False, "HAS_WEIGHT": True}
    consts |= {"INT64": False, "STREAM_POLICY": ""}
    off, ptx_off = _ptx(kernel, sig, consts | {"USE_PDL": False})
    on, ptx_on = _ptx(kernel, sig, consts | {"USE_PDL": True}, {"launch_pdl": True})
    assert not any("griddepcontrol" in line for line in ptx_off)
    waits = [i for i, line in enumerate(ptx_on) if "griddepcontrol.wait" in line]
    signals = [i for i, line in enumerate(ptx_on) if "griddepcontrol.launch_dependents" in line]
    loads = [i for i, line in enumerate(ptx_on) if line.startswith(("ld.global", "@")) and "ld.global" in line]
    stores = [i for i, line in enumerate(ptx_on) if "st.global" in line]
    assert len(waits) == 1 and len(signals) == 1 and loads and stores
    assert waits[0] < signals[0] < min(loads)
    # the same instructions apart from the two (register numbers shift: the asm has a dummy output)
    assert _opcodes(ptx_on, drop="griddepcontrol") == _opcodes(ptx_off)
    assert on.metadata.launch_pdl and not off.metadata.launch_pdl


def test_pdl_in_nvfp4_kernel_sm90():
    sig = {"x_ptr": "*bf16", "weight_ptr": "*fp32", "gs_ptr": "*fp32", "expert_off_ptr": "*i32"}
    sig |= {"scale_off_ptr": "*i64", "packed_ptr": "*u8", "scale_ptr": "*u8", "stride_x": "i32", "M": "i32"}
    sig |= {"E": "i32", "total_scale_rows": "i32"}
    consts = {"N": 1536, "SCALE_COLS": 24, "ACT": 2, "HAS_WEIGHT": True, "SWIZZLE": True, "BLOCK_M": 8}
    consts |= {"BLOCK_K": 512, "SEARCH_STEPS": 3, "INT64": False, "HW_E2M1": False}
    _, ptx_off = _ptx(nvfp4_quant_kernel, sig, consts | {"USE_PDL": False})
    _, ptx_on = _ptx(nvfp4_quant_kernel, sig, consts | {"USE_PDL": True}, {"launch_pdl": True})
    assert not any("griddepcontrol" in line for line in ptx_off)
    waits = [i for i, line in enumerate(ptx_on) if "griddepcontrol.wait" in line]
    loads = [i for i, line in enumerate(ptx_on) if "ld.global" in line]
    signals = [i for i, line in enumerate(ptx_on) if "griddepcontrol.launch_dependents" in line]
    stores = [i for i, line in enumerate(ptx_on) if "st.global" in line]
    assert len(waits) == 1 and waits[0] < min(loads) and len(signals) == 1 and signals[0] > max(stores)


def test_enable_pdl_off_under_interpreter_and_type_checked(gen):
    x = randn((3, 64), torch.bfloat16, gen, "cpu")
    assert _backend.resolve_pdl(None, x.device) is False
    assert _backend.resolve_pdl(True, x.device) is False  # the interpreter has no grid dependency control
    assert bits_equal(ik.silu_and_mul(x, enable_pdl=True), ik.silu_and_mul(x, enable_pdl=False))
    with pytest.raises(TypeError, match="enable_pdl"):
        ik.silu_and_mul(x, enable_pdl="yes")


# ---- scoped interpreter patches -----------------------------------------------------------------


def test_interpreter_patches_only_inside_interpreting(gen):
    original_call = JITFunction.__dict__["__call__"]
    assert "cast_impl" not in vars(interpreter_builder)
    seen = {}

    def probe():
        seen["call"] = JITFunction.__dict__["__call__"]
        seen["cast"] = vars(interpreter_builder).get("cast_impl")

    with _backend.interpreting():
        with _backend.interpreting():  # nested: still patched, and the inner exit restores nothing
            pass
        probe()
    assert seen["call"] is not original_call and seen["cast"] is not None
    assert JITFunction.__dict__["__call__"] is original_call and "cast_impl" not in vars(interpreter_builder)
    # a CPU (interpreted) call from another thread leaves Triton as found, and gives the same bits
    x = randn((5, 128), torch.bfloat16, gen, "cpu")
    results = []
    threads = [threading.Thread(target=lambda: results.append(ik.silu_and_mul(x))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and all(bits_equal(results[0], r) for r in results)
    assert JITFunction.__dict__["__call__"] is original_call and "cast_impl" not in vars(interpreter_builder)


# ---- NVFP4 static bound and device-side defaults ------------------------------------------------


def test_max_blockscale_rows_bounds_every_split():
    g = torch.Generator().manual_seed(11)
    for M in [0, 1, 5, 127, 128, 129, 300, 1000]:
        for E in [1, 2, 3, 8, 64]:
            bound = max_blockscale_rows(M, E)
            assert bound % 128 == 0
            worst = 0
            for _ in range(30):
                cuts = torch.sort(torch.randint(0, M + 1, (E - 1,), generator=g)).values
                eo = torch.cat([torch.tensor([0]), cuts, torch.tensor([M])])
                rows = int(padded_blockscale_offsets(eo)[-1])
                assert rows <= bound
                worst = max(worst, rows)
            # tight: E-1 experts of 1 row and one of the rest reach it whenever M >= E
            if M >= E:
                eo = torch.tensor(list(range(E)) + [M])
                assert int(padded_blockscale_offsets(eo)[-1]) == bound
    with pytest.raises(ValueError):
        max_blockscale_rows(4, 0)


def test_default_blockscale_offsets_match_reference(gen):
    for counts in ([5], [0, 0, 3], [128, 1, 0, 255, 129], [0]):
        eo = torch.tensor([0] + list(torch.tensor(counts).cumsum(0)), dtype=torch.int32)
        assert torch.equal(default_blockscale_offsets(eo), padded_blockscale_offsets(eo.long()))


# ---- GPU only: thin path, PDL, CUDA graphs, compile, host overhead --------------------------------


def _fp4_inputs(M, N, E, gen, dtype=torch.bfloat16):
    gateup = randn((M, 2 * N), dtype, gen, "cuda", scale=3.0)
    cuts = torch.sort(torch.randint(0, M + 1, (E - 1,), generator=gen)).values
    eo = torch.cat([torch.tensor([0]), cuts, torch.tensor([M])]).to(torch.int32).cuda()
    gs = (torch.rand(E, generator=gen) * 300 + 50).cuda()
    w = torch.rand(M, generator=gen).cuda()
    return gateup, eo, gs, w


@gpu_only
def test_thin_path_equals_triton_launch_and_respects_alignment(gen):
    """The cached fast path gives the bits of a plain ``kernel[grid]`` launch, and a misaligned
    view (a different specialization) after an aligned one gets its own compiled kernel."""
    M, N = 13, 1000
    base = randn((M * 2 * N + 64,), torch.bfloat16, gen, "cuda")
    for interleaved in (True, False):
        for shift in (0, 1, 8, 3, 0):  # element shifts: 16-byte aligned or not
            x = base[shift : shift + M * 2 * N].view(M, 2 * N)
            for pdl in (False, True):
                a = poisoned((M, N), torch.bfloat16, "cuda")
                ik.silu_and_mul(x, interleaved=interleaved, out=a, enable_pdl=pdl)
                cfg = ik.launch_config(M, N)
                kernel = (
                    SILU_MOD.silu_and_mul_interleaved_kernel
                    if interleaved
                    else SILU_MOD.silu_and_mul_non_interleaved_kernel
                )
                b = poisoned((M, N), torch.bfloat16, "cuda")
                kernel[cfg.grid(M, N)](
                    x, x, b, M, x.stride(0), b.stride(0), N=N, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
                    EVEN_M=M % cfg.BLOCK_M == 0, EVEN_N=N % cfg.BLOCK_N == 0, HAS_WEIGHT=False, INT64=False,
                    STREAM_POLICY="", USE_PDL=pdl, num_warps=cfg.num_warps, launch_pdl=pdl,
                )  # fmt: skip
                assert bits_equal(a, b) and not torch.isnan(a).any()
    keys = SILU_MOD._LAUNCHERS[True].cached_keys()
    assert {k[12] for k in keys} == {True, False}  # aligned and misaligned gateup both cached


@gpu_only
def test_pdl_on_off_bitwise_all_ops(gen):
    for M, N in [(1, 768), (4, 1536), (16, 3072), (333, 1024)]:
        x = randn((M, 2 * N), torch.bfloat16, gen, "cuda", scale=3.0)
        w = torch.rand(M, generator=gen).cuda()
        for interleaved, weights in itertools.product((True, False), (None, w)):
            on = ik.silu_and_mul(x, weights, interleaved=interleaved, enable_pdl=True)
            off = ik.silu_and_mul(x, weights, interleaved=interleaved, enable_pdl=False)
            assert bits_equal(on, off)
        gateup, eo, gs, w = _fp4_inputs(M, N, 4, gen)
        for interleaved in (True, False):
            on = ik.silu_and_mul_nvfp4_quant(gateup, gs, eo, interleaved=interleaved, topk_weights=w, enable_pdl=True)
            off = ik.silu_and_mul_nvfp4_quant(gateup, gs, eo, interleaved=interleaved, topk_weights=w, enable_pdl=False)
            assert torch.equal(on[0], off[0]) and torch.equal(on[1], off[1])
        act = ik.silu_and_mul(gateup, interleaved=False)
        on = ik.nvfp4_quant(act, gs, expert_offsets=eo, enable_pdl=True)
        off = ik.nvfp4_quant(act, gs, expert_offsets=eo, enable_pdl=False)
        assert torch.equal(on[0], off[0]) and torch.equal(on[1], off[1])
    assert _backend.pdl_default(torch.device("cuda")) == (torch.cuda.get_device_capability() >= (9, 0))


def _capture(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm-up: compile outside capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        res = fn()
    return graph, res


@gpu_only
@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize("give_out", [False, True])
def test_cuda_graph_silu_and_mul(interleaved, with_weight, give_out, gen):
    M, N = 7, 1536
    x = randn((M, 2 * N), torch.bfloat16, gen, "cuda")
    w = torch.rand(M, generator=gen).cuda() if with_weight else None
    out = poisoned((M, N), torch.bfloat16, "cuda") if give_out else None
    graph, res = _capture(lambda: ik.silu_and_mul(x, w, interleaved=interleaved, out=out))
    for _ in range(3):
        x.copy_(randn((M, 2 * N), torch.bfloat16, gen, "cuda", scale=4.0))
        if w is not None:
            w.copy_(torch.rand(M, generator=gen).cuda())
        res.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert bits_equal(res, ik.silu_and_mul(x, w, interleaved=interleaved))


@gpu_only
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("give_out", [False, True])
def test_cuda_graph_nvfp4_new_offsets_within_bound(fused, give_out, gen):
    """Capture with expert offsets as device tensors (default blockscale offsets computed on the
    device inside the graph), replay after writing new values and new offsets in place."""
    M, N, E = 200, 1024, 4
    gateup, eo, gs, w = _fp4_inputs(M, N, E, gen)
    x = ik.silu_and_mul(gateup, interleaved=False)
    rows = max_blockscale_rows(M, E)
    out = None
    if give_out:
        out = (poisoned((M, N // 2), torch.uint8, "cuda"), poisoned((rows, N // 16), torch.uint8, "cuda"))

    def call():
        if fused:
            return ik.silu_and_mul_nvfp4_quant(gateup, gs, eo, topk_weights=w, out=out)
        return ik.nvfp4_quant(x, gs, expert_offsets=eo, out=out)

    graph, (packed, scales) = _capture(call)
    assert scales.shape == (rows, N // 16)
    for counts in ([50, 50, 50, 50], [0, 199, 1, 0], [1, 1, 1, 197], [200, 0, 0, 0]):
        new_eo = torch.tensor([0] + list(torch.tensor(counts).cumsum(0)), dtype=torch.int32).cuda()
        eo.copy_(new_eo)
        gateup.copy_(randn((M, 2 * N), torch.bfloat16, gen, "cuda", scale=3.0))
        w.copy_(torch.rand(M, generator=gen).cuda())
        gs.copy_((torch.rand(E, generator=gen) * 300 + 50).cuda())
        x.copy_(ik.silu_and_mul(gateup, interleaved=False))
        packed.fill_(0xFF)
        scales.fill_(0xFF)
        graph.replay()
        torch.cuda.synchronize()
        if fused:
            want = ik.silu_and_mul_nvfp4_quant(gateup, gs, eo, topk_weights=w)
        else:
            want = ik.nvfp4_quant(x, gs, expert_offsets=eo)
        assert torch.equal(packed, want[0]) and _same_scales(scales, want[1]), counts


@gpu_only
def test_no_sync_with_outputs_given(gen):
    """With outputs given, no public op synchronizes: run under
    ``torch.cuda.set_sync_debug_mode("error")``, which raises on any synchronizing call."""
    M, N, E = 40, 512, 3
    gateup, eo, gs, w = _fp4_inputs(M, N, E, gen)
    bo = default_blockscale_offsets(eo)
    out = poisoned((M, N), torch.bfloat16, "cuda")
    packed = poisoned((M, N // 2), torch.uint8, "cuda")
    scales = poisoned((max_blockscale_rows(M, E), N // 16), torch.uint8, "cuda")
    for _ in range(2):  # the second round runs on the cached fast path
        torch.cuda.set_sync_debug_mode("error")
        try:
            ik.silu_and_mul(gateup, w, interleaved=False, out=out)
            ik.silu_and_mul(gateup)  # silu_and_mul never syncs, out or not
            ik.silu_and_mul_nvfp4_quant(gateup, gs, eo, bo, topk_weights=w, out=(packed, scales))
            ik.silu_and_mul_nvfp4_quant(gateup, gs, eo, topk_weights=w, out=(packed, scales))
            ik.nvfp4_quant(out, gs, expert_offsets=eo, out=(packed, scales))
            ik.nvfp4_quant(out, gs[:1], out=(packed, scales))
        finally:
            torch.cuda.set_sync_debug_mode("default")


class _MoEish(torch.nn.Module):
    def __init__(self, K, N, gen):
        super().__init__()
        self.w1 = torch.nn.Parameter((torch.randn(K, 2 * N, generator=gen) / K**0.5).bfloat16(), requires_grad=False)
        self.w2 = torch.nn.Parameter((torch.randn(N, K, generator=gen) / N**0.5).bfloat16(), requires_grad=False)

    def forward(self, h, topk_weights, gs, eo):
        gateup = h @ self.w1
        act = ik.silu_and_mul(gateup, topk_weights, interleaved=False)
        y = act @ self.w2
        packed, scales = ik.silu_and_mul_nvfp4_quant(gateup, gs, eo)
        return y, packed, scales


@gpu_only
def test_compile_moe_module_fullgraph_dynamic(gen):
    """GEMM -> silu_and_mul -> GEMM and GEMM -> fused NVFP4 compiled (inductor, fullgraph, dynamic)
    over 12 batch sizes: at most 2 compiled graphs, outputs bitwise equal to eager."""
    K, N = 512, 768
    model = _MoEish(K, N, gen).cuda()
    compiles = []

    def counting_backend(gm, example_inputs):
        compiles.append(gm)
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    cmodel = torch.compile(model, backend=counting_backend, fullgraph=True, dynamic=True)
    with torch.inference_mode():
        for M in [1, 2, 3, 4, 7, 8, 16, 33, 64, 100, 257, 1024]:
            h = randn((M, K), torch.bfloat16, gen, "cuda")
            tw = torch.rand(M, generator=gen).cuda()
            gs = torch.tensor([100.0, 300.0], device="cuda")
            eo = torch.tensor([0, M // 3, M], dtype=torch.int32, device="cuda")
            got, want = cmodel(h, tw, gs, eo), model(h, tw, gs, eo)
            assert _raw_equal(got[0], want[0]) and _raw_equal(got[1], want[1]), M
            assert _same_scales(got[2], want[2]), M  # static-bound rows compiled, exact rows eager
    assert 1 <= len(compiles) <= 2, len(compiles)
    torch._dynamo.reset()


@gpu_only
@pytest.mark.timing
def test_host_overhead_measurement_runs():
    """The host-time measurement the serving benchmark records (``data/serving_<gpu>.json``; its
    targets are reported there and in the README, not asserted here: performance lives in
    benchmarks): every entry a positive time, the ratios consistent with them."""
    from inkling_workbook.measure.hostbench import measure_host_overhead

    res = measure_host_overhead(calls=200, rounds=3)
    print(res)
    times = {k: v for k, v in res.items() if k.endswith("_us") and k != "fused_fp8_over_thin_launch_us"}
    assert len(times) == 14 and all(0 < v < 10_000 for v in times.values()), res
    assert res["fused_fp8_over_thin_launch_us"] == res["fused_fp8_out_us"] - res["thin_fp8_launch_us"]
    assert res["silu_ratio"] == res["silu_and_mul_out_us"] / res["bare_silu_kernel_us"]
    assert res["fused_vs_bare_nvfp4_ratio"] == res["fused_nvfp4_out_us"] / res["bare_nvfp4_kernel_us"]
    assert res["fused_vs_bare_fp8_ratio"] == res["fused_fp8_out_us"] / res["bare_fp8_kernel_us"]


def test_cuda_launcher_plumbing_without_a_gpu(monkeypatch):
    """:class:`CudaLauncher` with a stand-in kernel (no GPU here): the first launch of a key goes
    through ``kernel[grid](runtime args, **constexprs, num_warps, launch_pdl)``; later launches
    call the compiled kernel's C launcher with Triton's argument order, the grid's two dimensions
    and the current stream;
    a set launch hook, a device other than the current one, or scratch memory keep the slow path."""
    calls = []

    class FakeLauncher:
        global_scratch_size = profile_scratch_size = 0
        num_ctas = 1
        launch_cooperative_grid = 0
        launch_pdl = True

        def launch(self, *a):
            calls.append(("fast", a))

    class FakeCompiled:
        function = 1234
        packed_metadata = (4, 1, 0)
        run = FakeLauncher()

    class FakeKernel:
        arg_names = ["x", "n", "A", "B"]

        def __getitem__(self, grid):
            def go(*args, **kwargs):
                calls.append(("slow", grid, args, kwargs))
                return FakeCompiled()

            return go

    monkeypatch.setattr(_backend, "_get_raw_stream", lambda index: 777)
    monkeypatch.setattr(_backend, "_get_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda index: __import__("contextlib").nullcontext())
    launcher = _backend.CudaLauncher(FakeKernel(), ("A", "B"))
    args = ("tensor", 5, 16, "s")
    launcher("k1", 3, 0, args, 4, True)
    expected = {"A": 16, "B": "s", "num_warps": 4, "launch_pdl": True, **_backend.COMPILE_OPTIONS}
    assert calls[-1] == ("slow", (3, 1), ("tensor", 5), expected)
    launcher("k1", 7, 0, args, 4, True)
    assert calls[-1] == ("fast", (7, 1, 1, 777, 1234, 0, True, None, None, (4, 1, 0), None, None, None) + args)
    launcher("k1", 7, 0, args, 4, True, grid1=5)  # a 2-D grid (the FP8 kernel's tiles x experts)
    assert calls[-1] == ("fast", (7, 5, 1, 777, 1234, 0, True, None, None, (4, 1, 0), None, None, None) + args)
    launcher("k1", 7, 1, args, 4, True)  # another device than the current one: slow path
    assert calls[-1][0] == "slow"
    chain = _backend.knobs.runtime.launch_enter_hook  # Triton's default: an empty HookChain
    assert _backend._no_launch_hooks()
    chain.add(hook := lambda *a: None)  # a profiler's hook
    try:
        launcher("k1", 7, 0, args, 4, True)
        assert calls[-1][0] == "slow"
    finally:
        chain.remove(hook)
    launcher("k1", 7, 0, args, 4, True)
    assert calls[-1][0] == "fast"
    with pytest.raises(RuntimeError, match="launch_pdl"):
        launcher("k2", 1, 0, args, 4, False)  # metadata says PDL on, the key says off
    FakeLauncher.global_scratch_size = 8
    launcher("k3", 1, 0, args, 4, True)
    launcher("k3", 1, 0, args, 4, True)
    assert calls[-1][0] == "slow" and "k3" not in launcher.cached_keys()
