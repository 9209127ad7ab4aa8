"""Where a warm Trident call's host time goes, per FlagGems operator and shape.

    TRIDENT_PROFILE=1 python benchmarks/host_profile.py [--ops silu,neg] [--shapes 2]
                                                        [--calls 300] [--out-dir DIR]
                                                        [--provider flaggems|stub]

The operators and inputs are flaggems_ops.py's.  Per operator: eager runs every shape once
(FlagGems compiles its kernels), then Trident captures every shape, then per shape the warm
host latency (median of --calls calls after 20 warm-up calls) of PyTorch's operator and of
Trident, and Trident's TRIDENT_PROFILE counters over those calls (mean us per hit in the matching version's
guards and program, us per call in the guards of versions that missed before it).  What is
left of the call (binding the arguments, the global-state snapshot, Python's call) is the
difference.  Each version's guard kinds are counted; with --out-dir, `trident.explain` and
(through TRIDENT_DUMP_DIR, if set) the C of each version go there.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flaggems_ops as fo  # noqa: E402

import trident  # noqa: E402
from trident import config  # noqa: E402


def host_us(fn, args, sync, calls):
    for _ in range(20):
        fn(*args)
    sync()
    ts = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        fn(*args)
        ts.append(time.perf_counter_ns() - t)
    sync()
    return statistics.median(ts) / 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="silu,neg,mul,lt,gelu,softmax,add,rms_norm")
    ap.add_argument("--shapes", type=int, default=2)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("--provider", choices=("flaggems", "stub"), default="flaggems")
    ap.add_argument("--device", default=None)
    a = ap.parse_args(argv)
    if not config.profile():
        print("note: TRIDENT_PROFILE is not 1: no guard/program split", flush=True)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    resolve = fo.resolver(a.provider)
    out = Path(a.out_dir) if a.out_dir else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    print(f"device {device}; TRIDENT_PROFILE={os.environ.get('TRIDENT_PROFILE', '0')}")
    print("| op | shape | PyTorch op us | Trident us | hit version | its guards us | its program "
          "us | earlier versions' failed guards us | rest us | env block of the hit version: "
          "guards/records/live | guards (kinds) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    with torch.no_grad():
        for name in a.ops.split(","):
            op = fo.OP_BY_NAME[name]
            try:
                impl = resolve(op)
            except fo.Unavailable as e:
                print(f"| {name} | - | unavailable: {e} |")
                continue
            shapes = op.shapes[:a.shapes]
            ins = []
            for si, s in enumerate(shapes):
                gen = torch.Generator(device=device)
                gen.manual_seed(1000 * fo.OPS.index(op) + si)
                ins.append(op.make(s, op.dtype, device, gen))
            f = fo.make_f(impl, op.name)
            for args in ins:
                f(*args)
            tf = trident.jit(f, strict=False)
            for args in ins:
                fo.check(op, tf(*args), f(*args), args)
            kinds = ["C build+load s: " + ", ".join(
                f"{t['build']:.2f}" for t in trident.stats(tf)["compile_seconds"])]
            for v in trident.versions(tf):
                c = collections.Counter(type(g).__name__ for g in v.guards)
                kinds.append(f"v{v.index}: {len(v.guards)} = " + ", ".join(
                    f"{k} {n}" for k, n in c.most_common()))
            for si, (s, args) in enumerate(zip(shapes, ins)):
                t_ref = host_us(op.torch_ref, args, sync, a.calls)
                before = [h for h in trident.stats(tf)["hits"]]
                prof0 = trident.stats(tf)["profile"]
                t_tr = host_us(tf, args, sync, a.calls)
                st = trident.stats(tf)
                hits = [h - b for h, b in zip(st["hits"], before)]
                hv = max(range(len(hits)), key=lambda i: hits[i])
                prof = st["profile"]
                g_us = p_us = m_us = None
                if prof[hv] is not None:
                    # over this shape's calls only: the counters' sums after minus before
                    def delta(i, key, n_key):
                        a, b = prof[i], prof0[i]
                        n1 = a[n_key] if a else 0
                        n0 = b[n_key] if b else 0
                        s1 = (a[key] or 0) * n1 if a else 0.0
                        s0 = (b[key] or 0) * n0 if b else 0.0
                        return (s1 - s0) / (n1 - n0) if n1 > n0 else 0.0

                    g_us = delta(hv, "guards_us", "hits")
                    p_us = delta(hv, "program_us", "hits")
                    m_us = sum(delta(i, "miss_us", "misses") for i in range(hv))
                fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
                rest = (t_tr - g_us - p_us - m_us) if g_us is not None else None
                e = st["env_guards"][hv]
                env = "-" if e is None else f"{e['guards']}/{e['records']}/{e['live']}"
                print(f"| {name} | {fo.shape_label(op, s)} | {t_ref:.2f} | {t_tr:.2f} | {hv} | "
                      f"{fmt(g_us)} | {fmt(p_us)} | {fmt(m_us)} | {fmt(rest)} | {env} | "
                      f"{'; '.join(kinds) if si == 0 else ''} |", flush=True)
            if out:
                (out / f"{name}_explain.txt").write_text(trident.explain(tf))
    return 0


if __name__ == "__main__":
    sys.exit(main())
