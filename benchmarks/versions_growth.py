"""Cost of dispatch and rebuilds as an SCM's versions grow (CPU).

    python benchmarks/versions_growth.py [--out FILE]

A function is captured with `dynamic=False` for 64 input lengths, so it holds
64 versions tried in capture order.  The warm latency of a call whose
matching version is the 1st, 8th, 32nd and 64th is timed (median of rounds,
after warm-up), and so is each miss (capture + C generation + build + load)
as the SCM grows, with the part spent in `build_scm` (the C compiler and
linker) and the C units it compiled.  Results go to benchmarks/results/ with
date, commit and machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import time

import torch

import trident
from trident import scm as scm_mod


def fn(x, w):
    return torch.relu(x * w + 1.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--versions", type=int, default=64)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    n = a.versions
    f = trident.jit(fn, dynamic=False, max_versions=n)
    inputs = [(torch.randn(k + 1), torch.randn(k + 1)) for k in range(n)]
    builds = _time_builds()
    rebuild = []
    for x, w in inputs:
        builds.append([0.0, "-"])
        t = time.perf_counter()
        torch.testing.assert_close(f(x, w), fn(x, w))
        rebuild.append(time.perf_counter() - t)
    assert trident.stats(f)["versions"] == n, trident.stats(f)

    positions = [p for p in (1, 8, 32, 64) if p <= n]
    samples = {p: [] for p in positions}
    eager_s = []
    for p in positions:  # warm-up
        x, w = inputs[p - 1]
        for _ in range(2000):
            f(x, w)
    for _ in range(11):  # interleaved rounds: machine drift hits every position alike
        for p in positions:
            x, w = inputs[p - 1]
            samples[p].append(_time(lambda: f(x, w), 10000))
        eager_s.append(_time(lambda: fn(*inputs[0]), 10000))
    hit = {p: statistics.median(v) for p, v in samples.items()}
    eager = statistics.median(eager_s)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    lines = [
        "# Dispatch and rebuild cost as versions grow (CPU)", "",
        f"- date: {datetime.date.today()}", f"- commit: {commit}",
        f"- machine: {platform.platform()}; nproc={os.cpu_count()}; torch {torch.__version__}; "
        f"Python {platform.python_version()}",
        "- function: relu(x * w + 1.0), dynamic=False, one version per input length",
        "- command: `python benchmarks/versions_growth.py`", "",
        "| matching version | warm call us | vs 1st |", "|---:|---:|---:|"]
    for p in positions:
        lines.append(f"| {p} | {hit[p]:.2f} | {hit[p] / hit[1]:.2f}x |")
    lines += ["", f"Eager, same call: {eager:.2f} us.", "",
              ("| versions after the miss | miss (capture + codegen + build + load) ms "
               "| of which build ms | units compiled |"),
              "|---:|---:|---:|---|"]
    for k in (1, 2, 8, 16, 32, 64):
        if k <= n:
            b, units = builds[k - 1]
            lines.append(f"| {k} | {rebuild[k - 1] * 1e3:.0f} | {b * 1e3:.0f} | {units} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = a.out or os.path.join(os.path.dirname(__file__), "results",
                                f"versions_growth_{datetime.date.today()}.md")
    with open(out, "w") as fh:
        fh.write(text)


def _time_builds() -> list:
    """Time every `build_scm` call; one [seconds, units compiled] per miss."""
    out: list = []
    build_scm = scm_mod.build.build_scm

    def timed(src):
        t = time.perf_counter()
        r = build_scm(src)
        out[-1][0] += time.perf_counter() - t
        out[-1][1] = ", ".join(getattr(r, "compiled", ())) or "all (one unit)"
        return r

    scm_mod.build.build_scm = timed
    return out


def _time(call, n):
    t = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t) / n * 1e6


if __name__ == "__main__":
    main()
