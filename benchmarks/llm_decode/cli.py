"""The command line: `python benchmarks/llm_decode.py ...` parses its arguments here, builds
the models, runs every mode (interleaved or in sequence) and writes the report."""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import time
import traceback
import warnings

import torch
from llm_prompts import PROMPT_SETS

from .common import BENCH_DIR, FILTERED, MODES, STOP, Terminated, _on_alarm, _on_sigterm, say
from .models import MODELS, build_model, flaggems_provider, stub_provider
from .modes import REGIONS
from .report import machine, metrics, versions, write_report
from .session import ModeRun, run_interleaved, run_mode


def parser() -> argparse.ArgumentParser:
    overview = sys.modules[__package__].__doc__  # the package's docstring
    ap = argparse.ArgumentParser(description=overview.split("\n\n")[0])
    ap.add_argument("--provider", choices=("flaggems", "stub"), default="flaggems")
    ap.add_argument("--tiny", action="store_true", help="tiny dimensions (CPU check)")
    ap.add_argument(
        "--layers",
        type=int,
        default=None,
        help="num_hidden_layers of each model (default 4; 2 with --tiny)",
    )
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--modes", default=",".join(m for m in MODES if m != "trident_full"))
    ap.add_argument("--prompts", default=",".join(PROMPT_SETS))
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=10, help="warm-up requests per model and mode")
    ap.add_argument(
        "--warmup-tokens",
        type=int,
        default=None,
        help="new tokens of each warm-up request (default: --new-tokens); every mode alike",
    )
    ap.add_argument(
        "--requests", type=int, default=3, help="measured requests per prompt set, model and mode"
    )
    ap.add_argument("--attn", default="eager", help="attn_implementation (eager reaches aten::bmm)")
    ap.add_argument(
        "--experts",
        default="eager",
        help="experts_implementation of DeepSeek-V2 (eager: one linear per expert)",
    )
    ap.add_argument(
        "--dynamic",
        choices=("auto", "true", "false"),
        default="auto",
        help="dynamic= of trident.jit and torch.compile (auto = None)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=480.0,
        help="stop measuring (and skip later modes) past this many seconds",
    )
    ap.add_argument(
        "--mm",
        choices=("hopper", "generic"),
        default="hopper",
        help="flaggems provider, aten::mm: hopper = what flag_gems.only_enable registers "
        "(FlagGems' Hopper mm on an H200), generic = flag_gems.ops.mm.mm; every mode alike",
    )
    ap.add_argument(
        "--max-versions",
        type=int,
        default=None,
        help="Trident's max_versions and Dynamo's recompile_limit, both (default: each "
        "tool's own)",
    )
    ap.add_argument(
        "--breakdown",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after the measured requests, one more request per mode with the registered "
        "operators timed (host time inside them per token)",
    )
    ap.add_argument(
        "--torch-profile",
        action="store_true",
        help="after the measured requests, one more request per mode under torch.profiler: "
        "operators and launch/sync calls per token, in <report>_profile.md",
    )
    ap.add_argument(
        "--regions",
        default="",
        help="comma list of norm, mlp, rope, attn, selfattn, layer: the filtered modes "
        "(trident, compile, compile_cpp) also compile the forward of the model's RMSNorm / MLP "
        "classes, its rotary-embedding / eager-attention functions, the forward of its "
        "attention / decoder-layer classes (KV-cache update included), under the same warm-up "
        "filter as the operators (default: none, the operators only)",
    )
    ap.add_argument(
        "--interleave",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="warm every mode up in turn, then run the measured requests in rounds (request k "
        "of every mode, the order rotating each round), so that the machine's drift over the "
        "run falls on every mode alike (default); --no-interleave runs each mode to its end "
        "before the next",
    )
    ap.add_argument(
        "--reserve-s",
        type=float,
        default=60.0,
        help="with --interleave: warm-ups end this many seconds before --budget-s (one still "
        "running then is cut, its mode reported as not measured), leaving that time to the "
        "measured requests",
    )
    ap.add_argument(
        "--stacks-every-s",
        type=float,
        default=0.0,
        help="print every thread's Python stack every N seconds (faulthandler), to see where "
        "a long warm-up spends its time (default 0: never)",
    )
    ap.add_argument(
        "--tag",
        default=None,
        help="the report is <out-dir>/llm_decode_<tag>.md (default tag: the models, e.g. "
        "qwen3, then _<provider> when not flaggems and _tiny with --tiny)",
    )
    ap.add_argument(
        "--out-dir",
        default=os.path.join(BENCH_DIR, "results", "latest"),
        help="where the report goes (default benchmarks/results/latest/: a run replaces the "
        "report of the same tag; the date, commit and machine are inside it)",
    )
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    ap = parser()
    a = ap.parse_args(argv)
    a.dynamic = {"auto": None, "true": True, "false": False}[a.dynamic]
    a.regions = [r.strip() for r in a.regions.split(",") if r.strip()]
    if set(a.regions) - set(REGIONS):
        ap.error(f"--regions: unknown {sorted(set(a.regions) - set(REGIONS))}; "
                 f"choose from {', '.join(REGIONS)}")
    a.layers = a.layers or (2 if a.tiny else 4)
    a.prompts = [s for s in a.prompts.split(",") if s]
    return a


