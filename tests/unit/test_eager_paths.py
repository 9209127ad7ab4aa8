"""A refused capture costs its own path, not the whole function (issue 32, items 1 and 4).

A path Trident refuses (a graph break, an unsupported side effect, an in-function mode change, a
result it cannot rebuild) becomes an eager version: the path's own guards, and a program that
calls the function in Python; the other paths stay native.  A path whose guards do not
translate becomes a negative entry keyed on the call.  Every call is compared with eager on
fresh random inputs."""

from __future__ import annotations

import warnings

import pytest
import torch

import trident
from trident import scm as scm_mod
from trident.errors import UnsupportedError


def _warnings(rec) -> list[str]:
    return [str(w.message) for w in rec if issubclass(w.category, RuntimeWarning)
            and "trident" in str(w.message)]


def _flag_break(x, flag: bool):
    y = x * 2
    if flag:
        print("trident-test-eager-path", end="")
        return y + 1
    return y - 1


def _tolist_branch(x, mode: int):
    if mode == 0:
        return x.sin() + 1
    return x * len(x.tolist())


def _data_dependent(x, checked: bool):
    if checked and x.sum() > 0:
        return x * 2
    return x - 1


def _helper(x, flag):
    if flag:
        print("trident-test-inner", end="")
    return x + 1


def _inlined_break(x, flag: bool):
    return _helper(x, flag) * 2


def _native_versions(f) -> list:
    return [v for v in trident.versions(f) if not v.eager]


def _eager_versions(f) -> list:
    return [v for v in trident.versions(f) if v.eager]


@pytest.mark.parametrize("fn, native, refused", [
    (_flag_break, (False,), (True,)),
    (_tolist_branch, (0,), (1,)),
    (_data_dependent, (False,), (True,)),
    (_inlined_break, (False,), (True,)),
])
def test_refused_path_runs_eagerly_and_the_other_stays_native(h, record_warnings, capsys, fn,
                                                              native, refused):
    f = trident.jit(fn)
    with record_warnings() as rec:
        for i in range(8):  # alternate the paths, fresh inputs each time
            extra = native if i % 2 == 0 else refused
            h.check(f, fn, h.rand(5), *extra, exact=True)
    msgs = _warnings(rec)
    assert len(msgs) == 1 and "this path runs eagerly" in msgs[0], msgs
    st = trident.stats(f)
    assert not st["runs_eagerly"] and st["captures"] == 1, trident.explain(f)
    nat, eag = _native_versions(f), _eager_versions(f)
    assert len(nat) == 1 and len(eag) == 1, trident.explain(f)
    hits = dict(zip([v.index for v in trident.versions(f)], st["hits"]))
    assert hits[nat[0].index] == 3 and hits[eag[0].index] == 3, trident.explain(f)
    assert st["eager_paths"] == [{"version": eag[0].index, "reason": eag[0].eager, "hits": 3}]
    # Repeating calls adds no capture: both paths are served by the SCM.
    misses = st["misses"]
    for extra in (native, refused, refused, native):
        h.check(f, fn, h.rand(5), *extra, exact=True)
    st = trident.stats(f)
    assert st["misses"] == misses and st["captures"] == 1
    assert "runs eagerly" in trident.explain(f)
    capsys.readouterr()


def test_print_of_the_eager_path_happens_once_per_call(h, record_warnings, capsys):
    f = trident.jit(_flag_break)
    with record_warnings():
        for flag in (True, False, True, True):
            h.check(f, _flag_break, h.rand(3), flag)
    out = capsys.readouterr().out
    assert out.count("trident-test-eager-path") == 6  # 3 calls each, eager's and trident's


def test_strict_still_raises_on_the_refused_path(h):
    f = trident.jit(_flag_break, strict=True)
    h.check(f, _flag_break, h.rand(3), False)
    with pytest.raises((UnsupportedError, trident.CaptureError)):
        f(h.rand(3), True)
    h.check(f, _flag_break, h.rand(3), False)
    assert trident.stats(f)["eager_paths"] == []


def test_max_versions_counts_eager_versions(h, record_warnings):
    f = trident.jit(_flag_break, max_versions=2, dynamic=False)
    with record_warnings() as rec:
        h.check(f, _flag_break, h.rand(3), True)
        h.check(f, _flag_break, h.rand(3), False)
        assert trident.stats(f)["versions"] == 2
        # past the limit: calls that match no version run eagerly, uncaptured; the two
        # versions (the native one and the eager one) keep serving theirs
        for n in (4, 5, 3):
            h.check(f, _flag_break, h.rand(n), False)
            h.check(f, _flag_break, h.rand(n), True)
    st = trident.stats(f)
    assert not st["runs_eagerly"] and "max_versions=2" in st["recompile_limit"]
    assert st["versions"] == 2 and st["hits"] == [1, 1] and st["eager_past_limit"] == 4
    msgs = _warnings(rec)
    assert len(msgs) == 2 and "from now on" in msgs[1], msgs


