"""What a specialization miss costs and what keeps it cheap: the per-phase timing record
(`trident.stats(f)["miss_phases"]`), the precompiled prelude of version units (gcc), the
link of combined blocks of versions' objects, and the fast re-check of cached objects."""

from __future__ import annotations

import subprocess

import pytest

import trident
from trident.api import _scm_of
from trident.native import build


@pytest.fixture
def cache(build_cache):
    return build_cache


def test_each_miss_records_its_phases(h, cache):
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    for size in (3, 5):
        h.check(f, fn, h.rand(size), h.rand(size))
    h.check(f, fn, h.rand(3), h.rand(3))  # a hit records nothing
    st = trident.stats(f)
    assert len(st["miss_phases"]) == 2 == len(st["compile_seconds"])
    for phases, cs in zip(st["miss_phases"], st["compile_seconds"]):
        assert set(phases) == {"capture", "run", "guards", "lower", "codegen", "compile",
                               "link", "load", "persist"}
        assert all(t >= 0 for t in phases.values())
        # the trace and the capturing run make up the capture
        assert phases["run"] > 0
        assert phases["capture"] + phases["run"] == pytest.approx(cs["capture"])
        # the finer phases are parts of the coarse ones
        assert phases["guards"] + phases["lower"] <= cs["guards_ir"] + 1e-6
        assert sum(phases[k] for k in ("codegen", "compile", "link", "load", "persist")) \
            <= cs["build"] + 1e-6


def _is_gcc() -> bool:
    return build._gcc_version(build.config.c_compiler()) is not None


@pytest.mark.skipif(not _is_gcc(), reason="the precompiled prelude is built with gcc only")
def test_version_units_use_the_precompiled_prelude(h, cache):
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    h.check(f, fn, h.rand(4), h.rand(4))
    [gch] = cache.glob("obj/*/scm_prelude.h.gch")
    [unit] = cache.glob("obj/*/version_0.c")
    cmd = (unit.parent / "cmd.txt").read_text()
    assert f"-include {gch.with_suffix('')} " in cmd
    # gcc reads the .gch (it reports it with a '!' under -H), and the code is the one the
    # same unit compiles to without it: the unit's hash need not cover the flag.
    args = [str(unit) if a.endswith("version_0.c") else a for a in cmd.split()]
    plain = [a for a in args if a not in ("-include", str(gch.with_suffix("")))]
    again = {}
    for name, argv in (("pch", args), ("plain", plain)):
        argv = list(argv)
        argv[argv.index("-o") + 1] = out = str(cache / f"{name}.o")
        subprocess.run(argv, check=True, cwd=unit.parent)
        again[name] = subprocess.run(["objdump", "-dr", out], capture_output=True,
                                     text=True).stdout.split("\n", 2)[-1]
    assert again["pch"] == again["plain"] and "trident_version_0" in again["pch"]
    with_pch = [*args[:args.index("-o")], "-H", "-fsyntax-only"]
    log = subprocess.run(with_pch, capture_output=True, text=True, cwd=unit.parent).stderr
    assert log.startswith(f"! {gch}"), log[:300]


def test_a_compile_that_fails_with_the_prelude_runs_without_it(h, cache, monkeypatch):
    monkeypatch.setattr(build, "_prelude_pch", lambda opt: ["-include", "/nonexistent/x.h"])
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    h.check(f, fn, h.rand(4), h.rand(4))
    st = trident.stats(f)
    assert st["fallback_reason"] is None and st["compiled_units"][0] == "version_0.c"
    [unit] = cache.glob("obj/*/version_0.c")
    assert "-include" not in (unit.parent / "cmd.txt").read_text()


def test_a_small_cache_gets_no_precompiled_prelude(h, cache, monkeypatch):
    monkeypatch.setenv("TRIDENT_CACHE_MAX_MB", "8")
    fn = h.fresh(h.affine_relu)
    h.check(trident.jit(fn, dynamic=False), fn, h.rand(4), h.rand(4))
    assert not list(cache.glob("obj/*/*.gch"))


def test_links_read_combined_blocks_of_versions(h, cache, monkeypatch):
    monkeypatch.setattr(build, "LINK_BLOCK", 2)
    fn = h.fresh(h.affine_relu)
    f = trident.jit(fn, dynamic=False)
    sizes = (2, 3, 4, 5, 6)
    for size in sizes:
        h.check(f, fn, h.rand(size), h.rand(size))
    link = (_scm_of(f).so_path.parent / "cmd.txt").read_text()
    blocks = sorted(cache.glob("obj/*/block.o"))
    assert len(blocks) == 2 and all(str(b) in link for b in blocks)
    assert "version_4.o" in link and "version_0.o" not in link
    # each block is made once, from the cached objects, and reused by later links
    assert all((b.parent / "block.txt").read_text().count("version_") == 2 for b in blocks)
    for size in sizes:  # every version still serves its own inputs
        h.check(f, fn, h.rand(size), h.rand(size))
    st = trident.stats(f)
    assert st["hits"] == [1] * 5 and st["misses"] == 5
    # only the entry points are exported: the versions' symbols stayed hidden
    so = _scm_of(f).so_path
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                          text=True).stdout
    if syms:
        assert "trident_version" not in syms


def test_a_cached_object_changed_after_its_check_is_checked_again(cache):
    """The fast re-check (two lstats) holds only while the product is unchanged: a product
    rewritten in place (new mtime and ctime) is hashed against its manifest again."""
    files = {"u.c": "int trt_u(void) { return 1; }\n"}
    cmd = build._scm_cmd("-c", opt="-O1")
    o, fresh = build._build("obj", files, cmd, "u", suffix=".o")
    assert fresh and build._problem(o.parent, o) is None
    data = o.read_bytes()
    o.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, another byte
    assert "SHA-256" in build._problem(o.parent, o)
