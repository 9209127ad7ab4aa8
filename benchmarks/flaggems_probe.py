"""Probe: which FlagGems operators Trident captures, and why not the others.

For each operator: eager result, then `trident.jit(f, strict=True)` on a
fresh function; prints compiled / the refusal, a quick warm host latency of
eager FlagGems, Trident and the PyTorch op, and checks Trident against eager.
Dumps FlagGems' generated pointwise code to $OUT/fg_code for reading.

    python benchmarks/flaggems_probe.py [op ...]
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import types
import warnings

import torch

import trident


def _ops():
    import flag_gems.ops as O
    import torch.nn.functional as F

    d = "cuda"
    h = torch.float16
    r = lambda *s, dt=h: torch.randn(*s, device=d, dtype=dt)  # noqa: E731
    x = r(1024, 1024)
    w = r(4096)
    return {
        "silu": (lambda a: O.silu(a), (x,), F.silu),
        "add": (lambda a, b: O.add(a, b), (x, r(1024, 1024)), torch.add),
        "neg": (lambda a: O.neg(a), (x,), torch.neg),
        "pow": (lambda a: O.pow_tensor_scalar(a, 2.0), (x,), lambda a: torch.pow(a, 2.0)),
        "lt": (lambda a, b: O.lt(a, b), (x, r(1024, 1024)), torch.lt),
        "masked_fill": (lambda a, m: O.masked_fill(a, m, 0.5), (x, x > 0),
                        lambda a, m: a.masked_fill(m, 0.5)),
        "rms_norm": (lambda a, ww: O.rms_norm(a, [4096], ww, 1e-6), (r(64, 4096), w),
                     lambda a, ww: F.rms_norm(a, [4096], ww, 1e-6)),
        "embedding": (lambda wt, i: O.embedding(wt, i), (r(32000, 512),
                      torch.randint(0, 32000, (16,), device=d)),
                      lambda wt, i: F.embedding(i, wt)),
        "cumsum": (lambda a: O.cumsum(a, 1), (x,), lambda a: torch.cumsum(a, 1)),
        # the reduce-then-scan path, which launches with a grid of rank 4
        "cumsum_rows": (lambda a: O.cumsum(a, -1), (r(16, 32000, dt=torch.float32),),
                        lambda a: torch.cumsum(a, -1)),
        "sort": (lambda a: O.sort(a, -1), (r(64, 1024),), lambda a: torch.sort(a, -1)),
        "mm": (lambda a, b: O.mm(a, b), (r(64, 64), r(64, 64)), torch.mm),
        "addmm": (lambda c, a, b: O.addmm(c, a, b), (r(64), r(64, 64), r(64, 64)), torch.addmm),
        "bmm": (lambda a, b: O.bmm(a, b), (r(4, 64, 64), r(4, 64, 64)), torch.bmm),
        "cat": (lambda a, b, c: O.cat([a, b, c], 0), (r(64, 64), r(64, 64), r(64, 64)),
                lambda a, b, c: torch.cat([a, b, c], 0)),
        "softmax": (lambda a: O.softmax(a, -1), (x,), lambda a: torch.softmax(a, -1)),
        "conv2d": (lambda a, b: O.conv2d(a, b), (r(1, 16, 32, 32), r(32, 16, 3, 3)), F.conv2d),
        "mul": (lambda a, b: O.mul(a, b), (x, r(1024, 1024)), torch.mul),
        "gelu": (lambda a: O.gelu(a), (x,), F.gelu),
    }


def _time(f, args, n=200):
    for _ in range(20):
        f(*args)
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t = time.perf_counter_ns()
        f(*args)
        ts.append(time.perf_counter_ns() - t)
    torch.cuda.synchronize()
    ts.sort()
    return ts[len(ts) // 2] / 1000


def _refused_alone(entries, fn):
    """Each guard entry translated alone: every refusal, not only the first
    (guards that need the capture's shape data are skipped)."""
    import types as _t

    from trident.errors import UnsupportedError
    from trident.guards.translate import ConstPool, translate

    cap = _t.SimpleNamespace(shape_exprs=[], sizes_strides={}, global_state=b"",
                             tf_mode_stack_len=0)
    out = []
    for e in entries:
        try:
            translate([e], cap, fn, ConstPool(), None)
        except UnsupportedError as err:
            out.append(f"{e.guard_type}: {err}")
        except Exception:  # noqa: BLE001 - needs what a real capture has
            pass
    return sorted(set(out))


def main():
    out = os.environ.get("OUT", "/tmp/out")
    import flag_gems  # noqa: F401

    ops = _ops()
    names = sys.argv[1:] or list(ops)
    for name in names:
        body, args, ref = ops[name]
        try:
            want = body(*args)
        except Exception as e:  # noqa: BLE001
            print(f"[{name}] EAGER FAILS: {type(e).__name__}: {e}")
            continue

        def f(*a, _b=body):
            return _b(*a)

        # a code object of its own: Dynamo keeps automatic-dynamic state per code
        g = types.FunctionType(f.__code__.replace(co_name=f"fg_{name}"), f.__globals__,
                               f"fg_{name}", f.__defaults__)
        g.__kwdefaults__ = f.__kwdefaults__
        f = g
        jf = trident.jit(f)
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            try:
                jf(*args)
                jf(*args)
                got2 = jf(*args)
            except Exception as e:  # noqa: BLE001
                print(f"[{name}] RAISED {type(e).__name__}: {str(e)[:800]}")
                continue
        st = trident.stats(jf)
        ok = "?"
        try:
            if isinstance(want, (tuple, list)):
                for a, b in zip(want, got2):
                    torch.testing.assert_close(a, b)
            else:
                torch.testing.assert_close(want, got2)
            ok = "equal"
        except Exception as e:  # noqa: BLE001
            ok = f"MISMATCH {str(e)[:200]}"
        te, tt, tr = _time(body, args), _time(jf, args), _time(ref, args)
        state = "COMPILED" if st["fallback_reason"] is None else "FALLBACK"
        print(f"[{name}] {state} versions={st['versions']} hits={st['hits']} {ok} "
              f"host us: flaggems {te:.1f} trident {tt:.1f} torch {tr:.1f}")
        if st["fallback_reason"] is not None:
            print("   reason:", st["fallback_reason"][:600])
            from trident.capture import adapters

            torch._dynamo.reset()
            entries = []

            def keep(es):
                entries.extend(es)
                return [True] * len(es)

            try:
                with adapters.active(adapters.State()):
                    torch.compile(f, fullgraph=True, backend="eager",
                                  options={"guard_filter_fn": keep})(*args)
                print("   (plain Dynamo with adapters traced it)")
                for msg in _refused_alone(entries, f):
                    print("   refused guard:", msg[:300])
            except Exception as e:  # noqa: BLE001
                print("   dynamo:", "\n   ".join(str(e).splitlines()[:40]))
        elif os.environ.get("PROBE_EXPLAIN"):
            print(trident.explain(jf))

    try:
        from flag_gems.utils.code_cache import code_cache_dir

        src = code_cache_dir()
        shutil.copytree(src, os.path.join(out, "fg_code"), dirs_exist_ok=True)
        print("copied generated code from", src)
    except Exception as e:  # noqa: BLE001
        print("no code cache dump:", e)


if __name__ == "__main__":
    main()