def test_automatic_dynamic_applies_to_eager_versions(h, record_warnings):
    """A refused path met at a second size is captured with dynamic sizes, as any path: its
    eager version then serves every size (not one version per size)."""
    f = trident.jit(h.fresh(_data_dependent))
    with record_warnings():
        for n in (4, 6, 5, 7, 9, 3):
            h.check(f, _data_dependent, h.rand(n), True)
    assert len(trident.versions(f)) == 2 and trident.stats(f)["hits"][1] == 4


SEEN: list = []


def _logs(x, log: bool):
    if log:
        SEEN.append(x.shape[0])  # a list changed in place: not replayed
    return x + 1


def test_side_effect_path_runs_eagerly_other_path_native(h, record_warnings):
    """The refused path's own run changes what its guards read (the list's length): its
    second call is refused again and keyed on the call (a negative entry); the native path
    keeps hitting."""
    f = trident.jit(_logs)
    SEEN.clear()
    with record_warnings() as rec:
        for log in (False, True, False, True, True, False):
            h.check(f, _logs, h.rand(3), log)
    assert SEEN == [3] * 6  # eager's and trident's appends, once per call
    assert len(_warnings(rec)) == 1
    st = trident.stats(f)
    assert st["captures"] == 1 and st["hits"][0] == 2, trident.explain(f)
    neg = [e for e in st["eager_paths"] if e["version"] is None]
    assert len(neg) == 1 and neg[0]["hits"] == 1 and "mutates" in neg[0]["reason"]


def _all_kinds(x, /, scale=2, *rest, flag=False, **kw):
    if flag:
        print("trident-test-kinds", end="")
    out = x * scale + sum(rest) + sum(kw.values())
    return out, len(rest), sorted(kw)


def test_eager_version_passes_every_kind_of_parameter(h, record_warnings, capsys):
    f = trident.jit(_all_kinds)
    with record_warnings():
        for _ in range(2):
            h.check(f, _all_kinds, h.rand(3), flag=True)
            h.check(f, _all_kinds, h.rand(3), 3, 1, 2, flag=True, a=4, b=5)
            h.check(f, _all_kinds, h.rand(3), 3, 1, 2, flag=False, a=4)
    assert any(v.eager for v in trident.versions(f))
    assert sum(e["hits"] for e in trident.stats(f)["eager_paths"]) >= 2
    capsys.readouterr()


def _recurse(x, n: int):
    if n <= 0:
        return x + 1
    print("", end="")  # a graph break: this path runs eagerly, and calls back into Trident
    return RECURSE(x, n - 1) * 2


RECURSE = None


def test_eager_version_may_call_the_function_again(h, record_warnings):
    global RECURSE
    RECURSE = trident.jit(_recurse)
    try:
        with record_warnings():
            for n in (2, 2, 0, 3, 1):
                x = h.rand(4)
                h.assert_tree_equal(RECURSE(x, n), _recurse_eager(x, n))
        assert sum(e["hits"] for e in trident.stats(RECURSE)["eager_paths"]) > 0
    finally:
        RECURSE = None


def _recurse_eager(x, n):
    return x + 1 if n <= 0 else _recurse_eager(x, n - 1) * 2


# ------------------------------------------------ paths whose guards do not translate


def _modes(x, mode: int):
    return x * mode + 1


def _refusing_translate(monkeypatch, refused_value):
    """Make the guard translation refuse every capture whose path is `mode == refused_value`
    (as for a guard kind Trident does not translate)."""
    real = scm_mod.translate

    def translate(entries, cap, fn, consts, rt):
        for e in entries:
            if e.orig_guard.name == "L['mode']" and getattr(e, "value", None) == refused_value:
                raise UnsupportedError("guard kind TEST_KIND on L['mode'] is not translated")
        return real(entries, cap, fn, consts, rt)

    monkeypatch.setattr(scm_mod, "translate", translate)


