"""Differential fuzzer: random functions and random inputs, trident.jit against eager.

Each Hypothesis example builds one function from a family as Python source text and execs it
into a fresh function object with its own code identity (file name and function name), so
Dynamo's per-code memory (automatic dynamic dimensions) never carries over between examples.
The family covers:

* branches on shapes (``x.shape[0] > k``, ``% 2``, products), dtypes
  (``x.dtype == torch.float32``), Python scalar arguments (values, types, truthiness),
  ``numel``/``dim``/strides/storage offset/contiguity; early returns of other structures;
  ``raise`` and ``assert`` under such conditions; loops over containers and ``range``;
* views (``t()``, ``T``, ``mT``, ``transpose``, ``[1:]``, ``[..., ::2]``, ``[:n]``,
  ``view(-1)``, ``reshape``, ``narrow``, ``unsqueeze``, ``select``, ``expand``,
  ``expand_as``, ``diagonal``, ``split``/``chunk``/``unbind``, ``broadcast_tensors``, and
  ``contiguous``/``to``/``type_as``/``detach``, which may return their input itself);
* in-place ops (``add_``, ``mul_``, ``clamp_``, ``copy_``, ``fill_``, ``zero_``, setitem,
  ...) on inputs, on views of inputs and on intermediates, also as expressions
  (``t = x.add_(1)``);
* chains of elementwise ops (``+ - *``, ``relu``, negation), each on the previous one's
  result, which is dead after it (what the lowering may run in place); ``no_grad``,
  ``enable_grad``, ``autocast(enabled=False)`` and ``inference_mode(False)`` blocks;
* reductions (``sum``/``mean``/``amax``/``prod`` over dims, ``keepdim``, ``dtype=``,
  ``argmax``); broadcasting binary ops between tensors, Python scalars and sizes; dtype
  conversions; ``cat``/``stack``; ``@``; factories sized by (dynamic) ints;
* a module global or closure int ``K`` and 0-d/1-element tensor ``W``, changed, mutated in
  place or rebound between calls; ``fn.__defaults__`` rebound between calls;
* returns mixing tensors, tuples, lists, dicts, ints, floats, bools, None, ``torch.Size``,
  ``torch.dtype``, strings, and inputs/globals returned as themselves;
* signatures with defaults or ``(x, *args, **kwargs)``; rarely a graph break (``.item()``,
  ``.tolist()``) or a small ``max_versions``, so fallbacks happen too.

Inputs: float32/float64/bfloat16/float16/int64/bool tensors of rank 0-4 with zero-size and
size-1 dims, contiguous, transposed, sliced with a step, with a storage offset, expanded
(stride 0), channels_last, or ``nn.Parameter``; some requiring grad; Python int/float/bool
scalars passed positionally, by keyword or left to their default; tuple/list/dict containers
of tensors (of varying length); ``y=None``; and arguments aliasing each other (``y is x``,
``y`` a view of ``x``, ``c[0] is x``).  A call may run under ``no_grad``,
``inference_mode``, CPU autocast, deterministic algorithms or float64 as default dtype, and
a few calls are malformed (an extra positional, an unknown keyword, a missing argument).

Each function is called several times: the first inputs (capture), the same inputs again
(hit), then inputs of other shapes/dtypes/strides/layouts (new versions, dynamic dims,
hits), then the first inputs again.  Every call runs eager and trident on identical,
independent copies of the arguments (built twice from the same source text, so aliasing
between arguments is reproduced) and checks

* eager raised -> trident raises the same exception type with the same message;
* values (exact for integer/bool, ``assert_close`` with NaN equal for floats), dtypes,
  shapes, ``requires_grad``, ``grad_fn`` presence, ``is_inference``, Python types of every
  node of the output, container lengths and dict keys;
* strides and storage offsets of outputs that are views (of inputs or intermediates), and
  strides of outputs eager returns contiguous (size-1 dims ignored);
* aliasing: an output that *is* an input (tensor or container) or global in eager is that
  object under trident; an output that shares storage with an input shares it under
  trident (and one that does not, does not), with the same ``_base``; the same identity and
  storage sharing among outputs, and against the outputs of earlier calls (no cached
  result objects);
* gradients: the sum of the outputs that require grad, differentiated with respect to the
  input leaves that require grad (or backward's exception);
* the arguments after the call: values, shapes, strides, offsets, whether the version
  counter moved (in-place mutation), and the global ``W``.

Fallbacks to eager (trident's RuntimeWarning) are allowed but still checked; they are
counted and summarised at the end of the session (``tests/fuzz/conftest.py``).

Sizes: the default CI slice (``test_fuzz_ci``: derandomized, so the same examples every run)
and an on-demand long run, ``TRIDENT_FUZZ_CALLS=10000 pytest tests/fuzz -k long``
(``test_fuzz_long``, marked slow: chunks of examples with seeds 0, 1, 2, ... until that many
calls were checked; ``TRIDENT_FUZZ_SEED`` shifts the seeds).  ``TRIDENT_FUZZ_KEEP_GOING=1``
makes the long run record mismatches (to ``TRIDENT_FUZZ_FAILURES``, default
``fuzz_failures.txt``) and go on instead of stopping and shrinking at the first one.
``TRIDENT_FUZZ_STRICT_STRIDES=1`` also compares the strides of non-contiguous fresh results,
``TRIDENT_FUZZ_STRICT_VERSIONS=1`` the exact version counters of the arguments;
``TRIDENT_FUZZ_FALLBACK_LOG=path`` writes every fallback's reason with a reproducer.

A trident bug the fuzzer finds and that is not fixed at once goes into ``KNOWN_BUGS``: its
construct is left out of the family behind ``_bug_ok(name)`` (``TRIDENT_FUZZ_KNOWN_BUGS=1``
generates it anyway) and its minimal reproducer is added as an ``xfail(strict=True)`` test,
so a fix shows up as an XPASS failure.  The four bugs found so far (container arguments
returned as copies, -0.0 served by the 0.0 version, ints beyond int64 raising TypeError,
SCM constants made inference tensors) are fixed, with regression tests in
``tests/unit/test_structures.py``; their constructs are part of the family.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import itertools
import linecache
import math
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass, replace

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, note, seed, settings
from hypothesis import strategies as st

import trident

# ------------------------------------------------------------------ known bugs
#
# Constructs excluded from the generated family because trident gets them wrong (open bugs).
# Each gets a minimal reproducer test at the end of this file, marked xfail(strict=True).

KNOWN_BUGS: dict[str, str] = {
    # "name": "what trident gets wrong", with `if _bug_ok("name"):` around the construct.
    # None open.  Found by this fuzzer and fixed (regression tests in
    # tests/unit/test_structures.py): container arguments returned as rebuilt copies, -0.0
    # served by the 0.0 version, ints beyond int64 raising TypeError, SCM constants made
    # inference tensors.
}


def _bug_ok(name: str) -> bool:
    """True when the construct of known bug `name` may be generated."""
    return name not in KNOWN_BUGS or os.environ.get("TRIDENT_FUZZ_KNOWN_BUGS") == "1"


# ------------------------------------------------------------------ statistics


class FuzzStats:
    def __init__(self):
        self.examples = 0
        self.calls = 0
        self.eager_errors = 0
        self.error_types = collections.Counter()
        self.misses = 0
        self.captures = 0
        self.versions = 0
        self.hits = 0
        self.fallback_fns = 0
        self.fallback_calls = 0
        self.fallback_reasons = collections.Counter()
        self.failures = 0
        self.seconds = 0.0

    def summary(self, title: str) -> str:
        lines = [
            f"{title}: {self.examples} functions, {self.calls} checked calls "
            f"in {self.seconds:.1f} s",
            f"  eager raised on {self.eager_errors} calls "
            f"({', '.join(f'{k} {v}' for k, v in self.error_types.most_common())})",
            f"  trident: {self.captures} captures, {self.versions} versions, "
            f"{self.misses} misses, {self.hits} native hits",
            f"  fallbacks to eager: {self.fallback_fns} functions, {self.fallback_calls} calls "
            f"from the fallback on; functions by reason:",
        ]
        for reason, n in self.fallback_reasons.most_common():
            lines.append(f"    {n:5d}  {reason}")
        if self.failures:
            lines.append(f"  MISMATCHES recorded (keep-going mode): {self.failures}")
        return "\n".join(lines)


def _stats_for(request, key: str) -> FuzzStats:
    store = request.config.__dict__.setdefault("_trident_fuzz_stats", {})
    return store.setdefault(key, FuzzStats())


def _reason_key(reason: str) -> str:
    """A fallback reason without the function's name, numbers and details, for counting."""
    r = reason.split("runs eagerly from now on: ", 1)[-1]
    r = r.split("this path runs eagerly (other paths stay native): ", 1)[-1]
    r = r.split(" (last miss")[0].split("\n")[0]
    r = re.sub(r"\d+", "N", r)
    return r[:120]


