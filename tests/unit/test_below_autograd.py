"""Operators below the autograd layer (ir/passes/below_autograd.py, runtime op_call): in a
version where no autograd records, functional ATen operators and views of tensors only the
program holds skip the Autograd/ADInplaceOrView kernels.  Everything a caller can observe must
stay eager's: values, which outputs are views of what (`_base`), version counters after
in-place writes, gradients where a tensor requires grad, forward-mode AD tangents."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import trident


def _below_count(f) -> int:
    lines = [ln for ln in trident.explain(f).splitlines() if "run below the autograd" in ln]
    return sum(int(ln.split()[0]) for ln in lines)


def _run_twice(f, fn, *args):
    """Capture, then a native hit; both equal eager."""
    for _ in range(2):
        got, ref = f(*args), fn(*args)
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    assert sum(trident.stats(f)["hits"]) >= 1
    return got, ref


def test_internal_views_run_below_and_match(h):
    def fn(x, w):
        y = x * w + 1
        for _ in range(3):
            y = y.view(4, 8).t().unsqueeze(0).transpose(1, 2).reshape(32)
        z = y[1:].view(-1, 1).expand(31, 2)
        return (z * 2).sum(1), y.sin()

    f = trident.jit(fn)
    x, w = h.rand(32), h.rand(32)
    _run_twice(f, fn, x, w)
    assert _below_count(f) > 10, trident.explain(f)


def test_escaping_view_keeps_its_base_like_eager(h):
    def fn(x):
        y = x * 2
        v = y.view(-1)
        return v[1:], v.view(2, -1)

    f = trident.jit(fn)
    x = h.rand(2, 4)
    for _ in range(2):
        got, ref = f(x), fn(x)
        for g, r in zip(got, ref):
            assert torch.equal(g, r)
            assert g._is_view() and r._is_view()
            assert g._base is not None and g._base.shape == r._base.shape
        # the two outputs share their base, as eager's do
        assert got[0]._base is got[1]._base
    assert _below_count(f) >= 1  # the multiply


def test_views_of_inputs_are_views_of_the_inputs(h):
    def fn(x):
        return x.view(-1), x.t() * 1.0

    f = trident.jit(fn)
    x = h.rand(3, 4)
    for _ in range(2):
        v, m = f(x)
        assert v._base is x and torch.equal(v, x.view(-1))
        assert torch.equal(m, x.t() * 1.0)


def test_in_place_write_through_a_view_bumps_versions_like_eager(h):
    def fn(x):
        y = x + 1
        v = y.view(-1)
        v.mul_(3)
        return y

    f = trident.jit(fn)
    for _ in range(2):
        x = h.rand(2, 3)
        got, ref = f(x), fn(x)
        assert torch.equal(got, ref)
        assert got._version == ref._version


def test_in_place_on_an_internal_view(h):
    def fn(x):
        y = x + 1
        y[0].mul_(3)
        y.view(-1)[1:3].add_(5)
        return y.sum(0), x * 1

    f = trident.jit(fn)
    _run_twice(f, fn, h.rand(3, 4))


def test_input_view_written_in_place_updates_the_input(h):
    def fn(x):
        x.view(-1)[0:2].add_(1)
        return x * 2

    f = trident.jit(fn)
    for _ in range(2):
        x = h.rand(2, 3)
        xe = x.clone()
        v0, ve0 = x._version, xe._version
        got, ref = f(x), fn(xe)
        assert torch.equal(got, ref) and torch.equal(x, xe)
        assert x._version - v0 == xe._version - ve0 > 0


def test_requires_grad_keeps_the_autograd_path(h):
    def fn(x, w):
        return (x.view(-1) * w).sin().sum()

    f = trident.jit(fn)
    for _ in range(2):
        x = h.rand(2, 3).requires_grad_()
        w = h.rand(6)
        xe = x.detach().clone().requires_grad_()
        f(x, w).backward()
        fn(xe, w).backward()
        torch.testing.assert_close(x.grad, xe.grad, rtol=0, atol=0)
    assert _below_count(f) == 0


def test_no_grad_call_with_a_requires_grad_input(h):
    def fn(x):
        return x.view(-1) * 2 + 1

    f = trident.jit(fn)
    x = h.rand(4).requires_grad_()
    with torch.no_grad():
        for _ in range(2):
            got, ref = f(x), fn(x)
            assert torch.equal(got, ref) and got.requires_grad == ref.requires_grad is False


def test_forward_mode_ad_keeps_tangents(h):
    def fn(x, w):
        return (x * w).sin().view(-1) + 1

    f = trident.jit(fn)
    x, w, t = h.rand(4), h.rand(4), h.rand(4)
    f(x, w), f(x, w)  # a version without dual tensors, below the autograd layer
    assert _below_count(f) >= 2
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        got = fwAD.unpack_dual(f(d, w))
        ref = fwAD.unpack_dual(fn(d, w))
    assert ref.tangent is not None
    torch.testing.assert_close(got.primal, ref.primal, rtol=0, atol=0)
    torch.testing.assert_close(got.tangent, ref.tangent, rtol=0, atol=0)


def test_switch_off(h, monkeypatch):
    monkeypatch.setenv("TRIDENT_BELOW_AUTOGRAD", "0")

    def fn(x):
        return x.view(-1) * 2 + 1

    f = trident.jit(fn)
    _run_twice(f, fn, h.rand(4))
    assert _below_count(f) == 0


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_under_caller_modes(h, mode):
    def fn(x):
        y = x * 3
        return y.view(-1)[2:], y.t().sum(0)

    f = trident.jit(fn)
    ctx = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with ctx():
        for _ in range(2):
            x = h.rand(3, 4)
            got, ref = f(x), fn(x)
            for g, r in zip(got, ref):
                assert torch.equal(g, r) and g.is_inference() == r.is_inference()
                assert g._is_view() == r._is_view()


def test_read_only_views_of_inputs_run_below(h):
    def fn(x, w):
        return x.t().mm(w.t()) + w.view(-1)[0]

    f = trident.jit(fn)
    x, w = h.rand(4, 3), h.rand(5, 4)
    vx, vw = x._version, w._version
    _run_twice(f, fn, x, w)
    assert (x._version, w._version) == (vx, vw)
    assert _below_count(f) == 6, trident.explain(f)  # t, t, mm, view, select, add


def test_write_through_a_view_of_an_input_keeps_its_views_on_the_full_path(h):
    def fn(x):
        s = x.t().sum()  # a view of x that is only read ...
        x.view(-1)[1:3].mul_(2)  # ... and a write through another view of x
        return s

    f = trident.jit(fn)
    for _ in range(2):
        x = h.rand(2, 3)
        xe = x.clone()
        v0, ve0 = x._version, xe._version
        torch.testing.assert_close(f(x), fn(xe), rtol=0, atol=0)
        assert torch.equal(x, xe) and x._version - v0 == xe._version - ve0 == 1
    text = trident.explain(f)
    assert _below_count(f) == 1, text  # only the sum: every view of x keeps its metadata


def test_in_place_on_an_input_keeps_the_full_path(h):
    """Found by the fuzzer (strict versions): an in-place operator returns an alias of its
    argument, and must not be taken for a view that stays inside the program."""
    def fn(x, c):
        t = c["a"].clamp_(-1, 1)
        y = x.add_(1)
        return (t + 1) * y

    f = trident.jit(fn)
    for _ in range(3):
        x, a = h.rand(3), h.rand(3)
        xe, ae = x.clone(), a.clone()
        vx, va, vxe, vae = x._version, a._version, xe._version, ae._version
        got, ref = f(x, {"a": a}), fn(xe, {"a": ae})
        assert torch.equal(got, ref) and torch.equal(x, xe) and torch.equal(a, ae)
        assert (x._version - vx, a._version - va) == (xe._version - vxe, ae._version - vae) \
            == (1, 1)
    assert _below_count(f) == 2  # the add and the multiply



@contextlib.contextmanager
def _cpu_kernel(op, fn):
    """`op`'s CPU kernel replaced by the Python function `fn` (as FlagGems registers its
    Triton operators), for the block."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        lib.impl(op, fn, "CPU")
    try:
        yield
    finally:
        lib._destroy()


