"""Structured arguments and returns: keywords, defaults, *args/**kwargs,
containers of tensors in and out, non-tensor outputs, and returned inputs
keeping their identity."""

from __future__ import annotations

import math
import re
import struct

import pytest
import torch

import trident

# ------------------------------------------------------------- arguments


def test_keyword_arguments(h):
    def fn(x, y, scale):
        return x * scale + y

    f = trident.jit(fn)
    x, y = h.rand(3), h.rand(3)
    h.check(f, fn, x, y, 2.0)
    h.check(f, fn, x, y=y, scale=2.0)
    h.check(f, fn, scale=2.0, y=y, x=x)
    h.check(f, fn, y=h.rand(3), x=h.rand(3), scale=2.0)
    # Swapping which tensor goes where must not reuse a binding.
    h.check(f, fn, y=x, x=y, scale=2.0)


def test_default_arguments_and_overriding_them(h):
    def fn(x, w=None, eps: float = 1e-5, axis: int = -1):
        y = x / (x.abs().sum(axis, keepdim=True) + eps)
        return y if w is None else y * w

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3, 4))
    h.check(f, fn, h.rand(3, 4))
    h.check(f, fn, h.rand(3, 4), h.rand(4))
    h.check(f, fn, h.rand(3, 4), None, 0.5)
    h.check(f, fn, h.rand(3, 4), eps=0.25)
    h.check(f, fn, h.rand(3, 4), axis=0)
    h.check(f, fn, h.rand(3, 4), w=h.rand(4), axis=1)
    h.check(f, fn, h.rand(3, 4))


def test_keyword_only_arguments(h):
    def fn(x, *, alpha=1.0, beta):
        return x * alpha + beta

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3), beta=h.rand(3))
    h.check(f, fn, h.rand(3), beta=h.rand(3), alpha=3.0)
    h.check(f, fn, h.rand(3), alpha=3.0, beta=2)
    h.check(f, fn, h.rand(3), beta=h.rand(3))


def test_star_args(h):
    def fn(x, *rest):
        out = x
        for r in rest:
            out = out + r
        return out, len(rest)

    f = trident.jit(fn)
    h.check(f, fn, h.rand(2))
    h.check(f, fn, h.rand(2), h.rand(2))
    h.check(f, fn, h.rand(2), h.rand(2), h.rand(2), h.rand(1))
    h.check(f, fn, h.rand(2), h.rand(2))
    h.check(f, fn, h.rand(2))


def test_star_kwargs(h):
    def fn(x, **opts):
        out = x
        for k in sorted(opts):
            out = out * opts[k] if k.startswith("m") else out + opts[k]
        return out

    f = trident.jit(fn)
    h.check(f, fn, h.rand(2))
    h.check(f, fn, h.rand(2), a=h.rand(2))
    h.check(f, fn, h.rand(2), a=h.rand(2), m=h.rand(2))
    h.check(f, fn, h.rand(2), m=h.rand(2), a=h.rand(2))
    h.check(f, fn, h.rand(2), a=3)
    h.check(f, fn, h.rand(2), b=h.rand(2))
    h.check(f, fn, h.rand(2), a=h.rand(2))


def test_args_and_kwargs_together(h):
    def fn(*args, **kwargs):
        return sum(args) + sum(kwargs.values())

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3), h.rand(3), z=h.rand(3))
    h.check(f, fn, h.rand(3), z=h.rand(3))
    h.check(f, fn, h.rand(3), h.rand(3), z=h.rand(3))


def test_tuple_and_list_of_tensors_as_input(h):
    def fn(xs, ys):
        return torch.stack(list(xs)).sum(0) + torch.cat(ys)[: xs[0].shape[0]]

    f = trident.jit(fn)
    h.check(f, fn, (h.rand(3), h.rand(3)), [h.rand(2), h.rand(2)])
    h.check(f, fn, (h.rand(3), h.rand(3)), [h.rand(2), h.rand(2)])
    h.check(f, fn, (h.rand(3), h.rand(3), h.rand(3)), [h.rand(2), h.rand(2)])
    h.check(f, fn, (h.rand(3), h.rand(3)), [h.rand(4)])
    h.check(f, fn, [h.rand(3), h.rand(3)], (h.rand(2), h.rand(2)))  # list <-> tuple
    h.check(f, fn, (h.rand(3), h.rand(3)), [h.rand(2), h.rand(2)])


