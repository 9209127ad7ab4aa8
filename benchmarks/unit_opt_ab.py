"""A version unit's optimisation level (TRIDENT_VERSION_OPT): its compile time at a miss against
the warm call's host time, -O1 (the default) and -O0 in one process.

    python benchmarks/unit_opt_ab.py [--device cuda|cpu] [--flaggems] [--rounds 15]
                                     [--calls 2000] [--base-runtime DIR] [--out FILE]

Per function and level: a fresh copy of the function under `trident.jit` (its own code object,
so its own versions), in a fresh Trident build cache; two shapes, each a miss whose version unit
is compiled at that level (the second is the later-shape miss: the first shape's unit is
static, the second a dynamic version, as automatic dynamic shapes make it).  Reported: each
miss's compile phase (the version unit) and its total; then the warm host time per call (calls
back to back on the second shape, the levels interleaved round by round, median over rounds of
the per-call mean).  Functions: on CUDA the Triton host code of trident/examples (`silu`,
`rms_norm`) and, with --flaggems, FlagGems' silu, add and rms_norm; on CPU an RMS norm and a
pointwise chain of ATen operators.

`--base-runtime DIR` compares generated-code support instead of levels, both at the default
level: `base` builds its versions with the C headers and `scm_main.c` of DIR (another checkout's
`trident/runtime`, e.g. from `git archive`), `new` with this checkout's; the C++ runtime (built
first, from this checkout) and the code generator are this checkout's for both, so DIR's
`trident_rt.h` must declare the same api table.  A same-process A/B: the host columns of two
separate runs differ more between processes than a change of this kind does.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import report_info  # noqa: E402

LEVELS = ("-O1", "-O0")


def _variant(name: str, base_runtime: str | None):
    """Set up the build for variant `name`: an optimisation level, or `base` / `new` (the
    runtime folder the version units are compiled against)."""
    if base_runtime is None:
        os.environ["TRIDENT_VERSION_OPT"] = name
        return
    from trident.native import build

    build.RUNTIME_DIR = Path(base_runtime).resolve() if name == "base" else _NEW_RUNTIME[0]
    build._header.cache_clear()
    build._pch_state.clear()


_NEW_RUNTIME: list = []


def _fresh(fn, tag: str):
    """A copy of `fn` with a code object of its own (another name: Dynamo keeps its automatic
    dynamic state per code object, and equal code objects share it)."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{tag}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)