def _recording_mm(seen):
    """A Python mm that records the view metadata of what it is handed."""
    def mm(a, b):
        seen.append(tuple((t._is_view(), None if t._base is None else tuple(t._base.shape))
                          for t in (a, b)))
        return (a.unsqueeze(-1) * b.unsqueeze(0)).sum(1)
    return mm


def _mm_of_views(x, w):
    y = x * 2
    # a view of a tensor the program made, and of an input
    return torch.mm(y.view(4, -1), w.t())


def test_python_kernel_is_handed_the_views_eager_hands_it(h):
    seen = []
    with _cpu_kernel("mm", _recording_mm(seen)):
        f = trident.jit(_mm_of_views)
        for _ in range(3):
            x, w = h.rand(32), h.rand(5, 8)
            seen.clear()
            ref = _mm_of_views(x, w)
            eager_seen = list(seen)
            seen.clear()
            got = f(x, w)
            torch.testing.assert_close(got, ref, rtol=0, atol=0)
            assert seen == eager_seen == [((True, (32,)), (True, (5, 8)))]
        assert sum(trident.stats(f)["hits"]) >= 2
        assert _below_count(f) >= 1, trident.explain(f)  # the multiply, and mm (backend kernel)


def test_python_kernel_lookup_follows_registrations_and_removals():
    """python_kernel_ops is made again whenever torch.library's registrations change (it is
    memoized between misses): a kernel registered or destroyed after a first lookup shows."""
    from trident.ir.passes.below_autograd import python_kernel_ops

    before = python_kernel_ops()
    assert python_kernel_ops() is before  # unchanged registrations: the same sets
    assert "aten/mm" not in before[0]
    with _cpu_kernel("mm", _recording_mm([])):
        assert "aten/mm" in python_kernel_ops()[0]
        assert "aten/mm" not in python_kernel_ops()[1]
    assert "aten/mm" not in python_kernel_ops()[0]
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl("mm", _recording_mm([]), "Autograd")
    try:
        assert "aten/mm" in python_kernel_ops()[1]
    finally:
        lib._destroy()
    assert "aten/mm" not in python_kernel_ops()[1]