# ------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class TSpec:
    """How to build one input tensor (deterministically, from `seed`)."""
    shape: tuple
    dtype: torch.dtype
    layout: str = "contig"
    seed: int = 0
    special: bool = False  # floats: sprinkle nan/inf/-0.0
    rg: bool = False  # requires_grad

    def expr(self) -> str:
        return (f"make_tensor({self.shape!r}, {self.dtype}, {self.layout!r}, "
                f"{self.seed}, {self.special}, {self.rg})")


def make_tensor(shape, dtype, layout="contig", seed=0, special=False, rg=False):
    """A tensor of `shape`/`dtype` laid out as `layout`: contig; transposed (dims 0 and -1
    swapped); stepped (last dim sliced with step 2); offset (a flat tensor's [1:], viewed);
    expanded (dim 0 broadcast, stride 0); channels_last (4-d); param (an nn.Parameter).
    `rg`: requires_grad."""
    g = torch.Generator().manual_seed(seed)
    n = len(shape)

    def values(sh):
        if dtype.is_floating_point:
            t = torch.randn(sh, generator=g, dtype=torch.float64) * 2
            if special and t.numel():
                k = torch.randint(0, 4, sh, generator=g)
                t = torch.where(k == 0, torch.tensor(float("nan"), dtype=t.dtype), t)
                t = torch.where(k == 1, torch.tensor(float("inf"), dtype=t.dtype), t)
                t = torch.where(k == 2, torch.tensor(-0.0, dtype=t.dtype), t)
            return t.to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, sh, generator=g).bool()
        return torch.randint(-4, 6, sh, generator=g).to(dtype)

    if layout == "transposed" and n >= 2:
        sh = list(shape)
        sh[0], sh[-1] = sh[-1], sh[0]
        t = values(tuple(sh)).transpose(0, -1)
    elif layout == "stepped" and n >= 1:
        sh = list(shape)
        sh[-1] = sh[-1] * 2
        t = values(tuple(sh))[..., ::2]
    elif layout == "offset":
        t = values((math.prod(shape) + 1,))[1:].view(shape)
    elif layout == "expanded" and n >= 1:
        t = values((1,) + tuple(shape[1:])).expand(shape)
    elif layout == "channels_last" and n == 4:
        t = values(tuple(shape)).contiguous(memory_format=torch.channels_last)
    elif layout == "param" and dtype.is_floating_point:
        return torch.nn.Parameter(values(tuple(shape)), requires_grad=rg)
    else:
        t = values(tuple(shape))
    return t.requires_grad_(True) if rg else t


@dataclass(frozen=True)
class CallSpec:
    """One call: its arguments, what changes before it, and the mode it runs in."""
    x: TSpec
    y: TSpec | None = None
    s: object = None  # Python scalar (int, float, bool) or None
    s_mode: str = "pos"  # pos | kw | default
    c: tuple = ()  # TSpecs of the container elements
    alias: str = ""  # "" | y_is_x | y_view_x | y_view_as_x | c0_is_x
    y_none: bool = False  # pass y=None
    env: tuple = ()  # source lines run before the call: change K, W, fn.__defaults__
    mode: str = ""  # "" | no_grad | inference | autocast | deterministic | f64default
    bad: str = ""  # "" | extra | unknown_kw | missing: a call eager rejects (or *args takes)


@dataclass
class Program:
    name: str
    src: str
    x_ndim: int
    has_y: bool
    y_ndim: int
    has_s: bool
    s_kind: str  # int | float
    s_default: object
    c_kind: str  # "" | tuple | list | dict
    c_n: int
    c_ndim: int
    dtype_group: str  # float | int | any
    dynamic: object
    max_versions: int | None = None
    y_optional: bool = False  # calls may pass y=None (the body replaces it)
    c_vary: bool = False  # calls pass containers of c_n .. c_n + 2 tensors
    scope: str = ""  # "" | global | closure: where K and W live
    star: bool = False  # signature (x, *args, **kwargs): y, c in args, s in kwargs
    graph_break: bool = False


def _lit(v) -> str:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return f"float({str(v)!r})"
    return repr(v)


def args_src(p: Program, cs: CallSpec) -> str:
    """Python source building one call's (args, kwargs); build_args execs it, and the
    reproducer prints it."""
    lines = [f"x = {cs.x.expr()}"]
    args, kwargs = ["x"], []
    if p.has_y:
        if cs.y_none:
            y = "None"
        elif cs.alias == "y_is_x":
            y = "x"
        elif cs.alias == "y_view_x":
            y = "x[1:]" if p.y_ndim == p.x_ndim else "x[0]"
        elif cs.alias == "y_view_as_x":
            y = "x.view_as(x)"
        else:
            y = cs.y.expr()
        lines.append(f"y = {y}")
        args.append("y")
    if p.has_s:
        if cs.s_mode == "pos" and not p.star:
            args.append(_lit(cs.s))
        elif cs.s_mode != "default" or p.star:
            kwargs.append(f"s={_lit(cs.s)}")
    if p.c_kind:
        elems = [t.expr() for t in cs.c]
        if cs.alias == "c0_is_x":
            elems[0] = "x"
        if p.c_kind == "tuple":
            c = "(" + "".join(e + ", " for e in elems) + ")"
        elif p.c_kind == "list":
            c = "[" + ", ".join(elems) + "]"
        else:
            c = "{" + ", ".join(f"{k!r}: {e}" for k, e in zip("abcde", elems)) + "}"
        lines.append(f"c = {c}")
        if cs.s_mode == "pos" or not p.has_s or p.star:
            args.append("c")
        else:
            kwargs.append("c=c")
    if cs.bad == "extra":
        args.append("0")
    elif cs.bad == "unknown_kw":
        kwargs.append("zz=1")
    elif cs.bad == "missing":
        args.pop()
    lines.append(f"args, kwargs = ({''.join(a + ', ' for a in args)}), "
                 f"dict({', '.join(kwargs)})")
    return "\n".join(lines)


def build_args(p: Program, cs: CallSpec):
    ns = {"torch": torch, "make_tensor": make_tensor}
    exec(args_src(p, cs), ns)
    return ns["args"], ns["kwargs"]


