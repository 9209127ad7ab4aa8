"""Warm per-call latency on CPU: eager vs torch.compile (inductor) vs trident.jit.

    python benchmarks/cpu_overhead.py [--out FILE] [--rounds N] [--target-ms MS] [--threads N]

Small tensors, so the time is host overhead (argument binding, guards,
dispatch), not arithmetic.  Each case is checked against eager before it is
timed; every mode is warmed up (torch.compile's first call compiles for
seconds), then timed in interleaved rounds of many calls each, with the
garbage collector off.  The reported number is the median round's time per
call.  A markdown table with the date, commit and machine goes to
benchmarks/results/latest/cpu_overhead.md unless --out says otherwise.

Intra-op threads default to 1 (--threads): tensors this small gain nothing
from them, and on a small shared machine OpenMP wake-ups make a parallel
kernel's time swing by 100x from round to round.  The load average before
and after the run is recorded, because other processes skew the numbers.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trident  # noqa: E402

# ------------------------------------------------------------------- cases


def rms_norm(x, w, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def linear_relu(x, w, b):
    return torch.relu(x * w + b)


def shape_branch(x):
    if x.shape[0] > 8:
        return x.sin() * 2
    else:
        return x.cos() + 1


def tiny_attention(q, k, v):
    s = (q @ k.transpose(-1, -2)) * 0.25  # 1/sqrt(16)
    return torch.softmax(s, dim=-1) @ v


@dataclass
class Case:
    name: str
    fn: types.FunctionType
    calls: list  # argument tuples, used in turn (alternating shapes, ...)
    what: str


def make_cases() -> list[Case]:
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    return [
        Case("rms_norm", rms_norm, [(r(32, 128), r(128))],
             "x (32,128) fp32, w (128,): x * rsqrt(mean(x^2) + eps) * w"),
        Case("relu(x*w+b)", linear_relu, [(r(16, 16), r(16, 16), r(16))],
             "x, w (16,16), b (16,)"),
        Case("shape branch", shape_branch, [(r(16, 32),), (r(4, 32),)],
             "sin*2 if x.shape[0] > 8 else cos+1; alternating x (16,32) and (4,32)"),
        Case("softmax attention", tiny_attention, [(r(8, 16), r(8, 16), r(8, 16))],
             "q, k, v (8,16): softmax(q @ k^T / 4) @ v"),
    ]


def fresh_copy(fn: types.FunctionType) -> types.FunctionType:
    """The same function with its own code object.

    Dynamo keeps its cache on the code object, and trident.jit clears that
    cache on every capture (capture/dynamo.py), so torch.compile and
    trident.jit must not share one.
    """
    code = fn.__code__.replace(co_name=fn.__code__.co_name)
    if code is fn.__code__:  # pragma: no cover - replace() always copies today
        raise RuntimeError("could not copy the code object")
    f = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    f.__kwdefaults__ = fn.__kwdefaults__
    f.__qualname__ = fn.__qualname__
    return f


# ------------------------------------------------------------------ timing


def check_equal(case: Case, mode: str, f) -> str:
    """Raise unless f's outputs match eager's; say how (bit-exact or close)."""
    worst = 0.0
    for args in case.calls:
        want = case.fn(*args)
        got = f(*args)
        if torch.equal(got, want):
            continue
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"{case.name} [{mode}] differs from eager: {m}")
        worst = max(worst, (got - want).abs().max().item())
    return "bit-exact" if worst == 0.0 else f"close (max abs diff {worst:.1e})"


def time_round(f, calls: list, n: int) -> float:
    """Seconds per call over n calls, cycling through `calls`."""
    seq = [calls[i % len(calls)] for i in range(n)]
    t0 = time.perf_counter()
    for a in seq:
        f(*a)
    return (time.perf_counter() - t0) / n


def bench_case(case: Case, rounds: int, target_s: float) -> dict:
    eager = case.fn
    compiled = torch.compile(fresh_copy(case.fn))  # default backend: inductor
    jitted = trident.jit(fresh_copy(case.fn))
    modes = {"eager": eager, "torch.compile": compiled, "trident": jitted}

    info = {}
    compile_s = {}
    for mode, f in modes.items():
        t0 = time.perf_counter()
        info[mode] = check_equal(case, mode, f)
        compile_s[mode] = time.perf_counter() - t0
        for _ in range(50):  # warm-up: caches, allocator, branch predictors
            for a in case.calls:
                f(*a)
        trident.wait()  # the misses' full-level rebuilds (TRIDENT_TIER_UP)

    st0 = trident.stats(jitted)
    if st0["fallbacks"] or st0["fallback_reason"]:
        raise RuntimeError(f"{case.name}: trident fell back to eager: {st0['fallback_reason']}")

    # Calls per round: enough that one round of the slowest mode takes ~target_s.
    probe = max(time_round(f, case.calls, 200) for f in modes.values())
    n = max(200, int(target_s / probe))
    n -= n % len(case.calls)
    samples: dict[str, list[float]] = {m: [] for m in modes}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for mode, f in modes.items():  # interleaved, so drift hits every mode alike
                samples[mode].append(time_round(f, case.calls, n))
    finally:
        if gc_was:
            gc.enable()

    st1 = trident.stats(jitted)
    if st1["misses"] != st0["misses"]:
        raise RuntimeError(f"{case.name}: trident missed while being timed ({st1})")
    us = {m: statistics.median(s) * 1e6 for m, s in samples.items()}
    spread = {m: (min(s) * 1e6, max(s) * 1e6) for m, s in samples.items()}
    return {"case": case, "us": us, "spread": spread, "check": info, "first_call_s": compile_s,
            "calls_per_round": n, "rounds": rounds, "trident_versions": st1["versions"],
            "trident_hits": st1["hits"]}


# ------------------------------------------------------------------ report


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return rev + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    return (f"{platform.platform()}; {cpu_model()}; nproc={os.cpu_count()}; "
            f"torch {torch.__version__} (intra-op threads {torch.get_num_threads()}); "
            f"Python {platform.python_version()}")


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def render(results: list, date: str, rounds: int, loads: tuple) -> str:
    lines = [
        "# CPU call overhead: eager vs torch.compile vs trident.jit",
        "",
        f"- date: {date}",
        f"- commit: {git_commit()}",
        f"- machine: {machine()}",
        f"- method: warm per-call latency, median of {rounds} interleaved rounds "
        "(many calls each, GC off) after warm-up; outputs checked against eager first",
        f"- load average (1, 5, 15 min): before {loads[0]}; after {loads[1]}",
        "- command: `python benchmarks/cpu_overhead.py`",
        "",
        "| case | eager us | torch.compile us | trident us | eager/trident | "
        "compile/trident | calls/round | trident versions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        u = r["us"]
        lines.append(
            f"| {r['case'].name} | {u['eager']:.2f} | {u['torch.compile']:.2f} | "
            f"{u['trident']:.2f} | {u['eager'] / u['trident']:.2f}x | "
            f"{u['torch.compile'] / u['trident']:.2f}x | {r['calls_per_round']} | "
            f"{r['trident_versions']} |")
    lines += ["", "Cases:", ""]
    for r in results:
        c = r["case"]
        chk = ", ".join(f"{m}: {v}" for m, v in r["check"].items() if m != "eager")
        rng = "; ".join(f"{m} {lo:.2f}-{hi:.2f}" for m, (lo, hi) in r["spread"].items())
        first = ", ".join(f"{m} {s:.2f} s" for m, s in r["first_call_s"].items() if m != "eager")
        lines.append(f"- **{c.name}**: {c.what}. vs eager: {chk}. "
                     f"Round range (us): {rng}. First calls, capture or compile included "
                     f"(on-disk caches may be warm): {first}.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None,
                    help="markdown file to write (default: "
                         "benchmarks/results/latest/cpu_overhead.md)")
    ap.add_argument("--rounds", type=int, default=11, help="timed rounds per mode (>= 7)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1; 0 keeps torch's default)")
    ap.add_argument("--target-ms", type=float, default=60.0,
                    help="approximate length of one round of the slowest mode")
    args = ap.parse_args(argv)
    if args.rounds < 7:
        ap.error("--rounds must be at least 7")

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    date = _dt.date.today().isoformat()
    load_before = load_average()
    out = args.out or ROOT / "benchmarks" / "results" / "latest" / "cpu_overhead.md"
    print(machine())
    results = []
    for case in make_cases():
        print(f"-- {case.name}: warming up and checking (torch.compile may take a while)",
              flush=True)
        r = bench_case(case, args.rounds, args.target_ms / 1e3)
        u = r["us"]
        print(f"   eager {u['eager']:8.2f} us   torch.compile {u['torch.compile']:8.2f} us   "
              f"trident {u['trident']:8.2f} us   eager/trident {u['eager'] / u['trident']:.2f}x"
              f"   compile/trident {u['torch.compile'] / u['trident']:.2f}x", flush=True)
        results.append(r)
    text = render(results, date, args.rounds, (load_before, load_average()))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print()
    print(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
