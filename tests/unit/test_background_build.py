"""TRIDENT_BACKGROUND_BUILD: a miss returns once its version is captured; the version's C is
compiled and loaded in a thread.  Meanwhile calls that miss run eagerly (eager's results);
then the version serves calls natively.  A build that fails there makes its path run eagerly,
as at a miss; a forked child forgets the parent's builds and captures again."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

import trident
from trident import config
from trident.errors import BuildError
from trident.native import build


def _fn(x, w):
    return torch.relu(x @ w) * 2 + x.sum()


@pytest.fixture
def background():
    with config.scope(TRIDENT_BACKGROUND_BUILD="1"):
        yield


@pytest.fixture
def gate(monkeypatch):
    """Background builds of this process wait until `gate.set()`."""
    event = threading.Event()
    real = build.build_scm
    parent = os.getpid()

    def held(src, quick=False, **kw):
        if os.getpid() == parent and threading.current_thread() is not threading.main_thread():
            assert event.wait(120), "the test never opened the gate"
        return real(src, quick, **kw)

    monkeypatch.setattr(build, "build_scm", held)
    yield event
    event.set()
    trident.wait(timeout=120)


def test_miss_returns_before_the_build_then_hits(h, background, gate):
    f = trident.jit(h.fresh(_fn), dynamic=False)
    x, w = torch.randn(5, 3), torch.randn(3, 4)
    h.check(f, _fn, x, w)  # the capturing call: its own result, the build still held
    st = trident.stats(f)
    assert st["building"] and st["versions"] == 0 and st["captures"] == 1
    assert "being compiled in the background" in trident.explain(f)
    for _ in range(3):  # misses meanwhile run eagerly, uncaptured
        h.check(f, _fn, torch.randn(5, 3), torch.randn(3, 4))
    h.check(f, _fn, torch.randn(2, 3), torch.randn(3, 4))  # another shape: eager too
    assert not trident.wait(f, timeout=0.05)
    gate.set()
    assert trident.wait(f, timeout=120)
    st = trident.stats(f)
    assert not st["building"] and st["versions"] == 1 and st["captures"] == 1
    assert st["eager_while_building"] == 4 and st["misses"] == 1
    assert set(st["miss_phases"][0]) >= {"capture", "codegen", "compile", "load"}
    h.check(f, _fn, torch.randn(5, 3), torch.randn(3, 4))
    assert trident.stats(f)["hits"] == [1]
    h.check(f, _fn, torch.randn(2, 3), torch.randn(3, 4))  # now captured: a second version
    assert trident.wait(f, timeout=120)
    h.check(f, _fn, torch.randn(2, 3), torch.randn(3, 4))
    assert trident.stats(f)["hits"] == [1, 1]


def test_a_miss_that_waited_for_the_lock_does_not_capture_while_building(h, background, gate):
    """A call that reached the miss handler before another thread's miss started a build,
    and waited for the lock meanwhile, runs eagerly: a second capture would replace the
    pending build, whose thread would then drop it."""
    f = trident.jit(h.fresh(_fn), dynamic=False)
    scm = f._trident_scm
    out = {}
    xb, wb = torch.randn(2, 3), torch.randn(3, 4)

    def other():
        out["b"] = f(xb, wb)

    with scm.lock:  # thread b passes the first pending check, then waits here
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.3)
        h.check(f, _fn, torch.randn(5, 3), torch.randn(3, 4))  # captures, starts the build
        assert trident.stats(f)["building"]
    t.join(timeout=60)
    assert not t.is_alive()
    torch.testing.assert_close(out["b"], _fn(xb, wb))
    st = trident.stats(f)
    assert st["captures"] == 1 and st["eager_while_building"] == 1, st
    gate.set()
    assert trident.wait(f, timeout=120)
    h.check(f, _fn, torch.randn(5, 3), torch.randn(3, 4))
    assert trident.stats(f)["hits"] == [1] and trident.stats(f)["versions"] == 1


def test_build_failure_in_the_background_runs_the_path_eagerly(h, background, monkeypatch,
                                                                record_warnings):
    real = build.build_scm
    failed = []

    def fails_once(src, quick=False, **kw):
        if not failed:
            failed.append(src)
            raise BuildError("compiling a unit of an SCM", ["cc", "-c"], "error: injected")
        return real(src, quick, **kw)

    monkeypatch.setattr(build, "build_scm", fails_once)
    f = trident.jit(h.fresh(_fn), dynamic=False)
    x, w = torch.randn(4, 3), torch.randn(3, 2)
    with record_warnings() as rec:
        h.check(f, _fn, x, w)
        assert trident.wait(f, timeout=120)
    assert failed
    assert any("C compiler failed" in str(r.message) for r in h.runtime_warnings(rec))
    st = trident.stats(f)
    assert not st["runs_eagerly"] and not st["building"]
    assert st["eager_paths"] and "C compiler failed" in st["eager_paths"][0]["reason"]
    for _ in range(2):
        h.check(f, _fn, torch.randn(4, 3), torch.randn(3, 2))
    assert trident.stats(f)["hits"] == [2]  # the eager version serves the path


def test_strict_builds_at_the_miss(h, background):
    f = trident.jit(h.fresh(_fn), dynamic=False, strict=True)
    h.check(f, _fn, torch.randn(3, 3), torch.randn(3, 3))
    assert not trident.stats(f)["building"] and trident.stats(f)["versions"] == 1
    h.check(f, _fn, torch.randn(3, 3), torch.randn(3, 3))
    assert trident.stats(f)["hits"] == [1]


def test_wait_returns_at_once_without_background_builds(h, monkeypatch):
    monkeypatch.setenv("TRIDENT_TIER_UP", "0")  # no full-level rebuild in flight either
    f = trident.jit(h.fresh(_fn), dynamic=False)
    h.check(f, _fn, torch.randn(3, 3), torch.randn(3, 3))
    assert trident.wait(f, timeout=0) and trident.wait(timeout=0)
    assert trident.stats(f)["versions"] == 1
    with pytest.raises(TypeError, match="not a trident.jit function"):
        trident.wait(_fn)


def test_threads_calling_while_versions_build(h, background):
    f = trident.jit(h.fresh(_fn))
    barrier = threading.Barrier(6)

    def work(i):
        barrier.wait()
        for rep in range(12):
            n = 2 + (i + rep) % 5
            h.check(f, _fn, torch.randn(n, 3), torch.randn(3, 2 + i % 2))

    h.run_threads(work, 6, timeout=120)
    assert trident.wait(f, timeout=120)
    st = trident.stats(f)
    assert st["fallbacks"] == 0 and st["versions"] >= 1
    before = sum(st["hits"])
    h.check(f, _fn, torch.randn(3, 3), torch.randn(3, 2))
    assert trident.wait(f, timeout=120)
    h.check(f, _fn, torch.randn(3, 3), torch.randn(3, 2))
    assert sum(trident.stats(f)["hits"]) > before


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_forgets_the_parents_build(h, background, gate):
    f = trident.jit(h.fresh(_fn), dynamic=False)
    x, w = torch.randn(5, 3), torch.randn(3, 4)
    h.check(f, _fn, x, w)
    assert trident.stats(f)["building"]  # the parent's build waits at the gate
    pid = os.fork()
    if pid == 0:  # the child: its calls must neither hang nor go wrong
        code = 1
        try:
            assert not trident.stats(f)["building"]
            h.check(f, _fn, torch.randn(5, 3), torch.randn(3, 4))  # captured again
            assert trident.wait(f, timeout=60)
            h.check(f, _fn, torch.randn(5, 3), torch.randn(3, 4))
            assert trident.stats(f)["hits"] == [1]
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    gate.set()
    assert trident.wait(f, timeout=120)
    h.check(f, _fn, x, w)
    assert trident.stats(f)["hits"] == [1]


_MODULE = '''
import torch
import trident


@trident.jit
def g(x):
    return torch.relu(x) * 3 + x.sum()
'''

_DRIVER = '''
import json, sys
import torch
import trident
from bgmod import g

x = torch.randn(4, 3)
torch.testing.assert_close(g(x), torch.relu(x) * 3 + x.sum())
if sys.argv[1] == "b":
    for _ in range(2):
        g(torch.randn(4, 3))
st = trident.stats(g)
print(json.dumps({"captures": st["captures"], "origins": st["origins"], "hits": st["hits"],
                  "building": st["building"]}))
'''  # process a exits right after its capturing call, its build still running


def test_exit_during_a_background_build_keeps_the_version(tmp_path):
    """A process that exits while its version is built in the background waits for the build
    (a non-daemon thread), which persists it: the next process serves the call from disk."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "bgmod.py").write_text(_MODULE)
    (tmp_path / "driver.py").write_text(_DRIVER)
    root = tmp_path / "cache"
    (root / "runtime").mkdir(mode=0o700, parents=True)
    root.chmod(0o700)
    rt = Path(build.runtime_module().__file__).parent
    shutil.copytree(rt, root / "runtime" / rt.name)
    env = {k: v for k, v in os.environ.items() if k != "TRIDENT_CACHE"}
    env.update(TRIDENT_BACKGROUND_BUILD="1", TRIDENT_CACHE_DIR=str(root),
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(Path(trident.__file__).parent.parent)]))

    def run(which):
        proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), which], env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    a = run("a")
    assert a["captures"] == 1 and a["building"], a  # it exited with the build pending
    b = run("b")
    assert b["captures"] == 0 and b["origins"] == ["disk"] and sum(b["hits"]) >= 2, b
