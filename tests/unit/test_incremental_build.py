"""Incremental SCM builds: each version is its own C unit whose object is
cached by content hash, so a rebuild after a specialization miss compiles
only the new version's unit and the small dispatcher, relinks, and keeps
every version's results equal to eager."""

from __future__ import annotations

import pytest

import trident
from trident.api import _scm_of
from trident.native import build


@pytest.fixture
def cache(build_cache):
    return build_cache


def _objects(cache) -> dict:
    return {p.name: p for p in cache.glob("obj/*/*.o")}


def test_rebuild_compiles_only_the_new_version(h, cache):
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    sizes = (3, 5, 7, 9)
    for n, size in enumerate(sizes, start=1):
        before = trident.stats(f)["compiled_units"]
        h.check(f, fn, h.rand(size), h.rand(size))
        st = trident.stats(f)
        assert st["versions"] == n
        new = st["compiled_units"][len(before):]
        # The first build also compiles the fixed entry points, once per cache.
        assert new == [f"version_{n - 1}.c", *(["scm_main.c"] if n == 1 else []), "scm.c"]
        objs = _objects(cache)
        # and the current SCM's dispatcher object (a superseded one is removed with its SCM)
        assert sorted(objs) == sorted([f"version_{i}.o" for i in range(n)]
                                      + ["scm_main.o", "scm.o"])
        assert len(list(cache.glob("obj/*/scm.o"))) == 1
        if n == 1:
            first, mtime = objs["version_0.o"], objs["version_0.o"].stat().st_mtime_ns
        # the superseded SCM's folder is removed once the new one is installed
        assert len(list(cache.glob("scm/*/scm.so"))) == 1

    # The last SCM was linked from the object the first build compiled.
    assert first.stat().st_mtime_ns == mtime
    link = (_scm_of(f).so_path.parent / "cmd.txt").read_text()
    assert str(first) in link
    # Every version of the relinked SCM serves its inputs, without compiling.
    compiled = trident.stats(f)["compiled_units"]
    for size in sizes:
        h.check(f, fn, h.rand(size), h.rand(size))
    st = trident.stats(f)
    assert st["hits"] == [1, 1, 1, 1]
    assert st["misses"] == 4
    assert st["compiled_units"] == compiled


def test_same_versions_build_nothing(h, cache):
    """Another function capturing the same versions finds every object in the
    cache: its misses compile no version, only relink the dispatchers whose
    SCMs `f` replaced (and so removed); its last SCM is `f`'s own."""
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    g = trident.jit(fn, dynamic=False)
    for size in (2, 4, 6):
        h.check(f, fn, h.rand(size), h.rand(size))
    for size in (2, 4, 6):
        h.check(g, fn, h.rand(size), h.rand(size))
        h.check(g, fn, h.rand(size), h.rand(size))
    assert trident.stats(g)["compiled_units"] == ["scm.c", "scm.c"]
    assert _scm_of(g).so_path == _scm_of(f).so_path
    assert trident.stats(g)["hits"] == [1, 1, 1]
    assert trident.stats(f)["hits"] == [0, 0, 0]


def test_a_dispatcher_object_removed_before_the_link_is_built_again(h, cache, monkeypatch):
    """Another process that supersedes the same SCM removes its dispatcher's object
    (`discard_scm`); where that happens between this build's verification of the object and
    its link, the link fails and the build compiles the object once more."""
    removed = []
    real = build._fast_linker

    def remove_first(*a):  # runs just before the link's compiler
        if not removed:
            [obj] = cache.glob("obj/*/scm.o")
            build._discard(obj.parent)
            removed.append(obj)
        return real(*a)

    monkeypatch.setattr(build, "_fast_linker", remove_first)
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    h.check(f, fn, h.rand(3), h.rand(3))
    assert removed and removed[0].exists()  # compiled again, at the same content hash
    assert trident.stats(f)["fallbacks"] == 0 and trident.stats(f)["versions"] == 1
    h.check(f, fn, h.rand(3), h.rand(3))
    assert trident.stats(f)["hits"] == [1]


def test_a_function_never_removes_what_another_functions_scm_is_built_from(h, cache):
    """Two functions with the same versions (the same C, unit for unit) each link their own
    dispatcher and SCM: when one grows and supersedes its SCM, the other's SCM folder and
    dispatcher object stay (a new process of the other links nothing again)."""
    def one(x, w):
        return (x * w + 1.0).relu()

    def two(x, w):
        return (x * w + 1.0).relu()

    f, g = trident.jit(one, dynamic=False), trident.jit(two, dynamic=False)
    h.check(f, one, h.rand(3), h.rand(3))
    h.check(g, two, h.rand(3), h.rand(3))
    sf, sg = _scm_of(f), _scm_of(g)
    assert sf.versions and sg.versions
    assert sf._units[0].text == sg._units[0].text  # the same version unit, one object
    assert sf.so_path != sg.so_path and sf._dispatcher_obj != sg._dispatcher_obj
    kept = (sg.so_path, sg._dispatcher_obj)
    h.check(f, one, h.rand(5), h.rand(5))  # f supersedes its first SCM
    assert trident.stats(f)["versions"] == 2
    assert all(p.exists() for p in kept)
    compiled = trident.stats(g)["compiled_units"]
    h.check(g, two, h.rand(3), h.rand(3))
    assert trident.stats(g)["hits"] == [1] and trident.stats(g)["compiled_units"] == compiled
