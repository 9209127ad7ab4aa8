"""FlagGems operators, called unmodified, under eager, torch.compile and Trident.

    python benchmarks/flaggems_ops.py [--ops add,silu] [--modes eager,trident] [--shapes N]
                                      [--iters N] [--quick] [--budget-s S] [--out-dir DIR]
                                      [--tag T] [--date D] [--provider flaggems|stub]
                                      [--device cuda|cpu]

Each operator is the body of a function `def f(*args): return <fn>(*args)`, where <fn> is
`flag_gems.ops.<module>.<function>` of the installed FlagGems wheel (the module is taken from
`sys.modules`, because `flag_gems.ops.<name>` is rebound to the function of that name).  Modes:

  torch            PyTorch's own operator for the same call (the reference)
  eager            f itself: FlagGems' Python wrapper, then its Triton kernel
  compile          torch.compile(f) (graph breaks allowed)
  compile_cpp      torch.compile(f, options={"cpp_wrapper": True})
  compile_noguard  torch.compile(f); per shape, the cold call, then untimed calls under the
                   default stance until one of them compiles no frame (every frame of that
                   shape, graph-break resume functions included, then has its cache entry),
                   then the timed calls under
                   torch.compiler.set_stance("default", skip_guard_eval_unsafe=True).
                   When compile runs too, this is compile's own compiled function: per shape,
                   after compile's cold and timed calls, the untimed warm-up calls and the
                   timed calls under the stance (its cold latency is compile's cold call, the
                   same compilation); --noguard-separate compiles it on its own instead.
                   A cache entry whose guards include no tensor guard and no guard that ever
                   failed (typically the frame of a FlagGems wrapper, which graph-breaks at
                   its `logger.debug(...)` before touching a tensor) has no "diff guard"
                   manager in torch 2.11/2.13 (`clone_manager` of an empty source set is None),
                   and the stance's C lookup treats that as a miss and raises "Recompilation
                   triggered with skip_guard_eval_unsafe stance" however long the warm-up.
                   Before the timed calls such entries get an empty diff-guard manager: no
                   differentiating guard to run, which is the stance's documented meaning
                   (`--noguard-raw` leaves them as torch built them).  A shape on which the
                   stance still raises is recorded as failed, with the reason, and the next
                   shape runs.
  trident          trident.jit(f, strict=False)

Method (the paper's section 4.2): per shape, 30 consecutive calls, each on its own preallocated
inputs (clones of one random draw, so every mode sees the same values).  The first call is the
cold latency (it includes compilation); warm = mean of the other 29 after dropping 1.5-IQR
outliers.  Host latency runs until the call returns (the synchronize follows outside the timed
region); end to end runs until the device is done (synchronize inside).  Both come from the
same calls.  Per operator, a ratio is the arithmetic mean of the per-shape ratios.  Every
mode's output (first and last call) is checked against eager FlagGems; a mismatch or an
exception is recorded and the run goes on.  All calls run under torch.no_grad().

Order: mode after mode, each over all operators (eager first: it is the reference), with
torch._dynamo.reset() before every (mode, operator).  Past --budget-s seconds the rest is
skipped and reported as such; SIGTERM also ends the run early with a report.  A one-time
warm-up (Trident's runtime build, a trivial torch.compile) runs before the first mode that
needs it, so no operator's cold latency pays for it.

Writes <out-dir>/flaggems_ops[_<tag>].{md,json,png}: by default
benchmarks/results/latest/flaggems_ops.* with FlagGems and flaggems_ops_stub.* with the stub
provider (a run replaces the files of its tag; the date, commit and device are in the report).
`--provider stub --device cpu` runs the same pipeline without a GPU or FlagGems: each
"FlagGems" function is a plain Python wrapper that checks its arguments and calls the ATen
operator.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import faulthandler
import importlib
import inspect
import json
import logging
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trident  # noqa: E402

T0 = time.monotonic()
MODES = ("torch", "eager", "compile", "compile_cpp", "compile_noguard", "trident")
RUN_ORDER = ("eager", "torch", "trident", "compile", "compile_noguard", "compile_cpp")
COMPILE_MODES = ("compile", "compile_cpp", "compile_noguard")
# compile_noguard: untimed calls under the default stance after the cold one, before the
# skip-guards stance: at least MIN, then until a call compiles no frame, at most MAX.
NOGUARD_WARMUP_MIN, NOGUARD_WARMUP_MAX = 2, 8
MODE_LABEL = {"torch": "PyTorch op", "eager": "FlagGems eager", "compile": "torch.compile",
              "compile_cpp": "compile cpp_wrapper", "compile_noguard": "compile skip-guards",
              "trident": "Trident"}

# --------------------------------------------------------------------------- operators
#
# Shapes come from common LLM dimensions: hidden 2048/4096, tokens (batch x seq) 1..2048,
# vocabulary 32000, 32 heads of 128.  Each list runs from small to large (--shapes N takes the
# first N).  `make(shape, dtype, device, gen)` returns the argument tuple of one call.

H = 4096
TOKENS = (1, 16, 128, 512, 2048)
ROWS_H = [(t, H) for t in TOKENS]                     # activations (tokens, hidden)
NORM = [(1, 4096), (16, 4096), (128, 2048), (512, 4096), (2048, 4096)]
MM = [(1, 2048, 2048), (16, 4096, 4096), (128, 4096, 4096), (512, 4096, 4096),
      (2048, 2048, 2048)]                              # (M, K, N)
VOCAB_ROWS = [(1, 2048), (1, 32000), (4, 32000), (16, 32000), (64, 32000)]
SCORES = [(1, 32, 1, 128), (1, 32, 1, 2048), (4, 32, 1, 1024), (1, 32, 128, 128),
          (1, 32, 512, 512)]                           # attention scores (B, heads, q, k)
BMM = [(32, 1, 128, 128), (32, 1, 128, 2048), (32, 128, 128, 128), (32, 512, 128, 512),
       (32, 2048, 128, 2048)]                          # (heads, q, head_dim, k)
IDS = [(1, 1), (8, 1), (1, 128), (4, 512), (1, 2048)]  # token ids (batch, seq)
KV = [16, 128, 512, 1024, 2048]                        # past length of a (1, 32, S, 128) cache
# conv2d: (N, C, H, W, out channels, kernel, stride, padding); vision-encoder convolutions,
# the 14x14 stride-14 one is a ViT-L/14 patch embedding.
CONV = [(1, 64, 56, 56, 64, 3, 1, 1), (1, 3, 224, 224, 1024, 14, 14, 0),
        (8, 64, 56, 56, 64, 3, 1, 1), (1, 128, 64, 64, 128, 3, 1, 1),
        (1, 256, 32, 32, 256, 1, 1, 0)]
# conv_transpose2d: (N, C_in, H, W, C_out, kernel, stride, padding); 2x upsampling.
CONVT = [(1, 64, 32, 32, 32, 4, 2, 1), (1, 128, 16, 16, 64, 4, 2, 1),
         (4, 64, 32, 32, 32, 4, 2, 1), (1, 256, 32, 32, 128, 2, 2, 0),
         (1, 64, 64, 64, 64, 4, 2, 1)]


def _r(shape, dtype, device, gen, scale=1.0):
    x = torch.randn(shape, dtype=torch.float32, device=device, generator=gen)
    return (x * scale).to(dtype)


def _mk_pw1(s, dt, dev, g):
    return (_r(s, dt, dev, g),)


def _mk_pw2(s, dt, dev, g):
    return (_r(s, dt, dev, g), _r(s, dt, dev, g))


def _mk_pow(s, dt, dev, g):
    return (_r(s, dt, dev, g), 2.0)


def _mk_masked_fill(s, dt, dev, g):
    b, _, q, k = s
    mask = torch.rand((b, 1, q, k), device=dev, generator=g) > 0.5
    return (_r(s, dt, dev, g), mask, float("-inf"))


def _mk_rms_norm(s, dt, dev, g):
    return (_r(s, dt, dev, g), [s[-1]], _r((s[-1],), dt, dev, g), 1e-6)


def _mk_layer_norm(s, dt, dev, g):
    n = s[-1]
    return (_r(s, dt, dev, g), [n], _r((n,), dt, dev, g), _r((n,), dt, dev, g), 1e-5)


def _mk_embedding(s, dt, dev, g):
    weight = _r((32000, 2048), dt, dev, g)
    ids = torch.randint(0, 32000, s, device=dev, generator=g)
    return (weight, ids)


def _mk_scan(s, dt, dev, g):
    return (_r(s, dt, dev, g), -1)


def _mk_sort(s, dt, dev, g):
    return (_r(s, dt, dev, g), -1, True)


def _mk_mm(s, dt, dev, g):
    m, k, n = s
    sc = k ** -0.25
    return (_r((m, k), dt, dev, g, sc), _r((k, n), dt, dev, g, sc))


def _mk_addmm(s, dt, dev, g):
    m, k, n = s
    sc = k ** -0.25
    return (_r((n,), dt, dev, g), _r((m, k), dt, dev, g, sc), _r((k, n), dt, dev, g, sc))


def _mk_cat(s, dt, dev, g):
    return ([_r((1, 32, s, 128), dt, dev, g), _r((1, 32, 1, 128), dt, dev, g)], 2)


def _mk_conv2d(s, dt, dev, g):
    n, c, h, w, o, k, stride, pad = s
    sc = (c * k * k) ** -0.25
    return (_r((n, c, h, w), dt, dev, g, sc), _r((o, c, k, k), dt, dev, g, sc),
            _r((o,), dt, dev, g), stride, pad)


def _mk_conv_t2d(s, dt, dev, g):
    n, c, h, w, o, k, stride, pad = s
    sc = (c * k * k) ** -0.25
    return (_r((n, c, h, w), dt, dev, g, sc), _r((c, o, k, k), dt, dev, g, sc),
            _r((o,), dt, dev, g), stride, pad)


def _mk_softmax(s, dt, dev, g):
    return (_r(s, dt, dev, g), -1)


def _mk_bmm(s, dt, dev, g):
    b, q, d, k = s
    sc = d ** -0.25
    return (_r((b, q, d), dt, dev, g, sc), _r((b, d, k), dt, dev, g, sc))


def _mk_sum(s, dt, dev, g):
    return (_r(s, dt, dev, g), [-1])


@dataclass(frozen=True)
class Op:
    name: str
    module: str           # flag_gems.ops.<module>
    function: str         # its function called by f
    torch_ref: object     # PyTorch's operator, same arguments
    shapes: list
    make: object
    dtype: torch.dtype
    tol: tuple = ()       # (rtol, atol) for floating outputs; () = by dtype
    what: str = ""


BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
MM_TOL = (5e-2, 5e-2)

OPS = [
    Op("add", "add", "add", torch.add, ROWS_H, _mk_pw2, BF16, what="a + b, (tokens, 4096)"),
    Op("silu", "silu", "silu", F.silu, ROWS_H, _mk_pw1, BF16, what="(tokens, 4096)"),
    Op("pow", "pow", "pow_tensor_scalar", torch.pow, ROWS_H, _mk_pow, BF16,
       what="x ** 2.0, (tokens, 4096)"),
    Op("neg", "neg", "neg", torch.neg, ROWS_H, _mk_pw1, BF16, what="(tokens, 4096)"),
    Op("lt", "lt", "lt", torch.lt, ROWS_H, _mk_pw2, BF16, what="a < b, (tokens, 4096)"),
    Op("masked_fill", "masked_fill", "masked_fill", torch.masked_fill, SCORES,
       _mk_masked_fill, BF16, what="scores (B,32,q,k), mask (B,1,q,k), -inf"),
    Op("rms_norm", "rms_norm", "rms_norm", torch.rms_norm, NORM, _mk_rms_norm, BF16,
       what="x (tokens, hidden), weight (hidden,), eps 1e-6"),
    Op("embedding", "embedding", "embedding", torch.embedding, IDS, _mk_embedding, BF16,
       what="weight (32000, 2048), ids (batch, seq)"),
    Op("cumsum", "cumsum", "cumsum", torch.cumsum, VOCAB_ROWS, _mk_scan, FP32, (1e-3, 1e-2),
       what="(rows, vocab) fp32, dim -1 (top-p)"),
    Op("sort", "sort", "sort", torch.sort, VOCAB_ROWS, _mk_sort, FP32,
       what="(rows, vocab) fp32, dim -1, descending"),
    Op("mm", "mm", "mm", torch.mm, MM, _mk_mm, BF16, MM_TOL, what="(M, K) @ (K, N)"),
    Op("addmm", "addmm", "addmm", torch.addmm, MM, _mk_addmm, BF16, MM_TOL,
       what="bias (N,) + (M, K) @ (K, N)"),
    Op("cat", "cat", "cat", torch.cat, KV, _mk_cat, BF16,
       what="KV cache: [(1,32,S,128), (1,32,1,128)], dim 2"),
    Op("conv2d", "conv2d", "conv2d", torch.conv2d, CONV, _mk_conv2d, FP16, (1e-2, 1e-2),
       what="vision encoder, incl. ViT-L/14 patch embedding"),
    Op("conv_transpose2d", "conv_transpose2d", "conv_transpose2d", torch.conv_transpose2d,
       CONVT, _mk_conv_t2d, FP16, (1e-2, 1e-2), what="2x upsampling"),
    # Six more LLM operators.
    Op("mul", "mul", "mul", torch.mul, ROWS_H, _mk_pw2, BF16, what="a * b, (tokens, 4096)"),
    Op("gelu", "gelu", "gelu", F.gelu, ROWS_H, _mk_pw1, BF16, what="(tokens, 4096)"),
    Op("softmax", "softmax", "softmax", torch.softmax, SCORES, _mk_softmax, BF16,
       (2e-2, 1e-3), what="attention scores (B,32,q,k), dim -1"),
    Op("layer_norm", "layernorm", "layer_norm", torch.native_layer_norm, NORM,
       _mk_layer_norm, BF16, what="native_layer_norm: (y, mean, rstd)"),
    Op("bmm", "bmm", "bmm", torch.bmm, BMM, _mk_bmm, BF16, MM_TOL,
       what="(32, q, 128) @ (32, 128, k)"),
    Op("sum", "sum", "sum_dim", torch.sum, ROWS_H, _mk_sum, BF16, (2e-2, 5e-2),
       what="sum over dim -1, (tokens, 4096)"),
    # A seventh, so that 21 operators can run: no published FlagGems (4.2.0, 5.0.0, 5.0.2) has
    # conv_transpose2d, which stays in the table as unavailable.
    Op("argmax", "argmax", "argmax", torch.argmax, VOCAB_ROWS, _mk_scan, FP32,
       what="greedy decoding: argmax over the vocabulary, (rows, vocab) fp32, dim -1"),
]
OP_BY_NAME = {op.name: op for op in OPS}


def shape_label(op: Op, s) -> str:
    return "x".join(str(d) for d in s) if isinstance(s, tuple) else str(s)


# --------------------------------------------------------------------------- providers


class Unavailable(Exception):
    """The provider has no function for this operator."""


def flaggems_impl(op: Op):
    """`flag_gems.ops.<module>.<function>`, unmodified."""
    name = f"flag_gems.ops.{op.module}"
    try:
        mod = importlib.import_module(name)
    except ImportError as e:
        raise Unavailable(f"no module {name} in FlagGems {_flaggems_version()}") from e
    fn = getattr(mod, op.function, None)
    if fn is None:
        raise Unavailable(f"{name} has no {op.function}")
    return fn


def _flaggems_version() -> str:
    m = sys.modules.get("flag_gems")
    return getattr(m, "__version__", "?") if m else "?"


# Stand-ins for FlagGems' wrappers: argument checks, a little shape arithmetic, then ATen.
# Like FlagGems' (`logger.debug("GEMS ADD")` first in every wrapper, another one in the middle
# of mm's `general_mm`), the pointwise stubs and mm/addmm call a logger that is not enabled:
# for torch.compile each such call is a graph break (Trident drops it under a guard).
STUB_LOG = logging.getLogger("flaggems_ops.stub")


def _stub_pointwise(aten):
    tag = f"STUB {aten.__name__.upper()}"

    def wrapper(*args):
        STUB_LOG.debug(tag)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        # (`assert tensors` on a list makes Dynamo 2.13 fail: "scalar_tensor(): argument 's'
        # must be Number, not immutable_list".)
        assert len(tensors) > 0, "expects a tensor"
        assert max(t.ndim for t in tensors) >= 0
        return aten(*args)
    return wrapper


def _stub_rms_norm(x, normalized_shape, weight, eps=1e-5):
    n = math.prod(normalized_shape)
    assert x.shape[-1] == n and weight.numel() == n
    return torch.rms_norm(x.contiguous(), normalized_shape, weight, eps)


def _stub_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    n = math.prod(normalized_shape)
    assert input.numel() % n == 0
    return torch.native_layer_norm(input.contiguous(), normalized_shape, weight, bias, eps)


def _stub_embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    assert not sparse, "Currently do not support sparse format"
    return torch.embedding(weight.contiguous(), indices.contiguous(), padding_idx)


def _stub_cumsum(inp, dim=1, *, dtype=None):
    assert -inp.ndim <= dim < inp.ndim, "Invalid dim"
    return torch.cumsum(inp.contiguous(), dim % inp.ndim, dtype=dtype)


def _stub_sort(inp, dim=-1, descending=False):
    if inp.shape[dim] == 1:
        return inp, torch.zeros_like(inp, dtype=torch.int64)
    out, out_index = torch.sort(inp, dim, descending)
    return out, out_index  # a plain tuple, as FlagGems' sort returns


def _stub_mm(a, b):
    STUB_LOG.debug("STUB MM")
    assert a.shape[1] == b.shape[0], "incompatible dimensions"
    m, n = a.shape[0], b.shape[1]
    STUB_LOG.debug("STUB MM, [shape info]: [%s, %s, %s]", m, a.shape[1], n)
    return torch.mm(a, b)


def _stub_addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    STUB_LOG.debug("STUB ADDMM")
    assert mat1.shape[1] == mat2.shape[0], "Incompatible dimensions"
    return torch.addmm(bias, mat1, mat2, beta=beta, alpha=alpha)


def _stub_cat(A, dim=0):
    if len(A) == 0:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    A = [a for a in A if a.shape != torch.Size([0])]
    dim %= A[0].ndim
    return torch.cat(A, dim)


def _stub_conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    assert input.shape[1] == weight.shape[1] * groups
    return torch.conv2d(input, weight, bias, stride, padding, dilation, groups)


def _stub_conv_t2d(input, weight, bias=None, stride=1, padding=0):
    assert input.shape[1] == weight.shape[0]
    return torch.conv_transpose2d(input, weight, bias, stride, padding)


def _stub_softmax(self, dim, half_to_float=False):
    assert -self.ndim <= dim < self.ndim, "Invalid dim"
    return torch.softmax(self, dim % self.ndim)


def _stub_bmm(A, B):
    assert A.shape[0] == B.shape[0], "Batch dim mismatch"
    assert A.shape[2] == B.shape[1], "K dim mismatch"
    return torch.bmm(A, B)


def _stub_argmax(inp, dim=None, keepdim=False, *, dtype=None):
    assert dim is None or -inp.ndim <= dim < inp.ndim, "Invalid dim"
    return torch.argmax(inp, dim, keepdim)


def _stub_sum_dim(inp, dim=None, keepdim=False, *, dtype=None):
    dims = [d % inp.ndim for d in dim]
    return torch.sum(inp, dims, keepdim, dtype=dtype)


STUBS = {
    "add": _stub_pointwise(torch.add), "silu": _stub_pointwise(F.silu),
    "pow": _stub_pointwise(torch.pow), "neg": _stub_pointwise(torch.neg),
    "lt": _stub_pointwise(torch.lt), "masked_fill": _stub_pointwise(torch.masked_fill),
    "rms_norm": _stub_rms_norm, "embedding": _stub_embedding, "cumsum": _stub_cumsum,
    "sort": _stub_sort, "mm": _stub_mm, "addmm": _stub_addmm, "cat": _stub_cat,
    "conv2d": _stub_conv2d, "conv_transpose2d": _stub_conv_t2d,
    "mul": _stub_pointwise(torch.mul), "gelu": _stub_pointwise(F.gelu),
    "softmax": _stub_softmax, "layer_norm": _stub_layer_norm, "bmm": _stub_bmm,
    "sum": _stub_sum_dim, "argmax": _stub_argmax,
}


def stub_impl(op: Op):
    return STUBS[op.name]


def resolver(provider: str):
    """The function giving each operator's implementation for `provider` (flaggems | stub);
    flaggems imports FlagGems (only imported: no ATen operator is replaced)."""
    if provider == "flaggems":
        import flag_gems  # noqa: F401
        return flaggems_impl
    return stub_impl


def make_f(impl, name: str):
    """The benchmarked function: the operator's function is its whole body."""
    def f(*args):
        return impl(*args)
    f.__name__ = f.__qualname__ = f"{name}_f"
    return f


