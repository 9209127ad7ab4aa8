"""Guard sweep: which Dynamo guard sources real libraries make Trident translate, and how.

    python benchmarks/guard_sweep.py [--transformers] [--flaggems] [--models llama,qwen3]
                                     [--attn sdpa,eager] [--targets rms_norm,mlp] [--ops add,mm]
                                     [--device D] [--jobs N] [--budget-s S] [--op-timeout-s S]
                                     [--out DIR] [--tag T]

Each target is a plain Python function that calls the library, unmodified.  Per target: the
function runs eagerly, then under `trident.jit` four times: the capture, a call with fresh
inputs of the same shapes (which should be a hit), a second shape (a miss: automatic dynamic
shapes capture a dynamic version) and a third shape (which that version should serve); each
result is compared with eager's on the same inputs (values; structure, shapes and dtypes only
for a random operator).  Outcome, worst first:

  error      trident.jit raised where eager did not
  mismatch   a result differs from eager's
  fallback   a path runs eagerly (an eager version or a remembered call key): the reason
  native     every call ran natively
  skipped    no inputs could be built, eager itself raised, or the time was up

Every guard entry Dynamo handed to Trident (`trident.scm.translate` is wrapped) is recorded
with its guard kind and the class chain of its source, outermost first
(`AttrSource(AttrSource(LocalSource))` is `L['m'].a.b`; a repeated run of classes folds:
`(UnspecializedNNModuleSource.DictGetItemSource.AttrSource)*3(...)` is three `_modules[...]`
steps; a `DictGetItemSource` whose key is itself a source shows it in brackets), and each entry
is translated alone (with its capture) to say whether that kind and source are translated or
refused, and why.  Shape guards contribute the sources of their symbols
(`TensorPropertySource(...)`).  TRIDENT_CACHE is off: every version is captured here.

Targets:
  --transformers  tiny random Llama, Qwen3, Mistral and DeepSeek-V2 (transformers 5.x, on the
                  CPU, under no_grad): RMSNorm, rotary embedding, MLP (DeepSeek-V2's MoE too),
                  attention, a decoder layer (the module a free variable, and an argument), the
                  causal LM's forward (plain, with a padding mask, with labels, returning a
                  tuple, under inference_mode, returning a new KV cache), one decode step on a
                  prefilled DynamicCache and on a StaticCache argument, and greedy generate;
                  then attention, masked forward and decode steps again with eager attention,
                  and DeepSeek-V2's MoE with the batched_mm and grouped_mm experts.  The
                  default when no other flag is given.
  --flaggems      every public callable of `flag_gems.ops` (FlagGems 5.0.2) whose name or
                  signature it can build inputs for (pointwise unary/binary with tensor or
                  scalar operands, reductions over a dim, norms, softmax, mm/addmm/bmm/baddbmm,
                  cumsum, where, cat/stack, embedding, index ops, sort/topk, factories, ...),
                  common LLM operators first; the rest (out= variants, backward operators,
                  unknown parameters) is counted, with the reason.  Needs CUDA and the wheel.
                  Each operator is the body of `def f(*args): return op(*args)`.  --jobs N runs
                  N worker processes (target i goes to worker i % N), --op-timeout-s bounds one
                  operator (SIGALRM), --budget-s each worker's total (the rest: skipped).
  --liger         Liger-Kernel 0.8.5's six forwards of tests/gpu/test_liger.py (needs CUDA).
  --flaggems-stub the same pipeline on the CPU with ATen functions under FlagGems' names (a
                  check of the input rules and reporting; not a FlagGems result).

Writes <out>/guard_sweep_<tag>.json and .md (date, commit, machine; outcome counts; one row per
target; source classes and (kind, source chain) pairs with their handling) and prints the
table.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as _dt
import inspect
import json
import math
import os
import re
import signal
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch

# Versions a previous process persisted would be loaded without a capture, so their guards
# would never reach `translate`: every run captures afresh.
os.environ["TRIDENT_CACHE"] = "off"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import trident  # noqa: E402
import trident.scm as scm_mod  # noqa: E402
from trident.guards.translate import ConstPool  # noqa: E402

import report_info  # noqa: E402

OUTCOMES = ("native", "fallback", "mismatch", "error", "skipped")

# ------------------------------------------------------------------ source chains


def source_chain(src) -> str:
    """`AttrSource(AttrSource(LocalSource))` for a Dynamo source: classes only, outermost
    first; a repeated run of one to four classes collapses, so a module path reads
    `(UnspecializedNNModuleSource.DictGetItemSource.AttrSource)*3(LocalSource)`."""
    parts = []
    s = src
    while s is not None:
        name = type(s).__name__
        idx = getattr(s, "index", None)
        if idx is not None and hasattr(idx, "guard_source") and hasattr(idx, "name"):
            name += f"[{source_chain(idx)}]"  # a key that is itself a source
        parts.append(name)
        s = getattr(s, "base", None)
    return _fold(parts)


def _fold(parts: list) -> str:
    out: list = []  # (label, count)
    i = 0
    while i < len(parts):
        best = (1, 1)  # (period, repeats)
        for p in range(1, 5):
            k = 1
            while parts[i + k * p: i + (k + 1) * p] == parts[i: i + p]:
                k += 1
            if k > 1 and k * p > best[0] * best[1]:
                best = (p, k)
        p, k = best
        label = parts[i] if p == 1 else "(" + ".".join(parts[i: i + p]) + ")"
        out.append(label if k == 1 else f"{label}*{k}")
        i += p * k
    text = ""
    for label in reversed(out):
        text = label if not text else f"{label}({text})"
    return text


def source_classes(src) -> list:
    """Every source class in the chain (keys that are sources included)."""
    out = []
    s = src
    while s is not None:
        out.append(type(s).__name__)
        idx = getattr(s, "index", None)
        if idx is not None and hasattr(idx, "guard_source") and hasattr(idx, "name"):
            out.extend(source_classes(idx))
        s = getattr(s, "base", None)
    return out


@dataclass
class GuardRecord:
    """Every guard entry seen while one target ran, by (kind, source chain)."""

    # (kind, chain) -> {"n": count, "refused": reason or None, "example": guard name}
    entries: dict = field(default_factory=dict)

    def add(self, kind: str, chain: str, refused: str | None, name: str,
            classes: list) -> None:
        r = self.entries.setdefault((kind, chain), {"n": 0, "refused": None, "example": name,
                                                    "classes": sorted(set(classes))})
        r["n"] += 1
        if refused and not r["refused"]:
            r["refused"] = refused


@contextlib.contextmanager
def recording(rec_holder: list):
    """Wrap `trident.scm.translate`: record each entry's kind and source chain, and whether
    the entry translates on its own (with the capture it came from)."""
    orig = scm_mod.translate

    def recording_translate(entries, cap, fn, consts, rt):
        rec: GuardRecord = rec_holder[0]
        for e in entries:
            kind = e.guard_type
            g = e.orig_guard
            srcs = []
            if kind == "SHAPE_ENV":
                for _text, mapping in getattr(cap, "shape_exprs", ()) or ():
                    srcs.extend(mapping.values())
            else:
                srcs.append(g.originating_source)
                if kind == "DUPLICATE_INPUT":
                    kw = getattr(g.create_fn, "keywords", None) or {}
                    if kw.get("source_b") is not None:
                        srcs.append(kw["source_b"])
            refused = None
            try:
                orig([e], cap, fn, ConstPool(), rt)
            except trident.UnsupportedError as ex:
                refused = str(ex)
            except Exception as ex:  # noqa: BLE001 - recorded, the real translate decides
                refused = f"{type(ex).__name__}: {ex}"
            if not srcs:
                rec.add(kind, "-", refused, g.name, [])
            for s in dict.fromkeys(srcs):
                rec.add(kind, source_chain(s), refused, getattr(s, "name", g.name),
                        source_classes(s))
        return orig(entries, cap, fn, consts, rt)

    scm_mod.translate = recording_translate
    try:
        yield
    finally:
        scm_mod.translate = orig


# ------------------------------------------------------------------ comparing results


def _flatten(x, out: list, depth: int = 0) -> None:
    if depth > 6:
        out.append(("?", type(x).__name__))
        return
    if isinstance(x, torch.Tensor):
        out.append(("t", x))
    elif isinstance(x, (list, tuple)):
        out.append(("seq", type(x).__name__, len(x)))
        for v in x:
            _flatten(v, out, depth + 1)
    elif isinstance(x, dict):
        out.append(("dict", type(x).__name__, tuple(x.keys())))
        for v in x.values():
            _flatten(v, out, depth + 1)
    elif x is None or isinstance(x, (bool, int, float, str, torch.dtype, torch.device)):
        out.append(("c", x))
    elif hasattr(x, "__dict__"):
        d = {k: v for k, v in vars(x).items() if not k.startswith("_") and not callable(v)}
        out.append(("obj", type(x).__name__, tuple(d)))
        for v in d.values():
            _flatten(v, out, depth + 1)
    else:
        out.append(("?", type(x).__name__))


def _tol(dtype) -> tuple:
    if dtype in (torch.float16, torch.bfloat16):
        return 2e-2, 2e-2
    if dtype == torch.float32:
        return 1e-4, 1e-5
    return 1e-7, 1e-9


def differ(a, b, values: bool = True) -> str | None:
    """None when `b` (Trident's) equals `a` (eager's), else what differs (only structure,
    shapes and dtypes where not `values`)."""
    fa, fb = [], []
    _flatten(a, fa)
    _flatten(b, fb)
    if len(fa) != len(fb):
        return f"structure: {len(fa)} vs {len(fb)} leaves"
    for i, (x, y) in enumerate(zip(fa, fb)):
        if x[0] != y[0]:
            return f"leaf {i}: {x[0]} vs {y[0]}"
        if x[0] == "t":
            p, q = x[1], y[1]
            if p.shape != q.shape or p.dtype != q.dtype or p.device != q.device:
                return f"leaf {i}: {tuple(p.shape)} {p.dtype} vs {tuple(q.shape)} {q.dtype}"
            if not values:
                continue
            if p.is_floating_point() and p.element_size() == 1:  # float8: allclose has
                p, q = p.float(), q.float()  # no kernel for it
            if p.is_floating_point() or p.is_complex():
                rtol, atol = _tol(p.dtype)
                if not torch.allclose(p, q, rtol=rtol, atol=atol, equal_nan=True):
                    err = (p.double() - q.double()).abs().nan_to_num(0).max().item()
                    return f"leaf {i}: max abs diff {err:.3g}"
            elif not torch.equal(p, q):
                return f"leaf {i}: values differ"
        elif x[0] == "c" and x[1] != y[1] and not (
                isinstance(x[1], float) and math.isnan(x[1]) and math.isnan(y[1])):
            return f"leaf {i}: {x[1]!r} vs {y[1]!r}"
        elif x[0] != "c" and x[:3] != y[:3]:
            return f"leaf {i}: {x[:3]} vs {y[:3]}"
    return None


# ------------------------------------------------------------------ running one target


@dataclass
class Target:
    group: str          # "llama", "flaggems", ...
    name: str           # "rms_norm", ...
    make_fn: object     # () -> the function to jit (a fresh function object each time)
    make_args: object   # (shape index, seed) -> args tuple
    note: str = ""
    random: bool = False  # a random result: compared by structure, shapes and dtypes
    grad: str = "no_grad"  # the mode every call runs under: "no_grad" or "inference_mode"


@dataclass
class Result:
    group: str
    name: str
    outcome: str
    detail: str = ""
    calls: list = field(default_factory=list)   # per call: "hit", "miss", "eager", ...
    versions: int = 0
    eager_paths: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    seconds: float = 0.0
    guards: GuardRecord = field(default_factory=GuardRecord)


class _Timeout(BaseException):
    """--op-timeout-s: a BaseException, so that no `except Exception` in Dynamo or Trident
    turns it into a fallback."""


@contextlib.contextmanager
def _alarm(seconds: float):
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise _Timeout(f"over {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _clone(x):
    """Fresh copies of what a call may mutate: tensors, containers, KV caches (a module or
    other object is passed as itself)."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if type(x) in (list, tuple, Kw):
        return type(x)(_clone(v) for v in x) if type(x) is not Kw else Kw(
            {k: _clone(v) for k, v in x.items()})
    if type(x) is dict:
        return {k: _clone(v) for k, v in x.items()}
    if any(c.__name__ == "Cache" for c in type(x).__mro__):  # a transformers KV cache
        return copy.deepcopy(x)
    return x


