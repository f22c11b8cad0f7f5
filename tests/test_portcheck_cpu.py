"""portcheck's CPU mode (``portcheck.interpret``): kernels defined without ``TRITON_INTERPRET``
run in the interpreter on CPU tensors with the repairs, the repairs give the GPU's bits, they are
the same as the library's own copy (``inkling_kernels._backend``), and the generated-code table
compiles the interpreted kernels for sm_90."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from conftest import gpu_only
from triton.language.extra import libdevice

import portcheck
from inkling_kernels import _backend

ROOT = Path(__file__).resolve().parent.parent


@triton.jit
def _ops(x_ptr, b_ptr, c_ptr, wide_ptr, narrow_ptr, mul_ptr, add_ptr, div_ptr, e4m3_ptr, exp_ptr, half_ptr, n,
         BLOCK: tl.constexpr):  # fmt: skip
    i = tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)  # fp32
    b = tl.load(b_ptr + i, mask=m)  # bf16, subnormals among them
    c = tl.load(c_ptr + i, mask=m)  # bf16
    tl.store(wide_ptr + i, b.to(tl.float32), mask=m)
    tl.store(narrow_ptr + i, x.to(tl.bfloat16), mask=m)
    tl.store(mul_ptr + i, b * c, mask=m)
    tl.store(add_ptr + i, b + c, mask=m)
    tl.store(div_ptr + i, b / c, mask=m)
    tl.store(e4m3_ptr + i, x.to(tl.float8e4nv, fp_downcast_rounding="rtne"), mask=m)
    tl.store(exp_ptr + i, libdevice.exp(x), mask=m)
    tl.store(half_ptr + i, b.to(tl.float16), mask=m)


N = 512
NAMES = ("bf16->fp32", "fp32->bf16", "bf16 *", "bf16 +", "bf16 /", "fp32->e4m3", "libdevice.exp", "bf16->fp16")


# fp32 NaNs of both signs and several payloads, the infinities and the zeros (bit patterns)
SPECIAL_F32 = (0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000, 0xFFFFFFFF, 0x7F800000, 0xFF800000, 0x80000000, 0)


def _inputs():
    x = portcheck.values((N,), torch.float32, "ties", seed=1) * 37  # ties of bf16, beyond 448 too
    x[: len(SPECIAL_F32)] = torch.tensor(SPECIAL_F32, dtype=torch.int64).to(torch.int32).view(torch.float32)
    b = portcheck.values((N,), torch.bfloat16, "subnormal", seed=2)
    c = portcheck.values((N,), torch.bfloat16, "random", seed=3)
    b[:3] = torch.tensor([0.0, 1.0, float("inf")])  # with c below: 0 * inf, a NaN operand, inf - inf
    c[:3] = torch.tensor([float("inf"), float("nan"), float("-inf")])
    return x, b, c


def _canonical(t):
    """``t`` with every NaN the GPU's canonical one (torch's CPU conversions keep a NaN's sign)."""
    canonical = {torch.bfloat16: (0x7FFF, torch.int16), torch.float8_e4m3fn: (0x7F, torch.uint8)}
    if t.dtype not in canonical:
        return t
    bits, as_int = canonical[t.dtype]
    return torch.where(t.float().isnan(), torch.tensor(bits, dtype=as_int).view(t.dtype), t.view(as_int).view(t.dtype))


def _outs():
    dts = (torch.float32, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float8_e4m3fn,
           torch.float32, torch.float16)  # fmt: skip
    return [torch.full((N,), 7, dtype=torch.float32).to(d) for d in dts]


def ops_portcheck(repairs=True):
    x, b, c = _inputs()
    outs = _outs()
    with portcheck.cpu_mode(repairs):
        _ops[(1,)](x, b, c, *outs, N, BLOCK=N)
    return outs


def ops_backend():
    x, b, c = _inputs()
    outs = _outs()
    _backend.launch(_ops, (1,), torch.device("cpu"), x, b, c, *outs, N, BLOCK=N)
    return outs


