"""Integer arithmetic a version evaluates natively (its program's sizes and returned ints, its
shape guards) is Python's, which does not overflow: a result beyond int64 makes the call miss
(it then runs as eager does) instead of wrapping around. Found by the fuzzer: `s * 2` with
s = 2**62 returned -2**63."""

from __future__ import annotations

import random

import torch

import trident


def _ret(x, s):
    return x + 1, s * 2, -s, s - 3


def _same(out, ref):
    assert torch.equal(out[0], ref[0])
    assert out[1:] == ref[1:] and all(type(a) is type(b) for a, b in zip(out[1:], ref[1:]))


def test_program_ints_beyond_int64_are_python_ints():
    f = trident.jit(_ret, dynamic=True)
    values = [3, 5, 2 ** 62, -2 ** 63, 2 ** 63 - 1, random.randint(-2 ** 62, 2 ** 62), 7]
    for s in values:
        x = torch.randn(4)
        _same(f(x, s), _ret(x, s))
    assert sum(trident.stats(f)["hits"]) >= 2, trident.explain(f)  # small values stay native


def _guarded(x, s):
    if s * 4 > 10:
        return x * 2
    return x - 1


def test_shape_guard_arithmetic_beyond_int64_misses_instead_of_wrapping():
    f = trident.jit(_guarded, dynamic=True)
    for s in (5, 6, 2 ** 62, 2 ** 62 + 1, 1, 2, 2 ** 61 + 7):
        x = torch.randn(3)
        assert torch.equal(f(x, s), _guarded(x, s)), s
