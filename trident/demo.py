"""`python -m trident.demo`: eager vs Trident on real examples.

On CPU: an RMS norm and relu(x * w + b), each run eagerly, through
torch.compile (inductor) and through trident.jit; every result is checked
against eager, then warm per-call latency is printed.  Then
`trident.explain` of the RMS norm.  Where CUDA and Triton are present, the
Triton RMS norm example is timed on the GPU too.  Intra-op threads are set to
1: tensors this small gain nothing from them, and OpenMP wake-ups make the
timings of a small shared machine swing.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
import types

import torch

import trident


def rms_norm(x, w, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def linear_relu(x, w, b):
    return torch.relu(x * w + b)


def _copy(fn: types.FunctionType) -> types.FunctionType:
    """`fn` with its own code object: Dynamo caches per code object and
    trident.jit clears that cache when it captures, so torch.compile and
    trident.jit get one copy each."""
    f = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                           fn.__defaults__, fn.__closure__)
    f.__qualname__ = fn.__qualname__
    return f


def _per_call_us(f, args, calls: int, rounds: int, sync=None) -> float:
    """Median over `rounds` of the mean time of `calls` calls, in us."""
    out = []
    for _ in range(rounds):
        if sync:
            sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            f(*args)
        if sync:
            sync()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


def _same(got, want) -> str:
    if torch.equal(got, want):
        return "equal"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    return "close"


def _cpu_example(title: str, fn, args):
    print(f"\n{title}  ({', '.join(str(tuple(a.shape)) for a in args)}, float32, CPU)")
    want = fn(*args)
    modes = [("eager", fn, 3000)]
    t0 = time.perf_counter()
    compiled = torch.compile(_copy(fn))
    modes.append(("torch.compile", compiled, 500))
    check = {"torch.compile": _same(compiled(*args), want)}
    first = {"torch.compile": time.perf_counter() - t0}
    t0 = time.perf_counter()
    jitted = trident.jit(_copy(fn))
    check["trident"] = _same(jitted(*args), want)
    first["trident"] = time.perf_counter() - t0
    modes.append(("trident", jitted, 3000))
    us = {}
    for name, f, calls in modes:
        for _ in range(50):  # warm-up
            f(*args)
        trident.wait()  # the miss's full-level rebuild (TRIDENT_TIER_UP)
        us[name] = _per_call_us(f, args, calls, rounds=5)
    for name, _, _ in modes:
        extra = "" if name == "eager" else (
            f"   result {check[name]} to eager; first call {first[name]:.2f} s")
        print(f"  {name:14s} {us[name]:8.2f} us/call{extra}")
    reason = trident.stats(jitted)["fallback_reason"]
    if reason:
        print(f"  trident fell back to eager: {reason}")
    print(f"  trident vs eager: {us['eager'] / us['trident']:.2f}x, "
          f"vs torch.compile: {us['torch.compile'] / us['trident']:.2f}x")
    return jitted


def _triton_example_module():
    """The Triton RMS norm example: trident.examples.triton_rms_norm, or the
    rms_norm of trident.examples.triton_kernels where only that exists."""
    errors = []
    for name in ("trident.examples.triton_rms_norm", "trident.examples.triton_kernels"):
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            errors.append(f"{name}: {e}")
            continue
        if hasattr(mod, "rms_norm"):
            return mod, None
        errors.append(f"{name} has no rms_norm")
    return None, "; ".join(errors)


def _cuda_example() -> bool:
    """Time the Triton RMS norm on CUDA; False if it ran and failed."""
    print("\nTriton RMS norm on CUDA")
    try:
        import triton  # noqa: F401
    except ImportError as e:
        print(f"  skipped: triton does not import ({e})")
        return True
    mod, why = _triton_example_module()
    if mod is None:
        print(f"  skipped: no Triton example to run ({why})")
        return True
    fn = mod.rms_norm
    print(f"  {mod.__name__}.rms_norm, x (32, 128) float32, w (128,)")
    try:
        x = torch.randn(32, 128, device="cuda")
        w = torch.randn(128, device="cuda")
        want = fn(x, w)
        jitted = trident.jit(_copy(fn))
        got = jitted(x, w)
        torch.testing.assert_close(got, want)
        for _ in range(50):
            fn(x, w)
            jitted(x, w)
        trident.wait()  # the miss's full-level rebuild (TRIDENT_TIER_UP)
        sync = torch.cuda.synchronize
        eager = _per_call_us(fn, (x, w), 2000, rounds=5, sync=sync)
        tri = _per_call_us(jitted, (x, w), 2000, rounds=5, sync=sync)
    except Exception as e:  # noqa: BLE001 - a demo reports, the tests pin down
        print(f"  failed: {type(e).__name__}: {e}")
        return False
    st = trident.stats(jitted)
    print(f"  eager (Triton launches from Python) {eager:8.2f} us/call")
    print(f"  trident                             {tri:8.2f} us/call   result matches eager")
    if st["fallback_reason"]:
        print(f"  trident fell back to eager, so this compares eager with eager: "
              f"{st['fallback_reason']}")
    else:
        print(f"  trident vs eager: {eager / tri:.2f}x   versions={st['versions']} "
              f"hits={st['hits']}")
    return True


def main() -> int:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"Trident {trident.__version__} demo: torch {torch.__version__}, "
          f"Python {sys.version.split()[0]}, intra-op threads 1")
    print("(the first run builds Trident's C++ runtime once, ~25 s; then each capture "
          "compiles one small C file)")
    rms = _cpu_example("RMS norm: x * rsqrt(mean(x^2, -1) + eps) * w", rms_norm,
                       (torch.randn(32, 128), torch.randn(128)))
    _cpu_example("relu(x * w + b)", linear_relu,
                 (torch.randn(16, 16), torch.randn(16, 16), torch.randn(16)))
    print("\ntrident.explain(rms_norm):")
    print(trident.explain(rms))
    if not torch.cuda.is_available():
        print("\nNo CUDA device: the Triton example is skipped.")
        return 0
    return 0 if _cuda_example() else 1


if __name__ == "__main__":
    sys.exit(main())