# --------------------------------------------------------------------------- checking


def _leaves(x):
    if isinstance(x, (tuple, list)):
        for y in x:
            yield from _leaves(y)
    else:
        yield x


def _tol(op: Op, dtype):
    if op.tol:
        return op.tol
    return {torch.bfloat16: (2e-2, 2e-2), torch.float16: (1e-2, 1e-2)}.get(dtype, (1e-4, 1e-4))


def check(op: Op, out, ref, args) -> None:
    """Raise AssertionError when `out` does not match eager FlagGems' `ref`."""
    if op.name == "sort":
        values, idx = out[0], out[1]
        torch.testing.assert_close(values, ref[0], rtol=0, atol=0)
        # Equal keys may come in any order: the indices must select the values.
        inp, dim = args[0], args[1]
        torch.testing.assert_close(torch.gather(inp, dim, idx), values, rtol=0, atol=0)
        return
    outs, refs = list(_leaves(out)), list(_leaves(ref))
    assert len(outs) == len(refs), f"{len(outs)} outputs, eager has {len(refs)}"
    for i, (a, b) in enumerate(zip(outs, refs)):
        if not isinstance(b, torch.Tensor):
            assert a == b, f"output {i}: {a!r} != {b!r}"
            continue
        assert isinstance(a, torch.Tensor), f"output {i} is {type(a).__name__}"
        if a.shape != b.shape and a.numel() == b.numel():
            a = a.reshape(b.shape)  # e.g. layer_norm's mean/rstd: (M,) vs (M, 1)
        if b.dtype == torch.bool or not (b.is_floating_point() or b.is_complex()):
            assert a.shape == b.shape and torch.equal(a.to(b.dtype), b), \
                f"output {i}: {int((a.to(b.dtype) != b).sum())} elements differ"
            continue
        rtol, atol = _tol(op, b.dtype)
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=atol,
                                   msg=lambda m, i=i: f"output {i}: {m}")


