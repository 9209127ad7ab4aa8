"""The warm-up filter: during warm-up each call of a registered op (or region) runs the mode's
wrapper and the eager wrapper on the same arguments, times both, compares their outputs (and,
for a region that updates the KV cache, the cache states they leave) and records a verdict."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from .common import say

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
