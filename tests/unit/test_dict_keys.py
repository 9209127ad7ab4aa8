"""Dict items with constant keys of any builtin hashable type are native guards.

Liger-Kernel reads `_NVIDIA_ARCH_BY_CC[(9, 0)]` (a tuple key) through a module global; Dynamo
guards the item (DictGetItemSource with a tuple index).  Before, such a key was not translated
and the path ran eagerly.  Each function here must stay native, hit on repeat calls, and miss
(with eager's result) when the item it read changes.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest
import torch

import trident

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
