"""A float that changes per call (a sampling temperature): eager vs Trident, with dynamic floats
and with floats specialised (with and without TRIDENT_FLOAT_VALUES).

    python benchmarks/float_values.py [--calls 400] [--device cpu|cuda] [--out FILE]

The function is the temperature step of sampling, `softmax(logits / temperature)` over a
(batch, 4096) float32 tensor, called as a server would: each call draws a batch size from
(1, 2, 4, 8) and a temperature from 0.1, 0.2, ..., 2.0 (a fixed random stream, the same for
every mode).  Modes, each a `trident.jit` of a fresh copy of the function (its own code
object, so that Dynamo's automatic-dynamic memory of one mode does not carry into the next;
TRIDENT_CACHE=off, so nothing is loaded from disk):

- eager: the function itself;
- Trident (the default, TRIDENT_DYNAMIC_FLOATS=1): the second temperature makes it a dynamic
  float, the second batch size a dynamic size: a few versions serve every call;
- Trident, floats specialised (TRIDENT_DYNAMIC_FLOATS=0), TRIDENT_FLOAT_VALUES=0: every new
  (batch, temperature) pair is a capture until the recompile limit (16 versions), after which
  a call matching no version runs eagerly;
- the same with TRIDENT_FLOAT_VALUES=4: once the versions hold 4 temperatures, a call with
  another temperature runs eagerly, uncaptured; new batch sizes are still captured.

Reported per mode: the wall time of all calls, of the first and of the last half, the
captures, the calls that ran eagerly, and the native hits.  The report goes to
benchmarks/results/latest/float_values.md unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ["TRIDENT_CACHE"] = "off"

import torch  # noqa: E402

import report_info  # noqa: E402
import trident  # noqa: E402
from trident import config  # noqa: E402


def temperature_step(logits, temperature):
    return torch.softmax(logits / temperature, -1)


def _fresh(i: int):
    """A copy of temperature_step with a code object of its own (Dynamo keys its
    automatic-dynamic memory on the code's file, line and name)."""
    ns = {"torch": torch}
    exec(f"def temperature_step_{i}(logits, temperature):\n"
         "    return torch.softmax(logits / temperature, -1)\n", ns)
    return ns[f"temperature_step_{i}"]


def _stream(n: int, device: str) -> list:
    rng = random.Random(0)
    out = []
    for _ in range(n):
        b = rng.choice((1, 2, 4, 8))
        t = round(rng.randint(1, 20) / 10, 1)
        out.append((torch.randn(b, 4096, device=device), t))
    return out


def _run(fn, stream, device: str) -> list[float]:
    times = []
    for x, t in stream:
        t0 = time.perf_counter()
        fn(x, t)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "latest"
                                         / "float_values.md"))
    a = ap.parse_args()
    stream = _stream(a.calls, a.device)
    _run(temperature_step, stream[:8], a.device)  # warm-up: eager's first-use costs
    with config.scope(TRIDENT_TIER_UP="0"):  # and Dynamo's first use, on another function
        trident.jit(lambda x: torch.relu(x) + 1.0)(torch.randn(3, device=a.device))
    rows = []
    modes = (("eager", None, None),
             ("Trident (default: dynamic floats)", "1", "4"),
             ("Trident, floats specialised, TRIDENT_FLOAT_VALUES=0", "0", "0"),
             ("Trident, floats specialised, TRIDENT_FLOAT_VALUES=4", "0", "4"))
    for i, (title, dynamic, values) in enumerate(modes):
        if values is None:
            fn = temperature_step
        else:
            fn = trident.jit(_fresh(i))
        with config.scope(TRIDENT_FLOAT_VALUES=values or "4", TRIDENT_TIER_UP="0",
                          TRIDENT_DYNAMIC_FLOATS=dynamic or "1"):
            times = _run(fn, stream, a.device)
        half = len(times) // 2
        row = {"mode": title, "total": sum(times), "first": sum(times[:half]),
               "last": sum(times[half:])}
        if values is not None:
            st = trident.stats(fn)
            row.update(captures=st["captures"], hits=sum(st["hits"]),
                       eager=st["eager_past_limit"] + sum(st["eager_float_values"].values()),
                       limit=st["recompile_limit"] is not None)
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    lines = [
        f"# A float that changes per call ({a.device.upper()})", "",
        f"- date: {datetime.date.today()}",
        f"- commit: {report_info.commit()}",
        f"- machine: {report_info.machine(torch)}",
        f"- command: `python benchmarks/float_values.py --calls {a.calls} --device {a.device}`",
        "- workload: `softmax(logits / temperature)`, logits (batch, 4096) float32, each call "
        "a batch size from (1, 2, 4, 8) and a temperature from 0.1..2.0 (20 values), one "
        "random stream for all modes; TRIDENT_CACHE=off, TRIDENT_TIER_UP=0.",
        "- the first half holds the captures and their C builds (Dynamo's first use in the "
        "process is taken before the modes, on another function); the build cache is shared "
        "by the modes (a later mode finds the units of an earlier one with the same text: "
        "the two specialised modes share theirs); the last half is the steady state.", "",
        "| mode | all calls (s) | first half (s) | last half (s) | captures | ran eagerly "
        "| native hits | recompile limit reached |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['total']:.3f} | {r['first']:.3f} | {r['last']:.3f} | "
                     + (f"{r['captures']} | {r['eager']} | {r['hits']} | "
                        f"{'yes' if r['limit'] else 'no'} |" if "captures" in r
                        else "| | | |"))
    lines.append("")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
