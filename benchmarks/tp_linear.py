"""A tensor-parallel block under eager, torch.compile and Trident, one process per rank.

    python benchmarks/tp_linear.py                   # CPU, gloo, 2 processes
    python benchmarks/tp_linear.py --backend nccl    # one process per GPU (needs 2 GPUs)

The block: a column-parallel linear (x @ w1 shard), an elementwise activation on the shard (a
Triton silu on GPUs, relu on the CPU), a row-parallel linear (@ w2 shard) and a sum all_reduce
through torch.distributed's functional collectives, which Dynamo captures into the graph (and
Trident calls through the dispatcher like any ATen op). Sizes are decode-like (one token).

Every mode's output is checked against eager on every rank. Timing, per rank, after warm-up,
the modes interleaved round by round (the order rotating each round, the same on every rank, so
the collectives pair up): host = per-call mean of `--calls` calls back to back (until each call
returns; the collectives are waited for after the round), median over rounds; e2e = each call
followed by waiting for its result (and a device synchronize on GPUs), median over calls.
Rank 0 writes benchmarks/results/latest/tp_linear.md (gloo) or tp_linear_nccl.md (`--tag`,
`--out-dir`; a run replaces the file of its tag; the date, commit and machine are inside).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("eager", "torch.compile", "trident")


def block_cpu(x, w1, w2):
    import torch.distributed._functional_collectives as funcol

    h = torch.relu(x @ w1)
    return funcol.all_reduce(h @ w2, "sum", dist.group.WORLD)


def block_gpu(x, w1, w2):
    import torch.distributed._functional_collectives as funcol

    from trident.examples.triton_kernels import silu

    h = silu(x @ w1)
    return funcol.all_reduce(h @ w2, "sum", dist.group.WORLD)


def _wait(t):
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    return t.wait() if isinstance(t, AsyncCollectiveTensor) else t


def _worker(rank, world, port, a, q):
    try:
        sys.path.insert(0, ROOT)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        import trident

        gpu = a.backend == "nccl"
        if gpu:
            torch.cuda.set_device(rank)
        else:
            torch.set_num_threads(1)
        dist.init_process_group(a.backend, rank=rank, world_size=world)
        dev = f"cuda:{rank}" if gpu else "cpu"
        dt = torch.bfloat16 if gpu else torch.float32
        fn = block_gpu if gpu else block_cpu
        hidden, ffn = a.hidden, a.ffn
        torch.manual_seed(0)  # the same full weights on every rank
        x = torch.randn(1, hidden, device=dev, dtype=dt)
        w1 = (torch.randn(hidden, ffn, device=dev, dtype=dt) * hidden ** -0.5)
        w2 = (torch.randn(ffn, hidden, device=dev, dtype=dt) * ffn ** -0.5)
        args = (x, w1.chunk(world, dim=1)[rank].contiguous(),
                w2.chunk(world, dim=0)[rank].contiguous())
        sync = (lambda: torch.cuda.synchronize(rank)) if gpu else (lambda: None)
        modes = {"eager": fn, "torch.compile": torch.compile(fn),
                 "trident": trident.jit(fn, strict=True)}
        ref = _wait(fn(*args)).clone()
        tol = dict(rtol=2e-2, atol=2e-2) if gpu else dict(rtol=1e-5, atol=1e-5)
        for name, m in modes.items():
            for _ in range(3):
                torch.testing.assert_close(_wait(m(*args)), ref, **tol)
            for _ in range(a.warmup):
                _wait(m(*args))
        sync()
        dist.barrier()
        host = {m: [] for m in modes}
        e2e = {m: [] for m in modes}
        order = list(modes)
        perf = time.perf_counter
        for r in range(a.rounds):
            k = r % len(order)
            for name in order[k:] + order[:k]:
                m = modes[name]
                dist.barrier()
                outs = []
                t = perf()
                for _ in range(a.calls):
                    outs.append(m(*args))
                host[name].append((perf() - t) / a.calls * 1e6)
                for o in outs:
                    _wait(o)
                sync()
                dist.barrier()
                for _ in range(a.e2e_calls):
                    t = perf()
                    _wait(m(*args))
                    sync()
                    e2e[name].append((perf() - t) * 1e6)
        res = {m: (statistics.median(host[m]), statistics.median(e2e[m])) for m in modes}
        st = trident.stats(modes["trident"])
        res["_trident"] = (f"{st['versions']} version(s), {sum(st['hits'])} hits, "
                           f"{st['fallbacks']} fallbacks")
        gathered = [None] * world
        dist.all_gather_object(gathered, res)
        dist.destroy_process_group()
        q.put((rank, gathered if rank == 0 else "ok"))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        import traceback

        q.put((rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"))


def _commit() -> str:
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       cwd=ROOT, check=False)
    return r.stdout.strip() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=None, help="default 4096 (nccl), 256 (gloo)")
    ap.add_argument("--ffn", type=int, default=None, help="default 12288 (nccl), 1024 (gloo)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--e2e-calls", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--tag", default=None,
                    help="file tp_linear_<tag>.md (default: none with gloo, nccl with NCCL)")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results", "latest"))
    a = ap.parse_args()
    gpu = a.backend == "nccl"
    a.hidden = a.hidden or (4096 if gpu else 256)
    a.ffn = a.ffn or (12288 if gpu else 1024)
    if gpu and torch.cuda.device_count() < a.world:
        print(f"--backend nccl needs {a.world} GPUs; this machine has "
              f"{torch.cuda.device_count()}")
        return 2
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    t0 = time.time()
    procs = [ctx.Process(target=_worker, args=(r, a.world, port, a, q)) for r in range(a.world)]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=900) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    bad = {r: v for r, v in results.items() if isinstance(v, str) and v != "ok"}
    if bad:
        for r, v in bad.items():
            print(f"rank {r} FAILED: {v}")
        return 1
    per_rank = results[0]
    machine = (torch.cuda.get_device_name() if gpu else
               f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    dt = "bf16" if gpu else "fp32"
    act = "Triton silu" if gpu else "relu"
    lines = [
        "# Tensor-parallel block: eager, torch.compile, Trident",
        "",
        f"- date: {datetime.date.today()} ; commit: {_commit()} ; machine: {machine} ; "
        f"backend {a.backend}, {a.world} processes",
        f"- torch {torch.__version__} ; Python {platform.python_version()}",
        f"- block: x (1, {a.hidden}) {dt} @ w1 shard ({a.hidden}, {a.ffn // a.world}) -> {act} "
        f"-> @ w2 shard ({a.ffn // a.world}, {a.hidden}) -> all_reduce(sum) (functional "
        "collectives)",
        f"- host: per-call mean of {a.calls} calls back to back, median of {a.rounds} rounds; "
        f"e2e: call + wait for the result{' + synchronize' if gpu else ''}, median of "
        f"{a.rounds * a.e2e_calls} calls; modes interleaved round by round; outputs equal "
        f"eager's on every rank; run {time.time() - t0:.0f} s",
        *([] if gpu else [
            "- gloo: eager's functional all_reduce returns before the collective is done (it "
            "waits when the result is used), while a compiled graph (torch.compile, Trident) "
            "waits inside the call (`wait_tensor` blocks the host on gloo), so host latency is "
            "not comparable across modes here; e2e is. With NCCL, `wait_tensor` only orders "
            "the streams and host latency compares like for like."]),
        "",
        "| rank | mode | host us | e2e us | host: mode/Trident | e2e: mode/Trident |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r, res in enumerate(per_rank):
        th, te = res["trident"]
        for m in MODES:
            h, e = res[m]
            lines.append(f"| {r} | {m} | {h:.2f} | {e:.2f} | {h / th:.2f}x | {e / te:.2f}x |")
    lines += ["", "Trident per rank: " + "; ".join(
        f"rank {r}: {res['_trident']}" for r, res in enumerate(per_rank)), ""]
    text = "\n".join(lines)
    print(text)
    os.makedirs(a.out_dir, exist_ok=True)
    tag = a.tag if a.tag is not None else ("nccl" if gpu else "")
    path = os.path.join(a.out_dir, "tp_linear" + (f"_{tag}" if tag else "") + ".md")
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
