"""Adapters (capture/adapters.py): disabled log calls are dropped under a
guard that the logger is still quiet; an enabled logger falls back to eager,
which logs."""

from __future__ import annotations

import dataclasses

import logging
import sys
import types
import warnings

import pytest
import torch

import trident

log = logging.getLogger("trident_test_adapters")
log.setLevel(logging.WARNING)


def _logs_then_computes(x, w):
    log.debug("FORWARD %s", "x")
    y = x * w + 1
    log.info("done")
    return y.relu()


def _logs_with_log_method(x):
    log.log(logging.DEBUG, "via log()")
    return x.sin()


def test_disabled_log_calls_are_dropped_and_guarded(h, caplog):
    f = trident.jit(_logs_then_computes)
    for _ in range(3):
        x, w = h.rand(5, 4), h.rand(4)
        h.check(f, _logs_then_computes, x, w)
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and st["versions"] == 1
    assert "logger_quiet" in trident.explain(f)
    hits = sum(st["hits"])
    assert hits >= 2

    # Enabling DEBUG on that logger: the version no longer matches, Dynamo
    # cannot drop an enabled log call, so the function runs eagerly (from now
    # on: a path Trident cannot capture falls back) and logs.
    log.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger=log.name):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                x, w_ = h.rand(5, 4), h.rand(4)
                h.check(f, _logs_then_computes, x, w_)
        assert any("FORWARD" in r.getMessage() for r in caplog.records)
        assert any("runs eagerly" in str(m.message) for m in w)
        st = trident.stats(f)
        assert sum(st["hits"]) == hits  # not served by the version
        assert "logging.Logger method" in st["fallback_reason"]
    finally:
        log.setLevel(logging.WARNING)
    h.check(f, _logs_then_computes, h.rand(5, 4), h.rand(4))


def test_log_method_with_constant_level(h):
    f = trident.jit(_logs_with_log_method)
    for _ in range(2):
        h.check(f, _logs_with_log_method, h.rand(7))
    assert trident.stats(f)["fallbacks"] == 0
    assert "logger_quiet" in trident.explain(f)


def test_rebinding_the_logger_global_is_checked(h):
    global log
    f = trident.jit(_logs_then_computes)
    h.check(f, _logs_then_computes, h.rand(3, 4), h.rand(4))
    old = log
    loud = logging.getLogger("trident_test_adapters.loud")
    loud.setLevel(logging.DEBUG)
    log = loud
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            h.check(f, _logs_then_computes, h.rand(3, 4), h.rand(4))
        # the version's quiet-logger guard read the new, loud logger
        st = trident.stats(f)
        assert st["hits"][0] == 0 and st["fallbacks"] == 1  # that path now runs eagerly
    finally:
        log = old


