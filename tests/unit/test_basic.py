"""Basic correctness against eager and the version / hit accounting:
several shapes, dtypes and strides force several versions."""

from __future__ import annotations

import pytest
import torch

import trident


def _rms_norm(x, w, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _affine(x, y):
    return x * 3 + y - 1


def test_rms_norm_matches_eager(h):
    f = trident.jit(_rms_norm)
    for _ in range(5):
        h.check(f, _rms_norm, h.rand(8, 32), h.rand(32))
    st = trident.stats(f)
    assert st["versions"] == 1
    assert st["misses"] == 1
    assert st["hits"] == [4]
    assert st["fallbacks"] == 0


def test_first_call_is_a_miss_then_hits_are_counted(h):
    f = trident.jit(_affine)
    assert trident.stats(f)["versions"] == 0
    h.check(f, _affine, h.rand(4, 4), h.rand(4, 4))
    st = trident.stats(f)
    assert (st["misses"], st["captures"], st["versions"]) == (1, 1, 1)
    for i in range(1, 6):
        h.check(f, _affine, h.rand(4, 4), h.rand(4, 4))
        assert trident.stats(f)["hits"] == [i]
    assert trident.stats(f)["misses"] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bfloat16])
def test_each_dtype_matches_eager(h, dtype):
    f = trident.jit(_affine)
    for _ in range(3):
        h.check(f, _affine, h.rand(5, 7, dtype=dtype), h.rand(5, 7, dtype=dtype), exact=True)
    assert trident.stats(f)["versions"] == 1
    assert trident.stats(f)["hits"] == [2]


def test_dtypes_force_versions_and_old_versions_still_hit(h):
    f = trident.jit(_affine)
    dtypes = [torch.float32, torch.float64, torch.int64, torch.bfloat16]
    for i, dt in enumerate(dtypes):
        h.check(f, _affine, h.rand(6, 3, dtype=dt), h.rand(6, 3, dtype=dt), exact=True)
        assert trident.stats(f)["versions"] == i + 1
    # Every dtype again: each is served by its own version, no new capture.
    for dt in dtypes:
        h.check(f, _affine, h.rand(6, 3, dtype=dt), h.rand(6, 3, dtype=dt), exact=True)
    st = trident.stats(f)
    assert st["versions"] == 4
    assert st["misses"] == 4
    assert st["hits"] == [1, 1, 1, 1]


def test_mixed_dtype_promotion(h):
    f = trident.jit(_affine)
    h.check(f, _affine, h.rand(4, 4, dtype=torch.int64), h.rand(4, 4, dtype=torch.float32))
    h.check(f, _affine, h.rand(4, 4, dtype=torch.bfloat16), h.rand(4, 4, dtype=torch.float64))
    h.check(f, _affine, h.rand(4, 4, dtype=torch.int64), h.rand(4, 4, dtype=torch.float32))
    assert trident.stats(f)["versions"] == 2


def test_shapes_force_versions_when_static(h):
    f = trident.jit(_rms_norm, dynamic=False)
    shapes = [(2, 8), (3, 8), (2, 16), (4, 4, 8)]
    for i, s in enumerate(shapes):
        h.check(f, _rms_norm, h.rand(*s), h.rand(s[-1]))
        assert trident.stats(f)["versions"] == i + 1
    for s in shapes:
        h.check(f, _rms_norm, h.rand(*s), h.rand(s[-1]))
    assert trident.stats(f)["hits"] == [1, 1, 1, 1]


def _layouts():
    base = torch.randn(6, 8)
    return {
        "contiguous": base.clone(),
        "transposed": torch.randn(8, 6).t(),
        "col_sliced": torch.randn(6, 16)[:, ::2],
        "row_sliced_offset": torch.randn(8, 8)[2:],
        "expanded": torch.randn(1, 8).expand(6, 8),
    }


@pytest.mark.parametrize("layout", list(_layouts()))
def test_non_contiguous_input_matches_eager(h, layout):
    f = trident.jit(_affine)
    for _ in range(2):
        x = _layouts()[layout]
        h.check(f, _affine, x, h.rand(6, 8), strides=True)
    assert trident.stats(f)["versions"] == 1