def _bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def test_the_repairs_give_the_gpus_bits():
    x, b, c = _inputs()
    wide, narrow, mul, add, div, e4m3, exp, half = ops_portcheck()
    truth = {
        "bf16->fp32": (wide, b.float()),
        "fp32->bf16": (narrow, _canonical(x.to(torch.bfloat16))),
        "bf16 *": (mul, _canonical((b.float() * c.float()).to(torch.bfloat16))),
        "bf16 +": (add, _canonical((b.float() + c.float()).to(torch.bfloat16))),
        "bf16 /": (div, _canonical((b.float() / c.float()).to(torch.bfloat16))),
        "fp32->e4m3": (e4m3, _canonical(x.clamp(-448, 448).to(torch.float8_e4m3fn))),
        "bf16->fp16": (half, b.float().half()),
    }
    for name, (got, want) in truth.items():
        assert torch.equal(_bits(got), _bits(want)), name
    # every NaN into bf16 is 0x7FFF, as cvt.rn.bf16.f32 writes it (sign and payload dropped)
    assert _bits(narrow)[:5].tolist() == [0x7FFF] * 5
    assert _bits(narrow)[5:9].tolist() == [0x7F80, -0x80, -0x8000, 0]  # +inf, -inf, -0, +0
    nans = {"0 * inf": mul[0], "1 * NaN": mul[1], "1 + NaN": add[1], "1 / NaN": div[1], "inf + -inf": add[2],
            "inf / -inf": div[2]}  # fmt: skip
    assert {k: hex(_bits(v).item() & 0xFFFF) for k, v in nans.items()} == dict.fromkeys(nans, "0x7fff")
    assert torch.allclose(exp, torch.exp(x), rtol=1e-6, equal_nan=True)
    with pytest.raises(Exception, match="None"):  # as shipped, libdevice.exp is a stub returning None
        ops_portcheck(repairs=False)


@gpu_only
def test_the_repairs_are_the_compiled_kernels_bits_on_the_gpu():
    """The same kernel compiled for this GPU: its conversions and its bf16 product are the CPU
    mode's bits, NaNs of every sign and payload included (the sum and the quotient round an fp32
    result the compiler may compute in another way: only their NaNs are held here)."""
    x, b, c = (t.cuda() for t in _inputs())
    outs = [t.cuda() for t in _outs()]
    _ops[(1,)](x, b, c, *outs, N, BLOCK=N)
    torch.cuda.synchronize()
    cpu = ops_portcheck()
    for name in ("bf16->fp32", "fp32->bf16", "bf16 *", "fp32->e4m3", "bf16->fp16"):
        i = NAMES.index(name)
        assert torch.equal(_bits(outs[i].cpu()), _bits(cpu[i])), name
    for name in ("bf16 +", "bf16 /"):
        got = _bits(outs[NAMES.index(name)].cpu())[:3]
        assert got.tolist() == _bits(cpu[NAMES.index(name)])[:3].tolist(), name


def test_portchecks_repairs_and_the_librarys_are_the_same_bits():
    """The two copies (portcheck.interpret, inkling_kernels._backend) must not drift apart: a
    repair added to one must be added to the other."""
    for name, ours, theirs in zip(NAMES, ops_portcheck(), ops_backend()):
        assert torch.equal(_bits(ours), _bits(theirs)), name


def _port(x):
    out = torch.empty_like(x)
    n = x.numel()
    dummy = [torch.empty(n, dtype=t.dtype) for t in _outs()]
    b = x.to(torch.bfloat16)
    _ops[(1,)](x, b, b, out, *dummy[1:], n, BLOCK=triton.next_power_of_2(n))
    return out


def test_a_kernel_defined_without_the_variable_runs_and_its_code_compiles_for_sm90():
    assert os.environ.get("TRITON_INTERPRET") != "1"
    cases = portcheck.matrix(shapes=[(300,)], dtypes=[torch.float32], value_classes=("random", "subnormal"),
                             strides=("contiguous",))  # fmt: skip
    report = portcheck.run(lambda x: x.to(torch.bfloat16).float(), _port, cases)
    assert report.ok, report.to_markdown()
    (k,) = report.code["port"]
    assert k["kernel"] == "_ops" and k["registers"] > 0 and k["classes"]["cvt"] > 0
    assert report.provenance["cpu_mode"]["repairs"] == list(portcheck.REPAIRS)


_UNDER_VARIABLE = """
import os, json
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl, portcheck

@triton.jit
def _helper(x):
    return tl.sigmoid(x) * x

@triton.jit
def _k(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(o_ptr + i, _helper(tl.load(x_ptr + i, mask=i < n)), mask=i < n)

def port(x):
    o = torch.empty_like(x)
    _k[(1,)](x, o, x.numel(), BLOCK=128)
    return o

cases = portcheck.matrix(shapes=[(100,)], dtypes=[torch.float32], value_classes=("random",), strides=("contiguous",))
r = portcheck.run(port, port, cases)
print(json.dumps({"ok": r.ok, "errors": [k.get("error") for k in r.code["port"]]}))
"""


