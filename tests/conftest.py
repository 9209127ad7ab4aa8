"""Shared fixtures and helpers for Trident's test suite.

* `trident_cache_dir` (session, autouse): points TRIDENT_CACHE_DIR at a
  session temporary directory so the tests never touch ~/.cache/trident.  An
  explicitly set TRIDENT_CACHE_DIR is honoured (it lets repeated runs reuse
  the ~25 s runtime build).  Nothing else is reset: every test makes its own
  `trident.jit` functions, so their counters start at zero.
* TRIDENT_CACHE is off unless set: a test's function would otherwise find the
  versions an earlier run (or an earlier subprocess) persisted under that
  cache, and count no capture.  tests/unit/test_persist.py turns it on.
* TRIDENT_TIER_UP is off unless set (build counts stay deterministic).
* `build_cache`: an empty build cache of the test's own.
* `check` and friends: run a jitted function and its eager original on
  independent deep copies of the same fresh random inputs and compare the
  results (values, dtypes, shapes, structure) and the mutated inputs.
* `spawn_ranks`: runs `worker(rank, world, port, cache_dir, queue)` in
  `world` spawned processes (torch.distributed's rendezvous on a free local
  port) and returns {rank: what each put on the queue}.

Every `trident.jit` in the suite is applied inside a test, never at import
time, so it always runs after the cache directory is set.
"""

from __future__ import annotations

import itertools
import os
import types
import warnings
from pathlib import Path

import pytest
import torch


def pytest_configure(config):
    os.environ.setdefault("TRIDENT_CACHE", "off")
    # Misses build at full level at once, so that a test's build counts do not depend on
    # when a background rebuild lands; tests/unit/test_tier_up.py turns it on.
    os.environ.setdefault("TRIDENT_TIER_UP", "0")
    config.addinivalue_line("markers", "gpu: needs CUDA and Triton (skipped without them)")
    config.addinivalue_line("markers", "slow: long-running (e.g. 100,000-call leak check)")


@pytest.fixture(scope="session", autouse=True)
def trident_cache_dir(tmp_path_factory):
    preset = os.environ.get("TRIDENT_CACHE_DIR")
    if preset:
        yield Path(preset)
        return
    d = tmp_path_factory.mktemp("trident_cache")
    os.environ["TRIDENT_CACHE_DIR"] = str(d)
    try:
        yield d
    finally:
        os.environ.pop("TRIDENT_CACHE_DIR", None)


@pytest.fixture(autouse=True)
def _builds_finish_in_their_test():
    """A build still running in the background (TRIDENT_BACKGROUND_BUILD, TRIDENT_TIER_UP)
    finishes before the next test starts: it reads the cache folder from the environment, which
    the next test may point elsewhere."""
    yield
    import trident

    assert trident.wait(timeout=120), "a background build did not finish in 120 s"


# ----------------------------------------------------------------- helpers


def clone_tree(obj):
    """Deep copy of nested tuples/lists/dicts of tensors (tensors cloned with
    the same strides and storage offset; other leaves kept as they are)."""
    if isinstance(obj, torch.Tensor):
        return clone_tensor(obj)
    if isinstance(obj, tuple):
        return tuple(clone_tree(o) for o in obj)
    if isinstance(obj, list):
        return [clone_tree(o) for o in obj]
    if isinstance(obj, dict):
        return {k: clone_tree(v) for k, v in obj.items()}
    return obj