def _promoting(x, y):
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, dtype = elementwise_dtypes(x, y, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return torch.empty_like(x, dtype=dtype).copy_(x + y)


def test_elementwise_dtypes_is_a_constant_of_the_version(h):
    # FlagGems' type promotion; each (dtype, scalar type) pair is its own version
    f = trident.jit(_promoting, strict=True)
    cases = [(h.rand(4), 2), (h.rand(4, dtype=torch.int64), 2.5),
             (h.rand(3, dtype=torch.float16), h.rand(3)), (h.rand(4), 3),
             (h.rand(4, dtype=torch.int64), 1.5), (h.rand(2, dtype=torch.int32), 7)]
    for x, y in cases + cases:
        got = h.check(f, _promoting, x, y)
        assert got.dtype == _promoting(x, y).dtype
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and sum(st["hits"]) >= 2


def _prod_of_generator(x):
    import math

    n = math.prod(s * 1 for s in x.shape)
    m = math.prod(x.shape, start=2)
    return x.reshape(n) * m


def test_math_prod_over_a_generator(h):
    f = trident.jit(_prod_of_generator, strict=True)
    for shape in ((2, 3), (4, 5), (2, 3)):
        h.check(f, _prod_of_generator, h.rand(*shape))
    assert trident.stats(f)["fallbacks"] == 0


# --- a Python bool in symbolic arithmetic (torch < 2.13) ---------------------


def _count_unknown_dims(x):
    # einops' unpack: over a dynamic size and a static one, sum() adds a SymBool and then a
    # Python bool to the SymInt it has so far
    if sum(s == -1 for s in x.size()) == 0:
        return x + 1
    return x - 1


def _bool_operands(x):
    n, m = x.size()
    k = (n + False) * True - (True - n) + (False + (m == n)) * (n - True) + (True * n)
    return x * k


@pytest.mark.parametrize("fn", [_count_unknown_dims, _bool_operands])
def test_a_bool_operand_of_symbolic_arithmetic_is_an_int(h, fn):
    f = trident.jit(fn)
    for shape in ((10, 10), (10, 10), (6, 10), (4, 10), (10, 10)):
        h.check(f, fn, h.rand(*shape))
    assert trident.stats(f)["fallbacks"] == 0


# --- globals copied from another module (FlagGems' generated wrappers) ------

_GEN_SRC = '''
import torch

SCALE = 3.0
OFFSET = torch.ones(())


def wrapper(x):
    return x * SCALE + OFFSET
'''


def _generated_module(tmp_path, name_of_other):
    """A module loaded from a file, its globals then updated with another
    module's (FlagGems' pointwise_dynamic does this), so `__name__` names a
    module that does not hold `SCALE`."""
    import importlib.util
    import sys

    path = tmp_path / "gen_wrapper.py"
    path.write_text(_GEN_SRC)
    spec = importlib.util.spec_from_file_location("_trident_gen_wrapper", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    other = sys.modules[name_of_other]
    m.__dict__.update({k: v for k, v in vars(other).items()
                       if k in ("__name__", "__file__", "__spec__")})
    assert not hasattr(other, "SCALE")
    return m


def test_globals_copied_from_another_module_are_guarded_as_a_dict(h, tmp_path):
    m = _generated_module(tmp_path, "logging")
    wrapper = m.wrapper

    def entry(x):
        return wrapper(x).relu()

    f = trident.jit(entry, strict=True)
    for _ in range(3):
        h.check(f, entry, h.rand(8))
    st = trident.stats(f)
    assert st["versions"] == 1 and st["fallbacks"] == 0 and sum(st["hits"]) >= 2
    # a change to the generated module's global is seen (guarded), never stale
    m.SCALE = -2.0
    x = h.rand(8)
    h.check(f, entry, x)
    torch.testing.assert_close(f(x), (x * -2.0 + 1).relu())
    m.OFFSET = torch.full((), 5.0)
    h.check(f, entry, h.rand(8))


def test_no_globals_alias_is_left_after_the_capture(h, tmp_path):
    m = _generated_module(tmp_path, "logging")
    wrapper = m.wrapper

    def entry(x):
        return wrapper(x).relu()

    f = trident.jit(entry, strict=True)
    h.check(f, entry, h.rand(8))
    st = trident.stats(f)
    assert st["versions"] == 1 and st["fallbacks"] == 0, st
    # the alias lived only while the capture ran: neither the root frame's globals (this
    # module's) nor the generated module's hold it, and the version reads the dict itself
    left = [k for k in list(globals()) + list(vars(m)) if "trident_globals" in k]
    assert left == [], left
    assert "trident_globals" not in trident.explain(f)
    m.SCALE = 5.0  # still guarded through the dict
    x = h.rand(8)
    torch.testing.assert_close(f(x), (x * 5.0 + 1).relu())


def test_a_module_outside_sys_modules_is_guarded_through_its_function(h, tmp_path):
    # FlagGems' other generators load a module from a file under a name that is not in
    # sys.modules (`_gen_module_rank_2`): Dynamo would import sys.modules[__name__] for its
    # globals and fail (ModuleNotFoundError), so the path ran eagerly.
    import importlib.util

    path = tmp_path / "gen_unlisted.py"
    path.write_text(_GEN_SRC)
    spec = importlib.util.spec_from_file_location("_trident_gen_unlisted_rank_2", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    holder = types.SimpleNamespace(overloads={"2": m.wrapper})

    def entry(x):
        return holder.overloads["2"](x).relu()

    f = trident.jit(entry, strict=True)
    for _ in range(3):
        h.check(f, entry, h.rand(8))
    st = trident.stats(f)
    assert st["versions"] == 1 and st["fallbacks"] == 0 and sum(st["hits"]) >= 2, st
    m.SCALE = -4.0  # guarded through holder.overloads["2"].__globals__
    x = h.rand(8)
    torch.testing.assert_close(f(x), (x * -4.0 + 1).relu())


# --- the registry: active() restores exactly what it set ----------------------------


@pytest.fixture
def target(monkeypatch):
    """A module with a function and a class attribute to patch."""
    mod = types.ModuleType("_trident_adapter_target")

    class K:
        def m(self):
            return "orig"

    class Sub(K):
        pass

    def f():
        return "orig"

    mod.K, mod.Sub, mod.f = K, Sub, f
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod


def _patched(orig):
    return lambda *a: "patched"


def test_active_restores_what_it_set_when_applying_fails_halfway(monkeypatch, target):
    from trident.capture import adapters as A

    def fails(orig):
        raise RuntimeError("adapter failed")

    f0, m0 = target.f, vars(target.K)["m"]
    name = target.__name__
    monkeypatch.setattr(A, "ADAPTERS", (
        A.Adapter("f", name, "f", _patched),
        A.Adapter("K.m", name, "K.m", _patched),
        A.Adapter("Sub.m, inherited", name, "Sub.m", _patched),
        A.Adapter("fails", name, "f", fails)))
    with pytest.raises(RuntimeError, match="adapter failed"), A.active(A.State()):
        pytest.fail("the capture must not run")
    assert target.f is f0 and vars(target.K)["m"] is m0 and "m" not in vars(target.Sub)
    assert target.Sub().m() == "orig"


def test_active_restores_on_error_and_applies_only_what_applies(monkeypatch, target):
    from trident.capture import adapters as A

    f0, m0 = target.f, vars(target.K)["m"]
    name = target.__name__
    monkeypatch.setattr(A, "ADAPTERS", (
        A.Adapter("f", name, "f", _patched),
        A.Adapter("K.m, for torch 1.x only", name, "K.m", _patched, first="1.0", end="2.0"),
        A.Adapter("Sub.m, where Sub defines it", name, "Sub.m", _patched, own=True),
        A.Adapter("a missing optional module", "_trident_no_such_module", "x", _patched,
                  optional=True)))
    with pytest.raises(KeyError), A.active(A.State()):
        assert target.f() == "patched" and target.K().m() == "orig"
        assert "m" not in vars(target.Sub)
        raise KeyError("the capture failed")
    assert target.f is f0 and vars(target.K)["m"] is m0
    # what someone else set meanwhile stays
    with A.active(A.State()):
        target.f = theirs = lambda: "theirs"
    assert target.f is theirs


def test_patches_act_only_for_the_capturing_thread_and_outlive_nested_captures(
        monkeypatch, target):
    import threading

    from trident.capture import adapters as A

    f0 = target.f
    monkeypatch.setattr(A, "ADAPTERS", (A.Adapter("f", target.__name__, "f", _patched),))
    seen = []
    with A.active(A.State()):
        t = threading.Thread(target=lambda: seen.append(target.f()))
        t.start()
        t.join()
        with A.active(A.State()):
            assert target.f() == "patched"
        assert target.f() == "patched"
    assert seen == ["orig"] and target.f is f0


def test_every_registered_adapter_is_restored():
    from trident.capture import adapters as A

    def current():
        out = {}
        for a in A.ADAPTERS:
            found = A._applies(a) and A._owner(a)
            if found:
                owner, attr = found
                out[a.module, a.target] = (vars(owner).get(attr), attr in vars(owner))
        return out

    before = current()
    assert before, "no adapter applies to this torch"
    with A.active(A.State()):
        during = current()
    assert all(during[k][0] is not v[0] for k, v in before.items())
    assert all(a.module and a.target and a.first < a.end for a in A.ADAPTERS)
    assert current() == before


def test_strided_buffer_standin_points_at_the_offset_element():
    from trident.capture.adapters import _strided_buffer

    class StridedBuffer:  # the attributes FlagGems' class has
        def __init__(self, base, shape=None, strides=None, dtype=None, offset=0):
            raise AssertionError("replaced while tracing")

    traced = _strided_buffer(StridedBuffer)

    def arg(x, off):
        return traced(x, (x.numel() - off,), (1,), offset=off)._trident_arg

    x = torch.randn(4, 10)[1:]  # a storage offset of its own
    for off in (0, 3, 29):
        t = arg(x, off)
        assert t.data_ptr() == x.data_ptr() + off * x.element_size()
        assert t.dtype == x.dtype and t.reshape(-1)[0] == x.reshape(-1)[off]
        g = torch.compile(arg, backend="eager", fullgraph=True, dynamic=True)(x, off)
        assert g.data_ptr() == t.data_ptr()


def test_guards_are_built_once_per_capture_and_still_checked(h, monkeypatch):
    """Dynamo builds a frame's guards twice under a guard filter; while Trident captures,
    the second build of the same guards reuses the first (an adapter).  The version's own
    guards are Trident's, so they still reject what they must."""
    from torch._dynamo.guards import CheckFunctionManager

    builds = []
    real = CheckFunctionManager.build_guards

    def counted(self, *a, **kw):
        builds.append(self)
        return real(self, *a, **kw)

    monkeypatch.setattr(CheckFunctionManager, "build_guards", counted)
    scale = {"k": 2.0}

    def fn(x):
        return x * scale["k"] + 1

    f = trident.jit(fn, dynamic=False)
    h.check(f, fn, h.rand(5))
    assert len(builds) == 1
    h.check(f, fn, h.rand(5))
    assert trident.stats(f)["hits"] == [1]
    scale["k"] = 3.0  # a guarded constant changed: a miss, eager's result
    h.check(f, fn, h.rand(5))
    assert trident.stats(f)["misses"] == 2 and len(builds) == 2


def next_power_of_2(n):
    """Triton's block-size helper, as triton/__init__.py has it."""
    n -= 1
    n |= n >> 1
    n |= n >> 2
    n |= n >> 4
    n |= n >> 8
    n |= n >> 16
    n |= n >> 32
    n += 1
    return n


def _padded_to_pow2(x):
    n = next_power_of_2(x.shape[-1])
    warps = 8 if min(4096, n) > 2048 else 4
    return torch.nn.functional.pad(x, (0, n - x.shape[-1])) * warps


@pytest.mark.parametrize("on", [False, True])
def test_next_power_of_2_of_a_dynamic_size(h, monkeypatch, on):
    """TRIDENT_POW2_BUCKETS=1: Triton's next_power_of_2 over a dynamic size is traced as
    comparisons, so the version guards the size's power-of-two range (a miss outside it)
    and gets the power as a constant; off, Dynamo traces Triton's bit arithmetic.  Both
    give eager's results, sizes 0 and 1 and exact powers included."""
    from trident.capture import adapters

    monkeypatch.setattr(adapters, "_POW2_FUNCS",
                        {*adapters._POW2_FUNCS, (__name__, "next_power_of_2")})
    monkeypatch.setenv("TRIDENT_POW2_BUCKETS", "1" if on else "0")
    fn = h.fresh(_padded_to_pow2)
    f = trident.jit(fn, dynamic=True)
    for n in (3000, 3100, 4096, 2000, 4097, 1, 0, 2, 3):
        h.check(f, fn, h.rand(2, n))
    st = trident.stats(f)
    assert st["fallbacks"] == 0
    if on:
        # (2048, 4096]: 3000, 3100, 4096 share a version; 2000, 4097, 1, 0, 2, 3 do not
        assert st["hits"][0] == 2 and st["versions"] == 7
    h.check(f, fn, h.rand(2, 2500))  # inside the first bucket either way: a hit
    assert trident.stats(f)["misses"] == st["misses"]


def _tile_capped(x):
    tile = min(64, next_power_of_2(x.shape[-1]))  # FlagGems' pointwise tile-size shape
    return (x * 2).sum(-1) + tile


@pytest.mark.parametrize("fn", [_tile_capped, _padded_to_pow2])
def test_pow2_buckets_give_way_to_one_symbolic_version(h, monkeypatch, fn):
    """Two power-of-two-range versions of a function with the same program (the power only
    chose between guards: `min(64, p)`) make its later captures keep next_power_of_2
    symbolic: one more version then serves every larger size.  Where the power reaches the
    program (padding to it), each range stays a version of its own."""
    from trident.capture import adapters

    monkeypatch.setattr(adapters, "_POW2_FUNCS",
                        {*adapters._POW2_FUNCS, (__name__, "next_power_of_2")})
    monkeypatch.delenv("TRIDENT_POW2_BUCKETS", raising=False)  # the default: on
    fn = h.fresh(fn)
    f = trident.jit(fn, dynamic=True)
    sizes = (100, 300, 1000, 3000, 7000, 20000)
    for n in sizes:
        h.check(f, fn, h.rand(2, n))
    st = trident.stats(f)
    assert st["fallbacks"] == 0
    said = "later captures keep next_power_of_2 symbolic" in trident.explain(f)
    if fn.__name__.startswith("_tile_capped"):
        # 100 and 300: two ranges, one program; 1000 then captures symbolically, and that
        # version serves 3000, 7000 and 20000
        assert st["versions"] == 3 and st["misses"] == 3, st
        assert st["hits"][2] == 3 and said
    else:
        assert st["versions"] == len(sizes) and st["hits"] == [0] * len(sizes), st
        assert not said


def test_twins_ignore_the_order_of_their_guards(h, monkeypatch):
    """Dynamo lists a capture's guards in no fixed order (FlagGems add on the H100: two range
    versions listed the same two global guards swapped, and stayed apart).  Two versions
    whose guards other than size ranges are the same, in any order, are twins; one guard
    less or different is not."""
    from trident import scm
    from trident.capture import adapters
    from trident.ir import nodes as ir

    monkeypatch.setattr(adapters, "_POW2_FUNCS",
                        {*adapters._POW2_FUNCS, (__name__, "next_power_of_2")})
    monkeypatch.delenv("TRIDENT_POW2_BUCKETS", raising=False)
    fn = h.fresh(_tile_capped)
    f = trident.jit(fn, dynamic=True)
    h.check(f, fn, h.rand(2, 100))
    (v,) = trident.versions(f)
    others = [k for k, g in enumerate(v.guards) if not isinstance(g, ir.ShapeGuard)]
    assert len(others) >= 2
    swapped = list(v.guards)
    swapped[others[0]], swapped[others[-1]] = swapped[others[-1]], swapped[others[0]]
    assert scm._same_but_sizes(v, dataclasses.replace(v, guards=tuple(swapped)))
    fewer = tuple(g for k, g in enumerate(v.guards) if k != others[0])
    assert not scm._same_but_sizes(v, dataclasses.replace(v, guards=fewer))


def heuristics_for_tile_size(max_tile_size, *sizes):
    """A library's tile-size rule (FlagGems' shape_utils has one like it): from the last size,
    min(cap, next power of two), the cap then divided by the tile."""
    tiles = []
    for size in reversed(sizes):
        tile = min(max_tile_size, next_power_of_2(size))
        tiles.insert(0, tile)
        max_tile_size = max(1, max_tile_size // tile)
    return tuple(tiles)


def _tile_rule_other(max_tile_size, *sizes):
    return tuple(min(max_tile_size, next_power_of_2(n)) for n in sizes)


def _pointwise_tiles(x):
    (tile,) = heuristics_for_tile_size(512, x.numel())
    rows, cols = heuristics_for_tile_size(64, *x.shape)
    return (x * 2).sum(-1) + tile + rows * 1000 + cols


def test_capped_tile_rule_is_one_version_past_its_cap(h, monkeypatch):
    """A registered tile-size rule (`adapters._CAPPED_POW2_FUNCS`) that gives the polyfill's
    tiles on a sample is traced as the polyfill: where min(cap, next_power_of_2(size))
    reaches the cap, one guard on the size (not its power-of-two range) keeps the version, so
    every larger size hits it; smaller sizes get a version per range.  A rule that differs
    on the sample is traced as it is."""
    from trident.capture import adapters

    monkeypatch.setattr(adapters, "_CAPPED_POW2_FUNCS",
                        {**adapters._CAPPED_POW2_FUNCS,
                         (__name__, "heuristics_for_tile_size"): adapters._tile_sizes,
                         (__name__, "_tile_rule_other"): adapters._tile_sizes})
    # the stand-in next_power_of_2 by ranges too: without the tile rule's polyfill, each
    # range of the sizes would be a version of its own
    monkeypatch.setattr(adapters, "_POW2_FUNCS",
                        {*adapters._POW2_FUNCS, (__name__, "next_power_of_2")})
    assert adapters._verified_polyfill(heuristics_for_tile_size) is adapters._tile_sizes
    assert adapters._verified_polyfill(_tile_rule_other) is None
    monkeypatch.delenv("TRIDENT_POW2_BUCKETS", raising=False)  # the default: on
    fn = h.fresh(_pointwise_tiles)
    f = trident.jit(fn, dynamic=True)
    for rows, cols in ((16, 100), (64, 130), (256, 1000), (1024, 70), (5, 333)):
        h.check(f, fn, h.rand(rows, cols))  # numel > 256, cols > 32: tile 512, cols 64
    st = trident.stats(f)
    assert st["versions"] == 1 and st["hits"] == [4] and st["fallbacks"] == 0, st
    for rows, cols in ((2, 20), (3, 20), (1, 7)):  # below the caps: their own ranges
        h.check(f, fn, h.rand(rows, cols))
    assert trident.stats(f)["versions"] > 1
    h.check(f, fn, h.rand(700, 90))
    assert trident.stats(f)["hits"][0] == 5


def _pow2_of_a_tensor(x):
    return x * next_power_of_2(x.shape[-1]) + next_power_of_2((x > 0).sum())


def test_next_power_of_2_of_a_tensor_keeps_tritons_arithmetic(h, monkeypatch):
    """A tensor (or any non-int) argument goes through Triton's own arithmetic, as in eager,
    elementwise in the graph: no comparison of a tensor, which would stop the capture."""
    from trident.capture import adapters

    monkeypatch.setattr(adapters, "_POW2_FUNCS",
                        {*adapters._POW2_FUNCS, (__name__, "next_power_of_2")})
    fn = h.fresh(_pow2_of_a_tensor)
    f = trident.jit(fn, dynamic=True)
    for n in (300, 700, 1000):
        h.check(f, fn, h.rand(3, n))
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and not st["eager_paths"] and st["captures"] >= 1, st
