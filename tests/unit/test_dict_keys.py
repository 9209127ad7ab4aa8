"""Dict items with constant keys are native guards that read the dict's own storage.

Liger-Kernel reads `_NVIDIA_ARCH_BY_CC[(9, 0)]` (a tuple key) through a module global; Dynamo
guards the item (DictGetItemSource with a tuple index).  Before, such a key was not translated
and the path ran eagerly.  Each function here must stay native, hit on repeat calls, and miss
(with eager's result) when the item it read changes.

Dynamo reads such an item from the dict's storage (its dict_getitem accessor: PyDict_GetItem),
never through `__getitem__` or a defaultdict's `__missing__`; so does Trident's `DictItem`
(issue 32).  Before, the guard did `obj[key]`: a defaultdict global whose key was deleted got
it back from the guard (`__missing__`), and the function, which read it with `.get`, returned
the factory's value where eager returned the default.  The twin-module tests run each function
eagerly on one copy of a module and under Trident on another, and compare results and the
modules' state after every step.
"""

from __future__ import annotations

import collections
import enum
import importlib
import sys
import warnings

import pytest
import torch

import trident
from trident.codegen import c as cgen
from trident.errors import UnsupportedError
from trident.guards.translate import ConstPool, SourceConverter
from trident.ir import nodes as ir
from trident.ir import passes
from trident.native import build

MOD = """
TABLE = {(9, 0): 2.0, (8, 0): 3.0, ("sm", (9, 0)): 5.0}
OTHER = {None: 4.0, True: 6.0, 2.5: 7.0, b"k": 8.0}
"""