def test_a_kernel_defined_under_the_variable_runs_and_the_table_says_why_it_cannot_compile():
    out = subprocess.run([sys.executable, "-c", _UNDER_VARIABLE], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    doc = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert doc["ok"] and doc["errors"][0] and "TRITON_INTERPRET" in doc["errors"][0] and len(doc["errors"][0]) <= 600


@pytest.mark.parametrize("variable", [None, "1"])
def test_the_command_line_interprets_by_itself_with_or_without_the_variable(tmp_path, variable):
    source = _UNDER_VARIABLE.split("cases = ")[0].replace('os.environ["TRITON_INTERPRET"] = "1"', "")
    source += "\ndef original(x):\n    return port(x)\n\n\ndef cases():\n    return portcheck.matrix("
    source += "shapes=[(100,)], dtypes=[torch.float32], value_classes=('random',), strides=('contiguous',))\n"
    (tmp_path / "vpair.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    if variable:
        env["TRITON_INTERPRET"] = variable
    r = subprocess.run([sys.executable, "-m", "portcheck", "vpair:original", "vpair:port", "--cases", "vpair:cases"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "| registers |" in r.stdout and "did not compile" not in r.stdout
    assert ("TRITON_INTERPRET ignored" in r.stderr) == bool(variable)


@triton.jit
def _libdevice_ops(x_ptr, y_ptr, exact_ptr, approx_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    x = tl.load(x_ptr + i, mask=m)  # positive
    y = tl.load(y_ptr + i, mask=m)
    exact = (libdevice.sqrt_rn(x), libdevice.div_rn(y, x), libdevice.floor(y), libdevice.ceil(y), libdevice.abs(y))
    approx = (libdevice.rsqrt(x), libdevice.log(x), libdevice.exp2(y), libdevice.sin(y), libdevice.erf(y))
    for k in tl.static_range(5):
        tl.store(exact_ptr + k * BLOCK + i, exact[k], mask=m)
        tl.store(approx_ptr + k * BLOCK + i, approx[k], mask=m)


@triton.jit
def _libdevice_tanh(x_ptr, o_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(o_ptr + i, libdevice.tanh(tl.load(x_ptr + i)))


def test_libdevice_functions_run_in_cpu_mode_and_the_others_name_themselves():
    """As shipped, every libdevice function is an interpreter stub returning None; the CPU mode
    binds :data:`portcheck.interpret.LIBDEVICE`'s to ``tl.math`` (correctly rounded ones exact,
    transcendental ones numpy's) and makes the rest raise by name; after the block the stubs are
    back and the kernel compiles for sm_90."""
    from portcheck import interpret

    x = torch.rand(100, generator=torch.Generator().manual_seed(4)) * 50 + 1e-3
    y = torch.randn(100, generator=torch.Generator().manual_seed(5)) * 7
    exact, approx = torch.full((5, 128), 7.0), torch.full((5, 128), 7.0)
    with portcheck.cpu_mode():
        _libdevice_ops[(1,)](x, y, exact, approx, 100, BLOCK=128)
        with pytest.raises(Exception, match=r"libdevice\.tanh has no CPU-mode repair"):
            _libdevice_tanh[(1,)](x[:64], torch.empty(64), BLOCK=64)
    xd, yd = x.double(), y.double()
    want_exact = [xd.sqrt(), yd / xd, yd.floor(), yd.ceil(), yd.abs()]
    for k, want in enumerate(want_exact):  # correctly rounded: the float64 result rounded once
        assert torch.equal(exact[k, :100], want.float()), k
    want_approx = [xd.rsqrt(), xd.log(), torch.exp2(yd), yd.sin(), torch.erf(yd)]
    for k, want in enumerate(want_approx):
        assert torch.allclose(approx[k, :100].double(), want, rtol=2e-6, atol=1e-7), k
    assert {"rsqrt", "sqrt_rn", "div_rn", "exp"} <= set(interpret.LIBDEVICE)
    assert any(r.startswith("libdevice exp, ") for r in portcheck.REPAIRS)
    assert libdevice.rsqrt(1.0) is None and libdevice.tanh(1.0) is None  # the stubs, back
    launch = portcheck.code.Launch(_libdevice_ops, (x, y, exact, approx, 100), {"BLOCK": 128}, (1,))
    ptx = portcheck.code.compile_launch(launch)[0].asm["ptx"]
    assert "sqrt.rn." in ptx and "div.rn." in ptx and "rsqrt.approx." in ptx  # libdevice's, compiled
