"""TRIDENT_TIER_UP: a miss links its new version's unit compiled at -O0 (unless the unit's
object at its full level is cached), serves it at once, and builds the SCM again at full level
in a thread, which replaces it if it is still the installed one.  Results equal eager's
throughout; hit counts survive the swap; a failing or superseded rebuild leaves the -O0 build
serving."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

import trident
from trident import config
from trident.api import _scm_of
from trident.errors import BuildError
from trident.native import build


@pytest.fixture
def cache(build_cache, monkeypatch):
    """An empty build cache (every compile is visible), tier-up on."""
    monkeypatch.setenv("TRIDENT_TIER_UP", "1")
    return build_cache


@pytest.fixture
def gate(monkeypatch):
    """Full-level builds (`build_scm(quick=False)`) wait until `gate.set()`; `gate.held`
    lists the sources they were given."""
    event = threading.Event()
    event.held = []
    real = build.build_scm

    def held(src, quick=False, **kw):
        if not quick:
            event.held.append(src)
            assert event.wait(60), "the test never opened the gate"
        return real(src, quick, **kw)

    monkeypatch.setattr(build, "build_scm", held)
    yield event
    event.set()


def _levels(f) -> list[str]:
    """The optimisation level of each version object the installed SCM was linked from."""
    link = (_scm_of(f).so_path.parent / "cmd.txt").read_text()
    objs = sorted(re.findall(r"(\S+/version_(\d+)\.o)", link), key=lambda m: int(m[1]))
    if not objs:  # linked through combined blocks: not at this test's sizes
        raise AssertionError(link)
    out = []
    for path, _ in objs:
        cmd = (Path(path).parent / "cmd.txt").read_text()
        out.append(re.search(r" (-O\d) ", cmd).group(1))
    return out


def test_a_miss_serves_its_unit_at_O0_then_tiers_up(h, cache, gate):
    gate.set()  # the first rebuild runs at once
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    h.check(f, fn, h.rand(3), h.rand(3))
    assert trident.wait(f, timeout=120)
    st = trident.stats(f)
    assert st["tier_ups"] == 1 and not st["tiering_up"]
    assert _levels(f) == [config.version_opt()]
    # The next miss: its own unit at -O0 beside version 0's cached full-level object.
    gate.clear()
    h.check(f, fn, h.rand(5), h.rand(5))
    assert _levels(f) == [config.version_opt(), "-O0"]
    assert trident.stats(f)["tiering_up"]
    assert "one in flight now" in trident.explain(f)
    for _ in range(3):  # served natively meanwhile
        h.check(f, fn, h.rand(3), h.rand(3))
        h.check(f, fn, h.rand(5), h.rand(5))
    gate.set()
    assert trident.wait(f, timeout=120)
    st = trident.stats(f)
    assert st["tier_ups"] == 2 and not st["tiering_up"]
    assert _levels(f) == [config.version_opt()] * 2
    assert "2 build(s) at full optimisation" in trident.explain(f)
    for size in (3, 5):
        h.check(f, fn, h.rand(size), h.rand(size))
    st = trident.stats(f)
    assert st["hits"] == [4, 4]  # counted across the swap
    assert st["misses"] == 2 and st["captures"] == 2


def test_units_cached_at_full_level_are_linked_at_once(h, cache):
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    for size in (2, 4):
        h.check(f, fn, h.rand(size), h.rand(size))
    assert trident.wait(f, timeout=120)
    g = trident.jit(fn, dynamic=False)  # the same versions: their objects are cached
    for size in (2, 4):
        h.check(g, fn, h.rand(size), h.rand(size))
    st = trident.stats(g)
    assert st["tier_ups"] == 0 and not st["tiering_up"]
    assert _levels(g) == [config.version_opt()] * 2


def test_off_compiles_at_full_level_at_the_miss(h, cache, monkeypatch):
    monkeypatch.setenv("TRIDENT_TIER_UP", "0")
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    h.check(f, fn, h.rand(3), h.rand(3))
    st = trident.stats(f)
    assert st["tier_ups"] == 0 and not st["tiering_up"]
    assert _levels(f) == [config.version_opt()]


def test_a_superseded_tier_up_is_dropped(h, cache, gate):
    """A miss installs a new SCM while the previous one's rebuild runs: that rebuild is not
    installed (it would drop the new version); the new SCM tiers up on its own."""
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    h.check(f, fn, h.rand(3), h.rand(3))
    h.check(f, fn, h.rand(5), h.rand(5))  # the rebuild holds no lock while it compiles
    assert trident.stats(f)["versions"] == 2
    gate.set()
    assert trident.wait(f, timeout=120)
    assert len(gate.held) == 2  # the first SCM's rebuild ran, and the second's
    st = trident.stats(f)
    assert st["tier_ups"] == 1
    assert _levels(f) == [config.version_opt()] * 2
    for size in (3, 5):
        h.check(f, fn, h.rand(size), h.rand(size))
    assert trident.stats(f)["hits"] == [1, 1]


def test_a_failed_tier_up_leaves_the_O0_build_serving(h, cache, caplog, monkeypatch):
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    real = build.build_scm

    def failing(src, quick=False, **kw):
        if not quick:
            raise BuildError("compiling version_0.c of an SCM", ["cc"], "no space left")
        return real(src, quick, **kw)

    monkeypatch.setattr(build, "build_scm", failing)
    h.check(f, fn, h.rand(3), h.rand(3))
    assert trident.wait(f, timeout=120)
    monkeypatch.setattr(build, "build_scm", real)
    st = trident.stats(f)
    assert st["tier_ups"] == 0 and not st["tiering_up"]
    assert _levels(f) == ["-O0"]
    assert "keeps serving" in caplog.text
    h.check(f, fn, h.rand(3), h.rand(3))
    assert trident.stats(f)["hits"] == [1]


def test_threads_missing_while_rebuilds_run(h, cache):
    """Four threads call with new and old sizes while full-level rebuilds start, get
    superseded and land: every result equals eager's, and once they are done the SCM serves
    every version from full-level objects."""
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    def worker(k):
        for r in range(2):
            for size in range(2, 8):
                h.check(f, fn, h.rand(size + (k + r) % 2), h.rand(size + (k + r) % 2))

    h.run_threads(worker, 4)
    assert trident.wait(f, timeout=120)
    st = trident.stats(f)
    assert st["versions"] == 7 and st["fallbacks"] == 0 and not st["tiering_up"]
    assert st["tier_ups"] >= 1
    assert _levels(f) == [config.version_opt()] * 7
    for size in range(2, 9):
        h.check(f, fn, h.rand(size), h.rand(size))