def default_tag(models, provider: str, tiny: bool) -> str:
    """The report's name without --tag: the models it covers, and what makes it no full
    FlagGems run (`qwen3` -> llm_decode_qwen3.md, as in results/latest/;
    `qwen3_stub_tiny` for the CPU check)."""
    return "_".join(models) + ("" if provider == "flaggems" else f"_{provider}") \
        + ("_tiny" if tiny else "")


def main(argv=None) -> int:
    a = parse_args(argv)
    modes = [m for m in MODES if m in a.modes.split(",")]
    models = [m for m in a.models.split(",") if m]
    t0 = time.time()
    deadline = t0 + a.budget_s

    warnings.filterwarnings("ignore", message="Warning only once for all operators")
    faulthandler.enable()  # a native crash still prints every thread's Python stack
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGALRM, _on_alarm)
    if a.stacks_every_s > 0:
        faulthandler.dump_traceback_later(a.stacks_every_s, repeat=True)
    if a.warmup_tokens and a.warmup_tokens < a.new_tokens:
        say(f"!! --warmup-tokens {a.warmup_tokens} < --new-tokens {a.new_tokens}: shapes that "
            "only the measured requests reach (longer KV caches) can autotune or compile "
            "inside them (see the report's Stalls section)")
    if a.max_versions:
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, a.max_versions)
    if a.provider == "flaggems" and not torch.cuda.is_available():
        say("the flaggems provider needs CUDA; use --provider stub on a machine without a GPU")
        return 2
    prov = stub_provider() if a.provider == "stub" else flaggems_provider(a.mm)
    if prov.device == "cpu":
        torch.set_num_threads(1)  # tiny matrices; spinning OpenMP threads only add noise
    tag = a.tag or default_tag(models, prov.name, a.tiny)
    os.makedirs(a.out_dir, exist_ok=True)
    path_md = os.path.join(a.out_dir, f"llm_decode_{tag}.md")
    say(f"provider {prov.name} on {machine(prov)}; {versions(prov)}")
    say(
        f"layers per model: {a.layers}; new tokens {a.new_tokens}; warm-up {a.warmup}; "
        f"measured requests per prompt set {a.requests}; modes {modes}"
    )

    built = {}
    for name in models:
        try:
            built[name] = build_model(name, a, prov.device)
        except Exception as e:  # noqa: BLE001  (the other model still runs)
            say(f"MODEL FAILED: {name}: {type(e).__name__}: {' '.join(str(e).split())[:500]}")
            say("\n".join(traceback.format_exc().rstrip("\n").split("\n")[-25:]))
    models = [m for m in models if m in built]
    layers_of = {name: m.config.num_hidden_layers for name, m in built.items()}
    runs = []
    def said(run):
        if run.requests:
            m = metrics(run.requests)
            say(
                f"   {run.model}/{run.mode}: {len(run.requests)} measured request(s): e2e "
                f"{m['e2e']:.2f} ms, TTFT {m['ttft']:.2f} ms, TPOT {m['tpot']:.3f} ms "
                f"({run.seconds:.1f}s for the mode)"
            )

    try:
        if a.interleave:
            for name in models:
                if STOP or time.time() > deadline:
                    note = f"skipped: run stopped ({STOP[0]})" if STOP else "skipped: time budget"
                    runs.extend(ModeRun(mode, name, note=note) for mode in modes)
                    continue
                for run in run_interleaved(modes, name, built[name], prov, a, deadline):
                    runs.append(run)
                    said(run)
                write_report(runs, prov, a, path_md, layers_of, time.time() - t0)
        for mode in (modes if not a.interleave else ()):
            for name in models:
                if STOP:
                    runs.append(ModeRun(mode, name, note=f"skipped: run stopped ({STOP[0]})"))
                    continue
                if time.time() > deadline:
                    runs.append(ModeRun(mode, name, note="skipped: time budget"))
                    continue
                say(f"== {name} / {mode}")
                run = run_mode(mode, name, built[name], prov, a, a.prompts, deadline)
                runs.append(run)
                said(run)
            write_report(runs, prov, a, path_md, layers_of, time.time() - t0)
    except (Terminated, KeyboardInterrupt) as e:  # between modes: stop, keep the report
        STOP.append(type(e).__name__)
        say(f"RUN STOPPED between modes: {type(e).__name__}: {e}")
        write_report(runs, prov, a, path_md, layers_of, time.time() - t0)
    with open(path_md) as f:
        text = f.read()
    say("\n" + text)
    say(f"wrote {path_md}" + (" and .png" if os.path.exists(path_md[:-3] + ".png") else ""))
    differ = [ln.split("|")[3].strip() for ln in text.splitlines()
              if ln.startswith("| ") and "MISMATCH" in ln and ln.count("|") > 8
              and ln.split("|")[3].strip() in FILTERED]
    if differ:  # the torch reference's numerics differ by design; a compiled mode's must not
        say(f"!! generated tokens differ from the eager run's in {', '.join(sorted(set(differ)))}:"
            " see 'tokens vs eager' above")
    failed = [f"{r.model}/{r.mode}" for r in runs if r.error]
    if failed:
        say(f"!! modes failed: {', '.join(failed)} (see 'Mode failures')")
    bad = [r for r in runs if any(st.startswith("FELL BACK") for st in r.trident.values())]
    if prov.name == "stub" and bad:
        say("!! trident fell back on a stub operator (see 'Trident per operator')")
        return 1
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
