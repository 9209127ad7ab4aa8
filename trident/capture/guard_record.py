"""What the guard filter records beside Dynamo's guard entries, and the guards of a trace
that stopped.

Dynamo builds the guards before the traced call runs: `before_call` reads there what a
guard compares with (the call may change it).  `shape_exprs` renders the shape guards over
Trident's own names, `sizes_strides` each input's sizes and strides.  `on_failed_trace`
hooks Dynamo's root translator so that a trace that stops with an error still hands its
output graph over (the recorder then builds that trace's guards).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..ir.nodes import Frozen, frozen

if TYPE_CHECKING:
    from torch._dynamo.source import Source

# (python expression over the names _v0, _v1, ..., {name: the Dynamo Source it reads})
ShapeExpr = tuple[str, dict[str, "Source"]]


class SymbolMap(dict):
    """A shape guard's names -> their Dynamo sources; `floats`: the names that are float
    symbols (a dynamic float: `math.isnan(_v5)`, `_v5 > 1.0`), which the guard reads as Python
    floats, not ints."""

    floats: frozenset = frozenset()
# (sizes, strides), None where symbolic
SizesStrides = tuple[tuple[int | None, ...], tuple[int | None, ...]]

# Guard kinds whose check `translate` reads from the entry's value's contents.
_CONTENT_KINDS = ("SEQUENCE_LENGTH", "LIST_LENGTH", "DICT_LENGTH", "DICT_KEYS", "DICT_KEYS_MATCH",
                  "EMPTY_NN_MODULE_HOOKS_DICT")


@frozen
class Presence(Frozen):
    """A HASATTR entry's answer, taken before the call: `hasattr(object, name)`."""

    present: bool


def before_call(e):
    """A guard entry whose value no longer changes with the call: a container's shallow copy
    for the kinds that read its contents (a function's own **kwargs dict is the one pre-existing
    container it may change), and for HASATTR a `Presence` (torch >= 2.12 puts HASATTR on the
    object, with `attr=`; torch <= 2.11 on the attribute's own source, whose value is missing
    exactly when the attribute is)."""
    if e.guard_type == "HASATTR":
        kw = getattr(e.orig_guard.create_fn, "keywords", None) or {}
        if "attr" in kw:
            if not e.has_value:
                return e
            present = hasattr(e.value, kw["attr"])
        else:
            present = bool(e.has_value)
        return dataclasses.replace(e, value=Presence(present), has_value=True)
    if e.guard_type in _CONTENT_KINDS and e.has_value and type(e.value) in (dict, list, set):
        return dataclasses.replace(e, value=type(e.value)(e.value))
    return e




def shape_exprs(shape_env) -> tuple[ShapeExpr, ...]:
    """The shape guards of `shape_env` as Python over Trident's own names `_v0, _v1, ...`
    (`ShapeEnv.produce_guards_verbose`), each name mapped back to its Dynamo Source."""
    fs = shape_env.tracked_fakes or []
    names: dict = {}

    def source_ref(src):
        key = src.name
        if key not in names:
            names[key] = (f"_v{len(names)}", src)
        return names[key][0]

    helpers = shape_env.produce_guards_verbose(
        [a.fake for a in fs], [a.source for a in fs],
        input_contexts=[a.symbolic_context for a in fs],
        source_ref=source_ref, langs=("python",))
    mapping = SymbolMap({v[0]: v[1] for v in names.values()})
    mapping.floats = frozenset(names[k][0] for k in _float_source_names(shape_env) if k in names)
    return tuple((e, mapping) for e in helpers[0].exprs)


def _float_source_names(shape_env) -> set:
    """The names of the sources of the shape environment's float symbols."""
    from torch.utils._sympy.symbol import SymT, symbol_is_type

    out = set()
    for sym, sources in getattr(shape_env, "var_to_sources", {}).items():
        if symbol_is_type(sym, SymT.FLOAT):
            out.update(src.name for src in sources)
    return out


def sizes_strides(og) -> dict[Source, SizesStrides]:
    """Each input's sizes and strides as Dynamo recorded them (None where symbolic)."""
    sizes = {}
    for src, meta in og.input_source_to_sizes_strides.items():
        if "size" in meta and "stride" in meta:
            sizes[src] = (_concrete(meta["size"]), _concrete(meta["stride"]))
    return sizes


def _concrete(xs):
    out = []
    for x in xs:
        if isinstance(x, torch.SymInt):
            v = x.node.maybe_as_int()
            out.append(v)
        else:
            out.append(int(x))
    return tuple(out)


class GuardsRecorded(Exception):
    """Stops Dynamo's guard building once the guards of a failed trace are recorded."""


# The callback of the capture in progress on each thread, for the hook on Dynamo's root
# translator; the hook is installed while any thread captures.
_TRACE = threading.local()
_HOOK_LOCK = threading.Lock()


@dataclass
class _Hook:
    users: int = 0
    orig: Callable | None = None
    had: bool = False  # whether InstructionTranslator defined `run` itself


_HOOK = _Hook()


@contextlib.contextmanager
def on_failed_trace(record: Callable[[object], None]):
    """While this runs, when Dynamo's trace of the root frame stops with an error (a graph
    break under fullgraph, an unsupported construct, a data-dependent branch), call
    `record(tx)` with the root translator before the error goes on: the recorder builds the
    guards of the trace so far from it.  Restarts of the analysis are not failures.  The hook
    on `InstructionTranslator.run` is shared by the threads that capture at once (each calls
    its own capture's `record`) and removed when the last one is done."""
    from torch._dynamo import exc as dexc
    from torch._dynamo.symbolic_convert import InstructionTranslator

    restart = getattr(dexc, "RestartAnalysis", ())
    with _HOOK_LOCK:
        if _HOOK.users == 0:
            _HOOK.had = "run" in InstructionTranslator.__dict__
            orig = _HOOK.orig = InstructionTranslator.run

            def run(self):
                try:
                    return orig(self)
                except Exception as e:
                    if not isinstance(e, restart):
                        _failed(self)
                    raise

            InstructionTranslator.run = run
        _HOOK.users += 1
    prev = getattr(_TRACE, "current", None)
    _TRACE.current = record
    try:
        yield
    finally:
        _TRACE.current = prev
        with _HOOK_LOCK:
            _HOOK.users -= 1
            if _HOOK.users == 0:
                if _HOOK.had:
                    InstructionTranslator.run = _HOOK.orig
                else:
                    del InstructionTranslator.run
                _HOOK.orig = None


def _failed(tx) -> None:
    record = getattr(_TRACE, "current", None)
    if record is not None:
        record(tx)
