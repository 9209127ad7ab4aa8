"""functools metadata and the decorator forms."""

from __future__ import annotations

import inspect

import pytest
import torch

import trident


def _documented(x: torch.Tensor, w: torch.Tensor | None = None, *, eps: float = 1e-6,
                **extra) -> torch.Tensor:
    """Scale `x` by `w`, if any.

    A docstring with several lines."""
    return x * (1 if w is None else w) + eps


def test_name_doc_signature_module_qualname():
    f = trident.jit(_documented)
    assert f.__name__ == _documented.__name__
    assert f.__qualname__ == _documented.__qualname__
    assert f.__doc__ == _documented.__doc__
    assert f.__module__ == _documented.__module__
    assert inspect.signature(f) == inspect.signature(_documented)
    assert f.__wrapped__ is _documented
    assert getattr(f, "__annotations__", None) == _documented.__annotations__


def test_decorator_forms(h):
    @trident.jit
    def a(x):
        """doc a"""
        return x + 1

    @trident.jit(strict=True, max_versions=4, dynamic=True)
    def b(x):
        """doc b"""
        return x + 2

    assert a.__name__ == "a" and a.__doc__ == "doc a"
    assert b.__name__ == "b" and b.__doc__ == "doc b"
    x = h.rand(3)
    torch.testing.assert_close(a(x), x + 1)
    torch.testing.assert_close(b(x), x + 2)


def test_function_without_docstring_and_lambda():
    def nodoc(x):
        return x

    f = trident.jit(nodoc)
    assert f.__doc__ is None
    g = trident.jit(lambda x: x * 2)
    assert g.__name__ == "<lambda>"
    x = torch.randn(2)
    assert torch.equal(g(x), x * 2)


def test_jit_rejects_non_functions():
    class C:
        def m(self, x):
            return x

    with pytest.raises(TypeError):
        trident.jit(C().m)
    with pytest.raises(TypeError):
        trident.jit(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError):
        trident.explain(lambda x: x)
    with pytest.raises(TypeError):
        trident.versions(lambda x: x)


def test_two_jits_of_one_function_are_independent(h):
    def fn(x):
        return x - 1

    f1, f2 = trident.jit(fn), trident.jit(fn)
    h.check(f1, fn, h.rand(2))
    assert trident.stats(f1)["versions"] == 1
    assert trident.stats(f2)["versions"] == 0
    h.check(f2, fn, h.rand(2))
    h.check(f1, fn, h.rand(2))
    assert trident.stats(f2)["misses"] == 1
