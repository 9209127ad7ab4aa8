"""Where a specialization miss spends its time, next to torch.compile's recompile.

    python benchmarks/miss_profile.py [--device cpu|cuda] [--flaggems] [--grow N]
                                      [--cases a,b] [--repeat N] [--out FILE]

For each function below, called with a sequence of shapes, the run times every call that
misses (Trident) or recompiles (torch.compile), interleaved shape by shape in one process:

- Trident: the miss's wall time and its phases from `trident.stats(f)["miss_phases"]`:
  capture (Dynamo's trace and Trident's checks), run (the capturing call's operators and
  launches: a Triton kernel new to the process is JIT-compiled there, as an eager call at
  that shape would), guards
  (Dynamo's guards translated), lower (host IR), codegen (C text), compile (the version's
  C unit; the other versions' objects come from the build cache), link (dispatcher unit and
  link of the SCM), load (dlopen and init), persist (the record a later process reads);
- torch.compile(backend="inductor") and torch.compile(backend="eager") of the same function
  (a separate code object, same `dynamic`), the call with the same new shape.

Functions (CPU; `--device cuda` runs the same on the GPU):
- `pointwise`: `(x * 2 + y).relu() - 1`, dynamic=False: every shape is a new version;
- `scan`: `torch.cumsum(x, -1) * 0.5`, dynamic=None (torch.compile's automatic dynamic): the
  first shape is a static version, the second one a dynamic version, later 2-D shapes hit it,
  a 3-D shape is a new dynamic version;
- `scan_dyn`: the same with dynamic=True (every version dynamic: new ndim / dtype);
- `norm`: a layer norm written with eight operators, dynamic=False;
- `pow2_tile` (only with `--cases pow2_tile`, where Triton imports): `min(512, triton.next_power_of_2(x.numel()))`, FlagGems'
  pointwise tile size without its kernel, dynamic=None, 16-16384 rows of 256: the
  power-of-two ranges of TRIDENT_POW2_BUCKETS, until two of them differ only in their size
  guards and the function's captures keep the power symbolic;
- with Triton (`--device cuda`): `silu` (trident/examples/triton_kernels.py, a Triton
  launch); with `--flaggems`: FlagGems' `add`, `mul`, `silu` (its pointwise operators,
  bf16, 1-1024 rows of 4096) and `cumsum` (flag_gems.ops.<op>.<op>), torch.compile of the
  torch operator and of the FlagGems function itself for the same shapes.
- `--repeat N`: N rounds of the cases, each with new functions and fresh caches (Inductor's
  in-memory caches stay warm); the comparisons add per-shape medians.
- `--grow N`: the pointwise function with N shapes, so that later misses rebuild an SCM of
  many versions: the phases of the first and last five misses.

The first calls of the process pay Dynamo's and the runtime's imports and the first
recompile with symbolic sizes: they are a warm-up on other functions (two shapes each, Trident
and Inductor), not counted.  Trident and Inductor build in fresh temporary caches (both
compile a new shape's code cold).  The report, with date, commit and machine, goes to
benchmarks/results/latest/miss_profile.md unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
import report_info  # noqa: E402

PHASES = ("capture", "run", "guards", "lower", "codegen", "compile", "link", "load", "persist")

SOURCES = {
    "pointwise": "def f(x, y):\n    return (x * 2 + y).relu() - 1\n",
    "scan": "def f(x):\n    return torch.cumsum(x, -1) * 0.5\n",
    "norm": ("def f(x, w, b):\n"
             "    m = x.mean(-1, keepdim=True)\n"
             "    d = x - m\n"
             "    v = (d * d).mean(-1, keepdim=True)\n"
             "    return d * torch.rsqrt(v + 1e-5) * w + b\n"),
    # FlagGems' pointwise tile size (utils/shape_utils.py heuristics_for_tile_size), without
    # a kernel: Triton's own next_power_of_2 on a dynamic size (needs Triton importable)
    "pow2_tile": ("def f(x):\n"
                  "    tile = min(512, triton.next_power_of_2(x.numel()))\n"
                  "    return x.view(-1, 8).sum(-1) * tile\n"),
}


def make(name: str, tag: str = ""):
    """A fresh function object with its own code object (Dynamo caches per code object) and
    source name `<miss_profile TAG>` (Dynamo's automatic-dynamic state is kept per file,
    line and name: each case and mode has its own)."""
    import torch

    ns = {"torch": torch}
    if name == "pow2_tile":
        import triton

        ns["triton"] = triton
    _exec(SOURCES[name], f"<miss_profile {tag or name}>", ns)
    return ns["f"]


def _exec(src: str, filename: str, ns: dict) -> None:
    """exec `src` as the file `filename`, with its lines in linecache: torch.compile before
    2.13 traces a function without a source file through one shared wrapper
    (`external_utils.wrap_inline`), whose single code object then reaches Dynamo's recompile
    limit across cases and modes, after which every torch.compile call ran eagerly."""
    import linecache

    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)


def cases(a, torch, sfx: str = ""):
    """(name, maker, dynamic, inputs) per case; `sfx` (--repeat's round) goes into every
    source name, so that each round's functions are new to Dynamo."""
    dev = a.device
    r = lambda *s, dt=torch.float32: torch.randn(*s, device=dev, dtype=dt)  # noqa: E731
    out = [
        ("pointwise", make, False, [(r(n), r(n)) for n in (1000, 1500, 2000, 2500, 3000)]),
        ("scan", make, None, [(r(4, 500),), (r(4, 700),), (r(8, 900),), (r(2, 3, 400),)]),
        ("scan_dyn", lambda mode: make("scan", f"scan_dyn {mode}{sfx}"), True,
         [(r(4, 500),), (r(2, 3, 400),), (r(4, 500, dt=torch.float64),)]),
        ("norm", make, False, [(r(8, n), r(n), r(n)) for n in (256, 384, 512, 640)]),
    ]
    # only where asked for (--cases pow2_tile): Inductor's recompile of it took 3 minutes on
    # the CPU (sympy over Triton's bit arithmetic)
    if "pow2_tile" in a.cases.split(",") and importlib.util.find_spec("triton") is not None:
        out.append(("pow2_tile", make, None,
                    [(r(n, 256),) for n in (16, 64, 256, 1024, 4096, 16384)]))
    if dev == "cuda":
        try:
            from trident.examples import triton_kernels as tk
        except ImportError:
            tk = None
        if tk is not None:
            def silu(x):
                return tk.silu(x)
            out.append(("triton_silu", lambda _: _fresh(silu), None,
                        [(r(n, 4096, dt=torch.bfloat16),) for n in (1, 16, 64, 256)]))
    if a.flaggems:
        try:
            import flag_gems  # noqa: F401
        except ImportError:
            print("flag_gems is not importable: --flaggems skipped", flush=True)
        else:
            rows_h = [(t, 4096) for t in (1, 16, 64, 256, 1024)]
            vocab = [(1, 2048), (1, 32000), (4, 32000), (16, 32000), (64, 32000)]
            fg_add = importlib.import_module("flag_gems.ops.add").add
            fg_cumsum = importlib.import_module("flag_gems.ops.cumsum").cumsum
            out.append(("flaggems_add", _pair(fg_add, torch.add, "flaggems_add" + sfx), None,
                        [(r(*s, dt=torch.bfloat16), r(*s, dt=torch.bfloat16))
                         for s in rows_h]))
            fg_mul = importlib.import_module("flag_gems.ops.mul").mul
            fg_silu = importlib.import_module("flag_gems.ops.silu").silu
            out.append(("flaggems_mul", _pair(fg_mul, torch.mul, "flaggems_mul" + sfx), None,
                        [(r(*s, dt=torch.bfloat16), r(*s, dt=torch.bfloat16))
                         for s in rows_h]))
            out.append(("flaggems_silu", _pair(fg_silu, torch.nn.functional.silu,
                                               "flaggems_silu" + sfx), None,
                        [(r(*s, dt=torch.bfloat16),) for s in rows_h]))
            out.append(("flaggems_cumsum", _pair(lambda x: fg_cumsum(x, -1),
                                                 lambda x: torch.cumsum(x, -1),
                                                 "flaggems_cumsum" + sfx), None,
                        [(r(*s),) for s in vocab]))
    return out


def _fresh(fn):
    """A copy of `fn` with its own code object."""
    import types

    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def _pair(trident_fn, torch_fn, case):
    """Trident gets the FlagGems function; torch.compile the torch operator of the same name.
    Each mode's function is compiled from its own source name: Dynamo keeps its automatic-
    dynamic state per (file, line, name), which one shared `def` line would carry from one
    case (or mode) to the next."""
    def mk(mode):
        ns = {"fn": trident_fn if mode in ("trident", "trident_bg", "same", "same_inductor")
              else torch_fn}
        _exec("def f(*args):\n    return fn(*args)\n", f"<miss_profile {case} {mode}>", ns)
        return ns["f"]
    return mk


def _s(t) -> str:
    return "failed" if t is None else f"{t:.3f}"


def _cell(r, k) -> str:
    if r.get(k) is None:
        return "failed"
    return f"{r[k]:.3f}" + ("" if r[k + "_recompiled"] else " hit")


def sync(torch, dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def run_case(a, torch, trident, name, maker, dynamic, inputs, sfx: str = ""):
    """Per shape: Trident's miss (wall, phases) and torch.compile's recompile, interleaved."""
    from torch._dynamo.utils import counters

    if maker is make:
        maker = lambda mode: make(name, f"{name} {mode}{sfx}")  # noqa: E731
    tf = trident.jit(maker("trident"), dynamic=dynamic, max_versions=64)
    # --background: the same function again, its misses built in a thread
    tb = trident.jit(maker("trident_bg"), dynamic=dynamic, max_versions=64) \
        if a.background else None
    compiled = {b: torch.compile(maker(b), backend=b, dynamic=dynamic)
                for b in ("inductor", "eager")}
    if name.startswith("flaggems"):
        # Dynamo alone on the FlagGems function Trident captures: the floor of its capture
        compiled["same"] = torch.compile(maker("same"), backend="eager", dynamic=dynamic)
        # torch.compile of that same function: what its user would run instead of Trident
        compiled["same_inductor"] = torch.compile(maker("same_inductor"), backend="inductor",
                                                  dynamic=dynamic)
    rows = []
    for k, args in enumerate(inputs):
        shape = "x".join(map(str, args[0].shape)) + ("" if args[0].dtype == inputs[0][0].dtype
                                                     else f" {str(args[0].dtype)[6:]}")
        row = {"shape": shape}
        misses, tier_ups = trident.stats(tf)["misses"], trident.stats(tf)["tier_ups"]
        sync(torch, a.device)
        prof = _PROFILES.get(name) or _PROFILES.get(f"{name}@{shape}")
        t = time.perf_counter()
        if prof is not None:
            prof.enable()
        tf(*args)
        sync(torch, a.device)
        if prof is not None:
            prof.disable()
        row["trident"] = time.perf_counter() - t
        trident.wait(tf)  # its full-level rebuild (TRIDENT_TIER_UP), before the others run
        st = trident.stats(tf)
        row["full"] = time.perf_counter() - t if st["tier_ups"] > tier_ups else None
        row["miss"] = st["misses"] > misses
        if row["miss"] and st["miss_phases"]:
            row["phases"] = st["miss_phases"][-1]
        if tb is not None:
            from trident import config

            misses = trident.stats(tb)["misses"]
            sync(torch, a.device)
            t = time.perf_counter()
            # its own build cache (else its units are the Trident function's, found built)
            with config.scope(TRIDENT_BACKGROUND_BUILD="1", **a.bg_cache):
                tb(*args)
                sync(torch, a.device)
                row["bg"] = time.perf_counter() - t
                trident.wait(tb)
            row["bg_ready"] = time.perf_counter() - t
            st = trident.stats(tb)
            row["bg_miss"] = st["misses"] > misses
            if row["bg_miss"] and st["miss_phases"]:
                row["bg_phases"] = st["miss_phases"][-1]
        for b, cf in compiled.items():
            frames = counters["frames"]["ok"] + counters["frames"]["total"]
            sync(torch, a.device)
            t = time.perf_counter()
            try:
                cf(*args)
                sync(torch, a.device)
            except Exception as e:  # noqa: BLE001 - a compiler that fails is reported
                # (Inductor on FlagGems' add: a generated module with a syntax error)
                row[b] = None
                row[b + "_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                print(f"{name} {shape}: torch.compile {b} failed: {row[b + '_error']}",
                      flush=True)
                compiled[b] = torch._dynamo.disable(cf)  # not again for the next shapes
                row[b + "_recompiled"] = False
                continue
            row[b] = time.perf_counter() - t
            row[b + "_recompiled"] = counters["frames"]["ok"] + counters["frames"]["total"] \
                > frames
        rows.append(row)
        print(f"{name} {shape}: trident {row['trident']:.3f} s"
              f"{'' if row['miss'] else ' (hit)'}"
              + (f", background {row['bg']:.3f} s (native after {row['bg_ready']:.3f} s)"
                 if tb is not None else "") + f", inductor {_s(row['inductor'])} s, "
              f"eager backend {_s(row['eager'])} s", flush=True)
    text = trident.explain(tf)
    if a.explain:
        print(text, flush=True)
    _why_not_twins(name, trident.versions(tf))
    rows[-1]["versions"] = trident.stats(tf)["versions"]
    rows[-1]["pow2"] = (text.count("taken as its power-of-two range"),
                        "keep next_power_of_2 symbolic" in text)
    return rows


def _why_not_twins(name, versions) -> None:
    """Print what differs between consecutive power-of-two-range versions that did not count
    as twins (the buckets then stay; docs/internals.md)."""
    from trident import scm

    buckets = [v for v in versions if scm._POW2_NOTE in v.notes]
    for a, b in zip(buckets, buckets[1:]):
        if any(n.startswith(scm._POW2_SYMBOLIC) for n in b.notes):
            return
        diff = [k for k in ("program", "output", "nslots", "run_mode", "env")
                if getattr(a, k) != getattr(b, k)]
        ga = [g for g in a.guards if not isinstance(g, scm.ir.ShapeGuard)]
        gb = [g for g in b.guards if not isinstance(g, scm.ir.ShapeGuard)]
        if ga != gb:
            diff.append("guards: " + "; ".join(f"{x} | {y}" for x, y in zip(ga, gb) if x != y)
                        + (f" (counts {len(ga)} / {len(gb)})" if len(ga) != len(gb) else ""))
        if "program" in diff:
            diff += [f"instruction {i}: {x} | {y}" for i, (x, y)
                     in enumerate(zip(a.program, b.program)) if x != y][:3]
        print(f"{name}: versions {a.index} and {b.index} (power-of-two ranges) differ in: "
              + ("; ".join(diff) or "their CUBINs"), flush=True)


_PROFILES: dict = {}  # case name -> cProfile.Profile of its Trident calls (--profile)


def grow(a, torch, trident, n):
    f = trident.jit(make("pointwise", "grow"), dynamic=False, max_versions=n + 1)
    for k in range(n):
        x = torch.randn(k + 1, device=a.device)
        f(x, x)
        if (k + 1) % 50 == 0:
            print(f"grow: {k + 1} versions", flush=True)
    return trident.stats(f)["miss_phases"]


def fmt_phases(p: dict) -> str:
    return " | ".join(f"{1e3 * p.get(k, 0.0):.0f}" for k in PHASES)


def median_phases(ps: list) -> dict:
    return {k: statistics.median(p.get(k, 0.0) for p in ps) for k in PHASES}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--flaggems", action="store_true",
                    help="also FlagGems' add, mul, silu (pointwise) and cumsum")
    ap.add_argument("--grow", type=int, default=100,
                    help="versions of the growth run (0: none)")
    ap.add_argument("--warm-caches", action="store_true",
                    help="use the default Trident and Inductor caches instead of fresh ones")
    ap.add_argument("--cases", default="",
                    help="comma-separated case names to run (default: all), e.g. "
                         "flaggems_add,flaggems_cumsum")
    ap.add_argument("--profile", default="",
                    help="comma-separated case names whose Trident calls run under cProfile "
                         "(case@shape: that call only, e.g. flaggems_add@256x4096)")
    ap.add_argument("--profile-out", default="miss_profile.prof.txt",
                    help="where the --profile report goes (cumulative and own time)")
    ap.add_argument("--explain", action="store_true",
                    help="print trident.explain of each case's function after its calls")
    ap.add_argument("--background", action="store_true",
                    help="also the same functions with TRIDENT_BACKGROUND_BUILD=1: the miss "
                         "call's time and the time until its version serves natively")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of the cases, each with new functions (new code objects and "
                         "source names); the comparisons report per-shape medians")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.profile:
        import cProfile

        _PROFILES.update({c: cProfile.Profile() for c in a.profile.split(",") if c})

    if not a.warm_caches:
        tmp = Path(tempfile.mkdtemp(prefix="trident_miss_profile_"))
        # the runtime (built once per torch and Trident) comes from the configured cache
        runtime = Path(os.environ.get("TRIDENT_CACHE_DIR")
                       or Path.home() / ".cache" / "trident") / "runtime"
        if runtime.is_dir():
            (tmp / "runtime").symlink_to(runtime.resolve())
        os.environ["TRIDENT_CACHE_DIR"] = str(tmp)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
        (tmp / "background").mkdir(mode=0o700)
        a.bg_cache = {"TRIDENT_CACHE_DIR": str(tmp / "background")}
    else:
        a.bg_cache = {}
    import torch

    import trident

    torch.set_num_threads(1 if a.device == "cpu" else torch.get_num_threads())
    loads = [_load_average()]
    t = time.perf_counter()
    # imports Dynamo, builds or loads the runtime; the second shape's recompile is the first
    # with symbolic sizes (sympy's and the ShapeEnv's first use), which the first case measured
    # would otherwise pay, whichever of Trident and Inductor ran it first
    warm, warm_ind = trident.jit(lambda x: x + 1), torch.compile(lambda x: x - 1)
    for n in (3, 5):
        warm(torch.ones(n, 2, device=a.device))
        warm_ind(torch.ones(n, 2, device=a.device))
    if a.background:  # the background cache's shared objects (scm_main.c, the prelude)
        from trident import config

        with config.scope(**a.bg_cache):
            trident.jit(lambda x: x + 2)(torch.ones(3, device=a.device))
    warm_s = time.perf_counter() - t

    results = {}
    keep = {c for c in a.cases.split(",") if c}
    for rnd in range(a.repeat):
        sfx = f" r{rnd}" if rnd else ""
        if rnd and not a.warm_caches:  # each round cold: fresh Trident and Inductor caches
            tmp_r = Path(tempfile.mkdtemp(prefix=f"trident_miss_profile_r{rnd}_"))
            if runtime.is_dir():
                (tmp_r / "runtime").symlink_to(runtime.resolve())
            os.environ["TRIDENT_CACHE_DIR"] = str(tmp_r)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_r / "inductor")
        for name, maker, dynamic, inputs in cases(a, torch, sfx):
            if keep and name not in keep:
                continue
            torch._dynamo.reset()  # each case from a clean Dynamo: FlagGems' operators share
            # code objects (PointwiseDynamicFunction.__call__), whose frames otherwise reach
            # Dynamo's recompile limit in a later case, which torch.compile then runs eagerly
            results[name + (f" (round {rnd + 1})" if rnd else "")] = (
                dynamic, run_case(a, torch, trident, name, maker, dynamic, inputs, sfx))
    if _PROFILES:
        _write_profiles(Path(a.profile_out))
    grown = grow(a, torch, trident, a.grow) if a.grow else []
    loads.append(_load_average())

    lines = [
        f"# Specialization miss vs torch.compile recompile ({a.device})", "",
        f"- date: {datetime.date.today()}",
        f"- commit: {report_info.commit()}",
        f"- machine: {report_info.machine(torch, threads=True)}",
        f"- load average before / after: {loads[0]} / {loads[1]}",
        f"- command: `python benchmarks/miss_profile.py {' '.join(sys.argv[1:])}`".rstrip(),
        f"- caches: {'the default ones' if a.warm_caches else 'fresh temporary Trident and Inductor caches'}",
        f"- warm-up (imports, runtime, first Dynamo and Inductor use; not counted): {warm_s:.2f} s",
        "",
        "Seconds per call with a new shape (a miss / recompile); `hit` where the call did not miss.",
        "`less run`: Trident's miss without its capturing run (the call's own work, with any",
        "Triton JIT compile of a kernel new to the process, which eager pays at that shape too).",
        "`full level after s`: until the SCM rebuilt at full optimisation in a thread (the",
        "miss's own build compiles its new unit at -O0; TRIDENT_TIER_UP) serves, from the call's",
        "start (the other columns are timed after it).",
        "`Dynamo, same fn`: torch.compile(backend=\"eager\") of the FlagGems function itself",
        "(after Trident's call, so Triton's kernels are compiled): Dynamo's own trace of that code;",
        "`inductor, same fn`: torch.compile (inductor) of the FlagGems function itself.",
        "Trident's phases in ms: " + ", ".join(PHASES) + ".",
        *(["`background s`: the same function, another code object, with",
           "TRIDENT_BACKGROUND_BUILD=1 and its own fresh build cache, called after Trident's:",
           "the missing call returns once",
           "its version is captured; `native after s`: until that version is installed (its C",
           "compiled and loaded in a thread; calls that miss meanwhile run eagerly)."]
          if a.background else []), ""]
    later_ok, later_same, later_bg = [], [], []
    for name, (dynamic, rows) in results.items():
        same = "same" in rows[0]
        bg = "bg" in rows[0]
        lines += [f"## {name} (dynamic={dynamic})", "",
                  "| shape | Trident s | less run s | full level after s | "
                  + ("background s | native after s | " if bg else "")
                  + "inductor s | eager backend s | "
                  + ("Dynamo, same fn s | inductor, same fn s | " if same else "")
                  + " | ".join(PHASES) + " |",
                  "|---|---:|---:|---:|" + ("---:|---:|" if bg else "") + "---:|---:|"
                  + ("---:|---:|" if same else "") + "---:|" * len(PHASES)]
        for k, r in enumerate(rows):
            tr = f"{r['trident']:.3f}" + ("" if r["miss"] else " hit")
            ind, eag = _cell(r, "inductor"), _cell(r, "eager")
            ph = fmt_phases(r["phases"]) if "phases" in r else " | ".join("" for _ in PHASES)
            own = (f"{r['trident'] - r['phases'].get('run', 0.0):.3f}" if "phases" in r
                   else "")
            sm = "".join(_cell(r, k) + " | " for k in ("same", "same_inductor") if same)
            bgc = (f"{r['bg']:.3f}" + ("" if r["bg_miss"] else " hit") + " | "
                   + (f"{r['bg_ready']:.3f}" if r["bg_miss"] else "") + " | ") if bg else ""
            full = f"{r['full']:.3f}" if r.get("full") is not None else ""
            lines.append(f"| {r['shape']} | {tr} | {own} | {full} | {bgc}{ind} | {eag} | {sm}{ph} |")
            if bg and k and r["bg_miss"]:
                later_bg.append((name, r["shape"], r["bg"], r["bg_ready"],
                                 r.get("same_inductor") if r.get("same_inductor_recompiled")
                                 else None, r["inductor"] if r["inductor_recompiled"] else None))
            if k and r["miss"] and r["inductor_recompiled"]:
                later_ok.append((name, r["shape"], r["trident"], r["inductor"]))
            if k and r["miss"] and r.get("same_inductor_recompiled"):
                later_same.append((name, r["shape"], r["trident"], r["same_inductor"]))
        if "versions" in rows[-1]:
            buckets, gave_way = rows[-1]["pow2"]
            lines.append(f"- Trident's versions after the last shape: {rows[-1]['versions']}"
                         + (f" ({buckets} with next_power_of_2 as a power-of-two range"
                            + ("; then symbolic" if gave_way else "") + ")" if buckets else ""))
        errors = {f"{b}: {r[b + '_error']}" for r in rows for b in ("inductor", "eager", "same",
                                                                    "same_inductor")
                  if r.get(b + "_error")}
        lines += [f"- torch.compile failed ({e})" for e in sorted(errors)]
        lines.append("")
    if later_ok:
        faster = sum(1 for *_, t, i in later_ok if t <= i)
        lines += [f"Later-shape misses (not a function's first call) that recompiled in both: "
                  f"Trident <= inductor in {faster} of {len(later_ok)}; median Trident "
                  f"{statistics.median(t for *_, t, _ in later_ok):.3f} s, inductor "
                  f"{statistics.median(i for *_, i in later_ok):.3f} s.", ""]
    if later_same:
        lines += ["Against torch.compile (inductor) of the same FlagGems function: "
                  + "; ".join(f"{n} {sh}: Trident {t:.3f} s, inductor {i:.3f} s"
                              for n, sh, t, i in later_same) + ".", ""]
    if later_same and a.repeat > 1:  # per case and shape over the rounds
        by: dict = {}
        for n, sh, t, i in later_same:
            by.setdefault((n.split(" (round")[0], sh), []).append((t, i))
        lines += [f"Medians over the {a.repeat} rounds, against torch.compile of the same "
                  "FlagGems function (rounds where Trident <= inductor): "
                  + "; ".join(f"{n} {sh}: Trident {statistics.median(t for t, _ in v):.3f} s, "
                              f"inductor {statistics.median(i for _, i in v):.3f} s "
                              f"({sum(1 for t, i in v if t <= i)} of {len(v)})"
                              for (n, sh), v in by.items()) + ".", ""]
    if later_bg:
        lines += ["With background builds, later-shape misses (call / native after; inductor on "
                  "the torch op, and on the same function where it recompiled): "
                  + "; ".join(f"{n} {sh}: {t:.3f} / {r:.3f} s (inductor {_s(i) if i else '-'}"
                              + (f", same fn {_s(si)}" if si else "") + ")"
                              for n, sh, t, r, si, i in later_bg) + ".", ""]
    if grown:
        n = len(grown)
        first, last = grown[1:6], grown[-5:]
        lines += [f"## growth: pointwise, dynamic=False, {n} versions", "",
                  "Median ms per phase over 5 misses.", "",
                  "| misses | total | " + " | ".join(PHASES) + " |",
                  "|---|---:|" + "---:|" * len(PHASES)]
        lo = max(1, n - 4)
        for label, ps in ((f"2-{min(6, n)} (SCM of 1-{min(5, n - 1)} versions)", first),
                          (f"{lo}-{n} (SCM of {lo - 1}-{n - 1} versions)", last)):
            if not ps:
                continue
            m = median_phases(ps)
            lines.append(f"| {label} | {1e3 * sum(m.values()):.0f} | {fmt_phases(m)} |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    out = Path(a.out) if a.out else ROOT / "benchmarks" / "results" / "latest" / \
        ("miss_profile.md" if a.device == "cpu" else f"miss_profile_{a.device}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")


def _write_profiles(path: Path) -> None:
    import io
    import pstats

    out = io.StringIO()
    for name, prof in _PROFILES.items():
        for key in ("cumulative", "tottime"):
            out.write(f"==== {name}: Trident's calls, by {key}\n")
            pstats.Stats(prof, stream=out).sort_stats(key).print_stats(45)
    path.write_text(out.getvalue())
    print(f"wrote {path}")


def _load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
