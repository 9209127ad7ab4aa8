"""No memory growth over many warm calls: neither Python allocations
(tracemalloc) nor process RSS, nor leaked references to the arguments."""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc

import pytest
import torch

import trident

N_CALLS = 100_000
WARMUP = 2_000


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _measure(call, n=N_CALLS):
    """(Python bytes still allocated, RSS growth) after `n` warm calls."""
    for _ in range(WARMUP):
        call()
    gc.collect()
    rss0 = _rss_bytes()
    tracemalloc.start()
    try:
        snap0 = tracemalloc.take_snapshot()
        for _ in range(n):
            call()
        gc.collect()
        snap1 = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    rss1 = _rss_bytes()
    flt = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = snap1.filter_traces(flt).compare_to(snap0.filter_traces(flt), "lineno")
    grown = sum(d.size_diff for d in diff if d.size_diff > 0)
    return grown, rss1 - rss0, diff


def _assert_no_growth(call, n=N_CALLS):
    grown, rss, diff = _measure(call, n)
    top = "\n".join(str(d) for d in diff[:5])
    # A leaked 1-element tensor per call would be >= 100 bytes * 100,000.
    assert grown < 256 * 1024, f"Python allocations grew by {grown} bytes:\n{top}"
    assert rss < 16 * 1024 * 1024, f"RSS grew by {rss / 2**20:.1f} MiB"


def test_no_growth_over_warm_calls_returning_a_tensor(h):
    def fn(x, w):
        return x * w + 1

    f = trident.jit(fn)
    x, w = torch.randn(8), torch.randn(8)
    h.check(f, fn, x, w)
    _assert_no_growth(lambda: f(x, w))
    assert trident.stats(f)["misses"] == 1


def test_no_growth_over_warm_calls_with_structures_and_kwargs(h):
    def fn(xs, d, *, k: int = 2):
        return {"a": xs[0] + d["b"], "b": (xs[1] * k, xs[0])}, k, None

    f = trident.jit(fn)
    xs, d = (torch.randn(4), torch.randn(4)), {"b": torch.randn(4)}
    f(xs, d, k=3)
    f(xs, d, k=3)
    _assert_no_growth(lambda: f(xs, d, k=3))
    assert trident.stats(f)["misses"] <= 2


def test_no_growth_over_warm_calls_on_dynamic_version(h):
    def fn(x):
        return x.sum(0), x.shape[0] * 2

    f = trident.jit(fn)
    f(torch.randn(3, 2))
    f(torch.randn(4, 2))
    xs = [torch.randn(n, 2) for n in range(5, 15)]
    it = iter(range(10**9))
    _assert_no_growth(lambda: f(xs[next(it) % 10]))
    assert trident.stats(f)["versions"] == 2


def test_no_growth_on_the_error_path(h):
    def fn(x, idx):
        return torch.index_select(x, 0, idx)

    f = trident.jit(fn)
    x, good, bad = torch.randn(4), torch.tensor([1]), torch.tensor([9])
    f(x, good)

    def call():
        try:
            f(x, bad)
        except IndexError:
            pass

    _assert_no_growth(call, n=20_000)


def test_returning_inputs_does_not_leak_references(h):
    def fn(x, y):
        return x, (y, x + 1), y.t()

    f = trident.jit(fn)
    x, y = torch.randn(3), torch.randn(2, 2)
    f(x, y)
    f(x, y)
    gc.collect()
    rx, ry = sys.getrefcount(x), sys.getrefcount(y)
    for _ in range(10_000):
        f(x, y)
    gc.collect()
    assert sys.getrefcount(x) == rx
    assert sys.getrefcount(y) == ry


def test_arguments_refcounts_unchanged_by_warm_calls(h):
    def fn(x, scale: float, *rest, key=None, **kw):
        return x * scale + kw["b"] + rest[0]

    f = trident.jit(fn)
    x, r, b = torch.randn(3), torch.randn(3), torch.randn(3)
    k = object()
    f(x, 2.0, r, key=k, b=b)
    f(x, 2.0, r, key=k, b=b)
    gc.collect()
    before = [sys.getrefcount(o) for o in (x, r, b, k)]
    for _ in range(10_000):
        f(x, 2.0, r, key=k, b=b)
    gc.collect()
    assert [sys.getrefcount(o) for o in (x, r, b, k)] == before


def test_results_are_freed(h):
    import weakref

    def fn(x):
        return x * 2, x.view(-1)

    f = trident.jit(fn)
    x = torch.randn(2, 2)
    f(x)
    out = f(x)
    refs = [weakref.ref(o) for o in out]
    del out
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.parametrize("kind", ["hit", "fallback"])
def test_arguments_not_kept_alive_after_the_call(h, kind, record_warnings):
    import weakref

    def fn(x):
        if kind == "fallback":
            print(end="")
        return x + 1

    f = trident.jit(fn)
    with record_warnings():
        f(torch.randn(3))
        x = torch.randn(3)
        f(x)
    r = weakref.ref(x)
    del x
    gc.collect()
    assert r() is None
