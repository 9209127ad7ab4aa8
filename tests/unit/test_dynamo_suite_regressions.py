"""What PyTorch's own Dynamo function tests (test/dynamo/test_functions.py, run against Trident
by benchmarks/dynamo_tests.py) found, each against eager on fresh random inputs, repeat calls
included (a native hit is where a version's own code runs):

- `addcdiv_`/`addcmul_` with `value=` (Dynamo's decomposition into Inductor's Python-kernel
  `prims::fma`, given a Python number for a Tensor argument) raised on every native hit;
- a returned numpy array (computed by Dynamo as a tensor) came back as a tensor on a hit;
- a list returned at two places came back as two lists on a hit, and so did a list stored
  on an argument's attribute and returned (found while fixing the first);
- a Python number for a Tensor argument of another Python-kernel operator raised on a hit
  (now a per-path eager fallback);

and what the suite needed native that ran eagerly before: a returned deque, set, frozenset,
namedtuple, structseq, OrderedDict (or a plain subclass), and an attribute Dynamo reads from
a returned array (`.strides`)."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest
import torch

import trident


def _calls(f, fn, make_args, n=4):
    """Call `f` (jitted) and `fn` (eager) `n` times on fresh inputs (own copies each); return
    the (Trident, eager, Trident's args, eager's args) of every call."""
    out = []
    for _ in range(n):
        args = make_args()
        ta = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        ea = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        out.append((f(*ta), fn(*ea), ta, ea))
    return out


def _native(f, versions=1):
    st = trident.stats(f)
    assert st["eager_paths"] == [] and not st["runs_eagerly"], st["eager_paths"]
    assert st["versions"] == versions
    assert sum(st["hits"]) >= 1, st["hits"]


def _rand(*shape):
    return lambda: [torch.randn(*shape) for _ in range(3)]


# ------------------------------------------------------ prims::fma (addcdiv_, addcmul_, lerp)


@pytest.mark.parametrize("method", ["addcdiv_", "addcmul_"])
def test_inplace_addc_with_value_runs_natively(h, method):
    def fn(a, b, c):
        a_copy = a.detach().clone()  # the suite's torch.tensor(a), without its warning
        return getattr(a_copy, method)(b, c, value=5.0)

    f = trident.jit(h.fresh(fn))
    for got, want, ta, ea in _calls(f, fn, _rand(10, 10)):
        torch.testing.assert_close(got, want)
        for x, y in zip(ta, ea):
            torch.testing.assert_close(x, y)
    _native(f)
    assert "aten::mul" in trident.explain(f) and "prims::fma" not in trident.explain(f)


@pytest.mark.parametrize("weight", ["scalar", "tensor"])
def test_lerp_runs_natively(h, weight):
    def fn(a, b, c):
        return torch.lerp(a, b, 0.3 if weight == "scalar" else c.sigmoid())

    f = trident.jit(h.fresh(fn))
    for got, want, _, _ in _calls(f, fn, _rand(4, 4)):
        torch.testing.assert_close(got, want)
    _native(f)


_PRIM = "trident_test_pymul"


def _python_prim():
    if not hasattr(torch.ops.prims, _PRIM):
        from torch._inductor.inductor_prims import make_prim

        make_prim(f"{_PRIM}(Tensor a, Tensor b) -> Tensor", lambda a, b: a * b)
    return getattr(torch.ops.prims, _PRIM)


def test_python_number_for_a_python_kernels_tensor_argument_runs_eagerly(h, record_warnings):
    prim = _python_prim()

    def fn(x):
        return prim(x, 2.0) + 1

    f = trident.jit(h.fresh(fn))
    with record_warnings() as w:
        for got, want, _, _ in _calls(f, fn, lambda: [torch.randn(5)]):
            torch.testing.assert_close(got, want)
    st = trident.stats(f)
    why = f"prims.{_PRIM}.default: a Python number for its Tensor argument b, and a kernel"
    assert [p["reason"] for p in st["eager_paths"]] == [why + " written in Python"]
    assert any("this path runs eagerly" in str(x.message) for x in h.runtime_warnings(w))


# ------------------------------------------------------------------ returned numpy arrays


@pytest.mark.parametrize("body", [
    lambda a: a.T,
    lambda a: a.copy(),
    lambda a: (a + a, a - a),
    lambda a: a.reshape([1, a.size]),
    lambda a: (a.max(axis=0), a.all(axis=0)),
    lambda a: np.fft.fftshift(a),
])
def test_returned_ndarray_stays_an_ndarray(h, body):
    def fn(x):
        return body(x.numpy())

    f = trident.jit(h.fresh(fn))
    for got, want, ta, ea in _calls(f, fn, lambda: [torch.randn(10, 10)]):
        got_l = got if isinstance(got, tuple) else (got,)
        want_l = want if isinstance(want, tuple) else (want,)
        for g, e in zip(got_l, want_l, strict=True):
            assert type(g) is np.ndarray and g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1.3e-6, atol=1e-5)
            # a view of the input in eager is one in Trident
            assert np.shares_memory(g, ta[0].numpy()) == np.shares_memory(e, ea[0].numpy())
    _native(f)


def test_returned_ndarray_attributes(h):
    def fn(x):
        a = x.numpy()
        return a.itemsize, a.strides, a.shape, a.ndim, a.size, torch.from_numpy(a.T)

    f = trident.jit(h.fresh(fn), dynamic=False)
    for got, want, _, _ in _calls(f, fn, lambda: [torch.randn(10, 10)]):
        assert got[:5] == want[:5]
        torch.testing.assert_close(got[5], want[5])
    _native(f)


# --------------------------------------------------------------- one object at two places


def test_a_list_returned_twice_is_one_list(h):
    def fn(x, y):
        z = [x + y, y, False]
        return {"x": x, "z": z, "a": x, "b": z, "c": x}

    f = trident.jit(h.fresh(fn))
    for got, want, ta, _ in _calls(f, fn, lambda: [torch.randn(4), torch.randn(4)]):
        assert got["z"] is got["b"] and want["z"] is want["b"]
        assert got["x"] is ta[0] and got["a"] is ta[0]
        assert got["z"][1] is ta[1]
        torch.testing.assert_close(got["z"][0], want["z"][0])
    _native(f)


def test_a_dict_inside_two_containers(h):
    def fn(x):
        d = {"y": x * 2}
        return [d, (d, x + 1)]

    f = trident.jit(h.fresh(fn))
    for got, want, _, _ in _calls(f, fn, lambda: [torch.randn(3)]):
        assert got[0] is got[1][0] and want[0] is want[1][0]
        torch.testing.assert_close(got[0]["y"], want[0]["y"])
    _native(f)


class _Holder:
    pass


def test_a_list_stored_and_returned_is_one_list(h):
    # Before: the version stored one list and returned another (h.z is not the result).
    def fn(holder, x):
        z = [x + 1]
        holder.z = z
        return z, z

    f = trident.jit(h.fresh(fn))
    for _ in range(3):
        holder, x = _Holder(), torch.randn(3)
        got = f(holder, x)
        assert got[0] is got[1] and holder.z is got[0]
        torch.testing.assert_close(got[0][0], x + 1)
    _native(f)


def test_distinct_equal_lists_stay_distinct(h):
    def fn(x):
        y = x + 1
        return [y], [y]

    f = trident.jit(h.fresh(fn))
    for got, _, _, _ in _calls(f, fn, lambda: [torch.randn(3)]):
        assert got[0] is not got[1] and got[0][0] is got[1][0]
    _native(f)


# -------------------------------------------------- other returned objects, now native


_NT = collections.namedtuple("_NT", ["x", "y"])


class _OD(collections.OrderedDict):
    pass


class _D(dict):
    pass


@pytest.mark.parametrize("name, fn", [
    ("deque", lambda a, b: collections.deque([a + 1, "s", b], maxlen=5)),
    ("set", lambda a, b: ({1, 2, 3}, a + b)),
    ("frozenset", lambda a, b: (frozenset([1, 2]), a * b)),
    ("namedtuple", lambda a, b: _NT(a + b, b)),
    ("structseq", lambda a, b: torch.max(a + b, 0)),
    ("OrderedDict", lambda a, b: collections.OrderedDict(s=a + 1, t=b)),
    ("OrderedDict subclass", lambda a, b: _OD(s=a - b)),
    ("dict subclass", lambda a, b: _D(s=a * b, n=3)),  # torch 2.11: UserDefinedDictVariable
])
def test_returned_python_objects_run_natively(h, name, fn):
    f = trident.jit(h.fresh(fn))
    for got, want, ta, ea in _calls(f, fn, lambda: [torch.randn(4, 3), torch.randn(4, 3)]):
        assert type(got) is type(want), name
        if isinstance(want, collections.deque):
            assert got.maxlen == want.maxlen
        h.assert_tree_equal(_plain(got), _plain(want))
    _native(f)


def test_namedtuple_class_made_in_the_function(h):
    def fn(a, b):
        mytuple = collections.namedtuple("mytuple", ["x", "y", "xy"])
        tmp = mytuple(a, b, a + b)
        return mytuple(tmp.x, tmp[1], tmp.xy + b)

    f = trident.jit(h.fresh(fn))
    for got, want, ta, _ in _calls(f, fn, lambda: [torch.randn(3), torch.randn(3)]):
        assert type(got).__name__ == "mytuple" and got._fields == want._fields
        assert got.x is ta[0] and got.y is ta[1]
        torch.testing.assert_close(got.xy, want.xy)
    _native(f)


def test_namedtuple_subclass_with_attributes_still_runs_eagerly(h):
    class Sub(_NT):
        pass

    def fn(a, b):
        t = Sub(a, b)
        t.z = a + 1
        return t

    f = trident.jit(h.fresh(fn))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for got, want, _, _ in _calls(f, fn, lambda: [torch.randn(3), torch.randn(3)]):
            assert type(got) is Sub
            torch.testing.assert_close(got.z, want.z)


def _plain(obj):
    """Containers as tuples/lists/dicts of their items (sets sorted by repr)."""
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if isinstance(obj, collections.deque):
        return list(obj)
    if isinstance(obj, tuple):
        return tuple(_plain(x) for x in obj)
    if isinstance(obj, list):
        return [_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj
