"""Graph breaks and Python side effects: the refused path runs eagerly (an
eager version under the path's guards, or a negative entry) with exactly one
RuntimeWarning (results equal eager, side effects happen once per call like
eager); strict mode raises instead.  tests/unit/test_eager_paths.py checks
that the other paths stay native."""

from __future__ import annotations

import warnings

import pytest
import torch

import trident
from trident import config


def _with_print(x):
    print("trident-test-print", x.shape[0])
    return x * 2


def _with_item_in_python(x):
    s = x.sum().item()
    if s > 0:
        return x * s
    return x - s


def _with_tolist(x):
    return x * len(x.tolist()), x.tolist()


def _data_dependent_branch(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def _float_of_tensor(x):
    return x + float(x.max()) if float(x.max()) > 0.5 else x


SIDE = []


def _side_effect(x):
    SIDE.append(x.shape[0])
    return x + 1


GRAPH_BREAKERS = {
    "print": _with_print,
    "item_in_python": _with_item_in_python,
    "tolist": _with_tolist,
    "data_dependent_branch": _data_dependent_branch,
    "float_of_tensor": _float_of_tensor,
    "global_list_append": _side_effect,
}


def _inputs():
    # Both signs, so data-dependent branches take both sides.
    return [torch.randn(4).abs() + 1, -torch.randn(4).abs() - 1, torch.randn(4),
            torch.randn(6).abs(), -torch.randn(5).abs()]


@pytest.mark.parametrize("name", list(GRAPH_BREAKERS))
def test_graph_break_falls_back_with_one_warning(h, record_warnings, name):
    fn = GRAPH_BREAKERS[name]
    f = trident.jit(fn)
    with record_warnings() as rec:
        for x in _inputs():
            h.check(f, fn, x, exact=True)
    warns = h.runtime_warnings(rec)
    assert len(warns) == 1, [str(w.message) for w in warns]
    assert "eager" in str(warns[0].message)
    st = trident.stats(f)
    assert st["fallback_reason"] and st["eager_paths"]
    assert not st["runs_eagerly"]  # per path, not the whole function
    assert all(v.eager for v in trident.versions(f))  # no native version of a refused path


@pytest.mark.parametrize("name", list(GRAPH_BREAKERS))
def test_graph_break_strict_raises(h, name):
    fn = GRAPH_BREAKERS[name]
    f = trident.jit(fn, strict=True)
    with pytest.raises((trident.UnsupportedError, trident.CaptureError)):
        f(torch.randn(4).abs() + 1)
    assert issubclass(trident.UnsupportedError, trident.TridentError)
    assert issubclass(trident.CaptureError, trident.TridentError)


def test_strict_from_environment(h):
    with config.scope(TRIDENT_STRICT="1"):
        f = trident.jit(_data_dependent_branch)
        with pytest.raises((trident.UnsupportedError, trident.CaptureError)):
            f(torch.randn(4))


def test_print_runs_once_per_call_like_eager(h, capsys, record_warnings):
    f = trident.jit(_with_print)
    with record_warnings():
        for n in (3, 3, 4):
            h.check(f, _with_print, h.rand(n))
    out = capsys.readouterr().out
    # Eager printed 3 times (in h.check), the jitted function must too.
    assert out.count("trident-test-print") == 6, out


def test_side_effect_happens_once_per_call_like_eager(h, record_warnings):
    f = trident.jit(_side_effect)
    SIDE.clear()
    with record_warnings():
        for n in (2, 3, 2, 5):
            f(h.rand(n))
    assert SIDE == [2, 3, 2, 5]


def test_mutating_an_argument_list_is_not_silently_dropped(h, record_warnings):
    def fn(x, acc: list):
        acc.append(x.sum())
        return x * 2

    f = trident.jit(fn)
    acc_j, acc_e = [], []
    with record_warnings():
        for _ in range(3):
            x = h.rand(3)
            h.assert_tree_equal(f(x, acc_j), fn(x, acc_e))
    assert len(acc_j) == len(acc_e) == 3
    for a, e in zip(acc_j, acc_e):
        torch.testing.assert_close(a, e)


def test_setting_an_attribute_on_an_argument_is_not_dropped(h, record_warnings):
    class Box:
        pass

    def fn(x, box):
        box.last = x.shape[0]
        return x + 1

    f = trident.jit(fn)
    with record_warnings():
        for n in (2, 3, 4, 3):
            bj, be = Box(), Box()
            x = h.rand(n)
            h.assert_tree_equal(f(x, bj), fn(x, be))
            assert bj.last == be.last == n


def test_fallback_after_versions_keeps_serving_correct_results(h, record_warnings):
    """A graph break on a later path (taken only for some shapes) falls back
    without ever giving a stale version's answer."""
    def fn(x):
        if x.shape[0] > 3:
            print("trident-test-long")
        return x.cumsum(0)

    f = trident.jit(fn)
    with record_warnings() as rec:
        for n in (2, 3, 2, 5, 2, 6, 3):
            h.check(f, fn, h.rand(n))
    assert len(h.runtime_warnings(rec)) == 1


def test_no_tensor_ops_falls_back(h, record_warnings):
    def fn(a, b):
        return a + b

    f = trident.jit(fn)
    with record_warnings() as rec:
        assert f(1, 2) == 3
        assert f("a", "b") == "ab"
        assert f([1], [2]) == [1, 2]
    assert len(h.runtime_warnings(rec)) <= 1


def test_disable_env_returns_the_function_itself():
    def fn(x):
        return x + 1

    with config.scope(TRIDENT_DISABLE="1"):
        assert trident.jit(fn) is fn


@pytest.mark.parametrize("fn", [_data_dependent_branch, _with_print])
def test_warning_points_at_the_caller(h, fn):
    # A path that runs eagerly, and a function that does: both warnings name the user's
    # call (computed by walking out of the package, not a fixed stack depth).
    f = trident.jit(h.fresh(fn))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        f(torch.randn(3))
    warns = h.runtime_warnings(rec)
    assert len(warns) == 1
    assert warns[0].filename == __file__


def test_a_failing_c_compiler_falls_back_with_the_call_result(h, monkeypatch):
    """No C compiler: the capturing call still returns its result, the function
    runs eagerly with one warning, and strict mode raises BuildError."""
    import warnings

    from trident import config

    def fn(x):
        return x.sin() + 1

    cache = config.cache_dir() / "nocc"
    monkeypatch.setenv("TRIDENT_CC", "/nonexistent/cc")
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(cache))
    f = trident.jit(h.fresh(fn))
    x = h.rand(4)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.testing.assert_close(f(x), fn(x))
        torch.testing.assert_close(f(x), fn(x))
    warns = [i for i in w if issubclass(i.category, RuntimeWarning)]
    assert len(warns) == 1
    assert warns[0].filename == __file__  # the call, not Trident's frames
    g = trident.jit(h.fresh(fn), strict=True)
    with pytest.raises(trident.BuildError):
        g(x)


