"""The modes' wrappers (eager, trident.jit, torch.compile with and without cpp_wrapper), their
registration as ATen kernels, Trident's per-wrapper status, and the regions: pieces of the
model's own host code that the filtered modes compile besides the operators (`--regions`)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import torch

import trident

from .common import TRIDENTS
from .filter import _IN_BASE

# ---------------------------------------------------------------- registration


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


# ---------------------------------------------------------------- wrappers


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


# ---------------------------------------------------------------- regions

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
