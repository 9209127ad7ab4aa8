"""Differential fuzzer: random functions and random inputs, trident.jit against eager.

Each Hypothesis example builds one function from a family as Python source text and execs it
into a fresh function object with its own code identity (file name, name), so Dynamo's
per-code memory (automatic dynamic dimensions) never carries over between examples.  The
family covers:

* branches on shapes (``x.shape[0] > k``), dtypes (``x.dtype == torch.float32``), Python
  scalar arguments, ``numel``/``dim``/contiguity, and early returns of other structures;
* views (``t()``, ``transpose``, ``[1:]``, ``[..., ::2]``, ``view(-1)``, ``reshape``,
  ``narrow``, ``unsqueeze``, ``select``, ``expand``, ``diagonal``, ``contiguous``, ...);
* in-place ops (``add_``, ``mul_``, ``clamp_``, ``copy_``, ``fill_``, setitem, ...) on inputs,
  on views of inputs and on intermediates, also used as expressions (``t = x.add_(1)``);
* reductions (``sum``/``mean``/``amax``/``prod`` over dims, ``keepdim``, ``dtype=``);
* broadcasting binary ops between tensors, Python scalars and sizes; dtype conversions;
  factories sized by dynamic ints;
* returns mixing tensors, tuples, lists, dicts, ints, floats, None, ``torch.Size``,
  ``torch.dtype``, strings, inputs (tensors and containers) returned as themselves.

Inputs: float32/float64/bfloat16/int64/bool tensors of rank 0-3 with zero-size and size-1
dims, contiguous, transposed, sliced with a step, with a storage offset, or expanded (stride
0); Python int/float/bool scalars passed positionally, by keyword or left to their default;
tuple/list/dict containers of tensors; and arguments that alias each other (``y is x``,
``y`` a view of ``x``, ``c[0] is x``).

Each function is called several times: the first inputs (capture), the same inputs again
(hit), then inputs of other shapes/dtypes/strides/layouts (new versions, dynamic dims,
hits), then the first inputs again.  Every call runs eager and trident on identical,
independent copies of the arguments (aliasing between arguments reproduced) and checks

* eager raised -> trident raises the same exception type with the same message;
* values (exact for integer/bool, ``assert_close`` with NaN equal for floats), dtypes,
  shapes, Python types of every node of the output, container lengths and dict keys;
* strides and storage offsets of outputs that alias an input, and strides of outputs eager
  returns contiguous (sizes-1 dims ignored);
* aliasing: an output that *is* an input (tensor or container) in eager is that input under
  trident, an output that shares storage with an input shares it under trident (and one
  that does not, does not); the same for outputs among themselves;
* the arguments after the call: values, shapes, strides, offsets (in-place mutation).

Fallbacks to eager (trident's RuntimeWarning) are allowed but still checked; they are
counted and summarised at the end of the session (``tests/fuzz/conftest.py``).

Sizes: the default CI slice (``test_fuzz_ci``: fixed seed, derandomized) and an on-demand
long run, ``TRIDENT_FUZZ_CALLS=10000 pytest -m slow tests/fuzz`` (``test_fuzz_long``:
chunks of examples with seeds 0, 1, 2, ... until that many calls were checked;
``TRIDENT_FUZZ_SEED`` shifts the seeds).  ``TRIDENT_FUZZ_KEEP_GOING=1`` makes the long run
record mismatches (to ``TRIDENT_FUZZ_FAILURES``, default ``fuzz_failures.txt``) and go on
instead of stopping and shrinking at the first one.

Known trident bugs the fuzzer found are listed in ``KNOWN_BUGS``; their constructs are left
out of the family (``TRIDENT_FUZZ_KNOWN_BUGS=1`` puts them back), and each has a minimal
reproducer below marked ``xfail(strict=True)``, so a fix shows up as an XPASS failure.
"""

from __future__ import annotations

import collections
import inspect
import itertools
import linecache
import math
import os
import re
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, note, seed, settings
from hypothesis import strategies as st

import trident

# ------------------------------------------------------------------ known bugs
#
# Constructs excluded from the generated family because trident gets them wrong.  Each has
# a minimal reproducer test at the end of this file (xfail, strict).  Set
# TRIDENT_FUZZ_KNOWN_BUGS=1 to generate them again (e.g. to check a fix).

KNOWN_BUGS: dict[str, str] = {}


def _bug_ok(name: str) -> bool:
    """True when the construct of known bug `name` may be generated."""
    assert name in KNOWN_BUGS, name
    return os.environ.get("TRIDENT_FUZZ_KNOWN_BUGS") == "1"


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
            f"  fallbacks to eager: {self.fallback_fns} functions, {self.fallback_calls} "
            f"calls served by the fallback",
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
    """A fallback reason without the function's name and numbers, for counting."""
    r = re.sub(r"f_fuzz\d+", "f", reason)
    r = re.sub(r"<fuzz-\d+>", "<fuzz>", r)
    r = re.sub(r"\d+", "N", r)
    r = r.split("\n")[0]
    return r[:160]


