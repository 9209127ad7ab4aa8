"""In-place operations on inputs mutate the caller's tensors like eager, and
returned views alias their bases exactly like eager's (same storage, sizes,
strides, offsets; writes through a view reach the base)."""

from __future__ import annotations

import pytest
import torch

import trident


def _alias_signature(out, x):
    """How `out` relates to `x`: same storage? offset/stride layout."""
    shared = out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    return (shared, out.data_ptr() - x.data_ptr() if shared else None, tuple(out.shape),
            out.stride(), out.storage_offset(), out._is_view())


# ----------------------------------------------------------- in-place ops


def test_add_in_place_mutates_callers_tensor(h):
    def fn(x):
        x.add_(1)
        return x * 2

    f = trident.jit(fn)
    for _ in range(3):
        h.check(f, fn, h.rand(4))  # check() compares the arguments after the call
    x = h.rand(4)
    x0 = x.clone()
    f(x)
    assert torch.equal(x, x0 + 1)


def test_in_place_returns_the_input_itself(h):
    def fn(x, y):
        return x.add_(y)

    f = trident.jit(fn)
    for _ in range(3):
        x, y = h.rand(3), h.rand(3)
        ref = x.clone() + y
        out = f(x, y)
        assert out is x
        torch.testing.assert_close(x, ref)


def test_in_place_on_several_inputs_and_dtypes(h):
    def fn(a, b, c):
        a.mul_(2)
        b.sub_(a.to(b.dtype))
        c.clamp_(min=0)
        return a + c

    f = trident.jit(fn)
    for _ in range(3):
        h.check(f, fn, h.rand(5), h.rand(5, dtype=torch.int64), h.rand(5))
    for _ in range(2):
        h.check(f, fn, h.rand(5, dtype=torch.float64), h.rand(5, dtype=torch.int64),
                h.rand(5, dtype=torch.float64))


def test_in_place_on_a_non_contiguous_input(h):
    def fn(x):
        x.mul_(3)
        return x.sum(0)

    f = trident.jit(fn)
    for _ in range(3):
        h.check(f, fn, torch.randn(4, 6).t())
        h.check(f, fn, torch.randn(4, 8)[:, ::2])


def test_in_place_through_a_view_of_an_input(h):
    def fn(x):
        x[0].zero_()
        x[:, 1] += 5
        x.view(-1)[-1] = 7.0
        return x.sum()

    f = trident.jit(fn)
    for _ in range(3):
        h.check(f, fn, h.rand(3, 4))


def test_index_put_and_copy_into_input(h):
    def fn(x, idx, v):
        x[idx] = v
        x.narrow(0, 0, 1).copy_(v[:1])
        return x

    f = trident.jit(fn)
    for _ in range(3):
        x = h.rand(6)
        idx = torch.tensor([1, 3])
        v = h.rand(2)
        xe = x.clone()
        out = f(x, idx, v)
        ref = fn(xe, idx, v)
        assert out is x
        assert torch.equal(x, xe)
        assert torch.equal(out, ref)


def test_in_place_version_counter_bumped(h):
    """Autograd's saved-tensor checks rely on the version counter."""
    def fn(x):
        x.add_(1)
        return x

    f = trident.jit(fn)
    for _ in range(3):
        x = h.rand(3)
        v0 = x._version
        xe = x.clone()
        ve = xe._version
        fn(xe)
        f(x)
        assert x._version - v0 == xe._version - ve


def test_in_place_on_leaf_requiring_grad_raises_like_eager(h):
    def fn(x):
        return x.add_(1)

    f = trident.jit(fn)
    with torch.no_grad():
        f(h.rand(2))
    x = h.rand(2, requires_grad=True)
    with pytest.raises(RuntimeError) as ee:
        fn(x)
    with pytest.raises(RuntimeError) as ej:
        f(x)
    assert (type(ej.value), str(ej.value)) == (type(ee.value), str(ee.value))


# -------------------------------------------------------------- views


def _check_view(h, fn, make, calls=3):
    f = trident.jit(fn)
    for _ in range(calls):
        xj = make()
        xe = h.clone_tensor(xj)
        out, ref = f(xj), fn(xe)
        outs = out if isinstance(out, tuple) else (out,)
        refs = ref if isinstance(ref, tuple) else (ref,)
        for o, r in zip(outs, refs):
            assert _alias_signature(o, xj) == _alias_signature(r, xe)
            assert torch.equal(o, r)
        # Writing through each returned view reaches the base as in eager.
        for o, r in zip(outs, refs):
            o.view(-1)[0:1].fill_(123.0) if o.is_contiguous() else o.fill_(-7.0)
            r.view(-1)[0:1].fill_(123.0) if r.is_contiguous() else r.fill_(-7.0)
        assert torch.equal(xj, xe)
    return f