def test_untranslatable_guards_make_a_negative_entry_keyed_on_the_call(h, monkeypatch,
                                                                        record_warnings):
    _refusing_translate(monkeypatch, 3)
    f = trident.jit(_modes, dynamic=False)
    with record_warnings() as rec:
        h.check(f, _modes, h.rand(4), 3)  # refused: a negative entry for (float32 [4], 3)
        st = trident.stats(f)
        assert st["versions"] == 0 and len(st["eager_paths"]) == 1
        h.check(f, _modes, h.rand(4), 2)  # another key: captured, native
        for _ in range(3):
            h.check(f, _modes, h.rand(4), 3)  # the negative entry: eager, no capture
            h.check(f, _modes, h.rand(4), 2)  # the native version
    st = trident.stats(f)
    # two captures (the refused one is made, then its guards refused), two misses
    assert st["captures"] == 2 and st["misses"] == 2 and st["hits"] == [3], trident.explain(f)
    assert st["eager_paths"][0]["hits"] == 3
    assert "TEST_KIND" in st["eager_paths"][0]["reason"]
    assert len(_warnings(rec)) == 1
    # A call whose key differs is never served by the entry: another size, another dtype,
    # another global state are captured (and refused again: new entries).
    with record_warnings():
        h.check(f, _modes, h.rand(5), 3)
        h.check(f, _modes, h.rand(4, dtype=torch.float64), 3)
        with torch.no_grad():
            h.check(f, _modes, h.rand(4), 3)
    st = trident.stats(f)
    assert st["misses"] == 5 and len(st["eager_paths"]) == 4
    assert "calls with x=Tensor(float32, cpu, [4]), mode=3 run eagerly" in trident.explain(f)


def test_negative_entries_count_against_max_versions(h, monkeypatch, record_warnings):
    _refusing_translate(monkeypatch, 3)
    f = trident.jit(_modes, dynamic=False, max_versions=2)
    with record_warnings():
        for n in (2, 3, 4):
            h.check(f, _modes, h.rand(n), 3)
    st = trident.stats(f)
    assert "max_versions=2" in st["fallback_reason"] and st["eager_past_limit"] == 1


def test_a_tensor_marked_dynamic_by_hand_is_keyed_on_the_call(h, record_warnings):
    """A real untranslated guard: a tensor marked dynamic by hand."""
    f = trident.jit(_modes)
    x = h.rand(4)
    torch._dynamo.mark_dynamic(x, 0)
    with record_warnings() as rec:
        assert torch.equal(f(x, 2), _modes(x.clone(), 2))  # h.check's copy is not marked
        h.check(f, _modes, h.rand(6), 2)
        h.check(f, _modes, h.rand(6), 2)
    st = trident.stats(f)
    assert len(_warnings(rec)) == 1 and "marked dynamic" in st["fallback_reason"]
    assert st["versions"] == 1 and st["hits"] == [1] and not st["runs_eagerly"]


# ------------------------------------------------ item 4: inputs returned with their views


def _fill(x):
    return x.fill_(3)


def _with_view(x):
    return [x, x.t()]


def _view_first(x):
    return x.t(), x


def _fill_and_view(x):
    y = x.fill_(2)
    return y, y.t(), x[1:]


def _layouts(h, n, m):
    base = h.rand(m + 2, n)
    return [h.rand(n, m), h.rand(m, n).t(), base[1:m + 1].t(), h.rand(n, 2 * m)[:, ::2]]


def _check_aliases(out, x, ref, xr):
    """`out` relates to `x` as eager's `ref` relates to `xr`: the same object where eager's is
    the input, the same storage, sizes, strides and offset, `_base` the input where eager's is."""
    outs, refs = (out, ref) if isinstance(ref, (list, tuple)) else ((out,), (ref,))
    assert type(out) is type(ref) and len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert (o is x) == (r is xr)
        assert (o.data_ptr() == x.data_ptr()) == (r.data_ptr() == xr.data_ptr())
        assert o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert (o.shape, o.stride(), o.storage_offset()) == \
            (r.shape, r.stride(), r.storage_offset())
        assert (o._base is x) == (r._base is xr)
        assert (o._base is x._base) == (r._base is xr._base)
        assert torch.equal(o, r)


