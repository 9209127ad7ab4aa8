"""The dispatch index (scm_dispatch.h): an SCM with many versions tries only the versions
whose tensor key fits the call, and the keyless ones, in ascending order; when none hits,
every version in order.  The first matching version still wins, misses still record each
version's failed guard, and a small SCM has no index."""

from __future__ import annotations

import dataclasses
import random

import torch

import trident
from trident.api import _scm_of
from trident.codegen import c as cgen
from trident.codegen import dispatch
from trident.ir import nodes as ir
from trident.native import build


def _lin(x):
    return x * 2 + 1


def _scale(x, a):
    return x * a + 1


def _one_hot_hit(f, call, want: int) -> None:
    """`call()` is a hit of version `want`, and of no other, without a capture."""
    st = trident.stats(f)
    call()
    after = trident.stats(f)
    assert after["captures"] == st["captures"] and after["misses"] == st["misses"]
    delta = [b - a for a, b in zip(st["hits"], after["hits"])]
    assert delta == [int(i == want) for i in range(len(delta))], (want, delta)


def _indexed(f) -> bool:
    return "The dispatch index" in _scm_of(f).c_source


def test_random_order_hits_the_version_of_each_shape():
    f = trident.jit(_lin, dynamic=False, max_versions=64)
    shapes = [(n,) for n in range(1, 13)] + [(n, 3) for n in range(1, 13)]
    for s in shapes:
        x = torch.randn(s)
        torch.testing.assert_close(f(x), _lin(x))
    assert trident.stats(f)["versions"] == len(shapes) and _indexed(f)
    rng = random.Random(0)
    for _ in range(2):
        order = list(range(len(shapes)))
        rng.shuffle(order)
        for k in order:
            x = torch.randn(shapes[k])

            def call(x=x):
                torch.testing.assert_close(f(x), _lin(x))

            _one_hot_hit(f, call, k)


def _variants():
    """(make x, a) per version of _scale: versions that differ only in dtype, in strides
    (a transposed input) or in a non-tensor argument (an int, a float) share tensor keys."""
    out = []
    for n in (2, 3, 4, 5):
        out.append((lambda n=n: torch.randn(n, 3), 2))
        out.append((lambda n=n: torch.randn(n, 3, dtype=torch.float64), 2))
        out.append((lambda n=n: torch.randn(3, n).t(), 2))  # same sizes, strides (1, n)
        out.append((lambda n=n: torch.randn(n, 3), 3))      # same key as the first
        out.append((lambda n=n: torch.randn(n, 3), 0.5))    # and again
    return out


def test_same_key_versions_differ_by_dtype_stride_and_scalar():
    f = trident.jit(_scale, dynamic=False, max_versions=64)
    cases = _variants()
    for make, a in cases:
        x = make()
        torch.testing.assert_close(f(x, a), _scale(x, a))
    assert trident.stats(f)["versions"] == len(cases) and _indexed(f)
    idx = cgen.dispatch_index(trident.versions(f))
    assert len(idx.groups) == 2 and not idx.keyless  # float32 (both layouts), float64
    assert any(len(ks) == 3 for g in idx.groups for _, ks in g.keys)  # 2, 3 and 0.5
    order = list(range(len(cases)))
    random.Random(1).shuffle(order)
    for k in order:
        make, a = cases[k]
        x = make()

        def call(x=x, a=a):
            torch.testing.assert_close(f(x, a), _scale(x, a))

        _one_hot_hit(f, call, k)

    # A miss still records, in every version, the guard that failed: a new shape with a = 2
    # fails the tensor_match of the versions with a == 2 and the `a` guard of the others.
    # (Read from the SCM that missed, which this reference keeps: the miss installs another.)
    vs = trident.versions(f)
    missed = _scm_of(f).function._module
    x = torch.randn(6, 3)
    torch.testing.assert_close(f(x, 2), _scale(x, 2))
    failed = [str(v.guards[k]) for v, (_, k) in zip(vs, missed.stats())]
    for k, text in enumerate(failed):
        want = "tensor_match L['x']" if cases[k][1] == 2 else "equals_match L['a']"
        assert want in text, (k, text)
    # the miss reason names the first versions' failed guards and counts the rest
    reason = trident.versions(f)[-1].reason
    assert failed[0] in reason and "later version(s) failed" in reason, reason


