"""The capture stage's hand-off to lowering is plain typed data: a frozen `Capture` whose
fields are tuples, and the return value described as `capture.returns` dataclasses (graph
outputs, inputs, sources, constants, containers, shared objects, attribute stores) rather than
tagged tuples.  `check_described` checks such a description against the capturing call's own
result."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import trident
import trident.scm as scm_mod
from trident.capture import returns as R
from trident.capture.types import Capture


def _captures(monkeypatch) -> list:
    caps = []
    real = scm_mod.capture

    def capture(*a, **kw):
        caps.append(real(*a, **kw))
        return caps[-1]

    monkeypatch.setattr(scm_mod, "capture", capture)
    return caps


def _containers(x, y):
    lst = [x + y, 2]
    return {"a": lst, "b": (lst, "s")}, x, x.shape


class _Holder:
    def __init__(self):
        self.k = None


def _stores(c, x):
    c.k = x * 2
    return x + 1


def test_a_capture_is_frozen_and_its_fields_are_tuples(h, monkeypatch):
    caps = _captures(monkeypatch)
    f = trident.jit(_containers, dynamic=False)
    h.check(f, _containers, h.rand(4), h.rand(4))
    (cap,) = caps
    assert isinstance(cap, Capture)
    for name in ("inputs", "guard_entries", "shape_exprs", "graph_outputs", "launches",
                 "notes", "extra_guards"):
        assert type(getattr(cap, name)) is tuple, name
    with pytest.raises(dataclasses.FrozenInstanceError):
        cap.notes = ("x",)
    assert cap.with_note("n").notes == ("n",) and cap.notes == ()


def test_the_return_value_is_described_as_dataclasses(h, monkeypatch):
    caps = _captures(monkeypatch)
    f = trident.jit(_containers, dynamic=False)
    h.check(f, _containers, h.rand(4), h.rand(4))
    ret = caps[0].ret
    assert isinstance(ret, R.Returned) and ret.stores == ()
    top = ret.value
    assert isinstance(top, R.Seq) and top.kind == "tuple"
    d, x, shape = top.items
    assert isinstance(d, R.DictOf) and d.keys == ("a", "b")  # made once: not Shared
    first, second = d.values
    # the list the function returns at two places: built once, the same object at both
    assert isinstance(first, R.Shared) and first.desc is not None
    assert isinstance(second, R.Seq) and second.kind == "tuple"
    again, s = second.items
    assert again == R.Shared(first.number, None) and s == R.Const("s")
    assert first.desc == R.Seq("list", (R.GraphOutput(0, "tensor"), R.Const(2)))
    assert isinstance(x, (R.InputRef, R.SourceRef))
    assert shape == R.Seq("size", (R.Const(4),))
    out = f(h.rand(4), h.rand(4))
    assert out[0]["a"] is out[0]["b"][0]


def test_attribute_stores_are_described_before_the_value(h, monkeypatch):
    caps = _captures(monkeypatch)
    f = trident.jit(_stores, dynamic=False)
    for _ in range(2):
        h.check(f, _stores, _Holder(), h.rand(3))
    (cap,) = caps
    (store,) = cap.ret.stores
    assert isinstance(store, R.Store) and store.name == "k"
    assert isinstance(store.value, R.GraphOutput) and isinstance(cap.ret.value, R.GraphOutput)
    assert sum(trident.stats(f)["hits"]) == 1


def test_check_described_compares_with_the_real_result():
    t = torch.zeros(2)
    desc = R.Returned(R.Seq("list", (R.GraphOutput(0, "tensor"), R.Const(3))))
    assert R.check_described(desc, [t, 3]) is None
    assert "not what Dynamo described" in R.check_described(desc, (t, 3))
    assert "constant" in R.check_described(desc, [t, 4])
    shared = R.Returned(R.Seq("tuple", (R.Shared(1, R.Seq("list", ())), R.Shared(1, None))))
    lst: list = []
    assert R.check_described(shared, (lst, lst)) is None
    assert "two objects" in R.check_described(shared, ([], []))