@pytest.mark.parametrize("fn", [_fill, _with_view, _view_first, _fill_and_view])
@pytest.mark.parametrize("dynamic", [None, True])
def test_inputs_returned_with_their_views_are_native(h, fn, dynamic):
    f = trident.jit(h.fresh(fn), dynamic=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback of any kind
        for n, m in ((3, 4), (3, 4), (5, 2), (6, 3), (3, 4)):
            for x in _layouts(h, n, m):
                xr = h.clone_tensor(x)
                if x._base is not None:  # keep eager's input a view too
                    xr = h.clone_tensor(x._base).as_strided(x.shape, x.stride(),
                                                            x.storage_offset())
                _check_aliases(f(x), x, fn(xr), xr)
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and not st["eager_paths"]
    assert sum(st["hits"]) > st["captures"], trident.explain(f)


def test_an_internal_error_lowering_one_path_costs_that_path(h, monkeypatch, record_warnings):
    """A Trident bug met while lowering one path (here a KeyError, as issue 32 saw in the
    result's description) makes that path run eagerly; the others stay native."""
    real = scm_mod.lower

    def lower(cap, conv, consts, rt, guards):
        if any(isinstance(g, scm_mod.ir.EqualsMatch) and "L['mode'] == 3" in str(g)
               for g in guards):
            raise KeyError("simulated")
        return real(cap, conv, consts, rt, guards)

    monkeypatch.setattr(scm_mod, "lower", lower)
    f = trident.jit(_modes, dynamic=False)
    with record_warnings() as rec:
        for mode in (3, 2, 3, 2, 3):
            h.check(f, _modes, h.rand(4), mode)
    st = trident.stats(f)
    assert not st["runs_eagerly"] and "internal error: KeyError" in st["fallback_reason"]
    assert [bool(v.eager) for v in trident.versions(f)] == [True, False]
    assert st["hits"] == [2, 1] and len(_warnings(rec)) == 1
    g = trident.jit(_modes, dynamic=False, strict=True)
    with pytest.raises(KeyError):
        g(h.rand(4), 3)


def test_a_result_that_cannot_be_described_costs_its_path(h, monkeypatch, record_warnings):
    from trident.capture import dynamo

    real = dynamo._describe_return

    def describe(tx, gm, stores=(), fn=None):
        if "_modes" in getattr(fn, "__qualname__", "") and tx.f_locals["mode"] == 3:
            raise KeyError("simulated")
        return real(tx, gm, stores, fn)

    monkeypatch.setattr(dynamo, "_describe_return", describe)
    f = trident.jit(_modes, dynamic=False)
    with record_warnings() as rec:
        for mode in (2, 3, 2, 3):
            h.check(f, _modes, h.rand(4), mode)
    st = trident.stats(f)
    assert "cannot be described (KeyError" in st["fallback_reason"]
    assert [bool(v.eager) for v in trident.versions(f)] == [False, True]
    assert st["hits"] == [1, 1] and len(_warnings(rec)) == 1


# ------------------------------------------------ a capture stopped by lazily built state


_LAZY: dict = {}


def _lazy(x):
    k = _LAZY.get("scale")
    if k is None:  # the first call in a process builds (and caches) what later calls use
        print("trident-test-lazy", end="")  # Dynamo stops here
        k = _LAZY["scale"] = 2.0
    return x * k + 1


def _always_breaks(x):
    print("trident-test-always", end="")
    return x - 1


def _refuse_failed_paths(monkeypatch):
    """Translation refuses the guards of every capture Dynamo stopped in (a negative entry)."""
    from trident.capture.types import PathGuards
    real = scm_mod.translate

    def translate(entries, cap, fn, consts, rt):
        if isinstance(cap, PathGuards):
            raise UnsupportedError("guard source TEST_SOURCE is not translated")
        return real(entries, cap, fn, consts, rt)

    monkeypatch.setattr(scm_mod, "translate", translate)


def test_a_capture_stopped_by_lazy_state_is_tried_once_more(h, monkeypatch, record_warnings,
                                                            capsys):
    _refuse_failed_paths(monkeypatch)
    _LAZY.clear()
    f = trident.jit(_lazy, dynamic=False)
    with record_warnings() as rec:
        for i in range(4):
            x = h.rand(4, 3)
            torch.testing.assert_close(f(x), x * 2.0 + 1)
            if i == 0:  # the call ran eagerly; no warning yet, a retry is due
                st = trident.stats(f)
                assert st["versions"] == 0 and st["captures"] == 0
    st = trident.stats(f)
    assert st["captures"] == 1 and st["misses"] == 2 and st["hits"] == [2], trident.explain(f)
    assert st["eager_paths"] == [] and not _warnings(rec)
    assert capsys.readouterr().out.count("trident-test-lazy") == 1


def test_a_capture_that_fails_again_warns_and_runs_eagerly(h, monkeypatch, record_warnings):
    _refuse_failed_paths(monkeypatch)
    f = trident.jit(_always_breaks, dynamic=False)
    with record_warnings() as rec:
        for _ in range(4):
            h.check(f, _always_breaks, h.rand(4))
    st = trident.stats(f)
    assert st["captures"] == 0 and st["misses"] == 2, trident.explain(f)
    assert len(st["eager_paths"]) == 1 and st["eager_paths"][0]["hits"] == 2
    assert len(_warnings(rec)) == 1
