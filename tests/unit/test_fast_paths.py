"""The runtime's typed fast paths (views, casts, small reductions, cat, softmax...) give exactly
what the boxed dispatcher call gives, and what eager gives: values, dtypes, sizes, strides and
aliasing, with the arguments as constants (static shapes) and as frame values (dynamic shapes).
TRIDENT_BOXED_ONLY=1 makes the runtime skip the fast paths, so each function is run both ways."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import trident


def _views(x, y):
    a = x.view(-1, x.shape[-1] * 2).transpose(0, 1).unsqueeze(0)
    b = a.expand(3, -1, -1).permute(2, 1, 0)
    c = x[1:, ::2].select(0, 1)
    d = x.unsqueeze(1).squeeze(1)[:, -2:]
    e = torch.bmm(y.unsqueeze(0), y.t().unsqueeze(0)).reshape(-1)
    return a, b, c, d, e


def _casts(x, y):
    h = x.to(torch.float16)
    v = h.float().pow(2).mean(dim=-1, keepdim=True)
    w = x.pow(3).mean([0, 1])
    s = torch.softmax(h, dim=-1, dtype=torch.float32)
    return h, v, w, s, F.silu(x.to(torch.float64)) * 0.5, x.clone(memory_format=torch.contiguous_format)


def _rotary(x, y):
    # the host code of a rotary embedding: halves, cat, broadcast multiply
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    rot = torch.cat((-x2, x1), dim=-1)
    cos = y[: x.shape[0], :1].expand_as(x).contiguous()
    return x * cos.mean(-1, keepdim=True) + rot * 2


CASES = [_views, _casts, _rotary]


def _inputs(n, m):
    x = torch.randn(n, m)
    y = torch.randn(n + 2, m)
    return x, y


def _layout(t):
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype)


def _run(fn, dynamic, shapes):
    f = trident.jit(fn, dynamic=dynamic)
    outs = []
    for n, m in shapes:
        for _ in range(2):  # the capturing call, then a native hit
            x, y = _inputs(n, m)
            got, ref = f(x, y), fn(x, y)
            assert len(got) == len(ref)
            for g, r in zip(got, ref):
                assert _layout(g) == _layout(r)
                torch.testing.assert_close(g, r, rtol=0, atol=0)
                # a view of an input stays a view of that input (same storage)
                if r._base is x or r.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
                    assert g.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
            outs.append(got)
    st = trident.stats(f)
    assert st["fallbacks"] == 0, trident.explain(f)
    assert sum(st["hits"]) >= len(shapes), trident.explain(f)
    return outs


@pytest.mark.parametrize("boxed", ["0", "1"])
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_fast_paths_match_eager(fn, dynamic, boxed, monkeypatch):
    monkeypatch.setenv("TRIDENT_BOXED_ONLY", boxed)
    _run(fn, dynamic, [(4, 6), (6, 8), (8, 10)])
