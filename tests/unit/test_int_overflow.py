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


def _writes_then_returns(x, s):
    x.view(-1).clamp_(min=0)
    return x * 3, s * 2, s + x.shape[0]


def test_int_beyond_int64_in_a_program_that_writes_its_argument():
    """Found by the fuzzer: the program writes its argument (`clamp_`), then computes `s * 2`,
    which for s = 2**62 is beyond int64.  The ints computed from the inputs alone are computed
    before the first operator, so this is a miss and the call runs as eager does (the
    argument written once, the Python int returned), not an OverflowError after the write."""
    f = trident.jit(_writes_then_returns, dynamic=True)
    for s in (3, 5, 2 ** 62, 7, 2 ** 63 - 2, -2 ** 62 - 1, 9):
        x = torch.randn(2, 3)
        xe = x.clone()
        out, ref = f(x, s), _writes_then_returns(xe, s)
        assert torch.equal(x, xe), s  # written once, as eager writes it
        assert torch.equal(out[0], ref[0]) and out[1:] == ref[1:], s
        assert all(type(a) is int for a in out[1:])
    assert sum(trident.stats(f)["hits"]) >= 2, trident.explain(f)  # small values stay native
