"""An SCM with many versions (CPU): hit cost by position, miss cost, memory, mapped modules, disk.

    python benchmarks/many_versions.py [--versions N] [--out FILE]    (N: env MANY_VERSIONS, 300)

A `dynamic=False` function, `x * 2 + 1` on a small CPU tensor, is called with N lengths, so
its SCM holds N versions, one per shape, tried in capture order.  Reported:

- seconds per miss (capture + C generation + build + load) over the first and the last ten;
- the process's resident memory (VmRSS of /proc/self/status) after the first version and
  after the last, and the regions of /proc/self/maps that map an `scm.so` (and how many
  distinct files they are): every rebuild loads a new SCM;
- the disk size of the build cache's `scm/` and `obj/` folders (the run uses a fresh cache
  directory, its `runtime/` linked from the default cache so the runtime is not rebuilt);
- the median warm hit cost of a call whose matching version is the 1st, 2nd, middle and
  last (interleaved rounds of many calls, garbage collector off), against eager; the target
  is a last-version hit within 2x of a first-version hit.

The report, with date, commit and machine, goes to benchmarks/results/latest/many_versions.md
unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import report_info  # noqa: E402


def fn(x):
    return x * 2 + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--versions", type=int, default=int(os.environ.get("MANY_VERSIONS", "300")))
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--calls", type=int, default=5000, help="calls per timed round")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    n = a.versions

    cache = Path(tempfile.mkdtemp(prefix="trident_many_versions_"))
    default_runtime = Path.home() / ".cache" / "trident" / "runtime"
    if not os.environ.get("TRIDENT_CACHE_DIR") and default_runtime.is_dir():
        (cache / "runtime").symlink_to(default_runtime)
    os.environ["TRIDENT_CACHE_DIR"] = str(cache)
    sys.path.insert(0, str(ROOT))
    import torch

    import trident

    torch.set_num_threads(1)
    f = trident.jit(fn, dynamic=False, max_versions=n)
    inputs = [torch.randn(k + 1) for k in range(n)]
    loads = [_load_average()]

    miss_s = []
    rss = []
    for k, x in enumerate(inputs):
        t = time.perf_counter()
        y = f(x)
        miss_s.append(time.perf_counter() - t)
        torch.testing.assert_close(y, fn(x))
        if k == 0:
            rss.append(_rss_kb())
        if (k + 1) % 50 == 0:
            print(f"{k + 1} versions, last miss {miss_s[-1]:.2f} s", flush=True)
    rss.append(_rss_kb())
    st = trident.stats(f)
    assert st["versions"] == n and st["captures"] == n, st
    maps, files = _scm_maps()
    disk = {d: _du(cache / d) for d in ("scm", "obj")}

    positions = sorted({p for p in (1, 2, (n + 1) // 2, n) if 1 <= p <= n})
    hits_before = st["hits"]
    gc.disable()
    try:
        for p in positions:  # warm-up
            x = inputs[p - 1]
            for _ in range(2000):
                f(x)
        samples = {p: [] for p in positions}
        eager = {p: [] for p in positions}
        for _ in range(a.rounds):  # interleaved: drift hits every position alike
            for p in positions:
                x = inputs[p - 1]
                samples[p].append(_time(f, x, a.calls))
                eager[p].append(_time(fn, x, a.calls))
    finally:
        gc.enable()
    st = trident.stats(f)
    assert st["captures"] == n, st  # every timed call was a hit
    for p in positions:  # and of its own version
        assert st["hits"][p - 1] > hits_before[p - 1], (p, st["hits"][p - 1])
    hit = {p: statistics.median(s) for p, s in samples.items()}
    loads.append(_load_average())

    head, tail = miss_s[1:11], miss_s[-10:]  # the first miss also loads Dynamo and the runtime
    lines = [
        f"# {n} versions of one function (CPU)", "",
        f"- date: {datetime.date.today()}",
        f"- commit: {report_info.commit()}",
        f"- machine: {report_info.machine(torch, threads=True)}",
        f"- load average before / after: {loads[0]} / {loads[1]}",
        "- function: `x * 2 + 1`, dynamic=False, x = torch.randn(k) for k = 1..N: one version "
        "per length",
        f"- command: `python benchmarks/many_versions.py --versions {n}`", "",
        "| matching version (input length) | warm hit us (median of rounds) | vs 1st "
        "| eager, same input, us |", "|---:|---:|---:|---:|"]
    for p in positions:
        lines.append(f"| {p} | {hit[p]:.2f} | {hit[p] / hit[positions[0]]:.2f}x "
                     f"| {statistics.median(eager[p]):.2f} |")
    lines += [
        "", f"{a.rounds} rounds of {a.calls} calls per position and mode.", "",
        "| measure | value |", "|---|---:|",
        f"| first miss (Dynamo, runtime load) s | {miss_s[0]:.2f} |",
        f"| misses 2-11, mean s | {statistics.mean(head):.3f} |",
        f"| last 10 misses, mean s | {statistics.mean(tail):.3f} |",
        f"| all {n} misses, total s | {sum(miss_s):.1f} |",
        f"| VmRSS after version 1, MiB | {rss[0] / 1024:.1f} |",
        f"| VmRSS after version {n}, MiB | {rss[1] / 1024:.1f} |",
        f"| VmRSS growth, MiB | {(rss[1] - rss[0]) / 1024:.1f} |",
        f"| regions of /proc/self/maps mapping an scm.so | {maps} |",
        f"| distinct scm.so files mapped | {files} |",
        f"| cache scm/ on disk, MiB | {disk['scm'] / 2**20:.1f} |",
        f"| cache obj/ on disk, MiB | {disk['obj'] / 2**20:.1f} |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(a.out) if a.out else ROOT / "benchmarks" / "results" / "latest" / "many_versions.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def _time(call, x, n) -> float:
    t = time.perf_counter()
    for _ in range(n):
        call(x)
    return (time.perf_counter() - t) / n * 1e6


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _scm_maps() -> tuple:
    regions = [ln.split()[-1] for ln in Path("/proc/self/maps").read_text().splitlines()
               if ln.endswith("/scm.so")]
    return len(regions), len(set(regions))


def _du(d: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(d):
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
