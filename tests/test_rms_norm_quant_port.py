"""The third port (issue 42, notebook 10): vLLM's helion ``rms_norm_dynamic_per_token_quant``.

portcheck reports every CPU case bitwise equal (and every GPU case on a GPU); each step of the
ladder closes its gap and no earlier step passes (the sum's order shows on the rows built for
it); the interpreter repairs do what the GPU does and are taken back; the emulation that picks
those rows is the kernels' arithmetic; the arguments are checked; the GPU script's path runs on
a CPU with its timer faked."""

import dataclasses
import json

import numpy
import pytest
import torch
import triton
import triton.language as tl
from conftest import gpu_only, poisoned, randn
from triton.language.extra import libdevice

import portcheck
from inkling_kernels import _backend
from inkling_workbook.ports.rms_norm_quant import helion as H
from inkling_workbook.ports.rms_norm_quant import interp, table
from inkling_workbook.ports.rms_norm_quant import port as P
from inkling_workbook.ports.rms_norm_quant import steps as S
from inkling_workbook.ports.rms_norm_quant import sum_order as SO

needs_helion = pytest.mark.skipif(not H.available(), reason=H.INSTALL_HINT)
E4M3 = torch.float8_e4m3fn


def _u8(t):
    return t.contiguous().view(torch.uint8)


# ---- the tally ---------------------------------------------------------------------------------


@needs_helion
def test_portcheck_reports_every_cpu_case_equal():
    """The whole CPU matrix, raw bits of all three outputs, both sides deterministic, outputs
    poisoned first; the original's e4m3 result within one e4m3 value of float64 on finite rows."""
    cases = P.cpu_cases()
    assert len(cases) == 50 and len({c.name for c in cases}) == 50
    report = portcheck.run(
        H.rms_norm_quant_helion, P.rms_norm_quant, cases, reference=H.reference, code=False, reruns=(1, 2)
    )
    assert report.ok, report.to_markdown()
    assert all(o["mismatches"] == 0 for r in report.cases for o in r["outputs"])
    assert all(len(r["outputs"]) == (3 if " residual" in r["case"] else 2) for r in report.cases)


@gpu_only
@needs_helion
@pytest.mark.parametrize("half", ["gpu_base_cases", "gpu_table_cases"])
def test_portcheck_reports_every_gpu_case_equal(half):
    """The GPU matrix in spawned processes (helion runs one backend a process), in two halves
    that the test workers run side by side (each table entry compiles its own kernels)."""
    names = (H.__name__ + ":rms_norm_quant_helion", P.__name__ + ":rms_norm_quant", f"{P.__name__}:{half}")
    report = portcheck.run_parallel(*names, device="cuda", jobs=4, code=False)
    assert len(report.cases) == len(getattr(P, half)()) and report.ok, report.to_markdown()
    assert len(P.gpu_base_cases()) + len(P.gpu_table_cases()) == len(P.gpu_cases())


@needs_helion
def test_each_step_closes_its_gap_and_the_sum_order_is_the_last():
    """Step 0 differs on ordinary rows; step 2 (bf16 intermediates, the scale still divided) too;
    step 3 is equal everywhere but on the rows built for the sum's order; step 4 there too."""
    plain = {"3x3200 bfloat16 random", "3x3200 bfloat16 random residual"}
    picked = [c for c in P.cpu_cases() if c.name.rsplit(" seed=", 1)[0] in plain or "sum_order" in c.name]
    order = [c for c in picked if "sum_order" in c.name]
    assert len(picked) == 4 and len(order) == 2
    for name in ("naive", "bf16_normalized"):
        rep = portcheck.run(H.rms_norm_quant_helion, S.step_fn(name), picked[:2], code=False, reruns=1)
        assert not rep.ok and all(r["mismatches"] > 0 for r in rep.cases), name
    three = portcheck.run(H.rms_norm_quant_helion, S.step_scale_by_reciprocal, picked, code=False, reruns=1)
    assert [r["ok"] for r in three.cases] == ["sum_order" not in c.name for c in picked]
    four = portcheck.run(H.rms_norm_quant_helion, S.step_config_tile_sum, order, code=False, reruns=1)
    assert four.ok