def run_target(t: Target, timeout_s: float = 0.0, shapes=(0, 0, 1, 2)) -> Result:
    """Eager, then trident.jit: the capture, a fresh call of the same shapes, a second
    shape (a miss: automatic dynamic shapes capture a dynamic version), a third shape (which
    that dynamic version should serve)."""
    res = Result(t.group, t.name, "native")
    holder = [res.guards]
    t0 = time.perf_counter()
    try:
        with _alarm(timeout_s):
            _run(t, res, holder, shapes)
    except _Timeout as e:
        res.outcome, res.detail = "skipped", f"timeout: {e}"
    res.seconds = time.perf_counter() - t0
    return res


def _run(t: Target, res: Result, holder: list, shapes) -> None:
    fn = t.make_fn()
    try:
        inputs = [t.make_args(s, 100 + i) for i, s in enumerate(shapes)]
    except Exception as e:  # noqa: BLE001
        res.outcome, res.detail = "skipped", f"inputs: {type(e).__name__}: {e}"[:300]
        return
    refs = []
    for args in inputs:
        try:
            with _grad_ctx(t.grad):
                refs.append(_call(fn, _clone(args)))
        except Exception as e:  # noqa: BLE001 - eager itself fails: nothing to compare
            res.outcome, res.detail = "skipped", f"eager raises {type(e).__name__}: {e}"[:300]
            return
    f = trident.jit(t.make_fn())
    problems = []
    with recording(holder), warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        for i, args in enumerate(inputs):
            st0 = trident.stats(f)
            try:
                with _grad_ctx(t.grad):
                    out = _call(f, _clone(args))
            except _Timeout:
                raise
            except Exception as e:  # noqa: BLE001
                res.outcome = "error"
                res.detail = f"call {i}: {type(e).__name__}: {e}"[:400]
                res.calls.append("raised")
                tb = traceback.format_exc().strip().splitlines()
                res.warnings.append(" | ".join(tb[-3:])[:400])
                break
            st1 = trident.stats(f)
            res.calls.append(_call_kind(st0, st1))
            d = differ(refs[i], out, values=not t.random)
            if d is not None:
                problems.append(f"call {i}: {d}")
    st = trident.stats(f)
    res.versions = st["versions"]
    res.eager_paths = [{"version": e.get("version"), "reason": e.get("reason")}
                       for e in st["eager_paths"]]
    res.warnings += [str(w.message)[:300] for w in ws
                     if issubclass(w.category, RuntimeWarning) and "trident" in str(w.message)]
    if res.outcome == "error":
        return
    if problems:
        res.outcome, res.detail = "mismatch", "; ".join(problems)[:400]
    elif st["runs_eagerly"] or st["eager_paths"]:
        res.outcome = "fallback"
        res.detail = st["fallback_reason"] or ""
    elif res.calls[1:2] != ["hit"]:
        res.detail = f"the same-shape call was a {res.calls[1:2]}"
    elif res.calls[3:4] not in (["hit"], []):
        res.detail = f"the third shape was a {res.calls[3]} (no dynamic version served it)"


class Kw(dict):
    """Keyword arguments, as the last element of a target's argument tuple."""


def _call(fn, args):
    if args and type(args[-1]) is Kw:
        return fn(*args[:-1], **args[-1])
    return fn(*args)


def _grad_ctx(mode: str):
    return torch.inference_mode() if mode == "inference_mode" else torch.no_grad()


