"""The Named dispatch key (torch <= 2.12) is left out of the global-state guard: at::NoNamesGuard
excludes it thread-locally (torch 2.11's CUDA linear and matmul run mm/bmm under it, while a
version's program calls aten::mm/bmm directly), and it only changes how tensors that carry
names dispatch. A call under it shares the versions of calls without it; a named tensor is
still kept off a version captured for unnamed ones (tensor guards match each tensor's own key
set, which holds Named). torch 2.13 has no named tensors: these tests skip there."""

from __future__ import annotations

import warnings

import pytest
import torch

import trident

try:
    _NAMED = torch.zeros(1, names=("n",))
except (TypeError, RuntimeError):
    _NAMED = None

pytestmark = pytest.mark.skipif(_NAMED is None, reason="this torch has no named tensors")


def _f(x):
    return x * 2 + 1


def _named_key():
    """{Named}, as a DispatchKeySet (the Python enum does not expose the key)."""
    keys = torch._C._dispatch_keys(_NAMED) - torch._C._dispatch_keys(torch.zeros(1))
    # a key set's difference keeps the backend bits (here CPU's): leave them out, or the guard
    # would also exclude every CPU functionality key, which at::NoNamesGuard does not
    backend_bits = (1 << torch._C._dispatch_num_backends()) - 1
    keys = torch._C.DispatchKeySet.from_raw_repr(keys.raw_repr() & ~backend_bits)
    assert str(keys) == "DispatchKeySet(Named)", keys
    return keys


def test_no_names_guard_shares_versions():
    f = trident.jit(_f)
    x = torch.randn(8)
    assert torch.equal(f(x), _f(x))
    with torch._C._ExcludeDispatchKeyGuard(_named_key()):
        assert "Named" in str(torch._C._dispatch_tls_local_exclude_set())
        y = torch.randn(8)
        assert torch.equal(f(y), _f(y))
    z = torch.randn(8)
    assert torch.equal(f(z), _f(z))
    st = trident.stats(f)
    assert st["misses"] == 1 and st["versions"] == 1, trident.explain(f)


def test_named_input_is_not_served_by_an_unnamed_version():
    f = trident.jit(_f)
    x = torch.randn(8)
    assert torch.equal(f(x), _f(x))
    misses = trident.stats(f)["misses"]
    fallbacks = trident.stats(f)["fallbacks"]
    for excluded in (False, True):
        xn = torch.randn(8, names=("n",))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if excluded:
                with torch._C._ExcludeDispatchKeyGuard(_named_key()):
                    out, ref = f(xn), _f(xn)
            else:
                out, ref = f(xn), _f(xn)
        assert out.names == ref.names
        assert torch.equal(out.rename(None), ref.rename(None))
    st = trident.stats(f)
    # each named call missed the unnamed version (then was captured or ran eagerly)
    assert st["misses"] + st["fallbacks"] > misses + fallbacks, trident.explain(f)
