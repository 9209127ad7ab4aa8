"""The report: the markdown (latency, speedups, stalls, per-request rows, late captures, the
filter's decisions, host-time breakdown, Trident's status, Dynamo, failures), the chart, and
the side files (`_trident.txt`, `_profile.md`)."""

from __future__ import annotations

import datetime
import math
import os
import platform
import re
import statistics
import subprocess
import sys

import torch

from .common import BENCH_DIR, FILTERED, MODES, OPS, say
from .models import PUBLISHED_LAYERS, Provider
from .modes import REGION_TEXT
from .run import settle_count

def _warm_caches() -> str:
    v = os.environ.get("BENCH_WARM_CACHES", "")
    return v if v not in ("", "1") else "FlagGems' tuned configs and Triton's kernel cache"



def med(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def metrics(reqs) -> dict:
    return {
        "e2e": med([r.total for r in reqs]) * 1e3,
        "ttft": med([r.ttft for r in reqs]) * 1e3,
        "tpot": med([r.tpot for r in reqs]) * 1e3,
        "itl": med([t for r in reqs for t in r.itl]) * 1e3,
        "n": len(reqs),
    }


STALL_FACTOR, STALL_MIN_S = 10.0, 0.05


def stalls(runs) -> list:
    """Report lines for measured tokens that took over STALL_FACTOR times their request's
    median ITL (a first token: the mode's median TTFT) and over STALL_MIN_S: an autotune, a compile or a recompile inside a measured
    request (e.g. FlagGems tuning a bmm for a KV length no warm-up request reached)."""
    out = []
    for run in runs:
        ttfts = [r.ttft for r in run.requests if not math.isnan(r.ttft)]
        m0 = statistics.median(ttfts) if ttfts else float("nan")
        for r in run.requests:
            if r.ttft > STALL_FACTOR * m0 and r.ttft > STALL_MIN_S:
                out.append(f"- {run.model}/{run.mode} {r.prompt_set}[{r.prompt}]: first token "
                           f"took {r.ttft * 1e3:.1f} ms (the mode's median TTFT "
                           f"{m0 * 1e3:.2f} ms)")
            if not r.itl:
                continue
            m = statistics.median(r.itl)
            for k, t in enumerate(r.itl):
                if t > STALL_FACTOR * m and t > STALL_MIN_S:
                    out.append(f"- {run.model}/{run.mode} {r.prompt_set}[{r.prompt}]: token "
                               f"{k + 2} took {t * 1e3:.1f} ms (median {m * 1e3:.2f} ms)")
    head = ["", "## Stalls in measured requests", ""]
    if not out:
        return head + [f"none (no token over {STALL_FACTOR:g}x its request's median ITL, no "
                       f"first token over {STALL_FACTOR:g}x the mode's median TTFT)"]
    return head + out[:40] + ([f"- ... {len(out) - 40} more"] if len(out) > 40 else [])


_CAPTURED = re.compile(r"^version (\d+)  \(captured because: (.*)\)$", re.M)


def late_captures(runs, width: int = 900) -> list:
    """Why each Trident version captured after the warm-up (in a measured or the timed
    request) was captured: the reason from the explain text, cut to `width` characters (the
    whole text is in the report's `_trident.txt`)."""
    out = []
    for run in runs:
        for op, text in run.explain.items():
            first = run.warm_versions.get(op)
            if first is None:
                continue
            for m in _CAPTURED.finditer(text):
                if int(m.group(1)) >= first:
                    why = m.group(2)
                    why = why if len(why) <= width else why[:width] + " ..."
                    mode = "" if run.mode == "trident" else f" ({run.mode})"
                    out.append(f"- {run.model}/{op}{mode} version {m.group(1)}: {why}")
    if not out:
        if not any(run.warm_versions for run in runs):
            return []  # no Trident mode finished its warm-up
        out = ["none: every Trident version was captured in the warm-up"]
    return ["", "## Trident captures after the warm-up", ""] + out


def per_request(runs) -> list:
    """Every measured request of every mode, in the order run: end to end and TTFT (ms) and,
    under Trident, the misses (captures) its wrappers had during it; then the warm-up's
    replay of the measured prompts (settle_count) the same way."""
    lines = ["", "## Measured requests (e2e ms / TTFT ms, in the order run; Trident: "
             "misses during the request)", "",
             "| model | mode | prompts | requests | warm-up's replay of them |",
             "|---|---|---|---|---|"]

    def cell(rs):
        return ", ".join(f"{r.total * 1e3:.0f}/{r.ttft * 1e3:.1f}"
                         + (f" ({r.misses} miss)" if r.misses else "") for r in rs) or "-"

    for run in runs:
        for s in dict.fromkeys(r.prompt_set for r in run.requests + run.settle):
            rs = [r for r in run.requests if r.prompt_set == s]
            ws = [r for r in run.settle if r.prompt_set == s]
            lines.append(f"| {run.model} | {run.mode} | {s} | {cell(rs)} | {cell(ws)} |")
    return lines


def token_check(reqs, ref) -> str:
    """Compare each request's tokens with the eager run's tokens for the same prompt."""
    if not reqs:
        return "-"
    keyed = [(r, ref.get((r.prompt_set, r.prompt))) for r in reqs]
    known = [(r, t) for r, t in keyed if t is not None]
    if not known:
        return "no eager tokens"
    same = sum(r.tokens == t for r, t in known)
    if same == len(known):
        return f"same ({same}/{len(known)})"
    return f"**MISMATCH {len(known) - same}/{len(known)}**"


def machine(prov: Provider) -> str:
    if prov.device == "cuda":
        return torch.cuda.get_device_name()
    return f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def versions(prov: Provider) -> str:
    parts = [f"torch {torch.__version__}"]
    for mod in ("triton", "transformers", "flag_gems"):
        try:
            parts.append(f"{mod} {__import__(mod).__version__}")
        except Exception:  # noqa: BLE001
            parts.append(f"{mod} absent")
    return " ; ".join(parts) + f" ; Python {platform.python_version()}"


def commit() -> str:
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    r = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=BENCH_DIR,
        check=False,
    )
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout.strip()
    return os.environ.get("BENCH_COMMIT", "unknown")