# ------------------------------------------------------------------ inputs

FLOATS = (torch.float32, torch.float64, torch.bfloat16)
INTS = (torch.int64, torch.bool)
LAYOUTS = ("contig", "transposed", "stepped", "offset", "expanded")


@dataclass(frozen=True)
class TSpec:
    """How to build one input tensor (deterministically, from `seed`)."""
    shape: tuple
    dtype: torch.dtype
    layout: str = "contig"
    seed: int = 0
    special: bool = False  # floats: sprinkle nan/inf/-0.0

    def expr(self) -> str:
        return (f"make_tensor({self.shape!r}, {self.dtype}, {self.layout!r}, "
                f"{self.seed}, {self.special})")


def make_tensor(shape, dtype, layout="contig", seed=0, special=False):
    """A tensor of `shape`/`dtype` whose layout is `layout`:
    contig; transposed (dims 0 and -1 swapped); stepped (last dim sliced with step 2);
    offset (a flat tensor's [1:], viewed); expanded (dim 0 broadcast, stride 0)."""
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
        return values(tuple(sh)).transpose(0, -1)
    if layout == "stepped" and n >= 1:
        sh = list(shape)
        sh[-1] = sh[-1] * 2
        return values(tuple(sh))[..., ::2]
    if layout == "offset":
        numel = math.prod(shape)
        return values((numel + 1,))[1:].view(shape)
    if layout == "expanded" and n >= 1:
        return values((1,) + tuple(shape[1:])).expand(shape)
    return values(tuple(shape))


@dataclass(frozen=True)
class CallSpec:
    """One call's arguments."""
    x: TSpec
    y: TSpec | None = None
    s: object = None  # Python scalar (int, float, bool) or None
    s_mode: str = "pos"  # pos | kw | default
    c: tuple = ()  # TSpecs of the container elements
    alias: str = ""  # "" | y_is_x | y_view_x | c0_is_x


@dataclass
class Program:
    name: str
    src: str
    has_y: bool
    y_ndim: int
    x_ndim: int
    has_s: bool
    s_kind: str  # int | float
    s_default: object
    c_kind: str  # "" | tuple | list | dict
    c_n: int
    c_ndim: int
    dtype_group: str  # float | int | any
    dynamic: object
    graph_break: bool = False


def build_args(prog: Program, cs: CallSpec):
    """(args, kwargs) for one call, built fresh from the specs."""
    x = make_tensor(*_targs(cs.x))
    args = [x]
    kwargs = {}
    if prog.has_y:
        if cs.alias == "y_is_x":
            y = x
        elif cs.alias == "y_view_x":
            y = x[1:] if prog.y_ndim == prog.x_ndim else x[0]
        else:
            y = make_tensor(*_targs(cs.y))
        args.append(y)
    if prog.has_s:
        if cs.s_mode == "pos":
            args.append(cs.s)
        elif cs.s_mode == "kw":
            kwargs["s"] = cs.s
    if prog.c_kind:
        elems = [make_tensor(*_targs(t)) for t in cs.c]
        if cs.alias == "c0_is_x":
            elems[0] = x
        if prog.c_kind == "tuple":
            c = tuple(elems)
        elif prog.c_kind == "list":
            c = list(elems)
        else:
            c = dict(zip("abcd", elems))
        if cs.s_mode == "pos" or not prog.has_s:
            args.append(c)
        else:
            kwargs["c"] = c
    return tuple(args), kwargs


def _targs(t: TSpec):
    return (t.shape, t.dtype, t.layout, t.seed, t.special)


def args_expr(prog: Program, cs: CallSpec) -> str:
    """Python source building the same (args, kwargs) as build_args."""
    lines = [f"x = {cs.x.expr()}"]
    args = ["x"]
    kwargs = []
    if prog.has_y:
        if cs.alias == "y_is_x":
            lines.append("y = x")
        elif cs.alias == "y_view_x":
            lines.append("y = x[1:]" if prog.y_ndim == prog.x_ndim else "y = x[0]")
        else:
            lines.append(f"y = {cs.y.expr()}")
        args.append("y")
    if prog.has_s:
        if cs.s_mode == "pos":
            args.append(repr(cs.s) if not _isnan(cs.s) else "float('nan')")
        elif cs.s_mode == "kw":
            kwargs.append(f"s={cs.s!r}" if not _isnan(cs.s) else "s=float('nan')")
    if prog.c_kind:
        elems = [t.expr() for t in cs.c]
        if cs.alias == "c0_is_x":
            elems[0] = "x"
        if prog.c_kind == "tuple":
            c = "(" + ", ".join(elems) + ",)"
        elif prog.c_kind == "list":
            c = "[" + ", ".join(elems) + "]"
        else:
            c = "{" + ", ".join(f"{k!r}: {e}" for k, e in zip("abcd", elems)) + "}"
        lines.append(f"c = {c}")
        if cs.s_mode == "pos" or not prog.has_s:
            args.append("c")
        else:
            kwargs.append("c=c")
    lines.append(f"args, kwargs = ({', '.join(args)},), dict({', '.join(kwargs)})")
    return "\n".join(lines)