# --------------------------------------------------------------------------- timing


def clone_args(args):
    if isinstance(args, torch.Tensor):
        return args.clone()
    if isinstance(args, (list, tuple)):
        return type(args)(clone_args(a) for a in args)
    return args


def iqr_mean(xs: list) -> float:
    if len(xs) < 4:
        return statistics.fmean(xs)
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return statistics.fmean([x for x in xs if lo <= x <= hi])


def timed_series(fn, inputs, sync, warm_ctx, prepare=None, skip_first=False):
    """Call fn on each input set in turn; the first call is the cold one.  `prepare()`, when
    given, runs after the cold call and before the warm ones, outside `warm_ctx` and outside
    the record (compile_noguard's warm-up under the default stance); its result is returned.

    Returns host and end-to-end latencies (us) per call, the first and last outputs and
    prepare's result."""
    host, e2e = [], []
    first = last = None
    sync()

    def one(args):
        t0 = time.perf_counter_ns()
        out = fn(*args)
        t1 = time.perf_counter_ns()
        sync()
        t2 = time.perf_counter_ns()
        host.append((t1 - t0) / 1e3)
        e2e.append((t2 - t0) / 1e3)
        return out

    first = None if skip_first else one(inputs[0])
    trident.wait()  # a cold call's full-level rebuild (TRIDENT_TIER_UP), before the warm calls
    info = prepare() if prepare is not None else None
    sync()
    with warm_ctx():
        for args in inputs[1:]:
            last = one(args)
    return host, e2e, first, last, info


