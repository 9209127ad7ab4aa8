"""The error path: exceptions are eager's (type and message), and an error
never adds a version, never recompiles, never falls back to eager."""

from __future__ import annotations

import pytest
import torch

import trident


def _raises_like_eager(f, fn, *args, **kwargs):
    """Both raise; same exception type and message.  Returns the exception."""
    with pytest.raises(Exception) as ee:
        fn(*args, **kwargs)
    with pytest.raises(Exception) as ej:
        f(*args, **kwargs)
    assert type(ej.value) is type(ee.value)
    assert str(ej.value) == str(ee.value)
    return ej.value


def _mm(a, b):
    return a @ b


def _counts(f):
    st = trident.stats(f)
    return st["versions"], st["captures"], st["fallbacks"]


def test_matmul_shape_mismatch_after_a_version(h):
    f = trident.jit(_mm)
    h.check(f, _mm, h.rand(2, 3), h.rand(3, 4))
    before = _counts(f)
    for _ in range(3):
        e = _raises_like_eager(f, _mm, h.rand(2, 3), h.rand(4, 5))
        assert isinstance(e, RuntimeError)
        assert _counts(f) == before
    assert trident.stats(f)["fallback_reason"] is None
    # Still compiled: the good shape hits its version.
    hits = trident.stats(f)["hits"][0]
    h.check(f, _mm, h.rand(2, 3), h.rand(3, 4))
    assert trident.stats(f)["hits"][0] == hits + 1


def test_matmul_shape_mismatch_on_the_first_call(h):
    f = trident.jit(_mm)
    for _ in range(2):
        _raises_like_eager(f, _mm, h.rand(2, 3), h.rand(4, 5))
        assert _counts(f) == (0, 0, 0)
    h.check(f, _mm, h.rand(2, 3), h.rand(3, 4))
    assert _counts(f) == (1, 1, 0)


def test_matmul_shape_mismatch_with_dynamic_version(h):
    f = trident.jit(_mm, dynamic=True)
    h.check(f, _mm, h.rand(2, 3), h.rand(3, 4))
    h.check(f, _mm, h.rand(5, 6), h.rand(6, 2))
    before = _counts(f)
    for _ in range(2):
        _raises_like_eager(f, _mm, h.rand(5, 6), h.rand(7, 2))
    assert _counts(f) == before
    h.check(f, _mm, h.rand(7, 3), h.rand(3, 9))
    assert _counts(f) == before


def _isel(x, idx):
    return torch.index_select(x, 0, idx) * 2


def test_error_inside_a_version_that_passed_guards(h):
    f = trident.jit(_isel)
    h.check(f, _isel, h.rand(5, 3), torch.tensor([0, 4, 1]))
    before = dict(trident.stats(f))
    for bad in ([0, 7, 1], [-9, 0, 0], [5, 5, 5]):
        e = _raises_like_eager(f, _isel, h.rand(5, 3), torch.tensor(bad))
        assert isinstance(e, IndexError)
    after = trident.stats(f)
    assert after["misses"] == before["misses"]
    assert after["captures"] == before["captures"]
    assert after["versions"] == before["versions"] == 1
    assert after["fallbacks"] == 0
    # The version still serves good calls.
    h.check(f, _isel, h.rand(5, 3), torch.tensor([2, 3, 0]))
    assert trident.stats(f)["misses"] == before["misses"]


def test_error_after_an_in_place_op_leaves_the_mutation_like_eager(h):
    def fn(x, idx):
        x.mul_(2)
        return torch.index_select(x, 0, idx)

    f = trident.jit(fn)
    h.check(f, fn, h.rand(4, 2), torch.tensor([1, 3]))
    xj = h.rand(4, 2)
    xe = xj.clone()
    with pytest.raises(IndexError):
        fn(xe, torch.tensor([9]))
    with pytest.raises(IndexError):
        f(xj, torch.tensor([9]))
    assert torch.equal(xj, xe)
    assert trident.stats(f)["versions"] == 1