def test_dict_of_tensors_as_input(h):
    def fn(d):
        out = d["x"] * 2
        if "bias" in d:
            out = out + d["bias"]
        return out

    f = trident.jit(fn)
    h.check(f, fn, {"x": h.rand(3)})
    h.check(f, fn, {"x": h.rand(3)})
    h.check(f, fn, {"x": h.rand(3), "bias": h.rand(3)})
    h.check(f, fn, {"bias": h.rand(3), "x": h.rand(3)})
    h.check(f, fn, {"x": h.rand(3)})


def test_dict_iteration_order_matters(h):
    def fn(d):
        return torch.cat(list(d.values()))

    f = trident.jit(fn)
    a, b = h.rand(2), h.rand(3)
    h.check(f, fn, {"a": a, "b": b})
    h.check(f, fn, {"b": b, "a": a})
    h.check(f, fn, {"a": h.rand(2), "b": h.rand(3)})


def test_nested_containers_as_input(h):
    def fn(cfg):
        (a, b), rest = cfg["pair"], cfg["rest"]
        return a @ b + rest[0]["t"] * cfg["k"]

    f = trident.jit(fn)
    for k in (1, 1, 2, 1.5):
        cfg = {"pair": (h.rand(2, 3), h.rand(3, 2)), "rest": [{"t": h.rand(2)}], "k": k}
        h.check(f, fn, cfg)


def test_same_tensor_passed_twice(h):
    def fn(x, y):
        return x * 2 + y

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3), h.rand(3))
    x = h.rand(3)
    assert torch.equal(f(x, x), fn(x, x))
    h.check(f, fn, h.rand(3), h.rand(3))


def test_same_tensor_passed_twice_with_in_place(h):
    def fn(x, y):
        x.add_(1)
        return y * 2

    f = trident.jit(fn)
    h.check(f, fn, h.rand(3), h.rand(3))
    h.check(f, fn, h.rand(3), h.rand(3))
    xj = h.rand(3)
    xe = xj.clone()
    out_j, out_e = f(xj, xj), fn(xe, xe)
    assert torch.equal(out_j, out_e)
    assert torch.equal(xj, xe)


def test_overlapping_views_passed_as_two_arguments(h):
    def fn(x, y):
        x.mul_(2)
        return y + 1

    f = trident.jit(fn)
    h.check(f, fn, h.rand(4), h.rand(3))
    h.check(f, fn, h.rand(4), h.rand(3))
    bj = h.rand(4)
    be = bj.clone()
    out_j = f(bj[:3], bj[1:])
    out_e = fn(be[:3], be[1:])
    assert torch.equal(out_j, out_e)
    assert torch.equal(bj, be)


# ---------------------------------------------------------------- returns


def test_return_tuple_list_dict(h):
    def fn(x):
        return (x + 1, [x * 2, {"a": x.sum(), "b": (x - 1,)}], {"m": x.max()})

    f = trident.jit(fn)
    for _ in range(3):
        h.check(f, fn, h.rand(4))


def test_return_none(h):
    def fn(x):
        x.add_(1)
        return None

    f = trident.jit(fn)
    for _ in range(3):
        assert h.check(f, fn, h.rand(3)) is None


def test_return_mixed_python_values(h):
    def fn(x, n: int):
        return x * n, n * 2, "label", None, 2.5, True, (n + 1, "x"), x.dtype

    f = trident.jit(fn)
    for n in (2, 2, 3, 4, 7):
        h.check(f, fn, h.rand(3), n)


def test_return_python_int_argument_static(h):
    def fn(x, n: int):
        return x * n, n

    f = trident.jit(fn, dynamic=False)
    for n in (2, 3, 4, 2):
        h.check(f, fn, h.rand(3), n)


def test_return_python_int_argument_dynamic(h):
    def fn(x, n: int):
        return x * n, n

    f = trident.jit(fn)
    for n in (2, 3, 4, 5):
        h.check(f, fn, h.rand(3), n)