def timed_warm(fn, inputs, sync, warm_ctx):
    """The warm calls of timed_series alone: (host, e2e, last output)."""
    host, e2e, _, last, _ = timed_series(fn, [None, *inputs], sync, warm_ctx,
                                         skip_first=True)
    return host, e2e, last


def _frames_converted() -> int:
    """Frames Dynamo's callback has converted so far (its callback runs on a cache miss only)."""
    from torch._dynamo.utils import counters
    return int(counters["frames"]["total"])


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters
    return int(sum(counters["graph_break"].values()))


def fill_empty_diff_guards() -> tuple[int, int]:
    """Give every live Dynamo cache entry whose diff-guard manager is None an empty one.

    Under `skip_guard_eval_unsafe` the lookup (torch/csrc/dynamo/extra_state.cpp,
    `lookup_in_list`) runs only `diff_guard_root_mgr`, or takes the entry when that manager
    has no guards.  `GuardManagerWrapper.populate_diff_guard_manager` (torch/_dynamo/guards.py)
    builds it with `clone_manager` over the sources of TENSOR_MATCH guards and of guards that
    have failed; with none of them the clone is None, and the lookup then falls back to "the
    full root has no guards?" (no: it has the global-state guards at least) and runs a null
    manager (false): a miss, and the stance raises.  An empty manager is what the stance means
    for such an entry: nothing differentiates it from another entry of its frame.
    Deleted (invalidated) entries are left alone.  Returns (entries filled, entries seen)."""
    from torch._C._dynamo.guards import RootGuardManager
    from torch._dynamo import convert_frame
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    try:
        from torch._dynamo.guards import DeletedGuardManagerWrapper
    except ImportError:  # older torch
        DeletedGuardManagerWrapper = ()
    filled = seen = 0
    for ref in list(getattr(convert_frame.input_codes, "seen", ())):
        code = ref()
        if code is None:
            continue
        for entry in _debug_get_cache_entry_list(code):
            seen += 1
            gm = entry.guard_manager
            if (DeletedGuardManagerWrapper and isinstance(gm, DeletedGuardManagerWrapper)) \
                    or not hasattr(gm, "diff_guard_root") or gm.diff_guard_root is not None:
                continue
            gm.diff_guard_root = RootGuardManager()
            entry.update_diff_guard_root_manager()
            filled += 1
    return filled, seen


def noguard_warmup(fn, make_args, fill: bool) -> dict:
    """compile_noguard's warm-up for one shape, after its cold call, under the default stance:
    at least NOGUARD_WARMUP_MIN calls, then until a call makes Dynamo convert no frame (every
    frame this shape reaches, graph-break resume functions included, has a cache entry that
    its guards accept), at most NOGUARD_WARMUP_MAX.  Then fill_empty_diff_guards()."""
    calls, stable = 0, False
    while calls < NOGUARD_WARMUP_MAX:
        before = _frames_converted()
        fn(*make_args())
        calls += 1
        if calls >= NOGUARD_WARMUP_MIN and _frames_converted() == before:
            stable = True
            break
    filled, seen = fill_empty_diff_guards() if fill else (0, 0)
    return {"warmup_calls": calls, "stable": stable, "diff_guards_filled": filled,
            "cache_entries": seen}


# --------------------------------------------------------------------------- modes


class Budget(BaseException):
    """SIGTERM arrived.  A BaseException, so that no `except Exception` on the way (Dynamo's,
    Trident's fallback paths) turns it into a recorded failure."""


@dataclass
class Run:
    args: argparse.Namespace
    device: str
    sync: object
    impls: dict                      # op name -> function or Unavailable
    results: dict = field(default_factory=dict)   # op -> mode -> record
    refs: dict = field(default_factory=dict)      # (op, shape index) -> eager output
    warmed: set = field(default_factory=set)
    warmups: dict = field(default_factory=dict)   # one-time warm-up -> seconds
    isa_probe: object = None                      # the thread of start_isa_probe
    stopped: str | None = None
    terminated: bool = False

    def left(self) -> float:
        if self.terminated:
            return 0.0
        if not self.args.budget_s:
            return math.inf
        return self.args.budget_s - (time.monotonic() - T0)


def noguard_ctx():
    return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)


def build_callable(mode: str, op: Op, impl):
    """(callable, context manager factory for the warm calls, the trident function or None)"""
    if mode == "torch":
        return op.torch_ref, contextlib.nullcontext, None
    f = make_f(impl, op.name)
    if mode == "eager":
        return f, contextlib.nullcontext, None
    if mode == "compile":
        return torch.compile(f), contextlib.nullcontext, None
    if mode == "compile_cpp":
        return torch.compile(f, options={"cpp_wrapper": True}), contextlib.nullcontext, None
    if mode == "compile_noguard":
        if "skip_guard_eval_unsafe" not in inspect.signature(torch.compiler.set_stance).parameters:
            raise RuntimeError("torch.compiler.set_stance has no skip_guard_eval_unsafe")
        return torch.compile(f), noguard_ctx, None
    if mode == "trident":
        tf = trident.jit(f, strict=False)
        return tf, contextlib.nullcontext, tf
    raise ValueError(mode)


def prewarm(run: Run, mode: str) -> None:
    """One-time costs that belong to no operator: Trident's runtime build, Inductor's import
    and first compile (with the C++ wrapper for compile_cpp)."""
    key = {"compile_noguard": "compile"}.get(mode, mode)
    if key in run.warmed or key in ("torch", "eager"):
        return
    run.warmed.add(key)
    if run.isa_probe is not None:
        run.isa_probe.join()  # before Inductor compiles anything in this process
    t = time.monotonic()
    x = torch.randn(8, device=run.device)

    def g(x):
        return x * 2 + 1

    try:
        if key == "trident":
            from trident.native.build import runtime_module
            runtime_module()
            trident.jit(g)(x)
        elif key == "compile":
            torch.compile(g)(x)
        elif key == "compile_cpp":
            torch.compile(g, options={"cpp_wrapper": True})(x)
        run.sync()
    except Exception as e:  # noqa: BLE001 - the operator runs will record the failure
        print(f"  warm-up for {mode} failed: {type(e).__name__}: {e}"[:400], flush=True)
    torch._dynamo.reset()
    run.warmups[key] = time.monotonic() - t
    print(f"  warm-up for {mode}: {time.monotonic() - t:.1f}s", flush=True)


