"""GPU: the capture adapters on real Triton launches (skipped without CUDA).

Stand-ins for FlagGems' idioms, written here: a kernel-entry wrapper in front
of the kernel, a bare @triton.heuristics, a StridedBuffer-like object passed
to the kernel and a log call.  Autotune keys over sizes that change:
test_autotune_select.py."""

from __future__ import annotations

import logging
import math

import pytest
import torch

import trident

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from trident.capture import adapters  # noqa: E402

DEV = "cuda"
log = logging.getLogger("trident_test_adapters_gpu")


@triton.jit
def _copy_scale(X, Y, n, s, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(Y + i, tl.load(X + i, mask=m) * s, mask=m)


class Entry(triton.KernelInterface):
    """Like FlagGems' LibEntry: a cache in front of `fn`; launching it is
    launching `fn`."""

    def __init__(self, fn):
        self.fn = fn
        self.arg_names = fn.arg_names

    def run(self, *args, grid, **kwargs):
        return self.fn[grid](*args, **kwargs)


trident.register_kernel_wrapper(Entry, "fn")
_entry = Entry(_copy_scale)


def _through_entry(x):
    log.debug("entry %s", "call")
    y = torch.empty_like(x)
    n = x.numel()
    _entry[(triton.cdiv(n, 256),)](x, y, n, 2.0, BLOCK=256)
    return y


def test_kernel_entry_wrapper_and_quiet_logger():
    f = trident.jit(_through_entry, strict=True)
    for n in (1000, 1000, 4096, 17):
        x = torch.randn(n, device=DEV)
        torch.testing.assert_close(f(x), x * 2.0)
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and sum(st["hits"]) >= 1
    assert "logger_quiet" in trident.explain(f)


@triton.heuristics({"BLOCK": lambda args: 128 if args["n"] < 2048 else 512,
                    "num_warps": lambda args: 4})
@triton.jit
def _heur_scale(X, Y, n, s, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(Y + i, tl.load(X + i, mask=m) * s, mask=m)


def _bare_heuristics(x):
    y = torch.empty_like(x)
    n = x.numel()
    _heur_scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, 3.0)
    return y


def test_bare_heuristics_sizes_on_both_sides():
    f = trident.jit(_bare_heuristics, strict=True)
    for n in (100, 100, 5000, 5000, 333, 9000):
        x = torch.randn(n, device=DEV)
        torch.testing.assert_close(f(x), x * 3.0)
    assert trident.stats(f)["fallbacks"] == 0


class StridedBuffer:
    """Like FlagGems' StridedBuffer (the adapter is registered for this class
    below, as it is for FlagGems' own)."""

    def __init__(self, base, shape=None, strides=None, dtype=None, offset=0):
        self._base = base
        self.dtype = dtype or base.dtype
        self.offset = offset
        self._data_ptr = base.data_ptr() + offset * self.dtype.itemsize
        self.shape = tuple(shape if shape is not None else base.shape)
        self._strides = tuple(strides if strides is not None else base.stride())
        self.device = base.device
        self.ndim = len(self.shape)

    def stride(self):
        return self._strides

    def numel(self):
        return math.prod(self.shape)

    def unwrap(self):
        return self._base

    def data_ptr(self):
        return self._data_ptr


adapters._TENSOR_WRAPPERS[(StridedBuffer.__module__, "StridedBuffer")] = "_strided_buffer"


def _wrapper(in0, *, out0):
    n = out0.numel()
    tiles = math.prod(triton.cdiv(s, 256) for s in out0.shape)
    _copy_scale[(tiles,)](in0, out0, n, 5.0, BLOCK=256, num_warps=4)
    return out0


def _strided(x, offset):
    out = torch.empty_like(x)
    a = StridedBuffer(x, (x.numel() - offset,), (1,), offset=offset)
    o = StridedBuffer(out, (x.numel() - offset,), (1,), offset=offset)
    return _wrapper(a, out0=o).unwrap()


@pytest.mark.parametrize("offset", [0, 3])
def test_strided_buffer_argument(offset):
    f = trident.jit(_strided, strict=True)
    for n in (1000, 1000, 64):
        x = torch.randn(n, device=DEV)
        got = f(x, offset)
        want = _strided(x, offset)
        torch.testing.assert_close(got[offset:], want[offset:])
    assert trident.stats(f)["fallbacks"] == 0


def _grid4(x):
    y = torch.empty_like(x)
    n = x.numel()
    _copy_scale[(triton.cdiv(n, 128), 1, 1, 1)](x, y, n, 4.0, BLOCK=128)
    return y


def test_grid_of_rank_four_uses_the_first_three():
    # Triton's launcher ignores grid[3:]; FlagGems' cumsum passes (M, n, 1, 1)
    f = trident.jit(_grid4, strict=True)
    for n in (300, 300, 5000):
        x = torch.randn(n, device=DEV)
        torch.testing.assert_close(f(x), x * 4.0)
    assert trident.stats(f)["fallbacks"] == 0
