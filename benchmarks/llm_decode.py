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
chart of speedups over eager) go to `benchmarks/results/llm_decode_<date>_<tag>.md/.png`,
rewritten after every mode so a run cut short keeps what it measured.

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
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from llm_prompts import PROMPT_SETS, token_ids

import trident

OPS = ("mm", "addmm", "bmm", "embedding")
MODES = ("torch", "eager", "trident", "compile", "compile_cpp", "trident_full")
FILTERED = ("trident", "compile", "compile_cpp", "trident_full")
# trident_full: Trident with every operator on the dispatcher's full path
# (TRIDENT_BELOW_AUTOGRAD=0 while the mode runs): the below-autograd change's A/B in one run
TRIDENTS = ("trident", "trident_full")
MODE_ENV = {"trident_full": {"TRIDENT_BELOW_AUTOGRAD": "0"}}
MODELS = ("qwen3", "deepseek_v2")
PUBLISHED_LAYERS = {"qwen3": 36, "deepseek_v2": 27}


def say(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- operator providers


@dataclass(frozen=True)
class Provider:
    name: str
    device: str
    dispatch_key: str
    ops: dict  # ATen op name -> plain Python wrapper (what each mode wraps)


def flaggems_provider(mm: str = "hopper") -> Provider:
    """FlagGems' own wrappers: the functions `flag_gems.only_enable` would register.

    `mm="generic"` takes `flag_gems.ops.mm.mm` for aten::mm instead of the registered one (on
    Hopper GPUs FlagGems' `runtime.replace_customized_ops` puts `hopper.ops.mm.mm` there)."""
    import importlib

    import flag_gems

    table = {}
    for item in getattr(flag_gems, "_FULL_CONFIG", ()):
        if item and item[0] in OPS and (len(item) < 3 or item[2]()):
            table[item[0]] = item[1]
    if mm == "generic":
        table.pop("mm", None)
    ops = {}
    for op in OPS:
        # `flag_gems.ops.mm` is the function (ops/__init__ rebinds it); the module is in sys.modules.
        ops[op] = table.get(op) or getattr(importlib.import_module(f"flag_gems.ops.{op}"), op)
    return Provider("flaggems", "cuda", "CUDA", ops)


# The stub provider: what a Triton operator's Python wrapper does on the host (check arguments,
# pick block sizes, compute a grid, allocate the output, launch), with an ATen out= operator as
# the "kernel". The out= overloads are separate operators from the functional ones registered
# here, so a stub never reaches itself.

BLOCK_M, BLOCK_N = 32, 64
_DTYPE_ORDER = (torch.float16, torch.bfloat16, torch.float32)


def _cdiv(a, b):
    return (a + b - 1) // b


def _launch(kernel, grid, *args, **kwargs):
    """The stand-in launch: a real launcher would bind the arguments and call the driver with
    `grid`; here the "kernel" is an ATen out= operator writing into the allocated output."""
    return kernel(*args, **kwargs)


def _higher_dtype(a, b):
    if a is b:
        return a
    assert a in _DTYPE_ORDER and b in _DTYPE_ORDER, "unsupported dtype"
    for d in _DTYPE_ORDER:
        if a is d:
            return b
        if b is d:
            return a


def stub_mm(a, b):
    assert a.dim() == 2 and b.dim() == 2, "mm expects matrices"
    assert a.shape[1] == b.shape[0], "incompatible dimensions"
    if a.stride(0) > 1 and a.stride(1) > 1:
        a = a.contiguous()
    if b.stride(0) > 1 and b.stride(1) > 1:
        b = b.contiguous()
    M = a.shape[0]
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=_higher_dtype(a.dtype, b.dtype))
    grid = (_cdiv(M, BLOCK_M) * _cdiv(N, BLOCK_N), 1, 1)
    _launch(torch.mm, grid, a, b, out=c)
    return c


def stub_addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    assert mat1.shape[1] == mat2.shape[0], "incompatible dimensions"
    M = mat1.shape[0]
    N = mat2.shape[1]
    mat1 = mat1.contiguous()
    out = torch.empty((M, N), device=mat1.device, dtype=mat1.dtype)
    bias = bias.broadcast_to(out.shape)
    grid = (_cdiv(M, BLOCK_M), _cdiv(N, BLOCK_N), 1)
    _launch(torch.addmm, grid, bias, mat1, mat2, beta=beta, alpha=alpha, out=out)
    return out


def stub_bmm(A, B):
    assert A.shape[0] == B.shape[0], "batch dim mismatch"
    assert A.shape[2] == B.shape[1], "K dim mismatch"
    batch, M = A.shape[0], A.shape[1]
    N = B.shape[2]
    out = torch.empty((batch, M, N), dtype=A.dtype, device=A.device)
    grid = (_cdiv(M, BLOCK_M), _cdiv(N, BLOCK_N), batch)
    _launch(torch.bmm, grid, A, B, out=out)
    return out


def stub_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    assert not sparse, "sparse embedding is not supported"
    M = indices.numel()
    N = weight.shape[-1]
    indices = indices.contiguous()
    weight = weight.contiguous()
    out = torch.empty((M, N), device=weight.device, dtype=weight.dtype)
    _launch(torch.index_select, (M, 1, 1), weight, 0, indices.reshape(-1), out=out)
    return out.view(*indices.shape, N)


def stub_provider() -> Provider:
    return Provider(
        "stub",
        "cpu",
        "CPU",
        {"mm": stub_mm, "addmm": stub_addmm, "bmm": stub_bmm, "embedding": stub_embedding},
    )