def _call_kind(st0, st1) -> str:
    if st1["runs_eagerly"] and not st0["runs_eagerly"]:
        return "fallback"
    if st1["captures"] > st0["captures"] or st1["misses"] > st0["misses"]:
        return "miss"
    h0 = sum(st0["hits"])
    h1 = sum(st1["hits"])
    if h1 > h0:
        eager_v = {e["version"] for e in st1["eager_paths"] if e.get("version") is not None}
        hit_v = [i for i, (a, b) in enumerate(zip(st0["hits"] + [0] * 99, st1["hits"]))
                 if b > a]
        return "eager hit" if any(v in eager_v for v in hit_v) else "hit"
    return "eager"  # a remembered call key, or the whole function runs eagerly


# ------------------------------------------------------------------ transformers targets

TINY = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2,
        "max_position_embeddings": 256}
SEQ = (5, 9, 12)  # the shapes: (batch 2, seq 5), (batch 3, seq 9), (batch 4, seq 12)
BATCH = (2, 3, 4)


def tiny_config(model: str, attn: str, experts: str | None = None):
    import transformers as tf

    if model == "llama":
        return tf.LlamaConfig(**TINY, head_dim=32, attn_implementation=attn)
    if model == "qwen3":
        return tf.Qwen3Config(**TINY, head_dim=32, attn_implementation=attn)
    if model == "mistral":
        return tf.MistralConfig(**TINY, head_dim=32, sliding_window=4,
                                attn_implementation=attn)
    if model == "deepseek_v2":
        dims = dict(TINY, num_key_value_heads=2)
        extra = {"experts_implementation": experts} if experts else {}
        return tf.DeepseekV2Config(
            **dims, moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1,
            num_experts_per_tok=2, kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=16,
            qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1, topk_method="greedy",
            n_group=1, topk_group=1, attn_implementation=attn, **extra)
    raise ValueError(model)


# Variants past the first (every target): (label, attention, experts, the targets kept).
VARIANTS = (
    ("eager", "eager", None, ("attention", "causal_lm(mask)", "decode_step",
                              "decode_step(static)")),
    ("batched_mm", None, "batched_mm", ("moe", "causal_lm")),
    ("grouped_mm", None, "grouped_mm", ("moe", "causal_lm")),
)


def transformers_targets(models, attns=("sdpa", "eager")) -> list:
    """Every target of each model with the first attention implementation; with the other
    attention implementations (and, for an MoE model, experts implementations), the targets
    that reach that interface."""
    from transformers import AutoModelForCausalLM

    out = []
    for model in models:
        variants = [("", attns[0], None, None)]
        variants += [v for v in VARIANTS if v[1] in attns[1:]
                     or (v[2] and model == "deepseek_v2")]
        for label, attn, experts, keep in variants:
            cfg = tiny_config(model, attn or attns[0], experts)
            torch.manual_seed(0)
            lm = AutoModelForCausalLM.from_config(cfg).eval()
            ts = _model_targets(model, lm)
            if keep is not None:
                ts = [t for t in ts if t.name in keep]
                for t in ts:
                    t.group = f"{model}[{label}]"
            out.extend(ts)
    return out


def _model_targets(model: str, lm) -> list:
    base = lm.model
    layer0 = base.layers[0]
    layer1 = base.layers[-1]
    attn = layer0.self_attn
    cfg = lm.config
    H = cfg.hidden_size
    V = cfg.vocab_size

    def gen(seed):
        return torch.Generator().manual_seed(seed)

    def hidden(s, seed):
        return torch.randn(BATCH[s], SEQ[s], H, generator=gen(seed))

    def pos(s):
        return torch.arange(SEQ[s]).unsqueeze(0).expand(BATCH[s], -1)

    def rope(s, seed):
        # (cos, sin), or DeepSeek-V2's complex freqs_cis
        with torch.no_grad():
            return base.rotary_emb(hidden(s, seed), pos(s))

    def ids(s, seed):
        return torch.randint(0, V, (BATCH[s], SEQ[s]), generator=gen(seed))

    def mk(name, body, args, note=""):
        out.append(Target(model, name, body, args, note))

    out: list = []
    norm = layer0.input_layernorm
    mk("rms_norm", lambda: (lambda x: norm(x)), lambda s, k: (hidden(s, k),),
       "decoder layer's input RMSNorm")
    rot = base.rotary_emb
    mk("rotary", lambda: (lambda x, p: rot(x, p)), lambda s, k: (hidden(s, k), pos(s)),
       "rotary embedding: (cos, sin)")
    mlp = layer0.mlp
    mk("mlp", lambda: (lambda x: mlp(x)), lambda s, k: (hidden(s, k),), "dense MLP")
    if layer1.mlp.__class__ is not mlp.__class__:
        moe = layer1.mlp
        mk("moe", lambda: (lambda x: moe(x)), lambda s, k: (hidden(s, k),),
           f"{type(moe).__name__}")

    def attn_fn():
        def attention(x, pe):
            return attn(x, position_embeddings=pe, attention_mask=None)
        return attention

    mk("attention", attn_fn, lambda s, k: (hidden(s, k), rope(s, k)),
       f"{type(attn).__name__}, no mask")

    def layer_fn():
        def decoder_layer(x, pe, p):
            return layer0(x, attention_mask=None, position_embeddings=pe, position_ids=p)
        return decoder_layer

    mk("decoder_layer", layer_fn, lambda s, k: (hidden(s, k), rope(s, k), pos(s)),
       "layer 0, the module a free variable")

    def layer_arg_fn():
        def decoder_layer_arg(m, x, pe):
            return m(x, position_embeddings=pe)
        return decoder_layer_arg

    mk("decoder_layer(arg)", layer_arg_fn,
       lambda s, k: (layer1, hidden(s, k), rope(s, k)), "last layer, the module an argument")

    def model_fn():
        def causal_lm(input_ids):
            return lm(input_ids=input_ids, use_cache=False)
        return causal_lm

    mk("causal_lm", model_fn, lambda s, k: (ids(s, k),), "LM forward, use_cache=False")

    def model_cache_fn():
        def causal_lm_cache(input_ids):
            return lm(input_ids=input_ids, use_cache=True)
        return causal_lm_cache

    mk("causal_lm(cache)", model_cache_fn, lambda s, k: (ids(s, k),),
       "LM forward, use_cache=True: returns a new DynamicCache")

    def mask(s, seed):
        m = torch.ones(BATCH[s], SEQ[s], dtype=torch.long)
        m[0, : 1 + seed % 3] = 0  # left padding in the first row
        return m

    def masked_fn():
        def causal_lm_mask(input_ids, attention_mask):
            return lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return causal_lm_mask

    mk("causal_lm(mask)", masked_fn, lambda s, k: (ids(s, k), mask(s, k)),
       "LM forward with a left-padded attention mask")

    def labels_fn():
        def causal_lm_loss(input_ids, labels):
            return lm(input_ids=input_ids, labels=labels, use_cache=False)
        return causal_lm_loss

    mk("causal_lm(labels)", labels_fn, lambda s, k: (ids(s, k), ids(s, k + 7)),
       "LM forward with labels: the loss function registry")

    mk("causal_lm(inference_mode)", model_fn, lambda s, k: (ids(s, k),),
       "LM forward, use_cache=False, under torch.inference_mode()")
    out[-1].grad = "inference_mode"

    def outputs_fn():
        def causal_lm_outputs(input_ids):
            return lm(input_ids=input_ids, use_cache=False, output_hidden_states=True,
                      return_dict=False)
        return causal_lm_outputs

    mk("causal_lm(tuple)", outputs_fn, lambda s, k: (ids(s, k),),
       "output_hidden_states=True, return_dict=False")

    def generate_fn():
        def generate(input_ids):
            return lm.generate(input_ids, max_new_tokens=3, do_sample=False,
                               pad_token_id=0)
        return generate

    mk("generate", generate_fn, lambda s, k: (ids(s, k),), "greedy generate, 3 new tokens")

    def lm_output(s, seed):
        with torch.no_grad():
            return lm(input_ids=ids(s, seed), labels=ids(s, seed + 1), use_cache=False)

    def output_arg_fn():
        def next_token(out):
            return out[1][:, -1].argmax(-1), out["loss"] * 2
        return next_token

    mk("output_arg", output_arg_fn, lambda s, k: (lm_output(s, k),),
       "a CausalLMOutputWithPast argument (a dict subclass): out[1], out['loss']")

    def prefilled(s, seed):
        from transformers import DynamicCache

        cache = DynamicCache(config=cfg)
        with torch.no_grad():
            lm(input_ids=ids(s, seed), past_key_values=cache, use_cache=True)
        return cache

    def decode_fn():
        def decode_step(input_ids, cache):
            return lm(input_ids=input_ids, past_key_values=cache, use_cache=True)
        return decode_step

    mk("decode_step", decode_fn,
       lambda s, k: (torch.randint(0, V, (BATCH[s], 1), generator=gen(k)), prefilled(s, k)),
       "one decode step on a prefilled DynamicCache argument")

    def prefilled_static(s, seed):
        from transformers import StaticCache

        cache = StaticCache(config=cfg, max_cache_len=16)
        with torch.no_grad():
            lm(input_ids=ids(s, seed), past_key_values=cache, use_cache=True)
        return cache

    def decode_static_fn():
        def decode_step_static(input_ids, cache, cache_position):
            return lm(input_ids=input_ids, past_key_values=cache, use_cache=True,
                      cache_position=cache_position)
        return decode_step_static

    mk("decode_step(static)", decode_static_fn,
       lambda s, k: (torch.randint(0, V, (BATCH[s], 1), generator=gen(k)),
                     prefilled_static(s, k), torch.tensor([SEQ[s]])),
       "one decode step on a prefilled StaticCache argument")
    return out