def _isnan(v):
    return isinstance(v, float) and math.isnan(v)


# ------------------------------------------------------------------ the function family


def _w(*pairs):
    """sampled_from with integer weights: _w((w, value), ...)."""
    out = []
    for w, v in pairs:
        out += [v] * w
    return st.sampled_from(out)


_fn_ids = itertools.count()


class Gen:
    """Draws one function of the family: source text plus its parameter layout."""

    def __init__(self, draw):
        self.draw = draw
        self.lines: list[str] = []
        self.tvars: list[tuple[str, int]] = []  # (name, ndim) of tensor variables in scope
        self.ivars: list[str] = []  # Python ints
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
        return self.pick(opts)

    def intexpr(self):
        n = self.p.x_ndim
        opts = ["x.numel()", "x.dim()"]
        if n >= 1:
            opts += ["x.shape[0]", "x.size(-1)", "x.shape[0] + 1", "x.shape[-1] // 2",
                     "len(x)", "x.shape[0] * x.shape[-1]"]
        if self.p.has_y and self.p.y_ndim >= 1:
            opts += ["y.shape[-1]"]
        if self.p.c_kind:
            opts += ["len(c)"]
        if self.p.has_s and self.p.s_kind == "int":
            opts += ["s + 1", "s * 2"]
        opts += self.ivars * 2
        return self.pick(opts)

    def operand(self, a_ndim):
        """Second operand of a binary op: a tensor, a scalar or a size."""
        kind = self.d(_w((5, "tensor"), (3, "scalar"), (1, "size")))
        if kind == "tensor":
            name, nd = self.tensor(max_ndim=a_ndim)
            return name, nd
        if kind == "scalar":
            return self.scalar_lit(), 0
        return self.intexpr(), 0

    # ---- expressions: (code, ndim)
    def view_expr(self, a, n):
        opts = ["view(-1)", "reshape(-1)", "unsqueeze(0)", "unsqueeze(-1)", "flatten()",
                "contiguous()", "detach()"]
        if n <= 2:
            opts += ["t()"] * 2
        if n >= 1:
            opts += ["transpose(0, -1)", "[1:]", "[..., ::2]", "narrow0", "narrowk", "[0]",
                     "select(0, -1)", "expand", "reshape2", "split"]
        if n >= 2:
            opts += ["diagonal()", "[:, 1:]", "transpose(0, 1)"]
        op = self.pick(opts)
        if op == "view(-1)":
            return f"{a}.view(-1)", 1
        if op == "reshape(-1)":
            return f"{a}.reshape(-1)", 1
        if op == "flatten()":
            return f"{a}.flatten()", 1 if n == 0 else 1
        if op.startswith("unsqueeze"):
            return f"{a}.{op}", n + 1
        if op in ("contiguous()", "detach()", "t()", "transpose(0, -1)", "transpose(0, 1)"):
            return f"{a}.{op}", n
        if op in ("[1:]", "[..., ::2]", "[:, 1:]"):
            return f"{a}{op}", n
        if op == "narrow0":
            return f"{a}.narrow(0, 0, {a}.shape[0] // 2)", n
        if op == "narrowk":
            k = self.pick([0, 1, 2])
            return f"{a}.narrow(-1, 1, {k})", n
        if op == "[0]":
            return f"{a}[0]", n - 1
        if op == "select(0, -1)":
            return f"{a}.select(0, -1)", n - 1
        if op == "expand":
            return f"{a}.expand(2, *{a}.shape)", n + 1
        if op == "reshape2":
            return f"{a}.reshape({a}.shape[0], -1)", 2
        if op == "split":
            return f"{a}.split(2)[0]", n
        if op == "diagonal()":
            return f"{a}.diagonal()", n - 1
        raise AssertionError(op)

    def elementwise_expr(self, a, n):
        op = self.d(_w((3, "+"), (2, "-"), (3, "*"), (1, "/"), (1, "max"), (1, "where"),
                       (1, "pow"), (1, "abs"), (1, "neg"), (1, "clamp"), (1, "cmp"),
                       (1, "float"), (1, "to64"), (1, "long"), (1, "zeros_like"),
                       (1, "sizemul"), (1, "sigmoid"), (1, "bf16")))
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
        if op == "pow":
            return f"{a} ** 2", n
        if op == "abs":
            return f"{a}.abs()", n
        if op == "neg":
            return f"-{a}", n
        if op == "clamp":
            return f"{a}.clamp(min=-1, max=1)", n
        if op == "cmp":
            b, nb = self.operand(n)
            return f"({a} > {b})", max(n, nb)
        if op == "float":
            return f"{a}.float()", n
        if op == "to64":
            return f"{a}.to(torch.float64)", n
        if op == "long":
            return f"{a}.long()", n
        if op == "zeros_like":
            return f"torch.zeros_like({a})", n
        if op == "sizemul":
            return f"{a} * {self.intexpr()}", n
        if op == "sigmoid":
            return f"{a}.sigmoid()", n
        if op == "bf16":
            return f"{a}.to(torch.bfloat16)", n
        raise AssertionError(op)

    def reduction_expr(self, a, n):
        if n == 0:
            return f"{a}.{self.pick(['sum()', 'mean()', 'amax()'])}", 0
        dd = self.d(st.integers(-n, n - 1))
        op = self.pick(["sum", "sum", "mean", "amax", "amax", "prod", "sumall", "meanall",
                        "sum64", "amax2", "argmax"])
        if op in ("sum", "mean", "amax", "prod"):
            if op != "prod" and self.d(st.booleans()):
                return f"{a}.{op}({dd}, keepdim=True)", n
            return f"{a}.{op}({dd})", n - 1
        if op == "sumall":
            return f"{a}.sum()", 0
        if op == "meanall":
            return f"{a}.mean()", 0
        if op == "sum64":
            return f"{a}.sum(dtype=torch.float64)", 0
        if op == "amax2":
            if n >= 2:
                return f"{a}.amax(dim=(0, -1))", n - 2
            return f"{a}.amax(dim=0)", n - 1
        if op == "argmax":
            return f"{a}.argmax()", 0
        raise AssertionError(op)

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
            b, _ = self.tensor(max_ndim=n)
            return f"{a} * {b}"
        if op == "abs":
            return f"{a}.abs()"
        if op == "t" and n <= 2:
            return f"{a}.t()"
        if op == "[1:]" and n >= 1:
            return f"{a}[1:]"
        if op == "contiguous":
            return f"{a}.contiguous()"
        if op == "keepsum" and n >= 1:
            return f"{a}.sum(-1, keepdim=True)"
        if op == "float":
            return f"{a}.float()"
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
        tgt, nd = self.inplace_target(a, n)
        op = self.d(_w((3, "add_"), (2, "mul_"), (2, "clamp_min"), (1, "clamp_"), (1, "sub_"),
                       (1, "zero_"), (1, "fill_"), (1, "copy_"), (1, "div_"), (1, "abs_"),
                       (1, "neg_")))
        if op in ("add_", "mul_"):
            b, _ = self.operand(nd)
            return f"{tgt}.{op}({b})", nd
        if op == "clamp_min":
            return f"{tgt}.clamp_(min={self.pick(['0', '-1', '0.5'])})", nd
        if op == "clamp_":
            return f"{tgt}.clamp_(-1, 1)", nd
        if op == "sub_":
            return f"{tgt}.sub_(1)", nd
        if op == "zero_":
            return f"{tgt}.zero_()", nd
        if op == "fill_":
            return f"{tgt}.fill_({self.scalar_lit()})", nd
        if op == "copy_":
            b, _ = self.tensor(max_ndim=nd)
            return f"{tgt}.copy_({b})", nd
        if op == "div_":
            return f"{tgt}.div_(2)", nd
        return f"{tgt}.{op}()", nd

    # ---- statements
    def cond(self):
        p = self.p
        opts = ["dtype_f32", "isfloat", "numel0", "dim", "contig"]
        if p.x_ndim >= 1:
            opts += ["shape"] * 4
        if p.has_s:
            opts += ["s"] * 3 + ["stype"]
        if p.has_y:
            opts += ["yshape"]
        c = self.pick(opts)
        if c == "shape":
            dd = self.d(st.integers(0, p.x_ndim - 1))
            k = self.pick([0, 1, 2, 3, 4])
            return f"x.shape[{dd}] > {k}"
        if c == "dtype_f32":
            return self.pick(["x.dtype == torch.float32", "x.dtype in (torch.int64, torch.bool)",
                              "x.dtype != torch.bfloat16"])
        if c == "isfloat":
            return "x.is_floating_point()"
        if c == "numel0":
            return "x.numel() == 0"
        if c == "dim":
            return f"x.dim() == {p.x_ndim}"
        if c == "contig":
            return "x.is_contiguous()"
        if c == "s":
            return f"s {self.pick(['>', '<', '==', '>='])} {self.pick([0, 1, 2])}"
        if c == "stype":
            return "isinstance(s, float)"
        if c == "yshape":
            return "y.shape == x.shape"
        raise AssertionError(c)

    def stmt(self, ind=""):
        kind = self.d(_w((4, "view"), (5, "elementwise"), (3, "reduction"), (4, "inplace"),
                         (2, "inplace_expr"), (1, "intvar"), (1, "factory"), (2, "branch"),
                         (2, "early_return"), (1, "cat"), (1, "local_list")))
        if kind in ("view", "elementwise", "reduction"):
            a, n = self.tensor(min_ndim=1 if kind == "view" and self.d(st.booleans()) else 0)
            code, nd = getattr(self, f"{kind}_expr")(a, n)
            v = self.new()
            self.lines.append(f"{ind}{v} = {code}")
            self.tvars.append((v, nd))
        elif kind == "inplace":
            a, n = self.tensor()
            code, _ = self.inplace_expr(a, n)
            self.lines.append(f"{ind}{code}")
        elif kind == "inplace_expr":
            a, n = self.tensor()
            code, nd = self.inplace_expr(a, n)
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
            v = self.new("l")
            t = self.new()
            self.lines.append(f"{ind}{v} = [{a}]")
            self.lines.append(f"{ind}{v}.append({b})")
            self.lines.append(f"{ind}{t} = {v}[-1]")
            self.tvars.append((t, nb))
        elif kind == "branch":
            a, n = self.tensor()
            v = self.new()
            self.lines.append(f"{ind}if {self.cond()}:")
            if self.d(st.integers(0, 3)) == 0:
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

    # ---- returns
    def leaf(self):
        kind = self.d(_w((8, "tensor"), (2, "int"), (1, "s"), (1, "none"), (1, "input"),
                         (1, "const"), (1, "size"), (1, "dtype"), (1, "container")))
        if kind == "tensor" or (kind == "s" and not self.p.has_s) or \
                (kind == "container" and not self.p.c_kind):
            return self.tensor()[0]
        if kind == "int":
            return self.intexpr()
        if kind == "s":
            return self.pick(["s", "s * 2", "-s"])
        if kind == "none":
            return "None"
        if kind == "input":
            opts = ["x"] + (["y"] if self.p.has_y else [])
            return self.pick(opts)
        if kind == "const":
            return self.pick(["3", "1.5", "True", "'tag'", "-1"])
        if kind == "size":
            return self.pick(["x.shape", "x.size()"])
        if kind == "dtype":
            return "x.dtype"
        return "c"

    def ret(self, depth=0):
        kind = self.d(_w((4, "leaf"), (3, "tuple"), (1, "list"), (1, "dict"))) if depth < 2 \
            else "leaf"
        if kind == "leaf":
            return self.leaf()
        n = self.d(st.integers(0 if kind != "tuple" else 1, 4))
        items = [self.ret(depth + 1) if self.d(st.integers(0, 4)) == 0 else self.leaf()
                 for _ in range(n)]
        if kind == "tuple":
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if kind == "list":
            return "[" + ", ".join(items) + "]"
        keys = self.pick(["abcd", "uvwx", "pqrs"])
        return "{" + ", ".join(f"{k!r}: {it}" for k, it in zip(keys, items)) + "}"

    # ---- the whole function
    def program(self) -> Program:
        d = self.d
        x_ndim = d(_w((1, 0), (4, 1), (5, 2), (2, 3)))
        has_y = d(st.booleans())
        y_ndim = d(st.integers(max(0, x_ndim - 1), x_ndim)) if has_y else 0
        has_s = d(_w((3, True), (2, False)))
        s_kind = d(st.sampled_from(["int", "float"]))
        s_default = d(_w((3, None), (1, 2), (1, 0.5))) if has_s else None
        c_kind = d(_w((3, ""), (1, "tuple"), (1, "list"), (1, "dict")))
        c_n = d(st.integers(1, 3)) if c_kind else 0
        c_ndim = d(st.integers(max(0, x_ndim - 1), x_ndim)) if c_kind else 0
        dtype_group = d(_w((5, "float"), (2, "int"), (1, "any")))
        dynamic = d(_w((6, None), (1, True), (1, False)))
        name = f"f_fuzz{next(_fn_ids)}"
        self.p = Program(name, "", has_y, y_ndim, x_ndim, has_s, s_kind, s_default, c_kind,
                         c_n, c_ndim, dtype_group, dynamic)
        params = ["x"] + (["y"] if has_y else [])
        if has_s:
            params.append("s" if s_default is None else f"s={s_default!r}")
        if c_kind:
            params.append("c" if s_default is None else "c=None")
        self.tvars = [("x", x_ndim)] + ([("y", y_ndim)] if has_y else [])
        if c_kind:
            if s_default is not None:
                self.lines.append("    if c is None:")
                self.lines.append("        return x")
            for i in range(c_n):
                key = repr("abcd"[i]) if c_kind == "dict" else str(i)
                self.lines.append(f"    c{i} = c[{key}]")
                self.tvars.append((f"c{i}", c_ndim))
        for _ in range(d(st.integers(1, 6))):
            self.stmt("    ")
        # Graph breaks (rarely): exercise the fallback path.
        if d(st.integers(0, 30)) == 0:
            a, _ = self.tensor()
            brk = self.pick([f"if {a}.sum().item() > 0:\n        {a} = {a} + 1",
                             f"_l = {a}.tolist()"])
            self.lines.append("    " + brk)
            self.p.graph_break = True
        self.lines.append(f"    return {self.ret()}")
        src = f"def {name}({', '.join(params)}):\n" + "\n".join(self.lines) + "\n"
        self.p.src = src
        return self.p