def test_return_scalar_from_item(h):
    def fn(x):
        return x.sum().item(), x.max().item() + 1

    f = trident.jit(fn)
    for _ in range(3):
        xj = h.rand(5, dtype=torch.float64)
        out = f(xj)
        ref = fn(xj)
        assert type(out[0]) is type(ref[0]) is float
        assert out == pytest.approx(ref)
    for _ in range(3):
        xj = h.rand(5, dtype=torch.int64)
        assert f(xj) == fn(xj)


def test_return_input_itself(h):
    def fn(x, y):
        return x

    f = trident.jit(fn)
    for _ in range(3):
        x, y = h.rand(3), h.rand(3)
        assert f(x, y) is x


def test_return_input_inside_structure(h):
    def fn(x, y):
        return (x, x + y, [y, x], {"x": x})

    f = trident.jit(fn)
    for _ in range(3):
        x, y = h.rand(3), h.rand(3)
        out = f(x, y)
        ref = fn(x, y)
        h.assert_tree_equal(out, ref)
        assert out[0] is x and out[2][1] is x and out[2][0] is y and out[3]["x"] is x


def test_return_same_new_tensor_twice(h):
    def fn(x):
        y = x * 2
        return y, y, [y]

    f = trident.jit(fn)
    for _ in range(3):
        out = f(h.rand(3))
        assert out[0] is out[1] is out[2][0]


def test_return_input_from_container_argument(h):
    def fn(xs, d):
        return xs[1], d["k"], xs[0] + 1

    f = trident.jit(fn)
    for _ in range(3):
        xs = (h.rand(2), h.rand(2))
        d = {"k": h.rand(2)}
        out = f(xs, d)
        assert out[0] is xs[1] and out[1] is d["k"]
        h.assert_tree_equal(out[2], xs[0] + 1)


def test_return_a_fresh_list_not_shared_between_calls(h):
    def fn(x):
        return [x + 1, x + 2]

    f = trident.jit(fn)
    a = f(h.rand(2))
    b = f(h.rand(2))
    assert a is not b
    a.append("mutated")
    c = f(h.rand(2))
    assert len(c) == 2 and len(b) == 2


def test_return_dict_keys_order_and_int_keys(h):
    def fn(x):
        return {"z": x, 1: x + 1, "a": x * 2}

    f = trident.jit(fn)
    for _ in range(3):
        h.check(f, fn, h.rand(2))


def test_return_constant_tensor_is_fresh_each_call(h):
    def fn(x):
        return torch.zeros(3) + x.sum() * 0, torch.ones(2)

    f = trident.jit(fn)
    a = f(h.rand(2))
    a[1].add_(5)  # the caller owns its result
    b = f(h.rand(2))
    assert torch.equal(b[1], torch.ones(2))
    assert a[1].data_ptr() != b[1].data_ptr()


@pytest.mark.parametrize("kind", ["list", "dict", "tuple"])
def test_container_argument_returned_is_the_same_object(kind):
    """Found by the fuzzer: a container argument returned as is must be the
    caller's object on native hits too, as in eager."""

    def fn(x, c):
        return c, x + 1

    f = trident.jit(fn)
    x = torch.ones(3)
    c = {"list": [x], "dict": {"a": x}, "tuple": (x,)}[kind]
    for _ in range(3):
        assert f(x, c)[0] is c
    assert sum(trident.stats(f)["hits"]) >= 1


def test_negative_zero_is_not_served_by_the_zero_version():
    def fn(x, s):
        return x / s

    f = trident.jit(fn)
    x = torch.ones(2)
    for s in (0.0, -0.0, 0.0, -0.0):
        assert torch.equal(f(x, s), fn(x, s))


def _bits(v: float) -> bytes:
    return struct.pack("<d", v)