@contextlib.contextmanager
def call_mode(mode: str):
    """The global state one call runs under."""
    if mode == "no_grad":
        with torch.no_grad():
            yield
    elif mode == "inference":
        with torch.inference_mode():
            yield
    elif mode == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    elif mode == "deterministic":
        torch.use_deterministic_algorithms(True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(False)
    elif mode == "f64default":
        torch.set_default_dtype(torch.float64)
        try:
            yield
        finally:
            torch.set_default_dtype(torch.float32)
    else:
        yield


_MODE_SRC = {
    "no_grad": "with torch.no_grad():", "inference": "with torch.inference_mode():",
    "autocast": "with torch.autocast('cpu', dtype=torch.bfloat16):",
    "deterministic": "torch.use_deterministic_algorithms(True)  # reset it afterwards\nif 1:",
    "f64default": "torch.set_default_dtype(torch.float64)  # reset it afterwards\nif 1:",
}


# ------------------------------------------------------------------ the function family


def _w(*pairs):
    """sampled_from with integer weights: _w((w, value), ...)."""
    out = []
    for w, v in pairs:
        out += [v] * w
    return st.sampled_from(out)


_fn_ids = itertools.count()


class Gen:
    """Draws one function of the family: source text plus its parameter layout.

    Variables are tracked with their rank, so most generated code is well-formed for the
    inputs drawn for it; eager errors (dtypes, broadcasting, zero sizes, overlapping
    writes, raise/assert) still happen on purpose and are compared too."""

    def __init__(self, draw):
        self.draw = draw
        self.lines: list[str] = []
        self.tvars: list[tuple[str, int]] = []  # tensors in scope: (name, ndim)
        self.ivars: list[str] = []  # Python ints
        self.svars: list[tuple[str, int]] = []  # tuples of tensors: (name, element ndim)
        self.k = 0

    def d(self, strat):
        return self.draw(strat)

    def pick(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def new(self, prefix="t"):
        self.k += 1
        return f"{prefix}{self.k}"

    # ---- operands
    def tensor(self, max_ndim=None, min_ndim=0):
        cands = [(n, d) for n, d in self.tvars
                 if d >= min_ndim and (max_ndim is None or d <= max_ndim)]
        if not cands:
            cands = self.tvars
        if len(cands) > 1 and self.d(st.booleans()):
            return cands[-1]  # mostly chains: the newest variable
        return self.pick(cands)

    def scalar_lit(self):
        opts = ["2", "0.5", "-1", "3", "0", "1.5"]
        if self.p.has_s:
            opts += ["s", "s"]
        if self.p.scope:
            opts += ["K"]
        return self.pick(opts)

    def intexpr(self):
        n = self.p.x_ndim
        opts = ["x.numel()", "x.dim()"]
        if n >= 1:
            opts += ["x.shape[0]", "x.size(-1)", "x.shape[0] + 1", "x.shape[-1] // 2",
                     "len(x)", "x.shape[0] * x.shape[-1]", "x.stride(0)",
                     "max(x.shape[0], 2)", "x.shape[0] % 3", "min(x.shape[-1], 2)"]
        if self.p.has_y and self.p.y_ndim >= 1:
            opts += ["y.shape[-1]"]
        if self.p.c_kind:
            opts += ["len(c)"]
        if self.p.has_s and self.p.s_kind == "int":
            opts += ["s + 1", "s * 2"]
        if self.p.scope:
            opts += ["K + 1"]
        opts += [f"len({v})" for v, _ in self.svars]
        opts += self.ivars * 2
        return self.pick(opts)

    def floatexpr(self):
        """Python float arithmetic on sizes (and its conversions back to int)."""
        i = self.intexpr()
        return self.pick([f"{i} / 3", f"1.0 / ({i} + 1)", f"({i} + 1) ** -0.5",
                          f"math.sqrt({i})", f"{i} * 0.25 + 0.5", f"float({i})",
                          f"round({i} / 4)", f"math.floor({i} * 0.3)", f"{i} ** 2",
                          f"2.0 ** -{i}", f"int({i} / 2.5)"])

    def operand(self, a_ndim):
        """Second operand of a binary op: a tensor, a scalar, a size, a float of sizes or the
        global W."""
        kind = self.d(_w((5, "tensor"), (3, "scalar"), (1, "size"), (1, "float"), (1, "W")))
        if kind == "W" and self.p.scope:
            return "W", 0
        if kind == "tensor" or kind == "W":
            return self.tensor(max_ndim=a_ndim)
        if kind == "scalar":
            return self.scalar_lit(), 0
        if kind == "float":
            return f"({self.floatexpr()})", 0
        return self.intexpr(), 0

    # ---- expressions: (code, ndim)
    def view_expr(self, a, n):
        opts = ["view(-1)", "reshape(-1)", "unsqueeze(0)", "unsqueeze(-1)", "flatten()",
                "contiguous()", "detach()", "to(x.dtype)"]
        if n <= 2:
            opts += ["t()"] * 2
        if n >= 1:
            opts += ["transpose(0, -1)", "[1:]", "[..., ::2]", "narrow0", "narrowk", "[0]",
                     "select(0, -1)", "expand", "reshape2", "split", "[:int]", "[-int:]"]
            if self.p.has_s and self.p.s_kind == "int":
                opts += ["[:s]"]
        if n >= 2:
            opts += ["diagonal()", "[:, 1:]", "transpose(0, 1)", "mT"]
        if n == 2:
            opts += ["T"]
        if self.p.has_y:
            opts += ["expand_as(y)", "to(y.dtype)", "type_as(y)"]
        op = self.pick(opts)
        if op in ("view(-1)", "reshape(-1)", "flatten()"):
            return f"{a}.{op}", 1
        if op.startswith("unsqueeze"):
            return f"{a}.{op}", n + 1
        if op in ("contiguous()", "detach()", "t()", "transpose(0, -1)", "transpose(0, 1)",
                  "mT", "T", "to(x.dtype)", "to(y.dtype)", "type_as(y)"):
            return f"{a}.{op}", n
        if op in ("[1:]", "[..., ::2]", "[:, 1:]", "[:s]"):
            return f"{a}{op}", n
        if op == "[:int]":
            return f"{a}[:{self.intexpr()}]", n
        if op == "[-int:]":
            return f"{a}[-{self.intexpr()}:]", n
        if op == "expand_as(y)":
            return f"{a}.expand_as(y)", self.p.y_ndim
        if op == "narrow0":
            return f"{a}.narrow(0, 0, {a}.shape[0] // 2)", n
        if op == "narrowk":
            return f"{a}.narrow(-1, 1, {self.pick([0, 1, 2])})", n
        if op in ("[0]", "select(0, -1)", "diagonal()"):
            return (f"{a}{op}" if op == "[0]" else f"{a}.{op}"), n - 1
        if op == "expand":
            return f"{a}.expand(2, *{a}.shape)", n + 1
        if op == "reshape2":
            return f"{a}.reshape({a}.shape[0], -1)", 2
        if op == "split":
            return f"{a}.split(2)[0]", n
        raise AssertionError(op)

    def elementwise_expr(self, a, n):
        op = self.d(_w((3, "+"), (2, "-"), (3, "*"), (1, "/"), (1, "max"), (1, "where"),
                       (1, "pow"), (1, "abs"), (1, "neg"), (1, "clamp"), (1, "cmp"),
                       (1, "float"), (1, "to64"), (1, "long"), (1, "zeros_like"),
                       (1, "sizemul"), (1, "sigmoid"), (1, "bf16"), (1, "matmul")))
        if op in "+-*/":
            b, nb = self.operand(n)
            if self.d(st.booleans()):
                return f"{a} {op} {b}", max(n, nb)
            return f"{b} {op} {a}", max(n, nb)
        if op == "max":
            b, nb = self.tensor(max_ndim=n)
            return f"torch.maximum({a}, {b})", max(n, nb)
        if op == "where":
            b, nb = self.operand(n)
            return f"torch.where({a} > 0, {a}, {b})", max(n, nb)
        if op == "cmp":
            b, nb = self.operand(n)
            return f"({a} > {b})", max(n, nb)
        if op == "sizemul":
            return f"{a} * {self.intexpr()}", n
        if op == "matmul":
            if n >= 2:
                return f"{a} @ {a}.transpose(-1, -2)", n
            if n == 1:
                return f"{a} @ {a}", 0
            return f"{a} * {a}", 0
        return {"pow": (f"{a} ** 2", n), "abs": (f"{a}.abs()", n), "neg": (f"-{a}", n),
                "clamp": (f"{a}.clamp(min=-1, max=1)", n), "float": (f"{a}.float()", n),
                "to64": (f"{a}.to(torch.float64)", n), "long": (f"{a}.long()", n),
                "zeros_like": (f"torch.zeros_like({a})", n),
                "sigmoid": (f"{a}.sigmoid()", n), "bf16": (f"{a}.to(torch.bfloat16)", n)}[op]

    def reduction_expr(self, a, n):
        if n == 0:
            return f"{a}.{self.pick(['sum()', 'mean()', 'amax()'])}", 0
        dd = self.d(st.integers(-n, n - 1))
        op = self.pick(["sum", "sum", "mean", "amax", "amax", "prod", "sumall", "meanall",
                        "sum64", "amax2", "argmax", "maxvalues"])
        if op in ("sum", "mean", "amax", "prod"):
            if op != "prod" and self.d(st.booleans()):
                return f"{a}.{op}({dd}, keepdim=True)", n
            return f"{a}.{op}({dd})", n - 1
        if op == "amax2":
            if n >= 2:
                return f"{a}.amax(dim=(0, -1))", n - 2
            return f"{a}.amax(dim=0)", n - 1
        if op == "maxvalues":
            return f"{a}.max({dd}).values", n - 1
        return {"sumall": (f"{a}.sum()", 0), "meanall": (f"{a}.mean()", 0),
                "sum64": (f"{a}.sum(dtype=torch.float64)", 0),
                "argmax": (f"{a}.argmax()", 0)}[op]

    def factory_expr(self):
        op = self.pick(["ones", "arange", "full", "zeros_shape"])
        if op == "ones":
            return f"torch.ones({self.intexpr()})", 1
        if op == "arange":
            return f"torch.arange({self.intexpr()})", 1
        if op == "full":
            return f"torch.full(({self.intexpr()},), {self.scalar_lit()})", 1
        return "torch.zeros(x.shape, dtype=x.dtype)", self.p.x_ndim

    def preserving_expr(self, a, n):
        """An expression keeping the rank of `a` (for both arms of a branch)."""
        op = self.pick(["+", "*", "abs", "t", "[1:]", "contiguous", "clamp", "keepsum",
                        "float"])
        if op == "+":
            return f"{a} + {self.scalar_lit()}"
        if op == "*":
            return f"{a} * {self.tensor(max_ndim=n)[0]}"
        if op == "t" and n <= 2:
            return f"{a}.t()"
        if op == "[1:]" and n >= 1:
            return f"{a}[1:]"
        if op == "keepsum" and n >= 1:
            return f"{a}.sum(-1, keepdim=True)"
        if op in ("abs", "contiguous", "float"):
            return f"{a}.{op}()"
        return f"{a}.clamp(min=-1, max=1)"

    # ---- in-place
    def inplace_target(self, a, n):
        opts = ["{a}"] * 4
        if n >= 1:
            opts += ["{a}[1:]", "{a}[0]", "{a}.view(-1)"]
        if n <= 2:
            opts += ["{a}.t()"]
        tgt = self.pick(opts).format(a=a)
        nd = n - 1 if tgt.endswith("[0]") else (1 if tgt.endswith("view(-1)") else n)
        return tgt, nd

    def inplace_expr(self, a, n):
        """(code, ndim of its value), or (code, None) for a statement (setitem)."""
        tgt, nd = self.inplace_target(a, n)
        op = self.d(_w((3, "add_"), (2, "mul_"), (2, "clamp_min"), (1, "clamp_"), (1, "sub_"),
                       (1, "zero_"), (1, "fill_"), (1, "copy_"), (1, "div_"), (1, "abs_"),
                       (1, "neg_"), (2, "setitem")))
        if op == "setitem":  # x[...] = 3 lowers with a get_attr constant: a fallback
            if nd >= 1 and self.d(_w((3, True), (1, False))):
                b, _ = self.tensor(max_ndim=nd - 1)
                return f"{tgt}[{self.pick(['0', '-1', '1:', '..., 0'])}] = {b}", None
            return f"{tgt}[...] = {self.scalar_lit()}", None
        if op in ("add_", "mul_"):
            b, _ = self.operand(nd)
            return f"{tgt}.{op}({b})", nd
        if op == "copy_":
            return f"{tgt}.copy_({self.tensor(max_ndim=nd)[0]})", nd
        if op == "clamp_min":
            return f"{tgt}.clamp_(min={self.pick(['0', '-1', '0.5'])})", nd
        if op == "fill_":
            return f"{tgt}.fill_({self.scalar_lit()})", nd
        return {"clamp_": f"{tgt}.clamp_(-1, 1)", "sub_": f"{tgt}.sub_(1)",
                "zero_": f"{tgt}.zero_()", "div_": f"{tgt}.div_(2)", "abs_": f"{tgt}.abs_()",
                "neg_": f"{tgt}.neg_()"}[op], nd

    # ---- statements
    def cond(self):
        p = self.p
        opts = ["dtype", "isfloat", "numel0", "dim", "contig"]
        if p.x_ndim >= 1:
            opts += ["shape"] * 4 + ["stride", "shapemod", "shapeprod"]
        if p.has_s:
            opts += ["s"] * 3 + ["stype", "sflag"]
        if p.has_y:
            opts += ["yshape"]
        if p.scope:
            opts += ["K"]
        c = self.pick(opts)
        if c == "shape":
            return f"x.shape[{self.d(st.integers(0, p.x_ndim - 1))}] > {self.pick(range(5))}"
        if c == "dtype":
            return self.pick(["x.dtype == torch.float32", "x.dtype in (torch.int64, torch.bool)",
                              "x.dtype != torch.bfloat16"])
        if c == "s":
            return f"s {self.pick(['>', '<', '==', '>='])} {self.pick([0, 1, 2])}"
        if c == "stride":
            return self.pick(["x.stride(-1) == 1", "x.stride(0) > 1", "x.storage_offset() > 0"])
        if c == "K":
            return self.pick(["K > 2", "K == 2", "W.dtype == torch.float32"])
        return {"isfloat": "x.is_floating_point()", "numel0": "x.numel() == 0",
                "dim": f"x.dim() == {p.x_ndim}", "contig": "x.is_contiguous()",
                "stype": "isinstance(s, float)", "sflag": "s",
                "shapemod": "x.shape[0] % 2 == 0", "shapeprod": "x.shape[0] * x.shape[-1] > 6",
                "yshape": "y.shape == x.shape"}[c]

    def stmt(self, ind=""):
        kind = self.d(_w((4, "view"), (5, "elementwise"), (3, "reduction"), (4, "inplace"),
                         (2, "inplace_expr"), (1, "intvar"), (1, "factory"), (2, "branch"),
                         (2, "early_return"), (1, "cat"), (1, "local_list"), (1, "raise"),
                         (1, "loop"), (1, "seq"), (2, "chain"), (1, "mode_block")))
        if kind == "mode_block":
            # a grad-mode / autocast / inference-mode block inside the function
            a, n = self.tensor()
            ctx = self.pick(["torch.no_grad()", "torch.enable_grad()",
                             "torch.autocast('cpu', enabled=False)", "torch.inference_mode(False)"])
            v = self.new()
            self.lines += [f"{ind}with {ctx}:", f"{ind}    {v} = {a} * 2 + 1"]
            self.tvars.append((v, n))
        elif kind == "chain":
            # elementwise operators each applied to the previous one's result (dead after it:
            # what the lowering may run in place), starting from a fresh intermediate
            a, n = self.tensor()
            cur = self.pick([f"({a} * 2)", f"{a}.sin()", f"{a}.float()", f"({a} + {a})",
                             f"{a}.abs()", f"torch.relu({a})"])
            for _ in range(self.d(st.integers(1, 4))):
                op = self.d(_w((3, "+"), (2, "-"), (3, "*"), (1, "relu"), (1, "neg")))
                if op in "+-*":
                    b, nb = self.operand(n)
                    n = max(n, nb)
                    cur = f"({cur} {op} {b})"
                else:
                    cur = f"torch.relu({cur})" if op == "relu" else f"(-{cur})"
            v = self.new()
            self.lines.append(f"{ind}{v} = {cur}")
            self.tvars.append((v, n))
        elif kind in ("view", "elementwise", "reduction"):
            a, n = self.tensor(min_ndim=1 if kind == "view" and self.d(st.booleans()) else 0)
            code, nd = getattr(self, f"{kind}_expr")(a, n)
            v = self.new()
            self.lines.append(f"{ind}{v} = {code}")
            self.tvars.append((v, nd))
        elif kind in ("inplace", "inplace_expr"):
            a, n = self.tensor()
            code, nd = self.inplace_expr(a, n)
            if kind == "inplace" or nd is None:
                self.lines.append(f"{ind}{code}")
            else:
                v = self.new()
                self.lines.append(f"{ind}{v} = {code}")
                self.tvars.append((v, nd))
        elif kind == "intvar":
            v = self.new("n")
            self.lines.append(f"{ind}{v} = {self.intexpr()}")
            self.ivars.append(v)
        elif kind == "factory":
            code, nd = self.factory_expr()
            v = self.new()
            self.lines.append(f"{ind}{v} = {code}")
            self.tvars.append((v, nd))
        elif kind == "cat":
            a, n = self.tensor(min_ndim=1)
            v = self.new()
            if n >= 1 and self.d(st.booleans()):
                self.lines.append(f"{ind}{v} = torch.cat([{a}, {a} * 2])")
                self.tvars.append((v, n))
            else:
                self.lines.append(f"{ind}{v} = torch.stack([{a}, {a}])")
                self.tvars.append((v, n + 1))
        elif kind == "local_list":
            a, _ = self.tensor()
            b, nb = self.tensor()
            v, t = self.new("l"), self.new()
            self.lines += [f"{ind}{v} = [{a}]", f"{ind}{v}.append({b})", f"{ind}{t} = {v}[-1]"]
            self.tvars.append((t, nb))
        elif kind == "branch":
            a, n = self.tensor()
            v = self.new()
            self.lines.append(f"{ind}if {self.cond()}:")
            if self.d(st.integers(0, 3)) == 3:
                b, nb = self.tensor()
                code, _ = self.inplace_expr(b, nb)
                self.lines.append(f"{ind}    {code}")
            self.lines.append(f"{ind}    {v} = {self.preserving_expr(a, n)}")
            self.lines.append(f"{ind}else:")
            self.lines.append(f"{ind}    {v} = {self.preserving_expr(a, n)}")
            self.tvars.append((v, n))
        elif kind == "early_return":
            self.lines.append(f"{ind}if {self.cond()}:")
            self.lines.append(f"{ind}    return {self.ret(depth=1)}")
        elif kind == "raise":
            if self.d(st.booleans()):
                self.lines.append(f"{ind}assert not ({self.cond()}), 'fuzz assert'")
            else:
                self.lines.append(f"{ind}if {self.cond()}:")
                exc = self.pick(["ValueError", "TypeError", "RuntimeError"])
                msg = self.pick(["'fuzz error'", "f'fuzz {x.dim()}'", "'fuzz ' + str(x.dtype)"])
                self.lines.append(f"{ind}    raise {exc}({msg})")
        elif kind == "loop":
            a, n = self.tensor()
            v = self.new()
            if self.p.c_kind:
                it = "c.values()" if self.p.c_kind == "dict" else "c"
                self.lines += [f"{ind}{v} = {a}", f"{ind}for _e in {it}:",
                               f"{ind}    {v} = {v} + _e"]
                self.tvars.append((v, max(n, self.p.c_ndim)))
            else:
                rng = self.pick(["2", "min(x.dim(), 3)"])
                self.lines += [f"{ind}{v} = {a} * 1", f"{ind}for _i in range({rng}):",
                               f"{ind}    {v} = {v} + _i"]
                self.tvars.append((v, n))
        elif kind == "seq":
            a, n = self.tensor(min_ndim=1)
            if n == 0:
                a, n = "x", self.p.x_ndim
            v = self.new("q")
            if n >= 1:
                code, en = self.pick([(f"{a}.unbind(0)", n - 1), (f"{a}.split(2)", n),
                                      (f"{a}.chunk(2)", n), (f"{a}.unbind(-1)", n - 1),
                                      (f"{a}.max(0)", n - 1)])
            else:
                code, en = f"({a}, {a} + 1)", n
            if self.p.has_y and self.d(st.integers(0, 3)) == 3:
                code, en = f"torch.broadcast_tensors({a}, y)", max(n, self.p.y_ndim)
            self.lines.append(f"{ind}{v} = {code}")
            self.svars.append((v, en))
            if self.d(st.booleans()):
                t = self.new()
                self.lines.append(f"{ind}{t} = {v}[{self.pick(['0', '-1'])}]")
                self.tvars.append((t, en))

    # ---- returns
    def leaf(self):
        p = self.p
        kind = self.d(_w((8, "tensor"), (2, "int"), (1, "s"), (1, "none"), (1, "input"),
                         (1, "const"), (1, "size"), (1, "dtype"), (1, "container"),
                         (1, "seq"), (1, "bool"), (1, "global")))
        if (kind == "s" and not p.has_s) or (kind == "container" and not p.c_kind) or \
                (kind == "seq" and not self.svars) or (kind == "global" and not p.scope):
            kind = "tensor"
        if kind == "tensor":
            return self.tensor()[0]
        if kind == "int":
            return self.intexpr()
        if kind == "s":
            return self.pick(["s", "s * 2", "-s"])
        if kind == "input":
            return self.pick(["x"] + (["y"] if p.has_y else []))
        if kind == "const":
            return self.pick(["3", "1.5", "True", "'tag'", "-1"])
        if kind == "size":  # a returned torch.Size falls back to eager: mostly convert it
            return self.pick(["x.shape", "tuple(x.shape)", "list(x.size())", "tuple(x.stride())"])
        if kind == "seq":
            return self.pick(self.svars)[0]
        if kind == "bool":
            return self.pick(["x.is_contiguous()", "x.is_floating_point()", "x.requires_grad"])
        if kind == "global":
            return self.pick(["W", "K"])
        return {"none": "None", "dtype": "x.dtype", "container": "c"}[kind]

    def ret(self, depth=0):
        kind = self.d(_w((4, "leaf"), (3, "tuple"), (1, "list"), (1, "dict"))) if depth < 2 \
            else "leaf"
        if kind == "leaf":
            return self.leaf()
        n = self.d(st.integers(0 if kind != "tuple" else 1, 4))
        items = [self.ret(depth + 1) if self.d(st.integers(0, 4)) == 4 else self.leaf()
                 for _ in range(n)]
        if kind == "tuple":
            return "(" + "".join(it + ", " for it in items) + ")"
        if kind == "list":
            return "[" + ", ".join(items) + "]"
        keys = self.pick(["abcd", "uvwx", "pqrs"])
        return "{" + ", ".join(f"{k!r}: {it}" for k, it in zip(keys, items)) + "}"

    # ---- the whole function
    def program(self) -> Program:
        d = self.d
        x_ndim = d(_w((1, 0), (4, 1), (5, 2), (2, 3), (1, 4)))
        has_y = d(st.booleans())
        y_ndim = d(st.integers(max(0, x_ndim - 1), x_ndim)) if has_y else 0
        has_s = d(_w((3, True), (2, False)))
        s_kind = d(st.sampled_from(["int", "float"]))
        s_default = d(_w((3, None), (1, 2), (1, 0.5))) if has_s else None
        c_kind = d(_w((3, ""), (1, "tuple"), (1, "list"), (1, "dict")))
        c_n = d(st.integers(1, 3)) if c_kind else 0
        c_ndim = d(st.integers(max(0, x_ndim - 1), x_ndim)) if c_kind else 0
        p = self.p = Program(
            name=f"f_fuzz{next(_fn_ids)}", src="", x_ndim=x_ndim, has_y=has_y, y_ndim=y_ndim,
            has_s=has_s, s_kind=s_kind, s_default=s_default, c_kind=c_kind, c_n=c_n,
            c_ndim=c_ndim, dtype_group=d(_w((5, "float"), (2, "int"), (1, "any"))),
            dynamic=d(_w((4, None), (2, True), (1, False))),
            max_versions=d(_w((12, None), (1, 2), (1, 3))))
        p.y_optional = has_y and d(st.integers(0, 3)) == 3
        p.c_vary = c_kind in ("tuple", "list") and d(st.booleans())
        p.scope = d(_w((4, ""), (1, "global"), (1, "closure")))
        p.star = d(st.integers(0, 7)) == 7
        params = ["x"] + (["y"] if has_y else [])
        if has_s:
            params.append("s" if s_default is None else f"s={s_default!r}")
        if c_kind:
            params.append("c" if s_default is None else "c=None")
        if p.star:
            p.s_default = None
            params = ["x", "*args", "**kwargs"]
            if has_y:
                self.lines.append("    y = args[0]")
            if c_kind:
                self.lines.append("    c = args[-1]")
            if has_s:
                self.lines.append("    s = kwargs['s']")
        self.tvars = [("x", x_ndim)] + ([("y", y_ndim)] if has_y else [])
        if p.y_optional:
            self.lines.append("    if y is None:")
            self.lines.append("        y = " + ("x * 0 + 1" if y_ndim == x_ndim else "x.sum(0)"))
        if c_kind:
            if s_default is not None:
                self.lines.append("    if c is None:")
                self.lines.append("        return x")
            for i in range(c_n):
                key = repr("abcd"[i]) if c_kind == "dict" else str(i)
                self.lines.append(f"    c{i} = c[{key}]")
                self.tvars.append((f"c{i}", c_ndim))
        if has_s and d(st.booleans()):  # make the scalar matter (a dynamic int/float input)
            v = self.new()
            op = self.pick(["+", "*", "-", "/"])
            self.lines.append(f"    {v} = " + self.pick([f"x {op} s", f"s {op} x"]))
            self.tvars.append((v, x_ndim))
        for _ in range(d(st.integers(1, 6))):
            self.stmt("    ")
        # Graph breaks (rarely): exercise the fallback path.
        if d(st.integers(0, 30)) == 30:
            a, _ = self.tensor()
            self.lines.append("    " + self.pick([
                f"if {a}.sum().item() > 0:\n        {a} = {a} + 1", f"_l = {a}.tolist()"]))
            p.graph_break = True
        self.lines.append(f"    return {self.ret()}")
        src = f"def {p.name}({', '.join(params)}):\n" + "\n".join(self.lines) + "\n"
        if p.scope == "closure":
            src = (f"def make(K, W):\n" + "".join("    " + ln + "\n" for ln in src.splitlines())
                   + "    def set_env(name, value):\n        nonlocal K, W\n"
                   + "        if name == 'K':\n            K = value\n"
                   + "        else:\n            W = value\n"
                   + f"    return {p.name}, set_env\n")
        p.src = src
        return p


# ------------------------------------------------------------------ drawing inputs

SIZES = _w((1, 0), (3, 1), (4, 2), (4, 3), (2, 4), (2, 5), (1, 7), (1, 8))


def draw_dtype(draw, group):
    if group == "float":
        return draw(_w((8, torch.float32), (3, torch.float64), (2, torch.bfloat16),
                       (1, torch.float16), (1, torch.int64), (1, torch.bool)))
    if group == "int":
        return draw(_w((6, torch.int64), (3, torch.bool), (1, torch.float32)))
    return draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                 torch.int64, torch.bool]))