def test_a_non_tensor_argument_where_versions_expect_a_tensor():
    f = trident.jit(_lin, dynamic=False, max_versions=64)
    xs = [torch.randn(n) for n in range(1, 11)]
    for x in xs:
        torch.testing.assert_close(f(x), _lin(x))
    assert _indexed(f)
    missed = _scm_of(f).function._module
    assert f(3) == 7  # a miss: the probes see an int, no candidate, every version fails
    n = trident.stats(f)["versions"]
    assert n == len(xs) + 1
    assert all(k >= 0 for _, k in missed.stats()), missed.stats()
    _one_hot_hit(f, lambda: f(3), n - 1)  # the keyless version
    _one_hot_hit(f, lambda: torch.testing.assert_close(f(xs[4]), _lin(xs[4])), 4)


# ---- hand-built versions: the order among versions that all match


def _hand_versions(tm: ir.TensorMatch, f64: int, seen):
    """Versions returning their own name: v0 dynamic (size >= 10); v1..v9 static sizes 1..6
    and 10..12; v10 an int argument; v11 dynamic (size <= 7); v12..v16 float64 static sizes
    1..5.  A 1-D float32 tensor of size 10..12 matches v0 and a static version after it.
    Each version's first guard calls seen(x, k), which notes that version k was evaluated."""
    x = tm.source

    def size(op, n):
        return ir.ShapeGuard(ir.BinOp(op, ir.SymLeaf(ir.TensorSize(x, 0)), ir.IntConst(n)),
                             f"s0 {op} {n}")

    dyn = dataclasses.replace(tm, sizes=(None,), strides=(1,))
    vs = [(dyn, size(">=", 10))]
    vs += [(dataclasses.replace(tm, sizes=(n,), strides=(1,)),) for n in (*range(1, 7), 10, 11, 12)]
    vs.append((ir.TypeMatch(x, 2, "int"),))
    vs.append((dyn, size("<=", 7)))
    vs += [(dataclasses.replace(tm, sizes=(n,), strides=(1,), dtype=f64),) for n in range(1, 6)]
    return [ir.Version(k, (ir.CallCheck(x, 3, 4, "seen"), *guards), (),
                       ir.OutConst(1, f"v{k}"), 1, consts=(torch.Tensor, f"v{k}", int, seen, k))
            for k, guards in enumerate(vs)]


def test_the_first_matching_version_wins():
    # A real tensor_match guard (dispatch keys, device) to derive the versions from.
    f = trident.jit(_lin, dynamic=False)
    f(torch.randn(4))
    rt = build.runtime_module()
    tm = next(g for g in trident.versions(f)[0].guards if isinstance(g, ir.TensorMatch))
    assert tm.dtype == rt.enum_code(torch.float32)
    evaluated = []

    def seen(x, k):
        evaluated.append(k)
        return True

    versions = _hand_versions(dataclasses.replace(tm, type_const=0),
                              rt.enum_code(torch.float64), seen)
    idx = cgen.dispatch_index(versions)
    assert [len(g.keys) for g in idx.groups] == [9, 5] and idx.keyless == (0, 10, 11)
    so = build.build_scm(cgen.generate(versions)).so
    module = rt.load_scm(str(so), cgen.consts_tuple({}, {}, versions))

    def probe(x):
        return x

    fn = rt.Function(probe, lambda *a: "miss")
    fn._install(module)

    def call(x, want, tried):
        evaluated.clear()
        assert fn(x) == want
        assert evaluated == tried, (want, evaluated)

    for n in random.Random(2).sample(range(1, 16), 15):
        if n <= 6:  # the keyless versions before it, then its own: nothing else
            call(torch.randn(n), f"v{n}", [0, n])
        elif n == 7:
            call(torch.randn(n), "v11", [0, 10, 11])
        elif n >= 10:  # v0 wins over v7..v9, keyed 10..12
            call(torch.randn(n), "v0", [0])
        else:  # a miss: the keyless versions, then every other in order, each once
            call(torch.randn(n), "miss", [0, 10, 11, *range(1, 10), *range(12, 17)])
            assert [failed for _, failed in module.stats()] == [2] + [1] * 10 + [2] + [1] * 5
    for n in range(1, 6):
        call(torch.randn(n, dtype=torch.float64), f"v{11 + n}", [0, 10, 11, 11 + n])
    call(5, "v10", [0, 10])
    call(torch.randn(7, dtype=torch.float64), "miss", [0, 10, 11, *range(1, 10), *range(12, 17)])
    call(torch.randn(2).requires_grad_(), "miss", [0, 10, 11, *range(1, 10), *range(12, 17)])
    call("x", "miss", [0, 10, 11, *range(1, 10), *range(12, 17)])
    hits = [h for h, _ in module.stats()]
    assert hits == [6, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1], hits