def start_isa_probe(run: Run) -> None:
    """Inductor's C++ wrapper first asks which CPU vector ISA the machine has: it builds a
    test program per candidate ISA and loads each in a fresh Python (cpu_vec_isa.py,
    `check_build`), once per process: 61 of the 68 s that the compile_cpp warm-up took on a
    fresh H200 machine.  It belongs to no operator, so it runs in a thread from the start
    (its time goes to subprocesses on other cores), and the first compile joins it."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return
    import threading

    def probe():
        t = time.monotonic()
        try:
            isa = cpu_vec_isa.pick_vec_isa()
            run.warmups["compile_cpp: CPU ISA probe (background)"] = time.monotonic() - t
            print(f"  Inductor's CPU ISA probe: {isa} in {time.monotonic() - t:.1f}s "
                  "(background)", flush=True)
        except Exception as e:  # noqa: BLE001 - the compile_cpp warm-up will meet it again
            print(f"  Inductor's CPU ISA probe failed: {type(e).__name__}: {e}"[:300],
                  flush=True)

    run.isa_probe = threading.Thread(target=probe, name="isa-probe", daemon=True)
    run.isa_probe.start()


def trident_status(tf, caught: list, error: str | None) -> dict:
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
            and "trident" in str(w.message)]
    st = None
    if tf is not None:
        try:
            st = trident.stats(tf)
        except Exception as e:  # noqa: BLE001
            st = {"error": f"{type(e).__name__}: {e}"}
    if error is not None:
        status, detail = "fail", error
    elif st and st.get("fallback_reason"):
        status, detail = "fallback", st["fallback_reason"]
    elif st and st.get("versions", 0) > 0:
        status = "compiled"
        detail = f"{st['versions']} version(s), {sum(st['hits'])} hits, {st['misses']} misses"
        cs = st.get("compile_seconds") or []
        if cs:  # where the misses' time went, summed over versions
            tot = {k: sum(t[k] for t in cs) for k in cs[0]}
            detail += (f"; misses took capture {tot['capture']:.2f} s, guards+IR "
                       f"{tot['guards_ir']:.2f} s, C build+load {tot['build']:.2f} s")
    else:
        status, detail = "fail", f"no version captured ({st})"
    return {"status": status, "detail": detail, "stats": st, "warnings": msgs}


def paired(run: Run) -> bool:
    """compile_noguard rides on compile's run (the same compiled function, after compile's
    timed calls of each shape) unless --noguard-separate."""
    return ("compile" in run.args.modes and "compile_noguard" in run.args.modes
            and not run.args.noguard_separate)


def _finish_failed_shapes(rec: dict) -> None:
    bad = rec.get("failed_shapes")
    if bad and rec["status"] == "ok":
        why = (f"skip-guards stance raised on {', '.join(b['shape'] for b in bad)}: "
               f"{bad[0]['failed']}")
        if rec["shapes"]:
            rec["detail"] = (rec["detail"] + "; " if rec["detail"] else "") + why
        else:
            rec["status"], rec["detail"] = "fail", why
            rec["traceback"] = bad[0]["traceback"]


def run_op_mode(run: Run, op: Op, mode: str) -> dict:
    """{mode: record}: one mode, or compile and compile_noguard together (paired(run))."""
    rec = {"status": "ok", "detail": "", "shapes": []}
    impl = run.impls[op.name]
    pair = mode == "compile" and paired(run)
    if mode != "torch" and isinstance(impl, Unavailable):
        out = {"status": "unavailable", "detail": str(impl), "shapes": []}
        return {mode: out, **({"compile_noguard": dict(out)} if pair else {})}
    if mode not in ("torch", "eager"):
        prewarm(run, mode)
    torch._dynamo.reset()
    shapes = op.shapes[:run.args.shapes]
    tf = None
    error = None
    ng = {"status": "ok", "detail": "", "shapes": [], "paired": True} if pair else None
    breaks0 = _graph_breaks()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn, warm_ctx, tf = build_callable(mode, op, impl)
            for si, s in enumerate(shapes):
                if run.left() <= 0:
                    rec["detail"] = f"time budget: stopped after {si} of {len(shapes)} shapes"
                    if ng is not None:
                        ng["detail"] = rec["detail"]
                    break
                r = run_shape(run, op, mode, si, s, fn, warm_ctx, then_noguard=pair)
                if ng is not None:
                    rn = r.pop("_noguard")
                    (ng.setdefault("failed_shapes", []) if "failed" in rn
                     else ng["shapes"]).append(rn)
                if "failed" in r:
                    rec.setdefault("failed_shapes", []).append(r)
                else:
                    rec["shapes"].append(r)
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            error = f"{type(e).__name__}: {e}".strip()
            rec["status"], rec["detail"] = "fail", error[:2000]
            rec["traceback"] = traceback.format_exc()[-4000:]
            if ng is not None:
                ng.update(status="fail", detail=rec["detail"], traceback=rec["traceback"])
    if mode in COMPILE_MODES:
        rec["graph_breaks"] = _graph_breaks() - breaks0
    _finish_failed_shapes(rec)
    if mode == "trident":
        rec["trident"] = trident_status(tf, caught, error)
    rec["warnings"] = sorted({f"{w.category.__name__}: {w.message}"[:500] for w in caught})[:20]
    out = {mode: rec}
    if ng is not None:
        ng["graph_breaks"] = rec["graph_breaks"]  # the same frames: one compile serves both
        _finish_failed_shapes(ng)
        ng["warnings"] = rec["warnings"]
        out["compile_noguard"] = ng
    return out


def _shape_record(op: Op, s, dtype, host, e2e, chk, **extra) -> dict:
    warm_h, warm_e = host[1:], e2e[1:]
    return {"shape": shape_label(op, s), "dtype": str(dtype).replace("torch.", ""),
            "cold_host_us": host[0], "cold_e2e_us": e2e[0],
            "warm_host_us": iqr_mean(warm_h), "warm_e2e_us": iqr_mean(warm_e),
            "warm_host_median_us": statistics.median(warm_h),
            "warm_e2e_median_us": statistics.median(warm_e),
            "check": chk, "host_us": host, "e2e_us": e2e, **extra}


def _check_outputs(run: Run, op: Op, si: int, base, outs) -> str:
    ref = run.refs.get((op.name, si))
    if ref is None:
        return "no eager reference"
    try:
        for out in outs:
            check(op, out, ref, base)
        return "ok"
    except Exception as e:  # noqa: BLE001 - AssertionError, or a malformed output
        return "mismatch: " + " ".join(f"{type(e).__name__}: {e}".split())[:300]


def _stance_failure(op: Op, s, e: BaseException) -> dict:
    return {"shape": shape_label(op, s), "failed": " ".join(str(e).split())[:300],
            "traceback": traceback.format_exc()[-3000:]}


def run_shape(run: Run, op: Op, mode: str, si: int, s, fn, warm_ctx,
              then_noguard: bool = False) -> dict:
    """One shape of one mode.  With then_noguard (mode compile), after compile's timed calls:
    compile_noguard's warm-up and its timed calls under the skip-guards stance, on the same
    compiled function, recorded under "_noguard" (its cold call is compile's)."""
    dtype = op.dtype
    gen = torch.Generator(device=run.device)
    gen.manual_seed(1000 * OPS.index(op) + si)
    base = op.make(s, dtype, run.device, gen)
    inputs = [clone_args(base) for _ in range(run.args.iters)]
    prepare = None
    if mode == "compile_noguard":
        def prepare():
            return noguard_warmup(fn, lambda: clone_args(base), fill=not run.args.noguard_raw)
    try:
        host, e2e, first, last, info = timed_series(fn, inputs, run.sync, warm_ctx, prepare)
    except RuntimeError as e:
        if mode != "compile_noguard" or "skip_guard_eval_unsafe" not in str(e):
            raise
        # The stance met a frame none of whose cache entries its diff guards accept: this
        # shape failed; the next one runs (its cold call compiles under the default stance).
        return _stance_failure(op, s, e)
    if mode == "eager":
        run.refs[(op.name, si)] = first
    del inputs
    rec = _shape_record(op, s, dtype, host, e2e, _check_outputs(run, op, si, base, (first, last)),
                        **({"noguard": info} if info is not None else {}))
    if then_noguard:
        try:
            info = noguard_warmup(fn, lambda: clone_args(base), fill=not run.args.noguard_raw)
            ng_inputs = [clone_args(base) for _ in range(run.args.iters - 1)]
            h2, e2, last2 = timed_warm(fn, ng_inputs, run.sync, noguard_ctx)
        except Exception as e:  # noqa: BLE001 - the stance's miss, or another failure
            rec["_noguard"] = _stance_failure(op, s, e)
        else:
            rec["_noguard"] = _shape_record(
                op, s, dtype, [host[0], *h2], [e2e[0], *e2],
                _check_outputs(run, op, si, base, (first, last2)), noguard=info)
    return rec


# --------------------------------------------------------------------------- report


def per_shape(run: Run, op: str, mode: str) -> dict:
    rec = run.results.get(op, {}).get(mode)
    if not rec or rec["status"] != "ok":
        return {}
    return {r["shape"]: r for r in rec["shapes"]}


def ratio(run: Run, op: str, num: str, den: str, key: str) -> float | None:
    """Mean over shapes of num[key] / den[key] (e.g. eager/trident = Trident's speedup)."""
    a, b = per_shape(run, op, num), per_shape(run, op, den)
    rs = [a[s][key] / b[s][key] for s in a if s in b and b[s][key] > 0]
    return statistics.fmean(rs) if rs else None


def fx(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}x"


def mode_cell(run: Run, op: str, mode: str) -> str:
    rec = run.results.get(op, {}).get(mode)
    if rec is None:
        return "not run"
    if rec["status"] != "ok":
        return f"{rec['status']}: {_short(rec['detail'], 120)}"
    bad = [f"{r['shape']}: {r['check']}" for r in rec["shapes"] if r["check"] != "ok"]
    s = "ok" if not bad else "; ".join(_short(b, 120) for b in bad[:2])
    if rec["detail"]:
        s += f" ({_short(rec['detail'], 200)})"
    return s


def _short(s: str, n: int) -> str:
    s = " ".join(str(s).split()).replace("|", "\\|")
    return s if len(s) <= n else s[:n - 3] + "..."


def trident_cell(run: Run, op: str) -> str:
    rec = run.results.get(op, {}).get("trident")
    if rec is None:
        return "not run"
    if rec["status"] == "unavailable":
        return f"n/a ({_short(rec['detail'], 80)})"
    t = rec.get("trident", {})
    cell = f"**{t.get('status', rec['status'])}**: {_short(t.get('detail', rec['detail']), 160)}"
    bad = [r["shape"] for r in rec["shapes"] if r["check"] != "ok"]
    if bad:
        cell += f"; output check failed on {', '.join(bad)}"
    if rec["status"] == "ok" and rec["detail"]:
        cell += f" ({rec['detail']})"
    return cell


def summarize(run: Run, modes: list) -> dict:
    ops = [o for o in run.results if per_shape(run, o, "trident") and per_shape(run, o, "eager")]
    out = {"ops_measured": len(ops)}
    for key, tag in (("warm_host_us", "host"), ("warm_e2e_us", "e2e")):
        sp = [ratio(run, o, "eager", "trident", key) for o in ops]
        sp = [x for x in sp if x is not None]
        out[f"mean_speedup_vs_eager_{tag}"] = statistics.fmean(sp) if sp else None
        for m in ["eager"] + [m for m in COMPILE_MODES if m in modes]:
            rs = [ratio(run, o, m, "trident", key) for o in ops]
            rs = [x for x in rs if x is not None]
            out[f"faster_than_{m}_{tag}"] = (sum(r > 1 for r in rs), len(rs))
        for m in [m for m in COMPILE_MODES if m in modes]:
            rs = [ratio(run, o, "eager", m, key) for o in run.results]
            rs = [x for x in rs if x is not None]
            out[f"mean_{m}_speedup_vs_eager_{tag}"] = statistics.fmean(rs) if rs else None
    rt = [ratio(run, o, "trident", "torch", "warm_host_us") for o in ops]
    rt = [x for x in rt if x is not None]
    out["within_1.5x_of_torch_host"] = (sum(r <= 1.5 for r in rt), len(rt))
    st = [run.results[o].get("trident", {}).get("trident", {}).get("status")
          for o in run.results]
    out["trident_status_counts"] = {k: st.count(k) for k in sorted({s for s in st if s})}
    return out


def compile_section(run: Run, cms: list) -> list:
    """Graph breaks per compile mode, and compile_noguard's warm-up per shape."""
    ng = "compile_noguard" in cms
    what = ("Graph breaks: Dynamo's graph-break count over all shapes of the mode. Skip-guards: "
            "per shape, untimed calls under the default stance after the cold one (* = the last "
            "one still compiled a frame), and the cache entries that had no diff-guard manager "
            "and got an empty one (of all live entries), then the timed calls under "
            "`skip_guard_eval_unsafe`; a shape on which the stance raised is listed as failed.")
    head = "| op | " + " | ".join(f"graph breaks, {MODE_LABEL[m]}" for m in cms) + (
        " | skip-guards: warm-up calls; diff guards filled/entries | skip-guards failed shapes |"
        if ng else " |")
    L = ["## torch.compile: graph breaks, skip-guards warm-up", "", what, "", head,
         "|---|" + "---:|" * len(cms) + ("---|---|" if ng else "")]
    for o in run.results:
        cells = []
        for m in cms:
            rec = run.results[o].get(m) or {}
            cells.append(str(rec.get("graph_breaks", "-")))
        if ng:
            rec = run.results[o].get("compile_noguard") or {}
            ng = [r["noguard"] for r in rec.get("shapes", []) if "noguard" in r]
            cells.append(", ".join(f"{g['warmup_calls']}{'' if g['stable'] else '*'}; "
                                   f"{g['diff_guards_filled']}/{g['cache_entries']}"
                                   for g in ng) or "-")
            cells.append("; ".join(f"{b['shape']}: {_short(b['failed'], 80)}"
                                   for b in rec.get("failed_shapes", [])) or "-")
        L.append(f"| {o} | " + " | ".join(cells) + " |")
    return L + [""]


def report(run: Run, modes: list, meta: dict) -> tuple[str, dict]:
    ops = list(run.results)
    cms = [m for m in COMPILE_MODES if m in modes]
    L = [f"# FlagGems operators under eager, torch.compile and Trident ({meta['provider']})", ""]
    for k in ("date", "commit", "device", "versions", "command", "elapsed"):
        L.append(f"- {k}: {meta[k]}")
    L.append(f"- method: per shape {run.args.iters} calls on fresh preallocated inputs; cold = "
             "first call (compilation included; Triton kernels that eager already compiled "
             "are not recompiled by later modes); warm = mean of the rest after 1.5-IQR "
             "outlier removal; host = until the call returns, e2e = until the device is done; "
             "per operator: arithmetic mean of per-shape ratios. Speedup X/Trident > 1: "
             "Trident is faster than X. All calls under torch.no_grad(). Cold latencies "
             "also depend on the on-disk caches (Triton, Inductor's FX graph cache, Trident's "
             "SCM builds), which a fresh machine does not have.")
    if os.environ.get("BENCH_WARM_CACHES"):
        what = os.environ["BENCH_WARM_CACHES"]
        what = what if what != "1" else "FlagGems' tuned configs and Triton's kernel cache"
        L.append(f"- caches: this run started from {what} of an earlier run on the same "
                 "machine (`CACHES_IN`): eager's cold latencies include no autotuning (or "
                 "Triton compilation, where that cache came too) it had done before")
    if "compile_noguard" in modes:
        L.append("- compile skip-guards: per shape, the cold call, untimed calls under the default "
                 "stance until one compiles no frame, then the timed calls under "
                 "`set_stance(skip_guard_eval_unsafe=True)`"
                 + ("; on torch.compile's compiled function, after its timed calls of the "
                    "shape (the cold call, and so the cold latency, is torch.compile's)"
                    if paired(run) else "")
                 + ("; cache entries without a diff-guard manager left as torch built them "
                    "(`--noguard-raw`)" if run.args.noguard_raw else
                    "; cache entries that torch left without a diff-guard manager (no tensor "
                    "guard, no failed guard: the stance could never hit them) get an empty one "
                    "before the timed calls"))
    secs = {}
    for o in ops:
        for m, r in run.results[o].items():
            if "seconds" in r:
                secs[m] = secs.get(m, 0.0) + r["seconds"]
    if secs:
        L.append("- seconds per mode (all operators, compilation and autotuning included): "
                 + ", ".join(f"{MODE_LABEL[m]} {secs[m]:.0f}" for m in RUN_ORDER if m in secs)
                 + (" (torch.compile's includes compile skip-guards' calls)"
                    if paired(run) and "compile" in secs else ""))
    if run.warmups:
        L.append("- one-time warm-ups (seconds, before the first operator of their mode): "
                 + ", ".join(f"{k} {v:.1f}" for k, v in run.warmups.items()))
    L.append("")
    if run.stopped:
        L += [f"**Run stopped early: {run.stopped}.**", ""]

    s = summarize(run, modes)
    L += ["## Summary", ""]
    L.append(f"- operators with eager and Trident timings: {s['ops_measured']}; Trident status: "
             + ", ".join(f"{k} {v}" for k, v in s["trident_status_counts"].items()))
    for tag in ("host", "e2e"):
        L.append(f"- {tag}: mean Trident speedup over eager {fx(s[f'mean_speedup_vs_eager_{tag}'])}"
                 "; Trident faster than "
                 + ", ".join(f"{MODE_LABEL[m]} on {s[f'faster_than_{m}_{tag}'][0]}/"
                             f"{s[f'faster_than_{m}_{tag}'][1]}" for m in ["eager"] + cms))
        if cms:
            L.append(f"- {tag}: mean speedup over eager of "
                     + ", ".join(f"{MODE_LABEL[m]} {fx(s[f'mean_{m}_speedup_vs_eager_{tag}'])}"
                                 for m in cms))
    w = s["within_1.5x_of_torch_host"]
    L += [f"- Trident host latency within 1.5x of the PyTorch op: {w[0]}/{w[1]} operators", ""]

    L += ["## Trident status and output checks", "",
          "| op | shapes | Trident | checks against eager (other modes) |", "|---|---|---|---|"]
    for o in ops:
        op = OP_BY_NAME[o]
        others = "; ".join(f"{m}: {mode_cell(run, o, m)}" for m in modes
                           if m not in ("eager", "trident")
                           and mode_cell(run, o, m) != "ok")
        shapes = ", ".join(shape_label(op, x) for x in op.shapes[:run.args.shapes])
        L.append(f"| {o} | {shapes} {str(op.dtype).replace('torch.', '')}; {op.what} | "
                 f"{trident_cell(run, o)} | {others or 'all ok'} |")
    L.append("")

    if cms:
        L += compile_section(run, cms)

    L += ["## Trident speedup (X / Trident, mean of per-shape ratios)", ""]
    cols = ["eager"] + cms
    head = "| op | " + " | ".join(f"vs {MODE_LABEL[m]} host | e2e" for m in cols) + \
           " | Trident / PyTorch op host |"
    L += [head, "|---|" + "---:|---:|" * len(cols) + "---:|"]
    for o in ops:
        cells = []
        for m in cols:
            cells += [fx(ratio(run, o, m, "trident", "warm_host_us")),
                      fx(ratio(run, o, m, "trident", "warm_e2e_us"))]
        cells.append(fx(ratio(run, o, "trident", "torch", "warm_host_us")))
        L.append(f"| {o} | " + " | ".join(cells) + " |")
    L.append("")

    L += ["## Warm host latency, us (mean over shapes); e2e in parentheses", ""]
    L += ["| op | " + " | ".join(MODE_LABEL[m] for m in modes) + " |",
          "|---|" + "---:|" * len(modes)]
    for o in ops:
        cells = []
        for m in modes:
            r = per_shape(run, o, m)
            if not r:
                cells.append("-")
                continue
            h = statistics.fmean(x["warm_host_us"] for x in r.values())
            e = statistics.fmean(x["warm_e2e_us"] for x in r.values())
            cells.append(f"{h:.1f} ({e:.1f})")
        L.append(f"| {o} | " + " | ".join(cells) + " |")
    L.append("")

    L.append("## Cold latency (first call of the first shape, host, ms); "
             "max over the other shapes in parentheses")
    L.append("")
    L += ["| op | " + " | ".join(MODE_LABEL[m] for m in modes) + " |",
          "|---|" + "---:|" * len(modes)]
    for o in ops:
        cells = []
        for m in modes:
            rec = run.results[o].get(m)
            if not rec or not rec["shapes"]:
                cells.append("-")
                continue
            c = [x["cold_host_us"] / 1e3 for x in rec["shapes"]]
            cells.append(f"{c[0]:.1f}" + (f" ({max(c[1:]):.1f})" if len(c) > 1 else ""))
        L.append(f"| {o} | " + " | ".join(cells) + " |")
    L.append("")
    return "\n".join(L) + "\n", s


def plot(run: Run, modes: list, path: Path, title: str) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"no plot: {type(e).__name__}: {e}"
    ops = [o for o in run.results if per_shape(run, o, "eager")]
    shown = [m for m in ("compile", "compile_cpp", "compile_noguard", "trident", "torch")
             if m in modes]
    if not shown or not ops:
        return "no plot: no mode to compare with eager"
    colors = {"compile": "#9ecae1", "compile_cpp": "#4292c6", "compile_noguard": "#08519c",
              "trident": "#e6550d", "torch": "#bdbdbd"}
    fig, axes = plt.subplots(2, 1, figsize=(max(10, 0.75 * len(ops) + 3), 8.5))
    width = 0.8 / max(1, len(shown))
    panels = ((axes[0], "warm_host_us", "host"), (axes[1], "warm_e2e_us", "end to end"))
    for ax, key, name in panels:
        for j, m in enumerate(shown):
            xs, ys = [], []
            for i, o in enumerate(ops):
                r = ratio(run, o, "eager", m, key)
                if r is not None:
                    xs.append(i + (j - (len(shown) - 1) / 2) * width)
                    ys.append(r)
            bars = ax.bar(xs, ys, width, label=MODE_LABEL[m], color=colors[m],
                          hatch="//" if m == "torch" else None, edgecolor="white")
            if m == "trident":
                for b, o in zip(bars, [o for o in ops if ratio(run, o, "eager", m, key)]):
                    st = run.results[o]["trident"].get("trident", {}).get("status")
                    if st and st != "compiled":
                        ax.annotate(st[0].upper(), (b.get_x() + b.get_width() / 2,
                                                    b.get_height()), ha="center",
                                    va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_yscale("log")
        ax.set_ylabel(f"{name} speedup over eager")
        ax.set_xticks(range(len(ops)))
        ax.set_xticklabels(ops, rotation=45, ha="right")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].legend(ncol=len(shown), fontsize=8, loc="upper left")
    axes[0].set_title(title + "\n(F above a Trident bar: it fell back to eager)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------- main


def _commit() -> str:
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=False,
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        return "unknown"


def _versions(provider: str) -> str:
    v = [f"torch {torch.__version__}", f"Python {platform.python_version()}",
         f"trident {trident.__version__}"]
    try:
        import triton
        v.append(f"triton {triton.__version__}")
    except ImportError:
        pass
    if provider == "flaggems":
        v.append(f"flag_gems {_flaggems_version()}")
    return " ; ".join(v)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default=",".join(op.name for op in OPS),
                    help="comma-separated operators (default: all 21)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    ap.add_argument("--shapes", type=int, default=5, help="first N shapes of each operator")
    ap.add_argument("--iters", type=int, default=30, help="calls per shape (first = cold)")
    ap.add_argument("--quick", action="store_true", help="2 shapes, 10 calls per shape")
    ap.add_argument("--budget-s", type=float, default=450,
                    help="stop starting new work after this many seconds (0 = no limit)")
    ap.add_argument("--provider", choices=("flaggems", "stub"), default="flaggems")
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results" / "latest"))
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads on CPU")
    ap.add_argument("--noguard-raw", action="store_true",
                    help="compile_noguard: leave cache entries without a diff-guard manager as "
                         "torch built them (the skip-guards stance then misses on them)")
    ap.add_argument("--no-isa-probe", action="store_true",
                    help="compile_cpp: do not run Inductor's CPU ISA probe in a background "
                         "thread from the start (its warm-up then pays for it)")
    ap.add_argument("--noguard-separate", action="store_true",
                    help="compile_noguard compiles on its own (by default it uses compile's "
                         "compiled function: after compile's timed calls of each shape, its "
                         "warm-up and timed calls under the skip-guards stance)")
    ap.add_argument("--tag", default=None,
                    help="files flaggems_ops_<tag>.* (default: none with FlagGems, stub with "
                         "the stub provider)")
    ap.add_argument("--date", default=os.environ.get("BENCH_DATE", str(_dt.date.today())),
                    help="the date the report states (default: today, or BENCH_DATE)")
    a = ap.parse_args(argv)
    if a.quick:
        a.shapes, a.iters = min(a.shapes, 2), min(a.iters, 10)
    a.iters = max(a.iters, 2)
    a.ops = [o.strip() for o in a.ops.split(",") if o.strip()]
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for o in a.ops:
        if o not in OP_BY_NAME:
            ap.error(f"unknown operator {o}; known: {', '.join(OP_BY_NAME)}")
    for m in a.modes:
        if m not in MODES:
            ap.error(f"unknown mode {m}; known: {', '.join(MODES)}")
    if "eager" not in a.modes:
        a.modes.insert(0, "eager")  # the reference of every check and ratio
    a.modes = [m for m in MODES if m in a.modes]
    return a


def main(argv=None) -> int:
    faulthandler.enable()  # a native crash still prints where it happened
    a = parse_args(argv)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda":
        sync = torch.cuda.synchronize
        dev_name = torch.cuda.get_device_name()
    else:
        def sync():
            return None
        # As in cpu_overhead.py: on a small shared machine OpenMP wake-ups make a parallel
        # kernel's time swing by 100x from call to call.
        torch.set_num_threads(a.threads)
        dev_name = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    resolve = resolver(a.provider)
    impls = {}
    for o in a.ops:
        try:
            impls[o] = resolve(OP_BY_NAME[o])
        except Unavailable as e:
            impls[o] = e
    tag = a.tag if a.tag is not None else ("stub" if a.provider == "stub" else "")
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / ("flaggems_ops" + (f"_{tag}" if tag else ""))

    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    if hasattr(torch._dynamo.config, "accumulated_recompile_limit"):
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 4096)

    run = Run(a, device, sync, impls)
    run.results = {o: {} for o in a.ops}
    if "compile_cpp" in a.modes and not a.no_isa_probe:
        start_isa_probe(run)

    def on_term(signum, frame):
        run.terminated = True
        raise Budget(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)

    print(f"flaggems_ops: {a.provider} on {dev_name}; {len(a.ops)} ops x {len(a.modes)} modes, "
          f"{a.shapes} shapes, {a.iters} calls; budget {a.budget_s or 'none'} s", flush=True)
    unavailable = {o: str(e) for o, e in impls.items() if isinstance(e, Unavailable)}
    for o, why in unavailable.items():
        print(f"  {o}: {why} (only the PyTorch op is timed)", flush=True)
    meta = {"provider": a.provider, "date": a.date, "commit": _commit(), "device": dev_name,
            "versions": _versions(a.provider),
            "command": "python benchmarks/flaggems_ops.py "
                       + " ".join(sys.argv[1:] if argv is None else argv)}

    def write(final: bool) -> str:
        """The markdown and JSON, rewritten after every (mode, operator): a crash of the
        process still leaves what was measured before it."""
        meta["elapsed"] = f"{time.monotonic() - T0:.0f} s" + ("" if final else " (in progress)")
        text, summary = report(run, a.modes, meta)
        stem.with_suffix(".md").write_text(text)
        raw = {"meta": meta, "args": vars(a), "summary": summary, "stopped": run.stopped,
               "warmups": run.warmups, "unavailable": unavailable,
               "ops": {o: {"what": OP_BY_NAME[o].what,
                           "function": f"flag_gems.ops.{OP_BY_NAME[o].module}."
                                       f"{OP_BY_NAME[o].function}",
                           "modes": run.results[o]} for o in run.results}}
        stem.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str))
        return text

    try:
        with torch.no_grad():
            for mode in [m for m in RUN_ORDER if m in a.modes]:
                for o in a.ops:
                    if mode == "compile_noguard" and paired(run):
                        break  # measured with compile (or skipped with it)
                    if run.left() <= 0:
                        for m in [mode] + (["compile_noguard"] if mode == "compile"
                                           and paired(run) else []):
                            run.results[o][m] = {"status": "skipped",
                                                 "detail": "time budget", "shapes": []}
                        run.stopped = run.stopped or (f"time budget of {a.budget_s:.0f} s "
                                                      f"spent before {mode}/{o}")
                        continue
                    t = time.monotonic()
                    recs = run_op_mode(run, OP_BY_NAME[o], mode)
                    rec = recs[mode]
                    rec["seconds"] = time.monotonic() - t
                    run.results[o].update(recs)
                    line = trident_cell(run, o) if mode == "trident" else \
                        "; ".join(f"{m}: {mode_cell(run, o, m)}" for m in recs)
                    warm = ", ".join(f"{r['warm_host_us']:.1f}" for r in rec["shapes"])
                    print(f"[{time.monotonic() - T0:6.1f}s] {mode:15s} {o:16s} "
                          f"{rec['seconds']:5.1f}s  warm host us [{warm}]  "
                          f"{_short(line, 200)}", flush=True)
                    write(final=False)
    except (Budget, KeyboardInterrupt) as e:
        run.stopped = f"interrupted ({type(e).__name__}: {e})"
        print(f"stopped: {run.stopped}", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    text = write(final=True)
    err = plot(run, a.modes, stem.with_suffix(".png"),
               f"FlagGems operators, {a.provider}, {dev_name}, {meta['commit']}")
    print(text)
    print(f"wrote {stem}.md, .json" + (f" ({err})" if err else ", .png"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