def cases(a, torch):
    dev = a.device
    bf = torch.bfloat16 if dev == "cuda" else torch.float32

    def r(*s):
        return torch.randn(*s, device=dev, dtype=bf)

    out = []
    if dev == "cuda":
        from trident.examples import triton_kernels as tk

        def tt_silu(x):
            return tk.silu(x)

        def tt_rms_norm(x, w):
            return tk.rms_norm(x, w)

        out += [("tt_silu", tt_silu, lambda n: (r(n, 4096),)),
                ("tt_rms_norm", tt_rms_norm, lambda n: (r(n, 4096), r(4096)))]
        if a.flaggems:
            import flag_gems

            def fg_silu(x):
                return flag_gems.ops.silu(x)

            def fg_add(x, y):
                return flag_gems.ops.add(x, y)

            def fg_rms_norm(x, w):
                return flag_gems.ops.rms_norm(x, [x.shape[-1]], w, 1e-6)

            out += [("fg_silu", fg_silu, lambda n: (r(n, 4096),)),
                    ("fg_add", fg_add, lambda n: (r(n, 4096), r(n, 4096))),
                    ("fg_rms_norm", fg_rms_norm, lambda n: (r(n, 4096), r(4096)))]
    else:
        def rms_norm(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        def chain(x, y):
            return ((x * 2 + y).relu() - 1).sigmoid() * y

        out += [("rms_norm", rms_norm, lambda n: (r(n, 256), r(256))),
                ("chain", chain, lambda n: (r(n, 256), r(n, 256)))]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--flaggems", action="store_true")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--base-runtime", default=None,
                    help="compare versions built against this runtime folder's C headers and "
                         "scm_main.c (base) with this checkout's (new), instead of -O1 / -O0")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    variants = LEVELS if a.base_runtime is None else ("base", "new")
    os.environ["TRIDENT_CACHE_DIR"] = tempfile.mkdtemp(prefix="trident_unit_opt_")
    os.environ["TRIDENT_CACHE"] = "off"
    import torch

    import trident

    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    warm = trident.jit(lambda x: x + 1)  # Dynamo's import, the runtime: not counted
    warm(torch.ones(3, device=a.device))
    from trident.native import build

    _NEW_RUNTIME.append(build.RUNTIME_DIR)
    rows = []
    for name, fn, make in cases(a, torch):
        fns, misses = {}, {}
        for level in variants:
            _variant(level, a.base_runtime)
            f = fns[level] = trident.jit(_fresh(fn, level.strip("-")))
            misses[level] = []
            for n in (16, 64):
                args = make(n)
                before = len(trident.stats(f)["miss_phases"])
                sync()
                t = time.perf_counter()
                res = f(*args)
                sync()
                wall = time.perf_counter() - t
                torch.testing.assert_close(res, fn(*args), atol=2e-2, rtol=2e-2)
                phases = trident.stats(f)["miss_phases"]  # none: that call ran eagerly
                ph = phases[-1] if len(phases) > before else {}
                misses[level].append((wall, ph.get("compile", 0.0)))
        os.environ.pop("TRIDENT_VERSION_OPT", None)
        _variant("new", a.base_runtime) if a.base_runtime else None
        args = make(64)
        host = {level: [] for level in variants}
        for _ in range(a.rounds):
            for level in variants:
                f = fns[level]
                for _ in range(50):
                    f(*args)
                sync()
                t = time.perf_counter()
                for _ in range(a.calls):
                    f(*args)
                host[level].append((time.perf_counter() - t) / a.calls * 1e6)
                sync()
        hits = {level: sum(trident.stats(fns[level])["hits"]) for level in variants}
        rows.append((name, misses, {k: statistics.median(v) for k, v in host.items()}, hits))
        print(name, {k: [f"{w:.3f}s/{c * 1e3:.0f}ms" for w, c in v] for k, v in misses.items()},
              {k: f"{statistics.median(v):.2f} us" for k, v in host.items()}, flush=True)

    lo, hi = variants[1], variants[0]  # the ratio's numerator and denominator
    title = ("Version unit at -O1 vs -O0" if a.base_runtime is None else
             f"Version units against {a.base_runtime} (base) vs this checkout (new)")
    lines = [f"# {title} ({a.device})", "",
             f"- date: {datetime.date.today()}", f"- commit: {report_info.commit()}",
             f"- machine: {report_info.machine(torch)}",
             f"- command: `python benchmarks/unit_opt_ab.py {' '.join(sys.argv[1:])}`".rstrip(),
             f"- method: per variant a fresh function copy; misses: first "
             f"shape (16 rows) then the later shape (64 rows); host: {a.calls} calls back to "
             f"back per round, variants interleaved, median of {a.rounds} rounds; a warm-up function "
             "first (Dynamo's import, the runtime).", "",
             "| function | level | first miss s (unit compile ms) | later miss s (unit compile "
             f"ms) | warm host us/call | {lo} / {hi} host |",
             "|---|---|---:|---:|---:|---:|"]
    for name, misses, host, hits in rows:
        for level in variants:
            (w1, c1), (w2, c2) = misses[level]
            ratio = f"{host[lo] / host[hi]:.3f}" if level == lo else ""
            lines.append(f"| {name} | {level} | {w1:.3f} ({c1 * 1e3:.0f}) | {w2:.3f} "
                         f"({c2 * 1e3:.0f}) | {host[level]:.2f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    stem = "unit_opt_ab" if a.base_runtime is None else "runtime_ab"
    out = Path(a.out or ROOT / "benchmarks" / "results" / "latest" / f"{stem}_{a.device}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