# ------------------------------------------------------------------ FlagGems targets

FG_ROWS = ((64, 256), (33, 512), (48, 384))  # the shapes of a 2-D operand: (M, N)
# Operators whose result is random: compared by structure, shapes and dtypes only.
FG_RANDOM = {"rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm",
             "bernoulli", "multinomial", "normal", "uniform", "exponential", "cauchy",
             "geometric", "log_normal", "poisson", "dropout", "alpha_dropout", "feature_dropout",
             "native_dropout", "rrelu_with_noise_functional", "empty"}
# Swept first, in this order (LLM and common operators), so a budget cut drops the exotic ones.
FG_PRIORITY = (
    "add", "mul", "sub", "div_mode", "true_divide", "silu", "gelu", "exp", "rsqrt", "neg",
    "abs", "pow_tensor_scalar", "pow_scalar", "pow_tensor_tensor", "sigmoid", "tanh", "relu",
    "sum", "sum_dim", "mean", "mean_dim", "amax", "max", "max_dim", "min_dim", "argmax",
    "argmin", "prod_dim", "softmax", "log_softmax", "cumsum", "rms_norm", "layer_norm",
    "group_norm", "mm", "addmm", "bmm", "baddbmm", "mv", "linear", "where_self",
    "where_scalar_self", "where_scalar_other", "masked_fill", "embedding", "cat", "stack",
    "index_select", "gather", "topk", "sort", "argsort", "clamp", "eq", "ne", "lt", "gt", "ge",
    "le", "isnan", "isinf", "lerp_scalar", "triu", "tril", "flip", "repeat", "full", "zeros",
    "ones", "arange", "fill_scalar", "copy", "contiguous", "var_mean", "vector_norm",
    "logsumexp", "cross_entropy_loss", "nll_loss_forward", "rand", "randn", "dropout",
)

_FG_UNARY = {
    "abs", "absolute", "neg", "negative", "exp", "exp2", "expm1", "sin", "cos", "tan", "tanh",
    "sigmoid", "silu", "gelu", "relu", "relu6", "erf", "reciprocal", "floor", "ceil", "round",
    "trunc", "fix", "sign", "sgn", "elu", "celu", "selu", "hardswish", "hardsigmoid",
    "hardtanh", "mish", "softplus", "softshrink", "leaky_relu", "glu", "isnan", "isinf",
    "isfinite", "isneginf", "isposinf", "signbit", "nan_to_num", "clone", "contiguous",
    "zeros_like", "ones_like", "rand_like", "randn_like", "atan", "arctan", "asin", "arcsin",
    "acos", "arccos", "asinh", "arcsinh", "sinh", "cosh", "sinc", "frac", "square",
    "log_sigmoid", "angle", "triu", "tril", "conj_physical", "resolve_conj", "resolve_neg",
    "all", "any", "sum", "mean", "max", "min", "amax", "amin", "aminmax", "prod", "std", "var",
    "norm", "vector_norm", "argmax", "argmin", "count_nonzero", "nonzero", "median",
    "nanmedian", "deg2rad", "rad2deg", "i0", "alias_copy", "lift", "lift_fresh_copy",
    "t_copy", "zero", "special_i0e", "special_i1", "special_airy_ai", "trace", "diag",
    "is_nonzero", "logit", "digamma", "lgamma", "erfinv", "special_erfinv",
    "special_digamma", "special_log1p", "dropout", "alpha_dropout", "feature_dropout",
    "bernoulli", "_conj", "_safe_softmax", "_is_all_true", "unique_consecutive",
    "special_modified_bessel_k0", "special_scaled_modified_bessel_k1", "exponential",
    "uniform", "cauchy", "geometric", "log_normal", "normal", "relu_", "_unique2",
}
_FG_POSITIVE_UNARY = {"log", "log2", "log10", "log1p", "sqrt", "rsqrt", "acosh", "atanh",
                      "arctanh", "poisson"}
_FG_BOOL_UNARY = {"logical_not", "bitwise_not"}
_FG_INT_BINARY = {"bitwise_and", "bitwise_or", "bitwise_xor", "gcd", "lcm", "xor",
                  "bitwise_left_shift", "bitwise_right_shift", "__lshift__", "__ilshift__",
                  "__irshift__"}
_FG_BOOL_BINARY = {"logical_and", "logical_or", "logical_xor"}
_FG_BINARY = {
    "add", "sub", "subtract", "mul", "multiply", "div", "true_divide", "floor_divide",
    "remainder", "pow", "maximum", "minimum", "eq", "ne", "not_equal", "lt", "le", "gt", "ge",
    "greater", "greater_equal", "less_equal", "atan2", "fmod", "hypot", "rsub", "fmax",
    "fmin", "copysign", "xlogy", "isclose", "allclose", "equal", "clamp_min", "clamp_max",
    "nextafter", "logaddexp", "logaddexp2", "mse_loss", "smooth_l1_loss", "soft_margin_loss",
    "special_xlog1py", "special_gammainc", "polar", "kron", "prelu", "_prelu_kernel",
    "_euclidean_dist", "lerp",
}
_FG_DIM = {"sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin", "any",
           "all", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "softmax",
           "log_softmax", "logsumexp", "special_logsumexp", "special_log_softmax", "var", "std",
           "norm", "sort", "argsort", "median", "nanmedian", "mode", "count_nonzero", "flip",
           "diff", "glu", "squeeze_copy", "unbind", "unbind_copy", "var_mean", "vector_norm",
           "sort_stable", "normed_cumsum", "_safe_softmax"}
_FG_SUFFIXES = ("_tensor_scalar", "_scalar_tensor", "_tensor_tensor", "_scalaropt_dim",
                "_scalar_other", "_scalar_self", "_self_int", "_self_tensor", "_dims", "_dim",
                "_values", "_scalar", "_tensor", "_mode", "_start", "_func", "_forward")