@torch.no_grad()
def _no_grad_decorated(x):
    return x * 2 + 1


def test_no_grad_decorated_function_runs_natively_like_eager(record_warnings):
    # torch.compile traces a function defined in a file Dynamo skips (torch.no_grad's
    # decorate_context) through its own wrapper frame, whose `fn` is the function and whose
    # globals the guards read (guards.translate.dynamo_wrapped). The graph enters no_grad
    # first and leaves it last: the version runs its program under no_grad (run_mode), so
    # hits return requires_grad=False as eager does (a mapping without the mode did not).
    f = trident.jit(_no_grad_decorated)
    with record_warnings() as rec:
        for _ in range(3):
            x = torch.randn(4, requires_grad=True)
            out, ref = f(x), _no_grad_decorated(x)
            torch.testing.assert_close(out, ref)
            assert out.requires_grad is ref.requires_grad is False
    assert not [w for w in rec if "runs eagerly" in str(w.message)]
    st = trident.stats(f)
    assert st["versions"] == 1 and sum(st["hits"]) == 2, trident.explain(f)


def _tempered(logits, temperature):
    return torch.softmax(logits / temperature, -1)


def _affine(x, a, b):
    return x * a + b


def test_a_float_that_changes_per_call_runs_eagerly_past_its_values(h, monkeypatch):
    """Floats are specialised per value: once the versions hold TRIDENT_FLOAT_VALUES values
    of one float, a miss on another value of it runs eagerly, uncaptured; its held values
    keep hitting, and other paths (another float's new value, a new shape) are captured."""
    monkeypatch.setenv("TRIDENT_DYNAMIC_FLOATS", "0")
    monkeypatch.setenv("TRIDENT_FLOAT_VALUES", "3")
    fn = h.fresh(_affine)
    f = trident.jit(fn, max_versions=8)
    for a in (0.5, 0.7, 0.9):  # three values of `a`: three versions
        h.check(f, fn, h.rand(4, 16), a, 1.0)
    for a in (1.1, 1.3):  # another value each: eager, no capture
        h.check(f, fn, h.rand(4, 16), a, 1.0)
    st = trident.stats(f)
    assert st["captures"] == 3 and st["eager_float_values"] == {"L['a']": 2}, st
    assert "float L['a']" in trident.explain(f)
    # `a` held (version 0 passes its guard), `b` new: that miss is b's, which has one value
    h.check(f, fn, h.rand(4, 16), 0.5, 2.0)
    h.check(f, fn, h.rand(4, 16), 0.7, 1.0)  # a held pair hits
    h.check(f, fn, h.rand(8, 16), 0.7, 1.0)  # a new shape is a new path: captured
    st = trident.stats(f)
    assert st["captures"] == 5 and sum(st["hits"]) == 1 and st["recompile_limit"] is None, st
    assert st["eager_float_values"] == {"L['a']": 2}


def test_float_values_zero_captures_every_value(h, monkeypatch):
    monkeypatch.setenv("TRIDENT_DYNAMIC_FLOATS", "0")
    monkeypatch.setenv("TRIDENT_FLOAT_VALUES", "0")
    fn = h.fresh(_tempered)
    f = trident.jit(fn, max_versions=8)
    for t in (0.5, 0.7, 0.9, 1.1, 1.3):
        h.check(f, fn, h.rand(4, 16), t)
    st = trident.stats(f)
    assert st["captures"] == 5 and st["eager_float_values"] == {}