# ---------------------------------------------------------------- registration and filtering


class Registry:
    """One torch.library IMPL library per op, so each op can be swapped or dropped alone."""

    def __init__(self, dispatch_key: str):
        self.key = dispatch_key
        self.libs: dict = {}

    def set(self, op: str, fn) -> None:
        self.drop(op)
        lib = torch.library.Library("aten", "IMPL")
        lib.impl(op, fn, self.key)
        self.libs[op] = lib

    def drop(self, op: str) -> None:
        lib = self.libs.pop(op, None)
        if lib is not None:
            lib._destroy()

    def clear(self) -> None:
        for op in list(self.libs):
            self.drop(op)


@dataclass
class OpTiming:
    """Warm-up record of one op: calls, and host seconds per call of the mode's wrapper
    (`cand`) and of the eager wrapper (`base`) on the same arguments."""

    calls: int = 0
    record: bool = False
    cand: list = field(default_factory=list)
    base: list = field(default_factory=list)
    differs: int = 0  # warm-up calls whose outputs were not exactly the eager wrapper's
    failed: str = ""  # the error of the mode's wrapper where the eager wrapper ran fine

    def verdict(self, region: bool = False) -> str:
        if self.failed:
            return f"dropped (failed: {self.failed})"
        if self.differs:
            return f"dropped (outputs differ from the eager wrapper's in {self.differs} call(s))"
        if region and not self.calls:
            # A region nested in another one that served every warm-up call: never compared
            # with the model's own code, so not used (session 10's torch.compile run kept its
            # unexercised decoder layers and its tokens differed from eager's)
            return "dropped (not called during warm-up: unverified)"
        if not self.cand:
            return "kept (not timed)" if self.calls else "kept (not called)"
        c, b = statistics.median(self.cand), statistics.median(self.base)
        return "dropped (slower)" if c > b else "kept"


def _warm_caches() -> str:
    v = os.environ.get("BENCH_WARM_CACHES", "")
    return v if v not in ("", "1") else "FlagGems' tuned configs and Triton's kernel cache"


def _same_outputs(a, b) -> bool:
    """Exactly equal outputs (tensors: dtype, shape and every element; NaN equal to NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape
                and bool(torch.equal(a, b) or (a.is_floating_point()
                                               and torch.equal(a.isnan(), b.isnan())
                                               and torch.equal(a.nan_to_num(), b.nan_to_num()))))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same_outputs(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):  # also a model's output (a ModelOutput)
        return (type(a) is type(b) and list(a) == list(b)
                and all(_same_outputs(a[k], b[k]) for k in a))
    if type(a) is not type(b):
        return False
    if isinstance(a, (int, float, str, bytes, bool, type(None), torch.dtype, torch.device)):
        return a == b
    return a is b  # any other object (a KV cache): the same one


_IN_BASE = [0]  # > 0 while a warm-up shim runs the eager wrapper of a region


def _base_call(base, args, kwargs):
    _IN_BASE[0] += 1
    try:
        return base(*args, **kwargs)
    finally:
        _IN_BASE[0] -= 1


def _cache_objects(args, kwargs) -> list:
    """The KV cache among a call's arguments and its layer objects (what a decoder layer's
    forward mutates), or []."""
    for v in (*args, *kwargs.values()):
        layers = getattr(v, "layers", None)
        if type(v).__name__.endswith("Cache") and isinstance(layers, list):
            return [v, *layers]
    return []


def _snapshot(objs) -> list:
    return [dict(o.__dict__) for o in objs]


def _restore(objs, snap) -> None:
    for o, d in zip(objs, snap):
        o.__dict__.clear()
        o.__dict__.update(d)


def _same_state(a, b) -> bool:
    return all(x.keys() == y.keys() and all(_same_outputs(x[k], y[k]) for k in x)
               for x, y in zip(a, b))


def _cand_failed(rec: OpTiming, err: Exception, base, args, kwargs):
    """A warm-up call raised: the eager wrapper runs on the same arguments (from the state
    they had, for a region that updates the KV cache). Where it raises too, that is the call's
    own error and propagates; otherwise the mode's wrapper failed (torch 2.11's C++ wrapper
    cannot build `aten::_grouped_mm`, for one): the filter drops it, as a slower one, and this
    call and the later ones run the eager wrapper. (If the eager wrapper ran first and the
    mode's wrapper then raised, the eager wrapper runs again: a stateful region's state was
    restored before it.)"""
    out = _base_call(base, args, kwargs)
    msg = " ".join(str(err).split())[:200].replace("|", "/")  # (a markdown table cell)
    rec.failed = f"{type(err).__name__}: {msg}"
    say(f"!! a warm-up candidate failed where the eager wrapper did not; dropped: {rec.failed}")
    return out


def _stateful_shim(cand, base, rec: OpTiming):
    """timing_shim for a region that updates the KV cache (a decoder layer): each wrapper runs
    from the same cache state (saved before the first, restored before the second); the
    outputs and the cache states they leave are compared; the mode's state is kept."""
    perf = time.perf_counter

    def shim(*args, **kwargs):
        rec.calls += 1
        if rec.failed:
            return _base_call(base, args, kwargs)
        objs = _cache_objects(args, kwargs)
        before = _snapshot(objs)
        cand_first = bool(rec.calls % 2)
        def eager(*a, **k):
            return _base_call(base, a, k)

        first, second = (cand, eager) if cand_first else (eager, cand)
        try:
            t0 = perf()
            out1 = first(*args, **kwargs)
            t1 = perf()
            after1 = _snapshot(objs)
            _restore(objs, before)
            t2 = perf()
            out2 = second(*args, **kwargs)
            t3 = perf()
        except Exception as e:  # noqa: BLE001  (the mode's wrapper failed, see _cand_failed)
            _restore(objs, before)
            return _cand_failed(rec, e, base, args, kwargs)
        after2 = _snapshot(objs)
        if cand_first:
            out, st, c, ref, ref_st, b = out1, after1, t1 - t0, out2, after2, t3 - t2
        else:
            out, st, c, ref, ref_st, b = out2, after2, t3 - t2, out1, after1, t1 - t0
        if not (_same_outputs(out, ref) and _same_state(st, ref_st)):
            rec.differs += 1
        _restore(objs, st)
        if rec.record:
            rec.cand.append(c)
            rec.base.append(b)
        return out

    return shim