def _nan(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _same(actual, expected) -> None:
    """Equal results, NaNs included, each float down to its bits (sign and payload)."""
    assert type(actual) is type(expected)
    if isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same(a, e)
    elif isinstance(expected, float):
        assert _bits(actual) == _bits(expected), (actual, expected)
    else:
        assert torch.equal(actual.isnan(), expected.isnan())
        torch.testing.assert_close(actual, expected, equal_nan=True)


_NAN_CALLS = [
    float("nan"), 2.5, float("nan"), -float("nan"), float("nan"), -float("nan"), 2.5,
    _nan(0x7FF8000000000001), float("nan"), math.nan,
]


@pytest.mark.parametrize("dynamic", [None, True])
def test_nan_float_argument_keeps_a_native_version(dynamic):
    """A NaN argument used to make the function run eagerly for good (Dynamo guards
    `isnan(s)`; no value equals NaN).  Now its version is served to a NaN of the same bits;
    -nan and another payload get their own (the function returns s and copysign of it)."""

    def fn(x, s):
        return x * s + 1, s, math.copysign(1.0, s), x.sum() + s

    f = trident.jit(fn, dynamic=dynamic, strict=True)
    for s in _NAN_CALLS:
        x = torch.randn(4)
        _same(f(x, s), fn(x, s))
    st = trident.stats(f)
    assert st["fallbacks"] == 0, st["fallback_reason"]
    # nan, 2.5, -nan and the other payload: four versions, every other call a native hit
    assert st["versions"] == 4, st
    assert sum(st["hits"]) == len(_NAN_CALLS) - 4


_K = float("nan")


def _uses_global_k(x):
    return x * _K, math.copysign(1.0, _K)


def test_nan_global_is_a_native_environment_guard():
    global _K
    f = trident.jit(_uses_global_k, strict=True)
    try:
        for k in (float("nan"), float("nan"), 1.0, -float("nan"), math.nan, 1.0):
            _K = k
            x = torch.randn(3)
            _same(f(x), _uses_global_k(x))
    finally:
        _K = float("nan")
    st = trident.stats(f)
    assert st["fallbacks"] == 0, st["fallback_reason"]
    assert st["versions"] == 3 and sum(st["hits"]) == 3, st


@pytest.mark.parametrize("big", [2 ** 63, 2 ** 64])
def test_int_beyond_int64_behaves_like_eager(big):
    def fn(x, s):
        return x * s

    f = trident.jit(fn, dynamic=True)
    x = torch.ones(2)
    assert torch.equal(f(x, 2), fn(x, 2))
    try:
        want = fn(x, big)
    except OverflowError as e:
        with pytest.raises(OverflowError, match=re.escape(str(e))):
            f(x, big)
    else:
        assert torch.equal(f(x, big), want)


def test_scm_rebuilt_in_inference_mode_keeps_normal_constants():
    def fn(x):
        return x * 2

    f = trident.jit(fn)
    x = torch.ones(3, requires_grad=True)
    f(x)
    with torch.inference_mode():
        f(x)
    out = f(x)
    assert torch.equal(out, fn(x)) and out.requires_grad
    out.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def _adds_scalar_tensor(x, y):
    return (x + 1).view(-1).add_(y), y * 2


def _double_scalar(kind: str):
    x = torch.randn(4, dtype=torch.float64)
    if kind == "view":  # a view of x: Dynamo reads its base's item too
        return x, x[1]
    if kind == "nan":
        return x, torch.tensor(float("nan"), dtype=torch.float64)
    n = 3 if kind == "small" else 6
    return torch.randn(n, dtype=torch.float64), torch.randn((), dtype=torch.float64)


@pytest.mark.parametrize("dynamic", [None, True])
def test_zero_dim_double_tensor_argument_stays_compiled(dynamic):
    """Dynamo gives a 0-d float64 CPU tensor argument a float symbol and guards
    `not math.isnan(L['y'].item())` (its NaN specialization): that guard used to make the
    function run eagerly for good.  It is native now (the guard calls `.item()`, as
    Dynamo's does); a NaN value misses and gets its own version."""
    f = trident.jit(_adds_scalar_tensor, dynamic=dynamic, strict=True)
    kinds = ["small", "small", "big", "view", "view", "nan", "nan", "small", "big", "view"]
    for kind in kinds:
        x, y = _double_scalar(kind)
        xe, ye = x.clone(), y.clone()
        if kind == "view":
            ye = xe[1]
        out, ref = f(x, y), _adds_scalar_tensor(xe, ye)
        for a, e in zip(out, ref):
            assert torch.equal(a.isnan(), e.isnan())
            torch.testing.assert_close(a, e, equal_nan=True)
        assert torch.equal(x, xe)
    st = trident.stats(f)
    assert st["fallbacks"] == 0, st["fallback_reason"]
    assert "isnan(" in trident.explain(f)
    assert sum(st["hits"]) >= 4, trident.explain(f)
