"""`ir.nodes.frozen`: the IR's, capture's and codegen's records behave as
`@dataclass(frozen=True)` would make them (equality, hash, repr, no assignment, pickling,
`dataclasses.replace`), checked against such a dataclass with the same fields."""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import random
from pathlib import Path

import pytest

from trident.ir import nodes as ir

MODULES = ["trident.ir.nodes", "trident.capture.returns", "trident.capture.types",
           "trident.codegen.dispatch", "trident.codegen.unit", "trident.capture.checks",
           "trident.native.build", "trident.ir.passes", "trident.capture.guard_record",
           "trident.capture.adapters", "trident.capture.describe"]


def _records():
    out = []
    for m in MODULES:
        mod = importlib.import_module(m)
        out += [c for c in vars(mod).values() if isinstance(c, type) and c.__module__ == m
                and issubclass(c, ir.Frozen) and c is not ir.Frozen]
    return out


def _reference(cls):
    """The same fields under @dataclass(frozen=True)."""
    return dataclasses.make_dataclass(
        cls.__name__, [(f.name, object, dataclasses.field(compare=f.compare, repr=f.repr))
                       for f in dataclasses.fields(cls)], frozen=True)


def test_every_frozen_record_uses_frozen():
    # (config.py, imported before the IR, keeps one dataclass of its own)
    pkg = Path(ir.__file__).parents[1]
    left = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
            if "\n@dataclass(frozen=True)" in p.read_text() and p.name != "config.py"]
    assert not left, f"use ir.nodes.frozen: {left}"
    assert {c.__module__ for c in _records()} == set(MODULES)


@pytest.mark.parametrize("cls", _records(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_a_record_is_what_a_frozen_dataclass_would_be(cls):
    rng = random.Random(cls.__name__)
    names = [f.name for f in dataclasses.fields(cls)]
    ref = _reference(cls)
    a = [rng.choice([rng.randrange(4), f"s{rng.randrange(3)}", (1, "t"), None]) for _ in names]
    b = list(a)
    if names:
        b[rng.randrange(len(names))] = "other"
    x, y, x2 = cls(*a), cls(*b), cls(*a)
    rx, ry = ref(*a), ref(*b)
    assert repr(x) == repr(rx).replace(ref.__qualname__, cls.__qualname__, 1)
    assert (x == x2, x == y, x != y) == (rx == ref(*a), rx == ry, rx != ry)
    assert hash(x) == hash(x2) and (hash(x) == hash(y)) == (hash(rx) == hash(ry))
    assert x.__eq__(object()) is NotImplemented
    for name in names + ["not_a_field"]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(x, name, 1)
    for name in names:
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(x, name)
    assert pickle.loads(pickle.dumps(x)) == x
    if names:
        r = dataclasses.replace(x, **{names[0]: "new"})
        assert type(r) is cls and getattr(r, names[0]) == "new"
        assert getattr(x, names[0]) == a[0]


def test_a_recursive_repr_stops():
    items = []
    s = ir.OutSeq("list", items)
    items.append(s)
    assert repr(s) == "OutSeq(kind='list', items=[...], ctor=-1)"
