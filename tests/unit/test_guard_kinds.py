"""One test per Dynamo guard kind of docs/guards.md that no other unit test
produced: the captured function really makes Dynamo emit the kind, and Trident
handles it as the table says, against eager on fresh random inputs.

* native rows: the version is built (no fallback), and changing what the
  guard checks is a miss whose new version gives eager's result;
* refused rows: the call falls back to eager with exactly one RuntimeWarning
  (results equal eager's), `strict=True` raises UnsupportedError, and
  `translate` refuses the kind's entry on its own as well (so the refusal is
  not just an accident of another guard of the same capture).

The `guard_log` fixture records every guard entry Dynamo hands to Trident's
guard filter (by wrapping the `guard_filter_fn` Trident passes to
`torch.compile`) and every entry that reaches `translate` (the way the table
was measured), so a test cannot pass without the kind it names.  Kinds that no
user code emits in this torch version are skipped with the reason.
"""

from __future__ import annotations

import itertools
import re
import types

import pytest
import torch
import torch.utils._pytree as pytree
from torch._dynamo.guards import GuardBuilder
from torch.overrides import TorchFunctionMode

import trident
import trident.scm as scm_mod
from trident.errors import UnsupportedError
from trident.guards.translate import ConstPool, translate

# ------------------------------------------------------------------ helpers


class GuardLog:
    def __init__(self):
        self.emitted: list = []  # one list of GuardFilterEntry per Dynamo capture
        self.translated: list = []  # one list per `translate` call

    def emitted_kinds(self) -> set:
        return {e.guard_type for es in self.emitted for e in es}

    def translated_kinds(self) -> set:
        return {e.guard_type for es in self.translated for e in es}

    def entries(self, kind: str) -> list:
        return [e for es in self.emitted for e in es if e.guard_type == kind]


@pytest.fixture
def guard_log(monkeypatch):
    log = GuardLog()
    orig_translate = scm_mod.translate

    def recording_translate(entries, *args, **kwargs):
        log.translated.append(list(entries))
        return orig_translate(entries, *args, **kwargs)

    orig_compile = torch.compile

    def recording_compile(*args, options=None, **kwargs):
        inner = (options or {}).get("guard_filter_fn")
        if inner is not None:
            def guard_filter(entries):
                log.emitted.append(list(entries))
                return inner(entries)

            options = {**options, "guard_filter_fn": guard_filter}
        return orig_compile(*args, options=options, **kwargs)

    monkeypatch.setattr(scm_mod, "translate", recording_translate)
    monkeypatch.setattr(torch, "compile", recording_compile)
    return log


# A capture holding nothing: `translate` reads these fields only for shape,
# tensor and global-state entries, none of which is translated alone here.
_NO_CAPTURE = types.SimpleNamespace(shape_exprs=[], sizes_strides={}, global_state=b"",
                                    tf_mode_stack_len=0)


def _translate_alone(entry, fn):
    return translate([entry], _NO_CAPTURE, fn, ConstPool(), None)


def _assert_refused_alone(log: GuardLog, kind: str, fn) -> None:
    entries = log.entries(kind)
    assert entries, f"Dynamo emitted no {kind}"
    for e in entries:
        with pytest.raises(UnsupportedError):
            _translate_alone(e, fn)


def _check_refused(h, record_warnings, log: GuardLog, fn, kind: str, calls, *, reason: str,
                   reaches_translate: bool = True, check=None):
    """`fn` under trident.jit on each argument tuple of `calls` equals eager,
    after one warning: the path runs eagerly, keyed on the call (its guards do not translate,
    so no version); `kind` was emitted (when the capture reaches translation); strict mode
    raises."""
    check = check or h.check
    f = trident.jit(fn)
    with record_warnings() as rec:
        for args in calls:
            check(f, fn, *args)
    warns = h.runtime_warnings(rec)
    assert len(warns) == 1, [str(w.message) for w in warns]
    assert "runs eagerly" in str(warns[0].message)
    st = trident.stats(f)
    assert st["versions"] == 0
    assert st["fallbacks"] == 1  # later calls run eagerly without asking again
    assert reason in st["fallback_reason"], st["fallback_reason"]
    assert [e["version"] for e in st["eager_paths"]] == [None], st["eager_paths"]
    if reaches_translate:
        assert kind in log.emitted_kinds(), sorted(log.emitted_kinds())
        assert kind in log.translated_kinds(), sorted(log.translated_kinds())
    # else: refused in the backend (nothing ran); the guards Dynamo built for the path are
    # then translated for its eager version, and refused there
    if reaches_translate:
        _assert_refused_alone(log, kind, fn)

    g = trident.jit(fn, strict=True)
    with pytest.raises(UnsupportedError, match=re.escape(reason)):
        g(*calls[0])
    return f