# ------------------------------------------------------------------ drawing inputs

SIZES = _w((1, 0), (3, 1), (4, 2), (4, 3), (2, 4), (2, 5), (1, 7), (1, 8))


def draw_dtype(draw, group):
    if group == "float":
        return draw(_w((8, torch.float32), (3, torch.float64), (2, torch.bfloat16),
                       (1, torch.int64), (1, torch.bool)))
    if group == "int":
        return draw(_w((6, torch.int64), (3, torch.bool), (1, torch.float32)))
    return draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.int64,
                                 torch.bool]))


def draw_tspec(draw, shape, dtype):
    layout = draw(_w((8, "contig"), (2, "transposed"), (2, "stepped"), (1, "offset"),
                     (1, "expanded")))
    return TSpec(tuple(shape), dtype, layout, draw(st.integers(0, 2 ** 20)),
                 dtype.is_floating_point and draw(st.integers(0, 9)) == 0)


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
        return draw(st.sampled_from([-2, 0, 1, 2, 3, 5]))
    if k == "float":
        return draw(_w((4, 0.5), (2, -1.5), (2, 2.0), (1, 0.0), (1, 3.25), (1, float("nan"))))
    return draw(st.booleans())


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
    if change in ("all", "dtype"):
        xdtype = draw_dtype(draw, p.dtype_group)
    else:
        xdtype = prev.x.dtype
    if change in ("all", "layout", "shape", "dim0", "rank") or prev is None:
        x = draw_tspec(draw, xshape, xdtype)
    else:
        x = TSpec(xshape, xdtype, prev.x.layout, draw(st.integers(0, 2 ** 20)), prev.x.special)
    same_dtype = draw(_w((3, True), (1, False)))
    y = None
    if p.has_y:
        yshape = broadcast_shape(draw, xshape, min(p.y_ndim, 4))
        ydtype = xdtype if same_dtype else draw_dtype(draw, p.dtype_group)
        y = draw_tspec(draw, yshape, ydtype)
    s = None
    s_mode = "pos"
    if p.has_s:
        if change in ("all", "scalar") or prev is None:
            s = draw_scalar(draw, p.s_kind)
            s_mode = draw(_w((4, "pos"), (1, "kw"), (1 if p.s_default is not None else 0,
                                                       "default")))
        else:
            s, s_mode = prev.s, prev.s_mode
        if s_mode == "default" and p.c_kind:
            s_mode = "kw"
    c = ()
    if p.c_kind:
        c = tuple(draw_tspec(draw, broadcast_shape(draw, xshape, p.c_ndim),
                             xdtype if same_dtype else draw_dtype(draw, p.dtype_group))
                  for _ in range(p.c_n))
    alias = ""
    if change in ("all", "alias") and draw(st.integers(0, 5)) == 0:
        opts = []
        if p.has_y and p.y_ndim == x_ndim:
            opts.append("y_is_x")
        if p.has_y and x_ndim >= 1 and (p.y_ndim == x_ndim or
                                        p.y_ndim == x_ndim - 1 and xshape[0] > 0):
            opts.append("y_view_x")
        if p.c_kind and p.c_ndim == x_ndim:
            opts.append("c0_is_x")
        if opts:
            alias = draw(st.sampled_from(opts))
    return CallSpec(x, y, s, s_mode, c, alias)