def test_returned_transpose_view(h):
    def fn(x):
        return x.t()

    f = _check_view(h, fn, lambda: h.rand(3, 4))
    x = h.rand(3, 4)
    out = f(x)
    assert out.data_ptr() == x.data_ptr()
    out[0, 1] = 100.0
    assert x[1, 0] == 100.0


def test_returned_slice_view(h):
    def fn(x):
        return x[1:]

    f = _check_view(h, fn, lambda: h.rand(5, 2))
    x = h.rand(5, 2)
    out = f(x)
    assert out.data_ptr() == x.data_ptr() + x.stride(0) * x.element_size()
    out[0, 0] = 55.0
    assert x[1, 0] == 55.0


def test_returned_flat_view(h):
    def fn(x):
        return x.view(-1)

    f = _check_view(h, fn, lambda: h.rand(2, 3))
    x = h.rand(2, 3)
    out = f(x)
    assert out.data_ptr() == x.data_ptr()
    out[4] = -1.0
    assert x[1, 1] == -1.0


def test_returned_views_of_non_contiguous_input(h):
    def fn(x):
        return x[:, 1:], x.t(), x.diagonal(), x.unsqueeze(0)

    _check_view(h, fn, lambda: torch.randn(6, 10)[1:, ::2])


def test_several_views_in_one_call(h):
    def fn(x):
        return x.view(2, -1), x[::2], x.narrow(0, 1, 2), x.expand(3, -1, -1), x.select(1, 0)

    _check_view(h, fn, lambda: h.rand(4, 3))


def test_view_of_an_intermediate(h):
    def fn(x):
        y = x + 1
        return y, y[1:], y.t()

    f = trident.jit(fn)
    for _ in range(3):
        x = h.rand(3, 3)
        y, a, b = f(x)
        ry, ra, rb = fn(x)
        for o, r in ((y, ry), (a, ra), (b, rb)):
            assert torch.equal(o, r)
            assert o.stride() == r.stride()
            assert o.storage_offset() == r.storage_offset()
        assert a.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
        assert b.data_ptr() == y.data_ptr()
        a[0, 0] = 9.0
        assert y[1, 0] == 9.0


def test_view_then_in_place_on_the_view(h):
    def fn(x):
        v = x[1:]
        v.mul_(10)
        return v

    f = trident.jit(fn)
    for _ in range(3):
        xj = h.rand(4, 2)
        xe = xj.clone()
        out, ref = f(xj), fn(xe)
        assert torch.equal(xj, xe)
        assert _alias_signature(out, xj) == _alias_signature(ref, xe)


def test_view_result_requires_grad_and_base(h):
    def fn(x):
        return x[1:]

    f = trident.jit(fn)
    for _ in range(3):
        x = h.rand(3, requires_grad=True)
        out = f(x)
        ref = fn(x)
        assert out.requires_grad == ref.requires_grad
        assert out._is_view() == ref._is_view()
        assert (out._base is x) == (ref._base is x)
        out.sum().backward()
        assert torch.equal(x.grad, torch.tensor([0.0, 1.0, 1.0]))


def test_reshape_returns_view_or_copy_like_eager(h):
    def fn(x):
        return x.reshape(-1)

    for make in (lambda: h.rand(2, 3), lambda: torch.randn(3, 2).t()):
        _check_view(h, fn, make, calls=2)


def test_contiguous_returns_input_or_copy_like_eager(h):
    def fn(x):
        return x.contiguous()

    f = trident.jit(fn)
    for _ in range(2):
        x = h.rand(2, 3)
        assert (f(x) is x) == (fn(x) is x)
        y = torch.randn(3, 2).t()
        out = f(y)
        assert (out is y) == (fn(y) is y)
        assert out.data_ptr() != y.data_ptr() and torch.equal(out, y)


def test_detach_cuts_autograd_and_is_no_view_like_eager(h):
    # torch 2.14's make_fx traces `detach` as `alias` unless given a decomposition table: the
    # hits then returned a view of x that required grad (a gradient through a detach).
    def fn(x):
        d = x.detach()
        d.clamp_(-1, 1)  # writes through to x, as eager's detach shares storage
        return d, d * x

    f = trident.jit(fn)
    for _ in range(3):
        x = h.rand(5, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        (d, p), (de, pe) = f(x), fn(xe)
        assert torch.equal(d, de) and torch.equal(p, pe)
        assert torch.equal(x.detach(), xe.detach())
        assert (d.requires_grad, d._base is None, d.grad_fn) == (de.requires_grad, True, None)
        assert d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        p.sum().backward()
        pe.sum().backward()
        assert torch.equal(x.grad, xe.grad)  # d is a constant for the gradient
    assert sum(trident.stats(f)["hits"]) >= 2