def timing_shim(cand, base, rec: OpTiming, stateful: bool = False):
    """The kernel registered during warm-up: counts calls and, for a filtered mode, runs the
    mode's wrapper and the eager wrapper on the same arguments, alternating their order
    (`stateful`: a region that updates the KV cache, see _stateful_shim)."""
    perf = time.perf_counter
    if stateful and cand is not base:
        return _stateful_shim(cand, base, rec)
    if cand is base:

        def count(*args, **kwargs):
            rec.calls += 1
            return base(*args, **kwargs)

        return count

    def shim(*args, **kwargs):
        rec.calls += 1
        if rec.failed:
            return _base_call(base, args, kwargs)
        try:
            if rec.calls % 2:
                t0 = perf()
                out = cand(*args, **kwargs)
                t1 = perf()
                ref = _base_call(base, args, kwargs)
                t2 = perf()
                c, b = t1 - t0, t2 - t1
            else:
                t0 = perf()
                ref = _base_call(base, args, kwargs)
                t1 = perf()
                out = cand(*args, **kwargs)
                t2 = perf()
                b, c = t1 - t0, t2 - t1
        except Exception as e:  # noqa: BLE001  (the mode's wrapper failed, see _cand_failed)
            return _cand_failed(rec, e, base, args, kwargs)
        if not _same_outputs(out, ref):
            rec.differs += 1
        if rec.record:
            rec.cand.append(c)
            rec.base.append(b)
        return out

    return shim


def make_wrapper(mode: str, fn, dynamic, max_versions=None):
    if mode == "eager":
        return fn
    if mode in TRIDENTS:
        return trident.jit(fn, dynamic=dynamic, max_versions=max_versions)
    if mode == "compile":
        return _outside_compiles(torch.compile(fn, dynamic=dynamic), fn)
    if mode == "compile_cpp":
        return _outside_compiles(
            torch.compile(fn, dynamic=dynamic, options={"cpp_wrapper": True}), fn)
    raise ValueError(mode)


def _outside_compiles(compiled, fn):
    """torch.compile(fn), except where an enclosing compile runs the op itself: Inductor runs
    a region's operators on real tensors under no_dispatch() while it compiles the region, and
    a torch.compile'd kernel entered there fails in Dynamo ("you set no_dispatch() before
    calling into this function").  There the plain wrapper runs (compile time only)."""
    excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
    python_key = torch._C.DispatchKey.Python

    def kernel(*args, **kwargs):
        if excluded(python_key) or torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        return compiled(*args, **kwargs)

    return kernel


_compiler_warm = False


def warm_compiler(device: str) -> None:
    """Compile one small mm before any op is registered: Inductor builds its pattern tables
    lazily, once per process, and may run real operators while doing so; those must not reach
    a registered wrapper (that wrapper being the very function under compilation)."""
    global _compiler_warm
    if not _compiler_warm:
        a = torch.randn(16, 16, device=device)
        torch.compile(lambda a, b: torch.mm(a, b).relu())(a, a)
        torch._dynamo.reset()
        _compiler_warm = True


def trident_status(f, warm_misses=None) -> str:
    s = trident.stats(f)
    if s["fallbacks"] or s["fallback_reason"]:
        return f"FELL BACK to eager: {s['fallback_reason']}"
    if not s["captures"]:
        return "not called"
    line = (
        f"compiled: {s['versions']} version(s), {s['misses']} miss(es), "
        f"{sum(s['hits'])} native hit(s)"
    )
    if warm_misses is not None and s["misses"] > warm_misses:
        line += (f"; {s['misses'] - warm_misses} miss(es) after the warm-up (measured "
                 "requests and the timed request of the host-time table)")
    diffs = global_state_misses(f)
    if diffs:
        line += "; global-state differences in capture reasons: " + ", ".join(
            f"{d} (x{n})" for d, n in diffs.items())
    return line


_GS_DIFF = re.compile(r"global_state == capture-time snapshot \([^)]*\) \[([^\]]*)\]")


def global_state_misses(f) -> dict:
    """What differed from the capture, per failed global-state guard named in the capture
    reasons of f's versions (trident.explain), with how many times: a wrapper whose versions
    multiply by global state rather than by shape."""
    out: dict = {}
    for v in trident.versions(f):
        for d in _GS_DIFF.findall(v.reason or ""):
            out[d] = out.get(d, 0) + 1
    return out


# ---------------------------------------------------------------- models