def test_strides_force_versions(h):
    f = trident.jit(_affine, dynamic=False)
    # Storage offsets are not specialized on: "row_sliced_offset" has the
    # contiguous layout's strides and is served by its version.
    names = [n for n in _layouts() if n != "row_sliced_offset"]
    for i, name in enumerate(names):
        h.check(f, _affine, _layouts()[name], h.rand(6, 8), strides=True)
        assert trident.stats(f)["versions"] == i + 1, name
    for name in names:
        h.check(f, _affine, _layouts()[name], h.rand(6, 8), strides=True)
    h.check(f, _affine, _layouts()["row_sliced_offset"], h.rand(6, 8), strides=True)
    st = trident.stats(f)
    assert st["versions"] == len(names)
    assert sum(st["hits"]) == len(names) + 1


def test_transposed_input_not_served_by_contiguous_version(h):
    """A transposed square input has the contiguous version's sizes but not its
    strides: the ops whose result depends on layout (view) must see eager's."""
    def fn(x):
        return x.reshape(-1)[:5] * 2

    f = trident.jit(fn)
    h.check(f, fn, h.rand(4, 4))
    h.check(f, fn, torch.randn(4, 4).t())
    h.check(f, fn, h.rand(4, 4))
    h.check(f, fn, torch.randn(4, 4).t())
    assert trident.stats(f)["versions"] == 2


def test_zero_dim_and_empty_tensors(h):
    f = trident.jit(_affine)
    h.check(f, _affine, torch.randn(()), torch.randn(()))
    h.check(f, _affine, torch.randn(0, 3), torch.randn(0, 3))
    h.check(f, _affine, torch.randn(()), torch.randn(()))
    h.check(f, _affine, torch.randn(0, 3), torch.randn(0, 3))


def test_broadcasting(h):
    f = trident.jit(_affine)
    h.check(f, _affine, h.rand(4, 1, 3), h.rand(5, 1))
    h.check(f, _affine, h.rand(4, 1, 3), h.rand(5, 1))
    h.check(f, _affine, h.rand(3), h.rand(2, 3))


def test_many_ops(h):
    def fn(x, y):
        a = torch.softmax(x @ y.t(), dim=-1)
        b = torch.cat([a, x.sum(-1, keepdim=True)], dim=1)
        c = torch.where(b > 0, b, b.abs().sqrt())
        return c.max(dim=1).values, c.argmin(dim=1), torch.stack([x, x]).mean(0)

    f = trident.jit(fn)
    for _ in range(3):
        h.check(f, fn, h.rand(5, 4), h.rand(6, 4))
    assert trident.stats(f)["versions"] == 1


def test_factory_functions_and_constants(h):
    def fn(x):
        return x + torch.arange(x.shape[-1], dtype=x.dtype) + torch.ones(3, 1) * 2.5

    f = trident.jit(fn)
    for n in (4, 4, 7, 9):
        h.check(f, fn, h.rand(3, n))


def test_explain_and_versions_describe_each_version(h):
    f = trident.jit(_affine, dynamic=False)
    f(h.rand(2), h.rand(2))
    f(h.rand(3), h.rand(3))
    f(h.rand(3), h.rand(3))
    vs = trident.versions(f)
    assert len(vs) == 2 == trident.stats(f)["versions"]
    text = trident.explain(f)
    assert isinstance(text, str)
    assert "version 0" in text and "version 1" in text
    assert "hits=1" in text


def test_jit_of_non_function_is_a_type_error():
    with pytest.raises(TypeError):
        trident.jit(torch.sin)
    with pytest.raises(TypeError):
        trident.stats(_affine)


def test_each_version_records_where_its_miss_spent_its_time(h):
    f = trident.jit(_affine)
    for dt in (torch.float32, torch.float64, torch.float64):
        h.check(f, _affine, h.rand(3, 3, dtype=dt), h.rand(3, 3, dtype=dt))
    st = trident.stats(f)
    cs = st["compile_seconds"]
    assert len(cs) == st["versions"] == 2  # one entry per version, none for the hit
    for t in cs:
        assert set(t) == {"capture", "guards_ir", "build"}
        assert all(v >= 0 for v in t.values()) and t["capture"] > 0 and t["build"] > 0
    text = trident.explain(f)
    assert text.count("compiled in ") == 2 and "capture " in text and "C build+load" in text
