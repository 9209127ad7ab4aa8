"""Guard sources found by benchmarks/guard_sweep.py that Trident once refused, each with the
case that produced it: now native, and a change of what the guard reads is a miss whose new
version (or eager's error) matches eager on fresh random inputs."""

from __future__ import annotations

import collections
import warnings

import pytest
import torch

import trident


class Output(collections.OrderedDict):
    """A dict subclass with its own __getitem__, as transformers' ModelOutput: a str key is
    looked up in the dict, an int is the i-th value that is not None."""

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return [v for v in self.values() if v is not None][k]


def _out(**fields):
    return Output(**{k: (torch.randn(*v) if isinstance(v, tuple) else v)
                     for k, v in fields.items()})


def _copy(o):
    return type(o)((k, v.clone() if isinstance(v, torch.Tensor) else v) for k, v in o.items())


def _check(jf, f, o):
    """jf and f on copies of the same dict subclass argument (conftest's clone_tree would
    make it a plain dict)."""
    torch.testing.assert_close(jf(_copy(o)), f(_copy(o)), rtol=0, atol=0)


def _source_kinds(f) -> str:
    return "\n".join(str(g) for v in trident.versions(f) for g in v.guards)


def test_dict_subclass_argument_items_are_native():
    """Dynamo reads a dict subclass argument's items as `dict.__getitem__(o,
    list(dict.keys(o))[i])` (DictSubclassGetItemSource keyed by a ConstDictKeySource):
    the i-th value of the dict's own storage, past the subclass's __getitem__."""

    def f(o):
        return o["c"] * 2 + o[1]

    jf = trident.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no path runs eagerly
        for _ in range(2):  # capture, then a hit on fresh values
            _check(jf, f, _out(a=(3,), b=None, c=(3,)))
        # o[1] is now b, not c: the None check on the second value misses
        _check(jf, f, _out(a=(3,), b=(3,), c=(3,)))
        # another key order: the key checks miss
        _check(jf, f, _out(c=(3,), b=None, a=(3,)))
        _check(jf, f, _out(a=(3,), b=None, c=(4,)))  # another size
    st = trident.stats(jf)
    assert not st["eager_paths"] and st["fallback_reason"] is None, st
    assert sum(st["hits"]) >= 1 and st["versions"] >= 3, st
    assert "list(L['o'].values())" in _source_kinds(jf)
    # a renamed key: eager raises KeyError, and so does the call under Trident
    o = _out(a=(3,), b=None, z=(3,))
    with pytest.raises(KeyError):
        f(o)
    with pytest.raises(KeyError):
        jf(o)


def test_dict_subclass_value_stored_past_its_setitem_is_seen():
    """A value stored with dict.__setitem__ (past the subclass) is what the positional value
    guard reads: its tensor guard misses for another dtype."""

    def f(o):
        return o["x"] + 1

    jf = trident.jit(f)
    o = _out(x=(2, 3))
    _check(jf, f, o)
    o2 = _out(x=(2, 3))
    dict.__setitem__(o2, "x", torch.randn(2, 3, dtype=torch.float64))
    _check(jf, f, o2)
    assert trident.stats(jf)["versions"] == 2
