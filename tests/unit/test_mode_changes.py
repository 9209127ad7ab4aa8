"""A function that changes grad mode, inference mode or autocast inside (`with torch.no_grad()`,
`torch.enable_grad()`, `torch.inference_mode()`, `torch.autocast(...)`) runs that path eagerly: Dynamo
records the change as a graph node, the ATen trace does not, and a version's program ran every
operator under the caller's state (wrong gradients, dtypes and inference flags). A change that
changes nothing (autocast disabled where it is off; grad mode where no tensor requires grad)
still compiles. Every case compares with
eager on fresh inputs over several calls."""

from __future__ import annotations

import warnings

import pytest
import torch

import trident


def _calls(f, fn, make, check, n=3):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the one fallback warning
        for _ in range(n):
            args = make()
            ref_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
            check(f(*args), fn(*ref_args), args, ref_args)


def _no_grad_inside(x, w):
    with torch.no_grad():
        t = x * w
    return t + x


def _enable_grad_inside(x, w):
    with torch.enable_grad():
        return (x * w).exp() + 1


def _grads_match(out, ref, args, ref_args):
    assert torch.equal(out, ref) and out.requires_grad == ref.requires_grad
    if ref.requires_grad:
        g = torch.randn_like(ref)
        (ga,) = torch.autograd.grad(out, args[0], g)
        (gr,) = torch.autograd.grad(ref, ref_args[0], g)
        assert torch.equal(ga, gr)


def _reason(f) -> str:
    """Why a path of `f` runs eagerly (that path only: the others stay native)."""
    st = trident.stats(f)
    assert not st["runs_eagerly"], st["fallback_reason"]
    return st["fallback_reason"] or ""


def test_no_grad_block_inside_runs_eagerly_with_eagers_gradients():
    f = trident.jit(_no_grad_inside)
    _calls(f, _no_grad_inside,
           lambda: (torch.randn(5, requires_grad=True), torch.randn(5)), _grads_match)
    assert "changes grad mode inside" in _reason(f)


def _no_grad_and_values(out, ref, args, ref_args):
    assert torch.equal(out, ref) and out.requires_grad == ref.requires_grad


def test_no_grad_block_where_nothing_requires_grad_compiles():
    """With no tensor requiring grad, a grad-mode change alters nothing a version computes:
    the version runs natively, and a later call with a tensor that requires grad misses
    (its tensor guard keeps requires_grad=False) and then runs eagerly, with eager's
    gradients."""
    f = trident.jit(_no_grad_inside)
    assert torch.is_grad_enabled()
    _calls(f, _no_grad_inside, lambda: (torch.randn(5), torch.randn(5)), _no_grad_and_values)
    st = trident.stats(f)
    assert st["versions"] == 1 and st["fallbacks"] == 0 and sum(st["hits"]) >= 2, \
        trident.explain(f)
    _calls(f, _no_grad_inside,
           lambda: (torch.randn(5, requires_grad=True), torch.randn(5)), _grads_match)
    assert "changes grad mode inside" in _reason(f)


def test_enable_grad_block_under_no_grad_where_nothing_requires_grad_compiles():
    f = trident.jit(_enable_grad_inside)
    with torch.no_grad():
        _calls(f, _enable_grad_inside, lambda: (torch.randn(5), torch.randn(5)),
               _no_grad_and_values)
    st = trident.stats(f)
    assert st["versions"] == 1 and st["fallbacks"] == 0, trident.explain(f)


def test_no_grad_block_over_a_parameter_that_requires_grad_runs_eagerly():
    lin = torch.nn.Linear(4, 3)

    def fn(x):
        with torch.no_grad():
            y = lin(x)
        return y * x.sum()

    f = trident.jit(fn)
    _calls(f, fn, lambda: (torch.randn(2, 4),), _no_grad_and_values)
    assert "changes grad mode inside" in _reason(f)


def _versions(f, n=1):
    st = trident.stats(f)
    assert st["versions"] == n and st["fallbacks"] == 0 and sum(st["hits"]) >= 2, \
        trident.explain(f)


def test_enable_grad_around_the_whole_body_under_no_grad_runs_natively():
    """The body is one `with torch.enable_grad():` block: the version runs its program under
    enable_grad natively (ir.Version.run_mode), with eager's gradients."""
    f = trident.jit(_enable_grad_inside)
    with torch.no_grad():
        _calls(f, _enable_grad_inside,
               lambda: (torch.randn(5, requires_grad=True), torch.randn(5)), _grads_match)
    _versions(f)
    assert "runs under torch.enable_grad()" in trident.explain(f)
    assert torch.is_grad_enabled()


def _partial_no_grad(x, w):
    t = x * w
    with torch.no_grad():
        u = t * 2
    return t + u


def test_no_grad_block_around_part_of_the_body_runs_eagerly():
    f = trident.jit(_partial_no_grad)
    _calls(f, _partial_no_grad,
           lambda: (torch.randn(5, requires_grad=True), torch.randn(5)), _grads_match)
    assert "changes grad mode inside" in _reason(f)


def test_no_grad_around_the_whole_body_over_parameters_runs_natively():
    lin = torch.nn.Linear(4, 3)

    def fn(x):
        with torch.no_grad():
            return lin(x).relu() * 2

    f = trident.jit(fn)
    _calls(f, fn, lambda: (torch.randn(2, 4, requires_grad=True),), _no_grad_and_values)
    _versions(f)
    assert "runs under torch.no_grad()" in trident.explain(f)