def model_config(name: str, tiny: bool, layers: int, attn: str, experts: str):
    if name == "qwen3":
        from transformers import Qwen3Config

        dims = {
            "vocab_size": 151936,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
        }
        if tiny:
            dims = {
                "vocab_size": 1024,
                "hidden_size": 64,
                "intermediate_size": 192,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
            }
        return Qwen3Config(
            **dims,
            num_hidden_layers=layers,
            hidden_act="silu",
            max_position_embeddings=40960,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            tie_word_embeddings=False,
            attention_bias=False,
            use_sliding_window=False,
            max_window_layers=36,
            bos_token_id=151643 if not tiny else 1,
            eos_token_id=151645 if not tiny else 2,
            attn_implementation=attn,
        )
    if name == "deepseek_v2":
        from transformers import DeepseekV2Config

        dims = {
            "vocab_size": 102400,
            "hidden_size": 2048,
            "intermediate_size": 10944,
            "moe_intermediate_size": 1408,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "num_experts_per_tok": 6,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
        }
        if tiny:
            dims = {
                "vocab_size": 1024,
                "hidden_size": 64,
                "intermediate_size": 192,
                "moe_intermediate_size": 32,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "n_routed_experts": 8,
                "n_shared_experts": 2,
                "num_experts_per_tok": 2,
                "kv_lora_rank": 32,
                "qk_nope_head_dim": 16,
                "qk_rope_head_dim": 8,
                "v_head_dim": 16,
            }
        return DeepseekV2Config(
            **dims,
            num_hidden_layers=layers,
            q_lora_rank=None,
            first_k_dense_replace=1,
            topk_method="greedy",
            n_group=1,
            topk_group=1,
            routed_scaling_factor=1.0,
            norm_topk_prob=False,
            hidden_act="silu",
            max_position_embeddings=163840,
            rms_norm_eps=1e-6,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 40.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 0.707,
                "mscale_all_dim": 0.707,
            },
            tie_word_embeddings=False,
            attention_bias=False,
            bos_token_id=100000 if not tiny else 1,
            eos_token_id=100001 if not tiny else 2,
            attn_implementation=attn,
            experts_implementation=experts,
        )
    raise ValueError(name)


def build_model(name: str, a, device: str):
    from transformers import AutoModelForCausalLM

    cfg = model_config(name, a.tiny, a.layers, a.attn, a.experts)
    torch.manual_seed(0)
    t = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval().requires_grad_(False)  # inference: no parameter asks for autograd
    n = sum(p.numel() for p in model.parameters())
    say(
        f"built {name}: {type(model).__name__}, {cfg.num_hidden_layers} layer(s) "
        f"(published {PUBLISHED_LAYERS[name]}), {n / 1e6:.1f} M parameters, "
        f"attention={model.config._attn_implementation}, "
        f"experts={getattr(model.config, '_experts_implementation', None)}, "
        f"{time.perf_counter() - t:.1f}s"
    )
    return model


# ---------------------------------------------------------------- decoding


@dataclass
class Request:
    prompt_set: str
    prompt: int
    n_prompt: int
    tokens: list
    ttft: float  # seconds
    itl: list  # seconds, one per token after the first
    total: float
    misses: int = 0  # trident: misses (captures) of its wrappers during this request

    @property
    def tpot(self) -> float:
        n = len(self.tokens)
        return (self.total - self.ttft) / (n - 1) if n > 1 else float("nan")