def draw_plan(draw, p: Program) -> list[CallSpec]:
    """The calls of one example: first inputs twice, then changed inputs (some repeated),
    then the first inputs again."""
    first = draw_call(draw, p, None)
    plan = [first, first]
    prev = first
    for _ in range(draw(st.integers(1, 4))):
        cs = draw_call(draw, p, prev if draw(_w((4, True), (1, False))) else None)
        plan += [cs] * draw(_w((3, 1), (2, 2)))
        prev = cs
    plan.append(first)
    return plan


# ------------------------------------------------------------------ comparison


class Mismatch(AssertionError):
    pass


def _storage_id(t: torch.Tensor):
    return t.untyped_storage()._cdata


def _sig_strides(t: torch.Tensor):
    return tuple(st_ for sz, st_ in zip(t.shape, t.stride()) if sz > 1)


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
    if a.shape != e.shape:
        raise Mismatch(f"{path}: shape {tuple(a.shape)} vs eager {tuple(e.shape)}")
    if a.dtype != e.dtype:
        raise Mismatch(f"{path}: dtype {a.dtype} vs eager {e.dtype}")
    if a.device != e.device:
        raise Mismatch(f"{path}: device {a.device} vs eager {e.device}")
    if a.requires_grad != e.requires_grad:
        raise Mismatch(f"{path}: requires_grad {a.requires_grad} vs eager {e.requires_grad}")
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
        if not (isinstance(actual, float) and math.isnan(actual)):
            raise Mismatch(f"{path}: {actual!r} vs eager nan")
    elif actual != expected:
        raise Mismatch(f"{path}: {actual!r} vs eager {expected!r}")