def test_dtype_error_inside_version(h):
    def fn(x, y):
        return x.add_(y)  # int64 += float32 is an error in eager

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3, dtype=torch.int64), h.rand(3, dtype=torch.int64))
    before = _counts(f)
    _raises_like_eager(f, fn, h.rand(3, dtype=torch.int64), h.rand(3))
    assert _counts(f)[0] <= before[0] + 1  # a miss for the new dtype, at most
    _raises_like_eager(f, fn, h.rand(3, dtype=torch.int64), h.rand(3))
    assert trident.stats(f)["fallbacks"] == 0


def test_python_exception_raised_by_the_function(h):
    def fn(x):
        if x.shape[0] > 3:
            raise ValueError(f"too long: {x.shape[0]}")
        return x * 2

    f = trident.jit(fn)
    h.check(f, fn, h.rand(2))
    before = _counts(f)
    for n in (4, 5):
        e = _raises_like_eager(f, fn, h.rand(n))
        assert isinstance(e, ValueError)
    assert _counts(f)[0] == before[0]
    assert trident.stats(f)["fallbacks"] == 0
    h.check(f, fn, h.rand(2))
    h.check(f, fn, h.rand(3))


def test_wrong_arity_and_unknown_keyword_are_eagers_type_errors(h):
    def fn(x, y, *, k=1):
        return x + y * k

    f = trident.jit(fn)
    h.check(f, fn, h.rand(2), h.rand(2))
    _raises_like_eager(f, fn, h.rand(2))
    _raises_like_eager(f, fn, h.rand(2), h.rand(2), h.rand(2))
    _raises_like_eager(f, fn, h.rand(2), h.rand(2), bogus=3)
    _raises_like_eager(f, fn, h.rand(2), y=h.rand(2), x=h.rand(2))
    assert trident.stats(f)["versions"] == 1
    assert trident.stats(f)["fallbacks"] == 0
    h.check(f, fn, h.rand(2), h.rand(2), k=1)


def test_missing_dict_key_and_short_tuple(h):
    def fn(d, xs):
        return d["x"] * xs[1]

    f = trident.jit(fn)
    h.check(f, fn, {"x": h.rand(2)}, (h.rand(2), h.rand(2)))
    e = _raises_like_eager(f, fn, {"y": h.rand(2)}, (h.rand(2), h.rand(2)))
    assert isinstance(e, KeyError)
    e = _raises_like_eager(f, fn, {"x": h.rand(2)}, (h.rand(2),))
    assert isinstance(e, IndexError)
    assert trident.stats(f)["versions"] == 1
    assert trident.stats(f)["fallbacks"] == 0
    h.check(f, fn, {"x": h.rand(2)}, (h.rand(2), h.rand(2)))


def test_non_tensor_argument_where_tensor_expected(h):
    def fn(x):
        return torch.sin(x)

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3))
    _raises_like_eager(f, fn, "not a tensor")
    _raises_like_eager(f, fn, None)
    h.check(f, fn, h.rand(3))
    assert trident.stats(f)["fallbacks"] == 0


def test_errors_do_not_count_against_max_versions(h, record_warnings):
    f = trident.jit(_mm, max_versions=1, dynamic=False)
    h.check(f, _mm, h.rand(2, 3), h.rand(3, 4))
    with record_warnings():
        for _ in range(3):
            _raises_like_eager(f, _mm, h.rand(2, 3), h.rand(5, 4))
    assert trident.stats(f)["fallback_reason"] is None
    hits = trident.stats(f)["hits"][0]
    h.check(f, _mm, h.rand(2, 3), h.rand(3, 4))
    assert trident.stats(f)["hits"][0] == hits + 1


def test_assert_no_recompile_knob(h):
    from trident import config

    f = trident.jit(_mm, dynamic=False)
    h.check(f, _mm, h.rand(2, 3), h.rand(3, 4))
    with config.scope(TRIDENT_ASSERT_NO_RECOMPILE="1"):
        h.check(f, _mm, h.rand(2, 3), h.rand(3, 4))
        with pytest.raises(trident.RecompileError):
            f(h.rand(3, 3), h.rand(3, 4))
    assert trident.stats(f)["versions"] == 1
