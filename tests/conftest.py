import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
gpu_only = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (runs compiled kernels on the H200 job)")


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture
def gen():
    """A fresh seeded generator per test: fresh random data, reproducible failures."""
    return torch.Generator().manual_seed(1234)


def randn(shape, dtype, gen, device, scale=1.0):
    return (torch.randn(shape, generator=gen) * scale).to(dtype).to(device)


# ---- guarded outputs -------------------------------------------------------------------------
# Every output a test hands an op can sit inside a larger buffer: GUARD_BYTES of sentinel bytes
# before and after it and, for strided rows, in the gaps between its rows. The autouse fixture
# below checks, after each test, that no byte outside the outputs' own elements changed.

GUARD_BYTES = 256
_GUARDS: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]] = []


def _sentinel(n: int, device) -> torch.Tensor:
    """Position-dependent bytes (no run of one value), so a stray write of any value shows."""
    idx = torch.arange(n, dtype=torch.int64 if n * 37 >= 2**31 else torch.int32, device=device)
    return ((idx * 37 + 11) % 251).to(torch.uint8)


def guarded(shape, dtype, device, strides=None, fill=None, name="output") -> torch.Tensor:
    """A tensor of ``shape`` and ``dtype`` (``strides`` in elements, default contiguous) inside a
    guarded buffer, filled with ``fill`` (default poison: NaN, or 0xFF bytes). Checked after the test."""
    shape = tuple(shape)
    if torch.compiler.is_compiling():  # traced inside a compiled test function: a plain poisoned tensor
        t = torch.empty(shape, dtype=dtype, device=device)
        return t.fill_(fill) if fill is not None else t.view(torch.uint8).fill_(0xFF).view(dtype)
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= max(n, 1)
    strides = tuple(strides)
    es = torch.empty((), dtype=dtype).element_size()
    span = (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * es if all(n > 0 for n in shape) else 0
    total = 2 * GUARD_BYTES + span
    base = _sentinel(total, device)
    view = base[GUARD_BYTES:].view(torch.uint8).as_strided((*shape, es), (*[s * es for s in strides], 1))
    covered = torch.zeros(total, dtype=torch.uint8, device=device)
    covered[GUARD_BYTES:].as_strided((*shape, es), (*[s * es for s in strides], 1)).fill_(1)
    out = base[GUARD_BYTES : GUARD_BYTES + span].view(dtype).as_strided(shape, strides) if span else None
    if out is None:
        out = torch.empty(shape, dtype=dtype, device=device)
    else:
        if fill is None:
            fill = float("nan") if dtype.is_floating_point and dtype.itemsize > 1 else None
        if fill is None:
            view.fill_(0xFF)
        else:
            out.fill_(fill)
    _GUARDS.append((base, base.clone(), covered, name))
    del view
    return out


def guard_violations() -> list[str]:
    """The guarded buffers of this test with a byte changed outside their outputs."""
    bad = []
    if HAS_CUDA:
        torch.cuda.synchronize()
    for base, snapshot, covered, name in _GUARDS:
        hit = (base != snapshot) & (covered == 0)
        if bool(hit.any()):
            where = torch.nonzero(hit).flatten()
            bad.append(f"{name}: {where.numel()} guard bytes changed, first at buffer byte {int(where[0])}")
    return bad


@pytest.fixture(autouse=True)
def _check_guards():
    _GUARDS.clear()
    yield
    bad = guard_violations()
    _GUARDS.clear()
    assert not bad, "writes outside the outputs: " + "; ".join(bad)


def poisoned(shape, dtype, device):
    """An output buffer full of NaN (or 0xFF bytes), guarded (see :func:`guarded`): any element a
    kernel leaves unwritten shows, and so does any byte it writes past the buffer."""
    return guarded(shape, dtype, device)


# The timing code sets dynamo's config for its sweeps (automatic dynamic shapes off, larger cache
# limits: inkling_workbook.measure.timing._configure_dynamo); a test that runs it must not change
# what a later test in the same process compiles (the compile-routing tests count graphs).
_DYNAMO_KEYS = ("automatic_dynamic_shapes", "assume_static_by_default", "cache_size_limit",
                "accumulated_cache_size_limit")  # fmt: skip


@pytest.fixture(autouse=True)
def _restore_dynamo_config():
    cfg = torch._dynamo.config
    saved = {k: getattr(cfg, k) for k in _DYNAMO_KEYS}
    yield
    for k, v in saved.items():
        setattr(cfg, k, v)


@pytest.fixture(scope="module")
def fetched():
    """The pinned anchors (fetched if absent; the tests that need them skip without them)."""
    from inkling_workbook.measure import anchors as A

    for dist in A.ANCHORS:
        if not A.is_fetched(dist):
            try:
                A.fetch([dist])
            except Exception as e:
                pytest.skip(f"anchor {dist} not fetched and fetching failed: {e}")
