"""Does a second Python thread make progress while a jitted function runs?

    python benchmarks/gil_progress.py [--seconds S] [--rounds N] [--out FILE]

Eager PyTorch releases the GIL around each operator (its Python bindings do), so a server's
other threads keep running while a model computes.  This benchmark runs, in the main thread,
a loop of calls to one function (eager, then trident.jit, interleaved over rounds) while a
second thread counts iterations of a loop that gives the GIL away on each iteration
(`time.sleep(0)`, as a thread doing I/O does) and so needs it back each time: it gets it
at once while the main thread computes without it, and otherwise only when the main thread
returns to Python and the switch interval has run out.  It reports the second thread's
iterations per second under each mode (median over rounds) and their ratio: Trident should
match eager within 20%.  The cases: a CPU matmul chain (boxed and fast-path operators that
take milliseconds) and a pointwise chain on medium tensors.  Intra-op threads are 1, so the
two Python threads compete for the GIL, not for cores.

The result (markdown, with date, commit and machine) goes to
benchmarks/results/latest/gil_progress.md unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trident  # noqa: E402


def matmul_chain(a, b):
    return torch.relu(torch.mm(torch.mm(a, b), b)).sum(0)


def pointwise_chain(x, w, b):
    return torch.sigmoid(x * w + b) * torch.tanh(x)


CASES = {
    "matmul_chain (256x256 mm x2, relu, sum)":
        (matmul_chain, lambda: (torch.randn(256, 256), torch.randn(256, 256))),
    "pointwise_chain (1M elements)":
        (pointwise_chain, lambda: (torch.randn(1 << 20), torch.randn(1 << 20),
                                   torch.randn(1 << 20))),
}


def _progress(fn, args, seconds: float) -> tuple[float, float]:
    """(other thread's iterations/s, main thread's calls/s) while fn runs in a loop."""
    stop = threading.Event()
    count = [0]

    def spin():
        n = 0
        while not stop.is_set():
            n += 1
            time.sleep(0)  # a blocking call: releases the GIL, then waits for it
        count[0] = n

    t = threading.Thread(target=spin)
    t.start()
    calls = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn(*args)
        calls += 1
    dt = time.perf_counter() - t0
    stop.set()
    t.join()
    return count[0] / dt, calls / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0, help="per round and mode")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/latest/gil_progress.md"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    sys.setswitchinterval(0.005)

    rows = []
    for name, (fn, make) in CASES.items():
        args = make()
        jf = trident.jit(fn)
        torch.testing.assert_close(jf(*args), fn(*args))
        torch.testing.assert_close(jf(*args), fn(*args))
        assert trident.stats(jf)["captures"] == 1, trident.stats(jf)
        alone = []
        res = {"eager": [], "trident": []}
        for _ in range(a.rounds):
            # the other thread alone (main thread asleep): its full speed
            alone.append(_progress(lambda: time.sleep(0.01), (), a.seconds / 2)[0])
            for mode, f in (("eager", fn), ("trident", jf)):
                res[mode].append(_progress(f, args, a.seconds))
        med = {m: (statistics.median(v[0] for v in r), statistics.median(v[1] for v in r))
               for m, r in res.items()}
        rows.append((name, statistics.median(alone), med))
        print(f"{name}: other thread alone {statistics.median(alone):,.0f} it/s; "
              + "; ".join(f"{m}: other {o:,.0f} it/s, main {c:,.1f} calls/s"
                          for m, (o, c) in med.items())
              + f"; trident/eager progress {med['trident'][0] / med['eager'][0]:.2f}")

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    lines = ["# GIL: a second thread's progress while a jitted function runs",
             "",
             f"- date: {_dt.date.today()}  commit: {commit}  machine: {platform.node()} "
             f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores), "
             f"torch {torch.__version__}, Python {platform.python_version()}",
             f"- {a.rounds} interleaved rounds of {a.seconds} s per mode, median; intra-op "
             "threads 1; command: `python benchmarks/gil_progress.py`",
             "",
             "| case | other thread alone (it/s) | eager: other (it/s) | trident: other (it/s) "
             "| trident / eager | eager calls/s | trident calls/s |",
             "|---|---|---|---|---|---|---|"]
    for name, alone, med in rows:
        lines.append(f"| {name} | {alone:,.0f} | {med['eager'][0]:,.0f} | "
                     f"{med['trident'][0]:,.0f} | {med['trident'][0] / med['eager'][0]:.2f} | "
                     f"{med['eager'][1]:,.1f} | {med['trident'][1]:,.1f} |")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