def test_error_inside_a_whole_body_mode_leaves_the_callers_mode():
    """An operator of the native program raises (an index out of range, which no guard
    sees): eager's exception, and the caller's grad and inference mode are back."""
    def fn(x, i):
        with torch.inference_mode():
            return x[i] * 2

    f = trident.jit(fn)
    for _ in range(3):
        x, i = torch.randn(5), torch.randint(0, 5, (4,))
        out = f(x, i)
        assert torch.equal(out, fn(x, i)) and out.is_inference()
    _versions(f)
    x, bad = torch.randn(5), torch.tensor([0, 7, 1, 2])
    with pytest.raises(IndexError) as got:
        f(x, bad)
    with pytest.raises(IndexError) as ref:
        fn(x, bad)
    assert str(got.value) == str(ref.value)
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    st = trident.stats(f)
    assert st["versions"] == 1 and st["fallbacks"] == 0, trident.explain(f)
    x, i = torch.randn(5), torch.randint(0, 5, (4,))
    assert torch.equal(f(x, i), fn(x, i))


def test_strict_mode_raises_on_a_grad_mode_change():
    f = trident.jit(_no_grad_inside, strict=True)
    with pytest.raises(trident.UnsupportedError, match="changes grad mode inside"):
        f(torch.randn(3, requires_grad=True), torch.randn(3))


def _matmul_autocast_off(x, w):
    with torch.autocast("cpu", enabled=False):
        return x @ w


def _same_dtype_and_values(out, ref, args, ref_args):
    assert out.dtype == ref.dtype and torch.equal(out, ref)


def test_autocast_disabled_inside_an_autocast_region_runs_eagerly():
    f = trident.jit(_matmul_autocast_off)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _calls(f, _matmul_autocast_off, lambda: (torch.randn(4, 4), torch.randn(4, 4)),
               _same_dtype_and_values)
    assert "torch.autocast('cpu', enabled=False)" in _reason(f)


def test_autocast_disabled_where_it_is_off_still_compiles():
    f = trident.jit(_matmul_autocast_off)
    _calls(f, _matmul_autocast_off, lambda: (torch.randn(4, 4), torch.randn(4, 4)),
           _same_dtype_and_values)
    st = trident.stats(f)
    assert st["versions"] == 1 and st["fallbacks"] == 0 and sum(st["hits"]) >= 2, \
        trident.explain(f)


def test_autocast_enabled_inside_runs_eagerly():
    def fn(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ w

    f = trident.jit(fn)
    _calls(f, fn, lambda: (torch.randn(4, 4), torch.randn(4, 4)), _same_dtype_and_values)
    assert "enabled=True" in _reason(f)


def test_inference_mode_around_the_whole_body_runs_natively():
    def fn(x):
        with torch.inference_mode():
            return x * 2

    def check(out, ref, args, ref_args):
        assert torch.equal(out, ref) and out.is_inference() == ref.is_inference()

    f = trident.jit(fn)
    _calls(f, fn, lambda: (torch.randn(3),), check)
    _versions(f)
    assert not torch.is_inference_mode_enabled()


def test_inference_mode_around_part_of_the_body_runs_eagerly():
    def fn(x):
        y = x + 1
        with torch.inference_mode():
            z = y * 2
        return z

    def check(out, ref, args, ref_args):
        assert torch.equal(out, ref) and out.is_inference() == ref.is_inference()

    f = trident.jit(fn)
    _calls(f, fn, lambda: (torch.randn(3),), check)
    assert "inference mode inside" in _reason(f)


def test_mode_decorator_on_either_side_of_the_jit_runs_natively():
    """`@trident.jit` over `@torch.inference_mode()` (Dynamo traces torch's wrapper through
    a wrap_inline frame of its own, whose guards read that frame's locals and globals) and the
    other order both compile, with eager's inference tensors."""

    def body(x):
        return x * 2 + 1

    inner = trident.jit(torch.inference_mode()(body))
    outer = torch.inference_mode()(trident.jit(body))
    plain = torch.inference_mode()(body)

    def check(out, ref, args, ref_args):
        assert torch.equal(out, ref) and out.is_inference() and ref.is_inference()

    _calls(inner, plain, lambda: (torch.randn(4),), check)
    _calls(outer, plain, lambda: (torch.randn(4),), check)
    _versions(inner)
    _versions(outer.__wrapped__)
    assert "runs under torch.inference_mode()" in trident.explain(inner)
    assert not torch.is_inference_mode_enabled()


_LIN = torch.nn.Linear(4, 3)


@torch.no_grad()
def _decorated_over_a_global(x):
    return _LIN(x).relu() * 2


def test_no_grad_decorator_over_a_global_module_follows_its_rebinding():
    """The wrapper frame's guards read the module global through that frame's globals: a
    new module bound to the name gives the new module's result."""
    global _LIN
    f = trident.jit(_decorated_over_a_global)
    _calls(f, _decorated_over_a_global, lambda: (torch.randn(2, 4, requires_grad=True),),
           _no_grad_and_values)
    _versions(f)
    old = _LIN
    try:
        _LIN = torch.nn.Linear(4, 3)
        _calls(f, _decorated_over_a_global, lambda: (torch.randn(2, 4),), _no_grad_and_values)
    finally:
        _LIN = old
    x = torch.randn(2, 4)
    assert torch.equal(f(x), _decorated_over_a_global(x))
    assert trident.stats(f)["fallbacks"] == 0
