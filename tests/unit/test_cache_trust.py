"""The build cache is trusted only as far as docs/cache.md says.

A cache root (or kind folder) that someone else owns or can write to is refused for a private
temporary cache; every folder Trident makes is 0700; a product is loaded only after it matches
the digest its build recorded, so a planted, truncated, empty or missing product (or a missing
or garbled manifest) is built again, with a warning, and never crashes the process or makes the
function run eagerly; stale temporary folders are removed; TRIDENT_CACHE_MAX_MB evicts the
least recently used builds but never one in use; a rebuild removes the SCM it supersedes.

The tampering tests load the cache in a fresh process, as a later run of the program would
(and so that a SIGBUS shows as a failure, not as a dead test session).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import trident
from trident.api import _scm_of
from trident.native import build


def _fn(x, y):
    return x * 2 + y


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache root of this test's own, not yet created (the runtime is already loaded); no
    full-level rebuilds in the background (their builds would change what the tests count)."""
    build.runtime_module()
    root = tmp_path / "cache"
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(root))
    monkeypatch.setenv("TRIDENT_TIER_UP", "0")
    return root


def _builds(root: Path, kind: str) -> list[Path]:
    d = root / kind
    return sorted(p for p in d.iterdir() if not p.name.startswith(".")) if d.exists() else []


def _dot_folders(root: Path) -> list[Path]:
    return sorted(p for k in build.KINDS if (root / k).exists()
                  for p in (root / k).iterdir() if p.name.startswith("."))


def _total(root: Path) -> int:
    return sum(f.stat().st_size for k in build.KINDS for d in _builds(root, k)
               for f in d.iterdir())


def _check_calls(f, fn, *sizes):
    for n in sizes:
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(f(x, y), fn(x, y))


# -- (a) an untrusted root ----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["mode 0777", "other owner", "kind folder 0777"])
def test_untrusted_root_is_refused_for_a_private_cache(case, tmp_path, monkeypatch, h):
    build.runtime_module()
    root = tmp_path / "shared"
    root.mkdir(mode=0o700)
    if case == "mode 0777":
        os.chmod(root, 0o777)
    elif case == "kind folder 0777":
        (root / "scm").mkdir()
        os.chmod(root / "scm", 0o777)
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(root))
    with monkeypatch.context() as m:
        if case == "other owner":  # the root looks owned by someone else
            uid = os.getuid()
            m.setattr(os, "getuid", lambda: uid + 1)
        with pytest.warns(RuntimeWarning) as rec:
            used = build.cache_root()
    [w] = [w for w in rec if issubclass(w.category, RuntimeWarning)]
    msg = str(w.message)
    assert str(root) in msg and str(used) in msg
    assert ("owned by uid" if case == "other owner" else "writable by group or others") in msg
    assert used != root and not used.is_relative_to(root)
    st = used.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # decided once per process: no second warning
        assert build.cache_root() == used
        fn = h.fresh(_fn)
        f = trident.jit(fn)
        _check_calls(f, fn, 4, 4)
    assert _scm_of(f).so_path.is_relative_to(used)
    assert trident.stats(f)["hits"] == [1]
    assert _builds(root, "obj") == _builds(root, "scm") == []  # nothing built in the shared one


# -- (b) folder modes ---------------------------------------------------------------------------


def test_every_folder_is_created_0700(cache, h):
    old = os.umask(0o022)
    try:
        fn = h.fresh(_fn)
        _check_calls(trident.jit(fn), fn, 4)
    finally:
        os.umask(old)
    folders = [cache, *(p for p in cache.rglob("*") if p.is_dir())]
    assert len(folders) >= 5  # the root, obj/, scm/ and a build in each
    assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in folders} == \
        {str(p): "0o700" for p in folders}
    [scm] = _builds(cache, "scm")
    manifest = json.loads((scm / build.MANIFEST).read_text())
    assert manifest["product"] == "scm.so"
    assert manifest["size"] == (scm / "scm.so").stat().st_size


# -- (c, d) tampered products, loaded by a fresh process -----------------------------------------