# ---- the rows where the order shows ------------------------------------------------------------


@needs_helion
def test_the_emulation_is_the_kernels_arithmetic_and_the_picks_separate_the_orders():
    """``sum_order.cpu_outputs`` gives the original's bytes with its tile (1024) and step 3's with
    the one-tile order (4096); the recorded picks still separate the two (numpy's pairwise sum)."""
    x, w, r = SO.sum_order_rows(4, 3200, 1024, 4096, 3200)
    with portcheck.interpret.cpu_mode():
        orig = H.rms_norm_quant_helion(x, w, residual=r.clone(), config_rows=4096)
        one_tile = S.step_scale_by_reciprocal(x, w, residual=r.clone(), config_rows=4096)
    tiled, _ = SO.cpu_outputs(x, w, r, 1024)
    whole, _ = SO.cpu_outputs(x, w, r, 4096)
    assert torch.equal(_u8(orig[0]), _u8(tiled)) and torch.equal(_u8(one_tile[0]), _u8(whole))
    assert (_u8(tiled) != _u8(whole)).any(dim=1).all()


def test_tile_sums_add_tile_sums_in_order():
    sq = numpy.random.default_rng(1).random((3, 300), dtype=numpy.float32)
    got = SO.tile_sums(sq, 128)
    want = [numpy.float32(0) + sq[i, :128].sum() + sq[i, 128:256].sum() + sq[i, 256:].sum() for i in range(3)]
    assert numpy.array_equal(got, numpy.array(want, dtype=numpy.float32))


# ---- the interpreter repairs --------------------------------------------------------------------


