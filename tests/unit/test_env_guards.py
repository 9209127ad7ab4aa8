"""Environment guards (sources that start at a global or a constant) are evaluated as one
block and re-evaluated only when a version tag they recorded changed: every way of changing
what they read must still be seen, against eager, and reads no tag covers run on every call."""

from __future__ import annotations

import contextvars
import sys
import threading
import types

import pytest
import torch

import trident
from trident import config

HAVE_TAGS = sys.version_info < (3, 13)


class Cfg:
    scale = 2.0

    def __init__(self):
        self.mode = "a"
        self.sub = Sub()


class Sub:
    def __init__(self):
        self.k = 3


class Slotted:
    __slots__ = ("mode",)

    def __init__(self):
        self.mode = "a"


class Dynamic:
    def __getattr__(self, name):
        return self.__dict__["_" + name]


CFG = Cfg()
SLOT = Slotted()
DYN = Dynamic()
DYN._mode = "a"
TABLE = {"w": 2.0}
ITEMS = [1.0, 2.0]
PAIR = (1.0, 3.0)
MOD = types.ModuleType("trident_test_env_mod")
MOD.factor = 2.0


def f_cfg(x):
    if CFG.mode == "a":
        return x * CFG.scale + CFG.sub.k
    return x - CFG.sub.k


def f_table(x):
    return x * TABLE["w"] + PAIR[1]


def f_items(x):
    return x * ITEMS[1]


def f_mod(x):
    return x * MOD.factor


def f_slot(x):
    return x + 1 if SLOT.mode == "a" else x - 1


def f_dyn(x):
    return x + 1 if DYN.mode == "a" else x - 1


def _check(g, f, n=3):
    for _ in range(n):
        x = torch.randn(5)
        torch.testing.assert_close(g(x), f(x), rtol=0, atol=0)


def _env(g):
    # the version that served the last call: the one whose hits grew last is not tracked,
    # so take the last version with a block that passed
    envs = [e for e in trident.stats(g)["env_guards"] if e is not None and e["live"] >= 0]
    return envs[-1]


@pytest.fixture(autouse=True)
def _restore():
    yield
    CFG.__class__ = Cfg
    CFG.__dict__.clear()
    CFG.__init__()
    Cfg.scale = 2.0
    if "extra" in Cfg.__dict__:
        del Cfg.extra
    TABLE.clear()
    TABLE["w"] = 2.0
    ITEMS[:] = [1.0, 2.0]
    MOD.__class__ = types.ModuleType
    MOD.factor = 2.0
    SLOT.mode = "a"
    DYN._mode = "a"


def test_instance_class_and_nested_changes_are_seen():
    g = trident.jit(f_cfg)
    _check(g, f_cfg)
    e = _env(g)
    if HAVE_TAGS:
        assert e["cached"] and e["live"] == 0 and e["records"] > 0
    CFG.mode = "b"            # instance attribute
    _check(g, f_cfg)
    CFG.mode = "a"
    _check(g, f_cfg)
    Cfg.scale = 5.0           # class attribute, not shadowed
    _check(g, f_cfg)
    CFG.scale = 7.0           # now shadowed by the instance
    _check(g, f_cfg)
    del CFG.scale
    _check(g, f_cfg)
    CFG.sub.k = 11            # an object two links down
    _check(g, f_cfg)
    CFG.sub = Sub()           # replaced: same value, another object
    _check(g, f_cfg)
    CFG.sub.k = -4
    _check(g, f_cfg)


def test_dict_replacement_class_change_and_new_descriptor_are_seen():
    g = trident.jit(f_cfg)
    _check(g, f_cfg)
    CFG.__dict__  # materialize, then replace the instance dict wholesale
    object.__setattr__(CFG, "__dict__", {"mode": "b", "sub": CFG.sub})
    _check(g, f_cfg)

    class Cfg2(Cfg):
        scale = 9.0

    CFG.__dict__["mode"] = "a"
    _check(g, f_cfg)
    CFG.__class__ = Cfg2      # no dict changes: the class record sees it
    _check(g, f_cfg)
    CFG.__class__ = Cfg
    _check(g, f_cfg)
    Cfg.mode = property(lambda self: "b")  # a data descriptor now wins over the dict
    try:
        _check(g, f_cfg)
    finally:
        del Cfg.mode


def test_global_dict_items_and_tuples():
    g = trident.jit(f_table)
    _check(g, f_table)
    if HAVE_TAGS:
        assert _env(g)["cached"] and _env(g)["live"] == 0
    TABLE["w"] = 4.0
    _check(g, f_table)
    TABLE["other"] = 1.0
    _check(g, f_table)


def test_list_items_are_read_on_every_call():
    g = trident.jit(f_items)
    _check(g, f_items)
    if HAVE_TAGS:
        assert _env(g)["live"] >= 1
    ITEMS[1] = 6.0            # no dict or class changes: only a live guard sees this
    _check(g, f_items)
    ITEMS[1] = 2.0
    _check(g, f_items)


