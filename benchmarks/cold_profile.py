"""Where a cold call's time goes: cProfile of the first call per (mode, operator, shape).

    python benchmarks/cold_profile.py [--ops add,silu] [--modes trident,compile_cpp]
                                      [--shapes 2] [--top 40] [--out FILE]
                                      [--provider flaggems|stub] [--device cuda|cpu]

The operators, their inputs and the modes are flaggems_ops.py's.  Per operator, eager runs
first on every shape (it compiles FlagGems' Triton kernels, as in flaggems_ops.py, so later
modes do not pay for that), then each mode on each shape: the first call of each shape is
profiled and timed, and a Trident function's `compile_seconds` (capture, guards+IR, build) is
printed beside it (and `trident.explain` goes to --out).  The one-time warm-ups (Trident's runtime build, a trivial torch.compile,
with the C++ wrapper for compile_cpp) are timed and profiled too, before any operator.

Writes the full cumulative-time listings to --out (default: stdout only gets a one-line
summary per call and the top entries by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flaggems_ops as fo  # noqa: E402

import trident  # noqa: E402


def profiled(label, fn, args, sync, top, sink):
    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    try:
        fn(*args)
        sync()
        err = ""
    except Exception as e:  # noqa: BLE001 - reported, the next call runs
        err = f" FAILED {type(e).__name__}: {str(e)[:200]}"
    pr.disable()
    dt = time.perf_counter() - t
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("cumulative").print_stats(top)
    sink.write(f"\n===== {label}: {dt:.3f} s{err}\n{s.getvalue()}")
    s2 = io.StringIO()
    pstats.Stats(pr, stream=s2).sort_stats("tottime").print_stats(8)
    own = [ln for ln in s2.getvalue().splitlines() if ln.strip()[:1].isdigit()][:8]
    print(f"== {label}: {dt:.3f} s{err}", flush=True)
    for ln in own:
        print("   own " + " ".join(ln.split()[1:2] + ln.split()[5:])[:150])
    return dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="add,silu")
    ap.add_argument("--modes", default="trident,compile,compile_cpp")
    ap.add_argument("--shapes", type=int, default=2)
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--out", default=None)
    ap.add_argument("--provider", choices=("flaggems", "stub"), default="flaggems")
    ap.add_argument("--device", default=None)
    a = ap.parse_args(argv)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    resolve = fo.resolver(a.provider)
    sink = open(a.out, "w") if a.out else io.StringIO()  # noqa: SIM115
    torch._dynamo.config.cache_size_limit = 64
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    x = torch.randn(8, device=device)

    def g(x):
        return x * 2 + 1

    with torch.no_grad():
        if "trident" in modes:
            from trident.native.build import runtime_module
            profiled("warm-up trident runtime", lambda: runtime_module(), (), sync, a.top, sink)
            profiled("warm-up trident jit", trident.jit(g), (x,), sync, a.top, sink)
        if any(m.startswith("compile") for m in modes):
            profiled("warm-up compile", torch.compile(g), (x,), sync, a.top, sink)
            torch._dynamo.reset()
        if "compile_cpp" in modes:
            profiled("warm-up compile_cpp",
                     torch.compile(g, options={"cpp_wrapper": True}), (x,), sync, a.top, sink)
            torch._dynamo.reset()
        for name in a.ops.split(","):
            op = fo.OP_BY_NAME[name]
            impl = resolve(op)
            shapes = op.shapes[:a.shapes]

            def inputs(si, s, op=op):
                gen = torch.Generator(device=device)
                gen.manual_seed(1000 * fo.OPS.index(op) + si)
                return op.make(s, op.dtype, device, gen)

            f = fo.make_f(impl, op.name)
            for si, s in enumerate(shapes):
                t = time.perf_counter()
                f(*inputs(si, s))
                sync()
                print(f"== eager {name} {fo.shape_label(op, s)}: "
                      f"{time.perf_counter() - t:.3f} s (not profiled)", flush=True)
            for mode in modes:
                torch._dynamo.reset()
                fn, _, tf = fo.build_callable(mode, op, impl)
                for si, s in enumerate(shapes):
                    profiled(f"{mode} {name} {fo.shape_label(op, s)}", fn, inputs(si, s), sync,
                             a.top, sink)
                if tf is not None:
                    sink.write(f"\n===== explain: {name}\n{trident.explain(tf)}\n")
                    for i, cs in enumerate(trident.stats(tf)["compile_seconds"]):
                        print(f"   version {i}: " + ", ".join(f"{k} {v:.3f} s"
                                                         for k, v in cs.items()), flush=True)
    if a.out:
        sink.close()
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