def draw_tspec(draw, shape, dtype):
    layout = draw(_w((10, "contig"), (2, "transposed"), (2, "stepped"), (1, "offset"),
                     (1, "expanded"), (1, "channels_last"), (1, "param")))
    return TSpec(tuple(shape), dtype, layout, draw(st.integers(0, 2 ** 20)),
                 dtype.is_floating_point and draw(st.integers(0, 9)) == 9,
                 dtype.is_floating_point and draw(st.integers(0, 19)) == 19)


def broadcast_shape(draw, xshape, ndim):
    """A shape of rank `ndim` broadcastable against `xshape` (usually)."""
    tail = list(xshape[len(xshape) - ndim:]) if ndim <= len(xshape) else \
        [draw(SIZES) for _ in range(ndim - len(xshape))] + list(xshape)
    mode = draw(_w((6, "same"), (2, "ones"), (1, "random")))
    if mode == "ones":
        return tuple(1 if draw(st.booleans()) else s for s in tail)
    if mode == "random":
        return tuple(draw(SIZES) for _ in tail)
    return tuple(tail)


def draw_scalar(draw, kind):
    k = draw(_w((8, kind), (1, "other"), (1, "bool")))
    if k == "other":
        k = "float" if kind == "int" else "int"
    if k == "int":
        # beyond int64 too: once an int is dynamic, such a value must miss, not error
        return draw(_w((3, -2), (3, 0), (3, 1), (3, 2), (3, 3), (3, 5), (1, 2 ** 62),
                       (1, 2 ** 63), (1, -2 ** 63 - 1), (1, 2 ** 64)))
    if k == "float":
        # -0.0 after 0.0: equal under ==, but x / s and a returned s tell them apart
        return draw(_w((4, 0.5), (2, -1.5), (2, 2.0), (2, 0.0), (2, -0.0), (1, 3.25),
                       (1, float("nan")), (1, float("inf"))))
    return draw(st.booleans())