def test_module_attribute_and_module_class_swap():
    g = trident.jit(f_mod)
    _check(g, f_mod)
    MOD.factor = 3.0
    _check(g, f_mod)

    class Lazy(types.ModuleType):
        @property
        def factor(self):
            return -1.0

    misses = trident.stats(g)["misses"]
    MOD.__class__ = Lazy      # the property wins; no dict changed
    x = torch.randn(5)
    got = g(x)
    # The second value made MOD.factor a dynamic float (TRIDENT_DYNAMIC_FLOATS), read live by
    # the version: its type guard passes on the property's -1.0 and the program reads that
    # value, as eager does (no miss).  With floats specialised, the equality guard sees it (a
    # miss), and the new capture is Dynamo's, which reads a module's attributes from its
    # __dict__ and traces 3.0 where getattr gives -1.0 (torch.compile returns the same wrong
    # result on torch 2.13): that result is not compared.
    if config.dynamic_floats():
        torch.testing.assert_close(got, f_mod(x), rtol=0, atol=0)
        assert trident.stats(g)["misses"] == misses
    else:
        assert trident.stats(g)["misses"] == misses + 1


def test_slots_and_getattr_objects_run_live():
    for f in (f_slot, f_dyn):
        g = trident.jit(f)
        _check(g, f)
        if HAVE_TAGS:
            assert _env(g)["live"] >= 1
        if f is f_slot:
            SLOT.mode = "b"
        else:
            DYN._mode = "b"
        _check(g, f)


def helper(x, a=2.0, *, k=1.0):
    return x * a + k


def _helper_alt(x, a=2.0, *, k=1.0):
    return x * a - k


def f_helper(x):
    return helper(x)


HOLDER = Cfg()
HOLDER.items = [1.0, 2.0]


def f_holder_items(x):
    return x * HOLDER.items[1]


def test_function_defaults_kwdefaults_and_code_changes_are_seen():
    saved = (helper.__defaults__, dict(helper.__kwdefaults__), helper.__code__)
    try:
        g = trident.jit(f_helper)
        _check(g, f_helper)
        if HAVE_TAGS:
            assert _env(g)["cached"]
        helper.__defaults__ = (3.0,)          # reassigned: the function's slot record
        _check(g, f_helper)
        helper.__kwdefaults__["k"] = 5.0      # the kwdefaults dict mutated: its dict record
        _check(g, f_helper)
        helper.__code__ = _helper_alt.__code__
        _check(g, f_helper)
    finally:
        helper.__defaults__, helper.__code__ = saved[0], saved[2]
        helper.__kwdefaults__ = saved[1]


def test_inlined_function_defaults_are_guarded_even_where_dynamo_does_not():
    # torch 2.11's Dynamo records no guard on an inlined function's __defaults__ (its own
    # torch.compile then returns the old default's result): Trident adds one itself.
    g = trident.jit(f_helper)
    _check(g, f_helper, n=1)
    guards = [str(x) for x in trident.versions(g)[0].guards]
    assert any(s.startswith("equals_match G['helper'].__defaults__ ==") for s in guards), guards


def test_live_guard_resumes_after_its_covered_prefix():
    g = trident.jit(f_holder_items)
    _check(g, f_holder_items)
    if HAVE_TAGS:
        e = _env(g)
        assert e["cached"] and e["live"] >= 1
    HOLDER.items[1] = 7.0     # only the live part (the list item) sees this
    _check(g, f_holder_items)
    HOLDER.items = [0.5, 0.25]  # a new list: the instance dict's record sees this
    _check(g, f_holder_items)
    HOLDER.items[1] = -3.0
    _check(g, f_holder_items)



_SCALE = contextvars.ContextVar("trident_test_scale", default=2)
_SHIFT = contextvars.ContextVar("trident_test_shift")


def _by_scale(x):
    return x * _SCALE.get()


def _by_shift(x):
    return x + _SHIFT.get(5)


@pytest.mark.parametrize("fn, var", [(_by_scale, _SCALE), (_by_shift, _SHIFT)])
def test_contextvar_value_is_read_on_every_call_in_the_callers_context(fn, var):
    """A ContextVar's value (`var.get()`, `var.get(default)`) changes with no version tag and
    differs between threads: each call must see its own context's value (torch 2.14 guards it
    natively; earlier Dynamo cannot trace the call, and the path runs eagerly)."""
    f = trident.jit(fn)
    for val in (None, 3, 3, -1, None, 3):
        tok = var.set(val) if val is not None else None
        try:
            x = torch.randn(4)
            assert torch.equal(f(x), fn(x)), val
        finally:
            if tok is not None:
                var.reset(tok)
    # another thread starts from an empty context: the default, not this thread's value
    tok = var.set(11)
    try:
        out = {}
        t = threading.Thread(target=lambda: out.update(r=(f(torch.ones(2)), fn(torch.ones(2)))))
        t.start()
        t.join()
        assert torch.equal(*out["r"]) and not torch.equal(out["r"][0], f(torch.ones(2)))
        ctx = contextvars.copy_context()
        ctx.run(var.set, 6)
        x = torch.ones(2)
        assert torch.equal(ctx.run(f, x), ctx.run(fn, x)) and torch.equal(f(x), fn(x))
        assert not torch.equal(ctx.run(f, x), f(x))  # 6 there, 11 here
    finally:
        var.reset(tok)
    st = trident.stats(f)
    if hasattr(torch._dynamo.source, "ContextVarGetSource"):
        assert st["eager_paths"] == [] and sum(st["hits"]) >= 3, st
        assert ".get(" in trident.explain(f)