def decode(model, ids, n_new: int, device: str, sync) -> tuple:
    """Greedy decoding with a KV cache: returns (tokens, ttft, itl, total)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    x = torch.tensor([ids], device=device)
    toks, itl = [], []
    perf = time.perf_counter
    with torch.no_grad():
        sync()
        t0 = perf()
        out = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1, :].argmax(-1, keepdim=True)
        sync()
        prev = perf()
        ttft = prev - t0
        toks.append(tok)
        for _ in range(n_new - 1):
            out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1, :].argmax(-1, keepdim=True)
            sync()
            t = perf()
            itl.append(t - prev)
            prev = t
            toks.append(tok)
    return torch.cat(toks, 1)[0].tolist(), ttft, itl, prev - t0


class OutOfTime(BaseException):
    """The time budget ran out.  A BaseException, so that the alarm that cuts a warm-up stuck
    in a long compile (`ModeSession.warm`) is not turned into a fallback by an `except
    Exception` on the way (Trident's, Dynamo's)."""


_ALARM: list = []  # armed: SIGALRM raises OutOfTime (only during a warm-up)


def _on_alarm(signum, frame):
    if _ALARM:
        _ALARM.clear()
        raise OutOfTime("warm-up cut: time budget")


# ---------------------------------------------------------------- one mode on one model


@dataclass
class ModeRun:
    mode: str
    model: str
    requests: list = field(default_factory=list)
    settle: list = field(default_factory=list)  # the warm-up's replay of the measured prompts
    timings: dict = field(default_factory=dict)  # op -> OpTiming
    kept: dict = field(default_factory=dict)  # op -> "mode" | "eager"
    trident: dict = field(default_factory=dict)  # op -> status line
    explain: dict = field(default_factory=dict)  # op -> trident.explain text
    warm_versions: dict = field(default_factory=dict)  # op -> Trident versions after warm-up
    # op -> (calls per token, median host us per call, host ms per token) in one extra request
    breakdown: dict = field(default_factory=dict)
    breakdown_tpot: float = float("nan")  # that request's TPOT, ms
    profile: str = ""  # --torch-profile: the profiled request's operator table
    dynamo: str = ""  # torch.compile modes: graphs and graph breaks during warm-up
    note: str = ""
    error: str = ""  # "ExcType: message" when the mode failed
    error_tb: str = ""  # the last lines of its traceback
    seconds: float = 0.0


# --regions names.  Classes: the suffix of the model's class names whose forward is compiled (the
# rotary embedding class is not one: under Trident, Qwen3's decorated forward falls back, "guard
# on unknown local 'fn'", a closure variable of a decorator Dynamo inlines).  Functions: module
# level functions of the model's modeling module that its forward looks up at call time, so a
# patched global is what the model calls (`rope` applies the rotary embedding to q and k, `attn`
# is the eager attention: repeat_kv, q k^T, mask, softmax, dropout, p v).
REGIONS = {"norm": "RMSNorm", "mlp": "MLP", "rope": None, "attn": None,
           "selfattn": "Attention", "layer": "DecoderLayer", "model": "ForCausalLM"}
# regions that update the KV cache: the warm-up filter saves and restores it around each run
STATEFUL = ("Attention.forward", "DecoderLayer.forward", "ForCausalLM.forward")
REGION_TEXT = {"norm": "the forward of the model's RMSNorm classes",
               "mlp": "the forward of its MLP classes",
               "rope": "its apply_rotary_pos_emb / apply_rotary_emb function",
               "attn": "its eager_attention_forward function",
               "selfattn": "the forward of its attention classes, KV-cache update included",
               "layer": "the forward of its decoder-layer classes, KV-cache update included",
               "model": "the whole model's forward (`*ForCausalLM.forward`: embedding, mask, "
                        "rotary embedding, every layer, final norm, lm_head; it returns a "
                        "ModelOutput), KV-cache update included"}
REGION_FUNCS = {"rope": ("apply_rotary_pos_emb", "apply_rotary_emb"),
                "attn": ("eager_attention_forward",)}


@dataclass
class Region:
    """One compiled region: `owner.attr` is replaced (a class's forward or a module's global)."""
    owner: object
    attr: str
    orig: object
    method: bool  # a class's forward: installed as a method calling wrapper(self, ...)

    def install(self, fn) -> None:
        # Always the same wrapper, also around the model's own code (a dropped region): an
        # enclosing region's versions were traced through it during warm-up, and guard its code
        # (session 10: the measured requests missed when a dropped layer region was installed
        # as the bare forward).
        orig = self.orig

        def region(*args, **kwargs):
            # Inside another region's capture (Dynamo traces the enclosing forward): the
            # model's own code, so that regions nest (a decoder layer holds norms and an MLP).
            # Inside a warm-up shim's eager run of an enclosing region too: that run is the
            # model's own code, with no nested shim adding its own second run to the timing.
            if torch.compiler.is_compiling() or _IN_BASE[0]:
                return orig(*args, **kwargs)
            return fn(*args, **kwargs)

        setattr(self.owner, self.attr, _as_method(region) if self.method else region)

    def restore(self) -> None:
        setattr(self.owner, self.attr, self.orig)


def region_classes(model, kinds) -> dict:
    """What a filtered mode compiles besides the operators (`--regions`): `norm` the RMSNorm
    classes' forward, `mlp` the MLP classes', `rope` / `attn` the modeling module's rotary and
    eager-attention functions, `selfattn` / `layer` the attention / decoder-layer classes'
    forward.  Regions nest (an installed region runs the model's own code while an enclosing
    region is being captured).  All but `selfattn` and `layer` are pure functions of their
    inputs (the warm-up filter runs them twice); those two update the KV cache, which the
    filter saves and restores around each of its two runs.  Key: "<Class>.forward" or "<function>"; value: a Region."""
    out = {}
    for m in model.modules():
        n = type(m).__name__
        if any(REGIONS[k] and n.endswith(REGIONS[k]) for k in kinds):
            out[f"{n}.forward"] = Region(type(m), "forward", type(m).__dict__["forward"], True)
    mod = sys.modules[type(model).__module__]
    for k in kinds:
        for fname in REGION_FUNCS.get(k, ()):
            if callable(getattr(mod, fname, None)):
                out[fname] = Region(mod, fname, getattr(mod, fname), False)
    return out


def _as_method(f):
    """A function (so a descriptor: bound to the module) calling f(self, ...)."""
    def forward(self, *args, **kwargs):
        return f(self, *args, **kwargs)
    return forward


class ModeSession:
    """One mode on one model, in phases: `warm()` (wrappers, regions, warm-up requests, the
    filter's decisions), `measure(set, i)` (one measured request with the mode installed),
    `finish()` (breakdown request, Trident's final status).  Between phases nothing of the
    mode stays installed, so that the measured requests of several modes can interleave
    (`--interleave`): the machine's drift then falls on every mode alike.  A phase that raises
    records the failure (`run.error`) and later phases do nothing."""

    def __init__(self, mode, name, model, prov: Provider, a, deadline):
        self.mode, self.name, self.model, self.prov, self.a = mode, name, model, prov, a
        self.deadline = deadline
        self.run = ModeRun(mode, name)
        self.reg = Registry(prov.dispatch_key)
        self.sync = torch.cuda.synchronize if prov.device == "cuda" else (lambda: None)
        self.wrappers: dict = {}
        self.regions: dict = {}  # key -> Region
        self.warm_misses: dict = {}
        self.done = False  # failed or stopped: no more phases

    def request(self, set_name, i, n_new=None):
        if STOP:  # a signal whose exception something swallowed (e.g. a weakref callback)
            raise Terminated(STOP[0])
        if time.time() > self.deadline:
            raise OutOfTime
        ids = token_ids(PROMPT_SETS[set_name][i], self.model.config.vocab_size)
        m0 = self.misses()
        toks, ttft, itl, total = decode(self.model, ids, n_new or self.a.new_tokens,
                                        self.prov.device,
                                        self.sync)
        return Request(set_name, i, len(ids), toks, ttft, itl, total, self.misses() - m0)

    def misses(self) -> int:
        """Trident: the misses of every wrapper of this mode so far (0 for other modes)."""
        if self.mode not in TRIDENTS:
            return 0
        return sum(trident.stats(w)["misses"] for w in self.wrappers.values())

    def install(self) -> None:
        """The measured configuration: kept wrappers registered, kept regions installed."""
        for op, fn in self.prov.ops.items():
            if self.mode != "torch":
                self.reg.set(op, self.wrappers[op] if self.run.kept[op] == self.mode else fn)
        for key, reg_ in self.regions.items():
            reg_.install(self.wrappers[key] if self.run.kept[key] == self.mode else reg_.orig)

    def uninstall(self) -> None:
        self.reg.clear()
        for reg_ in self.regions.values():
            reg_.restore()

    def _phase(self, fn) -> None:
        if self.done:
            return
        t = time.perf_counter()
        env = MODE_ENV.get(self.mode, {})
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            fn()
        except OutOfTime as e:
            self.run.note = f"stopped: time budget{' (' + str(e) + ')' if str(e) else ''}"
            self.done = True
            say(f"!! {self.name}/{self.mode}: time budget exhausted, stopping")
        except (Exception, Terminated, KeyboardInterrupt) as e:  # noqa: BLE001  (one failing
            # mode must not lose the others; a signal ends this mode with a report, then the
            # run stops)
            self.done = True
            mode_failed(self.run, e)
            if self.mode in TRIDENTS:  # what each Trident wrapper had done by then
                for op, w in self.wrappers.items():
                    try:
                        self.run.trident[op] = trident_status(w)
                        # the capture reasons of misses after the warm-up (a measured
                        # request's) are only in a fresh explain text
                        self.run.explain[op] = trident.explain(w)
                        say(f"   trident {self.name} {op}: {self.run.trident[op]}")
                    except Exception as e2:  # noqa: BLE001
                        self.run.trident[op] = f"stats failed: {type(e2).__name__}: {e2}"
        finally:
            self.uninstall()
            self.run.seconds += time.perf_counter() - t
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def warm(self, until: float | None = None) -> None:
        """Warm-up, stopped at `until` (default: the run's deadline) even inside one request:
        an alarm then raises OutOfTime wherever the mode is (say, Inductor compiling its 24th
        decoder layer), so that the measured requests keep the time reserved for them."""
        until = self.deadline if until is None else until
        saved, self.deadline = self.deadline, until
        left = until - time.time()
        if left > 0 and hasattr(signal, "setitimer"):
            _ALARM.append(True)
            signal.setitimer(signal.ITIMER_REAL, left)
        try:
            self._phase(self._warm)
        finally:
            if hasattr(signal, "setitimer"):
                signal.setitimer(signal.ITIMER_REAL, 0)
            _ALARM.clear()
            self.deadline = saved

    def _warm(self) -> None:
        mode, a, run = self.mode, self.a, self.run
        if mode != "torch":
            if mode.startswith("compile"):
                warm_compiler(self.prov.device)
                torch._dynamo.utils.counters.clear()
            for op, fn in self.prov.ops.items():
                self.wrappers[op] = make_wrapper(mode, fn, a.dynamic, a.max_versions)
                run.timings[op] = OpTiming()
                self.reg.set(op, timing_shim(self.wrappers[op], fn, run.timings[op]))
        if mode in FILTERED:
            for key, reg_ in region_classes(self.model, a.regions).items():
                self.regions[key] = reg_
                self.wrappers[key] = make_wrapper(mode, reg_.orig, a.dynamic, a.max_versions)
                run.timings[key] = OpTiming()
                reg_.install(timing_shim(self.wrappers[key], reg_.orig, run.timings[key],
                                         stateful=key.endswith(STATEFUL)))
        # Warm-up: prompts of every set in turn. The filter's samples come from the second half
        # (captures and compiles happen in the first), or from all when there is one request.
        order = [
            (s, i)
            for i in range(max(map(len, PROMPT_SETS.values())))
            for s in a.prompts
            if i < len(PROMPT_SETS[s])
        ]
        # The last requests of the warm-up, one per prompt set, replay the first measured
        # prompts in the measured configuration (settle_count): a capturing request does not
        # run its version's native program, so the program of a shape only it had (the first
        # prompt's static version) and the nested wrappers' calls it makes (which versions
        # captured from eager calls need not match) would otherwise first run inside a
        # measured request.
        settle = measured_order(a)[:settle_count(a)]
        shimmed = a.warmup - len(settle)
        for r in range(shimmed):
            for rec in run.timings.values():
                rec.record = r >= shimmed // 2
            self.request(*order[r % len(order)], self.a.warmup_tokens)
        for op in self.prov.ops:
            if mode == "torch":
                continue
            keep = mode not in FILTERED or not run.timings[op].verdict().startswith("dropped")
            run.kept[op] = mode if keep else "eager"
        for key in self.regions:
            keep = not run.timings[key].verdict(region=True).startswith("dropped")
            run.kept[key] = mode if keep else "eager"
        if settle:
            self.install()  # _phase uninstalls
            for s_, i in settle:
                run.settle.append(self.request(s_, i, self.a.warmup_tokens))
        if mode in TRIDENTS:
            for op, w in self.wrappers.items():
                run.trident[op] = trident_status(w)
        if mode.startswith("compile"):
            run.dynamo = dynamo_summary()
        report_warmup(run)
        if mode in TRIDENTS:
            for op, w in self.wrappers.items():
                self.warm_misses[op] = trident.stats(w)["misses"]
                run.warm_versions[op] = trident.stats(w)["versions"]
                run.explain[op] = trident.explain(w)
                say("   " + run.explain[op].split("\n")[0])

    def measure(self, set_name, i) -> None:
        def one():
            self.install()
            self.run.requests.append(self.request(set_name, i))

        self._phase(one)

    def finish(self) -> None:
        def fin():
            a, run = self.a, self.run
            if a.breakdown and self.mode != "torch":
                self.install()
                run.breakdown_tpot, run.breakdown = breakdown(
                    self.reg, {op: self.wrappers[op] if run.kept[op] == self.mode else fn
                               for op, fn in self.prov.ops.items()},
                    lambda: self.request(a.prompts[0], 0), a.new_tokens)
            if a.torch_profile:
                self.install()
                run.profile = torch_profile(lambda: self.request(a.prompts[0], 0),
                                            a.new_tokens, f"{run.model}/{self.mode}")
            if self.mode in TRIDENTS:  # again: a miss after the warm-up counts too (the
                # measured requests' own misses are in their rows of the report)
                run.trident = {op: trident_status(w, self.warm_misses.get(op))
                               for op, w in self.wrappers.items()}
                run.explain = {op: trident.explain(w) for op, w in self.wrappers.items()}

        self._phase(fin)
        self.done = True


def settle_count(a) -> int:
    """How many of the warm-up requests replay the first measured prompts in the measured
    configuration: one per prompt set, when the warm-up has at least two requests per set (the
    others feed the filter)."""
    return len(a.prompts) if a.warmup >= 2 * len(a.prompts) else 0


def measured_order(a) -> list:
    """(prompt set, prompt index) of every measured request: round r holds request r of every
    prompt set, so that a slow stretch of the machine (it drifts over a run) falls on every
    set alike rather than on the last one."""
    return [(s, r % len(PROMPT_SETS[s])) for r in range(a.requests) for s in a.prompts]


def run_mode(mode, name, model, prov: Provider, a, prompts, deadline) -> ModeRun:
    """One mode from warm-up to its last measured request (`--no-interleave`)."""
    sess = ModeSession(mode, name, model, prov, a, deadline)
    sess.warm()
    for s, i in measured_order(a):
        sess.measure(s, i)
    sess.finish()
    if mode.startswith("compile"):
        torch._dynamo.reset()
    return sess.run


def run_interleaved(modes, name, model, prov: Provider, a, deadline) -> list:
    """Every mode warmed up in turn, then the measured requests in rounds: request k of every
    mode, the modes' order rotating by one each round; then each mode's breakdown.  Warm-ups
    end `--reserve-s` before the deadline (a warm-up still running then is cut and its mode not
    measured), so that the measured requests of the modes that did warm up have that time."""
    sessions = []
    warm_until = deadline - a.reserve_s
    for mode in modes:
        if STOP or time.time() > warm_until:
            sessions.append(None)
            continue
        say(f"== {name} / {mode} (warm-up)")
        sess = ModeSession(mode, name, model, prov, a, deadline)
        sess.warm(warm_until)
        sessions.append(sess if not sess.done else sess.run)  # a ModeRun: failed or cut
        if sess.done:
            say(f"!! {name}/{mode}: not measured ({sess.run.note or sess.run.error})")
    live = [x for x in sessions if isinstance(x, ModeSession)]
    for k, (s, i) in enumerate(measured_order(a)):
        for j in range(len(live)):
            live[(j + k) % len(live)].measure(s, i)
    for sess in live:
        sess.finish()
    torch._dynamo.reset()
    runs = []
    for mode, sess in zip(modes, sessions):
        if sess is None:
            runs.append(ModeRun(mode, name, note=f"skipped: run stopped ({STOP[0]})" if STOP
                                else "skipped: time budget"))
        elif isinstance(sess, ModeRun):
            runs.append(sess)
        else:
            runs.append(sess.run)
    return runs


def breakdown(reg: Registry, kernels: dict, one_request, n_tokens: int):
    """One more request with each registered kernel timed on the host: per op, calls per token,
    median us per call and ms per token. Runs after the measured requests (the timer adds a
    Python frame per call, which the measured requests do not pay)."""
    perf = time.perf_counter
    times = {op: [] for op in kernels}

    def timed(fn, ts):
        def kernel(*args, **kwargs):
            t0 = perf()
            out = fn(*args, **kwargs)
            ts.append(perf() - t0)
            return out

        return kernel

    for op, fn in kernels.items():
        reg.set(op, timed(fn, times[op]))
    try:
        req = one_request()
    finally:
        for op, fn in kernels.items():
            reg.set(op, fn)
    out = {}
    for op, ts in times.items():
        if ts:
            out[op] = (len(ts) / n_tokens, statistics.median(ts) * 1e6, sum(ts) / n_tokens * 1e3)
    return req.tpot * 1e3, out


# the host calls that say what a decode step costs besides ATen's operators: kernel launches
# (runtime and driver API: Triton's and Trident's launches are cuLaunchKernel) and the calls
# that wait for the GPU
PROFILE_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC",
                 "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                 "cudaEventSynchronize", "cudaMalloc", "cudaFree")


def torch_profile(one_request, n_tokens: int, title: str, rows: int = 45) -> str:
    """One more request under torch.profiler (CPU, and CUDA when there is one): the operators
    and runtime calls by host self time, with calls per generated token, then the launch and
    synchronisation calls.  What a native version's program calls goes through the dispatcher,
    whose RecordFunction hook the profiler sees, so Trident's ATen calls are in the table too."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        req = one_request()
    evs = prof.key_averages()
    total_self = sum(e.self_cpu_time_total for e in evs)
    top = sorted(evs, key=lambda e: -e.self_cpu_time_total)[:rows]
    lines = [f"## {title}: one request under torch.profiler ({n_tokens} new tokens, TPOT "
             f"{req.tpot * 1e3:.3f} ms with the profiler on)", "",
             f"host self time of all events: {total_self / 1e3:.1f} ms "
             f"({total_self / n_tokens / 1e3:.3f} ms per token)", "",
             "| event | calls/token | self host us/token | self host us/call |",
             "|---|---:|---:|---:|"]
    for e in top:
        lines.append(f"| {e.key[:70]} | {e.count / n_tokens:.1f} | "
                     f"{e.self_cpu_time_total / n_tokens:.1f} | "
                     f"{e.self_cpu_time_total / max(e.count, 1):.2f} |")
    byname = {e.key: e for e in evs}
    lines += ["", "| launch / sync call | calls/token | host us/call |", "|---|---:|---:|"]
    for k in PROFILE_CALLS:
        if k in byname:
            e = byname[k]
            lines.append(f"| {k} | {e.count / n_tokens:.1f} | "
                         f"{e.cpu_time_total / max(e.count, 1):.2f} |")
    if torch.cuda.is_available():
        gpu = sum(getattr(e, "self_device_time_total", 0) or 0 for e in evs)
        lines += ["", f"GPU kernel time: {gpu / n_tokens / 1e3:.3f} ms per token "
                  "(self device time of all events)"]
    return "\n".join(lines) + "\n"


class Terminated(BaseException):
    """SIGTERM arrived (e.g. from `timeout`).  A BaseException, so that no `except Exception`
    on the way (Trident's and Dynamo's fallback paths) turns it into a fallback."""


STOP: list = []  # set when a signal ended a mode: main() runs no further mode


def _on_sigterm(signum, frame):
    STOP.append(f"signal {signum}")
    raise Terminated(f"signal {signum} (SIGTERM: a timeout?)")


def mode_failed(run: ModeRun, e: BaseException, tb_lines: int = 25) -> None:
    """First one line saying what failed, then the end of the traceback (output tails get cut
    from the front, so the type and message come first and the innermost frames last)."""
    if isinstance(e, (Terminated, KeyboardInterrupt)):
        STOP.append(type(e).__name__)
    msg = " ".join(str(e).split())
    run.error = f"{type(e).__name__}: {msg[:500]}"
    say(f"MODE FAILED: {run.model}/{run.mode}: {run.error}")
    # (without Python's ^^^ position markers, which would halve what 25 lines show)
    tb = [x for x in traceback.format_exc().rstrip("\n").split("\n") if x.strip(" ^~")]
    run.error_tb = "\n".join(tb[-tb_lines:])
    say(run.error_tb)
    run.note = f"error: {type(e).__name__}: {msg[:200]}".replace("|", "/")


def dynamo_summary() -> str:
    c = torch._dynamo.utils.counters
    breaks = c["graph_break"]
    top = "; ".join(f"{n}x {r[:120]}" for r, n in breaks.most_common(3))
    return (
        (
            f"{c['stats']['unique_graphs']} graph(s), {sum(breaks.values())} graph break(s)"
            + (f" (most frequent: {top})" if top else "")
        )
        .replace("|", "/")
        .replace("\n", " ")
    )


def report_warmup(run: ModeRun) -> None:
    for op, rec in run.timings.items():
        line = f"   {run.model}/{run.mode} {op}: {rec.calls} call(s) in warm-up"
        if rec.cand:
            line += (
                f", host median {statistics.median(rec.cand) * 1e6:.1f} us vs eager wrapper "
                f"{statistics.median(rec.base) * 1e6:.1f} us -> {rec.verdict(region=op not in OPS)}"
            )
        say(line)
    if run.mode in FILTERED:
        dropped = [op for op, k in run.kept.items() if k == "eager"]
        say(f"   {run.model}/{run.mode}: dropped (eager wrapper instead): {dropped or 'none'}")
    for op, st in run.trident.items():
        say(f"   trident {run.model} {op}: {st}")
    if run.dynamo:
        say(f"   {run.model}/{run.mode} Dynamo in warm-up: {run.dynamo}")


# ---------------------------------------------------------------- report


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
        cwd=HERE,
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


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    ap.add_argument("--tag", default=None)
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    a.dynamic = {"auto": None, "true": True, "false": False}[a.dynamic]
    a.regions = [r.strip() for r in a.regions.split(",") if r.strip()]
    if set(a.regions) - set(REGIONS):
        ap.error(f"--regions: unknown {sorted(set(a.regions) - set(REGIONS))}; "
                 f"choose from {', '.join(REGIONS)}")
    a.layers = a.layers or (2 if a.tiny else 4)
    a.prompts = [s for s in a.prompts.split(",") if s]
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
    tag = a.tag or (prov.name + ("-tiny" if a.tiny else ""))
    os.makedirs(a.out_dir, exist_ok=True)
    path_md = os.path.join(a.out_dir, f"llm_decode_{datetime.date.today()}_{tag}.md")
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
