"""Capture one executed path of a function with TorchDynamo.

In: a Python function and one call's arguments.  Out: a `Capture` (capture/types.py) holding
the ATen-level graph of the path (symbolic where Dynamo made dimensions dynamic), the complete
list of guards Dynamo recorded for it, the shape guards rendered over Trident's own variable
names, what the graph's inputs are (their Dynamo sources), how the version rebuilds the
result (capture/returns.py), and the call's own result.

Dynamo is driven through `torch.compile(fullgraph=True)` with a `_Recorder`'s backend, which
records the graph, and its guard filter, which records (and keeps) every guard.  The
capturing call runs the captured graph, so it returns its own result.  Dynamo's own cache for
the code object is cleared before each capture: Trident's SCM, not Dynamo, decides which
version runs.  Where a dynamic attempt cannot be captured before anything ran, `capture`
tries once more with static shapes.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .. import config
from ..errors import CaptureError, UnsupportedError
from . import adapters
from .aten import fake_mode_of, float_uses, to_aten
from .aten import rewrite_size_lists as _rewrite_size_lists  # noqa: F401 - tests import it here
from .checks import (AttrStore, check_side_effects, mode_change, own_kwargs_name,
                     whole_function_mode)
from .describe import describe_return as _describe_return  # a module name tests replace
from .guard_record import (GuardsRecorded, ShapeExpr, SizesStrides, before_call,
                           on_failed_trace, shape_exprs, sizes_strides)
from .launches import RecordingInterpreter, is_triton_node, triton_needs_static
from .returns import Returned, check_described
from .types import Capture, GraphInput, PathGuards

if TYPE_CHECKING:
    from torch._dynamo.source import Source
    from torch._dynamo.types import GuardFilterEntry

    from ..triton.launch import LaunchRecord

__all__ = ["FLOATS_SPECIALISED", "Capture", "GraphInput", "PathGuards", "capture"]


FLOATS_SPECIALISED = "captured with floats specialised"


def capture(fn, args: tuple, kwargs: dict, *, dynamic, global_state_fn,
            pow2_buckets: bool = True, specialize_float: bool = False) -> Capture:
    """Capture `fn(*args, **kwargs)`; raises CaptureError / UnsupportedError, each carrying
    the path's guards (`.guards`, a `PathGuards` or None) and, where the call ran, its result
    (`.result`).  `pow2_buckets`: whether `triton.next_power_of_2` of a dynamic size may be
    traced as its power-of-two range (TRIDENT_POW2_BUCKETS; capture/adapters.py).
    `specialize_float`: floats specialised from the start; else (and with
    TRIDENT_DYNAMIC_FLOATS) a float argument Dynamo makes dynamic stays so where the version
    can compute with it (`float_uses`, `_float_guards`), and the capture is tried once more
    with floats specialised where not (noted: FLOATS_SPECIALISED).

    An exception raised by the user's own operations while the captured graph
    runs is re-raised as is (it is what eager raises).
    """
    first: _Recorder | None = None  # the dynamic attempt, when this is its static retry
    first_exc: Exception | None = None
    specialize_float = specialize_float or not config.dynamic_floats()
    float_note = None
    while True:
        rec = _Recorder(fn, dynamic, pow2_buckets=pow2_buckets,
                        specialize_float=specialize_float)
        compiled = rec.compile(global_state_fn)
        try:
            result = rec.call(compiled, args, kwargs)
        except _GraphRunError as e:
            raise e.exc from None
        except Exception as e:  # noqa: BLE001
            if not specialize_float and (rec.float_specialize is not None or (
                    rec.refused and any(i.float_arg for i in rec.inputs))):
                # A dynamic float reaches what a version cannot compute with or guard on, or
                # the path is refused with one (nothing ran): once more with floats
                # specialised, as before Dynamo made it dynamic.
                specialize_float = True
                float_note = f"{FLOATS_SPECIALISED}: {rec.float_specialize or rec.unsupported}"
                continue
            if rec.refused:
                # Nothing ran: no `result`, so the caller runs the function eagerly.
                err = UnsupportedError(rec.unsupported)
                err.guards = rec.path_guards()
                raise err from None
            if first is None and rec.may_retry_static():
                # Nothing ran yet (Dynamo stopped while tracing, or the backend asked for
                # static shapes): a dynamic size may be what Dynamo or a Triton launch cannot
                # handle, so try once with static shapes.
                first, first_exc, dynamic = rec, e, False
                continue
            err = _capture_error(e, rec.path_guards())
            if first is None or first.need_static:
                raise err from e
            # The static trace stopped too.  The dynamic trace's guards key the path's eager
            # version (a call that passes them traces to the same stop), or else the static
            # trace's.
            raise _capture_error(first_exc, first.path_guards() or err.guards) from first_exc
        if first is None:
            return rec.capture(result, note=float_note)
        cap = rec.capture(result, triton_needs_static=first.need_static, note=(
            "captured with static shapes: "
            + ("a Triton autotune key or heuristic reads a dynamic size" if first.need_static
               else f"with dynamic shapes Dynamo failed: {_first_line(first_exc)}")))
        return cap.with_note(float_note) if float_note else cap


class _NeedSpecializedFloat(Exception):
    """A dynamic float argument reaches what a version cannot compute with (`float_uses`):
    capture again with floats specialised (nothing ran)."""


# What a shape guard over a dynamic float may hold (guards/translate.py evaluates it natively,
# the float as `ir.PyFloat`): comparisons and arithmetic of names and constants, the NaN check.
_FLOAT_GUARD_NODES = (ast.Compare, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
                      ast.UAdd, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Constant,
                      ast.Name, ast.Load, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_FLOAT_GUARD_CALLS = ("math.isnan", "torch.sym_float", "math.floor", "math.ceil", "math.trunc",
                      "int", "round", "torch.sym_int")


def _float_guards(exprs, sources: set) -> str | None:
    """Why a shape guard over a float symbol (a dynamic float argument's, or one the shape
    environment holds) is not one the versions evaluate (anything but comparisons, + - * /,
    float -> int conversions of names and constants, and Dynamo's `not math.isnan(f)`), so
    that the float is specialised instead; or None."""
    for text, mapping in exprs:
        names = {n for n, src in mapping.items() if src in sources} \
            | set(getattr(mapping, "floats", ()))
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            tree = None
        nodes = list(ast.walk(tree)) if tree is not None else []
        if not any(isinstance(n, ast.Name) and n.id in names for n in nodes):
            continue
        for n in nodes:
            if isinstance(n, ast.Call) and ast.unparse(n.func) in _FLOAT_GUARD_CALLS \
                    and len(n.args) == 1 and not n.keywords:
                continue
            if isinstance(n, ast.Attribute) and ast.unparse(n) in _FLOAT_GUARD_CALLS:
                continue
            if isinstance(n, ast.Name) and n.id in ("math", "torch"):
                continue
            if not isinstance(n, _FLOAT_GUARD_NODES):
                return f"Dynamo guards on its value: {text}"
    return None


class _NeedStatic(Exception):
    """The graph launches a Triton kernel whose autotune key or heuristics
    read a dynamic size: capture again with static shapes (nothing ran)."""


class _Refused(Exception):
    """Raised by the guard filter when the backend refused the capture: Dynamo has built the
    path's guards (recorded for its eager version, `PathGuards`) and nothing ran. The call then
    runs eagerly, not through Dynamo's bytecode (torch 2.11's replay of a stored **kwargs
    dict lost the caller's items: what Trident refuses, Dynamo may not run right either)."""


class _GraphRunError(Exception):
    """Wraps an exception raised while running the captured graph itself."""

    def __init__(self, exc: BaseException):
        self.exc = exc


@dataclass(eq=False)
class _Recorder:
    """One attempt to capture `fn`: Dynamo's backend and guard filter, and what they record.

    The backend (`backend`) checks the graph's side effects and mode changes, describes the
    return value, lowers the graph to ATen and hands Dynamo a runner for the capturing call;
    where it refuses the capture it sets `unsupported` and `refused` instead, and the guard
    filter (`guard_filter`), which records every guard Dynamo built, then stops the compile.
    `capture` makes the `Capture` of a successful attempt; `path_guards` the guards of any."""

    fn: object
    dynamic: bool | None
    pow2_buckets: bool = True
    calls: int = 0  # times the backend ran
    og: object = None  # Dynamo's OutputGraph
    unsupported: str | None = None  # why the capture is refused
    refused: bool = False  # refused in the backend: the guard filter stops the compile
    need_static: bool = False  # a Triton launch needs static shapes (_NeedStatic)
    specialize_float: bool = True  # Dynamo's specialize_float for this attempt
    float_specialize: str | None = None  # why a dynamic float needs specialising
    stores: tuple[AttrStore, ...] = ()
    inputs: tuple[GraphInput, ...] = ()
    run_mode: int = 0
    ret: Returned | None = None
    aten: torch.fx.GraphModule | None = None
    gm: torch.fx.GraphModule | None = None
    sizes: dict[Source, SizesStrides] = field(default_factory=dict)
    launches: list[LaunchRecord] = field(default_factory=list)
    outs: list = field(default_factory=list)  # the runner's outputs
    run_seconds: float = 0.0  # the runner's time (Capture.run_seconds)
    entries: list[GuardFilterEntry] | None = None  # None until the guard filter ran
    shape_exprs: tuple[ShapeExpr, ...] = ()
    installed: dict[str, object] = field(default_factory=dict)
    global_scope: dict[str, object] | None = None
    # Taken by `compile`, before the call.
    global_state: bytes = b""
    tf_mode_stack_len: int = 0
    adapted: adapters.State | None = None
    _backend: object = None  # the backend Dynamo was given (see compile)

    def compile(self, global_state_fn):
        """`fn` compiled with this recorder, for one call; takes the state before that call."""
        from torch._C._dynamo.eval_frame import reset_code

        self._backend = self.backend  # one bound method: Dynamo keeps it in cached_backends
        name_source_file(self.fn)
        reset_code(self.fn.__code__)
        compiled = torch.compile(self.fn, backend=self._backend, fullgraph=True,
                                 dynamic=self.dynamic,
                                 options={"guard_filter_fn": self.guard_filter})
        self.global_state = global_state_fn()
        self.tf_mode_stack_len = torch._C._len_torch_function_stack()
        self.adapted = adapters.State(empty_graph=self.empty_graph,
                                      backend_calls=lambda: self.calls,
                                      pow2_buckets=self.pow2_buckets)
        return compiled

    def call(self, compiled, args: tuple, kwargs: dict):
        """The call through Dynamo: its result (or what it raised)."""
        from torch._C._dynamo.eval_frame import reset_code

        try:
            # specialize_float=False: a float argument's second value makes it dynamic
            # (a 0-d float64 graph input read by `.item()`, guarded by its type and
            # `not math.isnan`), as in torch.compile since 2.6 (TRIDENT_DYNAMIC_FLOATS).
            with torch._dynamo.config.patch(specialize_float=self.specialize_float), \
                    adapters.active(self.adapted), on_failed_trace(self.record_failed_trace):
                return compiled(*args, **kwargs)
        finally:
            reset_code(self.fn.__code__)
            _forget_backend(self._backend)
            self._backend = None  # no reference cycle through the bound method

    def may_retry_static(self) -> bool:
        """Whether this failed dynamic attempt ran nothing (Dynamo stopped while tracing, or
        the backend asked for static shapes), so that a static one may follow."""
        return self.dynamic is not False and (self.need_static or self.calls == 0)

    def backend(self, gm: torch.fx.GraphModule, example_inputs):
        from torch._dynamo.symbolic_convert import InstructionTranslator

        self.calls += 1
        tx = InstructionTranslator.current_tx()
        og = self.og = tx.output
        # Dynamo's guard manager is never used (the code's cache is reset after the capture;
        # Trident translates the guard entries): skip its self-check and its latency profile,
        # which flushes the CPU caches (about 25 ms a capture).  No guard entry changes.
        og.skip_guards_check = True
        stores: tuple[AttrStore, ...] = ()
        try:
            stores = self.stores = check_side_effects(og, own_kwargs_name(self.fn))
        except UnsupportedError as e:
            self.unsupported = str(e)
        inputs = []
        fakes = []
        traced = {id(n) for n in gm.graph.nodes if n.op == "placeholder"}
        for node in gm.graph.nodes:
            if node.op != "placeholder":
                continue
            ga = node.meta.get("grapharg")
            ex = node.meta.get("example_value")
            if ga is None:
                self.unsupported = f"graph input {node.name} has no source"
                ex = None
            float_arg = (ga is not None and ga.pass_arg_as_tensor and not ga.is_tensor
                         and isinstance(ex, torch.Tensor) and ex.dim() == 0
                         and ex.dtype == torch.float64)
            inputs.append(GraphInput(ga.source if ga is not None else None, ex, float_arg))
            fakes.append(ex)
        self.inputs = tuple(inputs)
        whole = whole_function_mode(gm)
        if whole is not None:
            self.run_mode = whole[0]
        change = mode_change(gm, skip=whole[1:] if whole else ())
        if change is not None:
            self.unsupported = change
        try:
            self.ret = _describe_return(tx, gm, stores, self.fn)
        except UnsupportedError as e:
            self.unsupported = str(e)
        except Exception as e:  # noqa: BLE001 - a description Trident cannot make: refused
            self.unsupported = (f"the return value cannot be described "
                                f"({type(e).__name__}: {_first_line(e)})")
        added = [_input_name(n) for n in gm.graph.nodes
                 if n.op == "placeholder" and id(n) not in traced]
        if added:
            # Describing the result realized a value the trace never looked at (an attribute
            # read before the function stores to it, returned unused): Dynamo made it a graph
            # input after the graph was compiled, which the call does not pass.
            self.unsupported = (f"the function returns {', '.join(added)} unused, which the "
                                "traced graph does not take as an input (e.g. an attribute "
                                "read before the function stores to it)")
        fake_mode = fake_mode_of(fakes, example_inputs)
        aten = None
        try:
            if not added:
                aten = to_aten(gm, fakes, example_inputs, fake_mode)
        except Exception as e:  # noqa: BLE001 - reported as the reason
            self.unsupported = f"lowering to ATen failed: {type(e).__name__}: {e}"
        self.aten = aten
        self.gm = gm
        if aten is not None and self.unsupported is None and any(i.float_arg for i in inputs):
            why = float_uses(aten, [i.float_arg for i in inputs])
            if why is not None:
                self.float_specialize = why
                raise _NeedSpecializedFloat(why)
        self.sizes = sizes_strides(og)

        has_triton = any(is_triton_node(n) for n in gm.graph.nodes)
        if has_triton and self.dynamic is not False and triton_needs_static(gm):
            self.need_static = True
            raise _NeedStatic()
        if self.unsupported is not None:
            # Refused: Dynamo goes on to build the path's guards, which the guard filter
            # records before it stops the compile (_Refused), so nothing runs.
            self.refused = True
            return _never_runs
        self.launches = []

        def runner(*a):
            t0 = time.perf_counter()
            try:
                if has_triton:
                    outs = RecordingInterpreter(gm, self.launches).run(*a)
                else:
                    outs = gm(*a)
            except Exception as e:  # noqa: BLE001 - re-raised unchanged by capture()
                raise _GraphRunError(e) from e
            finally:
                self.run_seconds += time.perf_counter() - t0
            self.outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            return outs

        return runner

    def guard_filter(self, entries: list) -> list[bool]:
        # Dynamo builds the guards before the traced call runs; the function may then change
        # its own **kwargs dict, and an attribute may appear: what a guard compares with is
        # read here, before the call (before_call).
        self.entries = [before_call(e) for e in entries]
        og = self.og
        if og is not None:  # see SourceConverter.installed
            scope = getattr(og, "global_scope", None) or {}
            self.installed = {n: scope[n] for n in getattr(og, "installed_globals", ())
                              if n in scope}
            self.global_scope = scope or None
        exprs: tuple[ShapeExpr, ...] = ()
        if og is not None and any(e.guard_type == "SHAPE_ENV" for e in entries):
            exprs = shape_exprs(og.shape_env)
        self.shape_exprs = exprs
        if not self.refused and self.float_specialize is None and not self.specialize_float:
            why = _float_guards(exprs, {i.source for i in self.inputs if i.float_arg})
            if why is not None:
                self.float_specialize = why
                raise _NeedSpecializedFloat(why)
        if self.refused:
            raise _Refused(self.unsupported)
        return [True] * len(entries)

    def empty_graph(self, og) -> None:
        """Dynamo skips the backend when the path runs no operation; Trident still wants the
        path as a version (it returns inputs and constants): the adapters hand it here."""
        g = torch.fx.Graph()
        g.graph_copy(og.graph, {})
        g.output(())
        gm = torch.fx.GraphModule(torch.nn.Module(), g)
        self.backend(gm, [n.meta.get("example_value") for n in g.nodes if n.op == "placeholder"])

    def record_failed_trace(self, tx) -> None:
        """The root translator `tx` stopped with an error: record the guards of its trace so
        far, with Dynamo's own guard building over its output graph, as it would have run at
        the end (the guard filter records the entries, and the build stops there).  Where the
        guards cannot be built, none are recorded."""
        from torch._dynamo.guards import CheckFunctionManager

        og = getattr(tx, "output", None)
        if og is None or self.entries is not None or self.need_static:
            return

        def record(entries):
            self.guard_filter(entries)
            raise GuardsRecorded()

        self.og = og
        try:
            self.sizes = sizes_strides(og)
            CheckFunctionManager(tx.f_code, og, guard_filter_fn=record)
        except GuardsRecorded:
            pass
        except Exception:  # noqa: BLE001 - no guards: the refusal keys on the call
            self.entries = None

    def path_guards(self) -> PathGuards | None:
        """The recorded guards of this attempt (None where Dynamo built none)."""
        if self.entries is None:
            return None
        return PathGuards(guard_entries=tuple(self.entries), shape_exprs=self.shape_exprs,
                          sizes_strides=self.sizes, global_state=self.global_state,
                          tf_mode_stack_len=self.tf_mode_stack_len,
                          extra_guards=tuple(self.adapted.extra_guards),
                          installed_globals=dict(self.installed),
                          global_scope=self.global_scope)

    def capture(self, result, *, triton_needs_static: bool = False,
                note: str | None = None) -> Capture:
        """The `Capture` of this attempt, whose call returned `result`; raises
        UnsupportedError carrying the result where the path cannot become a version."""
        reason = None
        if self.calls == 0:
            reason = ("Dynamo produced no graph (the function runs no tensor operation "
                      "Trident can capture)")
        elif self.calls > 1:
            reason = "Dynamo produced several graphs"
        elif self.unsupported is not None:
            reason = self.unsupported
        if reason is None:
            reason = check_described(self.ret, result, [s.obj for s in self.stores])
        if reason is not None:
            # The capturing call already ran correctly: hand its result back.
            err = UnsupportedError(reason)
            err.result = result
            err.guards = self.path_guards()
            raise err
        return Capture(
            aten_graph=self.aten, dynamo_graph=self.gm, inputs=self.inputs,
            guard_entries=tuple(self.entries or ()), shape_exprs=self.shape_exprs,
            sizes_strides=self.sizes, global_state=self.global_state, result=result,
            graph_outputs=tuple(self.outs), launches=tuple(self.launches), ret=self.ret,
            tf_mode_stack_len=self.tf_mode_stack_len, dynamic=bool(self.dynamic),
            notes=(note,) if note is not None else (),
            extra_guards=tuple(self.adapted.extra_guards),
            installed_globals=dict(self.installed), triton_needs_static=triton_needs_static,
            run_mode=self.run_mode, global_scope=self.global_scope,
            run_seconds=self.run_seconds,
            pow2_bucketed=self.adapted.pow2_bucketed and bool(self.shape_exprs))


def name_source_file(fn) -> None:
    """Make `inspect.getsourcefile(fn)` name the file of a function compiled from a string
    (exec'd or eval'd code, a code generator's output), by an empty entry for it in
    `linecache`, as IPython makes for its cells.  torch.compile before 2.13 traces a function
    whose source file inspect cannot name through `external_utils.wrap_inline`, a frame of
    torch's own whose globals are not the function's: Trident would then run it eagerly
    (seen on torch 2.11).  The entry has no lines (the source was never on disk) and no
    mtime, so `linecache.checkcache` keeps it; an entry already there is left as it is."""
    code = getattr(fn, "__code__", None)
    if code is None or not inspect.isfunction(fn):
        return
    try:
        if inspect.getsourcefile(fn) is not None:
            return
    except TypeError:
        return
    linecache.cache.setdefault(code.co_filename, (0, None, [], code.co_filename))


def _capture_error(e: Exception, guards: PathGuards | None) -> CaptureError:
    """The CaptureError for an attempt that raised `e`; raises instead the user's own
    exception where `e` came from running the captured graph."""
    inner: BaseException = e
    while isinstance(inner, _GraphRunError) or isinstance(inner.__cause__, _GraphRunError):
        inner = inner.exc if isinstance(inner, _GraphRunError) else inner.__cause__
        if not isinstance(inner, _GraphRunError):
            raise inner from None
    err = CaptureError(f"{type(e).__name__}: {_first_line(e)}")
    err.guards = guards
    return err


def _never_runs(*args):
    raise AssertionError("trident: a refused capture's graph ran")  # the guard filter stops it


def _forget_backend(backend) -> None:
    """Drop this capture's backend from Dynamo's process-wide `cached_backends` (kept there for
    `torch._dynamo.reset`): it closes over the capture's state (the OutputGraph, the graphs,
    the fake mode), about 0.2 MB a capture that would otherwise live as long as the process."""
    cached = getattr(torch._dynamo.eval_frame, "cached_backends", None)
    if not isinstance(cached, dict):
        return
    for key, value in list(cached.items()):
        if value is backend or getattr(value, "compiler_fn", None) is backend:
            cached.pop(key, None)


def _input_name(node) -> str:
    """A graph input's source (`L['o'].v`), else its node's name."""
    ga = node.meta.get("grapharg")
    src = getattr(ga, "source", None)
    return src.name if src is not None else node.name


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__
