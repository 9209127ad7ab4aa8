"""The native entry points survive what a long-running process can do to them.

Each test runs its scenario in a child process: before the fixes each one crashed the
interpreter (a use-after-free, a stack buffer overrun) or swallowed an exception, which a
test in this process could not report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.setdefault("PYTHONFAULTHANDLER", "1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _ok(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}"
    assert "PASS" in p.stdout, p.stdout + p.stderr[-4000:]


def test_finalizer_replaces_the_scm_while_a_call_binds():
    # A *args call allocates its tuple while binding; a collection there runs a finalizer
    # that calls the same function with a new shape: a miss that installs a new SCM and
    # releases the one the outer call is about to enter.
    _ok(_run("""
        import gc, torch, trident

        def body(*xs):
            return xs[0] * 2 + xs[-1]

        f = trident.jit(body, dynamic=False, max_versions=1000)
        armed = [False]
        inner = []

        class Bomb:
            def __del__(self):
                if armed[0]:
                    armed[0] = False
                    x = torch.randn(int(torch.randint(5, 400, ())))
                    inner.append((f(x), body(x)))

        # 25 positional arguments passed on the stack (no tuple before the call): the
        # binder's tuple is the first allocation after the cycle became garbage.
        names = ", ".join(f"x{i}" for i in range(25))
        ns = {"f": f, "armed": armed, "Bomb": Bomb}
        exec(f"def step({names}):\\n"
             f"    b = Bomb(); b.cycle = b; del b\\n"
             f"    armed[0] = True\\n"
             f"    return f({names})\\n", ns)
        step = ns["step"]
        xs = [torch.randn(4) for _ in range(25)]
        f(*xs)
        for _ in range(40):
            xs = [torch.randn(4) for _ in range(25)]
            gc.set_threshold(1)
            got = step(*xs)
            gc.set_threshold(700)
            torch.testing.assert_close(got, body(*xs))
        gc.collect()
        assert inner, "no finalizer ran inside a call"
        for got, want in inner:
            torch.testing.assert_close(got, want)
        print("PASS", len(inner))
    """))


def test_code_rebound_to_many_parameters_falls_back():
    # The binder's locals array has a fixed size; a function whose __code__ is replaced by
    # one with more parameters than it holds must not be bound natively.
    _ok(_run("""
        import warnings, torch, trident

        def f(x):
            return x + 1

        jf = trident.jit(f)
        x = torch.randn(3)
        torch.testing.assert_close(jf(x), f(x))
        torch.testing.assert_close(jf(x), f(x))
        ns = {}
        exec("def g(" + ", ".join(f"a{i}=1.0" for i in range(400)) + "): return a0 * 2 + a399", ns)
        f.__defaults__ = ns["g"].__defaults__
        f.__code__ = ns["g"].__code__
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                x = torch.randn(3)
                torch.testing.assert_close(jf(x), x * 2 + 1.0)
        assert any("parameters" in str(m.message) for m in w), [str(m.message) for m in w]
        print("PASS")
    """))


def test_too_many_parameters_at_decoration_falls_back():
    _ok(_run("""
        import warnings, torch, trident

        ns = {}
        exec("def g(" + ", ".join(f"a{i}=1.0" for i in range(300)) + "): return a0 * 3", ns)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            jg = trident.jit(ns["g"])
            for _ in range(2):
                x = torch.randn(5)
                torch.testing.assert_close(jg(x), x * 3)
        assert any("parameters" in str(m.message) for m in w), [str(m.message) for m in w]
        print("PASS")
    """))


@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "MemoryError", "SystemExit"])
def test_guard_read_propagates_fatal_exceptions(exc):
    # A guard reads a module attribute served by the module's __getattr__ (a lazy module,
    # as transformers' are).  A KeyboardInterrupt / SystemExit / MemoryError raised there
    # once (a signal arriving meanwhile) must reach the caller, not become a silent miss
    # and a recapture; an ordinary exception there is a miss (Dynamo's rule).
    _ok(_run(f"""
        import sys, types, torch, trident

        mod = types.ModuleType("lazymod")
        once = []

        def _getattr(name):
            if name == "scale":
                if once:
                    raise once.pop()
                return 2.0
            raise AttributeError(name)

        mod.__getattr__ = _getattr
        sys.modules["lazymod"] = mod
        import lazymod

        def f(x):
            return x * lazymod.scale

        jf = trident.jit(f)
        for _ in range(2):
            x = torch.randn(4)
            torch.testing.assert_close(jf(x), f(x))
        assert trident.stats(jf)["captures"] == 1
        once.append({exc}("from the guard"))
        try:
            jf(torch.randn(4))
        except {exc} as e:
            assert "from the guard" in str(e)
        else:
            raise AssertionError("{exc} was swallowed")
        assert trident.stats(jf)["captures"] == 1, trident.stats(jf)
        once.append(LookupError("ordinary"))  # a failed guard: the miss reruns f, which works
        x = torch.randn(4)
        torch.testing.assert_close(jf(x), f(x))
        for _ in range(2):
            x = torch.randn(4)
            torch.testing.assert_close(jf(x), f(x))
        print("PASS")
    """))


def test_other_threads_run_while_an_operator_computes():
    # With a switch interval far longer than the test, the main thread gives the GIL away
    # only where a call releases it: eager releases it around each operator, and so must a
    # jitted function's native program (boxed calls, computing fast paths).
    _ok(_run("""
        import sys, threading, time, torch, trident

        torch.set_num_threads(1)

        def f(a, b):
            return torch.relu(torch.mm(a, b)) * 2  # mm and relu: fast paths; mul: boxed

        def g(a, b):
            return torch.addmm(b, a, b)  # a boxed operator

        a, b = torch.randn(768, 768), torch.randn(768, 768)
        count = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                count[0] += 1
                time.sleep(0)  # hands the GIL back as soon as the main thread wants it

        progress = {}
        for name, fn in (("f", f), ("g", g)):
            jf = trident.jit(fn)
            for _ in range(2):
                torch.testing.assert_close(jf(a, b), fn(a, b))
            for mode, call in (("eager", fn), ("trident", jf)):
                old = sys.getswitchinterval()
                sys.setswitchinterval(100.0)
                stop.clear()
                t = threading.Thread(target=spin)
                t.start()
                try:
                    c0 = count[0]
                    for _ in range(3):
                        call(a, b)
                    progress[name, mode] = count[0] - c0
                finally:
                    stop.set()
                    t.join()
                    sys.setswitchinterval(old)
        print(progress)
        for name in ("f", "g"):
            if progress[name, "eager"] < 20:
                print("SKIP: the other thread hardly ran under eager either")
                continue
            # holding the GIL, the other thread gets a couple of iterations at most
            assert progress[name, "trident"] >= progress[name, "eager"] / 4, progress
        print("PASS")
    """))


def test_runtime_can_be_built_ahead_of_the_first_call():
    p = subprocess.run([sys.executable, "-m", "trident.native"], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "trident runtime ready:" in p.stdout and "_trident_rt" not in p.stderr, p.stdout