def draw_env(draw, p: Program) -> tuple:
    """Source lines changing K, W or fn.__defaults__ before a call (usually none)."""
    env = []
    if p.scope and draw(st.integers(0, 2)) == 2:
        what = draw(st.sampled_from(["K", "W_add", "W_new"]))
        if what == "K":
            val = _lit(draw(st.sampled_from([1, 2, 3, 0.5, 0.0, -0.0])))
        elif what == "W_add":
            env.append("W.add_(1)" if p.scope == "global" else "get_W().add_(1)")
            val = None
        else:
            dt = draw(st.sampled_from(["torch.float32", "torch.float64", "torch.int64"]))
            shape = draw(st.sampled_from(["()", "(1,)"]))
            val = f"torch.full({shape}, {draw(st.sampled_from([1, 2, -3]))}, dtype={dt})"
        if val is not None:
            name = "K" if what == "K" else "W"
            env.append(f"{name} = {val}" if p.scope == "global" else f"set_env({name!r}, {val})")
    if p.has_s and p.s_default is not None and draw(st.integers(0, 4)) == 4:
        tail = ", None" if p.c_kind else ""
        env.append(f"fn.__defaults__ = ({_lit(draw_scalar(draw, p.s_kind))}{tail},)")
    return tuple(env)


def draw_call(draw, p: Program, prev: CallSpec | None) -> CallSpec:
    """Fresh arguments; when `prev` is given, usually a small change of it."""
    if prev is not None:
        change = draw(_w((4, "dim0"), (2, "shape"), (2, "dtype"), (2, "layout"),
                         (2, "scalar"), (1, "alias"), (1, "rank"), (2, "all")))
    else:
        change = "all"
    x_ndim = p.x_ndim
    if change == "rank":
        x_ndim = max(0, min(4, p.x_ndim + draw(st.sampled_from([-1, 1]))))
    if change in ("all", "shape", "rank"):
        xshape = tuple(draw(SIZES) for _ in range(x_ndim))
    elif change == "dim0" and prev.x.shape:
        xshape = (draw(SIZES),) + prev.x.shape[1:]
    else:
        xshape = prev.x.shape
    xdtype = draw_dtype(draw, p.dtype_group) if change in ("all", "dtype") else prev.x.dtype
    if change in ("all", "layout", "shape", "dim0", "rank"):
        x = draw_tspec(draw, xshape, xdtype)
    else:
        x = replace(prev.x, shape=xshape, dtype=xdtype, seed=draw(st.integers(0, 2 ** 20)),
                    rg=prev.x.rg and xdtype.is_floating_point)
    same_dtype = draw(_w((3, True), (1, False)))
    y = None
    if p.has_y:
        ydtype = xdtype if same_dtype else draw_dtype(draw, p.dtype_group)
        y = draw_tspec(draw, broadcast_shape(draw, xshape, p.y_ndim), ydtype)
    s, s_mode = None, "pos"
    if p.has_s:
        if change in ("all", "scalar"):
            s = draw_scalar(draw, p.s_kind)
            s_mode = draw(_w((4, "pos"), (1, "kw"), (1 if p.s_default is not None else 0,
                                                       "default")))
        else:
            s, s_mode = prev.s, prev.s_mode
        if s_mode == "default" and p.c_kind:
            s_mode = "kw"
    c = ()
    if p.c_kind:
        if not p.c_vary:
            c_n = p.c_n
        elif prev is not None and change not in ("all", "shape"):
            c_n = len(prev.c)
        else:
            c_n = p.c_n + draw(st.integers(0, 2))
        c = tuple(draw_tspec(draw, broadcast_shape(draw, xshape, p.c_ndim),
                             xdtype if same_dtype else draw_dtype(draw, p.dtype_group))
                  for _ in range(c_n))
    y_none = p.y_optional and draw(st.integers(0, 2)) == 2
    alias = ""
    if change in ("all", "alias") and draw(st.integers(0, 5)) == 5:
        opts = []
        if p.has_y and p.y_ndim == x_ndim and not y_none:
            opts += ["y_is_x", "y_view_as_x"]
        if p.has_y and x_ndim >= 1 and not y_none and (
                p.y_ndim == x_ndim or p.y_ndim == x_ndim - 1 and xshape[0] > 0):
            opts.append("y_view_x")
        if p.c_kind and p.c_ndim == x_ndim:
            opts.append("c0_is_x")
        if opts:
            alias = draw(st.sampled_from(opts))
    mode = draw(_w((20, ""), (1, "no_grad"), (1, "inference"), (1, "autocast"),
                   (1, "deterministic"), (1, "f64default")))
    bad = draw(_w((40, ""), (1, "extra"), (1, "unknown_kw"), (1, "missing")))
    return CallSpec(x, y, s, s_mode, c, alias, y_none, draw_env(draw, p), mode, bad)