@pytest.fixture
def mod(tmp_path, monkeypatch):
    (tmp_path / "trident_dict_keys_mod.py").write_text(MOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("trident_dict_keys_mod", None)
    m = importlib.import_module("trident_dict_keys_mod")
    monkeypatch.setitem(globals(), "_m", m)
    yield m
    sys.modules.pop("trident_dict_keys_mod", None)


_m = None  # the module above, set by the fixture: the functions read it as a module global


def tuple_key(x):
    return x * _m.TABLE[(9, 0)]


def nested_key(x):
    return x * _m.TABLE[("sm", (9, 0))]


def none_bool_float_bytes(x):
    return x * _m.OTHER[None] + _m.OTHER[True] - _m.OTHER[2.5] * _m.OTHER[b"k"]


FUNCS = (tuple_key, nested_key, none_bool_float_bytes)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_constant_dict_keys_are_native(mod, which):
    fn = FUNCS[which]
    f = trident.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no eager path
        for _ in range(3):
            x = torch.randn(7)
            torch.testing.assert_close(f(x), fn(x))
    st = trident.stats(f)
    assert st["captures"] == 1 and st["hits"] == [2] and not st["eager_paths"], st
    # another item of the same dicts changes: the guards still pass (and the result is eager's)
    mod.TABLE[(8, 0)] = -1.0
    x = torch.randn(7)
    torch.testing.assert_close(f(x), fn(x))
    # the item the function read changes: a miss, then eager's result
    if which == 0:
        mod.TABLE[(9, 0)] = 10.0
    elif which == 1:
        mod.TABLE[("sm", (9, 0))] = 11.0
    else:
        mod.OTHER[None] = 12.0
    x = torch.randn(7)
    torch.testing.assert_close(f(x), fn(x))
    assert trident.stats(f)["captures"] == 2
    # the key is gone: a miss; eager raises KeyError, and so does the call
    if which == 0:
        del mod.TABLE[(9, 0)]
        with pytest.raises(KeyError):
            f(torch.randn(7))


# -- twin modules: eager on one copy, Trident on the other ---------------------------------------

TWIN = """
import collections
import enum

import torch


class Color(enum.Enum):
    RED = 1
    BLUE = 2


FACTORY_CALLS = [0]


def factory():
    FACTORY_CALLS[0] += 1
    return 5.0


D = collections.defaultdict(factory)
D["a"] = 2.0
D["b"] = 3.0
LIT = {(9, 0): 2.0, torch.float16: 4.0, None: 5.0, ("sm", (8, 0)): 6.0, 1.5: 7.0}
ENUM = {Color.RED: 3.0, Color.BLUE: 8.0}
GETITEM_CALLS = [0]


class Counting(dict):
    def __getitem__(self, k):
        if not torch.compiler.is_compiling():  # counts eager calls (and a guard's) only
            GETITEM_CALLS[0] += 1
        return dict.__getitem__(self, k)


C = Counting(a=3.0, b=4.0)


def get_a(x):
    return x * D.get("a", 1.0)


def read_b(x):
    return x * D["b"]


def lit_read(x):
    return x * LIT[(9, 0)] + LIT[torch.float16] - LIT[None]


def lit_get(x):
    return x * LIT.get(torch.float16, -1.0) + LIT.get(("sm", (8, 0)), -2.0)


def enum_read(x):
    return x * ENUM[Color.RED]


def enum_get(x):
    return x * ENUM.get(Color.BLUE, -3.0)


def custom_getitem(x):
    return x * C["a"]
"""


class Twins:
    """Module TWIN loaded twice: `e` runs eagerly, `t` under trident.jit."""

    def __init__(self, tmp_path, monkeypatch):
        monkeypatch.syspath_prepend(str(tmp_path))
        self.e, self.t = (self._load(tmp_path, name) for name in ("dk_twin_eager", "dk_twin_jit"))
        self.jit: dict = {}

    @staticmethod
    def _load(tmp_path, name):
        (tmp_path / f"{name}.py").write_text(TWIN)
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    def f(self, name):
        if name not in self.jit:
            self.jit[name] = trident.jit(getattr(self.t, name))
        return self.jit[name]

    def both(self, change):
        """Apply `change(module)` to both copies."""
        change(self.e)
        change(self.t)

    def call(self, name):
        """One call on fresh random input: Trident's result (or exception) is eager's, and
        the two modules are in the same state after it."""
        x = torch.randn(5)
        want = got = None
        try:
            want = getattr(self.e, name)(x.clone())
        except KeyError as err:
            want = err
        try:
            got = self.f(name)(x.clone())
        except KeyError as err:
            got = err
        if isinstance(want, KeyError):
            assert isinstance(got, KeyError) and repr(got) == repr(want), (got, want)
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        for attr in ("D", "LIT", "ENUM", "C"):
            assert _plain(getattr(self.t, attr)) == _plain(getattr(self.e, attr)), attr
        assert self.t.FACTORY_CALLS == self.e.FACTORY_CALLS
        return trident.stats(self.f(name))


def _plain(d) -> dict:
    """A module's dict with its enum keys by name (each module has its own Color)."""
    return {(k.name if isinstance(k, enum.Enum) else k): v for k, v in dict.items(d)}


@pytest.fixture
def twins(tmp_path, monkeypatch):
    tw = Twins(tmp_path, monkeypatch)
    yield tw
    for name in ("dk_twin_eager", "dk_twin_jit"):
        sys.modules.pop(name, None)


def test_defaultdict_guard_never_inserts_a_key(twins):
    """A guard on `D["a"]` of a defaultdict global: after the key is deleted, the guard
    misses without calling __missing__ (no insertion, no factory call), and `D.get("a", 1.0)`
    gives eager's default.  (Before: the guard inserted D["a"] = 5.0 and the call returned
    x * 5.0.)"""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # native, no eager path
        for _ in range(2):
            st = twins.call("get_a")
        assert st["captures"] == 1 and st["hits"] == [1], st
    twins.both(lambda m: m.D.__delitem__("a"))
    st = twins.call("get_a")
    assert "a" not in twins.t.D and twins.t.FACTORY_CALLS == [0]
    assert st["captures"] == 2, st
    twins.call("get_a")  # the version of the absent key hits
    # the key is back with another value: a miss, and eager's result
    twins.both(lambda m: m.D.__setitem__("a", 7.0))
    before = trident.stats(twins.f("get_a"))["captures"]
    st = twins.call("get_a")
    assert st["captures"] == before + 1, st
    st = twins.call("get_a")
    assert st["captures"] == before + 1 and sum(st["hits"]) >= 2, st


def test_defaultdict_item_read_by_the_function_after_deletion(twins):
    """The function itself reads `D["b"]` after the key is deleted: eager calls the factory
    once and inserts; the call under Trident does the same, once, and its guards add nothing."""
    for _ in range(2):
        twins.call("read_b")
    twins.both(lambda m: m.D.__delitem__("b"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a path that mutates D: eager
        twins.call("read_b")
    assert dict(twins.t.D) == {"a": 2.0, "b": 5.0} and twins.t.FACTORY_CALLS == [1]
    twins.call("read_b")
    twins.both(lambda m: m.D.__setitem__("b", -1.0))
    twins.call("read_b")


@pytest.mark.parametrize("name", ["lit_read", "lit_get", "enum_read", "enum_get"])
def test_tuple_dtype_none_and_enum_keys(twins, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(3):
            st = twins.call(name)
    assert st["captures"] == 1 and st["hits"] == [2] and not st["eager_paths"], st
    by_enum = name.startswith("enum")
    key = {"lit_read": (9, 0), "lit_get": torch.float16, "enum_read": "RED",
           "enum_get": "BLUE"}[name]

    def k(m):  # the key in module m (enum members are each module's own)
        return getattr(m.Color, key) if by_enum else key

    table = "ENUM" if by_enum else "LIT"
    if not by_enum:  # another item of the dict changes: still a hit
        twins.both(lambda m: m.LIT.__setitem__(1.5, -7.0))
        st = twins.call(name)
        assert st["captures"] == 1, st
    # the item the function read changes: a miss, and eager's result
    twins.both(lambda m: getattr(m, table).__setitem__(k(m), 10.0))
    st = twins.call(name)
    assert st["captures"] == 2, st
    # the key is deleted: a miss with eager's result (`.get`'s default), or eager's KeyError
    twins.both(lambda m: getattr(m, table).__delitem__(k(m)))
    with warnings.catch_warnings():
        # `.get` of an absent key guards the dict's keys (DICT_KEYS_MATCH), native for int
        # and str keys only: that path runs eagerly
        warnings.simplefilter("ignore", RuntimeWarning)
        twins.call(name)
        twins.call(name)


def test_dict_subclass_with_custom_getitem_is_not_called_by_guards(twins):
    """A dict subclass global with its own __getitem__: Trident's guards never call it (they
    read the dict's storage), so it runs no more often than under torch.compile."""
    n = 4
    for _ in range(n):
        twins.call("custom_getitem")
    jit_calls = twins.t.GETITEM_CALLS[0]
    twins.t.GETITEM_CALLS[0] = 0
    compiled = torch.compile(twins.t.custom_getitem, backend="eager", fullgraph=True)
    torch._dynamo.reset()
    for _ in range(n):
        compiled(torch.randn(5))
    assert twins.e.GETITEM_CALLS == [n]
    assert jit_calls <= twins.t.GETITEM_CALLS[0] <= n, (jit_calls, twins.t.GETITEM_CALLS)
    # a changed value is a miss with eager's result, still without a call from a guard
    twins.both(lambda m: dict.__setitem__(m.C, "a", -2.0))
    twins.t.GETITEM_CALLS[0] = twins.e.GETITEM_CALLS[0] = 0
    for _ in range(2):
        twins.call("custom_getitem")
    assert twins.t.GETITEM_CALLS[0] <= twins.e.GETITEM_CALLS[0]


# -- DictItem itself: a hand-built SCM ------------------------------------------------------------

_calls: list = []


class _Sub(dict):
    """A dict subclass whose own lookups would answer anything: the guard never asks them."""

    def __getitem__(self, k):
        _calls.append(("__getitem__", k))
        return 2.0

    def __missing__(self, k):
        _calls.append(("__missing__", k))
        return 2.0


class _Mapping:
    def __getitem__(self, k):
        _calls.append(("__getitem__", k))
        return 2.0


class _Collides:
    """A key hashing as "a" whose equality raises `exc`."""

    def __init__(self, exc):
        self.exc = exc

    def __hash__(self):
        return hash("a")

    def __eq__(self, other):
        raise self.exc


def _dict_item_scm(table):
    """Version 0: `d["a"] == 2.0` on the argument (inline); version 1: `table[(9, 0)] == 3.0`
    on a pooled dict (an environment block, cached on the dict's version tag)."""
    d = ir.Local(0, "d")
    v0 = ir.Version(0, (ir.EqualsMatch(ir.DictItem(d, 0, "'a'"), 2, 1, "2.0"),), (),
                    ir.OutConst(3, "hit0"), 1, consts=("a", 2.0, float, "hit0"))
    v1 = ir.Version(1, (ir.EqualsMatch(ir.DictItem(ir.ConstObj(0, "table"), 1, "(9, 0)"),
                                       3, 2, "3.0"),), (),
                    ir.OutConst(4, "hit1"), 1, consts=(table, (9, 0), 3.0, float, "hit1"))
    versions = [passes.run(v) for v in (v0, v1)]
    assert versions[0].env is None and versions[1].env is not None
    src = cgen.generate(versions)
    text = src.text()
    assert "trt_dict_item(o0, K[0])" in text and "{TRT_ES_DICT_ITEM, 1}" in text
    rt = build.runtime_module()
    module = rt.load_scm(str(build.build_scm(src).so), cgen.consts_tuple({}, {}, versions))

    def probe(d):
        return d

    fn = rt.Function(probe, lambda *a: "miss")
    fn._install(module)
    return fn


def test_dict_item_reads_the_storage_only():
    table = {(9, 0): 3.0}
    fn = _dict_item_scm(table)
    _calls.clear()
    assert fn({"a": 2.0}) == "hit0"
    assert fn(_Sub(a=2.0)) == "hit0"  # the stored value, not __getitem__'s
    assert fn(_Sub(a=1.0)) == "hit1"
    assert fn(_Sub(b=2.0)) == "hit1"  # absent: neither __getitem__ nor __missing__
    dd = collections.defaultdict(lambda: 2.0)
    assert fn(dd) == "hit1" and dict(dd) == {}  # nothing inserted
    assert fn(_Mapping()) == "hit1"  # not a dict: the guard fails
    assert fn(collections.OrderedDict(a=2.0)) == "hit0"
    assert _calls == []
    # a key's equality that raises fails the guard (never an exception from the call) ...
    assert fn({_Collides(ValueError("boom")): 2.0}) == "hit1"
    # ... except what the guards always let through
    with pytest.raises(KeyboardInterrupt):
        fn({_Collides(KeyboardInterrupt()): 2.0})
    # the pooled dict's item changes, is deleted, comes back: its version tag tells
    table[(9, 0)] = 4.0
    assert fn({}) == "miss"
    del table[(9, 0)]
    assert fn({}) == "miss"
    table[(9, 0)] = 3.0
    assert fn({}) == "hit1"


def test_constant_keys_translate_to_dict_items_and_others_are_refused():
    """DictGetItemSource and DictSubclassGetItemSource with a constant key -> DictItem (Dynamo
    2.13 emits the subclass form keyed by position only; a constant key is read past the
    subclass's __getitem__ all the same); a key whose hash or equality may run user code is
    refused with the reason."""
    import enum

    from torch._dynamo import source as S

    class Plain(enum.Enum):
        A = 1

    def f(x):
        return x

    pool = ConstPool()
    conv = SourceConverter(f, pool)
    keys = ["a", 1, True, 2.5, None, b"k", (9, 0), ("sm", (9, 0)), frozenset({1}),
            torch.float16, torch.device("cpu")]
    for key in keys:
        for cls in (S.DictGetItemSource, S.DictSubclassGetItemSource):
            got = conv(cls(S.GlobalSource("C"), key))
            assert isinstance(got, ir.DictItem) and pool.objs[got.key_const] is key, got
            assert str(got) == f"G['C'][{key!r}]"

    class Hashy(enum.Enum):
        A = 1

        def __hash__(self):
            return 0

    class Fake:  # a source of Dynamo's class name with a key 2.13's would not hold
        def __init__(self, key):
            self.base, self.index, self.name = S.GlobalSource("C"), key, "G['C'][?]"

    Fake.__name__ = "DictGetItemSource"
    assert isinstance(conv(Fake(Plain.A)), ir.DictItem)
    assert isinstance(conv(Fake(int)), ir.DictItem)
    for bad in (Hashy.A, object(), (1, object())):
        with pytest.raises(UnsupportedError, match="may run user code"):
            conv(Fake(bad))
