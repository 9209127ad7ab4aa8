"""LLM decode: Qwen3 and DeepSeek-V2, Triton operators reached through the model's own host code.

    python benchmarks/llm_decode.py                       # GPU: FlagGems operators, every mode
    python benchmarks/llm_decode.py --provider stub --tiny --new-tokens 8 --warmup 1 --requests 1

Hugging Face transformers' Qwen3 (Qwen3-8B's hyperparameters) and DeepSeek-V2 (DeepSeek-V2-Lite's)
are built by hand with random bf16 weights and fewer layers (`--layers`); every other dimension is
the published one (`--tiny` shrinks them all, for a CPU check). Nothing is downloaded: prompts
shaped like MMLU, GSM8K and HumanEval (`llm_prompts.py`) become token ids by hashing words.

Each request is greedy decoding of `--new-tokens` tokens at batch size one with a KV cache, in
our own loop over the model's forward, so that TTFT (prefill and first token), ITL (each later
token) and TPOT ((end to end - TTFT) / (n - 1)) are exact. EOS is ignored.

Modes (run in this order; `--budget-s` stops the run between requests and skips later modes):

  torch        the model on PyTorch's own operators (reference)
  eager        aten::mm, addmm, bmm and embedding served by the provider's Python wrappers
               (FlagGems' Triton operators), registered as the device's kernels of those ATen
               ops with torch.library, so the model's own host code reaches them
  trident      trident.jit(wrapper) registered instead
  compile      torch.compile(wrapper) registered instead (default mode)
  compile_cpp  torch.compile(wrapper, options={"cpp_wrapper": True}) registered instead
  trident_full trident.jit(wrapper) with TRIDENT_BELOW_AUTOGRAD=0 while the mode runs (every
               operator on the dispatcher's full path): the below-autograd change's A/B in
               one interleaved run; only when named in --modes

Regions (`--regions norm,mlp,rope,attn`; default none): the filtered modes also compile pieces
of the model's own host code around the Triton operators, under the same warm-up filter as the
operators: `norm` / `mlp` the forward of the model's RMSNorm / MLP classes (installed on the
class), `rope` / `attn` its modeling module's rotary-embedding and eager-attention functions
(installed as the module's global, which the attention forward looks up on every call);
`selfattn` / `layer` the attention / decoder-layer forwards and `model` the whole
`*ForCausalLM.forward` (each with its KV-cache update).  Regions nest: an enclosing region's
capture traces the inner ones as the model's own code, and a region that no warm-up call reached
(the enclosing region served them all) is dropped as unverified.

Operator filtering (trident and both compile modes): during the warm-up requests every call of
a registered op runs both the mode's wrapper and the plain eager wrapper (alternating which goes
first) and times each on the host; an op (or region) whose mode wrapper has a higher median than
the eager wrapper, or whose outputs were not exactly the eager wrapper's in some warm-up call, or
which raised where the eager wrapper did not (a compile error: torch 2.11's C++ wrapper on
DeepSeek-V2's `aten::_grouped_mm`), is dropped, i.e. falls back to the eager wrapper for the measured requests (the tokens of every
mode must equal eager's: a region that Inductor fuses rounds differently in bf16).  The last
warm-up requests, one per prompt set (when there are at least two per set), replay the first
measured prompts in the measured configuration: a request that captures a version gets its
result without running that version's native program, so the program of a shape that only the
capturing request had (the first warm-up prompt's: its version is static) would otherwise run for
the first time inside a measured request, and with it the nested wrappers' calls it makes,
which versions captured from the eager model's calls need not match (H200, 2026-12-03: the LM
head's bmm, `(1, 1, H) x (1, H, vocab)`, failed the bmm wrapper's versions on their global-state
guard or their shapes; one bmm capture, ~400 ms, fell in the first measured request of both
models; on the CPU stub it is an attention bmm whose argument is a view of a 4-d base).

Order (`--interleave`, default): every mode's warm-up in turn, then the measured requests in
rounds (request k of every mode, the modes' order rotating each round), so that the machine's
drift over the run falls on every mode alike; `--no-interleave` runs each mode to its end.
Warm-ups end `--reserve-s` before the budget: one still running then (say, Inductor compiling
a decoder layer for the n-th time) is cut by an alarm and its mode reported as not measured,
so that the modes that did warm up keep that time for their measured requests.

`--warmup-tokens N` shortens the warm-up requests (every mode alike) but leaves shapes that only
longer measured requests reach to be autotuned or compiled inside them: the report's Stalls
section lists every measured token that took over 10x its request's median ITL, and the speedup
table gives the median-ITL ratio, which such a token does not move.

Every mode's generated tokens are compared with the eager mode's. Results (markdown and a PNG
chart of speedups over eager) go to `benchmarks/results/latest/llm_decode_<tag>.md/.png`
(`--out-dir`, `--tag`; the tag defaults to the models, e.g. `llm_decode_qwen3.md`; the date,
commit and machine are in the report), rewritten after every mode so a run cut short keeps
what it measured.

Providers: `flaggems` (CUDA; FlagGems' wrappers) and `stub` (CPU; stand-in "Triton operators":
plain Python host code around ATen out= operators, registered for the CPU dispatch key).
`--mm hopper` (default) serves aten::mm with the function `flag_gems.only_enable` registers, which
on an H200 is FlagGems' Hopper mm (host-side TMA tensor descriptors, 162 autotune configs with a
pre_hook); `--mm generic` with `flag_gems.ops.mm.mm` (pointer kernel, 22 configs). Either choice
applies to every mode alike.

A mode that raises prints first one line `MODE FAILED: <type>: <message>`, then the last 25 lines
of the traceback; the failure goes into the report and the next mode runs. SIGTERM (a `timeout`)
and Ctrl-C end the mode in progress the same way, then the report is written and the run stops.
`--max-versions N` gives Trident's `max_versions` and Dynamo's recompile limit the same value.

Layout (one module per stage of a run; `benchmarks/llm_decode.py` is the command; the public
names of every module are importable from the package, as from the single file it was):

  common.py   operators, modes, printing, the budget and signal exceptions
  models.py   operator providers (FlagGems, CPU stub) and the transformers models
  filter.py   the warm-up filter: both wrappers per call, timed and compared
  modes.py    each mode's wrapper, its registration, Trident's status, the regions
  run.py      one request (decoding and its timing), request order, breakdown, profile
  session.py  one mode on one model in phases, interleaved or in sequence
  report.py   the markdown report, the chart and the side files
  cli.py      the arguments and main()
  __main__.py `python -m llm_decode` (from benchmarks/)
"""