def draw_plan(draw, p: Program) -> list[CallSpec]:
    """The calls of one example: the first inputs twice, then changed inputs (some
    repeated), then the first inputs again."""
    first = draw_call(draw, p, None)
    first = replace(first, env=(), mode=first.mode if first.mode != "inference" else "",
                    bad="")
    plan = [first, replace(first, env=())]
    prev = first
    for _ in range(draw(st.integers(1, 4))):
        cs = draw_call(draw, p, prev if draw(_w((4, True), (1, False))) else None)
        plan.append(cs)
        if draw(_w((3, False), (2, True))):
            plan.append(replace(cs, env=()))  # the same call again: a hit
        prev = cs
    plan.append(replace(first, env=()))
    return plan


# ------------------------------------------------------------------ comparison


class Mismatch(AssertionError):
    pass


# Write each fallback's reason and a reproducer there (to study what falls back).
def _message(exc: BaseException) -> str:
    """An exception's message without the C++ backtrace c10 appends to some ("Exception raised
    from ... (most recent call first): frame #0 ..."): its frames name the native callers, which
    differ between an eager call and one Dynamo runs (seed 1917: `torch.ones(s + 1)` with
    s = 2**63, the same TypeError in both, frames #34-36 only under trident)."""
    return re.split(r"\nException raised from ", str(exc), maxsplit=1)[0]


FALLBACK_LOG = os.environ.get("TRIDENT_FUZZ_FALLBACK_LOG")
STRICT_STRIDES = os.environ.get("TRIDENT_FUZZ_STRICT_STRIDES") == "1"
STRICT_VERSIONS = os.environ.get("TRIDENT_FUZZ_STRICT_VERSIONS") == "1"


def _storage_id(t: torch.Tensor):
    return t.untyped_storage()._cdata


def _sig_strides(t: torch.Tensor):
    return tuple(s for n, s in zip(t.shape, t.stride()) if n > 1)