def test_nested_jit_kernel_keeps_one_version_per_call_site(h):
    def mm(a, b):
        return (a.unsqueeze(-1) * b.unsqueeze(0)).sum(1)

    inner = trident.jit(mm)
    with _cpu_kernel("mm", inner):
        f = trident.jit(_mm_of_views)
        # static sizes, then dynamic ones (Dynamo guards the views' bases symbolically)
        for n in (8, 8, 12, 12, 16, 20):
            x, w = h.rand(4 * n), h.rand(5, n)
            torch.testing.assert_close(f(x, w), _mm_of_views(x, w), rtol=0, atol=0)
        # every hit hands the nested kernel views like the capturing call's: no more versions
        # of it than call sites' versions (a bare alias fails its `_base` guards: one more)
        assert trident.stats(inner)["versions"] <= trident.stats(f)["versions"], \
            trident.explain(inner)
        assert sum(trident.stats(f)["hits"]) >= 2


_VIEWS = [
    ("t", lambda a: a.t() if a.dim() == 2 else a),
    ("transpose", lambda a: a.transpose(0, -1)),
    ("unsqueeze", lambda a: a.unsqueeze(0)),
    ("squeeze", lambda a: a.squeeze(0)),
    ("slice", lambda a: a[..., 1:] if a.shape[-1] > 1 else a),
    ("view", lambda a: a.view(a.shape)),
    ("flatten", lambda a: a.reshape(-1) if a.is_contiguous() else a),
]


def _add_view_meta(seen):
    """A Python add (as a library registers one) recording what it is handed."""
    def add(a, b, alpha=1):
        seen.append(tuple((t._is_view(), None if t._base is None else
                           (tuple(t._base.shape), t._base.stride())) for t in (a, b)))
        return torch.ops.aten.sub.Tensor(a, b, alpha=-alpha)  # a + alpha * b
    return add


@pytest.mark.parametrize("seed", range(12))
def test_random_view_chains_reach_python_kernels_as_in_eager(h, seed):
    """Random chains of views of inputs and of tensors the program made, passed to an
    operator with a Python kernel: every hit hands it eager's views and bases."""
    import random
    rng = random.Random(seed)
    chains = [[rng.choice(_VIEWS) for _ in range(rng.randint(1, 4))] for _ in range(2)]
    from_input = [rng.random() < 0.5 for _ in range(2)]

    def fn(x, y):
        outs = []
        for chain, inp in zip(chains, from_input):
            a = x if inp else x * 2
            for _, v in chain:
                a = v(a)
            outs.append(a)
        b = y.expand_as(outs[0]) if outs[0].shape != y.shape and outs[0].dim() else outs[0]
        return torch.add(outs[0], b), outs[1].sum()

    seen = []
    with _cpu_kernel("add.Tensor", _add_view_meta(seen)):
        f = trident.jit(fn)
        for _ in range(3):
            x, y = h.rand(3, 5), h.rand(1)
            seen.clear()
            try:
                ref = fn(x, y)
            except RuntimeError:
                pytest.skip("this chain is not valid in eager")
            eager_seen = list(seen)
            seen.clear()
            got = f(x, y)
            for g, r in zip(got, ref):
                torch.testing.assert_close(g, r, rtol=0, atol=0)
            assert seen == eager_seen, (chains, from_input)
        assert sum(trident.stats(f)["hits"]) >= 1, trident.explain(f)
