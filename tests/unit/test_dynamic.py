"""Version growth on misses, and one version serving many sizes when
dimensions are dynamic (dynamic=None: automatic after a size changes;
dynamic=True: from the first capture; dynamic=False: always specialize)."""

from __future__ import annotations

import dataclasses

import pytest

import trident


def _norm(x, w):
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5) * w


def _rowsum(x):
    return x.sum(-1) + x[..., 0]


def test_growth_on_each_miss(h):
    f = trident.jit(_rowsum, dynamic=False)
    seen = []
    for n in (2, 3, 2, 5, 3, 7, 7, 2):
        h.check(f, _rowsum, h.rand(n, 4))
        if n not in seen:
            seen.append(n)
        st = trident.stats(f)
        assert st["versions"] == len(seen)
        assert st["misses"] == len(seen)
        assert st["captures"] == len(seen)
        assert len(st["hits"]) == len(seen)
    before = trident.stats(f)["hits"]
    for n in seen:
        h.check(f, _rowsum, h.rand(n, 4))
    after = trident.stats(f)["hits"]
    assert [a - b for a, b in zip(after, before)] == [1, 1, 1, 1]
    assert trident.stats(f)["misses"] == 4


def test_hit_counters_survive_a_rebuild(h):
    f = trident.jit(_rowsum, dynamic=False)
    for _ in range(3):
        f(h.rand(2, 4))
    assert trident.stats(f)["hits"] == [2]
    f(h.rand(3, 4))  # miss: rebuilds the SCM with two versions
    assert trident.stats(f)["hits"] == [2, 0]


def test_default_dynamic_after_second_size(h):
    _rowsum_ = h.fresh(_rowsum)  # no automatic-dynamic memory from other tests
    f = trident.jit(_rowsum_)  # dynamic=None
    h.check(f, _rowsum, h.rand(3, 4))
    assert trident.stats(f)["versions"] == 1
    h.check(f, _rowsum, h.rand(5, 4))
    assert trident.stats(f)["versions"] == 2
    for n in (6, 7, 9, 16, 33, 100, 2):
        h.check(f, _rowsum, h.rand(n, 4))
    st = trident.stats(f)
    assert st["versions"] == 2
    assert st["misses"] == 2
    assert st["hits"][1] == 7
    # The first (static) version still serves its own size.
    h.check(f, _rowsum, h.rand(3, 4))
    assert trident.stats(f)["versions"] == 2
    assert trident.stats(f)["hits"] == [1, 7]


def test_default_dynamic_only_the_changed_dim(h):
    f = trident.jit(h.fresh(_norm))
    h.check(f, _norm, h.rand(3, 8), h.rand(8))
    h.check(f, _norm, h.rand(4, 8), h.rand(8))
    for n in (5, 6, 12):
        h.check(f, _norm, h.rand(n, 8), h.rand(8))
    assert trident.stats(f)["versions"] == 2
    # The last dim was never changed: it is still specialized.
    h.check(f, _norm, h.rand(5, 16), h.rand(16))
    h.check(f, _norm, h.rand(6, 16), h.rand(16))
    assert trident.stats(f)["fallbacks"] == 0
    for n, d in ((3, 8), (7, 16), (9, 32), (2, 3)):
        h.check(f, _norm, h.rand(n, d), h.rand(d))
    assert trident.stats(f)["fallbacks"] == 0


def test_dynamic_true_one_version_for_all_sizes(h):
    f = trident.jit(h.fresh(_norm), dynamic=True)
    for n, d in ((3, 8), (4, 8), (17, 8), (3, 5), (64, 31), (2, 2)):
        h.check(f, _norm, h.rand(n, d), h.rand(d))
    st = trident.stats(f)
    assert st["versions"] == 1
    assert st["misses"] == 1
    assert st["hits"] == [5]