def write_report(runs, prov, a, path_md, layers_of, elapsed) -> None:
    ref = {}  # (set, prompt) -> eager tokens, per model
    for run in runs:
        if run.mode == "eager":
            for r in run.requests:
                ref.setdefault(run.model, {})[(r.prompt_set, r.prompt)] = r.tokens
    by = {(run.model, run.mode): run for run in runs}
    origins = ", ".join(
        f"aten::{op} <- {fn.__module__}.{fn.__name__}" for op, fn in prov.ops.items()
    )
    lines = [
        "# LLM decode: Triton operators under eager, torch.compile and Trident",
        "",
        f"- date: {datetime.date.today()} ; commit: {commit()} ; machine: {machine(prov)}",
        f"- {versions(prov)}",
        *([f"- caches: {_warm_caches()} came from an earlier run on this machine "
           "(`CACHES_IN`), so warm-up autotuned less"]
          if os.environ.get("BENCH_WARM_CACHES") else []),
        f"- provider: {prov.name} ({origins}), dispatch key {prov.dispatch_key}"
        + (f" ; --mm {a.mm}" if prov.name == "flaggems" else ""),
        "- compiled regions (trident and both compile modes, same warm-up filter as the "
        "operators): " + ("; ".join(f"{r} ({REGION_TEXT[r]})" for r in a.regions)
                          if a.regions else "none (the operators only)"),
        "- recompile limits: "
        + (f"Trident max_versions and Dynamo recompile_limit {a.max_versions}"
           if a.max_versions else "each tool's default (Trident 16 versions, Dynamo's "
                                  "recompile_limit)"),
        "- models: "
        + ", ".join(f"{m} {layers_of[m]} layer(s) of {PUBLISHED_LAYERS[m]}" for m in layers_of)
        + (" (tiny dimensions)" if a.tiny else " (every other dimension published)"),
        (
            f"- bf16, random weights, batch 1, greedy, {a.new_tokens} new tokens"
            + (f" ({a.warmup_tokens} in warm-up requests)" if a.warmup_tokens else "")
            + ", EOS ignored, "
            f"attention={a.attn}, experts={a.experts}, dynamic={a.dynamic}"
        ),
        (
            f"- per model and mode: {a.warmup} warm-up requests (all prompt sets in turn"
            + (f"; the last {settle_count(a)}, one per set, in the measured configuration, "
               "replaying the first measured prompts" if settle_count(a) else "")
            + f"), then {a.requests} measured request(s) per prompt set; total run "
            f"{elapsed:.0f}s"
        ),
        (
            "- order: " + ("interleaved: every mode's warm-up in turn, then the measured requests "
                           "in rounds, request k of every mode with the modes' order rotating "
                           "each round, and request r of every prompt set before request r+1 "
                           "of any (drift over the run falls on every mode and set alike)"
                           if a.interleave else
                           "sequential: each mode's warm-up and measured requests, then the next "
                           "mode (drift over the run shows as differences between modes)")
        ),
        (
            "- latencies: median in ms; e2e = one request, TTFT = prefill + first token, "
            "TPOT = (e2e - TTFT)/(n-1), ITL = median over every later token; a synchronize "
            "follows each token"
        ),
        "",
        "## Latency",
        "",
        "| model | prompts | mode | e2e ms | TTFT ms | TPOT ms | ITL ms | tokens vs eager |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    ratios = [
        "",
        "## Trident's speedup (other mode's e2e / Trident's e2e; TPOT ratio, then median-ITL "
        "ratio, in parentheses)",
        "",
        "The median ITL ignores a stalled token (see Stalls below): where the two ratios part, "
        "a mode stalled during its measured requests.",
        "",
        "| model | prompts | vs eager | vs compile | vs compile_cpp | vs torch | vs trident_full |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    chart = {}
    for model in layers_of:
        for s in a.prompts:
            ms = {}
            for mode in MODES:
                run = by.get((model, mode))
                if run is None:
                    continue
                reqs = [r for r in run.requests if r.prompt_set == s]
                if not reqs:
                    if run.note:
                        lines.append(f"| {model} | {s} | {mode} | {run.note} | | | | |")
                    continue
                m = ms[mode] = metrics(reqs)
                lines.append(
                    f"| {model} | {s} | {mode} | {m['e2e']:.2f} | {m['ttft']:.2f} | "
                    f"{m['tpot']:.3f} | {m['itl']:.3f} | "
                    f"{token_check(reqs, ref.get(model, {}))} |"
                )
            tr = ms.get("trident")
            cells = []
            for other in ("eager", "compile", "compile_cpp", "torch", "trident_full"):
                o = ms.get(other)
                if tr and o:
                    cells.append(f"{o['e2e'] / tr['e2e']:.2f}x ({o['tpot'] / tr['tpot']:.2f}x; "
                                 f"{o['itl'] / tr['itl']:.2f}x)")
                else:
                    cells.append("-")
            ratios.append(f"| {model} | {s} | " + " | ".join(cells) + " |")
            if "eager" in ms:
                chart[f"{model}\n{s}"] = {
                    mode: ms["eager"]["e2e"] / m["e2e"] for mode, m in ms.items() if mode != "eager"
                }
    lines += ratios
    lines += stalls(runs)
    lines += per_request(runs)
    lines += late_captures(runs)
    lines += ["", "## torch reference vs eager tokens (numerics may differ)", ""]
    for model in layers_of:
        run = by.get((model, "torch"))
        if run and run.requests:
            lines.append(f"- {model}: {token_check(run.requests, ref.get(model, {}))}")
    lines += [
        "",
        "## Operator filtering (warm-up host time per call, median us)",
        "",
        "| model | mode | op | warm-up calls | mode's wrapper us | eager wrapper us | verdict |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for run in runs:
        for op, rec in run.timings.items():
            if run.mode not in FILTERED:
                continue
            c = f"{statistics.median(rec.cand) * 1e6:.1f}" if rec.cand else "-"
            b = f"{statistics.median(rec.base) * 1e6:.1f}" if rec.base else "-"
            lines.append(
                f"| {run.model} | {run.mode} | {op} | {rec.calls} | {c} | {b} "
                f"| {rec.verdict(region=op not in OPS)} |"
            )
    if any(run.breakdown for run in runs):
        lines += [
            "",
            "## Host time inside the whitelisted operators (one extra request per mode, after the "
            "measured ones, each registered kernel timed; first prompt set)",
            "",
            "Per token: calls, median us per call, ms spent in the operator. `rest` = that "
            "request's TPOT minus the operators' ms per token: the model's own host code and "
            "everything else, which no whitelist mode changes.",
            "",
            "| model | mode | TPOT ms | op | calls/token | us/call | ms/token |",
            "|---|---|---:|---|---:|---:|---:|",
        ]
        for run in runs:
            if not run.breakdown:
                continue
            total = sum(v[2] for v in run.breakdown.values())
            for op, (calls, us, ms) in run.breakdown.items():
                lines.append(f"| {run.model} | {run.mode} | {run.breakdown_tpot:.3f} | {op} | "
                             f"{calls:.1f} | {us:.1f} | {ms:.3f} |")
            lines.append(f"| {run.model} | {run.mode} | {run.breakdown_tpot:.3f} | rest | | | "
                         f"{run.breakdown_tpot - total:.3f} |")
    lines += ["", "## Trident per operator", "", "| model | op | status |", "|---|---|---|"]
    for run in runs:
        for op, st in run.trident.items():
            mode = "" if run.mode == "trident" else f" ({run.mode})"
            lines.append(f"| {run.model} | {op}{mode} | {st} |")
    lines += ["", "## torch.compile modes: Dynamo during warm-up", ""]
    lines += [f"- {run.model}/{run.mode}: {run.dynamo}" for run in runs if run.dynamo]
    failed = [run for run in runs if run.error]
    if failed:
        lines += ["", "## Mode failures (the message, then the end of the traceback)", ""]
        for run in failed:
            lines += [f"- {run.model}/{run.mode}: `{run.error.replace('`', chr(39))}`", "",
                      "```", run.error_tb, "```", ""]
    lines += ["", "## Mode wall time (s, including warm-up and compiles)", ""]
    lines += [
        f"- {run.model}/{run.mode}: {run.seconds:.1f}" + (f" ({run.note})" if run.note else "")
        for run in runs
    ]
    lines += ["", f"Command: `python benchmarks/llm_decode.py {' '.join(sys.argv[1:])}`", ""]
    with open(path_md, "w") as f:
        f.write("\n".join(lines))
    profiles = [r.profile for r in runs if r.profile]
    if profiles:
        with open(path_md[:-3] + "_profile.md", "w") as f:
            f.write("\n".join(profiles))
    explains = [f"### {r.model} / {op}" + ("" if r.mode == "trident" else f" ({r.mode})")
                + f"\n\n{text}\n" for r in runs for op, text in r.explain.items()]
    if explains:
        with open(path_md[:-3] + "_trident.txt", "w") as f:
            f.write("\n".join(explains))
    try:
        draw_chart(chart, path_md[:-3] + ".png", prov, a)
    except Exception as e:  # noqa: BLE001  (a chart is never worth losing the table)
        say(f"chart failed: {type(e).__name__}: {e}")


def draw_chart(chart: dict, path: str, prov: Provider, a) -> None:
    """Grouped bars of speedup over eager per model/prompt set (the paper's Figure 7 style)."""
    if not chart:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib is missing: no chart")
        return
    modes = [
        m
        for m in ("torch", "compile", "compile_cpp", "trident_full", "trident")
        if any(m in v for v in chart.values())
    ]
    if not modes:
        return
    groups = list(chart)
    width = 0.8 / max(len(modes), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups)), 3.6))
    for k, mode in enumerate(modes):
        xs = [g + (k - (len(modes) - 1) / 2) * width for g in range(len(groups))]
        ys = [chart[g].get(mode, 0.0) for g in groups]
        ax.bar(xs, ys, width, label=mode)
        for x, y in zip(xs, ys):
            if y:
                ax.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel("speedup over eager (e2e)")
    ax.set_title(f"LLM decode, {prov.name} operators, {a.new_tokens} tokens, batch 1", fontsize=9)
    ax.legend(fontsize=8, ncol=len(modes))
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