def _walk(obj, path="out"):
    """(path, node) for every node of a nested output/argument tree."""
    yield path, obj
    if isinstance(obj, (tuple, list)) and not isinstance(obj, torch.Size):
        for i, o in enumerate(obj):
            yield from _walk(o, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, o in obj.items():
            yield from _walk(o, f"{path}[{k!r}]")


def _tensor_close(a: torch.Tensor, e: torch.Tensor, path: str):
    for what in ("shape", "dtype", "device", "requires_grad", "layout"):
        if getattr(a, what) != getattr(e, what):
            raise Mismatch(f"{path}: {what} {getattr(a, what)} vs eager {getattr(e, what)}")
    if a.is_inference() != e.is_inference():
        raise Mismatch(f"{path}: is_inference {a.is_inference()} vs eager {e.is_inference()}")
    if e.is_floating_point():
        try:
            torch.testing.assert_close(a.detach(), e.detach(), equal_nan=True,
                                       check_stride=False)
        except AssertionError as ex:
            raise Mismatch(f"{path}: values differ: {ex}") from None
    elif not torch.equal(a.detach(), e.detach()):
        raise Mismatch(f"{path}: values differ:\n  trident {a}\n  eager   {e}")


def compare_tree(actual, expected, path="out"):
    """Structure, Python types, scalar values and tensor metadata/values."""
    if type(actual) is not type(expected):
        raise Mismatch(f"{path}: type {type(actual).__name__} vs eager "
                       f"{type(expected).__name__} ({actual!r:.80} vs {expected!r:.80})")
    if isinstance(expected, torch.Tensor):
        _tensor_close(actual, expected, path)
    elif isinstance(expected, torch.Size):
        if actual != expected:
            raise Mismatch(f"{path}: {actual} vs eager {expected}")
    elif isinstance(expected, (tuple, list)):
        if len(actual) != len(expected):
            raise Mismatch(f"{path}: len {len(actual)} vs eager {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare_tree(a, e, f"{path}[{i}]")
    elif isinstance(expected, dict):
        if list(actual) != list(expected):
            raise Mismatch(f"{path}: keys {list(actual)} vs eager {list(expected)}")
        for k in expected:
            compare_tree(actual[k], expected[k], f"{path}[{k!r}]")
    elif isinstance(expected, float) and math.isnan(expected):
        if not math.isnan(actual):
            raise Mismatch(f"{path}: {actual!r} vs eager nan")
    elif isinstance(expected, float) and expected == 0.0:
        if actual != 0.0 or math.copysign(1, actual) != math.copysign(1, expected):
            raise Mismatch(f"{path}: {actual!r} vs eager {expected!r}")
    elif actual != expected:
        raise Mismatch(f"{path}: {actual!r} vs eager {expected!r}")


def _grad_fn_state(t: torch.Tensor):
    """Whether `t` has a grad_fn, or the error reading it raises (e.g. a view made under
    no_grad whose base was then written in place)."""
    try:
        return "grad_fn" if t.grad_fn is not None else "no grad_fn"
    except RuntimeError as ex:
        return f"reading grad_fn raises {ex}"


def _base_class(t: torch.Tensor, ins: list) -> str:
    """What `t._base` is, relative to the input tensors `ins`."""
    base = t._base
    if base is None:
        return "no base"
    for i, x in enumerate(ins):
        if base is x:
            return f"input {i}"
        if x._base is not None and base is x._base:
            return f"base of input {i}"
    return "an intermediate"


def compare_layout_and_aliasing(out_j, out_e, ins_j, ins_e):
    """Identity, storage sharing, view bases, strides and offsets of outputs against the
    inputs (`ins_*`: a tree of the arguments and globals) and each other.  `compare_tree`
    has already checked that both trees have one shape."""
    nodes_e = list(_walk(out_e))
    nodes_j = [n for _, n in _walk(out_j)]
    in_e = list(_walk(ins_e, "arg"))
    in_j = [n for _, n in _walk(ins_j, "arg")]
    tin_e = [n for _, n in in_e if isinstance(n, torch.Tensor)]
    tin_j = [n for n in in_j if isinstance(n, torch.Tensor)]
    for (path, e), j in zip(nodes_e, nodes_j):
        if isinstance(e, (torch.Tensor, list, dict, tuple)) and not isinstance(e, torch.Size):
            for (ipath, ie), ij in zip(in_e, in_j):
                if (e is ie) != (j is ij):
                    raise Mismatch(f"{path}: `is {ipath}` is {j is ij} under trident, "
                                   f"{e is ie} in eager")
        if not isinstance(e, torch.Tensor):
            continue
        if _grad_fn_state(e) != _grad_fn_state(j):
            raise Mismatch(f"{path}: grad_fn {_grad_fn_state(j)} under trident, eager "
                           f"{_grad_fn_state(e)}")
        shares_input = False
        for (ipath, ie), ij in zip(in_e, in_j):
            if isinstance(ie, torch.Tensor):
                se = _storage_id(e) == _storage_id(ie)
                sj = _storage_id(j) == _storage_id(ij)
                if se != sj:
                    raise Mismatch(f"{path}: shares storage with {ipath}: {sj} under "
                                   f"trident, {se} in eager")
                shares_input |= se
        if shares_input:
            be, bj = _base_class(e, tin_e), _base_class(j, tin_j)
            if be != bj or e._is_view() != j._is_view():
                raise Mismatch(f"{path}: a view of an input whose _base is {bj} under "
                               f"trident, {be} in eager")
        if shares_input or e._is_view():
            if j.stride() != e.stride() or j.storage_offset() != e.storage_offset():
                raise Mismatch(f"{path}: a view with stride {j.stride()} offset "
                               f"{j.storage_offset()} under trident, eager stride "
                               f"{e.stride()} offset {e.storage_offset()}")
        elif e.is_contiguous():
            if not j.is_contiguous() or _sig_strides(j) != _sig_strides(e):
                raise Mismatch(f"{path}: eager's result is contiguous (stride "
                               f"{e.stride()}), trident's has stride {j.stride()}")
        elif STRICT_STRIDES and _sig_strides(j) != _sig_strides(e):
            raise Mismatch(f"{path}: stride {j.stride()} under trident, eager {e.stride()}")
    objs = [(p, e, j) for (p, e), j in zip(nodes_e, nodes_j)
            if isinstance(e, (torch.Tensor, list, dict))]
    for (p1, e1, j1), (p2, e2, j2) in itertools.combinations(objs, 2):
        if (e1 is e2) != (j1 is j2):
            raise Mismatch(f"{p1} is {p2}: {j1 is j2} under trident, {e1 is e2} in eager")
        if isinstance(e1, torch.Tensor) and isinstance(e2, torch.Tensor):
            se = _storage_id(e1) == _storage_id(e2)
            sj = _storage_id(j1) == _storage_id(j2)
            if se != sj:
                raise Mismatch(f"{p1} and {p2} share storage: {sj} under trident, {se} in eager")


def compare_with_earlier(out_j, out_e, history):
    """An output object (tensor, list, dict) is an earlier call's output object exactly
    when it is in eager (e.g. a global returned twice), never a cached constant."""
    now = [(p, e, j) for (p, e), j in zip(_walk(out_e), [n for _, n in _walk(out_j)])
           if isinstance(e, (torch.Tensor, list, dict))]
    for k, (old_j, old_e) in enumerate(history):
        old = [(p, e, j) for (p, e), j in zip(_walk(old_e), [n for _, n in _walk(old_j)])
               if isinstance(e, (torch.Tensor, list, dict))]
        for (p1, e1, j1), (p2, e2, j2) in itertools.product(now, old):
            if (e1 is e2) != (j1 is j2):
                raise Mismatch(f"{p1} is {p2} of call {k}: {j1 is j2} under trident, "
                               f"{e1 is e2} in eager")


def _grads(out, ins):
    """Gradients of the sum of the float outputs that require grad, with respect to the
    input leaves that require grad; or the exception backward raised."""
    try:
        outs = [o for _, o in _walk(out) if isinstance(o, torch.Tensor) and o.requires_grad
                and o.is_floating_point()]
        leaves = [t for _, t in _walk(ins) if isinstance(t, torch.Tensor) and t.requires_grad
                  and t.is_leaf]
        if not outs or not leaves:
            return None, None
        loss = sum(o.double().sum() for o in outs)
        return torch.autograd.grad(loss, leaves, allow_unused=True), None
    except Exception as ex:  # noqa: BLE001
        return None, ex


def compare_grads(out_j, out_e, ins_j, ins_e):
    (ge, ee), (gj, ej) = _grads(out_e, ins_e), _grads(out_j, ins_j)
    if ee is not None or ej is not None:
        if type(ee) is not type(ej) or str(ee) != str(ej):
            raise Mismatch(f"backward: eager raised {ee!r:.300}, trident {ej!r:.300}")
        return
    if ge is None:
        return
    for i, (a, e) in enumerate(zip(gj, ge)):
        if (a is None) != (e is None):
            raise Mismatch(f"grad of leaf {i}: {a} under trident, eager {e}")
        if e is not None:
            _tensor_close(a, e, f"grad of leaf {i}")


def compare_args(ins_j, ins_e):
    """The arguments (and globals) after the call: values and metadata (in-place
    mutation)."""
    for (p, e), j in zip(_walk(ins_e, "arg"), [n for _, n in _walk(ins_j, "arg")]):
        if isinstance(e, torch.Tensor) and isinstance(j, torch.Tensor):
            if j.stride() != e.stride() or j.storage_offset() != e.storage_offset():
                raise Mismatch(f"{p} after the call: stride {j.stride()} offset "
                               f"{j.storage_offset()}, eager {e.stride()} {e.storage_offset()}")
            if (j._version > 0) != (e._version > 0) or \
                    STRICT_VERSIONS and j._version != e._version:
                raise Mismatch(f"{p} after the call: version counter {j._version}, "
                               f"eager {e._version}")
            if _grad_fn_state(e) != _grad_fn_state(j):
                raise Mismatch(f"{p} after the call: grad_fn {_grad_fn_state(j)}, eager "
                               f"{_grad_fn_state(e)}")
    try:
        compare_tree(ins_j, ins_e, "arg")
    except Mismatch as ex:
        raise Mismatch(f"arguments after the call differ: {ex}") from None


# ------------------------------------------------------------------ running one example


class Subject:
    """One generated function: the eager function, its trident.jit, and K/W's home."""

    def __init__(self, p: Program):
        self.p = p
        filename = f"<fuzz-{p.name}>"
        linecache.cache[filename] = (len(p.src), None, p.src.splitlines(True), filename)
        self.ns = ns = {"torch": torch, "math": math, "K": 2, "W": torch.tensor(0.5)}
        exec(compile(p.src, filename, "exec"), ns)
        if p.scope == "closure":
            self.fn, self.set_env = ns["make"](2, torch.tensor(0.5))
        else:
            self.fn, self.set_env = ns[p.name], None
        self.f = trident.jit(self.fn, dynamic=p.dynamic, max_versions=p.max_versions)

    def W(self):
        if self.p.scope == "closure":
            names = self.set_env.__code__.co_freevars
            return self.set_env.__closure__[names.index("W")].cell_contents
        return self.ns["W"]

    def apply_env(self, cs: CallSpec):
        if not cs.env:
            return
        env = {"torch": torch, "fn": self.fn, "set_env": self.set_env, "get_W": self.W}
        for line in cs.env:
            if self.p.scope == "global" and not line.startswith("fn."):
                exec(line, self.ns)
            else:
                exec(line, env)


def reproducer(p: Program, plan: list[CallSpec], upto: int) -> str:
    """A standalone script replaying calls 0..upto of an example."""
    out = ["import math, torch, trident", inspect.getsource(make_tensor),
           f"SRC = '''\n{p.src}'''",
           "ns = {'torch': torch, 'math': math, 'K': 2, 'W': torch.tensor(0.5)}",
           f"exec(compile(SRC, '<fuzz>', 'exec'), ns)"]
    if p.scope == "closure":
        out.append(f"fn, set_env = ns['make'](2, torch.tensor(0.5))")
    else:
        out.append(f"fn = ns[{p.name!r}]")
    out += [f"f = trident.jit(fn, dynamic={p.dynamic!r}, max_versions={p.max_versions!r})",
            "",
            "def check(build):  # eager and trident on independent copies",
            "    a, k = build()",
            "    try: e = fn(*a, **k)",
            "    except Exception as ex: e = ex",
            "    a, k = build()",
            "    try: j = f(*a, **k)",
            "    except Exception as ex: j = ex",
            "    print('eager  ', repr(e)[:400]); print('trident', repr(j)[:400])"]
    for i, cs in enumerate(plan[:upto + 1]):
        out.append(f"\n# call {i}")
        for line in cs.env:
            if p.scope == "global" and not line.startswith("fn."):
                out.append(f"exec({line!r}, ns)")
            else:
                out.append(line.replace("get_W()", "set_env.__closure__[set_env.__code__"
                                        ".co_freevars.index('W')].cell_contents"))
        body = args_src(p, cs).replace("\n", "\n    ")
        out.append(f"def build():\n    {body}\n    return args, kwargs")
        if cs.mode:
            out.append(_MODE_SRC[cs.mode] + "\n    check(build)")
            if cs.mode == "deterministic":
                out.append("torch.use_deterministic_algorithms(False)")
            if cs.mode == "f64default":
                out.append("torch.set_default_dtype(torch.float32)")
        else:
            out.append("check(build)")
    return "\n".join(out) + "\n"


def _call(fn, args, kwargs, mode):
    with call_mode(mode):
        try:
            return fn(*args, **kwargs), None
        except Exception as ex:  # noqa: BLE001 - an eager error is part of the behaviour
            return None, ex


def run_example(p: Program, plan: list[CallSpec], stats: FuzzStats, keep_going=None):
    subj = Subject(p)
    note(f"dynamic={p.dynamic} max_versions={p.max_versions} scope={p.scope!r}\n{p.src}")
    stats.examples += 1
    fb_seen = False
    history = []  # (out_j, out_e) of earlier calls
    for i, cs in enumerate(plan):
        note(f"call {i}: {cs}")
        subj.apply_env(cs)
        args_e, kw_e = build_args(p, cs)
        args_j, kw_j = build_args(p, cs)
        w_before = subj.W().clone()
        out_e, exc_e = _call(subj.fn, args_e, kw_e, cs.mode)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            out_j, exc_j = _call(subj.f, args_j, kw_j, cs.mode)
        stats.calls += 1
        for w in rec:
            if issubclass(w.category, RuntimeWarning) and "trident.jit(" in str(w.message):
                if not fb_seen:
                    stats.fallback_fns += 1
                    stats.fallback_reasons[_reason_key(str(w.message))] += 1
                    if FALLBACK_LOG:
                        with open(FALLBACK_LOG, "a") as fh:
                            fh.write(f"{'=' * 80}\n{w.message}\n--- call {i}: {cs}\n"
                                     f"{reproducer(p, plan, i)}\n")
                fb_seen = True
        stats.fallback_calls += fb_seen
        try:
            if exc_e is not None:
                stats.eager_errors += 1
                stats.error_types[type(exc_e).__name__] += 1
                if exc_j is None:
                    raise Mismatch(f"eager raised {type(exc_e).__name__}: {exc_e}; "
                                   f"trident returned {out_j!r:.300}")
                if type(exc_j) is not type(exc_e) or _message(exc_j) != _message(exc_e):
                    raise Mismatch(f"eager raised {type(exc_e).__name__}: {exc_e}\n"
                                   f"trident raised {type(exc_j).__name__}: {exc_j}")
            else:
                if exc_j is not None:
                    raise Mismatch(f"eager returned {out_e!r:.300}; trident raised "
                                   f"{type(exc_j).__name__}: {exc_j}")
                compare_tree(out_j, out_e)
                compare_layout_and_aliasing(out_j, out_e, (args_j, kw_j, subj.W()),
                                            (args_e, kw_e, subj.W()))
                compare_with_earlier(out_j, out_e, history)
                compare_grads(out_j, out_e, (args_j, kw_j), (args_e, kw_e))
                history.append((out_j, out_e))
            compare_args((args_j, kw_j), (args_e, kw_e))
            if not torch.equal(subj.W(), w_before):  # generated code never writes W
                raise Mismatch(f"global W changed: {w_before} -> {subj.W()}")
        except Mismatch as ex:
            msg = (f"call {i} of {len(plan)}: {ex}\n\n--- function (dynamic={p.dynamic}, "
                   f"max_versions={p.max_versions}, scope={p.scope!r}) ---\n{p.src}\n"
                   f"--- reproducer ---\n{reproducer(p, plan, i)}")
            if keep_going is None:
                raise Mismatch(msg) from None
            stats.failures += 1
            keep_going(msg)
            break
    st_ = trident.stats(subj.f)
    stats.misses += st_["misses"]
    stats.captures += st_["captures"]
    stats.versions += st_["versions"]
    stats.hits += sum(st_["hits"])


@st.composite
def examples(draw):
    p = Gen(draw).program()
    return p, draw_plan(draw, p)


_SETTINGS = dict(deadline=None, database=None, print_blob=False,
                 suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------ the tests

CI_EXAMPLES = int(os.environ.get("TRIDENT_FUZZ_CI_EXAMPLES", "130"))


def test_fuzz_ci(request):
    """The CI slice: a fixed (derandomized) set of examples."""
    stats = _stats_for(request, "fuzz CI slice")
    t0 = time.perf_counter()

    @settings(max_examples=CI_EXAMPLES, derandomize=True, **_SETTINGS)
    @given(examples())
    def run(ex):
        run_example(*ex, stats)

    try:
        run()
    finally:
        stats.seconds += time.perf_counter() - t0


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TRIDENT_FUZZ_CALLS"),
                    reason="set TRIDENT_FUZZ_CALLS=N to run the long fuzz (N checked calls)")
def test_fuzz_long(request):
    target = int(os.environ["TRIDENT_FUZZ_CALLS"])
    base = int(os.environ.get("TRIDENT_FUZZ_SEED", "0"))
    keep = os.environ.get("TRIDENT_FUZZ_KEEP_GOING") == "1"
    fail_path = os.environ.get("TRIDENT_FUZZ_FAILURES", "fuzz_failures.txt")
    stats = _stats_for(request, f"fuzz long run (target {target} calls)")
    t0 = time.perf_counter()

    def record(msg):
        with open(fail_path, "a") as fh:
            fh.write("=" * 100 + "\n" + msg + "\n")

    chunk = 0
    try:
        while stats.calls < target:
            @seed(base * 100003 + chunk)
            @settings(max_examples=50, **_SETTINGS,
                      phases=[Phase.generate] if keep else list(Phase))
            @given(examples())
            def run(ex):
                run_example(*ex, stats, keep_going=record if keep else None)

            run()
            chunk += 1
            print(f"[fuzz] chunk {chunk}: {stats.calls} calls, {stats.examples} functions, "
                  f"{stats.failures} mismatches, {time.perf_counter() - t0:.0f} s",
                  file=sys.__stderr__, flush=True)
    finally:
        stats.seconds += time.perf_counter() - t0
    assert stats.failures == 0, f"{stats.failures} mismatches, see {fail_path}"
