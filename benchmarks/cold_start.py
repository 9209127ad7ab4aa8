"""Cold start from a warm disk cache: a fresh process's time to its first results.

    python benchmarks/cold_start.py [--runs 5] [--device cpu|cuda] [--flaggems] [--qwen3]
                                    [--profile NAME [--profile-out FILE]] [--keep DIR]
                                    [--out FILE]

On CPU, three small functions (silu(x) * w, an RMS norm, relu(x @ w + b) on (64, 256) float32
tensors); with `--device cuda`, the user-written Triton host code of trident/examples
(`silu`, the paper's `rms_norm`: allocation, variant choice, launch) and relu(x @ w + b) on
(64, 4096) bfloat16 tensors, plus FlagGems' silu, rms_norm and mm (the unmodified
`flag_gems.ops` functions, called from a one-line entry function) when flag_gems is
importable.  The functions live in a module written to a temporary folder.  Each measured run is a fresh Python
process that imports torch (not timed), then starts the clock, imports what it needs and the
module, and calls each function once on fresh inputs:

- `trident`: `@trident.jit`, with the records and builds an earlier process left
  (docs/cache.md): the first call of each function loads its versions from disk and is a native
  hit (the child checks: 0 captures, hits > 0, no C unit compiled);
- `trident, TRIDENT_CACHE=off`: the same, but each function is captured again by Dynamo (its C
  objects still come from the build cache): what persistence saves;
- `torch.compile`: the default (Inductor) backend with its on-disk caches warm (FX graph cache,
  AOTAutograd cache, in their own TORCHINDUCTOR_CACHE_DIR): Dynamo still traces each function
  in every new process;
- `eager`: the plain functions, no compiler: the floor (the imports, cuBLAS's and Triton's
  first use, a library's own first call) that every mode pays.

Reported per mode: the median over the runs of each function's first call, of the import (for
Trident: `import trident` and the module, whose `trident.jit` loads the runtime), and of the
total from the clock's start to the last function's first result, and what each compiler adds
over eager (its total minus eager's).  Before the measured runs, each mode runs twice to fill
its caches.  `--profile NAME[,NAME...]` adds a Trident-from-disk and an eager process with a cProfile of
each NAME's first call.  Results go to benchmarks/results/latest/cold_start.md
unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import report_info  # noqa: E402
CPU_NAMES = ("silu_mul", "rms_norm", "mlp")
CUDA_NAMES = ("tt_silu", "tt_rms_norm", "mlp")
FG_NAMES = ("fg_silu", "fg_rms_norm", "fg_mm")

MODULE = '''
import os

import torch

if os.environ["COLD_MODE"] == "compile":
    wrap = torch.compile
elif os.environ["COLD_MODE"] == "eager":
    def wrap(f):
        return f
else:
    import trident

    wrap = trident.jit


@wrap
def silu_mul(x, w):
    return torch.nn.functional.silu(x) * w


@wrap
def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@wrap
def mlp(x, w, b):
    return torch.relu(x @ w + b)


DEV = os.environ.get("COLD_DEVICE", "cpu")
DT = torch.float32 if DEV == "cpu" else torch.bfloat16
N = 256 if DEV == "cpu" else 4096

if DEV == "cuda":
    from trident.examples import triton_kernels as tk

    @wrap
    def tt_silu(x):
        return tk.silu(x)

    @wrap
    def tt_rms_norm(x, w):
        return tk.rms_norm(x, w)

    if os.environ.get("COLD_FLAGGEMS") == "1":
        import flag_gems

        @wrap
        def fg_silu(x):
            return flag_gems.ops.silu(x)

        @wrap
        def fg_rms_norm(x, w):
            return flag_gems.ops.rms_norm(x, [x.shape[-1]], w, 1e-6)

        @wrap
        def fg_mm(x, w):
            return flag_gems.ops.mm(x, w)


if os.environ.get("COLD_QWEN3") == "1":
    # Qwen3 at 2 layers (tiny dimensions on CPU, Qwen3-8B's on CUDA; random weights), its
    # decoder layers' forward compiled (llm_decode's "layer" region, KV-cache update
    # included): `qwen3` is a prefill of 8 tokens and two decode steps.
    import sys as _sys

    _sys.path.insert(0, os.path.join(os.environ["COLD_ROOT"], "benchmarks"))
    from llm_decode.models import model_config
    from llm_decode.modes import region_classes
    from transformers import AutoModelForCausalLM, DynamicCache

    class _Cfg:
        tiny, layers, attn, experts = DEV == "cpu", 2, "eager", "eager"

    QCFG = model_config("qwen3", _Cfg.tiny, 2, "eager", "eager")
    torch.manual_seed(0)
    with torch.device(DEV):
        QMODEL = AutoModelForCausalLM.from_config(QCFG, dtype=DT).eval().requires_grad_(False)
    QREGIONS = region_classes(QMODEL, ["layer"])
    QWRAPPED = {}
    for _k, _r in QREGIONS.items():
        QWRAPPED[_k] = wrap(_r.orig)
        _r.install(QWRAPPED[_k])

    def qwen3(ids):
        cache = DynamicCache(config=QCFG)
        with torch.no_grad():
            out = QMODEL(input_ids=ids, past_key_values=cache, use_cache=True)
            for _ in range(2):
                nxt = out.logits[:, -1:].argmax(-1)
                out = QMODEL(input_ids=nxt, past_key_values=cache, use_cache=True)
        return out.logits

    def qwen3_eager(ids):
        for r in QREGIONS.values():
            r.restore()
        try:
            return qwen3(ids)
        finally:
            for k, r in QREGIONS.items():
                r.install(QWRAPPED[k])


def inputs(name):
    if name == "qwen3":
        g = torch.Generator().manual_seed(int(os.environ.get("COLD_SEED", "0")))
        return (torch.randint(0, QCFG.vocab_size, (1, 8), generator=g).to(DEV),)
    x = torch.randn(64, N, device=DEV, dtype=DT)
    if name in ("mlp", "fg_mm"):
        w = torch.randn(N, N, device=DEV, dtype=DT) / N ** 0.5
        return (x, w, torch.randn(N, device=DEV, dtype=DT)) if name == "mlp" else (x, w)
    if name in ("tt_silu", "fg_silu"):
        return (x,)
    return x, torch.randn(N, device=DEV, dtype=DT)
'''

CHILD = '''
import json, os, sys, time

import torch

mode = os.environ["COLD_MODE"]
t0 = time.perf_counter()
if mode not in ("compile", "eager"):
    import trident
import cold_start_fns as m

t_import = time.perf_counter()


def _jitted(name):  # the trident.jit functions a name stands for
    return list(m.QWRAPPED.values()) if name == "qwen3" else [getattr(m, name)]


out = {"import_ms": 1e3 * (t_import - t0), "first_ms": {}, "checks": {}}
torch.manual_seed(int(os.environ.get("COLD_SEED", "0")))
args = {name: m.inputs(name) for name in NAMES}
t_args = time.perf_counter() - t_import  # not counted: input generation
PROFILE = set(filter(None, os.environ.get("COLD_PROFILE", "").split(",")))
out["profile"] = {}
# Python's full (generation-2) collections: the first one after the imports traverses every
# object torch and the libraries made (70-300 ms), and lands in whatever allocates then.
import gc
_gc = {"t": 0.0, "ms": 0.0}


def _gc_timer(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            _gc["t"] = time.perf_counter()
        else:
            _gc["ms"] += 1e3 * (time.perf_counter() - _gc["t"])


gc.callbacks.append(_gc_timer)
out["gc_ms"] = {}
for name in NAMES:
    fn = getattr(m, name)
    _gc["ms"] = 0.0
    if name in PROFILE:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t = time.perf_counter()
    r = fn(*args[name])
    if args[name][0].is_cuda:
        torch.cuda.synchronize()
    out["first_ms"][name] = 1e3 * (time.perf_counter() - t)
    out["gc_ms"][name] = _gc["ms"]
    if name in PROFILE:
        import io, pstats
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(60)
        out["profile"][name] = text.getvalue()
out["total_ms"] = 1e3 * (time.perf_counter() - t0 - t_args)
if mode not in ("compile", "eager"):  # each function was called once: a hit means its first call was one
    out["first_native"] = {name: all(sum(trident.stats(f)["hits"]) > 0 for f in _jitted(name))
                           for name in NAMES}
    # From disk: the seconds each loaded version's restore took (record read, constants
    # resolved, SCM found and loaded): what the first call spends before its first hit runs.
    out["restore_ms"] = {name: 1e3 * sum(
        c["guards_ir"] + c["build"] for f in _jitted(name)
        for c, o in zip(trident.stats(f)["compile_seconds"], trident.stats(f)["origins"])
        if o == "disk") for name in NAMES}
out["second_ms"] = {}
for name in NAMES:  # a second call on fresh inputs of the same shapes
    fn, a2 = getattr(m, name), m.inputs(name)
    t = time.perf_counter()
    fn(*a2)
    if a2[0].is_cuda:
        torch.cuda.synchronize()
    out["second_ms"][name] = 1e3 * (time.perf_counter() - t)
for name in NAMES:
    fn = getattr(m, name)
    if name == "qwen3":
        eager = m.qwen3_eager
    else:
        eager = {"compile": lambda: fn._torchdynamo_orig_callable,
                 "eager": lambda: fn}.get(mode, lambda: fn.__wrapped__)()
    tol = {"atol": 3e-2, "rtol": 3e-2} if name == "qwen3" or \
        args[name][0].dtype != torch.float32 else {}
    if name == "qwen3" and mode == "compile" and args[name][0].is_cuda:
        tol = {"atol": 0.25, "rtol": 0.05}  # Inductor's fused bf16 kernels at 8B dimensions
    torch.testing.assert_close(fn(*args[name]), eager(*args[name]), **tol)
    if mode not in ("compile", "eager"):
        sts = [trident.stats(f) for f in _jitted(name)]
        c = out["checks"][name] = {"captures": sum(st["captures"] for st in sts),
                                   "hits": sum(sum(st["hits"]) for st in sts),
                                   "compiled": [u for st in sts for u in st["compiled_units"]],
                                   "origins": [o for st in sts for o in st.get("origins", [])]}
        if c["captures"] or not c["hits"] or c["compiled"]:  # why: explain's summary lines
            text = [ln for f in _jitted(name) for ln in trident.explain(f).splitlines()]
            c["why"] = [ln.strip() for ln in text if not ln.startswith("    ")
                        or "not persisted" in ln or "not loaded" in ln or "note:" in ln
                        or "runs eagerly" in ln][:40]
out["dynamo_imported"] = "torch._dynamo" in sys.modules and mode != "compile"
print(json.dumps(out))
'''


def _names(device: str, flaggems: bool, qwen3: bool = False) -> tuple:
    q = ("qwen3",) if qwen3 else ()
    if device == "cpu":
        return CPU_NAMES + q
    return CUDA_NAMES + (FG_NAMES if flaggems else ()) + q

MODES = {"trident": {"COLD_MODE": "trident", "TRIDENT_CACHE": "on"},
         "trident_off": {"COLD_MODE": "trident", "TRIDENT_CACHE": "off"},
         "compile": {"COLD_MODE": "compile"},
         "eager": {"COLD_MODE": "eager"}}
TITLES = {"trident": "Trident, from disk", "trident_off": "Trident, TRIDENT_CACHE=off",
          "compile": "torch.compile, caches warm", "eager": "eager (no compiler)"}


def _child(work: Path, mode: str, seed: int, device: str, flaggems: bool,
           qwen3: bool = False, profile: str | None = None) -> dict:
    # Bytecode caches on (PYTHONDONTWRITEBYTECODE dropped), as in an installed deployment:
    # without them every process compiles Trident's (and the libraries') sources again.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRIDENT_", "TORCHINDUCTOR_")) and k != "PYTHONDONTWRITEBYTECODE"}
    path = os.pathsep.join([str(work), str(ROOT)] + [os.environ.get("PYTHONPATH", "")])
    env.update(MODES[mode], COLD_SEED=str(seed), COLD_DEVICE=device,
               COLD_FLAGGEMS="1" if flaggems else "0", COLD_QWEN3="1" if qwen3 else "0",
               COLD_ROOT=str(ROOT), PYTHONPATH=path.rstrip(os.pathsep),
               TRIDENT_CACHE_DIR=str(work / "trident_cache"),
               TORCHINDUCTOR_CACHE_DIR=str(work / "inductor_cache"),
               TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    if profile:
        env["COLD_PROFILE"] = profile
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(work / "child.py")], env=env, cwd=work,
                          capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{proc.stdout}\n{proc.stderr}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"  {mode} (seed {seed}): total {r['total_ms']:.0f} ms, process "
          f"{time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmups", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--flaggems", action="store_true",
                    help="with --device cuda: add FlagGems' silu, rms_norm and mm")
    ap.add_argument("--qwen3", action="store_true",
                    help="add Qwen3 at 2 layers (decoder layers compiled; needs transformers): "
                         "a prefill and two decode steps")
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", default=None, metavar="NAME[,NAME...]",
                    help="after the runs, one more Trident-from-disk and eager process with a cProfile of "
                         "each NAME's first call, written to --profile-out")
    ap.add_argument("--profile-out", default="cold_start_profile.txt")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="work in DIR (created) and keep it: the module, child.py and the caches, "
                         "to rerun or profile a child by hand")
    a = ap.parse_args()
    if a.out is None:
        stem = "cold_start" if a.device == "cpu" else "cold_start_cuda"
        a.out = str(ROOT / "benchmarks" / "results" / "latest" / f"{stem}.md")
    global NAMES
    NAMES = _names(a.device, a.flaggems, a.qwen3)

    sys.path.insert(0, str(ROOT))
    import torch

    from trident.native import build

    if a.keep:
        work = Path(a.keep).resolve()
        work.mkdir(parents=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="trident_cold_start_"))
    (work / "cold_start_fns.py").write_text(MODULE)
    (work / "child.py").write_text(CHILD.replace("NAMES", repr(NAMES)))
    cache = work / "trident_cache"
    (cache / "runtime").mkdir(parents=True, mode=0o700)
    os.chmod(cache, 0o700)
    rt = Path(build.runtime_module().__file__).parent  # not rebuilt in the children
    shutil.copytree(rt, cache / "runtime" / rt.name)
    try:
        warm = {m: [_child(work, m, seed, a.device, a.flaggems, a.qwen3)
                    for seed in range(100, 100 + a.warmups)]
                for m in ("trident", "compile", "eager")}
        runs = {m: [] for m in MODES}
        for i in range(a.runs):  # interleaved, so that drift in the machine's load hits all
            for m in MODES:
                runs[m].append(_child(work, m, i, a.device, a.flaggems, a.qwen3))
        if a.profile:
            with open(a.profile_out, "w") as f:
                for m in ("trident", "eager"):
                    r = _child(work, m, 0, a.device, a.flaggems, a.qwen3, profile=a.profile)
                    for name in a.profile.split(","):
                        f.write(f"## {TITLES[m]}: first call of {name}: "
                                f"{r['first_ms'][name]:.1f} ms\n\n{r['profile'].get(name, '')}\n")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    bad = [(m, r["checks"]) for m in ("trident",) for r in runs[m]
           if any(c["captures"] or not c["hits"] or c["compiled"] for c in r["checks"].values())]
    report = _report(a, torch, warm, runs, bad)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(report)
    print(report)


def _failures(bad) -> list[str]:
    """One block per function that was not served from disk, with explain's reasons (the
    first failing run of each)."""
    out, seen = [], set()
    for _, checks in bad:
        for name, c in checks.items():
            if name in seen or not (c["captures"] or not c["hits"] or c["compiled"]):
                continue
            seen.add(name)
            out.append(f"  - `{name}`: captures {c['captures']}, hits {c['hits']}, compiled "
                       f"{c['compiled']}, origins {c['origins']}")
            out += [f"    - {ln}" for ln in c.get("why", [])]
    return out


def _eager_first(rows) -> list[str]:
    """A line for the functions whose first call from disk ran eagerly (a version that waits
    for the library's first call in the process, e.g. FlagGems' generated kernels)."""
    names = [n for n in NAMES if any(not r.get("first_native", {}).get(n, True) for r in rows)]
    if not names:
        return ["- every first call from disk was a native hit."]
    return ["- first call ran eagerly (its version waited for the library's first call in the "
            "process), second call native: " + ", ".join(
                f"`{n}` (second call {_median(rows, lambda r, n=n: r['second_ms'][n]):.1f} ms, "
                f"eager first in {sum(not r['first_native'][n] for r in rows)}/{len(rows)} runs)"
                for n in names) + "."]


def _dynamo_note(runs) -> str:
    if not any(r["dynamo_imported"] for r in runs["trident"]):
        return "Dynamo was never imported"
    if all(r["dynamo_imported"] for r in runs["eager"]):
        return "Dynamo was imported (by a library: the eager processes imported it too)"
    return "Dynamo was imported (not by the eager processes)"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "Trident adds nothing measurable"


def _median(rows, get) -> float:
    return statistics.median(get(r) for r in rows)


def _report(a, torch, warm, runs, bad) -> str:
    med = {m: {"import": _median(rs, lambda r: r["import_ms"]),
               "total": _median(rs, lambda r: r["total_ms"]),
               **{n: _median(rs, lambda r, n=n: r["first_ms"][n]) for n in NAMES}}
           for m, rs in runs.items()}
    lines = [
        f"# Cold start from a warm disk cache ({a.device.upper()})", "",
        f"- date: {datetime.date.today()}",
        f"- commit: {report_info.commit()}",
        f"- machine: {report_info.machine(torch)}",
        f"- command: `python benchmarks/cold_start.py --runs {a.runs} --device {a.device}"
        + (" --flaggems" if a.flaggems else "") + (" --qwen3" if a.qwen3 else "") + "`",
        "- method: each run is a fresh process (bytecode caches on); torch is imported before "
        "the clock starts; "
        f"per mode the median of the runs (modes interleaved), after {a.warmups} warm-up "
        "run(s) per mode that fill Trident's records and builds and Inductor's FX graph and AOTAutograd "
        "caches. Inputs: " + ("(64, 256) float32 CPU tensors." if a.device == "cpu" else
                              "(64, 4096) bfloat16 CUDA tensors; each first call ends with "
                              "a torch.cuda.synchronize()."),
        *(["- qwen3: Qwen3 at 2 layers (" + ("tiny dimensions" if a.device == "cpu" else
            "Qwen3-8B's dimensions") + ", random weights, eager attention), its decoder layers' "
           "forward compiled (llm_decode's `layer` region); its first call is a prefill of 8 "
           "tokens and two decode steps; the import row includes building the model."]
          if a.qwen3 else []),
        "- first call: the function's first call in the process (Trident from disk: the "
        "record loaded, its C units taken from it, every object and the linked SCM found in the "
        "cache, the SCM loaded, then the call served natively); import: `import trident` and "
        "the module (its `trident.jit`s load the runtime), or the module alone for "
        "torch.compile; total: clock start to the last function's first result.",
        "",
        "| ms (median) | " + " | ".join(TITLES[m] for m in MODES) + " | torch.compile / Trident |",
        "|---|" + "---:|" * (len(MODES) + 1),
    ]
    for key in ("import", *NAMES, "total"):
        label = {"import": "import", "total": "**total**"}.get(key, f"first call: `{key}`")
        ratio = med["compile"][key] / med["trident"][key] if med["trident"][key] else 0
        lines.append(f"| {label} | " + " | ".join(f"{med[m][key]:.1f}" for m in MODES)
                     + (f" | {ratio:.1f}x |" if key != "import" else " | |"))
    per_fn = [med["trident"][n] for n in NAMES]
    restore = {n: _median(runs["trident"], lambda r, n=n: r.get("restore_ms", {}).get(n, 0.0))
               for n in NAMES}
    lines += ["",
              f"- Trident from disk: first call per function {min(per_fn):.1f}-{max(per_fn):.1f} "
              f"ms (goal <= 100 ms); total {med['trident']['total']:.0f} ms against "
              f"torch.compile's {med['compile']['total']:.0f} ms "
              f"({med['compile']['total'] / med['trident']['total']:.1f}x; goal >= 10x).",
              "- Trident from disk, time to each function's first hit (its versions read, "
              "their constants resolved, the SCM found and loaded: what the first call spends "
              "before its native program runs; `import trident` is in the import row), median "
              "ms: " + "; ".join(f"`{n}` {restore[n]:.1f}" for n in NAMES) + ".",
              "- over eager (each mode's total minus the eager process's: what the compiler "
              f"adds to a new process): Trident {med['trident']['total'] - med['eager']['total']:.0f}"
              f" ms, torch.compile {med['compile']['total'] - med['eager']['total']:.0f} ms ("
              + _ratio(med['compile']['total'] - med['eager']['total'],
                       med['trident']['total'] - med['eager']['total']) + ").",
              "- per function, over eager's own first call (what eager pays too: cuBLAS's "
              "and Triton's first use, a library's or the model's first-call work, is not the "
              "compiler's): " + "; ".join(
                  f"`{n}` Trident {med['trident'][n] - med['eager'][n]:+.1f} ms, torch.compile "
                  f"{med['compile'][n] - med['eager'][n]:+.1f} ms" for n in NAMES) + ".",
              "- of which full (generation-2) collections of Python's garbage collector "
              "(median ms; a process's first one after its imports traverses every object "
              "torch and the libraries made, and lands in the first code that allocates "
              "enough; eager processes meet it later): " + "; ".join(
                  f"{TITLES[m]}: " + ", ".join(
                      f"`{n}` {_median(rs, lambda r, n=n: r['gc_ms'][n]):.0f}" for n in NAMES)
                  for m, rs in runs.items()) + ".",
              *_eager_first(runs["trident"]),
              "- checks: " + ("every Trident-from-disk run served each function's first call "
                              "with 0 captures, hits > 0 and no C unit compiled; "
                              f"{_dynamo_note(runs)} in those processes" if not bad else "FAILED:"),
              *_failures(bad),
              "- warm-up runs (ms, total): " + "; ".join(
                  f"{TITLES[m]}: " + ", ".join(f"{r['total_ms']:.0f}" for r in rs)
                  for m, rs in warm.items()),
              "- all runs (ms, total): " + "; ".join(
                  f"{TITLES[m]}: " + ", ".join(f"{r['total_ms']:.0f}" for r in rs)
                  for m, rs in runs.items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