from __future__ import annotations

import os
import sys

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _BENCH)  # llm_prompts
sys.path.insert(0, os.path.dirname(_BENCH))  # trident

from .cli import default_tag, main, parse_args, parser  # noqa: E402
from .common import (  # noqa: E402
    FILTERED,
    MODE_ENV,
    MODES,
    OPS,
    STOP,
    TRIDENTS,
    OutOfTime,
    Terminated,
    say,
)
from .filter import OpTiming, timing_shim  # noqa: E402
from .models import (  # noqa: E402
    BLOCK_M,
    BLOCK_N,
    MODELS,
    PUBLISHED_LAYERS,
    Provider,
    build_model,
    flaggems_provider,
    model_config,
    stub_addmm,
    stub_bmm,
    stub_embedding,
    stub_mm,
    stub_provider,
)
from .modes import (  # noqa: E402
    REGION_FUNCS,
    REGION_TEXT,
    REGIONS,
    STATEFUL,
    Region,
    Registry,
    global_state_misses,
    make_wrapper,
    region_classes,
    trident_status,
    warm_compiler,
)
from .report import (  # noqa: E402
    STALL_FACTOR,
    STALL_MIN_S,
    commit,
    draw_chart,
    late_captures,
    machine,
    med,
    metrics,
    per_request,
    stalls,
    token_check,
    versions,
    write_report,
)
from .run import (  # noqa: E402
    PROFILE_CALLS,
    Request,
    breakdown,
    decode,
    measured_order,
    settle_count,
    torch_profile,
)
from .session import (  # noqa: E402
    ModeRun,
    ModeSession,
    dynamo_summary,
    mode_failed,
    report_warmup,
    run_interleaved,
    run_mode,
)

__all__ = [
    "BLOCK_M",
    "BLOCK_N",
    "breakdown",
    "build_model",
    "commit",
    "decode",
    "default_tag",
    "draw_chart",
    "dynamo_summary",
    "FILTERED",
    "flaggems_provider",
    "global_state_misses",
    "late_captures",
    "machine",
    "main",
    "make_wrapper",
    "measured_order",
    "med",
    "metrics",
    "MODE_ENV",
    "mode_failed",
    "model_config",
    "MODELS",
    "ModeRun",
    "MODES",
    "ModeSession",
    "OPS",
    "OpTiming",
    "OutOfTime",
    "parse_args",
    "parser",
    "per_request",
    "PROFILE_CALLS",
    "Provider",
    "PUBLISHED_LAYERS",
    "Region",
    "region_classes",
    "REGION_FUNCS",
    "REGION_TEXT",
    "REGIONS",
    "Registry",
    "report_warmup",
    "Request",
    "run_interleaved",
    "run_mode",
    "say",
    "settle_count",
    "STALL_FACTOR",
    "STALL_MIN_S",
    "stalls",
    "STATEFUL",
    "STOP",
    "stub_addmm",
    "stub_bmm",
    "stub_embedding",
    "stub_mm",
    "stub_provider",
    "Terminated",
    "timing_shim",
    "token_check",
    "torch_profile",
    "trident_status",
    "TRIDENTS",
    "versions",
    "warm_compiler",
    "write_report",
]