def compare_layout_and_aliasing(out_j, out_e, args_j, args_e):
    """Identity, storage sharing, strides and offsets of outputs against the inputs and
    each other (`compare_tree` has already checked that both trees have one shape)."""
    nodes_e = list(_walk(out_e))
    nodes_j = [n for _, n in _walk(out_j)]
    ins_e = [(p, n) for p, n in _walk(args_e, "arg")]
    ins_j = [n for _, n in _walk(args_j, "arg")]
    mutable = (torch.Tensor, list, dict, tuple)
    for (path, e), j in zip(nodes_e, nodes_j):
        if isinstance(e, mutable) and not isinstance(e, torch.Size):
            # identity with inputs
            for (ipath, ie), ij in zip(ins_e, ins_j):
                if (e is ie) != (j is ij):
                    raise Mismatch(f"{path}: `is {ipath}` is {j is ij} under trident, "
                                   f"{e is ie} in eager")
        if isinstance(e, torch.Tensor):
            shares_input = False
            for (ipath, ie), ij in zip(ins_e, ins_j):
                if not isinstance(ie, torch.Tensor):
                    continue
                se = _storage_id(e) == _storage_id(ie)
                sj = _storage_id(j) == _storage_id(ij)
                if se != sj:
                    raise Mismatch(f"{path}: shares storage with {ipath}: {sj} under trident, "
                                   f"{se} in eager")
                shares_input |= se
            if shares_input:
                if j.stride() != e.stride() or j.storage_offset() != e.storage_offset():
                    raise Mismatch(f"{path}: view of an input with stride {j.stride()} "
                                   f"offset {j.storage_offset()}, eager stride {e.stride()} "
                                   f"offset {e.storage_offset()}")
            elif e.is_contiguous():
                if not j.is_contiguous() or _sig_strides(j) != _sig_strides(e):
                    raise Mismatch(f"{path}: eager's result is contiguous (stride "
                                   f"{e.stride()}), trident's has stride {j.stride()}")
    # outputs among themselves
    tens = [(p, e, j) for (p, e), j in zip(nodes_e, nodes_j)
            if isinstance(e, (torch.Tensor, list, dict))]
    for (p1, e1, j1), (p2, e2, j2) in itertools.combinations(tens, 2):
        if (e1 is e2) != (j1 is j2):
            raise Mismatch(f"{p1} is {p2}: {j1 is j2} under trident, {e1 is e2} in eager")
        if isinstance(e1, torch.Tensor) and isinstance(e2, torch.Tensor):
            se = _storage_id(e1) == _storage_id(e2)
            sj = _storage_id(j1) == _storage_id(j2)
            if se != sj:
                raise Mismatch(f"{p1} and {p2} share storage: {sj} under trident, {se} in eager")