def _fg_special(r, pos, ints, M, N):
    dv = Kw(device=r(1).device)  # a factory's device
    return {
        "mm": lambda: (r(M, N), r(N, M)),
        "addmm": lambda: (r(M), r(M, N), r(N, M)),
        "addmm_": lambda: (r(M, M), r(M, N), r(N, M)),
        "bmm": lambda: (r(4, M, N), r(4, N, M)),
        "baddbmm": lambda: (r(4, M, M), r(4, M, N), r(4, N, M)),
        "mv": lambda: (r(M, N), r(N)),
        "addmv": lambda: (r(M), r(M, N), r(N)),
        "addr": lambda: (r(M, N), r(M), r(N)),
        "linear": lambda: (r(M, N), r(32, N), r(32)),
        "dot": lambda: (r(N), r(N)),
        "vdot": lambda: (r(N), r(N)),
        "where_self": lambda: (r(M, N) > 0, r(M, N), r(M, N)),
        "where_scalar_self": lambda: (r(M, N) > 0, 0.5, r(M, N)),
        "where_scalar_other": lambda: (r(M, N) > 0, r(M, N), 0.5),
        "masked_fill": lambda: (r(M, N), r(M, N) > 0, 0.5),
        "masked_select": lambda: (r(M, N), r(M, N) > 0),
        "masked_scatter": lambda: (r(M, N), r(M, N) > 0, r(M, N)),
        "rms_norm": lambda: (r(M, N), [N], r(N), 1e-6),
        "layer_norm": lambda: (r(M, N), [N], r(N), r(N), 1e-5),
        "group_norm": lambda: (r(2, 8, M), r(8), r(8), 2, 8, M, 4, 1e-5),
        # training: in eval mode FlagGems leaves the returned mean and inv_std unwritten
        # (torch.empty), so they differ between any two calls, eager's included
        "batch_norm": lambda: (r(4, 8, M), r(8), r(8), r(8), pos(8), True, 0.1, 1e-5),
        "softmax": lambda: (r(M, N), -1),
        "log_softmax": lambda: (r(M, N), -1),
        "cumsum": lambda: (r(M, N), 1),
        "cumprod": lambda: (pos(M, N), 1),
        "cat": lambda: ([r(M, N), r(M, N)], 0),
        "concat": lambda: ([r(M, N), r(M, N)], 0),
        "concatenate": lambda: ([r(M, N), r(M, N)], 0),
        "stack": lambda: ([r(M, N), r(M, N)], 0),
        "hstack": lambda: ([r(M, N), r(M, N)],),
        "vstack": lambda: ([r(M, N), r(M, N)],),
        "broadcast_tensors": lambda: ([r(M, 1), r(1, N)],),
        "broadcast_to": lambda: (r(1, N), [M, N]),
        "expand": lambda: (r(1, N), [M, N]),
        "embedding": lambda: (r(512, N), ints(M, hi=512)),
        "index_select": lambda: (r(M, N), 0, ints(8, hi=M)),
        "gather": lambda: (r(M, N), 1, ints(M, 4, hi=N)),
        "scatter": lambda: (r(M, N), 1, ints(M, 4, hi=N), r(M, 4)),
        "scatter_add_": lambda: (r(M, N), 1, ints(M, 4, hi=N), r(M, 4)),
        "index_add": lambda: (r(M, N), 0, ints(8, hi=M), r(8, N)),
        "index_copy": lambda: (r(M, N), 0, torch.arange(8, device=r(1).device), r(8, N)),
        "index_put": lambda: (r(M, N), [ints(8, hi=M)], r(8, N)),
        "index": lambda: (r(M, N), [ints(8, hi=M)]),
        "clamp": lambda: (r(M, N), -0.5, 0.5),
        "clip": lambda: (r(M, N), -0.5, 0.5),
        "clamp_tensor": lambda: (r(M, N), r(M, N) - 1, r(M, N) + 1),
        "pow_tensor_scalar": lambda: (r(M, N), 2.0),
        "pow_scalar": lambda: (2.0, r(M, N)),
        "pow_tensor_tensor": lambda: (pos(M, N), r(M, N)),
        "repeat": lambda: (r(M, N), (2, 1)),
        "tile": lambda: (r(M, N), (2, 1)),
        "full_like": lambda: (r(M, N), 0.5),
        "new_full": lambda: (r(M, N), (M, N), 0.5),
        "new_ones": lambda: (r(M, N), (M, N)),
        "fill_scalar": lambda: (r(M, N), 0.5),
        "fill_tensor": lambda: (r(M, N), r(())),
        "topk": lambda: (r(M, N), 4),
        "kthvalue": lambda: (r(M, N), 3, 1),
        "sort": lambda: (r(M, N), -1),
        "argsort": lambda: (r(M, N), -1),
        "native_dropout": lambda: (r(M, N), 0.5, True),
        "dropout": lambda: (r(M, N), 0.5, True),
        "cross_entropy_loss": lambda: (r(M, N), ints(M, hi=N)),
        "nll_loss_forward": lambda: (r(M, N).log_softmax(-1), ints(M, hi=N), None, 1, -100),
        "nll_loss_nd_forward": lambda: (r(M, N).log_softmax(-1), ints(M, hi=N)),
        "margin_ranking_loss": lambda: (r(M), r(M), r(M).sign()),
        "linspace": lambda: (0.0, 1.0, N, dv),
        "logspace": lambda: (0.0, 1.0, N, dv),
        "arange": lambda: (N, dv),
        "arange_start": lambda: (1, N, dv),
        "range": lambda: (1, N, dv),
        "zeros": lambda: ((M, N), dv),
        "ones": lambda: ((M, N), dv),
        "empty": lambda: ((M, N), dv),
        "full": lambda: ((M, N), 0.5, dv),
        "eye": lambda: (N, dv),
        "eye_m": lambda: (M, N, dv),
        "randn": lambda: ((M, N), dv),
        "rand": lambda: ((M, N), dv),
        "randperm": lambda: (N, dv),
        "randint": lambda: (16, (M, N), dv),
        "randint_like": lambda: (r(M, N), 16),
        "multinomial": lambda: (pos(M, N), 4),
        "lerp_scalar": lambda: (r(M, N), r(M, N), 0.3),
        "lerp_tensor": lambda: (r(M, N), r(M, N), r(M, N)),
        "addcmul": lambda: (r(M, N), r(M, N), r(M, N)),
        "addcdiv": lambda: (r(M, N), r(M, N), pos(M, N)),
        "threshold": lambda: (r(M, N), 0.1, 0.0),
        "isin": lambda: (ints(M, N), ints(8)),
        "bincount": lambda: (ints(M * 4),),
        "histc": lambda: (r(M * 4),),
        "bucketize": lambda: (r(M, N), r(16).sort().values),
        "searchsorted": lambda: (r(16).sort().values, r(M, N)),
        "diag_embed": lambda: (r(M, 8),),
        "diagonal_copy": lambda: (r(M, N),),
        "diff": lambda: (r(M, N),),
        "roll": lambda: (r(M, N), 3, 1),
        "rot90": lambda: (r(M, N),),
        "narrow": lambda: (r(M, N), 1, 2, 8),
        "narrow_copy": lambda: (r(M, N), 1, 2, 8),
        "permute_copy": lambda: (r(M, N), [1, 0]),
        "transpose": lambda: (r(M, N), 0, 1),
        "view_copy": lambda: (r(M, N), [N, M]),
        "squeeze_copy": lambda: (r(M, 1, N),),
        "split_with_sizes_copy": lambda: (r(M, N), [N // 2, N // 2], 1),
        "tensor_split": lambda: (r(M, N), 2, 1),
        "unbind": lambda: (r(M, N),),
        "one_hot": lambda: (ints(M, hi=16), 16),
        "pad": lambda: (r(M, N), (1, 1)),
        "constant_pad_nd": lambda: (r(M, N), (1, 1)),
        "conv1d": lambda: (r(1, 8, M), r(16, 8, 3)),
        "conv2d": lambda: (r(1, 8, 16, 16), r(16, 8, 3, 3)),
        "conv3d": lambda: (r(1, 4, 8, 8, 8), r(8, 4, 3, 3, 3)),
        "conv_transpose1d": lambda: (r(1, 8, M), r(8, 4, 3)),
        "conv_transpose2d": lambda: (r(1, 8, 16, 16), r(8, 4, 3, 3)),
        "avg_pool2d": lambda: (r(1, 8, 16, 16), [2, 2]),
        "max_pool2d_with_indices": lambda: (r(1, 8, 16, 16), [2, 2]),
        "adaptive_avg_pool2d": lambda: (r(1, 8, 16, 16), [4, 4]),
        "pixel_shuffle": lambda: (r(1, 16, 8, 8), 2),
        "pixel_unshuffle": lambda: (r(1, 4, 16, 16), 2),
        "channel_shuffle": lambda: (r(1, 16, 8, 8), 4),
        "upsample_nearest2d": lambda: (r(1, 4, 8, 8), [16, 16]),
        "upsample_bicubic2d": lambda: (r(1, 4, 8, 8), [16, 16], False),
        "repeat_interleave_self_int": lambda: (r(M, N), 2),
        "repeat_interleave_tensor": lambda: (ints(8, hi=4),),
        "quantile": lambda: (r(M, N), 0.5),
        "trace": lambda: (r(N, N),),
        "diag": lambda: (r(N, N),),
        "polar": lambda: (pos(M, N), r(M, N)),
        "kron": lambda: (r(8, 8), r(4, 4)),
        "outer": lambda: (r(M), r(N)),
        "dequantize": None,
        "weight_norm_interface": lambda: (r(M, N), pos(M, 1), 0),
    }


def _fg_args(name: str, sig, dev: str, s: int, seed: int, dtype=torch.float32):
    """Inputs for `flag_gems.ops.<name>`, from its name (rules above) or else its parameter
    names; LookupError when neither fits."""
    g = torch.Generator(device=dev).manual_seed(seed)
    M, N = FG_ROWS[s]

    def r(*shape, dt=dtype):
        return torch.randn(*shape, device=dev, dtype=dt, generator=g)

    def pos(*shape, dt=dtype):
        return torch.rand(*shape, device=dev, dtype=dt, generator=g) + 0.5

    def ints(*shape, hi=16):
        return torch.randint(0, hi, shape, device=dev, generator=g)

    if name.endswith("_out") or "_out_" in name:
        raise LookupError("an out= variant (its functional form is swept)")
    if "backward" in name:
        raise LookupError("a backward operator")
    args = _fg_by_name(name, sig, r, pos, ints, M, N)
    n_req = sum(1 for p in sig.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                and p.default is p.empty)
    n_pos = len(args) - (1 if args and type(args[-1]) is Kw else 0)
    if n_pos < n_req:  # the rule gives fewer operands than the signature requires
        try:
            return _fg_generic(name, sig, r, pos, ints, M, N)
        except LookupError:
            pass
    return args


def _fg_by_name(name, sig, r, pos, ints, M, N):
    special = _fg_special(r, pos, ints, M, N)
    b = name
    for _ in range(3):
        if special.get(b) is not None:
            return special[b]()
        b = b.rstrip("_")
        if special.get(b) is not None:
            return special[b]()
        for suf in _FG_SUFFIXES:
            if b.endswith(suf) and len(b) > len(suf):
                b = b[: -len(suf)]
                break
        else:
            break
    scalar_last = name.rstrip("_").endswith(("_scalar", "tensor_scalar"))
    scalar_first = name.rstrip("_").endswith("scalar_tensor")
    if b in _FG_BOOL_UNARY:
        return (r(M, N) > 0,)
    if b in _FG_INT_BINARY or b in _FG_BOOL_BINARY:
        mk = (lambda: r(M, N) > 0) if b in _FG_BOOL_BINARY else (lambda: ints(M, N))
        if scalar_first:
            return (3, mk())
        return (mk(), 3) if scalar_last else (mk(), mk())
    if b in _FG_BINARY:
        if scalar_first:
            return (0.5, r(M, N))
        return (r(M, N), 0.5) if scalar_last else (r(M, N), r(M, N))
    wants_dim = any(p in sig.parameters for p in ("dim", "dims"))
    if b in _FG_DIM and wants_dim and "_dim" in name:
        return (r(M, N), [1]) if "dims" in name else (r(M, N), 1)
    if b in _FG_POSITIVE_UNARY:
        return (pos(M, N),)
    if b in _FG_UNARY or b in _FG_DIM:
        return (r(M, N),)
    return _fg_generic(name, sig, r, pos, ints, M, N)


# Parameter name -> value, for an operator no rule names.
_FG_TENSOR_PARAMS = {"inp", "input", "self", "x", "a", "b", "other", "tensor", "t", "y", "src",
                     "source", "values", "exponent", "end_", "weight", "target", "grad",
                     "mat", "vec"}


def _fg_generic(name, sig, r, pos, ints, M, N):
    args = []
    for p in sig.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
            continue
        n = p.name.lower()
        if n in _FG_TENSOR_PARAMS or (len(n) == 1 and n.isalpha()):
            args.append(r(M, N))
        elif n in ("mask",):
            args.append(r(M, N) > 0)
        elif n in ("index", "indices"):
            args.append(ints(M, N, hi=M))
        elif n in ("dim",):
            args.append(1)
        elif n in ("dims",):
            args.append([1])
        elif n in ("alpha", "value", "scalar", "eps", "p", "beta", "lambd", "min", "max"):
            args.append(0.5)
        elif n in ("size", "shape"):
            args.append([M, N])
        elif n in ("tensors",):
            args.append([r(M, N), r(M, N)])
        else:
            raise LookupError(f"no input rule for {name}{sig} (parameter {p.name!r})")
    if not args:
        raise LookupError(f"no input rule for {name}{sig}")
    return tuple(args)


def flaggems_targets(dev: str, stub: bool = False, only=None):
    """(targets, skipped): a Target per public callable of `flag_gems.ops` with an input rule,
    the FG_PRIORITY ones first; skipped: {name: reason}."""
    if stub:
        ops, group = _stub_ops(), "flaggems-stub"
    else:
        import flag_gems.ops as fgo

        names = getattr(fgo, "__all__", None) or dir(fgo)
        ops = {}
        for n in names:
            v = getattr(fgo, n, None)
            if (n.startswith("__") and not n.endswith("shift__")) or v is None:
                continue
            if callable(v) and not inspect.isclass(v) and not inspect.ismodule(v):
                ops[n] = v
        group = "flaggems"
    rank = {n: i for i, n in enumerate(FG_PRIORITY)}
    targets, skipped = [], {}
    for name in sorted(ops, key=lambda n: (rank.get(n, len(rank)), n)):
        if only and name not in only:
            continue
        op = ops[name]
        try:
            sig = inspect.signature(op)
        except (TypeError, ValueError):
            sig = inspect.Signature()
        try:
            _fg_args(name, sig, "cpu", 0, 0)
        except LookupError as e:
            skipped[name] = str(e)[:200]
            continue
        except Exception:  # noqa: BLE001 - the rule fits; building on the CPU did not
            pass
        base = name.rstrip("_").split("_")[0]
        rnd = name.rstrip("_") in FG_RANDOM or base in FG_RANDOM
        targets.append(Target(group, name, _fg_body(op), _fg_maker(name, sig, dev),
                              random=rnd))
    return targets, skipped


def _fg_body(op):
    def make():
        def f(*args, **kwargs):
            return op(*args, **kwargs)
        return f
    return make


def _fg_maker(name, sig, dev):
    return lambda s, seed: _fg_args(name, sig, dev, s, seed)


def liger_targets(dev: str) -> list:
    """Liger-Kernel's six forwards of tests/gpu/test_liger.py, bf16, two shapes."""
    from liger_kernel.ops import geglu, layer_norm, rms_norm, rope, softmax, swiglu

    bf16 = torch.bfloat16

    def r(shape, seed, k=0):
        g = torch.Generator(device=dev).manual_seed(seed * 8 + k)
        return torch.randn(shape, device=dev, dtype=bf16, generator=g)

    rows = ((4, 256), (2, 3, 1024), (8, 512))
    heads = ((1, 8, 4, 64), (2, 16, 8, 128), (1, 12, 8, 64))

    def two(s, k):
        return (r(rows[s], k), r(rows[s], k, 1))

    def rope_args(s, k):
        b, q_len, h, d = heads[s]
        return (r((b, h, q_len, d), k), r((b, h // 2, q_len, d), k, 1),
                r((1, q_len, d), k, 2), r((1, q_len, d), k, 3))

    cases = {
        "swiglu_forward": (swiglu.swiglu_forward, two),
        "geglu_forward": (geglu.geglu_forward, two),
        "rms_norm_forward": (rms_norm.rms_norm_forward, lambda s, k: (
            r(rows[s], k), r(rows[s][-1:], k, 1), 1e-6, 0.0, "llama", None)),
        "layer_norm_forward": (layer_norm.layer_norm_forward, lambda s, k: (
            r(rows[s], k), r(rows[s][-1:], k, 1), r(rows[s][-1:], k, 2), 1e-5)),
        "rope_forward": (rope.rope_forward, rope_args),
        "softmax_forward": (softmax._softmax_forward, lambda s, k: (r(rows[s], k),)),
    }
    return [Target("liger", name, (lambda fn=fn: fn), make) for name, (fn, make)
            in cases.items()]


def _stub_ops() -> dict:
    """ATen functions under FlagGems' names: a CPU check of the pipeline and input rules."""
    import torch.nn.functional as F

    return {"add": torch.add, "silu": F.silu, "neg": torch.neg, "exp": torch.exp,
            "log": torch.log, "mul": torch.mul, "lt": torch.lt, "pow_tensor_scalar": torch.pow,
            "pow_scalar": torch.pow, "sum_dim": torch.sum, "amax": torch.amax,
            "cumsum": torch.cumsum, "softmax": torch.softmax, "mm": torch.mm,
            "addmm": torch.addmm, "bmm": torch.bmm, "where_self": torch.where,
            "masked_fill": torch.masked_fill, "rms_norm": torch.rms_norm,
            "layer_norm": F.layer_norm, "argmax": torch.argmax, "topk": torch.topk,
            "bitwise_and_tensor": torch.bitwise_and, "bitwise_or_scalar": torch.bitwise_or,
            "sort": torch.sort, "cat": torch.cat, "embedding": lambda w, i: F.embedding(i, w),
            "rand_like": torch.rand_like, "clamp": torch.clamp, "abs_": torch.abs_,
            "mean_dim": torch.mean, "logical_not": torch.logical_not,
            "add_out": torch.add, "silu_backward": torch.ops.aten.silu_backward,
            "some_op": lambda inp, dim: inp.sum(dim), "odd_op": lambda q, k_cache: q}


# ------------------------------------------------------------------ reporting


def summarize(results: list) -> dict:
    counts = Counter(r.outcome for r in results)
    kinds: dict = {}
    classes: dict = defaultdict(lambda: {"n": 0, "refused": None, "targets": set()})
    for r in results:
        for (kind, chain), e in r.guards.entries.items():
            k = kinds.setdefault((kind, chain), {"n": 0, "refused": None, "targets": set(),
                                                 "example": e["example"]})
            k["n"] += e["n"]
            k["targets"].add(f"{r.group}.{r.name}")
            if e["refused"] and not k["refused"]:
                k["refused"] = e["refused"]
            for c in e["classes"]:
                cl = classes[c]
                cl["n"] += e["n"]
                cl["targets"].add(f"{r.group}.{r.name}")
                if e["refused"] and not cl["refused"] and c in chain:
                    cl["refused"] = e["refused"]
    return {"counts": {o: counts.get(o, 0) for o in OUTCOMES}, "kinds": kinds,
            "classes": dict(classes)}


def table_rows(results: list) -> list:
    rows = []
    for r in results:
        srcs = sorted({c for (_k, c) in r.guards.entries})
        refused = sorted({f"{k} {c}" for (k, c), e in r.guards.entries.items() if e["refused"]})
        rows.append((f"{r.group}.{r.name}", r.outcome, " ".join(r.calls), r.versions,
                     f"{r.seconds:.1f}", len(srcs), r.detail, "; ".join(refused)))
    return rows


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def report_data(results, skipped, summary, started: str, seconds: float) -> dict:
    """Everything the report says, as JSON-able data (the .json file; the .md renders it)."""
    return {
        "date": started, "commit": report_info.commit(), "machine": report_info.machine(torch),
        "argv": sys.argv[1:], "seconds": round(seconds), "counts": summary["counts"],
        "skipped_no_rule": skipped,
        "targets": [{"target": f"{r.group}.{r.name}", "outcome": r.outcome, "detail": r.detail,
                     "calls": r.calls, "versions": r.versions, "eager_paths": r.eager_paths,
                     "warnings": r.warnings, "seconds": round(r.seconds, 2),
                     "guards": [{"kind": k, "source": ch, "n": e["n"], "refused": e["refused"],
                                 "example": e["example"]}
                                for (k, ch), e in sorted(r.guards.entries.items())]}
                    for r in results],
        "source_classes": {k: {"n": v["n"], "targets": sorted(v["targets"]),
                               "refused": v["refused"]}
                           for k, v in sorted(summary["classes"].items())},
    }


def results_from_data(data: dict) -> list:
    out = []
    for t in data["targets"]:
        group, name = t["target"].split(".", 1)
        r = Result(group, name, t["outcome"], t["detail"], t["calls"], t["versions"],
                   t["eager_paths"], t["warnings"], t["seconds"])
        for g in t["guards"]:
            r.guards.entries[(g["kind"], g["source"])] = {
                "n": g["n"], "refused": g["refused"], "example": g["example"],
                "classes": sorted(set(re.findall(r"[A-Za-z]+Source", g["source"])))}
        out.append(r)
    return out


def render_md(data: dict, title: str) -> str:
    results = results_from_data(data)
    summary = summarize(results)
    skipped = data.get("skipped_no_rule") or {}
    c = summary["counts"]
    lines = [f"# {title}", "",
             f"- date: {data['date']}", f"- commit: {data['commit']}",
             f"- machine: {data['machine']}",
             f"- command: `python benchmarks/guard_sweep.py {' '.join(data['argv'])}`",
             f"- run time: {data.get('seconds', '?')} s; per target: eager, then trident.jit "
             "on the capture's shapes twice (capture, hit), a second shape (miss) and a third "
             "(served by the dynamic version), each compared with eager",
             "", "outcomes: " + ", ".join(f"{o} {c[o]}" for o in OUTCOMES)
             + (f"; {len(skipped)} more with no input rule" if skipped else ""), ""]
    odd = [r for r in results if r.outcome != "native" or r.detail]
    if odd:
        lines += ["## Not native, and why", ""]
        for r in odd:
            lines.append(f"- `{r.group}.{r.name}`: {r.outcome}: {_md_escape(r.detail)}")
        lines.append("")
    lines += ["## Targets", "",
              "| target | outcome | calls | versions | s | source chains | detail | refused "
              "entries |", "|---|---|---|---|---|---|---|---|"]
    for row in table_rows(results):
        lines.append("| " + " | ".join(_md_escape(x) for x in row) + " |")
    lines += ["", "## Source classes met", "",
              "| source class | guard entries | targets | handling |", "|---|---|---|---|"]
    for cname, e in sorted(summary["classes"].items()):
        how = f"refused: {e['refused']}" if e["refused"] else "translated"
        lines.append(f"| `{cname}` | {e['n']} | {len(e['targets'])} | {_md_escape(how)} |")
    kinds = Counter()
    for (kind, _chain), e in summary["kinds"].items():
        kinds[kind] += e["n"]
    lines += ["", "## Guard kinds met", "", ", ".join(f"`{k}` {n}" for k, n in
                                                      sorted(kinds.items())), ""]
    lines += ["## Guard kind and source chain", "",
              "Chains outermost first; `(A.B.C)*k` is k repetitions of A(B(C(...))).", "",
              "| kind | source chain | entries | targets | example | handling |",
              "|---|---|---|---|---|---|"]
    for (kind, chain), e in sorted(summary["kinds"].items()):
        how = f"refused: {e['refused']}" if e["refused"] else "translated"
        lines.append(f"| {kind} | `{chain}` | {e['n']} | {len(e['targets'])} | "
                     f"`{_md_escape(e['example'])[:90]}` | {_md_escape(how)[:200]} |")
    if skipped:
        lines += ["", "## No input rule", ""]
        lines += [f"- `{k}`: {_md_escape(v)}" for k, v in sorted(skipped.items())]
    return "\n".join(lines) + "\n"


def write_report(data: dict, out: Path, tag: str) -> tuple:
    out.mkdir(parents=True, exist_ok=True)
    js = out / f"guard_sweep_{tag}.json"
    js.write_text(json.dumps(data, indent=1, default=str))
    md = out / f"guard_sweep_{tag}.md"
    md.write_text(render_md(data, f"Guard sweep: {tag}"))
    return md, js


def print_table(results, summary, skipped) -> None:
    w = max([len(f"{r.group}.{r.name}") for r in results] + [10])
    print(f"{'target':<{w}}  {'outcome':<9} {'calls':<22} {'vers':>4} {'s':>6}  detail")
    for row in table_rows(results):
        print(f"{row[0]:<{w}}  {row[1]:<9} {row[2]:<22} {row[3]:>4} {row[4]:>6}  "
              f"{row[6][:100]}")
    c = summary["counts"]
    print("outcomes: " + ", ".join(f"{o} {c[o]}" for o in OUTCOMES)
          + (f"; no input rule: {len(skipped)}" if skipped else ""))
    print("source classes: " + ", ".join(
        f"{k}{' (refused)' if v['refused'] else ''}" for k, v in sorted(summary["classes"].items())))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transformers", action="store_true")
    ap.add_argument("--flaggems", action="store_true")
    ap.add_argument("--flaggems-stub", action="store_true")
    ap.add_argument("--liger", action="store_true", help="Liger-Kernel's forwards (CUDA)")
    ap.add_argument("--models", default="llama,qwen3,mistral,deepseek_v2")
    ap.add_argument("--attn", default="sdpa,eager",
                    help="attn_implementations of the tiny models (all targets with the first)")
    ap.add_argument("--targets", default="", help="comma-separated target names to keep")
    ap.add_argument("--ops", default="", help="comma-separated flag_gems.ops names to keep")
    ap.add_argument("--device", default=None)
    ap.add_argument("--budget-s", type=float, default=None,
                    help="per worker; 0 = none (default: 170 with --flaggems, else none)")
    ap.add_argument("--op-timeout-s", type=float, default=None,
                    help="per target; 0 = none (default: 30 with --flaggems, else none)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="worker processes, each sweeping every N-th target (default: 8 with "
                         "--flaggems, else 1)")
    ap.add_argument("--shard", default=None, help=argparse.SUPPRESS)  # i/N, for a worker
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--tag", default=None)
    ap.add_argument("--render", default=None, metavar="JSON",
                    help="write the markdown report of an earlier run's JSON (with --out, --tag)")
    ap.add_argument("--title", default=None, help="the rendered report's title")
    a = ap.parse_args(argv)
    if not (a.transformers or a.flaggems or a.flaggems_stub or a.liger):
        a.transformers = True
    # --flaggems on the GPU machine: about 4 minutes in all (runtime build, 8 workers' budgets)
    for name, fg, other in (("jobs", 8, 1), ("budget_s", 170.0, 0.0), ("op_timeout_s", 30.0, 0.0)):
        if getattr(a, name) is None:
            setattr(a, name, fg if a.flaggems else other)
    if a.render:  # a report again, from its JSON
        data = json.loads(Path(a.render).read_text())
        Path(a.out).mkdir(parents=True, exist_ok=True)
        md = Path(a.out) / f"guard_sweep_{a.tag or 'rendered'}.md"
        md.write_text(render_md(data, a.title or f"Guard sweep: {a.tag or 'rendered'}"))
        print(f"wrote {md}")
        return 0
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    t_run = time.perf_counter()
    tag = a.tag or ("_".join(x for x, on in (("transformers", a.transformers),
                                               ("flaggems", a.flaggems),
                                               ("flaggems-stub", a.flaggems_stub),
                                               ("liger", a.liger)) if on))
    if a.jobs > 1 and a.shard is None:
        results, skipped = _run_workers(a, argv if argv is not None else sys.argv[1:])
    else:
        results, skipped = _sweep(a)
    if a.worker_out:
        _write_worker(a.worker_out, results, skipped)
        return 0
    summary = summarize(results)
    data = report_data(results, skipped, summary, started, time.perf_counter() - t_run)
    md, js = write_report(data, Path(a.out), tag)
    print_table(results, summary, skipped)
    print(f"wrote {md} and {js}")
    return 0


def _targets(a) -> tuple:
    targets, skipped = [], {}
    if a.transformers:
        targets += transformers_targets([m for m in a.models.split(",") if m],
                                        [x for x in a.attn.split(",") if x])
    if a.liger:  # before FlagGems' operators, which a budget may cut
        try:
            targets += liger_targets(a.device or "cuda")
        except ImportError as e:
            print(f"--liger: {e}; no Liger targets", flush=True)
            skipped["liger_kernel"] = f"not importable: {e}"
    fg_only = {o for o in a.ops.split(",") if o} or None
    if a.flaggems:
        t, s = flaggems_targets(a.device or "cuda", only=fg_only)
        targets += t
        skipped.update(s)
    if a.flaggems_stub:
        t, s = flaggems_targets(a.device or "cpu", stub=True, only=fg_only)
        targets += t
        skipped.update(s)
    keep = {x for x in a.targets.split(",") if x}
    if keep:
        targets = [t for t in targets if t.name in keep]
    return targets, skipped


def _sweep(a) -> tuple:
    targets, skipped = _targets(a)
    if a.shard:
        i, n = (int(x) for x in a.shard.split("/"))
        targets = targets[i::n]
    results = []
    t_start = time.perf_counter()
    for t in targets:
        if a.budget_s and time.perf_counter() - t_start > a.budget_s:
            r = Result(t.group, t.name, "skipped", "over --budget-s")
        else:
            torch._dynamo.reset()
            r = run_target(t, a.op_timeout_s)
        results.append(r)
        print(f"  {t.group}.{t.name}: {r.outcome} ({r.seconds:.1f} s) {r.detail[:120]}",
              flush=True)
        if a.worker_out:  # after every target: a worker that crashes later loses only the rest
            _write_worker(a.worker_out, results, skipped)
    return results, skipped


def _write_worker(path, results, skipped) -> None:
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps({"skipped": skipped,
                               "results": [_result_to_dict(r) for r in results]}))
    tmp.replace(path)


def _run_workers(a, argv) -> tuple:
    """`--jobs N`: N worker processes of this script, worker i sweeping targets i, i+N, ...;
    their results merged in target order.  Trident's runtime is built first, once."""
    import subprocess
    import tempfile

    from trident.native.build import runtime_module

    runtime_module()
    tmp = Path(tempfile.mkdtemp(prefix="guard_sweep_"))
    base = [x for x in argv if not x.startswith("--jobs")]
    if "--jobs" in argv:
        k = argv.index("--jobs")
        base = argv[:k] + argv[k + 2:]
    procs = []
    for i in range(a.jobs):
        out = tmp / f"w{i}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), *base, "--shard",
               f"{i}/{a.jobs}", "--worker-out", str(out)]
        procs.append((subprocess.Popen(cmd), out))
    per = []
    for p, out in procs:
        p.wait()
        if out.exists():
            d = json.loads(out.read_text())
            rs = [_result_from_dict(x) for x in d["results"]]
            if p.returncode:
                rs.append(Result("worker", f"{len(per)}", "error",
                                 f"worker exited with {p.returncode} after {len(rs)} targets"))
            per.append((rs, d["skipped"]))
        else:
            per.append(([Result("worker", f"{len(per)}", "error",
                                f"worker exited with {p.returncode} and no results")], {}))
    results = []  # interleave back: worker i had targets i, i+N, ...
    for k in range(max(len(r) for r, _ in per)):
        results += [r[k] for r, _ in per if k < len(r)]
    skipped = {}
    for _, s in per:
        skipped.update(s)
    return results, skipped


def _result_to_dict(r: Result) -> dict:
    d = {k: getattr(r, k) for k in ("group", "name", "outcome", "detail", "calls", "versions",
                                     "eager_paths", "warnings", "seconds")}
    d["guards"] = [[k, c, e] for (k, c), e in r.guards.entries.items()]
    return d


def _result_from_dict(d: dict) -> Result:
    g = d.pop("guards")
    r = Result(**d)
    r.guards.entries = {(k, c): e for k, c, e in g}
    return r


if __name__ == "__main__":
    sys.exit(main())