_SCRIPT = '''
import json, sys, warnings
import torch, trident
from trident.api import _scm_of

def fn(x, y):
    return x * 2 + y

with warnings.catch_warnings(record=True) as rec:
    warnings.simplefilter("always")
    f = trident.jit(fn, dynamic=False)
    for _ in range(2):
        x, y = torch.randn(4), torch.randn(4)
        torch.testing.assert_close(f(x, y), fn(x, y))
st = trident.stats(f)
print(json.dumps({"so": str(_scm_of(f).so_path), "hits": st["hits"],
                  "fallback": st["fallback_reason"], "compiled": st["compiled_units"],
                  "warnings": [str(w.message) for w in rec
                               if issubclass(w.category, RuntimeWarning)]}))
'''

_PLANTED = r'''
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
  FILE* f = fopen(MARKER, "w");
  if (f) { fputs("the planted constructor ran\n", f); fclose(f); }
}
'''


class Fresh:
    """A cache holding this process's runtime build, used by fresh processes running
    `_SCRIPT`, and a planted shared object whose constructor writes `marker`."""

    def __init__(self, d: Path):
        self.root = d / "cache"
        self.root.mkdir(mode=0o700)
        (self.root / "runtime").mkdir(mode=0o700)
        rt = Path(build.runtime_module().__file__).parent
        shutil.copytree(rt, self.root / "runtime" / rt.name)
        self.script = d / "run.py"
        self.script.write_text(_SCRIPT)
        self.marker = d / "marker"
        self.planted = d / "planted.so"
        (d / "planted.c").write_text(_PLANTED)
        subprocess.run([build.config.c_compiler(), "-shared", "-fPIC",
                        f'-DMARKER="{self.marker}"', str(d / "planted.c"), "-o",
                        str(self.planted)], check=True)
        self.env = {**os.environ, "TRIDENT_CACHE_DIR": str(self.root),
                    "TRIDENT_TIER_UP": "0",  # one build per miss: what the tests count
                    "PYTHONPATH": str(Path(trident.__file__).parent.parent)}

    def run(self) -> dict:
        proc = subprocess.run([sys.executable, str(self.script)], env=self.env,
                              capture_output=True, text=True, timeout=300,
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["fallback"] is None and out["hits"] == [1], out
        return out


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    fr = Fresh(tmp_path_factory.mktemp("fresh"))
    # The marker works: loading the planted object writes it.
    ctypes.CDLL(str(fr.planted))
    assert fr.marker.exists()
    fr.marker.unlink()
    out = fr.run()  # builds every product
    assert out["compiled"] == ["version_0.c", "scm_main.c", "scm.c"] and not out["warnings"]
    fr.so = Path(out["so"])
    return fr


def _rebuilt(out: dict, folder: Path, why: str) -> None:
    ws = [w for w in out["warnings"] if f"rebuilt {folder}" in w]
    assert len(ws) == 1 and why in ws[0], out["warnings"]


def test_a_planted_scm_is_rebuilt_not_loaded(fresh):
    shutil.copyfile(fresh.planted, fresh.so)
    out = fresh.run()
    assert not fresh.marker.exists()
    _rebuilt(out, fresh.so.parent, "scm.so")
    assert out["so"] == str(fresh.so) and out["compiled"] == ["scm.c"]
    assert fresh.so.read_bytes() != fresh.planted.read_bytes()
    assert fresh.run()["compiled"] == []  # and is then found


def test_a_planted_object_is_rebuilt_before_the_link(fresh):
    # Linked in, a shared object given as an object would be loaded with the SCM.
    [obj] = fresh.root.glob("obj/*/version_0.o")
    shutil.copyfile(fresh.planted, obj)
    shutil.rmtree(fresh.so.parent)  # so the SCM is linked again
    out = fresh.run()
    assert not fresh.marker.exists()
    _rebuilt(out, obj.parent, "version_0.o")
    assert out["compiled"] == ["version_0.c", "scm.c"]
    assert b"planted" not in fresh.so.read_bytes()


@pytest.mark.parametrize("damage", ["truncated", "zero-length", "garbled manifest",
                                    "no manifest"])
def test_a_damaged_scm_is_rebuilt_without_a_crash(fresh, damage):
    size = fresh.so.stat().st_size
    if damage == "truncated":
        os.truncate(fresh.so, size // 2)
    elif damage == "zero-length":
        os.truncate(fresh.so, 0)
    elif damage == "garbled manifest":
        (fresh.so.parent / build.MANIFEST).write_text('{"product": "scm.so", "si')
    else:
        (fresh.so.parent / build.MANIFEST).unlink()
    out = fresh.run()
    why = {"truncated": f"has {size // 2} bytes", "zero-length": "has 0 bytes",
           "garbled manifest": "garbled", "no manifest": "manifest.json is missing"}[damage]
    _rebuilt(out, fresh.so.parent, why)
    assert out["compiled"] == ["scm.c"] and fresh.so.stat().st_size == size


# -- (e) folders without a product, stale temporary folders -------------------------------------


def test_folders_without_product_and_stale_temporaries_are_cleaned(cache, h, record_warnings):
    fn = h.fresh(_fn)
    _check_calls(trident.jit(fn), fn, 4)
    [scm] = _builds(cache, "scm")
    [obj] = [p for p in _builds(cache, "obj") if (p / "version_0.o").exists()]
    (scm / "scm.so").unlink()
    (obj / "version_0.o").unlink()
    hour_ago = time.time() - 2 * build.STALE_SECONDS
    for kind in ("obj", "scm"):
        stale = cache / kind / f".{'0' * 20}-killed"
        stale.mkdir()
        (stale / "scm.c").write_text("half")
        os.utime(stale, (hour_ago, hour_ago))
    running = cache / "scm" / f".{'1' * 20}-running"  # a build in progress elsewhere
    running.mkdir()
    g = trident.jit(fn)  # a new function over the same source: same builds
    with record_warnings() as rec:
        _check_calls(g, fn, 4, 4)
    assert trident.stats(g)["hits"] == [1] and trident.stats(g)["fallback_reason"] is None
    msgs = sorted(str(w.message) for w in h.runtime_warnings(rec))
    assert len(msgs) == 2, msgs
    assert f"rebuilt {obj}: version_0.o is missing" in msgs[0]
    assert f"rebuilt {scm}: scm.so is missing" in msgs[1]
    assert (scm / "scm.so").exists() and (obj / "version_0.o").exists()
    assert _dot_folders(cache) == [running]


def test_losing_the_race_uses_the_winners_build_or_rebuilds(cache, monkeypatch, record_warnings):
    files = {"race.c": "int race(void) { return 1; }\n"}
    cmd = build._scm_cmd("-c")
    compile_ = build._compile
    winners = []

    def compile_and_lose(kind_dir, tag, *args):
        tmp, key = compile_(kind_dir, tag, *args)
        if winners:  # another process renames its build into place first
            shutil.copytree(tmp, kind_dir / tag)
            winners.pop()(kind_dir / tag)
        return tmp, key

    monkeypatch.setattr(build, "_compile", compile_and_lose)
    winners.append(lambda d: None)  # a good build
    with record_warnings() as rec:
        o, fresh = build._build("obj", files, cmd, "race", suffix=".o")
    assert not fresh and o.exists() and not h_warn(rec)
    shutil.rmtree(o.parent)
    winners.append(lambda d: (d / "race.o").unlink())  # a build that lost its product
    with record_warnings() as rec:
        o, fresh = build._build("obj", files, cmd, "race", suffix=".o")
    assert fresh and o.exists() and o.parent.parent == cache / "obj"
    assert len(h_warn(rec)) == 1 and "race.o is missing" in str(h_warn(rec)[0].message)
    assert build._problem(o.parent, o) is None
    assert _dot_folders(cache) == []


def h_warn(rec):
    return [w for w in rec if issubclass(w.category, RuntimeWarning)]


# -- (f) the size limit -------------------------------------------------------------------------


def _fake_builds(root: Path, n: int, age_hours: float, prefix: str) -> list[Path]:
    """`n` 200 KiB builds, the first the least recently used, all older than `age_hours`."""
    out = []
    for i in range(n):
        d = root / "obj" / f"{prefix}{i:02d}"
        d.mkdir(mode=0o700, parents=True)
        (d / "x.o").write_bytes(b"\0" * 200 * 1024)
        (d / build.MANIFEST).write_text("{}")
        t = time.time() - 3600 * (age_hours + n - i)
        os.utime(d / build.MANIFEST, (t, t))
        out.append(d)
    return out


def test_cache_size_limit_evicts_the_least_recently_used(cache, monkeypatch, h):
    monkeypatch.setenv("TRIDENT_CACHE_MAX_MB", "1")
    cache.mkdir(mode=0o700)
    fakes = _fake_builds(cache, 8, 1, "fake-a")  # 1.6 MB
    build.cache_root()  # the first use of this cache trims it, in a thread
    assert build.wait_trims(60)
    assert _total(cache) <= 2**20 and not fakes[0].exists()
    fn = h.fresh(_fn)
    f = trident.jit(fn)
    _check_calls(f, fn, 4)  # and so does the build, once past the limit
    assert _total(cache) <= 2**20
    kept = [d.exists() for d in fakes]
    assert kept == sorted(kept) and not kept[0] and kept[-1]  # the oldest went first
    mine = [_scm_of(f).so_path.parent, *_builds(cache, "obj")]
    mine = [d for d in mine if not d.name.startswith("fake")]
    assert len(mine) == 4  # the SCM; version_0.o, scm_main.o and the dispatcher's scm.o
    # What this process uses stays, even as the least recently used build.
    for d in mine:
        os.utime(d / build.MANIFEST, (0, 0))
    more = _fake_builds(cache, 6, 0, "fake-b")
    build.trim_cache()
    assert all(d.exists() for d in mine)
    assert _total(cache) <= 2**20 and more[-1].exists()
    _check_calls(f, fn, 4)
    monkeypatch.setenv("TRIDENT_CACHE_MAX_MB", "0")  # no limit
    many = _fake_builds(cache, 6, 0, "fake-c")
    build.trim_cache()
    assert all(d.exists() for d in many)


def test_the_first_use_trims_in_a_thread_that_wait_joins(cache, monkeypatch):
    import threading

    release, scanned = threading.Event(), []
    real = build.trim_cache

    def slow_trim(root=None):  # a large cache's scan, held until released
        assert release.wait(60)
        scanned.append(root)
        real(root)

    monkeypatch.setattr(build, "trim_cache", slow_trim)
    assert build.cache_root() == cache  # returns while the scan is held
    assert not build.wait_trims(0.05) and not scanned
    release.set()
    assert trident.wait(timeout=60) and scanned == [cache]


# -- (g) superseded SCMs ------------------------------------------------------------------------


def test_a_rebuild_removes_the_scm_it_supersedes(cache, h):
    fn = h.fresh(_fn)
    f = trident.jit(fn, dynamic=False)
    for n, size in enumerate((3, 5, 7), start=1):
        _check_calls(f, fn, size)
        assert trident.stats(f)["versions"] == n
        assert _builds(cache, "scm") == [_scm_of(f).so_path.parent]
    _check_calls(f, fn, 3, 5, 7)  # the removed SCMs' versions serve from the loaded one
    assert trident.stats(f)["hits"] == [1, 1, 1]
    assert _dot_folders(cache) == []


def test_discard_scm_is_robust(cache, h, tmp_path):
    fn = h.fresh(_fn)
    f = trident.jit(fn)
    _check_calls(f, fn, 4)
    so = _scm_of(f).so_path
    outside = tmp_path / "elsewhere" / "x" / "scm.so"
    outside.parent.mkdir(parents=True)
    outside.write_bytes(b"")
    build.discard_scm(outside)  # not this cache's: kept
    assert outside.exists()
    build.discard_scm(so)
    assert not so.parent.exists()
    build.discard_scm(so)  # already gone
    _check_calls(f, fn, 4)


def test_build_removed_between_check_and_load_is_rebuilt(cache, monkeypatch):
    """Another process of the user evicts (or discards) the SCM this one just verified:
    the load fails, the build is verified again (so rebuilt), and the function stays native."""
    real = build.build_scm
    removed = []

    def racing(src, quick=False, **kw):
        built = real(src, quick, **kw)
        if not removed:
            removed.append(built.so)
            shutil.rmtree(built.so.parent)
        return built

    monkeypatch.setattr(build, "build_scm", racing)
    f = trident.jit(_fn, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no eager fallback
        for _ in range(2):
            x, y = torch.randn(5), torch.randn(5)
            torch.testing.assert_close(f(x, y), _fn(x, y))
    assert removed and removed[0].exists()
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and st["versions"] == 1 and st["hits"] == [1], st


# -- the runtime's index: a new process finds the runtime build without cpp_extension -----------

_RUNTIME_SCRIPT = r'''
import json, sys

import torch
import trident
from trident.native import build

before = "torch.utils.cpp_extension" in sys.modules
mod = build.runtime_module()
print(json.dumps({"so": mod.__file__, "before": before,
                  "cpp_extension": "torch.utils.cpp_extension" in sys.modules}))
'''


def _cache_with_this_runtime(tmp_path) -> tuple[Path, Path]:
    """A new cache root holding this process's runtime build: (root, the build's folder)."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    (root / "runtime").mkdir(mode=0o700)
    rt = Path(build.runtime_module().__file__).parent
    shutil.copytree(rt, root / "runtime" / rt.name)
    return root, rt


def test_a_new_process_finds_the_runtime_by_its_index_and_never_trusts_a_changed_one(tmp_path):
    root, rt = _cache_with_this_runtime(tmp_path)
    script = tmp_path / "rt.py"
    script.write_text(_RUNTIME_SCRIPT)
    env = {**os.environ, "TRIDENT_CACHE_DIR": str(root),
           "PYTHONPATH": str(Path(trident.__file__).parent.parent)}

    def run(**extra) -> dict:
        proc = subprocess.run([sys.executable, str(script)], env={**env, **extra},
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert Path(out["so"]).parent == root / "runtime" / rt.name, out
        return out

    def indexes() -> dict:
        return {p.name: (p / "tag.txt").read_text() for p in (root / "runtime").glob("index-*")}

    first = run()  # finds the build the long way (cpp_extension's command) and indexes it
    assert first["cpp_extension"] and indexes() and set(indexes().values()) == {rt.name}
    second = run()
    if second["before"]:
        pytest.skip("this torch imports cpp_extension by itself")
    assert not second["cpp_extension"]  # by the index
    # An index whose bytes changed (it names another build) is not used, and is rewritten.
    [name] = indexes()
    (root / "runtime" / name / "tag.txt").write_text("0" * 20)
    third = run()
    assert third["cpp_extension"] and indexes() == {name: rt.name}
    assert not run()["cpp_extension"]
    # What the command depends on changed (here: the variables CUDA is found by): the long
    # way again, under another index.
    assert run(CUDA_PATH=str(tmp_path))["cpp_extension"] and len(indexes()) == 2


def test_another_checkout_of_the_same_sources_finds_the_same_runtime_build(tmp_path):
    # The build folder holds copies of the sources and headers, and the hash names torch's
    # folder by name: another checkout (or venv) builds nothing.
    root, rt = _cache_with_this_runtime(tmp_path)
    checkout = tmp_path / "checkout"
    shutil.copytree(Path(trident.__file__).parent, checkout / "trident",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = tmp_path / "rt.py"
    script.write_text(_RUNTIME_SCRIPT.replace(
        '"before": before,', '"before": before, "trident": trident.__file__,'))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, timeout=300,
                          env={**os.environ, "TRIDENT_CACHE_DIR": str(root),
                               "PYTHONPATH": str(checkout)},
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["trident"]).parent == checkout / "trident"
    assert Path(out["so"]).parent == root / "runtime" / rt.name
    assert sorted(p.name for p in (root / "runtime").iterdir()
                  if not p.name.startswith("index-")) == [rt.name]