def test_a_small_scm_has_no_index():
    f = trident.jit(_lin, dynamic=False)
    for n in (1, 2):
        f(torch.randn(n))
    assert not cgen.dispatch_index(trident.versions(f)).groups
    assert "trt_scm_index = {0, NULL, 0, NULL, NULL};" in _scm_of(f).c_source


def test_a_dynamic_dimension_is_not_in_the_key():
    f = trident.jit(_lin, dynamic=True)
    f(torch.randn(4, 3))
    (tm,) = [g for g in trident.versions(f)[0].guards if isinstance(g, ir.TensorMatch)]
    assert tm.sizes == (None, None) and tm.strides == (None, 1)
    (part,) = cgen.version_key(trident.versions(f)[0])
    assert part.probe.pos == (3,) and part.values == (1,)  # the stride of dimension 1 alone


def _random_tensor(rng, nd=None):
    nd = nd or rng.choice((1, 2))
    dtype = rng.choice((torch.float32, torch.float64))
    sizes = [rng.choice((1, 2, 3)) for _ in range(nd)]
    t = torch.randn(*sizes, dtype=dtype)
    if nd == 2 and rng.random() < 0.3:
        t = torch.randn(*sizes[::-1], dtype=dtype).t()
    return t


def _random_versions(tm: ir.TensorMatch, rt, rng, n: int) -> list:
    """Versions with tensor guards made from random tensors, some sizes and strides left
    symbolic, on x and sometimes on y (or an int y); each returns its own name."""
    x, y = ir.Local(0, "x"), ir.Local(1, "y")

    def match(src, t):
        sizes = tuple(None if rng.random() < 0.25 else s for s in t.shape)
        strides = tuple(None if rng.random() < 0.25 else s for s in t.stride())
        return dataclasses.replace(tm, source=src, dtype=rt.enum_code(t.dtype), sizes=sizes,
                                   strides=strides, dispatch_keys=rt.dispatch_keys(t))

    out = []
    for k in range(n):
        guards = [match(x, _random_tensor(rng))]
        r = rng.random()
        if r < 0.3:
            guards.append(match(y, _random_tensor(rng)))
        elif r < 0.4:
            guards.append(ir.TypeMatch(y, 2, "int"))
        if rng.random() < 0.2:
            guards.reverse()
        out.append(ir.Version(k, tuple(guards), (), ir.OutConst(1, f"v{k}"), 1,
                              consts=(torch.Tensor, f"v{k}", int)))
    return out


def test_the_index_agrees_with_the_ordered_scan(monkeypatch):
    f = trident.jit(_lin, dynamic=False)
    f(torch.randn(4))
    rt = build.runtime_module()
    tm = next(g for g in trident.versions(f)[0].guards if isinstance(g, ir.TensorMatch))
    tm = dataclasses.replace(tm, type_const=0)
    rng = random.Random(3)
    versions = _random_versions(tm, rt, rng, 60)

    def load(text):
        fn = rt.Function(lambda x, y: None, lambda *a: "miss")
        fn._install(rt.load_scm(str(build.build_scm(text).so),
                                cgen.consts_tuple({}, {}, versions)))
        return fn

    monkeypatch.setattr(dispatch, "INDEX_MIN_GROUP", 1)
    indexed = cgen.generate(versions)
    assert len(cgen.dispatch_index(versions).groups) >= 8
    monkeypatch.setattr(dispatch, "INDEX_MIN_VERSIONS", len(versions) + 1)
    ordered = cgen.generate(versions)
    assert "The dispatch index" in indexed.text() and "The dispatch index" not in ordered.text()
    a, b = load(indexed), load(ordered)
    served = set()
    for _ in range(2000):
        x = _random_tensor(rng)
        y = _random_tensor(rng) if rng.random() < 0.7 else rng.choice((1, 2.0, None))
        got = a(x, y)
        assert got == b(x, y), (x.shape, x.stride(), x.dtype, y)
        served.add(got)
    assert len(served) > 20, served