@triton.jit
def _probe_rsqrt(x_ptr, rs_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(rs_ptr + i, libdevice.rsqrt(tl.abs(x.to(tl.float32)) + 1.0), mask=i < n)


@triton.jit
def _probe_max(x_ptr, mx_ptr, mn_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)[None, :]
    x = tl.load(x_ptr + i, mask=i < n, other=float("-inf"))
    tl.store(mx_ptr + tl.arange(0, 1), tl.max(x, axis=1).to(tl.float32))
    tl.store(mn_ptr + tl.arange(0, 1), tl.min(tl.where(i < n, x, 0.0), axis=1).to(tl.float32))


def test_interpreter_repair_binds_rsqrt_and_bf16_max_needs_none(gen):
    """Inside ``interp.repairs``: ``libdevice.rsqrt`` is ``1 / sqrt``; portcheck's CPU mode binds
    it alike (the same bits); outside both, on the library's CPU path, the unbound stub fails
    again. ``tl.max``/``tl.min`` over bf16 (negatives, masked ``-inf``) reduce values with or
    without it (Triton widens bf16 to fp32 first)."""
    n = 200
    x = randn((n,), torch.bfloat16, gen, "cpu", scale=3.0)
    x[:3] = torch.tensor([-100.0, 7.5, -0.0])
    rs, mx, mn = poisoned((n,), torch.float32, "cpu"), torch.empty(1), torch.empty(1)
    with portcheck.interpret.cpu_mode(), interp.repairs():
        _probe_rsqrt[(1,)](x, rs, n, BLOCK=256)
        _probe_max[(1,)](x, mx, mn, n, BLOCK=256)
    want = 1 / numpy.sqrt(x.float().abs().numpy() + numpy.float32(1))
    assert torch.equal(rs.view(torch.int32), torch.from_numpy(want).view(torch.int32))
    assert mx.item() == x.float().max().item() and mn.item() == min(0.0, x.float().min().item())
    rs2 = poisoned((n,), torch.float32, "cpu")
    with portcheck.interpret.cpu_mode():
        _probe_rsqrt[(1,)](x, rs2, n, BLOCK=256)
        _probe_max[(1,)](x, mx, mn, n, BLOCK=256)
    assert torch.equal(rs2.view(torch.int32), rs.view(torch.int32))
    assert mx.item() == x.float().max().item() and mn.item() == min(0.0, x.float().min().item())
    with pytest.raises(Exception, match="None"):
        _backend.launch(_probe_rsqrt, (1,), torch.device("cpu"), x, rs, n, BLOCK=256)
    assert vars(libdevice).get("rsqrt") is not interp._libdevice_rsqrt


# ---- the arguments -----------------------------------------------------------------------------


def _xw(m=2, h=64, dtype=torch.bfloat16):
    return torch.randn(m, h).to(dtype), torch.randn(h).to(dtype)


@pytest.mark.parametrize(
    "make, err, words",
    [
        (lambda: ((_xw()[0].float(), _xw()[1]), {}), TypeError, "x must have dtype"),
        (lambda: ((torch.randn(2, 3, 4).bfloat16(), _xw()[1]), {}), ValueError, "x must be 2-D"),
        (lambda: ((_xw(h=128)[0][:, ::2], _xw()[1]), {}), ValueError, "x must be contiguous"),
        (lambda: ((_xw()[0], _xw()[1].half()), {}), TypeError, "weight must have dtype"),
        (lambda: ((_xw()[0], _xw(h=63)[1]), {}), ValueError, "weight must be a contiguous"),
        (lambda: (_xw(), {"epsilon": -1.0}), ValueError, "epsilon"),
        (lambda: (_xw(), {"epsilon": "1e-6"}), ValueError, "epsilon"),
        (lambda: (_xw(), {"scale_ub": torch.ones(2)}), ValueError, "scale_ub must hold one element"),
        (lambda: (_xw(), {"scale_ub": torch.ones(1, dtype=torch.float64)}), TypeError, "scale_ub must have dtype"),
        (lambda: (_xw(), {"residual": torch.randn(2, 63).bfloat16()}), ValueError, "residual must be"),
        (lambda: (_xw(), {"out": torch.empty(2, 64, dtype=E4M3)}), TypeError, "out must be a"),
        (lambda: (_xw(), {"out": (torch.empty(2, 64), torch.empty(2, 1))}), TypeError, r"out\[0\] must have dtype"),
        (lambda: (_xw(), {"out": (torch.empty(2, 64, dtype=E4M3), torch.empty(2))}), ValueError, r"out\[1\] must be"),
        (lambda: (_xw(), {"config_rows": 0}), ValueError, "config_rows"),
        (lambda: (_xw(), {"config": (1024, 64, 4)}), TypeError, "config must be a LaunchConfig"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(make, err, words):
    args, kwargs = make()
    with pytest.raises(err, match=words):
        P.rms_norm_quant(*args, **kwargs)


def test_residual_aliasing_x_and_grad_are_refused():
    x, w = _xw()
    with pytest.raises(ValueError, match="residual must not be x"):
        P.rms_norm_quant(x, w, residual=x)
    with pytest.raises(ValueError, match="weight requires grad"):
        P.rms_norm_quant(x.half(), w.half().requires_grad_())


# ---- the production config and the port's tiles ------------------------------------------------


def test_vllm_picker_rule_and_the_recorded_entries():
    assert H.pick_key(1, 384) == (2048, 1) and H.pick_key(3, 3200) == (4096, 4)
    assert H.pick_key(2049, 4096) == (4096, 4096) and H.pick_key(100_000, 5120) == (4096, 4096)
    assert H.pick_key(600, 2048) == (2048, 1024) and H.pick_key(5, 3072) == (2048, 8)
    assert H.reduction_tile(2049, 4096) == 1024 and H.reduction_tile(2048, 4096) == 4096
    assert H.reduction_tile(1, 384) == 2048  # helion takes the tile as it is, wider than the row
    assert H.config_label(4096, 4096) == "helion H200 table 4096/t4096: 1024|4096|2048/1w/5st"
    with pytest.raises(ValueError, match="hidden_size=8192"):
        H.production_config(1, 8192)
    entries = H.table()["entries"]
    assert len(entries) == 26 and all(len(e["config"]["indexing"]) == 12 for e in entries)
    assert sum(e["config"]["block_sizes"][0] < e["hidden_size"] for e in entries) == 1


def test_launch_config_takes_the_configs_reduction_tile_and_warps():
    assert P.launch_config(4096, 4096) == P.LaunchConfig(1024, 4096, 1, 4096, 2048)
    assert P.launch_config(1, 384) == P.LaunchConfig(2048, 512, 8, 2048, 2048)
    assert P.launch_config(64, 5120).label == "4096|8192q4096/16w"
    assert P.launch_config(1024, 2048).label == "2048|2048q1024/4w"  # the third pass in the config's tile
    # the maximum's tile is the config's second block size: at H = 5120 the row (one 8192 tile in
    # registers) takes its maximum over two 4096-column tiles, as the original (a NaN-only tile
    # gives NaN on the GPU, where tl.max drops a NaN against the masked lanes)
    assert P.launch_config(64, 5120).MBLOCK == H.production_config(64, 5120)["block_sizes"][1] == 4096


@needs_helion
def test_the_maximum_takes_the_originals_tiles_where_a_nan_shows():
    """A NaN makes every element of its row NaN. At H = 5120 the original takes the maximum over
    4096-column tiles: the first, all NaN, gives NaN (a NaN loses only to a number, on the GPU
    and in the interpreter alike), the NaN-propagating combine keeps it. One 8192-column tile
    with masked zeros gives the floor. The bits are compared: in CPU mode the NaN scale is the
    bf16 ``n``'s canonical NaN (converted as ``cvt.rn.bf16.f32``) widened, on both sides (numpy's
    fp32 arithmetic keeps it; the GPU's writes its own canonical NaN)."""
    x, w = randn((1, 5120), torch.bfloat16, torch.Generator().manual_seed(5), "cpu"), torch.ones(5120).bfloat16()
    x[0, 7] = float("nan")
    with portcheck.interpret.cpu_mode():  # both sides' repairs (Triton 3.6's interpreter has no bf16 constant)
        orig, port = H.rms_norm_quant_helion(x, w)[1], P.rms_norm_quant(x, w)[1]
        one_tile = P.rms_norm_quant(x, w, config=dataclasses.replace(P.launch_config(1, 5120), MBLOCK=8192))[1]
    assert torch.isnan(orig).all() and torch.equal(orig.view(torch.int32), port.view(torch.int32))
    assert hex(port.view(torch.int32).item() & 0xFFFFFFFF) == "0x7fff0000"
    assert one_tile.item() == torch.tensor(P.MIN_SCALE).item()


def test_the_tiled_passes_write_the_bits_of_the_row_in_registers(gen):
    """BLOCK < H (the loop path, rows wider than 8192 in production) gives the bits of the whole
    row in one tile: only the reduction tile decides them. Every element written (poisoned)."""
    x = randn((3, 3200), torch.bfloat16, gen, "cpu", scale=3.0)
    w = randn((3200,), torch.bfloat16, gen, "cpu") + 1
    r = randn((3, 3200), torch.bfloat16, gen, "cpu")
    got = {}
    for block in (512, 4096):
        out = (poisoned((3, 3200), torch.uint8, "cpu").view(E4M3), poisoned((3, 1), torch.float32, "cpu"))
        got[block] = P.rms_norm_quant(x, w, residual=r.clone(), out=out, config=P.LaunchConfig(1024, block, 4))
    for a, b in zip(got[512], got[4096]):
        assert torch.equal(_u8(a), _u8(b))
    assert not torch.isnan(got[512][0].float()).any()


# ---- the GPU script's path, on a CPU -------------------------------------------------------------


def _fake_time_calls(calls, passes, rounds=10, after_pass=None):
    from inkling_workbook.measure.timing import Timing

    for fn in calls.values():
        fn()
    return {k: Timing.from_passes([[1.0 + 0.5 * i, 1.1 + 0.5 * i], [1.05 + 0.5 * i, 1.2 + 0.5 * i]], 100)
            for i, k in enumerate(calls)}  # fmt: skip


@needs_helion
def test_the_gpu_script_runs_end_to_end_on_the_cpu(monkeypatch, tmp_path):
    """``bench.run`` with the timer faked (eager torch for torch.compile): the portcheck record with
    every step's tally, a row per implementation with its bits, the provenance; parts alone."""
    from inkling_workbook.measure import provenance, timing
    from inkling_workbook.ports.rms_norm_quant import bench as B

    monkeypatch.setattr(timing, "time_calls", _fake_time_calls)
    monkeypatch.setattr(provenance, "gpu_state", lambda: {})
    monkeypatch.setattr(B, "compiled_formula", lambda *a: H.formula)
    cases = [next(c for c in P.cpu_cases() if c.name == "1x384 bfloat16 random seed=0"), P.sum_order_case(3200)]
    with pytest.raises(ValueError, match="parts"):
        B.run(tmp_path, device="cpu", cases=cases, parts=("timing",))
    with pytest.raises(FileNotFoundError, match="check"):
        B.run(tmp_path, device="cpu", cases=cases, parts=("steps",), progress=False)
    doc = B.run(tmp_path, device="cpu", cases=cases, shapes=[(2, 384)], progress=False)
    assert doc["ok"] and doc["tally"] == "2/2 cases equal and deterministic"
    pc = json.loads(doc["portcheck"].read_text())
    assert pc["provenance"]["git_commit"] and doc["portcheck"].with_suffix(".md").exists()
    assert [s["equal_cases"] for s in pc["steps"]] == [0, 0, 1, 1, 2]
    rows = doc["rows"]
    assert {r["impl"] for r in rows} == set(B.IMPLS) and len(rows) == 3
    by = {r["impl"]: r for r in rows}
    assert by["port"]["bits_equal_original"] and by["port"]["vs_helion"] == "win"
    meta = json.loads(doc["bench_json"].read_text())
    assert meta["port_bits_equal_all"] and meta["port_vs_compile"] == {"win": 1, "tie": 0, "loss": 0}
    assert "| 2 | 384 |" in B.summary(rows)
    again = B.run(tmp_path, device="cpu", cases=cases, parts=("sweep",), shapes=[(1, 384)], progress=False)
    assert again["ok"] and json.loads(again["portcheck"].read_text())["steps"] == pc["steps"]


def _config_groups() -> list[tuple[int, int]]:
    """One (hidden_size, num_tokens) of the table per distinct (hidden size, block sizes, warps)."""
    seen = {}
    for e in table.table()["entries"]:
        c = e["config"]
        seen.setdefault(
            (e["hidden_size"], tuple(c["block_sizes"]), c["num_warps"]), (e["hidden_size"], e["num_tokens"])
        )
    return sorted(seen.values())


@needs_helion
@pytest.mark.parametrize("hidden, rows", _config_groups() + [(5120, 64), (5120, 4096), (3200, 4096), (384, 1)])
def test_the_sum_reduces_in_the_originals_tree_on_sm90(hidden, rows):
    """Compiled for sm_90 on the CPU, every config the table holds (one per distinct tiles and
    warps) and widths off the table: every tile sum of the port, and of the last step, reduces
    the tile shape, in the register layout and with the warps, of the original's (helion 1.4
    generates pointer loads for this kernel on the H200 too: its descriptors need 16 bytes a
    row block), so the sums add in the same order. The quantizing pass's tile matters: a store
    of the whole row's e4m3 bytes gave the row 16 elements a thread, carried back to the sum, on
    7 of the 26 entries (the H200 showed one differing element at 1024 x 2048)."""
    from inkling_workbook.ports.rms_norm_quant import layouts

    x = torch.randn(1, hidden).to(torch.bfloat16)
    w, r = torch.randn(hidden).to(torch.bfloat16), torch.randn(1, hidden).to(torch.bfloat16)
    tiles = -(-hidden // table.reduction_tile(rows, hidden))
    last = S.step_fn(S.STEP_NAMES[-1])
    got = {
        name: layouts.reductions(lambda fn=fn: fn(x, w, residual=r.clone(), config_rows=rows))
        for name, fn in (("orig", H.rms_norm_quant_helion), ("port", P.rms_norm_quant), ("step", last))
    }
    orig, mine = got["orig"], got["port"]
    assert len(orig) == 2 and orig[0]["layout"].startswith("#ttg.blocked")  # the sum's loop body, then the max
    assert len(mine) in (tiles + 1, tiles + 2)  # the tile sums (unrolled), then the maximum (once or per tile)
    assert all(m == orig[0] for m in mine[:tiles]) and got["step"][0] == orig[0]


@needs_helion
def test_the_one_tile_step_reduces_another_tree_on_sm90():
    """The naive step (one tile over the row, 4 warps) sums in another tree than the original
    with the prefill config (tile 1024, 1 warp): the layout check can tell trees apart."""
    from inkling_workbook.ports.rms_norm_quant import layouts

    x, w, r = (torch.randn(2, 4096).to(torch.bfloat16), torch.randn(4096).to(torch.bfloat16),
               torch.randn(2, 4096).to(torch.bfloat16))  # fmt: skip
    orig = layouts.reductions(lambda: H.rms_norm_quant_helion(x, w, residual=r.clone(), config_rows=4096))
    naive = layouts.reductions(lambda: S.step_naive(x, w, residual=r.clone(), config_rows=4096))
    assert naive[0] != orig[0]


def test_every_gpu_case_and_sweep_shape_picks_a_recorded_config():
    from inkling_workbook.ports.rms_norm_quant import bench as B

    names = [c.name for c in P.gpu_cases()] + [c.name for c in P.gpu_quick_cases()]
    shapes = [tuple(int(v) for v in n.split()[0].split("x")) for n in names] + B.sweep_shapes() + B.sweep_shapes(True)
    for M, hidden in shapes:
        table.production_config(M, hidden)  # raises for an entry the table does not hold
    assert any(table.reduction_tile(M, hidden) < hidden for M, hidden in shapes)  # the prefill order is covered
    for matrix in (P.gpu_cases(), P.gpu_quick_cases()):
        assert len({c.name for c in matrix}) == len(matrix)


def _picked(matrix) -> set[tuple[int, int]]:
    out = set()
    for c in matrix:
        M, H = (int(v) for v in c.name.split()[0].split("x"))
        rows = next((int(w.split("=")[1]) for w in c.name.split() if w.startswith("config_rows=")), M)
        out.add(table.pick_key(rows, H))
    return out


def test_the_gpu_matrices_check_every_table_entry_their_sweeps_time():
    """The check, not the timing, must find a config whose bits differ (the quick sweep found one
    at (2048, 1024) on the H200 when no case of the quick matrix picked that entry): the full
    GPU matrix runs every entry of the table, each on a batch as large as it was tuned for, and
    the quick matrix every entry the quick sweep picks."""
    from inkling_workbook.ports.rms_norm_quant import bench as B

    every = {(e["hidden_size"], e["num_tokens"]) for e in table.table()["entries"]}
    assert _picked(P.gpu_cases()) == every
    assert {table.pick_key(M, H) for M, H in B.sweep_shapes()} <= every
    assert {table.pick_key(M, H) for M, H in B.sweep_shapes(True)} <= _picked(P.gpu_quick_cases())
    shapes = {tuple(int(v) for v in c.name.split()[0].split("x")) for c in P.gpu_cases() if "config_rows" not in c.name}
    assert all((t, h) in shapes for h, t in every)  # each entry on a batch of its own num_tokens rows


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_the_cli_command_refuses_without_a_gpu():
    from inkling_workbook import cli

    with pytest.raises(SystemExit, match="CUDA GPU"):
        cli.main(["rms-norm-quant", "--quick"])
    with pytest.raises(SystemExit):
        cli.main(["rms-norm-quant", "--part", "timing"])  # argparse: not a part