def clone_tensor(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` with its own storage and the same sizes, strides, storage
    offset and requires_grad (so layout guards see the same thing)."""
    storage = t.detach().untyped_storage().clone()
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    out.set_(storage, t.storage_offset(), t.shape, t.stride())
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def assert_tree_equal(actual, expected, *, exact: bool = False, strides: bool = False,
                      path: str = "out"):
    """Same structure, same Python types, and tensors close (or equal with
    `exact`) to eager's; optionally the same strides."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} vs {type(expected)}"
    if isinstance(expected, torch.Tensor):
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} vs {expected.shape}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} vs {expected.dtype}"
        assert actual.requires_grad == expected.requires_grad, f"{path}: requires_grad"
        if strides:
            assert actual.stride() == expected.stride(), (
                f"{path}: stride {actual.stride()} vs {expected.stride()}")
        if exact or not (expected.is_floating_point() or expected.is_complex()):
            assert torch.equal(actual.detach(), expected.detach()), f"{path}: values differ"
        else:
            torch.testing.assert_close(actual.detach(), expected.detach(), msg=path)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{path}: len {len(actual)} vs {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_tree_equal(a, e, exact=exact, strides=strides, path=f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys()), f"{path}: keys differ"
        for k in expected:
            assert_tree_equal(actual[k], expected[k], exact=exact, strides=strides,
                              path=f"{path}[{k!r}]")
    else:
        assert actual == expected, f"{path}: {actual!r} vs {expected!r}"


def check(jitted, eager, *args, exact: bool = False, strides: bool = False, **kwargs):
    """Call `jitted` and `eager` on independent copies of the same arguments;
    compare results and the (possibly mutated) arguments.  Returns the
    jitted result."""
    ja, jk = clone_tree(args), clone_tree(kwargs)
    ea, ek = clone_tree(args), clone_tree(kwargs)
    expected = eager(*ea, **ek)
    actual = jitted(*ja, **jk)
    assert_tree_equal(actual, expected, exact=exact, strides=strides)
    assert_tree_equal(ja, ea, exact=exact, path="args after call")
    assert_tree_equal(jk, ek, exact=exact, path="kwargs after call")
    return actual


def rand(*shape, dtype=torch.float32, requires_grad=False):
    """Fresh random tensor of any dtype (ints in [-50, 50))."""
    if dtype.is_floating_point:
        t = torch.randn(*shape, dtype=dtype)
    elif dtype == torch.bool:
        t = torch.rand(*shape) > 0.5
    else:
        t = torch.randint(-50, 50, shape, dtype=dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t


_fresh_ids = itertools.count()


def fresh(fn):
    """A copy of `fn` with its own code object *and code identity*.

    TorchDynamo remembers which dimensions changed per code identity (file,
    first line, name), across `torch.compile` (and so `trident.jit`)
    instances.  Tests that count versions under dynamic=None use a fresh
    copy so an earlier test's calls do not make the first capture dynamic.
    """
    n = next(_fresh_ids)
    code = fn.__code__
    kw = {"co_name": f"{code.co_name}__fresh{n}"}
    if hasattr(code, "co_qualname"):
        kw["co_qualname"] = f"{code.co_qualname}__fresh{n}"
    g = types.FunctionType(code.replace(**kw), fn.__globals__, fn.__name__,
                           fn.__defaults__, fn.__closure__)
    g.__kwdefaults__ = fn.__kwdefaults__
    g.__qualname__ = fn.__qualname__
    g.__doc__ = fn.__doc__
    g.__annotations__ = dict(fn.__annotations__)
    return g


def trident_runtime_warnings(record) -> list:
    """The RuntimeWarnings Trident emitted among recorded warnings."""
    return [w for w in record if issubclass(w.category, RuntimeWarning)]


class Helpers:
    clone_tree = staticmethod(clone_tree)
    clone_tensor = staticmethod(clone_tensor)
    assert_tree_equal = staticmethod(assert_tree_equal)
    check = staticmethod(check)
    rand = staticmethod(rand)
    fresh = staticmethod(fresh)
    runtime_warnings = staticmethod(trident_runtime_warnings)

    @staticmethod
    def run_threads(work, n: int, timeout: float = 300) -> None:
        """Run `work(i)` for i in range(n), each in its own thread; fail if one does not
        finish in `timeout` s, re-raise the first exception one raised."""
        import threading

        errors = []

        def run(i):
            try:
                work(i)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        assert not any(t.is_alive() for t in threads), "a thread did not finish"
        if errors:
            raise errors[0]

    @staticmethod
    def affine_relu(x, w):
        """A small pointwise function (the build-cache tests' subject)."""
        return (x * w + 1.0).relu()


@pytest.fixture
def h():
    """The helpers above, as `h.check(...)`, `h.rand(...)`, ..."""
    return Helpers


@pytest.fixture
def build_cache(tmp_path, monkeypatch):
    """An empty build cache of this test's own, so every compile the test causes is visible
    (the runtime is built, or found, in the session's cache first); no full-level rebuilds
    in the background (TRIDENT_TIER_UP=0), whatever the environment says."""
    from trident.native import build

    build.runtime_module()
    monkeypatch.setenv("TRIDENT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRIDENT_TIER_UP", "0")
    return tmp_path


@pytest.fixture
def record_warnings():
    """Record every warning raised inside the `with` block (filter 'always')."""
    class _Rec:
        def __enter__(self):
            self._cm = warnings.catch_warnings(record=True)
            self.list = self._cm.__enter__()
            warnings.simplefilter("always")
            return self.list

        def __exit__(self, *exc):
            return self._cm.__exit__(*exc)

    return _Rec


def _spawn_ranks(worker, world: int = 2, timeout: float = 240) -> dict:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    cache = os.environ.get("TRIDENT_CACHE_DIR", "")
    procs = [ctx.Process(target=worker, args=(r, world, port, cache, q)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        return dict(q.get(timeout=timeout) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


@pytest.fixture
def spawn_ranks():
    return _spawn_ranks