def test_dynamic_true_size_relations_are_guarded(h):
    """A version built for x and y of equal (symbolic) size must not serve
    broadcasting calls."""
    def fn(x, y):
        return x + y

    f = trident.jit(fn, dynamic=True)
    h.check(f, fn, h.rand(4, 5), h.rand(4, 5))
    h.check(f, fn, h.rand(6, 7), h.rand(6, 7))
    assert trident.stats(f)["versions"] == 1
    h.check(f, fn, h.rand(6, 7), h.rand(1, 7))
    h.check(f, fn, h.rand(6, 7), h.rand(7))
    h.check(f, fn, h.rand(3, 1), h.rand(1, 9))
    h.check(f, fn, h.rand(6, 7), h.rand(6, 7))
    with pytest.raises(RuntimeError) as ej:
        f(h.rand(6, 7), h.rand(5, 7))
    with pytest.raises(RuntimeError) as ee:
        fn(h.rand(6, 7), h.rand(5, 7))
    assert str(ej.value) == str(ee.value)


def test_shape_guards_are_produced_once_per_capture_and_still_checked(h, monkeypatch):
    """Dynamo's own SHAPE_ENV guard code is not built while Trident captures (an adapter):
    the shape env's guards are produced once, by Trident, and the version still checks
    them (a size relation of the capture holds or the call misses)."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    calls = []
    real = ShapeEnv.produce_guards_verbose

    def counted(self, *a, **kw):
        calls.append(kw.get("langs"))
        return real(self, *a, **kw)

    monkeypatch.setattr(ShapeEnv, "produce_guards_verbose", counted)

    def fn(x, y):
        return x[: y.shape[0] * 2] * 2 + 1

    f = trident.jit(fn, dynamic=True)
    h.check(f, fn, h.rand(9), h.rand(3))
    assert calls == [("python",)]  # Trident's own (guard_record.shape_exprs)
    h.check(f, fn, h.rand(11), h.rand(4))  # 2 * 4 <= 11: the same version
    assert trident.stats(f)["versions"] == 1
    h.check(f, fn, h.rand(5), h.rand(4))  # 2 * 4 > 5: another path, a miss
    assert trident.stats(f)["misses"] == 2


def test_dynamic_true_size_zero_and_one_are_specialized(h):
    f = trident.jit(_rowsum, dynamic=True)
    for n in (4, 1, 0, 5, 1, 0, 3):
        h.check(f, _rowsum, h.rand(n, 3))
    for n in (1, 2, 7):
        h.check(f, _rowsum, h.rand(3, n))


def test_dynamic_false_specializes_every_size(h):
    f = trident.jit(_rowsum, dynamic=False)
    for i, n in enumerate((2, 3, 4, 5)):
        h.check(f, _rowsum, h.rand(n, 2))
        assert trident.stats(f)["versions"] == i + 1


def test_dynamic_reshape_and_view_arithmetic(h):
    def fn(x):
        b, n = x.shape
        return x.reshape(b * n // 2, 2).flip(0)[: max(1, b - 1)] * n

    f = trident.jit(fn)
    for b, n in ((2, 4), (3, 4), (4, 6), (5, 8), (9, 2), (3, 10)):
        h.check(f, fn, h.rand(b, n))
    assert trident.stats(f)["fallbacks"] == 0


def test_dynamic_size_returned_as_python_int(h):
    def fn(x):
        return x.shape[0] * 2, x.shape[1], x.sum()

    f = trident.jit(fn)
    for n in (2, 3, 4, 11, 3, 2):
        h.check(f, fn, h.rand(n, 3))


def test_dynamic_numel_returned_as_python_int(h):
    def fn(x):
        return x.numel(), x.sum()

    f = trident.jit(fn)
    for n in (2, 3, 4, 11):
        h.check(f, fn, h.rand(n, 3))


_INT_BY_VALUE = ("bug: ints in the result are mapped onto symbolic graph outputs by their "
                 "capture-time value (lower._output_tree): ints computed from sizes that are "
                 "not SymDefs come back as capture-time constants, and any int that equals a "
                 "size at capture time is replaced by that size")


def test_dynamic_shape_as_list_returned(h):
    def fn(x):
        return x + 1, list(x.shape)

    f = trident.jit(fn)
    for n in (2, 3, 4, 5):
        h.check(f, fn, h.rand(n, 3))


def test_constant_int_equal_to_a_dynamic_size_is_not_replaced(h):
    def fn(x):
        return x + 1, x.shape[0], 3

    f = trident.jit(fn)
    for n in (2, 3, 5, 7):
        h.check(f, fn, h.rand(n))


def test_argument_returned_unused_stays_native_as_sizes_and_values_change(h):
    """An argument the function returns without looking at it (an int, a str, a tensor) comes
    back as it was passed, from the same versions: no guard on its value, and no fallback
    once sizes turn dynamic (describing the result used to realize the int as a graph input
    after the graph was compiled, and the path ran eagerly)."""
    def fn(x, k, t):
        return x * 2, k, t

    f = trident.jit(fn)
    for i, k in enumerate((2, 3, 2.5, "s", None, 7, -1)):
        x, t = h.rand(3 + i % 2), h.rand(2)
        h.check(f, fn, x, k, t)
        out = f(x, k, t)
        assert out[2] is t and out[1] is k
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and st["eager_paths"] == [], st
    assert st["versions"] == 2 and sum(st["hits"]) == 12, st


def test_int_argument_only_guarded_on_and_returned_stays_native(h):
    """An int the trace only compares (a shape guard once it is dynamic) and returns: its
    symbol is pruned from the graph, and the version returns the argument the caller passed
    (it was 'returned int l_k_ is not a graph value', an eager path)."""
    def fn(x, k):
        y = x + 1
        if k > 100:
            y = y * 2
        return y, k

    f = trident.jit(fn)
    for k in (3, 4, 5, 150, 200, 7, 101):
        h.check(f, fn, h.rand(8), k)
    st = trident.stats(f)
    assert st["eager_paths"] == [] and st["fallbacks"] == 0, st
    assert st["versions"] == 3 and sum(st["hits"]) == 4, st


def test_attribute_returned_unused_after_a_store_runs_eagerly_with_a_reason(h):
    """`a = o.v; o.v = 3; return x + 1, a`: the old value cannot be read back after the store;
    that path runs eagerly (eager's results and object state) and says why."""
    class Box:
        def __init__(self, v):
            self.v = v

    def fn(x, o):
        a = o.v
        o.v = 3
        return x + 1, a

    f = trident.jit(fn)
    for i in range(4):
        ob, oe = Box(i), Box(i)
        x = h.rand(3 + i % 2)
        got, ref = f(x, ob), fn(x.clone(), oe)
        h.assert_tree_equal(got, ref)
        assert ob.v == oe.v == 3
    paths = trident.stats(f)["eager_paths"]
    assert any("L['o'].v unused" in p["reason"] for p in paths), paths


def test_bool_from_dynamic_size_returned(h):
    def fn(x):
        return x + 1, x.shape[0] > 3

    f = trident.jit(fn)
    for n in (2, 3, 4, 5):
        h.check(f, fn, h.rand(n, 3))


def test_dynamic_slicing_with_sizes(h):
    def fn(x):
        n = x.shape[0]
        return x[n // 2:], x[: n - 1:2], x[-3:]

    f = trident.jit(fn)
    for n in (4, 5, 6, 9, 13, 4):
        h.check(f, fn, h.rand(n, 2), strides=True)


def test_max_versions_keeps_serving_its_versions_with_one_warning(h, record_warnings):
    # Past the limit a call that matches no version runs eagerly, uncaptured; the versions
    # keep serving theirs (as torch.compile's cache entries do past its limit).
    f = trident.jit(_rowsum, dynamic=False, max_versions=2)
    with record_warnings() as rec:
        for n in (2, 3, 4, 5, 2, 3, 6, 4, 3):
            h.check(f, _rowsum, h.rand(n, 3))
    warns = h.runtime_warnings(rec)
    assert len(warns) == 1, [str(w.message) for w in warns]
    assert "max_versions" in str(warns[0].message)
    st = trident.stats(f)
    assert st["versions"] == 2 and st["hits"] == [1, 2]
    assert st["eager_past_limit"] == 4 and not st["runs_eagerly"]
    assert "max_versions=2" in st["fallback_reason"] and st["fallbacks"] == 1
    assert "4 call(s) matched no version and ran eagerly" in trident.explain(f)


def test_past_max_versions_mostly_missing_calls_make_the_function_eager(h, record_warnings):
    # A miss past the limit evaluates every version's guards before eager's call; where the
    # hits no longer make up for that (fewer than half the calls hit), the whole function
    # runs eagerly, and a call then costs what eager's does (the native object calls fn).
    from trident.scm import PAST_LIMIT_WINDOW

    f = trident.jit(_rowsum, dynamic=False, max_versions=2)
    with record_warnings() as rec:
        for n in (2, 3, 4):
            h.check(f, _rowsum, h.rand(n, 3))
        for i in range(PAST_LIMIT_WINDOW - 1):
            h.check(f, _rowsum, h.rand(4, 3))
            h.check(f, _rowsum, h.rand(2, 3))  # half of the calls hit: not enough
        assert not trident.stats(f)["runs_eagerly"]
        h.check(f, _rowsum, h.rand(5, 3))
    st = trident.stats(f)
    assert st["runs_eagerly"] and "fewer than half" in st["fallback_reason"], st
    assert st["hits"] == [PAST_LIMIT_WINDOW - 1, 0]
    warns = [str(w.message) for w in h.runtime_warnings(rec)]
    assert len(warns) == 2 and "runs eagerly from now on" in warns[1], warns
    h.check(f, _rowsum, h.rand(2, 3))  # no version serves now
    assert trident.stats(f)["hits"] == [PAST_LIMIT_WINDOW - 1, 0]


def test_versions_do_not_exceed_max_versions_default_dynamic(h, record_warnings):
    f = trident.jit(_norm, max_versions=3)
    with record_warnings():
        for d in (2, 3, 4, 5, 6, 7):
            for n in (2, 3):
                h.check(f, _norm, h.rand(n, d), h.rand(d))
    assert trident.stats(f)["versions"] <= 3


def _scaled(x):
    return x * 3 - 1


def test_after_a_static_retry_for_triton_later_misses_capture_statically(h, monkeypatch):
    """The SCM's policy (Capture.triton_needs_static): once a capture was a static retry
    because a Triton launch's autotune key read a dynamic size, later misses ask for static
    shapes at once.  The retry itself needs a Triton launch (tests/gpu); here the second
    capture reports it, as capture() does after a retry."""
    import trident.scm as scm_mod

    asked = []
    real = scm_mod.capture

    def capture(*a, **kw):
        asked.append(kw.get("dynamic"))
        if len(asked) != 2:
            return real(*a, **kw)
        cap = real(*a, **{**kw, "dynamic": False})  # what the retry captures
        return dataclasses.replace(cap, triton_needs_static=True, notes=(
            *cap.notes, "captured with static shapes: a Triton autotune key or heuristic "
            "reads a dynamic size"))

    monkeypatch.setattr(scm_mod, "capture", capture)
    f = trident.jit(_scaled)
    for n in (3, 4, 5, 6, 4, 3, 7):
        h.check(f, _scaled, h.rand(n, 2))
    assert asked[:2] == [None, None] and all(d is False for d in asked[2:]), asked
    st = trident.stats(f)
    assert st["fallbacks"] == 0
    # sizes 3 and 4 got their versions before the retry was known; 5, 6 and 7 one each
    assert st["versions"] == len(asked) == 5, trident.explain(f)
    ex = trident.explain(f)
    assert "later misses capture with static shapes at once" in ex