def _assert_compiled(f, versions: int) -> dict:
    st = trident.stats(f)
    assert st["fallbacks"] == 0, st["fallback_reason"]
    assert st["fallback_reason"] is None
    assert st["versions"] == versions, st
    return st


def _needs_kind(kind: str):
    return pytest.mark.skipif(not hasattr(GuardBuilder, kind),
                              reason=f"torch {torch.__version__} has no {kind} guard kind")


# ============================================================ native rows

# ------------------------------------------------------------ FUNCTION_MATCH


class _Scale:
    """A callable object: with allow_in_graph, Dynamo writes the call into the
    graph as is and guards the object with FUNCTION_MATCH."""

    __name__ = "_Scale"

    def __init__(self, k):
        self.k = k

    def __call__(self, t):
        return t * self.k


SCALER = None


def _uses_scaler(x):
    return SCALER(x) + 1


def test_function_match_rebinding_a_global_callable_is_a_miss(h, guard_log):
    global SCALER
    two = torch.compiler.allow_in_graph(_Scale(2.0))
    three = torch.compiler.allow_in_graph(_Scale(3.0))
    f = trident.jit(_uses_scaler)
    try:
        SCALER = two
        h.check(f, _uses_scaler, h.rand(4))
        h.check(f, _uses_scaler, h.rand(4))
        st = _assert_compiled(f, 1)
        assert st["hits"] == [1]
        assert "FUNCTION_MATCH" in guard_log.translated_kinds()
        for e in guard_log.entries("FUNCTION_MATCH"):
            (op,) = _translate_alone(e, _uses_scaler)
            assert type(op).__name__ == "IdMatch"
        SCALER = three
        h.check(f, _uses_scaler, h.rand(4))
        h.check(f, _uses_scaler, h.rand(4))
        _assert_compiled(f, 2)
        SCALER = two
        h.check(f, _uses_scaler, h.rand(4))
        st = _assert_compiled(f, 2)
        assert st["hits"] == [2, 1]
    finally:
        SCALER = None


# --------------------------------------------------------------- CLASS_MATCH


class _Circle:
    pass


class _Square:
    pass


SHAPE_KIND = _Circle


def _is_shape_kind(o, x):
    return x * 2 if isinstance(o, SHAPE_KIND) else x - 1


def test_class_match_rebinding_a_global_class_is_a_miss(h, guard_log):
    global SHAPE_KIND
    f = trident.jit(_is_shape_kind)
    obj = _Circle()
    try:
        h.check(f, _is_shape_kind, obj, h.rand(3))
        h.check(f, _is_shape_kind, obj, h.rand(3))
        _assert_compiled(f, 1)
        assert "CLASS_MATCH" in guard_log.translated_kinds()
        for e in guard_log.entries("CLASS_MATCH"):
            (op,) = _translate_alone(e, _is_shape_kind)
            assert type(op).__name__ == "IdMatch"
        SHAPE_KIND = _Square  # only CLASS_MATCH on G['SHAPE_KIND'] sees this
        h.check(f, _is_shape_kind, obj, h.rand(3))
        _assert_compiled(f, 2)
        SHAPE_KIND = _Circle
        h.check(f, _is_shape_kind, obj, h.rand(3))
        st = _assert_compiled(f, 2)
        assert st["hits"] == [2, 0]
    finally:
        SHAPE_KIND = _Circle


def test_class_match_on_a_class_argument(h, guard_log):
    class A:
        k = 2

    class B:
        k = 2  # same attribute value: only the class identity differs

    def fn(c, x):
        return x * c.k + (1 if c is A else 0)

    f = trident.jit(fn)
    for c in (A, A, B, A, B):
        h.check(f, fn, c, h.rand(3), exact=True)
    _assert_compiled(f, 2)
    assert "CLASS_MATCH" in guard_log.translated_kinds()


# ---------------------------------------------------- TORCH_FUNCTION_STATE