def compare_args(args_j, args_e):
    """The arguments after the call: values and metadata (in-place mutation)."""
    for (p, e), j in zip(_walk(args_e, "arg"), [n for _, n in _walk(args_j, "arg")]):
        if isinstance(e, torch.Tensor):
            if j.stride() != e.stride() or j.storage_offset() != e.storage_offset():
                raise Mismatch(f"{p} after the call: stride {j.stride()} offset "
                               f"{j.storage_offset()}, eager {e.stride()} {e.storage_offset()}")
    try:
        compare_tree(args_j, args_e, "arg")
    except Mismatch as ex:
        raise Mismatch(f"arguments after the call differ: {ex}") from None


# ------------------------------------------------------------------ running one example


def compile_program(p: Program):
    filename = f"<fuzz-{p.name}>"
    linecache.cache[filename] = (len(p.src), None, p.src.splitlines(True), filename)
    ns = {"torch": torch}
    exec(compile(p.src, filename, "exec"), ns)
    return ns[p.name]


def reproducer(p: Program, plan: list[CallSpec], upto: int) -> str:
    """A standalone script replaying calls 0..upto of the example."""
    calls = []
    for i, cs in enumerate(plan[:upto + 1]):
        calls.append(f"# call {i}\n{args_expr(p, cs)}\ncheck(args, kwargs)")
    return (
        "import math, torch, trident\n"
        + inspect.getsource(make_tensor)
        + f"\nSRC = '''\n{p.src}'''\n"
        + "ns = {'torch': torch}\n"
        + f"exec(compile(SRC, '<fuzz>', 'exec'), ns)\nfn = ns[{p.name!r}]\n"
        + f"f = trident.jit(fn, dynamic={p.dynamic!r})\n"
        + "def check(args, kwargs):\n"
        + "    import copy\n"
        + "    try: e = fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))\n"
        + "    except Exception as ex: e = ex\n"
        + "    try: j = f(*args, **kwargs)\n"
        + "    except Exception as ex: j = ex\n"
        + "    print('eager  ', repr(e)[:300]); print('trident', repr(j)[:300])\n"
        + "\n".join(calls) + "\n"
    )