class _AddOneAfterMul(TorchFunctionMode):
    """Adds 1 to the result of every Tensor.mul: a mode that changes results."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.Tensor.mul:
            out = out + 1
        return out


def _mul2(x):
    return x * 2


def test_torch_function_mode_active_is_a_miss_and_runs_eagerly(h, record_warnings, guard_log):
    f = trident.jit(_mul2)
    h.check(f, _mul2, h.rand(3))
    _assert_compiled(f, 1)
    assert "TORCH_FUNCTION_STATE" in guard_log.translated_kinds()
    with record_warnings() as rec:
        with _AddOneAfterMul():
            for _ in range(3):  # misses (mode-stack length); runs eagerly, no capture
                h.check(f, _mul2, h.rand(3))
        h.check(f, _mul2, h.rand(3))
    warns = h.runtime_warnings(rec)
    assert len(warns) == 1, [str(w.message) for w in warns]
    assert "a torch function mode is active" in str(warns[0].message)
    st = trident.stats(f)
    assert st["fallback_reason"] is None and st["versions"] == 1
    assert st["hits"] == [1]  # only the call after the mode: the version never served it

    g = trident.jit(_mul2, strict=True)
    g(h.rand(3))
    with _AddOneAfterMul():
        with pytest.raises(UnsupportedError, match="a torch function mode is active"):
            g(h.rand(3))
    h.check(g, _mul2, h.rand(3))  # the version without the mode still serves


def test_torch_function_mode_capturing_call_equals_eager(h, record_warnings):
    # The first call under a mode: capturing would apply the mode twice (Dynamo
    # traces it into the graph, the capturing run goes through it again), so it
    # runs eagerly instead.
    f = trident.jit(_mul2)
    with record_warnings(), _AddOneAfterMul():
        h.check(f, _mul2, h.rand(3))
    assert trident.stats(f)["versions"] == 0
    h.check(f, _mul2, h.rand(3))
    h.check(f, _mul2, h.rand(3))
    assert trident.stats(f)["versions"] == 1 and trident.stats(f)["hits"] == [1]


# --------------------------------------------- AUTOGRAD_SAVED_TENSORS_HOOKS


def _sin_times(x):
    return (x.sin() * x).sum()


def test_saved_tensors_hooks_active_is_a_miss(h, guard_log):
    packed: list = []

    def pack(t):
        packed.append(type(t))
        return t.clone()

    def unpack(t):
        return t

    def value_and_grad(fn, x):
        x = x.detach().requires_grad_(True)
        y = fn(x)
        (g,) = torch.autograd.grad(y, x)
        return y.detach(), g

    f = trident.jit(_sin_times)
    x = h.rand(5)
    h.assert_tree_equal(value_and_grad(f, x), value_and_grad(_sin_times, x))
    _assert_compiled(f, 1)
    assert "AUTOGRAD_SAVED_TENSORS_HOOKS" in guard_log.translated_kinds()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        value_and_grad(f, h.rand(5))  # misses (hooks stack depth): captures version 1
        _assert_compiled(f, 2)
        for _ in range(2):
            x = h.rand(5)
            packed.clear()
            expected = value_and_grad(_sin_times, x)
            eager_packs = list(packed)
            packed.clear()
            h.assert_tree_equal(value_and_grad(f, x), expected)
            assert packed == eager_packs  # the hooks run at call time, as in eager
    assert eager_packs and all(t is torch.Tensor for t in eager_packs)
    x = h.rand(5)
    packed.clear()
    h.assert_tree_equal(value_and_grad(f, x), value_and_grad(_sin_times, x))
    assert packed == []
    st = _assert_compiled(f, 2)
    assert st["hits"] == [1, 2]


def test_saved_tensors_hooks_capturing_call_packs_like_eager(h):
    # The ATen lowering (make_fx over FakeTensors) must not call the user's hooks.
    packed: list = []

    def pack(t):
        packed.append(type(t).__name__)
        return t

    f = trident.jit(_sin_times)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x = h.rand(5, requires_grad=True)
        _sin_times(x).backward()
        eager_packs = list(packed)
        packed.clear()
        f(x).backward()
    assert packed == eager_packs


# ============================================================ refused rows

# ------------------------------------------------------- iterator arguments


def _iterator_is_given(it, x):
    # The iterator is looked at, not advanced: advancing an argument's iterator
    # is a Python side effect, refused before its guards are translated.
    return x * 2 if it is not None else x


def test_tuple_iterator_len_is_refused(h, record_warnings, guard_log):
    calls = [(iter((1.0, 2.0)), h.rand(3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, _iterator_is_given, "TUPLE_ITERATOR_LEN",
                   calls, reason="guard kind TUPLE_ITERATOR_LEN")


def test_range_iterator_match_is_refused(h, record_warnings, guard_log):
    calls = [(iter(range(1, 5)), h.rand(3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, _iterator_is_given, "RANGE_ITERATOR_MATCH",
                   calls, reason="guard kind RANGE_ITERATOR_MATCH")


@_needs_kind("COUNT_ITERATOR_MATCH")
def test_count_iterator_match_is_refused(h, record_warnings, guard_log):
    calls = [(itertools.count(2), h.rand(3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, _iterator_is_given, "COUNT_ITERATOR_MATCH",
                   calls, reason="guard kind COUNT_ITERATOR_MATCH")


def test_mapping_keys_check_is_refused(h, record_warnings, guard_log):
    def fn(m, x):
        return x * len(list(m.keys()))

    calls = [(types.MappingProxyType({"a": 1, "b": 2}), h.rand(3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, fn, "MAPPING_KEYS_CHECK", calls,
                   reason="guard kind MAPPING_KEYS_CHECK")


# ------------------------------------------------- containment and attributes


def _membership(s, x):
    return x * 2 if "c" in s else x - 1


def _check_native_membership(h, guard_log, fn, kind: str, calls, versions: int):
    f = trident.jit(fn)
    for args in calls:
        h.check(f, fn, *args)
    assert kind in guard_log.translated_kinds()
    st = _assert_compiled(f, versions)
    assert sum(st["hits"]) >= 1
    return f


def test_set_contains_is_native(h, guard_log):
    # "c" in s, then not, then in again: the set's own equality guard (strings)
    # makes each distinct set a version; the repeated one is a hit
    calls = [({"a", "c"}, h.rand(3)), ({"a", "b"}, h.rand(3)), ({"a", "c"}, h.rand(3))]
    f = _check_native_membership(h, guard_log, _membership, "SET_CONTAINS", calls, 2)
    assert "contains 'c' in" in trident.explain(f)


@_needs_kind("SET_NOT_CONTAINS")
def test_set_not_contains_is_native(h, guard_log):
    calls = [({"a", "b"}, h.rand(3)), ({"a", "c"}, h.rand(3)), ({"a", "b"}, h.rand(3))]
    _check_native_membership(h, guard_log, _membership, "SET_NOT_CONTAINS", calls, 2)


def _dict_membership(d, x):
    return x * d["a"] if "a" in d else x - 1


def test_dict_contains_is_native(h, guard_log):
    calls = [({"a": 2, "b": 3}, h.rand(3)), ({"b": 3}, h.rand(3)), ({"a": 2, "b": 5}, h.rand(3)),
             ({"b": 4}, h.rand(3))]
    f = _check_native_membership(h, guard_log, _dict_membership, "DICT_CONTAINS", calls, 2)
    assert "contains 'a' in" in trident.explain(f)


@_needs_kind("DICT_NOT_CONTAINS")
def test_dict_not_contains_is_native(h, guard_log):
    calls = [({"b": 3}, h.rand(3)), ({"a": 2, "b": 3}, h.rand(3)), ({"b": 7}, h.rand(3))]
    _check_native_membership(h, guard_log, _dict_membership, "DICT_NOT_CONTAINS", calls, 2)


def test_membership_of_a_non_container_is_a_miss(h):
    f = trident.jit(_membership)
    h.check(f, _membership, {"a", "c"}, h.rand(3))
    h.check(f, _membership, ["a", "c"], h.rand(3))  # a list: the set's guards fail
    h.check(f, _membership, {"a", "c"}, h.rand(3))
    assert sum(trident.stats(f)["hits"]) >= 1


class _Obj:
    pass


def test_hasattr_present_and_absent_are_native(h, guard_log):
    def fn(o, x):
        return x * 2 if hasattr(o, "scale") else x - 1

    with_attr = _Obj()
    with_attr.scale = 1
    f = trident.jit(fn, strict=True)
    h.check(f, fn, with_attr, h.rand(3))
    h.check(f, fn, with_attr, h.rand(3))
    assert _assert_compiled(f, 1)["hits"] == [1]
    assert "HASATTR" in guard_log.translated_kinds()
    assert "hasattr(" in trident.explain(f)
    h.check(f, fn, _Obj(), h.rand(3))  # the attribute is absent: a miss, a second version
    h.check(f, fn, _Obj(), h.rand(3))
    assert _assert_compiled(f, 2)["hits"] == [1, 1]
    assert "not hasattr(" in trident.explain(f)
    gone = _Obj()
    gone.scale = 1
    h.check(f, fn, gone, h.rand(3))
    del gone.scale  # the same object without it now: version 0 must not serve it
    h.check(f, fn, gone, h.rand(3))
    assert _assert_compiled(f, 2)["hits"] == [2, 2]


def test_hasattr_lookup_that_raises_is_eagers_error(h):
    class Prop:
        @property
        def scale(self):
            raise KeyError("scale")

    def fn(o, x):
        return x * 2 if hasattr(o, "scale") else x - 1

    with_attr = _Obj()
    with_attr.scale = 1
    f = trident.jit(fn)
    h.check(f, fn, with_attr, h.rand(3))
    h.check(f, fn, _Obj(), h.rand(3))
    # hasattr propagates a KeyError: no version's guard passes (a failed lookup fails the
    # guard), and the miss runs the call as eager does, raising the same error.
    with pytest.raises(KeyError):
        fn(Prop(), h.rand(3))
    with pytest.raises(KeyError):
        f(Prop(), h.rand(3))


@_needs_kind("CONSTANT_SUBCLASS_MATCH")
def test_constant_subclass_match_is_refused(h, record_warnings, guard_log):
    class Count(int):
        pass

    def fn(n, x):
        return x * n

    calls = [(Count(3), h.rand(3)), (Count(4), h.rand(3)), (Count(3), h.rand(3))]
    _check_refused(h, record_warnings, guard_log, fn, "CONSTANT_SUBCLASS_MATCH", calls,
                   reason="guard kind CONSTANT_SUBCLASS_MATCH")


def test_dispatch_key_set_match_is_refused(h, record_warnings, guard_log):
    def fn(keys, x):
        return x * 2 if keys.has(torch._C.DispatchKey.CPU) else x - 1

    calls = []
    for _ in range(3):
        x = h.rand(3)
        calls.append((torch._C._dispatch_keys(x), x))
    _check_refused(h, record_warnings, guard_log, fn, "DISPATCH_KEY_SET_MATCH", calls,
                   reason="guard kind DISPATCH_KEY_SET_MATCH")


# ----------------------------------------------- constants Dynamo folds in


def test_bool_match_is_not_emitted_alone(h, guard_log):
    def fn(flag, x):
        return x * 2 if flag is True else x - 1

    f = trident.jit(fn)
    for flag in (True, False, True):
        h.check(f, fn, flag, h.rand(3))
    if "BOOL_MATCH" not in guard_log.emitted_kinds():
        assert "CONSTANT_MATCH" in guard_log.translated_kinds()
        _assert_compiled(f, 2)
        pytest.skip(f"torch {torch.__version__} never emits BOOL_MATCH as an entry's kind: "
                    "only GuardBuilder.CONSTANT_MATCH calls it, so a bool reaches Trident as "
                    "CONSTANT_MATCH (native, covered here)")
    assert trident.stats(f)["fallback_reason"]
    _assert_refused_alone(guard_log, "BOOL_MATCH", fn)


def test_none_match_is_not_emitted_alone(h, guard_log):
    def fn(opt, x):
        return x * 2 if opt is None else x * opt

    f = trident.jit(fn)
    for opt in (None, 3.0, None):
        h.check(f, fn, opt, h.rand(3))
    if "NONE_MATCH" not in guard_log.emitted_kinds():
        assert "CONSTANT_MATCH" in guard_log.translated_kinds()
        _assert_compiled(f, 2)
        pytest.skip(f"torch {torch.__version__} never emits NONE_MATCH as an entry's kind: "
                    "only GuardBuilder.CONSTANT_MATCH calls it, so None reaches Trident as "
                    "CONSTANT_MATCH (native, covered here)")
    assert trident.stats(f)["fallback_reason"]
    _assert_refused_alone(guard_log, "NONE_MATCH", fn)


def test_dict_version_is_not_emitted_alone(h, record_warnings, guard_log):
    # The one dict Dynamo guards by version is pytree's SUPPORTED_NODES, read
    # by torch.func.vmap.
    def fn(x):
        return torch.func.vmap(lambda r: r.sin() * 2)(x)

    f = trident.jit(fn)
    with record_warnings():
        for _ in range(2):
            h.check(f, fn, h.rand(2, 3))
    if "DICT_VERSION" not in guard_log.emitted_kinds():
        nodes = [e for e in guard_log.entries("DICT_KEYS_MATCH") if "SUPPORTED_NODES" in e.name]
        assert nodes
        for e in nodes:
            with pytest.raises(UnsupportedError, match="non-constant keys"):
                _translate_alone(e, fn)
        pytest.skip(f"torch {torch.__version__} never emits DICT_VERSION as an entry's kind: "
                    "only GuardBuilder.DICT_KEYS_MATCH calls it (for pytree.SUPPORTED_NODES), "
                    "so it reaches Trident as DICT_KEYS_MATCH, refused for its type keys")
    assert trident.stats(f)["fallback_reason"]
    _assert_refused_alone(guard_log, "DICT_VERSION", fn)


# ------------------------------------------------------ autograd, functorch


def test_dual_level_is_refused(h, record_warnings, guard_log):
    import torch.autograd.forward_ad as fwAD

    def fn(x, t):
        with fwAD.dual_level():
            y = fwAD.make_dual(x, t).sin() * 2
            return fwAD.unpack_dual(y).tangent

    calls = [(h.rand(3), h.rand(3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, fn, "DUAL_LEVEL", calls,
                   reason="(GlobalStateSource) is not translated")


def test_functorch_stack_match_is_refused(h, record_warnings, guard_log):
    def fn(x):
        return torch.func.vmap(lambda r: r.sin() * 2 + r.sum())(x)

    calls = [(h.rand(4, 3),) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, fn, "FUNCTORCH_STACK_MATCH", calls,
                   reason="(GlobalStateSource) is not translated")


def _opt_with_grads(h):
    p = torch.nn.Parameter(h.rand(3))
    p.grad = h.rand(3)
    return torch.optim.SGD([p], lr=0.1)


def _first_grad(opt, x):
    # What an optimizer step starts with; Dynamo wraps the gradients it
    # collects with NOT_NONE_MATCH and the optimizer with WEAKREF_ALIVE.
    params, grads, momentum_buffers = [], [], []
    opt._init_group(opt.param_groups[0], params, grads, momentum_buffers)
    return x * grads[0]


def test_not_none_match_is_refused(h, record_warnings, guard_log):
    calls = [(_opt_with_grads(h), h.rand(3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, _first_grad, "NOT_NONE_MATCH", calls,
                   reason="(OptimizerSource) is not translated")


def test_weakref_alive_is_refused(h, record_warnings, guard_log):
    calls = [(_opt_with_grads(h), h.rand(3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, _first_grad, "WEAKREF_ALIVE", calls,
                   reason="(OptimizerSource) is not translated")


# ---------------------------------------------------------------- modules


def test_empty_nn_module_hooks_dict_is_native(h, guard_log):
    def fn(m, x):
        return m(x) * 2

    lin = torch.nn.Linear(3, 2)
    f = trident.jit(fn, strict=True)
    for _ in range(3):
        h.check(f, fn, lin, h.rand(4, 3))
    assert "EMPTY_NN_MODULE_HOOKS_DICT" in guard_log.translated_kinds()
    _assert_compiled(f, 1)
    # A hook added later changes the result: the length guard on its dict sees it (a miss,
    # then a version that runs the hook, or eager), never the stale version.
    handle = lin.register_forward_hook(lambda mod, inp, out: out + 100.0)
    try:
        for _ in range(2):
            x = h.rand(4, 3)
            torch.testing.assert_close(f(lin, x), fn(lin, x))
    finally:
        handle.remove()
    x = h.rand(4, 3)
    torch.testing.assert_close(f(lin, x), fn(lin, x))


def test_nn_module_is_refused(h, record_warnings, guard_log):
    def fn(m, x):
        return m(x) * 2

    # A module Dynamo does not treat as dynamic is specialized: NN_MODULE.
    act = torch.nn.ReLU()
    act.torchdynamo_force_dynamic = False
    calls = [(act, h.rand(4, 3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, fn, "NN_MODULE", calls,
                   reason="guard kind NN_MODULE")


# -------------------------------------------------------- tensor subclasses


class _Tagged(torch.Tensor):
    """A minimal traceable wrapper subclass: an inner tensor and an int tag
    (the tag is its flatten metadata)."""

    @staticmethod
    def __new__(cls, inner, tag):
        r = torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype,
                                                device=inner.device, strides=inner.stride())
        r.inner = inner
        r.tag = tag
        return r

    def __tensor_flatten__(self):
        return ["inner"], self.tag

    @staticmethod
    def __tensor_unflatten__(inner_tensors, tag, outer_size, outer_stride):
        return _Tagged(inner_tensors["inner"], tag)

    def __repr__(self):
        return f"_Tagged({self.inner!r}, tag={self.tag})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        tags = []

        def unwrap(t):
            if isinstance(t, _Tagged):
                tags.append(t.tag)
                return t.inner
            return t

        out = func(*pytree.tree_map(unwrap, args), **pytree.tree_map(unwrap, kwargs or {}))
        return pytree.tree_map_only(torch.Tensor, lambda t: _Tagged(t, tags[0]), out)


def _check_plain_result(f, fn, *args):
    """Compare a plain-tensor result; the subclass arguments are not copied
    (the functions below do not mutate them)."""
    expected = fn(*args)
    actual = f(*args)
    assert type(actual) is torch.Tensor and type(expected) is torch.Tensor
    torch.testing.assert_close(actual, expected)


def test_tensor_subclass_metadata_match_is_refused(h, record_warnings, guard_log):
    def fn(w, y):
        return y * w.inner + 1

    calls = [(_Tagged(h.rand(3), 1), h.rand(3)) for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, fn, "TENSOR_SUBCLASS_METADATA_MATCH", calls,
                   reason="is not translated", check=_check_plain_result)


# ------------------------------------------------ torch.distributed (gloo)


@pytest.fixture(scope="module")
def world_of_one():
    """A one-process gloo group and a one-device CPU mesh."""
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    from torch.distributed.device_mesh import init_device_mesh

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        if created:
            dist.destroy_process_group()


def test_dtensor_spec_match_is_refused(h, record_warnings, guard_log, world_of_one):
    from torch.distributed.tensor import Shard, distribute_tensor

    def fn(d, y):
        return y * d.to_local().sum()

    calls = [(distribute_tensor(h.rand(4, 3), world_of_one, [Shard(0)]), h.rand(4, 3))
             for _ in range(3)]
    _check_refused(h, record_warnings, guard_log, fn, "DTENSOR_SPEC_MATCH", calls,
                   reason="guard kind DTENSOR_SPEC_MATCH", check=_check_plain_result)


def test_fsdp_training_state_is_refused(h, record_warnings, guard_log, world_of_one):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState

    def fn(group, x):
        with group.use_training_state(TrainingState.FORWARD):
            return x * 2

    model = torch.nn.Linear(3, 3)
    fully_shard(model, mesh=world_of_one)
    group = model._get_fsdp_state()._fsdp_param_group
    calls = [(group, h.rand(3)) for _ in range(3)]
    # Entering use_training_state sets an attribute of the (pre-existing) param
    # group to an enum member, a store Trident cannot replay: the capture is
    # refused for that side effect before translation.
    _check_refused(h, record_warnings, guard_log, fn, "FSDP_TRAINING_STATE", calls,
                   reason="mutates a Python object", reaches_translate=False)
    assert group._training_state == TrainingState.IDLE



# ------------------------------------- dict entries by position, sets of ints


class _Vendor(__import__("enum").Enum):
    A = "a"
    B = "b"


class _Device:
    vendor = _Vendor.A


def _warps_a(n):
    return n * 2


def _warps_b(n):
    return n * 3


_DEVICE = _Device()
_HEURISTICS = {_Vendor.A: _warps_a, _Vendor.B: _warps_b}


def _by_vendor(x):
    # FlagGems' get_heuristics_for_num_warps: a dict keyed by enum members
    if _DEVICE.vendor not in _HEURISTICS:
        return x * _HEURISTICS.get(_Vendor.A)(2)
    return x * _HEURISTICS.get(_DEVICE.vendor)(2)


def test_dict_keys_and_values_by_position_are_native(h):
    f = trident.jit(_by_vendor, strict=True)
    for _ in range(2):
        h.check(f, _by_vendor, h.rand(3))
    st = _assert_compiled(f, 1)
    assert sum(st["hits"]) == 1
    text = trident.explain(f)
    assert "keys())[0]" in text and "values())[0]" in text
    try:
        _HEURISTICS[_Vendor.A] = _warps_b  # the entry's value changes: a miss
        h.check(f, _by_vendor, h.rand(3))
        _DEVICE.vendor = _Vendor.B  # another entry
        h.check(f, _by_vendor, h.rand(3))
        _HEURISTICS.pop(_Vendor.A)  # positions shift: key 0 is now B
        _HEURISTICS[_Vendor.A] = _warps_a
        h.check(f, _by_vendor, h.rand(3))
        _DEVICE.vendor = _Vendor.A
        h.check(f, _by_vendor, h.rand(3))
    finally:
        _HEURISTICS.clear()
        _HEURISTICS.update({_Vendor.A: _warps_a, _Vendor.B: _warps_b})
        _DEVICE.vendor = _Vendor.A
    h.check(f, _by_vendor, h.rand(3))
    assert trident.stats(f)["fallbacks"] == 0


class _Pointwise:
    def __init__(self):
        self.operand_indices = frozenset({1, 2})


_PW = _Pointwise()


def _uses_index_set(x):
    # FlagGems' PointwiseDynamicFunction keeps a frozenset of operand indices
    for i in sorted(_PW.operand_indices):
        x = x + len(str(i))
    return x


def test_set_of_ints_equality_is_exact(h, record_warnings):
    f = trident.jit(_uses_index_set, strict=True)
    h.check(f, _uses_index_set, h.rand(3))
    h.check(f, _uses_index_set, h.rand(3))
    st = _assert_compiled(f, 1)
    assert sum(st["hits"]) == 1
    try:
        _PW.operand_indices = frozenset({1, 3})
        h.check(f, _uses_index_set, h.rand(3))
        _PW.operand_indices = {1, 2}  # a set, not a frozenset
        h.check(f, _uses_index_set, h.rand(3))
        _PW.operand_indices = frozenset({1, 2})
        h.check(f, _uses_index_set, h.rand(3))
        _assert_compiled(f, 3)
        hits = sum(trident.stats(f)["hits"])
        assert hits == 2
        # {True, 2} == {1, 2} in Python, but str(True) != str(1): the
        # version must not serve it (a set of bools or floats is refused
        # at capture, so the function then runs eagerly)
        for bad in (frozenset({True, 2}), frozenset({1.0, 2})):
            _PW.operand_indices = frozenset({1, 2})
            g = trident.jit(_uses_index_set)
            h.check(g, _uses_index_set, h.rand(3))
            h.check(g, _uses_index_set, h.rand(3))
            assert sum(trident.stats(g)["hits"]) == 1
            _PW.operand_indices = bad
            with record_warnings():
                h.check(g, _uses_index_set, h.rand(3))
            st = trident.stats(g)
            assert sum(st["hits"]) == 1 and st["fallbacks"] == 1
            assert "frozenset" in st["fallback_reason"]
    finally:
        _PW.operand_indices = frozenset({1, 2})


# ------------------------------------------------------------ GenericAttrSource


class _Config:
    """Like transformers' PretrainedConfig: `__getattribute__` maps an alias through the class's
    `attribute_map` with `super().__getattribute__`.  Dynamo 2.11 guards what that reads
    through `object.__getattribute__(config, '__dict__')` (GenericAttrSource); 2.13 through
    plain attributes."""

    attribute_map = {"dim": "hidden_size"}

    def __init__(self, hidden_size, eps):
        self.hidden_size = hidden_size
        self.eps = eps

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


_CFG = _Config(4, 0.5)


def _uses_config(x):
    return x * _CFG.eps + _CFG.dim


def test_generic_attribute_source_is_native(h, guard_log):
    from torch._dynamo.source import GenericAttrSource, LocalSource

    from trident.guards.translate import SourceConverter
    from trident.ir import nodes as ir

    src = SourceConverter(_uses_config, ConstPool())(GenericAttrSource(LocalSource("x"),
                                                                      "__dict__"))
    assert src == ir.GenericAttr(ir.Local(0, "x"), "__dict__")
    assert str(src) == "object.__getattribute__(L['x'], '__dict__')"

    f = trident.jit(_uses_config, strict=True)
    for _ in range(2):
        h.check(f, _uses_config, h.rand(3))
    _assert_compiled(f, 1)
    generic = [e for es in guard_log.emitted for e in es
               if type(e.orig_guard.originating_source).__name__ == "GenericAttrSource"
               or "object.__getattribute__" in e.name]
    if generic:  # torch 2.11: translated natively, and read as `object.__getattribute__` does
        assert "object.__getattribute__" in trident.explain(f)
    try:
        _CFG.eps = 2.0  # the instance dict's value: a miss
        h.check(f, _uses_config, h.rand(3))
        _Config.attribute_map = {"dim": "eps"}  # the alias now names another entry: a miss
        h.check(f, _uses_config, h.rand(3))
        _CFG.__dict__["eps"] = 3.0  # written past __setattr__: still seen
        h.check(f, _uses_config, h.rand(3))
    finally:
        _Config.attribute_map = {"dim": "hidden_size"}
        _CFG.eps = 0.5
    h.check(f, _uses_config, h.rand(3))
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and st["versions"] >= 3, st


def test_contains_guard_reads_its_invert_argument():
    """torch <= 2.11 spells "key not in d" as DICT_CONTAINS(invert=True): the polarity comes
    from that argument, and a builder whose `invert` cannot be read is refused."""
    import functools

    from torch._dynamo.source import LocalSource

    from trident.ir import nodes as ir

    def builder(self, guard, key, invert):  # the 2.11 signature
        raise AssertionError("never called")

    def entry(kind, create_fn):
        g = types.SimpleNamespace(originating_source=LocalSource("x"), create_fn=create_fn,
                                  name="L['x']")
        return types.SimpleNamespace(guard_type=kind, orig_guard=g, value={}, name="L['x']")

    for kind in ("DICT_CONTAINS", "SET_CONTAINS"):
        for invert in (False, True):
            (op,) = _translate_alone(entry(kind, functools.partial(builder, key="k",
                                                                   invert=invert)),
                                     _uses_config)
            assert isinstance(op, ir.Contains) and op.present is (not invert), op
        with pytest.raises(UnsupportedError, match="invert"):
            _translate_alone(entry(kind, functools.partial(builder, key="k")), _uses_config)