def run_example(p: Program, plan: list[CallSpec], stats: FuzzStats, keep_going=None):
    fn = compile_program(p)
    f = trident.jit(fn, dynamic=p.dynamic)
    note(f"dynamic={p.dynamic}\n{p.src}")
    stats.examples += 1
    fb_seen = False
    for i, cs in enumerate(plan):
        note(f"call {i}: {cs}")
        args_e, kw_e = build_args(p, cs)
        args_j, kw_j = build_args(p, cs)
        exc_e = exc_j = None
        out_e = out_j = None
        try:
            out_e = fn(*args_e, **kw_e)
        except Exception as ex:  # noqa: BLE001 - eager's own error is part of the spec
            exc_e = ex
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            try:
                out_j = f(*args_j, **kw_j)
            except Exception as ex:  # noqa: BLE001
                exc_j = ex
        stats.calls += 1
        for w in rec:
            if issubclass(w.category, RuntimeWarning) and "trident.jit(" in str(w.message):
                if not fb_seen:
                    stats.fallback_fns += 1
                    stats.fallback_reasons[_reason_key(str(w.message))] += 1
                fb_seen = True
        try:
            if exc_e is not None:
                stats.eager_errors += 1
                stats.error_types[type(exc_e).__name__] += 1
                if exc_j is None:
                    raise Mismatch(f"eager raised {type(exc_e).__name__}: {exc_e}; "
                                   f"trident returned {out_j!r:.200}")
                if type(exc_j) is not type(exc_e) or str(exc_j) != str(exc_e):
                    raise Mismatch(f"eager raised {type(exc_e).__name__}: {exc_e}\n"
                                   f"trident raised {type(exc_j).__name__}: {exc_j}")
            else:
                if exc_j is not None:
                    raise Mismatch(f"eager returned {out_e!r:.200}; trident raised "
                                   f"{type(exc_j).__name__}: {exc_j}") from exc_j
                compare_tree(out_j, out_e)
                compare_layout_and_aliasing(out_j, out_e, (args_j, kw_j), (args_e, kw_e))
            compare_args((args_j, kw_j), (args_e, kw_e))
        except Mismatch as ex:
            msg = (f"call {i} of {len(plan)}: {ex}\n\n--- function (dynamic={p.dynamic}) ---\n"
                   f"{p.src}\n--- reproducer ---\n{reproducer(p, plan, i)}")
            if keep_going is None:
                raise Mismatch(msg) from None
            stats.failures += 1
            keep_going(msg)
            break
    st_ = trident.stats(f)
    stats.misses += st_["misses"]
    stats.captures += st_["captures"]
    stats.versions += st_["versions"]
    stats.hits += sum(st_["hits"])
    stats.fallback_calls += st_["fallbacks"]


@st.composite
def examples(draw):
    p = Gen(draw).program()
    return p, draw_plan(draw, p)


_SETTINGS = dict(deadline=None, database=None, print_blob=False,
                 suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------ the tests

CI_EXAMPLES = int(os.environ.get("TRIDENT_FUZZ_CI_EXAMPLES", "40"))


def test_fuzz_ci(request):
    """The CI slice: a fixed, derandomized set of examples."""
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
                  f"{time.perf_counter() - t0:.0f} s", file=sys.__stderr__, flush=True)
    finally:
        stats.seconds += time.perf_counter() - t0
    assert stats.failures == 0, f"{stats.failures} mismatches, see {fail_path}"
